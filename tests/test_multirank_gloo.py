"""Real gloo DDP captures (CPU torch 2.13, localhost) with a planted slow rank.

``tests/fixtures/gloo/ddp{2,4}/``: ``scripts/record_gloo_ddp.py`` ran 2 and 4 processes;
the slow rank sleeps 30 ms before every forward. ``truth.json`` is measured by the
training loop itself (``time.perf_counter_ns``, one monotonic clock for every process
of the host): when each rank's DDP comm hook handed its gradient bucket to
all_reduce (its *arrival*), and the slow rank's sleep. traceread never sees it.

Tolerances (measured on these captures, see the numbers in the asserts):
* lateness of the slow rank per all_reduce: the hook fires 60-200 us before gloo's
  worker thread starts the collective on every rank, so the difference of two
  arrivals agrees to within 0.4 ms; asserted within 1 ms;
* a waiting rank's wait: the same, except that on 4 processes sharing 2 cores a
  gloo worker thread sometimes starts up to ~4 ms after its hook (not scheduled):
  per instance within 1 ms on 2 ranks; on 4 ranks the median error within 0.5 ms and
  every one within 5 ms.
"""
from __future__ import annotations

from traceread.jobs.multirank.verdicts import straggler_lever

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import traceread
from traceread.jobs import multirank as mr
from traceread.jobs.multirank.verdicts import adjust_rank_verdicts
from traceread.passes import intervals

GLOO = Path(__file__).resolve().parent / "fixtures" / "gloo"
MS = 1_000_000


def _load(d: Path):
    truth = json.loads((d / "truth.json").read_text())
    traces = [traceread.load(d / f"rank-{r}.json.gz") for r in range(truth["world_size"])]
    return truth, traces


def _truth_arrivals(truth: dict) -> list[dict[int, int]]:
    return [{int(r): rows[k]["allreduce_issue_ns"] for r, rows in truth["per_rank"].items()}
            for k in range(len(truth["steps"]))]


def _all_reduces(res) -> list:
    m = res.matches[res.matches["collective"] == "all_reduce"]
    return [g.set_index("rank") for _, g in m.groupby("instance", sort=True)]


@pytest.fixture(params=["ddp2", "ddp4"])
def capture(request):
    truth, traces = _load(GLOO / request.param)
    return truth, mr.analyze_traces(traces)


def test_gloo_straggler_named_and_matched(capture):
    truth, jobs = capture
    assert len(jobs) == 1
    res = jobs[0]
    slow, world = truth["slow_rank"], truth["world_size"]
    assert res.ranks == list(range(world)) and res.backend == "gloo" and res.source == "host"
    # 6 DDP all_reduces + 6 metrics all_gathers per rank, every one matched by order
    assert res.methods == {"pg:default": "order"} and res.unmatched == [] and res.mismatched == 0
    assert res.matches["instance"].nunique() == 12
    s = res.straggler
    assert s["rank"] == slow and s["significant"]
    assert s["by_collective"]["all_reduce"]["times_late"] == 6
    assert s["by_collective"]["all_reduce"]["instances"] == 6
    jv = res.verdict()
    assert jv["straggler_rank"] == slow and jv["collective"] == "all_reduce"
    assert jv["cause"] == "untraced"
    assert jv["headline"].startswith(f"rank {slow} arrives ") and "6/6 all_reduces" in jv["headline"]
    assert {w["rank"] for w in jv["waiting"]} == set(range(world)) - {slow}


def test_gloo_lateness_and_waits_vs_loop_truth(capture):
    truth, jobs = capture
    res = jobs[0]
    slow, world = truth["slow_rank"], truth["world_size"]
    inst = _all_reduces(res)
    arrivals = _truth_arrivals(truth)
    assert len(inst) == len(arrivals) == 6
    wait_err = []
    for g, arr in zip(inst, arrivals):
        latest = max(arr.values())
        assert max(arr, key=arr.get) == slow
        true_late = latest - sorted(arr.values())[-2]
        assert true_late > 20 * MS                      # the planted 30 ms sleep shows
        assert bool(g.loc[slow, "last"])
        assert abs(int(g.loc[slow, "lateness_ns"]) - true_late) < 1 * MS
        for r in range(world):
            if r != slow:
                wait_err.append(abs(int(g.loc[r, "wait_ns"]) - (latest - arr[r])))
    wait_err = np.array(wait_err)
    if world == 2:
        assert wait_err.max() < 1 * MS
    else:
        assert np.median(wait_err) < 0.5 * MS and wait_err.max() < 5 * MS
    # the clocks are one host clock: nothing may be shifted
    assert not any(o["applied"] for o in res.clock.values())


