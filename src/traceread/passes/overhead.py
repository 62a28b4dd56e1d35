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

A CUDA graph launch costs CUPTI ``GRAPH_NODE_NS`` per kernel of the graph. Every runtime /
driver call CUPTI records costs the calling thread its callbacks too (``CALL_NS``, by class:
runtime kernel launches and copy / memset enqueues, driver-API calls, the allocator's
mallocs, its frees, every other call), never more than the call's own time.

Calibration (docs/analysis.md): ``PER_OP_NS`` is the per-op cost that brings the profiled
steps of the H100 pairs (tests/fixtures/gpu, h200: Kineto defaults) closest to their
unprofiled timings (``*.plain.truth.json``); the shapes and stack costs are the ratios
scripts/record_overhead.py measured on a CPU (tests/fixtures/overhead/truth.json: 1.33 us
an op, +0.61 us with record_shapes, +0.47 us a frame with with_stack), applied to it.
``CALL_NS`` is fitted on the same pairs by scripts/fit_overhead.py (``fit_call_ns``), which
also reports each pair predicted from the others (``leave_one_pair_out``).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .common import kind_in, take

PER_OP_NS = 1_000     # Kineto's enter + exit callbacks per recorded op (H100 hosts, fit)
SHAPES_NS = 460       # record_shapes: + 0.46 x an op's cost (CPU calibration's ratio)
FRAME_NS = 350        # with_stack: per recorded Python frame (0.35 x an op's cost)
# CUPTI's cost in a CUDA graph launch per kernel of the graph (H100: a 600-kernel graph's
# launch took 715 us profiled; the unprofiled step was 0.72 ms shorter)
GRAPH_NODE_NS = 1_100
GRAPH_LAUNCH = r"^(?:cuda|hip|cu)GraphLaunch"
# CUPTI's cost per traced runtime / driver call, by class: the grid point (``CALL_GRID``)
# nearest the calibration pairs' plain runs, all pairs in (scripts/fit_overhead.py; its
# leave-one-pair-out figures are in docs/analysis.md). "driver" sits at the grid's top
# (queue.bad: 400 cuLaunchKernelEx a step; held out, it is still predicted within 1.2%).
# "free" is not fitted: one pair only has frees (alloc.bad, 28 cudaFree a step), so its
# 60 us would be read off the very run it is then checked on (held out it predicts
# nothing: +17.2%); 0 until a second recording shows it.
CALL_NS = {"launch": 500, "driver": 7_000, "alloc": 0, "free": 0, "other": 0}
CALL_KINDS = ("runtime", "driver")
# only calls as Kineto records them carry the cost: the fit saw Kineto captures, and nsys
# records every driver call (2,372 in alloc.bad's capture vs Kineto's 72) at its own cost
CALL_CATS = ("cuda_runtime", "cuda_driver")
CALL_CLASSES = (   # first match wins; the rest is "other"
    ("launch", r"^(?:cuda|hip|cu)(?:Launch|Memcpy|Memset|GraphLaunch|ModuleLaunch)"),
    ("free", r"^(?:cuda|hip|cu)(?:Free|MemFree|HostUnregister|MemUnmap|MemRelease|"
             r"MemAddressFree)"),
    ("alloc", r"^(?:cuda|hip|cu)(?:Malloc|MemAlloc|HostAlloc|HostRegister|MemHost|MemCreate|"
              r"MemMap|MemAddressReserve)"),
)
# below this share of the step the estimate is inside its own error: levers are priced
# on the profiled replay as measured
MATERIAL_SHARE = 0.03
HOST_KINDS = ("host", "launch", "sync_wait", "dataloader")


def costs(ev: pd.DataFrame, call_ns: dict | None = None) -> pd.DataFrame:
    """The profiler's estimated cost of each recorded op, Python frame and runtime / driver
    call: pid, tid, ts, ns (sorted by thread, then time). ``call_ns``: the per-call cost by
    class (default ``CALL_NS``)."""
    ops = _rows_of(ev, "cpu_op", ("pid", "tid", "ts", "input_dims"))
    py = _rows_of(ev, "python", ("pid", "tid", "ts"))
    calls = _calls(ev, ("pid", "tid", "ts"))
    shaped = _shaped(ops)
    ns = np.r_[np.where(shaped, PER_OP_NS + SHAPES_NS, PER_OP_NS),
               np.full(len(py), FRAME_NS), call_cost(calls, call_ns)].astype(np.int64)
    col = lambda c: np.r_[ops[c].to_numpy(np.int64), py[c].to_numpy(np.int64),  # noqa: E731
                          calls[c].to_numpy(np.int64)]
    out = pd.DataFrame({"pid": col("pid"), "tid": col("tid"), "ts": col("ts"), "ns": ns})
    return out.sort_values(["pid", "tid", "ts"], kind="stable").reset_index(drop=True)


