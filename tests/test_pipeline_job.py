"""A pipeline job's verdict from its stages' own compute, interleaved schedules, and the job's
per-group rows (docs/parallelism.md, "A job's pipeline"; docs/batch.md, "Groups").

Real recordings (``scripts/record_gloo_parallel.py pp``, CPU torch 2.13, gloo, one host with
2 cores): ``truth.json`` holds each stage's busy time per step measured by the loop (module
hooks) -- traceread never sees it. The balanced ones have equal layers per stage; in
``pp_gpipe3_slow1`` rank 1 has 3x the layers.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceread
from traceread.jobs import multirank as mr
from traceread.render.cross_rank import groups_line, render_text
from traceread.jobs.multirank import groups
from traceread.jobs.multirank.inputs import RankInput
from traceread.passes.parallelism import parallelism

GLOO = Path(__file__).resolve().parent / "fixtures" / "gloo"
MS = 1_000_000


def _load(name: str):
    d = GLOO / name
    truth = json.loads((d / "truth.json").read_text())
    traces = [traceread.load(d / f"rank-{r}.json.gz") for r in range(truth["world_size"])]
    return truth, traces


def _truth_busy(truth: dict) -> dict[int, float]:
    """The loop's median busy time per step of each stage."""
    return {int(r): float(np.median([x["busy_ns"] for x in rows]))
            for r, rows in truth["per_rank"].items()}


@pytest.mark.parametrize("job", ["pp_gpipe3_balanced", "pp_1f1b_m8_balanced"])
def test_balanced_pipeline_names_no_straggler(job):
    """Equal layers per stage: the fill/drain waits at send/recv are the schedule's, so no
    straggler -- although the collective matching alone names one on pp_gpipe3_balanced."""
    truth, traces = _load(job)
    t = _truth_busy(truth)
    assert max(t.values()) / np.median(list(t.values())) < groups.IMBALANCE_X   # the loop agrees
    res = mr.analyze_traces(traces)[0]
    jv = res.verdict()
    assert jv["status"] == "none" and jv["basis"] == "pipeline" and jv["straggler_rank"] == -1
    assert "fill and drain" in jv["summary"]
    assert res.stages["slow_stage"] is None and res.stages["stages"] == truth["world_size"]
    assert res.seed["slowdown"]["locality"] == "global"


PP3 = GLOO / "pp3"


def _pp3(name: str):
    d = PP3 / name
    truth = json.loads((d / "truth.json").read_text())
    return truth, [traceread.load(d / f"rank-{r}.json.gz") for r in range(truth["world_size"])]


def _loop_work(truth: dict) -> dict[int, float]:
    """The loop's own work per step of each stage (median): its step less the time inside
    the schedule's P2P calls (``_batch_p2p`` + ``_wait_batch_p2p``, timed by the loop)."""
    return {int(r): float(np.median([x["step_ns"] - x["p2p_ns"] for x in rows]))
            for r, rows in truth["per_rank"].items()}


@pytest.mark.parametrize("job", ["gpipe_p2_m4_heavy1", "1f1b_p4_m4_heavy2", "gpipe_p2_m4_sleep1",
                                 "1f1b_p4_m4_sleep1"])
