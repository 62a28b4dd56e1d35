"""Facts that a lever's preconditions read (issue 39), each with the events that prove it
(``facts_evidence``: fact key -> [{"name", "ts_ns", "step", "detail"}]).

* ``kernel_arch``: the GPU generation the kernels were built for, when the device is not
  recorded: cuBLAS/cuDNN name their kernels by family (``volta_sgemm``, ``turing_fp16_s1688``,
  ``ampere_sgemm``, ``sm80_xmma``, ``sm90_xmma``). The newest family seen is a lower bound
  on the device; a trace whose newest is ``volta_``/``turing_`` runs on sm70/sm75 (no TF32,
  no fast bf16): cuBLAS picks ``ampere_``/``sm80_`` kernels on sm80 and later.
* ``fp32_gemv_share``: of the FP32 SIMT GEMM time, the share in GEMV-shaped kernels
  (``gemmSN``: small-N, ``gemv``, ``gemmk1``): memory-bound, a tensor-core precision does
  not speed them (a tiny batch).
* ``h2d_source``: where the host->device copies come from -- ``pinned`` / ``pageable`` /
  ``unknown`` copies (``Memcpy HtoD (Pinned -> Device)``); all pinned: pinning is done.
* ``sync_copy_directions``: which way the copies the host waited for went (``DtoH`` a
  result read back, ``HtoD`` an input sent blocking): a read-back remedy fits only the first.
* ``pageable_reads``: device->host copies into pageable memory, and how many of them held
  their own call until the copy was done (a read-back staged through a bounce buffer: the
  host waits for the whole queue before it, ``non_blocking`` or not).
* ``graph_launches``: CUDA graph launches (``cudaGraphLaunch``...) and replay rows in the
  window: a step "already replays CUDA graphs" only with at least one.
* ``startup_phase``: the window is an engine's start-up (vLLM / SGLang model runner
  ``__init__``, ``capture_model``, ``_capture_cudagraphs``, ``init_device_graphs``): its
  graph captures and allocations happen once, not every step.
* ``compiled_calls_per_step``: calls of each torch.compile graph (``## Call CompiledFxGraph
  <hash> ##``, ``CompiledFunction``) per profiler step; the most called one.
* ``step_shapes``: whether the ops' input shapes (``record_shapes``) differ between the
  steps: the same in every step, "keep shapes stable" has nothing to stabilise.
* ``host_other_kind``: what the host work that is not the model's forward is --
  ``framework`` (optimizer step, module call wrappers, autograd engine, a serving engine's
  loop: it cannot move to a DataLoader worker), ``compute`` (the job's own matmuls on the
  host), ``movable`` (data preparation, copies, logging, I/O, sleeps) or ``unknown``.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import namerx
from . import intervals
from .attribution import API_TAIL, SYNC_CALL, SYNC_COPY_CALL, SYNC_OPS
from .common import GRAPH_LAUNCH_RX, kind_in, lut_at, rows_of
from .factkit import Steps, item

# -- GPU generation from kernel names -----------------------------------------------------

# family -> (compute capability, tf32, fast bf16); ordered oldest first
ARCH_FAMILIES = {
    "volta": ("7.0", False, False),
    "turing": ("7.5", False, False),
    "ampere": ("8.0", True, True),
    "sm80": ("8.0", True, True),
    "sm86": ("8.6", True, True),
    "sm89": ("8.9", True, True),
    "sm90": ("9.0", True, True),
    "sm100": ("10.0", True, True),
}
ARCH_RX = re.compile(r"^(?:void\s+)?(?:cutlass\w*::)?(volta|turing|ampere|sm(?:80|86|89|90|100))_")
ARCH_MIN_KERNELS = 2     # distinct family kernel names before the family is taken as proof


def kernel_arch(kernels: list[str]) -> tuple[dict | None, list[dict]]:
    """({"arch", "cc", "tf32", "bf16", "kernels"} of the newest kernel family seen, or None;
    evidence). Fewer than ``ARCH_MIN_KERNELS`` distinct names of all families: None."""
    seen: dict[str, str] = {}
    count = 0
    for n in kernels:
        m = ARCH_RX.match(str(n))
        if m:
            count += 1
            seen.setdefault(m.group(1), str(n))
    if count < ARCH_MIN_KERNELS:
        return None, []
    order = list(ARCH_FAMILIES)
    newest = max(seen, key=order.index)
    cc, tf32, bf16 = ARCH_FAMILIES[newest]
    fact = {"arch": newest, "cc": cc, "tf32": tf32, "bf16": bf16, "kernels": count}
    why = (f"newest kernel family {newest}_ (sm{cc.replace('.', '')}): "
           + ("TF32 and bf16 tensor cores" if tf32 else "no TF32, no fast bf16"))
    return fact, [item(seen[newest], None, None, why)]


# -- GEMV-shaped FP32 GEMMs ---------------------------------------------------------------

FP32_GEMM_RX = re.compile(r"sgemm|gemmSN|gemv|gemmk1|gemm_?f32|s\d+gemm", re.I)
GEMV_RX = re.compile(r"gemmSN|gemv|gemmk1", re.I)
TENSOR_CORE_RX = re.compile(r"tf32|bf16|fp16|h\d{3,4}gemm|s16816|s1688|xmma|wmma|hmma", re.I)


def fp32_gemv_share(ev: pd.DataFrame) -> tuple[float | None, list[dict]]:
    """(GEMV-shaped share of the FP32 SIMT GEMM kernel time, evidence); None: no such GEMM."""
    rows = rows_of(ev, ("kernel",))
    if not len(rows):
        return None, []
    lut, codes = lut_at(ev["name"], rows, _gemm_class, 0, np.int8)
    cls = lut.take(codes)
    dur = ev["dur"].to_numpy(np.int64)[rows]
    total = int(dur[cls > 0].sum())
    if total <= 0:
        return None, []
    gemv = int(dur[cls == 2].sum())
    share = round(gemv / total, 3)
    if not gemv:
        return share, []
    first = rows[np.flatnonzero(cls == 2)[0]]
    return share, [item(ev["name"].iat[first], ev["ts"].iat[first], None,
                        f"GEMV-shaped kernels: {100 * share:.0f}% of FP32 GEMM time")]


def _gemm_class(name: str) -> int:
    """0: not an FP32 SIMT GEMM; 1: a GEMM; 2: a GEMV-shaped one."""
    if not FP32_GEMM_RX.search(name) or TENSOR_CORE_RX.search(name):
        return 0
    return 2 if GEMV_RX.search(name) else 1


# -- host->device copies: pinned or pageable ----------------------------------------------

PINNED_RX = re.compile(r"Pinned\s*->", re.I)
PAGEABLE_RX = re.compile(r"Pageable\s*->", re.I)


def h2d_source(ev: pd.DataFrame) -> tuple[dict | None, list[dict]]:
    """({"copies", "pinned", "pageable", "unknown"} of the HtoD copies, evidence); None: none."""
    rows = rows_of(ev, ("memcpy",))
    if not len(rows) or "copy_kind" not in ev:
        return None, []
    kind = ev["copy_kind"].astype(object).to_numpy()[rows]
    rows = rows[kind == "HtoD"]
    if not len(rows):
        return None, []
    lut, codes = lut_at(ev["name"], rows, _memory_kind, 0, np.int8)
    mk = lut.take(codes)
    if "raw_name" in ev:   # nsys names a copy by direction; its memory kinds are in raw_name
        rlut, rcodes = lut_at(ev["raw_name"], rows, _memory_kind, 0, np.int8)
        mk = np.maximum(mk, rlut.take(rcodes))
    out = {"copies": int(len(rows)), "pinned": int((mk == 1).sum()),
           "pageable": int((mk == 2).sum()), "unknown": int((mk == 0).sum())}
    pick = np.flatnonzero(mk == 2) if out["pageable"] else np.flatnonzero(mk == 1)
    if not len(pick):
        return out, []
    r = rows[pick[0]]
    return out, [item(ev["name"].iat[r], ev["ts"].iat[r], None,
                      f"{out['pinned']} pinned, {out['pageable']} pageable of {out['copies']} "
                      "HtoD copies")]


def _memory_kind(name: str) -> int:
    return 2 if PAGEABLE_RX.search(name) else 1 if PINNED_RX.search(name) else 0


# -- which way the blocking copies go ----------------------------------------------------

# attribution's blocking calls, split: a synchronize, and a synchronous copy call
SYNC_CALL_RX = re.compile(r"^" + SYNC_CALL + API_TAIL)
SYNC_COPY_API_RX = re.compile(r"^(?:" + SYNC_COPY_CALL + ")" + API_TAIL)


def sync_copy_directions(ev: pd.DataFrame) -> tuple[dict | None, list[dict]]:
    """({direction: count} of the copies the host waited for -- launched by a synchronous
    memcpy call, followed on the launching thread by a synchronize before any other
    runtime call, or to / from pageable memory (``Device -> Pageable``: CUDA stages such a
    copy through the host, which waits for it and for the queue before it, non_blocking or
    not) --, evidence); None: no copy in the window."""
    cp = rows_of(ev, ("memcpy",))
    api = rows_of(ev, ("runtime", "driver"))
    if not len(cp) or not len(api) or "correlation" not in ev:
        return None, []
    corr = ev["correlation"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    order = api[np.lexsort((ts[api], tid[api], pid[api]))]
    lut, codes = lut_at(ev["name"], order, _sync_class, 0, np.int8)
    cls = lut.take(codes)
    at = _last_at(corr[order], corr[cp])
    waited, pageable = _waited_copies(at, cls, pid[order], tid[order]), _pageable_host(ev, cp)
    # the counted copies in row order: each one's direction (a missing one reads "nan", an
    # empty one "unknown", as ``astype(object)`` gives them); a loop of copies was ~15 ms
    counted = (at >= 0) & (waited | pageable) if "copy_kind" in ev else np.zeros(len(cp), bool)
    out: dict[str, int] = {}
    kinds = ev["copy_kind"].iloc[cp[counted]].astype(object).tolist() if counted.any() else []
    read = _scalar_reads(ev, order[at[counted]]) if counted.any() else []
    for k, r in zip(kinds, read):
        d = "DtoH" if r else str(k or "unknown")
        out[d] = out.get(d, 0) + 1
    staged = int((counted & pageable & ~waited).sum())
    relabelled = sum(1 for k, r in zip(kinds, read) if r and str(k or "") != "DtoH")
    first = int(cp[counted][0]) if counted.any() else None
    if first is None:
        return {}, []
    how = f" ({staged} staged through pageable memory)" if staged else ""
    how += f" ({relabelled} a scalar read recorded as another direction)" if relabelled else ""
    return out, [item(ev["name"].iat[first], ev["ts"].iat[first], None,
                      "the host waited for it: " + ", ".join(f"{k} x{v}" for k, v in out.items())
                      + how)]


# a scalar read's copy goes device -> host whatever it is recorded as: ROCm names the
# ``_local_scalar_dense`` copy "Memcpy DtoD (Device -> Device)" (TraceLens' mi300 bert-small
# and Qwen; their H100 twins record "Memcpy DtoH (Device -> Pinned)")
SCALAR_READ_RX = re.compile(r"^(?:" + "|".join(re.escape(o) for o in SYNC_OPS) + r")$")


def _scalar_reads(ev: pd.DataFrame, calls: np.ndarray) -> list[bool]:
    """Per launching call (rows of ``ev``): it runs inside a scalar read on its thread."""
    ops = rows_of(ev, ("cpu_op",))
    if not len(ops) or not len(calls):
        return [False] * len(calls)
    lut, codes = lut_at(ev["name"], ops, lambda n: bool(SCALAR_READ_RX.match(n)), False, bool)
    ops = ops[lut.take(codes)]
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    out = np.zeros(len(calls), bool)
    for p, t in set(zip(pid[calls].tolist(), tid[calls].tolist())):   # per thread, not per call
        mine = ops[(pid[ops] == p) & (tid[ops] == t)]
        if not len(mine):
            continue
        s, e = intervals.union(ts[mine], ts[mine] + dur[mine])
        at = np.flatnonzero((pid[calls] == p) & (tid[calls] == t))
        k = np.searchsorted(s, ts[calls[at]], side="right") - 1
        out[at] = (k >= 0) & (ts[calls[at]] < e[np.maximum(k, 0)])
    return out.tolist()


def _waited_copies(at: np.ndarray, cls: np.ndarray, pid: np.ndarray,
                   tid: np.ndarray) -> np.ndarray:
    """Per copy: its launching call (position ``at`` in the calls' thread order, -1: none)
    was a synchronous copy call (class 2), or the next call on its thread is a
    synchronize (class 1)."""
    n = len(cls)
    i = np.clip(at, 0, max(n - 1, 0))
    nxt = np.minimum(i + 1, max(n - 1, 0))
    follows = ((i + 1) < n) & (cls[nxt] == 1) & (pid[nxt] == pid[i]) & (tid[nxt] == tid[i])
    return (at >= 0) & ((cls[i] == 2) | follows) if n else np.zeros(len(at), bool)


def _last_at(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per wanted value, the last position of it in ``keys`` among those >= 0 (-1: none):
    ``{k: i for i, k in enumerate(keys) if k >= 0}.get(w, -1)`` by one stable sort."""
    ok = np.flatnonzero(keys >= 0)
    o = ok[np.argsort(keys[ok], kind="stable")]   # equal keys keep their order: last = latest
    if not len(o):
        return np.full(len(wanted), -1, np.int64)
    srt = keys[o]
    k = np.searchsorted(srt, wanted, side="right") - 1
    hit = (k >= 0) & (wanted >= 0)
    hit[hit] = srt[k[hit]] == wanted[hit]
    return np.where(hit, o[np.maximum(k, 0)], -1)


HOST_PAGEABLE_RX = re.compile(r"Pageable\s*->|->\s*Pageable", re.I)   # either side


def _host_pageable(name: str) -> int:
    """1: a copy from or into pageable host memory (its host side unpinned)."""
    return 1 if HOST_PAGEABLE_RX.search(name) else 0


def _pageable_host(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per copy row: its host side is pageable, by its name (Kineto: ``Memcpy DtoH (Device ->
    Pageable)``) or, where an nsys export keeps the memory kind apart, its ``raw_name``."""
    lut, codes = lut_at(ev["name"], rows, _host_pageable, 0, np.int8)
    out = lut.take(codes) == 1
    if "raw_name" in ev and len(rows):
        rlut, rcodes = lut_at(ev["raw_name"], rows, _host_pageable, 0, np.int8)
        out |= rlut.take(rcodes) == 1
    return out


# -- results read back through pageable memory --------------------------------------------

READ_WAIT_NS = 50_000   # the call returned this soon after its copy ended: it waited for it
CLOCK_SLACK_NS = 5_000  # host and GPU clocks may disagree this much (the replay's drain slack)


def pageable_reads(ev: pd.DataFrame) -> tuple[dict | None, list[dict]]:
    """({"copies", "waited", "waited_ns"} of the device->host copies into pageable memory:
    how many, how many of them held their own call until the copy was done -- the call
    returned at most ``READ_WAIT_NS`` after the copy ended (``CLOCK_SLACK_NS`` before it); CUDA stages such a copy through
    a bounce buffer, so a non_blocking read-back still waits for the whole queue before it
    -- and the time the host spent in those calls; evidence: the longest such wait). None:
    no device->host copy into pageable memory in the window."""
    cp = rows_of(ev, ("memcpy",))
    if not len(cp) or "copy_kind" not in ev or "correlation" not in ev:
        return None, []
    kind = ev["copy_kind"].astype(object).to_numpy()[cp]
    cp = cp[(kind == "DtoH") & _pageable_host(ev, cp)]
    if not len(cp):
        return None, []
    api = rows_of(ev, ("runtime", "driver"))
    pid = ev["pid"].to_numpy(np.int64)
    corr = ev["correlation"].to_numpy(np.int64)
    api = api[np.isin(corr[api], corr[cp])]   # only the copies' own calls
    call = {(int(pid[r]), int(corr[r])): r for r in api.tolist()}
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    waited, waited_ns, best = 0, 0, None
    for r in cp.tolist():
        c = call.get((int(pid[r]), int(corr[r])))
        if c is None:
            continue
        after = int(ts[c] + dur[c] - (ts[r] + dur[r]))   # call end - copy end
        if -CLOCK_SLACK_NS <= after <= READ_WAIT_NS:
            waited += 1
            waited_ns += int(dur[c])
            if best is None or dur[c] > dur[best[0]]:
                best = (c, r, after)
    out = {"copies": int(len(cp)), "waited": waited, "waited_ns": waited_ns}
    if best is None:
        return out, []
    c, r, after = best
    return out, [item(ev["name"].iat[c], ev["ts"].iat[c], None,
                      f"waited {dur[c] / 1e3:.0f} us, returned {after / 1e3:.0f} us after its "
                      f"{int(ev['bytes'].iat[r])} B copy into pageable "
                      f"memory ended ({waited} of {len(cp)} such copies)")]


def _sync_class(name: str) -> int:
    """2: a synchronous copy call; 1: a synchronize; 0: anything else."""
    return 2 if SYNC_COPY_API_RX.match(name) else 1 if SYNC_CALL_RX.match(name) else 0


# -- CUDA graph launches ------------------------------------------------------------------

def graph_launches(ev: pd.DataFrame) -> tuple[int, list[dict]]:
    """(graph launches + graph replay rows in the window, evidence of the first)."""
    api = rows_of(ev, ("runtime", "driver"))
    hit = np.zeros(0, np.int64)
    if len(api):
        lut, codes = lut_at(ev["name"], api, lambda n: bool(GRAPH_LAUNCH_RX.match(n)), False,
                            bool)
        hit = api[lut.take(codes)]
    replays = rows_of(ev, ("graph",))
    n = int(len(hit) + len(replays))
    if not n:
        return 0, []
    r = hit[0] if len(hit) else replays[0]
    return n, [item(ev["name"].iat[r], ev["ts"].iat[r], None, f"{n} graph launches")]


# -- an engine's start-up -----------------------------------------------------------------

# vLLM / SGLang / TensorRT-LLM engine set-up frames: the model runner built, its graphs captured
STARTUP_RX = namerx.compile(
    r"(?:model_runner|cuda_graph_runner|gpu_model_runner|gpu_worker|worker|llm_engine|engine"
    r"|scheduler|model_executor\w*)\.py\(\d+\): (?:__init__|initialize\w*|init_device_graphs"
    r"|capture_model|_capture_cudagraphs|capture|capture_one_batch_size|_capture_graph"
    r"|profile_run|load_model|determine_available_memory)$")


# the program's own warm-up function (not torch's): xDiT's _run_compile_warmup
WARMUP_RX = namerx.compile(r"^(?!torch/).*\.py\(\d+\): _?\w*warm_?up\w*$")


def startup_phase(ev: pd.DataFrame) -> tuple[dict | None, list[dict]]:
    """({"frames": [names], "ns": the longest such frame's span} or None, evidence): the
    engine set-up frames (``STARTUP_RX``), or a warm-up function of the program's own
    (``WARMUP_RX``) that spans half the window or more (TraceLens' xdit flux.1 capture
    trace: _run_compile_warmup, 423 of its 561 ms, records the CUDA graphs)."""
    rows = rows_of(ev, ("python", "cpu_op", "annotation"))
    if not len(rows):
        return None, []
    lut, codes = lut_at(ev["name"], rows, lambda n: bool(STARTUP_RX.search(n)), False, bool)
    hit = rows[lut.take(codes)]
    if not len(hit):
        lut, codes = lut_at(ev["name"], rows, lambda n: bool(WARMUP_RX.search(n)), False, bool)
        hit = rows[lut.take(codes)]
        ts = ev["ts"].to_numpy(np.int64)
        span = int(ts.max() - ts.min()) if len(ts) else 0
        hit = hit[2 * ev["dur"].to_numpy(np.int64)[hit] >= span]
    if not len(hit):
        return None, []
    dur = ev["dur"].to_numpy(np.int64)[hit]
    names = list(dict.fromkeys(str(ev["name"].iat[r]) for r in hit))
    top = hit[int(np.argmax(dur))]
    return ({"frames": names[:8], "ns": int(dur.max())},
            [item(ev["name"].iat[top], ev["ts"].iat[top], None,
                  "an engine's start-up: graphs captured and memory set up once")])


# -- do the steps' shapes change? ---------------------------------------------------------

def step_shapes(ev: pd.DataFrame, steps: Steps) -> tuple[dict | None, list[dict]]:
    """({"vary": bool, "steps": n} or None, evidence): whether the ops' input shapes
    (``record_shapes``: ``input_dims``) differ between the steps -- each step's set of
    (op, input dims) pairs compared with the first step's. None: fewer than two steps or no
    shapes recorded. Evidence: a pair one step has and another lacks, or the first step's
    first shaped op (all alike)."""
    if "input_dims" not in ev or len(steps) < 2:
        return None, []
    rows = rows_of(ev, ("cpu_op",))
    dims = ev["input_dims"]
    if not len(rows) or not isinstance(dims.dtype, pd.CategoricalDtype):
        return None, []
    d = dims.cat.codes.to_numpy()[rows]
    rows, d = rows[d >= 0], d[d >= 0]
    step = steps.index_of(ev["pid"].to_numpy()[rows], ev["ts"].to_numpy(np.int64)[rows])
    rows, d, step = rows[step >= 0], d[step >= 0], step[step >= 0]
    if len(np.unique(step)) < 2:
        return None, []
    pairs = pd.DataFrame({"step": step, "op": ev["name"].cat.codes.to_numpy()[rows]
                          if isinstance(ev["name"].dtype, pd.CategoricalDtype)
                          else pd.factorize(ev["name"].to_numpy()[rows])[0],
                          "dims": d, "row": rows}).drop_duplicates(["step", "op", "dims"])
    per = pairs.groupby(["op", "dims"])["step"].nunique()
    n = int(pairs["step"].nunique())
    odd = per[per < n]
    if not len(odd):
        r = int(pairs["row"].iat[0])
        return {"vary": False, "steps": n}, [item(ev["name"].iat[r], ev["ts"].iat[r], None,
                                                   f"the same op input shapes in all {n} steps")]
    op, dm = odd.index[0]
    hit = pairs[(pairs["op"] == op) & (pairs["dims"] == dm)]
    r = int(hit["row"].iat[0])
    return {"vary": True, "steps": n}, [item(ev["name"].iat[r], ev["ts"].iat[r], None,
                                             f"input dims {dims.cat.categories[dm]} in "
                                             f"{len(hit)} of {n} steps")]


# -- torch.compile graph calls per step ---------------------------------------------------

COMPILED_GRAPH_RX = namerx.compile(r"^## Call CompiledFxGraph (\w+) ##$|^(CompiledFunction)$"
                                   r"|^(Torch-Compiled Region: [\d/]+)")


def compiled_calls_per_step(ev: pd.DataFrame, steps: Steps) -> tuple[dict | None, list[dict]]:
    """({"graphs": {graph: calls per step}, "max": the most called one's} or None, evidence).
    Only calls inside the steps count; no profiler steps: None (a rate needs steps)."""
    if not len(steps):
        return None, []
    rows = rows_of(ev, ("cpu_op", "annotation", "python"))
    lut, codes = lut_at(ev["name"], rows, _graph_key, None)
    keys = lut.take(codes)
    hit = np.flatnonzero(~pd.isna(keys))
    if not len(hit):
        return None, []
    r = rows[hit]
    inside = steps.of(ev["pid"].to_numpy()[r], ev["ts"].to_numpy(np.int64)[r]) >= 0
    if not inside.any():
        return None, []
    n = steps.count()
    per = pd.Series(keys[hit][inside]).value_counts()
    graphs = {str(k): round(int(v) / n, 2) for k, v in per.items()}
    top = max(graphs, key=graphs.get)
    first = r[inside][np.flatnonzero(keys[hit][inside] == top)[0]]
    return ({"graphs": dict(list(graphs.items())[:8]), "max": graphs[top], "steps": n},
            [item(ev["name"].iat[first], ev["ts"].iat[first], None,
                  f"{int(per.max())} calls in {n} steps")])


def _graph_key(name: str):
    m = COMPILED_GRAPH_RX.match(name)
    return None if m is None else next(g for g in m.groups() if g)


# -- what the host work beside the model is -----------------------------------------------

FRAMEWORK_FRAME_RX = namerx.compile(
    r"^Optimizer\.(?:step|zero_grad)|^torch/optim/|\boptimizer\.py\(|^autograd::engine"
    r"|^torch/autograd/|run_backward of torch\._C\._EngineBase"   # the main thread in backward
    r"|\bdiffusers/hooks/"   # diffusers' hooks walking the modules each call (cache_context)
    r"|torch/cuda/__init__\.py\(\d+\): synchronize$"   # a sync the loop asks for, not work
    r"|torch/nn/modules/module\.py\(\d+\): (?:_call_impl|_wrapped_call_impl"
    r"|__getattr__|__setattr__)|torch/nn/parallel/|torch/distributed/|^aten::_foreach_"
    r"|^aten::(?:un)?flatten_dense_tensors$|^(?:cuda|hip)StreamSynchronize$"
    r"|^aten::(?:item|_local_scalar_dense)$|^Torch-Compiled|^## Call CompiledFxGraph"
    # serving / diffusion engines' own step loops: the scheduler, the model runner
    r"|/managers/scheduler\.py\(|/model_executor/|/worker/\w*model_runner\.py\(")
# the job's own arithmetic on the host (a CPU model): it is the work, not a side task
HOST_COMPUTE_RX = namerx.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|einsum|conv\w*"
                                 r"|_convolution|mkldnn_\w+|native_layer_norm|softmax|_softmax)$")
# the outermost frames of a script: they name no work of their own
SCRIPT_FRAME_RX = namerx.compile(r"<module>$|_run_module_as_main$|\): decorate_context$")


OTHER_NAMED_SHARE = 0.25   # of the host time outside the model a name must cover to say what it is


def host_other_kind(top_other: str | None, share: float | None = None,
                    encloses_model: bool = False) -> str | None:
    """What the largest host work outside the model's forward is: ``framework`` (optimizer
    step, module-call wrappers, autograd engine, DDP's bucket copies, a serving engine's
    step loop: it cannot move to a worker), ``compute`` (the job's own matmuls on CPU
    tensors: it is the work), ``movable`` (data preparation, copies, I/O, sleeps), or
    ``unknown`` (only a script's outermost frame is named, or the largest name covers under
    ``OTHER_NAMED_SHARE`` of that time: the rest is untraced, and one small op cannot say
    what it is); None: nothing outside it. ``share``: the top name's part of the time;
    ``encloses_model``: the model's calls run inside it (the loop around the model, whose
    own time is the loop's glue: ``unknown`` unless the framework's)."""
    if not top_other:
        return None
    name = str(top_other)
    if share is not None and share < OTHER_NAMED_SHARE:
        return "unknown"
    if FRAMEWORK_FRAME_RX.search(name):
        return "framework"
    if HOST_COMPUTE_RX.search(name):
        return "compute"
    return "unknown" if encloses_model or SCRIPT_FRAME_RX.search(name) else "movable"


# -- the host work at the head of each step ----------------------------------------------

LAUNCH_CALL_RX = re.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch\w*$"
                            r"|^(?:cuda|cu|hip)GraphLaunch\w*$|^(?:cuda|hip)Memcpy\w*$")
HEAD_MIN_SHARE = 0.1   # of the median step: shorter heads are the step's own set-up


def step_head_wait(ev: pd.DataFrame, step_tab: pd.DataFrame | None) -> tuple[dict | None, list]:
    """Per step, the OS-runtime calls (nsys ``osrt``: read, open, clock_nanosleep, poll ...) on
    the step's launching thread between the step's start and its first launch or copy call,
    while no GPU op runs: the host fetches the step's input before it can launch anything
    (a DataLoader with num_workers=0 does this on the training thread). {"per_step_ns"
    (median), "steps", "share" (of the median step), "calls": the heaviest call names} or
    None: no step, no OS-runtime calls traced, or the median under HEAD_MIN_SHARE."""
    if step_tab is None or not len(step_tab) or not kind_in(ev, ("osrt",)).any():
        return None, []
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    api = rows_of(ev, ("runtime", "driver"))
    lut, codes = lut_at(ev["name"], api, lambda n: bool(LAUNCH_CALL_RX.match(n)), False, bool)
    launch = api[lut.take(codes)]
    osrt = rows_of(ev, ("osrt",))
    gpu = rows_of(ev, ("kernel", "memcpy", "memset"))
    gpu = gpu[np.argsort(ts[gpu], kind="stable")]
    g_ts, g_end = ts[gpu], np.maximum.accumulate(ts[gpu] + dur[gpu]) if len(gpu) else gpu
    heads, names, first = [], {}, None
    for (p, t), sg in step_tab.groupby(["pid", "tid"], sort=False):
        lr = launch[(pid[launch] == p) & (tid[launch] == t)]
        lr = lr[np.argsort(ts[lr], kind="stable")]
        orow = osrt[(pid[osrt] == p) & (tid[osrt] == t)]
        orow = orow[np.argsort(ts[orow], kind="stable")]
        for s_, e_ in sg[["start", "end"]].itertuples(index=False):
            k = int(np.searchsorted(ts[lr], s_))
            if k >= len(lr) or ts[lr[k]] >= e_:
                continue   # no launch in this step
            head_end = int(ts[lr[k]])
            # while the GPU still runs earlier work the host's calls cost nothing: from when
            # it is idle (the latest end of the GPU ops begun before the head ends)
            g = int(np.searchsorted(g_ts, head_end))
            idle_from = max(int(s_), int(g_end[g - 1])) if g else int(s_)
            lo, hi = np.searchsorted(ts[orow], [s_, head_end])
            calls = orow[lo:hi]
            a_ = np.maximum(ts[calls], idle_from)
            b_ = np.minimum(ts[calls] + dur[calls], head_end)
            took = np.clip(b_ - a_, 0, None)
            heads.append(int(took.sum()))
            for r in calls[took > 0].tolist():
                n = str(ev["name"].iat[r])
                names[n] = names.get(n, 0) + int(dur[r])
                first = r if first is None else first
    if not heads or first is None:
        return None, []
    med = int(np.median(heads))
    step = float(np.median(step_tab["dur"].to_numpy(np.int64)))
    if step <= 0 or med < HEAD_MIN_SHARE * step:
        return None, []
    top = [n for n, _ in sorted(names.items(), key=lambda kv: -kv[1])[:3]]
    return ({"per_step_ns": med, "steps": len(heads), "share": round(med / step, 3),
             "calls": top},
            [item(ev["name"].iat[first], ts[first], None,
                  f"{med / 1e6:.1f} ms a step in OS calls before the step's first launch")])


# -- all of them --------------------------------------------------------------------------

def precondition_facts(ev: pd.DataFrame, kernels: list[str], steps: Steps | None = None) -> dict:
    """The facts above as program keys, with ``facts_evidence`` (see module doc); ``steps``:
    the analysis's steps (default: the window's ProfilerStep ranges)."""
    evidence: dict[str, list] = {}
    out: dict = {}
    steps = steps if steps is not None else Steps(ev)
    for key, (val, proof) in (
            ("kernel_arch", kernel_arch(kernels)),
            ("fp32_gemv_share", fp32_gemv_share(ev)),
            ("h2d_source", h2d_source(ev)),
            ("sync_copy_directions", sync_copy_directions(ev)),
            ("pageable_reads", pageable_reads(ev)),
            ("graph_launches", graph_launches(ev)),
            ("startup_phase", startup_phase(ev)),
            ("compiled_calls_per_step", compiled_calls_per_step(ev, steps)),
            ("step_shapes", step_shapes(ev, steps))):
        out[key] = val
        if proof:
            evidence[key] = proof
    out["facts_evidence"] = evidence
    return out


__all__ = ["precondition_facts", "step_head_wait", "kernel_arch", "fp32_gemv_share", "h2d_source",
           "pageable_reads",
           "graph_launches", "startup_phase", "compiled_calls_per_step", "host_other_kind",
           "step_shapes"]
