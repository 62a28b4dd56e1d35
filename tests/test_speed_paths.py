"""The vectorised fast paths of the analysis (issue 42, speed) against the per-row code they
replaced, on real captures: the same frames, row for row."""
from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceread import load
from traceread.analysis import analyze
from traceread.passes import steady
from traceread.passes import window as window_mod
from traceread.passes.replay import graph as graph_mod
from traceread.passes.replay import split as split_mod

FIX = Path(__file__).parent / "fixtures"
# GPU captures whose priced graphs cut many host stretches (data loading, Python between ops,
# a CPU-bound step, syncs, a CUDA-graph step) and a CPU-only one
SPLIT_TRACES = [FIX / "gpu" / "data.bad.json.gz", FIX / "gpu" / "host.fixed.json.gz",
                FIX / "gpu" / "sync.bad.json.gz", FIX / "h200" / "queue.fixed.json.gz",
                FIX / "h200" / "xformer.bad.json.gz", FIX / "gpu" / "graphs.bad.json.gz"]


@functools.lru_cache(maxsize=None)
def _analysed(path: Path):
    """One analysis per fixture, shared by the tests that only read it."""
    return analyze(load(str(path)))


@functools.lru_cache(maxsize=None)
def _graph_and_window(path: Path):
    """The replay's graph of the trace's analysed steps, sampled as the levers price it, and
    the events inside it."""
    a = _analysed(path)
    if a.replay_graph is None:
        pytest.skip(f"{path.name}: no replay graph")
    ev = a.trace.events
    if a.window.mode != "whole_trace":
        ev = window_mod.slice_events(ev, a.window.start, a.window.end)
    g, _ = split_mod.sample_steps(a.replay_graph)
    return g, split_mod.within(ev, g), a.step_pattern


def _piece_table_loop(n: pd.DataFrame, cand: np.ndarray, lane_key: dict, outer: dict,
                      ts: np.ndarray, end: np.ndarray, label: np.ndarray,
                      names: np.ndarray) -> dict:
    """``split._piece_table`` one stretch at a time (``_pieces``): the code it replaced."""
    import bisect

    by_thread = {k: (t.tolist(), e.tolist(), o.tolist()) for k, (t, e, o) in outer.items()}
    label, names = label.tolist(), names.tolist()
    P = {c: [] for c in split_mod._PIECE_COLS}
    drop = []
    cols = {c: n[c].to_numpy().tolist() for c in ("lane", "ts_ns", "dur_ns", "step", "seq",
                                                  "gap_ns", "release_ns", "id")}
    neg = int(split_mod.NEG)
    for i in cand.tolist():
        lane = int(cols["lane"][i])
        k = lane_key.get(lane)
        if k not in by_thread:
            continue
        s0 = cols["ts_ns"][i]
        s1 = s0 + cols["dur_ns"][i]
        t, e, o = by_thread[k]
        lo = bisect.bisect_right(e, s0)   # both sorted: outermost ops do not overlap
        hi = bisect.bisect_left(t, s1)
        if hi - lo < 1:
            continue
        pieces = _pieces(s0, s1, t[lo:hi], e[lo:hi], o[lo:hi], label, names)
        m = len(pieces)
        if m < 2:
            continue
        drop.append(i)
        a, b, c, nm = zip(*pieces)
        P["step"] += [cols["step"][i]] * m
        P["lane"] += [lane] * m
        P["seq"] += [cols["seq"][i]] * m
        P["sub"] += range(m)
        P["kind"] += ["dataloader" if x == "dataloader" else
                      "collective" if x == "comm_wait" else "host" for x in c]
        P["name"] += nm
        P["cat"] += c
        P["ts_ns"] += a
        P["dur_ns"] += [y - x for x, y in zip(a, b)]
        P["gap_ns"] += [cols["gap_ns"][i]] + [0] * (m - 1)
        P["release_ns"] += [cols["release_ns"][i]] + [neg] * (m - 1)
        P["was"] += [cols["id"][i]] * m
        P["last"] += [False] * (m - 1) + [True]
    out = {c: np.asarray(P[c], object if c in ("kind", "name", "cat") else
                         bool if c == "last" else np.int64) for c in split_mod._PIECE_COLS}
    out["drop"] = drop
    return out


def _pieces(s0, s1, t, e, o, label, names) -> list[tuple[int, int, str, str]]:
    """(start, end, category, name) pieces tiling [s0, s1): the ops (starts ``t``, ends
    ``e``, rows ``o``: lists) clipped to it, and the untraced stretches between them."""
    out = []
    at = s0
    for a, b, r in zip(t, e, o):
        a, b = max(a, s0), min(b, s1)
        if b <= a:
            continue
        if a > at:
            out.append((at, a, "untraced", "untraced"))
        out.append((a, b, label[r], names[r]))
        at = b
    if at < s1:
        out.append((at, s1, "untraced", "untraced"))
    return out


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()], ids=lambda p: p.name)
@pytest.mark.parametrize("min_ns", [split_mod.SPLIT_MIN_NS, 0])
def test_split_pieces_equal_the_per_stretch_loop(path, min_ns, monkeypatch):
    g, ev, pattern = _graph_and_window(path)
    fast = split_mod.split(g, ev, pattern, min_ns=min_ns)
    monkeypatch.setattr(split_mod, "_piece_table", _piece_table_loop)
    slow = split_mod.split(g, ev, pattern, min_ns=min_ns)
    assert len(fast.nodes) > len(g.nodes)   # something was cut
    pd.testing.assert_frame_equal(fast.nodes, slow.nodes)
    pd.testing.assert_frame_equal(fast.edges, slow.edges)


def _lane_load_by_unique(graph) -> dict:
    """``whatif.lane_load`` as it was: the (step, lane) keys by ``np.unique``."""
    import numpy as np

    from traceread.passes.replay import whatif

    got = whatif.gpu_lane_costs(graph)   # the same nodes; only the keying was replaced
    if got is None:
        return {}
    step, lane, ns = got
    key, inv = np.unique(step * (int(lane.max()) + 1) + lane, return_inverse=True)
    tot = np.bincount(inv, weights=ns)
    out: dict = {}
    for s_, v in zip((key // (int(lane.max()) + 1)).tolist(), tot.tolist()):
        out[s_] = max(out.get(s_, 0), int(v))
    return out


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()], ids=lambda p: p.name)
def test_lane_load_equals_the_sorted_keys(path):
    from traceread.passes.replay import whatif

    g, _ev, _p = _graph_and_window(path)
    assert whatif.lane_load(g) == _lane_load_by_unique(g)
    sparse = g.copy()   # step numbers far apart: the sorted path
    sparse.nodes["step"] = sparse.nodes["step"].where(sparse.nodes["step"] < 0,
                                                      sparse.nodes["step"] * 1_000_003)
    assert whatif.lane_load(sparse) == _lane_load_by_unique(sparse)


def test_lane_order_is_the_lexsort():
    import numpy as np

    from traceread.passes.replay.sim import lane_order

    rng = np.random.default_rng(7)
    for n, lanes, seqs in ((0, 1, 1), (1, 1, 1), (500, 3, 40), (5000, 40, 3), (2000, 2, 10**6)):
        lane = rng.integers(-5, lanes, n).astype(np.int64)
        seq = rng.integers(-3, seqs, n).astype(np.int64)   # ties too: the stable order kept
        assert (lane_order(lane, seq) == np.lexsort((seq, lane))).all()
    big = np.array([0, 2**40, 5, 2**40], np.int64)   # a key too wide for one int64
    assert (lane_order(big, big[::-1].copy()) == np.lexsort((big[::-1], big))).all()


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()][:3], ids=lambda p: p.name)
def test_lane_order_and_drain_edges_on_real_graphs(path):
    import numpy as np

    from traceread.passes.replay.graph import END_EDGES
    from traceread.passes.replay.sim import _among, lane_order

    g, _ev, _p = _graph_and_window(path)
    lane, seq = g.nodes["lane"].to_numpy(np.int64), g.nodes["seq"].to_numpy(np.int64)
    assert (lane_order(lane, seq) == np.lexsort((seq, lane))).all()
    kinds = g.edges["kind"].to_numpy(object)
    assert (_among(kinds, END_EDGES) == np.isin(kinds, END_EDGES)).all()
    odd = np.array(["drain", None, float("nan"), "join", "x", 3], object)
    assert (_among(odd, END_EDGES) == np.isin(odd, END_EDGES)).all()


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()][:4], ids=lambda p: p.name)
def test_overhead_call_costs_and_total_equal_the_mapped_frame(path):
    import numpy as np

    from traceread.passes import overhead

    ev = load(str(path)).events
    calls = overhead._calls(ev, ("pid", "tid", "ts"))
    assert len(calls)
    for per in (None, {"launch": 500, "driver": 7_000}, {"launch": 333.7, "other": 1000,
                                                        "free": 20_000, "alloc": 10_000}):
        cls = overhead.call_class(calls)
        want = pd.Series(cls, dtype=object).map(overhead.CALL_NS if per is None else per) \
            .fillna(0).to_numpy(np.int64)
        want = np.minimum(want, np.maximum(calls["dur"].to_numpy(np.int64), 0))
        assert (overhead.call_cost(calls, per) == want).all()
    feats, total = overhead.cost_features(ev, 7)
    assert total == int(overhead.costs(ev)["ns"].sum())
    by_class = pd.Series(overhead.call_class(overhead._calls(ev, ()))).value_counts()
    assert feats["calls_per_step"] == {c: round(float(by_class.get(c, 0)) / 7, 1)
                                       for c in overhead.CALL_NS}
    assert feats == overhead.features(ev, 7)


