"""A trace that only records CUDA graphs (vLLM's start-up capture, the whole trace, no steps)
is not "a program whose graphs replay already": the replay-graphs model refuses without
withdrawing the capture levers, which keep their bound; and a replayed lever's ``because``
names its saving even where the window has no steps (never ``=None``)."""

import pytest

from traceread.passes.replay import whatif as W
from traceread.verdict.whatif import withdrawn

from test_whatif import G, US, saves

from conftest import CORPUS  # TRACEREAD_CORPUS where set (a worktree): else skipped silently
VLLM = CORPUS / ("AMD-AGI__TraceLens/tests/traces/inference/vllm_decode_full/capture_traces/"
                 "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
CTX = {"uses_cuda_graphs": True, "graphs_not_replayed": False}


def _graph(replay: bool):
    g = G()
    g.h("host", "hipStreamBeginCapture", 50 * US, cat="graph_capture")
    a = g.h("launch", "hipLaunchKernel", 5 * US)
    g.k("k", 2 * US, a)
    if replay:
        b = g.h("launch", "hipGraphLaunch", 5 * US)
        g.k("g", 2 * US, b)
    return g.build()


def test_recorded_never_replayed_is_not_unfit():
    r = saves(_graph(False), ["replay_graphs"], W.Facts(ctx=CTX))
    assert r["applied"] == [] and not withdrawn(r)


def test_replayed_graphs_withdraw_the_lever():
    r = saves(_graph(True), ["replay_graphs"], W.Facts(ctx=CTX))
    assert r["refused"]["replay_graphs"].startswith(
        "the program's CUDA graphs are replayed already")
    assert withdrawn(r)


@pytest.mark.skipif(not VLLM.exists(), reason="shared corpus absent")
def test_vllm_startup_capture_keeps_its_capture_lever():
    from traceread import load
    from traceread.analysis import analyze

    v = analyze(load(VLLM)).verdict
    assert v["bound"] == "graph_capture"
    # the engine's start-up (capture_model frames): the start-up lever, no per-step capture
    # advice (issue 39: start-up traces are not steady steps)
    first = v["actions"][0]
    assert first["id"] == "startup_capture"
    assert "capture_in_warmup" in {str(w["id"]) for w in v["withdrawn"]}
    for x in v["actions"]:
        if x.get("basis") == "replay":
            assert x["because"][0]["value"] is not None, x["id"]
