"""A replayed lever gives back at most the window's idle time plus the GPU work its change
removed (``gpu_saved_ns``): a sync dropped, a graph captured, workers added cannot make the
GPU's own work shorter, so the projected step never drops below the GPU's busy time (review
of the replay-priced levers: H100 Qwen promised 13.5 ms from 4 ms of idle)."""
from pathlib import Path

import pytest

from traceread.verdict import levers as L
from traceread.verdict import whatif as W

from conftest import CORPUS  # TRACEREAD_CORPUS where set (a worktree): else skipped silently
QWEN = CORPUS / "AMD-AGI__TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _ctx(saves_ns: int, model: str = "drop_syncs", gpu_saved: int = 0) -> dict:
    r = {"applied": [model], "refused": {}, "saves_ns": saves_ns, "before_ns": 47_000_000,
         "after_ns": 47_000_000 - saves_ns, "gpu_saved_ns": gpu_saved, "per_sample_x": 1.0}
    return {"steps": 1, "devices": 1, "lost_ns": 4_000_000, "step_mean_ns": 47_000_000,
            "replay_levers": {"models": {model: r}}}


def test_a_lever_that_only_feeds_the_gpu_saves_at_most_the_lost_time():
    assert L.replayed(L.BY_ID["remove_syncs"], _ctx(13_500_000)) == 4_000_000
    assert L.replayed(L.BY_ID["cuda_graphs"], _ctx(13_500_000, "cuda_graphs")) == 4_000_000


def test_gpu_work_removed_adds_to_the_cap():
    # fusing kernels shortens the GPU's own work: idle + that work can go
    ctx = _ctx(7_000_000, "fuse_pointwise", gpu_saved=5_000_000)
    assert L.replayed(L.BY_ID["compile_fuse"], ctx) == 7_000_000
    ctx = _ctx(13_500_000, "drop_syncs", gpu_saved=1_000_000)   # the check kernels went too
    assert L.replayed(L.BY_ID["remove_syncs"], ctx) == 5_000_000


def test_unknown_lost_leaves_the_replay():
    ctx = _ctx(13_500_000)
    del ctx["lost_ns"]
    assert L.replayed(L.BY_ID["remove_syncs"], ctx) == 13_500_000


@pytest.mark.skipif(not QWEN.exists(), reason="shared corpus absent")
def test_qwen_sync_lever_never_promises_a_step_below_the_gpu_busy_time():
    # GPU busy 45.4 ms of a 49.4 ms window, 4 ms idle; 13.5 ms of the window's kernels were
    # queued before the trace began (no step): removing the sync cannot give those back
    from traceread import load
    from traceread.analysis import analyze

    v = analyze(load(QWEN)).verdict
    lost = v["evidence"]["lost_ns"]
    sync = next(x for x in v["actions"] if x["id"] == "remove_syncs")
    assert sync["saves_ns"] <= lost + 1_000_000
    assert sync["projected_step_ns"] >= v["evidence"]["step_mean_ns"] - lost - 1_000_000
    tog = v["what_if"].get("levers_together")
    # together: the 4 ms of idle once, plus the GPU work fusion removes -- not 13.5 + 7 ms
    assert tog and tog["saves_ns"] < 13_500_000 + 6_990_000 - 1_000_000


def test_a_launch_bound_never_outranks_the_replayed_graph_capture():
    # H200 queue.bad: the fusion model finds no pointwise chain by name, so compile_fuse keeps
    # the launch cause's bound (3.76 ms/step) -- more than a CUDA graph, which removes every
    # launch and the host work between them, saves when replayed (3.42 ms/step)
    from traceread import load
    from traceread.analysis import analyze

    fix = Path(__file__).parent / "fixtures" / "h200" / "queue.bad.json.gz"
    acts = analyze(load(fix)).verdict["actions"]
    graphs = next(x for x in acts if x["id"] == "cuda_graphs")
    assert graphs["basis"] == "replay"
    for x in acts:
        if x["cause"] == "launch" and x.get("basis") == "bound":
            assert x["saves_ns"] <= graphs["saves_ns"], x["id"]
    assert acts[0]["id"] == "cuda_graphs"