def call_class(calls: pd.DataFrame) -> np.ndarray:
    """Each runtime / driver call's class: "driver" for a driver-API call (CUPTI records it
    beside the runtime call it serves: a GEMM's cuLaunchKernelEx inside cudaLaunchKernel),
    else by name (``CALL_CLASSES``; "other" when none matches)."""
    by_name, at, driver = _classes_by_name(calls)
    out = by_name[at] if len(calls) else np.zeros(0, dtype=object)
    out[driver] = "driver"
    return out


def _classes_by_name(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class per distinct call name -- a last slot for a missing name --, each call's slot,
    the driver-API calls' mask): ``call_class`` is ``by_name[at]``, "driver" where masked."""
    col = calls["name"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(str).astype("category")
    col = col.cat.remove_unused_categories()   # the calls' names, not the trace's
    # per distinct name (the categories), a last slot for a missing name
    names = np.r_[col.cat.categories.astype(str).to_numpy(object), np.array([""], object)]
    at = np.asarray(col.cat.codes, np.int64)
    at = np.where(at < 0, len(names) - 1, at).reshape(-1)
    by_name = np.full(len(names), "other", dtype=object)
    left = np.ones(len(names), bool)
    for cls, rx in CALL_CLASSES:
        m = left & pd.Series(names, dtype=object).str.contains(rx, regex=True).to_numpy()
        by_name[m] = cls
        left &= ~m
    return by_name, at, np.asarray(calls["kind"] == "driver", dtype=bool)


def call_cost(calls: pd.DataFrame, call_ns: dict | None = None) -> np.ndarray:
    """CUPTI's cost of each runtime / driver call: its class's ``call_ns``, never above the
    call's own time (a 0.7 us query cannot give back 2 us)."""
    if not len(calls):
        return np.zeros(0, np.int64)
    per = CALL_NS if call_ns is None else call_ns
    return _call_cost(_classes_by_name(calls), calls["dur"].to_numpy(np.int64), per)


def _call_cost(classes: tuple, dur: np.ndarray, per: dict) -> np.ndarray:
    """``call_cost`` from ``_classes_by_name``: the cost per distinct name, then per call (a
    class without a cost: 0; a cost in float ns truncated, as a per-call map did)."""
    by_name, at, driver = classes
    cost = np.array([per.get(c, 0) for c in by_name.tolist()] + [per.get("driver", 0)],
                    np.float64).astype(np.int64)
    ns = cost[:-1][at]
    ns[driver] = cost[-1]
    return np.minimum(ns, np.maximum(dur, 0))


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
    return ev.loc[kind_in(ev, (kind,)), [c for c in cols if c in ev]]


def _calls(ev: pd.DataFrame, cols: tuple) -> pd.DataFrame:
    """The runtime / driver calls Kineto recorded (``CALL_CATS``), with ``cols`` and what
    ``call_cost`` reads."""
    keep = [c for c in dict.fromkeys(("kind", "name", "dur") + cols) if c in ev]
    m = kind_in(ev, CALL_KINDS)
    if "cat" in ev:
        m &= np.array(ev["cat"].isin(CALL_CATS), dtype=bool)
    return ev.loc[m, keep]


def mark(graph, ev: pd.DataFrame, call_ns: dict | None = None):
    """``graph`` with a ``profiler_ns`` column: per host node, the profiler's cost of the
    ops, frames and runtime / driver calls that start inside it on its thread (never above
    the node's own time). ``call_ns``: the per-call costs (default ``CALL_NS``)."""
    g = graph.copy()
    n = g.nodes
    out = np.zeros(len(n), np.int64)
    host = n["kind"].isin(HOST_KINDS).to_numpy()
    c = costs(_in_span(ev, n, host), call_ns)
    if len(c) and host.any():
        pid, tid = _lane_threads(g)
        ts = n["ts_ns"].to_numpy(np.int64)
        end = ts + np.maximum(n["dur_ns"].to_numpy(np.int64), 0)
        # ``costs`` comes sorted by thread, then time: each thread's rows are one run
        c_pid, c_tid = c["pid"].to_numpy(np.int64), c["tid"].to_numpy(np.int64)
        c_ts, c_ns = c["ts"].to_numpy(np.int64), c["ns"].to_numpy(np.int64)
        cut = np.flatnonzero((c_pid[1:] != c_pid[:-1]) | (c_tid[1:] != c_tid[:-1])) + 1
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(c)].tolist()):
            m = host & (pid == c_pid[a]) & (tid == c_tid[a])
            if not m.any():
                continue
            at = c_ts[a:b]
            cum = np.r_[0, np.cumsum(c_ns[a:b])]
            lo = np.searchsorted(at, ts[m], side="left")
            hi = np.searchsorted(at, end[m], side="left")
            out[m] = cum[hi] - cum[lo]
    out += _graph_kernels(g) * GRAPH_NODE_NS
    n["profiler_ns"] = np.minimum(out, np.maximum(n["cost_ns"].to_numpy(np.int64), 0))
    return g


