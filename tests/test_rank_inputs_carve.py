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
