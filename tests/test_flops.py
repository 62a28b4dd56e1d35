"""FLOPs from recorded shapes: formulas, nesting, MFU arithmetic, and a real torch
transformer step checked against the hand count 6*N*tokens + attention."""
from __future__ import annotations

import json

import numpy as np
import pytest

import traceread
from traceread.passes.flops import HOW_TO_RECORD, flops_of, mfu_summary, op_flops
from traceread.passes.peaks import device_peaks
from traceread.table import Trace, TraceMeta, build_table


def test_formulas():
    assert flops_of("aten::mm", "[[8,64],[64,32]]", None) == 2 * 8 * 64 * 32
    assert flops_of("aten::addmm", "[[32],[8,64],[64,32],[],[]]", None) == 2 * 8 * 64 * 32
    assert flops_of("aten::bmm", "[[4,8,16],[4,16,5]]", None) == 2 * 4 * 8 * 16 * 5
    assert flops_of("aten::baddbmm", "[[4,8,5],[4,8,16],[4,16,5],[],[]]", None) == 2 * 4 * 8 * 16 * 5
    # conv 3->8, 3x3, stride 2, pad 1 on 16x16: 8x8 output
    conc = '["","","","[2, 2]","[1, 1]","[1, 1]","False","[0, 0]","1"]'
    dims = "[[2,3,16,16],[8,3,3,3],[8],[],[],[],[],[],[]]"
    assert flops_of("aten::convolution", dims, conc) == 2 * 2 * 8 * 64 * 3 * 9
    bconc = '["","","","[8]","[2, 2]","[1, 1]","[1, 1]","False","[0, 0]","1","[True, True, True]"]'
    bdims = "[[2,8,8,8],[2,3,16,16],[8,3,3,3],[],[],[],[],[],[],[],[]]"
    assert flops_of("aten::convolution_backward", bdims, bconc) == 2 * (2 * 2 * 8 * 64 * 3 * 9)
    q = "[[2,4,16,8],[2,4,32,8],[2,4,32,8],[],[]]"
    fwd = 4 * 2 * 4 * 16 * 32 * 8
    assert flops_of("aten::_scaled_dot_product_flash_attention", q, None) == fwd
    assert flops_of("aten::_scaled_dot_product_flash_attention_backward",
                    "[[2,4,16,8],[2,4,16,8],[2,4,32,8],[2,4,32,8]]", None) == 2 * fwd
    assert flops_of("aten::relu", "[[8]]", None) == -1
    assert flops_of("aten::mm", "garbage", None) == -1


def _table(rows, devices=()):
    """rows: (ts, dur, kind, name, input_dims, input_type, tid)"""
    ts, dur, kind, name, dims, types, tid = zip(*rows)
    cols = {"ts": np.array(ts), "dur": np.array(dur), "kind": list(kind), "name": list(name),
            "input_dims": list(dims), "input_type": list(types), "pid": np.full(len(rows), 1),
            "tid": np.array(tid), "device": np.array([0 if k == "kernel" else -1 for k in kind])}
    return Trace(build_table(cols, len(rows)), TraceMeta(format="kineto", devices=list(devices)))


BF = '["c10::BFloat16","c10::BFloat16"]'


def test_only_the_innermost_counted_op_counts():
    t = _table([
        (0, 100, "cpu_op", "aten::linear", "[[8,64],[32,64]]", BF, 1),
        (10, 50, "cpu_op", "aten::matmul", "[[8,64],[64,32]]", BF, 1),
        (10, 40, "cpu_op", "aten::mm", "[[8,64],[64,32]]", BF, 1),     # counted
        (200, 30, "cpu_op", "aten::mm", "[[8,64],[64,32]]", BF, 2),    # other thread
    ])
    ops = op_flops(t)
    assert ops["name"].tolist() == ["aten::mm", "aten::mm"]
    assert ops["flops"].tolist() == [32768, 32768] and set(ops["dtype"]) == {"bf16"}


def test_mfu_arithmetic_and_peak_lookup():
    # 1e12 FLOPs in a 10 ms window on an H100 SXM (989.4 bf16 TFLOP/s), GPU busy 5 ms
    m, k, n = 10_000, 10_000, 5_000
    t = _table([(0, 10_000_000, "annotation", "ProfilerStep#1", None, None, 1),
                (1000, 100, "cpu_op", "aten::mm", f"[[{m},{k}],[{k},{n}]]", BF, 1),
                (2000, 5_000_000, "kernel", "sm90_xmma_gemm_bf16bf16", None, None, -1)],
               devices=[{"device": 0, "name": "NVIDIA H100 80GB HBM3"}])
    from traceread.passes import steps as S

    steps, _ = S.find_steps(t.events)
    s = mfu_summary(t, steps)
    assert s["flops"] == 2 * m * k * n == 10**12
    assert s["tflops_wall"] == pytest.approx(100.0)
    assert s["peak_tflops"] == 989.4 and s["dtype"] == "bf16"
    assert s["mfu"] == pytest.approx(100.0 / 989.4)
    over = mfu_summary(t, steps, peak_tflops=200)
    assert over["mfu"] == pytest.approx(0.5) and over["peak_source"] == "override"
    assert device_peaks("AMD Instinct MI300X VF")["bf16"] == 1307.4
    assert device_peaks("NVIDIA H100 PCIe")["bf16"] == 756.5
    assert device_peaks("Some GPU") is None


