"""Why the straggler is late: what its own issuing thread (and GPU) did in the time the
others waited for it.

For every matched collective where rank s arrived last, its *late window* is
[next-latest arrival, its own arrival] on its own clock: the time the other ranks
spent waiting for it. The windows are attributed on s's host timeline
(``RankInput.activity``: the attribution categories of ``passes/attribution.py``,
carved by the same priority), plus how much of them its GPU spent in compute
kernels. The cause is the largest category, except that a window mostly covered
by its own GPU compute is ``gpu_compute`` (the host merely waited for a longer GPU
step).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...passes import intervals
from .inputs import RankInput

GPU_COMPUTE_SHARE = 0.5
CAUSE_TEXT = {
    "untraced": "untraced Python (no profiled op ran: a sleep, I/O or Python outside torch ops)",
    "python": "Python code",
    "cpu_op": "CPU operators",
    "launch": "launching GPU work",
    "alloc": "device-memory allocation",
    "copy_staging": "staging pageable host memory for its copies",
    "sync": "blocking syncs",
    "dataloader": "the DataLoader",
    "compile": "torch.compile compilation",
    "graph_capture": "recording CUDA graphs",
    "comm_wait": "another collective (it was itself waiting)",
    "comm_own": ("its own earlier collectives, at which no other rank was late: it came out of "
                 "them after the others had (the collective's own end, not a peer's delay)"),
    "wait": "a wait on another thread or process (a lock, condition, poll or child process)",
    "gpu_compute": "longer GPU compute (its GPU was still busy with compute kernels)",
    "sleep": "sleeping (clock_nanosleep / time.sleep: a delay it chose)",
    "cpu_slower": ("CPU operators, the same ones the other ranks run, as often, each slower "
                   "(no operator of its own)"),
}


def late_windows(matches: pd.DataFrame, rank: int, offset_ns: int,
                 min_lateness_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) on ``rank``'s own clock of the windows where the others waited for it
    (instances it was last in by at least ``min_lateness_ns``)."""
    mine = matches[(matches["rank"] == rank) & matches["last"]
                   & (matches["lateness_ns"] >= max(min_lateness_ns, 1))]
    end = mine["arrival_ns"].to_numpy(np.int64)
    start = end - mine["lateness_ns"].to_numpy(np.int64)
    return start - offset_ns, end - offset_ns


def covered_ns(win: tuple, iv: tuple) -> int:
    """``total(intersect(win, iv))`` for a disjoint ``win`` (a union): by prefix sums over
    ``iv`` when it is disjoint and sorted too (a carved activity, a union) -- the sweep
    sorted both sets' end points for each rank and category: 44 of the 57 s of a 64-rank
    job of 250 MB ranks (1.77 M host ops a rank; issue 42, jobs round 4)."""
    s, e = iv[0], iv[1]
    if not len(s) or not len(win[0]):
        return 0
    if (e >= s).all() and (s[1:] >= e[:-1]).all():
        # ``intervals.overlap`` summed, with one prefix sum over ``iv`` for both ends
        at = intervals.covered_before((s, e), np.concatenate((win[0], win[1])))
        n = len(win[0])
        return int(np.maximum(at[n:] - at[:n], 0).sum())
    return int(intervals.total(intervals.intersect(win, (s, e))))


