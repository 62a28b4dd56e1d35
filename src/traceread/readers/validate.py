"""Impossible traces are flagged, not analysed as truth (issue 23, docs/robustness.md).

``validate`` checks what the passes rely on, once, when a reader has finished the event
table (``readers.read``), and drops or trims the rows no real profiler can record:

* a negative duration (an end before its start);
* an exact duplicate of another row (every field equal: a trace concatenated with itself);
* an event more than ``GAP_NS`` (1 h) away from the bulk of the trace (one kernel moved to
  2099, one event at ts -5 on an epoch clock, unclosed 'B' events on another clock): the
  bulk is the group of event times with no gap of ``GAP_NS`` inside that holds the most
  intervals (rows of positive duration), then the most rows;
* a GPU op that starts more than ``EARLY_NS`` (1 ms) before the runtime / driver call
  that launched it (same process, same correlation id);
* two kernels overlapping on one stream (same process, device, stream) by more than
  ``OVERLAP_NS`` (1 us) and more than half the shorter one: a stream runs its kernels in
  order, so the earlier one is trimmed to end where the later one starts (real traces
  overlap by clock jitter of a few us; copy engines are left alone).

The stream-overlap trim and the unit check below apply to JSON traces only: an nsys
export holds CUPTI's integer ns, and its own reports (which traceread reproduces byte for
byte) count its rows as recorded.

It flags, without changing a row, activity that lies apart: the widest gap in which no
kept row is running (rows sorted by start, each gap measured from the latest end so far).
A gap over ``APART_NS`` (60 s), longer than the span recorded on either side of it, with
no host process on both sides (GPU rows count by device), cannot come from one profiling
session: every process of one torch.profiler / nsys capture records inside the same
window, so minutes of nothing between two bursts by different processes, each shorter
than the gap, is one clock shifted against another (a GPU's events 1000 s after the host
that launched them) or two traces joined into one file. Figures across the gap (span,
idle) are not real: ``meta.extra["processes_apart"]`` says which processes and devices lie
on each side and how far apart, and the CLI prints one warning line. One process quiet for
minutes (nsys without OS-call tracing) is not flagged: it is on both sides.

It refuses (``TraceError``) what cannot be repaired: GPU kernels whose median duration is
under ``MIN_KERNEL_MEDIAN_NS`` (100 ns; real kernels take >= ~1 us: timestamps written in
ms, not us), or a trace with no row left. What was changed is in
``meta.extra["impossible"]`` ({rule: rows}); the CLI prints it as one warning line.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import TraceError
from ..table import GPU_OP_KINDS, Trace, release_heap

GAP_NS = 3_600 * 10**9
APART_NS = 60 * 10**9
EARLY_NS = 10**6
OVERLAP_NS = 1_000
MIN_KERNEL_MEDIAN_NS = 100
_MEDIAN_MIN_KERNELS = 20
_STREAM_KINDS = ("kernel",)   # copy engines (MTIA DMA queues) may run a "stream" at once
_LAUNCH_KINDS = ("runtime", "driver")
# the fields that tell two events apart (the free-text arg columns are left out)
_DUP_COLS = ("ts", "dur", "kind", "name", "pid", "tid", "device", "stream", "correlation",
             "external_id", "bytes")

WHY = {   # rule: (what is counted, what was wrong with it and what was done)
    "negative_duration": ("event", "with a negative duration (end before start) dropped"),
    "duplicate": ("event", "exactly duplicating another event dropped"),
    "far_from_trace": ("event", "more than 1 h away from the rest of the trace dropped"),
    "before_launch": ("GPU op", "starting over 1 ms before its own launch call dropped"),
    "stream_overlap": ("kernel", "running into the next kernel on its stream trimmed"),
}


def _int(table: pa.Table, col: str) -> np.ndarray:
    return table.column(col).to_numpy()


def _dict(table: pa.Table, col: str, values: bool = True) -> tuple[np.ndarray, list]:
    """(codes, dictionary) of a string column; -1 for nulls."""
    c = table.column(col)
    if not isinstance(c.type, pa.DictionaryType):
        c = pa.chunked_array([ch.dictionary_encode() for ch in c.chunks],
                             pa.dictionary(pa.int32(), c.type)) if c.num_chunks else c
    c = c.unify_dictionaries()
    if c.num_chunks == 0:
        return np.zeros(0, np.int64), []
    dictionary = c.chunk(0).dictionary.to_pylist() if values else []
    if c.num_chunks == 1 and c.null_count == 0:   # the Arrow indices as they are (no copy)
        return c.chunk(0).indices.to_numpy(), dictionary
    parts = [np.where(ch.is_null().to_numpy(zero_copy_only=False), -1,
                      ch.indices.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
             for ch in c.chunks]
    return np.concatenate(parts), dictionary


def _kind_mask(table: pa.Table, kinds) -> np.ndarray:
    codes, cats = _dict(table, "kind")
    lut = np.append(np.isin(np.array(cats, dtype=object), list(kinds)), False)
    return lut[codes]


def _codes(table: pa.Table, col: str) -> np.ndarray:
    return _dict(table, col, values=False)[0]


def _duplicates(table: pa.Table, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Rows of some duration equal in every field to an earlier row (instants repeat in
    real traces: Kineto writes some ``[memory]`` markers twice). The table is sorted by
    ts, so only rows sharing a start with a neighbour are compared."""
    out = np.zeros(len(ts), bool)
    same = np.flatnonzero(ts[1:] == ts[:-1])
    if not len(same):
        return out
    cand = np.unique(np.concatenate([same, same + 1]))
    keys = [(_codes(table, c) if c in ("kind", "name") else _int(table, c))[cand]
            for c in _DUP_COLS]
    order = np.lexsort(keys[::-1])
    stacked = np.stack([k[order] for k in keys])
    eq = np.all(stacked[:, 1:] == stacked[:, :-1], axis=0)
    hit = cand[order[1:][eq]]
    out[hit[dur[hit] > 0]] = True
    return out


