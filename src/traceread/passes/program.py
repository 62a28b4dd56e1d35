"""What the program in the trace is and already does, each fact with the event that proves it.

The lever table (docs/analysis.md, "Levers that fit what the trace already does") reads these
keys to offer only the levers that fit: no FSDP prefetch to a DDP job, no ``torch.compile`` to a
compiled program, no fused optimizer to an inference loop. Every detector names the event (op,
annotation, python frame or kernel name) that proves it; a fact with no event stays False/None.

Detectors run on distinct names (the name column is categorical), so a million-row trace costs
one regex match per distinct name; only the span checks (optimizer step, DDP forward, syncs)
touch rows, and only the few rows whose names matter.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import namerx
from ..collectives import (COMM_NAME_RX, collective_from_kernel, is_comm_kernel,
                           normalize_collective)
from ..table import scan_name
from ..passes.common import GRAPH_LAUNCH_RX, kind_in, name_lut, name_table, rows_of

HOST_KINDS = ("cpu_op", "annotation", "python", "gpu_annotation", "other")


def names_of(ev: pd.DataFrame, kinds) -> list[str]:
    """Distinct names of the rows of ``kinds`` (made once per frame and kinds inside an
    analysis: the context, its flags' evidence and the program facts ask the same ones;
    callers only read the list)."""
    from .factkit import shared_of

    return shared_of(ev, ("names_of", tuple(kinds)), lambda: _names_of(ev, kinds))


def _names_of(ev: pd.DataFrame, kinds) -> list[str]:
    m = kind_in(ev, kinds)
    if not m.any():
        return []
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[m]
        # (np.bincount, not np.unique: numpy 2.4 hashes, ~3 us per distinct name)
        used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(col.cat.categories)))
        return namerx.NameList(name_table(col), used)   # a list that reads the name table
    return [str(x) for x in pd.unique(col[m].dropna())]


def _first(rx: re.Pattern, names) -> str | None:
    return namerx.first(rx, names)


def _rows_named(ev: pd.DataFrame, rx: re.Pattern, kinds=None) -> np.ndarray:
    """Rows (of ``kinds``; all when None) whose name matches ``rx``: one match per distinct
    name among those rows."""
    rows = rows_of(ev, kinds) if kinds is not None else None
    col = ev["name"]
    codes = col.array.codes if isinstance(col.dtype, pd.CategoricalDtype) else None
    if codes is None:
        col = col.astype("category")
        codes = col.array.codes
    rx = namerx.compile(rx)   # a NameRx reads a name's first SCAN_CHARS (scan_name)
    hit = name_lut(col, rx).take(codes if rows is None else codes.take(rows))
    return rows[hit] if rows is not None else np.flatnonzero(hit)


def _thread(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    from ..passes.attribution import thread_key

    return thread_key(ev["pid"].to_numpy()[rows].copy(), ev["tid"].to_numpy()[rows].copy())


def _inside(ev: pd.DataFrame, rows: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Which ``rows`` start inside one of the ``spans`` rows of the same (pid, tid) thread."""
    out = np.zeros(len(rows), bool)
    if not len(rows) or not len(spans):
        return out
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    rt, st = _thread(ev, rows), _thread(ev, spans)
    for t in np.unique(rt):
        sp = spans[st == t]
        if not len(sp):
            continue
        s, e = ts[sp], end[sp]
        order = np.argsort(s, kind="stable")
        s, e = s[order], np.maximum.accumulate(e[order])   # reach of the spans started so far
        mine = np.flatnonzero(rt == t)
        k = np.searchsorted(s, ts[rows[mine]], side="right") - 1
        ok = k >= 0
        out[mine[ok]] = end[rows[mine[ok]]] <= e[k[ok]]
    return out


# ------------------------------------------------------------------ steps

STEP_RX = namerx.compile(r"^ProfilerStep#\d+$")


def step_count(ev: pd.DataFrame) -> int:
    """Profiler steps in the window (most over the processes: a rank traces its own); 1 when
    the trace has none, so per-step figures are per window."""
    rows = _rows_named(ev, STEP_RX, ("annotation", "cpu_op"))
    if not len(rows):
        return 1
    return max(1, int(pd.Series(ev["pid"].to_numpy()[rows]).value_counts().max()))


