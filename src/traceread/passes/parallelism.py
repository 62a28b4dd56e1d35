"""The job's parallel layout (DDP, FSDP, TP, PP, EP) and each strategy's own losses.

A pure function of the event table, the trace's ``distributedInfo`` and the program context
(``passes/program.py``). Every strategy names the event that proves it; docs/parallelism.md
gives each rule and formula.

* comm calls: host rows whose name is a c10d / gloo / nccl call (``c10d::send``,
  ``gloo:all_reduce``, ``record_param_comms`` ...) or whose ``collective`` column is set, and
  NCCL kernels. A call nested in another comm call of its thread (``gloo:send`` inside
  ``c10d::send``) is the same call and is dropped.
* compute: non-comm kernels when the trace has kernels; else (a CPU job) the host operators
  of the step thread -- there the host is the compute resource.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ..collectives import (COMM_NAME_RX, collective_from_kernel, dtype_size, is_comm_kernel,
                           issued_in_order,
                           normalize_collective)
from . import intervals as iv
from .common import kind_in, lookup_at
from .cpudesign import cpu_design

HOST = ("cpu_op", "annotation", "python")
P2P = ("send", "recv")


def parallelism(ev: pd.DataFrame, meta=None, ctx: dict | None = None,
                steps: pd.DataFrame | None = None) -> dict:
    """``{rank, strategies: [...], pipeline?, ep?, ddp?, fsdp?, comm_model?}`` (see module
    doc); ``steps``: the window's step rows (columns start, end, tid), None for a whole-trace
    window (the per-step metrics then stay out)."""
    ctx = ctx or {}
    calls = comm_calls(ev)
    groups = process_groups(meta)
    rank = _rank(meta)
    fw = dict(ctx.get("framework_evidence") or {})
    strategies = detect(calls, fw, groups)
    out: dict = {"rank": rank, "strategies": strategies}
    kinds = {s["kind"] for s in strategies}
    spans = _step_spans(steps)
    if "pp" in kinds and spans:
        pp = next(s for s in strategies if s["kind"] == "pp")
        out["pipeline"] = pipeline(ev, calls, spans, pp, rank)
    if "ep" in kinds:
        ranks = next(s["ranks"] for s in strategies if s["kind"] == "ep")
        ep = all_to_all_bytes(ev, calls, max(1, len(spans)), ranks)
        if ep:
            out["ep"] = ep
    if "tp" in kinds and spans:
        tp = next(s for s in strategies if s["kind"] == "tp")
        layers = tp_layers(ev, calls, spans, tp.get("process_group"))
        if layers:
            out["tp"] = layers
    if "ddp" in kinds and spans:
        out["ddp"] = ddp_overlap(ev, calls, spans)
    if "fsdp" in kinds and spans:
        out["fsdp"] = fsdp_exposure(ev, calls, spans)
    model = comm_model(ev, calls, groups, ctx.get("comm_backend"))
    if model:
        out["comm_model"] = model
    design = cpu_design(ev, meta, calls)
    if design is not None:   # no GPU op: a CPU program, or a GPU one profiled without it
        out["cpu_design"] = design
        hc = host_comm(ev, calls, spans, groups)
        if hc:
            out["host_comm"] = hc
    return out


# ------------------------------------------------------------------ evidence

def comm_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per comm call: row, collective, name, thread (pid, tid), ts, end, on_gpu, and
    issue: the operator that issues the call (``c10d::send``), not a span of its progress."""
    cols = ["row", "collective", "name", "pid", "tid", "ts", "end", "on_gpu", "issue", "pg",
            "gsize"]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    host = np.flatnonzero(kind_in(ev, HOST))
    on_gpu = kind_in(ev, ("kernel",))
    kern = np.flatnonzero(on_gpu)
    # one regex per distinct name, not per row (a trace holds millions of host rows)
    h_coll = lookup_at(ev["name"], host, _host_collective, None,
                       cand=lambda t: t.hits(COMM_NAME_RX))
    k_coll = lookup_at(ev["name"], kern, _kernel_collective, None)
    if "collective" in ev:    # record_param_comms / NCCL args name it better than the name
        for rows_, got in ((host, h_coll), (kern, k_coll)):
            given = ev["collective"].iloc[rows_]
            named = given.notna().to_numpy()
            got[named] = given[named].astype(str).to_numpy()
    rows = np.concatenate([host[h_coll != None], kern[k_coll != None]])  # noqa: E711
    colls = list(h_coll[h_coll != None]) + list(k_coll[k_coll != None])  # noqa: E711
    if not len(rows):
        return pd.DataFrame(columns=cols)
    names = ev["name"].iloc[rows].astype(object).to_numpy()   # those rows' names only
    ts = ev["ts"].to_numpy(np.int64)[rows]
    issue = kind_in(ev, ("cpu_op",))[rows]
    df = pd.DataFrame({"row": rows, "collective": colls, "name": names,
                       "pid": ev["pid"].to_numpy()[rows], "tid": ev["tid"].to_numpy()[rows],
                       "ts": ts, "end": ts + ev["dur"].to_numpy(np.int64)[rows],
                       "on_gpu": on_gpu[rows], "issue": issue,
                       "pg": _col_at(ev, "process_group", rows, None),
                       "gsize": _col_at(ev, "group_size", rows, -1)})
    # by thread, then time, the longer call first (stable: sort_values of those four keys
    # gives this order), then only the outermost calls: one take of the frame
    pid, tid, end = df["pid"].to_numpy(), df["tid"].to_numpy(), df["end"].to_numpy()
    order = np.lexsort((-end, ts, tid, pid))
    keep = order[_outermost_keep(pid[order], tid[order], end[order], issue[order],
                                 on_gpu[rows][order])]
    df = df.take(keep).reset_index(drop=True)
    return _issued_names(df)


def _issued_names(df: pd.DataFrame) -> pd.DataFrame:
    """Backend spans (``gloo:all_reduce``: not an issuing op, not a kernel) take the
    collective of the c10d op that issued them, paired in issue order per process
    (``collectives.issued_in_order``): gloo runs FSDP's reduce_scatter as an all_reduce."""
    span = ~df["issue"].to_numpy(bool) & ~df["on_gpu"].to_numpy(bool)
    op = df["issue"].to_numpy(bool) & df["name"].astype(str).str.startswith("c10d::").to_numpy()
    if not span.any() or not op.any():
        return df
    coll = df["collective"].to_numpy(object).copy()
    pid, ts = df["pid"].to_numpy(), df["ts"].to_numpy(np.int64)
    for p in np.unique(pid[span]):
        s_, o_ = np.flatnonzero(span & (pid == p)), np.flatnonzero(op & (pid == p))
        coll[s_] = issued_in_order(ts[s_].tolist(), list(coll[s_]), ts[o_].tolist(),
                                   list(coll[o_]))
    return df.assign(collective=coll)


def _col_at(ev: pd.DataFrame, col: str, rows: np.ndarray, null):
    """``ev[col]`` at ``rows`` (process group name, group size: NCCL's record_param_comms),
    ``null`` where the column is absent or empty."""
    if col not in ev:
        return np.full(len(rows), null, dtype=object)
    vals = ev[col].iloc[rows]
    return np.where(vals.notna().to_numpy(), vals.astype(object).to_numpy(), null)


def _host_collective(name: str) -> str | None:
    return normalize_collective(name) if COMM_NAME_RX.search(name) else None


def _kernel_collective(name: str) -> str | None:
    return (collective_from_kernel(name) or "unknown") if is_comm_kernel(name) else None


def _outermost_keep(p: np.ndarray, t: np.ndarray, e: np.ndarray, issue: np.ndarray,
                    g: np.ndarray) -> np.ndarray:
    """The calls to keep (a mask) of calls sorted by thread (pid ``p``, tid ``t``), then
    time: drop host calls that lie inside an earlier issuing operator of the same thread
    (the same call: ``gloo:send`` inside ``c10d::send``). A backend span (``gloo:send``) runs
    on after its operator returns, so a later ``c10d::recv_`` inside it is a call of its
    own. ``e``: ends; ``issue``: an issuing op (cpu_op); ``g``: on the GPU (always kept)."""
    # per thread, each row's reach: the latest end of the issuing host calls before it
    # (-1: none); a host call ending by then is dropped
    g = np.asarray(g, bool)
    grows = np.where(np.asarray(issue, bool) & ~g, e, -1)
    cut = np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1
    reach = np.full(len(e), -1, np.int64)
    for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(e)].tolist()):
        if b - a > 1:
            reach[a + 1:b] = np.maximum.accumulate(grows[a:b - 1])
    return g | (e > reach)


