"""Host cost per op: the host time an op carries, fitted on one trace's step graph, so a
change that removes ops removes their host cost and one that grows them grows only what
grows (docs/hostcost.md).

Two fits, both from the trace the change is priced on (BEFORE), never from its pair:

* **The lag before an op** (``fit``): per (lane, op name) -- an op stretch, a runtime call,
  a sync -- the untraced host time right before it on its thread: the Python line that
  calls it and the dispatch before the profiler's record starts. Median over the op's
  calls in the replayed steps (0 for a call with no untraced stretch before it), with the
  count and the spread (interquartile range). When a change removes an op, the stretch
  before it loses the op's fitted lag, never more than the stretch holds
  (``removed_lags``): the Python of a removed line goes, a longer stretch's excess (other
  work of the program) stays.
* **The batch-carrying work of an op** (``batch_work``): where the trace recorded shapes,
  each op's own time (its time less its children's) is split into a fixed part and a part
  that grows with the batch. An op grows only when one of its inputs carries the batch
  dimension; per op name, own time = a + b x work (work: m*n*k for a matmul, else the
  elements of its inputs), fitted by least squares over the medians of the distinct sizes
  the trace shows (two or more sizes at least 2x apart, positive slope); ``a`` is the
  fixed part. An op name with one size only takes the trace's dispatch floor (the median
  own time of the leaf ops that carry no batch) as its fixed part.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from .graph import copy_on_write, same_memory, str_values

OP_KINDS = ("host", "launch", "sync_wait", "dataloader")
NOT_OPS = ("untraced", "step", "wait", "")
MATMUL_RX = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|_addmm_activation)$")
MIN_SIZE_RATIO = 2.0       # the sizes of one op must span this much for a fitted intercept


def _order(g) -> np.ndarray:
    n = g.nodes
    return np.lexsort((n["seq"].to_numpy(), n["lane"].to_numpy()))


def op_nodes(g) -> np.ndarray:
    """Mask of the host nodes that are ops: named stretches, calls, syncs, data loading (not
    the untraced stretches between them, step markers or waits)."""
    n = g.nodes
    return n["kind"].isin(OP_KINDS).to_numpy() & ~n["cat"].isin(NOT_OPS).to_numpy() | \
        n["kind"].isin(("launch", "sync_wait")).to_numpy()


def _untraced(g) -> np.ndarray:
    n = g.nodes
    return (n["kind"].to_numpy() == "host") & (n["cat"].to_numpy() == "untraced")


def call_starts(g) -> np.ndarray:
    """Mask of the op nodes that begin a call: not the continuation of an op cut at its
    launches (``aten::any`` before and after the ``cudaLaunchKernel`` inside it is one
    call), nor a call made inside an op (between two of its stretches)."""
    o = _order(g)
    n = g.nodes
    lane = n["lane"].to_numpy()[o]
    kind = n["kind"].to_numpy(object)[o]
    name = str_values(n["name"])[o]
    ops = op_nodes(g)[o]
    call = np.isin(kind, ("launch", "sync_wait"))
    stretch = ops & ~call
    same1 = np.r_[False, lane[1:] == lane[:-1]]
    same2 = np.r_[False, False, lane[2:] == lane[:-2]]
    prev_stretch = np.r_[False, stretch[:-1]] & same1
    prev_call = np.r_[False, call[:-1]] & same1
    name2 = np.concatenate([np.array(["", ""], object), name[:-2]])[:len(name)]
    stretch2 = np.r_[False, False, stretch[:-2]][:len(name)]
    # a stretch after a call that follows a stretch of the same op: the op's return path
    cont = stretch & prev_call & same2 & stretch2 & (name2 == name)
    # a call between two stretches of one op: made inside that op
    nxt_same = np.r_[lane[1:] == lane[:-1], False]
    next_stretch = np.r_[stretch[1:], False] & nxt_same
    next_name = np.concatenate([name[1:], np.array([""], object)])
    prev_name = np.concatenate([np.array([""], object), name[:-1]])
    inside = call & prev_stretch & next_stretch & (next_name == prev_name)
    out = np.zeros(len(o), bool)
    out[o] = ops & ~cont & ~inside
    return out


def lag_before(g) -> np.ndarray:
    """Per node: the untraced stretch right before it on its lane (ns; 0 where the node
    before is anything else) -- and -1 for a node that does not begin an op's call."""
    o = _order(g)
    n = g.nodes
    lane = n["lane"].to_numpy()[o]
    cost = n["cost_ns"].to_numpy(np.int64)[o]
    unt = _untraced(g)[o]
    prev = np.zeros(len(o), np.int64)
    same = np.r_[False, lane[1:] == lane[:-1]]
    prev[1:] = np.where(same[1:] & unt[:-1], cost[:-1], 0)
    out = np.full(len(o), -1, np.int64)
    out[o] = prev
    out[~call_starts(g)] = -1
    return out


