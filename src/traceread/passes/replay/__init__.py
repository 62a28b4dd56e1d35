"""Replay the analysed steps (issue 30): the step as a graph, its replay, the critical path.

``build_graph`` (graph.py) turns the window into a ``StepGraph``, ``simulate`` (sim.py) replays
it with the measured durations, ``critical_path`` (critical.py) names the chain that set each
step's time. ``replay`` runs the three and returns the JSON result; ``run`` also returns the
graph and its schedule, for the levers that transform the graph and replay it again.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..common import kind_in
from .critical import LABELS, critical_path, node_labels, program_spans, shared_windows
from .graph import (EDGE_KINDS, MAX_NODES, NO_GPU, NODE_KINDS, StepGraph, build_graph,
                    host_only)
from .sim import Schedule, simulate
from .split import pair_helper_bursts
from .whatif import SLEEP_CALL_RX, price_models, replay_models, unfit

__all__ = ["StepGraph", "Schedule", "build_graph", "simulate", "critical_path", "replay",
           "price_models", "replay_models", "unfit", "SLEEP_CALL_RX",
           "run", "result", "not_replayable", "host_only", "NO_GPU", "node_labels",
           "gap_labels", "NODE_KINDS", "EDGE_KINDS", "LABELS",
           "LEFT_OUT"]

# What the graph does not model (said in every result).
LEFT_OUT = ("collectives between ranks (each trace is replayed alone: a wait for another "
            "rank is kept as measured)",
            "dependencies between host threads other than through the GPU")


def unreplayable(ev: pd.DataFrame, ops: pd.DataFrame, sampled: bool = False) -> str | None:
    """Why the window cannot be replayed, or None."""
    if sampled:
        return "events were dropped (sampled trace): the graph would miss most of its nodes"
    if not len(ops):
        return NO_GPU
    if not kind_in(ev, ("runtime", "driver")).any():
        return "no launch calls traced (GPU-only trace): the host side cannot be replayed"
    if (ops["launch_ts"].to_numpy() < 0).all():
        return "no GPU op is linked to its launch call (no correlation ids)"
    return None


def run(ev: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame, *,
        step_pattern: str | None = None, sampled: bool = False, max_nodes: int = MAX_NODES,
        op_step: np.ndarray | None = None):
    """(graph or None, schedule or None, result dict); the graph is None where the window
    cannot be replayed or its replay did not settle (the levers then keep their bounds)."""
    why = unreplayable(ev, ops, sampled)
    if why:
        return None, None, not_replayable(why)
    graph = build_graph(ev, ops, steps, step_pattern=step_pattern, max_nodes=max_nodes,
                        op_step=op_step)
    sched = simulate(graph)
    if not sched.converged:   # no graph: nothing is priced from a replay that did not settle
        return None, sched, not_replayable(
            f"the replay did not settle after {sched.sweeps} sweeps (a dependency cycle)")
    return graph, sched, result(*_handed_over(graph, sched))


def _handed_over(graph: StepGraph, sched: Schedule) -> tuple:
    """The graph and schedule the result reads: a helper thread's idle between bursts
    (autograd's backward thread) is a wait for the step thread, not host work, so the
    critical path follows the hand-off to what it waited on (``split.pair_helper_bursts``;
    the lane's first burst keeps the builder's rule: held at its measured start). The
    levers' graph stays as built: it pairs the bursts of its own steps after cutting them."""
    paired = graph.copy()
    if not pair_helper_bursts(paired, first=False):
        return graph, sched
    again = simulate(paired)
    return (paired, again) if again.converged else (graph, sched)


def replay(ev: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame, **kw) -> dict:
    """The JSON result of replaying the window's steps (see ``result``)."""
    return run(ev, ops, steps, **kw)[2]


def not_replayable(reason: str) -> dict:
    return {"replayable": False, "reason": reason, "savings": "bounds",
            "left_out": list(LEFT_OUT)}


def result(graph: StepGraph, sched: Schedule) -> dict:
    """``replayable``, ``error_pct`` (overall: replayed vs measured program step of the
    replayed steps, ``program_steps``), ``median_error_pct``, ``max_error_pct`` (largest absolute), ``steps`` (each
    step, measured_ns, replayed_ns, error_pct), the graph's size, and ``critical_path``."""
    with shared_windows():   # the steps' windows: made once for the three askers below
        return _result(graph, sched)


def _result(graph: StepGraph, sched: Schedule) -> dict:
    st = sched.steps
    meas, rep = program_steps(graph, sched)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.where((meas > 0) & (rep >= 0), 100.0 * (rep - meas) / np.maximum(meas, 1),
                       np.nan)
    ok = np.isfinite(err)
    meas, rep, err = meas[ok], rep[ok], err[ok]
    overall = 100.0 * (rep.sum() - meas.sum()) / meas.sum() if len(meas) and meas.sum() else None
    kinds = graph.edges["kind"].value_counts().to_dict() if len(graph.edges) else {}
    at = pd.Index(graph.lanes["lane"].to_numpy()).get_indexer(graph.nodes["lane"].to_numpy())
    what = graph.lanes["what"].to_numpy(object)
    gpu_lane = (at >= 0) & (what[np.maximum(at, 0)] == "gpu") if len(what) else \
        np.zeros(len(at), bool)
    kept = int(graph.nodes["gap_ns"].to_numpy(np.int64)[gpu_lane].sum())
    e = graph.edges
    lag = e["lag_ns"].to_numpy(np.int64)
    launch = (e["kind"] == "launch").to_numpy()
    if launch.any():   # a launch lag beyond the typical one: the op waited on something else
        kept += int(np.maximum(lag[launch] - int(np.median(lag[launch])), 0).sum())
    kept += int(np.maximum(lag[(e["kind"] == "event_wait").to_numpy()], 0).sum())
    cp = critical_path(graph, sched)
    return {
        "replayable": True, "reason": None, "savings": "replay",
        "error_pct": _r(overall),
        "median_error_pct": _r(float(np.median(err))) if len(err) else None,
        "max_error_pct": _r(float(err[np.argmax(np.abs(err))])) if len(err) else None,
        "measured_ns": int(meas.sum()), "replayed_ns": int(rep.sum()),
        "steps": [{"step": int(s), "measured_ns": int(m), "replayed_ns": int(r),
                   "error_pct": _r(x)}
                  for s, m, r, x in zip(st["step"].to_numpy()[ok], meas, rep, err)],
        "steps_replayed": int(len(graph.steps)), "steps_total": int(graph.steps_total),
        "sampled": bool(graph.sampled), "nodes": int(len(graph.nodes)),
        "edges": int(len(graph.edges)), "edges_by_kind": {str(k): int(v) for k, v in
                                                          kinds.items()},
        "sweeps": int(sched.sweeps), "notes": list(graph.notes), "left_out": list(LEFT_OUT),
        # GPU waits no traced edge explains (an op started this long after its stream's
        # previous one, its launch long returned): kept as measured, the replay's fit owes
        # them nothing, a lever does not move them
        "kept_gpu_wait_ns": kept,
        "critical_path": cp}


def program_steps(graph: StepGraph, sched: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Per graph step (``sched.steps``' rows), the program step measured and replayed
    (``critical.program_spans``): the step the program waits on, not the host markers'
    span -- a GPU-paced step's GPU work runs past its end marker (vLLM's graph replay on
    MI300: 26.4 ms of host span, 305 ms of step)."""
    if not len(sched.steps):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ts = graph.nodes["ts_ns"].to_numpy(np.int64)
    meas = program_spans(graph, ts, ts + graph.nodes["dur_ns"].to_numpy(np.int64))
    return meas, program_spans(graph, sched.start_ns, sched.end_ns)


def _r(x):
    return None if x is None or not np.isfinite(x) else round(float(x), 3)


def gap_labels(graph: StepGraph, gaps: pd.DataFrame, skew_ns: int = 5_000) -> np.ndarray:
    """Per gap (start, end, device; ``gaps.gpu_gaps`` rows), read from the graph: ``queued``
    when every GPU op that starts at the gap's end has its launch call in the graph and
    that call returned at least ``skew_ns`` before the gap began; ``host_late`` when one of
    them has no launch edge or a later one; ``""`` when no op of the graph starts there
    (the gap lies outside the replayed steps). Issue 30's rule, from the replay's edges."""
    out = np.full(len(gaps), "", object)
    n = graph.nodes
    if not len(n) or not len(gaps):
        return out
    gpu = n["kind"].isin(("gpu_kernel", "gpu_copy", "gpu_memset", "collective")).to_numpy() & \
        graph.lanes.set_index("lane").loc[n["lane"], "what"].eq("gpu").to_numpy()
    dev = graph.lanes.set_index("lane").loc[n["lane"], "device"].to_numpy()
    pid = graph.lanes.set_index("lane").loc[n["lane"], "pid"].to_numpy()
    ids = n["id"].to_numpy()
    end = (n["ts_ns"] + n["dur_ns"]).to_numpy()
    e = graph.edges[graph.edges["kind"] == "launch"]
    ret = pd.Series(end[pd.Index(ids).get_indexer(e["src"].to_numpy())],
                    index=e["dst"].to_numpy())
    ret = ret[~ret.index.duplicated()]
    at = pd.DataFrame({"ts": n["ts_ns"].to_numpy()[gpu], "pid": pid[gpu], "dev": dev[gpu],
                       "ret": ret.reindex(ids[gpu]).to_numpy()})
    worst = at.assign(late=np.isnan(at["ret"])).groupby(["pid", "dev", "ts"]).agg(
        ret=("ret", "max"), late=("late", "any"))
    key = pd.MultiIndex.from_arrays([gaps["pid"].to_numpy(), gaps["device"].to_numpy(),
                                     gaps["end"].to_numpy()])
    k = worst.index.get_indexer(key)
    hit = k >= 0
    r = worst["ret"].to_numpy()[np.maximum(k, 0)]
    late = worst["late"].to_numpy()[np.maximum(k, 0)] | \
        (r > gaps["start"].to_numpy() - skew_ns)
    out[hit] = np.where(late[hit], "host_late", "queued")
    return out