def process_groups(meta) -> list[dict]:
    """Process groups from ``distributedInfo.pg_config``: name, desc, size, ranks."""
    info = getattr(meta, "distributed", None) or {}
    out = []
    for g in info.get("pg_config") or []:
        if isinstance(g, dict):
            ranks = [int(r) for r in g.get("ranks") or [] if isinstance(r, (int, float))]
            out.append({"name": str(g.get("pg_name", "")), "desc": str(g.get("pg_desc", "")),
                        "size": int(g.get("pg_size") or len(ranks) or -1), "ranks": ranks})
    if not out and info.get("world_size"):
        n = int(info["world_size"])
        out.append({"name": "0", "desc": "default_pg", "size": n, "ranks": list(range(n))})
    return out


def _rank(meta) -> int | None:
    r = getattr(meta, "rank", None)
    return int(r) if isinstance(r, (int, np.integer)) and r >= 0 else None


# (kind, program frameworks that prove it, collectives that prove it)
STRATEGY_RULES = (
    ("ddp", ("ddp",), ()),
    ("fsdp", ("fsdp2", "fsdp1", "deepspeed"), ()),
    ("tp", ("dtensor",), ()),
    ("pp", ("pipelining",), P2P + ("send_recv",)),
    ("ep", ("torchrec",), ("all_to_all",)),
)
# which collectives a strategy's group is read from
_STRATEGY_COLLS = {"ddp": ("all_reduce",), "fsdp": ("all_gather", "reduce_scatter"),
                   "tp": ("all_reduce", "all_gather", "reduce_scatter"),
                   "pp": P2P + ("send_recv",), "ep": ("all_to_all",)}


def detect(calls: pd.DataFrame, fw: dict, groups: list[dict]) -> list[dict]:
    """The strategies the evidence proves, each with its group (see STRATEGY_RULES)."""
    out = []
    for kind, fws, colls in STRATEGY_RULES:
        evidence = [f"{f}: {fw[f]}" for f in fws if f in fw]
        if kind == "tp":
            evidence += _serving_tp(calls, fw)
        if kind == "pp" and len(calls) and (calls["collective"] == "all_to_all").any():
            colls = P2P    # NCCL runs all_to_all as grouped SendRecv kernels: not a pipeline
        hit = calls[calls["collective"].isin(colls)] if colls and len(calls) else calls[:0]
        if len(hit):
            evidence.append(f"{hit['collective'].iat[0]} call: {hit['name'].iat[0]}")
        if not evidence:
            continue
        g = _group(groups, calls[calls["collective"].isin(colls or _STRATEGY_COLLS[kind])]
                   if len(calls) else calls)
        out.append({"kind": kind, "group_size": g["size"] if g else None,
                    "ranks": g["ranks"] if g else [],
                    "process_group": _pg_label(g),
                    "calls": int(calls["collective"].isin(colls or _STRATEGY_COLLS[kind]).sum())
                    if len(calls) else 0, "evidence": evidence})
    return out


def _pg_label(g: dict | None) -> str | None:
    if not g:
        return None
    return g["desc"] if g["desc"] not in ("", "undefined") else g["name"] or None


def _serving_tp(calls: pd.DataFrame, fw: dict) -> list[str]:
    """vLLM / SGLang all-reduce activations only across their tensor-parallel group: the
    engine named and an all_reduce call prove TP."""
    engines = [f for f in ("vllm", "sglang") if f in fw]
    ar = calls[calls["collective"] == "all_reduce"] if len(calls) else calls
    if not engines or not len(ar):
        return []
    return [f"{engines[0]}: {fw[engines[0]]}", f"all_reduce call: {ar['name'].iat[0]}"]


def _group(groups: list[dict], mine: pd.DataFrame | None = None) -> dict | None:
    """The group a strategy's calls ``mine`` run on: the process group their
    ``record_param_comms`` names (NCCL), else their recorded group size alone; gloo's calls
    name no group, so then only a job with one process group can say which -- with several
    the group stays unknown (null), never guessed."""
    if mine is not None and len(mine):
        pg = pd.Series(mine["pg"]).dropna().astype(str)
        if len(pg):
            name = pg.mode().iat[0]
            hit = [g for g in groups if name in (g["name"], g["desc"])]
            if hit:
                return hit[0]
        size = pd.Series(mine["gsize"]).astype(float)
        size = size[size > 0]
        if len(size):
            n = int(size.mode().iat[0])
            same = [g for g in groups if g["size"] == n]
            return same[0] if len(same) == 1 else {"name": "", "desc": "", "size": n, "ranks": []}
    return groups[0] if len(groups) == 1 else None


# ------------------------------------------------------------------ steps and compute

def _step_spans(steps: pd.DataFrame | None) -> list[tuple[int, int, int]]:
    """(start, end, tid) of each step; none for a whole-trace window."""
    if steps is None or not len(steps):
        return []
    return [(int(s), int(e), int(t)) for s, e, t in zip(steps["start"], steps["end"],
                                                          steps["tid"])]


def compute_intervals(ev: pd.DataFrame, calls: pd.DataFrame, tid: int | None) -> iv.Intervals:
    """When the compute resource worked: non-comm kernels, else the host operators of the step
    thread ``tid`` minus its comm calls (a CPU job computes on its host thread)."""
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    k = np.flatnonzero(kind_in(ev, ("kernel",)))
    if len(calls):
        k = k[~np.isin(k, calls["row"].to_numpy(np.int64))]
    if len(k):
        return iv.union(ts[k], end[k])
    ops = np.flatnonzero(kind_in(ev, ("cpu_op",)) & (ev["tid"].to_numpy() == tid))
    busy = iv.union(ts[ops], end[ops])
    blocked = host_blocked(ev, calls, tid)
    return iv.subtract(busy, blocked) if len(blocked[0]) else busy


def host_blocked(ev: pd.DataFrame, calls: pd.DataFrame, tid: int | None) -> iv.Intervals:
    """When the thread ``tid`` is blocked in comm: the operators that issue comm calls (gloo's
    send/recv spans on it run on while later ops compute: only the issuing operators block
    it) and a functional collective's wait (``_c10d_functional::wait_tensor``: it computes
    nothing)."""
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    ops = np.flatnonzero(kind_in(ev, ("cpu_op",)) & (ev["tid"].to_numpy() == tid))
    host_calls = calls[(calls["tid"] == tid) & calls["issue"].astype(bool)] if len(calls) \
        else calls
    waits = ops[lookup_at(ev["name"], ops, lambda n: bool(WAIT_RX.match(n)), False, bool)]
    return iv.union(np.concatenate([host_calls["ts"].to_numpy(np.int64), ts[waits]]),
                    np.concatenate([host_calls["end"].to_numpy(np.int64), end[waits]]))


WAIT_RX = re.compile(r"^(?:_c10d_functional|c10d_functional|c10d)::wait(?:_tensor)?$")

# The thread resumes this soon after the transfer it waited on completes (Python returns
# from ``work.wait()`` and reaches its next operator or call): a transfer that completes while
# the thread does something else untraced (a sleep, Python, I/O) is not what it waited on.
RESUME_TOL_NS = 1_000_000


def comm_waits(ev: pd.DataFrame, calls: pd.DataFrame, tid: int | None, qs, qe,
               open_tol_share: float = 0.0) -> dict:
    """Per step [qs, qe) the step thread's time blocked in communication, as arrays of ns:
    ``p2p`` (send/recv: what a pipeline's bubble is) and ``other`` (collectives, barriers).

    Blocked = the issuing operators (``c10d::send``, ``c10d::recv_``, ``c10d::barrier``) plus,
    in each gap between the thread's other operators, the time spent waiting on a transfer:
    inside a receive span of the thread itself (gloo runs ``gloo:recv`` on the caller until
    the message arrived), or up to where any comm span ends when the thread's next operator
    or call starts within ``RESUME_TOL_NS`` of that end (gloo's ``work.wait()`` records
    nothing, so a wait is known by where it ends), and after a synchronous collective's issue
    (``c10d::barrier``) the gap until the thread's next operator. Any other untraced time --
    a sleep, Python, I/O -- stays the stage's own work. ``open_tol_share``: see
    ``wait_sets``."""
    qs, qe = np.asarray(qs, np.int64), np.asarray(qe, np.int64)
    out = {"p2p": np.zeros(len(qs), np.int64), "other": np.zeros(len(qs), np.int64)}
    if not len(calls) or not len(qs):
        return out
    sets = wait_sets(ev, calls, tid, qs, qe,
                     lambda host: np.where(host["collective"].isin(P2P).to_numpy(), "p2p",
                                           "other"), open_tol_share)
    empty = (np.array([], np.int64),) * 2
    p2p, other = sets.get("p2p", empty), sets.get("other", empty)
    # a moment both kinds explain counts once, as P2P
    out["p2p"] = iv.overlap(p2p, qs, qe)
    out["other"] = iv.overlap(iv.subtract(other, p2p), qs, qe)
    return out