def test_planted_slow_stage_is_named_with_its_excess(job):
    """Heavy: the planted stage has 3x the layers. Sleep: it sleeps 15 ms inside each
    microbatch's forward, which no operator records -- the stage's work is its step less its
    comm waits, so the sleep counts (traced compute alone read "no straggler" there). The
    stage is named; its excess over the other stages' median agrees with the loop's within
    20% (heavy1 79.8 ms vs 79.7; heavy2 18.1 vs 21.8; sleep p=2 64.7 vs 64.7; sleep p=4
    64.5 vs 64.7); a sleeping stage's excess is named untraced (61.2 / 59.1 ms of the 60 ms
    planted), with the lever to find that work instead of moving layers."""
    truth, traces = _pp3(job)
    slow = truth["args"]["slow_stage"]
    t = _loop_work(truth)
    want = t[slow] - np.median([v for r, v in t.items() if r != slow])
    res = mr.analyze_traces(traces)[0]
    jv = res.verdict()
    assert jv["status"] == "straggler" and jv["basis"] == "pipeline"
    assert jv["straggler_rank"] == slow and res.stages["slow_stage"] == slow
    assert abs(jv["late_by_ns"] - want) <= 0.20 * want
    for r, v in t.items():     # every stage's work within 20% of the loop's
        assert abs(res.stages["busy_ns_by_stage"][r] - v) <= 0.20 * v, (r, v)
    stage_rows = [g for g in res.groups if g["kind"] == "pp_stage"]
    assert [g["ranks"] for g in stage_rows] == [[r] for r in range(truth["world_size"])]
    busiest = max(stage_rows, key=lambda g: g["busy_ns_per_step"])
    assert busiest["stage"] == slow
    levers = traceread.job(traces).levers
    assert "more microbatches" not in levers[0]["lever"]
    # 2m takes off the slowest stage half its fill and drain: the other stages' work over
    # 2m (the loop's). The balanced theory on the whole step said 40.5 ms over heavy1's 2
    # steps (the loop: 7.7) and 30.1 on 1f1b sleep1 (18.7)
    more_mb = [x for x in levers if x["id"] == "pp_microbatches"]
    others = (sum(t.values()) - t[slow]) * len(truth["per_rank"]["0"])   # over the steps
    for x in more_mb:
        assert x["saves_ns"] <= 1.2 * others / (2 * truth["args"]["microbatches"]), x
    if truth["args"]["sleep_ms"]:   # the excess is the planted sleep: untraced, 4 x 15 ms a step
        planted = truth["args"]["sleep_ms"] * 1e6 * truth["args"]["microbatches"]
        assert jv["cause"] == "stage_untraced" and "outside profiled ops" in levers[0]["lever"]
        assert abs(res.stages["untraced_excess_ns"] - planted) <= 0.10 * planted
    else:                           # 3x the layers: traced compute, move layers off it
        assert jv["cause"] == "stage_compute" and levers[0]["id"] == "pp_rebalance"


PP3_JOBS = sorted(p.name for p in PP3.iterdir() if (p / "truth.json").is_file()) if PP3.is_dir() else []


@pytest.mark.parametrize("job", PP3_JOBS)
def test_bubble_is_the_steps_share_in_p2p_calls(job):
    """Each stage's bubble = the share of its steps spent in the schedule's P2P calls (issue
    + blocking wait), within 5 points of the loop's own timing of those calls on every
    schedule recorded (GPipe, 1F1B, interleaved; p = 2, 4; m = 4, 8; balanced, heavy and
    sleeping stages). Worst: 1f1b_p4_m4_heavy2 rank 1 64.0 vs 68.3, 1f1b_p4_m8 rank 3 46.8
    vs 50.8; most within 1 point."""
    truth, traces = _pp3(job)
    a = truth["args"]
    read, analyses = [], [traceread.analyze(t, steps="all") for t in traces]
    for t, an in zip(traces, analyses):
        pl = an.parallelism["pipeline"]
        r = t.meta.rank
        rows = truth["per_rank"][str(r)]
        loop = 100 * sum(x["p2p_ns"] for x in rows) / sum(x["barrier_ns"] + x["step_ns"] for x in rows)
        assert abs(pl["bubble_pct_by_stage"][str(r)] - loop) <= 5, (r, loop)
        assert pl["stages"] == truth["world_size"]
        # torch 2.13's 1F1B marks no microbatch on a middle stage: m from its sends (two per
        # microbatch), the schedule unread there (the first stage's order of a 1F1B with
        # m <= p reads as GPipe's): the stages that read one agree
        assert pl["microbatches"] == a["microbatches"]
        read.append(pl["schedule"])
    assert a["schedule"] in read
    # the job of those analyses (the whole trace each): what job(traces, steps="all") builds
    layout = traceread.job(analyses).layout["pipeline"]
    assert (layout["schedule"], layout["microbatches"]) == (a["schedule"], a["microbatches"])


def test_stage_busy_matches_the_loop():
    """A stage's compute: its operators minus the comm calls it issues (a c10d::recv_ issued
    while an earlier gloo:send span still runs is a call of its own). Within 5% of the loop's
    hooks on every stage of the 3-stage recordings, middle stage included."""
    for job in ("pp_gpipe3_balanced", "pp_gpipe3_slow1"):
        truth, traces = _load(job)
        for t in traces:
            a = traceread.analyze(t)
            r = a.parallelism["rank"]
            loop = sum(x["busy_ns"] for x in truth["per_rank"][str(r)])
            assert abs(a.parallelism["pipeline"]["busy_ns"] - loop) <= 0.05 * loop, (job, r)


