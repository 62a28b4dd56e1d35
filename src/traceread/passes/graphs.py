"""CUDA graphs: which GPU work ran as graph replays, and what recording them cost the host.

A *replay* is one graph launch (``cudaGraphLaunch`` / ``hipGraphLaunch`` /
``cuGraphLaunch``) and the GPU work it ran. Traces record it two ways:

* one ``graph`` row per replay (nsys's default ``--cuda-graph-trace=graph``):
  the replay's whole GPU time as one interval, with its graph id;
* node rows: every kernel / copy of the replay as its own row carrying the
  launch's correlation id (torch.profiler / Kineto, nsys ``--cuda-graph-trace=node``).

Replays are keyed by (pid, correlation); a replay's GPU time is the union of
its intervals per device (a graph row: its span, bubbles between nodes
included; node rows: the nodes' union). Graph ids come from nsys (``graph_id``
column); Kineto ids are not read (``-1``): its replays are grouped by launch
call name instead.

*Recording* is host time spent making graphs: stream capture
(``cudaStreamBeginCapture`` .. ``cudaStreamEndCapture`` on one thread, the
captured work does not run), instantiation (``cudaGraphInstantiate*``, upload),
torch's ``CUDAGraph.capture_begin/end`` and torch.compile's cudagraph trees
(``CUDAGraphNode.record (dynamo_timed)``). It is not dynamo/inductor
compilation. The rule is the gap attribution's (``attribution.GRAPH_RECORD_RX``), whose
``graph_capture`` category also counts whole capture regions.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from .. import namerx
from ..table import GPU_OP_KINDS
from . import attribution, intervals
from .common import GRAPH_LAUNCH_RX, events_of, kind_in, lookup_at, name_hits, rows_of, take, union_total

# Host spans and API calls that record (capture / instantiate) a CUDA graph: the same rule
# the gap attribution uses for its graph_capture category.
GRAPH_RECORD_RX = attribution.GRAPH_RECORD_RX
_BEGIN_RX = namerx.compile(r"^(?:cuda|hip|cu)StreamBeginCapture")
_END_RX = namerx.compile(r"^(?:cuda|hip|cu)StreamEndCapture")
_HOST_KINDS = ("cpu_op", "annotation", "python", "runtime", "driver")
_API_KINDS = ("runtime", "driver")
_STRETCH_KINDS = ("cpu_op", "python", "annotation", "osrt")   # what labels a host stretch
TOP_RECORD_SPANS = 5


def is_graph_recording(name: str) -> bool:
    """True for a host span or API call that records (captures / instantiates) a graph."""
    return bool(GRAPH_RECORD_RX.search(name))


def is_graph_launch(name: str) -> bool:
    return bool(GRAPH_LAUNCH_RX.match(name))


def _name_mask(ev: pd.DataFrame, rows: np.ndarray, fn) -> np.ndarray:
    """``fn(name)`` for the given rows, evaluated once per distinct name."""
    rx = {is_graph_recording: (GRAPH_RECORD_RX, "search"),
          is_graph_launch: (GRAPH_LAUNCH_RX, "match")}.get(fn)
    if rx is not None:   # the shared name table's class (names classified once)
        return name_hits(ev["name"], *rx)[rows]
    return lookup_at(ev["name"], rows, lambda t: bool(fn(t)), False, bool)


_rows = rows_of


def graph_launches(ev: pd.DataFrame) -> pd.DataFrame:
    """The graph launch calls: ts, dur, pid, tid, correlation, name."""
    rows = _rows(ev, _API_KINDS)
    rows = rows[_name_mask(ev, rows, is_graph_launch)]
    out = take(ev, rows, ["ts", "dur", "pid", "tid", "correlation", "name"])
    out["name"] = out["name"].astype(str)
    return out


def replay_ops(ev: pd.DataFrame, launches: pd.DataFrame | None = None) -> pd.DataFrame:
    """GPU rows that belong to a replay: graph rows, GPU ops carrying a graph id, and GPU
    ops sharing (pid, correlation) with a graph launch call. Adds ``graph_row`` (bool)."""
    launches = graph_launches(ev) if launches is None else launches
    cols = ["ts", "dur", "pid", "device", "correlation", "graph_id", "kind"]
    rows = rows_of(ev, GPU_OP_KINDS)
    is_graph = kind_in(ev, ("graph",)).take(rows)
    keys = set(zip(launches["pid"].tolist(), launches["correlation"].tolist()))
    corr = ev["correlation"].to_numpy(np.int64).take(rows)
    if keys:
        key = pd.MultiIndex.from_arrays([ev["pid"].to_numpy(np.int64).take(rows), corr])
        launched = key.isin(list(keys)) & (corr >= 0)
    else:
        launched = np.zeros(len(rows), bool)
    sel = is_graph | launched | (ev["graph_id"].to_numpy().take(rows) >= 0)
    out = take(ev, rows[sel], cols[:-1])
    out["graph_row"] = is_graph[sel]
    return out


def graph_runs(lane: np.ndarray, launch: np.ndarray,
               capture: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first-run rule, over host items (calls and the stretches between them) grouped by
    thread (``lane``) in time order: a graph launch right after graph-capture work on its
    thread (``capture``: the host stretch before it records a graph) is the recording's own
    first run of the graph it just made -- cudagraph trees run it once inside
    ``record_function`` (xDiT Flux's capture: 236 ms of recording, its one hipGraphLaunch
    inside) -- not a replay; the other launches replay a recorded graph. Returns
    (first, replay, after): ``after`` marks the items with a replay before them on their
    thread (the replay itself included)."""
    lane, launch, capture = np.asarray(lane), np.asarray(launch, bool), np.asarray(capture, bool)
    n = len(lane)
    prev = np.zeros(n, bool)
    prev[1:] = capture[:-1] & (lane[1:] == lane[:-1])
    first = launch & prev
    replay = launch & ~first
    if not n:
        return first, replay, np.zeros(0, bool)
    # the thread's replays counted up to each item
    seen = np.cumsum(replay)
    start = np.r_[0, np.flatnonzero(lane[1:] != lane[:-1]) + 1]
    base = np.repeat(seen[start] - replay[start], np.diff(np.r_[start, n]))
    return first, replay, seen - base > 0


