"""The profiler's cost per traced runtime / driver call (passes/overhead.py ``CALL_NS``):
fitted on traces with planted call overhead, and the H200 / H100 captures whose CUPTI cost
sits in their launches and allocator calls estimated nearer their unprofiled runs."""
from __future__ import annotations

import json
import statistics

import pytest

from traceread.analysis import analyze
from traceread.passes import overhead as O
from traceread.passes.replay.sim import simulate
from traceread.passes.replay.whatif import step_mean
from traceread.synth.scenarios import US, TraceBuilder

from conftest import FIXTURES, analysed

PLANTED_NS = 2_000   # CUPTI's cost per launch call in the synthetic "profiled" traces


def _launch_loop(launches: int, steps: int = 4):
    """Host-bound steps: ``launches`` back-to-back 8 us launch calls of 2 us kernels, the
    step 20 us longer than its launches."""
    b = TraceBuilder()
    step = launches * 10 * US + 20 * US
    for k in range(steps):
        t = 1_000_000 + k * step
        b.step(k, t, step)
        for i in range(launches):
            at = t + 10 * US + i * 10 * US
            b.launch(at, 8 * US, at + 5 * US, 2 * US, name=f"kernel_{i % 3}")
    return b.build()


def _unprofiled(graph, ev, profiled_ns: float, call_ns: dict) -> float:
    """The unprofiled step with these per-call costs (as ``estimate`` with a replay)."""
    g = O.mark(graph, ev, call_ns)
    bare = O.without(g)
    return profiled_ns * step_mean(simulate(bare), bare) / step_mean(simulate(g), g)


def _sample(launches: int) -> dict:
    a = analyze(_launch_loop(launches), steps="all")
    o = a.facts.figures["profiler_overhead"]
    assert o["calls_per_step"]["launch"] == launches
    # the program without the profiler: every launch call PLANTED_NS shorter
    truth = o["profiled_step_ns"] - launches * PLANTED_NS
    return {"pair": f"loop{launches}", "graph": a.facts.graph, "ev": a.trace.events,
            "profiled": o["profiled_step_ns"], "truth": truth}


def _predict(s: dict, call_ns: dict) -> float:
    return _unprofiled(s["graph"], s["ev"], s["profiled"], call_ns)


def test_fitted_per_call_cost_recovers_the_planted_one():
    samples = [_sample(n) for n in (20, 40, 60)]
    grid = {"launch": [0, 1000, 2000, 3000], "driver": [0], "alloc": [0], "free": [0],
            "other": [0, 1000]}
    fitted = O.fit_call_ns(samples, _predict, grid)
    assert fitted == {"launch": PLANTED_NS, "driver": 0, "alloc": 0, "free": 0, "other": 0}
    for r in O.leave_one_pair_out(samples, _predict, grid):
        # fitted on the two other loops, the held-out one is predicted within 1%
        assert r["call_ns"]["launch"] == PLANTED_NS
        assert abs(r["predicted_ns"] - r["sample"]["truth"]) / r["sample"]["truth"] < 0.01


def test_call_cost_never_exceeds_the_call():
    b = TraceBuilder()
    b.runtime("cudaStreamIsCapturing", 1_000, 700)
    b.runtime("cudaMalloc", 5_000, 90 * US)
    b.runtime("cudaFree", 50 * US, 9 * US)
    b.runtime("cuLaunchKernelEx", 100 * US, 6 * US, kind="driver")
    ev = b.build().events
    calls = ev[ev["kind"].isin(O.CALL_KINDS)].sort_values("ts")
    assert list(O.call_class(calls)) == ["other", "alloc", "free", "driver"]
    per = {"launch": 500, "driver": 2_000, "alloc": 20_000, "free": 30_000, "other": 1_000}
    got = O.call_cost(calls, per)
    assert list(got) == [700, 20_000, 9 * US, 2_000]


def _plain(folder: str, stem: str) -> float:
    st = json.loads((FIXTURES / folder / f"{stem}.plain.truth.json").read_text())["step_ns"]
    return statistics.median(v for k, v in st.items() if int(k) >= 2)


@pytest.mark.parametrize("folder,stem", [("h200", "queue.bad")])
def test_call_costs_bring_the_estimate_nearer_the_plain_run(folder, stem):
    """queue.bad: 800 traced launch calls a step on a host-bound loop. The estimate with the
    fitted per-call costs lies nearer the plain run than the one without them (alloc.bad's
    frees are not fitted: one pair only, overhead.CALL_NS)."""
    a = analysed(FIXTURES / folder / f"{stem}.json.gz")
    o = a.facts.figures["profiler_overhead"]
    assert o["basis"] == "replay" and o["call_ns"] == O.CALL_NS
    truth = _plain(folder, stem)
    zero = {c: 0 for c in O.CALL_NS}
    before = _unprofiled(a.facts.graph, a.trace.events, o["profiled_step_ns"], zero)
    assert abs(o["unprofiled_step_ns"] - truth) < abs(before - truth) - 0.02 * truth


def test_host_only_step_loses_its_calls_cost_too():
    """No replay (no GPU work): the busiest thread's ops and its traced calls come off."""
    b = TraceBuilder()
    for k in range(4):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        for i in range(100):
            b.cpu("aten::add", t + 10 * US + i * 4 * US, 3 * US)
        b.runtime("cudaFree", t + 500 * US, 80 * US)
    o = analyze(b.build(), steps="all").facts.figures["profiler_overhead"]
    assert o["basis"] == "host ops" and o["calls_per_step"]["free"] == 1
    assert o["overhead_step_ns"] == 100 * O.PER_OP_NS + min(O.CALL_NS["free"], 80 * US)


def test_calls_as_nsys_records_them_carry_no_cost():
    """The per-call costs were fitted on Kineto captures; nsys records every driver call."""
    b = TraceBuilder()
    b.runtime("cudaFree", 1_000, 80 * US)
    b.add("driver", "cuMemFree_v2", 100 * US, 70 * US, cat="CUPTI_ACTIVITY_KIND_RUNTIME",
          pid=b.pid, tid=b.tid)
    c = O.costs(b.build().events)
    assert list(c["ns"]) == [min(O.CALL_NS["free"], 80 * US)]