# ------------------------------------------------------------------ framework

# (framework, regex over host names: ops, annotations, python frames, NVTX ranges)
FRAMEWORK_RULES = tuple((f, namerx.compile(p)) for f, p in (
    ("ddp", r"^DistributedDataParallel\.forward$|^torch\.distributed\.ddp\.reducer::"
            r"|^torch::distributed::reducer::|torch/nn/parallel/distributed\.py\("),
    # FSDP1 marks its hooks "FullyShardedDataParallel._pre_forward" etc.; FSDP2 (fully_shard)
    # "FSDP::pre_forward (fqn)", "FSDP::all_gather", and registers the op fsdp::all_gather_copy_in
    ("fsdp1", r"^FullyShardedDataParallel[._]|torch/distributed/fsdp/"
              r"(?:fully_sharded_data_parallel|_runtime_utils|_flat_param)\.py\("),
    ("fsdp2", r"^FSDP::|^fsdp::|FSDPParamGroup|torch/distributed/(?:fsdp/_fully_shard|"
              r"_composable/fsdp)/"),
    ("deepspeed", r"(?i:deepspeed)"),
    ("megatron", r"(?i:megatron)"),
    ("torchrec", r"(?i:torchrec)|ShardedEmbedding\w*Collection"),
    ("vllm", r"^vllm::|(?:^|/)vllm/[\w/]+\.py\("),
    ("sglang", r"^sglang(?:_profiler)?::|(?:^|/)sglang/[\w/]+\.py\("),
    ("dtensor", r"torch/distributed/_?tensor/|^DTensor|^Redistribute(?:Backward)?\b"),
    ("pipelining", r"^PP:|PipelineStage|_step_microbatches|torch/distributed/pipelining/"),
    ("horovod", r"(?i:horovod)|^NEGOTIATE_(?:ALLREDUCE|ALLGATHER|BROADCAST|ALLTOALL)"),
))
# all rules in one pass over the names (a trace may hold tens of thousands of python frames)
ANY_FRAMEWORK_RX = namerx.compile("|".join(f"(?:{rx.pattern})" for _, rx in FRAMEWORK_RULES))
# TorchRec's sharded embeddings run FBGEMM's table-batched embedding (TBE) and exchange
# the pooled embeddings with all_to_all: both together prove a sharded-embedding model.
TBE_RX = namerx.compile(r"^fbgemm::split_embedding_codegen_lookup|split_embedding_codegen_forward")
VLLM_KERNEL_RX = namerx.compile(r"^(?:void )?vllm::")


def frameworks(host: list[str], kernels: list[str], collectives: list[str]) -> dict[str, str]:
    """{framework: the name that proves it} (see FRAMEWORK_RULES)."""
    found = {}
    for n in namerx.where(ANY_FRAMEWORK_RX, host):
        for fw, rx in FRAMEWORK_RULES:
            if fw not in found and rx.search(scan_name(n)):
                found[fw] = n
    if "torchrec" not in found and "all_to_all" in collectives:
        n = _first(TBE_RX, host) or _first(TBE_RX, kernels)
        if n is not None:
            found["torchrec"] = n
    # vLLM's kernels also run under SGLang; alone (no host names: nsys without NVTX) they name it
    if not host and "sglang" not in found:
        n = _first(VLLM_KERNEL_RX, kernels)
        if n is not None:
            found["vllm"] = n
    return found


# ------------------------------------------------------------------ collectives, backend

COLLECTIVE_SET = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                  "send_recv", "barrier")
_COLL_ALIAS = {"send": "send_recv", "recv": "send_recv"}
AMD_API_RX = namerx.compile(r"^hip[A-Z]")


def _collective_name(name: str) -> str | None:
    c = normalize_collective(name)
    c = _COLL_ALIAS.get(c, c)
    return c if c in COLLECTIVE_SET else None