def wait_sets(ev: pd.DataFrame, calls: pd.DataFrame, tid: int | None, qs, qe, key,
              open_tol_share: float = 0.0) -> dict:
    """The step thread's comm waits (``comm_waits``' rule) as one interval set per label:
    ``key(host_calls) -> label per row`` labels each host comm call, and a wait belongs to
    the call it waited on (an issuing operator to itself). ``open_tol_share`` > 0 also counts
    a gap the thread left while a comm span was still open, when that span closed within
    ``max(RESUME_TOL_NS, open_tol_share x the gap)`` after: the backend's span may close
    after it woke its waiter -- gloo's worker runs the future's callbacks (DDP's comm hook
    divides the bucket) before its record_function ends (tests/fixtures/gloo/ddp2 rank 0:
    ``gloo:all_reduce`` closes 0.9-1.3 ms after the step thread resumed from 32 ms waits)."""
    qs, qe = np.asarray(qs, np.int64), np.asarray(qe, np.int64)
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    host = calls[~calls["on_gpu"].astype(bool)]
    if not len(host) or not len(qs):
        return {}
    label = np.asarray(key(host), dtype=object)
    issue = host["issue"].astype(bool).to_numpy()
    on_thread = (host["tid"] == tid).to_numpy()
    mine = on_thread & issue
    ops = np.flatnonzero(kind_in(ev, ("cpu_op",)) & (ev["tid"].to_numpy() == tid))
    hs, he = host["ts"].to_numpy(np.int64), host["end"].to_numpy(np.int64)
    work = iv.subtract(iv.union(ts[ops], end[ops]), iv.union(hs[mine], he[mine]))
    gaps = iv.complement(work, int(qs.min()), int(qe.max()))
    resume = np.unique(np.concatenate([ts[ops], hs[on_thread]]))
    own_recv = on_thread & (host["collective"] == "recv").to_numpy() & ~issue
    pieces = _wait_pieces(gaps, hs, he, own_recv, resume)
    if open_tol_share > 0:
        pieces += _open_at_resume(gaps, hs, he, open_tol_share)
    blocking = _after_blocking_issue(gaps, host[mine & ~host["collective"].isin(P2P).to_numpy()],
                                     resume, with_index=True)
    idx_mine = np.flatnonzero(mine)
    non_p2p_mine = idx_mine[~host["collective"].iloc[idx_mine].isin(P2P).to_numpy()]
    if open_tol_share > 0:   # the strict reading (host_comm): a closed backend span ends it
        blocking = _until_backend_closed(blocking, hs[non_p2p_mine], hs[~issue], he[~issue])
    # one pass: each label's own issuing operators and waits (per-call labels: thousands)
    by: dict = {}
    for i in np.flatnonzero(mine).tolist():
        by.setdefault(label[i], []).append((int(hs[i]), int(he[i])))
    for a, b, i in pieces:
        by.setdefault(label[i], []).append((a, b))
    for a, b, k in blocking:
        by.setdefault(label[non_p2p_mine[k]], []).append((a, b))
    return {lab: iv.union(np.array([a for a, _ in w], np.int64),
                          np.array([b for _, b in w], np.int64)) for lab, w in by.items()}


def _until_backend_closed(blocking: list, issued: np.ndarray, s: np.ndarray,
                          e: np.ndarray) -> list:
    """``blocking`` (start, end, k) cut at the end of the backend spans that ran beside issue
    k (started before the thread resumed, ended after the issue began): once they closed the
    collective was done, and the thread's later untraced time is its own (gloo fsdp2_sleep1
    rank 1: ``gloo:barrier`` closes 0.8 ms into the step, then the rank's own 20 ms sleep
    until its next operator -- not a wait on the barrier)."""
    out = []
    for a, b, k in blocking:
        beside = (s < b) & (e > issued[k])
        if beside.any():
            b = min(b, int(e[beside].max()))
        if b > a:
            out.append((a, b, k))
    return out


def _open_at_resume(gaps: iv.Intervals, s: np.ndarray, e: np.ndarray,
                    share: float) -> list[tuple[int, int, int]]:
    """(start, end, span index) of the gaps the thread left while span i was still open,
    when i closed within ``max(RESUME_TOL_NS, share x gap)`` after (see ``wait_sets``). One
    loop per span (a CPU trace's comm spans: a few per step), over the gaps ending inside
    it."""
    out = []
    lo = np.searchsorted(gaps[1], s, side="right")
    hi = np.searchsorted(gaps[1], e, side="left")
    ends = np.sort(e)
    for i in np.flatnonzero(hi > lo).tolist():
        gs, ge = gaps[0][lo[i]:hi[i]], gaps[1][lo[i]:hi[i]]
        tol = np.maximum(RESUME_TOL_NS, (share * (ge - gs)).astype(np.int64))
        a = np.maximum(gs, s[i])
        # a span that ended just before the thread resumed is what it waited on
        # (``_wait_pieces``): a still-open one then waited on nothing more
        closed = np.searchsorted(ends, ge, side="right") > np.searchsorted(
            ends, np.maximum(gs, ge - RESUME_TOL_NS), side="right")
        for j in np.flatnonzero((e[i] - ge <= tol) & (a < ge) & ~closed).tolist():
            out.append((int(a[j]), int(ge[j]), int(i)))
    return out


def _after_blocking_issue(gaps: iv.Intervals, issue: pd.DataFrame,
                          resume: np.ndarray, with_index: bool = False) -> list[tuple]:
    """The time after an issuing collective operator (``c10d::barrier``, ``c10d::allreduce_``)
    until the thread's next operator or call: a synchronous collective returns only once
    every rank reached it, and the backend's span (``gloo:barrier``) may end before the
    caller is woken, so that stretch is the wait. An asynchronous call (DDP's buckets) is
    followed by operators at once: no wait."""
    if not len(issue) or not len(gaps[0]):
        return []
    e = issue["end"].to_numpy(np.int64)
    k = np.searchsorted(gaps[0], e, side="right") - 1
    ok = (k >= 0) & (gaps[1][np.maximum(k, 0)] > e)
    nxt = np.searchsorted(resume, e, side="right")
    stop = np.where(nxt < len(resume), resume[np.minimum(nxt, len(resume) - 1)], np.iinfo(np.int64).max)
    until = np.minimum(gaps[1][np.maximum(k, 0)], stop)
    if with_index:   # (start, end, row of ``issue``)
        return [(int(e[i]), int(until[i]), int(i)) for i in np.flatnonzero(ok).tolist()
                if until[i] > e[i]]
    return [(int(a), int(b)) for a, b in zip(e[ok], until[ok]) if b > a]


