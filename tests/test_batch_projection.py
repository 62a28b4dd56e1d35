"""A larger batch saves per sample; the step itself grows. Its projected step is the step at
k x the batch -- never a "step -> 8.4 ms" (the per-sample figure) on a 16.8 ms step that no
run would show (H100 gpu/data.fixed, launch-bound: the 2x step replays at ~16.9 ms)."""
import json
from pathlib import Path

from traceread import load
from traceread.analysis import analyze
from traceread.render.text import action_gain  # the words every renderer uses

FIX = Path(__file__).parent / "fixtures" / "gpu" / "data.fixed.json.gz"


def test_larger_batch_projects_the_larger_step_and_says_per_sample():
    a = analyze(load(FIX))
    x = next(x for x in a.verdict["actions"] if x["id"] == "larger_batch")
    assert x["basis"] == "replay" and x["per_sample_x"] == 2.0
    step = a.verdict["evidence"]["step_mean_ns"]
    # launch-bound: twice the samples cost about the same step, not half of it
    assert x["projected_step_ns"] >= 0.9 * step
    assert x["saves_per_step_ns"] < step
    words = action_gain(x)
    assert "at 2x the batch" in words and "per step's worth of samples" in words
    json.dumps(a.to_dict())
