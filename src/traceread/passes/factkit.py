"""Shared helpers of the program-fact detectors (blocking, payload, precision, stalls, frames).

Every fact carries its evidence: a list of ``{"name", "ts_ns", "step", "detail"}`` items,
the events that prove it (``item``). The detectors place host rows in their profiler step
(``Steps``), find the host rows around a row on its own thread (``Stacks``), and the host
call that launched a GPU op (``launcher``).
"""
from __future__ import annotations

import contextlib
import os
import re

import numpy as np
import pandas as pd

from .. import namerx
from ..table import GPU_OP_KINDS
from .common import kind_in, name_codes, name_lut, rows_of
from .replay.sim import SIM_ENV, _csim

STEP_RX = namerx.compile(r"^ProfilerStep#(\d+)$")
STEP_NUMBER_RX = re.compile(r"(\d+)\D*$")   # a step range's number: its last digits
HOST_STACK_KINDS = ("cpu_op", "python", "annotation")
MAX_EVIDENCE = 5


def item(name, ts_ns, step=None, detail: str = "") -> dict:
    """One piece of evidence: the event's name, start (ns on the trace clock), step number."""
    return {"name": str(name), "ts_ns": None if ts_ns is None else int(ts_ns),
            "step": None if step is None or step < 0 else int(step), "detail": detail}


def rows_named(ev: pd.DataFrame, rx: re.Pattern, kinds) -> np.ndarray:
    """Rows of ``kinds`` whose name matches ``rx`` (one match per distinct name)."""
    rows = rows_of(ev, kinds)
    col = ev["name"]
    rx = namerx.compile(rx)   # a NameRx reads a name's first SCAN_CHARS (scan_name)
    return rows[name_lut(col, rx).take(name_codes(col).take(rows))] if len(rows) else rows


def names(ev: pd.DataFrame, rows: np.ndarray) -> list[str]:
    return ev["name"].take(rows).astype(str).tolist() if len(rows) else []


