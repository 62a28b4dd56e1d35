"""Vectorised interval algebra on half-open integer intervals [start, end).

Every pass that asks "when was the GPU busy / idle / communicating" reduces to
unions, intersections and differences of interval sets. All functions take and
return numpy int64 arrays and run in O(n log n) with no per-interval Python.
A "set" here is a pair (starts, ends); results are always sorted, disjoint and
non-touching (adjacent pieces are merged), with zero-length pieces dropped.
"""
from __future__ import annotations

import os

import numpy as np

try:   # the same algebra in C (setup.py builds it where a compiler is): one pass where the
    from . import _civ   # numpy code makes several; else the numpy code (the reference)
except ImportError:
    _civ = None

IV_ENV = "TRACEREAD_INTERVALS"   # "python": the numpy code where the C one is built (tests)

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _native():
    """The C module, unless not built or ``TRACEREAD_INTERVALS=python``."""
    if _civ is None or os.environ.get(IV_ENV, "").strip().lower() == "python":
        return None
    return _civ


def _i64(*xs) -> bool:
    """Every x an int64 array (the C code reads int64; another dtype keeps numpy's rules)."""
    return all(isinstance(x, np.ndarray) and x.dtype == np.int64 for x in xs)


def _c(x: np.ndarray) -> np.ndarray:
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _out(buf) -> np.ndarray:
    return np.frombuffer(buf, np.int64)


def _pair(got) -> Intervals:
    s, e = _out(got[0]), _out(got[1])
    return (s, e) if len(s) else (_EMPTY, _EMPTY)


def union(starts, ends) -> Intervals:
    """Merge possibly overlapping intervals into a sorted disjoint set."""
    s, e = _arr(starts), _arr(ends)
    civ = _native()
    if civ is not None and s.ndim == e.ndim == 1 and len(s) == len(e):
        got = civ.union(_c(s), _c(e))
        if got is not None:   # (None: the starts not sorted)
            return _pair(got)
    return union_py(s, e)


def union_py(starts, ends) -> Intervals:
    """``union`` in numpy (the reference of the C code)."""
    s, e = _arr(starts), _arr(ends)
    keep = e > s
    if not keep.all():   # copies only when a piece is empty
        s, e = s[keep], e[keep]
    del keep
    if len(s) == 0:
        return _EMPTY, _EMPTY
    # Sorted starts (gaps, ts-sorted rows: the usual case) need no sort: a stable sort of
    # them is the identity, so skipping it saves an index array and two gathers.
    if len(s) > 1 and not _sorted(s):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        del order
    reach = np.maximum.accumulate(e)
    # A new piece starts where an interval begins strictly after everything before it ended.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def _sorted(s: np.ndarray) -> bool:
    """Non-decreasing, checked in blocks (no full-length bool temporary)."""
    step = 1 << 20
    for a in range(0, len(s) - 1, step):
        b = min(a + step, len(s) - 1)
        if not (s[a + 1:b + 1] >= s[a:b]).all():
            return False
    return True


def union_by_device(rows) -> dict:
    """(pid, device) -> union of the rows' [ts, ts + dur) (rows: ts, dur, pid, device columns)."""
    out = {}
    for (pid, dev), g in rows.groupby(["pid", "device"], sort=True, observed=True):
        s = g["ts"].to_numpy(np.int64)
        out[(int(pid), int(dev))] = union(s, s + g["dur"].to_numpy(np.int64))
    return out


def total(iv: Intervals) -> int:
    """Total length of a disjoint set."""
    s, e = iv
    return int((e - s).sum()) if len(s) else 0


_WANT = (lambda x, y: x & y, lambda x, y: x & ~y)   # intersect, subtract


def _sweep(a: Intervals, b: Intervals, mode: int) -> Intervals:
    """Pieces of the line covered by a and (mode 0) or not (mode 1) by b (inputs may overlap)."""
    a_s, a_e, b_s, b_e = _arr(a[0]), _arr(a[1]), _arr(b[0]), _arr(b[1])
    civ = _native()
    if civ is not None and a_s.ndim == a_e.ndim == b_s.ndim == b_e.ndim == 1 and \
            len(a_s) == len(a_e) and len(b_s) == len(b_e):
        return _pair(civ.sweep(_c(a_s), _c(a_e), _c(b_s), _c(b_e), mode))
    return _sweep_py((a_s, a_e), (b_s, b_e), _WANT[mode])