def collectives(ev: pd.DataFrame, host: list[str], kernels: list[str]) -> dict[str, str]:
    """{collective: the event name that proves it}, from the table's ``collective`` column
    (record_param_comms args, NCCL kernel names) and from comm-call names."""
    found: dict[str, str] = {}
    if "collective" in ev:
        rows = np.flatnonzero(ev["collective"].notna().to_numpy())
        if len(rows):
            vals = pd.Series(ev["collective"].iloc[rows].astype(object).to_numpy())
            for i, c in vals.drop_duplicates().items():   # i: first row of each value
                key = _collective_name(str(c))
                if key and key not in found:
                    found[key] = str(ev["name"].iat[int(rows[i])])
    for n in namerx.where(COMM_NAME_RX, host):
        key = _collective_name(n)
        if key and key not in found:
            found[key] = n
    for n in kernels:
        if is_comm_kernel(n):
            c = collective_from_kernel(n)
            key = _collective_name(c) if c else None
            if key and key not in found:
                found[key] = n
    # NCCL runs all_to_all as grouped send/recv: a SendRecv kernel beside it is that all_to_all
    if "all_to_all" in found and is_comm_kernel(found.get("send_recv", "")):
        del found["send_recv"]
    return found


def comm_backend(host: list[str], kernels: list[str], api: list[str], meta=None
                 ) -> tuple[str | None, str | None]:
    """(backend, evidence): NCCL kernels (RCCL on an AMD device: HIP runtime calls or an AMD
    device), then nccl:/gloo:/mpi: call names, then the profiler's distributedInfo backend."""
    amd = _amd(api, meta)
    k = next((n for n in kernels if is_comm_kernel(n)), None)
    if k is not None:
        return ("rccl" if amd or "rccl" in k.lower() else "nccl"), k
    for rx, backend in ((r"^nccl:|^NCCL_[A-Z]+$|ProcessGroupNCCL", "nccl"),
                        (r"^rccl:", "rccl"),
                        (r"^gloo:|ProcessGroupGloo", "gloo"),
                        (r"^mpi:|^MPI_[A-Z]|ProcessGroupMPI", "mpi")):
        n = _first(namerx.compile(rx), host)
        if n is not None:
            return ("rccl" if backend == "nccl" and amd else backend), n
    backend = str((getattr(meta, "distributed", None) or {}).get("backend") or "").lower()
    if backend in ("nccl", "gloo", "mpi", "rccl"):
        return ("rccl" if backend == "nccl" and amd else backend), \
            f"distributedInfo backend={backend}"
    return thread_backend(meta)


# ProcessGroupGloo names its worker threads (c10::setThreadName in its run loop)
GLOO_THREAD = "pt_gloo_runloop"


def thread_backend(meta) -> tuple[str | None, str | None]:
    """(backend, evidence) from the process's thread names: an nsys capture of a gloo job
    shows no gloo call, only the ProcessGroupGloo workers' own OS calls (h200/ddp2)."""
    names = set((getattr(meta, "threads", None) or {}).values())
    return ("gloo", f"thread {GLOO_THREAD}") if GLOO_THREAD in names else (None, None)


def _amd(api: list[str], meta) -> bool:
    if namerx.any_of(AMD_API_RX, api, "match"):
        return True
    names = " ".join(str(d.get("name", "")) for d in getattr(meta, "devices", None) or []
                     if isinstance(d, dict))
    return any(w in names for w in ("AMD", "Instinct", "Radeon")) \
        or "ROCm" in str(getattr(meta, "producer", "") or "")


# ------------------------------------------------------------------ optimizer

OPT_STEP_RX = namerx.compile(r"^Optimizer\.step#(\w+)\.step$")
# torch.optim's implementations as python frames (with_stack): adam.py(..): _multi_tensor_adam
OPT_FN_RX = namerx.compile(r"\b_(fused|multi_tensor|single_tensor)_(adamw|adam|sgd|adagrad|rmsprop"
                       r"|adamax|nadam|radam|adadelta|asgd|rprop)$")
FUSED_IMPL_RX = namerx.compile(r"_fused_(?:adamw?|sgd|adagrad)|\bfused_adam|FusedAdam|FusedLAMB"
                           r"|FusedSGD|multi_tensor_apply_for_fused_optimizer")
