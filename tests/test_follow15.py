"""Follow-ups of route15 (2026-11-30): a recording's own first run of its graph is no
replay anywhere; the projected floor beside an overridden projection; host_off_path's
unpriced dispatch printed with the lever."""
from __future__ import annotations

import numpy as np
import pytest

from traceread.passes.graphs import graph_summary
from traceread.synth.scenarios import MS, T0, US, TraceBuilder

from conftest import corpus_or_skip

RECORD_FN = "torch/_inductor/cudagraph_trees.py(2205): record_function"


# -- 1: a graph's first run inside its recording call is not a replay --------------------

def _recorded(launch_inside: bool, replays_after: int = 0):
    """cudagraph trees' recording: record_function holds the stream capture, the
    instantiation and (``launch_inside``) the graph's first launch, 400 us after the
    instantiate returned; ``replays_after`` launches follow once the call returned."""
    b = TraceBuilder()
    b.launch(T0, 5 * US, T0 + 10 * US, 1 * MS)                       # eager warm-up
    b.cpu(RECORD_FN, T0 + 2 * MS, 8 * MS, kind="python")
    b.runtime("cudaStreamBeginCapture", T0 + 2 * MS + 10 * US, 10 * US)
    b.runtime("cudaStreamEndCapture", T0 + 7 * MS, 10 * US)
    b.runtime("cudaGraphInstantiate", T0 + 7 * MS + 20 * US, 980 * US)
    if launch_inside:
        t = T0 + 8 * MS + 400 * US
        b.launch(t, 20 * US, t + 50 * US, 1 * MS, api="cudaGraphLaunch")
    for k in range(replays_after):   # each step: an eager op, then the graph
        t = T0 + 11 * MS + k * 3 * MS
        b.launch(t - 300 * US, 10 * US, t - 250 * US, 100 * US)
        b.launch(t, 20 * US, t + 50 * US, 1 * MS, api="cudaGraphLaunch")
    return b.build()


def test_graph_runs_rule():
    from traceread.passes.graphs import graph_runs

    lane = np.array([0, 0, 0, 0, 1, 1])
    launch = np.array([False, True, True, False, False, True])
    capture = np.array([True, False, False, True, True, False])
    first, replay, after = graph_runs(lane, launch, capture)
    assert first.tolist() == [False, True, False, False, False, True]
    assert replay.tolist() == [False, False, True, False, False, False]
    assert after.tolist() == [False, False, True, True, False, False]


def test_the_first_run_inside_the_recording_is_no_replay():
    """The launch inside record_function, after capture work on its thread, runs the graph
    the recording just made: 1 launch, 1 first run, 0 replays, no replay GPU time."""
    s = graph_summary(_recorded(launch_inside=True))
    assert (s["launches"], s["first_runs"], s["replays"]) == (1, 1, 0)
    assert s["replay_gpu_ns"] == 0 and s["graphs"] == [] and s["uses_cuda_graphs"]
    # the same launches after the recording call returned replay it
    s = graph_summary(_recorded(launch_inside=True, replays_after=2))
    assert (s["launches"], s["first_runs"], s["replays"]) == (3, 1, 2)
    assert s["replay_gpu_ns"] == 2 * MS and s["graphs"][0]["replays"] == 2
    s = graph_summary(_recorded(launch_inside=False, replays_after=2))
    assert (s["launches"], s["first_runs"], s["replays"]) == (2, 0, 2)


def test_graphs_replayed_reads_the_replays_not_the_launches():
    """A whole trace (graphs_not_replayed is not concluded there) whose one graph launch is
    the recording's first run: 'the step already replays CUDA graphs' does not hold."""
    from traceread.verdict.levers import graphs_replayed

    ctx = {"uses_cuda_graphs": True, "graphs_not_replayed": False, "graph_launches": 1}
    assert not graphs_replayed(dict(ctx, graph_replays=0))
    assert graphs_replayed(dict(ctx, graph_replays=1))
    assert graphs_replayed(ctx)          # a record without the count: as before


@pytest.mark.parametrize("rel", ["xdit_flux.1_aiter_sage/capture_traces/capture_trace_rank_0",
                                 "xdit_flux_aiter/capture_traces/capture_rank_0"])
def test_corpus_xdit_capture_replays_nothing(rel):
    """TraceLens xDiT Flux captures: CUDAGraphNode.record 236 ms, then its one hipGraphLaunch
    inside cudagraph_trees' record_function -- a first run. The report no longer says
    '1 replay', and no lever says the step already replays CUDA graphs (xdit_flux_aiter's
    capture, no warm-up frame to withdraw it, offered graph_coverage_inference, 16 ms)."""
    from traceread import load
    from traceread.analysis import analyze
    from traceread.render.report import render_report

    p = corpus_or_skip() / f"AMD-AGI__TraceLens/tests/traces/inference/{rel}.json.gz"
    a = analyze(load(p))
    assert "CUDA graphs: recording" in render_report(a)
    g = a.graphs
    assert (g["launches"], g["first_runs"], g["replays"]) == (1, 1, 0)
    assert a.context["graph_replays"] == 0
    v = a.to_dict()["verdict"]
    why = {w["id"]: w["precondition"] for w in v["withdrawn"]}
    assert why["graph_coverage_inference"] == "graphs_replayed"
    assert "graph_coverage_inference" not in {x["id"] for x in v["actions"]}


# -- 2: the floor beside an overridden projection -----------------------------------------

def test_the_replays_projection_carries_no_floor_it_did_not_meet():
    """gpu/sync.bad: the replay projects removing the syncs to 1.79 ms a step, under the
    GPU's 1.87 ms busy time a step; _gain's own figure stopped at that floor and marked it
    "gpu_busy", which the text printed beside the replay's 1.79 ms."""
    from conftest import analysed
    from traceread.render.text import action_gain
    from pathlib import Path

    a = analysed(Path(__file__).parent / "fixtures" / "gpu" / "sync.bad.json.gz")
    busy = a.facts.figures["busy_step_mean_ns"]
    acts = {x["id"]: x for x in a.to_dict()["verdict"]["actions"]}
    x = acts["remove_syncs"]
    assert x["basis"] == "replay" and x["projected_step_ns"] < busy
    assert x.get("projected_floor") is None
    assert "busy time" not in action_gain(x)


# -- 3: host_off_path's unpriced dispatch, printed with the lever ---------------------------

def test_the_lever_says_what_its_replay_left_unpriced():
    """gpu/host.bad: every step holds 15 ms of json.dumps, so no op ran without it: the
    replay of host_off_path keeps the launching threads' dispatch (1.04 ms a step) at its
    measured time. The item says so in the JSON, the text report and the page."""
    from html import escape
    from pathlib import Path

    from conftest import analysed
    from traceread.render.html import analysis_body
    from traceread.render.report import render_report

    a = analysed(Path(__file__).parent / "fixtures" / "gpu" / "host.bad.json.gz")
    acts = {x["id"]: x for x in a.to_dict()["verdict"]["actions"]}
    note = acts["off_step_path"]["note"]
    kept = a.facts.prices["models"]["host_off_path"]["params"]["host_off_path"]["dispatch_kept"]
    assert note == ("not priced: the launching threads' dispatch, "
                    f"{kept['ns_per_step'] / 1e6:.2f} ms a step -- {kept['why']}")
    assert "every step holds the moved work" in note
    assert "note" not in acts["cuda_graphs"]           # its replay kept nothing unpriced
    assert note in " ".join(render_report(a).split())
    assert escape(note) in analysis_body(a)
