"""A rank whose file was cut short (docs/batch.md, "A rank cut short"): it stays in its job,
the job compares the steps its whole ranks hold, and the cut rank is compared on the whole
steps it holds -- or left out, with the reason. Planted jobs (``synth.multirank``: a Kineto
file keeps ``baseTimeNanoseconds`` in its trailer, so a cut one reads on its own clock) and
a real gloo recording (``baseTimeNanoseconds`` in its header)."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from traceread.jobs import multirank as mr
from traceread.jobs.multirank.grouping import group_jobs
from traceread.render.cross_rank import render_summary
from traceread.synth.multirank import JobSpec, write_job

# one process builds the module's job (~6 s), not each xdist worker
pytestmark = pytest.mark.xdist_group("multirank_cut")

MS = 1_000_000
RANKS, STEPS, SLOW = 8, 8, 5
FIXTURES = Path(__file__).parent / "fixtures"


def _spec() -> JobSpec:
    return JobSpec(ranks=RANKS, steps=STEPS, slow_rank=SLOW, with_seq=False,
                   clock_offset_ns=[((r * 37) % 9 - 4) * 3 * MS + r * 1_000 for r in range(RANKS)])


def _kineto_layout(p: Path) -> None:
    """Rewrite ``p`` as torch.profiler lays a file out: the host ops first, then the GPU
    activities, the base time in the trailer."""
    doc = json.loads(p.read_text())
    ev, base = doc.pop("traceEvents"), doc.pop("baseTimeNanoseconds")
    host = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")]
    rest = [e for e in ev if e.get("cat") not in ("cpu_op", "user_annotation")]
    p.write_text(json.dumps({**doc, "traceEvents": host + rest, "baseTimeNanoseconds": base}))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """{layout: (folder, the job of the whole files)}."""
    out = {}
    for layout in ("time", "kineto"):
        d = tmp_path_factory.mktemp(layout)
        paths = write_job(d, _spec(), name="rank-{rank}.json")
        if layout == "kineto":
            for p in paths:
                _kineto_layout(Path(p))
        (full,) = mr.jobs_of([str(p) for p in paths])
        out[layout] = (d, full)
    return out


def _cut_job(planted, tmp_path, cuts: dict, layout: str = "time"):
    """The job of a copy of the planted files with ``cuts``: rank -> a share of its bytes,
    a byte count, or a function of its bytes giving the byte to cut at."""
    src, full = planted[layout]
    d = tmp_path / "job"
    shutil.copytree(src, d)
    for r, at in cuts.items():
        p = d / f"rank-{r}.json"
        data = p.read_bytes()
        n = at(data) if callable(at) else int(len(data) * at) if at < 1 else int(at)
        p.write_bytes(data[:n])
    jobs = mr.jobs_of(sorted(str(p) for p in d.iterdir()))
    return jobs, full


def _before_step(k: int):
    """Cut just before the event of ProfilerStep#k: nothing after step k starts is kept,
    so only the steps before k - 1 are proven whole (the file shows nothing past k - 1)."""
    return lambda data: data.rindex(b"{", 0, data.index(b'ProfilerStep#%d"' % k))


def _same_answer(res, full) -> None:
    """The whole ranks' figures: the planted straggler, its lateness, every step compared."""
    assert res.straggler["rank"] == full.straggler["rank"] == SLOW
    assert res.straggler["median_delay_ns"] == full.straggler["median_delay_ns"]
    assert len(res.steps) == len(full.steps) == STEPS
    for r, o in full.clock.items():
        if r not in res.cut:
            assert res.clock[r]["offset_ns"] == o["offset_ns"], r
    assert not res.unmatched


def test_one_cut_rank_stays_in_its_job(planted, tmp_path):
    jobs, full = _cut_job(planted, tmp_path, {3: 0.5})
    assert len(jobs) == 1
    res = jobs[0]
    assert res.ranks == list(range(RANKS))     # was: rank 3 silently out of the job
    _same_answer(res, full)
    c = res.cut[3]
    assert c["own_clock"] and c["placed"] and c["used"] == "compared"
    n = c["steps_compared"]
    assert 0 < n < STEPS and c["steps_held"] == n
    # its instances are the job's first n, with the waits it had in the whole file
    mine = res.matches[res.matches["rank"] == 3].sort_values("instance")
    was = full.matches[full.matches["rank"] == 3].sort_values("instance")
    assert mine["instance"].tolist() == list(range(n))
    assert mine["wait_ns"].tolist() == was["wait_ns"].tolist()[:n]
    assert res.per_rank.set_index("rank").loc[3, "steps"] == n
    text = render_summary(jobs)
    assert (f"cut short  rank 3: file cut short (truncated), compared on {n} of the job's "
            f"{STEPS} steps") in text
    assert res.to_dict()["cut_short"]["3"]["steps_compared"] == n


def test_two_cut_ranks_are_not_a_job_of_their_own(planted, tmp_path):
    jobs, full = _cut_job(planted, tmp_path, {3: 0.5, 6: 1_000})
    assert len(jobs) == 1                       # was: "JOB job0: ranks 3, 6 of 8"
    res = jobs[0]
    assert res.ranks == list(range(RANKS))
    _same_answer(res, full)
    assert set(res.cut) == {3, 6}
    assert res.cut[3]["used"] == "compared"
    six = res.cut[6]
    assert six["used"] == "left_out" and six["steps_compared"] == 0 and six["why"]
    assert not (res.matches["rank"] == 6).any()
    text = render_summary(jobs)
    assert f"rank 6: file cut short (truncated), left out of the job's comparison: {six['why']}" \
        in " ".join(text.split())


