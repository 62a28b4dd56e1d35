"""Kernel / duration summaries with nsys stats' statistics and formatting."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import traceread
from traceread.passes.kernels import (kernel_summary, render_summary, round1, summarize)
from traceread.synth.nsys import PLANTED, write_planted
from traceread.table import Trace, TraceMeta, build_table


def _trace(rows):
    """rows: (ts, dur, kind, name)"""
    ts, dur, kind, name = zip(*rows)
    cols = {"ts": np.array(ts), "dur": np.array(dur), "kind": list(kind), "name": list(name),
            "pid": np.ones(len(rows), np.int64), "device": np.zeros(len(rows), np.int64)}
    return Trace(build_table(cols, len(rows)), TraceMeta(format="kineto"))


def test_summary_exact_stats():
    s = summarize(["b", "a", "a", "a", "b", "c"], [10, 1, 2, 6, 30, 7])
    assert s["name"].tolist() == ["b", "a", "c"]
    a = s.set_index("name").loc["a"]
    assert (a.total_ns, a.instances, a.min_ns, a.max_ns) == (9, 3, 1, 6)
    assert a.avg_ns == 3.0 and a.med_ns == 2.0
    assert a.stddev_ns == pytest.approx(np.std([1, 2, 6], ddof=1), rel=1e-15)
    b = s.set_index("name").loc["b"]
    assert b.med_ns == 20.0  # even count: mean of the two middle values
    assert s["pct"].sum() == pytest.approx(100.0)
    assert s.set_index("name").loc["c"].stddev_ns == 0.0  # one instance: 0, not NaN


def test_summary_order_ties():
    """nsys: total desc, then instances asc, then name."""
    s = summarize(["z", "y", "y", "x", "w"], [10, 5, 5, 10, 10])
    assert s["name"].tolist() == ["w", "x", "z", "y"]


def test_summary_matches_groupby_on_random_data():
    rng = np.random.default_rng(7)
    names = rng.choice(list("abcdefg"), 5000)
    durs = rng.integers(1, 10**7, 5000)
    s = summarize(names, durs).set_index("name").sort_index()
    ref = pd.DataFrame({"n": names, "d": durs}).groupby("n")["d"]
    assert (s["total_ns"] == ref.sum()).all()
    assert (s["med_ns"] == ref.median()).all()
    assert np.allclose(s["stddev_ns"], ref.std(ddof=1), rtol=1e-12)
    assert (s["min_ns"] == ref.min()).all() and (s["max_ns"] == ref.max()).all()


def test_empty_summary():
    s = kernel_summary(_trace([(0, 5, "runtime", "cudaMalloc")]))
    assert len(s) == 0
    assert render_summary(s, "csv").splitlines() == [
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name"]


def test_round_half_away_from_zero():
    assert round1([0.25, 0.35, 2.45, 17600202.5, 1.04999, 0.0]).tolist() == [
        0.3, 0.4, 2.5, 17600202.5, 1.0, 0.0]


def test_csv_format_and_quoting():
    t = _trace([(0, 3, "kernel", "f(int, float)"), (10, 4, "kernel", "f(int, float)"),
                (20, 2, "kernel", "g"), (30, 99, "memcpy", "[CUDA memcpy Host-to-Device]")])
    out = render_summary(kernel_summary(t), "csv")
    assert out == ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
                   "StdDev (ns),Name\n"
                   '77.8,7,2,3.5,3.5,3,4,0.7,"f(int, float)"\n'
                   "22.2,2,1,2.0,2.0,2,2,0.0,g\n")


def test_text_and_json_formats():
    t = _trace([(0, 1234567, "kernel", "k")])
    text = render_summary(kernel_summary(t), "text")
    assert "1,234,567" in text and text.splitlines()[1].startswith("--------")
    import json
    rec = json.loads(render_summary(kernel_summary(t), "json"))
    assert rec == [{"Time (%)": 100.0, "Total Time (ns)": 1234567, "Instances": 1,
                    "Avg (ns)": 1234567.0, "Med (ns)": 1234567.0, "Min (ns)": 1234567,
                    "Max (ns)": 1234567, "StdDev (ns)": 0.0, "Name": "k"}]


def test_planted_nsys_kernel_summary(tmp_path):
    t = traceread.load(write_planted(tmp_path / "p.sqlite"))
    s = kernel_summary(t)
    got = [(r.name, r.total_ns, r.instances, r.avg_ns, r.med_ns, r.min_ns, r.max_ns,
            r.stddev_ns) for r in s.itertuples()]
    assert got == PLANTED["kernels"]


def test_summary_huge_durations_fall_back_to_lexsort():
    big = 2**61
    s = summarize(["a", "b", "c", "a"], [big, 1, 2, 0]).set_index("name")
    assert s.loc["a", "total_ns"] == big and s.loc["a", "min_ns"] == 0
    assert s.loc["a", "max_ns"] == big and s.loc["a", "med_ns"] == big / 2


def test_summary_categorical_with_missing_names():
    import pandas as pd
    names = pd.Series(pd.Categorical(["x", None, "x", "unused"], categories=["x", "unused", "zz"]))
    s = summarize(names, [1, 2, 3, 4])
    assert sorted(zip(s["name"], s["instances"])) == [("", 1), ("unused", 1), ("x", 2)]
