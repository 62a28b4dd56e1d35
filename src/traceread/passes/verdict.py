"""The verdict: which bound is the GPU under, which levers to pull, and what each saves.

Lost GPU time = idle time in the analysed window + exposed communication (comm
kernels with no compute beside them) + exposed copies (host<->device memcpy with
no compute beside them). Each cause gets a score in ns (``cause_parts``):

* ``data``    -- idle time the launch threads spent in the DataLoader;
* ``compile`` -- idle time inside dynamo/inductor compilation;
* ``graph_capture`` -- idle time while CUDA graphs were recorded;
* ``comms``   -- idle time blocked in collectives + exposed communication;
* ``copy``    -- exposed host<->device copy time;
* ``sync``    -- the part of every gap drained by a blocking sync (the host
  waited, then had to refill an empty queue) that the GPU work queued since the
  previous sync could have hidden (``sync_share``), plus time blocked in a sync
  call while the GPU idled;
* ``launch``  -- host time of short starved gaps (<= ``SHORT_GAP_NS``: the
  dispatch cost between back-to-back kernels) and launch-API time of longer ones;
* ``host``    -- operator / python / allocator / OS time of longer starved gaps,
  and their untraced time when the host was traced at all (untraced Python);
* ``queued``  -- the part of every gap after its closing op's launch call returned
  (``attribution.queued``): the GPU had the work and waited on something else. Every
  cause above counts only the host's part of each gap.

Rules (documented in docs/analysis.md):
1. no GPU operations at all -> ``cpu_only``;
2. lost time < ``GPU_BOUND_LOST`` of the window -> ``gpu``;
3. unexplained (untraced, host not traced) >= ``UNKNOWN_SHARE`` of the lost time
   and no score reaches ``LEAD_SHARE`` of it -> ``unknown``;
4. the best score >= ``LEAD_SHARE`` of the lost time and >= ``LEAD_RATIO`` x the
   runner-up -> that bound;
5. otherwise ``mixed``, naming the two largest causes with their levers.

Savings (the what-if model): fixing a cause gives back at most the lost time it
explains, assuming the GPU's own work is unchanged -- an upper bound. The copy
cause's "pin" lever saves only the time beyond pinned bandwidth.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import is_sync_drained, queued_ns
from .bounds import CAUSES, COST_ORDER, LEVERS, NATIVE_LEVERS, TITLE, WHAT, lever_texts  # noqa: F401
from .bounds import queued_levers

GPU_BOUND_LOST = 0.10
LEAD_SHARE = 0.30
LEAD_RATIO = 1.5
UNKNOWN_SHARE = 0.50
SHORT_GAP_NS = 100_000
MIN_ACTION_SHARE = 0.01       # causes worth < 1% of the window get no lever of their own
MAX_LEVERS = 8

HOST_PARTS = ("cpu_op", "python", "alloc")
GRAPHS_NOT_REPLAYED = ("keep input shapes fixed (pad or bucket them) so the CUDA graphs are "
                       "replayed: they are set up (reduce-overhead / cudagraphify) but none was "
                       "replayed in the analysed steps")


def cause_parts(gaps: pd.DataFrame, host_traced: bool = True, api_traced: bool = True) -> dict:
    """ns of idle time per cause (+ ``unexplained``, ``alloc``) from the labelled gaps.

    Untraced time counts as launch overhead in short gaps when launch calls were
    traced, and as host work in long gaps when host activity was traced; else it
    is unexplained. A gap drained by a sync counts as ``sync`` only up to the GPU
    work queued since the previous sync (``sync_share``): without the sync the host's
    work after it could have overlapped that much and no more; the rest of the gap
    is whatever the host did (a 15 ms Python tail after a 0.4 ms step is host time).
    Allocator time in a drained gap is never the sync's (cudaFree synchronizes itself).
    Queued time (``queued_ns``: the GPU sat with the gap's closing op already launched) is
    its own cause, ``queued``; host causes count only the host's part of each gap (the
    categories of the queued part, ``qcpu_<category>``, are taken out).
    """
    out = {c: 0 for c in CAUSES}
    out.update(unexplained=0, alloc=0)
    if not len(gaps):
        return out
    n = len(gaps)
    dur = gaps["duration"].to_numpy(np.int64)
    # the queued part of a gap is no host cause's: each category keeps the host's part only
    qn = queued_ns(gaps)
    cols = {c: _col(gaps, f"cpu_{c}") - _col(gaps, f"qcpu_{c}") for c in _CPU_COLS}
    sync = is_sync_drained(gaps)
    f = sync_share(gaps)                     # 1 where the whole gap is the sync's, 0 if none
    short = dur <= SHORT_GAP_NS

    def part(c, m, w=None):
        v = cols[c][m] if w is None else cols[c][m] * w[m]
        return int(np.rint(v.sum()))

    rest = 1.0 - f                           # the share of each gap left to the host's causes
    whole = np.ones(n)
    out["queued"] = int(qn.sum())
    out["data"] = part("dataloader", whole > 0)
    out["compile"] = part("compile", whole > 0)
    out["graph_capture"] = part("graph_capture", whole > 0)
    out["comms"] = part("comm_wait", whole > 0)
    # allocator calls are never the sync's: cudaFree synchronizes on its own, so removing
    # the .item() before an empty_cache() saves none of it
    w = {c: (whole if c == "alloc" else rest) for c in _CPU_COLS}
    out["sync"] = sum(part(c, sync, f) for c in _HOST_ALL if c != "alloc") \
        + part("sync", ~sync) + part("sync", sync, rest)
    out["launch"] = sum(part(c, short, w[c]) for c in ("alloc", "launch", "cpu_op", "python")) \
        + part("launch", ~short, rest)
    if api_traced:
        out["launch"] += part("untraced", short, rest)
    else:
        out["unexplained"] += part("untraced", short, rest)
    out["host"] = sum(part(c, ~short, w[c]) for c in HOST_PARTS)
    out["alloc"] = part("alloc", ~short, whole)
    untraced = part("untraced", ~short, rest)
    if host_traced:
        out["host"] += untraced
        out["host_untraced"] = untraced
    else:
        out["unexplained"] += untraced
    return out


def _col(gaps: pd.DataFrame, name: str) -> np.ndarray:
    return gaps[name].to_numpy(np.int64) if name in gaps else np.zeros(len(gaps), np.int64)


_CPU_COLS = ("dataloader", "compile", "graph_capture", "comm_wait", "sync", "alloc", "launch",
             "cpu_op", "python", "untraced")
_HOST_ALL = ("sync", "alloc", "launch", "cpu_op", "python", "untraced")


def sync_share(gaps: pd.DataFrame) -> np.ndarray:
    """Per gap, the share of it that a blocking sync explains (0 for gaps no sync drained).

    That share is min(1, GPU busy time since the previous sync-drained gap on the same
    device / the gap): removing the sync lets the host's later work overlap the GPU work
    queued before it, and no more.
    """
    n = len(gaps)
    f = np.zeros(n)
    sync = is_sync_drained(gaps)
    if not sync.any():
        return f
    order = np.lexsort((gaps["start"].to_numpy(), gaps["device"].to_numpy(),
                        gaps["pid"].to_numpy()))
    st = gaps["start"].to_numpy(np.int64)[order]
    en = gaps["end"].to_numpy(np.int64)[order]
    grp = gaps["pid"].to_numpy()[order].astype(np.int64) * 1_000_003 \
        + gaps["device"].to_numpy()[order].astype(np.int64)
    sy = sync[order]
    d = np.maximum(en - st - queued_ns(gaps)[order], 1)   # the host's part of each gap
    first = np.r_[True, grp[1:] != grp[:-1]]
    between = np.where(first, 0, np.maximum(0, st - np.r_[en[:1], en[:-1]]))
    cum = np.cumsum(between)                 # GPU busy between neighbouring gaps, running
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    idx = np.flatnonzero(sy)
    same = np.r_[False, grp[idx[1:]] == grp[idx[:-1]]]
    ref = np.where(same, np.r_[0, idx[:-1]], group_start[idx])
    base = cum[idx] - cum[ref]
    # one sync episode can drain the queue twice (the copy, then the wait): what the
    # previous sync gap left of its budget carries over, once
    left = np.where(same, np.maximum(0, np.r_[0, base[:-1] - d[idx[:-1]]]), 0)
    budget = np.zeros(n, np.int64)
    budget[idx] = base + left
    out = np.zeros(n)
    out[order] = np.where(sy, np.minimum(1.0, budget / d), 0.0)
    return out


def decide(*, has_gpu: bool, window_ns: int, idle_ns: int, parts: dict | None,
           exposed_comm_ns: int = 0, copy: dict | None = None, ctx: dict | None = None,
           extra_evidence: dict | None = None) -> dict:
    """{"bound", "summary", "evidence", "levers", "actions"} from the analysis figures.

    ``parts``: ``cause_parts`` output; ``copy``: ``copies.copy_summary`` output;
    ``ctx``: what the trace already does (``context``) and the step figures.
    """
    ev = dict(extra_evidence or {})
    ctx = dict(ctx or {})
    if not has_gpu:
        return _out("cpu_only", "no GPU operations in this trace", ev, _levers_of("cpu_only"))
    copy = copy or {}
    exposed_copy = int(copy.get("exposed_ns", 0))
    lost = int(idle_ns) + int(exposed_comm_ns) + exposed_copy
    sc = {c: int((parts or {}).get(c, 0)) for c in CAUSES}
    sc["comms"] += int(exposed_comm_ns)
    sc["copy"] += exposed_copy
    unexplained = int((parts or {}).get("unexplained", 0))
    ev.update({
        "window_ns": int(window_ns), "idle_ns": int(idle_ns),
        "busy_ns": int(window_ns) - int(idle_ns), "idle_pct": _pct(idle_ns, window_ns),
        "exposed_comm_ns": int(exposed_comm_ns),
        "exposed_comm_pct": _pct(exposed_comm_ns, window_ns),
        "exposed_copy_ns": exposed_copy, "exposed_copy_pct": _pct(exposed_copy, window_ns),
        "lost_ns": lost, "lost_pct": _pct(lost, window_ns),
        "scores_ns": sc, "share_pct": {k: _pct(v, lost) for k, v in sc.items()},
        "unexplained_ns": unexplained, "unexplained_pct": _pct(unexplained, lost),
    })
    actions = _actions(sc, parts or {}, copy, ctx, window_ns)
    what_if = {a["cause"]: {k: a[k] for k in ("saves_ns", "saves_pct", "saves_per_step_ns",
                                               "projected_step_ns")} for a in actions}
    if lost < GPU_BOUND_LOST * window_ns or lost == 0:
        gpu_levers = _levers_of("gpu") if ctx.get("pytorch", True) else \
            [t for t, _ in NATIVE_LEVERS["gpu"]]
        return _out("gpu", f"GPU busy {100 - ev['lost_pct']:.1f}% of the analysed window", ev,
                    gpu_levers, actions, what_if)
    ranked = sorted(sc.items(), key=lambda kv: (-kv[1], CAUSES.index(kv[0])))
    (top, top_ns), (second, second_ns) = ranked[0], ranked[1]
    ev["dominant"], ev["dominant_pct"] = top, _pct(top_ns, lost)
    ev["runner_up"], ev["runner_up_pct"] = second, _pct(second_ns, lost)
    if unexplained >= UNKNOWN_SHARE * lost and top_ns < LEAD_SHARE * lost:
        return _out("unknown", f"GPU idle {ev['idle_pct']:.1f}% of the analysed window while "
                    "the host was not traced", ev, _levers_of("unknown"), actions, what_if)
    levers = _ranked_levers(actions)
    if top_ns >= LEAD_SHARE * lost and top_ns >= LEAD_RATIO * second_ns:
        return _out(top, _summary(top, ev, ctx), ev, levers, actions, what_if)
    mixed = [a for a in actions if a["cause"] in (top, second)] or actions
    return _out("mixed", f"no single cause: {top} {ev['share_pct'][top]:.0f}%, "
                f"{second} {ev['share_pct'][second]:.0f}% of lost GPU time", ev,
                _ranked_levers(mixed) + [x for x in levers if x not in _ranked_levers(mixed)],
                actions, what_if)


def _actions(sc: dict, parts: dict, copy: dict, ctx: dict, window_ns: int) -> list[dict]:
    """One entry per cause worth >= MIN_ACTION_SHARE of the window: its levers and saving."""
    out = []
    steps = int(ctx.get("steps") or 0)
    mean_step = int(ctx.get("step_mean_ns") or 0)
    for cause, ns in sc.items():
        if ns <= 0 or ns < MIN_ACTION_SHARE * window_ns:
            continue
        pct = _pct(ns, window_ns)
        per_step = int(round(ns / steps / max(1, int(ctx.get("devices") or 1)))) if steps else None
        out.append({
            "cause": cause, "saves_ns": int(ns), "saves_pct": pct,
            "saves_per_step_ns": per_step,
            "projected_step_ns": max(0, mean_step - per_step) if mean_step and per_step is not None
            else None,
            "culprit": ctx.get("culprits", {}).get(cause, ""),
            "levers": [lv for lv in _levers_for(cause, ns, parts, copy, ctx)
                       if lv["saves_ns"] >= MIN_ACTION_SHARE * window_ns],
        })
    out.sort(key=lambda a: (-a["saves_ns"], min((COST_ORDER[lv["cost"]] for lv in a["levers"]),
                                                default=9), CAUSES.index(a["cause"])))
    return out


def _levers_for(cause: str, ns: int, parts: dict, copy: dict, ctx: dict) -> list[dict]:
    """The levers that fit what the trace already does, each with the ns it would save."""
    key = cause
    if cause == "data" and ctx.get("dataloader_workers"):
        key = "data_workers"
    if cause == "launch" and ctx.get("uses_cuda_graphs"):
        key = "launch_graphs"
    table = LEVERS if ctx.get("pytorch", True) else {**LEVERS, **NATIVE_LEVERS}
    items = list(table[key])
    if cause == "host" and ctx.get("uses_cuda_graphs"):
        items = [x for x in items if "CUDA graphs" not in x[0]]
    if cause == "launch" and not ctx.get("training", True):   # inference: no optimizer
        items = [x for x in items if not x[0].startswith(("fused optimizers", "larger micro"))]
    if cause == "launch" and ctx.get("fused_optimizer"):
        items = [x for x in items if not x[0].startswith("fused optimizers")]
    if cause in ("host", "launch") and ctx.get("graphs_not_replayed"):
        items = [(GRAPHS_NOT_REPLAYED, "code")] + [x for x in items if "graph" not in x[0]]
    out = [{"lever": t, "cost": c, "saves_ns": int(ns)} for t, c in items] if cause != "queued" \
        else [{"lever": t, "cost": c, "saves_ns": v} for t, c, v in
              queued_levers(ctx.get("queued_on"), ns)]
    alloc = int(parts.get("alloc", 0)) if cause == "host" else 0
    if alloc:   # allocator time is saved by allocator levers, the rest by the host levers
        akey = "alloc_uncached" if ctx.get("allocator_uncached") and ctx.get("pytorch", True) \
            else "alloc"
        out = [{"lever": t, "cost": c, "saves_ns": alloc} for t, c in table[akey]] + \
              [dict(lv, saves_ns=max(0, lv["saves_ns"] - alloc)) for lv in out]
    if cause == "copy" and out:
        out[0]["saves_ns"] = int(copy.get("pin_saves_ns", 0))
        if not copy.get("pageable_ns"):
            out = out[1:]   # nothing pageable: pinning is not the lever
    # free knobs first among levers that save the same; a lever the trace itself points at
    # (graphs set up, never replayed) before generic ones
    out.sort(key=lambda lv: (-lv["saves_ns"], lv["lever"] != GRAPHS_NOT_REPLAYED,
                             COST_ORDER[lv["cost"]]))
    return out[:4]


def _ranked_levers(actions: list[dict]) -> list[str]:
    """Lever texts in the order of the time they save, free knobs first on a tie."""
    flat = [(lv["saves_ns"], COST_ORDER[lv["cost"]], i, j, lv["lever"])
            for i, a in enumerate(actions) for j, lv in enumerate(a["levers"][:3])]
    flat.sort(key=lambda x: (-x[0], x[4] != GRAPHS_NOT_REPLAYED, x[1], x[2], x[3]))
    seen, out = set(), []
    for *_, text in flat:
        key = text[:33]   # two causes may offer the same lever in other words (CUDA graphs)
        if key not in seen:
            seen.add(key)
            out.append(text)
    return out[:MAX_LEVERS]


def _levers_of(key: str) -> list[str]:
    return lever_texts(key)


def _summary(bound: str, ev: dict, ctx: dict) -> str:
    share = ev["share_pct"][bound]
    what = WHAT[bound]
    culprit = ctx.get("culprits", {}).get(bound)
    text = (f"GPU idle {ev['idle_pct']:.1f}% of the analysed window; {share:.0f}% of the lost "
            f"time is {what}")
    return text + (f" ({culprit})" if culprit else "")


def _out(bound: str, summary: str, ev: dict, levers: list, actions=None, what_if=None) -> dict:
    return {"bound": bound, "title": TITLE[bound], "summary": summary, "evidence": ev,
            "levers": list(levers), "actions": list(actions or []),
            "what_if": dict(what_if or {})}


def _pct(a, b) -> float:
    return round(100.0 * float(a) / float(b), 2) if b else 0.0
