"""Batch analysis of the corpus with 1 worker vs N workers; prints both times and the ratio.

    python scripts/bench_batch.py [CORPUS] [--jobs 2] [--limit K]

Same file list, same process, back to back; the two summaries must agree (apart from
the per-file timing column), so the speed-up is for identical work.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from traceread.jobs import batch
from traceread.jobs.discover import discover

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first K files (0: all)")
    args = ap.parse_args()
    paths, skipped = discover(args.corpus)
    if args.limit:
        paths = paths[:args.limit]
    size = sum(os.path.getsize(p) for p in paths)
    print(f"{len(paths)} files, {size / 1e6:.1f} MB, {os.cpu_count()} CPUs", flush=True)
    times, summaries = {}, {}
    for jobs in (1, args.jobs):
        t0 = time.perf_counter()
        res = batch.assemble(batch.run_local(paths, jobs=jobs))
        times[jobs] = time.perf_counter() - t0
        summaries[jobs] = res.summary.drop(columns=["seconds"])
        print(f"jobs={jobs}: {times[jobs]:.1f} s ({res.failed} failed files)", flush=True)
    same = summaries[1].equals(summaries[args.jobs])
    print(f"summaries identical: {same}")
    print(f"speed-up jobs={args.jobs} vs jobs=1: {times[1] / times[args.jobs]:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