def first_run_launches(ev: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """Which graph launch calls are a recording's first run (``graph_runs``), the host
    stretch before each labelled as the replay graph labels it (``_label_stretches``: the
    first category whose rows cover its middle). The stretch runs from the end of the
    thread's previous call to the launch; a launch nested in another call (a driver call
    inside the runtime's) takes the stretch before that call."""
    out = np.zeros(len(launches), bool)
    if not len(launches):
        return out
    host = _rows(ev, _STRETCH_KINDS)
    if not _name_mask(ev, host, is_graph_recording).any():
        return out   # no stretch can be recording work (the labelling's only source of it)
    from .attribution import thread_key
    from .replay.graph import _label_stretches

    api = _rows(ev, _API_KINDS)
    a_key = thread_key(ev["pid"].to_numpy(np.int64)[api], ev["tid"].to_numpy(np.int64)[api])
    l_key = thread_key(launches["pid"].to_numpy(np.int64, copy=True),
                       launches["tid"].to_numpy(np.int64, copy=True))   # keyed in place
    l_ts = launches["ts"].to_numpy(np.int64)
    keys, s_ts, s_end, at = [], [], [], []
    ts_all, dur_all = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    for k in np.unique(l_key).tolist():
        rows = api[a_key == k]
        ts = ts_all[rows]
        o = np.argsort(ts, kind="stable")
        ts, end = ts[o], ts[o] + dur_all[rows][o]
        reach = np.maximum.accumulate(end)
        prev_reach = np.r_[np.iinfo(np.int64).min, reach[:-1]]
        top = ts >= prev_reach                       # not nested in an earlier call
        top_at = np.flatnonzero(top)
        mine = np.flatnonzero(l_key == k)
        # each launch's call: the last top-level call starting at or before it
        j = top_at[np.searchsorted(ts[top_at], l_ts[mine], side="right") - 1]
        p = np.searchsorted(top_at, j) - 1          # the top-level call before it
        ok = p >= 0
        lo = np.where(ok, end[top_at[np.maximum(p, 0)]], 0)
        ok &= lo < ts[j]
        keys.append(np.full(int(ok.sum()), k, np.int64))
        s_ts.append(lo[ok])
        s_end.append(ts[j][ok])
        at.append(mine[ok])
    if not at or not sum(len(x) for x in at):
        return out
    keys, s_ts, s_end, at = (np.concatenate(x) for x in (keys, s_ts, s_end, at))
    cat, _ = _label_stretches(ev, keys, s_ts, s_end, None)
    # each launch after the stretch before it, on its thread: the rule's two items
    n = len(at)
    lane = np.repeat(keys, 2)
    launch = np.tile([False, True], n)
    capture = np.zeros(2 * n, bool)
    capture[0::2] = np.asarray(cat, object) == "graph_capture"
    first, _, _ = graph_runs(lane, launch, capture)
    out[at] = first[1::2]
    return out


def _replay_table(ops: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """One row per replay: pid, correlation, graph_id, launch name, nodes, gpu_ns, start, end."""
    if not len(ops):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in
                             ("pid", "correlation", "graph_id", "nodes", "gpu_ns", "start",
                              "end")}).assign(launch=pd.Series(dtype=object))
    corr = ops["correlation"].to_numpy(np.int64)
    # rows with no correlation are each their own replay
    rkey = np.where(corr >= 0, corr, -1 - np.arange(len(ops)))
    df = pd.DataFrame({"pid": ops["pid"].to_numpy(np.int64), "correlation": rkey,
                       "device": ops["device"].to_numpy(np.int64),
                       "graph_id": ops["graph_id"].to_numpy(np.int64),
                       "s": ops["ts"].to_numpy(np.int64),
                       "e": (ops["ts"] + ops["dur"]).to_numpy(np.int64),
                       "node": ~ops["graph_row"].to_numpy()})
    rid, uniq = pd.factorize(pd.MultiIndex.from_arrays([df["pid"], df["correlation"]]))
    n = len(uniq)
    # union per (replay, device), summed per replay
    dev_codes, dev_idx = np.unique(df["device"].to_numpy(), return_inverse=True)
    from .steps import grouped_union_total

    per = grouped_union_total(rid * len(dev_codes) + dev_idx, df["s"].to_numpy(),
                              df["e"].to_numpy(), n * len(dev_codes))
    g = df.assign(rid=rid).groupby("rid", sort=True)
    out = pd.DataFrame({
        "pid": g["pid"].first().to_numpy(np.int64),
        "correlation": g["correlation"].first().to_numpy(np.int64),
        "graph_id": g["graph_id"].max().to_numpy(np.int64),
        "nodes": g["node"].sum().to_numpy(np.int64),
        "gpu_ns": per.reshape(n, len(dev_codes)).sum(axis=1),
        "start": g["s"].min().to_numpy(np.int64),
        "end": g["e"].max().to_numpy(np.int64),
    })
    names = launches.drop_duplicates(["pid", "correlation"])[["pid", "correlation", "name"]]
    out = out.merge(names.rename(columns={"name": "launch"}), on=["pid", "correlation"],
                    how="left")
    out["correlation"] = np.where(out["correlation"] >= 0, out["correlation"], -1)
    out["launch"] = out["launch"].fillna("")
    return out.sort_values("start", kind="stable").reset_index(drop=True)


