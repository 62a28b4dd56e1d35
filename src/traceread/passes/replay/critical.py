"""The critical path of a replayed step: the chain of nodes that set its end.

The walk starts where the program waits for the step: the later of the host's step end and
the end of the GPU work the step launched (the program step of ``passes/steps.py``
``program_columns``: where the host runs ahead of a busy GPU, the step ends with its last
kernel, not with the host's marker). Walking back, each node was released by exactly one
thing: its lane's previous node, a cross-lane edge (the launch call that queued a kernel,
the op another stream waited for), or -- for a blocking call -- the GPU op it waited for.
Each link covers the time from its predecessor's end to its own end, so the links of a step
add up to its program step in the replay exactly (the host's span where the host is the
longer, else the GPU's window for the step). A link is labelled by what held the step there
(``LABELS``); the lag between a launch call's return and its op's start is "queued after
launch" (the GPU held queued work: a stream wait, a busy queue, the launch latency), the call
itself "launch".
"""
from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd

from ..steps import GPU_BOUND_BUSY, grouped_union_total
from .graph import END_EDGES, NEG, SKEW_NS, StepGraph, factorize, on_gpu_lane, same_memory
from . import sim as _sim
from .sim import Schedule, _among, lane_order, positions

LABELS = ("host op", "launch", "kernel", "copy", "sync wait", "data load", "collective",
          "another rank", "queued after launch", "unexplained")
QUEUED = "queued after launch"
# the chain reached the first node of a lane that nothing in the graph starts (the first op of
# a thread another thread woke, a GPU op with no launch record): the time from the step's
# start to it has no traced cause, and is said as such rather than dropped
UNEXPLAINED = "unexplained"
TOP = 10
MAX_SEGMENTS = 1000


def node_labels(graph: StepGraph) -> np.ndarray:
    """What each node holds a step with, as one of ``LABELS``."""
    return np.asarray(LABELS, object)[_label_index(graph)]


def _label_index(graph: StepGraph) -> np.ndarray:
    """``node_labels`` as positions in ``LABELS`` (later rules win)."""
    # each rule's label is its place in the order, so the last rule that holds is the
    # highest: per node the larger of its kind's label and its cat's, each looked up once
    # per distinct value (ten object compares per node were ~9 ms at 110 k nodes)
    k_codes, kinds = pd.factorize(graph.nodes["kind"].to_numpy(object), sort=False)
    c_codes, cats = pd.factorize(graph.nodes["cat"].to_numpy(object), sort=False)
    k_lut = np.array([_KIND_LABEL.get(k, 0) if isinstance(k, str) else 0 for k in kinds]
                     + [0], np.int64)
    c_lut = np.array([_CAT_LABEL.get(c, 0) if isinstance(c, str) else 0 for c in cats]
                     + [0], np.int64)
    return np.maximum(k_lut[k_codes], c_lut[c_codes])


# the label (position in ``LABELS``) a node's kind or cat gives it (0: host op)
_KIND_LABEL = {"launch": 1, "gpu_kernel": 2, "gpu_memset": 2, "gpu_copy": 3, "sync_wait": 4,
               "dataloader": 5, "collective": 6}
_CAT_LABEL = {"sync": 4, "dataloader": 5, "comm_wait": 6}


def _label_codes(graph: StepGraph) -> tuple[np.ndarray, list]:
    """``pd.factorize(node_labels(graph))`` (codes in order of first appearance) from the
    label positions: no string hashing per node."""
    idx = _label_index(graph)
    seen = pd.unique(idx)
    remap = np.zeros(len(LABELS), np.int64)
    remap[seen] = np.arange(len(seen))
    return remap[idx], [LABELS[i] for i in seen.tolist()]


