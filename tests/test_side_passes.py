"""Side passes on forked workers (passes/side.py) give exactly the in-process analysis."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from traceread import load
from traceread import analysis as A
from traceread.passes.side import SidePasses
from traceread.readers import stream as S

# real traces with collectives, graphs, copies and torch.compile between them
TRACES = ["rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "tracelens_b200_eager_trace.json.gz",
          "tracelens_torch_compile_triton.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]


def _analysis_json(trace) -> str:
    return json.dumps(A.analyze(trace).to_dict(), sort_keys=True, default=str)


@pytest.mark.parametrize("name", TRACES)
def test_forked_side_passes_equal_in_process(name, monkeypatch):
    trace = load(FIXTURES / "kineto" / name)
    monkeypatch.setenv(S.WORKERS_ENV, "1")
    alone = _analysis_json(trace)
    monkeypatch.setattr(A, "PARALLEL_PASSES_ROWS", 0)
    monkeypatch.setenv(S.WORKERS_ENV, "3")
    started = []
    init = SidePasses.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        started.append(self.pool is not None)
    monkeypatch.setattr(SidePasses, "__init__", spy)
    assert _analysis_json(trace) == alone
    assert started == [True]


def _boom():
    raise ValueError("a pass failed")


def _double(x):
    return 2 * x


def test_side_jobs_run_here_without_a_pool_and_errors_propagate():
    with SidePasses(1, {"x": 21}) as side:
        assert side.pool is None
        side.submit("a", _double, side.ref("x"))
        assert side.get("a") == 42
    with SidePasses(2, {"x": 4}) as side:
        side.submit("a", _double, side.ref("x"))
        side.submit("b", _boom)
        assert side.get("a") == 8
        with pytest.raises(ValueError, match="a pass failed"):
            side.get("b")


def test_unpicklable_jobs_run_here_and_a_failure_does_not_hang():
    with SidePasses(3, {"x": 5}) as side:
        side.submit("lam", lambda v: v + 1, side.ref("x"))   # cannot be pickled
        side.submit("a", _double, side.ref("x"))
        assert "lam" not in side.futs and side.get("lam") == 6
        assert side.get("a") == 10
    with pytest.raises(RuntimeError, match="parent failed"):
        with SidePasses(3, {"x": 5}) as side:
            side.submit("slow", _sleep_then, side.ref("x"))
            raise RuntimeError("parent failed")   # the pool is stopped, not waited for


def _sleep_then(x):
    import time

    time.sleep(30)
    return x


def _slow_square(x):
    import os
    import time
    time.sleep(0.05)   # long enough that a child starts before this process took them all
    return x * x, os.getpid()


def test_map_forked_gives_the_list_in_order_and_shares_the_items():
    import os

    from traceread.passes.side import map_forked
    out = map_forked(_slow_square, range(12), workers=2)
    assert [v for v, _ in out] == [x * x for x in range(12)]
    pids = {p for _, p in out}
    assert out[0][1] == os.getpid()   # the first item runs here, before the fork
    assert len(pids) == 2, "no item ran on a child"
    assert map_forked(_slow_square, range(3), workers=1) == [(x * x, os.getpid())
                                                              for x in range(3)]


@pytest.mark.parametrize("rel", ["h200/xformer.bad.json.gz", "gpu/compile.bad.json.gz"])
def test_levers_priced_on_forked_workers_equal_in_process(rel, monkeypatch):
    """The what-if models' replays shared with forked children (analysis._decide): the same
    analysis, and the children did price some of them."""
    from traceread.passes import side as side_mod
    from traceread.passes.replay import whatif

    trace = load(FIXTURES / rel)
    monkeypatch.setenv(S.WORKERS_ENV, "1")
    alone = _analysis_json(trace)
    monkeypatch.setattr(A, "PARALLEL_PASSES_ROWS", 0)
    monkeypatch.setenv(S.WORKERS_ENV, "2")
    calls = []
    real = side_mod.map_forked

    def spy(fn, items, workers, first=1):
        out = real(fn, items, workers, first)
        calls.append((fn.func, len(out), workers))
        return out
    monkeypatch.setattr(A, "map_forked", spy)
    assert _analysis_json(trace) == alone
    assert calls == [(whatif._replay_one, len(whatif.MODELS), 2)]


def _pid_after(s):
    import os
    import time

    time.sleep(s)
    return os.getpid()


def test_a_job_no_worker_started_runs_here():
    """One worker busy with a long job: the jobs queued behind it are not waited for, the
    caller runs them itself (SidePasses.get); the long one still comes from the worker."""
    import os

    with SidePasses(2, {}) as side:
        side.submit("long", _pid_after, 1.5)
        for k in range(4):
            side.submit(f"q{k}", _pid_after, 0)
        here = [side.get(f"q{k}") for k in (3, 2)]
        assert os.getpid() in here   # at most the one queued call item went to the worker
        assert side.get("long") != os.getpid()
        side.get("q0"), side.get("q1")


# -- round 9: the caller runs queued jobs while it waits -------------------------------------

def _pid_of(x):
    import os

    return x, os.getpid()


def test_a_caller_waiting_for_a_running_job_runs_the_queued_ones_meanwhile():
    """Waiting for a job a worker runs, the caller takes the jobs no worker has started and
    hands each its result when asked (the same values). Which of them the pool had already
    moved to its call queue is the pool's timing (a clean-clone CI run: q3, where this test
    assumed the first ones), not the caller's: at most two of the five."""
    import os

    with SidePasses(2, {}) as side:
        side.submit("long", _pid_after, 1.5)
        for k in range(5):
            side.submit(f"q{k}", _pid_of, k)
        assert side.get("long") != os.getpid()
        here = sorted(side.ran)
        assert len(here) >= 3   # at most two were handed to the worker's queue
        got = [side.get(f"q{k}") for k in range(5)]
        assert [v for v, _ in got] == list(range(5))
        assert all(got[int(k[1:])][1] == os.getpid() for k in here)
        assert not side.ran and not side.jobs


