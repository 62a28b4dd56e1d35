"""Busy vs used (issue 20 item 6): time-weighted SM coverage (grid blocks vs SMs, capped at
1), estimated occupancy, and "busy but under-filled" with the kernels responsible --
planted in the Kineto form (launch args) and the nsys form (gridX/blockX, smCount), and the
real H100 fixtures (gpu.bad: full-grid GEMMs; launch.bad: a trickle of 4-block kernels)."""
from __future__ import annotations

from pathlib import Path

import pytest

import traceread
from traceread.analysis import analyze
from traceread.passes.occupancy import occupancy_summary
from traceread.passes.peaks import device_caps
from traceread.synth.nsys import NsysWriter
from traceread.synth.scenarios import MS, T0, TraceBuilder

SMALL = "void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>(int)"
BIG = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"
H100 = {"device": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0,
        "numSms": 132}
# 8-block kernels for 3 ms, a 264-block GEMM for 1 ms, SMs 132
TRUTH_COV = (3 * 8 / 132 + 1 * 1.0) / 4
TRUTH_IDLE = 3 * MS * (1 - 8 / 132)


def _kineto():
    b = TraceBuilder()
    b.step(0, T0, 5 * MS)
    for i in range(3):
        b.launch(T0 + i * MS, 5_000, T0 + i * MS + 10_000, MS, name=SMALL,
                 launch='{"grid":[8,1,1],"block":[128,1,1],"occupancy":40}')
    b.launch(T0 + 3 * MS, 5_000, T0 + 3 * MS + 10_000, MS, name=BIG,
             launch='{"grid":[2,132,1],"block":[384,1,1],"occupancy":0}')
    return b.build(devices=[H100])


def _check(o):
    assert o["sm_count"] == 132 and o["kernel_ns"] == 4 * MS
    assert o["coverage"] == pytest.approx(TRUTH_COV)
    assert o["sm_idle_ns"] == pytest.approx(TRUTH_IDLE, abs=1)
    u = o["underfilled"]
    assert u["sm_idle_pct"] == pytest.approx(100 * TRUTH_IDLE / (4 * MS))
    assert [k["name"] for k in u["kernels"]] == [SMALL]
    assert u["kernels"][0]["blocks"] == 8 and u["kernels"][0]["count"] == 3
    cls = {c["class"]: c for c in o["classes"]}
    assert cls["gemm_tensor"]["coverage"] == 1.0
    assert cls["elementwise"]["coverage"] == pytest.approx(8 / 132)


def test_kineto_form_planted():
    t = _kineto()
    o = analyze(t).to_dict()["utilization"]["occupancy"]
    _check(o)
    # Kineto's 0 means "not estimated": only the elementwise kernels' 40% counts
    assert o["occupancy_pct"] == 40 and o["occupancy_ns"] == 3 * MS


def test_nsys_form_planted(tmp_path):
    w = NsysWriter(tmp_path / "occ.sqlite")
    w.gpu(0, "NVIDIA H100 80GB HBM3")           # smCount 132
    w.process(100, "python")
    w.nvtx_range(T0, T0 + 5 * MS, "step", 100, 100)
    for i in range(3):
        w.kernel(T0 + i * MS + 10_000, T0 + (i + 1) * MS + 10_000, SMALL, 100, corr=i + 1,
                 grid=8)
    w.kernel(T0 + 3 * MS + 10_000, T0 + 4 * MS + 10_000, BIG, 100, corr=9, grid=264, block=384)
    t = traceread.load(w.close())
    assert device_caps(t.meta)["sm_count"] == 132
    o = analyze(t).to_dict()["utilization"]["occupancy"]
    _check(o)
    assert o["occupancy_pct"] is None    # nsys records no occupancy estimate


def test_full_grids_are_not_flagged_and_no_sms_no_coverage():
    b = TraceBuilder()
    b.launch(T0, 5_000, T0 + 10_000, MS, name=BIG, launch='{"grid":[264,1,1],"block":[256,1,1]}')
    t = b.build(devices=[H100])
    o = occupancy_summary(t, caps=device_caps(t.meta))
    assert o["coverage"] == 1.0 and o["underfilled"] is None
    o = occupancy_summary(t, caps={"sm_count": None})
    assert o["coverage"] is None and "SM count" in o["note"]


def test_short_kernel_shares_are_not_rounded_to_ns():
    # kineto's docs trace: one 1-block kernel of 20 ns on 132 SMs. Truncating its SM-idle
    # time to 19 ns read "95% of kernel time leaves SMs empty"; it is 131/132 = 99.2%.
    b = TraceBuilder()
    b.launch(T0, 5, T0 + 10, 20, name=SMALL, launch='{"grid":[1,1,1],"block":[1,1,1]}')
    t = b.build(devices=[H100])
    o = occupancy_summary(t, caps=device_caps(t.meta))
    assert o["underfilled"]["sm_idle_pct"] == pytest.approx(100 * 131 / 132)
    assert o["coverage"] == pytest.approx(1 / 132)
    assert o["sm_idle_ns"] == 20 and o["covered_ns"] == 0


FIX = Path(__file__).parent / "fixtures" / "gpu"


@pytest.mark.parametrize("name,flagged", [("gpu.bad.json.gz", False), ("launch.bad.json.gz", True)])
def test_real_h100_fixtures(name, flagged):
    o = analyze(traceread.load(FIX / name)).to_dict()["utilization"]["occupancy"]
    assert o["sm_count"] == 132
    if flagged:   # 4-block elementwise kernels: 128 of 132 SMs empty
        assert o["coverage"] < 0.1 and o["underfilled"]["kernels"][0]["blocks"] == 4
    else:         # nvjet 2x66 = 132 blocks: every SM
        assert o["coverage"] > 0.95 and o["underfilled"] is None
