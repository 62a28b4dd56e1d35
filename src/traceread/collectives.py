"""Collective-communication names and element sizes, shared by every reader and the NCCL pass.

Three sources name the same collective differently:

* c10d's ``record_param_comms`` args (``Collective name``): ``allreduce``,
  ``_allgather_base``, ``allgather_into_tensor_coalesced``, ``_reduce_scatter_base``,
  ``reduce_scatter_tensor_coalesced``, ``alltoall_base``, ``send``, ``recv``, ...
* NCCL / RCCL kernel names: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
  ``ncclKernel_AllGather_RING_LL_Sum_int8_t``, ``ncclDevKernel_SendRecv``, ...
* NVTX ranges (nsys) and ``nccl:all_reduce`` user annotations.

All of them map onto one closed vocabulary, ``COLLECTIVES``.
"""
from __future__ import annotations

import re
from functools import lru_cache

from . import namerx
from .table import scan_name

COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
    "send", "recv", "send_recv", "reduce", "gather", "scatter", "barrier",
)

# Squashed spelling (lower case, no '_', no digits-only suffixes) -> canonical name.
_SQUASHED = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherintotensor": "all_gather",
    "allgatherbase": "all_gather",
    "allgathercoalesced": "all_gather",
    "allgatherintotensorcoalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescattertensor": "reduce_scatter",
    "reducescatterbase": "reduce_scatter",
    "reducescattertensorcoalesced": "reduce_scatter",
    "reducescattercoalesced": "reduce_scatter",
    "allreducecoalesced": "all_reduce",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "alltoall": "all_to_all",
    "alltoallbase": "all_to_all",
    "alltoallv": "all_to_all",
    "alltoallsingle": "all_to_all",
    "send": "send",
    "recv": "recv",
    "recvanysource": "recv",
    "sendrecv": "send_recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}



@lru_cache(maxsize=4096)
def normalize_collective(name: str | None) -> str | None:
    """Canonical collective name for any spelling, or None if not a collective.

    >>> normalize_collective("_allgather_base"), normalize_collective("nccl:all_reduce")
    ('all_gather', 'all_reduce')
    """
    if not name:
        return None
    # nsys --pytorch=autograd-nvtx appends the op's ids: "nccl:all_to_all, op_id = 998652"
    s = str(name).split(", op_id =", 1)[0].split(", seq =", 1)[0].strip()
    if ":" in s:  # "nccl:all_reduce", "c10d::allreduce_"
        s = s.rsplit(":", 1)[1]
    s = re.sub(r"[^a-z]", "", s.lower())
    if s in _SQUASHED:
        return _SQUASHED[s]
    # Strip common wrappers: "ncclallreduce", "allreduceop", "allreduceasync".
    for prefix in ("nccl", "rccl", "c10d", "gloo"):
        if s.startswith(prefix) and s[len(prefix):] in _SQUASHED:
            return _SQUASHED[s[len(prefix):]]
    return None