def test_a_job_marked_here_is_taken_first_while_waiting_and_errors_wait_for_their_get():
    import os

    with SidePasses(2, {"x": 3}) as side:
        side.submit("long", _pid_after, 1.0)
        for k in range(3):   # what the worker's call queue may hold ahead of the rest
            side.submit(f"f{k}", _pid_of, k)
        side.submit("bad", _boom)
        side.submit("mine", _pid_of, side.ref("x"), here=True)
        assert side.get("long") != os.getpid()
        assert side.ran["mine"] == (True, (3, os.getpid()))
        # "bad" ran here or on the worker, as the pool's call queue took it (timing: a clean-
        # clone CI found it on the worker); either way its error waits for its get
        assert side.ran.get("bad", (False, None))[0] is False
        with pytest.raises(ValueError, match="a pass failed"):
            side.get("bad")
        assert side.get("mine") == (3, os.getpid())
        assert [side.get(f"f{k}")[0] for k in range(3)] == [0, 1, 2]
    with SidePasses(1, {"x": 3}) as side:   # no pool: it runs when asked for
        side.submit("mine", _pid_of, side.ref("x"), here=True)
        assert side.get("mine") == (3, os.getpid())


def test_no_job_is_run_ahead_in_the_middle_of_a_pass():
    """``inside`` (asked from inside another pass, whose temporaries are live): the caller
    waits rather than start more work on top of them."""
    import os

    with SidePasses(2, {}) as side:
        side.submit("long", _pid_after, 0.8)
        for k in range(4):
            side.submit(f"q{k}", _pid_of, k)
        assert side.get("long", release=False, inside=True) != os.getpid()
        assert not side.ran
        for k in range(4):
            side.get(f"q{k}")
