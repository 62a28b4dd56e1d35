"""Kernel classes on real kernel names (CUDA and ROCm), and time by class."""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import traceread
from traceread.passes.kernel_classes import CLASSES, classify_kernels, time_by_class
from traceread.passes.nccl import collective_instances
from traceread.table import Trace, TraceMeta, build_table

from conftest import CORPUS  # TRACEREAD_CORPUS where set (a worktree): else skipped silently

# Names as they appear in corpus traces (truncated where very long).
REAL = {
    "gemm": [
        "volta_sgemm_64x64_nt",
        "ampere_sgemm_128x64_nn",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1",
        "cudnn_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(Params)",
        "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8_ws2x2_wv2x4",
        "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_gemm_xdl_cshuffle_v3",
        "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false>(Params)",
        "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32",
    ],
    "attention": [
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128>>(Params)",
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>)",
        "aiter::fmha_fwd_hd128_bf16_rtz",
        "attn_fwd",
        "kernel_unified_attention_2d",
        "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>(Params)",
    ],
    "triton": [
        "triton_poi_fused_addmm_cat_gelu_view_25",
        "triton_red_fused__to_copy_add_addmm_as_strided_fmha_v3_fwd_mean_mul",
        "triton_per_fused_native_layer_norm_0",
        "triton_tem_fused_mm_0",
    ],
    "nccl": [
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)",
        # communication that is not NCCL (collectives.COMM_KERNELS)
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
        "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
        "void tensorrt_llm::kernels::twoShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)",
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
        "void deep_ep::internode_ll::combine<false, 7168>(void*, int*)",
        "nvshmemi_transfer_rma_p2p_get_kernel",
    ],
    "reduction": [
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(Params)",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float>(Params)",
        "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(Params)",
        "void at::native::batch_norm_collect_statistics_kernel<float, float, float, 512>(Params)",
        "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<Policy, false>(Params)",
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(Params)",
    ],
    "elementwise": [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::MeanOps<float>>>(int)",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>>(Params)",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>(Params)",
        "batched_transpose_32x32_half",
        "void rotary_embedding_kernel<c10::BFloat16, true>(long const*)",
    ],
    "memcpy": ["Memcpy DtoD (Device -> Device)", "Memcpy HtoD (Pageable -> Device)"],
    "memset": ["Memset (Device)"],
    "other": [
        "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>(Params)",
        "void bounds_check_indices_kernel<long>(Params)",
    ],
}


@pytest.mark.parametrize("cls", sorted(REAL))
def test_real_names(cls):
    names = pd.Series(REAL[cls], index=np.arange(len(REAL[cls])) * 10)
    got = classify_kernels(names)
    assert list(got.index) == list(names.index)
    wrong = [n for n, c in zip(names, got) if c != cls]
    assert not wrong, f"{cls}: {wrong}"
    assert set(got) <= set(CLASSES)


def test_categorical_and_missing_names():
    names = pd.Series(["attn_fwd", None, "volta_sgemm_64x64_nt", "attn_fwd"], dtype="category")
    assert list(classify_kernels(names)) == ["attention", "other", "gemm", "attention"]


def test_time_by_class_exact():
    rows = [  # (kind, name, dur)
        ("kernel", "volta_sgemm_64x64_nt", 500), ("kernel", "volta_sgemm_64x64_nt", 300),
        ("kernel", "ncclDevKernel_Generic(x)", 1000), ("kernel", "triton_poi_fused_add_0", 50),
        ("memcpy", "Memcpy HtoD (Pageable -> Device)", 100),
        ("memset", "Memset (Device)", 25), ("kernel", "my_custom_kernel", 25),
        ("cpu_op", "aten::mm", 99999),  # host work is not GPU time
    ]
    n = len(rows)
    kind, name, dur = zip(*rows)
    trace = Trace(build_table(dict(ts=np.arange(n) * 10_000, dur=list(dur), kind=list(kind),
                                   name=list(name), device=[0] * 7 + [-1]), n), TraceMeta())
    t = time_by_class(trace)
    got = {r["class"]: (r["total_ns"], r["instances"]) for r in t.to_dict("records")}
    assert got == {"nccl": (1000, 1), "gemm": (800, 2), "memcpy": (100, 1), "triton": (50, 1),
                   "memset": (25, 1), "other": (25, 1)}
    assert list(t["class"]) == ["nccl", "gemm", "memcpy", "triton", "memset", "other"]
    assert t["pct"].sum() == pytest.approx(100.0)
    assert float(t.loc[t["class"] == "nccl", "pct"].iloc[0]) == pytest.approx(1000 / 2000 * 100)


@pytest.mark.corpus
def test_real_trace_nccl_class_matches_nccl_pass():
    path = CORPUS / "facebookresearch__HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    t = time_by_class(trace).set_index("class")
    inst = collective_instances(trace)
    assert int(t.loc["nccl", "total_ns"]) == int(inst["dur"].sum())
    assert int(t.loc["nccl", "instances"]) == len(inst) == 21
    ev = trace.events
    gpu = ev[ev["kind"].isin(("kernel", "memcpy", "memset"))]
    assert int(t["total_ns"].sum()) == int(gpu["dur"].sum())
    assert int(t["instances"].sum()) == len(gpu)
