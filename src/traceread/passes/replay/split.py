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

import numpy as np
import pandas as pd

from .. import attribution as attr
from ..common import kind_in
from .graph import NEG, StepGraph

SPLIT_MIN_NS = 20_000
_CATS = attr.CPU_CATEGORIES
_CALL_RX = r"^(?:cuda|cu|hip|nccl|cudnn|cublas)[A-Z]"


def stretches(graph: StepGraph) -> np.ndarray:
    """Mask of the host stretches (host work between calls, not calls or step markers)."""
    n = graph.nodes
    host_lane = n["lane"].isin(graph.lanes.loc[graph.lanes["what"] == "host", "lane"])
    k = n["kind"].isin(("host", "dataloader", "collective"))
    call = n["name"].astype(str).str.contains(_CALL_RX, regex=True)
    return (host_lane & k & ~call).to_numpy()


def split(graph: StepGraph, ev: pd.DataFrame, step_pattern: str | None = None,
          min_ns: int = SPLIT_MIN_NS) -> StepGraph:
    """A new graph whose long host stretches are cut at their outermost ops (module doc)."""
    n = graph.nodes
    cand = stretches(graph) & (n["dur_ns"].to_numpy(np.int64) >= min_ns)
    if not cand.any():
        return graph.copy()
    rows = np.flatnonzero(kind_in(ev, ("cpu_op", "python", "annotation")))
    if not len(rows):
        return graph.copy()
    cat = attr.classify_host(ev.iloc[rows], step_pattern)
    kinds = ev["kind"].astype(str).to_numpy(object)[rows]
    keep = cat != -2       # the step ranges cover everything: never a piece
    keep &= ~pd.Series(ev["name"].astype(str).to_numpy(object)[rows]).str.match(
        r"^ProfilerStep#").to_numpy()
    rows, cat, kinds = rows[keep], cat[keep], kinds[keep]
    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    key = attr.thread_key(ev["pid"].to_numpy()[rows].copy(), ev["tid"].to_numpy()[rows].copy())
    names = ev["name"].astype(str).to_numpy(object)[rows]
    lanes = graph.lanes.set_index("lane")
    by_thread = {}
    for k in np.unique(key).tolist():
        o = np.flatnonzero(key == k)
        o = o[np.lexsort((-end[o], ts[o]))]
        # outermost: not inside the reach of an earlier row of the thread
        reach = np.maximum.accumulate(end[o])
        outer = np.r_[True, ts[o][1:] >= reach[:-1]]
        o = o[outer]
        by_thread[k] = (ts[o], end[o], o)
    new_rows, drop = [], []
    next_id = int(n["id"].max()) + 1
    cols = {c: n[c].to_numpy() for c in ("lane", "ts_ns", "dur_ns", "step", "seq", "gap_ns",
                                         "release_ns", "id")}
    lane_key = dict(zip(lanes.index.tolist(), attr.thread_key(
        lanes["pid"].to_numpy(np.int64).copy(), lanes["tid"].to_numpy(np.int64).copy()).tolist()))
    for i in np.flatnonzero(cand).tolist():
        lane = int(cols["lane"][i])
        k = lane_key.get(lane)
        if k not in by_thread:
            continue
        s0 = int(cols["ts_ns"][i])
        s1 = s0 + int(cols["dur_ns"][i])
        t, e, o = by_thread[k]
        lo = int(np.searchsorted(e, s0, side="right"))
        hi = int(np.searchsorted(t, s1, side="left"))
        if hi - lo < 1:
            continue
        pieces = _pieces(s0, s1, t[lo:hi], e[lo:hi], o[lo:hi], cat, kinds, names)
        if len(pieces) < 2:
            continue
        drop.append(i)
        last = len(pieces) - 1
        for j, (a, b, c, nm) in enumerate(pieces):
            new_rows.append((next_id, int(cols["step"][i]), lane, int(cols["seq"][i]), j,
                             "dataloader" if c == "dataloader" else
                             "collective" if c == "comm_wait" else "host",
                             nm, c, a, b - a, -1, b - a,
                             int(cols["gap_ns"][i]) if j == 0 else 0,
                             int(cols["release_ns"][i]) if j == 0 else int(NEG),
                             int(cols["id"][i]), j == last))
            next_id += 1
    if not new_rows:
        return graph.copy()
    g = graph.copy()
    add = pd.DataFrame(new_rows, columns=["id", "step", "lane", "seq", "sub", "kind", "name",
                                          "cat", "ts_ns", "dur_ns", "corr", "cost_ns",
                                          "gap_ns", "release_ns", "was", "last"])
    old = g.nodes.drop(index=drop).assign(sub=0)
    nodes = pd.concat([old, add[list(old.columns)]], ignore_index=True)
    # lane order: the pieces take their stretch's place
    order = np.lexsort((nodes["sub"].to_numpy(), nodes["seq"].to_numpy(),
                        nodes["lane"].to_numpy()))
    lane_o = nodes["lane"].to_numpy()[order]
    first = np.r_[True, lane_o[1:] != lane_o[:-1]]
    rank = np.arange(len(order)) - np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    seq = np.empty(len(order), np.int64)
    seq[order] = rank
    nodes["seq"] = seq
    g.nodes = nodes.drop(columns=["sub"]).astype({c: n[c].dtype for c in n.columns
                                                   if c in ("id", "step", "lane", "seq",
                                                            "ts_ns", "dur_ns", "corr",
                                                            "cost_ns", "gap_ns",
                                                            "release_ns")})
    # edges of a split stretch: into its first piece, out of its last
    firsts = add[add["sub"] == 0].set_index("was")["id"]
    lasts = add[add["last"]].set_index("was")["id"]
    e = g.edges.copy()
    e["dst"] = e["dst"].map(firsts).fillna(e["dst"]).astype(np.int64)
    e["src"] = e["src"].map(lasts).fillna(e["src"]).astype(np.int64)
    g.edges = e
    return g


def _pieces(s0, s1, t, e, o, cat, kinds, names) -> list[tuple[int, int, str, str]]:
    """(start, end, category, name) pieces tiling [s0, s1): the ops clipped to it, and the
    untraced stretches between them."""
    out = []
    at = s0
    for a, b, r in zip(t.tolist(), e.tolist(), o.tolist()):
        a, b = max(a, s0), min(b, s1)
        if b <= a:
            continue
        if a > at:
            out.append((at, a, "untraced", "untraced"))
        c = int(cat[r])
        label = _CATS[c] if c >= 0 else "wait" if c == -3 else \
            ("python" if kinds[r] == "python" else "cpu_op")
        out.append((a, b, label, str(names[r])))
        at = b
    if at < s1:
        out.append((at, s1, "untraced", "untraced"))
    return out
