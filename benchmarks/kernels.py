"""``kernels``: ``kernel_summary`` against the obvious pandas groupby, same table, one process.

The yardstick: ``groupby(name)["dur"].agg([sum, count, mean, median, min, max, std])``
over the kernels of an N-kernel synthetic table (500 names); both in the same process
per side, best of ``--repeat`` interleaved rounds.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import harness as h


def add_args(ap) -> None:
    ap.add_argument("n", nargs="?", type=int, default=1_000_000, help="kernels (default 1M)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave([args.n], sides, args.repeat,
                            lambda n, side: h.probe(side, summary_vs_groupby, n))
    best = {s.name: h.best(runs[(args.n, s.name)]) for s in sides}
    table = h.Table(sides)
    table.add("pandas groupby.agg (yardstick)", {n: r.result["pandas_s"] if r else None
                                                 for n, r in best.items()})
    table.add("traceread kernel_summary", {n: r.result["traceread_s"] if r else None
                                           for n, r in best.items()})
    table.add("pandas / kernel_summary", {n: r.result["pandas_s"] / r.result["traceread_s"]
                                          if r else None for n, r in best.items()},
              lambda x: f"{x:.2f}×")
    names = next((r.result["names"] for r in best.values() if r), 0)
    print(f"{args.n:,} kernels, {names} names (best of {args.repeat}):\n\n{table.markdown()}")
    return 0


def summary_vs_groupby(n: int) -> dict:
    """Probe: seconds of the pandas groupby and of kernel_summary on the same table."""
    import numpy as np

    from traceread.passes.kernels import kernel_summary
    from traceread.table import Trace, TraceMeta, build_table

    rng = np.random.default_rng(0)
    pool = np.array([f"void kernel_{i}<float, 128>(float const*, int)" for i in range(500)],
                    dtype=object)
    cols = {"ts": np.cumsum(rng.integers(100, 3000, n)), "dur": rng.integers(50, 2000, n),
            "kind": np.full(n, "kernel", dtype=object), "name": pool[rng.integers(0, 500, n)],
            "pid": np.ones(n, np.int64), "device": np.zeros(n, np.int64)}
    trace = Trace(build_table(cols, n), TraceMeta(format="kineto"))
    ev = trace.events
    t0 = time.perf_counter()
    k = ev[ev["kind"] == "kernel"]
    base = k.groupby(k["name"].astype(str))["dur"].agg(
        ["sum", "count", "mean", "median", "min", "max", "std"])
    t1 = time.perf_counter()
    ours = kernel_summary(trace)
    t2 = time.perf_counter()
    if len(base) != len(ours):
        raise SystemExit(f"kernel_summary has {len(ours)} names, the groupby {len(base)}")
    return {"pandas_s": t1 - t0, "traceread_s": t2 - t1, "names": len(ours)}
