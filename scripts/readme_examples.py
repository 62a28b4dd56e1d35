"""Regenerate README.md's example outputs from the tool itself.

Every ```text block in README.md whose first line is ``$ traceread ...`` is run again (from
the repository root, this checkout's ``src`` first on the path, output to a pipe: the
100-column layout) and its output written back under the command line. A block that ended
with a ``...`` line is cut again where CUT says (the line a section starts with), so the
README keeps showing the head of a long report.

    python scripts/readme_examples.py          # rewrite README.md
    python scripts/readme_examples.py --check  # exit 1 when README.md is out of date
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"```text\n(\$ traceread [^\n]*)\n(.*?)```", re.S)
CUT = ("GPU activity",)   # a long report's example stops before the first of these sections


def run(command: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), NO_COLOR="1")
    env.pop("COLUMNS", None)
    args = shlex.split(command[2:])        # drop "$ "
    p = subprocess.run([sys.executable, "-m", "traceread", *args[1:]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    return p.stdout


def refresh(text: str) -> str:
    def one(m: re.Match) -> str:
        command, old = m.group(1), m.group(2)
        out = run(command).rstrip("\n").split("\n")
        if old.rstrip("\n").endswith("\n..."):
            stop = next((i for i, ln in enumerate(out) if ln.startswith(CUT)), len(out))
            while stop and not out[stop - 1].strip():
                stop -= 1
            out = out[:stop] + ["..."]
        return "```text\n" + command + "\n" + "\n".join(out) + "\n```"
    return BLOCK.sub(one, text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say whether README.md is current")
    args = ap.parse_args()
    old = README.read_text()
    new = refresh(old)
    if args.check:
        print("README.md examples are current" if new == old else "README.md examples are stale")
        return 0 if new == old else 1
    README.write_text(new)
    print("README.md examples regenerated" if new != old else "README.md examples unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
