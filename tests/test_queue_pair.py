"""The H200 queue pair (issue 37): 400 queued bf16 GEMMs a step, torch.cuda.synchronize()
at each step's end (bad) or none (fixed). What the plain runs' own captures show -- the nsys
captures *are* the plain runs, with NVTX steps -- and what the replay must keep promising.

The plain fixed run's host-timed step (10.69 ms, ``*.plain.truth.json``) is its host's enqueue
time: without the sync the host runs ahead of the GPU by ~0.83 ms a step (9.5 ms by step 11),
and the GPU finishes a step every 11.57 ms -- the program's step, as ``analyze`` reports it
(GPU-bound on 11 of 11 steps). The sync's own cost is the GPU idle between steps while the
host wakes and launches again: ~46 us a step. The ~0.86 ms of GPU idle inside each step is
GPU-side gaps between back-to-back kernels (800 x ~1.07 us), in bad and fixed alike. So
dropping the sync saves ~0.5% of the step, and the replay's 0.2-0.4% promise holds; the
8.1 points "realised" against the host-timed steps are host time, not the program's step."""
from __future__ import annotations

import lzma
from functools import lru_cache
from pathlib import Path

import pytest

import traceread
from traceread.passes.replay import whatif as W

FIX = Path(__file__).parent / "fixtures" / "h200"


@lru_cache(maxsize=None)
def _nsys(variant: str, tmp: str):
    p = Path(tmp) / f"queue.{variant}.sqlite"
    if not p.exists():
        p.write_bytes(lzma.open(FIX / f"queue.{variant}.sqlite.xz").read())
    return traceread.analyze(str(p))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("queue"))
    return {v: _nsys(v, tmp) for v in ("bad", "fixed")}


def _program(a) -> dict:
    return a.facts.figures["program_step"]


def test_the_plain_fixed_run_is_paced_by_its_gpu_not_its_host_timing(plain):
    import json
    import statistics

    p = _program(plain["fixed"])
    assert p["bound_by"] == "gpu" and p["gpu_bound_steps"] == p["steps"] == 11
    assert 11.50e6 <= p["mean_ns"] <= 11.65e6            # the GPU's step
    assert 10.60e6 <= p["host_mean_ns"] <= 10.90e6       # the host's enqueue time
    assert p["host_ahead_ns"] >= 700_000
    host = json.loads((FIX / "queue.fixed.plain.truth.json").read_text())["step_ns"]
    timed = statistics.median(v for k, v in host.items() if int(k) >= 2)
    assert timed < 0.93 * p["mean_ns"]                   # host-timed: 8% short of the program


def test_the_sync_costs_the_gpu_tens_of_microseconds_a_step_not_the_inner_gaps(plain):
    bad, fixed = _program(plain["bad"]), _program(plain["fixed"])
    saved = bad["mean_ns"] - fixed["mean_ns"]
    assert 20_000 <= saved <= 120_000                    # ~60 us a step
    # the GPU-side gaps inside the step are the same without the sync
    busy_b = plain["bad"].facts.figures["busy_step_mean_ns"]
    busy_f = plain["fixed"].facts.figures["busy_step_mean_ns"]
    idle_b, idle_f = bad["gpu_mean_ns"] - busy_b, fixed["gpu_mean_ns"] - busy_f
    assert 800_000 <= idle_f <= 900_000 and abs(idle_b - idle_f) <= 50_000


@pytest.mark.parametrize("fmt", ["nsys", "kineto"])
def test_drop_syncs_promise_holds_against_the_plain_runs_program_steps(plain, fmt):
    bad, fixed = _program(plain["bad"]), _program(plain["fixed"])
    realised = 100.0 * (bad["mean_ns"] - fixed["mean_ns"]) / bad["mean_ns"]
    a = plain["bad"] if fmt == "nsys" else traceread.analyze(str(FIX / "queue.bad.json.gz"))
    g, why = W.graph_of(a)
    assert g is not None, why
    base, _, _ = W.unprofiled_base(g)
    r = W.replay_models(base, W.facts_from_analysis(a), ["drop_syncs"], {})
    assert r["applied"] == ["drop_syncs"]
    promise = 100.0 * r["saves_ns"] / r["before_ns"]
    assert abs(promise - realised) <= 1.0, (promise, realised)