class Steps:
    """The ``ProfilerStep#N`` spans of each process: which step a host time lies in.

    ``spans``: the steps the steps pass found by another definition (``find_steps`` rows:
    the optimizer's iterations, an inference pattern, ``--step-pattern``), used as they are
    so every pass counts per step over the same steps: without them resnet_kineto's 29
    optimizer iterations were one step here (its input-batch copies "cannot tell").
    ``span_names``: whether the spans' names are the step ranges' own (not the optimizer's
    op, which lies inside the step it ends)."""

    def __init__(self, ev: pd.DataFrame, spans: pd.DataFrame | None = None,
                 span_names: bool = True):
        if spans is not None and len(spans):
            self._from_spans(spans, span_names)
            return
        rows = rows_named(ev, STEP_RX, ("annotation", "cpu_op"))
        if not len(rows):
            # no ProfilerStep (an nsys capture): the numbered step ranges the steps pass
            # falls back to (NVTX ``step_3``, ``iteration 3``): without them every per-step
            # figure was a whole-window total, and the sync ending one step split it
            from .steps import FALLBACK_STEP_PATTERN
            rows = rows_named(ev, namerx.compile(FALLBACK_STEP_PATTERN), ("annotation",))
            rows = rows[ev["dur"].to_numpy()[rows] > 0]
        ts = ev["ts"].to_numpy(np.int64)
        self.pid = ev["pid"].to_numpy()[rows]
        self.start = ts[rows]
        self.end = self.start + ev["dur"].to_numpy(np.int64)[rows]
        found = names(ev, rows)
        self.names = frozenset(found)   # the step ranges' own names (no step's culprit)
        self.number = np.array([int(STEP_NUMBER_RX.search(n).group(1)) for n in found],
                               np.int64)
        order = np.lexsort((self.start, self.pid))
        self.pid, self.start, self.end, self.number = (a[order] for a in (
            self.pid, self.start, self.end, self.number))

    def _from_spans(self, spans: pd.DataFrame, span_names: bool) -> None:
        order = np.lexsort((spans["start"].to_numpy(np.int64), spans["pid"].to_numpy()))
        self.pid = spans["pid"].to_numpy()[order]
        self.start = spans["start"].to_numpy(np.int64)[order]
        self.end = spans["end"].to_numpy(np.int64)[order]
        self.number = spans["step"].to_numpy(np.int64)[order]
        self.names = frozenset(map(str, spans["name"])) if span_names else frozenset()

    def __len__(self) -> int:
        return len(self.start)

    def count(self) -> int:
        """Steps of the process with the most (a rank traces its own); 1 when none."""
        if not len(self.pid):
            return 1
        return max(1, int(pd.Series(self.pid).value_counts().max()))

    def of(self, pid: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The step number each (pid, ts) lies in; -1 outside every step."""
        out = np.full(len(ts), -1, np.int64)
        for p in np.unique(self.pid):
            m = np.flatnonzero(pid == p)
            sel = self.pid == p
            s, e, n = self.start[sel], self.end[sel], self.number[sel]
            k = np.searchsorted(s, ts[m], side="right") - 1
            ok = (k >= 0) & (ts[m] < e[np.maximum(k, 0)])
            out[m[ok]] = n[k[ok]]
        return out

    def index_of(self, pid: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Like ``of`` but the step's index among this object's spans (-1 outside)."""
        out = np.full(len(ts), -1, np.int64)
        for p in np.unique(self.pid):
            m = np.flatnonzero(pid == p)
            idx = np.flatnonzero(self.pid == p)
            s, e = self.start[idx], self.end[idx]
            k = np.searchsorted(s, ts[m], side="right") - 1
            ok = (k >= 0) & (ts[m] < e[np.maximum(k, 0)])
            out[m[ok]] = idx[k[ok]]
        return out


def thread_key(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    from .attribution import thread_key as tk

    return tk(ev["pid"].to_numpy()[rows].copy(), ev["tid"].to_numpy()[rows].copy())


_SHARING: list[tuple[int, dict]] = []   # the open ``sharing`` scopes: (the pid that opened
#                                         it, {(id(ev), kinds): Stacks})


@contextlib.contextmanager
def sharing():
    """Inside: ``stacks_of`` hands every pass of this process that asks of one frame the
    same ``Stacks`` (its sort and per-thread nesting made once per analysis, not per pass);
    they are dropped when the scope closes or at ``drop_shared``. A forked side worker
    keeps none (it would hold them for its whole life)."""
    _SHARING.append((os.getpid(), {}))
    try:
        yield
    finally:
        _SHARING.pop()


def drop_shared() -> None:
    """Forget the open scope's Stacks (~30 MB at 250 MB: the passes that read them are
    done; the rest of the analysis should not carry them)."""
    if _SHARING:
        _SHARING[-1][1].clear()


def shared_of(ev: pd.DataFrame, key: tuple, make):
    """``make()``, made once per ``(ev, key)`` inside a ``sharing`` scope of this process
    (the passes only read it: a small result several passes ask of the same frame)."""
    if not _SHARING or _SHARING[-1][0] != os.getpid():
        return make()
    memo = _SHARING[-1][1]
    got = memo.get((id(ev), key))
    if got is None or got[0] is not ev:   # the frame is held: the id is its own
        got = memo[id(ev), key] = (ev, make())
    return got[1]


def stacks_of(ev: pd.DataFrame, kinds=HOST_STACK_KINDS) -> "Stacks":
    """``Stacks(ev, kinds)``, shared inside a ``sharing`` scope (it only caches: a shared one
    answers as a fresh one would)."""
    if not _SHARING or _SHARING[-1][0] != os.getpid():
        return Stacks(ev, kinds)
    memo = _SHARING[-1][1]
    key = (id(ev), tuple(kinds))
    got = memo.get(key)
    if got is None or got.ev is not ev:   # the Stacks holds its frame: the id is its own
        got = memo[key] = Stacks(ev, kinds)
    return got


class _Ends:
    """``ts + dur`` read at the rows asked for (an index or an index array), as the whole
    array would answer: the Stacks live through the facts pass, and a whole-window end
    column was 8 B a row of it."""

    def __init__(self, ts: np.ndarray, dur: np.ndarray):
        self.ts, self.dur = ts, dur

    def __getitem__(self, at):
        return self.ts[at] + self.dur[at]


class Stacks:
    """The host rows (ops, python frames, ranges) around a time on one thread.

    Host events on one thread nest; each row's parent (the innermost row that encloses it)
    is found once per thread by a sweep, so the rows around a time are a walk up from the
    last row that started by then."""

    def __init__(self, ev: pd.DataFrame, kinds=HOST_STACK_KINDS):
        self.ev = ev
        self.ts = ev["ts"].to_numpy(np.int64)
        self.end = _Ends(self.ts, ev["dur"].to_numpy(np.int64))
        self._pid, self._tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
        host = np.flatnonzero(kind_in(ev, kinds))
        key = thread_key(ev, host)
        order = np.lexsort((-(self.end[host] - self.ts[host]), self.ts[host], key))
        host, key = host[order], key[order]
        cut = np.flatnonzero(np.diff(key)) + 1
        self.by_thread = {int(k[0]): r for k, r in zip(np.split(key, cut), np.split(host, cut))
                          if len(r)}
        self._parent: dict = {}   # per thread, on first use
        self._thread_ts: dict = {}
        self._name_codes = None   # the name column's category codes, on first use
        self._name_of: dict = {}

    def names(self, rows: np.ndarray) -> list[str]:
        """``ev["name"].take(rows).astype(str).tolist()`` through the category codes: the
        detectors ask per copy / sync / op for the names around it, and a pandas take and
        astype cost ~0.1 ms a call (3.7 s of a 60 MB sync-heavy trace's 5.6)."""
        if not len(rows):
            return []
        if self._name_codes is None:
            col = self.ev["name"]
            ok = isinstance(col.dtype, pd.CategoricalDtype) and \
                all(type(c) is str for c in col.cat.categories[:1])
            self._name_codes = col.cat.codes.to_numpy() if ok else False
            self._name_cats = col.cat.categories if ok else None
        if self._name_codes is False:
            return self.ev["name"].take(rows).astype(str).tolist()
        memo, cats, codes = self._name_of, self._name_cats, self._name_codes
        out = []
        for r, c in zip(rows.tolist(), codes[rows].tolist()):
            if c not in memo:   # a missing name: whatever astype(str) makes of it
                memo[c] = str(cats[c]) if c >= 0 else \
                    self.ev["name"].take([r]).astype(str).tolist()[0]
            out.append(memo[c])
        return out

    def _parents(self, rows: np.ndarray) -> np.ndarray:
        """Index (into ``rows``) of each row's innermost open enclosing row; -1 at the top."""
        ts, end = self.ts[rows], self.end[rows]
        if _csim is not None and os.environ.get(SIM_ENV, "").strip().lower() != "python":
            par = np.empty(len(rows), np.int64)
            _csim.parents(np.ascontiguousarray(ts), np.ascontiguousarray(end), par)
            return par
        return parents_py(ts, end)

    def thread_of(self, row: int) -> int:
        """``thread_key`` of one row, its int64 wrap included (a key for every row of the
        frame, kept for the rest of the facts, was 8 B a row)."""
        k = int(self._pid[row]) * (1 << 32) + (int(self._tid[row]) & 0xFFFFFFFF)
        return (k + (1 << 63)) % (1 << 64) - (1 << 63)

    def around(self, thread, ts: int, end: int | None = None) -> np.ndarray:
        """Rows on ``thread`` that start at or before ``ts`` and end at or after ``end``
        (default ``ts``), outermost first."""
        rows = self.by_thread.get(thread)
        if rows is None or not len(rows):
            return np.empty(0, np.int64)
        end = ts if end is None else end
        par = self._parent.get(thread)
        if par is None:
            # int64 arrays read through memoryviews (a Python int per read): 8 B a row, where
            # lists of ints held ~40 B a row for the whole facts pass (~90 MB at 1 GB, at the peak)
            par = self._parent[thread] = _ints(self._parents(rows))
            self._thread_ts[thread] = (self.ts[rows], _ints(self.end[rows]), _ints(rows))
        tts, tend, trows = self._thread_ts[thread]
        j = int(np.searchsorted(tts, ts, side="right")) - 1
        out = []
        while j >= 0:
            if tend[j] >= end:
                out.append(trows[j])
            j = par[j]
        return np.array(out[::-1], np.int64)

    def around_row(self, row: int) -> np.ndarray:
        """The rows around ``row`` on its own thread (``row`` itself excluded)."""
        out = self.around(self.thread_of(row), int(self.ts[row]), int(self.end[row]))
        return out[out != row]

    def inside(self, row: int) -> np.ndarray:
        """Host rows on ``row``'s thread nested in it (itself excluded)."""
        rows = self.by_thread.get(self.thread_of(row), np.empty(0, np.int64))
        a = np.searchsorted(self.ts[rows], self.ts[row], side="left")
        b = np.searchsorted(self.ts[rows], self.end[row], side="right")
        cand = rows[a:b]
        return cand[(self.end[cand] <= self.end[row]) & (cand != row)]


def _ints(a: np.ndarray) -> memoryview:
    """``a`` as int64 whose items read as Python ints (as fast as a list's, 8 B an item)."""
    return memoryview(np.ascontiguousarray(a, np.int64))


def parents_py(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``Stacks._parents``'s sweep in Python (replay/_csim.c ``parents`` is the same loop)."""
    par = np.full(len(ts), -1, np.int64)
    stack: list[int] = []
    ts, end = ts.tolist(), end.tolist()
    for i in range(len(ts)):
        while stack and end[stack[-1]] <= ts[i] and end[stack[-1]] > ts[stack[-1]]:
            stack.pop()
        while stack and end[stack[-1]] < ts[i]:
            stack.pop()
        par[i] = stack[-1] if stack else -1
        stack.append(i)
    return par


def name_at(ev: pd.DataFrame):
    """``r -> ev["name"].iat[r]`` (the same object) without a frame lookup and an indexer per
    call: the detectors' loops ask it per sync, copy or root."""
    col = ev["name"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.iat.__getitem__
    codes, cats = col.cat.codes.to_numpy(), col.cat.categories
    memo: dict = {}

    def at(r):
        c = int(codes[r])
        if c < 0:
            return col.iat[r]
        if c not in memo:
            memo[c] = cats[c]
        return memo[c]
    return at


def launcher(ev: pd.DataFrame, gpu_rows: np.ndarray) -> np.ndarray:
    """The runtime/driver row that launched each GPU op (same correlation and process);
    -1 when none was recorded."""
    out = np.full(len(gpu_rows), -1, np.int64)
    if not len(gpu_rows) or "correlation" not in ev:
        return out
    api = rows_of(ev, ("runtime", "driver"))
    corr = ev["correlation"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy(np.int64)
    api = api[corr[api] >= 0]
    if not len(api):
        return out
    # one int64 key per (process, correlation): pids and ids both fit in 31 bits in practice;
    # a collision would only pair a GPU op with a wrong launch of the same id
    key = pid[api]
    key <<= 32
    key ^= corr[api]
    order = np.argsort(key, kind="stable")   # the first launch of a duplicated key wins
    key = key[order]
    api = api[order]
    del order
    want = (pid[gpu_rows] << 32) ^ corr[gpu_rows]
    pos = np.searchsorted(key, want)
    ok = (pos < len(key)) & (corr[gpu_rows] >= 0)
    ok[ok] = key[pos[ok]] == want[ok]
    out[ok] = api[pos[ok]]
    return out


def has_gpu(ev: pd.DataFrame) -> bool:
    return bool(kind_in(ev, GPU_OP_KINDS).any())