def test_middle_stage_reads_its_schedule_from_the_stage_ranges():
    """``Forward i`` / ``Backward i`` ranges give m and the schedule on every stage."""
    truth, traces = _load("pp_gpipe3_balanced")
    pl = traceread.analyze(traces[1]).parallelism["pipeline"]
    assert pl["stage"] == 1 and pl["microbatches"] == truth["args"]["microbatches"] == 4
    assert pl["schedule"] == "gpipe" and pl["virtual_stages"] == 1
    assert pl["theoretical_bubble_pct"] == 33.3   # (3-1)/(4+3-1)


def test_interleaved_schedule_detected_with_its_theory():
    """ScheduleInterleaved1F1B, 2 ranks x 2 stages each: ``PP:<stage>F<i>`` ranges name the
    stages; theory (p-1)/(v m + p-1) = 1/9."""
    truth, traces = _load("pp_interleaved2")
    for t in traces:
        a = traceread.analyze(t)
        pl = a.parallelism["pipeline"]
        assert pl["schedule"] == "interleaved" and pl["virtual_stages"] == 2
        assert pl["microbatches"] == 4 and pl["theoretical_bubble_pct"] == 11.1


def _rank_input(r: int, busy_ns: int, steps: int = 4) -> RankInput:
    st = pd.DataFrame({"step": np.arange(steps), "ts": np.arange(steps) * 100 * MS,
                       "dur": np.full(steps, 60 * MS), "busy_ns": np.full(steps, busy_ns)})
    return RankInput(path=f"rank-{r}", rank=r, steps=st)


def _planted_pp_dp() -> pd.DataFrame:
    """Matches of a 2 (PP) x 2 (DP) job: pipelines [0, 2] and [1, 3] (stage 0: ranks 0, 1;
    stage 1: ranks 2, 3), DP groups ``mesh_dp`` [0, 1] and [2, 3]; 4 steps. In DP group
    [2, 3] rank 3 arrives 2 ms late at each all_reduce: rank 2 waits 2 ms."""
    rows, inst = [], 0
    for step in range(4):
        for a, b in ((0, 2), (1, 3)):
            for lane, src, dst in ((f"p2p:{a}>{b}", a, b), (f"p2p:{b}>{a}", b, a)):
                rows += [dict(lane=lane, instance=inst, rank=src, collective="send", wait_ns=0,
                              lateness_ns=0),
                         dict(lane=lane, instance=inst, rank=dst, collective="recv", wait_ns=0,
                              lateness_ns=0)]
                inst += 1
        for pg, (a, b), late in (("pg:mesh_dp_0", (0, 1), 0), ("pg:mesh_dp_1", (2, 3), 2 * MS)):
            rows += [dict(lane=pg, instance=inst, rank=a, collective="all_reduce", wait_ns=late,
                          lateness_ns=0),
                     dict(lane=pg, instance=inst, rank=b, collective="all_reduce", wait_ns=0,
                          lateness_ns=late)]
            inst += 1
    return pd.DataFrame(rows)


def test_groups_of_a_planted_pp_x_dp_job():
    """Stage 1 (ranks 2, 3) computes 30 ms a step, stage 0 10 ms: stage 1 is named with
    20 ms of excess; the DP group [2, 3] holds 2 ms a step of lateness, by rank 3."""
    m = _planted_pp_dp()
    inputs = [_rank_input(0, 10 * MS), _rank_input(1, 10 * MS), _rank_input(2, 30 * MS),
              _rank_input(3, 30 * MS)]
    pipes = groups.pipelines(m)
    assert pipes == [[0, 2], [1, 3]]
    st = groups.stage_balance(pipes, groups.rank_busy(inputs))
    assert st["slow_stage"] == 1 and st["stage_ranks"] == [[0, 1], [2, 3]]
    assert st["excess_ns"] == 20 * MS and st["slowest_x_others"] == 3.0
    rows = groups.job_groups(m, inputs, pipes)
    by = {(g["kind"], tuple(g["ranks"])): g for g in rows}
    assert by[("pp_stage", (2, 3))]["busy_ns_per_step"] == 30 * MS
    assert by[("pp_stage", (0, 1))]["stage"] == 0
    dp = by[("dp", (2, 3))]
    assert dp["lateness_ns_per_step"] == 2 * MS and dp["late_rank"] == 3
    assert dp["wait_ns_per_step"] == 1 * MS          # rank 2 waits 2 ms, rank 3 none: mean
    assert by[("dp", (0, 1))]["lateness_ns_per_step"] == 0
    line = groups_line(rows, st)
    assert "stage 1 (ranks 2, 3) computes 3.0x" in line and "dp group [2, 3]" in line

    # balanced stages: no slow stage
    even = [_rank_input(r, 10 * MS) for r in range(4)]
    assert groups.stage_balance(pipes, groups.rank_busy(even))["slow_stage"] is None