def critical_path(graph: StepGraph, schedule: Schedule) -> dict:
    """Per replayed step the chain that set its end; returns ``{"by_label": {label: ns},
    "top": [{label, name, ns, pct, count}], "steps": [{step, by_label}], "segments": [...]}``
    (``segments``: start_ns, end_ns, label, name, lane, step -- for the timeline and overlay,
    in the replay's time, which is the trace's for the unmodified replay)."""
    n = graph.nodes
    N = len(n)
    empty = {"by_label": {}, "top": [], "steps": [], "segments": [], "total_ns": 0}
    if not N or not len(graph.steps):
        return empty
    pos = _Positions(n["id"].to_numpy(np.int64))
    start, end = schedule.start_ns, schedule.end_ns
    pred, how, lag_launch, prev, starts = _binding_preds(graph, schedule, pos)
    lab_codes, lab_names = _label_codes(graph)
    for extra in ("sync wait", QUEUED, UNEXPLAINED):
        if extra not in lab_names:
            lab_names.append(extra)
    sync_code, queued_code = lab_names.index("sync wait"), lab_names.index(QUEUED)
    lost_code = lab_names.index(UNEXPLAINED)
    names = n["name"].to_numpy(object)
    lane = n["lane"].to_numpy(np.int64)
    lane_lab = graph.lanes.set_index("lane")["label"].to_dict()
    links = _Links(pred, how, lag_launch, prev, end, starts)
    by_label: dict = {}
    all_code, all_node, all_d = [], [], []
    per_step, segments = [], []
    total = 0
    bis = pos.get_indexer(graph.steps["begin"].to_numpy(np.int64))
    eis = pos.get_indexer(graph.steps["end"].to_numpy(np.int64))
    gpu_last, gpu_from, after = _step_windows(graph, start, end, bis, eis)
    for k_step, srow in enumerate(graph.steps.itertuples(index=False)):
        if srow.begin < 0 or srow.end < 0:
            v, t0 = int(np.argmax(end)), int(start.min())
            bound = "window"   # a whole-trace window: its last end
        else:
            bi, ei = bis[k_step], eis[k_step]
            if bi < 0 or ei < 0:
                continue
            v, t0, bound = _program_end(int(bi), int(ei), int(gpu_last[k_step]),
                                        int(gpu_from[k_step]), start, end, int(after[k_step]))
        path, via, via_how, via_launch = _walk(v, t0, k_step, links)
        if not path:
            per_step.append({"step": int(srow.step), "by_label": {}, "ends_at": bound})
            continue
        p = np.asarray(path, np.int64)
        u = np.asarray(via, np.int64)
        how_p = np.asarray(via_how, np.int64)
        lo = np.where(u >= 0, end[np.maximum(u, 0)], start[p])
        lo = np.maximum(lo, t0)
        hi = end[p]
        own_lo = np.maximum(np.where(how_p == 1, start[p], lo), lo)
        # a link: the node's own part, and (start edges) the lag before it started
        seg_lo = np.r_[own_lo, lo]
        seg_hi = np.r_[hi, own_lo]
        code = np.r_[np.where(how_p == 0, sync_code, lab_codes[p]),
                     np.where(np.asarray(via_launch, bool), queued_code, lab_codes[p])]
        node = np.r_[p, p]
        if u[-1] < 0 and start[p[-1]] > t0:   # the chain ends inside the step: the rest
            seg_lo, seg_hi = np.r_[seg_lo, t0], np.r_[seg_hi, start[p[-1]]]
            code, node = np.r_[code, lost_code], np.r_[node, p[-1]]
        d = seg_hi - seg_lo
        keep = d > 0
        seg_lo, seg_hi, code, node, d = seg_lo[keep], seg_hi[keep], code[keep], node[keep], d[keep]
        mine = np.bincount(code, weights=d, minlength=len(lab_names))
        step_lab = {lab_names[i]: int(mine[i]) for i in np.flatnonzero(mine)}
        for k, x in step_lab.items():
            by_label[k] = by_label.get(k, 0) + x
        total += int(d.sum())
        all_code.append(code)
        all_node.append(node)
        all_d.append(d)
        per_step.append({"step": int(srow.step), "by_label": dict(
            sorted(step_lab.items(), key=lambda x: -x[1])), "ends_at": bound})
        room = MAX_SEGMENTS - len(segments)
        if room > 0:
            o = np.argsort(seg_lo, kind="stable")[:room]
            segments += [{"start_ns": int(a), "end_ns": int(b), "label": lab_names[c],
                          "name": str(names[v_]), "lane": str(lane_lab.get(int(lane[v_]), "")),
                          "step": int(srow.step)}
                         for a, b, c, v_ in zip(seg_lo[o], seg_hi[o], code[o], node[o])]
    top = _top(all_code, all_node, all_d, names, lab_names)
    return {
        "total_ns": int(total),
        "by_label": {k: int(d) for k, d in sorted(by_label.items(), key=lambda x: -x[1])},
        "top": [{"label": k[0], "name": k[1], "ns": int(v[0]), "count": int(v[1]),
                 "pct": round(100.0 * v[0] / total, 2) if total else 0.0} for k, v in top],
        "steps": per_step,
        "segments": _merge(segments)}


