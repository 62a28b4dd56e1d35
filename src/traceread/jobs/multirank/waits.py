"""Who is late when no collective can be matched: where each rank's launching thread waits.

A job whose traces hold no matchable collective (an nsys capture of a gloo DDP job:
gloo runs on CPU threads and leaves no kernel; NVTX without c10d ranges) still shows
who held the others back: a rank that waits for a late peer parks its launching
thread in a wait (``pthread_cond_wait``, futex, ``sem_wait``, ``epoll_wait``, a
``poll``/``recv`` on a socket, a c10d/gloo wait range), while the late rank spends that
time doing something else -- sleeping (``clock_nanosleep``), running operators, or
waiting on its own GPU.

Rule (``infer``), over *windows* that every rank has: the steps seen on every rank
(same step number, each on its own clock), else the span all ranks cover when they
share one clock (one nsys export); per window and rank, ``wait`` = time the rank's
launching thread spent in waits. In each window the rank that waited least is *last*;
its lateness is the second-smallest wait minus its own (in a synchronous step the
next-latest rank waits ``lateness + transfer`` and the last only ``transfer``). The
straggler is named, as for matched collectives (``job.straggler_of``), when it is last
by >= ``LATE_MIN_NS`` in >= half of the late windows and its median lateness is
>= ``LATE_MIN_NS``. Without any wait on any rank's launching thread there is no
evidence either way: the answer is "cannot tell" and how to record what is missing.

Its cause: its own sleeps when they exceed the other ranks' by >= half the lateness
(``sleep``), else the attribution category (``RankInput.activity``) or GPU compute in
which it spent the most more time than the others per window.
"""
from __future__ import annotations

import re

import numpy as np

from ...passes import intervals

# OS-runtime calls (nsys OSRT_API) and host ranges in which a thread waits on something else.
WAIT_RX = re.compile(
    r"^(?:pthread_cond_(?:timed|clock)?wait|pthread_(?:mutex_(?:timed)?lock|join|barrier_wait)"
    r"|sem_(?:timed|clock)?wait|futex\w*|syscall|epoll_p?wait\d?|p?poll|p?select|recv(?:from|msg|mmsg)?"
    r"|accept4?|wait(?:pid|4)?|c10d::wait\w*|aten::wait|gloo:wait|ProcessGroup\w*::wait\w*"
    r"|Work(?:NCCL|Gloo)?::wait\w*)(?:@\S*)?$")
# Calls in which a thread chose to delay itself.
SLEEP_RX = re.compile(r"^(?:clock_nanosleep|nanosleep|usleep|sleep|time\.sleep)(?:@\S*)?$")
HOST_KINDS = ("osrt", "cpu_op", "annotation", "python")
LATE_MIN_NS = 100_000
STRAGGLER_MIN_SHARE = 0.5
SLEEP_SHARE = 0.5
HOW_TO_RECORD = ("record the collectives: torch.profiler on every rank (record_param_comms and the "
                 "communication kernels), or nsys with --trace=cuda,nvtx,osrt so each rank's waits "
                 "and sleeps are in the file; mark steps (prof.step() or NVTX ranges named step_N)")


def wait_thread(ev, steps_thread: tuple[int, int]) -> tuple[int, int]:
    """The thread whose waits say when the rank arrived: the one with the step ranges, else
    the process's main thread (tid == pid) when it launches GPU work, else the one with
    most launch calls. The autograd thread waits in the engine queue whenever the main
    thread does not run backward, on every rank alike: it says nothing about lateness."""
    if steps_thread[0] >= 0 and _has_steps(ev, steps_thread):
        return steps_thread
    launches = ev[ev["kind"].isin(("runtime", "driver")).to_numpy()]
    if not len(launches):
        return steps_thread
    main = launches[(launches["pid"] == launches["tid"]).to_numpy()]
    pick = main if len(main) else launches
    pid, tid = pick[["pid", "tid"]].value_counts().index[0]
    return int(pid), int(tid)