def _sweep_py(a: Intervals, b: Intervals, want) -> Intervals:
    """Pieces of the line where want(in_a, in_b) holds (numpy: the C code's reference)."""
    a_s, a_e = _arr(a[0]), _arr(a[1])
    b_s, b_e = _arr(b[0]), _arr(b[1])
    pos = np.concatenate([a_s, a_e, b_s, b_e])
    if len(pos) == 0:
        return _EMPTY, _EMPTY
    na, nb = len(a_s), len(b_s)
    da = np.concatenate([np.ones(na, np.int64), -np.ones(na, np.int64), np.zeros(2 * nb, np.int64)])
    db = np.concatenate([np.zeros(2 * na, np.int64), np.ones(nb, np.int64), -np.ones(nb, np.int64)])
    order = np.argsort(pos, kind="stable")
    pos, da, db = pos[order], da[order], db[order]
    uniq, first = np.unique(pos, return_index=True)
    in_a = np.add.reduceat(da, first).cumsum()[:-1] > 0
    in_b = np.add.reduceat(db, first).cumsum()[:-1] > 0
    keep = want(in_a, in_b)
    return union_py(uniq[:-1][keep], uniq[1:][keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Points covered by both sets."""
    return _sweep(a, b, 0)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Points covered by a but not by b."""
    return _sweep(a, b, 1)


def complement(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The holes of a set inside the window [lo, hi)."""
    return subtract((_arr([lo]), _arr([hi])), iv)


def intersect_sorted(a, b: Intervals) -> tuple:
    """``intersect`` for two disjoint sorted sets, in O(pieces) memory.

    The general sweep allocates ~10 int64 arrays of 4 x (|a| + |b|) events. Here
    each b interval is paired with the a intervals it overlaps (at most |a| + |b|
    pairs); both sets being sorted, disjoint and non-touching, the clipped pairs
    come out sorted, non-empty and non-touching: already the normal form. An ``a``
    with a third array (a label per interval, e.g. its gap) passes each piece the
    label of the ``a`` interval it came from.
    """
    (a_s, a_e), (b_s, b_e) = a[:2], b[:2]
    civ = _native()
    if civ is not None and len(a_s) and len(b_s) and _i64(a_s, a_e, b_s, b_e) and \
            a_s.ndim == b_s.ndim == 1 and len(a_s) == len(a_e) and len(b_s) == len(b_e):
        got = civ.intersect_sorted(_c(a_s), _c(a_e), _c(b_s), _c(b_e))
        if got is not None:   # (None: a's starts or ends not sorted)
            start, end, i = (_out(x) for x in got)
            return (start, end) + tuple(x[i] for x in a[2:])
    return intersect_sorted_py(a, b)


def intersect_sorted_py(a, b: Intervals) -> tuple:
    """``intersect_sorted`` in numpy (the reference of the C code)."""
    (a_s, a_e), (b_s, b_e) = a[:2], b[:2]
    if not len(a_s) or not len(b_s):
        return (a_s[:0].astype(np.int64), a_e[:0].astype(np.int64)) + \
            tuple(x[:0] for x in a[2:])
    lo = np.searchsorted(a_e, b_s, side="right")   # first a ending after b starts
    cnt = np.searchsorted(a_s, b_e, side="left")   # a intervals starting before b ends
    cnt -= lo
    np.maximum(cnt, 0, out=cnt)
    j = np.repeat(np.arange(len(b_s)), cnt)
    i = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
    del lo, cnt
    i += np.arange(len(j))
    start = np.maximum(a_s[i], b_s[j])
    end = np.minimum(a_e[i], b_e[j])
    return (start, end) + tuple(x[i] for x in a[2:])


def subtract_sorted(a, b: Intervals) -> tuple:
    """``subtract`` for two disjoint sorted sets: a intersected with b's holes
    (labels of ``a``'s intervals carried as in ``intersect_sorted``)."""
    (a_s, a_e), (b_s, b_e) = a[:2], b[:2]
    if not len(a_s) or not len(b_s):
        if len(a) > 2:
            return a
        return union(a_s, a_e)
    lo = min(int(a_s[0]), int(b_s[0]))
    hi = max(int(a_e[-1]), int(b_e[-1]))
    hs = np.concatenate(([lo], b_e))
    he = np.concatenate((b_s, [hi]))
    keep = he > hs
    return intersect_sorted(a, (hs[keep], he[keep]))


def covered_before(iv: Intervals, x) -> np.ndarray:
    """For each point x, the length of the disjoint set lying before x."""
    s, e = iv
    x = _arr(x)
    if len(s) == 0:
        return np.zeros(len(x), dtype=np.int64)
    prefix = np.concatenate([[0], np.cumsum(e - s)])
    k = np.searchsorted(s, x, side="right") - 1
    kk = np.clip(k, 0, len(s) - 1)
    inside = np.clip(x - s[kk], 0, e[kk] - s[kk])
    return np.where(k >= 0, prefix[kk] + inside, 0)


def overlap(iv: Intervals, qs, qe) -> np.ndarray:
    """For each query interval [qs, qe), how much of it the disjoint set covers."""
    qs, qe = _arr(qs), _arr(qe)
    return np.maximum(covered_before(iv, qe) - covered_before(iv, qs), 0)


def reaching(iv: Intervals, qs, qe) -> np.ndarray:
    """Indices of the queries [qs, qe) that meet a piece of the disjoint set (for
    ``qe > qs``: that it covers in part). One search per query, fast for sorted ``qs``."""
    s, e = iv
    qs, qe = _arr(qs), _arr(qe)
    if len(s) == 0 or len(qs) == 0:
        return np.empty(0, np.int64)
    civ = _native()
    if civ is not None and _i64(s, e) and s.ndim == qs.ndim == 1 and len(s) == len(e) and \
            len(qs) == len(qe):
        got = civ.reaching(_c(s), _c(e), _c(qs), _c(qe))
        if got is not None:   # (None: the ends not sorted)
            return _out(got)
    return reaching_py(iv, qs, qe)


def reaching_py(iv: Intervals, qs, qe) -> np.ndarray:
    """``reaching`` in numpy (the reference of the C code)."""
    s, e = iv
    qs, qe = _arr(qs), _arr(qe)
    if len(s) == 0 or len(qs) == 0:
        return np.empty(0, np.int64)
    if len(qs) <= _QUERY_BLOCK:
        return _reaching(s, e, qs, qe)
    # a block of queries at a time: ~26 B a query of temporaries (the attribution asks this
    # of every host row: 40 MB at 1 GB at once)
    return np.concatenate([a + _reaching(s, e, qs[a:a + _QUERY_BLOCK], qe[a:a + _QUERY_BLOCK])
                           for a in range(0, len(qs), _QUERY_BLOCK)])


_QUERY_BLOCK = 1 << 18


def _reaching(s, e, qs, qe) -> np.ndarray:
    k = np.searchsorted(e, qs, side="right")       # first piece ending after the start
    np.minimum(k, len(s) - 1, out=k)
    return np.flatnonzero((s[k] < qe) & (qs < e[k]))


def overlap_hits(iv: Intervals, qs, qe) -> tuple[np.ndarray, np.ndarray]:
    """The queries [qs, qe) the disjoint set covers in part: (their indices, ns covered).

    ``overlap`` for many queries of which few touch the set: one search per query for
    the first piece ending after its start (fast when ``qs`` is sorted), the second search
    only for the queries that piece reaches.
    """
    s, e = iv
    qs, qe = _arr(qs), _arr(qe)
    if len(s) == 0 or len(qs) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    civ = _native()
    if civ is not None and _i64(s, e) and s.ndim == qs.ndim == 1 and len(s) == len(e) and \
            len(qs) == len(qe):
        got = civ.overlap_hits(_c(s), _c(e), _c(qs), _c(qe))
        if got is not None:   # (None: the ends not sorted)
            return _out(got[0]), _out(got[1])
    return overlap_hits_py(iv, qs, qe)


def overlap_hits_py(iv: Intervals, qs, qe) -> tuple[np.ndarray, np.ndarray]:
    """``overlap_hits`` in numpy (the reference of the C code)."""
    s, e = iv
    qs, qe = _arr(qs), _arr(qe)
    if len(s) == 0 or len(qs) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    k = np.searchsorted(e, qs, side="right")       # first piece ending after the start
    idx = np.flatnonzero(k < len(s))
    k = k[idx]
    near = s[k] < qe[idx]
    idx, k = idx[near], k[near]
    prefix = np.concatenate([[0], np.cumsum(e - s)])
    a, b = qs[idx], qe[idx]
    before_a = prefix[k] + np.maximum(a - s[k], 0)   # pieces before k end at or before a
    k2 = np.searchsorted(e, b, side="right")
    k2c = np.minimum(k2, len(s) - 1)
    before_b = prefix[k2] + np.where(k2 < len(s), np.maximum(b - s[k2c], 0), 0)
    ov = before_b - before_a
    hit = ov > 0
    return idx[hit], ov[hit]


LOOK_BACK = 4000   # host rows scanned back from a call for the frames around it


def covering(ts: np.ndarray, end: np.ndarray, rows: np.ndarray, i: int) -> np.ndarray:
    """Of ``rows`` (one thread's, ts-sorted), those that start by row i and end at or after
    it, in start order; enclosing frames start shortly before, so LOOK_BACK rows suffice."""
    k = int(np.searchsorted(ts[rows], ts[i], side="right"))
    back = rows[max(0, k - LOOK_BACK):k]
    return back[end[back] >= end[i]]