def program_spans(graph: StepGraph, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per graph step, its program step under the node times ``start`` / ``end`` (a
    schedule's, or the measured ``ts_ns`` / ``ts_ns + dur_ns``): the longer of the host's
    span (end marker - begin marker) and the GPU's window for the step (``_gpu_windows``);
    first start to last end for a whole-trace window; -1 where a marker is missing."""
    st = graph.steps
    out = np.full(len(st), -1, np.int64)
    if not len(st) or not len(graph.nodes):
        return out
    if (st["begin"].to_numpy() < 0).all():
        out[:] = int(end.max() - start.min())
        return out
    pos = _Positions(graph.nodes["id"].to_numpy(np.int64))
    bi = pos.get_indexer(st["begin"].to_numpy(np.int64))
    ei = pos.get_indexer(st["end"].to_numpy(np.int64))
    last, opens, after = _step_windows(graph, start, end, bi, ei)
    for k in np.flatnonzero((bi >= 0) & (ei >= 0)).tolist():
        v, t0, _ = _program_end(int(bi[k]), int(ei[k]), int(last[k]), int(opens[k]), start,
                                end, int(after[k]))
        out[k] = int(end[v] if v != ei[k] else start[v]) - t0
    return out


# Inside ``shared_windows``: the per-step windows computed so far, [(graph, start, end,
# (last, opens, after))]. The replay's result asks for them three times -- the measured
# program steps, the replayed ones and the critical path -- and the unmodified replay's
# times are the measured ones: ~20 ms of lexsorts and unions at 247 MB, made once.
_WINDOWS: list = []


@contextlib.contextmanager
def shared_windows():
    """Inside: ``_step_windows`` answers a call whose graph and node times equal an earlier
    call's from that call (a pure function of them); nothing is kept past the block. A block
    inside another shares the outer one's answers (the levers' sample reads the measured
    steps the replay's result made)."""
    _WINDOWS.append(_WINDOWS[-1] if _WINDOWS else [])
    try:
        yield
    finally:
        _WINDOWS.pop()


def _step_windows(graph: StepGraph, start: np.ndarray, end: np.ndarray, bi: np.ndarray,
                  ei: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``_gpu_windows``' last op and opening, ``_previous_ends``) per graph step; ``bi`` /
    ``ei``: the steps' begin / end marker positions (the graph's own: not compared)."""
    memo = _WINDOWS[-1] if _WINDOWS else None
    for g, s0, e0, out in memo or ():
        if g is graph and s0.dtype == start.dtype and e0.dtype == end.dtype \
                and np.array_equal(s0, start) and np.array_equal(e0, end):
            return tuple(x.copy() for x in out)
    _HELD.append((graph, _structure(graph)))   # asked by each part below: checked once
    try:
        last, opens = _gpu_windows(graph, start, end)
        out = (last, opens, _previous_ends(graph, start, end, bi, ei, last, opens))
    finally:
        _HELD.pop()
    if memo is not None:
        memo.append((graph, start.copy(), end.copy(), tuple(x.copy() for x in out)))
    return out


def _previous_ends(graph: StepGraph, start: np.ndarray, end: np.ndarray, bi: np.ndarray,
                   ei: np.ndarray, last: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """Per graph step: where the earlier steps of its process ended (-1: none), as
    ``steps.program_columns`` reads it -- a step paced by the GPU (its GPU window longer than
    the host's span, or its busiest GPU lane busy >= GPU_BOUND_BUSY of its program step)
    ends with its GPU work, any other with its host span. A step's program step starts no
    earlier (``_program_end``)."""
    st = graph.steps
    k = len(st)
    out = np.full(k, -1, np.int64)
    ok = (bi >= 0) & (ei >= 0)
    if k < 2 or not ok.any():
        return out
    h0 = np.where(ok, start[np.maximum(bi, 0)], 0)
    h1 = np.where(ok, start[np.maximum(ei, 0)], 0)
    has = last >= 0
    g1 = np.where(has, end[np.maximum(last, 0)], -1)
    gpu = np.where(has, np.maximum(0, g1 - opens), 0)
    prog = np.maximum(h1 - h0, gpu)
    paced = (gpu > h1 - h0) | (_busiest_lane(graph, start, end, k) >= GPU_BOUND_BUSY
                               * np.maximum(prog, 1))
    return _earlier_max(st, np.where(ok, np.where(paced & has, np.maximum(h1, g1), h1), -1))


def _busiest_lane(graph: StepGraph, start: np.ndarray, end: np.ndarray, k: int) -> np.ndarray:
    """Per graph step: the busy time of its GPU ops on their busiest device (the union of
    its streams' ops, as ``steps.step_table``'s ``busy_max_ns``: two streams that overlap
    keep the device busy once, two that alternate keep it busy twice as long as either)."""
    out = np.zeros(k, np.int64)
    s = _structure(graph)
    sel = s["sel"]
    if not len(sel):
        return out
    if "busiest" not in s:
        lane, step = _lane_step(graph)
        (dev,) = _at_lanes(graph.lanes, lane[sel], "device")
        codes, idx = np.unique(dev, return_inverse=True)
        s["busiest"] = (len(codes), step[sel] * len(codes) + idx)
    width, key = s["busiest"]
    per = grouped_union_total(key, start[sel], end[sel], k * width)
    return per.reshape(k, width).max(axis=1).astype(np.int64)


def _gpu_windows(graph: StepGraph, start: np.ndarray,
                 end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per graph step: the GPU op it launched that ends last (node position, -1: none) and
    where the step's GPU window opens in the replay -- its first op's start (from when it
    was queued, ``_queued_from``), or the end of the earlier steps' GPU work of its process
    where that overlaps (``program_columns``); -1 where the step launched nothing."""
    st = graph.steps
    k = len(st)
    last = np.full(k, -1, np.int64)
    opens = np.full(k, -1, np.int64)
    n = graph.nodes
    if not k or not len(n):
        return last, opens
    s = _structure(graph)
    step, sel = _lane_step(graph)[1], s["sel"]
    if not len(sel):
        return last, opens
    o = sel[np.lexsort((end[sel], step[sel]))]   # by step, the latest end last
    s_o = step[o]
    tail = np.r_[s_o[1:] != s_o[:-1], True]
    last[s_o[tail]] = o[tail]
    first = _queued_from(graph, start, end, sel, step, k)
    has = last >= 0
    ge = np.where(has, end[np.maximum(last, 0)], -1)
    # the earlier steps of the same process, in start order: how far their GPU work reached
    opens = np.where(has, np.maximum(first, _earlier_max(st, ge)), -1)
    return last, opens


def _queued_from(graph: StepGraph, start: np.ndarray, end: np.ndarray, sel: np.ndarray,
                 step: np.ndarray, k: int) -> np.ndarray:
    """Per graph step: where its GPU work starts -- its first GPU op's start, or, where the
    op sat queued on an idle device (no GPU op of its process and device ran then, and its
    launch call returned more than SKEW_NS before it started), from when it was queued:
    the GPU had the step's work and waited (``steps.queued_lead``, the attribution's queued
    part of the gap the op ends). ``sel``: the steps' GPU nodes."""
    out = np.full(k, np.iinfo(np.int64).max, np.int64)
    o = sel[np.lexsort((start[sel], step[sel]))]   # by step, the earliest start first
    s_o = step[o]
    head = o[np.r_[True, s_o[1:] != s_o[:-1]]]
    out[step[head]] = start[head]
    call = _launch_calls(graph)
    if call is None:
        return out
    c = call[np.searchsorted(sel, head)]   # ``head``: nodes of ``sel``, which is sorted
    idle_from = np.where(c >= 0, end[np.maximum(c, 0)], np.iinfo(np.int64).max)
    idle_from = np.maximum(idle_from, _device_busy_before(graph, start, end, head))
    queued = start[head] - idle_from > SKEW_NS
    out[step[head[queued]]] = idle_from[queued]
    return out


def _device_busy_before(graph: StepGraph, start: np.ndarray, end: np.ndarray,
                        at: np.ndarray) -> np.ndarray:
    """Per node of ``at`` (GPU nodes): how far the GPU ops of its process and device that
    started before it reach (int64 max where one still runs at its start: the device was
    not idle; int64 min where none started before)."""
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    s = _structure(graph)
    gpu = s["gpu"]
    if "devices" not in s:
        # (process, device) of each GPU node's lane (kept for the GPU nodes only)
        known, pid, device = _at_lanes(graph.lanes, _lane_step(graph)[0][gpu], "lane", "pid",
                                       "device")
        s["devices"] = np.where(known >= 0, (pid << 16) + device + 1, -1)
    dev_gpu = s["devices"]
    dev_at = dev_gpu[np.searchsorted(gpu, at)]   # ``at``: GPU nodes, ``gpu`` is sorted
    out = np.full(len(at), lo, np.int64)
    for d in np.unique(dev_at).tolist():
        g = gpu[dev_gpu == d]
        g = g[np.argsort(start[g], kind="stable")]
        reach = np.maximum.accumulate(end[g])
        mine = np.flatnonzero(dev_at == d)
        k = np.searchsorted(start[g], start[at[mine]], side="left")   # started strictly before
        out[mine] = np.where(k > 0, reach[np.maximum(k - 1, 0)], lo)
    return np.where(out > start[at], hi, out)


# The last graph shapes (``sim.KEPT_LAYOUTS``) the program steps were asked of, and what was
# derived from each: the what-if models' replays (whatif.step_mean) ask of copies of one
# graph whose nodes' lanes, steps and ids and whose lanes and edges most models leave as
# they were -- ~40 ms of lane lookups at 110 k nodes, made once per shape, not once per
# replay. The keys are compact copies, compared by value.
_STRUCT: list = []
_HELD: list = []   # inside one ``_step_windows`` call: (its graph, its structure)


def _structure(graph: StepGraph) -> dict:
    """What the steps' windows read of the graph's shape and not of its times: ``gpu``
    (positions on GPU lanes), ``sel`` (of those, the ones in a graph step), and on demand
    ``busiest`` / ``devices`` / ``calls``. Shared with a kept call's when the nodes' ids,
    lanes and steps, the lanes table and the edges equal its (a pure function of them)."""
    if _HELD and _HELD[-1][0] is graph:
        return _HELD[-1][1]
    n, ln, e = graph.nodes, graph.lanes, graph.edges
    key = (n["id"].to_numpy(np.int64), n["lane"].to_numpy(np.int64),
           n["step"].to_numpy(np.int64), len(graph.steps),
           ln["lane"].to_numpy(np.int64), ln["what"].to_numpy(object),
           ln["pid"].to_numpy(np.int64), ln["device"].to_numpy(np.int64),
           e["src"].to_numpy(np.int64), e["dst"].to_numpy(np.int64), e["kind"].to_numpy(object))
    for i, (k0, out) in enumerate(_STRUCT):
        if _same_key(k0, key):
            _STRUCT.insert(0, _STRUCT.pop(i))
            return out
    _, lane, step, k = key[:4]
    gpu_mask = on_gpu_lane(ln, lane)
    out = {"gpu": np.flatnonzero(gpu_mask),
           "sel": np.flatnonzero(gpu_mask & (step >= 0) & (step < k))}
    # kept: compact copies of the int columns (a view would hold the graph's own columns,
    # a rewired copy's among them, ~5 MB at 110 k nodes) and the kinds' column itself
    kept = tuple(x if isinstance(x, int) or x.dtype == object else _sim._key(x) for x in key)
    _STRUCT[:] = [(kept, out)] + _STRUCT[:_sim.KEPT_LAYOUTS - 1]
    return out


def _lane_step(graph: StepGraph) -> tuple[np.ndarray, np.ndarray]:
    """The nodes' lane and step columns (int64): the graph's own, not kept."""
    n = graph.nodes
    return n["lane"].to_numpy(np.int64), n["step"].to_numpy(np.int64)


def _same_key(a: tuple, b: tuple) -> bool:
    """A kept shape's key (``_structure``) equals a graph's: ints as ints, arrays by value."""
    for x, y in zip(a, b):
        if isinstance(x, int):
            if x != y:
                return False
        elif x.shape != y.shape:
            return False
        elif x.dtype == object:   # the kinds: the same column (the copies share it), or equal
            if not (same_memory(x, y) or np.array_equal(x, y)):
                return False
        elif not np.array_equal(x, y):   # ~50 us at 110 k: never trusted by address alone
            return False
    return True


def forget() -> None:
    """Let go of the kept shapes (``_structure``: a pure cache)."""
    _STRUCT.clear()


def _launch_calls(graph: StepGraph) -> np.ndarray | None:
    """Per node of the structure's ``sel`` (the steps' GPU nodes), the position of the
    launch call that queued it (-1: none); None where the graph has no launch edge."""
    s = _structure(graph)
    if "calls" not in s:
        e = graph.edges
        launch = (e["kind"] == "launch").to_numpy() if len(e) else np.zeros(0, bool)
        call = None
        if launch.any():
            ids = graph.nodes["id"].to_numpy(np.int64)
            src, dst = positions(ids, e["src"].to_numpy(np.int64)[launch],
                                 e["dst"].to_numpy(np.int64)[launch])
            call = np.full(len(ids), -1, np.int64)
            call[dst[dst >= 0]] = src[dst >= 0]
            call = call[s["sel"]]
        s["calls"] = call
    return s["calls"]


def _at_lanes(lanes: pd.DataFrame, lane: np.ndarray, *cols: str) -> list[np.ndarray]:
    """``lanes[col]`` of each node's lane, per col (int64; -1 where the lane is not in
    ``lanes``): one lookup of the lanes for all of them."""
    pos = pd.Index(lanes["lane"].to_numpy(np.int64)).get_indexer(lane)
    return [np.where(pos >= 0, lanes[c].to_numpy(np.int64)[np.maximum(pos, 0)], -1)
            for c in cols]


def _earlier_max(st: pd.DataFrame, x: np.ndarray) -> np.ndarray:
    """Per graph step: the largest ``x`` of the earlier steps of its process, in start
    order (-1 for a process's first step)."""
    pid = st["pid"].to_numpy(np.int64)
    t = st["start_ns"].to_numpy(np.int64)
    out = np.full(len(st), -1, np.int64)
    for p in np.unique(pid).tolist():
        idx = np.flatnonzero(pid == p)
        idx = idx[np.argsort(t[idx], kind="stable")]
        out[idx[1:]] = np.maximum.accumulate(x[idx])[:-1]
    return out


def _program_end(bi: int, ei: int, g_last: int, g_from: int, start, end, after: int = -1):
    """(the node the step's walk starts from, the time it walks back to, where the step
    ends: "host" or "gpu"): the host's end marker over the host's span, or -- where the
    step's GPU work ends later -- its last GPU op, over the program step (the longer of the
    host's span and the GPU's window, ``program_columns``) ending there; never from before
    ``after``, where the earlier steps ended (``_previous_ends``)."""
    h0, h1 = int(start[bi]), int(start[ei])
    if g_last < 0 or int(end[g_last]) <= h1:
        return ei, max(h0, after) if after <= h1 else h1, "host"
    g1 = int(end[g_last])
    gpu = max(0, g1 - g_from)
    prog = max(h1 - h0, gpu)
    return g_last, max(g1 - prog, min(after, g1)), "gpu"


class _Links:
    """What the walk reads per node (as lists: it steps one node at a time): the binding
    predecessor, how it released the node, whether through a launch, the lane's previous
    node, its end; and every start edge into each node (for a cycle's way out)."""

    def __init__(self, pred, how, lag_launch, prev, end, starts):
        # the walks read a few thousand of the ~100 k nodes: each value is read where it is
        # needed (``item``: a Python int or bool, as a list would hold), not every array
        # turned into a list first (~10 ms at 106 k nodes, the walks ~4 ms)
        self.pred, self.how = pred.item, how.item
        self.launch, self.prev, self.end = lag_launch.item, prev.item, end.item
        self.gap = starts["gap"].item
        src, dst, val, is_launch = starts["src"], starts["dst"], starts["val"], starts["launch"]
        o = np.argsort(dst, kind="stable")
        self.ptr = np.searchsorted(dst[o], np.arange(len(pred) + 1)).item
        self.src, self.val, self.is_launch = src[o].item, val[o].item, is_launch[o].item
        self.seen = [-1] * len(pred)   # the step whose walk took the node

    def way_out(self, v: int, k: int) -> tuple[int, int, bool]:
        """The latest-ready predecessor of ``v`` not yet taken by step ``k``'s walk -- a
        start edge (how 1) or the lane's previous node (how 2) -- or (-1, 3, False)."""
        best, how, launch, t = -1, 3, False, None
        p = self.prev(v)
        if p >= 0 and self.seen[p] != k:
            best, how, t = p, 2, self.end(p) + self.gap(v)
        for i in range(self.ptr(v), self.ptr(v + 1)):
            u = self.src(i)
            if self.seen[u] != k and (t is None or self.val(i) > t):
                best, how, launch, t = u, 1, self.is_launch(i), self.val(i)
        return best, how, launch


def _walk(v: int, t0: int, k: int, ln: _Links) -> tuple[list, list, list, list]:
    """The chain back from node ``v`` while nodes end after ``t0``: (nodes, the predecessor
    that released each, how, whether through a launch). Each node is taken once per step
    ``k``: where the binding predecessor was taken already (zero-length ops that wait on
    each other bind in a cycle) the latest-ready predecessor not taken releases it instead,
    so a step's walk is linear in its nodes however the waits loop."""
    path, via, hows, launches = [], [], [], []
    seen, pred, end = ln.seen, ln.pred, ln.end
    while v >= 0 and end(v) > t0 and seen[v] != k:
        seen[v] = k
        u, how, launch = pred(v), ln.how(v), ln.launch(v)
        if u >= 0 and seen[u] == k:
            u, how, launch = ln.way_out(v, k)
        path.append(v)
        via.append(u)
        hows.append(how)
        launches.append(launch)
        v = u
    return path, via, hows, launches


def _top(codes, nodes, ds, names, lab_names) -> list:
    """The (label, name) pairs with the most critical time: [((label, name), (ns, links))]."""
    if not codes:
        return []
    code, node, d = np.concatenate(codes), np.concatenate(nodes), np.concatenate(ds)
    name_code, uniq = factorize(names[node])
    key = code.astype(np.int64) * max(len(uniq), 1) + name_code
    k, inv = np.unique(key, return_inverse=True)
    ns = np.bincount(inv, weights=d)
    cnt = np.bincount(inv)
    best = np.argsort(-ns, kind="stable")[:TOP]
    return [((lab_names[int(k[i] // max(len(uniq), 1))], str(uniq[int(k[i] % max(len(uniq), 1))])),
             (int(ns[i]), int(cnt[i]))) for i in best]


def _binding_preds(graph, schedule, pos):
    """Per node: the predecessor that released it (position, -1: none), how (0: a drain --
    the GPU op a blocking call waited for; 1: a cross-lane start edge; 2: its lane's previous
    node; 3: its release time), whether that start edge is a launch, the lane's previous
    node (position, -1: none), and the start edges (src, dst, ready time, is a launch) with
    the lane gaps, for ``_Links.way_out``."""
    n = graph.nodes
    N = len(n)
    start, end = schedule.start_ns, schedule.end_ns
    cost = n["cost_ns"].to_numpy(np.int64)
    lane = n["lane"].to_numpy(np.int64)
    order = lane_order(lane, n["seq"].to_numpy(np.int64))
    prev = np.full(N, -1, np.int64)
    same = np.r_[False, lane[order][1:] == lane[order][:-1]]
    prev[order[same]] = order[np.flatnonzero(same) - 1]
    gap = n["gap_ns"].to_numpy(np.int64)
    e = graph.edges
    src = pos.get_indexer(e["src"].to_numpy(np.int64))
    dst = pos.get_indexer(e["dst"].to_numpy(np.int64))
    kind = e["kind"].to_numpy(object)
    ok = (src >= 0) & (dst >= 0)
    val = np.where(ok, end[np.maximum(src, 0)] + e["lag_ns"].to_numpy(np.int64), NEG)
    is_drain = _among(kind, END_EDGES)
    s_src, s_kind = _binding(N, src, dst, val, ok & ~is_drain, kind)
    d_src, d_kind = _binding(N, src, dst, val, ok & is_drain, kind)
    a, b = schedule.ready_ns, schedule.drain_ns
    lane_ready = np.where(prev >= 0, end[np.maximum(prev, 0)] + gap, NEG)
    drained = (d_src >= 0) & (b != NEG) & (b >= end) & (b > start + cost)
    cross = ~drained & (s_src >= 0) & (a != NEG) & (a >= lane_ready) & (a >= start)
    by_lane = ~drained & ~cross & (prev >= 0)
    pred = np.where(drained, d_src, np.where(cross, s_src, np.where(by_lane, prev, -1)))
    how = np.where(drained, 0, np.where(cross, 1, np.where(by_lane, 2, 3)))
    # a join (another thread's burst ended) is the waiting node's own time, not a sync's
    how = np.where(drained & (d_kind == "join"), 2, how)
    st = ok & ~is_drain
    starts = {"src": src[st], "dst": dst[st], "val": val[st], "launch": kind[st] == "launch",
              "gap": gap}
    return pred, how, cross & (s_kind == "launch"), prev, starts


class _Positions:
    """``pd.Index(ids).get_indexer`` by ``sim.positions`` (a lookup table for the dense
    node ids: no hash table of every id)."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids

    def get_indexer(self, wanted) -> np.ndarray:
        return positions(self.ids, np.asarray(wanted, np.int64))[0]


def _binding(N, src, dst, val, m, kind):
    """Per node, the edge source (position) whose ready time is the latest, and its kind."""
    out = np.full(N, -1, np.int64)
    ok_kind = np.full(N, "", object)
    idx = np.flatnonzero(m)
    if not len(idx):
        return out, ok_kind
    o = idx[np.lexsort((val[idx], dst[idx]))]
    last = np.r_[dst[o][1:] != dst[o][:-1], True]
    out[dst[o[last]]] = src[o[last]]
    ok_kind[dst[o[last]]] = kind[o[last]]
    return out, ok_kind


def _merge(segments: list) -> list:
    """Adjacent links of one lane, label and name: one segment."""
    out = []
    for s in sorted(segments, key=lambda x: (x["start_ns"], x["end_ns"])):
        if out and out[-1]["lane"] == s["lane"] and out[-1]["label"] == s["label"] and \
                out[-1]["name"] == s["name"] and out[-1]["end_ns"] == s["start_ns"]:
            out[-1]["end_ns"] = s["end_ns"]
        else:
            out.append(dict(s))
    return out