def _wait_pieces(gaps: iv.Intervals, s: np.ndarray, e: np.ndarray, own_recv: np.ndarray,
                 resume: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, span index) of the waits inside ``gaps`` (see ``comm_waits``)."""
    out = []
    order = np.argsort(e, kind="stable")
    e_sorted = e[order]
    los = np.searchsorted(e_sorted, gaps[0] + 1)
    his = np.searchsorted(e_sorted, gaps[1] + 1)
    has = np.flatnonzero(his > los)      # only the gaps a comm span ends in (few of many)
    for j in has.tolist():
        gs, ge, lo, hi = int(gaps[0][j]), int(gaps[1][j]), int(los[j]), int(his[j])
        cursor = gs
        for i in order[lo:hi]:
            a = max(cursor, int(s[i]))
            if a >= e[i]:
                continue
            if not own_recv[i]:
                k = np.searchsorted(resume, e[i], side="left")
                nxt = int(resume[k]) if k < len(resume) else ge
                if min(nxt, ge) - e[i] > RESUME_TOL_NS:
                    continue
            out.append((a, int(e[i]), int(i)))
            cursor = int(e[i])
    return out


def _clip_total(x: iv.Intervals, lo: int, hi: int) -> int:
    return iv.total(iv.intersect(x, (np.array([lo]), np.array([hi]))))


# ------------------------------------------------------------------ a CPU job's exposed comm

# the backend's span may close this share of the wait after it woke the waiter (wait_sets)
OPEN_TOL_SHARE = 0.05
MAX_SIZES = 8   # distinct call sizes listed per collective


def host_comm(ev: pd.DataFrame, calls: pd.DataFrame, spans, groups: list[dict]) -> dict | None:
    """A CPU job's exposed communication: per step, the time its step thread waits on
    collectives (``wait_sets``: the issuing operators, then the gaps it sat in until a
    transfer it waited on ended) -- on a CPU the step thread is the compute, so nothing
    overlaps that time. ``{steps, step_ns, exposed_ns, share_pct, share_min_pct,
    share_max_pct, collectives: [...]}``, the collectives by exposed time, each with its
    data-moving span's name, ``calls_per_step`` (median), ``sizes`` (the distinct bytes of
    its calls from the recorded shapes, DDP's buckets; None: not recorded),
    ``bytes_per_step`` (median), ``group_size``, ``median_call_ns`` and, per step
    (all_reduce), the exposed time of every call but the one exposed longest
    (``exposed_after_first_ns``: later buckets waited on after the longest). None without
    steps, comm calls or with GPU kernels. ``exposed_by_step``, ``calls_by_step``,
    ``bytes_by_step``: its exposed ns, calls and recorded bytes in each step. Send/recv are
    left out: a pipeline stage's waits on them are its bubble (``pipeline``)."""
    if not spans or not len(calls) or calls["on_gpu"].astype(bool).any():
        return None
    tid = spans[0][2]
    qs = np.array([s for s, _, _ in spans], np.int64)
    qe = np.array([e for _, e, _ in spans], np.int64)
    host = calls[~calls["on_gpu"].astype(bool)]
    sets = wait_sets(ev, calls, tid, qs, qe, lambda h: np.arange(len(h)), OPEN_TOL_SHARE)
    if not sets:
        return None
    step_ns = qe - qs
    coll = host["collective"].astype(str).to_numpy()
    issue = host["issue"].astype(bool).to_numpy()
    per_call = {int(i): iv.overlap(x, qs, qe) for i, x in sets.items()}
    # collectives only: a pipeline stage's send/recv waits are its schedule's bubble
    # (``pipeline``), not a collective's exposed time
    p2p = np.isin(coll, P2P)
    coll_sets = [x for i, x in sets.items() if not p2p[int(i)]]
    if not coll_sets:
        return None
    total = iv.overlap(iv.union(np.concatenate([x[0] for x in coll_sets]),
                                np.concatenate([x[1] for x in coll_sets])), qs, qe)
    if not int(total.sum()):
        return None
    sized = _sized_calls(ev, calls, groups)
    moving = _moving(calls)
    rows = []
    for c in pd.unique(coll[~p2p]):
        mine = [i for i in per_call if coll[i] == c]
        if not mine:   # its calls waited on nothing in the steps (a cut file's last call)
            continue
        # a moment two calls of one collective both explain counts once
        u = iv.union(np.concatenate([sets[i][0] for i in mine]),
                     np.concatenate([sets[i][1] for i in mine]))
        w = iv.overlap(u, qs, qe)
        if not int(w.sum()):
            continue
        moved = [i for i in mine if not issue[i]]   # the backend's spans: one per call
        rows.append(_collective_row(c, w, moved, per_call, moving, sized, qs, qe, groups))
    rows.sort(key=lambda r: -r["exposed_ns"])
    share = 100.0 * total / np.maximum(step_ns, 1)
    return {"steps": int(len(spans)), "step_ns": int(step_ns.sum()),
            "exposed_ns": int(total.sum()),
            "share_pct": round(100.0 * int(total.sum()) / int(step_ns.sum()), 1),
            "share_min_pct": round(float(share.min()), 1),
            "share_max_pct": round(float(share.max()), 1), "collectives": rows}


def _collective_row(c: str, w: np.ndarray, mine: list, per_call: dict, moving: pd.DataFrame,
                    sized: pd.DataFrame, qs, qe, groups) -> dict:
    """One collective of ``host_comm``: its exposed time per step ``w`` and its calls."""
    mv = moving[moving["collective"].astype(str) == c]
    t = mv["ts"].to_numpy(np.int64)
    counts = [int(((t >= a) & (t < b)).sum()) for a, b in zip(qs, qe)]
    b = sized[sized["collective"].astype(str) == c] if len(sized) else sized
    size = _common_size(groups)
    bt = b["ts"].to_numpy(np.int64) if len(b) else np.array([], np.int64)
    per_step = [int(b["bytes"].to_numpy()[(bt >= x) & (bt < y)].sum()) for x, y in zip(qs, qe)] \
        if len(b) else []
    # per step, the calls' exposed time but the longest one's: later buckets' own waits
    total, top = np.zeros(len(qs), np.int64), np.zeros(len(qs), np.int64)
    for i in mine:
        total += per_call[i]
        top = np.maximum(top, per_call[i])
    after = int((total - top).clip(0).sum())
    return {"collective": c, "name": str(mv["name"].mode().iat[0]) if len(mv) else c,
            "exposed_ns": int(w.sum()),
            "share_pct": round(100.0 * int(w.sum()) / int((qe - qs).sum()), 1),
            "calls_per_step": float(np.median(counts)) if counts else 0.0,
            # the distinct sizes (DDP's buckets) and the bytes a step moves (median)
            "sizes": sorted({int(x) for x in b["bytes"]})[:MAX_SIZES] if len(b) else None,
            "bytes_per_step": int(np.median(per_step)) if per_step else None,
            "group_size": int(b["group_size"].mode().iat[0]) if len(b) else size,
            "median_call_ns": int((mv["end"] - mv["ts"]).median()) if len(mv) else None,
            "exposed_after_first_ns": after,
            "exposed_by_step": [int(x) for x in w], "calls_by_step": counts,
            "bytes_by_step": per_step or None}


def _common_size(groups: list[dict]) -> int | None:
    """The group size every process group shares (gloo names no group per call)."""
    sizes = {g["size"] for g in groups if g.get("size", -1) > 0}
    return sizes.pop() if len(sizes) == 1 else None


# ------------------------------------------------------------------ pipeline

def pipeline(ev: pd.DataFrame, calls: pd.DataFrame, spans, strategy: dict,
             rank: int | None) -> dict:
    """This stage's busy share and bubble per step, the schedule and microbatch count read
    from its send/recv order, and the theoretical bubble (p-1)/(m+p-1)."""
    tid = spans[0][2]
    busy = compute_intervals(ev, calls, tid)
    p2p = _transfers(calls[calls["collective"].isin(P2P) & (calls["tid"] == tid)]) if len(calls) \
        else calls
    step_ns = sum(e - s for s, e, _ in spans)
    busy_ns = sum(_clip_total(busy, s, e) for s, e, _ in spans)
    p = strategy["group_size"]
    ranks = strategy["ranks"]
    stage = ranks.index(rank) if rank is not None and rank in ranks else None
    end_stage = stage is not None and p is not None and stage in (0, p - 1)
    marks = schedule_marks(ev, spans, tid)
    v = 1
    if marks:
        m, schedule, v = marks
    else:
        seqs = [p2p[(p2p["ts"] >= s) & (p2p["ts"] < e)]["collective"].tolist()
                for s, e, _ in spans]
        m = _microbatches(seqs, end_stage, middle=stage is not None and not end_stage)
        schedule = _schedule(seqs, end_stage, m)
    theory = round(100.0 * (p - 1) / (v * m + p - 1), 1) if p and m and schedule else None
    waits = _stage_waits(ev, calls, spans, tid, busy_ns)
    # the bubble: the step's share in the schedule's P2P calls (issue + blocking wait)
    bubble = round(100.0 * waits["p2p"] / step_ns, 1) if step_ns else None
    return {"schedule": schedule, "stages": p, "stage": stage, "microbatches": m,
            "virtual_stages": v, "steps": len(spans),
            "busy_ns": int(busy_ns), "step_ns": int(step_ns),
            # the stage's own work: the step less its comm waits (untraced work included)
            "compute_ns": int(step_ns - waits["p2p"] - waits["other"]),
            "p2p_wait_ns": int(waits["p2p"]), "other_wait_ns": int(waits["other"]),
            "recv_wait_ns": int(waits["p2p"]),
            "bubble_pct_by_stage": {str(rank if rank is not None else 0): bubble},
            "theoretical_bubble_pct": theory, "slowest_stage": None,
            "p2p_bytes_per_step": _p2p_bytes(ev, p2p, len(spans))}


def _stage_waits(ev, calls, spans, tid, busy_ns) -> dict:
    """The stage's P2P and other comm waits over its steps: from the host thread
    (``comm_waits``) on a CPU job; on a GPU, the steps' time no compute kernel covers,
    all of it P2P (a GPU stage waits for its peers only at send/recv)."""
    qs = np.array([s for s, _, _ in spans], np.int64)
    qe = np.array([e for _, e, _ in spans], np.int64)
    if len(calls) and calls["on_gpu"].astype(bool).any() or not len(calls):
        return {"p2p": int((qe - qs).sum() - busy_ns), "other": 0}
    w = comm_waits(ev, calls, tid, qs, qe)
    return {"p2p": int(w["p2p"].sum()), "other": int(w["other"].sum())}


