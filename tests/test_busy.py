"""Busy doing what: tensor-core vs SIMT GEMMs, short kernels, copy bandwidth; the busy-time
levers (verdict/busy.py) on the figures the pass measured."""
from __future__ import annotations

import numpy as np
import pytest

from traceread.passes.busy import busy_breakdown, is_tf32_kernel
from traceread.verdict.busy import busy_levers
from traceread.table import Trace, TraceMeta, build_table

SGEMM = "volta_sgemm_128x64_nn"
TC = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false>(float*)"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)"


def _trace(rows, device="NVIDIA H100 80GB HBM3"):
    """rows: (dur, kind, name[, bytes, copy_kind])"""
    rows = [r + (-1, None)[len(r) - 3:] if len(r) < 5 else r for r in rows]
    dur, kind, name, nbytes, ck = zip(*rows)
    n = len(rows)
    ts = np.cumsum([0] + list(dur[:-1])) + 1000
    cols = {"ts": ts, "dur": np.array(dur), "kind": list(kind), "name": list(name),
            "bytes": np.array(nbytes), "copy_kind": list(ck), "device": np.zeros(n, int),
            "pid": np.ones(n, int)}
    return Trace(build_table(cols, n), TraceMeta(format="kineto",
                                                 devices=[{"device": 0, "name": device}]))


def _shares(b):
    return {c["class"]: round(c["pct"], 1) for c in b["classes"]}


def test_simt_and_tensor_core_gemms_split_and_tf32_lever():
    b = busy_breakdown(_trace([(6000, "kernel", SGEMM), (2000, "kernel", TC),
                               (2000, "kernel", EW)]))
    assert _shares(b) == {"gemm_simt": 60.0, "gemm_tensor": 20.0, "elementwise": 20.0}
    lev = {x["lever"]: x for x in busy_levers(b["figures"])}
    # H100: fp32 66.9 -> tf32 494.7 TFLOP/s
    assert lev["tf32"]["saving_ns"] == int(6000 * (1 - 66.9 / 494.7))
    assert "torch_compile" not in lev  # elementwise only 20 %


def test_v100_gets_fp16_autocast_not_tf32():
    b = busy_breakdown(_trace([(6000, "kernel", SGEMM), (1000, "kernel", EW)],
                              device="Tesla V100-SXM2-32GB"))
    lev = {x["lever"]: x for x in busy_levers(b["figures"])}
    assert "tf32" not in lev and "bf16_autocast" not in lev
    assert lev["fp16_autocast"]["saving_ns"] == int(6000 * (1 - 15.7 / 125))


def test_unfused_attention_layout_and_pointwise_levers():
    b = busy_breakdown(_trace([(3000, "kernel", SOFTMAX), (2000, "kernel", TC),
                               (1000, "kernel", "void cudnn::ops::nchwToNhwcKernel<float>()"),
                               (4000, "kernel", EW)]))
    lev = {x["lever"]: x["saving_ns"] for x in busy_levers(b["figures"])}
    assert lev["sdpa"] == 3000
    assert lev["channels_last"] == 1000
    assert lev["torch_compile"] == (3000 + 1000 + 4000) // 2  # softmax is a reduction


def test_short_kernels_and_copy_bandwidth():
    b = busy_breakdown(_trace([(1000, "kernel", EW), (4999, "kernel", EW), (5000, "kernel", EW),
                               (2_000_000, "memcpy", "Memcpy HtoD", 50_000_000, "HtoD")]))
    assert b["small_kernels"]["count"] == 2 and b["small_kernels"]["ns"] == 5999
    (c,) = b["copies"]
    assert c["copy_kind"] == "HtoD" and c["gb_per_s"] == pytest.approx(25.0)


def test_tf32_kernel_names():
    assert is_tf32_kernel("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16")
    assert is_tf32_kernel("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4")
    assert not is_tf32_kernel("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128")
    assert not is_tf32_kernel(TC)


def test_headline_says_mfu_is_a_lower_bound():
    """Where GEMM/attention kernels launched by no counted op (graph replays, custom ops) hold
    busy time, MFU counts only part of the FLOPs: the headline says '>=' and why."""
    from traceread.verdict.busy import headline

    m = {"mfu": 0.015, "peak_tflops": 1307.4, "flops": 15e12, "dtype": "bf16",
         "device": "AMD Instinct MI300X", "has_shapes": True}
    plain = headline({"mfu": m}, [])
    assert plain.startswith("MFU 1.5% of 1307.4") and "lower bound" not in plain
    low = headline({"mfu": {**m, "lower_bound": "GEMM/attention kernels taking 74% of busy "
                                                "time have no counted operator"}}, [])
    assert low.startswith("MFU >= 1.5% of 1307.4") and "(a lower bound: GEMM/attention" in low


def test_flux_graph_replays_mark_mfu_lower_bound():
    """Real MI300X Flux trace (TraceLens corpus): the transformer replays from graphs, its GEMMs
    have no shapes, so the facts record marks the MFU as a lower bound."""
    from conftest import corpus_or_skip
    import traceread

    path = corpus_or_skip() / ("AMD-AGI__TraceLens/tests/traces/inference/xdit_flux_aiter_sage/"
                               "profile_trace_rank_0.json.gz")
    a = traceread.analyze(path)
    mfu = a.facts.figures["utilization"]["mfu"]
    assert mfu["lower_bound"] and "74% of busy" in mfu["lower_bound"]
    # the batching lever's compute is the request's GPU work (721 ms of 784), not the host's
    # 16 ms inside matmul ops: batching cannot amortise the GPU's compute-bound GEMMs
    inf = a.facts.program["anatomy"]["inference"]
    assert inf["gpu_ns"] > 0.9 * inf["request_ns"] > 10 * inf["flop_host_ns"]


def test_miopens_transposes_around_an_nhwc_convolution_are_layout_conversions():
    """MIOpen's NHWC convolutions on NCHW tensors run between batched_transpose kernels (TraceLens
    mi210 gpu_only_trace: 168 of them, 0.82 ms): channels_last removes them, as cuDNN's
    nchwToNhwc. The busy pass counted only cuDNN's names."""
    b = busy_breakdown(_trace([(1000, "kernel", "batched_transpose_32x16_half"),
                               (2000, "kernel", "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32"),
                               (1000, "kernel", EW)], device="AMD Instinct MI300X"))
    lev = {x["lever"]: x for x in busy_levers(b["figures"])}
    assert lev["channels_last"]["saving_ns"] == 1000
    assert "MIOpen" in lev["channels_last"]["why"]