FOREACH_IMPL_RX = namerx.compile(r"^aten::_foreach_|multi_tensor_apply_kernel|_multi_tensor_")
LOOP_OP_RX = namerx.compile(r"^aten::(?:add|mul|addcmul|addcdiv|lerp|sqrt|div|maximum)_?$")
_FN_IMPL = {"fused": "fused", "multi_tensor": "foreach", "single_tensor": "for_loop"}
_OPT_NAMES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "adagrad": "Adagrad",
              "rmsprop": "RMSprop", "adamax": "Adamax", "nadam": "NAdam", "radam": "RAdam",
              "adadelta": "Adadelta", "asgd": "ASGD", "rprop": "Rprop"}


def optimizer(ev: pd.DataFrame, host: list[str], kernels: list[str]) -> dict | None:
    """{"name", "impl", "evidence"} or None: the optimizer step (``Optimizer.step#Adam.step``)
    and how it runs, from the ops inside that step (fused kernels/ops, ``_foreach_`` ops, or
    per-parameter ``aten::add_``... loops); python frames ``_multi_tensor_adam`` etc. name both."""
    step = _first(OPT_STEP_RX, host)
    fn = _first(OPT_FN_RX, host)
    name = OPT_STEP_RX.match(step).group(1) if step else None
    if fn is not None:
        impl_word, opt = OPT_FN_RX.search(fn).groups()
        return {"name": name or _OPT_NAMES.get(opt, opt), "impl": _FN_IMPL[impl_word],
                "evidence": fn}
    if step is None:
        # no step span: a fused optimizer kernel/op still proves one
        n = _first(FUSED_IMPL_RX, host) or _first(FUSED_IMPL_RX, kernels)
        if n is None:
            return None
        m = re.search(r"(?i)fused_?(adamw|adam|sgd|adagrad)", n)
        return {"name": _OPT_NAMES.get(m.group(1).lower(), m.group(1)) if m else "unknown",
                "impl": "fused", "evidence": n}
    if re.search(r"(?i)fused", name):   # apex/DeepSpeed FusedAdam, FusedLAMB
        return {"name": name, "impl": "fused", "evidence": step}
    spans = _rows_named(ev, namerx.compile(re.escape(step).join("^$")), ("annotation", "cpu_op"))
    ops = _rows_named(ev, namerx.compile(r"^aten::|^_fused|^fused"), ("cpu_op",))
    inner = ops[_inside(ev, ops, spans)]
    inner_names = list(dict.fromkeys(ev["name"].iloc[inner].astype(str).tolist()))
    for impl, rx in (("fused", FUSED_IMPL_RX), ("foreach", FOREACH_IMPL_RX)):
        n = _first(rx, inner_names)
        if n is not None:
            return {"name": name, "impl": impl, "evidence": n}
    n = _first(LOOP_OP_RX, inner_names)
    if n is not None:
        return {"name": name, "impl": "for_loop", "evidence": n}
    return {"name": name, "impl": "unknown", "evidence": step}


# ------------------------------------------------------------------ training

# backward work: autograd's engine, backward nodes (AddmmBackward0), aten's *_backward ops,
# FSDP's backward hooks -- FSDP2 registers RegisterPostBackwardFunction only when grad is
# enabled --, backward kernels (flash_bwd, *_backward_*); or an optimizer step
BACKWARD_HOST_RX = namerx.compile(r"^autograd::engine::evaluate_function|Backward\d*$"
                              r"|^aten::\w+_backward\b|^Optimizer\.(?:step|zero_grad)#"
                              r"|^RegisterPostBackwardFunction|^FSDP::(?:pre|post)_backward"
                              r"|^FullyShardedDataParallel\._(?:pre|post)_backward")
BACKWARD_KERNEL_RX = namerx.compile(r"(?i)backward|_bwd_|_bwd\b|bwd_kernel|dgrad|wgrad")


def training(host: list[str], kernels: list[str], opt: dict | None) -> str | None:
    """The event that proves the trace trains (None: inference)."""
    if opt is not None:
        return opt["evidence"]
    return _first(BACKWARD_HOST_RX, host) or _first(BACKWARD_KERNEL_RX, kernels)


# ------------------------------------------------------------------ torch.compile

