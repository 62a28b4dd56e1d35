"""Leave one step out (issue 37, table (b); passes/replay/holdout.py): the held-out step is
predicted from its graph -- the work it ran -- and the other steps' times, never its own."""
from __future__ import annotations

import numpy as np

from traceread.analysis import analyze
from traceread.passes.replay import holdout as H
from traceread.synth.scenarios import US, TraceBuilder

STEPS = 6
ODD = 3


def _loop_with_odd_step(steps: int = STEPS, odd: int = ODD, extra: int = 2):
    """Each step: launch kernel_A (300 us) and kernel_B (400 us), sync, Python to 1000 us.
    Step ``odd`` launches kernel_B ``extra`` more times (400 us each, back to back on the
    stream), so its sync returns 800 us later: 1800 us. Its kernels are the others' kernels;
    only how many it ran differs."""
    b = TraceBuilder()
    t = 1_000_000
    for k in range(steps):
        more = extra if k == odd else 0
        dur = (1000 + 400 * more) * US
        b.step(k, t, dur)
        b.launch(t + 10 * US, 5 * US, t + 20 * US, 300 * US, name="kernel_A")
        b.launch(t + 30 * US, 5 * US, t + 320 * US, 400 * US, name="kernel_B")
        for i in range(more):
            b.launch(t + 40 * US + 10 * i * US, 5 * US, t + (720 + 400 * i) * US, 400 * US,
                     name="kernel_B")
        call = t + (40 + 10 * more) * US
        b.runtime("cudaStreamSynchronize", call, t + (725 + 400 * more) * US - call)
        t += dur
    return b.build()


def _rows():
    a = analyze(_loop_with_odd_step(), steps="all")
    return a.replay_graph, H.leave_one_out(a.replay_graph)


def test_the_odd_step_is_predicted_from_the_work_it_ran():
    """The model learns the odd step's extra kernel_B runs from the kernel_B the other steps
    ran, and predicts its 1800 us; the median of the other steps says 1000 us. The normal
    steps learn from the steps like them only (the odd one does not pull them)."""
    g, rows = _rows()
    assert len(rows) == STEPS
    odd = [r for r in rows if r["step"] == ODD][0]
    assert odd["measured_ns"] == 1800 * US
    assert abs(odd["predicted_ns"] - odd["measured_ns"]) <= 0.02 * odd["measured_ns"], odd
    assert odd["baseline_ns"] == 1000 * US
    for r in rows:
        if r["step"] != ODD:
            assert r["predicted_ns"] == r["measured_ns"] == 1000 * US, r
            assert r["learnt_from"] == STEPS - 2   # the odd step is not like them
    sc = H.score(rows)
    # one odd step in six: the median error ties (both 0), the mean and the steps do not
    assert sc["outcome"] == "tie" and sc["closer_steps"] == 1
    assert sc["replay_mean_error_pct"] < 1.0
    assert sc["baseline_mean_error_pct"] > 7.0   # 800 / 1800 us missed, one step in six


def test_the_held_out_steps_own_times_never_reach_its_prediction():
    """Every time the held-out step measured -- its nodes' costs, lane gaps and the lags
    into them -- is replaced before the replay: scrambling them changes nothing."""
    g, rows = _rows()
    k = 2   # a normal step inside the window (the first one anchors the replay's start)
    scrambled = g.copy()
    n = scrambled.nodes
    mine = n["step"].to_numpy() == k
    rng = np.random.default_rng(0)
    for col in ("cost_ns", "dur_ns", "gap_ns"):
        v = n[col].to_numpy(np.int64).copy()
        v[mine] = rng.integers(0, 5000 * US, int(mine.sum()))
        n[col] = v
    e = scrambled.edges
    into = np.isin(e["dst"].to_numpy(), n["id"].to_numpy()[mine])
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    lag[into] = rng.integers(-1000 * US, 1000 * US, int(into.sum()))
    e["lag_ns"] = lag
    a, b = H.held_out(g, k), H.held_out(scrambled, k)
    for col in ("cost_ns", "gap_ns"):
        assert a.nodes[col].to_numpy()[mine].tolist() == b.nodes[col].to_numpy()[mine].tolist()
    assert a.edges["lag_ns"].to_numpy()[into].tolist() == \
        b.edges["lag_ns"].to_numpy()[into].tolist()


def test_too_few_steps_are_not_scored():
    """With two steps the baseline is the other step and the model that step replayed:
    no test of the model, no row in the count."""
    a = analyze(_loop_with_odd_step(steps=2, odd=-1), steps="all")
    rows = H.leave_one_out(a.replay_graph)
    assert len(rows) == 2 and H.score(rows) is None


def test_a_step_unlike_every_other_learns_from_the_nearest():
    """``alike``: the steps within ALIKE_SHARE of the nearest one's distance."""
    import pandas as pd

    sig = pd.DataFrame([[10, 0], [10, 0], [10, 1], [40, 0], [41, 0]])
    assert H.alike(sig, 0).tolist() == [False, True, True, False, False]
    assert H.alike(sig, 3).tolist() == [False, False, False, False, True]
    lone = pd.DataFrame([[1, 0], [1, 0], [90, 0]])
    assert H.alike(lone, 2).tolist() == [True, True, False]


def test_validation_table_b_counts_ties_and_unscored_traces_apart():
    """benchmarks whatif --validate --tables b: only table (b); a tie is not a win, a
    2-step trace is said and not counted."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.whatif import validation_tables

    row = {"steps": 3, "replay_mean_error_pct": 1.0, "baseline_mean_error_pct": 2.0,
           "closer_steps": 2}
    r = {"pairs": [], "nsys_kineto": [], "overhead": [], "tables": "b", "loso": [
        {"trace": "a", **row, "replay_error_pct": 1.0, "baseline_error_pct": 2.0,
         "beats_baseline": True, "outcome": "better"},
        {"trace": "b", **row, "replay_error_pct": 2.0, "baseline_error_pct": 2.0,
         "beats_baseline": False, "outcome": "tie"},
        {"trace": "c", "note": "2 steps: too few to score (fewer than 3)"}]}
    out = validation_tables(r)
    assert out.startswith("### (b)") and "### (a)" not in out and "### (d)" not in out
    assert "beats the baseline on 1 of 2 traces (50%; goal 80%), ties on 1, is worse on 0" in out
    assert "1 trace(s) not scored" in out and "too few to score" in out