def explain(ri: RankInput, starts: np.ndarray, ends: np.ndarray) -> dict:
    """Attribute the late windows of one rank; {window_ns, by_category, gpu_compute_ns, cause, ...}.

    Windows that overlap (collectives issued together: DDP's gradient buckets, late by the
    same sleep) are one stretch of time: ``window_ns`` is their union and ``windows`` the
    stretches. Summed, the real GPU ddp2's two buckets a step made 248 ms of 'late windows'
    for 124 ms of lateness, the excess reported 'outside the trace' and the planted sleep
    '9.99 ms of 20.6 ms per all_reduce' (it is 20 of 20.6)."""
    win = intervals.union(starts, ends)
    total = intervals.total(win)
    if total <= 0:
        return {"window_ns": 0, "windows": 0, "by_category": {}, "gpu_compute_ns": 0,
                "cause": None, "cause_ns": 0, "text": ""}
    by = {}
    covered = 0
    for cat, iv in ri.activity.items():
        ns = covered_ns(win, iv)
        if ns:
            by[cat] = ns
            covered += ns
    lo, hi = ri.activity_span
    inside = intervals.total(intervals.intersect(win, (np.array([lo]), np.array([hi])))) if lo >= 0 else 0
    by["untraced"] = max(inside - covered, 0)
    by["outside_trace"] = total - inside
    by = {k: int(v) for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v}
    gpu = covered_ns(win, ri.gpu_compute)
    if gpu >= GPU_COMPUTE_SHARE * total:
        cause, cause_ns = "gpu_compute", gpu
    else:
        cause, cause_ns = next(((k, v) for k, v in by.items() if k != "outside_trace"), (None, 0))
    return {"window_ns": total, "windows": int(len(win[0])), "by_category": by,
            "gpu_compute_ns": int(gpu), "cause": cause, "cause_ns": int(cause_ns),
            "text": CAUSE_TEXT.get(cause, "") if cause else ""}


PASSED_ON_SHARE = 0.5


def refine_comm_wait(why: dict, ri: RankInput, matches: pd.DataFrame, rank: int,
                     starts: np.ndarray, ends: np.ndarray, late_ns: int) -> None:
    """A straggler late while blocked in collectives (``comm_wait``) passes on another rank's
    delay only when one of its own collectives was still running then at which another rank
    was last (by >= ``late_ns``); else the wait was its own -- a collective at which it was
    itself last, or one that had already ended (gloo tp2: rank 1's wait_tensor returned
    6.5 ms after its all_reduce ended, on both ranks; the lever sent the reader to 'the rank
    that arrived last at that collective': rank 1 itself). ``passed_on_ns``: the part of the
    windows' comm_wait spent in collectives another rank was late to; in place."""
    if why.get("cause") != "comm_wait":
        return
    cw = ri.activity.get("comm_wait")
    if cw is None or not len(cw[0]):
        return
    mine = intervals.intersect(intervals.union(starts, ends), cw)
    lasts = matches[matches["last"] & (matches["lateness_ns"] >= late_ns) & (matches["rank"] != rank)]
    held = matches[(matches["rank"] == rank) & matches["instance"].isin(lasts["instance"])]
    hs = held["ts"].to_numpy(np.int64)
    passed = intervals.total(intervals.intersect(
        mine, intervals.union(hs, hs + held["dur"].to_numpy(np.int64))))
    why["passed_on_ns"] = int(passed)
    if passed < PASSED_ON_SHARE * why["cause_ns"]:
        why["cause"], why["text"] = "comm_own", CAUSE_TEXT["comm_own"]
        # of it, the time none of its own collectives was running any more: the thread sat
        # in a wait whose collective had ended (gloo tp2: rank 1's wait_tensor returned
        # 6.4-7.9 ms after its gloo:all_reduce ended, rank 0's within 0.04 ms)
        own = matches[matches["rank"] == rank]
        os_ = own["ts"].to_numpy(np.int64)
        why["after_end_ns"] = int(intervals.total(intervals.subtract(
            mine, intervals.union(os_, os_ + own["dur"].to_numpy(np.int64)))))


def wait_categories(ri: RankInput, matches: pd.DataFrame, straggler: int, offset_ns: int,
                    late_ns: int) -> dict:
    """What rank ``ri``'s issuing thread was in while it waited for the straggler (at the
    instances the straggler was late to by >= ``late_ns``: [its arrival, + its wait], on its
    own clock): {category: ns} (``untraced``: no category) -- the wait's own account, which
    a per-rank model reads as the rank's time (gloo ddp2: rank 0 waits 30.9 ms a step for
    rank 1's sleep, untraced)."""
    late = matches.loc[(matches["rank"] == straggler) & matches["last"]
                       & (matches["lateness_ns"] >= late_ns), "instance"]
    g = matches[matches["instance"].isin(late) & (matches["rank"] == ri.rank)]
    if not len(g):
        return {}
    st = g["arrival_ns"].to_numpy(np.int64) - offset_ns
    win = intervals.union(st, st + g["wait_ns"].to_numpy(np.int64))
    total = intervals.total(win)
    by = {c: covered_ns(win, iv) for c, iv in ri.activity.items()}
    by = {c: v for c, v in by.items() if v}
    by["untraced"] = by.get("untraced", 0) + max(0, int(total) - sum(by.values()))
    return {c: v for c, v in by.items() if v}