# not any torch/_dynamo frame: eval_frame.py's _fn also wraps the functions torch marks
# dynamo-disabled (checkpointing, optimizer.step) in programs that never compile
COMPILED_RX = namerx.compile(r"^Torch-Compiled Region|^CompiledFunction(?:Backward)?$"
                         r"|^TorchDynamo Cache Lookup$|torch/_inductor/"
                         r"|torch/_dynamo/(?:convert_frame|output_graph|symbolic_convert)\.py\("
                         r"|^triton_(?:poi|red|per|tem|for)_|\(dynamo_timed\)$")
INDUCTOR_KERNEL_RX = namerx.compile(r"^triton_(?:poi|red|per|tem|for)_")
# mode="reduce-overhead": inductor's CUDA graph trees record and replay the compiled graphs
CUDAGRAPH_TREES_RX = namerx.compile(r"cudagraph_trees|CUDAGraphNode|CUDAGraphTreeManager"
                                r"|cudagraphify")


def compiled(host: list[str], kernels: list[str]) -> str | None:
    return _first(COMPILED_RX, host) or _first(INDUCTOR_KERNEL_RX, kernels)


COMPILED_SPAN_RX = namerx.compile(r"^Torch-Compiled Region|^CompiledFunction$")


def compile_mode_graphs(ev: pd.DataFrame, host: list[str]) -> str | None:
    """Inductor's CUDA graph trees (mode="reduce-overhead"): their frames/records, or graph
    launches made inside a compiled region (the compiled graph replays itself; a serving
    engine's own CUDA graphs are launched outside the compiled code)."""
    n = _first(CUDAGRAPH_TREES_RX, host)
    if n is not None:
        return n
    launches = _rows_named(ev, GRAPH_LAUNCH_RX, ("runtime", "driver"))
    if not len(launches):
        return None
    spans = _rows_named(ev, COMPILED_SPAN_RX, ("cpu_op", "annotation"))
    inside = launches[_inside(ev, launches, spans)]
    if not len(inside):
        return None
    return f"{ev['name'].iat[int(inside[0])]} inside a compiled region"


# ------------------------------------------------------------------ dtypes

MATMUL_OPS = frozenset(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                        "aten::linear", "aten::_scaled_mm", "aten::convolution",
                        "aten::_convolution", "aten::conv2d", "aten::conv1d", "aten::conv3d",
                        "aten::_addmm_activation", "aten::scaled_dot_product_attention"))
DTYPE_KERNEL_RX = {
    "bf16": namerx.compile(r"(?i)bf16|bfloat16|DF16b|^nvjet_(?:sm\d+_)?t[a-z]{2}_"),
    "fp16": namerx.compile(r"(?i)(?<!b)f16(?!b)|fp16|\bhalf\b|__half|c10::Half|h1688|h16816|h884"
                       r"|hgemm|^nvjet_(?:sm\d+_)?h[a-z]{2}_"),
    # vLLM's Fp8KVCacheDataType template argument names a type, not the data (0: auto)
    "fp8": namerx.compile(r"(?i)fp8(?!KVCacheDataType)|e4m3|e5m2|float8|^nvjet_(?:sm\d+_)?[eq][a-z]{2}_"),
    "fp4": namerx.compile(r"(?i)e2m1|fp4|f8f6f4"),
}
MATMUL_RX = namerx.compile("^(?:" + "|".join(re.escape(n) for n in sorted(MATMUL_OPS)) + ")$")
# flops.dtype_of's key (the op's first floating input) -> dtypes key
OP_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "fp32_gemm"}


def dtypes(ev: pd.DataFrame, kernels: list[str]) -> tuple[dict, dict]:
    """({bf16, fp16, fp8, fp32_gemm, tf32: bool}, {dtype: evidence}) of the matrix work:
    GEMM / convolution / attention kernels by name, and matmul/conv ops' ``Input type``."""
    from ..passes.busy import is_simt, is_tf32_kernel

    found: dict[str, str] = {}
    for n in matrix_kernels(kernels):
        for d, rx in DTYPE_KERNEL_RX.items():
            if d not in found and rx.search(scan_name(n)):
                found[d] = n
        lowp = any(rx.search(scan_name(n)) for rx in DTYPE_KERNEL_RX.values())
        simt = is_simt(n)
        # an fp32-accumulate tile name (f32f32) that runs on FMA units (_ffma_) is not TF32
        if "tf32" not in found and is_tf32_kernel(n) and not simt:
            found["tf32"] = n
        if "fp32_gemm" not in found and not lowp and simt:
            found["fp32_gemm"] = n
    for op, d in _op_dtypes(ev):
        if d not in found:
            # fp32 matmul ops run TF32 when their kernels are TF32: then not FP32 GEMMs
            if d == "fp32_gemm" and "tf32" in found:
                continue
            found[d] = op
    keys = ("bf16", "fp16", "fp8", "fp4", "fp32_gemm", "tf32")
    return {k: k in found for k in keys}, {k: found[k] for k in keys if k in found}