def test_gloo_why_is_the_planted_sleep(capture):
    """The slow rank's late windows are mostly its sleep (untraced), and as much as the
    loop-measured sleep overlapping those windows."""
    truth, jobs = capture
    res = jobs[0]
    slow = truth["slow_rank"]
    why = res.straggler["by_collective"]["all_reduce"]["why"]
    assert why["cause"] == "untraced" and why["windows"] == 6
    # truth: sleep intervals on the monotonic clock, windows [next-latest arrival, own arrival]
    rows = truth["per_rank"][str(slow)]
    sleep = intervals.union([r["start_ns"] for r in rows], [r["start_ns"] + r["sleep_ns"] for r in rows])
    arr = _truth_arrivals(truth)
    ws = [sorted(a.values())[-2] for a in arr]
    we = [a[slow] for a in arr]
    true_sleep_in_windows = int(intervals.overlap(sleep, ws, we).sum())
    assert true_sleep_in_windows > 0.6 * sum(e - s for s, e in zip(ws, we))
    # traceread's untraced time also holds un-profiled gaps around backward: a bit more
    got = why["by_category"]["untraced"]
    assert true_sleep_in_windows - 6 * MS < got < true_sleep_in_windows + 8 * MS
    assert got > 0.8 * why["window_ns"]


def test_gloo_rank_verdicts_and_cli(tmp_path):
    from click.testing import CliRunner

    from traceread.cli import main

    files = [str(GLOO / "ddp2" / f"rank-{r}.json.gz") for r in (0, 1)]
    out = CliRunner().invoke(main, ["analyze", *files])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "JOB job0: ranks 0, 1 of 2 · gloo"
    assert lines[1].startswith("  STRAGGLER  rank 1 arrives 30.") and "6/6 all_reduces" in lines[1]
    assert lines[2].startswith("             arriving after the next-latest rank") and lines[3].startswith(
        "  why        in that time its issuing thread was in untraced Python")
    assert "Cross-rank (job0: ranks 0, 1 of 2)" in out.output
    assert "  job0: this rank is the straggler, 30." in out.output          # rank 1's own report
    assert "  job0: waits " in out.output and " in all for rank 1, the straggler" in out.output
    js = CliRunner().invoke(main, ["analyze", "--format", "json", *files])
    assert js.exit_code == 0
    doc = json.loads(js.output)
    cr = doc["cross_rank"][0]
    assert cr["verdict"]["straggler_rank"] == 1 and 29 * MS < cr["verdict"]["late_by_ns"] < 32 * MS
    assert cr["verdict"]["evidence"]["collectives"]["rank"] == cr["verdict"]["straggler_rank"] == 1 and cr["matched_instances"] == 12
    assert set(cr["clock"]["offsets"]) == {"0", "1"}
    v = {t["trace"]["rank"]: t["verdict"] for t in doc["traces"]}
    assert v[1]["job"]["role"] == "straggler" and v[1]["bound"] != "comms"
    assert v[0]["job"] == {"job": "job0", "role": "waiting", "waits_for": 1,
                           "wait_ns": v[0]["job"]["wait_ns"], "summary": cr["verdict"]["summary"]}
    assert v[0]["job"]["wait_ns"] > 6 * 29 * MS


def _record_and_check(tmp_path, world, slow):
    pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from record_gloo_ddp import record

    truth = record(tmp_path, world=world, slow=slow, delay_ms=30, steps=4, warmup=1)
    res = mr.analyze_traces([traceread.load(tmp_path / f"rank-{r}.json.gz") for r in range(world)])[0]
    assert res.straggler["rank"] == slow
    got = [int(g.loc[slow, "lateness_ns"]) for g in _all_reduces(res)]
    want = [max(a.values()) - sorted(a.values())[-2] for a in _truth_arrivals(truth)]
    # Live on a loaded box (this 2-core one at load 8) a gloo worker thread starts up to
    # ~7 ms after its hook when it is not scheduled: compare medians within 25%.
    assert len(got) == len(want) == 4
    assert abs(np.median(got) - np.median(want)) < 0.25 * np.median(want)
    assert res.verdict()["cause"] == "untraced"


# Live recording is timing-dependent: in a loaded full run the straggler's late window once
# came back with no dominant cause. The committed real captures (above) are the CI proof.
@pytest.mark.slow
def test_record_gloo_2_ranks_live(tmp_path):
    _record_and_check(tmp_path, 2, 1)


@pytest.mark.slow
def test_record_gloo_4_ranks_live(tmp_path):
    _record_and_check(tmp_path, 4, 3)


def test_gloo_batch_jobs_parquet(tmp_path):
    import pandas as pd

    from traceread.jobs import batch, output

    src = tmp_path / "in"
    for f in GLOO.glob("ddp*/rank-*.json.gz"):   # not truth.json: JSON, so a candidate that fails
        (src / f.parent.name).mkdir(parents=True, exist_ok=True)
        (src / f.parent.name / f.name).symlink_to(f)
    res = batch.run(src, jobs=1)
    assert res.failed == 0 and len(res.jobs) == 2
    output.write(res, tmp_path / "out")
    jobs = pd.read_parquet(tmp_path / "out" / "jobs.parquet").sort_values("ranks")
    assert jobs["ranks"].tolist() == [2, 4] and jobs["straggler_rank"].tolist() == [1, 2]
    assert jobs["cause"].tolist() == ["untraced", "untraced"]
    assert (jobs["times_late"] == 6).all() and (jobs["straggler_collective"] == "all_reduce").all()
    assert ((jobs["late_by_ns"] > 25 * MS) & (jobs["late_by_ns"] < 32 * MS)).all()