def test_rank_cut_after_one_step_does_not_shrink_the_job(planted, tmp_path):
    jobs, full = _cut_job(planted, tmp_path, {1: _before_step(3)})
    (res,) = jobs
    assert res.ranks == list(range(RANKS))
    _same_answer(res, full)                     # the job still compares its 8 steps
    assert res.cut[1]["steps_compared"] == 1 and res.cut[1]["used"] == "compared"
    assert res.steps.set_index("step").loc[1, "ranks"] == RANKS
    assert (res.steps.set_index("step").loc[2:, "ranks"] == RANKS - 1).all()


def test_cut_in_the_gpu_part_compares_only_whole_steps(planted, tmp_path):
    """torch.profiler writes the host ops, then the GPU activities: a cut there keeps every
    step's host range and only the first steps' kernels. Only the steps whose GPU work is
    all there are compared -- the work per step is the whole file's."""
    jobs, full = _cut_job(planted, tmp_path, {3: 0.75}, layout="kineto")
    (res,) = jobs
    assert res.ranks == list(range(RANKS))
    _same_answer(res, full)
    n = res.cut[3]["steps_compared"]
    assert 0 < n < STEPS
    assert int((res.matches["rank"] == 3).sum()) == n      # one all_reduce a step
    work, was = res.seed["slowdown"]["work_ns"], full.seed["slowdown"]["work_ns"]
    assert work[3] == was[3]


def test_gloo_rank_cut_with_a_backend_thread_lost(tmp_path):
    """Real gloo ddp4 (rank 2 sleeps 30 ms), rank 1 cut at 60%: its file keeps the
    all_gather thread whole and none of the all_reduce thread; paired in order with its
    c10d ops, its all_gathers were read as all_reduces and rank 1 named the straggler."""
    src = FIXTURES / "gloo" / "ddp4"
    truth = json.loads((src / "truth.json").read_text())
    paths = []
    for r in range(4):
        data = gzip.decompress((src / f"rank-{r}.json.gz").read_bytes())
        p = tmp_path / f"rank-{r}.json"
        p.write_bytes(data[:int(len(data) * 0.6)] if r == 1 else data)
        paths.append(str(p))
    (res,) = mr.jobs_of(paths)
    assert res.ranks == [0, 1, 2, 3]
    assert res.straggler["rank"] == truth["slow_rank"] == 2
    assert res.verdict()["straggler_rank"] == 2
    c = res.cut[1]
    assert not c["own_clock"]                  # its base time is in the header
    assert c["steps_compared"] > 0 and "lost" in c["collectives_out"]
    assert not (res.matches["rank"] == 1).any()


def test_grouping_places_a_cut_rank_in_the_job_lacking_it():
    info = pd.DataFrame({
        "path": [f"/a/rank-{r}.json" for r in range(3)] + ["/a/rank-3.json"]
        + [f"/b/rank-{r}.json" for r in range(4)] + ["/c/x-0.qdrep"],
        "rank": [0, 1, 2, 3, 0, 1, 2, 3, 1],
        "world_size": [4] * 8 + [4],
        "backend": ["nccl"] * 9,
        "start_ns": [100, 100, 100, -1, 900, 900, 900, 900, -1],
        "end_ns": [200, 200, 200, -1, 950, 950, 950, 950, -1],
        "cut": [False, False, False, True, False, False, False, False, False]})
    job = group_jobs(info)
    # the cut rank 3 joins the run lacking a rank 3 (run /b has one); the whole trace of
    # unknown span (an nsys export: no epoch) is placed by no such rule
    assert job.iloc[3] == job.iloc[0] != job.iloc[4]
    assert job.iloc[:3].nunique() == 1 and job.iloc[4:8].nunique() == 1
    assert pd.isna(job.iloc[8])


def test_whole_job_has_no_cut_record(planted):
    _, full = planted["time"]
    assert full.cut == {}
    assert "cut short" not in render_summary([full])
    assert full.to_dict()["cut_short"] == {}


def test_straggler_cut_short_is_read_on_the_steps_it_holds(planted, tmp_path):
    """The planted straggler's own file cut at half: past its cut nobody knows when it
    arrived. Named on the instances it holds, late by its planted 3 ms a step there, and
    rank-local from those steps (the job's steps: 1.1 ms a step over 8, 'global')."""
    jobs, full = _cut_job(planted, tmp_path, {SLOW: 0.5})
    (res,) = jobs
    n = res.cut[SLOW]["steps_compared"]
    assert 0 < n < STEPS
    jv = res.verdict()
    assert jv["straggler_rank"] == SLOW and jv["late_by_ns"] == full.verdict()["late_by_ns"]
    assert res.straggler["by_collective"]["all_reduce"]["instances"] == n
    assert res.seed["slowdown"]["locality"] == "rank-local"
    assert res.seed["slowdown"]["work_ns"] == full.seed["slowdown"]["work_ns"]
    text = " ".join(render_summary(jobs).split())
    assert f"at {n}/{n} all_reduces" in text
    assert f"over the {n} analysed steps" in text