GEMV_RX = namerx.compile(r"(?i)gemv")
# FBGEMM's namespace says "gemm", its embedding and quantize kernels are not GEMMs
FBGEMM_NS_RX = namerx.compile(r"\bfbgemm(?:_gpu)?::")


def matrix_kernels(kernels: list[str]) -> list[str]:
    """The GEMM / convolution / attention kernels (and cuBLAS gemv), classed on the kernel's
    own name without FBGEMM's namespace: an embedding kernel's signature or namespace
    mentions ``fbgemm_gpu::``."""
    from ..passes.kernel_classes import name_head, rule_class

    out = []
    for n in kernels:
        h = FBGEMM_NS_RX.sub("", name_head(scan_name(n)))
        cls = rule_class(h)
        if cls == "gemm" or GEMV_RX.search(h) or FUSED_ATTN_KERNEL_RX.search(h):
            out.append(n)
    return out


def _op_dtypes(ev: pd.DataFrame) -> list[tuple[str, str]]:
    """(op name, dtype key) for each distinct (matmul op, ``Input type``) pair."""
    from ..passes.flops import dtype_of

    if "input_type" not in ev:
        return []
    rows = _rows_named(ev, MATMUL_RX, ("cpu_op",))
    if not len(rows):
        return []
    pairs = pd.DataFrame({"n": ev["name"].iloc[rows].to_numpy(object),
                          "t": ev["input_type"].iloc[rows].to_numpy(object)}).drop_duplicates()
    out = []
    for n, t in pairs.itertuples(index=False):
        d = OP_DTYPE.get(dtype_of(t if isinstance(t, str) else None))
        if d is not None:
            out.append((str(n), d))
    return out


# ------------------------------------------------------------------ attention, convolutions

FUSED_ATTN_OP_RX = namerx.compile(r"^aten::_scaled_dot_product_(?:flash|efficient|cudnn|fused)"
                              r"|^aten::_(?:flash|efficient)_attention_(?:forward|backward)"
                              r"|^vllm::unified_attention|^flash_attn|^_flash_attn|flashinfer::")
# not any "flash": vLLM's reshape_and_cache_flash writes the KV cache, flashinfer's index
# helpers are not attention
FUSED_ATTN_KERNEL_RX = namerx.compile(r"(?i)flash_?(?:fwd|bwd|attn|attention)|pytorch_flash::|fmha"
                                  r"|efficient_attention|paged_?attention|attn_fwd|attn_bwd"
                                  r"|unified_attention|mha_(?:fwd|bwd)|sage_fwd|cudnn_sdpa"
                                  r"|BatchPrefillWith|BatchDecodeWith")
CONV_OP_RX = namerx.compile(r"^aten::(?:_?convolution|(?:cudnn|miopen|mkldnn)_convolution"
                        r"|conv[123]d|conv_transpose[123]d|convolution_backward|_convolution)"
                        r"\b")
CONV_KERNEL_RX = namerx.compile(r"(?i)implicit_?convolve|scudnn|winograd|conv(?:olution)?_?(?:fwd|bwd)"
                            r"|_conv[123]d|conv2d|dgrad|wgrad|fprop|grouped_conv|naive_conv"
                            r"|miopen.*conv|igemm_(?:fwd|bwd|wrw)")


def fused_attention(host: list[str], kernels: list[str]) -> str | None:
    return _first(FUSED_ATTN_OP_RX, host) or _first(FUSED_ATTN_KERNEL_RX, kernels)


def convolutions(host: list[str], kernels: list[str]) -> str | None:
    return _first(CONV_OP_RX, host) or _first(CONV_KERNEL_RX, kernels)