FIT_COLS = ("lane", "seq", "step", "kind", "cat", "name", "cost_ns")   # all that ``fit`` reads
_FIT_LAST: list = []   # (the inputs of the last fit, its table)


def fit(g) -> pd.DataFrame:
    """Per (lane, op name) over the replayed steps' op calls (``call_starts``): n, own_ns (median time on its
    lane), own_spread_ns, lag_ns (median untraced stretch right before it), lag_spread_ns,
    lag_seen (how many calls had one).

    The models each fit a copy of the same graph, most of them unchanged where the fit
    looks: the last table is reused when every column it reads (``FIT_COLS``) is equal to
    the last call's -- a comparison, far cheaper than the fit. Callers only read it."""
    cols = tuple(g.nodes[c] for c in FIT_COLS)
    if _FIT_LAST and all(_same(a.to_numpy(), b.to_numpy()) for a, b in zip(_FIT_LAST[0][0], cols)):
        return _FIT_LAST[0][1]
    out = _fit(g)
    # Under copy-on-write the columns are held as Series (pandas copies a column before a
    # write reaches one it shares): the models' copies share them with the levers' graph,
    # where a copy of the seven was 46 MB at 865 k nodes, alive through the pricing.
    kept = cols if copy_on_write() else tuple(c.copy(deep=True) for c in cols)
    _FIT_LAST[:] = [(kept, out)]
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    # one buffer (a column the copies share, held above: never written, never freed)
    return same_memory(a, b) or bool((a == b).all())


def forget() -> None:
    """Let go of the last fit's inputs and table (a pure cache: the next fit recomputes)."""
    _FIT_LAST.clear()


def _fit(g) -> pd.DataFrame:
    n = g.nodes
    lag = lag_before(g)
    m = (lag >= 0) & (n["step"].to_numpy() >= 0)
    d = pd.DataFrame({"lane": n["lane"].to_numpy()[m], "name": str_values(n["name"])[m],
                      "own": n["cost_ns"].to_numpy(np.int64)[m], "lag": lag[m]})
    if not len(d):
        return pd.DataFrame(columns=["lane", "name", "n", "own_ns", "own_spread_ns", "lag_ns",
                                     "lag_spread_ns", "lag_seen"])
    d["seen"] = d["lag"] > 0
    gb = d.groupby(["lane", "name"], sort=True)

    def iqr(col):
        return (gb[col].quantile(0.75) - gb[col].quantile(0.25)).round().astype(np.int64)

    out = pd.DataFrame({
        "n": gb.size(),
        "own_ns": gb["own"].median().round().astype(np.int64),
        "own_spread_ns": iqr("own"),
        "lag_ns": gb["lag"].median().round().astype(np.int64),
        "lag_spread_ns": iqr("lag"),
        "lag_seen": gb["seen"].sum().astype(np.int64),
    }).reset_index()
    return out


def fitted_lag(g, table: pd.DataFrame | None = None) -> np.ndarray:
    """Per node: its kind's fitted lag (``fit``'s lag_ns; 0 for nodes that begin no op
    call)."""
    t = fit(g) if table is None else table
    n = g.nodes
    if not len(t):
        return np.zeros(len(n), np.int64)
    key = pd.MultiIndex.from_arrays([n["lane"].to_numpy(), str_values(n["name"])])
    idx = pd.MultiIndex.from_frame(t[["lane", "name"]]).get_indexer(key)
    out = np.where(idx >= 0, t["lag_ns"].to_numpy(np.int64)[np.maximum(idx, 0)], 0)
    return np.where(call_starts(g), out, 0).astype(np.int64)