def recording_intervals(ev: pd.DataFrame) -> pd.DataFrame:
    """Host recording spans: pid, tid, start, end, name. Named recording spans and calls,
    plus each stream capture (a BeginCapture call to the next EndCapture on its thread)."""
    rows = _rows(ev, _HOST_KINDS)
    rec = rows[_name_mask(ev, rows, is_graph_recording)]
    sub = take(ev, rec, ["ts", "dur", "pid", "tid", "name"])
    out = pd.DataFrame({"pid": sub["pid"].to_numpy(np.int64), "tid": sub["tid"].to_numpy(np.int64),
                        "start": sub["ts"].to_numpy(np.int64),
                        "end": (sub["ts"] + sub["dur"]).to_numpy(np.int64),
                        "name": sub["name"].astype(str).to_numpy(object)})
    api = sub[kind_in(take(ev, rec, ["kind"]), _API_KINDS)]
    return pd.concat([out, _captures(api)], ignore_index=True)


def capture_regions(ev: pd.DataFrame) -> pd.DataFrame:
    """Stream captures (pid, tid, start, end, name "stream capture"): the host launches
    into a graph being recorded, so nothing it launches runs on the GPU meanwhile."""
    rows = _rows(ev, _API_KINDS)
    rows = rows[_name_mask(ev, rows, lambda n: bool(_BEGIN_RX.match(n) or _END_RX.match(n)))]
    return _captures(take(ev, rows, ["ts", "dur", "pid", "tid", "name"]))


def _captures(api: pd.DataFrame) -> pd.DataFrame:
    """BeginCapture .. EndCapture regions per thread (``attribution.capture_pairs``)."""
    from .attribution import capture_pairs

    names = api["name"].astype(str)
    begin = names.map(lambda n: bool(_BEGIN_RX.match(n))).to_numpy(bool)
    end = names.map(lambda n: bool(_END_RX.match(n))).to_numpy(bool)
    pid, tid = api["pid"].to_numpy(np.int64), api["tid"].to_numpy(np.int64)
    hs = api["ts"].to_numpy(np.int64)
    he = hs + api["dur"].to_numpy(np.int64)
    rows, stops = capture_pairs(hs, he, pid * (1 << 32) + tid, begin, end)
    out = pd.DataFrame({"pid": pid[rows], "tid": tid[rows], "start": hs[rows], "end": stops,
                        "name": "stream capture"})
    return out.sort_values(["pid", "tid", "start"], kind="stable").reset_index(drop=True)


