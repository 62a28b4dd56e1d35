"""One nsys export holding several ranks: split by process, analysed as one job."""
from __future__ import annotations

import pytest

import traceread
from traceread.jobs import multirank as mr
from traceread.readers.nsys_split import gpu_processes, split_processes
from traceread.synth.multirank import JobSpec, write_nsys_job


def test_synthetic_nsys_job_split_and_straggler(tmp_path):
    spec = JobSpec(ranks=4, slow_rank=3, with_seq=False, steps=5, cause="cpu_op")
    path = write_nsys_job(tmp_path / "job.sqlite", spec)
    trace = traceread.load(path)
    parts = split_processes(trace)
    assert [p.meta.rank for p in parts] == [0, 1, 2, 3]
    assert {p.meta.extra["pid"] for p in parts} == {1000, 1001, 1002, 1003}
    assert sum(len(p) for p in parts) == len(trace)
    res = mr.analyze_traces(parts)
    assert len(res) == 1
    job = res[0]
    truth = spec.truth()
    m = job.matches
    for r, w in truth["wait_ns"].items():
        assert (m.loc[m["rank"] == r, "wait_ns"] == w).all(), r
    assert job.straggler["rank"] == 3 and job.straggler["median_delay_ns"] == truth["delay_ns"]
    assert job.straggler["why"]["cause"] == "cpu_op"
    assert all(o["reason"] in ("reference clock", "one clock (same export or same host)") for o in job.clock.values())


def test_split_reads_the_table_as_loaded(tmp_path):
    """The split never builds the whole export's DataFrame, and gives the parts (rows,
    ranks, backends) the frame's path gives."""
    spec = JobSpec(ranks=3, slow_rank=1, with_seq=False, steps=3, cause="cpu_op")
    path = write_nsys_job(tmp_path / "job.sqlite", spec)
    fresh, framed = traceread.load(path), traceread.load(path)
    framed.events   # noqa: B018 - the frame built first: gpu_processes reads it
    parts = split_processes(fresh)
    assert not fresh.has_frame and framed.has_frame
    assert gpu_processes(fresh) == gpu_processes(framed) == [(1000, 0), (1001, 1), (1002, 2)]
    for a, b in zip(parts, split_processes(framed), strict=True):
        assert a.meta.distributed == b.meta.distributed and a.meta.path == b.meta.path
        assert a.table.equals(b.table)


def test_analyze_cli_on_one_multi_process_export(tmp_path):
    from click.testing import CliRunner

    from traceread.cli import main

    path = write_nsys_job(tmp_path / "job.sqlite", JobSpec(ranks=2, slow_rank=1, steps=4))
    out = CliRunner().invoke(main, ["analyze", str(path)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("JOB job0: ranks 0, 1 of 2 · nccl\n  STRAGGLER  rank 1 arrives 3 ms late")
    single = write_nsys_job(tmp_path / "one.sqlite", JobSpec(ranks=1, slow_rank=-1, steps=2))
    out = CliRunner().invoke(main, ["analyze", str(single)])
    assert out.exit_code == 0 and "JOB" not in out.output


@pytest.mark.corpus
def test_real_two_process_nsys_export(corpus_dir):
    f = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"
    if not f.exists():
        pytest.skip("nsys-ai fixture not in the corpus")
    parts = split_processes(traceread.load(f))
    assert [(p.meta.rank, p.meta.extra["pid"]) for p in parts] == [(0, 144), (1, 145)]
    job = mr.analyze_traces(parts)[0]
    # 33 all_to_all (NCCL SendRecv kernels) per process, same order on both
    assert job.methods == {"stream#1": "order"} and job.matches["instance"].nunique() == 33
    assert job.straggler["rank"] == 1 and job.straggler["times_late"] == 13
    assert not any(o["applied"] for o in job.clock.values())


def test_analyze_reports_each_process_of_one_export(tmp_path):
    """nsys profile torchrun ...: one report per rank (process), the job verdict first."""
    import json

    from click.testing import CliRunner

    from traceread.cli import main

    path = write_nsys_job(tmp_path / "job.sqlite", JobSpec(ranks=2, slow_rank=1, steps=4))
    out = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    paths = [t["trace"]["path"] for t in doc["traces"]]
    assert len(paths) == 2 and all("#pid" in p for p in paths)
    assert [t["trace"]["rank"] for t in doc["traces"]] == [0, 1]
    v = doc["cross_rank"][0]["verdict"]
    assert v["straggler_rank"] == v["evidence"]["collectives"]["rank"] == 1
    assert "straggler" not in doc["cross_rank"][0]      # one answer: the verdict's
    text = CliRunner().invoke(main, ["analyze", str(path)]).output
    assert text.count("VERDICT") == 2 and "rank 1 of 2" in text


def test_batch_rows_per_process_and_analyze_job(tmp_path):
    """batch keeps a row per process of one export and forms analyze's job from them (it
    kept one merged row, and the job read the merged window's steps)."""
    from traceread.jobs.batch import analyze_file, assemble
    from traceread.jobs.output import PartialSummary

    path = write_nsys_job(tmp_path / "job.sqlite", JobSpec(ranks=2, slow_rank=1, steps=4))
    one = analyze_file(str(path))
    part = PartialSummary(tmp_path / "out")   # the partial summary has both rows too
    part.add(one)
    part.close()
    assert (tmp_path / "out" / "summary.partial.csv").read_text().count("#pid") == 2
    res = assemble([one])
    ref = traceread.job(str(path))
    assert res.files == 1 and res.summary["file"].tolist() == [ref.paths[0], ref.paths[1]]
    assert res.summary["rank"].tolist() == [0, 1]
    assert res.summary["steps"].tolist() == [ref.analyses[r].step_stats["count"] for r in (0, 1)]
    (job,) = res.jobs
    assert job.verdict()["summary"] == ref.verdict()["summary"]
