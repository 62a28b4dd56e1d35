"""MFU counts the model's FLOPs once, HFU every executed FLOP (activation checkpointing
recomputes forward ops under backward); GEMM kernels no counted operator launched (fp8 /
custom ops) are reported as a share of busy time, not silently left out."""
from __future__ import annotations

import pytest

from traceread.analysis import analyze
from traceread.synth.scenarios import MS, T0, US, TraceBuilder

H100 = [{"device": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0,
         "numSms": 132}]
BF = '["c10::BFloat16","c10::BFloat16"]'
N = 2048
F = 2 * N ** 3
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"


def _mm(b, ts, gpu_ts, name=GEMM):
    b.cpu("aten::mm", ts, 40 * US, input_dims=f"[[{N},{N}],[{N},{N}]]", input_type=BF)
    b.launch(ts + 10 * US, 5 * US, gpu_ts, 100 * US, name=name)


@pytest.mark.parametrize("reentrant", [False, True])
def test_recomputed_forward_counts_in_hfu_not_mfu(reentrant):
    b = TraceBuilder()
    b.step(0, T0, 10 * MS)
    _mm(b, T0 + 100 * US, T0 + 200 * US)                      # forward
    if reentrant:   # the node runs the segment's forward again, then its backward
        b.cpu("CheckpointFunctionBackward", T0 + 1 * MS, 2 * MS)
        _mm(b, T0 + 1 * MS + 10 * US, T0 + 1 * MS + 100 * US)     # recomputed
        b.cpu("autograd::engine::evaluate_function: MmBackward0", T0 + 2 * MS, 500 * US)
        _mm(b, T0 + 2 * MS + 10 * US, T0 + 2 * MS + 100 * US)     # backward
    else:
        b.cpu("torch/utils/checkpoint.py(1500): recompute_fn", T0 + 1 * MS, 500 * US,
              kind="python")
        _mm(b, T0 + 1 * MS + 10 * US, T0 + 1 * MS + 100 * US)     # recomputed
        b.cpu("autograd::engine::evaluate_function: MmBackward0", T0 + 2 * MS, 500 * US)
        _mm(b, T0 + 2 * MS + 10 * US, T0 + 2 * MS + 100 * US)     # backward
    m = analyze(b.build(devices=H100)).to_dict()["utilization"]["mfu"]
    assert m["flops"] == 3 * F and m["recomputed_flops"] == F
    assert m["mfu"] == pytest.approx(2 * F / (989.4e12 * 10e-3))
    assert m["hfu"] == pytest.approx(3 * F / (989.4e12 * 10e-3))
    assert m["steps"][0]["mfu"] == pytest.approx(m["mfu"])


def test_no_recomputation_no_hfu():
    b = TraceBuilder()
    b.step(0, T0, 10 * MS)
    _mm(b, T0 + 100 * US, T0 + 200 * US)
    m = analyze(b.build(devices=H100)).to_dict()["utilization"]["mfu"]
    assert m["hfu"] is None and m["recomputed_flops"] == 0


def test_gemms_no_counted_op_launched_are_a_share_of_busy_time():
    b = TraceBuilder()
    b.step(0, T0, 10 * MS)
    _mm(b, T0 + 100 * US, T0 + 200 * US)                          # counted: 100 us
    b.cpu("vllm::fused_moe", T0 + 1 * MS, 100 * US)
    fp8 = "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cublas"
    b.launch(T0 + 1 * MS + 10 * US, 5 * US, T0 + 1 * MS + 50 * US, 300 * US, name=fp8)
    m = analyze(b.build(devices=H100)).to_dict()["utilization"]["mfu"]
    u = m["uncounted_matmul"]
    assert u["ns"] == 300 * US and u["pct_of_busy"] == pytest.approx(75.0)
    assert u["kernels"][0]["name"] == fp8
    assert "75% of busy time" in m["note"] and "lower bound" in m["note"]


@pytest.mark.corpus
def test_resnet_act_checkpoint_recomputes_its_convolutions(corpus_dir):
    import traceread

    path = corpus_dir / "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz"
    m = analyze(traceread.load(path)).to_dict()["utilization"]["mfu"]
    # 57 convolutions of the checkpointed blocks run again under backward (recompute_fn)
    assert m["recomputed_flops"] == 101_732_843_520
    assert m["hfu"] > m["mfu"] > 0
