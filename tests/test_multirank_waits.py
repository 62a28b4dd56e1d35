"""Multi-rank honesty: no clean bill without evidence; lateness from thread waits when no
collective can be matched (multirank/waits.py). Planted nsys gloo DDP jobs, a Kineto job
without collectives, and the nsys-ai 2-GPU export."""
from __future__ import annotations

import pytest

import traceread
import traceread.jobs.multirank as mr
from traceread.readers.nsys_split import split_processes
from traceread.jobs.multirank.verdicts import adjust_rank_verdicts
from traceread.synth.multirank import JobSpec, make_job, write_nsys_gloo_job

MS = 1_000_000


def _job(path):
    return mr.analyze_traces(split_processes(traceread.load(str(path))))[0]


def test_planted_nsys_gloo_straggler_from_waits(tmp_path):
    path, truth = write_nsys_gloo_job(tmp_path / "gloo.sqlite")
    job = _job(path)
    assert job.straggler["instances"] == 0          # nothing to match: gloo leaves no kernel
    inf = job.inferred
    assert inf["basis"] == "steps" and inf["windows"] == truth["steps"]
    assert inf["rank"] == truth["straggler"] and inf["significant"]
    assert inf["median_delay_ns"] == truth["late_by_ns"] and inf["times_late"] == truth["steps"]
    assert inf["cause"] == "sleep" and inf["cause_ns"] == truth["late_by_ns"]
    w = inf["per_rank"]
    assert w[0]["wait_ns"] - w[1]["wait_ns"] == truth["wait_excess_ns"]
    assert next(iter(w[0]["wait_names"])) == "pthread_cond_wait"
    jv = job.verdict()
    assert jv["status"] == "straggler" and jv["basis"] == "thread_waits"
    assert jv["straggler_rank"] == 1 and jv["late_by_ns"] == 30 * MS and jv["bound"] == "host"
    assert jv["waiting"][0]["rank"] == 0 and jv["waiting"][0]["in"] == "pthread_cond_wait"
    roles = adjust_rank_verdicts({0: {"bound": "gpu"}, 1: {"bound": "gpu"}}, job)
    assert roles[1]["job"]["role"] == "straggler" and roles[0]["job"]["role"] == "waiting"


def test_planted_nsys_gloo_without_steps_uses_the_common_span(tmp_path):
    path, truth = write_nsys_gloo_job(tmp_path / "gloo.sqlite", markers=False)
    inf = _job(path).inferred
    # no NVTX steps: the main thread (tid == pid) is read, not the autograd thread that
    # waits in the engine queue on every rank alike
    assert inf["basis"] == "span" and inf["rank"] == 1 and inf["significant"]
    assert inf["median_delay_ns"] == truth["steps"] * truth["late_by_ns"]


def test_planted_nsys_gloo_balanced_is_no_straggler(tmp_path):
    path, _ = write_nsys_gloo_job(tmp_path / "gloo.sqlite", slow_rank=-1)
    jv = _job(path).verdict()
    assert jv["status"] == "none" and jv["basis"] == "thread_waits"
    assert jv["summary"].startswith("no straggler: no collective matched, and the launching threads wait within")


def test_planted_nsys_without_waits_cannot_tell(tmp_path):
    path, _ = write_nsys_gloo_job(tmp_path / "gloo.sqlite", osrt=False)
    job = _job(path)
    jv = job.verdict()
    assert jv["status"] == "cannot_tell" and jv["straggler_rank"] == -1
    assert "no rank's trace holds a collective" in jv["why"] and "--trace=cuda,nvtx,osrt" in jv["how"]
    roles = adjust_rank_verdicts({0: {"bound": "gpu"}, 1: {"bound": "gpu"}}, job)
    assert {v["job"]["role"] for v in roles.values()} == {"unknown"}
    assert mr.jobs_table([job])["status"].tolist() == ["cannot_tell"]
    from traceread.render.cross_rank import render_summary

    text = render_summary([job])
    assert "CANNOT TELL" in text and "NO STRAGGLER" not in text


def test_kineto_job_without_collectives_cannot_tell():
    """Kineto form: steps on every rank, but every collective dropped -> cannot tell, not a
    clean bill (Kineto records no OS waits)."""
    spec = JobSpec(ranks=2, steps=4, slow_rank=1, drop={0: [1, 2, 3, 4], 1: [1, 2, 3, 4]})
    job = mr.analyze_traces(make_job(spec))[0]
    jv = job.verdict()
    assert jv["status"] == "cannot_tell" and "NO STRAGGLER" not in jv["summary"]
    # with the collectives, the same job names its straggler from matched evidence
    jv = mr.analyze_traces(make_job(JobSpec(ranks=2, steps=4, slow_rank=1)))[0].verdict()
    assert jv["status"] == "straggler" and jv["basis"] == "collectives" and jv["straggler_rank"] == 1


def test_matched_and_on_time_is_no_straggler():
    jv = mr.analyze_traces(make_job(JobSpec(ranks=2, steps=4, slow_rank=1, delay_ns=0)))[0].verdict()
    assert jv["status"] == "none" and jv["basis"] == "collectives"


def test_cli_prints_cannot_tell(tmp_path):
    from click.testing import CliRunner

    from traceread.cli import main

    path, _ = write_nsys_gloo_job(tmp_path / "gloo.sqlite", osrt=False)
    out = CliRunner().invoke(main, ["analyze", str(path)])
    assert out.exit_code == 0 and "CANNOT TELL  who is late" in out.output
    path, _ = write_nsys_gloo_job(tmp_path / "slow.sqlite")
    out = CliRunner().invoke(main, ["analyze", str(path)])
    assert "STRAGGLER  rank 1 is late by 30 ms per step (5/5 steps)" in out.output


@pytest.mark.corpus
def test_real_nsys_ai_2gpu_cannot_tell(corpus_dir):
    """nsys-ai h100_2gpu_1s: two processes, no communication kernel, no OS-runtime trace, no
    steps. It used to print 'NO STRAGGLER  no matched collective'."""
    f = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures" / "h100_2gpu_1s.sqlite"
    if not f.exists():
        pytest.skip("nsys-ai fixture not in the corpus")
    jv = _job(f).verdict()
    assert jv["status"] == "cannot_tell" and jv["straggler_rank"] == -1
    assert jv["why"].startswith("no rank's trace holds a collective")