MORE_CALLS_X = 1.1


def refine_cpu_op(why: dict, inputs: list[RankInput], rank: int) -> None:
    """A straggler late in CPU operators: operators the others do not run, or run less often
    (``extra``), or the same calls, slower (``slower``) -- per step, against the other ranks'
    median of each name (``RankInput.op_calls``). More slower than extra: ``cpu_slower`` --
    moving host work off the step path is no lever for a rank whose work is the others'
    (gloo fsdp2, nothing planted: rank 1's extra 0.57 ms a step was in the same calls;
    fsdp2_extra1: 22.7 ms a step of aten::mm only rank 1 runs, 23.2 planted). In place:
    ``op_excess`` {extra_ns, slower_ns (per step), top: [{name, ns_per_step,
    others_ns_per_step, calls_per_step, others_calls_per_step}]}."""
    if why.get("cause") != "cpu_op":
        return

    def per_step(ri: RankInput) -> dict[str, tuple[float, float]]:
        n = max(ri.kernel_steps if ri.kernel_steps >= 0 else len(ri.steps), 1)
        return {k: (c / n, t / n) for k, (c, t) in (ri.op_calls or {}).items()}

    mine = next((per_step(i) for i in inputs if i.rank == rank), {})
    others = [per_step(i) for i in inputs if i.rank != rank and i.op_calls]
    if not mine or not others:
        return
    extra = slower = 0.0
    top = []
    for name, (c, t) in mine.items():
        oc = float(np.median([o.get(name, (0.0, 0.0))[0] for o in others]))
        ot = float(np.median([o.get(name, (0.0, 0.0))[1] for o in others]))
        if t <= ot:
            continue
        if c > MORE_CALLS_X * oc:
            extra += t - ot
        else:
            slower += t - ot
        top.append({"name": name, "ns_per_step": int(t), "others_ns_per_step": int(ot),
                    "calls_per_step": round(c, 2), "others_calls_per_step": round(oc, 2)})
    top.sort(key=lambda d: d["others_ns_per_step"] - d["ns_per_step"])
    why["op_excess"] = {"extra_ns": int(extra), "slower_ns": int(slower), "top": top[:3]}
    if slower > extra:
        why["cause"], why["text"] = "cpu_slower", CAUSE_TEXT["cpu_slower"]


def kernel_excess(inputs: list[RankInput], rank: int, top: int = 3) -> list[dict]:
    """Compute kernels the straggler spends more GPU time in per step than the other ranks'
    median (``different kernels`` / longer GPU compute): [{name, ns_per_step, others_ns_per_step,
    excess_ns_per_step}], largest excess first."""
    def per_step(ri: RankInput) -> dict[str, float]:
        # the steps its kernel time covers (the job may compare fewer: job.common_steps)
        n = max(ri.kernel_steps if ri.kernel_steps >= 0 else len(ri.steps), 1)
        return {k: v / n for k, v in ri.kernel_ns.items()}

    mine = next((per_step(i) for i in inputs if i.rank == rank), {})
    others = [per_step(i) for i in inputs if i.rank != rank]
    if not mine or not others:
        return []
    out = []
    for name, ns in mine.items():
        ref = float(np.median([o.get(name, 0.0) for o in others]))
        if ns > ref:
            out.append({"name": name, "ns_per_step": int(ns), "others_ns_per_step": int(ref),
                        "excess_ns_per_step": int(ns - ref)})
    return sorted(out, key=lambda d: -d["excess_ns_per_step"])[:top]


__all__ = ["late_windows", "covered_ns", "explain", "wait_categories", "refine_comm_wait", "refine_cpu_op", "kernel_excess", "CAUSE_TEXT"]
