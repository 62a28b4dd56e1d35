"""The profiler's own cost in the analysed steps (docs/analysis.md, "Profiler overhead").

A profiled step is longer than the program's: every operator the profiler records costs the
calling thread its enter/exit callbacks (``PER_OP_NS``), more when it records the inputs'
shapes (``record_shapes``: the op's ``Input Dims``, ``SHAPES_NS``) and, with ``with_stack``,
the Python tracer's cost per Python frame it records (``FRAME_NS``). That time is host time
on the thread that runs the ops; it lengthens the step only where the host sets the pace.

The estimate: each host node of the step graph loses the profiler's cost of the ops and
frames that start inside it (``mark`` writes it into the graph's ``profiler_ns`` column),
and the graph is replayed -- where the GPU sets the pace the shorter host changes nothing.
Without a graph (no GPU, or not replayable) the step loses the cost of its busiest thread's
ops, never below the GPU's busy time per step.

A CUDA graph launch costs CUPTI ``GRAPH_NODE_NS`` per kernel of the graph.

Calibration (docs/analysis.md): ``PER_OP_NS`` is the per-op cost that brings the profiled
steps of the H100 pairs (tests/fixtures/gpu, h200: Kineto defaults) closest to their
unprofiled timings (``*.plain.truth.json``); the shapes and stack costs are the ratios
scripts/record_overhead.py measured on a CPU (tests/fixtures/overhead/truth.json: 1.33 us
an op, +0.61 us with record_shapes, +0.47 us a frame with with_stack), applied to it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

PER_OP_NS = 1_000     # Kineto's enter + exit callbacks per recorded op (H100 hosts, fit)
SHAPES_NS = 460       # record_shapes: + 0.46 x an op's cost (CPU calibration's ratio)
FRAME_NS = 350        # with_stack: per recorded Python frame (0.35 x an op's cost)
# CUPTI's cost in a CUDA graph launch per kernel of the graph (H100: a 600-kernel graph's
# launch took 715 us profiled; the unprofiled step was 0.72 ms shorter)
GRAPH_NODE_NS = 1_100
GRAPH_LAUNCH = r"^(?:cuda|hip|cu)GraphLaunch"
# below this share of the step the estimate is inside its own error: levers are priced
# on the profiled replay as measured
MATERIAL_SHARE = 0.03
HOST_KINDS = ("host", "launch", "sync_wait", "dataloader")


def costs(ev: pd.DataFrame) -> pd.DataFrame:
    """The profiler's estimated cost of each recorded op and Python frame: pid, tid, ts,
    ns (sorted by thread, then time)."""
    ops = _rows_of(ev, "cpu_op", ("pid", "tid", "ts", "input_dims"))
    py = _rows_of(ev, "python", ("pid", "tid", "ts"))
    shaped = _shaped(ops)
    ns = np.r_[np.where(shaped, PER_OP_NS + SHAPES_NS, PER_OP_NS),
               np.full(len(py), FRAME_NS)].astype(np.int64)
    out = pd.DataFrame({"pid": np.r_[ops["pid"].to_numpy(np.int64), py["pid"].to_numpy(np.int64)],
                        "tid": np.r_[ops["tid"].to_numpy(np.int64), py["tid"].to_numpy(np.int64)],
                        "ts": np.r_[ops["ts"].to_numpy(np.int64), py["ts"].to_numpy(np.int64)],
                        "ns": ns})
    return out.sort_values(["pid", "tid", "ts"], kind="stable").reset_index(drop=True)


def _shaped(ops: pd.DataFrame) -> np.ndarray:
    """Ops recorded with their inputs' shapes (``Input Dims``: record_shapes)."""
    if "input_dims" not in ops or not len(ops):
        return np.zeros(len(ops), bool)
    d = ops["input_dims"]
    if isinstance(d.dtype, pd.CategoricalDtype):   # per distinct value, not a str per row
        cats = np.asarray(d.cat.categories.astype(str), dtype=object)
        ok = np.r_[(cats != "") & (cats != "[]"), False].astype(bool)
        return ok[d.cat.codes.to_numpy()]   # code -1 (null) reads the trailing False
    return (d.notna() & (d.astype(str) != "") & (d.astype(str) != "[]")).to_numpy()


def _rows_of(ev: pd.DataFrame, kind: str, cols: tuple) -> pd.DataFrame:
    """The rows of one kind, only the columns a caller reads (every column of every host
    op was ~165 B a row: the analysis's peak at 1 GB)."""
    return ev.loc[(ev["kind"] == kind).to_numpy(), [c for c in cols if c in ev]]


