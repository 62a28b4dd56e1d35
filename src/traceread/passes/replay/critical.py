"""The critical path of a replayed step: the chain of nodes that set its end.

Walking back from a step's end marker, each node was released by exactly one thing: its
lane's previous node, a cross-lane edge (the launch call that queued a kernel, the op another
stream waited for), or -- for a blocking call -- the GPU op it waited for. Each link covers the
time from its predecessor's end to its own end, so the links of a step add up to the step's
replayed duration exactly. A link is labelled by what held the step there (``LABELS``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .graph import NEG, StepGraph
from .sim import Schedule

LABELS = ("host op", "launch", "kernel", "copy", "sync wait", "data load", "collective",
          "another rank")
TOP = 10
MAX_SEGMENTS = 3000


def node_labels(graph: StepGraph) -> np.ndarray:
    """What each node holds a step with, as one of ``LABELS``."""
    kind = graph.nodes["kind"].to_numpy(object)
    cat = graph.nodes["cat"].to_numpy(object)
    out = np.full(len(kind), "host op", object)
    out[kind == "launch"] = "launch"
    out[(kind == "gpu_kernel") | (kind == "gpu_memset")] = "kernel"
    out[kind == "gpu_copy"] = "copy"
    out[(kind == "sync_wait") | (cat == "sync")] = "sync wait"
    out[(kind == "dataloader") | (cat == "dataloader")] = "data load"
    out[(kind == "collective") | (cat == "comm_wait")] = "collective"
    return out


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
    ids = n["id"].to_numpy(np.int64)
    pos = pd.Index(ids)
    start, end = schedule.start_ns, schedule.end_ns
    cost = n["cost_ns"].to_numpy(np.int64)
    lane = n["lane"].to_numpy(np.int64)
    order = np.lexsort((n["seq"].to_numpy(np.int64), lane))
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
    is_drain = kind == "drain"
    s_src, s_kind = _binding(N, src, dst, val, ok & ~is_drain, kind)
    d_src, _ = _binding(N, src, dst, val, ok & is_drain, kind)
    labels = node_labels(graph)
    names = n["name"].to_numpy(object)
    a = schedule.ready_ns
    b = schedule.drain_ns
    lane_lab = graph.lanes.set_index("lane")["label"].to_dict()
    by_label: dict = {}
    by_name: dict = {}
    per_step = []
    segments = []
    total = 0
    for srow in graph.steps.itertuples(index=False):
        if srow.begin < 0 or srow.end < 0:
            v, t0 = int(np.argmax(end)), int(start.min())
        else:
            bi, ei = pos.get_indexer([srow.begin, srow.end])
            if bi < 0 or ei < 0:
                continue
            v, t0 = int(ei), int(start[bi])
        links = _walk(v, t0, start, end, cost, prev, gap, a, b, s_src, s_kind, d_src)
        mine: dict = {}
        for node, lo, hi, lab in links:
            lab = lab or labels[node]
            d = hi - lo
            if d <= 0:
                continue
            mine[lab] = mine.get(lab, 0) + d
            key = (lab, str(names[node]))
            c = by_name.setdefault(key, [0, 0])
            c[0] += d
            c[1] += 1
            if len(segments) < MAX_SEGMENTS:
                segments.append({"start_ns": int(lo), "end_ns": int(hi), "label": lab,
                                 "name": str(names[node]),
                                 "lane": str(lane_lab.get(int(lane[node]), "")),
                                 "step": int(srow.step)})
        for k, d in mine.items():
            by_label[k] = by_label.get(k, 0) + d
        total += sum(mine.values())
        per_step.append({"step": int(srow.step), "by_label": {k: int(d) for k, d in
                                                               sorted(mine.items(),
                                                                      key=lambda x: -x[1])}})
    top = sorted(by_name.items(), key=lambda x: -x[1][0])[:TOP]
    return {
        "total_ns": int(total),
        "by_label": {k: int(d) for k, d in sorted(by_label.items(), key=lambda x: -x[1])},
        "top": [{"label": k[0], "name": k[1], "ns": int(v[0]), "count": int(v[1]),
                 "pct": round(100.0 * v[0] / total, 2) if total else 0.0} for k, v in top],
        "steps": per_step,
        "segments": _merge(segments)}


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


def _walk(v, t0, start, end, cost, prev, gap, a, b, s_src, s_kind, d_src):
    """Links (node, from, to, label or None for the node's own) back from node ``v`` until
    time ``t0``."""
    links = []
    guard = 0
    while v >= 0 and end[v] > t0 and guard < 10_000_000:
        guard += 1
        ev_, sv = int(end[v]), int(start[v])
        if d_src[v] >= 0 and b[v] != NEG and b[v] >= ev_ and b[v] > sv + cost[v]:
            u = int(d_src[v])
            links.append((v, max(int(end[u]), t0), ev_, "sync wait"))
            v = u
            continue
        lane_ready = int(end[prev[v]]) + int(gap[v]) if prev[v] >= 0 else int(NEG)
        if a[v] != NEG and a[v] >= lane_ready and s_src[v] >= 0 and a[v] >= sv:
            u = int(s_src[v])
            lo = max(int(end[u]), t0)
            links.append((v, max(sv, t0), ev_, None))
            if sv > lo:
                links.append((v, lo, sv, "launch" if s_kind[v] == "launch" else None))
            v = u
            continue
        if prev[v] >= 0 and lane_ready >= (a[v] if a[v] != NEG else lane_ready):
            u = int(prev[v])
            links.append((v, max(int(end[u]), t0), ev_, None))
            v = u
            continue
        links.append((v, max(sv, t0), ev_, None))   # released at its measured start
        break
    return links


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
