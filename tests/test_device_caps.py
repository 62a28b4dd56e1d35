"""Device context (issue 20 item 2): device_caps from Kineto deviceProperties and nsys
TARGET_INFO_GPU; peaks by device and compute capability; precision levers that fit the
device (no bf16/TF32 on Turing) and the kernel (fp16 gemv is no TF32 candidate, ffma
GEMMs are FP32 not TF32); MFU against FP32 shows the TF32 headroom."""
from __future__ import annotations

import numpy as np
import pytest

from traceread.passes.busy import busy_breakdown, gemm_precision, is_tf32_kernel
from traceread.passes.flops import mfu_summary
from traceread.passes.peaks import CAPS_KEYS, device_caps, device_peaks
from traceread.table import Trace, TraceMeta, build_table
from traceread.verdict.busy import busy_levers

RTX = {"id": 0, "name": "NVIDIA GeForce RTX 2080 Ti", "computeMajor": 7, "computeMinor": 5,
       "numSms": 68, "warpSize": 32}
GH200 = {"device": 0, "name": "NVIDIA GH200 480GB", "computeMajor": 9, "computeMinor": 0,
         "numSms": 132}
A100 = {"device": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0,
        "numSms": 108}
SGEMM = "volta_sgemm_128x64_nn"
FFMA = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_"
        "aligna4_alignc4_execute_kernel_cublas")
GEMV_HALF = ("void gemv2T_kernel_val<int, int, __half, __half, float, 128, 16, 4, 4, false, "
             "false, cublasGemvParams<cublasGemvTensorStridedBatched<__half const>, "
             "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<"
             "__half>, float> >(float, float)")


def _meta(dev, fmt="kineto"):
    return TraceMeta(format=fmt, devices=[dev])


def test_caps_from_kineto_and_nsys_properties():
    c = device_caps(_meta(RTX))
    assert tuple(c) == CAPS_KEYS
    assert c == {"name": "NVIDIA GeForce RTX 2080 Ti", "vendor": "nvidia", "cc": "7.5",
                 "arch": "Turing", "sm_count": 68, "bf16": False, "tf32": False, "fp8": False}
    # nsys TARGET_INFO_GPU: smCount, no warpSize
    n = device_caps(_meta({"device": 0, "name": "NVIDIA H100 80GB HBM3", "smCount": 132,
                           "computeMajor": 9, "computeMinor": 0}, "nsys"))
    assert (n["vendor"], n["cc"], n["arch"], n["sm_count"], n["fp8"]) == \
        ("nvidia", "9.0", "Hopper", 132, True)
    amd = device_caps(_meta({"name": "AMD Instinct MI300X", "computeMajor": 9,
                             "computeMinor": 4, "numSms": 304, "warpSize": 64}))
    assert (amd["vendor"], amd["arch"], amd["bf16"], amd["sm_count"]) == ("amd", "CDNA3", True, 304)
    assert device_caps(TraceMeta(format="kineto", devices=[]))["vendor"] is None
    # no compute capability: what the peak table lists for the name
    assert device_caps(_meta({"name": "Tesla V100-SXM2-16GB"}))["bf16"] is False


def test_peaks_by_device_and_cc():
    c = device_caps(_meta(RTX))
    assert device_peaks(c["name"], c) == {"fp16": 53.8, "fp32": 13.4}
    # a name that matches an entry whose dtypes the cc rules out
    v = device_caps(_meta({"name": "NVIDIA RTX 3090", "computeMajor": 7, "computeMinor": 5}))
    assert "bf16" not in device_peaks(v["name"], v) and "tf32" not in device_peaks(v["name"], v)


def test_kernel_precision_from_names():
    assert gemm_precision(FFMA) == "fp32" and not is_tf32_kernel(FFMA)
    assert gemm_precision(GEMV_HALF) == "lowp"
    assert gemm_precision("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4") == "tf32"
    assert gemm_precision("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16") == "tf32"
    assert gemm_precision("volta_dgemm_64x64_nn") == "fp64"
    assert gemm_precision(SGEMM) == "fp32"