def mark(graph, ev: pd.DataFrame):
    """``graph`` with a ``profiler_ns`` column: per host node, the profiler's cost of the ops
    and frames that start inside it on its thread (never above the node's own time)."""
    g = graph.copy()
    n = g.nodes
    out = np.zeros(len(n), np.int64)
    c = costs(ev)
    lanes = g.lanes.set_index("lane")
    host = n["kind"].isin(HOST_KINDS).to_numpy()
    if len(c) and host.any():
        pid = lanes.loc[n["lane"], "pid"].to_numpy(np.int64)
        tid = lanes.loc[n["lane"], "tid"].to_numpy(np.int64)
        ts = n["ts_ns"].to_numpy(np.int64)
        end = ts + np.maximum(n["dur_ns"].to_numpy(np.int64), 0)
        for (p, t), grp in c.groupby(["pid", "tid"], sort=False):
            m = host & (pid == p) & (tid == t)
            if not m.any():
                continue
            at = grp["ts"].to_numpy(np.int64)
            cum = np.r_[0, np.cumsum(grp["ns"].to_numpy(np.int64))]
            lo = np.searchsorted(at, ts[m], side="left")
            hi = np.searchsorted(at, end[m], side="left")
            out[m] = cum[hi] - cum[lo]
    out += _graph_kernels(g) * GRAPH_NODE_NS
    n["profiler_ns"] = np.minimum(out, np.maximum(n["cost_ns"].to_numpy(np.int64), 0))
    return g


def _graph_kernels(g) -> np.ndarray:
    """Per node: the GPU ops it launched when it is a CUDA graph launch (CUPTI records
    each of a replayed graph's kernels: the launch call's cost grows with them)."""
    n, e = g.nodes, g.edges
    out = np.zeros(len(n), np.int64)
    gl = n["name"].astype(str).str.contains(GRAPH_LAUNCH, regex=True).to_numpy() & \
        (n["kind"] == "launch").to_numpy()
    if not gl.any() or not len(e):
        return out
    lau = e[(e["kind"] == "launch").to_numpy()]
    cnt = lau["src"].value_counts()
    ids = n["id"].to_numpy()
    out[gl] = cnt.reindex(ids[gl]).fillna(0).to_numpy(np.int64)
    return out


def without(graph):
    """The marked graph with the profiler's cost taken out of each host node (the graph as
    the program would run unprofiled); the graph itself when it carries no mark."""
    if "profiler_ns" not in graph.nodes:
        return graph
    g = graph.copy()
    cut = g.nodes["profiler_ns"].to_numpy(np.int64)
    for col in ("cost_ns", "dur_ns"):
        g.nodes[col] = np.maximum(g.nodes[col].to_numpy(np.int64) - cut, 0)
    g.nodes["profiler_ns"] = 0
    return g


def features(ev: pd.DataFrame, steps: int) -> dict:
    """What the trace shows of its profiler: recorded ops and Python frames per step, how
    many ops carry shapes, and the floor spacing of back-to-back ops on the busiest thread
    (the 5th percentile of the positive gaps between one op's end and the next one's start:
    the least the profiler leaves between two ops)."""
    ops = _rows_of(ev, "cpu_op", ("pid", "tid", "ts", "dur", "input_dims"))
    py_rows = int((ev["kind"] == "python").sum())
    k = max(1, int(steps))
    floor = None
    busiest = 0
    if len(ops):
        key = ops["pid"].astype(np.int64) * (1 << 32) + ops["tid"].astype(np.int64)
        top = key.value_counts().index[0]
        mine = ops[(key == top).to_numpy()].sort_values("ts")
        busiest = len(mine)
        ts = mine["ts"].to_numpy(np.int64)
        run_end = np.maximum.accumulate(ts + mine["dur"].to_numpy(np.int64))
        gaps = ts[1:] - run_end[:-1]
        gaps = gaps[gaps > 0]
        floor = int(np.percentile(gaps, 5)) if len(gaps) else None
    shaped = int(_shaped(ops).sum())
    return {"ops_per_step": round(len(ops) / k, 1), "busiest_thread_ops_per_step":
            round(busiest / k, 1), "frames_per_step": round(py_rows / k, 1),
            "record_shapes": bool(shaped), "with_stack": bool(py_rows),
            "floor_spacing_ns": floor}


def estimate(ev: pd.DataFrame, *, steps: int, step_mean_ns: int | None,
             busy_step_ns: int | None = None, replay_ratio: float | None = None) -> dict | None:
    """The unprofiled step (``ProfilerOverhead`` in schema.py), or None without steps.

    ``replay_ratio``: the marked graph's replayed step without the profiler's cost over
    with it (replay/whatif.py ``profiler_ratio``), applied to the measured mean step; else
    the busiest thread's ops' cost per step comes off the step, never below
    ``busy_step_ns`` (the GPU's work per step)."""
    if not steps or not step_mean_ns:
        return None
    f = features(ev, steps)
    per_step = int(costs(ev)["ns"].sum()) // max(1, steps)
    if replay_ratio is not None:
        unprof = int(round(step_mean_ns * min(1.0, max(0.0, replay_ratio))))
        basis = "replay"
    else:
        busiest = f["busiest_thread_ops_per_step"] * (
            PER_OP_NS + (SHAPES_NS if f["record_shapes"] else 0))
        unprof = int(min(step_mean_ns, max(int(busy_step_ns or 0), step_mean_ns - busiest, 0)))
        basis = "host ops"
    over = int(step_mean_ns) - unprof
    return {"profiled_step_ns": int(step_mean_ns), "unprofiled_step_ns": int(unprof),
            "overhead_step_ns": over, "overhead_pct": round(100.0 * over / step_mean_ns, 1),
            "profiler_host_ns_per_step": per_step, "basis": basis,
            "material": bool(over >= MATERIAL_SHARE * step_mean_ns),
            "per_op_ns": PER_OP_NS, "shapes_ns": SHAPES_NS, "frame_ns": FRAME_NS, **f}