# ------------------------------------------------------------------ torch version

# torch.compile reached the nightlies in December 2022 (PyTorch 2.0 announced 2022-12-02):
# a trace whose clock reads earlier ran a torch without it. A month of margin; and only a
# wall-clock reading (Kineto before 2.4 writes microseconds since the epoch; nsys's are from
# the session start) -- a stamp before 2016 is no date.
NO_COMPILE_BEFORE_NS = 1_667_260_800 * 10**9     # 2022-11-01 00:00 UTC
WALL_CLOCK_FROM_NS = 1_451_606_400 * 10**9       # 2016-01-01 00:00 UTC


def torch_version(ev: pd.DataFrame, meta=None) -> tuple[str | None, str | None]:
    """(version, evidence). Kineto does not write torch's version; its format does tell the
    era: ``baseTimeNanoseconds`` in the header (PyTorch >= 2.4), ``Operator``/``Runtime``
    categories (1.8-1.9), and a Kineto trace recorded before November 2022 by its events'
    wall-clock time ran a torch older than 2.0 (``<2.0``: no torch.compile). An exact
    version in the metadata wins."""
    extra = getattr(meta, "extra", None) or {}
    for k in ("pytorch_version", "torch_version", "pt_version"):
        if extra.get(k):
            return str(extra[k]), k
    if "baseTimeNanoseconds" in extra:
        return ">=2.4", "baseTimeNanoseconds"
    cat = ev["cat"] if "cat" in ev else None
    if cat is not None:
        cats = set(cat.cat.categories.astype(str)) if isinstance(cat.dtype, pd.CategoricalDtype) \
            else set(cat.dropna().astype(str))
        if "Operator" in cats or "Runtime" in cats:
            return "1.8-1.9", "cat Operator" if "Operator" in cats else "cat Runtime"
    return _dated_version(ev, meta)


def _dated_version(ev: pd.DataFrame, meta) -> tuple[str | None, str | None]:
    """``<2.0`` when a Kineto trace's first event is dated before ``NO_COMPILE_BEFORE_NS``."""
    if getattr(meta, "format", None) != "kineto" or not len(ev):
        return None, None
    first = int(ev["ts"].to_numpy(np.int64).min())
    if not WALL_CLOCK_FROM_NS <= first < NO_COMPILE_BEFORE_NS:
        return None, None
    day = pd.Timestamp(first, unit="ns").date().isoformat()
    return "<2.0", f"recorded {day} (the events' wall-clock time): before torch 2.0"


# ------------------------------------------------------------------ syncs

SYNC_OP_RX = namerx.compile(r"^aten::_local_scalar_dense$")
ITEM_RX = namerx.compile(r"^aten::item$")
ACCUMULATE_RX = namerx.compile(r"^torch::autograd::AccumulateGrad$")
PER_PARAM_MIN = 4          # syncs a step must make before they can be "one per parameter"
PER_PARAM_SHARE = 0.5      # ... and at least this share of the parameters (AccumulateGrad)


def syncs(ev: pd.DataFrame, steps: int, opt_step: str | None) -> dict:
    """``syncs_per_step``: ``aten::_local_scalar_dense`` (what every ``.item()`` /
    ``bool(tensor)`` runs; else ``aten::item``) per step; ``per_param_syncs``: they are one
    per parameter -- at least PER_PARAM_MIN a step and either inside the optimizer step or
    at least PER_PARAM_SHARE of the parameters that receive a gradient per step
    (``AccumulateGrad`` calls). A sync per parameter makes CUDA graph capture impossible."""
    rows = _rows_named(ev, SYNC_OP_RX, ("cpu_op",))
    name = "aten::_local_scalar_dense"
    if not len(rows):
        rows, name = _rows_named(ev, ITEM_RX, ("cpu_op",)), "aten::item"
    per_step = len(rows) / max(1, steps)
    out = {"syncs_per_step": round(per_step, 1), "per_param_syncs": False,
           "per_param_syncs_evidence": None}
    if not len(rows) or per_step < PER_PARAM_MIN:
        return out
    if opt_step is not None:
        spans = _rows_named(ev, namerx.compile(re.escape(opt_step).join("^$")),
                            ("annotation", "cpu_op"))
        inside = int(_inside(ev, rows, spans).sum())
        if inside / max(1, steps) >= PER_PARAM_MIN:
            out["per_param_syncs"] = True
            out["per_param_syncs_evidence"] = f"{name} x{inside / max(1, steps):.0f}/step " \
                                              f"in {opt_step}"
            return out
    params = len(_rows_named(ev, ACCUMULATE_RX, ("cpu_op",))) / max(1, steps)
    if params >= PER_PARAM_MIN and per_step >= PER_PARAM_SHARE * params:
        out["per_param_syncs"] = True
        out["per_param_syncs_evidence"] = f"{name} x{per_step:.0f}/step, " \
                                          f"AccumulateGrad x{params:.0f}/step"
    return out