# ----------------------------------------------------------------------------- comm kernels
#
# Which GPU kernels are communication, and which collective each one is. One row per
# library family, first match wins; the readers, the overlap/exposure pass
# (passes/nccl.py), the kernel classes and cross-rank matching all ask ``comm_kernel``.
#
#   family     pattern, searched in the kernel's head (``kernel_head``: no ``void``,
#              no ``(anonymous namespace)::``, no template or call arguments;
#              namespaces kept)                                     collective
#   nccl/rccl  ``ncclKernel_*``, ``ncclDevKernel_*``, ``rccl*``     from the stem (None
#                                                        for NCCL >= 2.19 ``Generic``)
#   deepep     ``deep_ep::`` / ``dpsk::ep::`` dispatch/combine/     all_to_all
#              notify kernels (MoE
#              token exchange over NVLink/RDMA)
#   nvshmem    ``nvshmem_*`` / ``nvshmemi_*`` / ``nvshmemx_*``       from the name, else None
#   symm_mem   torch/vLLM symmetric memory: ``multimem_*reduce|gather``,
#              ``one_shot_all_reduce``, ``two_shot_all_reduce``     from the name
#   custom_ar  vLLM/SGLang/aiter ``cross_device_reduce_1stage/2stage``, TRT-LLM and
#              FlashInfer ``allReduce*``, ``oneShotAllReduce*``, ``twoShotAllReduce*``,
#              ``allreduce_fusion_kernel*``, ROCm ``quickreduce::``  all_reduce
#   mscclpp    ``mscclpp::`` kernels                                from the name, else None
#
# gloo, MPI and other CPU backends run no GPU kernel: their collectives are host
# ranges (``gloo:all_reduce``), read by ``jobs/multirank/inputs.py``.
# To add a library: append a (family, pattern, collective) row; collective None means
# "read it from the name" (``_NAME_COLLECTIVE``; dispatch/combine are all_to_all).
COMM_KERNELS: tuple[tuple[str, str, str | None], ...] = (
    ("nccl", r"(?i)^_*nccl", None),
    ("rccl", r"(?i)^_*rccl", None),
    ("deepep", r"(?:^|::)deep_?ep(?:::|_)|(?:^|::)dpsk::ep::", "all_to_all"),
    ("nvshmem", r"(?:^|::)nvshmem[ix]?_", None),
    ("symm_mem", r"(?:^|::)multimem_\w*(?:reduce|gather|scatter)|(?:^|::)(?:one|two)_shot_all_reduce", None),
    ("custom_ar", r"cross_device_reduce_[12]stage|(?:^|::)(?:oneShot|twoShot)?[aA]llReduce"
                  r"|allreduce_fusion_kernel|(?:^|::)quickreduce::", "all_reduce"),
    ("mscclpp", r"(?:^|::)mscclpp::", None),
)
_COMM_RX = tuple((fam, namerx.compile(p), coll) for fam, p, coll in COMM_KERNELS)
# NCCL/RCCL stems after the ncclKernel_/ncclDevKernel_ prefix.
_KERNEL_RE = namerx.compile(r"^_*(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
# A collective named inside another library's kernel name.
_NAME_COLLECTIVE = namerx.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|"
                              r"dispatch|combine", re.IGNORECASE)
_HEAD_NOISE = namerx.compile(r"^\s*(?:void\s+)?|\(anonymous namespace\)::")


def kernel_head(name: str) -> str:
    """The kernel's qualified name alone: ``void (anonymous namespace)::multimem_all_reduce_kernel
    <c10::BFloat16, 16>(...)`` -> ``multimem_all_reduce_kernel``."""
    s = _HEAD_NOISE.sub("", scan_name(str(name)))
    return re.split(r"[<(]", s, maxsplit=1)[0].strip()


@lru_cache(maxsize=1 << 16)  # every pass asks about the same names
def comm_kernel(name: str | None) -> tuple[str, str | None] | None:
    """(family, collective or None) when ``name`` is a communication kernel of
    ``COMM_KERNELS``, else None."""
    if not name:
        return None
    head = kernel_head(name)
    for fam, rx, coll in _COMM_RX:
        if not rx.search(head):
            continue
        if fam in ("nccl", "rccl"):
            m = _KERNEL_RE.match(head)
            return fam, normalize_collective(m.group(1)) if m else None
        if coll is None:
            w = _NAME_COLLECTIVE.search(head)
            coll = _word_collective(w.group(0)) if w else None
        return fam, coll
    return None


def _word_collective(word: str) -> str | None:
    w = word.lower()
    return "all_to_all" if w in ("dispatch", "combine") else normalize_collective(w)


def collective_from_kernel(name: str | None) -> str | None:
    """Collective type a communication kernel's name encodes, else None.

    ``ncclDevKernel_Generic`` (NCCL >= 2.19 generic kernel) carries no type: None.
    """
    hit = comm_kernel(name)
    return hit[1] if hit else None