def test_no_shapes_says_how_to_record():
    t = _table([(0, 10, "cpu_op", "aten::mm", None, None, 1)])
    s = mfu_summary(t)
    assert not s["has_shapes"] and s["note"] == HOW_TO_RECORD


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_real_transformer_step_matches_hand_count(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional
    V, D, H, L, B, S = 64, 32, 4, 2, 2, 16

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            q, k, v = self.qkv(x).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, D)
            x = x + self.o(a)
            return x + self.down(F.gelu(self.up(x)))

    torch.manual_seed(0)
    emb, blocks, head = nn.Embedding(V, D), nn.Sequential(*[Block() for _ in range(L)]), nn.Linear(D, V)
    tokens = torch.randint(0, V, (B, S))
    path = tmp_path / "step.json"
    with torch.profiler.profile(record_shapes=True, with_flops=True) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = head(blocks(emb(tokens)))
            loss = F.cross_entropy(logits.float().view(-1, V), tokens.view(-1))
        loss.backward()
    prof.export_chrome_trace(str(path))

    n_matmul = L * (D * 3 * D + D * D + D * 4 * D + 4 * D * D) + D * V
    tokens_n = B * S
    hand = 6 * n_matmul * tokens_n + 12 * L * S * D * tokens_n  # fwd+bwd attention: 12·S·d per token
    t = traceread.load(path)
    ops = op_flops(t)
    assert int(ops["flops"].sum()) == hand
    assert set(ops["dtype"]) == {dtype}
    s = mfu_summary(t)
    assert s["flops"] == hand and s["tflops_wall"] > 0


def test_analyze_reports_gpu_use_section_and_json(tmp_path):
    from traceread.analysis import analyze
    from traceread.render.report import render_report

    m, k, n = 10_000, 10_000, 5_000
    t = _table([(0, 10_000_000, "annotation", "ProfilerStep#1", None, None, 1),
                (1000, 100, "cpu_op", "aten::mm", f"[[{m},{k}],[{k},{n}]]", BF, 1),
                (2000, 5_000_000, "kernel", "sm90_xmma_gemm_bf16bf16", None, None, -1)],
               devices=[{"device": 0, "name": "NVIDIA H100 80GB HBM3"}])
    a = analyze(t, peak_tflops=500)
    u = a.to_dict()["utilization"]
    assert u["mfu"]["mfu"] == pytest.approx(100.0 / 500)
    assert u["mfu"]["steps"][0]["flops"] == 10**12
    assert u["busy"]["classes"][0]["class"] == "gemm_tensor"
    assert "MFU 20.0%" in render_report(a)
    json.dumps(u)  # plain JSON


@pytest.mark.corpus
@pytest.mark.parametrize("gpu", ["h100", "mi300"])
def test_real_qwen_trace_matches_the_model_config(gpu):
    """Qwen1.5-0.5B bf16 prefill, batch 16 x 559 tokens (TraceLens corpus): hidden 1024,
    MLP 2816, 16 heads of 64, 24 layers -- every counted FLOP from the config by hand."""
    from pathlib import Path

    from conftest import CORPUS

    path = (CORPUS / "AMD-AGI__TraceLens" /
            "tests" / "traces" / gpu / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    if not path.exists():
        pytest.skip("shared corpus not available")
    ops = op_flops(traceread.load(path))
    by = ops.groupby("name")["flops"].sum()
    t, layers = 16 * 559, 24
    assert by["aten::addmm"] == 3 * 1024 * 1024 * 2 * t * layers            # q, k, v (+bias)
    assert by["aten::mm"] == (1024 * 1024 + 3 * 1024 * 2816) * 2 * t * layers  # o, gate, up, down
    # a causal prefill (is_causal=True in the recorded arguments): row i scores i + 1 keys
    assert by["aten::_scaled_dot_product_flash_attention"] == \
        4 * 16 * 16 * (559 * 560 // 2) * 64 * layers
    assert set(ops.loc[ops["name"] != "aten::bmm", "dtype"]) == {"bf16"}


def test_ops_captured_into_a_cuda_graph_are_not_counted_and_replays_are_flagged():
    mm = ("aten::mm", "[[8,64],[64,32]]", BF)
    t = _table([(5, 1, "runtime", "cudaStreamBeginCapture", None, None, 1),
                (10, 5, "cpu_op", *mm, 1),
                (20, 1, "runtime", "cudaStreamEndCapture", None, None, 1),
                (30, 5, "cpu_op", *mm, 1),
                (40, 5, "cpu_op", *mm, 2),
                (50, 1, "runtime", "cudaGraphLaunch", None, None, 1)])
    ops = op_flops(t)
    assert ops["ts"].tolist() == [30, 40]
    assert "CUDA graphs" in mfu_summary(t)["note"]
