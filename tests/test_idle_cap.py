"""A replayed lever that only feeds the GPU (drop a sync, CUDA graphs, workers, ...) gives
back idle time: it never saves more than the window's lost time, and its projected step never
drops below the GPU's busy time (review of the replay-priced levers)."""
from pathlib import Path

import pytest

from traceread.verdict import levers as L
from traceread.verdict import whatif as W

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
QWEN = CORPUS / "AMD-AGI__TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _ctx(saves_ns: int, model: str = "drop_syncs") -> dict:
    r = {"applied": [model], "refused": {}, "saves_ns": saves_ns, "before_ns": 47_000_000,
         "after_ns": 47_000_000 - saves_ns}
    return {"steps": 1, "devices": 1, "lost_ns": 4_000_000, "step_mean_ns": 47_000_000,
            "replay_levers": {"models": {model: r}}}


def test_idle_only_lever_saves_at_most_the_lost_time():
    ctx = _ctx(13_500_000)
    assert L.replayed(L.BY_ID["remove_syncs"], ctx) == 4_000_000
    assert L.replayed(L.BY_ID["cuda_graphs"], _ctx(13_500_000, "cuda_graphs")) == 4_000_000


def test_gpu_work_lever_is_not_capped_by_idle():
    # fusing kernels shortens the GPU's own work: more than the idle time can go
    ctx = _ctx(7_000_000, "fuse_pointwise")
    assert L.replayed(L.BY_ID["compile_fuse"], ctx) == 7_000_000


def test_idle_cap_unknown_lost_leaves_the_replay():
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
    for x in v["actions"]:
        if W.MODEL_OF.get(x["id"]) in W.IDLE_ONLY_MODELS and x["saves_ns"] is not None:
            assert x["saves_ns"] <= lost, x["id"]
    sync = next(x for x in v["actions"] if x["id"] == "remove_syncs")
    assert sync["projected_step_ns"] >= v["evidence"]["step_mean_ns"] - lost - 1000
    tog = v["what_if"].get("levers_together")
    if tog:
        own = sum(x["saves_ns"] for x in v["actions"] if x.get("basis") == "replay"
                  and W.MODEL_OF.get(x["id"]) not in W.IDLE_ONLY_MODELS
                  and W.MODEL_OF.get(x["id"]) in tog["models"])
        assert tog["saves_ns"] <= lost + own
