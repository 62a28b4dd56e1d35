"""The rank input's host timeline carve (``multirank.inputs.host_activity``) and waits
(``waits.thread_waits``) in bounded memory: ``intervals.intersect_sorted`` /
``subtract_sorted`` give the same canonical sets as ``intervals.intersect`` / ``subtract``, and both passes give what the code before
issue 42's jobs round gave (every column of the thread's rows, the sweeps), kept here."""
from pathlib import Path

import numpy as np
import pytest

from traceread.jobs.multirank import inputs, waits
from traceread.passes import intervals
from traceread.readers import read

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = sorted(p for d in ("gloo/ddp2", "gloo/pp3", "gpu", "h200") for p in (FIXTURES / d).glob("*.json*")
                if not p.name.endswith("truth.json"))[:12]


def _random_set(rng, n: int, span: int) -> tuple:
    s = rng.integers(-span, span, n)
    return intervals.union(s, s + rng.integers(0, span // 4 + 1, n))


@pytest.mark.parametrize("seed", range(40))
def test_sorted_set_operations_equal_the_sweeps(seed):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n_a, n_b = rng.integers(0, 60, 2)
        span = int(rng.choice([5, 50, 10_000]))
        a, b = _random_set(rng, n_a, span), _random_set(rng, n_b, span)
        for got, want in ((intervals.intersect_sorted(a, b), intervals.intersect(a, b)),
                          (intervals.subtract_sorted(a, b), intervals.subtract(a, b))):
            assert got[0].dtype == want[0].dtype == np.int64
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def _old_host_activity(ev, thread):
    from traceread.passes.attribution import CPU_CATEGORIES, classify_host

    if not len(ev) or thread[0] < 0:
        return {}, (-1, -1)
    lo, hi = int(ev["ts"].min()), int((ev["ts"] + ev["dur"]).max())
    mine = ev[((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy()]
    cats = classify_host(mine)
    s = mine["ts"].to_numpy(np.int64)
    e = s + mine["dur"].to_numpy(np.int64)
    remaining = (np.array([lo], np.int64), np.array([hi], np.int64))
    out = {}
    for j, name in enumerate(CPU_CATEGORIES[:-1]):
        m = cats == j
        if not m.any():
            continue
        piece = intervals.intersect(remaining, intervals.union(s[m], e[m]))
        if len(piece[0]):
            out[name] = piece
            remaining = intervals.subtract(remaining, piece)
    return out, (lo, hi)


def _old_thread_waits(ev, thread):
    on = ((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy() & \
        ev["kind"].isin(waits.HOST_KINDS).to_numpy()
    mine = ev[on]
    from traceread.jobs.multirank.names import name_matches

    s = mine["ts"].to_numpy(np.int64)
    e = s + mine["dur"].to_numpy(np.int64)
    is_wait = name_matches(mine["name"], waits.WAIT_RX)
    is_sleep = name_matches(mine["name"], waits.SLEEP_RX)
    top = {}
    for n, d in zip(mine["name"].astype(str).to_numpy()[is_wait], (e - s)[is_wait]):
        top[n] = top.get(n, 0) + int(d)
    return {"waits": intervals.union(s[is_wait], e[is_wait]),
            "sleeps": intervals.union(s[is_sleep], e[is_sleep]),
            "wait_names": dict(sorted(top.items(), key=lambda kv: -kv[1])[:3])}


def _same_pairs(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        if isinstance(a[k], tuple):
            np.testing.assert_array_equal(a[k][0], b[k][0])
            np.testing.assert_array_equal(a[k][1], b[k][1])
        else:
            assert a[k] == b[k]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_carve_and_waits_equal_the_code_before(path):
    ev = read(path).events
    thread = inputs.issuing_thread(ev)
    got, got_span = inputs.host_activity(ev, thread)
    want, want_span = _old_host_activity(ev, thread)
    assert got_span == want_span
    _same_pairs(got, want)
    if thread[0] >= 0:
        _same_pairs(waits.thread_waits(ev, thread), _old_thread_waits(ev, thread))


def test_fixtures_found():
    assert len(TRACES) >= 6


def test_carve_and_waits_equal_the_code_before_on_a_job_with_waits(tmp_path):
    """A planted nsys gloo job: each process's thread waits (pthread_cond_wait, sleeps)."""
    import traceread
    from traceread.readers.nsys_split import split_processes
    from traceread.synth.multirank import write_nsys_gloo_job

    path, _ = write_nsys_gloo_job(tmp_path / "gloo.sqlite")
    found = 0
    for trace in split_processes(traceread.load(str(path))):
        ev = trace.events
        thread = inputs.issuing_thread(ev)
        got, want = waits.thread_waits(ev, thread), _old_thread_waits(ev, thread)
        _same_pairs(got, want)
        _same_pairs(inputs.host_activity(ev, thread)[0], _old_host_activity(ev, thread)[0])
        found += len(got["waits"][0]) > 0 and len(got["sleeps"][0]) >= 0 and bool(got["wait_names"])
    assert found >= 1


# --- issue 42, jobs round 4: the rank input a block of rows at a time (64 x 250 MB) --------

def _thread_table(seed: int, n: int = 400):
    """One thread's host rows of every carve category, overlapping and nested (long python
    frames across many blocks), plus a second thread and GPU kernels; ts-sorted."""
    from traceread.table import Trace, TraceMeta, build_table

    rng = np.random.default_rng(seed)
    kinds = np.array(["cpu_op", "runtime", "runtime", "python", "cpu_op", "cpu_op", "annotation",
                      "cpu_op", "kernel", "kernel", "cpu_op"])
    names = np.array(["aten::mm", "cudaLaunchKernel", "cudaStreamSynchronize", "train.py(12): step",
                      "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                      "record_param_comms", "ProfilerStep#1", "aten::add",
                      "ampere_sgemm_128x64_tn",
                      "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                      "c10d::allreduce_"])
    pick = rng.integers(0, len(kinds), n)
    ts = np.sort(rng.integers(0, 50_000, n))
    dur = rng.integers(0, 400, n)
    dur[rng.random(n) < 0.05] = rng.integers(2_000, 30_000)   # frames over many blocks
    dur[rng.random(n) < 0.05] = 0
    other = rng.random(n) < 0.15
    on_gpu = kinds[pick] == "kernel"
    cols = {"ts": ts, "dur": dur, "kind": list(kinds[pick]), "name": list(names[pick]),
            "pid": np.full(n, 7), "tid": np.where(other, 9, 7),
            "device": np.where(on_gpu, 0, -1), "stream": np.where(on_gpu, 7, -1)}
    return Trace(build_table(cols, n), TraceMeta(path="t.json", format="kineto")).events


@pytest.mark.parametrize("rows", [1, 2, 5, 64])
@pytest.mark.parametrize("seed", range(6))
def test_carve_by_blocks_equals_the_code_before(monkeypatch, rows, seed):
    """Pieces carried past a block and split at its edge come out as the whole carve's."""
    monkeypatch.setattr(inputs, "ACTIVITY_ROWS", rows)
    ev = _thread_table(seed)
    thread = (7, 7)
    got, got_span = inputs.host_activity(ev, thread)
    want, want_span = _old_host_activity(ev, thread)
    assert got_span == want_span and len(want) >= 3
    _same_pairs(got, want)
    shuffled = ev.sample(frac=1, random_state=seed).reset_index(drop=True)   # not ts-sorted
    _same_pairs(inputs.host_activity(shuffled, thread)[0], want)


@pytest.mark.parametrize("blocks", [2, 5, 40])
@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_carve_by_blocks_on_fixtures(monkeypatch, blocks, path):
    ev = read(path).events
    thread = inputs.issuing_thread(ev)
    mine = int(((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).sum())
    monkeypatch.setattr(inputs, "ACTIVITY_ROWS", max(1, -(-mine // blocks)))
    _same_pairs(inputs.host_activity(ev, thread)[0], _old_host_activity(ev, thread)[0])
    assert inputs.op_calls(ev, thread) == _old_op_calls(ev, thread)


def _old_op_calls(ev, thread, window=None):
    from traceread.jobs.multirank.names import name_matches
    from traceread.passes.attribution import COMM_RX
    from traceread.passes.common import take
    import pandas as pd

    on = ((ev["pid"] == thread[0]) & (ev["tid"] == thread[1])).to_numpy() & (ev["kind"] == "cpu_op").to_numpy()
    if window is not None:
        on &= (ev["ts"] >= window[0]).to_numpy() & (ev["ts"] < window[1]).to_numpy()
    mine = take(ev, np.flatnonzero(on), ["name", "dur"])
    if isinstance(mine["name"].dtype, pd.CategoricalDtype):
        mine["name"] = mine["name"].cat.remove_unused_categories()
    mine = mine[~name_matches(mine["name"], COMM_RX)]
    if not len(mine):
        return {}
    g = mine.groupby(mine["name"].astype(str), observed=True)["dur"].agg(["size", "sum"])
    g = g.sort_values("sum", ascending=False).head(inputs.OP_TOP)
    return {str(n): (int(c), int(t)) for n, c, t in zip(g.index, g["size"], g["sum"])}


@pytest.mark.parametrize("seed", range(6))
def test_op_calls_by_codes_equal_the_groupby_on_text(monkeypatch, seed):
    """Ties in time, a null name, communication ops, more names than OP_TOP, a window."""
    import pandas as pd

    monkeypatch.setattr(inputs, "ACTIVITY_ROWS", 7)
    monkeypatch.setattr(inputs, "OP_TOP", 10)
    rng = np.random.default_rng(seed)
    n = 300
    names = [f"aten::op{i}" for i in range(40)] + ["record_param_comms", "c10d::allreduce_", None]
    ev = pd.DataFrame({"ts": np.sort(rng.integers(0, 10_000, n)),
                       "dur": rng.choice([5, 10, 20], n),   # many equal totals: the sort's ties
                       "kind": pd.Categorical(rng.choice(["cpu_op", "runtime"], n, p=[0.9, 0.1])),
                       "name": pd.Categorical([names[i] for i in rng.integers(0, len(names), n)]),
                       "pid": 1, "tid": rng.choice([1, 2], n, p=[0.8, 0.2])})
    for window in (None, (2_000, 8_000)):
        got = inputs.op_calls(ev, (1, 1), window)
        assert got == _old_op_calls(ev, (1, 1), window) and len(got) == 10
        assert list(got) == list(_old_op_calls(ev, (1, 1), window))   # the same order
    plain = ev.assign(name=ev["name"].astype(object))   # not categorical: the groupby itself
    assert inputs.op_calls(plain, (1, 1)) == _old_op_calls(ev, (1, 1))


@pytest.mark.parametrize("seed", range(4))
def test_kernel_time_of_a_window_equals_the_window_copied(seed):
    ev = _thread_table(seed, 600)
    for window in (None, (5_000, 30_000), (60_000, 70_000)):
        part = ev if window is None else ev[(ev["ts"] >= window[0]).to_numpy() & (ev["ts"] < window[1]).to_numpy()]
        assert inputs.kernel_time(ev, window) == inputs.kernel_time(part)
    assert inputs.kernel_time(ev, (5_000, 30_000))


@pytest.mark.parametrize("seed", range(30))
def test_covered_ns_equals_the_sweep(seed):
    """The late windows' time in a category: prefix sums on a disjoint set, the sweep else."""
    from traceread.jobs.multirank.why import covered_ns

    rng = np.random.default_rng(seed)
    span = int(rng.choice([20, 500, 10_000]))
    win = _random_set(rng, int(rng.integers(0, 30)), span)
    disjoint = _random_set(rng, int(rng.integers(0, 80)), span)
    s = rng.integers(-span, span, 50)
    overlapping = (s, s + rng.integers(0, span // 3 + 1, 50))   # neither sorted nor disjoint
    for iv in (disjoint, overlapping, (disjoint[0][:0], disjoint[1][:0])):
        assert covered_ns(win, iv) == intervals.total(intervals.intersect(win, iv))


def test_rank_input_memory_does_not_grow_with_the_thread(monkeypatch):
    """The carve, the waits and the operator totals of a thread of 400 k disjoint host ops
    (a 250 MB rank has 1.77 M) allocate at most ~3x what they return: the code before took
    every row's columns and swept them whole (~9x: 250 MB over the trace at 250 MB)."""
    import tracemalloc

    from traceread.table import Trace, TraceMeta, build_table

    n = 400_000
    ts = np.arange(n, dtype=np.int64) * 1_000
    cols = {"ts": ts, "dur": np.full(n, 500), "kind": ["cpu_op"] * n,
            "name": ["aten::add", "aten::mm"] * (n // 2), "pid": np.full(n, 3), "tid": np.full(n, 3)}
    ev = Trace(build_table(cols, n), TraceMeta(path="t.json", format="kineto")).events
    monkeypatch.setattr(inputs, "ACTIVITY_ROWS", 1 << 15)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        act, _ = inputs.host_activity(ev, (3, 3))
        kept = tracemalloc.get_traced_memory()[0] - base
        peak_carve = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        waits.thread_waits(ev, (3, 3))
        ops = inputs.op_calls(ev, (3, 3))
        peak_rest = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    result = sum(a.nbytes + b.nbytes for a, b in act.values())
    assert result == 2 * 8 * n and ops == {"aten::add": (n // 2, 250 * n), "aten::mm": (n // 2, 250 * n)}
    assert kept <= 1.1 * result
    assert peak_carve <= 3 * result, (peak_carve, result)
    assert peak_rest <= 0.8 * result, (peak_rest, result)