# ------------------------------------------------------------------ DDP buffer broadcast

DDP_FORWARD_RX = namerx.compile(r"^DistributedDataParallel\.forward$")
# DDP's forward broadcasts the module's buffers from rank 0 (broadcast_buffers=True) with
# _broadcast_coalesced: flatten, broadcast, unflatten (then copy back)
BUFFER_BCAST_RX = namerx.compile(r"^aten::(?:un)?flatten_dense_tensors$|^c10d::broadcast_$"
                             r"|_broadcast_coalesced")


def ddp_buffer_broadcast_ns(ev: pd.DataFrame, steps: int) -> int:
    """Host time per step of the buffer broadcast ops inside ``DistributedDataParallel.forward``
    (union on each thread, so a broadcast inside a flatten is not counted twice)."""
    spans = _rows_named(ev, DDP_FORWARD_RX, ("annotation", "cpu_op"))
    if not len(spans):
        return 0
    rows = _rows_named(ev, BUFFER_BCAST_RX, ("cpu_op",))
    rows = rows[_inside(ev, rows, spans)]
    if not len(rows):
        return 0
    from ..passes import intervals

    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    th = _thread(ev, rows)
    total = 0
    for t in np.unique(th):
        s, e = intervals.union(ts[th == t], end[th == t])
        total += int((e - s).sum())
    return int(total // max(1, steps))


# ------------------------------------------------------------------ all together

def program_context(ev: pd.DataFrame, meta=None, host=None, kernels=None, api=None) -> dict:
    """The program keys of ``trace_context`` (see docs/analysis.md for each rule)."""
    host = names_of(ev, HOST_KINDS) if host is None else host
    kernels = names_of(ev, ("kernel",)) if kernels is None else kernels
    api = names_of(ev, ("runtime", "driver")) if api is None else api
    steps = step_count(ev)
    colls = collectives(ev, host, kernels)
    fws = frameworks(host, kernels, list(colls))
    backend, backend_ev = comm_backend(host, kernels, api, meta) if colls else thread_backend(meta)
    opt = optimizer(ev, host, kernels)
    train = training(host, kernels, opt)
    comp = compiled(host, kernels)
    graphs = compile_mode_graphs(ev, host) if comp is not None else None
    dt, dt_ev = dtypes(ev, kernels)
    attn = fused_attention(host, kernels)
    conv = convolutions(host, kernels)
    version, version_ev = torch_version(ev, meta)
    opt_step = _first(OPT_STEP_RX, host)
    out = {
        "framework": sorted(fws), "framework_evidence": fws,
        "collectives": sorted(colls), "collectives_evidence": colls,
        "comm_backend": backend, "comm_backend_evidence": backend_ev,
        "optimizer": opt,
        "training": train is not None, "training_evidence": train,
        "compiled": comp is not None, "compiled_evidence": comp,
        "compile_mode_graphs": graphs is not None, "compile_mode_graphs_evidence": graphs,
        "dtypes": dt, "dtypes_evidence": dt_ev,
        "fused_attention": attn is not None, "fused_attention_evidence": attn,
        "convolutions": conv is not None, "convolutions_evidence": conv,
        "torch_version": version, "torch_version_evidence": version_ev,
        "steps_seen": steps,
        "ddp_buffer_broadcast_ns": ddp_buffer_broadcast_ns(ev, steps) if "ddp" in fws else 0,
    }
    out.update(syncs(ev, steps, opt_step))
    return out
