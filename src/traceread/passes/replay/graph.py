"""The analysed steps as a dependency graph that can be replayed (docs/analysis.md, "Replay").

Nodes are the pieces of work the trace shows, each on one *lane* (a resource that runs one
thing at a time): a host thread's runtime/driver calls and the stretches of host work between
them (labelled by what covers them: an operator, a Python frame, the DataLoader, a collective
wait, or nothing traced), and every GPU op on its (device, stream). Edges are what made a node
wait for another one on a different lane:

* ``launch``: the runtime/driver call (correlation id, same process) -> the GPU op it queued;
* ``event_wait``: a GPU op that started only when an op on another stream of its device ended
  (found by behaviour: it started more than ``SKEW_NS`` after both its launch and its stream's
  previous op, within ``EVENT_LATENCY_NS`` of the other op's end);
* ``engine``: consecutive copies of one direction on one device, on different streams (one
  copy engine per direction);
* ``drain``: a blocking call returned only once the GPU op it waited for ended (explicit
  syncs, synchronous copies, and calls that *behave* so: a pageable DtoH copy, or any call
  that ran through the GPU's last op and returned within ``SYNC_TOLERANCE_NS`` of the GPU
  going idle). A drain edge bounds the call's *end*, not its start.

Lane order is implicit: nodes are ordered within their lane by ``seq``; ``gap_ns`` is the
lane-order edge's lag (the time the lane kept between its previous node's end and this
node's start). Every lag is measured: the replay keeps what the trace showed and changes
only what a transformation changes. Cross-rank collective edges are not built (each trace is
replayed alone: a collective's wait for another rank is kept as its measured duration).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import attribution as attr
from ..common import kind_in
from ..steps import assign_steps, pair_keys, step_of_gpu_ops

NODE_KINDS = ("host", "launch", "gpu_kernel", "gpu_copy", "gpu_memset", "sync_wait",
              "dataloader", "collective", "step", "wait")
EDGE_KINDS = ("lane_order", "launch", "event_wait", "engine", "drain", "thread", "join",
              "data", "collective")
# edges that bound their destination's end, not its start
END_EDGES = ("drain", "join")
SKEW_NS = attr.SKEW_NS
SYNC_TOLERANCE_NS = attr.SYNC_TOLERANCE_NS
EVENT_LATENCY_NS = attr.EVENT_LATENCY_NS
# A call that "ran through" the GPU's last op and returned as the GPU went idle is blocking
# by behaviour only when it lasted this long: a 5 us launch that happens to end there is not.
BLOCKING_MIN_NS = 10_000
# A launch this long waited for a free slot of a full queue (a launch takes a few us); it
# returned this soon after the GPU op whose end freed the slot.
QUEUE_FULL_MIN_NS = 50_000
QUEUE_FULL_WAKE_NS = 20_000
# Another thread's burst of work: the helper idles >= IDLE_MIN_NS between bursts, wakes within
# WAKE_MAX_NS of the handing thread's last node, and that thread resumes within JOIN_MAX_NS of
# the burst's end.
IDLE_MIN_NS = 1_000_000
# what a waiting stretch may look like (a DataLoader fetch, a collective, a compile is work
# of its own, never a wait for another thread)
WAIT_CATS = ("untraced", "wait", "python", "cpu_op")
WAKE_MAX_NS = 1_000_000
JOIN_MAX_NS = 2_000_000
# Above this many nodes the replay takes a contiguous run of the analysed steps (and says so).
MAX_NODES = 120_000

NEG = np.int64(-(1 << 62))
_HOST_CATS = attr.CPU_CATEGORIES
_NCCL = ("nccl", "rccl", "Nccl", "Rccl")


# Why a window has no replay when it has no GPU op (passes/replay ``unreplayable``).
NO_GPU = "no GPU work in the window"


def host_only(rep: dict | None) -> bool:
    """The replay was refused for want of GPU work alone (``NO_GPU``): the host-only window
    may be built as a graph of its steps and replayed. Any other refusal stands -- a sampled
    trace dropped most of its events (a cut .json.gz keeps its CPU events only: sampled and
    without GPU ops, the sampled refusal is the one said), its graph would miss its nodes."""
    return bool(rep) and not rep.get("replayable") and rep.get("reason") == NO_GPU


def copy_on_write() -> bool:
    """pandas copies a frame's columns only when one is written (always from pandas 3):
    then ``StepGraph.copy`` shares them, and each what-if model's copy of a million-node
    graph costs the columns it changes, not all of them. Under pandas 2's default a
    shallow copy would let a write through to the original, so it copies deeply."""
    if int(pd.__version__.split(".")[0]) >= 3:
        return True
    try:
        return pd.get_option("mode.copy_on_write") is True
    except (KeyError, pd.errors.OptionError):
        return False


@dataclass
class StepGraph:
    """Nodes, cross-lane edges, lanes and steps of the replayed window.

    ``nodes``: id, step (index into ``steps``, -1: none), lane (index into ``lanes``), seq
    (order within the lane), kind (``NODE_KINDS``), name, cat (the host category of host
    work, ``attribution.CPU_CATEGORIES``; "" for GPU ops), ts_ns / dur_ns (measured), corr,
    cost_ns (time the node holds its lane once it may start: ``dur_ns``, except a blocking
    call: its measured time after the GPU op it waited for ended), gap_ns (lane-order lag),
    release_ns (earliest start: the measured start where the node's real predecessors lie
    outside the graph, else ``NEG``).
    ``edges``: src, dst (node ids), kind (``EDGE_KINDS``), lag_ns.
    ``lanes``: lane, what (host / gpu), pid, tid, device, stream, label.
    ``steps``: index, step (number), pid, start_ns, end_ns, dur_ns (measured), begin, end
    (ids of the step's zero-length start / end marker nodes; -1 for a whole-trace window).
    """

    nodes: pd.DataFrame
    edges: pd.DataFrame
    lanes: pd.DataFrame
    steps: pd.DataFrame
    origin_ns: int = 0
    sampled: bool = False
    steps_total: int = 0
    notes: list = field(default_factory=list)

    # -- selection ---------------------------------------------------------------------
    def select(self, kind=None, name=None, step=None, cat=None) -> np.ndarray:
        """Bool mask over ``nodes``: kind(s), name regex (``re.search``), step index(es),
        host category(ies); all given conditions hold."""
        n = self.nodes
        m = np.ones(len(n), bool)
        if kind is not None:
            m &= n["kind"].isin([kind] if isinstance(kind, str) else list(kind)).to_numpy()
        if cat is not None:
            m &= n["cat"].isin([cat] if isinstance(cat, str) else list(cat)).to_numpy()
        if step is not None:
            m &= np.isin(n["step"].to_numpy(), np.atleast_1d(step))
        if name is not None:
            m &= n["name"].astype(str).str.contains(name, regex=True).to_numpy()
        return m

    def ids(self, mask) -> np.ndarray:
        return self.nodes["id"].to_numpy()[np.asarray(mask, bool)]

    # -- transformations (each returns a new graph; the original is untouched) ----------
    def copy(self) -> "StepGraph":
        deep = not copy_on_write()
        return dataclasses.replace(self, nodes=self.nodes.copy(deep=deep),
                                   edges=self.edges.copy(deep=deep),
                                   lanes=self.lanes.copy(deep=deep),
                                   steps=self.steps.copy(deep=deep), notes=list(self.notes))

    def scale(self, mask, factor: float) -> "StepGraph":
        """Durations (measured and cost) of the masked nodes times ``factor``."""
        g = self.copy()
        m = np.asarray(mask, bool)
        for c in ("dur_ns", "cost_ns"):
            v = g.nodes[c].to_numpy(np.int64).copy()
            v[m] = np.rint(v[m] * float(factor)).astype(np.int64)
            g.nodes[c] = v
        return g

    def remove(self, mask) -> "StepGraph":
        """Drop the masked nodes. Lane order closes up (the removed node's lane gap is kept
        on its lane successor); each cross-lane path through a removed node is joined
        (pred -> succ, lags added, the outgoing edge's kind), so what waited on it now waits
        on what it waited on."""
        m = np.asarray(mask, bool)
        if not m.any():
            return self.copy()
        g = self.copy()
        nodes = g.nodes
        gone = set(nodes["id"].to_numpy()[m].tolist())
        order = np.lexsort((nodes["seq"].to_numpy(), nodes["lane"].to_numpy()))
        lane, gap = nodes["lane"].to_numpy()[order], nodes["gap_ns"].to_numpy(np.int64)[order]
        dead = m[order]
        # a removed node's lane gap moves to the next surviving node of its lane
        carry = 0
        new_gap = gap.copy()
        for i in np.flatnonzero(dead | np.r_[False, dead[:-1]]).tolist():
            if i > 0 and lane[i] != lane[i - 1]:
                carry = 0
            if dead[i]:
                carry += int(gap[i])
            else:
                new_gap[i] = gap[i] + carry
                carry = 0
        gaps = np.empty_like(new_gap)
        gaps[order] = new_gap
        nodes["gap_ns"] = gaps
        e = g.edges
        src, dst = e["src"].to_numpy(), e["dst"].to_numpy()
        s_dead = np.isin(src, list(gone))
        d_dead = np.isin(dst, list(gone))
        keep = e[~s_dead & ~d_dead]
        ins = e[d_dead & ~s_dead]
        outs = e[s_dead]
        joined = _join_through(ins, outs, gone)
        g.edges = pd.concat([keep, joined], ignore_index=True)
        g.nodes = nodes[~m].reset_index(drop=True)
        marks = g.steps
        for c in ("begin", "end"):
            marks.loc[marks[c].isin(list(gone)), c] = -1
        return g

    def replace_run(self, first: int, last: int, *, name: str, dur_ns: int,
                    kind: str = "launch") -> "StepGraph":
        """Replace the nodes of one lane from node id ``first`` to ``last`` (inclusive, in
        lane order: launches and the host work between them) by one node of ``dur_ns``
        (a CUDA graph launch, say). Edges into and out of the run attach to the new node;
        edges out keep their lag, clamped at >= 0 (the work they queued follows the one
        call's return)."""
        return self.replace_runs([(first, last, dur_ns)], name=name, kind=kind)

    def replace_runs(self, runs, *, name: str, kind: str = "launch") -> "StepGraph":
        """``replace_run`` of several disjoint runs at once -- one copy of the graph, not one
        per run (a capture replaces a run per step and launching thread). ``runs``: (first,
        last, dur_ns) each."""
        n = self.nodes
        ids = n["id"].to_numpy()
        lane, seq = n["lane"].to_numpy(), n["seq"].to_numpy()
        pos = pd.Index(ids)
        into = np.full(len(n), -1, np.int64)   # per node: the run's node it merges into
        rows, durs = [], []
        for first, last, dur_ns in runs:
            a, b = pos.get_loc(first), pos.get_loc(last)
            if lane[a] != lane[b]:
                raise ValueError("replace_run: first and last are on different lanes")
            into[(lane == lane[a]) & (seq >= seq[a]) & (seq <= seq[b])] = int(first)
            rows.append(a)
            durs.append(int(dur_ns))
        g = self.copy()
        nodes = g.nodes
        # the runs' first nodes become the launches: their columns written whole (``loc``
        # by row labels was ~5 ms a column at 110 k nodes)
        for col, value in (("kind", kind), ("name", name), ("cat", "launch")):
            v = nodes[col].to_numpy(object).copy()
            v[rows] = value
            nodes[col] = pd.Series(v, index=nodes.index, dtype=object)
        for col in ("dur_ns", "cost_ns"):
            v = nodes[col].to_numpy().copy()
            v[rows] = durs
            nodes[col] = v
        e = g.edges
        src = e["src"].to_numpy().copy()
        dst = e["dst"].to_numpy().copy()
        ps, pd_ = positions(ids.astype(np.int64, copy=False), src.astype(np.int64, copy=False),
                            dst.astype(np.int64, copy=False))
        in_s = (ps >= 0) & (into[np.maximum(ps, 0)] >= 0)
        in_d = (pd_ >= 0) & (into[np.maximum(pd_, 0)] >= 0)
        src[in_s] = into[ps[in_s]]
        dst[in_d] = into[pd_[in_d]]
        lag = e["lag_ns"].to_numpy(np.int64).copy()
        lag[in_s] = np.maximum(lag[in_s], 0)
        g.edges = pd.DataFrame({"src": src, "dst": dst, "kind": e["kind"].to_numpy(),
                                "lag_ns": lag})
        g.edges = g.edges[g.edges["src"] != g.edges["dst"]].reset_index(drop=True)
        g.nodes = nodes[~((into >= 0) & (ids != into))].reset_index(drop=True)
        return g

    def edge_table(self) -> pd.DataFrame:
        """Every edge, the implicit lane-order ones included (kind ``lane_order``)."""
        n = self.nodes
        order = np.lexsort((n["seq"].to_numpy(), n["lane"].to_numpy()))
        lane = n["lane"].to_numpy()[order]
        ids = n["id"].to_numpy()[order]
        nxt = np.flatnonzero(lane[1:] == lane[:-1]) + 1
        lo = pd.DataFrame({"src": ids[nxt - 1], "dst": ids[nxt], "kind": "lane_order",
                           "lag_ns": n["gap_ns"].to_numpy(np.int64)[order][nxt]})
        return pd.concat([lo, self.edges], ignore_index=True)


def _join_through(ins: pd.DataFrame, outs: pd.DataFrame, gone: set) -> pd.DataFrame:
    """Edges pred -> succ for every path pred -> (removed nodes) -> succ."""
    cols = ["src", "dst", "kind", "lag_ns"]
    if not len(ins) or not len(outs):
        return pd.DataFrame({c: [] for c in cols}).astype({"src": np.int64, "dst": np.int64,
                                                           "lag_ns": np.int64})
    out_by = {}
    for s, d, k, l in outs[cols].itertuples(index=False):
        out_by.setdefault(s, []).append((d, k, l))
    rows = []
    stack = [(s, d, l) for s, d, l in ins[["src", "dst", "lag_ns"]].itertuples(index=False)]
    seen = 0
    while stack and seen < 1_000_000:
        s, mid, l0 = stack.pop()
        seen += 1
        for d, k, l in out_by.get(mid, ()):
            if d in gone:
                stack.append((s, d, l0 + l))
            else:
                rows.append((s, d, k, l0 + l))
    return pd.DataFrame(rows, columns=cols).astype({"src": np.int64, "dst": np.int64,
                                                    "lag_ns": np.int64})


# -- building ------------------------------------------------------------------------------

def build_graph(ev: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame, *,
                step_pattern: str | None = None, max_nodes: int = MAX_NODES,
                op_step: np.ndarray | None = None) -> StepGraph:
    """The graph of the analysed ``steps`` (``steps.find_steps`` rows, or one whole-trace
    pseudo-step with pid -1) from the window's events ``ev`` and GPU ops ``ops``
    (``steps.gpu_ops``). Above ``max_nodes`` a contiguous run of steps from the first is
    built (``sampled``)."""
    if op_step is None:
        op_step = step_of_gpu_ops(steps, ops) if len(ops) else np.empty(0, np.int64)
    whole = not len(steps) or bool((steps["pid"].to_numpy() < 0).all())
    api = np.flatnonzero(kind_in(ev, ("runtime", "driver")))
    sel_steps, t0, t1, sampled = _replayed_steps(ev, ops, steps, op_step, api, whole,
                                                 max_nodes)
    notes = []
    if sampled:
        notes.append(f"sampled: {len(sel_steps)} of {len(steps)} steps replayed "
                     f"(over {max_nodes} nodes)")
    ts_all = ev["ts"].to_numpy(np.int64)
    # GPU ops of the replayed steps, and older ones still running when they begin
    o_ts, o_end = ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    if whole:
        o_keep = (o_end > t0) & (o_ts < t1)
    else:
        chosen = np.isin(op_step, sel_steps["index"].to_numpy())
        o_keep = chosen | ((op_step < 0) & (o_ts < t1) & (o_end > t0)) | \
            ((op_step >= 0) & ~chosen & (o_ts < t0) & (o_end > t0))
    gops = ops[o_keep].reset_index(drop=True)
    g_step_idx = op_step[o_keep] if len(op_step) else np.empty(0, np.int64)
    # host calls inside [t0, t1)
    api = api[(ts_all[api] >= t0) & (ts_all[api] < t1)]
    host, api_node_of_row = _host_nodes(ev, api, sel_steps if not whole else None, t0, t1,
                                        step_pattern)
    _mark_staging(ev, host)
    gpu = _gpu_nodes(gops)
    nodes, lanes = _assemble(host, gpu)
    n_host = len(host["ts"])
    gpu_ids = np.arange(n_host, n_host + len(gops), dtype=np.int64)
    edges = []
    launch_id = _launch_ids(ev, gops, api_node_of_row)
    _gpu_lags(nodes, gops, gpu_ids, launch_id, edges)
    _drain_edges(ev, nodes, gops, gpu_ids, host, edges)
    _thread_handoffs(nodes, host, edges)
    # steps of nodes: host by where they start in their process, GPU ops by their launch
    st_tab = sel_steps if not whole else steps
    step_col = np.full(len(nodes["id"]), -1, np.int64)
    if not whole and len(st_tab):
        local = pd.Index(st_tab["index"].to_numpy())
        hk = assign_steps(steps, host["pid"], host["ts"])
        step_col[:n_host] = np.where(hk >= 0, local.get_indexer(hk), -1)
        step_col[n_host:] = np.where(g_step_idx >= 0, local.get_indexer(g_step_idx), -1)
    elif whole:
        step_col[:] = 0
    nodes["step"] = step_col
    edge_df = _edge_frame(edges)
    graph_steps = _step_frame(st_tab, host, whole, t0, t1)
    node_df = pd.DataFrame({k: (pd.Series(v, dtype=object) if v.dtype == object else v)
                            for k, v in nodes.items()})
    origin = int(min(t0, int(node_df["ts_ns"].min()) if len(node_df) else t0))
    if whole and not (host["what"] == "step").any():
        notes.append("no steps: the window is replayed as one")
    return StepGraph(nodes=node_df, edges=edge_df, lanes=lanes, steps=graph_steps,
                     origin_ns=origin, sampled=sampled, steps_total=len(steps), notes=notes)


def _replayed_steps(ev, ops, steps, op_step, api, whole, max_nodes):
    """(steps to replay, t0, t1, sampled): every analysed step, or the first ones whose
    calls and GPU ops (about two nodes a call) fit ``max_nodes``."""
    ts = ev["ts"].to_numpy(np.int64)
    if whole:
        end = ts + ev["dur"].to_numpy(np.int64)
        lo = int(ts.min()) if len(ts) else 0
        hi = int(end.max()) if len(ts) else 0
        return steps, lo, hi, False
    s = steps.sort_values(["start", "pid"], kind="stable")
    n = len(s)
    per = np.zeros(n, np.int64)
    pos = pd.Index(s["index"].to_numpy())
    if len(api):
        k = assign_steps(steps, ev["pid"].to_numpy(np.int64)[api], ts[api])
        k = pos.get_indexer(k[k >= 0])
        per += 2 * np.bincount(k, minlength=n)[:n]
    if len(op_step):
        k = pos.get_indexer(op_step[op_step >= 0])
        per += np.bincount(k[k >= 0], minlength=n)[:n]
    take = n
    if per.sum() > max_nodes:
        take = max(1, int(np.searchsorted(np.cumsum(per), max_nodes, side="right")))
    chosen = s.iloc[:take].reset_index(drop=True)
    t0 = int(chosen["start"].min())
    t1 = int(chosen["end"].max())
    return chosen, t0, t1, take < n


def _host_nodes(ev, api, sel_steps, t0, t1, step_pattern):
    """Host lanes: per thread its (outermost) runtime/driver calls, the steps' start / end
    markers, and the stretches of host work between them. Returns (column dict, map from
    event row -> node position for every call row, nested ones to their container)."""
    ts_all = ev["ts"].to_numpy(np.int64)
    dur_all = ev["dur"].to_numpy(np.int64)
    pid_all = ev["pid"].to_numpy(np.int64)
    tid_all = ev["tid"].to_numpy(np.int64)
    key_api = attr.thread_key(pid_all[api].copy(), tid_all[api].copy())
    # markers
    if sel_steps is not None and len(sel_steps):
        m_pid = np.repeat(sel_steps["pid"].to_numpy(np.int64), 2)
        m_tid = np.repeat(sel_steps["tid"].to_numpy(np.int64), 2)
        m_ts = np.column_stack([sel_steps["start"].to_numpy(np.int64),
                                sel_steps["end"].to_numpy(np.int64)]).reshape(-1)
        m_which = np.tile(np.array([0, 1]), len(sel_steps))   # 0: begin, 1: end
        m_step = np.repeat(np.arange(len(sel_steps)), 2)
    else:
        m_pid = m_tid = m_ts = m_which = m_step = np.empty(0, np.int64)
    key_m = attr.thread_key(m_pid.copy(), m_tid.copy())
    # points: calls (row >= 0) and markers (row = -1 - marker index), ordered per thread
    p_key = np.concatenate([key_api, key_m])
    p_ts = np.concatenate([ts_all[api], m_ts])
    p_end = np.concatenate([ts_all[api] + dur_all[api], m_ts])
    p_row = np.concatenate([api, -1 - np.arange(len(m_ts))])
    p_marker = np.r_[np.zeros(len(api), bool), np.ones(len(m_ts), bool)]
    order = np.lexsort((~p_marker, p_ts, p_key))   # a marker before a call at the same ts
    p_key, p_ts, p_end, p_row, p_marker = (a[order] for a in (p_key, p_ts, p_end, p_row,
                                                              p_marker))
    first = np.r_[True, p_key[1:] != p_key[:-1]] if len(p_key) else np.zeros(0, bool)
    # nested calls (inside the previous call on their thread) fold into their container
    reach = seg_cummax(first, p_end)
    prev_reach = np.r_[NEG, reach[:-1]] if len(reach) else reach
    nested = ~first & (p_ts < prev_reach) & ~p_marker
    # a marker inside a call moves to the call's end (the step boundary fell inside it)
    inside = ~first & (p_ts < prev_reach) & p_marker
    p_ts = np.where(inside, prev_reach, p_ts)
    p_end = np.where(inside, prev_reach, p_end)
    keep = ~nested
    container = np.maximum.accumulate(np.where(keep, np.arange(len(keep)), 0)) \
        if len(keep) else keep.astype(np.int64)
    k_key, k_ts, k_end, k_row, k_mark = (a[keep] for a in (p_key, p_ts, p_end, p_row,
                                                           p_marker))
    k_first = np.r_[True, k_key[1:] != k_key[:-1]] if len(k_key) else np.zeros(0, bool)
    # stretches between consecutive points of a thread
    gap_s = k_end[:-1]
    gap_e = k_ts[1:]
    has = (~k_first[1:]) & (gap_e > gap_s)
    st_after = np.flatnonzero(has)   # stretch after point i (between i and i + 1)
    s_ts, s_end = gap_s[has], gap_e[has]
    s_key = k_key[1:][has]
    cat, name = _label_stretches(ev, s_key, s_ts, s_end, step_pattern)
    # interleave points and stretches per thread in time order
    n_p, n_s = len(k_ts), len(s_ts)
    pos_p = np.arange(n_p) + np.searchsorted(st_after, np.arange(n_p), side="left")
    pos_s = st_after + 1 + np.arange(n_s)
    total = n_p + n_s
    col = {k: None for k in ("key", "ts", "end", "row", "what", "name", "cat")}
    key = np.empty(total, np.int64)
    key[pos_p], key[pos_s] = k_key, s_key
    ts = np.empty(total, np.int64)
    ts[pos_p], ts[pos_s] = k_ts, s_ts
    end = np.empty(total, np.int64)
    end[pos_p], end[pos_s] = k_end, s_end
    row = np.full(total, -1, np.int64)
    row[pos_p] = k_row
    what = np.empty(total, object)
    what[pos_s] = "stretch"
    what[pos_p] = labels(("call", "step"), k_mark)
    names = np.empty(total, object)
    names[pos_s] = name
    cats = np.empty(total, object)
    cats[pos_s] = cat
    is_call = what == "call"
    call_rows = row[is_call]
    names[is_call] = _names_at(ev, call_rows)
    call_cat = host_classes(ev, call_rows, step_pattern) if len(call_rows) else \
        np.empty(0, np.int64)
    lut = np.array(list(_HOST_CATS) + ["launch"], object)   # any negative class: a launch
    cats[is_call] = lut[np.where(call_cat >= 0, call_cat, len(_HOST_CATS))]
    mk = np.flatnonzero(what == "step")
    mi = -1 - row[mk]
    names[mk] = labels(("step end", "step begin"), m_which[mi] == 0) if len(mk) else []
    cats[mk] = "step"
    marker_of = np.full(len(m_ts), -1, np.int64)
    marker_of[mi] = mk
    col.update(key=key, ts=ts, end=end, row=row, what=what, name=names, cat=cats)
    col["pid"] = key >> 32
    col["tid"] = key & 0xFFFFFFFF
    col["tid"] = np.where(col["tid"] >= 1 << 31, col["tid"] - (1 << 32), col["tid"])
    col["marker_of"] = marker_of        # marker index -> position
    col["marker_step"] = m_step
    col["marker_which"] = m_which
    # event row -> node position, nested calls to their container
    node_of_point = np.empty(len(p_row), np.int64)
    node_of_point[keep] = pos_p
    node_of_point[~keep] = node_of_point[container[~keep]] if (~keep).any() else []
    rows_map = pd.Series(node_of_point[~p_marker], index=p_row[~p_marker])
    return col, rows_map


def seg_cummax(first: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Running max of ``x`` restarting where ``first`` is True."""
    if not len(x):
        return x.copy()
    g = np.cumsum(first) - 1
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo + 1
    if span * (int(g[-1]) + 1) < 2**62:
        off = g * span - lo
        return np.maximum.accumulate(x + off) - off
    out = x.copy()
    b = np.flatnonzero(first).tolist() + [len(x)]
    for a, c in zip(b[:-1], b[1:]):
        out[a:c] = np.maximum.accumulate(x[a:c])
    return out


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values)`` of an object array of strings (codes in order of first
    appearance) by a dict: several times faster than pandas' object hash table. Anything
    but strings (a null) goes to pandas."""
    seen: dict = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values.tolist()), np.int64,
                        len(values))
    if not all(type(v) is str for v in seen):
        return pd.factorize(values, sort=False)
    uniq = np.empty(len(seen), object)
    uniq[:] = list(seen)
    return codes, uniq


def str_at(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col.astype(str).to_numpy(object)[rows]`` without converting the whole column: a
    categorical column is read through its codes (a null reads "nan", as astype gives)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[rows]
        cats = np.asarray(list(col.cat.categories.astype(str)) + ["nan"], object)
        return cats[codes]
    return col.iloc[rows].astype(str).to_numpy(object)


def host_classes(ev: pd.DataFrame, rows: np.ndarray, step_pattern) -> np.ndarray:
    """``attribution.classify_host`` of ``ev``'s ``rows``, taking only the columns it reads
    (a row subset of the whole frame copies every column; the threads tell a gloo worker's
    socket sends, communication, from the program's own)."""
    cols = [c for c in ("name", "kind", "domain", "pid", "tid") if c in ev]
    return attr.classify_host(ev[cols].iloc[rows], step_pattern)


def _names_at(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    return _name_reader(ev)(rows)


def _name_reader(ev: pd.DataFrame):
    """``_names_at(ev, rows)`` as a function of ``rows``, the categories' strings made once."""
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        all_codes = col.cat.codes.to_numpy()
        cats = np.asarray(col.cat.categories.astype(str), object)

        def read(rows):
            codes = all_codes[rows]
            return np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else "", "")
        return read
    return lambda rows: col.to_numpy(object)[rows].astype(str)


def _label_stretches(ev, s_key, s_ts, s_end, step_pattern):
    """(category, name) of each host stretch: the first category (priority order) whose
    rows on its thread cover the stretch's middle, named by the innermost such row."""
    n = len(s_ts)
    cat = filled(n, "untraced")
    name = filled(n, "untraced")
    if not n:
        return cat, name
    rows = np.flatnonzero(kind_in(ev, ("cpu_op", "python", "annotation", "osrt")))
    if not len(rows):
        return cat, name
    c = host_classes(ev, rows, step_pattern)
    c = c.astype(np.int8)   # -1 or an index of the 11 CPU categories: 1 B a host row, not 8
    ok = c >= 0
    rows, c = rows[ok], c[ok]
    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    key = attr.thread_key(ev["pid"].to_numpy()[rows], ev["tid"].to_numpy()[rows])   # fresh
    mid = s_ts + (s_end - s_ts) // 2
    done = np.zeros(n, bool)
    # the rows come in ts order (the event table's): a thread's rows need no sort, and
    # their names are read only at the rows picked (not an object array of every host row)
    in_order = bool((ts[1:] >= ts[:-1]).all()) if len(ts) > 1 else True
    names_at = _name_reader(ev)
    for ci, cname in enumerate(_HOST_CATS):
        sel = np.flatnonzero(c == ci)
        if not len(sel):
            continue
        for k in np.unique(key[sel]).tolist():
            mine = sel[key[sel] == k]
            want = np.flatnonzero(~done & (s_key == k))
            if not len(want):
                continue
            o = mine if in_order else mine[np.argsort(ts[mine], kind="stable")]
            st, en = ts[o], end[o]
            reach_i = _argcummax(en)
            j = np.searchsorted(st, mid[want], side="right") - 1
            valid = j >= 0
            jj = np.maximum(j, 0)
            inner = valid & (en[jj] > mid[want])
            outer = valid & (en[reach_i[jj]] > mid[want])
            hit = inner | outer
            pick = np.where(inner, jj, reach_i[jj])
            w = want[hit]
            cat[w] = cname
            name[w] = names_at(rows[o[pick[hit]]])
            done[w] = True
    return cat, name


def _argcummax(x: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``x``."""
    if not len(x):
        return np.zeros(0, np.int64)
    m = np.maximum.accumulate(x)
    is_new = np.r_[True, x[1:] >= m[:-1]]
    del m
    idx = np.where(is_new, np.arange(len(x)), 0)
    return np.maximum.accumulate(idx)


def _strings(col: pd.Series) -> np.ndarray:
    """A string column as an object array, one Python string per distinct value."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories.astype(str), object)
        codes = col.cat.codes.to_numpy()
        out = np.empty(len(codes), object)
        ok = codes >= 0
        out[ok] = cats[codes[ok]]
        out[~ok] = ""
        return out
    return col.astype(str).to_numpy(object)


def _distinct(col: pd.Series, strings: np.ndarray) -> tuple[np.ndarray, list]:
    """(code per row, distinct values) of a string column read by ``_strings``: a
    categorical's own codes (hashing every row's string costs more than the rest)."""
    if not len(strings):
        return np.zeros(0, np.int64), []
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy().astype(np.int64)
        cats = [str(c) for c in col.cat.categories] + [""]   # -1 (null) reads "" there
        return np.where(codes >= 0, codes, len(cats) - 1), cats
    inv, uniq = factorize(strings)
    return inv, list(uniq)


def _gpu_nodes(gops: pd.DataFrame) -> dict:
    kind = _strings(gops["kind"])
    names = _strings(gops["name"])
    inv, uniq = _distinct(gops["name"], names)
    k = labels(("gpu_kernel", "gpu_copy", "gpu_memset"),
               np.where(kind == "memcpy", 1, np.where(kind == "memset", 2, 0)))
    is_nccl = np.array([any(t in s for t in _NCCL) for s in uniq], bool)   # once per name
    nccl = is_nccl[inv.reshape(-1)] if len(uniq) else np.zeros(0, bool)
    k[nccl & (k == "gpu_kernel")] = "collective"
    return {"ts": gops["ts"].to_numpy(np.int64), "end": gops["end"].to_numpy(np.int64),
            "pid": gops["pid"].to_numpy(np.int64), "device": gops["device"].to_numpy(np.int64),
            "stream": gops["stream"].to_numpy(np.int64), "kind": k, "name": names,
            "corr": gops["correlation"].to_numpy(np.int64)}


def str_values(col: pd.Series) -> np.ndarray:
    """``col.astype(str).to_numpy(object)`` (read-only). A node column of strings only (the
    graph's kind / name / cat) gives its own string objects, 8 B a row: astype(str) made a
    new Python string per row (89 MB for the 865 k nodes of one rank's levers' graph of a
    252 k-kernel nsys export). Anything else (a null, a number) converts as astype does."""
    if col.dtype == object:
        a = col.to_numpy(object)
        if pd.api.types.infer_dtype(a, skipna=False) == "string":
            return a
    return col.astype(str).to_numpy(object)


def positions(ids: np.ndarray, *wanted: np.ndarray) -> list[np.ndarray]:
    """``pd.Index(ids).get_indexer(w)`` for each ``w`` in ``wanted`` (-1: not there). Node
    ids are unique and dense from 0 (graph.py numbers them): a lookup table answers without
    the hash table pandas builds on every call; other ids go to pandas."""
    n = len(ids)
    if n and int(ids.min()) >= 0 and int(ids.max()) < 4 * n + 1024:
        lut = np.full(int(ids.max()) + 1, -1, np.int64)
        lut[ids] = np.arange(n)
        if int(np.count_nonzero(lut >= 0)) == n:   # unique, as get_indexer requires
            out = []
            for w in wanted:
                ok = (w >= 0) & (w < len(lut))
                pos = np.full(len(w), -1, np.int64)
                pos[ok] = lut[w[ok]]
                out.append(pos)
            return out
    index = pd.Index(ids)
    return [index.get_indexer(w) for w in wanted]


def on_gpu_lane(lanes: pd.DataFrame, lane: np.ndarray) -> np.ndarray:
    """Per node: its lane is a GPU stream's (``lanes.set_index("lane")["what"]``
    reindexed by ``lane`` == "gpu": a lane not in ``lanes`` is not), by a search in the
    few lanes instead of an object Series of every node."""
    ids = lanes["lane"].to_numpy(np.int64)
    gpu = lanes["what"].to_numpy(object) == "gpu"
    if len(np.unique(ids)) != len(ids):   # as reindex: duplicate lanes are an error
        raise ValueError("cannot reindex on an axis with duplicate labels")
    o = np.argsort(ids, kind="stable")
    ids, gpu = ids[o], gpu[o]
    at = np.minimum(np.searchsorted(ids, lane), max(len(ids) - 1, 0))
    return (ids[at] == lane) & gpu[at] if len(ids) else np.zeros(len(lane), bool)


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` are the same buffer seen alike (shape, dtype, strides, address): a
    column the graph's copies share, which a cache can recognise without comparing it."""
    return (a.shape == b.shape and a.dtype == b.dtype and a.strides == b.strides
            and a.ctypes.data == b.ctypes.data)


def filled(n: int, value: str) -> np.ndarray:
    """An object array of ``n`` references to ``value``: ``np.full(n, value, object)``
    converts the string per element, one Python string (~55 B) per row."""
    out = np.empty(n, object)
    out.fill(value)
    return out


def labels(choices: tuple, codes: np.ndarray) -> np.ndarray:
    """``choices[codes]`` as an object array of the choices' own strings: ``np.where`` of
    string literals then ``astype(object)`` makes one Python string per row (~55 B each,
    ~70 MB for a million-node graph), where this stores 8 B per row."""
    return np.asarray(choices, object)[np.asarray(codes).astype(np.intp)]


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True)`` of an integer matrix (rows in
    lexicographic order), by one lexsort: np.unique's row view sorts far slower."""
    order = np.lexsort(a.T[::-1])
    s = a[order]
    new = np.r_[True, (s[1:] != s[:-1]).any(axis=1)]
    codes = np.empty(len(a), np.int64)
    codes[order] = np.cumsum(new) - 1
    return s[new], codes


def _assemble(host: dict, gpu: dict):
    """Node columns (host first, then GPU ops) and the lane table."""
    hk = host["key"]
    h_lanes, h_lane = np.unique(hk, return_inverse=True)
    if len(gpu["ts"]):
        trip = np.column_stack([gpu["pid"], gpu["device"], gpu["stream"],
                                _overlap_sublanes(gpu)])
        uq, codes = _unique_rows(trip)
        uniq = [tuple(r) for r in uq.tolist()]
    else:
        codes, uniq = np.zeros(0, np.int64), []
    n_hl = len(h_lanes)
    lane = np.concatenate([h_lane.astype(np.int64), codes.astype(np.int64) + n_hl])
    h_kind = labels(("host", "step"), host["what"] == "step")
    h_cat = host["cat"]
    is_call = host["what"] == "call"
    h_kind[is_call] = labels(("launch", "sync_wait"), h_cat[is_call] == "sync")
    h_kind[is_call & (h_cat == "alloc")] = "host"
    stretch = host["what"] == "stretch"
    h_kind[stretch & (h_cat == "dataloader")] = "dataloader"
    h_kind[stretch & (h_cat == "comm_wait")] = "collective"
    n_h, n_g = len(host["ts"]), len(gpu["ts"])
    ts = np.concatenate([host["ts"], gpu["ts"]])
    end = np.concatenate([host["end"], gpu["end"]])
    seq = np.zeros(n_h + n_g, np.int64)
    order = np.lexsort((np.arange(n_h + n_g), ts, lane))
    first = np.r_[True, lane[order][1:] != lane[order][:-1]]
    ranks = np.arange(n_h + n_g) - np.maximum.accumulate(np.where(first, np.arange(n_h + n_g), 0))
    seq[order] = ranks
    # host lanes keep their point order (a marker sorts before a call at the same ts)
    seq[:n_h] = np.arange(n_h)
    nodes = {
        "id": np.arange(n_h + n_g, dtype=np.int64), "step": np.full(n_h + n_g, -1, np.int64),
        "lane": lane, "seq": seq,
        "kind": np.concatenate([h_kind, gpu["kind"]]).astype(object),
        "name": np.concatenate([host["name"], gpu["name"]]).astype(object),
        "cat": np.concatenate([h_cat, np.full(n_g, "", object)]).astype(object),
        "ts_ns": ts, "dur_ns": end - ts,
        "corr": np.concatenate([np.full(n_h, -1, np.int64), gpu["corr"]]),
        "cost_ns": end - ts, "gap_ns": np.zeros(n_h + n_g, np.int64),
        "release_ns": np.full(n_h + n_g, NEG, np.int64)}
    # a lane's first node starts no earlier than it did: what held it lies outside the graph
    o = order[first]
    nodes["release_ns"][o] = ts[o]
    h_pid = h_lanes >> 32
    h_tid = h_lanes & 0xFFFFFFFF
    h_tid = np.where(h_tid >= 1 << 31, h_tid - (1 << 32), h_tid)
    uniq = [u[:3] for u in uniq]   # the sub-lane only splits; lanes name the stream
    g_pid = np.array([u[0] for u in uniq], np.int64)
    g_dev = np.array([u[1] for u in uniq], np.int64)
    g_str = np.array([u[2] for u in uniq], np.int64)
    lanes = pd.DataFrame({
        "lane": np.arange(n_hl + len(uniq), dtype=np.int64),
        "what": ["host"] * n_hl + ["gpu"] * len(uniq),
        "pid": np.r_[h_pid, g_pid].astype(np.int64),
        "tid": np.r_[h_tid, np.full(len(uniq), -1)].astype(np.int64),
        "device": np.r_[np.full(n_hl, -1), g_dev].astype(np.int64),
        "stream": np.r_[np.full(n_hl, -1), g_str].astype(np.int64)})
    lanes["label"] = [f"thread {t}" if w == "host" else f"GPU {d} stream {s}"
                      for w, t, d, s in zip(lanes["what"], lanes["tid"], lanes["device"],
                                            lanes["stream"])]
    return nodes, lanes


def _overlap_sublanes(gpu: dict) -> np.ndarray:
    """0 for the ops of a stream that run one after another; an op that starts before the
    stream's earlier ops ended (a concurrent kernel nsys recorded on one stream) gets a lane
    of its own (1, 2, ...), so stream order never pushes it later than it ran."""
    n = len(gpu["ts"])
    out = np.zeros(n, np.int64)
    key = (gpu["pid"] * 1_000_003 + gpu["device"]) * 1_000_003 + gpu["stream"]
    o = np.lexsort((gpu["ts"], key))
    k, ts, end = key[o], gpu["ts"][o], gpu["end"][o]
    first = np.r_[True, k[1:] != k[:-1]]
    reach = seg_cummax(first, end)
    over = ~first & (ts < np.r_[NEG, reach[:-1]])
    out[o[over]] = 1 + np.arange(int(over.sum()))
    return out


def _launch_ids(ev, gops, rows_map: pd.Series) -> np.ndarray:
    """Node id of each GPU op's launch call (same pid + correlation), -1 when not in the
    graph."""
    out = np.full(len(gops), -1, np.int64)
    if not len(gops) or not len(rows_map):
        return out
    rt = rows_map.index.to_numpy(np.int64)
    corr = ev["correlation"].to_numpy()[rt].astype(np.int64)
    pid = ev["pid"].to_numpy()[rt].astype(np.int64)
    ok = corr >= 0
    rt, corr, pid = rt[ok], corr[ok], pid[ok]
    node = rows_map.to_numpy()[ok]
    a, b = pair_keys(pid, corr, gops["pid"].to_numpy(np.int64),
                     gops["correlation"].to_numpy(np.int64))
    first = ~a.duplicated(keep="first")
    k = a[first].get_indexer(b)
    hit = (k >= 0) & (gops["correlation"].to_numpy(np.int64) >= 0)
    out[hit] = node[first][k[hit]]
    return out


def _gpu_lags(nodes, gops, gpu_ids, launch_id, edges) -> None:
    """Launch, event-wait and engine edges of the GPU ops, and their lags: the edge that
    released the op (the latest of its predecessors) keeps the measured residual, so the
    unmodified replay starts it when it started; the others keep a typical latency."""
    n = len(gpu_ids)
    if not n:
        return
    ts = nodes["ts_ns"][gpu_ids]
    end = ts + nodes["dur_ns"][gpu_ids]
    lane = nodes["lane"][gpu_ids]
    seq = nodes["seq"][gpu_ids]
    order = np.lexsort((seq, lane))
    prev = np.full(n, -1, np.int64)
    same = np.r_[False, lane[order][1:] == lane[order][:-1]]
    prev[order[same]] = order[np.flatnonzero(same) - 1]
    P = np.where(prev >= 0, end[np.maximum(prev, 0)], NEG)
    has_l = launch_id >= 0
    l_end = np.where(has_l, nodes["ts_ns"][np.maximum(launch_id, 0)]
                     + nodes["dur_ns"][np.maximum(launch_id, 0)], NEG)
    l_dur = np.where(has_l, nodes["dur_ns"][np.maximum(launch_id, 0)], 0)
    # event waits: started > SKEW after both, right after an op on another stream ended
    W, w_src = _event_waits(gops, ts, end, np.maximum(P, l_end))
    # copy engines: the previous copy of the same direction on the device, other stream
    E, e_src = _engine_prev(gops, nodes["kind"][gpu_ids], ts, end, lane)
    ready = np.vstack([P, l_end, W, E])
    bind = np.argmax(ready, axis=0)
    best = ready[bind, np.arange(n)]
    resid = ts - best
    lane_gap = np.where((bind == 0) & (prev >= 0), np.maximum(resid, 0), 0)
    # an op its launch (or another stream) released still pays the GPU's own gap after its
    # stream's previous op once the host is ahead: the lane's typical queued gap, never more
    # than the idle it had, so the unmodified replay is unchanged (h200/queue: ~1.07 us
    # between back-to-back kernels, in the plain run on every one of 800 a step)
    nodes["gap_ns"][gpu_ids] = lane_gap + _front_end_gaps(lane, bind, prev, ts - P, lane_gap)
    # launch lags: measured (may be negative: a kernel can start before its call returns,
    # never before the call began) where the launch released the op, else the typical one
    raw = ts - l_end
    bound_l = has_l & (bind == 1)
    typ = int(np.median(raw[bound_l])) if bound_l.any() else 0
    lag_l = np.where(bound_l, raw, np.minimum(raw, typ))
    lag_l = np.maximum(lag_l, -l_dur)
    li = np.flatnonzero(has_l)
    edges.append(("launch", launch_id[li], gpu_ids[li], lag_l[li]))
    wi = np.flatnonzero(w_src >= 0)
    edges.append(("event_wait", gpu_ids[w_src[wi]], gpu_ids[wi],
                  np.where(bind[wi] == 2, np.maximum(resid[wi], 0), 0)))
    ei = np.flatnonzero(e_src >= 0)
    edges.append(("engine", gpu_ids[e_src[ei]], gpu_ids[ei],
                  np.where(bind[ei] == 3, np.maximum(resid[ei], 0), 0)))
    # no predecessor in the graph at all (a launch before the window): start as measured;
    # a stream's first op with its launch in the graph starts when that lets it
    none = (prev < 0) & ~has_l & (w_src < 0) & (e_src < 0)
    nodes["release_ns"][gpu_ids] = NEG
    nodes["release_ns"][gpu_ids[none]] = ts[none]
    # an op whose launch is outside the graph but that follows its stream: released then
    nol = ~has_l & (prev >= 0) & (bind == 0)
    nodes["gap_ns"][gpu_ids[nol]] = np.maximum(resid[nol], 0)


def _front_end_gaps(lane, bind, prev, idle, lane_gap) -> np.ndarray:
    """Per GPU op not released by its stream's previous op: that lane's median gap between
    queued ops (the GPU-side gap), capped at the idle it had after the previous op; 0 for
    the others and on a lane with no queued op. Only queued gaps the attribution calls
    GPU-side (<= ``EVENT_LATENCY_NS``) count: a queued op that started milliseconds after
    its predecessor waited on something untraced, not on the GPU's front end (HTA's
    trace_compare: queued gaps of 0.1-108 ms put a 2.6 ms "front-end gap" on a kernel)."""
    out = np.zeros(len(lane), np.int64)
    queued = (bind == 0) & (prev >= 0)
    other = ~queued & (prev >= 0)
    learn = queued & (lane_gap <= attr.EVENT_LATENCY_NS)
    if not learn.any() or not other.any():
        return out
    for ln in np.unique(lane[other]).tolist():
        q = learn & (lane == ln)
        if not q.any():
            continue
        typ = int(np.median(lane_gap[q]))
        m = other & (lane == ln)
        out[m] = np.clip(idle[m], 0, typ)
    return out


def _event_waits(gops, ts, end, ready) -> tuple[np.ndarray, np.ndarray]:
    n = len(ts)
    W = np.full(n, NEG, np.int64)
    src = np.full(n, -1, np.int64)
    late = ts - ready > SKEW_NS
    if not late.any():
        return W, src
    pid, dev = gops["pid"].to_numpy(np.int64), gops["device"].to_numpy(np.int64)
    stream = gops["stream"].to_numpy(np.int64)
    # a stream waits only on an event recorded before the wait was queued: the other op
    # was launched no later than the waiting one
    lts = gops["launch_ts"].to_numpy(np.int64)
    for (p, d), idx in pd.DataFrame({"p": pid, "d": dev}).groupby(["p", "d"]).indices.items():
        o = idx[np.argsort(end[idx], kind="stable")]
        oe = end[o]
        want = idx[late[idx]]
        if not len(want):
            continue
        k = np.searchsorted(oe, ts[want], side="right") - 1
        for back in range(3):   # skip ops of the waiting op's own stream
            kk = np.maximum(k - back, 0)
            cand = o[kk]
            ok = (k - back >= 0) & (stream[cand] != stream[want]) & \
                (oe[kk] >= ts[want] - EVENT_LATENCY_NS) & (src[want] < 0) & \
                (oe[kk] > ready[want]) & ((lts[cand] < 0) | (lts[want] < 0) |
                                         (lts[cand] <= lts[want]))
            W[want[ok]] = end[cand[ok]]
            src[want[ok]] = cand[ok]
    return W, src


def _engine_prev(gops, kind, ts, end, lane) -> tuple[np.ndarray, np.ndarray]:
    n = len(ts)
    E = np.full(n, NEG, np.int64)
    src = np.full(n, -1, np.int64)
    cp = np.flatnonzero(kind == "gpu_copy")
    if len(cp) < 2 or "copy_kind" not in gops:
        return E, src
    d = gops["copy_kind"].astype(str).to_numpy(object)[cp] if "copy_kind" in gops else None
    key = pd.DataFrame({"p": gops["pid"].to_numpy()[cp], "d": gops["device"].to_numpy()[cp],
                        "k": d})
    for _, idx in key.groupby(["p", "d", "k"]).indices.items():
        o = cp[idx][np.argsort(ts[cp[idx]], kind="stable")]
        prev, cur = o[:-1], o[1:]
        other = lane[prev] != lane[cur]
        E[cur[other]] = end[prev[other]]
        src[cur[other]] = prev[other]
    return E, src


def _mark_staging(ev, host) -> None:
    """The calls that stage a host copy through a bounce buffer (``attribution``'s
    ``_staging_calls``: pageable >= 64 KiB, or unmarked >= 1 MiB held through half its copy)
    take the category ``copy_staging``: their time is the copy's host cost, which grows with
    its bytes, not a launch's. A sync by name (a synchronous ``cudaMemcpy``) stays ``sync``."""
    is_call = host["what"] == "call"
    if not is_call.any():
        return
    hrows = attr._host_rows(ev)
    st_at, _, _ = attr._staging_calls(ev, hrows, attr._kind_index(ev, hrows))
    if not len(st_at):
        return
    pos = np.flatnonzero(is_call)
    staged = np.isin(host["row"][pos], hrows[st_at]) & (host["cat"][pos] != "sync")
    host["cat"][pos[staged]] = "copy_staging"


def _drain_edges(ev, nodes, gops, gpu_ids, host, edges) -> None:
    """Blocking calls: GPU op drained -> the call returns. The call's cost becomes its time
    after that op ended (its wake-up); the drain edge's lag is the same, so the unmodified
    replay returns it when it returned."""
    is_call = host["what"] == "call"
    if not is_call.any() or not len(gpu_ids):
        return
    pos = np.flatnonzero(is_call)
    rows = host["row"][pos]
    c_ts, c_end = host["ts"][pos], host["end"][pos]
    c_pid = host["pid"][pos]
    explicit = host["cat"][pos] == "sync"
    # by behaviour: pageable copies that returned when their copy was done
    hrows = attr._host_rows(ev)
    pg_at, _ = attr._pageable_calls(ev, hrows, attr._kind_index(ev, hrows))
    pageable = np.isin(rows, hrows[pg_at]) if len(pg_at) else np.zeros(len(rows), bool)
    g_ts = nodes["ts_ns"][gpu_ids]
    g_end = g_ts + nodes["dur_ns"][gpu_ids]
    g_pid = gops["pid"].to_numpy(np.int64)
    g_dev = gops["device"].to_numpy(np.int64)
    l_ts = gops["launch_ts"].to_numpy(np.int64)
    launched_ts = np.where(l_ts >= 0, l_ts, g_ts)
    behaves = _ran_through_drain(c_ts, c_end, c_pid, g_ts, g_end, g_pid, g_dev)
    # a kernel launch never waits for the GPU to drain (only for a queue slot: ``full``
    # below); one that returned as the GPU went idle did so by coincidence
    behaves &= ~kernel_launch_calls(host["name"][pos])
    blocking = explicit | pageable | behaves
    # a launch into a full queue returns when a slot frees: when a GPU op ends
    full = _queue_full(c_ts, c_end, c_pid, host["cat"][pos] == "launch", g_end, g_pid) & \
        ~blocking
    src, dst, lag = [], [], []
    _full_edges(pos, c_ts, c_end, c_pid, full, g_end, g_pid, launched_ts, gpu_ids, nodes,
                src, dst, lag)
    for p in np.unique(c_pid[blocking]).tolist():
        mine = np.flatnonzero(g_pid == p)
        if not len(mine):
            continue
        o = mine[np.argsort(g_end[mine], kind="stable")]
        oe = g_end[o]
        for i in np.flatnonzero(blocking & (c_pid == p)).tolist():
            hi = np.searchsorted(oe, c_end[i] + SKEW_NS, side="right") - 1
            lo = np.searchsorted(oe, c_ts[i] - SKEW_NS, side="left")
            j = hi
            while j >= lo and launched_ts[o[j]] >= c_ts[i]:
                j -= 1   # work queued after the call began is not what it waited for
            if j < lo:
                continue
            gi = o[j]
            waited = int(oe[j]) - int(c_ts[i])
            if waited <= 0:
                continue
            node = pos[i]
            tail = max(int(c_end[i]) - max(int(c_ts[i]), int(oe[j])), 0)
            nodes["cost_ns"][node] = tail
            nodes["kind"][node] = "sync_wait"
            src.append(gpu_ids[gi])
            dst.append(node)
            # measured wake-up; down to -SKEW_NS where the clocks disagree by that much
            lag.append(int(c_end[i]) - int(oe[j]))
    if src:
        edges.append(("drain", np.array(src, np.int64), np.array(dst, np.int64),
                      np.array(lag, np.int64)))


def _thread_handoffs(nodes, host, edges) -> None:
    """A helper thread's burst of work handed over by another thread (PyTorch's autograd
    thread running backward while the main thread waits in ``backward()``), found by
    behaviour: the helper idles (a host stretch >= ``IDLE_MIN_NS``), its burst starts within
    ``WAKE_MAX_NS`` after a node of another thread ended, that thread then sits in one node
    >= ``IDLE_MIN_NS`` long, and that node ends within ``JOIN_MAX_NS`` after the burst's last
    node. Edges: that node -> the burst's first (``thread``, start, lag measured) and the
    burst's last -> the waiting node (``join``: it ends no earlier, lag measured). The
    helper's idle stretch and the waiting node cost nothing of their own (kind ``wait``):
    each ends when the other thread lets it."""
    what = host["what"]
    n_h = len(what)
    if not n_h:
        return
    key, ts, end = host["key"], host["ts"], host["end"]
    lanes = np.unique(key)
    if len(lanes) < 2:
        return
    stepped = set(np.unique(key[what == "step"]).tolist())
    long_ = (what == "stretch") & (end - ts >= IDLE_MIN_NS)
    kinds = nodes["kind"]
    src, dst, lag, j_src, j_dst, j_lag = [], [], [], [], [], []
    for y in lanes.tolist():
        if y in stepped:
            continue
        mine = np.flatnonzero(key == y)
        idle = mine[long_[mine]]
        others = np.flatnonzero((key != y) & np.isin(key, list(stepped) or lanes))
        if not len(idle) or not len(others):
            continue
        o_end_order = others[np.argsort(end[others], kind="stable")]
        o_ends = end[o_end_order]
        bounds = idle.tolist() + [mine[-1] + 1]
        found = []
        for i1, i2 in zip(bounds[:-1], bounds[1:]):
            first, last = i1 + 1, i2 - 1   # the burst: between two idle stretches
            if first > last or key[first] != y or key[last] != y:
                continue
            k = np.searchsorted(o_ends, ts[first], side="right") - 1
            if k < 0 or ts[first] - o_ends[k] > WAKE_MAX_NS:
                continue
            w = o_end_order[k]
            wait = w + 1
            if wait >= n_h or key[wait] != key[w] or what[wait] != "stretch" or \
                    end[wait] - ts[wait] < IDLE_MIN_NS or end[wait] < end[last] or \
                    end[wait] - end[last] > JOIN_MAX_NS or kinds[wait] != "host" or \
                    host["cat"][wait] not in WAIT_CATS or host["cat"][i1] not in WAIT_CATS:
                continue
            found.append((i1, w, first, last, wait))
        # all or nothing per helper thread: a burst left anchored at its measured time would
        # hold a waiting thread that the others let go earlier
        if len(found) < len(idle):
            continue
        for i1, w, first, last, wait in found:
            src.append(w)
            dst.append(first)
            lag.append(int(ts[first] - end[w]))
            j_src.append(last)
            j_dst.append(wait)
            j_lag.append(int(end[wait] - end[last]))
            for idle_node in (i1, wait):   # waits, not work: no lever shortens them
                nodes["cost_ns"][idle_node] = 0
                nodes["kind"][idle_node] = "wait"
                nodes["cat"][idle_node] = "wait"
    if src:
        edges.append(("thread", np.array(src, np.int64), np.array(dst, np.int64),
                      np.array(lag, np.int64)))
        edges.append(("join", np.array(j_src, np.int64), np.array(j_dst, np.int64),
                      np.array(j_lag, np.int64)))


def _queue_full(c_ts, c_end, c_pid, is_launch, g_end, g_pid) -> np.ndarray:
    """Launch calls that blocked on a full queue: they lasted ``QUEUE_FULL_MIN_NS`` or more
    (a launch takes a few us) and returned within [op end - SKEW_NS, op end +
    QUEUE_FULL_WAKE_NS] of a GPU op of their process that ended while they ran."""
    out = np.zeros(len(c_ts), bool)
    cand = np.flatnonzero(is_launch & ((c_end - c_ts) >= QUEUE_FULL_MIN_NS))
    if not len(cand):
        return out
    for p in np.unique(c_pid[cand]).tolist():
        ends = np.sort(g_end[g_pid == p])
        mine = cand[c_pid[cand] == p]
        if not len(ends) or not len(mine):
            continue
        k = np.searchsorted(ends, c_end[mine] + SKEW_NS, side="right") - 1
        kk = np.maximum(k, 0)
        out[mine] = (k >= 0) & (ends[kk] >= c_end[mine] - QUEUE_FULL_WAKE_NS) & \
            (ends[kk] > c_ts[mine])
    return out


def _full_edges(pos, c_ts, c_end, c_pid, full, g_end, g_pid, launched_ts, gpu_ids, nodes,
                src, dst, lag) -> None:
    """Drain edges of the launches that waited for a free slot: the op whose end freed it
    (launched before the call began: never the call's own op) -> the call; the call's cost
    is its time after that op ended."""
    if not full.any():
        return
    cost = nodes["cost_ns"]
    for p in np.unique(c_pid[full]).tolist():
        mine = np.flatnonzero(g_pid == p)
        o = mine[np.argsort(g_end[mine], kind="stable")]
        oe = g_end[o]
        lts = launched_ts[o]
        idx = np.flatnonzero(full & (c_pid == p))
        ct, ce = c_ts[idx], c_end[idx]
        j = np.searchsorted(oe, ce + SKEW_NS, side="right") - 1
        # step back over ops queued after the call began that ended near its return (they
        # cannot have freed its slot); few calls need it: a loop over those alone
        jj = np.maximum(j, 0)
        back = np.flatnonzero((j >= 0) & (lts[jj] >= ct) & (oe[jj] >= ce - QUEUE_FULL_WAKE_NS))
        if len(back):
            oe_l, lts_l = oe.tolist(), lts.tolist()
            for t in back.tolist():
                x, c0, c1 = int(j[t]), int(ct[t]), int(ce[t])
                while x >= 0 and lts_l[x] >= c0 and oe_l[x] >= c1 - QUEUE_FULL_WAKE_NS:
                    x -= 1
                j[t] = x
        jj = np.maximum(j, 0)
        ok = (j >= 0) & (oe[jj] >= ce - QUEUE_FULL_WAKE_NS) & (oe[jj] > ct)
        at = pos[idx[ok]]
        w = ce[ok] - oe[jj[ok]]
        # each call once: its cost is its time after that op ended, if shorter
        cost[at] = np.minimum(np.maximum(w, 0), cost[at])
        src.extend(gpu_ids[o[jj[ok]]].tolist())
        dst.extend(at.tolist())
        lag.extend(w.tolist())


KERNEL_LAUNCH_RX = re.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel|"
                              r"^(?:cuda|cu|hip)GraphLaunch")


def kernel_launch_calls(names) -> np.ndarray:
    """Which runtime calls launch a kernel (or a graph): cudaLaunchKernel, cuLaunchKernelEx,
    hipModuleLaunchKernel, cudaGraphLaunch, ...; the pattern tested once per distinct name
    (a missing one, -1 from the factorize, matches nothing, as its str() "None" / "nan")."""
    codes, uniq = pd.factorize(np.asarray(names, object), sort=False)
    lut = np.array([bool(KERNEL_LAUNCH_RX.match(str(n))) for n in uniq] + [False], bool)
    return lut[codes]


def _ran_through_drain(c_ts, c_end, c_pid, g_ts, g_end, g_pid, g_dev) -> np.ndarray:
    """Calls (not named syncs) that were running before the GPU's last op began and returned
    within [idle start - SKEW_NS, idle start + SYNC_TOLERANCE_NS]: they waited for the GPU."""
    out = np.zeros(len(c_ts), bool)
    long = (c_end - c_ts) >= BLOCKING_MIN_NS
    if not long.any() or not len(g_ts):
        return out
    for (p, d), idx in pd.DataFrame({"p": g_pid, "d": g_dev}).groupby(["p", "d"]).indices.items():
        o = idx[np.argsort(g_ts[idx], kind="stable")]
        s, e = g_ts[o], g_end[o]
        reach = np.maximum.accumulate(e)
        last_i = _argcummax(e)
        idle = np.r_[s[1:] > reach[:-1], True]   # the GPU goes idle after op i
        gs = reach[idle]
        g_first = s[last_i[idle]]                # when the op that ended there began
        cand = np.flatnonzero(long & (c_pid == p))
        if not len(cand) or not len(gs):
            continue
        k = np.searchsorted(gs, c_end[cand] - SYNC_TOLERANCE_NS, side="left")
        kk = np.minimum(k, len(gs) - 1)
        ok = (k < len(gs)) & (c_end[cand] >= gs[kk] - SKEW_NS) & \
            (c_end[cand] <= gs[kk] + SYNC_TOLERANCE_NS) & (c_ts[cand] <= g_first[kk])
        out[cand[ok]] = True
    return out


def _edge_frame(edges) -> pd.DataFrame:
    if not edges:
        return pd.DataFrame({"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64),
                             "kind": np.empty(0, object), "lag_ns": np.empty(0, np.int64)})
    return pd.DataFrame({
        "src": np.concatenate([e[1] for e in edges]).astype(np.int64),
        "dst": np.concatenate([e[2] for e in edges]).astype(np.int64),
        "kind": pd.Series(np.concatenate([filled(len(e[1]), e[0]) for e in edges]),
                          dtype=object),
        "lag_ns": np.concatenate([e[3] for e in edges]).astype(np.int64)})


def _step_frame(st_tab, host, whole, t0, t1) -> pd.DataFrame:
    if whole:
        return pd.DataFrame({"index": [0], "step": [-1], "pid": [-1], "start_ns": [t0],
                             "end_ns": [t1], "dur_ns": [t1 - t0], "begin": [-1], "end": [-1]})
    n = len(st_tab)
    mo = host["marker_of"]
    which, mstep = host["marker_which"], host["marker_step"]
    begin = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    begin[mstep[which == 0]] = mo[which == 0]
    end[mstep[which == 1]] = mo[which == 1]
    return pd.DataFrame({
        "index": np.arange(n, dtype=np.int64), "step": st_tab["step"].to_numpy(np.int64),
        "pid": st_tab["pid"].to_numpy(np.int64),
        "start_ns": st_tab["start"].to_numpy(np.int64),
        "end_ns": st_tab["end"].to_numpy(np.int64), "dur_ns": st_tab["dur"].to_numpy(np.int64),
        "begin": begin, "end": end})
