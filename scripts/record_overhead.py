"""Measure the profiler's own cost per op on this machine (tests/fixtures/overhead/truth.json):
the calibration passes/overhead.py takes its ratios from.

One op per Python call (``f(x) = torch.add(x, 1)``, a 4-element CPU tensor), N calls timed
unprofiled and under torch.profiler (CPU activities) with Kineto's defaults, with
record_shapes=True, and with with_stack=True. Timed in THREAD CPU time
(``time.thread_time_ns``), the least of ``REPEATS`` runs: on a shared machine wall time
swings by 2-3x with the other processes' load, the thread's own CPU time does not (the
profiler's cost is CPU work on the calling thread). The per-op cost of each configuration
is its time per call less the unprofiled one.

    python scripts/record_overhead.py tests/fixtures/overhead
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

N = 3000
REPEATS = 9
CONFIGS = {"unprofiled": None, "kineto": {}, "record_shapes": {"record_shapes": True},
           "with_stack": {"with_stack": True}}


def f(x):
    return torch.add(x, 1)


def per_call(x) -> float:
    t = time.thread_time_ns()
    for _ in range(N):
        f(x)
    return (time.thread_time_ns() - t) / N


def best(opts) -> float:
    x = torch.ones(4)
    out = []
    for _ in range(REPEATS):
        if opts is None:
            out.append(per_call(x))
        else:
            with profile(activities=[ProfilerActivity.CPU], **opts):
                out.append(per_call(x))
    return min(out)


def main(folder: str) -> None:
    torch.set_num_threads(1)
    os.makedirs(folder, exist_ok=True)
    ns = {k: best(v) for k, v in CONFIGS.items()}
    base = ns["unprofiled"]
    truth = {"torch": torch.__version__, "calls": N, "repeats": REPEATS,
             "clock": "thread CPU time, least of the repeats",
             "what": "one torch.add per Python call; per-op cost = ns per call - unprofiled",
             "ns_per_call": {k: round(v) for k, v in ns.items()},
             "profiler_ns_per_op": {k: round(v - base) for k, v in ns.items()
                                    if k != "unprofiled"}}
    with open(os.path.join(folder, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
    print(json.dumps(truth["profiler_ns_per_op"]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/overhead")
