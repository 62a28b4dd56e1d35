"""What the trace already does (program facts of the facts record, passes/facts.py), so the
levers never suggest it again.

* ``uses_cuda_graphs``: graph launches (``cudaGraphLaunch``, ``hipGraphLaunch``,
  ``cuGraphLaunch``) or graph-replay rows in the window;
* ``training``: an optimizer step or backward work (``passes/program.py``: an inference
  trace gets no optimizer or micro-batch advice);
* ``fused_optimizer``: the optimizer runs fused (``_fused_adam(w)``, ``_fused_sgd``, FusedAdam);
* ``dataloader_workers``: the DataLoader iterator is the multi-process one
  (``_MultiProcessingDataLoaderIter``), so ``num_workers`` is already > 0;
* ``host_traced``: the host threads carry operators, ranges, python frames or OS
  calls -- untraced time on them is then Python the profiler did not record;
* ``allocator_uncached``: device frees (``cudaFree``/``hipFree``) called as tensors die
  inside framework ops, not by ``empty_cache()``: PyTorch's caching allocator is off
  (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), so every allocation and free calls the driver.

The program keys (framework, collectives, optimizer, compile, dtypes, ...) come from
``passes/program.py``; docs/analysis.md lists every key with its evidence rule.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import namerx
from ..passes import intervals
from ..passes.common import GRAPH_LAUNCH_RX, kind_in, name_lut
from ..passes.factkit import Steps
from ..passes.newfacts import window_facts
from ..passes.preconditions import precondition_facts
from ..table import GPU_OP_KINDS
from .program import HOST_KINDS as PROGRAM_HOST_KINDS, names_of, program_context

MULTI_WORKER_RX = namerx.compile(r"_MultiProcessingDataLoaderIter")
SINGLE_WORKER_RX = namerx.compile(r"_SingleProcessDataLoaderIter")
HOST_DETAIL_KINDS = ("cpu_op", "python", "osrt")


_names_of = names_of


# A PyTorch program: aten ops, python frames, profiler steps, or ATen/c10 kernels (an nsys
# capture with no NVTX still launches at::native kernels). Else the levers speak CUDA.
PYTORCH_HOST_RX = namerx.compile(r"^(?:aten::|autograd::|torch|ProfilerStep#|Optimizer\.|"
                             r"enumerate\(DataLoader\))|\.py\(\d+\)")
PYTORCH_KERNEL_RX = namerx.compile(r"at::native::|at::cuda::|c10::|\bat::|triton_")


def _pytorch(host, kernels) -> bool:
    return namerx.any_of(PYTORCH_HOST_RX, host) or namerx.any_of(PYTORCH_KERNEL_RX, kernels)


def is_pytorch(ev: pd.DataFrame) -> bool:
    """Whether the program is PyTorch at all (``trace_context``'s ``pytorch``)."""
    return _pytorch(_names_of(ev, ("cpu_op", "annotation", "python")), _names_of(ev, ("kernel",)))


def trace_context(ev: pd.DataFrame, meta=None, steps: Steps | None = None) -> dict:
    """Flags describing what the analysed window already does (see module doc); ``pytorch``:
    whether the program is PyTorch at all (else the levers name CUDA calls, not torch ones).
    ``meta``: the trace's ``TraceMeta`` (device, distributedInfo, header: backend, version);
    ``steps``: the analysis's steps (default: the window's ProfilerStep ranges)."""
    steps = steps if steps is not None else Steps(ev)   # one walk for both fact passes
    api = _names_of(ev, ("runtime", "driver"))
    host = _names_of(ev, ("cpu_op", "annotation", "python"))
    all_host = _names_of(ev, PROGRAM_HOST_KINDS)   # + GPU-side ranges, Horovod/other spans
    kernels = _names_of(ev, ("kernel",))
    graph_rows = bool((ev["kind"] == "graph").any()) if len(ev) else False
    prog = program_context(ev, meta, host=all_host, kernels=kernels, api=api)
    opt = prog["optimizer"]
    out = {
        "uses_cuda_graphs": graph_rows or namerx.any_of(GRAPH_LAUNCH_RX, api, "match"),
        "fused_optimizer": bool(opt and opt["impl"] == "fused"),
        "dataloader_workers": namerx.any_of(MULTI_WORKER_RX, host)
        and not namerx.any_of(SINGLE_WORKER_RX, host),
        "dataloader_single": namerx.any_of(SINGLE_WORKER_RX, host),
        "pytorch": _pytorch(host, kernels),
        "api_traced": bool(len(api)),
        "host_traced": bool(ev["kind"].isin(HOST_DETAIL_KINDS).any()
                            or has_non_step_ranges(ev)),
        "stacks_traced": bool((ev["kind"] == "python").any()),
        "allocator_uncached": allocator_uncached(ev),
        "device_frees": device_frees(ev),
        **prog,
        **window_facts(ev, meta, steps),   # blocking calls, copy payloads, precision (newfacts.py)
    }
    pre = precondition_facts(ev, kernels, steps)   # the levers' preconditions (passes/preconditions.py)
    located = out.get("facts_evidence") or {}
    located.update(pre.pop("facts_evidence"))
    out.update(pre, facts_evidence=located)
    return out


# With the caching allocator on, PyTorch calls the driver's free only from empty_cache() or
# when an allocation fails and it releases its cache to retry (inside that allocation).
# Frees inside other ops -- a backward function ending, zero_grad(set_to_none) -- are
# tensors dying, which reach the driver only when caching is off.
DEVICE_FREE_RX = namerx.compile(r"^(?:cuda|hip)Free$|^cuMemFree(?:_v\d+)?$")
CACHE_RELEASE_RX = namerx.compile(r"empty_cache|emptyCache")
ALLOCATING_OP_RX = namerx.compile(r"^aten::(?:empty|zeros|ones|full|new_)|caching_allocator|malloc",
                              re.I)
# any release of device memory back to the driver (expandable segments unmap and release)
RELEASE_RX = namerx.compile(r"^(?:(?:cuda|hip)Free(?:Async)?|cuMemFree(?:Async)?|cuMemRelease"
                            r"|cuMemUnmap)(?:_v\d+)?$")
UNCACHED_MIN_FREES = 20
UNCACHED_SHARE = 0.8
_FREE_SAMPLE = 400   # frees looked at (evenly spread): enough to tell the pattern


def _device_free_rows(ev: pd.DataFrame, rx=DEVICE_FREE_RX) -> np.ndarray:
    """Rows of the driver's device-memory frees (``rx``) in ``ev``."""
    free = kind_in(ev, ("runtime", "driver"))
    if not free.any():
        return np.zeros(0, np.int64)
    rows = np.flatnonzero(free)
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):   # each distinct name tested once
        return rows[name_lut(col, rx, "match")[col.array.codes[rows]]]
    return rows[[bool(rx.match(str(n))) for n in col.to_numpy()[rows]]]