def _transfers(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per message: the backend's spans (``gloo:send``, NCCL kernels) when recorded --
    one batched ``c10d::send`` issues several, and a batched send may carry a recv -- else
    the issuing operators."""
    moved = calls[~calls["issue"].astype(bool)]
    return moved if len(moved) else calls


# torch.distributed.pipelining's own ranges: one-stage schedules (ScheduleGPipe,
# Schedule1F1B) name each microbatch's "Forward i" / "Backward i"; multi-stage ones
# (PipelineScheduleMulti: ScheduleInterleaved1F1B, looped BFS) "PP:<stage>F<i>",
# "PP:<stage>B<i>" (I / W: the input / weight halves of a split backward)
PP_MARK_RX = re.compile(r"^(?:(Forward|Backward) (\d+)|PP:(\d+)([FBIW])(\d+))$")


def schedule_marks(ev: pd.DataFrame, spans, tid: int) -> tuple[int, str, int] | None:
    """(microbatches, schedule, stages on this rank) from the schedule's ranges on the step
    thread: m = distinct microbatch ids per step (median); v = distinct stage ids (``PP:``
    ranges); schedule ``interleaved`` when v > 1, else ``gpipe`` when each step runs all
    forwards then all backwards (one switch), ``1f1b`` when they alternate. None: no range."""
    rows = np.flatnonzero(kind_in(ev, HOST) & (ev["tid"].to_numpy() == tid))
    hit = lookup_at(ev["name"], rows, lambda n: PP_MARK_RX.match(n) is not None, False, bool)
    rows = rows[hit]
    if not len(rows):
        return None
    ts = ev["ts"].to_numpy(np.int64)[rows]
    names = ev["name"].iloc[rows].astype(str).to_numpy()
    order = np.argsort(ts, kind="stable")
    ts, names = ts[order], names[order]
    ms, switches, stage_ids = [], [], set()
    for s, e, _ in spans:
        got = [PP_MARK_RX.match(n).groups() for n in names[(ts >= s) & (ts < e)]]
        if not got:
            continue
        kinds = ["F" if (g[0] == "Forward" or g[3] == "F") else "B" for g in got]
        ms.append(len({g[1] if g[1] is not None else g[4] for g in got}))
        switches.append(sum(a != b for a, b in zip(kinds, kinds[1:])))
        stage_ids |= {g[2] for g in got if g[2] is not None}
    if not ms:
        return None
    m, v = int(np.median(ms)), max(1, len(stage_ids))
    if v > 1:
        return m, "interleaved", v
    return m, ("gpipe" if max(switches) <= 1 else "1f1b") if m >= 2 else None, 1


def _microbatches(seqs: list[list[str]], end_stage: bool, middle: bool = False) -> int | None:
    """An end stage sends (first: activations; last: gradients) once per microbatch, a
    middle stage both ways (twice per microbatch); the median over steps."""
    if not (end_stage or middle) or not seqs:
        return None
    n = np.median([s.count("send") for s in seqs])
    m = int(n if end_stage else n / 2)
    return m or None


def _schedule(seqs: list[list[str]], end_stage: bool, m: int | None) -> str | None:
    """GPipe fills then drains: on an end stage all of one direction then all of the other
    (one switch between send and recv in the step); 1F1B alternates them."""
    if not end_stage or not m or m < 2:
        return None
    switches = [sum(a != b for a, b in zip(s, s[1:])) for s in seqs if s]
    if not switches:
        return None
    return "gpipe" if max(switches) <= 1 else "1f1b"


def _p2p_bytes(ev: pd.DataFrame, p2p: pd.DataFrame, n_steps: int) -> int | None:
    """Bytes this stage sends per step, from the send calls' recorded shapes."""
    sends = p2p[p2p["collective"] == "send"]
    if not len(sends) or "input_dims" not in ev:
        return None
    total = 0
    for r in sends["row"]:
        b = _tensor_bytes(ev["input_dims"].iat[r], ev["input_type"].iat[r])
        if b is None:
            return None
        total += b
    return int(total / max(1, n_steps))


def _moving(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls during which data moves: NCCL kernels when the trace has them (the host's
    ``nccl:*`` spans only enqueue), else the backend's host spans (gloo's worker-thread
    ``gloo:all_reduce``), else the issuing operators."""
    if not len(calls):
        return calls
    for pick in (calls["on_gpu"].astype(bool), ~calls["issue"].astype(bool)):
        if pick.any():
            return calls[pick]
    return calls


def tensor_bytes(dims, types) -> int | None:
    """Bytes of the first tensor argument of a row's recorded shapes (``input_dims``,
    ``input_type`` JSON); None when unknown."""
    return _tensor_bytes(dims, types)


def _tensor_bytes(dims, types) -> int | None:
    """Bytes of the first tensor argument (a TensorList counts its tensors)."""
    try:
        dims, types = json.loads(dims), json.loads(types)
    except (TypeError, ValueError):
        return None
    if not dims:
        return None
    first = dims[0] if dims[0] and isinstance(dims[0][0], list) else [dims[0]]
    size = dtype_size(types[0]) if types and types[0] != "TensorList" else 4
    if size < 0:
        return None
    return int(sum(int(np.prod(d)) for d in first) * size)


# ------------------------------------------------------------------ expert parallel

def all_to_all_bytes(ev: pd.DataFrame, calls: pd.DataFrame, n_steps: int,
                     ranks: list[int]) -> dict | None:
    """Bytes this rank sends and receives per step in all_to_all, and how unevenly it sends:
    ``send_imbalance`` = max / mean of the bytes sent to each peer (1.0: even), ``hot_rank``
    the peer it sends most. From ``c10d::alltoall_base_``'s recorded shapes and split sizes
    (``record_shapes=True``); None when they are not recorded."""
    a2a = calls[(calls["collective"] == "all_to_all") & ~calls["on_gpu"].astype(bool)] \
        if len(calls) else calls
    if not len(a2a) or "concrete_inputs" not in ev:
        return None
    sent = recv = 0
    per_peer = None
    for r in a2a["row"]:
        got = _a2a_split_bytes(ev["input_dims"].iat[r], ev["input_type"].iat[r],
                               ev["concrete_inputs"].iat[r])
        if got is None:
            continue
        out_b, in_b, peers = got
        sent, recv = sent + in_b, recv + out_b
        per_peer = peers if per_peer is None else per_peer + peers
    if per_peer is None:
        return None
    mean = per_peer.mean()
    hot = int(per_peer.argmax())
    moving = _moving(calls[calls["collective"] == "all_to_all"])
    return {"a2a_ns": int(iv.total(iv.union(moving["ts"], moving["end"]))),
            "sent_bytes_per_step": int(sent / n_steps), "recv_bytes_per_step": int(recv / n_steps),
            "send_bytes_by_peer": [int(x / n_steps) for x in per_peer],
            "send_imbalance": round(float(per_peer.max() / mean), 2) if mean else None,
            "hot_rank": ranks[hot] if hot < len(ranks) else hot}


def _a2a_split_bytes(dims, types, concrete) -> tuple[int, int, np.ndarray] | None:
    """(bytes received, bytes sent, bytes sent to each peer) of one all_to_all_single call:
    args (output, input, ..., output_split_sizes, input_split_sizes, ...); splits count rows of
    dim 0, an empty split list means even shares."""
    try:
        dims, types, concrete = json.loads(dims), json.loads(types), json.loads(concrete)
    except (TypeError, ValueError):
        return None
    if len(dims) < 2 or not dims[0] or not dims[1]:
        return None
    size = dtype_size(types[1]) if len(types) > 1 else -1
    if size < 0:
        return None
    out_b = int(np.prod(dims[0])) * size
    in_b = int(np.prod(dims[1])) * size
    lists = [json.loads(c) for c in concrete if isinstance(c, str) and c.startswith("[")]
    if len(lists) < 2 or not lists[1]:
        return None
    splits = np.asarray(lists[1], float)   # the input's: what this rank sends to each peer
    return out_b, in_b, in_b * splits / splits.sum()


# ------------------------------------------------------------------ tensor parallel

def tp_layers(ev: pd.DataFrame, calls: pd.DataFrame, spans, pg: str | None) -> dict | None:
    """The TP group's all_reduces split each step into layers: layer k of a step ends when
    all_reduce k has ended and the step thread has stopped waiting on it (its result is what
    the next layer needs); it begins where layer k-1 ended -- layer 0 at the first compute
    after the step's other comm (a barrier) ended. Per layer (the k-th of every step, summed
    over the steps): ``layer_ns``; ``comm_ns``: the all_reduce's data movement and, on a CPU job, the step
    thread blocked issuing or waiting on it, inside the layer; ``exposed_ns``: the part no
    compute covers (on the critical path); ``comm_pct = 100 exposed / layer``. Only steps
    with the most common count of all_reduces count. ``pg``: the TP group, when calls name
    theirs (gloo's do not: then every all_reduce of the trace is taken as TP)."""
    ar = calls[calls["collective"] == "all_reduce"] if len(calls) else calls
    if pg is not None and len(ar) and ar["pg"].notna().any():
        ar = ar[ar["pg"].astype(str) == str(pg)]
    moving = _moving(ar)
    if not len(moving):
        return None
    ts, end = moving["ts"].to_numpy(np.int64), moving["end"].to_numpy(np.int64)
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    tid = spans[0][2]
    compute = compute_intervals(ev, calls, tid)
    on_gpu = bool(moving["on_gpu"].astype(bool).any())
    blocked = (np.array([], np.int64),) * 2 if on_gpu else host_blocked(ev, calls, tid)
    other = calls[calls["collective"] != "all_reduce"] if len(calls) else calls
    per_step = [np.flatnonzero((ts >= s) & (ts < e)) for s, e, _ in spans]
    counts = [len(x) for x in per_step if len(x)]
    if not counts:
        return None
    n = int(pd.Series(counts).mode().iloc[0])
    acc = np.zeros((n, 3), np.int64)   # layer, comm, exposed
    step_ns = 0
    for (s, e, _), rows in zip(spans, per_step):
        if len(rows) != n:
            continue
        step_ns += e - s
        before = other["end"][(other["end"] <= ts[rows[0]]) & (other["end"] > s)] if len(other) \
            else []
        lo = int(max(before)) if len(before) else s
        first = compute[0][(compute[0] >= lo) & (compute[0] < ts[rows[0]])]
        lo = int(first[0]) if len(first) else lo     # the first layer's first op
        for k, r in enumerate(rows):
            # the wait that consumes the result: blocked time overlapping the data movement
            over = (blocked[0] < end[r]) & (blocked[1] > ts[r])
            hi = int(min(e, max(end[r], blocked[1][over].max() if over.any() else end[r])))
            hi = max(lo, hi)
            win = (np.array([lo]), np.array([hi]))
            near = (blocked[0] < hi) & (blocked[1] > lo)
            mine = iv.union(np.concatenate([ts[r:r + 1], blocked[0][near]]),
                            np.concatenate([end[r:r + 1], blocked[1][near]]))
            c = iv.intersect(mine, win)
            acc[k] += (hi - lo, iv.total(c), iv.total(iv.subtract(c, compute)))
            lo = hi
    layers = [{"layer": k, "layer_ns": int(a), "comm_ns": int(c), "exposed_ns": int(x),
               "comm_pct": round(100.0 * int(x) / int(a), 1) if a else None}
              for k, (a, c, x) in enumerate(acc)]
    exposed = int(acc[:, 2].sum())
    return {"layers_per_step": n, "steps": int(sum(len(x) == n for x in per_step)),
            "layers": layers, "exposed_ns": exposed,
            "step_share_pct": round(100.0 * exposed / step_ns, 1) if step_ns else None,
            # the layers' time neither comm nor its wait takes: what an overlapped (async)
            # all_reduce could hide behind
            "compute_ns": int(acc[:, 0].sum() - acc[:, 1].sum())}


# ------------------------------------------------------------------ data parallel

def ddp_overlap(ev: pd.DataFrame, calls: pd.DataFrame, spans) -> dict:
    """Overlap efficiency of the gradient all_reduces: hidden / total comm time, where hidden
    is the part of the all_reduce time (union of the calls that move data) covered by compute;
    the exposed tail: all_reduce time after the last compute that began before the step's last
    all_reduce began, summed over steps."""
    ar = calls[calls["collective"] == "all_reduce"] if len(calls) else calls
    tid = spans[0][2]
    moving = _moving(ar)
    comm = iv.union(moving["ts"], moving["end"]) if len(moving) else (np.array([], np.int64),) * 2
    compute = compute_intervals(ev, calls, tid)
    total = hidden = tail = step_ns = 0
    for s, e, _ in spans:
        step_ns += e - s
        c = iv.intersect(comm, (np.array([s]), np.array([e])))
        if not len(c[0]):
            continue
        total += iv.total(c)
        hidden += iv.total(iv.intersect(c, compute))
        last_start = int(c[0][-1])
        before = compute[1][(compute[0] < last_start) & (compute[0] >= s)]
        last_end = int(before.max()) if len(before) else s
        after = iv.intersect(c, (np.array([last_end]), np.array([e])))
        tail += iv.total(iv.subtract(after, compute))
    return {"comm_ns": int(total), "hidden_ns": int(hidden),
            "overlap_efficiency": round(hidden / total, 3) if total else None,
            "exposed_tail_ns": int(tail),
            "tail_step_share_pct": round(100.0 * tail / step_ns, 1) if step_ns else None}


# ------------------------------------------------------------------ sharded data parallel

FSDP_UNIT_RX = re.compile(r"^FSDP::pre_forward \((.*)\)$")   # FSDP2 names the unit; FSDP1 not


def fsdp_exposure(ev: pd.DataFrame, calls: pd.DataFrame, spans) -> dict:
    """Per collective of FSDP (all_gather: parameters before each unit's forward/backward;
    reduce_scatter: gradients after it): its time inside the steps and the part no compute
    covers (``exposed``: prefetch did not hide it). Only calls whose data movement is recorded
    (kernels, gloo worker spans); gloo runs FSDP2's reduce_scatter as an all_reduce span,
    named reduce_scatter by the c10d op that issued it (``comm_calls``).
    ``units``: distinct FSDP2 ``FSDP::pre_forward (unit)`` names."""
    tid = spans[0][2]
    compute = compute_intervals(ev, calls, tid)
    out = {"units": _fsdp_units(ev), "free_compute_ns": _free_compute(compute, _moving(calls), spans)}
    for coll in ("all_gather", "reduce_scatter"):
        mine = calls[calls["collective"] == coll] if len(calls) else calls
        moving = mine[mine["on_gpu"].astype(bool) | ~mine["issue"].astype(bool)] if len(mine) \
            else mine
        if not len(moving):
            out[coll] = None
            continue
        comm = iv.union(moving["ts"], moving["end"])
        total = exposed = 0
        for s, e, _ in spans:
            c = iv.intersect(comm, (np.array([s]), np.array([e])))
            total += iv.total(c)
            exposed += iv.total(iv.subtract(c, compute))
        out[coll] = {"comm_ns": int(total), "exposed_ns": int(exposed),
                     "exposed_pct": round(100.0 * exposed / total, 1) if total else None}
    return out


def _free_compute(compute: iv.Intervals, moving: pd.DataFrame, spans) -> int:
    """Compute inside the steps that no data-moving comm call overlaps: what a prefetched
    all_gather could still hide behind."""
    comm = iv.union(moving["ts"], moving["end"]) if len(moving) \
        else (np.array([], np.int64),) * 2
    free = 0
    for s, e, _ in spans:
        c = iv.intersect(compute, (np.array([s]), np.array([e])))
        free += iv.total(iv.subtract(c, comm))
    return int(free)


def _fsdp_units(ev: pd.DataFrame) -> int | None:
    hit = lookup_at(ev["name"], np.flatnonzero(kind_in(ev, HOST)),
                    lambda n: bool(FSDP_UNIT_RX.match(n)), False, bool)
    if not hit.any():
        return None
    rows = np.flatnonzero(kind_in(ev, HOST))[hit]
    return int(pd.unique(ev["name"].iloc[rows].astype(str)).size)


# ------------------------------------------------------------------ communication model

# nccl-tests' bus-bandwidth factors (PERFORMANCE.md there): bus bytes = bytes x factor(n)
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "send": lambda n: 1.0,
              "recv": lambda n: 1.0, "send_recv": lambda n: 1.0}
