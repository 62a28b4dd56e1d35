"""kernel_summary vs the obvious pandas groupby (sum/count/mean/median/min/max/std).

Both run here on the same 1M-kernel synthetic table. Usage:
python scripts/bench_kernel_summary.py [N]
"""
from __future__ import annotations

import sys
import time

import numpy as np

from traceread.passes.kernels import kernel_summary
from traceread.table import Trace, TraceMeta, build_table


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
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
    assert len(base) == len(ours)
    print(f"{n} kernels, {len(ours)} names")
    print(f"baseline pandas groupby.agg: {t1 - t0:.3f} s")
    print(f"traceread kernel_summary:    {t2 - t1:.3f} s")
    print(f"ratio baseline / traceread: {(t1 - t0) / (t2 - t1):.2f}x")


if __name__ == "__main__":
    main()