def removed_lags(g, gone: np.ndarray, fitted: np.ndarray, lanes=None) -> np.ndarray:
    """The new cost of each untraced stretch (kept) right before a removed op: its cost less
    the removed op's fitted lag, never below 0; other nodes' costs as they are. ``lanes``:
    only stretches on these lanes (None: all)."""
    o = _order(g)
    n = g.nodes
    cost = n["cost_ns"].to_numpy(np.int64).copy()
    gone = np.asarray(gone, bool)
    lane = n["lane"].to_numpy()
    unt = _untraced(g) & ~gone
    ops = gone & (np.asarray(fitted) > 0)
    if lanes is not None:
        ops &= np.isin(lane, lanes)
    lo, uo, oo = lane[o], unt[o], ops[o]
    hit = np.flatnonzero(oo[1:] & uo[:-1] & (lo[1:] == lo[:-1]))
    stretch, op = o[hit], o[hit + 1]
    cost[stretch] = np.maximum(0, cost[stretch] - np.asarray(fitted, np.int64)[op])
    return cost


# -- the batch-carrying work of an op -----------------------------------------------------

def _dims(s) -> list:
    try:
        d = json.loads(s) if isinstance(s, str) else None
    except ValueError:
        return []
    return [x for x in d if isinstance(x, list) and x and all(isinstance(v, int) for v in x)] \
        if isinstance(d, list) else []


def _work(name: str, dims: list) -> int:
    """m*n*k of a matmul (its two matrix inputs), else the elements of its inputs."""
    mats = [x for x in dims if len(x) >= 2]
    if MATMUL_RX.match(name) and len(mats) >= 2:
        a, b = mats[-2], mats[-1]
        return int(np.prod(a, dtype=np.int64)) * int(b[-1])
    return int(sum(int(np.prod(x, dtype=np.int64)) for x in dims))


def own_times(ops: pd.DataFrame) -> np.ndarray:
    """Each op's own time: its time less the time of the ops nested directly in it (same
    thread)."""
    o = np.lexsort((-ops["dur"].to_numpy(np.int64), ops["ts"].to_numpy(np.int64),
                    ops["tid"].to_numpy()))
    ts = ops["ts"].to_numpy(np.int64)[o]
    end = ts + ops["dur"].to_numpy(np.int64)[o]
    tid = ops["tid"].to_numpy()[o]
    own = (end - ts).copy()
    stack: list = []
    for i in range(len(o)):
        while stack and (tid[stack[-1]] != tid[i] or end[stack[-1]] < end[i]):
            stack.pop()
        if stack:
            own[stack[-1]] -= end[i] - ts[i]
        stack.append(i)
    out = np.empty(len(o), np.int64)
    out[o] = np.maximum(own, 0)
    return out


def batch_work(ops: pd.DataFrame, batch: int) -> pd.DataFrame | None:
    """Per op row of ``ops`` (cpu ops: tid, ts, dur, name, input_dims): own_ns, carries (an
    input has a dimension equal to ``batch``), fixed_ns (the part that does not grow with
    the batch); and the per-name fit in ``attrs["fit"]``. None when no shapes were
    recorded."""
    if ops is None or not len(ops) or "input_dims" not in ops or not ops["input_dims"].notna().any():
        return None
    names = ops["name"].astype(str).to_numpy()
    dims = [_dims(s) for s in ops["input_dims"].to_numpy(object)]
    carries = np.array([any(batch in x for x in d) for d in dims])
    work = np.array([_work(nm, d) for nm, d in zip(names, dims)], np.int64)
    own = own_times(ops)
    leaf = own >= ops["dur"].to_numpy(np.int64)   # no op nested in it
    still = ~carries & leaf & np.array([bool(d) for d in dims])
    floor = int(np.median(own[still])) if still.any() else 0
    fixed = np.where(carries, 0, own).astype(np.int64)
    fits = []
    for nm in np.unique(names[carries]).tolist():
        m = carries & (names == nm) & (work > 0)
        a, how, sizes = _intercept(work[m], own[m])
        if a is None:
            a, how = floor, "dispatch floor"
        sel = carries & (names == nm)
        fixed[sel] = np.minimum(own[sel], a)
        fits.append({"name": nm, "n": int(sel.sum()), "sizes": sizes, "fixed_ns": int(a),
                     "how": how, "own_ns": int(np.median(own[sel]))})
    out = pd.DataFrame({"own_ns": own, "carries": carries, "fixed_ns": fixed}, index=ops.index)
    out.attrs["fit"] = pd.DataFrame(fits)
    out.attrs["floor_ns"] = floor
    return out