SLOW_X = 2.0     # a call taking this many times the fit's prediction is flagged
MIN_SIZES = 3    # distinct message sizes a fit needs (two always fit exactly)
FIT_TOL_PCT = 20.0   # a line whose worst point is further off than this is tried in two regimes
LINK_SLOW_PCT = 25.0  # a fitted bus bandwidth under this % of --link-gbps is "far below"


def comm_model(ev: pd.DataFrame, calls: pd.DataFrame, groups: list[dict],
               backend: str | None) -> list[dict]:
    """``T = alpha + bus_bytes / beta`` per (collective, group size, size regime), fitted to
    the median call of each message size (a call's time is what it usually takes: the
    fastest one is an outlier too) so that the worst size's relative error is least. Each size's error is
    reported (``by_size``). Two regimes (a protocol or cache switch: docs/parallelism.md)
    only when splitting at a size halves the error on at least ``SPLIT_MIN_BETTER`` sizes on
    each side -- a split that merely shaves noise is not a regime -- the split with the
    least worst error among those. ``fit_error_pct`` / ``worst_error_pct``: median / max
    |fit - median| / median over a regime's sizes; ``limit`` (worst over ``FIT_TOL_PCT``):
    the pair of sizes that no line meets both closely (``fit_limit``); ``slow_calls``: calls
    above ``SLOW_X`` x the fit, ``slowest_call`` the worst of them."""
    t0 = int(ev["ts"].min()) if len(ev) else 0
    return fit_sizes(_sized_calls(ev, calls, groups), backend, t0)


