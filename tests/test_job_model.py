"""One job model (``traceread.job``, ``jobs.multirank.build_jobs``): every entry point --
``analyze`` (text, JSON, HTML), ``batch``, ``overlay``, ``diff`` and the notebook API --
gives the same job for the same traces: the same windows, verdict, layout and levers.

Recording: ``scripts/record_gloo_parallel.py pp --schedule gpipe --world 2 --microbatches 4
--slow-stage 1 --slow-factor 1 --sleep-ms 15`` (CPU torch 2.13, gloo): rank 1 sleeps 15 ms
untraced inside each microbatch's forward.
"""
from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main

from conftest import FIXTURES

JOB = FIXTURES / "gloo" / "pp3" / "gpipe_p2_m4_sleep1"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The two ranks' traces alone in a folder (a batch reads every file of it)."""
    d = tmp_path_factory.mktemp("job")
    for r in (0, 1):
        shutil.copy(JOB / f"rank-{r}.json.gz", d / f"rank-{r}.json.gz")
    return d, [str(d / f"rank-{r}.json.gz") for r in (0, 1)]


def _same(a: dict, b: dict):
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_every_entry_point_gives_the_same_job(ranks, tmp_path):
    d, paths = ranks
    job = traceread.job(paths)
    want = job.to_dict()
    jv = job.verdict()
    # the job itself: rank 1 named with its untraced sleep, the layout and its levers
    assert jv["straggler_rank"] == 1 and jv["basis"] == "pipeline"
    assert want["parallelism"]["pipeline"]["schedule"] == "gpipe"
    # its excess is untraced (the planted sleep: 60 ms a step): find it, not "move layers"
    assert jv["cause"] == "stage_untraced" and want["levers"][0]["id"] == "straggler"
    assert "pp_rebalance" not in [x["id"] for x in want["levers"]]
    assert want["windows"]["0"] is not None
    assert set(job.analyses) == {0, 1}

    # notebook: from Analyses, and from Traces
    _same(traceread.job([traceread.analyze(p) for p in paths]).to_dict(), want)
    _same(traceread.job([traceread.load(p) for p in paths]).to_dict(), want)

    # CLI analyze --format json: its cross_rank object
    out = CliRunner().invoke(main, ["analyze", *paths, "--format", "json"])
    assert out.exit_code == 0, out.output
    _same(json.loads(out.output)["cross_rank"][0], want)

    # CLI analyze text and HTML: the same headline and levers
    text = CliRunner().invoke(main, ["analyze", *paths]).output
    assert jv["headline"] in " ".join(text.split())
    assert job.levers[0]["lever"][:60] in " ".join(text.split())
    html = tmp_path / "job.html"
    assert CliRunner().invoke(main, ["analyze", *paths, "--format", "html", "-o", str(html)]).exit_code == 0
    assert jv["headline"].split(";")[0][:60] in " ".join(html.read_text().split())

    # batch: the job it writes
    from traceread.jobs.batch import run

    res = run(str(d), jobs=1)
    assert len(res.jobs) == 1
    _same(res.jobs[0].to_dict(), want)

    # overlay: the straggler waits it draws are the job's (same windows)
    o = tmp_path / "ov"
    assert CliRunner().invoke(main, ["overlay", *paths, "-o", str(o)]).exit_code == 0
    m = job.matches
    for r in (0, 1):
        doc = json.loads(gzip.open(o / f"rank-{r}.overlay.json.gz").read())
        drawn = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("wait for ")]
        assert len(drawn) == int(((m["rank"] == r) & (m["wait_ns"] > 0)).sum())

    # diff of the folder with itself: the job's straggler on both sides
    out = CliRunner().invoke(main, ["diff", str(d), str(d), "--format", "json"])
    assert out.exit_code == 0, out.output
    (rec,) = json.loads(out.output)["jobs"]
    assert rec["before"]["straggler_rank"] == rec["after"]["straggler_rank"] == 1
    assert rec["before"]["summary"] == jv["summary"]


def test_job_refuses_inputs_that_form_no_job():
    with pytest.raises(ValueError, match="form 0 multi-rank jobs"):
        traceread.job(str(JOB / "rank-0.json.gz"))


