#!/usr/bin/env python3
"""Build the native chunk decoder in place, with or without setuptools.

    python scripts/build_native.py

``python setup.py build_ext --inplace`` is the normal way; a bare interpreter
(a Python 3.12 venv has no setuptools) gets the same flags through the C
compiler directly, from ``sysconfig``. Prints which decoder traceread now uses.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "traceread" / "readers" / "_cscan.c"
SIM = REPO / "src" / "traceread" / "passes" / "replay" / "_csim.c"
CIV = REPO / "src" / "traceread" / "passes" / "_civ.c"


def build_direct() -> int:
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    rc = 0
    for src, extra in ((SRC, []), (SIM, ["-fwrapv"]), (CIV, ["-fwrapv"])):
        out = src.with_name(src.stem + sysconfig.get_config_var("EXT_SUFFIX"))
        cmd = cc + ["-O3", "-fPIC", "-shared", "-DNDEBUG", "-std=c99", "-fno-strict-aliasing",
                    *extra, f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(out)]
        print(" ".join(cmd), file=sys.stderr)
        rc = rc or subprocess.call(cmd)
    return rc


def main() -> int:
    try:
        import setuptools  # noqa: F401
        rc = subprocess.call([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=REPO)
    except ImportError:
        rc = build_direct()
    check = subprocess.run([sys.executable, "-c",
                            "from traceread.readers import decoder_name; print(decoder_name())\n"
                            "from traceread.passes.replay import sim\n"
                            "print('replay loop:', 'C' if sim._csim else 'numpy')\n"
                            "from traceread.passes import intervals\n"
                            "print('intervals:', 'C' if intervals._civ else 'numpy')"],
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                           capture_output=True, text=True)
    print("decoder:", (check.stdout or check.stderr).strip().splitlines()[-3:])
    return rc


if __name__ == "__main__":
    sys.exit(main())