def device_frees(ev: pd.DataFrame) -> int:
    """Device-memory frees while the window's GPU works (its first GPU op's start to its last
    one's end; not only among the gaps' largest host ops): with the caching allocator on,
    one is an ``empty_cache()`` or a release to retry an allocation -- churn, never an
    allocator still growing. PARAM's alexnet (HTA's overlaid_critical_path_trace): a 9.1 ms
    cudaFree inside ``[param|clear_cache]``, 16th of the gaps' host ops, was missed and the
    246 ms of cudaMalloc after it read "still growing". A free after the last GPU op is the
    program's teardown (PARAM's simple_add: one cudaFree 114 ms after its last kernel), not
    churn in the loop."""
    rows = _device_free_rows(ev, RELEASE_RX)
    gpu = kind_in(ev, GPU_OP_KINDS)
    if not len(rows) or not gpu.any():
        return int(len(rows))
    ts = ev["ts"].to_numpy(np.int64)
    first = int(ts[gpu].min())
    last = int((ts[gpu] + ev["dur"].to_numpy(np.int64)[gpu]).max())
    return int(((ts[rows] >= first) & (ts[rows] < last)).sum())


def allocator_uncached(ev: pd.DataFrame) -> bool:
    """Most device frees sit inside ops that release tensors (see above)."""
    rows = _device_free_rows(ev)
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
    from ..passes.attribution import thread_key

    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    # one thread = (pid, tid): two processes may reuse a tid
    thread = thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    ops = np.flatnonzero(m)
    out = []
    by_thread = {t: ops[thread[ops] == t] for t in np.unique(thread[rows])}
    for r in rows:
        # nested: the last is innermost
        cover = intervals.covering(ts, end, by_thread[thread[r]], r)
        out.append(str(ev["name"].iat[cover[-1]]) if len(cover) else "")
    return out


def has_non_step_ranges(ev: pd.DataFrame) -> bool:
    """NVTX/record_function ranges other than step markers show the host was traced."""
    names = _names_of(ev, ("annotation",))
    step = namerx.compile(r"(?i)^(?:ProfilerStep#\d+|(?:train[_ ]?)?(?:step|iter|iteration|batch)"
                      r"[\s_#:=-]*\d+)$")
    if isinstance(names, namerx.NameList):
        return not names.mask(step, "match").all()
    return any(not step.match(n) for n in names)


def flag_evidence(ev: pd.DataFrame, ctx: dict) -> dict[str, list[str]]:
    """The event names that prove ``trace_context``'s flags (those with no ``*_evidence`` key
    of their own), by the same rules: a true flag -> the first proving name in the window
    (none: proved outside it, e.g. graphs recorded at start-up); a false one -> [] (read from
    the absence of any such event)."""
    api = _names_of(ev, ("runtime", "driver"))
    host = _names_of(ev, ("cpu_op", "annotation", "python"))
    rules = {
        "uses_cuda_graphs": lambda: namerx.where(GRAPH_LAUNCH_RX, api, "match")
        + _names_of(ev, ("graph",)),
        "dataloader_workers": lambda: namerx.where(MULTI_WORKER_RX, host),
        "dataloader_single": lambda: namerx.where(SINGLE_WORKER_RX, host),
        "pytorch": lambda: namerx.where(PYTORCH_HOST_RX, host)
        + namerx.where(PYTORCH_KERNEL_RX, _names_of(ev, ("kernel",))),
        "api_traced": lambda: api,
        "host_traced": lambda: _names_of(ev, HOST_DETAIL_KINDS) or _names_of(ev, ("annotation",)),
        "allocator_uncached": lambda: namerx.where(DEVICE_FREE_RX, api, "match"),
        "device_frees": lambda: namerx.where(RELEASE_RX, api, "match"),
    }
    out = {}
    for key, names in rules.items():
        if key not in ctx:
            continue
        if not ctx[key]:
            out[key] = []
            continue
        found = names()
        if found:
            out[key] = found[:1]
    return out