def _far_from_trace(ts: np.ndarray, end: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Rows with a start or end outside the bulk: the group of times without a GAP_NS gap
    inside that holds the most intervals (rows of positive duration; 200k unclosed 'B'
    events on another clock are instants and do not make the bulk)."""
    if not len(ts) or _no_gap(ts, end):
        return np.zeros(len(ts), bool)
    t = np.concatenate([ts, end])
    t.sort()
    cut = np.flatnonzero(np.diff(t) > GAP_NS)
    if not len(cut):
        return np.zeros(len(ts), bool)
    lo = np.concatenate([[0], cut + 1])
    hi = np.concatenate([cut, [len(t) - 1]])
    # the interval ends in each group, counted in the sorted ends of positive-duration rows
    # (equal times never straddle a cut): no argsort of every time and no weight arrays
    pos = dur > 0
    tp = np.concatenate([ts[pos], end[pos]])
    del pos
    tp.sort()
    inside = np.searchsorted(tp, t[hi], "right") - np.searchsorted(tp, t[lo], "left")
    size = inside * (len(t) + 1) + (hi - lo + 1)  # intervals, then rows
    best = int(np.argmax(size))
    a, b = t[lo[best]], t[hi[best]]
    del t, tp
    return (ts < a) | (ts > b) | (end < a) | (end > b)


def _no_gap(ts: np.ndarray, end: np.ndarray) -> bool:
    """True when no two neighbours of the sorted starts and ends are over GAP_NS apart,
    known without sorting them (~100 ms at 600 k rows): the whole span is under GAP_NS,
    or the starts are in order with no such gap between them and no end more than GAP_NS
    past the last start (each end is >= its start, so it lies inside that chain of starts
    or within GAP_NS past its last link)."""
    lo, hi = min(int(ts.min()), int(end.min())), max(int(ts.max()), int(end.max()))
    if hi - lo <= GAP_NS:
        return True
    if len(ts) < 2 or not (end >= ts).all():
        return False
    step = np.diff(ts)
    return bool(step.min() >= 0 and step.max() <= GAP_NS and hi - int(ts[-1]) <= GAP_NS)


def _kept(keep: np.ndarray, *cols: np.ndarray) -> tuple:
    """``cols`` at the rows ``keep`` (the arrays themselves when every row is kept)."""
    return cols if keep.all() else tuple(c[keep] for c in cols)


def _before_launch(table: pa.Table, ts: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    out = np.zeros(len(ts), bool)
    corr, pid = _int(table, "correlation"), _int(table, "pid")
    launch = np.flatnonzero(_kind_mask(table, _LAUNCH_KINDS) & (corr >= 0))
    ops = np.flatnonzero(gpu & (corr >= 0))
    if not len(launch) or not len(ops):
        return out
    lp, lc = pid[launch], corr[launch]
    order = np.lexsort((lc, lp))          # by (pid, corr); ts ascending within (stable)
    launch = launch[order]
    del order
    lp, lc = pid[launch], corr[launch]
    first = np.ones(len(launch), bool)
    np.not_equal(lp[1:], lp[:-1], out=first[1:])
    first[1:] |= lc[1:] != lc[:-1]
    launch = launch[first]                # the earliest launch of each key
    del first
    pos = _match(pid[launch], corr[launch], pid[ops], corr[ops])
    hit = np.flatnonzero(pos >= 0)
    early = ts[ops[hit]] < ts[launch[pos[hit]]] - EARLY_NS
    out[ops[hit[early]]] = True
    return out


def _match(lp: np.ndarray, lc: np.ndarray, qp: np.ndarray, qc: np.ndarray) -> np.ndarray:
    """Index in the (pid, corr)-sorted keys (lp, lc) of each query, -1 when absent."""
    out = np.full(len(qp), -1, np.int64)
    for p in np.unique(qp):
        sel = np.flatnonzero(lp == p)
        if not len(sel):
            continue
        q = np.flatnonzero(qp == p)
        keys = lc[sel]
        i = np.searchsorted(keys, qc[q])
        ok = i < len(keys)
        ok[ok] = keys[i[ok]] == qc[q][ok]
        out[q[ok]] = sel[i[ok]]
    return out


def _stream_overlap(table: pa.Table, ts: np.ndarray, end: np.ndarray, keep: np.ndarray):
    """(rows to trim, their new end): a GPU op whose stream's next op starts more than
    OVERLAP_NS before it ends."""
    rows = np.flatnonzero(_kind_mask(table, _STREAM_KINDS) & keep)
    if len(rows) < 2:
        return rows[:0], rows[:0]
    pid, dev, st = _int(table, "pid")[rows], _int(table, "device")[rows], \
        _int(table, "stream")[rows]
    order = np.lexsort((ts[rows], st, dev, pid))
    r = rows[order]
    same = (pid[order][1:] == pid[order][:-1]) & (dev[order][1:] == dev[order][:-1]) \
        & (st[order][1:] == st[order][:-1]) & (st[order][1:] >= 0)
    nxt = ts[r[1:]]
    over = end[r[:-1]] - nxt
    shorter = np.minimum(end[r[:-1]] - ts[r[:-1]], end[r[1:]] - nxt)
    # clock jitter overlaps real kernels by a few us: only more than half the shorter
    # op (and over OVERLAP_NS) is impossible
    bad = same & (over > OVERLAP_NS) & (2 * over > shorter)
    return r[:-1][bad], nxt[bad]


def require_events(trace: Trace) -> Trace:
    """``trace``, or TraceError when it holds no event to analyse: ``{"traceEvents": []}``,
    ``[]``, an array of objects none of which is an event, only metadata (``ph: M``). The
    readers load such a file (its metadata is real); an analysis of nothing is refused."""
    if len(trace) == 0:   # not trace.table: with the frame built, that rebuilt the table
        what = "no GPU or CPU activity" if trace.meta.format == "nsys" else (
            "an empty traceEvents array, or no object in it is an event with a ph and a name")
        raise TraceError(trace.meta.path, f"no trace events ({what}): not a trace")
    return trace


PID_LIMIT = 1 << 31   # OS pids and Kineto lanes are far below; passes key threads on pid << 32


def _pids_in_range(trace: Trace) -> pa.Table:
    """The table with every pid outside +-2**31 read as unknown (-1), like a pid that is no
    integer at all (a pid of -2**63 overflowed the passes' thread keys: internal error)."""
    table = trace.table
    if "pid" not in table.column_names or table.num_rows == 0:
        return table
    pid = _int(table, "pid")
    bad = (pid < -PID_LIMIT) | (pid >= PID_LIMIT)
    if not bad.any():
        return table
    trace.meta.extra["pids_out_of_range"] = int(bad.sum())
    fixed = np.where(bad, -1, pid)
    table = table.set_column(table.schema.get_field_index("pid"), "pid",
                             pa.array(fixed, table.schema.field("pid").type))
    trace.table = table
    return table


def validate(trace: Trace) -> Trace:
    """Drop or trim the impossible rows of ``trace`` (see module docstring); refuse a
    trace that cannot be repaired. Returns ``trace`` (its table replaced when changed)."""
    table = _pids_in_range(trace)
    n = table.num_rows
    if n == 0:
        return trace
    ts, dur = _int(table, "ts"), _int(table, "dur")
    end = np.maximum(dur, 0)
    end += ts
    gpu = _kind_mask(table, GPU_OP_KINDS)
    # nsys: CUPTI's integer ns, and its own reports (reproduced byte for byte) count its
    # rows as recorded; a JSON writer picks its unit and its rows by hand
    json_trace = trace.meta.format != "nsys"
    if json_trace:
        _check_units(trace, dur, _kind_mask(table, ("kernel",)))
    found = {}
    drop = np.zeros(n, bool)
    rules = (("negative_duration", lambda keep: dur < 0),
             ("duplicate", lambda keep: _duplicates(table, ts, dur)),
             ("far_from_trace", lambda keep: _scatter(
                 keep, _far_from_trace(*_kept(keep, ts, end, dur)))),
             ("before_launch", lambda keep: _before_launch(table, ts, gpu & keep)))
    for rule, offenders in rules:   # each rule sees the rows the earlier ones kept
        mask = offenders(~drop) & ~drop
        if mask.any():
            found[rule] = int(mask.sum())
            drop |= mask
        del mask
        release_heap()   # each rule's temporaries: not a heap the next one climbs on
    apart = _processes_apart(table, ts, end, ~drop, json_trace)
    if apart:
        trace.meta.extra["processes_apart"] = apart
    trim, new_end = _stream_overlap(table, ts, end, ~drop) if json_trace else ([], [])
    if len(trim):
        found["stream_overlap"] = len(trim)
        dur = dur.copy()
        dur[trim] = new_end - ts[trim]
        table = table.set_column(table.schema.get_field_index("dur"), "dur",
                                 pa.array(dur, pa.int64()))
    if not found:
        return trace
    if drop.all():
        raise TraceError(trace.meta.path, "no plausible event left: " + describe(found))
    if drop.any():
        table = table.filter(pa.array(~drop))
    trace.table = table
    trace.meta.extra["impossible"] = found
    return trace


def _processes_apart(table: pa.Table, ts: np.ndarray, end: np.ndarray,
                     keep: np.ndarray, json_trace: bool = False) -> dict | None:
    """The widest gap in the trace's activity when it marks two clocks (see the module
    docstring): {"gap_ns", "before": {"pids", "devices", "span_ns"}, "after": {...}}."""
    ts, end = _kept(keep, ts, end)
    if len(ts) < 2:
        return None
    # the finished table is sorted by ts: then the order is the rows' own (no argsort, no
    # copies of ts and end in that order: ~5 arrays of 8 B a row were the load's peak)
    order = None if _ascending(ts) else np.argsort(ts, kind="stable")
    ts_o, end_o = (ts, end) if order is None else (ts[order], end[order])
    gaps = np.maximum.accumulate(end_o)     # the latest end so far ...
    np.subtract(ts_o[1:], gaps[:-1], out=gaps[:-1])   # ... less the next start: the gaps
    k = int(np.argmax(gaps[:-1]))
    gap = int(gaps[k])
    del gaps
    if gap <= APART_NS:
        return None
    reach_k = end_o[:k + 1].max()
    del ts_o, end_o
    if order is None:
        order = np.arange(len(ts))
    first, then = order[:k + 1], order[k + 1:]
    spans = [int(reach_k - ts[first].min()), int(end[then].max() - ts[then].min())]
    if gap <= max(spans):
        return None
    pid, dev = _int(table, "pid")[keep], _int(table, "device")[keep]
    on_gpu = dev >= 0       # a device's rows carry their launcher's pid: count them by device
    busy = end - ts
    sides = []
    for rows, span in zip((first, then), spans):
        host, dv = rows[~on_gpu[rows]], rows[on_gpu[rows]]
        sides.append({"pids": sorted({int(x) for x in pid[host]}),
                      "devices": sorted({int(x) for x in dev[dv] if x >= 0}), "span_ns": span,
                      "gpu_ns": int(busy[dv].sum())})
    if not json_trace and set(sides[0]["pids"]) & set(sides[1]["pids"]):
        # one process quiet for minutes (nsys without OS-call tracing). Not for JSON traces:
        # each is one process's session, and pids of two machines or containers collide
        # (every rank pid 1 in its container), so a shared pid proves no shared clock
        return None
    # the side with more GPU work (then more rows) is analysed; the other is reported
    pick = "after" if (sides[1]["gpu_ns"], len(then)) > (sides[0]["gpu_ns"], len(first)) \
        else "before"
    return {"gap_ns": gap, "before": sides[0], "after": sides[1], "analysed": pick,
            "before_end_ns": int(reach_k), "after_start_ns": int(ts[then].min())}


def apart_note(apart: dict) -> str:
    """One line about ``meta.extra["processes_apart"]``."""
    def who(side):
        names = [f"process {p}" for p in side["pids"]] + [f"GPU {d}" for d in side["devices"]]
        return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")
    b, a = apart["before"], apart["after"]
    pick = apart.get("analysed")
    which = (f"; analysed: the part {pick} the gap ({who(apart[pick])}, more GPU work; "
             "--window picks another)") if pick else ""
    return (f"{who(b)} and {who(a)} never overlap and lie {apart['gap_ns'] / 1e9:,.0f} s "
            f"apart, longer than either records ({b['span_ns'] / 1e9:,.3g} s, "
            f"{a['span_ns'] / 1e9:,.3g} s): clocks not aligned, or two traces joined? "
            f"Span and idle across them are not real{which}")


def _ascending(ts: np.ndarray) -> bool:
    """True when ``ts`` never decreases (checked a block at a time: no n-sized temporary)."""
    step = 1 << 20
    for i in range(0, len(ts) - 1, step):
        a = ts[i:i + step + 1]
        if not (a[1:] >= a[:-1]).all():
            return False
    return True


def _scatter(keep: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(keep), bool)
    out[keep] = values
    return out


def _check_units(trace: Trace, dur: np.ndarray, kernel: np.ndarray) -> None:
    """Kernels of a few ns each: the timestamps are not in the format's unit."""
    d = dur[kernel & (dur >= 0)]
    if len(d) >= _MEDIAN_MIN_KERNELS and np.median(d) < MIN_KERNEL_MEDIAN_NS:
        raise TraceError(trace.meta.path, f"implausible time unit: the median GPU kernel takes "
                                          f"{float(np.median(d)):g} ns (real kernels take "
                                          "microseconds): timestamps in ms instead of us?")


def describe(found: dict) -> str:
    """One line: how many rows each rule changed, and why."""
    return "; ".join(f"{n:,} {WHY[k][0]}{'s' if n != 1 else ''} {WHY[k][1]}"
                     for k, n in found.items())