def test_job_json_has_group_rows(tmp_path):
    """``cross_rank[].groups`` and ``pipeline_stages`` validate against the schema."""
    from click.testing import CliRunner

    from traceread.cli import main
    from traceread.schema import check

    d = GLOO / "pp_gpipe3_slow1"
    out = CliRunner().invoke(main, ["analyze", *(str(d / f"rank-{r}.json.gz") for r in range(3)),
                                    "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    check("analyze", doc)
    job = doc["cross_rank"][0]
    assert job["pipeline_stages"]["slow_stage"] == 1
    assert {g["kind"] for g in job["groups"]} >= {"pp_stage", "pp"}
    assert job["parallelism"]["pipeline"]["schedule"] == "gpipe"


def test_synthetic_pp_x_dp_job_names_the_slow_stage_and_the_late_dp_group():
    """traceread.synth.pipeline: 2 pipelines x 2 stages, GPipe m=4, stage 1 computes 2x;
    rank 1 reaches its DP all_reduce 3 ms late (untraced work: its own, so stage 0 works
    1.5 ms more per step on average). The job names stage 1 (ranks 2, 3) with the planted
    excess exactly, and the DP group [0, 1] held back 3 ms a step by rank 1."""
    from traceread.synth.pipeline import PPxDP, make_pp_dp_job

    spec = PPxDP(dp_late_rank=1, dp_late_ns=3 * MS)
    truth = spec.truth()
    res = mr.analyze_traces(make_pp_dp_job(spec))[0]
    assert res.stages["stage_ranks"] == [[0, 1], [2, 3]]
    # each stage's work per step is its mean over the steps (the layout's too): one step's
    # 50 us edge (nothing traced after the last all_reduce) adds 12.5 us to stage 0's
    assert truth["busy_ns_by_stage"] == [13_500_000, 24 * MS]
    assert res.stages["busy_ns_by_stage"] == pytest.approx(truth["busy_ns_by_stage"], abs=20_000)
    jv = res.verdict()
    assert jv["status"] == "straggler" and jv["basis"] == "pipeline"
    assert truth["excess_ns"] == 10_500_000
    assert jv["straggler_rank"] in (2, 3) and jv["late_by_ns"] == pytest.approx(truth["excess_ns"], abs=20_000)
    by = {(g["kind"], tuple(g["ranks"])): g for g in res.groups}
    dp0 = by[("dp", (0, 1))]
    assert dp0["late_rank"] == 1 and dp0["lateness_ns_per_step"] == 3 * MS
    assert by[("dp", (2, 3))]["lateness_ns_per_step"] == 0
    assert by[("pp_stage", (2, 3))]["busy_ns_per_step"] == pytest.approx(24 * MS, abs=20_000)
    line = groups_line(res.groups, res.stages)
    assert line.startswith("stage 1 (ranks 2, 3) computes 1.78x the other stages, 10.5 ms more per step")
    assert "dp group [0, 1] (all_reduce) held back 3 ms per step by rank 1" in line
    assert "groups     stage 1 (ranks 2, 3)" in render_text([res])

    balanced = mr.analyze_traces(make_pp_dp_job(PPxDP(slow_stage=None)))[0]
    assert balanced.verdict()["status"] == "none" and balanced.stages["slow_stage"] is None


def test_interleaved_lever_uses_its_virtual_stages():
    """The microbatch lever projects with (p-1)/(v m+p-1): 11% at m=4, 6% at m=8 for v=2."""
    from traceread.passes.parallelism import job_parallelism
    from traceread.verdict.parallel import job_levers

    _, traces = _load("pp_interleaved2")
    layout = job_parallelism({i: traceread.analyze(t).parallelism for i, t in enumerate(traces)})
    assert layout["pipeline"]["virtual_stages"] == 2
    lv = {x["id"]: x for x in job_levers(layout)}
    text = lv["pp_microbatches"]["lever"]
    assert "interleaved 1F1B (v=2)" in text and "= 11% at m=4, 6% at m=8" in text