def is_comm_kernel(name: str | None) -> bool:
    """True for every communication kernel of ``COMM_KERNELS`` (NCCL/RCCL, DeepEP, NVSHMEM,
    symmetric-memory and custom all-reduce kernels)."""
    return comm_kernel(name) is not None


# Element sizes in bytes. Keys are lower-cased with '_', ' ' and '.' removed, so the
# c10 ScalarType names ("Float", "BFloat16"), torch dtypes ("torch.float32"),
# NCCL enums ("ncclFloat32") and kernel-name suffixes ("f32", "bf16", "int8_t") all hit.
_DTYPE_SIZES = {
    "float": 4, "float32": 4, "f32": 4, "fp32": 4,
    "double": 8, "float64": 8, "f64": 8, "fp64": 8,
    "half": 2, "float16": 2, "f16": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2, "nvbfloat16": 2,
    "float8e4m3fn": 1, "float8e5m2": 1, "float8e4m3fnuz": 1, "float8e5m2fnuz": 1,
    "float8e4m3": 1, "float8e5m2e": 1, "fp8e4m3": 1, "fp8e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
    "long": 8, "int64": 8, "i64": 8, "int64t": 8,
    "int": 4, "int32": 4, "i32": 4, "int32t": 4,
    "short": 2, "int16": 2, "i16": 2,
    "char": 1, "int8": 1, "i8": 1, "int8t": 1,
    "byte": 1, "uint8": 1, "u8": 1, "uint8t": 1,
    "uint32": 4, "u32": 4, "uint32t": 4, "uint64": 8, "u64": 8, "uint64t": 8,
    "bool": 1,
    "complexhalf": 4, "complexfloat": 8, "complex64": 8, "complexdouble": 16, "complex128": 16,
}


@lru_cache(maxsize=1024)
def dtype_size(dtype: str | None) -> int:
    """Bytes per element for a dtype spelling; -1 if unknown."""
    if not dtype:
        return -1
    s = str(dtype).strip().lower()
    for prefix in ("torch.", "nccl", "c10::", "at::", "__"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    s = s.replace("_", "").replace(" ", "").replace(".", "")
    return _DTYPE_SIZES.get(s, -1)


# host names that are a collective call: nccl:/gloo:/mpi: annotations, c10d ops, functional
# collectives, Horovod's timeline (NCCL_ALLREDUCE), MPI calls
COMM_NAME_RX = namerx.compile(r"^(?:nccl|rccl|gloo|mpi|ucc|c10d|_c10d_functional|c10d_functional)"
                              r"[:_]|^(?:vllm|sglang)::(?:all_reduce|all_gather|reduce_scatter"
                              r"|all_to_all)|^(?:NCCL|MPI|GLOO)_[A-Z]+$|^MPI_[A-Z][a-z_]+$")


__all__ = ["COLLECTIVES", "COMM_KERNELS", "normalize_collective", "collective_from_kernel",
           "is_comm_kernel", "comm_kernel", "kernel_head", "dtype_size", "COMM_NAME_RX"]


def issued_in_order(span_ts, span_coll, op_ts, op_coll):
    """Each backend span's collective as the op that issued it names it: CPU backends run
    their work queue in issue order, so the k-th span of a process is its k-th c10d op --
    gloo runs ``c10d::_reduce_scatter_base_`` as a ``gloo:all_reduce`` span. Applied only
    where both counts agree and every op starts before its span; else the spans' own names
    (a list like ``span_coll``)."""
    out = list(span_coll)
    if len(span_ts) != len(op_ts) or not len(span_ts):
        return out
    spans = sorted(range(len(span_ts)), key=lambda i: span_ts[i])
    ops = sorted(range(len(op_ts)), key=lambda i: op_ts[i])
    if any(op_ts[o] > span_ts[s] for s, o in zip(spans, ops)):
        return out
    for s, o in zip(spans, ops):
        if op_coll[o]:
            out[s] = op_coll[o]
    return out
