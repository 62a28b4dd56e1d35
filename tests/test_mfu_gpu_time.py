"""MFU over the GPU's time (issue 20 item 1): a step takes the longer of its host span and
the span of the GPU work it launched; MFU never exceeds 100% -- an impossible figure is
refused with its reason; achieved FLOP/s over the step time never exceeds that over
GPU-busy time. Planted truth, the real H100 GEMM fixture by hand, and every corpus trace."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import traceread
from traceread.analysis import analyze
from traceread.synth.scenarios import MS, T0, US, TraceBuilder

H100 = [{"device": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0,
         "numSms": 132}]
BF = '["c10::BFloat16","c10::BFloat16"]'
N = 4096
MM_FLOPS = 2 * N ** 3


def _ahead(steps=3, mms=10, kernel=500 * US, host=1 * MS, n=N):
    """Each step enqueues ``mms`` bf16 n^3 GEMMs in ``host`` ns; the GPU runs each,
    ``kernel`` ns long, when it is launched or when the one before ends (the host runs
    ahead when ``mms * kernel`` > ``host``)."""
    b = TraceBuilder(path="ahead.json")
    g = T0
    for k in range(steps):
        s = T0 + k * host
        b.step(k, s, host)
        for i in range(mms):
            ts = s + i * (host // mms)
            b.cpu("aten::mm", ts, 50 * US, input_dims=f"[[{n},{n}],[{n},{n}]]", input_type=BF)
            g = max(g, ts + 20 * US)
            b.launch(ts + 10 * US, 5 * US, g, kernel, name="sm90_xmma_gemm_bf16bf16")
            g += kernel
    return b.build(devices=H100)


def test_host_running_ahead_divides_by_the_gpu_span():
    a = analyze(_ahead()).to_dict()["utilization"]["mfu"]
    gpu_step = 10 * 500 * US     # the first kernel 20 us after the step starts, then back to back
    assert a["flops"] == 30 * MM_FLOPS
    assert a["host_ns"] == 3 * MS and a["window_ns"] == 3 * gpu_step
    assert a["mfu"] == pytest.approx(30 * MM_FLOPS / (989.4e12 * 3 * gpu_step * 1e-9))
    assert a["mfu"] <= 1 and a["tflops_wall"] <= a["tflops_gpu"]
    for s in a["steps"]:
        assert s["time_ns"] == gpu_step and s["dur"] == 1 * MS
        assert s["mfu"] == pytest.approx(10 * MM_FLOPS / (989.4e12 * gpu_step * 1e-9))


def test_host_bound_steps_keep_the_host_span():
    # 1024^3 GEMMs of 50 us each in 1 ms host steps: the step time is the host's
    a = analyze(_ahead(kernel=50 * US, n=1024)).to_dict()["utilization"]["mfu"]
    assert a["window_ns"] == 3 * MS and a["gpu_span_ns"] < 3 * MS
    assert a["mfu"] == pytest.approx(30 * 2 * 1024 ** 3 / (989.4e12 * 3e-3))


def test_impossible_mfu_is_refused_with_its_reason():
    # 137 GFLOP in a 10 us kernel would be 13.7 PFLOP/s on a 989 TFLOP/s card
    a = analyze(_ahead(kernel=10 * US)).to_dict()["utilization"]["mfu"]
    assert a["mfu"] is None and a["tflops_gpu"] is None and a["tflops_wall"] is None
    assert a["refused"].startswith("MFU refused") and "MFU refused" in a["note"]
    assert all(s["mfu"] is None for s in a["steps"])


FIXTURE = Path(__file__).parent / "fixtures" / "gpu" / "gpu.bad.json.gz"


def test_real_h100_gemm_fixture_by_hand(tmp_path):
    """gpu.bad: ten bf16 8192^3 GEMMs per step on an H100 SXM (record_gpu.py). Recorded
    without shapes; the shapes the script used are written into its aten::mm/matmul args,
    so the FLOPs are the planted 10 x 2 x 8192^3 per step and the time is the trace's."""
    doc = json.load(gzip.open(FIXTURE))
    host = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::matmul"):
            e["args"]["Input Dims"] = [[8192, 8192], [8192, 8192]]
            e["args"]["Input type"] = ["c10::BFloat16", "c10::BFloat16"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"):
            host.append(e["dur"] * 1e3)
    path = tmp_path / "gpu.shapes.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    m = analyze(traceread.load(path)).to_dict()["utilization"]["mfu"]
    per_step = 10 * 2 * 8192 ** 3
    assert m["flops"] == 3 * per_step and m["dtype"] == "bf16" and m["peak_tflops"] == 989.4
    # the host waits for each step (.item()): the step time is the ProfilerStep span
    assert m["window_ns"] == pytest.approx(sum(host), abs=3)
    assert m["mfu"] == pytest.approx(3 * per_step / (989.4e12 * sum(host) * 1e-9), rel=1e-6)
    assert 0.75 < m["mfu"] < 0.78        # 33.3 ms of ideal GEMM time in 43.8 ms of steps
    assert m["tflops_wall"] <= m["tflops_gpu"] <= 989.4


def _mfu_figures(path):
    u = analyze(traceread.load(path)).to_dict().get("utilization") or {}
    return u.get("mfu") or {}


def _corpus_traces(corpus_dir):
    rows = (corpus_dir / "MANIFEST.tsv").read_text().splitlines()[1:]
    return [corpus_dir / r.split("\t")[0] for r in rows
            if r.split("\t")[6].startswith("kineto") and r.split("\t")[8] not in ("", "0")]


def _possible(path) -> bool:
    """The trace's MFU figures are possible ones; whether it reports an MFU at all."""
    m = _mfu_figures(path)
    for r in [m] + list(m.get("steps") or []):
        if r.get("mfu") is not None:
            assert 0 <= r["mfu"] <= 1, (path.name, r)
        if r.get("tflops_wall") is not None and r.get("tflops_gpu") is not None:
            assert r["tflops_wall"] <= r["tflops_gpu"] * (1 + 1e-9), (path.name, r)
    return m.get("mfu") is not None


@pytest.mark.corpus
def test_no_corpus_trace_reports_impossible_figures(corpus_dir):
    """Every corpus trace (slow: the default run checks the few below)."""
    seen = sum(_possible(p) for p in _corpus_traces(corpus_dir) if p.exists())
    assert seen >= 5


@pytest.mark.corpus
def test_a_step_whose_gpu_work_spills_over_reports_possible_figures(corpus_dir):
    """HTA's trace_diff test trace: a step's GPU busy time (by time) above its program step
    (by launch) once gave tflops_wall > tflops_gpu."""
    p = corpus_dir / "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz"
    if not p.exists():
        pytest.skip("corpus trace absent")
    assert _possible(p)
