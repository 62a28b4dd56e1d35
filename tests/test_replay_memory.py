"""The replay graph's memory (issue 42): copies share columns under copy-on-write and never
let a write through to the original; node kinds are shared label strings, not one Python
string per row."""
from __future__ import annotations

import numpy as np

from traceread.analysis import analyze
from traceread.passes.replay.graph import NODE_KINDS, copy_on_write, labels
from traceread.synth.scenarios import US

from test_replay import sync_loop


def _frame_state(g) -> dict:
    return {k: getattr(g, k).copy(deep=True) for k in ("nodes", "edges", "lanes", "steps")}


def _unchanged(g, before: dict) -> None:
    for k, df in before.items():
        assert getattr(g, k).equals(df), k


def test_transformed_copies_leave_the_graph_as_it_was():
    g = analyze(sync_loop(), steps="all").replay_graph
    before = _frame_state(g)
    n = g.nodes
    calls = n[(n["kind"] == "launch") & (n["step"] == 1)]["id"].tolist()
    merged = g.replace_run(calls[0], calls[-1], name="cudaGraphLaunch", dur_ns=3 * US)  # .loc writes
    scaled = g.scale((n["kind"] == "gpu_kernel").to_numpy(), 0.5)
    removed = g.remove((n["kind"] == "sync_wait").to_numpy())
    c = g.copy()
    c.nodes.loc[0, "dur_ns"] = 123_456_789
    c.steps.loc[0, "end"] = -7
    _unchanged(g, before)
    assert len(merged.nodes) < len(n) and len(removed.nodes) < len(n)
    assert (scaled.nodes["dur_ns"] != n["dur_ns"]).any()
    if copy_on_write():   # a copy shares the columns it has not written
        assert np.shares_memory(c.edges["lag_ns"].to_numpy(), g.edges["lag_ns"].to_numpy())


def test_node_strings_are_shared():
    a = analyze(sync_loop(), steps="all")
    assert set(a.replay_graph.nodes["kind"]) <= set(NODE_KINDS)
    for g in (a.replay_graph, a.facts.graph):   # the replay's and the levers' (split) graph
        for col in (g.nodes["kind"], g.nodes["name"], g.nodes["cat"], g.edges["kind"]):
            v = col.to_numpy(object)   # one object per distinct value, none per row
            assert len({id(x) for x in v}) == len(set(v)), col.name
    got = labels(("a", "b"), np.array([True, False, True]))
    assert got.dtype == object and got.tolist() == ["b", "a", "b"] and got[0] is got[2]


def test_analysis_leaves_no_graph_in_the_whatif_caches(monkeypatch):
    """The levers' base replays (the unprofiled copy and its schedules) and the models'
    caches go with the analysis that priced them: a later analysis prices the same."""
    from traceread.examples import path
    from traceread.passes.replay import hostcost, whatif

    fits = []   # the host-cost fit ran on this trace: its cache had something to let go
    fit = hostcost._fit
    monkeypatch.setattr(hostcost, "_fit", lambda g: fits.append(1) or fit(g))
    first = analyze(path("h200_pageable_copy.json.gz"))
    assert first.facts.graph is not None and "profiler_ns" in first.facts.graph.nodes
    assert not whatif._BARE and not whatif._LAST and not whatif._MEMO
    assert fits and not hostcost._FIT_LAST   # nor the fit's copy of seven node columns
    again = analyze(path("h200_pageable_copy.json.gz"))
    assert again.to_dict() == first.to_dict()


def test_analysis_of_a_trace_whose_frame_is_built_keeps_no_second_table():
    """``analyze`` of a trace whose DataFrame a notebook already built: the empty-trace check
    reads the row count, not ``trace.table`` (which rebuilt the whole table from the frame and
    kept it beside it for the rest of the analysis)."""
    import traceread
    from traceread.examples import path

    t = traceread.load(path("h200_pageable_copy.json.gz"))
    t.events   # noqa: B018 - built first, as in a notebook
    analyze(t)
    assert t.has_frame and t._table is None