def _intercept(work: np.ndarray, own: np.ndarray) -> tuple:
    """(a, how, distinct sizes) of own = a + b x work over the medians of each distinct
    size; a is None where the sizes span less than MIN_SIZE_RATIO or the slope is not
    positive."""
    if not len(work):
        return None, "", 0
    d = pd.DataFrame({"w": work, "t": own}).groupby("w")["t"].median()
    w, t = d.index.to_numpy(float), d.to_numpy(float)
    if len(w) < 2 or w.max() < MIN_SIZE_RATIO * w.min():
        return None, "", int(len(w))
    b, a = np.polyfit(w, t, 1)
    if b <= 0:
        return None, "", int(len(w))
    return int(round(min(max(a, 0.0), t.min()))), "least squares over sizes", int(len(w))


def node_growth(g, ops: pd.DataFrame, work: pd.DataFrame, k: float) -> np.ndarray:
    """Per graph node: the host time it gains with k times the batch -- the sum over the
    ops inside it (same thread, starting within it) that carry the batch of (k - 1) x
    (own - fixed)."""
    n = g.nodes
    out = np.zeros(len(n))
    grow = (k - 1.0) * (work["own_ns"].to_numpy(float) - work["fixed_ns"].to_numpy(float))
    grow = np.where(work["carries"].to_numpy(), grow, 0.0)
    tids = dict(zip(g.lanes["lane"].to_numpy().tolist(), g.lanes["tid"].to_numpy().tolist()))
    ts_op = ops["ts"].to_numpy(np.int64)
    tid_op = ops["tid"].to_numpy()
    ts = n["ts_ns"].to_numpy(np.int64)
    end = ts + n["dur_ns"].to_numpy(np.int64)
    lane = n["lane"].to_numpy()
    for ln in np.unique(lane).tolist():
        sel = tid_op == tids.get(ln)
        if not sel.any():
            continue
        o = np.argsort(ts_op[sel], kind="stable")
        t, gr = ts_op[sel][o], np.r_[0.0, np.cumsum(grow[sel][o])]
        idx = np.flatnonzero(lane == ln)
        lo = np.searchsorted(t, ts[idx], side="left")
        hi = np.searchsorted(t, end[idx], side="left")
        out[idx] = gr[hi] - gr[lo]
    return out


def whole_calls(g, gone: np.ndarray) -> np.ndarray:
    """``gone`` grown to whole op calls: an op cut at its launches (a stretch, the launch,
    the stretch after it) goes whole when every call made inside it goes -- its stretches
    too; a call that keeps one of its launches keeps all of its stretches."""
    o = _order(g)
    n = g.nodes
    lane = n["lane"].to_numpy()[o]
    start = call_starts(g)[o]
    ops = op_nodes(g)[o]
    kind = n["kind"].to_numpy(object)[o]
    gone_o = np.asarray(gone, bool)[o]
    # call id: the latest call start before, while only op nodes lie between on the lane
    brk = start | ~ops | np.r_[True, lane[1:] != lane[:-1]]
    cid = np.cumsum(brk) - 1
    cid = np.where(ops, cid, -1)
    calls = np.isin(kind, ("launch", "sync_wait")) & ops
    has_gone = np.zeros(int(cid.max()) + 2 if len(cid) else 1, bool)
    kept_call = np.zeros_like(has_gone)
    np.logical_or.at(has_gone, cid[gone_o & ops] + 1, True)
    np.logical_or.at(kept_call, cid[calls & ~gone_o] + 1, True)
    has_call = np.zeros_like(has_gone)
    np.logical_or.at(has_call, cid[calls] + 1, True)
    whole = has_gone & has_call & ~kept_call
    whole[0] = False
    grow = ops & whole[cid + 1]
    out = np.asarray(gone, bool).copy()
    out[o[grow]] = True
    return out


