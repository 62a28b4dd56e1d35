"""Host stretches cut at the outermost traced ops inside them, for the levers.

``build_graph`` makes one node of the host time between two runtime calls (a *stretch*),
labelled by what covers its middle. That is enough to replay it, but a lever changes one
op, not a stretch: the DataLoader's 16 ms at the top of a step share a stretch with the
Python after it, and a CPU-only step is one stretch from its start to its end. ``split``
cuts each host stretch of at least ``SPLIT_MIN_NS`` at the boundaries of the outermost
traced ops (operators, annotations, Python frames; the step ranges themselves excluded)
on its thread: one node per op piece, one per untraced piece between them, each labelled
with its own category (``attribution.classify_host``). The pieces tile the stretch with no
gap, so the unmodified replay is unchanged.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...table import scan_name as scan
from .. import attribution as attr
from ..common import kind_in, name_hits, rows_of
from .graph import NEG, StepGraph, factorize, filled, host_classes, str_at

SPLIT_MIN_NS = 20_000
_CATS = attr.CPU_CATEGORIES
_CALL_RX = r"^(?:cuda|cu|hip|nccl|cudnn|cublas)[A-Z]"
# the profiler's step ranges, as ``str.match`` read them (whole names, not a scan's prefix)
_STEP_MARK_RX = re.compile(r"^ProfilerStep#")


def stretches(graph: StepGraph) -> np.ndarray:
    """Mask of the host stretches (host work between calls, not calls or step markers)."""
    n = graph.nodes
    host_lane = n["lane"].isin(graph.lanes.loc[graph.lanes["what"] == "host", "lane"])
    k = n["kind"].isin(("host", "dataloader", "collective"))
    out = (host_lane & k).to_numpy(bool, copy=True)
    at = np.flatnonzero(out)   # only these nodes' names matched (the rest are out anyway)
    # each distinct name once (a regex a node was ~8 ms at 110 k nodes); a null is no call
    codes, uniq = factorize(n["name"].to_numpy(object)[at])
    rx = re.compile(_CALL_RX)
    call = np.array([bool(rx.search(str(u))) for u in uniq] + [False], bool)
    out[at] = ~call[codes]
    return out


def split(graph: StepGraph, ev: pd.DataFrame, step_pattern: str | None = None,
          min_ns: int = SPLIT_MIN_NS) -> StepGraph:
    """A new graph whose long host stretches are cut at their outermost ops (module doc)."""
    n = graph.nodes
    # a stretch whose cost is not its duration was given a role by the builder (a thread
    # waiting for another, a helper's idle between bursts): it stays whole
    cand = stretches(graph) & (n["dur_ns"].to_numpy(np.int64) >= min_ns) & \
        (n["cost_ns"].to_numpy(np.int64) == n["dur_ns"].to_numpy(np.int64))
    if not cand.any():
        return graph.copy()
    rows = np.flatnonzero(kind_in(ev, ("cpu_op", "python", "annotation")))
    if not len(rows):
        return graph.copy()
    cat = host_classes(ev, rows, step_pattern)
    kinds = str_at(ev["kind"], rows)
    names = str_at(ev["name"], rows)
    keep = cat != -2       # the step ranges cover everything: never a piece
    keep &= ~name_hits(ev["name"], _STEP_MARK_RX, "match")[rows]
    rows, cat, kinds, names = rows[keep], cat[keep], kinds[keep], names[keep]
    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    key = attr.thread_key(ev["pid"].to_numpy()[rows].copy(), ev["tid"].to_numpy()[rows].copy())
    lanes = graph.lanes.set_index("lane")
    # one string object per label, not one per row (a million-row window kept ~55 B a row)
    nc = len(_CATS)
    label = np.asarray(list(_CATS) + ["wait", "python", "cpu_op"], object)[
        np.where(cat >= 0, np.maximum(cat, 0), np.where(cat == -3, nc, np.where(
            kinds == "python", nc + 1, nc + 2)))] if len(cat) else np.zeros(0, object)
    lane_key = dict(zip(lanes.index.tolist(), attr.thread_key(
        lanes["pid"].to_numpy(np.int64).copy(), lanes["tid"].to_numpy(np.int64).copy()).tolist()))
    if not (graph.lanes["what"] == "gpu").any():
        # a host-only step: cut at the ops inside the Python frames that hold them
        inner = ~_holds_ops(kinds, key, ts, end)
        rows, label, kinds, names, ts, end, key = (x[inner] for x in
                                                   (rows, label, kinds, names, ts, end, key))
    outer = _outermost_by_thread(key, ts, end)
    P = _piece_table(n, np.flatnonzero(cand), lane_key, outer, ts, end, label, names)
    drop = P.pop("drop")
    if not drop:
        return graph.copy()
    return _with_pieces(graph, P, drop)


def _with_pieces(graph: StepGraph, P: dict, drop: list) -> StepGraph:
    """A copy of ``graph`` whose stretches ``drop`` (node rows) are replaced by their pieces
    ``P`` (``_piece_table``), laid in their stretch's place on its lane, the edges into a
    stretch taken by its first piece and those out of it by its last."""
    n = graph.nodes
    g = graph.copy()
    m = len(P["step"])
    next_id = int(n["id"].max()) + 1
    P["id"] = np.arange(next_id, next_id + m, dtype=np.int64)
    P["corr"] = np.full(m, -1, np.int64)
    P["cost_ns"] = P["dur_ns"].copy()
    # the kept nodes then the pieces, column by column (a frame's drop + concat + astype
    # was ~20 ms at 110 k nodes): the same rows, values and dtypes
    kept = np.ones(len(n), bool)
    kept[n.index.get_indexer(drop)] = False
    cols = {}
    for c in n.columns:
        a = n[c].to_numpy()
        b = np.asarray(P[c], dtype=a.dtype if a.dtype != object else object)
        cols[c] = np.concatenate([a[kept], b])
    sub = np.r_[np.zeros(int(kept.sum()), np.int64), P["sub"]]
    # lane order: the pieces take their stretch's place
    order = np.lexsort((sub, cols["seq"], cols["lane"]))
    lane_o = cols["lane"][order]
    first = np.r_[True, lane_o[1:] != lane_o[:-1]]
    rank = np.arange(len(order)) - np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    seq = np.empty(len(order), np.int64)
    seq[order] = rank
    cols["seq"] = seq.astype(n["seq"].dtype, copy=False)
    # object columns stay object (pandas 3 would infer its str dtype from the arrays)
    g.nodes = pd.DataFrame({c: pd.Series(v, dtype=object, copy=False) if v.dtype == object
                            else v for c, v in cols.items()}, columns=n.columns)
    # edges of a split stretch: into its first piece, out of its last
    e = g.edges.copy()
    e["dst"] = _renumbered(e["dst"].to_numpy(np.int64), P["was"][P["sub"] == 0],
                           P["id"][P["sub"] == 0])
    e["src"] = _renumbered(e["src"].to_numpy(np.int64), P["was"][P["last"]], P["id"][P["last"]])
    g.edges = e
    return g


def _renumbered(ids: np.ndarray, was: np.ndarray, now: np.ndarray) -> np.ndarray:
    """``ids`` with each of ``was`` (unique) replaced by its ``now``; the others as they
    are (what ``Series.map(...).fillna(ids)`` gave, without its hash table)."""
    out = ids.copy()
    if not len(was) or not len(ids):
        return out
    o = np.argsort(was, kind="stable")
    w, v = was[o], now[o]
    k = np.minimum(np.searchsorted(w, ids), len(w) - 1)
    hit = w[k] == ids
    out[hit] = v[k[hit]]
    return out


def _holds_ops(kinds: np.ndarray, key: np.ndarray, ts: np.ndarray,
               end: np.ndarray) -> np.ndarray:
    """The Python frames with an operator inside them on their thread. On a host-only trace
    such a frame (``run_backward``, a module's ``forward``) is the program's compute, not
    Python's own time: cut at it, the real CPU captures' backward was one 42 ms "python"
    piece the host-work lever moved off the step and a larger batch did not grow; cut at the
    ops inside it, each op is priced as an op and the Python between them stays."""
    out = np.zeros(len(kinds), bool)
    py = np.flatnonzero(kinds == "python")
    ops = np.flatnonzero(kinds == "cpu_op")
    if not len(py) or not len(ops):
        return out
    for k in np.unique(key[py]).tolist():
        starts = np.sort(ts[ops[key[ops] == k]])
        mine = py[key[py] == k]
        if not len(starts):
            continue
        first = np.searchsorted(starts, ts[mine], side="left")
        out[mine] = (first < len(starts)) & (starts[np.minimum(first, len(starts) - 1)] < end[mine])
    return out


def _outermost_by_thread(key: np.ndarray, ts: np.ndarray, end: np.ndarray) -> dict:
    """Per thread key: (starts, ends, rows) of its outermost ops (none inside the reach of
    an earlier op of the thread), sorted by start; they do not overlap, so ends are sorted
    too."""
    out = {}
    for k in np.unique(key).tolist():
        o = np.flatnonzero(key == k)
        o = o[np.lexsort((-end[o], ts[o]))]
        reach = np.maximum.accumulate(end[o])
        o = o[np.r_[True, ts[o][1:] >= reach[:-1]]]
        out[k] = (ts[o], end[o], o)
    return out


_PIECE_COLS = ("step", "lane", "seq", "sub", "kind", "name", "cat", "ts_ns", "dur_ns",
               "gap_ns", "release_ns", "was", "last")


def _piece_table(n: pd.DataFrame, cand: np.ndarray, lane_key: dict, outer: dict,
                 ts: np.ndarray, end: np.ndarray, label: np.ndarray,
                 names: np.ndarray) -> dict:
    """The pieces of every candidate stretch (node rows ``cand``) that cuts into two or more
    (``_pieces``: the outermost ops clipped to it, the untraced time between and after them),
    as column arrays in stretch order, then piece order; ``drop``: the stretches cut.
    Vectorised over all stretches (one Python turn per stretch was most of the pass);
    tests/test_speed_paths.py holds it to the per-stretch loop it replaced."""
    lane = n["lane"].to_numpy(np.int64)[cand]
    s0 = n["ts_ns"].to_numpy(np.int64)[cand]
    s1 = s0 + n["dur_ns"].to_numpy(np.int64)[cand]
    lanes_k = np.asarray(list(lane_key), np.int64)
    keys_k = np.asarray(list(lane_key.values()), np.int64)
    order = np.argsort(lanes_k, kind="stable")
    lanes_k, keys_k = lanes_k[order], keys_k[order]
    pos = np.minimum(np.searchsorted(lanes_k, lane), max(len(lanes_k) - 1, 0))
    known = (lanes_k[pos] == lane) if len(lanes_k) else np.zeros(len(lane), bool)
    key = keys_k[pos] if len(keys_k) else np.zeros(len(lane), np.int64)
    # each stretch's run [lo, hi) of its thread's outermost ops, as positions into the
    # threads' ops laid end to end
    lo = np.zeros(len(cand), np.int64)
    hi = np.zeros(len(cand), np.int64)
    base = 0
    parts_t, parts_e, parts_o = [], [], []
    for k, (t, e, o) in outer.items():
        m = np.flatnonzero(known & (key == k))
        lo[m] = base + np.searchsorted(e, s0[m], side="right")
        hi[m] = base + np.searchsorted(t, s1[m], side="left")
        parts_t.append(t), parts_e.append(e), parts_o.append(o)
        base += len(t)
    T = np.concatenate(parts_t) if parts_t else np.zeros(0, np.int64)
    E = np.concatenate(parts_e) if parts_e else np.zeros(0, np.int64)
    O = np.concatenate(parts_o) if parts_o else np.zeros(0, np.int64)
    cnt = np.maximum(hi - lo, 0)
    # one entry per (stretch, op of its run): the op clipped to the stretch
    who = np.repeat(np.arange(len(cand)), cnt)
    at = np.arange(len(who)) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
    a = np.maximum(T[at], s0[who])
    b = np.minimum(E[at], s1[who])
    ok = b > a
    who, at, a, b = who[ok], at[ok], a[ok], b[ok]
    first = np.r_[True, who[1:] != who[:-1]] if len(who) else np.zeros(0, bool)
    prev = np.where(first, s0[who], np.r_[0, b[:-1]] if len(b) else b)
    gap = a > prev          # untraced time before the op
    # the untraced tail of each stretch: after its last op, or all of it without one
    last_b = s0.copy()
    if len(who):
        end_of = np.r_[who[1:] != who[:-1], True]
        last_b[who[end_of]] = b[end_of]
    tail = last_b < s1
    # the pieces, each with its stretch and its place there: gap 2j, op 2j+1, tail last
    j = np.arange(len(who)) - np.maximum.accumulate(np.where(first, np.arange(len(who)), 0)) \
        if len(who) else np.zeros(0, np.int64)
    g_who, g_pos = who[gap], 2 * j[gap]
    t_who = np.flatnonzero(tail)
    t_pos = np.full(len(t_who), np.iinfo(np.int64).max)
    p_who = np.r_[g_who, who, t_who].astype(np.int64)
    p_pos = np.r_[g_pos, 2 * j + 1, t_pos].astype(np.int64)
    p_a = np.r_[prev[gap], a, last_b[t_who]].astype(np.int64)
    p_b = np.r_[a[gap], b, s1[t_who]].astype(np.int64)
    untraced = np.asarray(["untraced"], object)
    p_cat = np.r_[np.repeat(untraced, len(g_who)), label[O[at]], np.repeat(untraced, len(t_who))]
    p_name = np.r_[np.repeat(untraced, len(g_who)), names[O[at]],
                   np.repeat(untraced, len(t_who))]
    order = np.lexsort((p_pos, p_who))
    p_who, p_a, p_b, p_cat, p_name = (x[order] for x in (p_who, p_a, p_b, p_cat, p_name))
    per = np.bincount(p_who, minlength=len(cand))
    keep = per[p_who] >= 2      # a stretch with one piece stays whole
    p_who, p_a, p_b, p_cat, p_name = (x[keep] for x in (p_who, p_a, p_b, p_cat, p_name))
    start = np.r_[True, p_who[1:] != p_who[:-1]] if len(p_who) else np.zeros(0, bool)
    sub = np.arange(len(p_who)) - np.maximum.accumulate(np.where(start, np.arange(len(p_who)), 0))\
        if len(p_who) else np.zeros(0, np.int64)
    last = np.r_[start[1:], True] if len(p_who) else np.zeros(0, bool)
    node = cand[p_who]
    col = {c: n[c].to_numpy(np.int64)[node] for c in ("step", "seq", "gap_ns", "release_ns",
                                                        "id")}
    kind = filled(len(p_who), "host")   # np.full made a Python string per row
    kind[p_cat == "dataloader"] = "dataloader"
    kind[p_cat == "comm_wait"] = "collective"
    return {"step": col["step"], "lane": n["lane"].to_numpy(np.int64)[node], "seq": col["seq"],
            "sub": sub.astype(np.int64), "kind": kind, "name": p_name, "cat": p_cat,
            "ts_ns": p_a, "dur_ns": p_b - p_a,
            "gap_ns": np.where(start, col["gap_ns"], 0).astype(np.int64),
            "release_ns": np.where(start, col["release_ns"], int(NEG)).astype(np.int64),
            "was": col["id"], "last": last.astype(bool),
            "drop": cand[np.flatnonzero(per >= 2)].tolist()}


# -- the graph the what-if models change (whatif.py) -------------------------------------

PRICE_STEPS = 8   # the levers are priced on at most this many replayed steps (per step)


def priced_graph(graph: StepGraph, ev: pd.DataFrame, step_pattern: str | None = None,
                most: int = PRICE_STEPS) -> StepGraph:
    """The graph the what-if models change: a run of ``most`` replayed steps that stands for
    the window (``sample_steps``) with their host stretches cut at their ops (``split``). It replays
    as the built graph does on those steps; a note says how many steps it holds."""
    return priced_graph_events(graph, ev, step_pattern, most)[0]


# what ``split`` and ``optimizer_regions`` read of the priced steps' events: their rows of
# every column were ~20 MB at 247 MB, held through the replay side job's peak
PRICED_COLS = ("ts", "dur", "kind", "name", "pid", "tid", "domain")


def priced_graph_events(graph: StepGraph, ev: pd.DataFrame, step_pattern: str | None = None,
                        most: int = PRICE_STEPS, measured: np.ndarray | None = None) -> tuple:
    """(``priced_graph``, the events it was split with -- ``within(ev, sampled graph)``, its
    ``PRICED_COLS`` --, and that graph's ``span``): a caller that needs ``within(ev, priced)``
    reuses them when the spans are the same (the split cuts stretches inside their own span)."""
    g, priced = sample_steps(graph, most, measured)
    span = span_of(g)
    g_ev = within(ev[[c for c in PRICED_COLS if c in ev]], g)
    g = split(g, g_ev, step_pattern)
    paired = pair_helper_bursts(g)
    g.notes = list(g.notes) + [f"levers: {priced}"] + \
        ([f"levers: {paired} helper-thread bursts released by the step thread"] if paired else [])
    return g, g_ev, span


HELPER_IDLE_NS = 1_000_000


def pair_helper_bursts(g: StepGraph, first: bool = True) -> int:
    """A helper thread (a host lane with no step markers: autograd's backward thread) idles
    between bursts; in the trace each burst began right after a step thread handed it work.
    A burst the builder left unpaired (no ``thread`` edge) gets one from the step thread's
    node that ended last before it (lag as measured), and the idle before it costs nothing:
    when a lever moves the step thread, the burst moves with it instead of waiting out the
    measured idle. ``first``: the lane's first burst too (what woke it may lie before the
    graph). In place; returns how many bursts were paired."""
    n = g.nodes
    kind = n["kind"].to_numpy(object)
    lane = n["lane"].to_numpy()
    stepped = np.unique(lane[kind == "step"])
    host_lanes = g.lanes.loc[g.lanes["what"] == "host", "lane"].to_numpy()
    helpers = np.setdiff1d(host_lanes, stepped)
    if not len(helpers) or not len(stepped):
        return 0
    pair_first = first
    ts = n["ts_ns"].to_numpy(np.int64)
    end = ts + n["dur_ns"].to_numpy(np.int64)
    cost = n["cost_ns"].to_numpy(np.int64).copy()
    ids = n["id"].to_numpy()
    on_step = np.flatnonzero(np.isin(lane, stepped) & (kind != "step"))
    by_end = on_step[np.argsort(end[on_step], kind="stable")]
    e = g.edges
    has_thread = set(e.loc[e["kind"] == "thread", "dst"].tolist())
    thread_dst = np.fromiter(has_thread, np.int64, len(has_thread))
    end_sorted = end[by_end]
    order = np.lexsort((n["seq"].to_numpy(), lane))
    cat = n["cat"].to_numpy(object)
    add = []
    rel = n["release_ns"].to_numpy(np.int64).copy()
    for h in helpers.tolist():
        seq_idx = order[lane[order] == h]
        if not len(seq_idx):
            continue
        first = int(seq_idx[0])
        if pair_first and rel[first] != NEG and ids[first] not in has_thread:
            # the lane's first burst: the builder holds it at its measured start (what woke
            # it lay outside the graph); a step thread node that ended before it woke it
            k = np.searchsorted(end_sorted, ts[first], side="right") - 1
            if k >= 0:
                add.append((int(ids[by_end[k]]), int(ids[first]), int(ts[first] - end[by_end[k]])))
                rel[first] = NEG
        # each idle stretch (a) and the burst after it (b), all of the lane's at once
        a, b = seq_idx[:-1], seq_idx[1:]
        dur = end[a] - ts[a]
        idle = (kind[a] == "host") & ((cat[a] == "untraced") | (cat[a] == "wait")) & \
            (dur >= HELPER_IDLE_NS) & (cost[a] == dur) & ~np.isin(ids[b], thread_dst)
        k = np.searchsorted(end_sorted, ts[b], side="right") - 1
        ok = idle & (k >= 0)
        src = by_end[k[ok]]
        add += zip(ids[src].tolist(), ids[b[ok]].tolist(), (ts[b[ok]] - end[src]).tolist())
        cost[a[ok]] = 0
    if add:
        n["cost_ns"] = cost
        n["release_ns"] = rel
        g.edges = pd.concat([e, pd.DataFrame({"src": [x for x, _, _ in add],
                                              "dst": [y for _, y, _ in add],
                                              "kind": "thread",
                                              "lag_ns": [z for _, _, z in add]})],
                            ignore_index=True)
    return len(add)


# The sample stands for the window (issue: a sample of the first steps priced gpu/compile.bad
# nsys on a 391 ms mean step for a 516 ms window: "saves 389 ms a step" beside "step -> 2.46
# ms"). A run of steps whose mean measured step is within this share of the window's is
# priced as it is; otherwise the run that covers the window's step times best is taken and
# its steps weighted by how many of the window's steps each stands for.
EVEN_SHARE = 0.02
# Among the runs, the earliest whose cover error (each window step's distance to the nearest
# sampled step, summed) is within this share of the window's total of the best run's.
COVER_SLACK = 0.01
MAX_RUNS_TRIED = 64   # start positions tried (evenly spread) on a long window


def sample_steps(graph: StepGraph, most: int = PRICE_STEPS,
                 measured: np.ndarray | None = None) -> tuple[StepGraph, str]:
    """(graph of a run of ``most`` consecutive replayed steps, "N of M steps") -- every step
    when there are no more: a saving is per step, and each model replays the graph once, so
    a long window is priced on a run of its steps (the replay's own figures keep them all).
    The kept lanes' first nodes start no earlier than they did.

    The run is the first one unless the window's steps are uneven there (``representative``):
    then the run that covers the window's measured step times best, each of its steps
    weighted (``steps["weight"]``) by the window's steps nearest to it in measured time, so
    the sample's weighted mean step -- the step every saving is taken from -- is the
    window's. ``measured``: the steps' measured program steps (``critical.program_spans``
    of the graph's own times; computed when not given), in ``graph.steps``' order."""
    st = graph.steps
    n_all = len(st)
    if n_all <= most or (st["begin"].to_numpy() < 0).all():
        return graph.copy(), f"{n_all} of {n_all} steps"
    by_time = np.argsort(st["start_ns"].to_numpy(np.int64), kind="stable")
    if measured is None:
        measured = measured_steps(graph)
    meas = np.asarray(measured, np.int64)[by_time]
    k, weights = representative(meas, st["pid"].to_numpy(np.int64)[by_time], most)
    keep_st = st.iloc[by_time[k:k + most]]
    lo, hi = int(keep_st["start_ns"].min()), int(keep_st["end_ns"].max())
    n = graph.nodes
    step = n["step"].to_numpy()
    ts = n["ts_ns"].to_numpy(np.int64)
    keep = np.isin(step, keep_st["index"].to_numpy()) | ((step < 0) & (ts >= lo) & (ts < hi))
    # the last kept step's end marker lies at ``hi``: without it that step had no span and
    # the levers were priced on one step fewer than the note said
    keep |= np.isin(n["id"].to_numpy(), keep_st["end"].to_numpy())
    g = graph.copy()
    nodes = n[keep].copy()
    order = np.lexsort((nodes["seq"].to_numpy(), nodes["lane"].to_numpy()))
    lane_o = nodes["lane"].to_numpy()[order]
    first = order[np.r_[True, lane_o[1:] != lane_o[:-1]]]
    rel = nodes["release_ns"].to_numpy(np.int64).copy()
    rel[first] = np.maximum(rel[first], nodes["ts_ns"].to_numpy(np.int64)[first])
    nodes["release_ns"] = rel
    g.nodes = nodes.reset_index(drop=True)
    ids = g.nodes["id"].to_numpy()
    e = graph.edges
    g.edges = e[np.isin(e["src"].to_numpy(), ids) & np.isin(e["dst"].to_numpy(), ids)] \
        .reset_index(drop=True)
    g.steps = keep_st.reset_index(drop=True)
    note = f"{len(keep_st)} of {n_all} steps"
    if weights is not None:
        g.steps["weight"] = weights
        names = keep_st["step"].to_numpy()
        note += (f" (#{names[0]}-#{names[-1]}, each weighted by the window's steps nearest "
                 "to it in measured time)")
    return g, note


def measured_steps(graph: StepGraph) -> np.ndarray:
    """The graph's steps' measured program steps (``critical.program_spans`` of its nodes'
    own times), in ``graph.steps``' order: what ``sample_steps`` weighs the window by."""
    from .critical import program_spans

    ts = graph.nodes["ts_ns"].to_numpy(np.int64)
    return program_spans(graph, ts, ts + graph.nodes["dur_ns"].to_numpy(np.int64))


def representative(meas: np.ndarray, pid: np.ndarray, most: int) -> tuple[int, np.ndarray | None]:
    """(first position of the run of ``most`` steps to price, its steps' weights or None:
    each counts once) over the window's steps in time order, their measured program steps
    ``meas`` (-1: unknown) and processes ``pid``. The first run when its mean is within
    ``EVEN_SHARE`` of the window's (or nothing is known); else the earliest run whose cover
    error is within ``COVER_SLACK`` of the best's, weighted (``_cover``)."""
    ok = meas >= 0
    n = len(meas)
    if n <= most or not ok[:most].any() or not ok.any():
        return 0, None
    mean_all = float(meas[ok].mean())
    head = meas[:most][ok[:most]]
    if abs(float(head.mean()) - mean_all) <= EVEN_SHARE * mean_all:
        return 0, None
    starts = np.unique(np.linspace(0, n - most, min(MAX_RUNS_TRIED, n - most + 1)).round()
                       .astype(np.int64))
    covers = [_cover(meas, pid, ok, int(k), most) for k in starts.tolist()]
    errs = np.array([c[1] for c in covers], float)
    best = float(errs.min())
    at = int(np.flatnonzero(errs <= best + COVER_SLACK * float(meas[ok].sum()))[0])
    return int(starts[at]), covers[at][0]


def _cover(meas: np.ndarray, pid: np.ndarray, ok: np.ndarray, k: int,
           most: int) -> tuple[np.ndarray, float]:
    """(weights of the run's steps, cover error): each window step with a known measured
    step stands with the run's step nearest to it in measured time (of its own process where
    the run has one; ties: the earlier), and the error is the sum of those distances."""
    run = np.arange(k, k + most)
    usable = ok[run]
    if not usable.any():
        return np.ones(most), float("inf")
    d = np.abs(meas[:, None].astype(float) - meas[run][None, :].astype(float))
    d[:, ~usable] = np.inf
    own = pid[:, None] == pid[run][None, :]
    has_own = (own & usable[None, :]).any(axis=1)
    d = np.where(has_own[:, None] & ~own, np.inf, d)
    who = np.argmin(d[ok], axis=1)
    err = float(d[ok][np.arange(len(who)), who].sum())
    w = np.bincount(who, minlength=most).astype(float)
    w[~usable] = 1.0   # a step no measure places: counted once, as before
    return w, err


def span_of(g: StepGraph) -> tuple | None:
    """(first node's start, last node's end) of the graph; None without nodes."""
    if not len(g.nodes):
        return None
    ts = g.nodes["ts_ns"].to_numpy(np.int64)
    return int(ts.min()), int((ts + g.nodes["dur_ns"].to_numpy(np.int64)).max())


def within(ev: pd.DataFrame, g: StepGraph) -> pd.DataFrame:
    """The events that overlap the graph's time span."""
    span = span_of(g)
    if span is None:
        return ev
    lo, hi = span
    t = ev["ts"].to_numpy(np.int64)
    m = (t < hi) & (t + ev["dur"].to_numpy(np.int64) > lo)
    return ev if m.all() else ev[m]


OPTIMIZER_RX = r"^Optimizer\.step#|optimizer\.step"


def optimizer_regions(ev: pd.DataFrame) -> pd.DataFrame:
    """The optimizer steps the annotations mark (``Optimizer.step#Adam.step``): name,
    start_ns, end_ns, and the outermost operators inside each on its thread -- their total
    (ops_ns) and longest (longest_ns) time."""
    cols = ["name", "start_ns", "end_ns", "ops_ns", "longest_ns"]
    if ev is None or not len(ev):
        return pd.DataFrame({c: [] for c in cols})
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):   # its codes: no hashing of every row
        codes, uniq = col.cat.codes.to_numpy(), col.cat.categories
    else:
        codes, uniq = pd.factorize(col.to_numpy(object), sort=False)
    rx = re.compile(OPTIMIZER_RX)
    hit_names = np.array([bool(rx.search(scan(str(u)))) for u in uniq] + [False])
    hit = np.flatnonzero(hit_names[codes] & kind_in(ev, ("annotation", "cpu_op")))
    if not len(hit):
        return pd.DataFrame({c: [] for c in cols})
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ops = rows_of(ev, ("cpu_op",))
    ops = ops[np.argsort(ts[ops], kind="stable")]
    names = np.asarray(uniq, object)
    rows = []
    for i in hit.tolist():
        lo = np.searchsorted(ts[ops], ts[i], side="left")
        hi = np.searchsorted(ts[ops], end[i], side="right")
        idx = ops[lo:hi]
        idx = idx[(pid[idx] == pid[i]) & (tid[idx] == tid[i]) & (end[idx] <= end[i])
                  & (idx != i)]
        total = longest = 0
        if len(idx):
            idx = idx[np.lexsort((-end[idx], ts[idx]))]
            reach = np.maximum.accumulate(end[idx])
            outer = idx[np.r_[True, ts[idx][1:] >= reach[:-1]]]
            d = end[outer] - ts[outer]
            total, longest = int(d.sum()), int(d.max())
        rows.append((str(names[codes[i]]), int(ts[i]), int(end[i]), total, longest))
    return pd.DataFrame(rows, columns=cols)