def fit_sizes(sized: pd.DataFrame, backend: str | None, t0: int = 0) -> list[dict]:
    """``comm_model``'s fit of calls given as columns collective, group_size, bytes, dur, ts
    (one rank's spans; or a job's matched instances with their transfer times)."""
    out = []
    for (coll, n), g in sized.groupby(["collective", "group_size"], sort=True):
        med = g.groupby("bytes")["dur"].median()
        if len(med) < MIN_SIZES or coll not in BUS_FACTOR:
            continue
        factor = BUS_FACTOR[coll](n)
        b, t = med.index.to_numpy(float), med.to_numpy(float)
        odd = waited_sizes(t)
        fb, ft = b[~odd], t[~odd]
        if len(ft) < MIN_SIZES:
            continue
        for lo, hi, alpha, slope in _regimes(fb * factor, ft):
            lo_b, hi_b = fb[lo], fb[hi - 1]
            # the regime's sizes, the waited ones inside its range included (reported)
            inside = (b >= (b[b < lo_b].max() + 1 if lo and (b < lo_b).any() else b.min())) \
                & (b <= hi_b if hi < len(fb) else b <= b.max())
            mine = g[(g["bytes"] >= b[inside].min()) & (g["bytes"] <= b[inside].max())]
            out.append(_regime_row(coll, int(n), backend, mine, factor, alpha, slope,
                                   b[inside], t[inside], t0, odd[inside]))
    return out


def waited_sizes(t: np.ndarray) -> np.ndarray:
    """Sizes whose median call took over ``SLOW_X`` times as long as the next larger size's:
    a larger message cannot move in less than half the time, so those calls mostly waited
    on a late peer (the first calls after a barrier, a descheduled rank). Kept out of the
    fit, reported with their error."""
    out = np.zeros(len(t), bool)
    out[:-1] = t[:-1] > SLOW_X * t[1:]
    return out


SPLIT_MIN_BETTER = 2   # sizes on each side whose error a split must halve


