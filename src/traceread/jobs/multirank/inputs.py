"""What cross-rank analysis keeps of each rank's trace (``RankInput``): small and picklable.

Per rank: its collective instances, its steps, and the host timeline of the thread
that issues its collectives, carved into attribution categories. That is all the
cross-rank pass needs, so a 64-rank job never holds 64 event tables at once.

Collective instances, by what the trace holds (first that exists):

* ``kernel``: NCCL/RCCL kernels (``passes.nccl.collective_instances``): the
  kernel's start is when that rank's GPU reached the collective;
* ``host``: host-side execution ranges of CPU backends -- ``gloo:all_reduce``
  on gloo's worker threads (also MPI/UCC/oneCCL spellings): the range starts
  when the backend began the collective for this rank and ends when it completed;
* ``issue``: only the issuing ops (``c10d::allreduce_``, ``record_param_comms``,
  ``nccl:*`` annotations): their start is the arrival; durations say nothing.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...collectives import issued_in_order, normalize_collective
from ...passes import intervals
from ...readers.kineto import rank_from_filename
from ...table import GPU_OP_KINDS, Trace
from .names import STEP_FALLBACK_RE, STEP_RE, name_matches, step_rows

# Columns of a collective-instance table that matching uses (passes.nccl contract).
COLL_COLUMNS = ("ts", "dur", "device", "stream", "collective", "msg_bytes", "dtype", "group_size",
                "process_group", "seq", "peer")
P2P = ("send", "recv")
P2P_ISSUE_RX = re.compile(r"^c10d::(?:send|recv_)$")
HOST_EXEC_RX = re.compile(r"^(?:gloo|mpi|ucc|xccl|oneccl|ccl|hccl|mccl):", re.IGNORECASE)
ISSUE_RX = re.compile(r"^(?:c10d::|nccl:|rccl:|record_param_comms$)")


@dataclass
class RankInput:
    """What cross-rank analysis needs from one trace; small and picklable."""

    path: str
    rank: int
    world_size: int = -1
    backend: str = ""
    clock: str = ""
    start_ns: int = -1          # trace span on the epoch clock (-1: unknown)
    end_ns: int = -1
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    source: str = ""            # kernel / host / issue / "" (no collective seen)
    clock_domain: str = ""      # ranks with one non-empty clock_domain share one clock
    # Host timeline of the issuing thread: category -> (starts, ends), disjoint, carved
    # by attribution priority; what no category covers inside [span] is untraced.
    activity: dict = field(default_factory=dict)
    activity_span: tuple = (-1, -1)
    gpu_compute: tuple = (np.empty(0, np.int64), np.empty(0, np.int64))  # union of compute kernels
    thread: tuple = (-1, -1)    # (pid, tid) of the issuing thread
    kernel_ns: dict = field(default_factory=dict)   # compute kernel name -> GPU ns (top KERNEL_TOP)
    kernel_steps: int = -1      # the steps kernel_ns covers (-1: len(steps))
    waits: dict = field(default_factory=dict)       # waits.thread_waits of the launching thread
    # CPU operator name -> (calls, ns) on the issuing thread in the window (top OP_TOP by
    # time; communication calls left out), over the kernel_steps steps
    op_calls: dict = field(default_factory=dict)
    # the process groups of distributedInfo.pg_config smaller than the world (their ranks)
    subgroups: tuple = ()
    # a file cut short (the reader's ``meta.extra["truncated"]`` record, with
    # ``complete_until_ns``: where every stream it holds is still whole; ``own_clock``: its
    # times are not on the epoch clock -- the trailer holding the base was cut off); {}: whole
    truncated: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- steps

def step_table(events: pd.DataFrame) -> pd.DataFrame:
    """Host step ranges (``step_rows``): columns step, ts, dur (one row per step). The job's
    steps are the program steps (``program_steps``); these are the markers alone."""
    host = events[step_rows(events).to_numpy()]
    if host.empty:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "ts": pd.Series(dtype="int64"),
                             "dur": pd.Series(dtype="int64")})
    names = host["name"].astype("string")
    num = names.str.extract(STEP_RE, expand=False)
    if num.isna().all():
        num = names.str.extract(STEP_FALLBACK_RE, expand=False)
    steps = host.loc[num.notna(), ["ts", "dur"]].copy()
    steps["step"] = num[num.notna()].astype("int64").to_numpy()
    # A step may be recorded twice (e.g. nested duplicate): keep its longest range.
    steps = steps.sort_values(["step", "dur"], ascending=[True, False])
    steps = steps.drop_duplicates("step", keep="first")
    return steps[["step", "ts", "dur"]].astype("int64").reset_index(drop=True)


def program_steps(tab: pd.DataFrame | None) -> pd.DataFrame:
    """The program's steps (``passes/steps.program_columns``: the step the single-trace
    analysis reports) as columns step, ts, dur: ``dur`` is ``program_ns``, ending where the
    step ends -- the later of its host span's end and its GPU work's, as ``program_columns``
    and the critical path end it (a host-bound step's late kernel still ends it). One
    definition of the step everywhere: the host markers' span alone misses a GPU that lags
    the host (a real V100 rank: spans 82-166 ms for program steps of 115-157 ms)."""
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in ("step", "ts", "dur")})
    if tab is None or not len(tab) or "program_ns" not in tab or (tab["step"] < 0).all():
        return empty
    t = tab[tab["step"].to_numpy() >= 0]
    h_end = t["end"].to_numpy(np.int64)
    ge = t["gpu_end"].to_numpy(np.int64)
    end = np.maximum(h_end, np.where(ge >= 0, ge, -1))
    dur = t["program_ns"].to_numpy(np.int64)
    out = pd.DataFrame({"step": t["step"].to_numpy(np.int64), "ts": end - dur, "dur": dur})
    # one row a step (a step recorded by two processes: its longest)
    out = out.sort_values(["step", "dur"], ascending=[True, False]).drop_duplicates("step")
    return out.sort_values("ts", kind="stable").astype("int64").reset_index(drop=True)


def trace_program_steps(ev: pd.DataFrame, is_nsys: bool = False,
                        window: tuple[int, int] | None = None) -> pd.DataFrame:
    """``program_steps`` of a trace no analysis has read (``analyze_traces``): its steps as
    ``passes/steps`` finds them (those whose host span starts in ``window``), with the GPU
    work each launched."""
    from ...passes import steps as steps_mod

    found, _ = steps_mod.find_steps(ev)
    if window is not None and len(found):
        st = found["start"].to_numpy(np.int64)
        found = found[(st >= window[0]) & (st < window[1])].reset_index(drop=True)
        found["index"] = np.arange(len(found))
    if not len(found):
        return program_steps(None)
    ops = steps_mod.gpu_ops(ev, positive_ts=is_nsys)
    return program_steps(steps_mod.step_table(found, ops, steps_mod.step_of_gpu_ops(found, ops)))


# ----------------------------------------------------------------------------- collectives

def collective_table(events: pd.DataFrame) -> pd.DataFrame:
    """Collective instances of one trace (see module doc); ``attrs['source']`` says which."""
    from ...passes.nccl import collective_instances

    coll = normalise_collectives(collective_instances(events))
    if len(coll):
        return _with_source(coll, "kernel")
    for source, rx in (("host", HOST_EXEC_RX), ("issue", ISSUE_RX)):
        host = _host_collectives(events, rx)
        if len(host):
            return _with_source(host, source)
    return _with_source(coll, "")


def _with_source(df: pd.DataFrame, source: str) -> pd.DataFrame:
    df.attrs["source"] = source
    return df


def _host_collectives(events: pd.DataFrame, rx: re.Pattern) -> pd.DataFrame:
    host = events[events["kind"].isin(("cpu_op", "annotation")).to_numpy()]
    h = host[name_matches(host["name"], rx)]
    coll = np.array([normalize_collective(str(n)) for n in h["name"]], dtype=object)
    if "collective" in h:  # reader-filled (record_param_comms args) wins
        own = h["collective"].astype(object).to_numpy()
        own = np.array([normalize_collective(x) if isinstance(x, str) else None for x in own], object)
        coll = np.where(pd.isna(own), coll, own)
    keep = ~pd.isna(coll)
    h = h[keep].copy()
    h["collective"] = coll[keep]
    if rx is HOST_EXEC_RX:   # the c10d op names the collective the backend runs it as
        h["collective"] = issued_as(events, h)
    h["device"] = -1
    h["stream"] = -1
    h["peer"] = _p2p_peers(events, h)
    h["msg_bytes"] = _span_bytes(h)
    if rx is ISSUE_RX:   # record_param_comms encloses c10d::allreduce_: keep the outermost per start
        h = h.sort_values(["ts", "dur"], ascending=[True, False]).drop_duplicates(["tid", "ts"])
        h = _drop_nested(h)
    return normalise_collectives(h)


C10D_ISSUE_RX = re.compile(r"^c10d::")


def issued_as(events: pd.DataFrame, h: pd.DataFrame) -> np.ndarray:
    """Each backend span's collective as the c10d op that issued it names it, per process
    (``collectives.issued_in_order``: gloo runs ``c10d::_reduce_scatter_base_`` as a
    ``gloo:all_reduce``)."""
    out = h["collective"].to_numpy(object).copy()
    issue = events[name_matches(events["name"], C10D_ISSUE_RX)]
    if not len(issue) or not len(h):
        return out
    kind = np.array([normalize_collective(str(n)) for n in issue["name"]], object)
    issue, kind = issue[~pd.isna(kind)], kind[~pd.isna(kind)]
    for pid in np.unique(h["pid"].to_numpy()):
        mine = np.flatnonzero(h["pid"].to_numpy() == pid)
        ops = np.flatnonzero(issue["pid"].to_numpy() == pid)
        out[mine] = issued_in_order(h["ts"].to_numpy(np.int64)[mine].tolist(), list(out[mine]),
                                    issue["ts"].to_numpy(np.int64)[ops].tolist(),
                                    list(kind[ops]))
    return out


def _span_bytes(h: pd.DataFrame) -> np.ndarray:
    """Each span's message size: ``msg_bytes`` when recorded, else its first tensor's shape
    (``record_shapes=True``; a gloo span records its tensors): lets a job fit its
    collectives' transfer times per size (``passes/parallelism.fit_sizes``)."""
    from ...passes.parallelism import tensor_bytes

    size = pd.to_numeric(h["msg_bytes"], errors="coerce").fillna(-1).to_numpy(np.int64).copy() \
        if "msg_bytes" in h else np.full(len(h), -1, np.int64)
    if "input_dims" not in h or "input_type" not in h:
        return size
    seen: dict = {}
    for i in np.flatnonzero(size <= 0):
        key = (h["input_dims"].iat[i], h["input_type"].iat[i])
        if key not in seen:
            seen[key] = tensor_bytes(*key) or -1
        size[i] = seen[key]
    return size


def _p2p_peers(events: pd.DataFrame, h: pd.DataFrame) -> np.ndarray:
    """The peer of each send / recv in ``h`` (-1: unknown or not P2P): ``c10d::send`` /
    ``c10d::recv_`` record it as their third argument (``Concrete Inputs``: tensors, group,
    peer, tag); a backend span (``gloo:send``) takes it from the last issuing op of its kind
    on its thread that began before it (one batched send issues several spans)."""
    out = np.full(len(h), -1, np.int64)
    if "concrete_inputs" not in events or not len(h):
        return out
    issue = events[name_matches(events["name"], P2P_ISSUE_RX)]
    peer = np.array([_peer_arg(x) for x in issue["concrete_inputs"]], np.int64)
    kind = np.array([normalize_collective(str(n)) for n in issue["name"]], object)
    tids, ts = issue["tid"].to_numpy(), issue["ts"].to_numpy(np.int64)
    coll, h_tid, h_ts = h["collective"].to_numpy(), h["tid"].to_numpy(), h["ts"].to_numpy(np.int64)
    for k in P2P:
        for tid in np.unique(h_tid[coll == k]):
            own = np.flatnonzero((kind == k) & (tids == tid) & (peer >= 0))
            at = np.flatnonzero((coll == k) & (h_tid == tid))
            i = np.searchsorted(ts[own], h_ts[at], side="right") - 1
            ok = i >= 0
            out[at[ok]] = peer[own[i[ok]]]
    return out


def _peer_arg(concrete) -> int:
    try:
        v = json.loads(concrete) if isinstance(concrete, str) else None
        return int(v[2]) if isinstance(v, list) and len(v) > 2 and str(v[2]).lstrip("-").isdigit() else -1
    except ValueError:
        return -1


def _drop_nested(h: pd.DataFrame) -> pd.DataFrame:
    """Issue ops nested in another issue op of the same thread (one collective, two names)."""
    keep = []
    for _, g in h.sort_values("ts").groupby("tid", sort=False):
        end = -1
        for i, ts, dur in zip(g.index, g["ts"].to_numpy(), g["dur"].to_numpy()):
            if ts >= end:
                keep.append(i)
                end = ts + dur
    return h.loc[keep]


def normalise_collectives(coll: pd.DataFrame) -> pd.DataFrame:
    """Just the matching columns: ints (-1 unknown), strings as object (None unknown)."""
    if coll.attrs.get("traceread.multirank"):
        return coll
    n = len(coll)
    cols: dict[str, np.ndarray] = {}
    for c in COLL_COLUMNS:
        if c in ("collective", "process_group", "dtype"):
            if c in coll.columns:
                v = coll[c].astype(object).to_numpy()
                bad = pd.isna(v) | (v == "unknown")
                v = np.where(bad, None, v.astype(str)).astype(object)
            else:
                v = np.full(n, None, dtype=object)
        elif c in coll.columns:
            v = pd.to_numeric(coll[c], errors="coerce").fillna(-1).to_numpy(np.int64)
        else:
            v = np.full(n, -1, dtype=np.int64)
        cols[c] = v
    order = np.argsort(cols["ts"], kind="stable")
    out = pd.DataFrame({c: v[order] for c, v in cols.items()})
    out.attrs["traceread.multirank"] = True
    out.attrs["source"] = coll.attrs.get("source", "")
    return out


# ----------------------------------------------------------------------------- host timeline

def issuing_thread(ev: pd.DataFrame) -> tuple[int, int]:
    """The thread that drives the training loop: the one with ProfilerStep ranges, else
    the one with most launch calls, else the one with most operators; (-1, -1) if none."""
    for sel in (step_rows(ev),
                ev["kind"].isin(("runtime", "driver")),
                ev["kind"] == "cpu_op"):
        sel = sel.to_numpy()
        if sel.any():
            pt = ev.loc[sel, ["pid", "tid"]].value_counts()
            pid, tid = pt.index[0]
            return int(pid), int(tid)
    return -1, -1


# Rows of the issuing thread classified and carved at a time: the carve's temporaries
# (the thread's columns, the union and intersection sweeps) scale with this, not with the
# trace -- at 250 MB a rank's 1.77 M host ops cost the batch worker 250 MB over the trace
# (issue 42, jobs round 4). Only the result grows with the thread.
ACTIVITY_ROWS = 1 << 18


def host_activity(ev: pd.DataFrame, thread: tuple[int, int]) -> tuple[dict, tuple]:
    """The thread's timeline carved into attribution categories (priority order).

    Returns ({category: (starts, ends)}, (span_start, span_end)); the span is the
    trace's extent, and whatever no category covers inside it is untraced.

    Carved ``ACTIVITY_ROWS`` rows at a time, in time order: everything before the next
    block's first start is final once this block is in (later rows start after it), so
    each block carves that window; a category's piece running past it is carried to the
    next window, and pieces split at a window's edge are joined again at the end.
    """
    from ...passes.attribution import CPU_CATEGORIES, classify_host

    if not len(ev) or thread[0] < 0:
        return {}, (-1, -1)
    from ...passes.common import take

    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    lo, hi = int(ts.min()), int((ev["ts"] + ev["dur"]).max())
    rows = np.flatnonzero(((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy())
    # only the columns classify_host reads (``ev[on]`` copied all 33: issue 42)
    cols = [c for c in ("ts", "dur", "name", "kind", "domain", "pid", "tid") if c in ev]
    step = ACTIVITY_ROWS if _starts_sorted(ts, rows) else max(len(rows), 1)
    carve = _Carve(lo, hi, len(CPU_CATEGORIES) - 1)
    for a in range(0, len(rows), step):
        r = rows[a:a + step]
        s = ts[r]
        carve.add(classify_host(take(ev, r, cols)), s, s + dur[r],
                  int(ts[rows[a + step]]) if a + step < len(rows) else None)
    return carve.result(CPU_CATEGORIES[:-1]), (lo, hi)


def _starts_sorted(ts: np.ndarray, rows: np.ndarray) -> bool:
    """The rows' starts non-decreasing (the table is ts-sorted; checked by blocks)."""
    last = None
    for a in range(0, len(rows), ACTIVITY_ROWS):
        s = ts[rows[a:a + ACTIVITY_ROWS]]
        if (last is not None and s[0] < last) or (s[1:] < s[:-1]).any():
            return False
        last = s[-1]
    return True


class _Carve:
    """``host_activity``'s carve, one window of time at a time (see there)."""

    def __init__(self, lo: int, hi: int, n: int):
        self.lo, self.hi = lo, hi
        self.start = None                      # where the next window begins (None: -inf)
        self.tail = [None] * n                 # a category's union past the last window
        self.pieces: list[list] = [[] for _ in range(n)]

    def add(self, cats: np.ndarray, s: np.ndarray, e: np.ndarray, upto: int | None) -> None:
        """This block's rows (category, start, end); every later row starts at >= ``upto``
        (None: no later row)."""
        final = []
        for j in range(len(self.tail)):
            m = cats == j
            t = self.tail[j]
            if t is None and not m.any():
                final.append(None)
                continue
            u = intervals.union(np.concatenate((t[0], s[m])) if t else s[m],
                                np.concatenate((t[1], e[m])) if t else e[m])
            final.append(self._split(j, u, upto))
        lo = self.lo if self.start is None else max(self.lo, self.start)
        hi = self.hi if upto is None else min(self.hi, upto)
        remaining = intervals.union([lo], [hi])   # canonical (none when the span is empty)
        left = [j for j, f in enumerate(final) if f is not None and len(f[0])]
        for k, j in enumerate(left):
            # the O(pieces) set operations of canonical sets (the general sweeps cost ~150 B
            # a piece: 27 MB for a thread of 177 k disjoint ops, the batch worker's peak)
            piece = intervals.intersect_sorted(remaining, final[j])
            if len(piece[0]):
                self.pieces[j].append(piece)
                if k + 1 < len(left):
                    remaining = intervals.subtract_sorted(remaining, piece)
        self.start = upto

    def _split(self, j: int, u: tuple, upto: int | None) -> tuple:
        """``u``'s part before ``upto`` (final now); its part from ``upto`` on is carried."""
        self.tail[j] = None
        if upto is None or not len(u[0]) or u[1][-1] <= upto:
            return u
        s, e = u
        # only the last piece reaches past ``upto``: every row of this block starts at or before it
        self.tail[j] = (np.array([max(int(s[-1]), upto)], np.int64), e[-1:].copy())
        if s[-1] >= upto:
            return s[:-1], e[:-1]
        return s, np.concatenate((e[:-1], [upto]))

    def result(self, names) -> dict:
        out = {}
        for name, parts in zip(names, self.pieces):
            if not parts:
                continue
            s = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
            e = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
            if len(parts) > 1:   # pieces split at a window's edge are one piece
                new = np.empty(len(s), bool)
                new[0] = True
                np.greater(s[1:], e[:-1], out=new[1:])
                if not new.all():
                    first = np.flatnonzero(new)
                    s, e = s[first], e[np.append(first[1:] - 1, len(s) - 1)]
            out[name] = (s, e)
        return out


def gpu_compute(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Union of the non-communication kernels (when the rank's GPU was computing)."""
    from ...passes.nccl import comm_mask

    k = ((ev["kind"] == "kernel").to_numpy()) & ~comm_mask(ev)
    s = ev["ts"].to_numpy(np.int64)[k]
    return intervals.union(s, s + ev["dur"].to_numpy(np.int64)[k])


KERNEL_TOP = 30


def kernel_time(ev: pd.DataFrame, window: tuple[int, int] | None = None) -> dict[str, int]:
    """GPU time of the ``KERNEL_TOP`` costliest compute kernel names (communication excluded),
    of the kernels starting in ``window`` when given (only their name and duration taken:
    ``ev[in window]`` copied every column of the window's rows)."""
    from ...passes.common import take
    from ...passes.nccl import comm_mask

    k = ((ev["kind"] == "kernel").to_numpy()) & ~comm_mask(ev)
    if window is not None:
        ts = ev["ts"].to_numpy()
        k &= (ts >= window[0]) & (ts < window[1])
    if not k.any():
        return {}
    t = take(ev, np.flatnonzero(k), ["name", "dur"]).groupby("name", observed=True)["dur"].sum()
    return {str(n): int(v) for n, v in t.nlargest(KERNEL_TOP).items()}


def step_busy(steps: pd.DataFrame, coll: pd.DataFrame, compute: tuple, activity: dict,
              source: str) -> pd.DataFrame:
    """Per step: compute_ns and comm_ns (union time inside the step) for overlap efficiency.

    Compute is the GPU's compute kernels, or on CPU-only ranks the issuing thread's
    traced non-communication host time; comm is the union of collective instances.
    """
    steps = steps.copy()
    if not len(steps):
        return steps.assign(compute_ns=pd.Series(dtype="int64"), comm_ns=pd.Series(dtype="int64"),
                            both_ns=pd.Series(dtype="int64"))
    qs = steps["ts"].to_numpy(np.int64)
    qe = qs + steps["dur"].to_numpy(np.int64)
    if source == "kernel" or len(compute[0]):
        comp = compute
    else:
        parts = [v for k, v in activity.items() if k not in ("comm_wait",)]
        comp = intervals.union(np.concatenate([p[0] for p in parts]) if parts else [],
                               np.concatenate([p[1] for p in parts]) if parts else [])
    cs = coll["ts"].to_numpy(np.int64) if source in ("kernel", "host") else np.empty(0, np.int64)
    ce = cs + (coll["dur"].to_numpy(np.int64) if len(cs) else 0)
    comm = intervals.union(cs, ce)
    steps["compute_ns"] = intervals.overlap(comp, qs, qe)
    steps["comm_ns"] = intervals.overlap(comm, qs, qe)
    # the time both ran at once: what the overlap efficiency reads (metrics.py)
    steps["both_ns"] = intervals.overlap(intervals.intersect(comp, comm), qs, qe)
    return steps


def own_busy(ev: pd.DataFrame, steps: pd.DataFrame, compute: tuple, thread: tuple) -> np.ndarray:
    """Per step: the rank's own work (``busy_ns``; a pipeline stage's work, groups.py) -- its
    compute kernels, or on a CPU-only rank the step less the issuing thread's comm waits
    (``passes/parallelism.comm_waits``: issue + blocking wait), so untraced work on the rank
    (a sleep, Python, I/O) is its own work, not a wait on its peers."""
    if not len(steps):
        return np.empty(0, np.int64)
    qs = steps["ts"].to_numpy(np.int64)
    qe = qs + steps["dur"].to_numpy(np.int64)
    if len(compute[0]):
        return intervals.overlap(compute, qs, qe)
    from ...passes.parallelism import comm_calls, comm_waits

    w = comm_waits(ev, comm_calls(ev), thread[1], qs, qe)
    return np.maximum(0, (qe - qs) - w["p2p"] - w["other"])


def traced_busy(ev: pd.DataFrame, steps: pd.DataFrame, compute: tuple, thread: tuple) -> np.ndarray:
    """Per step: the rank's compute that an operator or kernel records (``busy_ns`` less
    this is work no profiled op covers: a sleep, Python, I/O on the issuing thread)."""
    if not len(steps):
        return np.empty(0, np.int64)
    qs = steps["ts"].to_numpy(np.int64)
    qe = qs + steps["dur"].to_numpy(np.int64)
    if not len(compute[0]):
        from ...passes.parallelism import comm_calls, compute_intervals

        compute = compute_intervals(ev, comm_calls(ev), thread[1])
    return intervals.overlap(compute, qs, qe)


# ----------------------------------------------------------------------------- building inputs

def rank_from_name(path: str) -> int:
    """Rank encoded in a file name, by the readers' rule (``rank-3``, ``worker3``...), else -1."""
    return rank_from_filename(os.path.basename(str(path)))


def rank_input(trace: Trace, collectives: pd.DataFrame | None = None,
               window: tuple[int, int] | None = None,
               program: pd.DataFrame | None = None) -> RankInput:
    """Per-rank input from a loaded trace (``collectives``: NCCL instances already computed).

    ``window``: [start, end) on the trace clock (the analysis window): only collectives
    and steps starting inside it are kept. ``program``: the analysis' step table (its
    window's steps with ``program_ns``): the rank's steps are its program steps; without
    it they are found here by the same pass.
    """
    m = trace.meta
    ev = trace.events
    rank = m.rank if m.rank >= 0 else rank_from_name(m.path)
    cut = cut_record(m, ev)
    start = end = -1
    if len(ev) and m.clock != "session_ns" and not cut.get("own_clock"):
        start = int(ev["ts"].min()) + int(m.epoch_offset_ns or 0)
        end = int((ev["ts"] + ev["dur"]).max()) + int(m.epoch_offset_ns or 0)
    coll = None
    if collectives is not None and len(collectives):
        coll = _with_source(normalise_collectives(collectives), "kernel")
    if coll is None:
        coll = collective_table(ev)
    source = coll.attrs.get("source", "")
    if program is not None:
        steps = program_steps(program)
    else:
        steps = trace_program_steps(ev, m.format == "nsys", window)
    thread = issuing_thread(ev)
    if cut:   # only what precedes the cut in every stream: whole steps, whole collectives
        until = complete_until(ev, thread)
        cut["complete_until_ns"] = until
        window = (window[0] if window else np.iinfo(np.int64).min,
                  min(window[1], until) if window else until)
        steps = steps[(steps["ts"] + steps["dur"] <= until).to_numpy()].reset_index(drop=True)
        coll = _within(coll, (window[0], until + 1), end=True)
        if source == "host":
            coll = _whole_host_collectives(ev, coll, cut)
    if window is not None:
        coll = _within(coll, window)
    activity, span = host_activity(ev, thread)
    from .waits import thread_waits, wait_thread
    waits = thread_waits(ev, wait_thread(ev, thread))
    compute = gpu_compute(ev)
    steps = step_busy(steps, coll, compute, activity, source)
    steps["busy_ns"] = own_busy(ev, steps, compute, thread)
    steps["traced_ns"] = traced_busy(ev, steps, compute, thread)
    kernels = kernel_time(ev, window)
    ops = op_calls(ev, thread, window)
    return RankInput(path=m.path, rank=int(rank), world_size=int(m.world_size),
                     backend=str((m.distributed or {}).get("backend") or ""), clock=m.clock,
                     start_ns=start, end_ns=end, collectives=coll, steps=steps, source=source,
                     clock_domain="" if cut.get("own_clock") else clock_domain(m.extra or {}),
                     activity=activity, activity_span=span, gpu_compute=compute, thread=thread,
                     kernel_ns=kernels, kernel_steps=len(steps), waits=waits, op_calls=ops,
                     subgroups=subgroups(m.distributed or {}), truncated=cut)


def _kind_in(kind: pd.Series, kinds: tuple) -> np.ndarray:
    """Rows whose kind is one of ``kinds`` (a dictionary column: by its codes, no string a row)."""
    if isinstance(kind.dtype, pd.CategoricalDtype):
        want = np.flatnonzero(np.isin(np.asarray(kind.cat.categories, dtype=object), kinds))
        return np.isin(kind.cat.codes.to_numpy(), want)
    return kind.isin(kinds).to_numpy()


def _whole_host_collectives(ev: pd.DataFrame, coll: pd.DataFrame, cut: dict) -> pd.DataFrame:
    """A cut file's backend collective ranges, or none when the cut lost some: a backend
    runs its collectives on threads of its own, written one after another, so a cut can
    drop a whole thread (gloo ddp4's rank 1 cut at 60%: its gloo:all_reduce thread gone,
    the all_gather one whole -- paired in order with the c10d ops, the all_gathers were
    read as all_reduces). Every c10d op issued before the last range kept has its range
    (a batched op may have several); fewer ranges than ops: ``cut["collectives_lost"]``."""
    if not len(coll):
        return coll
    names = ev["name"]
    issue = ev[name_matches(names, C10D_ISSUE_RX)]
    kind = np.array([normalize_collective(str(n)) for n in issue["name"]], object)
    at = issue["ts"].to_numpy(np.int64)[~pd.isna(kind)]
    n = int((at <= int(coll["ts"].max())).sum())
    if len(coll) >= n:
        return coll
    cut["collectives_lost"] = f"{n} collectives issued before the cut, {len(coll)} recorded"
    out = coll.iloc[0:0]
    out.attrs.update(coll.attrs)
    return out


def cut_record(meta, ev: pd.DataFrame) -> dict:
    """What the job needs of a file cut short ({} when it is whole): the reader's record
    (``meta.extra["truncated"]``), and ``own_clock`` when its times are not on the epoch
    clock -- a Kineto file keeps ``baseTimeNanoseconds`` in its trailer, so a cut one reads
    on its own clock (``trace_ns``): its span and host say nothing of the other ranks' time."""
    rec = (meta.extra or {}).get("truncated")
    if not rec or (isinstance(rec, dict) and rec.get("gzip_stream_cut")):
        return {}   # (the JSON whole, only the gzip trailer lost: every event is there)
    out = dict(rec) if isinstance(rec, dict) else {}
    out["own_clock"] = meta.clock not in ("epoch_ns", "session_ns") and not meta.epoch_offset_ns
    return out


def complete_until(ev: pd.DataFrame, thread: tuple[int, int]) -> int:
    """Where a cut file still holds every stream whole: the earliest, over the streams it
    holds (the issuing thread's host ops, the runtime calls, the GPU's work), of the last
    start it keeps. A writer writes each stream in time order, one stream after another
    (Kineto: the host ops, then the GPU activities), so a cut keeps a prefix of each: a
    step that ends by then is whole on every stream; one past it may lack its kernels."""
    if not len(ev):
        return -1
    ts = ev["ts"].to_numpy(np.int64)
    streams = [_kind_in(ev["kind"], GPU_OP_KINDS), _kind_in(ev["kind"], ("runtime", "driver"))]
    if thread[0] >= 0:
        streams.append(((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy())
    lasts = [int(ts[s].max()) for s in streams if s.any()]
    return min(lasts) if lasts else int(ts.max())


def subgroups(dist: dict) -> tuple:
    """The rank lists of the trace's process groups (``pg_config``) smaller than the world."""
    world = int(dist.get("world_size") or 0)
    out = set()
    for g in dist.get("pg_config") or []:
        r = g.get("ranks") if isinstance(g, dict) else None
        if isinstance(r, list) and 1 < len(r) and (not world or len(r) < world):
            out.add(tuple(sorted(int(x) for x in r if isinstance(x, int))))
    return tuple(sorted(out))


OP_TOP = 200


def op_calls(ev: pd.DataFrame, thread: tuple[int, int],
             window: tuple[int, int] | None = None) -> dict[str, tuple[int, int]]:
    """CPU operator name -> (calls, ns) on the issuing thread (``RankInput.op_calls``): what
    tells a straggler that runs operators the others do not (more calls) from one that runs
    the same ones slower (``why.refine_cpu_op``)."""
    if thread[0] < 0 or not len(ev):
        return {}
    from ...passes.attribution import COMM_RX
    from ...passes.common import take
    from .names import name_matches

    on = ((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy() \
        & (ev["kind"] == "cpu_op").to_numpy()
    if window is not None:
        on &= (ev["ts"] >= window[0]).to_numpy() & (ev["ts"] < window[1]).to_numpy()
    rows = np.flatnonzero(on)
    del on
    if isinstance(ev["name"].dtype, pd.CategoricalDtype):
        g = _op_totals(ev, rows, COMM_RX)
    else:
        mine = take(ev, rows, ["name", "dur"])
        mine = mine[~name_matches(mine["name"], COMM_RX)]
        g = mine.groupby(mine["name"].astype(str), observed=True)["dur"].agg(["size", "sum"])
    if not len(g):
        return {}
    g = g.sort_values("sum", ascending=False).head(OP_TOP)
    return {str(n): (int(c), int(t)) for n, c, t in zip(g.index, g["size"], g["sum"])}


def _op_totals(ev: pd.DataFrame, rows: np.ndarray, comm_rx) -> pd.DataFrame:
    """Calls and ns per operator name of ``rows`` (communication left out), from the name
    codes a block at a time: the same frame as a groupby on the rows' names as text (index
    sorted by name), without a string per row -- at 1.77 M ops that
    cost the batch worker 176 MB (issue 42, jobs round 4)."""
    codes = ev["name"].cat.codes.to_numpy()
    cats = ev["name"].cat.categories
    # skipped: communication, and a null name (code -1, the last slot), which the groupby
    # on text drops (a missing string is no group)
    skip = np.array([bool(comm_rx.search(str(c))) for c in cats] + [True])
    calls = np.zeros(len(cats), np.int64)
    ns = np.zeros(len(cats), np.int64)
    dur = ev["dur"].to_numpy(np.int64)
    for a in range(0, len(rows), ACTIVITY_ROWS):
        r = rows[a:a + ACTIVITY_ROWS]
        c = codes[r].astype(np.int64)
        keep = ~skip[c]
        c = c[keep]
        calls += np.bincount(c, minlength=len(cats))
        np.add.at(ns, c, dur[r][keep])
    used = np.flatnonzero(calls)
    names = [str(cats[i]) for i in used]
    out = pd.DataFrame({"size": calls[used], "sum": ns[used]}, index=pd.Index(names, name="name"))
    return out.groupby(level=0).sum() if out.index.has_duplicates else out.sort_index()


# names that do not tell one machine from another (containers default to them)
GENERIC_HOSTS = frozenset(("", "localhost", "localhost.localdomain", "127.0.0.1", "::1"))


def clock_domain(extra: dict) -> str:
    """The clock a trace's timestamps come from: one nsys export split into processes
    (``nsys_split``), else the host that recorded it -- torch.profiler writes ``host_name``
    and every process of one host reads the same system clock, so ranks of one host are
    never shifted against each other. A generic name (localhost) proves nothing: ""."""
    if extra.get("clock_domain"):
        return str(extra["clock_domain"])
    host = str(extra.get("host_name") or "").strip()
    return "" if host.lower() in GENERIC_HOSTS else f"host:{host}"


def _within(df: pd.DataFrame, window: tuple[int, int], end: bool = False) -> pd.DataFrame:
    """Rows starting in [start, end) (``end``: rows ending before ``window[1]``)."""
    at = df["ts"] + df["dur"] if end else df["ts"]
    keep = (df["ts"] >= window[0]) & (at < window[1])
    out = df[keep.to_numpy()].reset_index(drop=True)
    out.attrs.update(df.attrs)
    return out


__all__ = ["RankInput", "COLL_COLUMNS", "step_table", "collective_table", "rank_input",
           "rank_from_name", "issuing_thread", "host_activity", "gpu_compute"]