def loader_growth(g, ops: pd.DataFrame, batch: int, k: float) -> np.ndarray | None:
    """Per data-loading node: the time it gains with k times the batch, from what it shows
    per sample. Inside the node, the ops (outermost within it) whose name is called a
    multiple of ``batch`` times are the per-sample ops (each sample's indexing, the
    collate's per-sample views); they and the untraced time between two of them (the
    per-sample Python) grow k times, the rest (the iterator, the batch-wide stack/cat)
    stays. None where no node shows per-sample ops (the loader is then scaled whole)."""
    n = g.nodes
    data = np.flatnonzero(n["kind"].to_numpy() == "dataloader")
    if not len(data) or ops is None or not len(ops) or batch < 2:
        return None
    tids = dict(zip(g.lanes["lane"].to_numpy().tolist(), g.lanes["tid"].to_numpy().tolist()))
    ts_op, end_op = ops["ts"].to_numpy(np.int64), (ops["ts"] + ops["dur"]).to_numpy(np.int64)
    tid_op, names = ops["tid"].to_numpy(), ops["name"].astype(str).to_numpy(object)
    out = np.zeros(len(n))
    seen = False
    for i in data.tolist():
        lo = int(n["ts_ns"].iat[i])
        hi = lo + int(n["dur_ns"].iat[i])
        sel = np.flatnonzero((tid_op == tids.get(int(n["lane"].iat[i]))) & (ts_op >= lo)
                             & (end_op <= hi))
        sel = sel[np.lexsort((-(end_op[sel] - ts_op[sel]), ts_op[sel]))]
        top, reach = [], lo - 1
        for j in sel.tolist():          # the outermost ops inside the node
            if ts_op[j] >= reach:
                top.append(j)
                reach = end_op[j]
        if not top:
            continue
        top = np.asarray(top)
        nm, cnt = np.unique(names[top], return_counts=True)
        per = set(nm[(cnt >= batch) & (cnt % batch == 0)].tolist())
        if not per:
            continue
        seen = True
        is_per = np.array([names[j] in per for j in top.tolist()])
        own = float((end_op[top] - ts_op[top])[is_per].sum())
        gaps = ts_op[top][1:] - end_op[top][:-1]
        own += float(np.clip(gaps, 0, None)[is_per[1:] & is_per[:-1]].sum())
        out[i] = (k - 1.0) * min(own, float(n["cost_ns"].iat[i]))
    return out if seen else None


def _parents(ops_sorted_ts, ops_sorted_end, tid) -> np.ndarray:
    """Per op (sorted by thread, start, longest first): the index of the op it is nested in
    on its thread, -1 for an outermost op."""
    parent = np.full(len(ops_sorted_ts), -1, np.int64)
    stack: list = []
    for i in range(len(ops_sorted_ts)):
        while stack and (tid[stack[-1]] != tid[i] or ops_sorted_end[stack[-1]] < ops_sorted_end[i]):
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


def gpu_carries(g, ops: pd.DataFrame, batch: int) -> np.ndarray | None:
    """Per node: the GPU op was launched from inside an op with an input that carries the
    batch (the innermost op around its launch call on the launching thread that recorded
    shapes); None when no shapes were recorded. GPU ops with no launch call found are
    taken to carry it (nothing says they do not)."""
    if ops is None or not len(ops) or "input_dims" not in ops or not ops["input_dims"].notna().any():
        return None
    o = np.lexsort((-ops["dur"].to_numpy(np.int64), ops["ts"].to_numpy(np.int64),
                    ops["tid"].to_numpy()))
    ts = ops["ts"].to_numpy(np.int64)[o]
    end = ts + ops["dur"].to_numpy(np.int64)[o]
    tid = ops["tid"].to_numpy()[o]
    dims = [_dims(s) for s in ops["input_dims"].to_numpy(object)[o]]
    shaped = np.array([bool(d) for d in dims])
    carries = np.array([any(batch in x for x in d) for d in dims])
    parent = _parents(ts, end, tid)
    n = g.nodes
    e = g.edges
    lau = e[(e["kind"] == "launch").to_numpy()]
    pos = pd.Index(n["id"].to_numpy())
    src, dst = pos.get_indexer(lau["src"].to_numpy()), pos.get_indexer(lau["dst"].to_numpy())
    ok = (src >= 0) & (dst >= 0)
    src, dst = src[ok], dst[ok]
    tids = dict(zip(g.lanes["lane"].to_numpy().tolist(), g.lanes["tid"].to_numpy().tolist()))
    out = np.ones(len(n), bool)
    lt = n["ts_ns"].to_numpy(np.int64)[src]
    ltid = np.array([tids.get(x, -1) for x in n["lane"].to_numpy()[src].tolist()])
    key = tid.astype(np.int64)
    for s_, d_, t_, th in zip(src.tolist(), dst.tolist(), lt.tolist(), ltid.tolist()):
        lo, hi = np.searchsorted(key, th, "left"), np.searchsorted(key, th, "right")
        j = lo + int(np.searchsorted(ts[lo:hi], t_, "right")) - 1
        while j >= lo and not (ts[j] <= t_ < end[j] and shaped[j]):
            j = parent[j] if parent[j] >= lo else -1
            if j < 0:
                break
        if j >= lo:
            out[d_] = bool(carries[j])
    return out