def _has_steps(ev, thread) -> bool:
    from .names import step_rows

    on = ((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy()
    return bool(step_rows(ev).to_numpy()[on].any())


def thread_waits(ev, thread: tuple[int, int]) -> dict:
    """{"waits": (starts, ends), "sleeps": (starts, ends), "wait_names": {name: ns}} of one
    thread (unions; a wait nested in a wait counts once)."""
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if thread[0] < 0 or not len(ev):
        return {"waits": empty, "sleeps": empty, "wait_names": {}}
    from ...passes.common import take
    from .names import name_matches   # one regex match per distinct name

    on = ((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy() & ev["kind"].isin(HOST_KINDS).to_numpy()
    hit_wait, hit_sleep = name_matches(ev["name"], WAIT_RX), name_matches(ev["name"], SLEEP_RX)
    # only the waits and sleeps taken: every host row of the thread was 1.77 M rows x 3
    # columns at 250 MB, the batch worker's peak (issue 42, jobs round 4)
    rows = np.flatnonzero(on & (hit_wait | hit_sleep))
    is_wait, is_sleep = hit_wait[rows], hit_sleep[rows]
    del on, hit_wait, hit_sleep
    mine = take(ev, rows, ["ts", "dur", "name"])
    s = mine["ts"].to_numpy(np.int64)
    e = s + mine["dur"].to_numpy(np.int64)
    top: dict[str, int] = {}
    for n, d in zip(mine["name"].iloc[np.flatnonzero(is_wait)].astype(str).to_numpy(), (e - s)[is_wait]):
        top[n] = top.get(n, 0) + int(d)
    return {"waits": intervals.union(s[is_wait], e[is_wait]),
            "sleeps": intervals.union(s[is_sleep], e[is_sleep]),
            "wait_names": dict(sorted(top.items(), key=lambda kv: -kv[1])[:3])}


def _windows(inputs) -> tuple[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """("steps" | "span" | "", rank -> (starts, ends) of the common windows on its own clock)."""
    steps = [i.steps for i in inputs]
    if all(len(s) for s in steps):
        common = set(steps[0]["step"])
        for s in steps[1:]:
            common &= set(s["step"])
        if common:
            out = {}
            for i in inputs:
                s = i.steps[i.steps["step"].isin(common)].sort_values("step")
                ts = s["ts"].to_numpy(np.int64)
                out[i.rank] = (ts, ts + s["dur"].to_numpy(np.int64))
            return "steps", out
    shared = len({i.clock_domain for i in inputs}) == 1 and bool(inputs[0].clock_domain)
    spans = [i.activity_span for i in inputs]
    if shared and all(s[0] >= 0 for s in spans):
        lo, hi = max(s[0] for s in spans), min(s[1] for s in spans)
        if hi > lo:
            return "span", {i.rank: (np.array([lo], np.int64), np.array([hi], np.int64)) for i in inputs}
    return "", {}


def _iv(inp, key: str) -> tuple:
    """A rank's wait or sleep intervals (none when its input carries no waits)."""
    return (inp.waits or {}).get(key, (np.empty(0, np.int64), np.empty(0, np.int64)))


def _per_window(iv: tuple, win: tuple) -> np.ndarray:
    return intervals.overlap(iv, win[0], win[1]) if len(iv[0]) else np.zeros(len(win[0]), np.int64)


def infer(inputs) -> dict:
    """Straggler inferred from thread waits (see module doc). Keys: basis ("steps"/"span"/
    None), reason (why nothing could be inferred), rank, significant, windows, late_windows,
    times_late, median_delay_ns, share, cause, cause_ns, per_rank {rank: {wait_ns, sleep_ns,
    wait_names}} (per window; the other ranks' also waits_for_ns: their wait beyond the
    straggler's per late window (median), and waits_for_total_ns over those windows)."""
    out = {"basis": None, "rank": -1, "significant": False, "windows": 0, "late_windows": 0,
           "times_late": 0, "median_delay_ns": 0, "share": 0.0, "cause": None, "cause_ns": 0, "per_rank": {},
           "reason": ""}
    if not any(len(_iv(i, "waits")[0]) for i in inputs):
        out["reason"] = "no rank's launching thread shows a wait (no OS-runtime or c10d wait ranges)"
        return out
    basis, win = _windows(inputs)
    if not basis:
        out["reason"] = "no step seen on every rank and no common clock to compare the ranks' waits over"
        return out
    ranks = [i.rank for i in inputs]
    W = np.array([_per_window(_iv(i, "waits"), win[i.rank]) for i in inputs])
    S = np.array([_per_window(_iv(i, "sleeps"), win[i.rank]) for i in inputs])
    n = W.shape[1]
    first = win[ranks[0]]
    out.update(basis=basis, windows=int(n), span_ns=int((first[1] - first[0]).sum()), per_rank={
        r: {"wait_ns": int(np.median(W[k])), "sleep_ns": int(np.median(S[k])),
            "wait_names": (inputs[k].waits or {}).get("wait_names", {})} for k, r in enumerate(ranks)})
    order = np.sort(W, axis=0)
    last = np.argmin(W, axis=0)
    late = order[1] - order[0]
    is_late = late >= LATE_MIN_NS
    out["late_windows"] = int(is_late.sum())
    if not is_late.any():
        return out
    totals = np.bincount(last[is_late], weights=late[is_late], minlength=len(ranks))
    k = int(np.argmax(totals))
    mine = is_late & (last == k)
    med = int(np.median(late[mine]))
    share = float(mine.sum() / is_late.sum())
    out.update(rank=ranks[k], times_late=int(mine.sum()), median_delay_ns=med, share=share,
               significant=bool(med >= LATE_MIN_NS and share >= STRAGGLER_MIN_SHARE))
    # what each other rank waited *for the straggler*: its wait beyond the straggler's own
    # (the collective's transfer, which every rank waits, the straggler too), in the windows
    # the straggler was late; not all of its wait (gpu/ddp2: 151 ms a step of which 30 ms
    # was rank 1's sleep, the rest gloo moving the gradients)
    beyond = np.clip(W[:, mine] - W[k][mine], 0, None)
    for j, r in enumerate(ranks):
        if j != k:
            out["per_rank"][r].update(waits_for_ns=int(np.median(beyond[j])),
                                      waits_for_total_ns=int(beyond[j].sum()))
    out["cause"], out["cause_ns"] = _cause(inputs, k, win, mine, S, med)
    return out


def _cause(inputs, k: int, win: dict, mine: np.ndarray, S: np.ndarray, late_ns: int) -> tuple[str, int]:
    """What the late rank did more than the others, per late window (median)."""
    others = [j for j in range(len(inputs)) if j != k]

    def excess(rows: np.ndarray) -> int:
        return int(np.median(rows[k][mine] - rows[others].mean(axis=0)[mine]))

    sleep = excess(S)
    if sleep >= SLEEP_SHARE * late_ns:
        return "sleep", sleep
    best, best_ns = "untraced", 0
    cats = sorted({c for i in inputs for c in i.activity if c != "comm_wait"})
    for c in cats + ["gpu_compute"]:
        rows = np.array([_per_window(i.gpu_compute if c == "gpu_compute" else
                                     i.activity.get(c, (np.empty(0, np.int64),) * 2), win[i.rank])
                         for i in inputs])
        x = excess(rows)
        if x > best_ns:
            best, best_ns = c, x
    return best, best_ns


__all__ = ["WAIT_RX", "SLEEP_RX", "HOW_TO_RECORD", "wait_thread", "thread_waits", "infer"]
