"""The replay's loop in C (passes/replay/_csim.c) against its numpy reference (sim.py
``_sweeps_py``): the same ends, ready times, sweeps and convergence, on random lane graphs
(DAGs, cycles, sweep limits) and on the replay graphs of real traces with every what-if
model applied (issue 42)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traceread.analysis import analyze
from traceread.passes.replay import sim as sim_mod
from traceread.passes.replay import whatif
from traceread.passes.replay.graph import NEG

FIX = Path(__file__).parent / "fixtures"
csim = pytest.mark.skipif(sim_mod._csim is None, reason="the C replay loop is not built "
                          "(python setup.py build_ext --inplace)")


def _random_case(rng, n_lanes: int, per_lane: int, n_edges: int, cycles: bool):
    lanes = np.repeat(np.arange(n_lanes), per_lane)
    n = len(lanes)
    first = np.r_[True, lanes[1:] != lanes[:-1]]
    gap = np.where(first, 0, rng.integers(0, 50, n)).astype(np.int64)
    cost = rng.integers(0, 1000, n).astype(np.int64)
    rel = np.where(rng.random(n) < 0.2, rng.integers(0, 5000, n), NEG).astype(np.int64)
    step_c = gap + cost
    C = np.cumsum(step_c)
    base = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    C = C - (C[base] - step_c[base])
    # edges forward in a global order (a DAG: lane order and edges agree with ``rank``) or
    # anywhere (cycles)
    rank = np.arange(n) % per_lane * n_lanes + lanes
    src = rng.integers(0, n, n_edges)
    dst = rng.integers(0, n, n_edges)
    if not cycles:
        swap = rank[src] > rank[dst]
        src, dst = np.where(swap, dst, src), np.where(swap, src, dst)
        keep = rank[src] < rank[dst]
        src, dst = src[keep], dst[keep]
    lag = rng.integers(-20, 200, len(src)).astype(np.int64)
    drain = rng.random(len(src)) < 0.3
    s = (src[~drain], dst[~drain], lag[~drain])
    d = (src[drain], dst[drain], lag[drain])
    meas = C + rng.integers(0, 3000, n)
    return first, gap, cost, rel, C, s, d, meas


def _both(case, max_sweeps, fast_sweeps, monkeypatch):
    floor = np.int64(-(1 << 50))
    py = sim_mod._sweeps_py(*case, max_sweeps, fast_sweeps, floor)
    c = sim_mod._sweeps(*case, max_sweeps, fast_sweeps, floor)
    monkeypatch.setenv(sim_mod.SIM_ENV, "python")
    forced = sim_mod._sweeps(*case, max_sweeps, fast_sweeps, floor)
    monkeypatch.delenv(sim_mod.SIM_ENV)
    return py, c, forced


def _same(x, y):
    for u, v in zip(x, y):
        if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
            assert u is not None and v is not None
            assert u.dtype == v.dtype and np.array_equal(u, v)
        else:
            assert u == v


@csim
@pytest.mark.parametrize("cycles", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_c_loop_equals_numpy_loop_on_random_graphs(seed, cycles, monkeypatch):
    rng = np.random.default_rng(seed)
    case = _random_case(rng, n_lanes=int(rng.integers(1, 6)), per_lane=int(rng.integers(1, 60)),
                        n_edges=int(rng.integers(0, 200)), cycles=cycles)
    for max_sweeps, fast in ((sim_mod.MAX_SWEEPS, sim_mod.FAST_SWEEPS),
                             (sim_mod.MAX_SWEEPS, sim_mod.WHATIF_FAST_SWEEPS),
                             (sim_mod.MAX_SWEEPS, 1), (3, 6), (1, 6), (sim_mod.MAX_SWEEPS, 0)):
        py, c, forced = _both(case, max_sweeps, fast, monkeypatch)
        _same(py, c)
        _same(py, forced)


def test_random_cases_reach_every_branch(monkeypatch):
    """The random graphs above settle by sweeps, by the topological pass, hit the sweep limit
    and meet cycles (a test that never took a branch would prove nothing about it)."""
    seen = set()
    floor = np.int64(-(1 << 50))
    for seed in range(12):
        for cycles in (False, True):
            rng = np.random.default_rng(seed)
            case = _random_case(rng, int(rng.integers(1, 6)), int(rng.integers(1, 60)),
                                int(rng.integers(0, 200)), cycles)
            for fast in (sim_mod.FAST_SWEEPS, 1):
                _e, _a, _b, sweeps, conv = sim_mod._sweeps_py(*case, sim_mod.MAX_SWEEPS, fast,
                                                               floor)
                seen.add("settled by sweeps" if conv and sweeps <= fast else
                         "topological" if conv else "cycle")
            _e, _a, _b, sweeps, conv = sim_mod._sweeps_py(*case, 1, 6, floor)
            if not conv:
                seen.add("limit")
    assert seen == {"settled by sweeps", "topological", "cycle", "limit"}


def _schedules_equal(s1, s2):
    assert (s1.total_ns, s1.sweeps, s1.converged) == (s2.total_ns, s2.sweeps, s2.converged)
    for f in ("start_ns", "end_ns", "ready_ns", "drain_ns"):
        assert np.array_equal(getattr(s1, f), getattr(s2, f)), f
    assert s1.steps.equals(s2.steps)


@csim
@pytest.mark.parametrize("path", [FIX / "h200" / "xformer.bad.json.gz",
                                  FIX / "gpu" / "compile.bad.json.gz",
                                  FIX / "gpu" / "sync.bad.json.gz"], ids=lambda p: p.name)
def test_c_loop_equals_numpy_loop_on_real_graphs(path, monkeypatch):
    """The unmodified replay and every what-if model's replay: the same schedule and the same
    prices by either loop."""
    a = analyze(path)
    g = a.replay_graph
    assert g is not None
    for fast in (sim_mod.FAST_SWEEPS, sim_mod.WHATIF_FAST_SWEEPS, 0):
        c = sim_mod.simulate(g, fast_sweeps=fast)
        monkeypatch.setenv(sim_mod.SIM_ENV, "python")
        py = sim_mod.simulate(g, fast_sweeps=fast)
        monkeypatch.delenv(sim_mod.SIM_ENV)
        _schedules_equal(c, py)
    priced = a.facts.graph
    ctx = dict(a.context or {})
    regions = a.facts.frames.get("optimizer_regions")
    c = whatif.price_models(priced, ctx, a.copies, regions)
    monkeypatch.setenv(sim_mod.SIM_ENV, "python")
    whatif._BARE.clear()
    py = whatif.price_models(priced, ctx, a.copies, regions)
    assert c["models"] == py["models"] and c["before_ns"] == py["before_ns"]
    assert any(m["applied"] for m in c["models"].values())


def _nested(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Host rows as a thread records them: nested calls, zero-length ones, siblings that touch
    and a few that overlap without nesting; sorted by start, longest first."""
    ts = np.sort(rng.integers(0, 10 * n, n))
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 40, n))
    end = ts + dur
    order = np.lexsort((-(end - ts), ts))
    return ts[order].astype(np.int64), end[order].astype(np.int64)


