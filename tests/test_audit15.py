"""Wrong answers found reading corpus traces as a first-time user (audit 15), each pinned on
the trace that showed it, or on a built context where the rule is the table's."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip
from traceread.verdict import levers as L

HTA = "facebookresearch__HolisticTraceAnalysis/tests/data/"
PARAM_ALEXNET = HTA + "critical_path/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz"


def _corpus(rel: str):
    p = corpus_or_skip() / rel
    if not p.is_file():
        pytest.skip(f"{rel} not in the corpus")
    return p


def _ids(a) -> list[str]:
    return [x["id"] for x in a.verdict["actions"]]


# -- a free anywhere in the window is churn, not an allocator still growing ----------------

def test_a_free_outside_the_gaps_top_ops_is_still_churn():
    base = {"pytorch": True, "lost_ns": 100, "alloc_gap_ns": 50}
    # the gaps' 15 largest host ops hold no free, the window holds one (an empty_cache())
    ctx = {**base, "alloc_frees": 0, "device_frees": 1}
    ids = [x["id"] for x in L.offered({"host": 100}, {"alloc": 50}, {}, ctx, 1, ("host",))]
    assert "no_empty_cache" in ids and "allocator_growth" not in ids
    ctx = {**base, "alloc_frees": 0, "device_frees": 0}
    ids = [x["id"] for x in L.offered({"host": 100}, {"alloc": 50}, {}, ctx, 1, ("host",))]
    assert "allocator_growth" in ids and "no_empty_cache" not in ids


def test_param_alexnet_clear_cache_is_churn_not_growth():
    # PARAM's alexnet measure iteration: [param|clear_cache] holds a 9.1 ms cudaFree, then the
    # forward pass mallocs 246 ms again; the cudaFree was 16th of the gaps' host ops (only 15
    # kept) and the trace read "the caching allocator is still growing ... no frees"
    a = analysed(_corpus(PARAM_ALEXNET))
    ids = _ids(a)
    assert "allocator_growth" not in ids
    assert ids[0] == "no_empty_cache"
    assert a.context["device_frees"] >= 1
