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


def _frames(rows: dict[int, dict[str, int]]):
    """``signature`` count and time frames from {step: {"lane\x1fkind\x1fname": ns}}: one
    node per name, but 40 launches a step."""
    import pandas as pd

    cols = sorted({c for r in rows.values() for c in r})
    ns = pd.DataFrame([[rows[s].get(c, 0) for c in cols] for s in sorted(rows)], columns=cols)
    sig = (ns > 0).astype(np.int64)
    sig[[c for c in cols if "\x1flaunch\x1f" in c]] *= 40
    return sig, ns


def test_steps_that_ran_other_work_are_not_learnt_from():
    # steps 1 and 4 open a new epoch: the DataLoader's __iter__ (5% of their time) before a
    # long wait; each learns from the other alone, the ordinary steps from each other. A
    # host stretch named after another op (step 3's "b") is the same work
    it, w, a, b = ("0\x1fdataloader\x1f__iter__", "0\x1fdataloader\x1fnext",
                   "0\x1fhost\x1fa", "0\x1fhost\x1fb")
    k = "0\x1flaunch\x1fcudaLaunchKernel"
    plain = {w: 100, a: 800, k: 100}
    epoch = {it: 600, w: 10_000, a: 800, k: 100}
    sig, ns = _frames({0: plain, 1: epoch, 2: plain, 3: {w: 100, b: 800, k: 100}, 4: epoch})
    assert H.alike(sig, 1, ns).tolist() == [False, False, False, False, True]
    assert H.alike(sig, 0, ns).tolist() == [False, False, True, True, False]
    assert H.alike(sig, 3, ns).tolist() == [True, False, True, False, False]
    # under OTHER_WORK_SHARE of either step's time it is the same step; without the times,
    # the node counts alone decide (as before)
    small = dict(plain, **{it: int(0.5 * H.OTHER_WORK_SHARE * 1_000)})
    sig, ns = _frames({0: plain, 1: small, 2: plain})
    assert H.alike(sig, 0, ns).tolist() == [False, True, True]
    assert H.alike(sig, 0).tolist() == [False, True, True]


def test_persist_after_learns_an_epochs_first_step_from_the_other_first_steps():
    """pairs/persist.after: two of seven steps open an epoch (the DataLoader's __iter__, then
    11 ms waiting for the first batch); the others (1.9-7.0 ms) learnt that wait from them
    and were predicted at ~6 ms."""
    from conftest import FIXTURES

    from traceread.passes.replay import whatif as W

    g, _ = W.graph_of(analyze(str(FIXTURES / "pairs" / "persist.after.json.gz")))   # CPU only
    sig = H.signature(g)
    it = [c for c in sig.columns if "\x1fdataloader\x1f" in c and "__iter__" in c
          and not (sig[c] > 0).all()]
    first = sig[it].to_numpy().sum(axis=1) > 0
    assert first.sum() == 2
    rows = H.leave_one_out(g)
    for r, f in zip(rows, first):
        assert r["learnt_from"] == (1 if f else len(rows) - 3)
    sc = H.score(rows)
    assert sc["outcome"] == "better" and sc["replay_error_pct"] < sc["baseline_error_pct"]


def test_a_host_stretch_named_after_another_op_learns_from_its_place():
    """gpu/graphs.fixed: the 160-260 us before the compiled region's first launch is named
    `AOTDispatcher Runtime Wrapper Prologue` in two steps and `Torch-Compiled Region: 0/0`
    in the third (the op at its middle); held out, that stretch takes its place's time in
    the other steps, not the region's 10 us piece elsewhere."""
    from conftest import FIXTURES

    a = analyze(str(FIXTURES / "gpu" / "graphs.fixed.json.gz"))
    g = a.replay_graph
    n = g.nodes
    host = n[(n["kind"] == "host") & (n["step"] >= 0)].copy()
    host["place"] = host.groupby("step").cumcount()
    big = host.loc[host.groupby("step")["cost_ns"].idxmax()]
    assert big["place"].nunique() == 1 and big["name"].nunique() == 2
    odd = big[~big["name"].duplicated(keep=False)].iloc[0]
    h = H.held_out(g, int(odd["step"]))
    got = int(h.nodes.loc[odd.name, "cost_ns"])
    others = big[big["step"] != odd["step"]]["cost_ns"]
    assert others.min() <= got <= others.max()