def test_median_of_counts_is_np_median():
    import numpy as np

    from traceread.passes.steady import median_of_counts

    rng = np.random.default_rng(3)
    cases = [np.array([5]), np.array([1, 2]), np.array([1, 1, 4, 9]), np.array([0, 0, 0]),
             rng.integers(0, 3, 1001), rng.integers(0, 3, 1000), rng.integers(1, 50, 20000),
             np.r_[np.ones(5000, np.int64), [285_002] * 3], rng.integers(0, 10**9, 50),
             np.array([-1, 2, 3])]
    for d in cases:
        assert median_of_counts(d.astype(np.int64)) == float(np.median(d)), d[:10]


def _slow_firsts_frame(name, ts, dur, pid) -> tuple:
    """``steady._slow_firsts`` by pandas (the code it replaced)."""
    df = pd.DataFrame({"name": name, "ts": ts, "dur": dur, "pid": pid})
    df = df.sort_values("ts", kind="stable")
    again = df.duplicated(["pid", "name"]).to_numpy()   # not the (pid, name)'s first row
    first = df[~again].set_index(["pid", "name"])
    later = df[again].groupby(["pid", "name"])["dur"].agg(["median", "size"])
    j = first.join(later, how="inner")
    j = j[(j["size"] >= steady.FIRST_MIN_LATER) & (j["dur"] >= steady.OUTLIER_MIN_NS)
          & (j["dur"] >= steady.FIRST_RATIO * np.maximum(j["median"], 1))]
    return (j.index.get_level_values(0).to_numpy(np.int64),
            j.index.get_level_values(1).to_numpy(np.int64), j["ts"].to_numpy(np.int64),
            j["dur"].to_numpy(np.int64), j["median"].to_numpy(np.float64))


@pytest.mark.parametrize("path", [p for p in SPLIT_TRACES if p.exists()][:4], ids=lambda p: p.name)
@pytest.mark.parametrize("loose", [False, True])
def test_slow_first_rows_equal_the_groupby(path, loose, monkeypatch):
    import numpy as np

    from traceread.passes import steady
    from traceread.passes.common import kind_in

    if loose:   # every (pid, name) with later rows qualifies: the order and medians compared
        monkeypatch.setattr(steady, "OUTLIER_MIN_NS", 0)
        monkeypatch.setattr(steady, "FIRST_RATIO", 0)
    ev = load(str(path)).events
    codes, _cats = steady._codes(ev)
    for kinds in (("cpu_op",), ("kernel",), ("runtime", "driver")):
        rows = np.flatnonzero(kind_in(ev, kinds) & (codes >= 0))
        args = (codes[rows], ev["ts"].to_numpy(np.int64)[rows],
                ev["dur"].to_numpy(np.int64)[rows], ev["pid"].to_numpy(np.int64)[rows])
        fast, slow = steady._slow_firsts(*args), _slow_firsts_frame(*args)
        assert len(fast[0]) or not loose
        for a, b in zip(fast, slow):
            assert a.tolist() == b.tolist()


def test_slow_first_rows_on_ties_and_processes(monkeypatch):
    import numpy as np

    from traceread.passes import steady

    monkeypatch.setattr(steady, "FIRST_RATIO", 1.5)   # some firsts pass, some do not

    rng = np.random.default_rng(11)
    n = 4000
    args = (rng.integers(0, 30, n), rng.integers(0, 500, n) * 1000,   # equal ts: ties
            rng.integers(1, 4_000_000, n), rng.integers(0, 3, n))
    args = tuple(np.asarray(a, np.int64) for a in args)
    fast, slow = steady._slow_firsts(*args), _slow_firsts_frame(*args)
    assert 0 < len(fast[0]) < 90
    for a, b in zip(fast, slow):
        assert a.tolist() == b.tolist()


def test_slow_first_rows_with_names_too_wide_for_one_key(monkeypatch):
    import numpy as np

    from traceread.passes import steady

    monkeypatch.setattr(steady, "FIRST_RATIO", 1.5)
    rng = np.random.default_rng(5)
    n = 3000
    name = rng.choice(np.array([0, 2**61, 7, 2**61 + 3], np.int64), n)
    args = (name, rng.integers(0, 300, n) * 10, rng.integers(1, 4_000_000, n),
            rng.integers(0, 5, n).astype(np.int64))
    fast, slow = steady._slow_firsts(*args), _slow_firsts_frame(*args)
    assert len(fast[0])
    for a, b in zip(fast, slow):
        assert a.tolist() == b.tolist()


def test_stacks_shared_inside_an_analysis_answer_as_fresh_ones():
    import numpy as np

    from traceread.passes import factkit
    from traceread.passes.userframe import culprit_frame

    ev = load(str(FIX / "gpu" / "sync.bad.json.gz")).events
    assert factkit.stacks_of(ev) is not factkit.stacks_of(ev)   # no scope: nothing kept
    with factkit.sharing():
        a = factkit.stacks_of(ev)
        assert factkit.stacks_of(ev) is a
        assert factkit.stacks_of(ev, ("cpu_op",)) is not a
        assert factkit.stacks_of(ev.copy()) is not a              # another frame
        rows = np.flatnonzero(ev["kind"].isin(["cpu_op", "runtime"]).to_numpy())[::97]
        fresh = factkit.Stacks(ev)
        for r in rows.tolist():
            assert a.around_row(r).tolist() == fresh.around_row(r).tolist()
        shared = culprit_frame(ev, "aten::item")
        factkit.drop_shared()
        assert factkit.stacks_of(ev) is not a   # dropped: a new one
    assert not factkit._SHARING
    assert shared == culprit_frame(ev, "aten::item")


def test_stacks_are_not_kept_by_a_forked_worker(monkeypatch):
    import os

    from traceread.passes import factkit

    ev = load(str(FIX / "gpu" / "sync.bad.json.gz")).events
    with factkit.sharing():
        a = factkit.stacks_of(ev)
        monkeypatch.setattr(os, "getpid", lambda: -1)   # as a child forked inside the scope
        assert factkit.stacks_of(ev) is not a
        assert factkit.stacks_of(ev) is not factkit.stacks_of(ev)