def _lane_threads(g) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) of each node's lane: one lookup of the few lanes (``lanes.loc`` by a 110 k
    node indexer took ~5 ms a column); a lane the table lacks raises KeyError, as loc does."""
    lanes = g.lanes
    at = pd.Index(lanes["lane"].to_numpy(np.int64)).get_indexer(
        g.nodes["lane"].to_numpy(np.int64))
    if (at < 0).any():
        raise KeyError("a node's lane is not in the graph's lanes")
    return lanes["pid"].to_numpy(np.int64)[at], lanes["tid"].to_numpy(np.int64)[at]


def _in_span(ev: pd.DataFrame, n: pd.DataFrame, host: np.ndarray) -> pd.DataFrame:
    """The events that start inside the host nodes' span, with the columns ``costs`` reads:
    only they can start inside a node (the levers' graph holds a few of the window's steps:
    a quarter of the 247 MB trace's rows)."""
    if not host.any():
        return ev
    ts = n["ts_ns"].to_numpy(np.int64)[host]
    lo = int(ts.min())
    hi = int((ts + np.maximum(n["dur_ns"].to_numpy(np.int64)[host], 0)).max())
    t = ev["ts"].to_numpy(np.int64)
    keep = (t >= lo) & (t < hi)
    if keep.all():
        return ev
    cols = [c for c in ("kind", "cat", "name", "dur", "pid", "tid", "ts", "input_dims")
            if c in ev]
    return take(ev, np.flatnonzero(keep), cols)


def _graph_kernels(g) -> np.ndarray:
    """Per node: the GPU ops it launched when it is a CUDA graph launch (CUPTI records
    each of a replayed graph's kernels: the launch call's cost grows with them)."""
    n, e = g.nodes, g.edges
    out = np.zeros(len(n), np.int64)
    gl = n["kind"].to_numpy(object) == "launch"
    at = np.flatnonzero(gl)   # only the launch nodes' names matched (the rest cannot be)
    gl[at] = _graph_launches(n["name"], at)
    if not gl.any() or not len(e):
        return out
    lau = e[(e["kind"] == "launch").to_numpy()]
    cnt = lau["src"].value_counts()
    ids = n["id"].to_numpy()
    out[gl] = cnt.reindex(ids[gl]).fillna(0).to_numpy(np.int64)
    return out


def _graph_launches(names: pd.Series, at: np.ndarray) -> np.ndarray:
    """``names.iloc[at].astype(str).str.contains(GRAPH_LAUNCH)`` with the pattern tested
    once per distinct name (the launch nodes repeat a few call names); a missing name
    goes the pandas way."""
    codes, uniq = pd.factorize(names.to_numpy(object)[at], sort=False)
    if (codes < 0).any():
        return names.iloc[at].astype(str).str.contains(GRAPH_LAUNCH, regex=True).to_numpy()
    rx = re.compile(GRAPH_LAUNCH)
    return np.array([bool(rx.search(str(u))) for u in uniq], bool)[codes] if len(uniq) \
        else np.zeros(len(at), bool)


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
    """What the trace shows of its profiler: recorded ops, Python frames and runtime /
    driver calls (by class) per step, how many ops carry shapes, and the floor spacing of
    back-to-back ops on the busiest thread (the 5th percentile of the positive gaps between
    one op's end and the next one's start: the least the profiler leaves between two ops)."""
    return cost_features(ev, steps)[0]


def cost_features(ev: pd.DataFrame, steps: int) -> tuple[dict, int]:
    """(``features``, the total of ``costs``' ns: from the same rows, read once): what
    ``estimate`` reads of the events, needing neither the replay nor the facts, so the
    analysis runs it beside the other passes."""
    # the ops as row positions and column views, not a frame of their columns (~36 B an op
    # row, with two keys of 8 B a row more: a peak of the passes at 500 MB)
    ops = np.flatnonzero(kind_in(ev, ("cpu_op",)))
    py_rows = int(kind_in(ev, ("python",)).sum())
    calls = _calls(ev, ())
    k = max(1, int(steps))
    busiest, floor = _floor_spacing(ev, ops) if len(ops) else (0, None)
    shaped = int(_shaped(ev.iloc[ops, [ev.columns.get_loc("input_dims")]])
                 .sum()) if "input_dims" in ev else 0
    classes = _classes_by_name(calls) if len(calls) else None
    cls: dict = {}   # calls per class: per distinct name counted, then per class
    if classes is not None:
        by_name, at, driver = classes
        per_name = np.bincount(at[~driver], minlength=len(by_name))
        for c, n in zip(by_name.tolist(), per_name.tolist()):
            cls[c] = cls.get(c, 0) + n
        cls["driver"] = cls.get("driver", 0) + int(driver.sum())
        call_ns = int(_call_cost(classes, calls["dur"].to_numpy(np.int64), CALL_NS).sum())
    else:
        call_ns = 0
    total = len(ops) * PER_OP_NS + shaped * SHAPES_NS + py_rows * FRAME_NS + call_ns
    return {"ops_per_step": round(len(ops) / k, 1), "busiest_thread_ops_per_step":
            round(busiest / k, 1), "frames_per_step": round(py_rows / k, 1),
            "calls_per_step": {c: round(float(cls.get(c, 0)) / k, 1) for c in CALL_NS},
            "record_shapes": bool(shaped), "with_stack": bool(py_rows),
            "floor_spacing_ns": floor}, total


def _floor_spacing(ev: pd.DataFrame, ops: np.ndarray) -> tuple[int, int | None]:
    """(ops on the busiest op thread, the 5th percentile of the positive gaps between one of
    its ops' end and the next one's start) of the op rows ``ops`` (not empty)."""
    key = ev["pid"].to_numpy(np.int64)[ops] * (1 << 32)   # ``_key`` of the ops
    key += ev["tid"].to_numpy(np.int64)[ops]
    mine = ops[key == pd.Series(key).value_counts().index[0]]   # ``_busiest``
    del key
    ts = ev["ts"].to_numpy(np.int64)[mine]
    order = np.argsort(ts, kind="quicksort")   # ``sort_values("ts")``'s order
    ts = ts[order]
    run_end = np.maximum.accumulate(ts + ev["dur"].to_numpy(np.int64)[mine[order]])
    gaps = ts[1:] - run_end[:-1]
    gaps = gaps[gaps > 0]
    return len(mine), (int(np.percentile(gaps, 5)) if len(gaps) else None)


def _key(ev: pd.DataFrame) -> pd.Series:
    return ev["pid"].astype(np.int64) * (1 << 32) + ev["tid"].astype(np.int64)


def _busiest(ops: pd.DataFrame):
    """The thread (``_key``) that records the most ops."""
    return _key(ops).value_counts().index[0]


def _busiest_calls_ns(ev: pd.DataFrame) -> int:
    """CUPTI's estimated cost of the runtime / driver calls on the busiest op thread."""
    ops = _rows_of(ev, "cpu_op", ("pid", "tid"))
    calls = _calls(ev, ("pid", "tid"))
    if not len(ops) or not len(calls):
        return 0
    return int(call_cost(calls[(_key(calls) == _busiest(ops)).to_numpy()]).sum())


def estimate(ev: pd.DataFrame, *, steps: int, step_mean_ns: int | None,
             busy_step_ns: int | None = None, replay_ratio: float | None = None,
             features: tuple | None = None) -> dict | None:
    """The unprofiled step (``ProfilerOverhead`` in schema.py), or None without steps.

    ``replay_ratio``: the marked graph's replayed step without the profiler's cost over
    with it (replay/whatif.py ``profiler_ratio``), applied to the measured mean step; else
    the busiest thread's ops' and calls' cost per step comes off the step, never below
    ``busy_step_ns`` (the GPU's work per step). ``features``: ``cost_features(ev, steps)``
    when computed already (the analysis runs it as a side pass)."""
    if not steps or not step_mean_ns:
        return None
    # the costs' total from the same rows: no frame, no sort
    f, total = features if features is not None else cost_features(ev, steps)
    per_step = total // max(1, steps)
    if replay_ratio is not None:
        unprof = int(round(step_mean_ns * min(1.0, max(0.0, replay_ratio))))
        basis = "replay"
    else:
        busiest = f["busiest_thread_ops_per_step"] * (
            PER_OP_NS + (SHAPES_NS if f["record_shapes"] else 0)) + \
            _busiest_calls_ns(ev) / max(1, steps)
        unprof = int(min(step_mean_ns, max(int(busy_step_ns or 0), step_mean_ns - busiest, 0)))
        basis = "host ops"
    over = int(step_mean_ns) - unprof
    return {"profiled_step_ns": int(step_mean_ns), "unprofiled_step_ns": int(unprof),
            "overhead_step_ns": over, "overhead_pct": round(100.0 * over / step_mean_ns, 1),
            "profiler_host_ns_per_step": per_step, "basis": basis,
            "material": bool(over >= MATERIAL_SHARE * step_mean_ns),
            "per_op_ns": PER_OP_NS, "shapes_ns": SHAPES_NS, "frame_ns": FRAME_NS,
            "call_ns": {c: int(v) for c, v in CALL_NS.items()}, **f}


# The candidates ``fit_call_ns`` tries for each class's per-call cost (ns)
# (ns)
CALL_GRID = {"launch": [0, 500],
             "driver": [0, 3000, 4000, 5000, 6000, 7000],
             "alloc": [0, 10_000, 20_000, 30_000],
             "free": [0, 20_000, 40_000, 60_000],
             "other": [0, 1000]}


def fit_call_ns(samples: list, predict, grid: dict | None = None) -> dict:
    """The per-call costs (one value per class from ``grid``, default ``CALL_GRID``) whose
    predictions ``predict(sample, call_ns)`` lie nearest each sample's ``truth`` (least mean
    |relative error|; ties: the smaller costs). ``samples``: dicts with ``truth`` (the
    unprofiled step, ns)."""
    combos = _combos(grid)
    err = _errors(samples, predict, combos)
    return combos[_best(err, range(len(samples)))]


def leave_one_pair_out(samples: list, predict, grid: dict | None = None) -> list[dict]:
    """Per sample (dicts with ``pair`` and ``truth``): the costs fitted on the other pairs'
    samples and this sample's prediction with them -- the figure a new pair would get."""
    combos = _combos(grid)
    err = _errors(samples, predict, combos)
    out = []
    for pair in dict.fromkeys(s["pair"] for s in samples):
        i = _best(err, [j for j, s in enumerate(samples) if s["pair"] != pair])
        for j, s in enumerate(samples):
            if s["pair"] == pair:
                out.append({"sample": s, "call_ns": combos[i],
                            "predicted_ns": s["truth"] * (1 + err[i][j])})
    return out


def _combos(grid: dict | None) -> list[dict]:
    g = CALL_GRID if grid is None else grid
    keys = list(g)
    out = [{}]
    for k in keys:
        out = [{**c, k: v} for c in out for v in g[k]]
    return out


def _errors(samples: list, predict, combos: list) -> list[list[float]]:
    """err[combo][sample]: the prediction's relative error against the sample's truth."""
    return [[(predict(s, c) - s["truth"]) / s["truth"] for s in samples] for c in combos]


def _best(err: list, keep) -> int:
    """The combo with the least mean |error| over the samples ``keep`` (first on ties: the
    grid runs from small costs up)."""
    keep = list(keep)
    score = [sum(abs(e[j]) for j in keep) for e in err]
    return int(np.argmin(score)) if keep else 0