def test_gloo_issue_ops_only():
    """Without gloo's execution ranges (other CPU backends, filtered traces) the issuing
    c10d ops still say who arrived last; durations and clock estimates are not used."""
    import pyarrow.compute as pc

    from traceread.table import Trace

    truth, traces = _load(GLOO / "ddp2")
    cut = []
    for t in traces:
        keep = pc.invert(pc.starts_with(pc.cast(t.table.column("name"), "string"), "gloo:"))
        cut.append(Trace(t.table.filter(keep), t.meta))
    res = mr.analyze_traces(cut)[0]
    assert res.source == "issue" and res.methods == {"pg:default": "order"}
    assert res.clock[1]["reason"] == "only issue times recorded"
    s = res.straggler
    assert s["rank"] == 1 and s["by_collective"]["all_reduce"]["times_late"] == 6
    for g, arr in zip(_all_reduces(res), _truth_arrivals(truth)):
        assert abs(int(g.loc[1, "lateness_ns"]) - (arr[1] - arr[0])) < 1 * MS


def test_gloo_job_uses_the_analysis_window():
    from click.testing import CliRunner

    from traceread.cli import main

    files = [str(GLOO / "ddp2" / f"rank-{r}.json.gz") for r in (0, 1)]
    out = CliRunner().invoke(main, ["analyze", "--format", "json", "--steps", "4:5", *files])
    assert out.exit_code == 0, out.output
    cr = json.loads(out.output)["cross_rank"][0]
    assert cr["matched_instances"] == 4 and cr["step_skew"]["steps"] == 2   # steps 4 and 5 only
    assert cr["verdict"]["evidence"]["collectives"]["by_collective"]["all_reduce"]["times_late"] == 2