@csim
@pytest.mark.parametrize("seed", range(20))
def test_c_parents_equal_python_parents(seed):
    from traceread.passes import factkit

    ts, end = _nested(np.random.default_rng(seed), 1 + seed * 37)
    par = np.empty(len(ts), np.int64)
    sim_mod._csim.parents(ts, end, par)
    assert par.tolist() == factkit.parents_py(ts, end).tolist()


@csim
@pytest.mark.parametrize("path", [FIX / "h200" / "xformer.bad.json.gz",
                                  FIX / "gpu" / "compile.bad.json.gz"], ids=lambda p: p.name)
def test_c_parents_on_real_threads(path, monkeypatch):
    from traceread import load
    from traceread.passes import factkit

    ev = load(path).events
    st = factkit.Stacks(ev)
    deep = 0
    for rows in st.by_thread.values():
        c = st._parents(rows)
        py = factkit.parents_py(st.ts[rows], st.end[rows])
        assert c.tolist() == py.tolist()
        deep += int((c >= 0).sum())
    assert deep > 100   # rows nested in others were compared, not only top-level ones


@pytest.mark.parametrize("ids", [np.arange(50), np.array([7, 3, 0, 12, 5]), np.array([], np.int64),
                                 np.array([10**12, 5, 3]), np.array([-4, 2, 9])],
                         ids=["dense", "shuffled", "empty", "sparse", "negative"])
def test_positions_are_get_indexer(ids):
    import pandas as pd

    ids = ids.astype(np.int64)
    want = np.array([0, 3, 5, 12, 49, 50, -1, -4, 10**12, 10**13, 7], np.int64)
    got = sim_mod.positions(ids, want, want[::-1].copy())
    assert [x.tolist() for x in got] == [pd.Index(ids).get_indexer(w).tolist()
                                         for w in (want, want[::-1])]
