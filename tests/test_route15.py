"""Audit of 2026-11-30 (route15): wrong answers found in the morning's audit."""
from pathlib import Path

import pytest

from traceread import load
from traceread.analysis import analyze

FIX = Path(__file__).parent / "fixtures"


# -- H: a sampled CPU-only trace is not replayed -----------------------------------------

@pytest.fixture(scope="module")
def cut_sampled(tmp_path_factory):
    """hta_sampled_rank-1 cut at 30,000 bytes: the cut .json.gz keeps CPU events only; its
    External id gaps say ~99% of the events were dropped (sampled)."""
    p = tmp_path_factory.mktemp("cut") / "cut.json.gz"
    p.write_bytes((FIX / "kineto" / "hta_sampled_rank-1.json.gz").read_bytes()[:30_000])
    return analyze(load(p))


def test_a_sampled_cpu_only_window_prices_no_lever_by_replay(cut_sampled):
    a = cut_sampled
    assert not len(a.devices)
    assert a.replay["reason"].startswith("events were dropped (sampled trace)")
    assert a.facts.graph is None
    acts = a.to_dict()["verdict"]["actions"]
    assert not [x["id"] for x in acts if x.get("basis") == "replay"]


def test_a_host_only_window_without_sampling_is_still_replayed():
    a = analyze(load(FIX / "anatomy" / "accum.json.gz"))
    assert a.replay["reason"] == "no GPU work in the window"
    acts = {x["id"]: x.get("basis") for x in a.to_dict()["verdict"]["actions"]}
    assert acts.get("larger_batch") == "replay"


def test_the_diffs_graph_of_a_sampled_cpu_only_window_is_refused(cut_sampled):
    from traceread.passes.replay.whatif import graph_of

    g, why = graph_of(cut_sampled)
    assert g is None and why.startswith("events were dropped (sampled trace)")
