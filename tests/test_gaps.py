"""GPU busy union and idle gaps, nsys gpu_gaps rule."""
from __future__ import annotations

import numpy as np

import traceread
from traceread.passes.gaps import gpu_busy, gpu_gaps, nsys_order
from traceread.synth.nsys import PLANTED, write_planted
from traceread.table import Trace, TraceMeta, build_table


def _trace(rows, fmt="kineto"):
    """rows: (ts, dur, kind, pid, device[, name, cat])"""
    rows = [r + (None, None)[: 7 - len(r)] if len(r) < 7 else r for r in rows]
    ts, dur, kind, pid, dev, name, cat = zip(*rows)
    cols = {"ts": np.array(ts), "dur": np.array(dur), "kind": list(kind), "pid": np.array(pid),
            "device": np.array(dev), "name": list(name), "cat": list(cat)}
    return Trace(build_table(cols, len(rows)), TraceMeta(format=fmt))


def _tuples(g):
    return [tuple(int(x) for x in r) for r in g[["start", "end", "pid", "device"]].values]


def test_busy_is_union_of_gpu_ops_only():
    t = _trace([(0, 10, "kernel", 1, 0), (5, 10, "memcpy", 1, 0), (20, 5, "memset", 1, 0),
                (30, 100, "sync", 1, 0), (30, 100, "annotation", 1, -1), (0, 7, "kernel", 2, 1)])
    busy = gpu_busy(t)
    assert set(busy) == {(1, 0), (2, 1)}
    s, e = busy[(1, 0)]
    assert s.tolist() == [0, 20] and e.tolist() == [15, 25]


def test_gaps_between_first_and_last_op_per_pid_device():
    t = _trace([(100, 10, "kernel", 1, 0), (200, 10, "kernel", 1, 0), (150, 10, "kernel", 1, 1),
                (400, 10, "kernel", 1, 1), (0, 1000, "kernel", 2, 0)])
    g = gpu_gaps(t)
    assert list(g.columns) == ["start", "end", "duration", "pid", "device"]
    assert _tuples(g) == [(110, 200, 1, 0), (160, 400, 1, 1)]
    assert g["duration"].tolist() == [90, 240]


def test_threshold_is_strict():
    t = _trace([(0, 10, "kernel", 1, 0), (20, 10, "kernel", 1, 0), (40, 10, "kernel", 1, 0),
                (61, 1, "kernel", 1, 0)])
    assert gpu_gaps(t, 10)["duration"].tolist() == [11]
    assert gpu_gaps(t, 9)["duration"].tolist() == [10, 10, 11]


def test_touching_and_nested_ops_leave_no_gap():
    t = _trace([(0, 10, "kernel", 1, 0), (10, 10, "kernel", 1, 0), (2, 3, "kernel", 1, 0),
                (0, 100, "memcpy", 1, 0), (150, 1, "kernel", 1, 0)])
    assert _tuples(gpu_gaps(t)) == [(100, 150, 1, 0)]


def test_zero_length_op_splits_gap_like_nsys():
    t = _trace([(0, 10, "kernel", 1, 0), (50, 0, "kernel", 1, 0), (100, 10, "kernel", 1, 0)])
    assert _tuples(gpu_gaps(t)) == [(10, 50, 1, 0), (50, 100, 1, 0)]


def test_overhead_counts_only_strictly_inside_span():
    ov = "CUDA profiling data flush overhead"
    rows = [(0, 10, "kernel", 1, 0), (100, 10, "kernel", 1, 0),
            (40, 20, "other", 1, -1, ov, "PROFILER_OVERHEAD"),            # inside: busy
            (105, 50, "other", 1, -1, ov, "PROFILER_OVERHEAD"),           # crosses the end: no
            (40, 20, "other", 1, -1, "CUPTI: Buffer flush", "PROFILER_OVERHEAD")]  # other name
    t = _trace(rows)
    assert _tuples(gpu_gaps(t)) == [(10, 40, 1, 0), (60, 100, 1, 0)]
    assert _tuples(gpu_gaps(t, overheads=False)) == [(10, 100, 1, 0)]


def test_nonpositive_ops_ignored_on_nsys_only():
    rows = [(-50, 10, "kernel", 1, 0), (0, 10, "kernel", 1, 0), (100, 10, "kernel", 1, 0)]
    assert _tuples(gpu_gaps(_trace(rows, "nsys"))) == []
    assert _tuples(gpu_gaps(_trace(rows, "kineto"))) == [(-40, 0, 1, 0), (10, 100, 1, 0)]


def test_planted_nsys_gaps(tmp_path):
    t = traceread.load(write_planted(tmp_path / "p.sqlite"))
    g = gpu_gaps(t)
    assert _tuples(g) == PLANTED["gaps"]
    g1 = nsys_order(gpu_gaps(t, 1000))
    assert g1[["duration", "start"]].values.tolist() == [
        [16000, 4000], [7000, 13000], [5000, 5000], [5000, 25000]]


def test_no_gpu_ops():
    g = gpu_gaps(_trace([(0, 10, "runtime", 1, -1)]))
    assert len(g) == 0 and list(g.columns) == ["start", "end", "duration", "pid", "device"]
    assert gpu_busy(_trace([(0, 10, "runtime", 1, -1)])) == {}
