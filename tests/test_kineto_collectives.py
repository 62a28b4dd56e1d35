"""traceread.collectives: one vocabulary for c10d args, NCCL/RCCL kernel names and dtypes."""
from __future__ import annotations

import pytest

from traceread.collectives import (COLLECTIVES, collective_from_kernel, dtype_size, is_comm_kernel,
                                   normalize_collective)


@pytest.mark.parametrize("raw,canon", [
    ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("nccl:all_reduce", "all_reduce"),
    ("allreduce_coalesced", "all_reduce"), ("_allgather_base", "all_gather"),
    ("allgather_into_tensor_coalesced", "all_gather"), ("nccl:_all_gather_base", "all_gather"),
    ("_reduce_scatter_base", "reduce_scatter"), ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
    ("broadcast", "broadcast"), ("alltoall_base", "all_to_all"), ("all_to_all", "all_to_all"),
    ("send", "send"), ("recv", "recv"), ("recv_any_source", "recv"), ("reduce", "reduce"),
    ("gather", "gather"), ("scatter", "scatter"), ("barrier", "barrier"),
    ("aten::mm", None), ("", None), (None, None)])
def test_normalize(raw, canon):
    assert normalize_collective(raw) == canon
    assert canon is None or canon in COLLECTIVES


@pytest.mark.parametrize("name,coll", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "broadcast"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "send_recv"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),
    ("ampere_sgemm_128x64_tn", None)])
def test_kernel_names(name, coll):
    assert collective_from_kernel(name) == coll
    assert is_comm_kernel(name) == name.startswith("nccl")


@pytest.mark.parametrize("dtype,size", [
    ("Float", 4), ("BFloat16", 2), ("Half", 2), ("Double", 8), ("Long", 8), ("Int", 4), ("Byte", 1),
    ("Char", 1), ("Bool", 1), ("torch.float16", 2), ("ncclFloat32", 4), ("int8_t", 1), ("f32", 4),
    ("bf16", 2), ("Float8_e4m3fn", 1), ("ComplexFloat", 8), ("mystery", -1), (None, -1)])
def test_dtype_size(dtype, size):
    assert dtype_size(dtype) == size