def _per_graph(replays: pd.DataFrame) -> list[dict]:
    if not len(replays):
        return []
    g = replays.groupby(["graph_id", "launch"], sort=True)
    out = []
    for (gid, launch), r in g:
        out.append({"graph_id": int(gid), "launch": str(launch), "replays": int(len(r)),
                    "gpu_ns": int(r["gpu_ns"].sum()), "mean_ns": int(round(r["gpu_ns"].mean())),
                    "nodes": int(r["nodes"].sum()),
                    "nodes_per_replay": round(float(r["nodes"].mean()), 2)})
    return sorted(out, key=lambda d: (-d["gpu_ns"], d["graph_id"]))


def _recording(rec: pd.DataFrame) -> dict:
    if not len(rec):
        return {"ns": 0, "spans": 0, "captures": 0, "top": []}
    total = 0
    for _, g in rec.groupby(["pid", "tid"], sort=True):
        total += intervals.total(intervals.union(g["start"].to_numpy(), g["end"].to_numpy()))
    by = rec.assign(ns=rec["end"] - rec["start"]).groupby("name", sort=True)["ns"].agg(
        ["sum", "size"]).sort_values("sum", ascending=False, kind="stable").head(TOP_RECORD_SPANS)
    return {"ns": int(total), "spans": int(len(rec)),
            "captures": int((rec["name"] == "stream capture").sum()),
            "top": [{"name": str(k), "ns": int(v["sum"]), "count": int(v["size"])}
                    for k, v in by.iterrows()]}


def graph_recording(events) -> dict:
    """Recording only (the ``recording`` entry of ``graph_summary``)."""
    return _recording(recording_intervals(events_of(events)))


def _mode(ops: pd.DataFrame) -> str | None:
    if not len(ops):
        return None
    g = ops["graph_row"].to_numpy()
    return "graph" if g.all() else ("node" if not g.any() else "mixed")


def graph_summary(events) -> dict:
    """CUDA-graph replays and recording (see the module doc). All times in ns.

    Keys: uses_cuda_graphs (graph launches, replays or recording: the program already
    uses CUDA graphs), launches, first_runs (launches that are a recording's own first run
    of the graph it just made, ``first_run_launches``: no replay), replays (graph GPU work,
    one per launch, less the first runs'), mode ("graph": one row per replay,
    "node": per-kernel rows, "mixed", None), replay_gpu_ns (union over each device of
    every replay's GPU time), gpu_busy_ns (union of all GPU ops), replay_share_pct,
    graphs (per graph id and launch call: replays, gpu_ns, mean_ns, nodes_per_replay),
    recording (ns: union per thread, spans, captures, top names).
    """
    ev = events_of(events)
    launches = graph_launches(ev)
    all_ops = replay_ops(ev, launches)
    first = first_run_launches(ev, launches)
    ops = _without_first_runs(all_ops, launches[first])
    replays = _replay_table(ops, launches)
    rec = recording_intervals(ev)
    replay_ns = _union_by_device(ops)
    busy = union_total(ev, rows_of(ev, GPU_OP_KINDS))
    return {
        "uses_cuda_graphs": bool(len(all_ops) or len(launches) or len(rec)),
        "launches": int(len(launches)),
        "first_runs": int(first.sum()),
        "replays": int(len(replays)),
        "mode": _mode(all_ops),
        "replay_gpu_ns": replay_ns,
        "gpu_busy_ns": busy,
        "replay_share_pct": round(100.0 * replay_ns / busy, 2) if busy else 0.0,
        "graphs": _per_graph(replays),
        "recording": _recording(rec),
    }


def _without_first_runs(ops: pd.DataFrame, first: pd.DataFrame) -> pd.DataFrame:
    """The replay rows less the GPU work of the recordings' first runs (their launches'
    pid and correlation)."""
    if not len(first) or not len(ops):
        return ops
    key = pd.MultiIndex.from_arrays([ops["pid"].to_numpy(np.int64),
                                     ops["correlation"].to_numpy(np.int64)])
    drop = key.isin(list(zip(first["pid"].tolist(), first["correlation"].tolist())))
    drop &= ops["correlation"].to_numpy(np.int64) >= 0
    return ops[~drop]


def _union_by_device(ops: pd.DataFrame) -> int:
    return int(sum(intervals.total(iv) for iv in intervals.union_by_device(ops).values()))
