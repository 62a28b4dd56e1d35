#!/usr/bin/env python3
"""Peak RSS and time of a big-trace read / analyze: this checkout vs a baseline commit.

    python scripts/bench_memory.py TRACE [TRACE ...] [--baseline REF] [--workers 1,2]

The baseline's ``src/`` is exported with ``git archive REF`` to a temporary
directory (the work tree is not touched); both versions then run, each in its
own process, in this one run:

* ``read``    -- ``traceread.load(path)`` (no cache), from ``import`` to finished table
* ``analyze`` -- ``traceread analyze --no-cache --format json``, end to end (imports included)

Peak RSS is the peak of the *sum* over the process tree (worker processes
included), sampled every 20 ms (``bench.run``); PSS splits the pages forked
workers share with the parent. ``--workers 1,2`` runs each step once per
``TRACEREAD_WORKERS`` value (default: the library's own choice). Prints one
Markdown table with CPU time, peak RSS and PSS as a multiple of the raw
(uncompressed) JSON size and the ratio current / baseline.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench import READ, fmt_mb, fmt_s, run  # noqa: E402


# the CLI of the checkout on PYTHONPATH (the installed ``traceread`` script may be another)
CLI = "import sys; from traceread.cli import main; sys.argv[0] = 'traceread'; main()"


def export_src(ref: str, dest: Path) -> Path:
    """``git archive REF src`` unpacked under ``dest``; returns its ``src`` dir."""
    tar = dest / "src.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    # the built C decoder is not in git: reuse this checkout's (the module checks itself
    # against its source and falls back to msgspec if the baseline's _cscan.c differs)
    for so in (REPO / "src" / "traceread" / "readers").glob("_cscan*.so"):
        shutil.copy2(so, dest / "src" / "traceread" / "readers" / so.name)
    return dest / "src"


def raw_size(path: Path) -> int:
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as g:
        while b := g.read(1 << 24):
            n += len(b)
    return n


def measure(path: Path, src: Path, workers: str = "") -> dict:
    env = {"PYTHONPATH": str(src), "TRACEREAD_NO_CACHE": "1"}
    if workers:
        env["TRACEREAD_WORKERS"] = workers
    py = sys.executable
    return {
        "read": run([py, "-c", READ, str(path)], env=env),
        "analyze": run([py, "-c", CLI, "analyze", "--no-cache", "--format", "json",
                        "-o", os.devnull, str(path)], env=env),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--baseline", default="HEAD~1", help="git ref of the baseline (default HEAD~1)")
    ap.add_argument("--workers", default="", help="TRACEREAD_WORKERS values, e.g. 1,2")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    rows = ["| trace (raw) | workers | step | time base / now | CPU base / now "
            "| peak RSS base / now | peak PSS base / now | RSS / raw base / now | RSS now vs base |",
            "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="traceread-base-") as tmp:
        base_src = export_src(args.baseline, Path(tmp))
        for path in args.traces:
            raw = raw_size(path)
            for w in args.workers.split(",") if args.workers else [""]:
                cur = measure(path, REPO / "src", w)
                base = measure(path, base_src, w)
                for step in ("read", "analyze"):
                    b, c = base[step], cur[step]
                    if not (b["ok"] and c["ok"]):
                        print(f"{path} {step}: failed: {b['err'] or c['err']}", file=sys.stderr)
                        continue
                    rows.append(
                        f"| {path.name} ({raw / 1e6:,.0f} MB) | {w or 'auto'} | {step} "
                        f"| {fmt_s(b['wall'])} / {fmt_s(c['wall'])} "
                        f"| {fmt_s(b['cpu'])} / {fmt_s(c['cpu'])} "
                        f"| {fmt_mb(b['peak'])} / {fmt_mb(c['peak'])} "
                        f"| {fmt_mb(b['peak_pss'])} / {fmt_mb(c['peak_pss'])} "
                        f"| {b['peak'] / raw:.2f}× / {c['peak'] / raw:.2f}× "
                        f"| {c['peak'] / b['peak']:.2f}× |")
    print(f"baseline: {args.baseline}; load average before the run "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