def _busy(rows, dev):
    dur, name = zip(*rows)
    n = len(rows)
    cols = {"ts": np.cumsum([0] + list(dur[:-1])) + 1000, "dur": np.array(dur),
            "kind": ["kernel"] * n, "name": list(name), "device": np.zeros(n, int),
            "pid": np.ones(n, int)}
    t = Trace(build_table(cols, n), TraceMeta(format="kineto", devices=[dev]))
    return {x["lever"]: x for x in busy_levers(busy_breakdown(t)["figures"])}


def test_turing_gets_fp16_autocast_not_bf16_or_tf32():
    lev = _busy([(8000, SGEMM), (2000, "void elementwise_kernel<float>()")], RTX)
    assert set(lev) == {"fp16_autocast"}
    assert lev["fp16_autocast"]["saving_ns"] == int(8000 * (1 - 13.4 / 53.8))
    assert "GradScaler" in lev["fp16_autocast"]["assumption"]


def test_fp16_gemv_is_no_tf32_candidate():
    assert "tf32" not in _busy([(8000, GEMV_HALF), (2000, "void elementwise_kernel<float>()")],
                               A100)
    assert "tf32" in _busy([(8000, SGEMM), (2000, "void elementwise_kernel<float>()")], A100)


BF = '["float","float"]'


def _mfu(dev, kernel):
    m = k = n = 4096
    rows = [(0, 100_000_000, "annotation", "ProfilerStep#1", None, None, 1),
            (1000, 100, "cpu_op", "aten::mm", f"[[{m},{k}],[{k},{n}]]", BF, 1),
            (2000, 50_000_000, "kernel", kernel, None, None, -1)]
    ts, dur, kind, name, dims, types, tid = zip(*rows)
    cols = {"ts": np.array(ts), "dur": np.array(dur), "kind": list(kind), "name": list(name),
            "input_dims": list(dims), "input_type": list(types), "pid": np.full(3, 1),
            "tid": np.array(tid), "device": np.array([-1, -1, 0])}
    t = Trace(build_table(cols, 3), TraceMeta(format="kineto", devices=[dev]))
    from traceread.passes import steps as S

    return mfu_summary(t, S.find_steps(t.events)[0]), 2 * m * k * n


def test_ffma_gemms_are_fp32_not_tf32_on_gh200():
    s, fl = _mfu(GH200, FFMA)
    assert s["dtype"] == "fp32" and s["peak_tflops"] == 66.9 and not s["tf32"]
    assert s["mfu"] == pytest.approx(fl / 66.9e12 / 0.1)
    assert s["mfu_if_tf32"] == pytest.approx(fl / 494.7e12 / 0.1)
    assert "TF32 peak (494.7)" in s["note"]


def test_a100_fp32_mfu_carries_the_tf32_headroom():
    s, fl = _mfu(A100, SGEMM)
    assert s["peak_tflops"] == 19.5 and s["mfu"] == pytest.approx(fl / 19.5e12 / 0.1)
    assert s["mfu_if_tf32"] == pytest.approx(fl / 156e12 / 0.1)
    # a TF32 kernel: measured against TF32, no headroom note
    t, _ = _mfu(A100, "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4")
    assert t["dtype"] == "tf32" and t["peak_tflops"] == 156 and t["mfu_if_tf32"] is None
    # Turing has no TF32: no headroom to show
    r, _ = _mfu(RTX, SGEMM)
    assert r["mfu_if_tf32"] is None and r["peak_tflops"] == 13.4


def test_analysis_context_carries_the_device():
    from traceread.analysis import analyze

    cols = {"ts": np.array([0, 1000]), "dur": np.array([10_000, 5_000]),
            "kind": ["annotation", "kernel"], "name": ["ProfilerStep#1", SGEMM],
            "pid": np.array([1, 1]), "tid": np.array([1, -1]), "device": np.array([-1, 0])}
    t = Trace(build_table(cols, 2), TraceMeta(format="kineto", devices=[RTX]))
    d = analyze(t).to_dict()["context"]["device"]
    assert tuple(d) == CAPS_KEYS and d["cc"] == "7.5" and d["tf32"] is False
