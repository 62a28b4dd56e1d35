"""What the trace already does, so the levers never suggest it again.

* ``uses_cuda_graphs``: graph launches (``cudaGraphLaunch``, ``hipGraphLaunch``,
  ``cuGraphLaunch``) or graph-replay rows in the window;
* ``training``: backward or optimizer work (an inference trace gets no optimizer
  or micro-batch advice);
* ``fused_optimizer``: fused optimizer kernels/ops (``_fused_adam(w)``, ``_fused_sgd``);
* ``dataloader_workers``: the DataLoader iterator is the multi-process one
  (``_MultiProcessingDataLoaderIter``), so ``num_workers`` is already > 0;
* ``host_traced``: the host threads carry operators, ranges, python frames or OS
  calls -- untraced time on them is then Python the profiler did not record;
* ``allocator_uncached``: device frees (``cudaFree``/``hipFree``) called as tensors die
  inside framework ops, not by ``empty_cache()``: PyTorch's caching allocator is off
  (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), so every allocation and free calls the driver.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .steps import (DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN, INFERENCE_STEP_PATTERN,
                    UNNUMBERED_STEP_PATTERN)
from ._common import kind_in

GRAPH_LAUNCH_RX = re.compile(r"^(?:cuda|hip|cu)GraphLaunch")
TRAINING_RX = re.compile(r"(?i)backward|Optimizer\.(?:step|zero_grad)|autograd::engine"
                         r"|_fused_adam|_fused_sgd|_foreach_add|optimizer")
FUSED_OPT_RX = re.compile(r"_fused_adamw?_?|_fused_sgd|fused_adam|FusedAdam|multi_tensor_adam")
MULTI_WORKER_RX = re.compile(r"_MultiProcessingDataLoaderIter")
SINGLE_WORKER_RX = re.compile(r"_SingleProcessDataLoaderIter")
HOST_DETAIL_KINDS = ("cpu_op", "python", "osrt")
LOOK_BACK = 4000   # host rows scanned back from a sync call for its caller


def _names_of(ev: pd.DataFrame, kinds) -> list[str]:
    m = kind_in(ev, kinds)
    if not m.any():
        return []
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[m]
        used = np.unique(codes[codes >= 0])
        return col.cat.categories.take(used).astype(str).tolist()
    return [str(x) for x in pd.unique(col[m].dropna())]


# A PyTorch program: aten ops, python frames, profiler steps, or ATen/c10 kernels (an nsys
# capture with no NVTX still launches at::native kernels). Else the levers speak CUDA.
PYTORCH_HOST_RX = re.compile(r"^(?:aten::|autograd::|torch|ProfilerStep#|Optimizer\.|"
                             r"enumerate\(DataLoader\))|\.py\(\d+\)")
PYTORCH_KERNEL_RX = re.compile(r"at::native::|at::cuda::|c10::|\bat::|triton_")


def trace_context(ev: pd.DataFrame) -> dict:
    """Flags describing what the analysed window already does (see module doc); ``pytorch``:
    whether the program is PyTorch at all (else the levers name CUDA calls, not torch ones)."""
    api = _names_of(ev, ("runtime", "driver"))
    host = _names_of(ev, ("cpu_op", "annotation", "python"))
    kernels = _names_of(ev, ("kernel",))
    graph_rows = bool((ev["kind"] == "graph").any()) if len(ev) else False
    return {
        "uses_cuda_graphs": graph_rows or any(GRAPH_LAUNCH_RX.match(n) for n in api),
        "training": any(TRAINING_RX.search(n) for n in host + kernels),
        "fused_optimizer": any(FUSED_OPT_RX.search(n) for n in host + kernels),
        "dataloader_workers": any(MULTI_WORKER_RX.search(n) for n in host)
        and not any(SINGLE_WORKER_RX.search(n) for n in host),
        "dataloader_single": any(SINGLE_WORKER_RX.search(n) for n in host),
        "pytorch": any(PYTORCH_HOST_RX.search(n) for n in host)
        or any(PYTORCH_KERNEL_RX.search(n) for n in kernels),
        "api_traced": bool(len(api)),
        "host_traced": bool(ev["kind"].isin(HOST_DETAIL_KINDS).any()
                            or _has_non_step_ranges(ev)),
        "allocator_uncached": allocator_uncached(ev),
    }


# With the caching allocator on, PyTorch calls the driver's free only from empty_cache() or
# when an allocation fails and it releases its cache to retry (inside that allocation).
# Frees inside other ops -- a backward function ending, zero_grad(set_to_none) -- are
# tensors dying, which reach the driver only when caching is off.
DEVICE_FREE_RX = re.compile(r"^(?:cuda|hip)Free$|^cuMemFree(?:_v\d+)?$")
CACHE_RELEASE_RX = re.compile(r"empty_cache|emptyCache")
ALLOCATING_OP_RX = re.compile(r"^aten::(?:empty|zeros|ones|full|new_)|caching_allocator|malloc",
                              re.I)
UNCACHED_MIN_FREES = 20
UNCACHED_SHARE = 0.8
_FREE_SAMPLE = 400   # frees looked at (evenly spread): enough to tell the pattern


def allocator_uncached(ev: pd.DataFrame) -> bool:
    """Most device frees sit inside ops that release tensors (see above)."""
    free = kind_in(ev, ("runtime", "driver"))
    if not free.any():
        return False
    rows = np.flatnonzero(free)
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):   # test each distinct name once
        hit = np.array([bool(DEVICE_FREE_RX.match(str(n))) for n in col.cat.categories] + [False])
        rows = rows[hit[col.cat.codes.to_numpy()[rows]]]
    else:
        rows = rows[[bool(DEVICE_FREE_RX.match(str(n))) for n in col.to_numpy()[rows]]]
    if len(rows) < UNCACHED_MIN_FREES:
        return False
    if len(rows) > _FREE_SAMPLE:
        rows = rows[np.linspace(0, len(rows) - 1, _FREE_SAMPLE).astype(np.int64)]
    where = _innermost_ops(ev, rows)
    release = sum(1 for n in where if n and not CACHE_RELEASE_RX.search(n)
                  and not ALLOCATING_OP_RX.search(n))
    return release >= UNCACHED_SHARE * len(rows)


def _innermost_ops(ev: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """Name of the innermost operator / python frame around each row on its thread ('' if none)."""
    m = kind_in(ev, ("cpu_op", "python"))
    if not m.any():
        return [""] * len(rows)
    from .attribution import _thread_key

    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    # one thread = (pid, tid): two processes may reuse a tid
    thread = _thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    ops = np.flatnonzero(m)
    out = []
    by_thread = {t: ops[thread[ops] == t] for t in np.unique(thread[rows])}
    for r in rows:
        cover = _covering(ts, end, by_thread[thread[r]], r)   # nested: the last is innermost
        out.append(str(ev["name"].iat[cover[-1]]) if len(cover) else "")
    return out


def _covering(ts: np.ndarray, end: np.ndarray, rows: np.ndarray, i: int) -> np.ndarray:
    """Of ``rows`` (one thread's, ts-sorted), those that start by row i and end at or after
    it, in start order; enclosing frames start shortly before, so LOOK_BACK rows suffice."""
    k = int(np.searchsorted(ts[rows], ts[i], side="right"))
    back = rows[max(0, k - LOOK_BACK):k]
    return back[end[back] >= end[i]]


def _has_non_step_ranges(ev: pd.DataFrame) -> bool:
    """NVTX/record_function ranges other than step markers show the host was traced."""
    names = _names_of(ev, ("annotation",))
    step = re.compile(r"(?i)^(?:ProfilerStep#\d+|(?:train[_ ]?)?(?:step|iter|iteration|batch)"
                      r"[\s_#:=-]*\d+)$")
    return any(not step.match(n) for n in names)


def sync_caller(ev: pd.DataFrame, sync_name: str, limit: int = 200) -> str:
    """The most frequent innermost enclosing frame/op of ``sync_name`` calls ("" if none).

    A python frame (``file.py(line): fn``) is preferred, then a user range, then an operator.
    """
    names = ev["name"].astype(str) if not isinstance(ev["name"].dtype, pd.CategoricalDtype) \
        else ev["name"]
    hit = np.flatnonzero((names == sync_name).to_numpy())[:limit]
    if not len(hit):
        return ""
    host = kind_in(ev, ("cpu_op", "annotation", "python"))
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    step = re.compile(r"^ProfilerStep#\d+$")
    votes: dict[str, int] = {}
    for (p, t), idx in pd.DataFrame({"p": pid[hit], "t": tid[hit]}).groupby(
            ["p", "t"]).indices.items():
        rows = np.flatnonzero(host & (pid == p) & (tid == t))   # ts-sorted (table order)
        for i in hit[idx].tolist():
            back = _covering(ts, te, rows, i)
            back = back[back != i]
            label = ev["name"].iloc[back].astype(str).to_numpy() if len(back) else []
            cand = [(j, n) for j, n in zip(back.tolist(), label)
                    if n != sync_name and not step.match(n)
                    and not n.startswith("aten::_local_scalar")]
            if not cand:
                continue
            kinds = ev["kind"].iloc[[j for j, _ in cand]].astype(str).tolist()
            # the user's own line: not torch internals, not a C builtin
            py = [c for c, k_ in zip(cand, kinds) if k_ == "python" and ".py(" in c[1]
                  and "torch/" not in c[1] and not c[1].startswith("<built-in")]
            ann = [c for c, k_ in zip(cand, kinds) if k_ == "annotation"]
            pool = py or ann or cand
            j, n = min(pool, key=lambda c: te[c[0]] - ts[c[0]])
            votes[n] = votes.get(n, 0) + 1
    return max(votes, key=votes.get) if votes else ""


IDLE_WAIT_RX = re.compile(r"^(?:poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|"
                          r"pthread_cond_(?:timed)?wait|futex|sem_(?:timed)?wait|pthread_join|"
                          r"waitpid|wait4|pthread_mutex_lock|pthread_rwlock_\w*lock)(?:64)?$")


def innermost_in_gaps(ev: pd.DataFrame, gaps: pd.DataFrame, kinds=("python", "cpu_op"),
                      share: float = 0.5) -> tuple[str, int]:
    """The deepest host frame/op that still explains most of the idle time it sits in.

    Inclusive time favours outer frames (``<module>``, ``train_step``); exclusive
    time scatters. Among the rows whose time inside gaps is at least ``share`` of
    the largest such row, the shortest one is the most specific culprit.
    """
    from . import intervals

    m = kind_in(ev, kinds)
    if not m.any() or not len(gaps):
        return "", 0
    rx = [re.compile(p) for p in (DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN,
                                  UNNUMBERED_STEP_PATTERN, INFERENCE_STEP_PATTERN)]
    rows = np.flatnonzero(m)
    s = ev["ts"].to_numpy(np.int64)[rows]
    e = s + ev["dur"].to_numpy(np.int64)[rows]
    iv = intervals.union(gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64))
    hit, ov = intervals.overlap_hits(iv, s, e)
    if not len(hit):
        return "", 0
    rows, dur = rows[hit], (e - s)[hit]
    col = ev["name"]
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    codes = cat.cat.codes.to_numpy()[rows]
    used = np.unique(codes[codes >= 0])
    is_step = np.zeros(len(cat.cat.categories) + 1, bool)
    is_step[used] = [any(r.match(str(n)) for r in rx) for n in cat.cat.categories.take(used)]
    # a thread parked in poll / a condition wait was waiting for work, not doing it
    is_wait = np.zeros(len(cat.cat.categories) + 1, bool)
    is_wait[used] = [bool(IDLE_WAIT_RX.match(str(n))) for n in cat.cat.categories.take(used)]
    ok = ~is_step[codes] & ~is_wait[codes]
    if not ok.any():
        return "", 0
    # by name: a sleep called 16 times a step explains the idle time together, not once
    c, ov, dur = codes[ok], ov[ok], dur[ok]
    tot = np.bincount(c + 1, weights=ov)
    mean_dur = np.bincount(c + 1, weights=dur) / np.maximum(np.bincount(c + 1), 1)
    cand = np.flatnonzero(tot >= share * tot.max())
    j = cand[np.argmin(mean_dur[cand])]
    name = cat.cat.categories[j - 1] if j >= 1 else ""
    return str(name), int(tot[j])
