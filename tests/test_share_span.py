"""What a saving's percentage is a share of (verdict/scores.share_span): the GPU's window,
except with no steps, where the whole trace is one run and host work before the first GPU
op (start-up allocations) is saved from the run the replay measured, not from the GPU's
window -- extra-p's concurrent_profile16 read "saves 335 ms (43.1% of the window)" for a
777 ms GPU window whose idle time is 239 ms."""
from __future__ import annotations

from conftest import CORPUS, analysed, corpus_or_skip
from traceread.render.text import action_gain
from traceread.verdict.scores import share_span

MS = 1_000_000


def test_the_span_is_the_window_with_steps_and_the_longer_run_without():
    lev = {"replay_levers": {"before_ns": 900 * MS}}
    assert share_span({"steps": 3, **lev}, 500 * MS) == 500 * MS
    assert share_span({"steps": 0, **lev}, 500 * MS) == 900 * MS
    assert share_span({"steps": 0, "replay_levers": {"before_ns": 100 * MS}}, 500 * MS) == 500 * MS
    assert share_span({"steps": 0}, 500 * MS) == 500 * MS


def test_text_names_the_span():
    x = {"saves_ns": 3 * MS, "saves_pct": 30.0, "saves_pct_of": "run", "cause": "host"}
    assert "(30.0% of the run)" in action_gain(x)
    assert "(30.0% of the window)" in action_gain({**x, "saves_pct_of": None})


def test_start_up_allocations_are_a_share_of_the_run():
    corpus_or_skip()
    d = analysed(CORPUS / "extra-p__extrap/concurrent_profile16.sqlite").to_dict()
    first = d["verdict"]["actions"][0]
    run = d["facts"]["replay"]["measured_ns"]
    gpu_window = d["devices"][0]["window_ns"]
    assert first["basis"] == "replay" and first["saves_pct_of"] == "run"
    assert first["saves_ns"] > d["facts"]["figures"]["idle_ns"]   # more than the GPU's idle
    assert abs(first["saves_pct"] - 100 * first["saves_ns"] / run) < 0.05
    assert run > gpu_window
    assert all(a.get("saves_pct") is None or a["saves_pct"] <= 100 for a in d["verdict"]["actions"])


def test_levers_together_with_no_steps_is_over_the_window():
    corpus_or_skip()
    from traceread.render.report import todo_lines

    d = analysed(CORPUS / "extra-p__extrap/concurrent_profile16.sqlite").to_dict()
    both = d["verdict"]["what_if"]["levers_together"]
    assert both["saves_per_step_ns"] is None and both["saves_ns"] > 0
    line = " ".join(" ".join(todo_lines(d["verdict"])).split())
    assert "not summed: saves ~" in line and "per step" not in line.split("not summed")[1][:40]
