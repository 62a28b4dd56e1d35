"""Allocator peaks and churn from [memory] events; allocation API calls and their levers."""
from __future__ import annotations

import numpy as np

from traceread.passes.memory import HOW_TO_RECORD, alloc_calls, memory_summary
from traceread.verdict.busy import memory_levers
from traceread.passes.steps import find_steps
from traceread.table import Trace, TraceMeta, build_table


def _trace(rows):
    """rows: (ts, dur, kind, name, mem_bytes, allocated, reserved, device)"""
    ts, dur, kind, name, b, a, r, d = zip(*rows)
    n = len(rows)
    cols = {"ts": np.array(ts), "dur": np.array(dur), "kind": list(kind), "name": list(name),
            "pid": np.ones(n, int), "tid": np.ones(n, int), "mem_bytes": np.array(b),
            "mem_allocated": np.array(a), "mem_reserved": np.array(r), "mem_device": np.array(d)}
    return Trace(build_table(cols, n), TraceMeta(
        format="kineto", devices=[{"device": 0, "name": "NVIDIA A100-SXM4-40GB",
                                   "totalGlobalMem": 40 << 30}]))


def _step(ts, n):
    return (ts, 1000, "annotation", f"ProfilerStep#{n}", -1, -1, -1, -1)


def _mem(ts, b, a, r, d=0):
    return (ts, 0, "instant", "[memory]", b, a, r, d)


def test_peaks_churn_per_step_and_empty_cache_lever():
    t = _trace([_step(0, 1), _mem(10, 1024, 1024, 2 << 20), _mem(20, -1024, 0, 2 << 20),
                (30, 50, "runtime", "cudaMalloc", -1, -1, -1, -1),
                _step(1000, 2), _mem(1010, 4096, 4096, 2 << 20), _mem(1020, 512, 4608, 2 << 20),
                (1030, 70, "runtime", "cudaFree", -1, -1, -1, -1),
                (1040, 30, "runtime", "cudaMalloc", -1, -1, -1, -1),
                _mem(1050, 8, 8, 0, d=-1)])
    steps, _ = find_steps(t.events)
    s = memory_summary(t, steps)
    gpu = [d for d in s["devices"] if d["device"] == 0][0]
    assert (gpu["peak_allocated"], gpu["peak_reserved"], gpu["allocs"], gpu["frees"],
            gpu["alloc_bytes"]) == (4608, 2 << 20, 3, 1, 1024 + 4096 + 512)
    per = s["steps"][s["steps"]["device"] == 0]
    assert per["step"].tolist() == [1, 2] and per["peak_allocated"].tolist() == [1024, 4608]
    assert s["api"]["count"] == 3 and s["api"]["calls"]["cudaMalloc"]["count"] == 2
    assert s["api"]["after_first_step"] == {"count": 2, "frees": 1, "ns": 100}
    # the lever is the verdict's, on the figures the pass measured
    assert "levers" not in s
    lev = memory_levers({"after_first_step": s["api"]["after_first_step"],
                         "devices": s["devices"]})
    assert [x["lever"] for x in lev][0] == "no_empty_cache_in_loop"


def test_no_memory_events_says_how_to_record():
    t = _trace([(0, 10, "runtime", "hipFree", -1, -1, -1, -1)])
    s = memory_summary(t)
    assert not s["has_memory_events"] and s["note"] == HOW_TO_RECORD
    assert alloc_calls(t.events)["name"].tolist() == ["hipFree"]
    assert s["api"]["frees"] == 1 and s["api"]["after_first_step"] is None
