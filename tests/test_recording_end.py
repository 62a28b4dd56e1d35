"""A step range the profiler closed after it stopped recording (Kineto's "Record Window
End" instant) ends with the recording: HTA's triton example holds a ProfilerStep#1 of 13.3 s
whose recording lasted 1.8 ms, and was read as 13.3 s of untraced host time to move off the
step."""
import pandas as pd

from traceread.passes.steps import _clip_to_recording, recording_end

from conftest import analysed, corpus_or_skip

TRITON = "facebookresearch__HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz"


def test_a_step_closed_after_the_recording_ends_with_it():
    a = analysed(corpus_or_skip() / TRITON)
    ev = a.trace.events
    end = recording_end(ev)
    assert end is not None
    st = a.steps.iloc[0]
    assert st["end"] == end and st["dur"] < 2_000_000
    assert a.verdict["evidence"]["window_ns"] < 2_000_000
    assert all(x.get("saves_per_step_ns") is None or x["saves_per_step_ns"] < 2_000_000
               for x in a.verdict["actions"])


def test_only_steps_running_at_the_stop_are_clipped():
    steps = pd.DataFrame({"index": [0, 1], "step": [1, 2], "name": ["a", "b"], "pid": [1, 1],
                          "tid": [1, 1], "start": [0, 100], "end": [100, 500],
                          "dur": [100, 400]})
    out = _clip_to_recording(steps, 300)
    assert out["end"].tolist() == [100, 300] and out["dur"].tolist() == [100, 200]
    assert _clip_to_recording(steps, None) is steps
    assert _clip_to_recording(steps, 600) is steps


def test_the_time_after_the_recording_is_said_to_be_unrecorded():
    a = analysed(corpus_or_skip() / TRITON)
    ex = {x["what"]: x for x in a.window.excluded}
    after = ex["after the recording stopped"]
    assert after["ns"] > 13_000_000_000 and "nothing recorded" in after["reason"]
    assert "after the last analysed step" not in ex or ex["after the last analysed step"]["ns"] < 1_000_000