def _line(bus: np.ndarray, t: np.ndarray):
    """(alpha, slope, relative errors) of the line ``alpha + slope * bus`` with alpha >= 0 and
    slope >= 0 whose worst relative error over the sizes is least (minimax: the goal is every
    size within a bound, not a small average); None when the best such line is flat (slope
    0: the times fall with size, no bandwidth can be read). Exact: for a given alpha the best
    slope is a weighted 1-D minimax (``_best_slope``), and the worst error is convex in alpha
    (a partial minimum of a convex function), so a golden-section search over alpha finds
    the optimum."""
    lo, hi = 0.0, float(t.max())
    g = (np.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = _best_slope(x1, bus, t)[1], _best_slope(x2, bus, t)[1]
    for _ in range(GOLDEN_ROUNDS):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = _best_slope(x1, bus, t)[1]
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = _best_slope(x2, bus, t)[1]
    # alpha = 0 is the boundary the search approaches but never evaluates
    cands = [(0.0, *_best_slope(0.0, bus, t)), (x1, *_best_slope(x1, bus, t))]
    alpha, slope, _ = min(cands, key=lambda c: c[2])
    if slope * bus.max() <= FLAT * t.max():   # flat, to rounding: no bandwidth to read
        return None
    return alpha, slope, np.abs(alpha + bus * slope - t) / t


FLAT = 1e-9   # a slope moving the largest size by less than this share of its time is 0
GOLDEN_ROUNDS = 120   # interval shrinks 0.618^120 ~ 1e-25 of the largest time: exact


def _best_slope(alpha: float, bus: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(slope >= 0, worst relative error) of the best line through ``alpha``: size i's error
    is w_i |slope - c_i| with w_i = bus_i / t_i and c_i = (t_i - alpha) / bus_i, whose
    minimax over the slope is met by the pair (i, j) with the largest
    w_i w_j (c_j - c_i) / (w_i + w_j), at their weighted mean."""
    w, c = bus / t, (t - alpha) / bus
    gap = (c[None, :] - c[:, None]) * (w[:, None] * w[None, :]) / (w[:, None] + w[None, :])
    i, j = np.unravel_index(int(np.argmax(gap)), gap.shape)
    slope = float((w[i] * c[i] + w[j] * c[j]) / (w[i] + w[j])) if gap[i, j] > 0 else float(c[0])
    slope = max(slope, 0.0)
    return slope, float(np.max(w * np.abs(slope - c)))


def _regimes(bus: np.ndarray, t: np.ndarray) -> list[tuple]:
    """[(lo, hi, alpha, slope)] over the sorted sizes: one line when it fits every size within
    ``FIT_TOL_PCT``, else two regimes when a split halves the error (of sizes off by more
    than 2%) on ``SPLIT_MIN_BETTER`` sizes or more on each side (see ``comm_model``)."""
    one = _line(bus, t)
    if one and one[2].max() * 100 <= FIT_TOL_PCT:
        return [(0, len(t), one[0], one[1])]     # one line already fits every size
    best = None
    for k in range(MIN_SIZES, len(t) - MIN_SIZES + 1):
        a, b = _line(bus[:k], t[:k]), _line(bus[k:], t[k:])
        if not (a and b):
            continue
        if one is not None:
            base = one[2]
            better = lambda mine, was: int(np.sum((mine <= was / 2) & (was > 0.02)))  # noqa: E731
            if better(a[2], base[:k]) < SPLIT_MIN_BETTER or better(b[2], base[k:]) < SPLIT_MIN_BETTER:
                continue
        worst = max(a[2].max(), b[2].max())
        if best is None or worst < best[0]:
            best = (worst, k, a, b)
    if best:   # each side may hold a switch of its own (protocol, then cache)
        k = best[1]
        return _regimes(bus[:k], t[:k]) + [(k + lo, k + hi, a, s) for lo, hi, a, s in
                                           _regimes(bus[k:], t[k:])]
    return [(0, len(t), one[0], one[1])] if one else []


def fit_limit(bus: np.ndarray, t: np.ndarray, sizes: np.ndarray) -> dict | None:
    """Why no line fits a regime closer: the pair of sizes that no ``alpha >= 0, beta > 0``
    line can meet both within ``floor_pct`` -- a smaller size slower than a larger one
    (``time_falls``: a line's time only grows with size; best: both at their harmonic mean)
    or a larger size costing more per bus byte (``per_byte_rises``: alpha / bytes + 1 / beta
    only falls with size). A floor, not the fit's error: three sizes can miss by more."""
    best = None
    for i in range(len(t)):
        for j in range(i + 1, len(t)):
            for why, lo, hi in (("time_falls", t[j], t[i]),
                                ("per_byte_rises", t[i] / bus[i], t[j] / bus[j])):
                floor = (hi - lo) / (hi + lo)
                if floor > 0 and (best is None or floor > best[0]):
                    best = (floor, why, i, j)
    if best is None:
        return None
    floor, why, i, j = best
    return {"bytes": [int(sizes[i]), int(sizes[j])], "median_ns": [int(t[i]), int(t[j])],
            "why": why, "floor_pct": round(100 * float(floor), 1)}


def _regime_row(coll, n, backend, g, factor, alpha, slope, sizes, t, t0, waited) -> dict:
    fit = alpha + g["bytes"].to_numpy(float) * factor * slope
    x = g["dur"].to_numpy(float) / np.maximum(fit, 1.0)
    at = alpha + sizes * factor * slope
    err_all = np.abs(at - t) / t
    err = err_all[~waited]
    worst = int(np.argmax(x))
    return {"collective": coll, "group_size": n, "backend": backend,
            "alpha_us": round(float(alpha) / 1e3, 2), "beta_gbps": round(1 / float(slope), 3),
            "fit_error_pct": round(100 * float(np.median(err)), 1),
            "worst_error_pct": round(100 * float(err.max()), 1),
            "by_size": [{"bytes": int(b), "median_ns": int(m), "fit_ns": int(f),
                         "error_pct": round(100 * float(e), 1), "waited": bool(w)}
                        for b, m, f, e, w in zip(sizes, t, at, err_all, waited)],
            "waited_sizes": int(waited.sum()),
            "limit": fit_limit(sizes[~waited] * factor, t[~waited], sizes[~waited])
            if err.max() * 100 > FIT_TOL_PCT else None,
            "min_bytes": int(g["bytes"].min()), "max_bytes": int(g["bytes"].max()),
            "sizes": int((~waited).sum()), "calls": int(len(g)), "slow_calls": int((x > SLOW_X).sum()),
            "worst_x_fit": round(float(x[worst]), 1),
            "slowest_call": {"ts_ns": int(g["ts"].iloc[worst]),
                             "offset_ns": int(g["ts"].iloc[worst]) - t0, "bytes": int(g["bytes"].iloc[worst]),
                             "dur_ns": int(g["dur"].iloc[worst]),
                             "fit_ns": int(fit[worst])} if x[worst] > SLOW_X else None}


def with_link(layout: dict | None, link_gbps: float | None) -> dict | None:
    """``layout`` with each fitted bus bandwidth as a % of the link's peak (``link_pct``) and
    ``below_link`` when under ``LINK_SLOW_PCT`` of it (``--link-gbps``)."""
    if not layout or not link_gbps:
        return layout
    for m in layout.get("comm_model") or []:
        m["link_gbps"] = float(link_gbps)
        m["link_pct"] = round(100.0 * float(m["beta_gbps"]) / link_gbps, 1)
        m["below_link"] = bool(m["link_pct"] < LINK_SLOW_PCT)
    return layout


def _sized_calls(ev: pd.DataFrame, calls: pd.DataFrame, groups: list[dict]) -> pd.DataFrame:
    """The calls that move data (backend spans, kernels) with their bytes and group size:
    ``msg_bytes`` (record_param_comms / NCCL args), else the span's recorded shape."""
    cols = ["collective", "group_size", "bytes", "dur", "ts"]
    moving = _moving(calls)
    if not len(moving):
        return pd.DataFrame(columns=cols)
    rows = moving["row"].to_numpy(np.int64)
    size = ev["msg_bytes"].to_numpy()[rows].astype(float) if "msg_bytes" in ev \
        else np.full(len(rows), -1.0)
    if "input_dims" in ev:
        todo = np.flatnonzero(size <= 0)
        # the columns read once for those rows; each distinct shape pair parsed once
        dims = ev["input_dims"].take(rows[todo]).tolist()
        types = ev["input_type"].take(rows[todo]).tolist()
        seen: dict = {}
        for i, d, t in zip(todo, dims, types):
            key = (d, t)
            if key not in seen:
                b = _tensor_bytes(d, t)
                seen[key] = b if b else -1
            size[i] = seen[key]
    n = ev["group_size"].to_numpy()[rows].astype(float) if "group_size" in ev \
        else np.full(len(rows), -1.0)
    g = _group(groups)
    n = np.where(n > 0, n, g["size"] if g else _common_size(groups) or -1)
    df = pd.DataFrame({"collective": moving["collective"].to_numpy(), "group_size": n,
                       "bytes": size, "dur": (moving["end"] - moving["ts"]).to_numpy(float),
                       "ts": moving["ts"].to_numpy(np.int64)})
    return df[(df["bytes"] > 0) & (df["group_size"] > 1) & (df["dur"] > 0)].astype(
        {"group_size": np.int64})


# ------------------------------------------------------------------ a job's ranks together

def job_parallelism(per_rank: dict[int, dict]) -> dict:
    """The layout of a job from its ranks' ``parallelism``: strategies (first rank's evidence),
    each stage's bubble and the slowest stage (the one that computes longest: the others
    wait on it), and the all_to_all receive imbalance (max / mean bytes received)."""
    per_rank = {r: p for r, p in sorted(per_rank.items()) if p}
    kinds: dict[str, dict] = {}
    for p in per_rank.values():
        for s in p.get("strategies", []):
            kinds.setdefault(s["kind"], s)
    out: dict = {"rank": None, "strategies": list(kinds.values())}
    stages = {r: p["pipeline"] for r, p in per_rank.items() if p.get("pipeline")}
    if stages:
        out["pipeline"] = _job_pipeline(stages)
    eps = {r: p["ep"] for r, p in per_rank.items() if p.get("ep")}
    if eps:
        recv = np.array([e["recv_bytes_per_step"] for e in eps.values()], float)
        hot = list(eps)[int(recv.argmax())]
        out["ep"] = {"recv_bytes_by_rank": {str(r): e["recv_bytes_per_step"]
                                            for r, e in eps.items()},
                     "hot_rank": hot,
                     "recv_imbalance": round(float(recv.max() / recv.mean()), 2)
                     if recv.mean() else None,
                     # the hot rank's own exchange time: its excess bytes are what balance
                     # removes (the others' time also holds waits on descheduled peers)
                     "a2a_ns": int(eps[hot].get("a2a_ns") or 0)}
    models = [dict(m, rank=r) for r, p in per_rank.items() for m in p.get("comm_model") or []]
    if models:   # each rank's own fit: a rank whose line is slower than its peers' shows here
        out["comm_model"] = models
    return out


def agree_with_job(per_rank: dict[int, dict], layout: dict) -> None:
    """Each rank's ``pipeline`` told the job's schedule (in place): one stage alone cannot
    always read it -- a 1F1B first stage with m <= p runs all its forwards before its first
    backward and reads as GPipe, a middle stage reads none -- while any stage that
    alternates proves 1F1B for all (``_job_pipeline``). What the rank read alone stays as
    ``schedule_own``; a stage that read no microbatch count takes the job's."""
    job = layout.get("pipeline") or {}
    if not job.get("schedule"):
        return
    for p in per_rank.values():
        pl = (p or {}).get("pipeline")
        if not pl or pl.get("schedule") == job["schedule"]:
            continue
        if pl.get("schedule"):   # a middle stage reads none: nothing to keep
            pl["schedule_own"] = pl["schedule"]
        pl["schedule"] = job["schedule"]
        m = pl["microbatches"] = pl.get("microbatches") or job.get("microbatches")
        n, v = pl.get("stages"), pl.get("virtual_stages") or 1
        pl["theoretical_bubble_pct"] = round(100.0 * (n - 1) / (v * m + n - 1), 1) \
            if n and m else job.get("theoretical_bubble_pct")


def _x_others(busy: dict, slowest) -> float | None:
    """The slowest stage's compute over the other stages' median (None: one stage, or the
    others compute nothing)."""
    others = [v for r, v in busy.items() if r != slowest]
    med = float(np.median(others)) if others else 0.0
    return round(busy[slowest] / med, 2) if med > 0 else None


def _job_pipeline(stages: dict[int, dict]) -> dict:
    # one stage alternating forwards and backwards proves 1F1B: its first stage runs all its
    # warm-up forwards first and reads as GPipe when m <= p
    read = {s["schedule"] for s in stages.values() if s["schedule"]}
    pick = next((k for k in ("interleaved", "1f1b", "gpipe") if k in read), None)
    known = next((s for s in stages.values() if s["schedule"] == pick), next(iter(stages.values())))
    # a stage's own work: its step less its comm waits (``compute_ns``), so untraced work
    # on a stage (a sleep, Python, I/O) counts as that stage's; older layouts: busy_ns
    work = {r: s.get("compute_ns", s["busy_ns"]) for r, s in stages.items()}
    # compared per step (the job's straggler reads the same: groups.rank_busy); a layout
    # without the step count, by the share of the step
    busy = {r: work[r] / (s["steps"] if s.get("steps") else max(1, s["step_ns"]))
            for r, s in stages.items()}
    slowest = max(busy, key=busy.get)
    mean_busy = float(np.mean(list(work.values())))
    bubbles = {str(r): next(iter(s["bubble_pct_by_stage"].values())) for r, s in stages.items()}
    theory = known["theoretical_bubble_pct"]
    return {"schedule": known["schedule"], "stages": known["stages"],
            "microbatches": known["microbatches"],
            "virtual_stages": known.get("virtual_stages", 1),
            "bubble_pct_by_stage": bubbles,
            "theoretical_bubble_pct": theory,
            # the schedule's fill and drain is the theory; the rest of a stage's wait is excess
            # (waiting on a slower stage, or its own step overheads)
            "excess_wait_pct_by_stage": {r: round(b - theory, 1) if b is not None else None
                                         for r, b in bubbles.items()} if theory is not None
            else None,
            "slowest_stage": slowest,
            "slowest_busy_x_fastest": round(busy[slowest] / min(busy.values()), 2)
            if min(busy.values()) > 0 else None,
            # the one comparison of a stage's compute, as the job's straggler reads it
            # (groups.stage_balance): the busiest over the other stages' median. Against the
            # least busy, gpipe_p4_m4's lever said 'stage 1 computes 1.5x ... every other stage
            # waits on it' beside the job's 'the 4 stages compute alike (1.24x)'
            "slowest_x_others": _x_others(busy, slowest),
            # balanced stages would each compute the mean: the step shrinks by the excess
            "excess_busy_ns": int(work[slowest] - mean_busy)
            if len(stages) > 1 else None,
            # what the slowest stage idles on at the fill and drain: the other stages' work
            # over v m (the balanced theory's (p-1)/(v m+p-1) assumes they equal it)
            "others_compute_ns": int(sum(w for r, w in work.items() if r != slowest))
            if len(stages) > 1 else None,
            "step_ns": max(s["step_ns"] for s in stages.values())}