@pytest.mark.parametrize("shift_ms", [25, -40])
def test_gloo_clock_offset_recovered(shift_ms):
    """Rank 1's clock moved by tens of ms (as if on another host): the offset is estimated
    from the all_reduce/all_gather end times and undone; lateness stays within 1 ms of the
    loop's truth."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from traceread.table import Trace

    truth, traces = _load(GLOO / "ddp2")
    t1 = traces[1]
    ts = pc.add(t1.table.column("ts"), pa.scalar(shift_ms * MS, pa.int64()))
    # the recordings share a host (host_name "vm"): one clock, never shifted; on another host
    # the shift must be found
    assert not mr.analyze_traces(_load(GLOO / "ddp2")[1])[0].clock[1]["applied"]
    meta = dataclasses.replace(t1.meta, extra=dict(t1.meta.extra, host_name="other-host"))
    traces[1] = Trace(t1.table.set_column(t1.table.schema.get_field_index("ts"), "ts", ts), meta)
    res = mr.analyze_traces(traces)[0]
    off = res.clock[1]
    assert off["applied"] and abs(off["offset_ns"] + shift_ms * MS) < 0.2 * MS
    assert res.straggler["rank"] == 1
    for g, arr in zip(_all_reduces(res), _truth_arrivals(truth)):
        assert abs(int(g.loc[1, "lateness_ns"]) - (arr[1] - arr[0])) < 1 * MS


@pytest.mark.parametrize("job", ["pp_gpipe", "pp_1f1b", "a2a4", "ddp2", "ddp4", "fsdp2", "sweep2"])
def test_ranks_of_one_host_are_never_shifted(job):
    """Every recording's ranks ran on one host (``host_name``): one system clock. Before,
    pp_gpipe's rank 1 was shifted by 17.8 ms from the sends' end times."""
    _, traces = _load(GLOO / job)
    res = mr.analyze_traces(traces)[0]
    assert {t.meta.extra.get("host_name") for t in traces} == {"vm"}
    assert all(o["offset_ns"] == 0 and not o["applied"] for o in res.clock.values())
    assert all(o["reason"] in ("reference clock", "one clock (same export or same host)")
               for o in res.clock.values())


def test_generic_host_names_prove_no_shared_clock():
    from traceread.jobs.multirank.inputs import clock_domain

    assert clock_domain({"host_name": "vm"}) == "host:vm"
    assert clock_domain({"host_name": "localhost"}) == clock_domain({}) == ""
    assert clock_domain({"clock_domain": "nsys:x", "host_name": "vm"}) == "nsys:x"


@pytest.mark.parametrize("job", ["pp_gpipe", "pp_1f1b"])
def test_pipeline_sends_and_recvs_pair_by_peer_and_find_the_slow_stage(job):
    """send/recv are matched pairwise (rank a's sends to b with b's recvs from a, peers from
    ``Concrete Inputs``), never as whole-group collectives; only a late sender holds its
    receiver. The planted slow stage (truth: slow_stage 1, 3x the layers) is the straggler."""
    truth, traces = _load(GLOO / job)
    res = mr.analyze_traces(traces)[0]
    m = res.matches
    p2p = m[m["lane"].str.startswith("p2p:")]
    assert set(p2p["lane"]) == {"p2p:0>1", "p2p:1>0"}
    assert (p2p.groupby("instance")["rank"].nunique() == 2).all()
    for lane, (src, dst) in (("p2p:0>1", (0, 1)), ("p2p:1>0", (1, 0))):
        mine = p2p[p2p["lane"] == lane]
        assert set(mine.loc[mine["rank"] == src, "collective"]) == {"send"}
        assert set(mine.loc[mine["rank"] == dst, "collective"]) == {"recv"}
        assert not mine[mine["last"]]["collective"].eq("recv").any()
    assert res.mismatched == 0
    assert res.straggler["rank"] == truth["args"]["slow_stage"] == 1


def test_ranks_analysing_different_steps_are_matched_on_their_common_steps():
    """gloo a2a4 (no rank planted slow): rank 3's analysis leaves out its slow first step
    (steps #2-#3; ranks 0-2 analyse #1-#3). Matched as analysed, rank 3's step #2 barrier
    paired with the others' step #1 one -- a step apart: rank 3 'arrived' 1.5-2.5 ms late at
    every instance, was named the straggler, and step #1's collectives were 'not issued by
    rank 3'. On the common steps each instance's members start within 1 ms of each other
    (the trace: rank 0 is last at 3 of the 4, by 216-566 us) and nothing is unmatched."""
    jobs = mr.jobs_of([str(GLOO / "a2a4" / f"rank-{r}.json.gz") for r in range(4)])
    res = jobs[0]
    assert [res.analyses[r].steps["step"].tolist() for r in range(4)] == [[1, 2, 3]] * 3 + [[2, 3]]
    assert res.unmatched == [] and res.per_rank["steps"].tolist() == [2, 2, 2, 2]
    m = res.matches
    assert m["instance"].nunique() == 4 and (m.groupby("instance")["rank"].nunique() == 4).all()
    spread = m.groupby("instance")["arrival_ns"].agg(lambda a: a.max() - a.min())
    assert (spread < 1 * MS).all()
    assert res.straggler["rank"] == 0 and res.straggler["times_last"] == 3


def test_collectives_in_flight_together_count_their_time_once():
    """gloo pp_interleaved2: each rank keeps several batched sends and receives in flight at
    once. Summed over instances, rank 0 was 'in collectives' 4.46 s and rank 1 'waited'
    757 ms (252 ms a step) over three steps of ~187 ms. As time (unions), a rank's comm, wait
    and transfer fit in the span its collectives cover, and wait + transfer = comm."""
    _, traces = _load(GLOO / "pp_interleaved2")
    res = mr.analyze_traces(traces)[0]
    m = res.matches
    for r in res.per_rank.itertuples():
        mine = m[m["rank"] == r.rank]
        covered = int((mine["ts"] + mine["dur"]).max() - mine["ts"].min())
        assert r.wait_ns + r.transfer_ns == r.comm_ns <= covered, r
        assert r.wait_ns // r.steps <= r.step_mean_ns, r
    # ddp2's collectives barely overlap (an all_gather 37 us into an all_reduce): the union
    # is the sum it always was, to within that
    _, traces = _load(GLOO / "ddp2")
    res = mr.analyze_traces(traces)[0]
    comm = res.matches.groupby("rank")["dur"].sum()
    for r, ns in res.per_rank.set_index("rank")["comm_ns"].items():
        assert 0 <= comm[r] - ns < 100_000, r


def test_functional_collective_wait_is_a_comm_wait_not_cpu_work():
    """gloo tp2 (DTensor TP: ``_c10d_functional::all_reduce`` + ``wait_tensor``): rank 1's
    main thread sits ~10 ms in ``_c10d_functional::wait_tensor`` per layer, then issues its
    next all_reduce 5-8 ms after rank 0. The late windows were 'CPU operators' (40.6 of
    61.3 ms: the wait_tensor was read as a CPU op) and the lever 'move the host work off the
    step path'; they are the thread waiting on a collective. Overlap efficiency counted the
    wait_tensor as compute beside the all_reduce (0.55 / 0.18); each layer's compute and its
    all_reduce run back to back (truth: per layer, the comm follows the compute): ~0."""
    _, traces = _load(GLOO / "tp2")
    res = mr.analyze_traces(traces)[0]
    why = res.straggler["why"]
    # a wait on its own collectives, no other rank late at them (the test below)
    assert res.straggler["rank"] == 1 and why["cause"] == "comm_own"
    assert why["by_category"]["comm_wait"] > 0.6 * why["window_ns"]
    assert all(e < 0.05 for e in res.seed["overlap_efficiency"].values())


def test_work_excludes_the_time_blocked_on_a_collective():
    """gloo tp2: work = step - wait counted only the collectives' own wait for the last rank,
    so rank 1 (last to arrive: no such wait) 'worked' 36.4 ms a step, and rank 0 15.9 ms,
    though their main threads sit in ``_c10d_functional::wait_tensor`` most of each step
    (the loop's truth: ~4.4 / 4.9 ms a step outside the layers' comm). Work now leaves out
    the time the issuing thread is blocked on a collective too."""
    _, traces = _load(GLOO / "tp2")
    res = mr.analyze_traces(traces)[0]
    work = res.seed["slowdown"]["work_ns"]
    pr = res.per_rank.set_index("rank")
    for r, t in enumerate(traces):
        ev = t.events
        steps = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
        lo, hi = int(steps["ts"].min()), int((steps["ts"] + steps["dur"]).max())
        w = ev[(ev["name"].astype(str) == "_c10d_functional::wait_tensor") & (ev["ts"] >= lo)
               & (ev["ts"] < hi)]
        blocked = int(w["dur"].sum()) // len(steps)
        assert work[r] <= pr.loc[r, "step_mean_ns"] - blocked, r
    assert work[1] < 12 * MS and work[0] < 8 * MS


def test_few_steps_judge_lateness_against_the_steps_own_spread():
    """gloo a2a4 on its 2 common steps (no rank planted slow): rank 0 is last at 3 of 4
    collectives by 216-566 us, where the steps last 1.3-7.1 ms (a 2.1 ms spread over every
    rank's steps). With under 3 steps a rank, the spread was 1% of the mean step (35 us)
    and rank 0 was named the straggler with a lever; its lateness is within the steps' own
    noise. The verdict names it and says why it is not one (not 'no rank is last ... by
    >= 100 us', false of it)."""
    res = mr.jobs_of([str(GLOO / "a2a4" / f"rank-{r}.json.gz") for r in range(4)])[0]
    s = res.straggler
    assert s["rank"] == 0 and not s["significant"] and 2 * MS < s["spread_ns"] < 2.2 * MS
    jv = res.verdict()
    assert jv["status"] == "none" and jv["straggler_rank"] == -1
    assert jv["summary"].startswith("no straggler: rank 0 held the others back longest, but late by"
                                    " 0.38 ms a step more than the other ranks, under half the"
                                    " steps' own spread (2.13 ms)")


def test_detail_says_why_the_rank_last_most_is_not_named():
    """gloo sweep2_dense (nothing planted): rank 1 is last at 53 of 120 collectives. The
    detail said it was not named for 'too few late instances' (44 were late); the reason is
    chance (44%, chance 50%), the significance test's own."""
    from traceread.render.cross_rank import render_detail

    _, traces = _load(GLOO / "sweep2_dense")
    flat = " ".join(render_detail(mr.analyze_traces(traces)).split())
    assert "too few late instances" not in flat
    assert ("not the verdict's basis (collectives): last in 53 of 120 collectives (44%, chance 50%:"
            " p=0.91)") in flat


def test_overlapping_late_windows_are_one_stretch_of_time():
    """Our GPU DDP recording (tests/fixtures/gpu/ddp2: 2 ranks on CUDA, gloo; rank 1 sleeps
    20.1 ms before each step's forward, its two gradient buckets' all_reduces late by that
    sleep together). Summed per instance, the late windows made 248 ms (120 ms of it 'outside
    the trace': the overlap) and the why said '9.99 ms of 20.6 ms per all_reduce'; as time,
    the sleep is 20 ms of each ~21 ms window, and nothing lies outside the trace."""
    truth = json.loads((GLOO.parent / "gpu" / "ddp2" / "truth.json").read_text())
    sleep = float(np.median([x["sleep_ns"] for x in truth["per_rank"]["1"]]))
    traces = [traceread.load(GLOO.parent / "gpu" / "ddp2" / f"rank-{r}.json.gz") for r in (0, 1)]
    res = mr.analyze_traces(traces)[0]
    why = res.straggler["by_collective"]["all_reduce"]["why"]
    assert res.straggler["rank"] == 1 and why["cause"] == "untraced"
    assert "outside_trace" not in why["by_category"]
    per = why["cause_ns"] / why["windows"]
    assert abs(per - sleep) < 0.5 * MS and why["window_ns"] / why["windows"] < sleep + 1.5 * MS
    # the straggler's own collectives are its transfer (it waits in them little, being last):
    # its verdict names its sleep first and keeps its communication levers (gloo's copies of
    # GPU tensors through host memory: ~120 ms of its 168 ms step), where it dropped them
    comms = {"id": "nccl_backend", "lever": "use nccl", "cause": "comms", "saves_ns": 700 * MS}
    host = {"id": "host_work", "lever": "move host work", "cause": "host", "saves_ns": 120 * MS}
    v = adjust_rank_verdicts({1: {"bound": "comms", "actions": [comms, host],
                                  "levers": ["use nccl", "move host work"],
                                  "evidence": {"steps": 6, "window_ns": 1000 * MS}}}, res)[1]
    assert v["bound"] == "host"
    assert [a["id"] for a in v["actions"]] == ["straggler", "nccl_backend", "host_work"]


def test_overlap_efficiency_is_not_lowered_by_time_that_is_neither():
    """Our GPU DDP recording (2 ranks, the same DDP schedule; rank 1 also sleeps 20.1 ms a
    step): by the step's length, rank 1's overlap efficiency read 0.00 beside rank 0's 0.70
    -- its sleep, neither compute nor communication, counted as no overlap. Measured as the
    time both run at once, the two ranks overlap alike."""
    traces = [traceread.load(GLOO.parent / "gpu" / "ddp2" / f"rank-{r}.json.gz") for r in (0, 1)]
    res = mr.analyze_traces(traces)[0]
    eff = res.seed["overlap_efficiency"]
    assert min(eff.values()) > 0.8 and abs(eff[0] - eff[1]) < 0.05


def test_pipeline_stage_ratio_is_one_figure():
    """pp_gpipe (stage 1 planted 3x the layers): the straggler line read the slow stage
    at 2.95x (the steps' median) and the layout at 3.2x (the steps' total, as a share of the
    step): one stage compute, its work per step over the analysed steps, in both."""
    paths = [str(GLOO / "pp_gpipe" / f"rank-{r}.json.gz") for r in (0, 1)]
    (res,) = traceread.all_jobs(paths)
    pl = res.layout["pipeline"]
    st = res.stages
    assert st["slow_stage"] == pl["slowest_stage"] == 1
    assert st["slowest_x_others"] == pl["slowest_busy_x_fastest"]   # two stages: same baseline
    assert 3.0 < pl["slowest_busy_x_fastest"] < 3.5                  # the planted 3x, and more


def test_stage_compute_is_the_mean_per_step_in_both():
    """The job's stage balance (groups.rank_busy) and the layout (parallelism._job_pipeline)
    read a stage's compute the same way: its work over the steps, per step (one slow step
    counts; the median hid it)."""
    from types import SimpleNamespace

    import pandas as pd

    from traceread.jobs.multirank.groups import rank_busy, stage_balance
    from traceread.passes.parallelism import _job_pipeline

    steps = {0: [10 * MS, 10 * MS, 10 * MS], 1: [20 * MS, 20 * MS, 50 * MS]}
    inputs = [SimpleNamespace(rank=r, steps=pd.DataFrame({"busy_ns": b, "dur": [60 * MS] * 3}))
              for r, b in steps.items()]
    busy = rank_busy(inputs)
    assert busy[1] == (30 * MS, 60 * MS)
    st = stage_balance([[0, 1]], busy)
    layout = _job_pipeline({r: {"schedule": "gpipe", "stages": 2, "microbatches": 4,
                                "theoretical_bubble_pct": 20.0, "busy_ns": sum(b),
                                "compute_ns": sum(b), "step_ns": 180 * MS, "steps": 3,
                                "bubble_pct_by_stage": {str(r): 0.0}}
                            for r, b in steps.items()})
    assert st["slowest_x_others"] == layout["slowest_busy_x_fastest"] == 3.0


def test_a_straggler_blocked_in_its_own_collectives_passes_on_no_delay():
    """gloo tp2 (no rank planted slow): rank 1 arrives late because its wait_tensor returns
    ms after its all_reduce ended (on both ranks) -- at none of those collectives was rank 0
    late. It read 'blocked in another collective, passing on a delay it did not cause: look
    at the rank that arrived last at that collective', which is rank 1 itself."""
    _, traces = _load(GLOO / "tp2")
    res = mr.analyze_traces(traces)[0]
    why = res.straggler["why"]
    assert res.straggler["rank"] == 1
    assert why["cause"] == "comm_own" and why["passed_on_ns"] < 0.1 * why["cause_ns"]
    assert "did not cause" not in res.levers[0]["lever"]


def test_waiting_is_read_at_the_headline_instances():
    """gloo fsdp2: 'rank 1 arrives 566 us late (median) at 3/12 all_gathers' stood over
    'waiting at each of those all_gathers: rank 0 156 us' -- a mean over 9 instances rank 1
    was last at, 6 of them by 0.1-90 us. At the 3 headline instances rank 0 waits what
    rank 1 is late (two ranks)."""
    _, traces = _load(GLOO / "fsdp2")
    res = mr.analyze_traces(traces)[0]
    jv = res.verdict()
    (w,) = jv["waiting"]
    assert jv["collective"] == "all_gather" and w["instances"] == 3
    assert w["wait_per_collective_ns"] == jv["late_by_ns"]


def test_a_light_stage_makes_no_slow_stage():
    """One comparison for 'a stage computes more': the busiest over the other stages' median,
    in the job's stage balance, the layout and the pp_rebalance lever. Against the least busy
    stage, gloo pp3/gpipe_p4_m4 (nothing planted) read 'stage 1 computes 1.5x the least busy
    ... every other stage waits on it: move layers off it' beside the job's 'the 4 stages
    compute alike (1.24x the others' median)'."""
    from types import SimpleNamespace

    import pandas as pd

    from traceread.jobs.multirank.groups import IMBALANCE_X, rank_busy, stage_balance
    from traceread.passes.figures import layout_figures
    from traceread.passes.parallelism import _job_pipeline
    from traceread.verdict.levers import PP_SLOW_X, pp_stage_slow

    work = {0: 10 * MS, 1: 15 * MS, 2: 13 * MS, 3: 14 * MS}     # stage 0 light, none slow
    inputs = [SimpleNamespace(rank=r, steps=pd.DataFrame({"busy_ns": [w], "dur": [60 * MS]}))
              for r, w in work.items()]
    st = stage_balance([[0, 1, 2, 3]], rank_busy(inputs))
    pl = _job_pipeline({r: {"schedule": "gpipe", "stages": 4, "microbatches": 4,
                            "theoretical_bubble_pct": 42.9, "busy_ns": w, "compute_ns": w,
                            "step_ns": 60 * MS, "steps": 1, "bubble_pct_by_stage": {str(r): 0.0}}
                        for r, w in work.items()})
    assert pl["slowest_busy_x_fastest"] == 1.5 >= PP_SLOW_X              # vs the least busy
    assert st["slowest_x_others"] == pl["slowest_x_others"] == 1.15 < IMBALANCE_X
    assert st["slow_stage"] is None
    assert not pp_stage_slow(layout_figures({"pipeline": pl}))


@pytest.mark.parametrize("job,cause", [("fsdp2_extra1", "cpu_op"), ("fsdp2_sleep1", "untraced")])
def test_fsdp2_planted_slow_rank_saves_its_net_lateness(job, cause):
    """Our FSDP2 recordings, rank 1 planted slow before each forward: 23 ms a step of extra
    torch.mm (traced) or a 20 ms sleep (untraced). FSDP2's prefetched all_gathers let rank 0
    be late too at some of them (7 ms a step): the straggler's lever read its lateness alone,
    32.2 (26.7) ms a step, over the 23 (20) planted; net of the time rank 0 held it back it is
    the plant."""
    truth, traces = _load(GLOO / job)
    planted = sum(x["planted_ns"] for x in truth["per_rank"]["1"]) / len(truth["per_rank"]["1"])
    res = mr.analyze_traces(traces)[0]
    jv = res.verdict()
    assert jv["straggler_rank"] == 1 and jv["cause"] == cause
    per_step = jv["late_total_ns"] / int(res.per_rank["steps"].max())
    assert abs(per_step - planted) < 0.12 * planted, (per_step, planted)


def test_a_straggler_in_cpu_operators_runs_extra_ones_or_the_same_slower():
    """fsdp2_extra1: rank 1 runs 23 ms a step of torch.mm the other rank does not -- its own
    host work (the lever: move it off the step path). fsdp2 (nothing planted): rank 1 is late
    in the same CPU operators rank 0 runs, as often, each a little slower -- 'move the host
    work off the step path' cannot work there: it is a busier or slower host."""
    truth, traces = _load(GLOO / "fsdp2_extra1")
    planted = sum(x["planted_ns"] for x in truth["per_rank"]["1"]) / len(truth["per_rank"]["1"])
    why = mr.analyze_traces(traces)[0].straggler["why"]
    ex = why["op_excess"]
    assert why["cause"] == "cpu_op" and ex["top"][0]["name"] == "aten::mm"
    assert abs(ex["extra_ns"] - planted) < 0.1 * planted and ex["slower_ns"] < ex["extra_ns"] / 4
    _, traces = _load(GLOO / "fsdp2")
    res = mr.analyze_traces(traces)[0]
    why = res.straggler["why"]
    assert why["cause"] == "cpu_slower" and why["op_excess"]["extra_ns"] == 0
    assert "same CPU operators" in res.levers[0]["lever"]


def test_cpu_operators_extra_or_slower_by_calls():
    """why.refine_cpu_op: more calls of a name than the others' median is extra work; the
    same calls taking longer is a slower host."""
    from traceread.jobs.multirank.inputs import RankInput
    from traceread.jobs.multirank.why import refine_cpu_op

    def ranks(mine):
        base = {"aten::addmm": (4, 4 * MS), "aten::copy_": (10, 1 * MS)}
        return [RankInput(path="a", rank=0, op_calls=base, kernel_steps=1),
                RankInput(path="b", rank=1, op_calls={**base, **mine}, kernel_steps=1)]

    extra = {"cause": "cpu_op"}
    refine_cpu_op(extra, ranks({"aten::mm": (50, 20 * MS)}), 1)
    assert extra["cause"] == "cpu_op" and extra["op_excess"]["extra_ns"] == 20 * MS
    slower = {"cause": "cpu_op"}
    refine_cpu_op(slower, ranks({"aten::addmm": (4, 7 * MS)}), 1)
    assert slower["cause"] == "cpu_slower" and slower["op_excess"]["slower_ns"] == 3 * MS


def test_host_collectives_of_unnamed_subgroups_are_not_matched():
    """gloo subgroups3: groups [0, 1] and [1, 2]; rank 0 sleeps 20 ms, rank 1 passes it on to
    rank 2. No collective names its group (torch 2.13 gloo, record_shapes=True): group
    [0, 1]'s all_reduce on rank 0 was matched with group [1, 2]'s on ranks 1 and 2, and the
    job read 'no straggler'. Which group each ran in cannot be told: nothing is matched, and
    the job says it cannot tell, and why."""
    truth, traces = _load(GLOO / "subgroups3")
    first = [r["first_entry_ns"] for r in truth["per_rank"]["0"]]
    assert all(a - b > 15 * MS for a, b in zip(first, (r["first_entry_ns"] for r in truth["per_rank"]["1"])))
    res = mr.analyze_traces(traces)[0]
    assert res.matches.empty
    jv = res.verdict()
    assert jv["status"] == "cannot_tell" and "subgroups [0, 1], [1, 2]" in jv["why"]


def test_a_pipeline_stage_is_not_told_to_run_fewer_micro_batches():
    """gloo pp3/gpipe_p2_m8: each stage runs 8 forward/backward passes a step -- its
    schedule's microbatches, not gradient accumulation. Each rank read 'fewer, larger
    micro-batches' beside the job's 'more microbatches per step' (fewer widen the bubble)."""
    a = traceread.analyze(str(GLOO / "pp3" / "gpipe_p2_m8" / "rank-0.json.gz"))
    assert a.parallelism["pipeline"]["microbatches"] == 8
    assert not [x for x in a.verdict["actions"] if str(x.get("id")).startswith("fewer_micro_batches")]


def _batch_lever(a) -> dict:
    return next(x for x in a.verdict["actions"] if x["id"] == "larger_batch")


def test_a_waiting_ranks_larger_batch_does_not_amortise_the_stragglers_sleep():
    """gloo ddp2: rank 1 sleeps 30 ms before every forward; rank 0 waits for it in the
    all_reduce, its main thread untraced (30.9 ms a step) -- time its larger-batch replay held
    fixed per step and spread over twice the samples: 'saves ~17.2 ms per step's worth of
    samples', rank 1's sleep. Rank 1 keeps its promise (its sleep is its own per-step time,
    which a larger batch does halve per sample); rank 0's is net of the wait."""
    (res,) = traceread.all_jobs([str(GLOO / "ddp2" / f"rank-{r}.json.gz") for r in range(2)])
    waiting, straggler = _batch_lever(res.analyses[0]), _batch_lever(res.analyses[1])
    cats = res.straggler_waits[0]
    assert cats.get("untraced", 0) > 25 * MS * 6   # 6 steps, the wait untraced
    assert straggler["saves_per_step_ns"] > 12 * MS and "net_of_wait_ns" not in straggler
    assert waiting["saves_per_step_ns"] < 4 * MS and waiting["net_of_wait_ns"] > 80 * MS
    assert waiting["saves_ns"] == waiting["saves_per_step_ns"] * 6


def test_a_wait_the_replay_grew_is_not_taken_out_again():
    """gloo fsdp2_sleep1: rank 0 waits for rank 1's 20 ms sleep inside 'FSDP::all_gather'
    frames (cpu_op: the replay grows them with the batch, the wait no saving of its own);
    only the part in collectives and untraced time (1.8 ms a step) comes out."""
    (res,) = traceread.all_jobs([str(GLOO / "fsdp2_sleep1" / f"rank-{r}.json.gz")
                                 for r in range(2)])
    cats = res.straggler_waits[0]
    assert cats["cpu_op"] > 0.8 * sum(cats.values())
    lever = _batch_lever(res.analyses[0])
    assert 0.5 * MS < lever["saves_per_step_ns"] < 1.5 * MS   # 1.78 ms before, less half of 1.8
    assert _batch_lever(res.analyses[1])["saves_per_step_ns"] > 10 * MS   # its own sleep


def test_a_straggler_that_resumes_late_from_its_own_collectives_says_so():
    """gloo tp2 (nothing planted): rank 1 is last at 14 of 15 collectives and late in each of
    the 3 steps (15.7, 38.0, 7.7 ms; rank 0 never by 100 us) -- consistent, so named. Its late
    time is its main thread still in ``wait_tensor`` 6.4-7.9 ms after its own gloo:all_reduce
    had ended (rank 0's returns within 0.04 ms): a thread not running, not a late transfer
    (the lever's 'check its link or NIC'). The job's why now says how much of it that is."""
    _, traces = _load(GLOO / "tp2")
    res = mr.analyze_traces(traces)[0]
    rec = res.straggler["by_collective"]["all_reduce"]["why"]
    assert rec["cause"] == "comm_own" and rec["after_end_ns"] >= 0.8 * rec["cause_ns"]
    v = res.verdict()
    assert "after its collective had ended on it" in v["because"]
    # its lever names the threads, not the link (the transfer was on time)
    lever = straggler_lever(v)["lever"]
    assert "threads were not running" in lever and "NIC" not in lever
    ddp = mr.analyze_traces(_load(GLOO / "ddp2")[1])[0]   # a planted sleep: untraced, not this
    assert "after its collective had ended" not in ddp.verdict()["summary"]
