"""Waiting threads are not working threads (docs/analysis.md §3, ``wait``).

Planted truth in every format: two launch threads (a main thread and an autograd-like
worker), the worker parked in a wait through every gap. A wait is an OS-runtime call on
nsys (``pthread_cond_wait``) and a python frame on Kineto (``threading.py: wait``).
"""
from __future__ import annotations

import lzma

import pytest

from conftest import materialise
from traceread.analysis import analyze
from traceread.passes import attribution as A
from traceread.synth.scenarios import MS, US, TraceBuilder

MAIN, WORKER = 1, 2
FORMS = ("table", "kineto-2.4", "nsys")


def _wait(b: TraceBuilder, how: str, ts: int, dur: int, tid: int) -> None:
    if how.startswith("kineto"):   # Kineto has no OS calls: Condition.wait as a python frame
        b.cpu("threading.py(359): wait", ts, dur, kind="python", tid=tid)
    else:
        b.cpu("pthread_cond_wait", ts, dur, kind="osrt", tid=tid)


def two_threads(how: str):
    """Three 10 ms gaps, [0.1, 10.1), [10.2, 20.2), [20.3, 30.3) ms. The worker launches
    K1/K3 (so it is a launch thread) and then sits in ``autograd_worker`` (an enclosing
    range) parked in a wait through all three gaps. The main thread:
      gap 1: ``aten::mm`` for 4 ms, then 6 ms of nothing traced (untraced Python);
      gap 2: parked in a wait inside ``my_block`` -> every launch thread waits: ``wait``;
      gap 3: parked in a wait inside ``c10d::allreduce_`` -> the collective's: ``comm_wait``.
    """
    b = TraceBuilder()
    # each kernel launched the instant it runs (zero-length calls): the host was late, so the
    # gaps are the host's to explain, not ``queued``
    b.launch(0, 0, 0, 100 * US, tid=MAIN)
    b.launch(10_100 * US, 0, 10_100 * US, 100 * US, tid=WORKER)
    b.launch(20_200 * US, 0, 20_200 * US, 100 * US, tid=MAIN)
    b.launch(30_300 * US, 0, 30_300 * US, 100 * US, tid=WORKER)
    b.cpu("autograd_worker", 80, 31 * MS, tid=WORKER)
    _wait(b, how, 100 * US, 30_200 * US, WORKER)
    b.cpu("aten::mm", 100 * US, 4 * MS, tid=MAIN)
    b.cpu("my_block", 10_200 * US, 10 * MS, tid=MAIN)
    _wait(b, how, 10_200 * US, 10 * MS, MAIN)
    b.cpu("c10d::allreduce_", 20_300 * US, 10 * MS, tid=MAIN)
    _wait(b, how, 20_300 * US, 10 * MS, MAIN)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_a_waiting_thread_explains_nothing_by_itself(how, tmp_path):
    a = analyze(materialise(two_threads(how), how, tmp_path, "wait"), steps="all")
    g = a.gaps.sort_values("start").reset_index(drop=True)
    assert len(g) == 3
    got = [{c: int(r[f"cpu_{c}"]) for c in A.CPU_CATEGORIES if r[f"cpu_{c}"]}
           for _, r in g.iterrows()]
    # the worker's enclosing range and its wait are not work: the main thread's op and its
    # untraced time explain gap 1 (before: 10 ms of cpu_op)
    assert got[0] == {"cpu_op": 4 * MS, "untraced": 6 * MS}
    assert got[1] == {"wait": 10 * MS}            # both launch threads parked
    assert got[2] == {"comm_wait": 10 * MS}       # a wait inside a collective is the collective's
    assert a.attribution["by_cpu"]["wait"] == 10 * MS


@pytest.mark.parametrize("how", FORMS)
def test_wait_time_is_no_host_cause(how, tmp_path):
    from traceread.passes.causes import cause_parts

    a = analyze(materialise(two_threads(how), how, tmp_path, "wait"), steps="all")
    parts = cause_parts(a.gaps)
    assert parts["comms"] == 10 * MS
    assert parts["host"] == 10 * MS                 # gap 1 only: 4 ms op + 6 ms untraced
    assert parts["unexplained"] == 10 * MS          # gap 2: waiting on nothing the trace shows


def test_a_thread_with_no_row_in_a_gap_does_not_veto_wait():
    """A launch thread that shows nothing at all in a gap neither works nor waits there as
    far as the trace shows: the other thread's wait is the gap's."""
    b = TraceBuilder()
    b.launch(0, 10, 0, 100 * US, tid=MAIN)
    b.launch(20, 10, 10_100 * US, 100 * US, tid=WORKER)   # the worker: no row in the gap
    b.cpu("train.py(3): step", 100 * US, 10 * MS, kind="python", tid=MAIN)
    b.cpu("threading.py(359): wait", 100 * US, 10 * MS, kind="python", tid=MAIN)
    g = analyze(b.build(), steps="all").gaps.iloc[0]
    assert int(g["cpu_wait"]) == 10 * MS and g["cpu"] == "wait"


def _sqlite(tmp_path_factory, name: str):
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "gpu" / f"{name}.sqlite.xz"
    out = tmp_path_factory.mktemp("gpu") / f"{name}.sqlite"
    with lzma.open(src) as f, open(out, "wb") as dst:
        dst.write(f.read())
    return out


def test_recompiling_job_waits_are_not_host_work(tmp_path_factory):
    """Real H100 whole-program nsys capture of a job that recompiles every step: the
    autograd thread parks in ``pthread_cond_wait`` and the main thread waits on the compiler
    it spawned (``waitpid``) -- neither is ``cpu_op`` host work any more."""
    import traceread

    a = traceread.analyze(str(_sqlite(tmp_path_factory, "compile.bad")), steps="all")
    top = a.top_ops.set_index("name")
    assert top.loc["waitpid", "category"] == "wait"
    by = a.attribution["by_cpu"]
    assert by["cpu_op"] < 0.2 * sum(by.values())
    assert a.verdict["bound"] != "host" or "cpu_op" not in a.verdict["summary"]


def test_data_loading_job_condition_waits_are_not_host_work(tmp_path_factory):
    """Real H100 nsys capture, DataLoader with num_workers=0 sleeping in __getitem__: the
    planted sleep stays host work, the threads' ``pthread_cond_wait`` does not."""
    import traceread

    a = traceread.analyze(str(_sqlite(tmp_path_factory, "data.bad")))
    top = a.top_ops.set_index("name")
    assert top.loc["pthread_cond_wait", "category"] == "wait"
    assert top.loc["clock_nanosleep", "category"] == "cpu_op"
    assert "clock_nanosleep" in a.verdict["summary"]


@pytest.mark.parametrize("how", ("table", "nsys"))
def test_idle_spent_waiting_reads_as_waiting_not_untraced(how, tmp_path):
    """Every launch thread parked through every gap: the host was traced, it was waiting; the
    verdict says so and asks what it waited for (not "record CPU activity")."""
    from traceread.verdict import scores as V

    b = TraceBuilder()
    for k in range(4):
        t = k * 10_100 * US
        b.launch(t, 0, t, 100 * US, tid=MAIN)
        if k < 3:
            _wait(b, how, t + 100 * US, 10 * MS, MAIN)
    a = analyze(materialise(b.build(), how, tmp_path, "parked"), steps="all")
    v = a.verdict
    assert v["bound"] == "unknown" and v["title"] == V.WAITING_TITLE
    assert v["evidence"]["waiting_ns"] == 30 * MS
    assert v["actions"][0]["id"] == "find_the_wait"