def test_diff_of_two_multi_process_exports_is_rank_by_rank_and_as_a_job(tmp_path):
    """Two nsys exports of 2 processes each (synth: rank 1 late by 3 ms, then rank 0 by 2 ms):
    the diff pairs the ranks, gives the job's straggler before -> after and its verdict, and
    never adds the GPUs together (each side's figures are one process's)."""
    from traceread.synth.multirank import JobSpec, write_nsys_job

    b = write_nsys_job(tmp_path / "before.sqlite", JobSpec(ranks=2, slow_rank=1, delay_ns=3_000_000, steps=4))
    a = write_nsys_job(tmp_path / "after.sqlite", JobSpec(ranks=2, slow_rank=0, delay_ns=2_000_000, steps=4))
    out = CliRunner().invoke(main, ["diff", str(b), str(a), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["source"] == "processes" and doc["matched_by"] == "rank"
    assert sorted(p["label"] for p in doc["pairs"]) == ["rank 0", "rank 1"]
    one = traceread.analyze(traceread.all_jobs(str(b))[0].analyses[0].trace)
    # a side is one process: its GPU window is one GPU's, not the sum
    for p in doc["pairs"]:
        assert p["before"]["path"].split("#pid")[0] == str(b)
        assert p["before"]["gpu_window_ns"] <= 1.05 * one.to_dict()["window"]["dur_ns"]
    (job,) = doc["jobs"]
    assert (job["before"]["straggler_rank"], job["after"]["straggler_rank"]) == (1, 0)
    assert job["straggler_changed"] and job["verdict_changed"]
    assert (job["before"]["late_by_ns"], job["after"]["late_by_ns"]) == (3_000_000, 2_000_000)
    text = CliRunner().invoke(main, ["diff", str(b), str(a)]).output
    assert "2 matched traces (ranks of multi-process exports, matched by rank)" in text
    assert "straggler    rank 1 3 ms late" in text and "-> rank 0 2 ms late" in text


@pytest.mark.corpus
def test_diff_of_two_real_two_gpu_exports(corpus_dir):
    """nsys-ai's mfu_2gpu before/after (one export of 2 GPU processes each): rank by rank --
    no side reads the 2 GPUs' 569 ms beside a 285 ms wall -- and the straggler: rank 1
    before; after, none (rank 0 is last at 13 of 29, less often than chance, and without
    steps nothing measures the noise: the old expectation, rank 0, rested on a spread of 0)."""
    d = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures"
    if not (d / "mfu_2gpu_before.sqlite").is_file():
        pytest.skip("nsys-ai fixtures not in the corpus")
    out = CliRunner().invoke(main, ["diff", str(d / "mfu_2gpu_before.sqlite"),
                                    str(d / "mfu_2gpu_after.sqlite"), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert len(doc["pairs"]) == 2
    for p in doc["pairs"]:
        for side in (p["before"], p["after"]):
            assert side["gpu_window_ns"] <= side["wall_ns"] * 1.01
    (job,) = doc["jobs"]
    assert (job["before"]["straggler_rank"], job["after"]["straggler_rank"]) == (1, -1)


FR = FIXTURES / "gloo" / "fr2"


def test_flight_recorder_dumps_name_the_late_rank_without_a_profiler_trace():
    """``record_gloo_parallel.py fr``: 2 gloo ranks, no profiler, rank 1 sleeps 20 ms before
    each of 4 all_reduces a step; torch 2.13 records a Flight Recorder for gloo, dumped per
    rank as JSON. Its issue times match by sequence number; rank 1 is named with its
    lateness within 5% of the loop's own entry times (20.1 ms vs 20.2)."""
    truth = json.loads((FR / "truth.json").read_text())
    rows = {r: [t for x in truth["per_rank"][str(r)] for t in x["all_reduce_entry_ns"]] for r in (0, 1)}
    loop = float(np.median(np.subtract(rows[1], rows[0])))
    paths = [str(FR / f"fr-rank-{r}.json") for r in (0, 1)]
    job = traceread.job(paths)
    jv = job.verdict()
    assert jv["status"] == "straggler" and jv["straggler_rank"] == 1 and jv["collective"] == "all_reduce"
    assert abs(jv["late_by_ns"] - loop) <= 0.05 * loop
    assert job.source == "issue" and job.backend == "gloo"
    out = CliRunner().invoke(main, ["analyze", *paths, "--format", "json"])
    assert out.exit_code == 0, out.output
    _same(json.loads(out.output)["cross_rank"][0], job.to_dict())
    text = CliRunner().invoke(main, ["analyze", *paths]).output
    assert text.startswith("JOB job0: ranks 0, 1 of 2 · gloo\n  STRAGGLER  rank 1 arrives 20.1 ms late")


def test_a_pickled_flight_recorder_dump_loads_no_class(tmp_path):
    """torch's dump-on-timeout files are pickles: read with an unpickler that refuses every
    class (a dump is plain containers), so a hostile one cannot run code."""
    import pickle

    from traceread.jobs.multirank.flight import read_dump

    doc = json.loads((FR / "fr-rank-0.json").read_text())
    good = tmp_path / "nccl_trace_rank_0"
    good.write_bytes(pickle.dumps(doc))
    assert len(read_dump(good)["entries"]) == len(doc["entries"])

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    bad = tmp_path / "nccl_trace_rank_1"
    bad.write_bytes(pickle.dumps({"version": "2.10", "entries": [Evil()]}))
    from traceread.errors import TraceError

    with pytest.raises(TraceError, match="refusing to load"):   # a dump, refused (issue 40)
        read_dump(bad)


def test_diff_of_two_batch_outputs_shows_each_jobs_change(tmp_path):
    """Batch outputs of two pipeline jobs -- rank 1 sleeping (untraced) vs rank 1 with 3x the
    layers -- diffed: the job's straggler stays rank 1 but its cause and lever change."""
    from traceread.jobs.batch import run
    from traceread.jobs.output import write

    outs = []
    for name in ("gpipe_p2_m4_sleep1", "gpipe_p2_m4_heavy1"):
        d = tmp_path / name
        d.mkdir()
        for r in (0, 1):
            shutil.copy(FIXTURES / "gloo" / "pp3" / name / f"rank-{r}.json.gz", d / f"rank-{r}.json.gz")
        outs.append(write(run(str(d), jobs=1), str(tmp_path / f"{name}.out")))
    out = CliRunner().invoke(main, ["diff", str(outs[0]), str(outs[1]), "--format", "json"])
    assert out.exit_code == 0, out.output
    (job,) = json.loads(out.output)["jobs"]
    b, a = job["before"], job["after"]
    assert b["straggler_rank"] == a["straggler_rank"] == 1 and not job["straggler_changed"]
    assert (b["cause"], a["cause"]) == ("stage_untraced", "stage_compute") and job["verdict_changed"]
