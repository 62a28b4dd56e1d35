"""The vectorised fast paths of the analysis (issue 42, speed) against the per-row code they
replaced, on real captures: the same frames, row for row."""
from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import pytest

from traceread import load
from traceread.analysis import analyze
from traceread.passes import window as window_mod
from traceread.passes.replay import split as split_mod

FIX = Path(__file__).parent / "fixtures"
# GPU captures whose priced graphs cut many host stretches (data loading, Python between ops,
# a CPU-bound step, syncs, a CUDA-graph step) and a CPU-only one
SPLIT_TRACES = [FIX / "gpu" / "data.bad.json.gz", FIX / "gpu" / "host.fixed.json.gz",
                FIX / "gpu" / "sync.bad.json.gz", FIX / "h200" / "queue.fixed.json.gz",
                FIX / "h200" / "xformer.bad.json.gz", FIX / "gpu" / "graphs.bad.json.gz"]


@functools.lru_cache(maxsize=None)
def _graph_and_window(path: Path):
    """The replay's graph of the trace's analysed steps, sampled as the levers price it, and
    the events inside it."""
    a = analyze(load(str(path)))
    if a.replay_graph is None:
        pytest.skip(f"{path.name}: no replay graph")
    ev = a.trace.events
    if a.window.mode != "whole_trace":
        ev = window_mod.slice_events(ev, a.window.start, a.window.end)
    g, _ = split_mod.sample_steps(a.replay_graph)
    return g, split_mod.within(ev, g), a.step_pattern


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()], ids=lambda p: p.name)
@pytest.mark.parametrize("min_ns", [split_mod.SPLIT_MIN_NS, 0])
def test_split_pieces_equal_the_per_stretch_loop(path, min_ns, monkeypatch):
    g, ev, pattern = _graph_and_window(path)
    fast = split_mod.split(g, ev, pattern, min_ns=min_ns)
    monkeypatch.setattr(split_mod, "_piece_table", split_mod._piece_table_loop)
    slow = split_mod.split(g, ev, pattern, min_ns=min_ns)
    assert len(fast.nodes) > len(g.nodes)   # something was cut
    pd.testing.assert_frame_equal(fast.nodes, slow.nodes)
    pd.testing.assert_frame_equal(fast.edges, slow.edges)


def test_split_stretch_mask_reads_each_name_once():
    """``stretches`` classifies the distinct names: a missing name is not a call, as
    ``astype(str)`` ("nan", "None") read it."""
    g, _ev, _p = _graph_and_window(FIX / "gpu" / "sync.bad.json.gz")
    g = g.copy()
    n = g.nodes
    n.loc[n.index[:3], "name"] = [None, float("nan"), "cudaLaunchKernel"]
    g.nodes = n
    host_lane = n["lane"].isin(g.lanes.loc[g.lanes["what"] == "host", "lane"])
    kind = n["kind"].isin(("host", "dataloader", "collective"))
    call = n["name"].astype(str).str.contains(split_mod._CALL_RX, regex=True)
    want = (host_lane & kind & ~call).to_numpy()
    assert (split_mod.stretches(g) == want).all()
