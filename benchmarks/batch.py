"""``batch``: batch analysis of a corpus with 1 worker vs N, on every side, one run.

The same file list on every run, back to back; the summaries must agree (apart from
the per-file timing column), so the speed-up is for identical work.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import harness as h


def add_args(ap) -> None:
    ap.add_argument("corpus", nargs="?", default=str(h.CORPUS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first K files (0: all)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    jobs = sorted({1, args.jobs})
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave(jobs, sides, args.repeat,
                            lambda j, side: h.probe(side, run_batch, args.corpus, j, args.limit))
    table = h.Table(sides)
    best = {(j, s.name): h.best(runs[(j, s.name)]) for j in jobs for s in sides}
    for j in jobs:
        table.add(f"jobs={j}: seconds", {s.name: _get(best[(j, s.name)], "seconds") for s in sides})
        table.add(f"jobs={j}: failed files", {s.name: _get(best[(j, s.name)], "failed")
                                              for s in sides}, lambda x: f"{x:.0f}")
    table.add(f"speed-up jobs={args.jobs} vs 1",
              {s.name: _speedup(best[(1, s.name)], best[(jobs[-1], s.name)]) for s in sides},
              lambda x: f"{x:.2f}×")
    first = next((r for r in best.values() if r), None)
    what = (f"{first.result['files']} files, {first.result['mb']:.1f} MB"
            if first else "failed: " + h.failure(runs[(1, "this")]))
    print(f"{args.corpus}: {what} (best of {args.repeat}):\n\n{table.markdown()}\n")
    digests = {k: r.result["summary"] for k, r in best.items() if r}
    same = len(set(digests.values())) <= 1
    print(f"summaries identical across job counts and sides: {same}")
    return 0 if same and first else 1


def _get(r, key):
    return r.result[key] if r else None


def _speedup(one, many):
    return one.result["seconds"] / many.result["seconds"] if one and many else None


def run_batch(corpus: str, jobs: int, limit: int) -> dict:
    """Probe: seconds of the batch run and a digest of its summary (timing column dropped)."""
    import hashlib
    import os

    batch = h.first_module("traceread.jobs.batch", "traceread.batch")
    paths, _ = batch.discover(corpus)
    paths = paths[:limit] if limit else paths
    t0 = time.perf_counter()
    res = batch.assemble(batch.run_local(paths, jobs=jobs))
    seconds = time.perf_counter() - t0
    summary = res.summary.drop(columns=["seconds"])
    return {"seconds": seconds, "failed": res.failed, "files": len(paths),
            "mb": sum(os.path.getsize(p) for p in paths) / 1e6,
            "summary": hashlib.sha1(summary.to_csv().encode()).hexdigest()}
