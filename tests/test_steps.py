"""Step detection, GPU-op-to-step linkage and step statistics."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceread.passes import steps as S
from traceread.synth.scenarios import MS, US, TraceBuilder


def _ev(b: TraceBuilder) -> pd.DataFrame:
    return b.build().events


def test_duplicated_and_nested_profiler_steps_merge():
    b = TraceBuilder()
    for k, t in enumerate((0, 10 * MS, 20 * MS)):
        b.step(k, t, 10 * MS)                                   # annotation, main thread
        b.cpu(f"ProfilerStep#{k}", t + 1 * US, 10 * MS - 2 * US)  # nested operator copy
        b.step(k, t + 5 * US, 9 * MS, tid=77)                   # copy on another thread
    st, pat = S.find_steps(_ev(b))
    assert pat == S.DEFAULT_STEP_PATTERN
    assert st["step"].tolist() == [0, 1, 2]
    assert st["start"].tolist() == [0, 10 * MS, 20 * MS]
    assert st["dur"].tolist() == [10 * MS] * 3


def test_overlapping_steps_are_clipped_to_the_next_start():
    b = TraceBuilder()
    b.step(1, 0, 12 * MS)
    b.step(2, 10 * MS, 10 * MS)
    st, _ = S.find_steps(_ev(b))
    assert st["end"].tolist() == [10 * MS, 20 * MS]


def test_fallback_and_custom_patterns_unnumbered_ranges():
    b = TraceBuilder()
    b.cpu("step 7", 0, 5 * MS, kind="annotation")
    b.cpu("step 8", 5 * MS, 5 * MS, kind="annotation")
    st, pat = S.find_steps(_ev(b))
    assert pat == S.FALLBACK_STEP_PATTERN and st["step"].tolist() == [7, 8]

    b = TraceBuilder()
    for t in (0, 4 * MS, 8 * MS):
        b.cpu("train_batch", t, 4 * MS, kind="annotation")
        b.cpu("train_batch", t + 1 * US, 3 * MS, kind="annotation")  # nested repeat
    st, pat = S.find_steps(_ev(b), r"^train_batch$")
    assert st["step"].tolist() == [0, 1, 2]
    assert st["dur"].tolist() == [4 * MS] * 3


def test_recurring_step_numbers_stay_separate_when_disjoint():
    b = TraceBuilder()
    b.cpu("iter 0", 0, 1 * MS, kind="annotation")
    b.cpu("iter 1", 1 * MS, 1 * MS, kind="annotation")
    b.cpu("iter 0", 5 * MS, 1 * MS, kind="annotation")
    st, _ = S.find_steps(_ev(b))
    assert st["start"].tolist() == [0, 1 * MS, 5 * MS]
    assert st["dur"].tolist() == [1 * MS] * 3


def test_no_steps_gives_empty_and_whole_window():
    b = TraceBuilder()
    b.cpu("aten::mm", 100, 50)
    ev = _ev(b)
    st, _ = S.find_steps(ev)
    assert len(st) == 0
    w = S.whole_trace_window(ev)
    assert (int(w["start"][0]), int(w["end"][0])) == (100, 150)


def test_gpu_ops_belong_to_the_step_that_launched_them():
    b = TraceBuilder()
    b.step(0, 0, 10 * MS)
    b.step(1, 10 * MS, 10 * MS)
    # launched late in step 0, runs entirely inside step 1's host time
    b.launch(9 * MS, 10 * US, 12 * MS, 3 * MS)
    # launched in step 1
    b.launch(11 * MS, 10 * US, 15 * MS, 1 * MS)
    # a GPU op with no launch record: placed by its own start (step 1)
    b.gpu("orphan", 16 * MS, 1 * MS)
    ev = _ev(b)
    st, _ = S.find_steps(ev)
    ops = S.gpu_ops(ev)
    k = S.step_of_gpu_ops(st, ops)
    assert ops["launch_ts"].tolist() == [9 * MS, 11 * MS, -1]
    assert k.tolist() == [0, 1, 1]
    tab = S.step_table(st, ops, k)
    assert tab["gpu_ops"].tolist() == [1, 2]
    # step 1: ops [15, 16) and [16, 17) ms touch -> union 2 ms
    assert tab["busy_ns"].tolist() == [3 * MS, 2 * MS]
    assert tab["gpu_start"].tolist() == [12 * MS, 15 * MS]
    assert tab["gpu_end"].tolist() == [15 * MS, 17 * MS]


def test_correlation_ids_are_matched_per_process():
    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", 100, 10, pid=1, correlation=5)
    b.runtime("cudaLaunchKernel", 300, 10, pid=2, correlation=5)
    b.gpu("k", 400, 10, pid=2, correlation=5)
    b.gpu("k", 200, 10, pid=1, correlation=5)
    ops = S.gpu_ops(_ev(b))
    assert ops.sort_values("ts")["launch_ts"].tolist() == [100, 300]


@pytest.mark.parametrize("seed", range(5))
def test_grouped_union_total_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, groups = 300, 7
    g = rng.integers(0, groups, n)
    s = rng.integers(0, 1000, n)
    e = s + rng.integers(0, 60, n)
    got = S.grouped_union_total(g, s, e, groups)
    for k in range(groups):
        cover = np.zeros(1100, bool)
        for a, z in zip(s[g == k], e[g == k]):
            cover[a:z] = True
        assert got[k] == cover.sum()


def test_step_stats_and_bursty_flag():
    st = S.step_stats([10, 10, 10, 40])
    assert st["mean_ns"] == 18 and st["median_ns"] == 10  # 17.5 rounds to even
    assert st["p90_ns"] == 31 and st["min_ns"] == 10 and st["max_ns"] == 40
    assert st["cv"] == round(np.std([10, 10, 10, 40]) / 17.5, 4)
    assert st["bursty"] is True
    steady = S.step_stats([100, 101, 99, 100])
    assert steady["bursty"] is False and steady["cv"] < 0.01
    assert S.step_stats([]) is None
    assert S.step_stats([5, 50])["bursty"] is False  # fewer than 3 steps: never bursty


def test_idle_in_span_splits_gaps_at_step_boundaries():
    steps = pd.DataFrame({"pid": [1, 1, 2], "start": [0, 10 * MS, 0],
                          "end": [10 * MS, 20 * MS, 20 * MS]})
    # pid 1: a gap across the boundary (8..13 ms), one inside step 1, one after every step;
    # device 1 of pid 1 overlaps device 0 in time: summed over devices
    gaps = pd.DataFrame({"pid": [1, 1, 1, 1, 2], "device": [0, 0, 0, 1, 0],
                         "start": [8 * MS, 15 * MS, 25 * MS, 9 * MS, 5 * MS],
                         "end": [13 * MS, 16 * MS, 30 * MS, 11 * MS, 6 * MS]})
    assert S.idle_in_span(steps, gaps).tolist() == [3 * MS, 5 * MS, 1 * MS]
    whole = pd.DataFrame({"pid": [-1], "start": [0], "end": [100 * MS]})
    assert S.idle_in_span(whole, gaps).tolist() == [14 * MS]
    assert S.idle_in_span(steps, gaps.iloc[:0]).tolist() == [0, 0, 0]


def test_gpu_ops_positive_ts_is_the_filtered_frame():
    """nsys leaves out ops before the session start: choosing the rows first gives the
    frame that filtering the whole one gives (launch linkage is per op)."""
    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", -50, 10, pid=1, correlation=1)
    b.gpu("early", -20, 10, pid=1, correlation=1)
    b.gpu("at_zero", 0, 5, pid=1, correlation=2)
    b.runtime("cudaLaunchKernel", 10, 10, pid=1, correlation=3)
    b.gpu("k", 30, 10, pid=1, correlation=3)
    b.runtime("cudaLaunchKernel", 40, 10, pid=2, correlation=3)
    b.gpu("k", 60, 10, pid=2, correlation=3)
    ev = _ev(b)
    whole = S.gpu_ops(ev)
    want = whole[whole["ts"] > 0].reset_index(drop=True)
    got = S.gpu_ops(ev, positive_ts=True)
    pd.testing.assert_frame_equal(got, want)
    assert got["launch_ts"].tolist() == [10, 40]


def _optimizer_loop(b: TraceBuilder, ends_ms, tid=None, name="Optimizer.step#SGD.step"):
    for e in ends_ms:
        b.cpu(name, (e - 2) * MS, 2 * MS, kind="annotation", tid=tid)


def test_no_step_markers_iterations_end_with_the_optimizer_step():
    """No ProfilerStep or step-like range: a training loop's iterations run from the end of
    one optimizer step to the end of the next (the whole trace was one window before)."""
    b = TraceBuilder()
    _optimizer_loop(b, (10, 25, 41, 55))
    b.cpu("Optimizer.step#SGD.step", 53 * MS, 1 * MS, kind="cpu_op")   # nested second record
    b.cpu("Optimizer.step#SGD.step", 30 * MS, 1 * MS, kind="annotation", tid=99)  # other thread
    st, pat = S.find_steps(_ev(b))
    assert pat == S.OPTIMIZER_STEP_PATTERN
    assert st["step"].tolist() == [1, 2, 3]
    assert st["start"].tolist() == [10 * MS, 25 * MS, 41 * MS]
    assert st["end"].tolist() == [25 * MS, 41 * MS, 55 * MS]
    assert set(st["tid"]) == {b.tid}
    # one iteration (two optimizer steps) is not a loop; a given pattern is not overridden
    b2 = TraceBuilder()
    _optimizer_loop(b2, (10, 25))
    assert not len(S.find_steps(_ev(b2))[0])
    assert not len(S.find_steps(_ev(b), r"^nothing$")[0])
    # markers win where they exist
    b.step(1, 0, 60 * MS)
    assert S.find_steps(_ev(b))[1] == S.DEFAULT_STEP_PATTERN


def test_optimizer_steps_in_an_analysis(tmp_path):
    """The analysis reports the inferred iterations as steps of source "optimizer", and the
    optimizer's own range is a phase of the step, not a step marker (its host time is
    attributed like any op's)."""
    import traceread
    from traceread.synth.kineto import write_kineto

    b = TraceBuilder(path="opt.json")
    for k in range(5):
        t = k * 10 * MS
        b.op_with_kernel("aten::mm", t + 1 * MS, 3 * MS, 10 * US, 10 * US, t + 1 * MS + 50 * US,
                         2 * MS, name="ampere_sgemm_128x64_nn")
        b.cpu("Optimizer.step#SGD.step", t + 8 * MS, 1 * MS, kind="annotation")
    p = write_kineto(b.build(), tmp_path / "opt.json")
    a = traceread.analyze(p)
    assert a.step_source == "optimizer" and a.to_dict()["steps"]["source"] == "optimizer"
    assert len(a.steps) == 4 and (a.steps["dur"] == 10 * MS).all()
    from traceread.render.report import render_steps
    assert "Steps: 4 (iterations, from one Optimizer.step#SGD.step end to the next: no step " \
        "markers)" in " ".join(render_steps(a).split())
    from traceread.render.html import analysis_body
    assert "4 steps (iterations, from one optimizer step's end to the next" in analysis_body(a)