def test_last_position_of_each_correlation_is_the_dict_lookup():
    import numpy as np

    from traceread.passes.preconditions import _last_at

    rng = np.random.default_rng(2)
    for n in (0, 1, 50, 5000):
        keys = rng.integers(-3, max(1, n // 3), n).astype(np.int64)   # repeats and -1s
        wanted = rng.integers(-2, max(1, n // 2), 300).astype(np.int64)
        pos = {int(c): i for i, c in enumerate(keys) if c >= 0}
        assert _last_at(keys, wanted).tolist() == [pos.get(int(w), -1) for w in wanted]


@pytest.mark.parametrize("path", sorted((FIX / "anatomy").glob("*.json.gz"))[:6]
                         + [p for p in SPLIT_TRACES if p.exists()][:2], ids=lambda p: p.name)
def test_anatomy_class_codes_select_the_rows_the_names_do(path):
    """``anatomy._cls`` (small-int class codes) against the object compares it replaced,
    for every class the trace has and one it does not, whole and per step slice."""
    import numpy as np

    from traceread.passes import anatomy

    ev = load(str(path)).events
    steps = anatomy._steps(ev)
    if not len(steps):
        pytest.skip("no steps")
    host = anatomy._host(ev, int(steps["pid"].iat[0]))
    names, codes = anatomy._host_classes(ev, host["rows"])
    assert (codes == host["cls_i"]).all()
    host["cls"] = names   # the names the codes stand for (the pass keeps only the codes)
    classes = sorted(set(host["cls"].tolist())) + ["no_such_class"]
    assert len(classes) > 2
    lo, hi = np.searchsorted(host["ts"], [steps["start"].iat[0], steps["end"].iat[0]])
    part = {k: v[lo:hi] for k, v in host.items()}
    for h in (host, part):
        for c in classes:
            assert (anatomy._cls(h, c) == (h["cls"] == c)).all(), c
        assert (anatomy._cls(h, *classes[:3]) == np.isin(h["cls"], classes[:3])).all()


@pytest.mark.parametrize("min_gap", [0, 5_000, 10**12])
def test_json_largest_gaps_are_the_sorted_frame_head(min_gap):
    """``render.json._gaps``: the 20 longest listed gaps by position, as the stable sort of
    the listed frame gave them (ties on duration included)."""
    from traceread.render.json import _gaps, gap_records

    a = analyze(load(str(FIX / "gpu" / "sync.bad.json.gz")), min_gap_ns=min_gap)
    g = a.gaps.copy()
    g.loc[g.index[:40], "duration"] = 7_000   # ties
    a.gaps = g
    listed = a.listed_gaps()
    want = listed.sort_values(["duration", "start"], ascending=[False, True],
                              kind="stable").head(20)
    got = _gaps(a)
    assert got["largest"] == gap_records(want)
    assert got["listed"] == len(listed) and got["count"] == len(g)
    assert got["listed_ns"] == (int(listed["duration"].sum()) if len(listed) else 0)


def test_kind_in_equals_isin_for_every_kind_set():
    """``kind_in`` (compares of the int8 codes, or of the codes that miss, or a lookup
    table) against pandas' ``isin`` on a categorical column with nulls: every size of
    kind set, with and without the null."""
    import itertools

    import numpy as np
    import pandas as pd

    from traceread.passes.common import kind_in

    cats = ["cpu_op", "python", "annotation", "runtime", "driver", "kernel", "memcpy",
            "memset", "gpu_annotation", "sync", "osrt", "instant", "other", "graph",
            "k14", "k15", "k16", "k17", "k18", "k19"]
    rng = np.random.default_rng(5)
    codes = rng.integers(-1, len(cats), 5000).astype(np.int8)
    ev = pd.DataFrame({"kind": pd.Categorical.from_codes(codes, categories=cats)})
    plain = ev.astype({"kind": object})
    for size in range(len(cats) + 1):
        for start in (0, 3, 7):
            kinds = tuple(itertools.islice(itertools.cycle(cats), start, start + size))
            for extra in ((), (None,), ("not a kind",)):
                want = ev["kind"].isin(kinds + extra).to_numpy()
                got = kind_in(ev, kinds + extra)
                assert got.dtype == bool and got.tolist() == want.tolist(), (kinds, extra)
                if extra != (None,):   # (an object column's nulls are NaN, not None)
                    assert kind_in(plain, kinds + extra).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_far_from_trace_no_gap_shortcut_flags_the_same_rows(seed, monkeypatch):
    """validate's shortcut (no gap over GAP_NS known from the span, or from starts in
    order) against the full sort, on sorted starts with steps and tails at GAP_NS +- 1."""
    from traceread.readers import validate

    G = validate.GAP_NS
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    steps = rng.choice([0, 1, 1000, G // 3, G - 1, G, G + 1], n,
                       p=[.2, .2, .3, .15, .06, .06, .03] if seed % 2 else
                       [.2, .2, .3, .3, 0, 0, 0])
    ts = np.cumsum(steps).astype(np.int64) - int(rng.integers(0, 2)) * G
    dur = rng.choice([0, 5, G // 2, G - 1, G, G + 1, -3], n,
                     p=[.3, .3, .2, .05, .05, .05, .05]).astype(np.int64)
    if seed % 4 == 0:
        ts = ts[rng.permutation(n)]   # starts out of order: the sort decides
    end = ts + np.maximum(dur, 0)
    fast = validate._far_from_trace(ts, end, dur)
    monkeypatch.setattr(validate, "_no_gap", lambda ts, end: False)
    np.testing.assert_array_equal(fast, validate._far_from_trace(ts, end, dur))


@pytest.mark.parametrize("path", SPLIT_TRACES[:4], ids=lambda p: p.name)
def test_models_priced_with_the_base_graphs_answers_kept_price_the_same(path, monkeypatch):
    """``price_models`` keeps the base graph's kind / cat / name answers for its copies
    (whatif ``_on_base``): every model's replay is the same without that."""
    import contextlib

    from traceread.passes.replay import whatif as W

    a = _analysed(path)
    if a.facts is None or a.facts.graph is None:
        pytest.skip(f"{path.name}: no levers' graph")
    args = (a.facts.graph, a.context, a.copies, a.facts.frames.get("optimizer_regions"))
    kept = W.price_models(*args)["models"]
    monkeypatch.setattr(W, "_base_graph", lambda g: contextlib.nullcontext())
    assert W.price_models(*args)["models"] == kept


def test_base_graph_answers_follow_a_copy_that_edits_its_columns():
    """A copy whose kind / name column was edited (in place after its first write, or
    replaced) gets fresh answers, the untouched copies the kept ones."""
    from traceread.passes.replay import whatif as W

    g = _graph_and_window(SPLIT_TRACES[0])[0]
    kinds = ("gpu_kernel", "gpu_copy")
    want = g.nodes["kind"].isin(kinds).to_numpy()
    with W._base_graph(g):
        a = g.copy()
        assert W._kind(a, *kinds).tolist() == want.tolist()
        got = W._kind(a, *kinds)
        got[:] = False   # a caller editing its mask does not edit the kept one
        assert W._kind(g.copy(), *kinds).tolist() == want.tolist()
        b = g.copy()
        i = int(np.flatnonzero(want)[0])
        b.nodes.loc[i, "kind"] = "host_op"          # the copy's first write copies the column
        b.nodes.loc[i + 1, "kind"] = "gpu_kernel"   # later writes land in the copy's own
        assert W._kind(b, *kinds).tolist() == b.nodes["kind"].isin(kinds).to_numpy().tolist()
        b.nodes.loc[i + 2, "kind"] = "host_op"
        assert W._kind(b, *kinds).tolist() == b.nodes["kind"].isin(kinds).to_numpy().tolist()
        c = g.copy()
        c.nodes["name"] = "x" + c.nodes["name"].astype(str)
        assert W._str_names(c).tolist() == c.nodes["name"].astype(str).tolist()
        assert W._kind(g, *kinds).tolist() == want.tolist()
    assert W._BASE["cols"] is None and not W._BASE["memo"]


@pytest.mark.parametrize("path", SPLIT_TRACES, ids=lambda p: p.name)
def test_profiler_marks_from_the_graphs_span_equal_the_whole_windows(path, monkeypatch):
    """``overhead.mark`` reads only the events starting inside the host nodes' span: the
    same ``profiler_ns`` as from every event of the window."""
    from traceread.passes import overhead

    g, _ev, _pattern = _graph_and_window(path)
    a = _analysed(path)
    ev = a.trace.events
    if a.window.mode != "whole_trace":
        ev = window_mod.slice_events(ev, a.window.start, a.window.end)
    fast = overhead.mark(g, ev).nodes
    monkeypatch.setattr(overhead, "_in_span", lambda ev, n, host: ev)
    slow = overhead.mark(g, ev).nodes
    assert fast["profiler_ns"].tolist() == slow["profiler_ns"].tolist()
    assert slow["profiler_ns"].sum() > 0 or path.name.startswith("graphs")


@pytest.mark.parametrize("seed", range(20))
def test_comm_calls_order_is_sort_values_order(seed):
    """``parallelism.comm_calls`` orders its calls by one ``np.lexsort`` of (pid, tid, ts,
    end descending): the order ``sort_values`` of those keys gave, ties in row order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    df = pd.DataFrame({"pid": rng.integers(0, 3, n), "tid": rng.integers(-2, 3, n),
                       "ts": rng.integers(0, 20, n), "end": rng.integers(0, 25, n),
                       "row": np.arange(n)})
    want = df.sort_values(["pid", "tid", "ts", "end"], ascending=[1, 1, 1, 0])["row"]
    got = np.lexsort((-df["end"].to_numpy(), df["ts"].to_numpy(), df["tid"].to_numpy(),
                      df["pid"].to_numpy()))
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("path", SPLIT_TRACES, ids=lambda p: p.name)
def test_overhead_calls_per_class_equal_value_counts(path):
    """``overhead._features``' calls per class (counted per distinct name) against the
    ``value_counts`` of every call's class it replaced."""
    from traceread.passes import overhead

    ev = load(str(path)).events
    calls = overhead._calls(ev, ())
    f, _total = overhead.cost_features(ev, 1)
    per_call = overhead.call_class(calls) if len(calls) else np.zeros(0, object)
    cls = pd.Series(per_call, dtype=object).value_counts()
    assert f["calls_per_step"] == {c: round(float(cls.get(c, 0)), 1) for c in overhead.CALL_NS}
    assert len(calls) == 0 or sum(f["calls_per_step"].values()) > 0 or not len(cls)


# -- round 5 -----------------------------------------------------------------------------


def _label_index_by_compares(graph) -> np.ndarray:
    """``critical._label_index`` as it was: ten object compares per node, later rules win."""
    kind = graph.nodes["kind"].to_numpy(object)
    cat = graph.nodes["cat"].to_numpy(object)
    out = np.zeros(len(kind), np.int64)
    out[kind == "launch"] = 1
    out[(kind == "gpu_kernel") | (kind == "gpu_memset")] = 2
    out[kind == "gpu_copy"] = 3
    out[(kind == "sync_wait") | (cat == "sync")] = 4
    out[(kind == "dataloader") | (cat == "dataloader")] = 5
    out[(kind == "collective") | (cat == "comm_wait")] = 6
    return out


@pytest.mark.parametrize("path", SPLIT_TRACES[:4], ids=lambda p: p.name)
def test_critical_path_lookups_equal_the_object_compares(path):
    from traceread.passes.replay import critical

    g, _ev, _pat = _graph_and_window(path)
    assert np.array_equal(critical._label_index(g), _label_index_by_compares(g))
    what = g.lanes.set_index("lane")["what"]
    lane = g.nodes["lane"].to_numpy(np.int64)
    want = what.reindex(lane).to_numpy(object) == "gpu"
    assert want.any() and np.array_equal(graph_mod.on_gpu_lane(g.lanes, lane), want)


def test_label_index_and_gpu_lane_on_crafted_nodes():
    from traceread.passes.replay import critical
    from traceread.passes.replay.graph import StepGraph

    kinds = ["host", "launch", "gpu_kernel", "gpu_memset", "gpu_copy", "sync_wait", "dataloader",
             "collective", None, "launch", "host", "gpu_copy"]
    cats = ["sync", "dataloader", "comm_wait", None, "x", "sync", "comm_wait", "sync",
            "dataloader", "comm_wait", "other", "sync"]
    lanes = pd.DataFrame({"lane": [7, 3, 5], "what": ["gpu", "host", "gpu"]})
    nodes = pd.DataFrame({"kind": pd.Series(kinds, dtype=object),
                          "cat": pd.Series(cats, dtype=object),
                          "lane": [7, 3, 5, 9, 3, 7, 5, 5, 3, 7, -1, 5]})
    g = StepGraph(nodes=nodes, edges=pd.DataFrame(), lanes=lanes, steps=pd.DataFrame())
    assert np.array_equal(critical._label_index(g), _label_index_by_compares(g))
    want = lanes.set_index("lane")["what"].reindex(nodes["lane"].to_numpy()).to_numpy(object) \
        == "gpu"
    assert np.array_equal(graph_mod.on_gpu_lane(lanes, nodes["lane"].to_numpy(np.int64)), want)
    with pytest.raises(ValueError):   # as reindex on duplicate lanes
        graph_mod.on_gpu_lane(pd.DataFrame({"lane": [1, 1], "what": ["gpu", "host"]}),
                           np.array([1]))


def test_launch_and_graph_launch_names_per_distinct_name_equal_per_row():
    from traceread.passes import overhead
    from traceread.passes.replay.graph import KERNEL_LAUNCH_RX, kernel_launch_calls

    names = np.array(["cudaLaunchKernel", "cuLaunchKernelEx", "hipModuleLaunchKernel",
                      "cudaGraphLaunch", "cuGraphLaunch_v2", "cudaMemcpyAsync", None, np.nan,
                      "xcudaLaunchKernel", "cudaLaunchCooperativeKernel", ""] * 3, object)
    want = np.array([bool(KERNEL_LAUNCH_RX.match(str(n))) for n in names])
    assert np.array_equal(kernel_launch_calls(names), want) and want.sum() == 18
    assert kernel_launch_calls(np.array([], object)).shape == (0,)
    col = pd.Series(names, dtype=object)
    at = np.array([0, 3, 4, 5, 8, 10, 14, 15])
    ref = col.iloc[at].astype(str).str.contains(overhead.GRAPH_LAUNCH, regex=True).to_numpy()
    assert np.array_equal(overhead._graph_launches(col, at), ref.astype(bool))
    nulls = np.array([6, 3])   # a missing name: the pandas way, as before
    assert np.array_equal(overhead._graph_launches(col, nulls),
                          col.iloc[nulls].astype(str).str.contains(overhead.GRAPH_LAUNCH,
                                                                   regex=True).to_numpy())


@pytest.mark.parametrize("seed", range(4))
def test_thread_pairs_equal_drop_duplicates(seed):
    from traceread.passes.attribution import _pairs

    rng = np.random.default_rng(seed)
    for n in (0, 1, 50, 5000):
        for dt in (np.int64, np.int32):
            pid = (rng.integers(-3, 4, n) * 7919).astype(dt)
            tid = (rng.integers(-2, 3, n) * (2**31 - 1) // 2).astype(dt)
            d = pd.DataFrame({"pid": pid, "tid": tid}).drop_duplicates()
            got = _pairs(pid, tid)
            assert got == set(zip(d["pid"].tolist(), d["tid"].tolist()))
            assert all(type(p) is int and type(t) is int for p, t in got)
    wide = np.array([2**40, 5, 2**40]), np.array([1, 2**33, 1])   # past 32 bits: pandas
    assert _pairs(*wide) == {(2**40, 1), (5, 2**33)}


def _sync_copy_directions_loop(ev):
    """``preconditions.sync_copy_directions`` as it was: one Python turn per copy."""
    from traceread.passes import preconditions as pc
    from traceread.passes.common import lut_at, rows_of
    from traceread.passes.factkit import item

    cp = rows_of(ev, ("memcpy",))
    api = rows_of(ev, ("runtime", "driver"))
    if not len(cp) or not len(api) or "correlation" not in ev:
        return None, []
    corr = ev["correlation"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    order = api[np.lexsort((ts[api], tid[api], pid[api]))]
    lut, codes = lut_at(ev["name"], order, pc._sync_class, 0, np.int8)
    cls = lut.take(codes)
    at = pc._last_at(corr[order], corr[cp])
    kind = ev["copy_kind"].astype(object).to_numpy() if "copy_kind" in ev else None
    pageable = dict(zip(cp.tolist(), pc._pageable_host(ev, cp).tolist()))
    out, first, staged = {}, None, 0
    for r, i in zip(cp.tolist(), at.tolist()):
        if i < 0 or kind is None:
            continue
        nxt = i + 1
        waited = cls[i] == 2 or (nxt < len(order) and cls[nxt] == 1
                                 and pid[order[nxt]] == pid[order[i]]
                                 and tid[order[nxt]] == tid[order[i]])
        if waited or pageable[r]:
            d = str(kind[r] or "unknown")
            out[d] = out.get(d, 0) + 1
            staged += bool(pageable[r] and not waited)
            first = r if first is None else first
    if first is None:
        return {}, []
    how = f" ({staged} staged through pageable memory)" if staged else ""
    return out, [item(ev["name"].iat[first], ev["ts"].iat[first], None,
                      "the host waited for it: " + ", ".join(f"{k} x{v}" for k, v in out.items())
                      + how)]


@pytest.mark.parametrize("path", [FIX / "gpu" / "copy.bad.json.gz", FIX / "gpu" / "copy.fixed.json.gz",
                                  FIX / "gpu" / "sync.bad.json.gz",
                                  FIX / "h200" / "queue.fixed.json.gz"], ids=lambda p: p.name)
def test_sync_copy_directions_equal_the_per_copy_loop(path):
    from traceread.passes.preconditions import sync_copy_directions

    ev = load(str(path)).events
    got = sync_copy_directions(ev)
    assert got == _sync_copy_directions_loop(ev)
    if path.name.startswith("copy.bad"):   # both directions counted, in first-copy order
        assert got[0] == {"HtoD": 3, "DtoH": 3}


def test_replace_runs_is_replace_run_of_each_run():
    # the capture model replaces a run per step and launching thread in one copy of the graph
    # (it copied the graph once per run: 20 copies, 0.3 s on the 247 MB tiled trace)
    from traceread.passes.replay import whatif as W

    a = analyze(load(FIX.parents[1] / "src" / "traceread" / "examples"
                     / "h200_pageable_copy.json.gz"))
    g = a.facts.graph
    launch = W._kind(g, "launch", "sync_wait") & W._cat(g, "launch")
    runs = W._launch_runs(g, launch, launch)
    assert not isinstance(runs, str) and len(runs) >= 2
    spec = [(first, last, 1000 + i) for i, (_, first, last, _) in enumerate(runs)]
    one = g
    for first, last, d in spec:
        one = one.replace_run(first, last, name="cudaGraphLaunch", dur_ns=d)
    both = g.replace_runs(spec, name="cudaGraphLaunch")
    pd.testing.assert_frame_equal(one.nodes, both.nodes)
    pd.testing.assert_frame_equal(one.edges, both.edges)


# -- round 6 ------------------------------------------------------------------------------

def _runs_key(runs):
    if isinstance(runs, str):
        return runs
    return [(lane, first, last, np.flatnonzero(inside).tolist())
            for lane, first, last, inside in runs]


# syncs between launches (a refusal, then runs through them), a transformer's, CUDA graphs
ROUND6_TRACES = [SPLIT_TRACES[2], SPLIT_TRACES[4], SPLIT_TRACES[5]]


@pytest.mark.parametrize("path", ROUND6_TRACES, ids=lambda p: p.name)
def test_launch_runs_by_groups_equal_the_whole_graph_masks(path):
    """The capture model's runs per (step, lane), read from each pair's own nodes, are the
    runs (or the refusal) the whole-graph masks give: plain, through syncs, within a
    region, and on the graph with its blocking calls' names as the run starts."""
    from traceread.passes.replay import whatif as W

    a = _analysed(path)
    if a.facts is None or a.facts.graph is None:
        pytest.skip(f"{path.name}: no levers' graph")
    g = a.facts.graph
    launch = W._kind(g, "launch", "sync_wait") & W._cat(g, "launch")
    region = W._kind(g, "host") & W._match(g, W.COMPILED_RX)
    host = W._kind(g, "host")
    seen = set()
    for start, through, within in ((launch, False, None), (launch, True, None),
                                   (launch | region, True, region), (launch | host, False, host)):
        got = W._launch_runs(g, launch, start, through, within)
        want = W._launch_runs_loop(g, launch, start, through, within)
        assert _runs_key(got) == _runs_key(want)
        seen.add(isinstance(got, str))
    if path.name.startswith("sync.bad"):
        assert seen == {True, False}   # refused without the syncs, runs through them


def test_launch_runs_on_crafted_graphs_with_odd_steps_and_lanes():
    """Nodes outside every step, a refusal's blocking call, and keys the dense grouping
    cannot take (a step below -1) answer as the masks do."""
    from traceread.passes.replay import whatif as W

    g = _graph_and_window(SPLIT_TRACES[2])[0].copy()   # sync.bad: syncs between launches
    launch = W._kind(g, "launch", "sync_wait") & W._cat(g, "launch")
    for through in (False, True):
        assert _runs_key(W._launch_runs(g, launch, launch, through)) == \
            _runs_key(W._launch_runs_loop(g, launch, launch, through))
    odd = g.copy()
    step = odd.nodes["step"].to_numpy().copy()
    step[np.flatnonzero(launch)[:3]] = -1
    odd.nodes["step"] = step
    for through in (False, True):
        assert _runs_key(W._launch_runs(odd, launch, launch, through)) == \
            _runs_key(W._launch_runs_loop(odd, launch, launch, through))
    step[np.flatnonzero(launch)[3]] = -5   # no dense key: the masks' way, same answer
    odd.nodes["step"] = step
    assert W._step_lane_groups(step, odd.nodes["lane"].to_numpy(), launch) is None
    assert _runs_key(W._launch_runs(odd, launch, launch, True)) == \
        _runs_key(W._launch_runs_loop(odd, launch, launch, True))


@pytest.mark.parametrize("path", SPLIT_TRACES[:3:2], ids=lambda p: p.name)
def test_joint_replay_on_the_pricings_kept_answers_equals_a_fresh_one(path):
    """The verdict's joint replay (``together``) starts from the pricing's answers about the
    graph it priced (whatif ``_KEPT``): the same result as with none kept."""
    from traceread.passes.replay import whatif as W

    a = _analysed(path)
    if a.facts is None or a.facts.graph is None:
        pytest.skip(f"{path.name}: no levers' graph")
    W.forget()
    p = W.price_models(a.facts.graph, a.context, a.copies,
                       a.facts.frames.get("optimizer_regions"))
    ids = [m for m, r in p["models"].items() if r["applied"] and m != "larger_batch"][:3] \
        or ["cuda_graphs", "host_off_path"]
    assert W._KEPT["memo"]   # the pricing's answers are there to start from
    kept = W.replay_models(p["graph"], p["facts"], ids, before_ns=p["before_ns"])
    W.forget()
    assert not W._KEPT
    assert W.replay_models(p["graph"], p["facts"], ids, before_ns=p["before_ns"]) == kept


def test_kept_answers_are_not_read_after_a_write_into_the_graphs_column():
    from traceread.passes.replay import whatif as W

    g = _graph_and_window(SPLIT_TRACES[0])[0].copy()
    g.nodes = g.nodes.copy(deep=True)   # its own memory: the write below stays in this test
    kinds = ("gpu_kernel",)
    W.forget()
    with W._base_graph(g):
        assert W._kind(g, *kinds).tolist() == g.nodes["kind"].isin(kinds).tolist()
    col = W._KEPT["cols"]["kind"]   # the graph's own memory (read-only under copy-on-write)
    i = int(np.flatnonzero(col == "gpu_kernel")[0])
    col.flags.writeable = True   # a writer that went around pandas: written in place
    col[i] = "host"
    col.flags.writeable = False
    with W._base_graph(g):
        got = W._kind(g, *kinds)
    assert not got[i] and got.tolist() == (col == "gpu_kernel").tolist()
    W.forget()


class _ListLinks:
    """critical.py's ``_Links`` as it was: every array turned into a list up front."""

    def __init__(self, pred, how, lag_launch, prev, end, starts):
        self.pred, self.how = pred.tolist(), how.tolist()
        self.launch, self.prev, self.end = lag_launch.tolist(), prev.tolist(), end.tolist()
        self.gap = starts["gap"].tolist()
        src, dst, val, is_launch = starts["src"], starts["dst"], starts["val"], starts["launch"]
        o = np.argsort(dst, kind="stable")
        self.ptr = np.searchsorted(dst[o], np.arange(len(pred) + 1)).tolist()
        self.src, self.val = src[o].tolist(), val[o].tolist()
        self.is_launch = is_launch[o].tolist()
        self.seen = [-1] * len(pred)

    def way_out(self, v, k):
        best, how, launch, t = -1, 3, False, None
        p = self.prev[v]
        if p >= 0 and self.seen[p] != k:
            best, how, t = p, 2, self.end[p] + self.gap[v]
        for i in range(self.ptr[v], self.ptr[v + 1]):
            u = self.src[i]
            if self.seen[u] != k and (t is None or self.val[i] > t):
                best, how, launch, t = u, 1, self.is_launch[i], self.val[i]
        return best, how, launch


def _list_walk(v, t0, k, ln):
    path, via, hows, launches = [], [], [], []
    while v >= 0 and ln.end[v] > t0 and ln.seen[v] != k:
        ln.seen[v] = k
        u, how, launch = ln.pred[v], ln.how[v], ln.launch[v]
        if u >= 0 and ln.seen[u] == k:
            u, how, launch = ln.way_out(v, k)
        path.append(v)
        via.append(u)
        hows.append(how)
        launches.append(launch)
        v = u
    return path, via, hows, launches


@pytest.mark.parametrize("path", ROUND6_TRACES, ids=lambda p: p.name)
def test_critical_walk_reading_arrays_equals_the_lists(path, monkeypatch):
    """The critical path's walk reads each node's links from the arrays where it steps
    (``_Links``), not from lists of every node: the same path, with every what-if model's
    graph too (their cycles take the way-out branch)."""
    from traceread.passes.replay import critical, whatif
    from traceread.passes.replay.sim import simulate

    a = _analysed(path)
    if a.replay_graph is None:
        pytest.skip(f"{path.name}: no replay graph")
    graphs = [a.replay_graph]
    if a.facts is not None and a.facts.graph is not None:
        graphs.append(a.facts.graph)
        for m in ("cuda_graphs", "drop_syncs", "host_off_path"):
            out = whatif.BY_ID[m].apply(a.facts.graph.copy(), whatif.Facts(ctx=a.context), {})
            if not isinstance(out, str):
                graphs.append(out)
    for g in graphs:
        s = simulate(g)
        got = critical.critical_path(g, s)
        with monkeypatch.context() as mp:
            mp.setattr(critical, "_Links", _ListLinks)
            mp.setattr(critical, "_walk", _list_walk)
            assert critical.critical_path(g, s) == got


def test_critical_walk_reading_arrays_takes_the_way_out_as_the_lists(monkeypatch):
    """Zero-length kernels waiting on each other (test_replay ``_mutual_waits``): every
    step's walk takes the way out of their cycle, the same from the arrays as the lists."""
    from test_replay import _mutual_waits

    from traceread.passes.replay import critical
    from traceread.passes.replay.sim import simulate

    g = _mutual_waits(12)
    s = simulate(g)
    outs = []
    real = critical._Links.way_out
    monkeypatch.setattr(critical._Links, "way_out",
                        lambda self, v, k: outs.append(v) or real(self, v, k))
    got = critical.critical_path(g, s)
    assert outs   # the branch ran
    monkeypatch.setattr(critical, "_Links", _ListLinks)
    monkeypatch.setattr(critical, "_walk", _list_walk)
    assert critical.critical_path(g, s) == got


@pytest.mark.parametrize("path", [SPLIT_TRACES[0], SPLIT_TRACES[4],
                                  FIX / "gpu" / "compile.bad.json.gz"], ids=lambda p: p.name)
def test_trace_facts_with_the_analysis_steps_equal_their_own(path):
    """The steps' anatomy reads the steps the analysis found (``find_steps`` of the whole
    trace, no pattern) instead of finding them again: the same trace facts."""
    import json

    from traceread.passes.newfacts import trace_facts
    from traceread.passes.steps import find_steps

    ev = load(str(path)).events
    given = trace_facts(ev, ev, find_steps(ev)[0])
    assert json.dumps(given, sort_keys=True, default=str) == \
        json.dumps(trace_facts(ev, ev), sort_keys=True, default=str)


@pytest.mark.parametrize("path", ROUND6_TRACES, ids=lambda p: p.name)
def test_attribution_with_the_queued_part_from_a_side_pass_is_the_same(path):
    """The analysis runs ``attribution.queued`` as a side pass on the gaps' bounds alone
    (``GAP_BOUNDS``) and hands it to the attribution: the same gaps and top ops."""
    from traceread import analysis as A
    from traceread.passes import attribution as attr
    from traceread.passes import steps as steps_mod
    from traceread.passes.gaps import gpu_gaps

    ev = load(str(path)).events
    ops = steps_mod.gpu_ops(ev)
    gaps = gpu_gaps(ev, 0)
    bounds = gaps[list(A.GAP_BOUNDS)].copy()
    asked = []
    side = attr.attribute(ev, gaps, ops, queued_of=lambda: asked.append(1)
                          or attr.queued(ev, bounds, ops))
    here = attr.attribute(ev, gaps, ops)
    assert asked == [1]
    pd.testing.assert_frame_equal(side["gaps"], here["gaps"])
    pd.testing.assert_frame_equal(side["top_ops"], here["top_ops"])
    assert side["sync_blocked"] == here["sync_blocked"]
    if path.name == "sync.bad.json.gz":
        assert (here["gaps"]["queued_ns"] > 0).any()   # a trace with queued gaps in it


@pytest.mark.parametrize("path", ROUND6_TRACES[:2] + [FIX / "gpu" / "compile.bad.json.gz"],
                         ids=lambda p: p.name)
def test_compile_summary_of_the_gaps_bounds_equals_the_attributed_gaps(path):
    """The analysis runs ``compile_summary`` as a side pass on the gaps' bounds, before the
    attribution: the summary of the attributed (and compile-charged) gaps is the same."""
    a = _analysed(path)
    from traceread import analysis as A
    from traceread.passes import window as window_mod
    from traceread.passes.compile import compile_summary

    ev = a.trace.events
    if a.window.mode != "whole_trace":
        ev = window_mod.slice_events(ev, a.window.start, a.window.end)
    want = compile_summary(ev, gaps=a.gaps)
    assert compile_summary(ev, gaps=a.gaps[list(A.GAP_BOUNDS)].copy()) == want
    got = dict(a.compile)
    for k in ("scope", "whole_trace"):
        got.pop(k, None)
    assert got == want


def test_side_get_trims_the_heap_unless_asked_not_to(monkeypatch):
    """A side pass run here hands its freed pages back after it, unless the caller asks for
    a small pass in the middle of another (``release=False``)."""
    from traceread.passes import side as side_mod

    trims = []
    monkeypatch.setattr(side_mod, "release_heap_grown", lambda: trims.append(1))
    with side_mod.SidePasses(1, {}) as side:
        side.submit("a", sum, [1, 2])
        side.submit("b", sum, [3, 4])
        assert side.get("a") == 3 and trims == [1]
        assert side.get("b", release=False) == 7 and trims == [1]


# -- round 7 ------------------------------------------------------------------------------

def _recording_end_by_strings(ev) -> int | None:
    """Round 6's ``steps.recording_end``: every instant's name as a string, compared."""
    from traceread.passes.steps import RECORD_END

    if "kind" not in ev or not len(ev):
        return None
    inst = np.flatnonzero((ev["kind"] == "instant").to_numpy())
    if not len(inst):
        return None
    names = ev["name"].take(inst).astype(str).to_numpy()
    at = inst[names == RECORD_END]
    return int(ev["ts"].to_numpy(np.int64)[at].max()) if len(at) else None


def _crafted_instants(names, kinds) -> pd.DataFrame:
    n = len(names)
    return pd.DataFrame({"ts": np.arange(10, 10 * (n + 1), 10, dtype=np.int64),
                         "dur": np.zeros(n, np.int64),
                         "kind": pd.Categorical(kinds, categories=["cpu_op", "instant"]),
                         "name": pd.Categorical(names)})


@pytest.mark.parametrize("path", SPLIT_TRACES[:4] + [FIX / "gpu" / "graphs.bad.json.gz"],
                         ids=lambda p: p.name)
def test_recording_end_by_category_code_is_the_string_compare(path):
    """The recording's end read through the name column's one category code is what the
    string compare of every instant's name gives, on traces and their windows."""
    from traceread.passes.steps import recording_end

    a = _analysed(path)
    ev = a.trace.events
    win = window_mod.slice_events(ev, a.window.start, a.window.end) \
        if a.window.mode != "whole_trace" else ev
    for frame in (ev, win, ev.iloc[:0]):
        assert recording_end(frame) == _recording_end_by_strings(frame)


def test_recording_end_on_crafted_names():
    """Several ends (the last counts), an end that is no instant, no end among the names,
    a null name, and a name column that is not categorical."""
    from traceread.passes.steps import RECORD_END, recording_end

    cases = [
        ([RECORD_END, "x", RECORD_END, RECORD_END], ["instant", "instant", "instant", "cpu_op"]),
        (["x", "y", None], ["instant", "instant", "instant"]),
        ([RECORD_END, None, "z"], ["cpu_op", "instant", "instant"]),
        ([None, RECORD_END], [None, "instant"]),
    ]
    for names, kinds in cases:
        ev = _crafted_instants(names, kinds)
        assert recording_end(ev) == _recording_end_by_strings(ev)
        plain = ev.assign(name=ev["name"].astype(object))
        assert recording_end(plain) == _recording_end_by_strings(plain)
    assert recording_end(_crafted_instants([RECORD_END, "x"], ["instant", "cpu_op"])) == 10


@pytest.mark.parametrize("path", SPLIT_TRACES[:5], ids=lambda p: p.name)
def test_replay_result_with_windows_shared_is_the_result_without(path, monkeypatch):
    """The replay's result with the steps' windows made once (``shared_windows``) equals
    the result with each asker making its own, on the replay's graph and its schedule."""
    from traceread.passes import replay as R
    from traceread.passes.replay import critical as C
    from traceread.passes.replay.sim import simulate

    a = _analysed(path)
    if a.replay_graph is None:
        pytest.skip(f"{path.name}: no replay graph")
    g = a.replay_graph
    sched = simulate(g)
    calls = []
    real = C._gpu_windows
    monkeypatch.setattr(C, "_gpu_windows", lambda *x: (calls.append(1), real(*x))[1])
    shared = R.result(g, sched)
    made = len(calls)
    monkeypatch.setattr(C, "shared_windows", contextlib.nullcontext)
    monkeypatch.setattr(R, "shared_windows", contextlib.nullcontext)
    calls.clear()
    alone = R.result(g, sched)
    assert shared == alone
    assert len(calls) == 3 and made < 3
    assert not C._WINDOWS   # nothing kept past the block


def test_step_windows_memo_answers_only_equal_times():
    """Inside ``shared_windows`` a call with other node times (or another dtype) is made
    anew, one with equal times is answered by a copy (the caller may edit it)."""
    from traceread.passes.replay import critical as C

    g, _, _ = _graph_and_window(SPLIT_TRACES[0])
    ts = g.nodes["ts_ns"].to_numpy(np.int64)
    end = ts + g.nodes["dur_ns"].to_numpy(np.int64)
    bi = np.full(len(g.steps), -1, np.int64)
    ei = bi.copy()
    with C.shared_windows():
        first = C._step_windows(g, ts, end, bi, ei)
        first[0][:] = -7   # an edit of the answer does not reach the memo
        again = C._step_windows(g, ts.copy(), end.copy(), bi, ei)
        later = C._step_windows(g, ts + 5, end + 5, bi, ei)
        wide = C._step_windows(g, ts.astype(np.float64), end.astype(np.float64), bi, ei)
        assert len(C._WINDOWS[-1]) == 3
    want = C._gpu_windows(g, ts, end)
    assert all(np.array_equal(x, y) for x, y in zip(again[:2], want))
    assert all(np.array_equal(x, y) for x, y in zip(later[:2], C._gpu_windows(g, ts + 5, end + 5)))
    assert wide[0].dtype == want[0].dtype


HTA_DATA = Path("facebookresearch__HolisticTraceAnalysis") / "tests" / "data"


@pytest.mark.parametrize("name", [HTA_DATA / "nccl_parser_config" / "nccl_data.json.gz",
                                  HTA_DATA / "timeline_analysis" / "sampled_rank-0.json.gz",
                                  None], ids=lambda p: p.name if p else "no_comm")
def test_comm_and_collectives_with_one_split_equal_the_two_passes(name, request):
    """The overlap and the collectives' summary made from one comm / compute split equal
    the two passes run apart (NCCL traces with comm kernels, one without)."""
    from traceread.passes import nccl

    path = request.getfixturevalue("corpus_dir") / name if name else SPLIT_TRACES[4]
    ev = load(str(path)).events
    ov, summ = nccl.comm_and_collectives(ev)
    pd.testing.assert_frame_equal(ov, nccl.comm_overlap(ev))
    pd.testing.assert_frame_equal(summ, nccl.collective_summary(nccl.collective_instances(ev)))
    assert nccl.nccl_report(ev)["collectives"] == nccl._records(summ)


@pytest.mark.parametrize("path", SPLIT_TRACES[:4], ids=lambda p: p.name)
def test_names_of_shared_inside_an_analysis_answer_as_fresh_ones(path, monkeypatch):
    """``names_of`` inside a ``sharing`` scope: made once per frame and kinds (a second ask
    is the same list), equal to a fresh one; outside a scope or in another process, fresh."""
    from traceread.passes import factkit, program

    ev = load(str(path)).events
    made = []
    real = program._names_of
    monkeypatch.setattr(program, "_names_of", lambda e, k: (made.append(k), real(e, k))[1])
    kinds = [("runtime", "driver"), ("cpu_op", "annotation", "python"), ("kernel",),
             ("graph",)]
    with factkit.sharing():
        got = [program.names_of(ev, k) for k in kinds]
        again = [program.names_of(ev, list(k)) for k in kinds]
        assert all(a is b for a, b in zip(got, again)) and len(made) == len(kinds)
        monkeypatch.setattr(factkit.os, "getpid", lambda: -1)   # a forked worker: not shared
        assert program.names_of(ev, kinds[0]) is not got[0]
    assert [list(x) for x in got] == [list(real(ev, k)) for k in kinds]
    made.clear()
    program.names_of(ev, kinds[0])
    program.names_of(ev, kinds[0])
    assert len(made) == 2


@pytest.mark.parametrize("path", SPLIT_TRACES[:4], ids=lambda p: p.name)
def test_waited_summary_from_the_totals_is_the_summary(path):
    from traceread.passes import attribution as attr

    gaps = _analysed(path).gaps
    assert attr.waited_summary(gaps, by=attr.waited_by(gaps)) == attr.waited_summary(gaps)


def test_gpu_in_of_no_recompute_is_the_masked_sum():
    from traceread.passes import anatomy

    rng = np.random.default_rng(7)
    gpu = {"ts": np.arange(50, dtype=np.int64), "launch": rng.integers(0, 1000, 50),
           "dur": rng.integers(1, 100, 50)}
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    assert anatomy._gpu_in(gpu, empty) == int(gpu["dur"][np.zeros(50, bool)].sum()) == 0
    some = (np.array([100, 500]), np.array([300, 700]))
    want = int(gpu["dur"][((gpu["launch"] >= 100) & (gpu["launch"] < 300))
                          | ((gpu["launch"] >= 500) & (gpu["launch"] < 700))].sum())
    assert anatomy._gpu_in(gpu, some) == want
    assert anatomy._gpu_in({"ts": np.empty(0), "launch": np.empty(0), "dur": np.empty(0)},
                           empty) is None


@pytest.mark.parametrize("path", ROUND6_TRACES, ids=lambda p: p.name)
def test_gpu_lane_mask_kept_on_the_base_is_the_lookup(path):
    """The models' GPU-lane mask, kept while a copy's lane column is the base graph's, is
    ``on_gpu_lane`` of that copy: with the lanes table changed, and after a copy's lanes
    are rewritten (a new column: asked anew)."""
    from traceread.passes.replay import whatif as W
    from traceread.passes.replay.graph import on_gpu_lane

    a = _analysed(path)
    if a.facts is None or a.facts.graph is None:
        pytest.skip(f"{path.name}: no levers' graph")
    g = a.facts.graph

    def want(x):
        return on_gpu_lane(x.lanes, x.nodes["lane"].to_numpy(np.int64))

    W.forget()
    with W._base_graph(g):
        c = g.copy()
        assert np.array_equal(W._gpu_lane_nodes(c), want(c))
        first = W._gpu_lane_nodes(c)
        first[:] = ~first   # an edit of the answer does not reach the kept one
        assert np.array_equal(W._gpu_lane_nodes(g), want(g))
        c.lanes = c.lanes.assign(what=["gpu"] * len(c.lanes))
        assert np.array_equal(W._gpu_lane_nodes(c), want(c))
        d = g.copy()
        lane = d.nodes["lane"].to_numpy(np.int64).copy()
        lane[: len(lane) // 2] = int(lane.max()) + 1   # a lane not in the table
        d.nodes["lane"] = lane
        assert np.array_equal(W._gpu_lane_nodes(d), want(d))
    W.forget()


def _model_rows_as_set(ev, cand) -> set:
    """Round 6's ``hostwork._model_rows``: the rows as a set of Python ints."""
    from traceread.passes import attribution as attr
    from traceread.passes import hostwork as hw
    from traceread.passes.common import kind_in, name_codes, name_lut, rows_of

    cand = hw.unique_sorted(cand)
    codes = name_codes(ev["name"])
    frame = name_lut(ev["name"], hw.MODULE_FRAME_RX).take(codes.take(cand))
    out = set(cand[frame].tolist())
    api = rows_of(ev, ("runtime", "driver"))
    launch = api[name_lut(ev["name"], hw.LAUNCH_RX, "match").take(codes.take(api))]
    if not len(launch):
        return out
    key = attr.thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    ops = cand[~frame & kind_in(ev, ("cpu_op",))[cand]]
    for k in np.unique(key[ops]).tolist():
        lt = np.sort(ts[launch[key[launch] == k]])
        mine = ops[key[ops] == k]
        hit = np.searchsorted(lt, te[mine], "left") > np.searchsorted(lt, ts[mine], "left")
        out.update(mine[hit].tolist())
    return out


@pytest.mark.parametrize("path", SPLIT_TRACES[:5], ids=lambda p: p.name)
def test_model_rows_mask_is_the_set(path):
    """The host work's model rows as a mask hold the rows the set held (every host row a
    candidate, and every third one)."""
    from traceread.passes import hostwork as hw
    from traceread.passes.common import rows_of

    ev = load(str(path)).events
    host = rows_of(ev, ("python", "cpu_op"))
    for cand in (host, host[::3], host[:0]):
        got = hw._model_rows(ev, cand)
        assert got.dtype == bool and len(got) == len(ev)
        assert np.flatnonzero(got).tolist() == sorted(_model_rows_as_set(ev, cand))


@pytest.mark.parametrize("path", SPLIT_TRACES[:5], ids=lambda p: p.name)
def test_profiler_ratio_and_base_from_the_kept_means(path):
    """The profiler ratio and the pricing's unprofiled base read the two step means made
    once: the same as each step mean taken from the two replays."""
    from traceread.passes.replay import whatif as W
    from traceread.passes.replay.sim import simulate
    from traceread.passes.overhead import without

    a = _analysed(path)
    g = a.facts.graph if a.facts is not None else None
    if g is None or "profiler_ns" not in g.nodes:
        pytest.skip(f"{path.name}: no marked levers' graph")
    W.forget()
    bare = without(g)
    s1, s0 = simulate(bare), simulate(g)
    b0, b1 = W.step_mean(s0, g), W.step_mean(s1, bare)
    ratio = W.profiler_ratio(g)
    assert ratio == (b1 / b0 if b0 > 0 and s0.converged and s1.converged else None)
    base, _, profiled = W.unprofiled_base(g)
    assert W._BARE[0][2]["means"] == (b0, b1)
    assert profiled is None or profiled == int(b0)
    W.forget()


@pytest.mark.parametrize("seed", range(12))
def test_first_rows_by_table_are_the_hashed_ones(seed):
    """The launch calls' first row per key and the ops' positions among them, by a table
    over the keys' range, are ``duplicated(keep="first")`` and ``get_indexer``'s; keys too
    spread, not int64 or a MultiIndex go back to the caller (None)."""
    from traceread.passes.steps import first_rows

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    keys = pd.Index(rng.integers(5, 5 + max(1, n // 2 + seed * 10), n).astype(np.int64))
    wanted = pd.Index(rng.integers(0, 20 + n, int(rng.integers(0, 200))).astype(np.int64))
    got = first_rows(keys, wanted)
    if not n:
        assert got is None
        return
    first = ~keys.duplicated(keep="first")
    assert np.array_equal(got[0], first)
    assert np.array_equal(got[1], keys[first].get_indexer(wanted))
    spread = pd.Index(np.array([0, 10**12], np.int64))
    assert first_rows(spread, wanted) is None
    assert first_rows(pd.MultiIndex.from_arrays([[1, 2], [3, 4]]), wanted) is None
    assert first_rows(pd.Index([1.5, 2.5]), wanted) is None


@pytest.mark.parametrize("path", SPLIT_TRACES[:4], ids=lambda p: p.name)
def test_gpu_ops_launches_by_table_equal_the_hashed(path, monkeypatch):
    from traceread.passes import steps

    ev = load(str(path)).events
    got = steps.gpu_ops(ev)
    monkeypatch.setattr(steps, "first_rows", lambda a, b: None)
    pd.testing.assert_frame_equal(got, steps.gpu_ops(ev))


@pytest.mark.parametrize("seed", range(10))
def test_holes_without_the_sort_of_sorted_starts(seed):
    """nsys's hole rule with the starts' sort left out when they are in order: the holes of
    sorting both, for starts in order, out of order and with ties."""
    from traceread.passes import gaps as G

    rng = np.random.default_rng(seed)
    s = rng.integers(0, 10_000, int(rng.integers(0, 60))).astype(np.int64)
    if seed % 2:
        s = np.sort(s)
    e = s + rng.integers(0, 500, len(s))
    want_s, want_e = np.sort(s), np.sort(e)
    keep = want_e[:-1] < want_s[1:]
    got = G._holes(s, e)
    assert np.array_equal(got[0], want_e[:-1][keep]) and np.array_equal(got[1], want_s[1:][keep])


def test_profiler_overheads_only_tested_by_name_when_the_category_is_there():
    from traceread.passes import gaps as G

    ev = pd.DataFrame({"ts": np.arange(4, dtype=np.int64), "dur": np.ones(4, np.int64),
                       "pid": np.ones(4, np.int64),
                       "cat": pd.Categorical(["kernel", G.OVERHEAD_CAT, G.OVERHEAD_CAT, None]),
                       "name": pd.Categorical(["k", G.NSYS_GPU_OVERHEADS[0], "other", "x"])})

    def want(e):
        m = (e["cat"] == G.OVERHEAD_CAT) & e["name"].isin(G.NSYS_GPU_OVERHEADS)
        return e.loc[m, ["ts", "dur", "pid"]]
    for frame in (ev, ev.iloc[[0, 3]], ev.assign(cat=ev["cat"].astype(object))):
        pd.testing.assert_frame_equal(G.profiler_overheads(frame), want(frame))


# -- round 8: the pricing's replays and the levers' graph -----------------------------------

def _priced(path: Path):
    """(the levers' graph, its pricing) of a fixture (``price_models``, caches emptied)."""
    from traceread.passes.replay import whatif

    a = _analysed(path)
    whatif.forget()
    p = whatif.price_models(a.facts.graph, a.context, a.copies,
                            a.facts.frames.get("optimizer_regions"))
    return p["graph"], p


def _rewired(path: Path):
    """Copies of a fixture's levers' graph in the order the pricing asks of them: the base,
    a CUDA-graph capture (nodes and edges rewired), the base again, a cost change, a new
    lane: what the kept layouts must tell apart."""
    from traceread.passes.replay import whatif

    g, p = _priced(path)
    cg = whatif.BY_ID["cuda_graphs"].apply(g.copy(), p["facts"], {})
    assert not isinstance(cg, str)
    cost = g.copy()
    c = cost.nodes["cost_ns"].to_numpy(np.int64).copy()
    c[::5] //= 2
    cost.nodes["cost_ns"] = c
    lane = g.copy()
    lanes = lane.lanes.copy()
    lanes.loc[len(lanes)] = lanes.iloc[-1]
    lanes.iloc[-1, lanes.columns.get_loc("lane")] = int(lanes["lane"].max()) + 1
    lane.lanes = lanes.reset_index(drop=True)
    return [g, cg, g, cost, cg, lane, g]


@pytest.mark.parametrize("path", [FIX / "gpu" / "launch.bad.json.gz",
                                  FIX / "h200" / "queue.bad.json.gz"], ids=lambda p: p.name)
def test_kept_layouts_replay_as_fresh_ones(path):
    """The replay's kept layouts (lane order, edge positions: ``sim.KEPT_LAYOUTS``) and the
    program steps' lane lookups (``critical._structure``), asked of copies whose shape moves
    back and forth, give what a fresh call gives."""
    from traceread.passes.replay import critical, sim, whatif

    graphs = _rewired(path)
    critical.forget()
    sim.forget()
    kept = [(sim.simulate(x), x) for x in graphs]
    kept = [(s.start_ns, s.end_ns, whatif.step_mean(s, x)) for s, x in kept]
    for x, (s0, e0, m0) in zip(graphs, kept):
        critical.forget()
        sim.forget()
        s = sim.simulate(x)
        assert np.array_equal(s.start_ns, s0) and np.array_equal(s.end_ns, e0)
        assert whatif.step_mean(s, x) == m0
    assert len(sim._LAST_LAYOUT) <= sim.KEPT_LAYOUTS and len(critical._STRUCT) <= sim.KEPT_LAYOUTS
    whatif.forget()
    assert not sim._LAST_LAYOUT and not sim._LAST_EDGES and not critical._STRUCT


def test_structure_key_compares_content_not_addresses():
    """Equal arrays in other memory match, an edited copy does not, and the ints (the steps'
    count) are compared as ints."""
    from traceread.passes.replay.critical import _same_key

    a = np.arange(10, dtype=np.int64)
    kinds = np.array(["launch"] * 10, object)
    assert _same_key((a, 3, kinds), (a.copy(), 3, kinds.copy()))
    b = a.copy()
    b[4] = -1
    assert not _same_key((a, 3, kinds), (b, 3, kinds))
    assert not _same_key((a, 3, kinds), (a, 4, kinds))
    other = kinds.copy()
    other[0] = "thread"
    assert not _same_key((a, 3, kinds), (a, 3, other))


def _with_pieces_by_frames(graph, P: dict, drop: list):
    """The split's graph as round 7 built it (a frame's drop, concat and astype; the edges
    renumbered by ``Series.map``): the reference of ``split._with_pieces``."""
    n = graph.nodes
    g = graph.copy()
    m = len(P["step"])
    next_id = int(n["id"].max()) + 1
    add = pd.DataFrame({
        "id": np.arange(next_id, next_id + m, dtype=np.int64),
        "step": P["step"], "lane": P["lane"], "seq": P["seq"], "sub": P["sub"],
        "kind": pd.Series(P["kind"], dtype=object), "name": pd.Series(P["name"], dtype=object),
        "cat": pd.Series(P["cat"], dtype=object), "ts_ns": P["ts_ns"],
        "dur_ns": P["dur_ns"], "corr": np.full(m, -1, np.int64), "cost_ns": P["dur_ns"].copy(),
        "gap_ns": P["gap_ns"], "release_ns": P["release_ns"], "was": P["was"],
        "last": P["last"]})
    old = g.nodes.drop(index=drop).assign(sub=0)
    nodes = pd.concat([old, add[list(old.columns)]], ignore_index=True)
    order = np.lexsort((nodes["sub"].to_numpy(), nodes["seq"].to_numpy(),
                        nodes["lane"].to_numpy()))
    lane_o = nodes["lane"].to_numpy()[order]
    first = np.r_[True, lane_o[1:] != lane_o[:-1]]
    rank = np.arange(len(order)) - np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    seq = np.empty(len(order), np.int64)
    seq[order] = rank
    nodes["seq"] = seq
    g.nodes = nodes.drop(columns=["sub"]).astype({c: n[c].dtype for c in n.columns
                                                   if c in ("id", "step", "lane", "seq", "ts_ns",
                                                            "dur_ns", "corr", "cost_ns",
                                                            "gap_ns", "release_ns")})
    firsts = add[add["sub"] == 0].set_index("was")["id"]
    lasts = add[add["last"]].set_index("was")["id"]
    e = g.edges.copy()
    e["dst"] = e["dst"].map(firsts).fillna(e["dst"]).astype(np.int64)
    e["src"] = e["src"].map(lasts).fillna(e["src"]).astype(np.int64)
    g.edges = e
    return g


@pytest.mark.parametrize("path", SPLIT_TRACES, ids=lambda p: p.name)
def test_split_by_columns_is_the_split_by_frames(path, monkeypatch):
    """The split graph built column by column equals the frames' build: rows, values,
    dtypes (object names stay object) and edges."""
    g, ev, pattern = _graph_and_window(path)
    got = split_mod.split(g, ev, pattern)
    monkeypatch.setattr(split_mod, "_with_pieces", _with_pieces_by_frames)
    want = split_mod.split(g, ev, pattern)
    assert got.nodes.equals(want.nodes) and got.edges.equals(want.edges)
    assert list(got.nodes.dtypes) == list(want.nodes.dtypes)
    assert list(got.edges.dtypes) == list(want.edges.dtypes)
    assert got.nodes.index.equals(want.nodes.index)


def test_renumbered_is_map_then_fill():
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 50, 200)
    was = rng.choice(50, 20, replace=False)
    now = rng.integers(100, 200, 20)
    want = pd.Series(ids).map(pd.Series(now, index=was)).fillna(pd.Series(ids)).astype(np.int64)
    assert np.array_equal(split_mod._renumbered(ids, was, now), want.to_numpy())
    assert np.array_equal(split_mod._renumbered(ids, was[:0], now[:0]), ids)


def _pair_by_loop(g):
    """``pair_helper_bursts`` as round 7 wrote it (one Python turn per idle stretch): the
    reference of the lane-at-once version."""
    from traceread.passes.replay.graph import NEG

    n = g.nodes
    kind = n["kind"].to_numpy(object)
    lane = n["lane"].to_numpy()
    stepped = np.unique(lane[kind == "step"])
    helpers = np.setdiff1d(g.lanes.loc[g.lanes["what"] == "host", "lane"].to_numpy(), stepped)
    ts = n["ts_ns"].to_numpy(np.int64)
    end = ts + n["dur_ns"].to_numpy(np.int64)
    cost = n["cost_ns"].to_numpy(np.int64).copy()
    ids = n["id"].to_numpy()
    on_step = np.flatnonzero(np.isin(lane, stepped) & (kind != "step"))
    by_end = on_step[np.argsort(end[on_step], kind="stable")]
    e = g.edges
    has_thread = set(e.loc[e["kind"] == "thread", "dst"].tolist())
    order = np.lexsort((n["seq"].to_numpy(), lane))
    cat = n["cat"].to_numpy(object)
    add = []
    rel = n["release_ns"].to_numpy(np.int64).copy()
    for h in helpers.tolist():
        seq_idx = order[lane[order] == h]
        if not len(seq_idx):
            continue
        first = int(seq_idx[0])
        if rel[first] != NEG and ids[first] not in has_thread:
            k = np.searchsorted(end[by_end], ts[first], side="right") - 1
            if k >= 0:
                add.append((int(ids[by_end[k]]), int(ids[first]), int(ts[first] - end[by_end[k]])))
                rel[first] = NEG
        for a, b in zip(seq_idx[:-1].tolist(), seq_idx[1:].tolist()):
            idle = kind[a] == "host" and cat[a] in ("untraced", "wait") and \
                end[a] - ts[a] >= split_mod.HELPER_IDLE_NS and cost[a] == end[a] - ts[a]
            if not idle or ids[b] in has_thread:
                continue
            k = np.searchsorted(end[by_end], ts[b], side="right") - 1
            if k < 0:
                continue
            add.append((int(ids[by_end[k]]), int(ids[b]), int(ts[b] - end[by_end[k]])))
            cost[a] = 0
    return add, cost, rel


@pytest.mark.parametrize("path", [FIX / "gpu" / "data.bad.json.gz",
                                  FIX / "h200" / "xformer.bad.json.gz"], ids=lambda p: p.name)
def test_helper_bursts_paired_per_lane_as_by_the_loop(path):
    """gpu/data.bad pairs five bursts of its helper threads, h200/xformer one: the same
    edges, lags, freed idle and released firsts as the per-stretch loop."""
    g, ev, pattern = _graph_and_window(path)
    sg = split_mod.split(g, ev, pattern)
    want, cost, rel = _pair_by_loop(sg.copy())
    got = sg.copy()
    assert split_mod.pair_helper_bursts(got) == len(want) > 0
    e = got.edges[got.edges["kind"] == "thread"].iloc[-len(want):]
    assert list(zip(e["src"], e["dst"], e["lag_ns"])) == want
    assert np.array_equal(got.nodes["cost_ns"].to_numpy(), cost)
    assert np.array_equal(got.nodes["release_ns"].to_numpy(), rel)


@pytest.mark.parametrize("path", SPLIT_TRACES[:3], ids=lambda p: p.name)
def test_stretches_per_distinct_name_as_per_node(path):
    """The host stretches found with each distinct name matched once equal the per-node
    ``str.contains``, a null name included (not a call)."""
    g, _, _ = _graph_and_window(path)
    g = g.copy()
    names = g.nodes["name"].to_numpy(object).copy()
    names[np.flatnonzero(split_mod.stretches(g))[:1]] = None
    g.nodes["name"] = pd.Series(names, dtype=object)
    n = g.nodes
    want = (n["lane"].isin(g.lanes.loc[g.lanes["what"] == "host", "lane"])
            & n["kind"].isin(("host", "dataloader", "collective"))).to_numpy(bool, copy=True)
    at = np.flatnonzero(want)
    want[at] = ~n["name"].iloc[at].astype(str).str.contains(split_mod._CALL_RX,
                                                            regex=True).to_numpy()
    assert np.array_equal(split_mod.stretches(g), want)


def test_profiler_marks_lane_threads_as_by_loc():
    """The marks' per-node (pid, tid) is ``lanes.loc`` by the node's lane; a lane the table
    lacks raises as loc does."""
    from traceread.passes import overhead

    g, _, _ = _graph_and_window(FIX / "gpu" / "data.bad.json.gz")
    lanes = g.lanes.set_index("lane")
    pid, tid = overhead._lane_threads(g)
    assert np.array_equal(pid, lanes.loc[g.nodes["lane"], "pid"].to_numpy(np.int64))
    assert np.array_equal(tid, lanes.loc[g.nodes["lane"], "tid"].to_numpy(np.int64))
    bad = g.copy()
    bad.lanes = g.lanes.iloc[1:]
    with pytest.raises(KeyError):
        overhead._lane_threads(bad)


def _replace_runs_by_loc(g, runs, *, name, kind="launch"):
    """``StepGraph.replace_runs`` as round 7 wrote it (``loc`` by row labels, the ids'
    hash table): the reference."""
    n = g.nodes
    ids = n["id"].to_numpy()
    lane, seq = n["lane"].to_numpy(), n["seq"].to_numpy()
    pos = pd.Index(ids)
    into = np.full(len(n), -1, np.int64)
    rows, durs = [], []
    for first, last, dur_ns in runs:
        a, b = pos.get_loc(first), pos.get_loc(last)
        into[(lane == lane[a]) & (seq >= seq[a]) & (seq <= seq[b])] = int(first)
        rows.append(a)
        durs.append(int(dur_ns))
    out = g.copy()
    nodes = out.nodes
    at = n.index[rows]
    nodes.loc[at, ["kind", "name", "cat"]] = [kind, name, "launch"]
    nodes.loc[at, "dur_ns"] = durs
    nodes.loc[at, "cost_ns"] = durs
    e = out.edges
    src = e["src"].to_numpy().copy()
    dst = e["dst"].to_numpy().copy()
    ps, pd_ = pos.get_indexer(src), pos.get_indexer(dst)
    in_s = (ps >= 0) & (into[np.maximum(ps, 0)] >= 0)
    in_d = (pd_ >= 0) & (into[np.maximum(pd_, 0)] >= 0)
    src[in_s] = into[ps[in_s]]
    dst[in_d] = into[pd_[in_d]]
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    lag[in_s] = np.maximum(lag[in_s], 0)
    out.edges = pd.DataFrame({"src": src, "dst": dst, "kind": e["kind"].to_numpy(),
                              "lag_ns": lag})
    out.edges = out.edges[out.edges["src"] != out.edges["dst"]].reset_index(drop=True)
    out.nodes = nodes[~((into >= 0) & (ids != into))].reset_index(drop=True)
    return out


@pytest.mark.parametrize("path", [FIX / "gpu" / "launch.bad.json.gz",
                                  FIX / "h200" / "queue.bad.json.gz"], ids=lambda p: p.name)
def test_replace_runs_as_by_loc(path, monkeypatch):
    """A CUDA-graph capture's graph (``replace_runs`` of a run per step and thread) equals
    the loc-based build: nodes, dtypes, edges."""
    from traceread.passes.replay import graph as gmod
    from traceread.passes.replay import whatif

    g, p = _priced(path)
    got = whatif.BY_ID["cuda_graphs"].apply(g.copy(), p["facts"], {})
    monkeypatch.setattr(gmod.StepGraph, "replace_runs", _replace_runs_by_loc)
    want = whatif.BY_ID["cuda_graphs"].apply(g.copy(), p["facts"], {})
    assert got.nodes.equals(want.nodes) and got.edges.equals(want.edges)
    assert list(got.nodes.dtypes) == list(want.nodes.dtypes)
