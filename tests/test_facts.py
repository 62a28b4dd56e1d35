"""The facts record (passes/facts.py) and the verdict judged from it alone (issue 29): the
record holds what the verdict reads, each program fact proved by an event of the window, and
every offered lever says which facts made it apply (``because``)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from traceread.passes.facts import WindowFacts
from traceread.verdict import decide
from traceread.verdict import levers as L
from traceread.verdict.because import because_text, facts_read

from conftest import analysed

FIX = Path(__file__).parent / "fixtures" / "gpu"


@pytest.fixture(scope="module")
def alloc():
    """H100 recording: empty_cache() churn, launch-bound eager steps, no CUDA graphs."""
    return analysed(FIX / "alloc.bad.json.gz")


def _record(a, **change) -> WindowFacts:
    """A copy of the analysis' record; ``graph=None``: without the replayed graph (every
    lever priced by its bound, the predicates alone decide)."""
    f = a.facts
    return WindowFacts(figures=copy.deepcopy(f.figures), program=copy.deepcopy(f.program),
                       evidence=copy.deepcopy(f.evidence), frames=change.pop("frames", f.frames),
                       graph=change.pop("graph", f.graph), replay=change.pop("replay", f.replay))


def test_the_record_holds_what_the_verdict_reports(alloc):
    f = alloc.facts
    ev = alloc.verdict["evidence"]
    assert f.figures["window_ns"] == ev["window_ns"] and f.figures["idle_ns"] == ev["idle_ns"]
    assert f.figures["cause_ns"]["host"] > 0 and f.figures["steps"] == alloc.step_stats["count"]
    assert f.program is alloc.context          # the JSON's context is the record's program
    assert set(f.frames) >= {"gaps", "top_ops", "steps", "kernels", "collectives"}
    assert all(v is not alloc.trace.events for v in f.frames.values())
    d = alloc.to_dict()["facts"]
    json.dumps(d)
    assert d["frames"]["gaps"] == len(alloc.gaps) and d["program"]["pytorch"] is True


def test_decide_reads_the_record_alone(alloc):
    # no frame, no event table: the same verdict
    assert decide(_record(alloc, frames={})) == alloc.verdict


def test_a_fact_changed_in_the_record_changes_the_levers(alloc):
    ids = [x["id"] for x in decide(_record(alloc, frames={}, graph=None))["actions"]]
    assert "cuda_graphs" in ids
    # replayed, the capture fits: the launches (and the mallocs between them, which a graph's
    # private pool absorbs) come before the step's sync; empty_cache()'s frees come after the
    # last launch. Dropping empty_cache() still saves the most.
    acts = [x["id"] for x in alloc.verdict["actions"]]
    assert "cuda_graphs" in acts and acts[0] == "no_empty_cache"
    rec = _record(alloc, frames={}, graph=None)
    rec.program["uses_cuda_graphs"] = True
    got = [x["id"] for x in decide(rec)["actions"]]
    # graphs set up but none launched in the window: never "already replays" (issue 39)
    assert "cuda_graphs" not in got and "graph_coverage_inference" not in got
    rec.program["graph_launches"] = 12
    # launched, but each launch a recording's own first run: still nothing replays
    got = [x["id"] for x in decide(rec)["actions"]]
    assert "cuda_graphs" not in got and "graph_coverage_inference" not in got
    rec.program["graph_replays"] = 12
    got = [x["id"] for x in decide(rec)["actions"]]
    assert "cuda_graphs" not in got and "graph_coverage_inference" in got   # no backward


def test_program_facts_are_proved_by_events_of_the_window(alloc):
    f, events = alloc.facts, alloc.trace.events
    names = set(events["name"].astype(str).unique())
    (proof,) = f.evidence["pytorch"]
    assert proof["name"] in names and proof["ts_ns"] is not None
    first = events.loc[events["name"].astype(str) == proof["name"], "ts"].min()
    assert proof["ts_ns"] == int(first)
    assert proof["step"] in set(alloc.steps["step"].tolist())
    # a false fact is read from the absence of any proving event: an empty list
    assert alloc.context["uses_cuda_graphs"] is False and f.evidence["uses_cuda_graphs"] == []
    assert alloc.context["compiled"] is False and f.evidence["compiled"] == []


def test_because_names_the_facts_the_predicates_read(alloc):
    # a lever priced by the replay stands on its model's replayed saving
    replayed = next(x for x in alloc.verdict["actions"] if x["basis"] == "replay")
    assert replayed["because"][0]["fact"].startswith("replay_levers.")
    act = {x["id"]: x for x in decide(_record(alloc, graph=None))["actions"]}   # bounds
    why = {b["fact"]: b for b in act["cuda_graphs"]["because"]}
    # what priced it, then what its predicates (pytorch, no_graphs) read
    assert act["cuda_graphs"]["because"][0]["fact"] == "cause_ns.launch"
    assert why["cause_ns.launch"]["value"] == alloc.verdict["evidence"]["scores_ns"]["launch"]
    assert why["uses_cuda_graphs"] == {"fact": "uses_cuda_graphs", "value": False,
                                       "known": True, "evidence": []}
    assert why["pytorch"]["value"] is True and why["pytorch"]["evidence"]
    # a busy-time lever stands on the busy figure it was priced on (without the replay: on
    # alloc.bad the host paces the GPU, and its critical path caps kernel savings)
    act = {x["id"]: x for x in decide(_record(alloc, graph=None, replay=None))["actions"]}
    busy = act["compile_pointwise"]["because"][0]
    assert busy["fact"] == "busy_levers.torch_compile" and "busy time" in busy["value"]
    # every item of every action carries its because
    assert all("because" in x for x in alloc.verdict["actions"])
    assert all("because" in x for x in act.values())


def test_facts_read_follows_the_predicates():
    lv = L.BY_ID["channels_last_generic"]
    keys = facts_read(lv, {"pytorch": True, "bound": "gpu", "convolutions": True})
    assert keys[:2] == ["pytorch", "bound"] and "convolutions" in keys and "busy_levers" in keys
    # a missing key is unknown to the predicate: the item says so
    from traceread.verdict.because import because

    items = because(L.BY_ID["channels_last"], {"pytorch": True}, {})
    conv = next(x for x in items if x["fact"] == "convolutions")
    assert conv["known"] is False and conv["value"] is None and conv["evidence"] is None


def test_the_text_report_says_why(alloc):
    text = alloc.report("text")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("because:")]
    assert lines and any("no CUDA graphs in use" in ln for ln in lines)   # words, not fact ids
    assert not any("uses_cuda_graphs" in ln for ln in lines)
    assert because_text([{"fact": "cause_ns.sync", "value": 2_500_000, "known": True,
                          "evidence": None}]) == "sync time 2.5 ms"
    # a known fact with nothing in it reads as its absence, never a raw "=None" / "={}"
    empty = [{"fact": "periodic_stall", "value": None, "known": True, "evidence": None},
             {"fact": "startup", "value": {}, "known": True, "evidence": None}]
    assert because_text(empty) == "no periodic_stall; no startup"
    assert not any("=None" in ln or "={}" in ln for ln in lines)
