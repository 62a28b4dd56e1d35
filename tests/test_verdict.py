"""Verdict rules: thresholds, dominance, mixed, cpu_only/unknown, planted scenarios."""
from __future__ import annotations

import pytest

from traceread.analysis import analyze
from traceread.passes import verdict as V
from traceread.passes.attribution import CPU_CATEGORIES
from traceread.synth import scenarios as sc
from traceread.synth.scenarios import TraceBuilder


def _attr(starved=None, sync=None):
    x = {"starved": {c: 0 for c in CPU_CATEGORIES}, "sync": {c: 0 for c in CPU_CATEGORIES}}
    x["starved"].update(starved or {})
    x["sync"].update(sync or {})
    by_cpu = {c: x["starved"][c] + x["sync"][c] for c in CPU_CATEGORIES}
    return {"drain_x_cpu": x, "by_cpu": by_cpu,
            "by_drain": {d: sum(x[d].values()) for d in x}, "by_sync_op": {}}


def _decide(window, attr, exposed=0):
    idle = sum(attr["by_cpu"].values())
    return V.decide(has_gpu=True, window_ns=window, idle_ns=idle, attr=attr,
                    exposed_comm_ns=exposed)


@pytest.mark.parametrize("name", sorted(sc.SCENARIOS))
def test_planted_scenarios_get_their_verdict(name):
    trace, truth = sc.SCENARIOS[name]()
    v = analyze(trace).verdict
    assert v["bound"] == truth["bound"]
    assert v["levers"] == V.LEVERS[truth["bound"]]
    assert v["evidence"]["idle_ns"] == truth["idle_ns"]


def test_data_share_and_evidence_figures():
    trace, truth = sc.dataloader_bound()
    ev = analyze(trace).verdict["evidence"]
    assert ev["scores_ns"]["data"] == truth["by_cpu"]["dataloader"]
    assert ev["dominant"] == "data"
    assert ev["dominant_pct"] == round(100 * truth["by_cpu"]["dataloader"] / truth["idle_ns"], 2)
    assert ev["idle_pct"] == round(100 * truth["idle_ns"] / truth["window_ns"], 2)


def test_gpu_bound_below_threshold_only():
    a = _attr(starved={"dataloader": 99})
    assert _decide(1000, a)["bound"] == "gpu"            # 9.9% lost
    a = _attr(starved={"dataloader": 100})
    assert _decide(1000, a)["bound"] == "data"           # 10% lost


def test_dominance_lead_and_mixed():
    # 50% share dominates
    assert _decide(100, _attr(starved={"dataloader": 30, "launch": 30}))["bound"] == "data"
    # 40% vs 25%: a lead of 1.6x over the runner-up wins
    a = _attr(starved={"dataloader": 40, "launch": 25, "untraced": 35})
    assert _decide(100, a)["bound"] == "data"
    # 40% vs 30%: no clear lead -> mixed, with levers of both
    a = _attr(starved={"dataloader": 40, "launch": 30, "untraced": 30})
    v = _decide(100, a)
    assert v["bound"] == "mixed" and v["evidence"]["runner_up"] == "launch"
    assert v["levers"] == V.LEVERS["data"][:2] + V.LEVERS["launch"][:2]


def test_sync_counts_whole_refill_and_comms_counts_exposed():
    a = _attr(sync={"sync": 10, "cpu_op": 30, "untraced": 20}, starved={"launch": 10})
    v = _decide(100, a)
    assert v["bound"] == "sync" and v["evidence"]["scores_ns"]["sync"] == 60
    v = _decide(100, _attr(starved={"comm_wait": 5, "launch": 5}), exposed=40)
    assert v["bound"] == "comms" and v["evidence"]["scores_ns"]["comms"] == 45
    assert v["evidence"]["lost_ns"] == 50


def test_unknown_when_the_host_is_untraced():
    v = _decide(100, _attr(starved={"untraced": 60, "launch": 10}))
    assert v["bound"] == "unknown"
    b = TraceBuilder()
    b.gpu("k", 0, 100)
    b.gpu("k", 1000, 100)
    assert analyze(b.build()).verdict["bound"] == "unknown"


def test_cpu_only_trace():
    b = TraceBuilder()
    b.step(0, 0, 1000)
    b.cpu("aten::mm", 10, 500)
    a = analyze(b.build())
    assert a.verdict["bound"] == "cpu_only" and len(a.devices) == 0 and len(a.gaps) == 0
    assert a.to_dict()["gaps"]["total_idle_ns"] == 0


def test_empty_trace():
    a = analyze(TraceBuilder().build())
    assert a.verdict["bound"] == "cpu_only"
    assert a.to_dict()["steps"]["source"] == "whole_trace"


def test_a_clear_cause_beats_untraced_time():
    # 55% untraced, but exposed communication explains 40% with no rival
    v = _decide(100, _attr(starved={"untraced": 55, "launch": 5}), exposed=40)
    assert v["bound"] == "comms"
