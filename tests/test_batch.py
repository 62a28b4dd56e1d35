"""traceread batch / analyze_dir: discovery, error rows, outputs, cross-rank summary."""
import gzip
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

import traceread
from traceread.jobs import batch, output
from traceread.jobs.discover import discover
from traceread.cli import main
from traceread.synth.multirank import JobSpec, write_job

SPEC = JobSpec(ranks=3, slow_rank=1, delay_ns=2_500_000, steps=4, step_skew_ns=100_000)


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    """A run directory: 3 ranks (tensorboard-style names), a nested copy of nothing else,
    a truncated JSON, a non-trace gzip, a text file and a README."""
    root = tmp_path_factory.mktemp("run")
    write_job(root / "traces", SPEC, name="host_pid.{rank}.pt.trace.json.gz")
    (root / "traces" / "broken.json").write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    with gzip.open(root / "notes.gz", "wb") as f:
        f.write(b"hello, not json\n")
    (root / "README.md").write_text("# run\n")
    (root / "loss.txt").write_text("0.1 0.2\n")
    return root


@pytest.fixture(scope="module")
def ok_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ok")
    write_job(root, SPEC)
    return root


def test_discover_by_content(job_dir):
    found, skipped = discover(job_dir)
    names = sorted(Path(p).name for p in found)
    assert names == ["broken.json", "host_pid.0.pt.trace.json.gz", "host_pid.1.pt.trace.json.gz",
                     "host_pid.2.pt.trace.json.gz", "notes.gz"]
    assert sorted(Path(p).name for p in skipped) == ["README.md", "loss.txt"]


def test_run_rows_errors_and_ranks(job_dir):
    res = batch.run(job_dir, jobs=1)
    s = res.summary.set_index(res.summary["file"].map(lambda p: Path(p).name))
    assert len(s) == 5 and res.failed == 2
    assert "truncated" in s.loc["broken.json", "error"] or "JSON" in s.loc["broken.json", "error"]
    assert s.loc["notes.gz", "error"]
    good = s[s["error"].isna()]
    assert sorted(good["rank"]) == [0, 1, 2] and (good["world_size"] == 3).all()
    assert good["job"].nunique() == 1 and good["job"].notna().all()
    assert (good["steps"] == 4).all() and (good["format"] == "kineto").all()
    assert good["verdict"].notna().all()
    # Cross-rank: exact planted truth.
    truth = SPEC.truth()
    r = res.ranks.set_index("rank")
    assert list(r.index) == [0, 1, 2]
    assert r["straggler"].tolist() == [False, True, False]
    assert (r["straggler_delay_ns"] == truth["delay_ns"]).all()
    for rank in range(3):
        assert r.loc[rank, "wait_ns"] == 4 * truth["wait_ns"][rank]
        assert r.loc[rank, "transfer_ns"] == 4 * truth["transfer_ns"]
        assert r.loc[rank, "step_mean_ns"] == truth["step_ns"][rank]
    assert (r["comm_ns"] == r["wait_ns"] + r["transfer_ns"]).all()
    assert (r["step_skew_mean_ns"] == 200_000).all()
    m = res.matches
    assert len(m) == 12 and (m["wait_ns"] + m["transfer_ns"] == m["dur"]).all()


def test_local_pool_matches_serial(ok_dir):
    one = batch.run(ok_dir, jobs=1)
    two = batch.run(ok_dir, jobs=2)
    cols = [c for c in output.SUMMARY_COLUMNS if c != "seconds"]
    pd.testing.assert_frame_equal(one.summary[cols], two.summary[cols])
    pd.testing.assert_frame_equal(one.ranks, two.ranks)


def test_cli_outputs(job_dir, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["batch", str(job_dir), "-o", str(out), "-j", "2"])
    assert r.exit_code == 1, r.output          # two files failed
    assert "5 files: 3 analysed, 2 failed, 2 skipped" in r.output
    assert ("collective matching   rank 1 last in 4/4, late in 4/4 of the late ones; its lateness (median,"
            in r.output)
    assert "STRAGGLER  rank 1 arrives 2.5 ms late (median) at 4/4 all_reduces" in r.output
    summary = pd.read_parquet(out / "summary.parquet")
    assert len(summary) == 5 and len(pd.read_csv(out / "summary.csv")) == 5
    assert set(pd.read_parquet(out / "ranks.parquet")["rank"]) == {0, 1, 2}
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert len(jobs) == 1 and jobs["straggler_rank"].tolist() == [1] and jobs["ranks"].tolist() == [3]
    assert jobs["late_by_ns"].tolist() == [2_500_000] and jobs["straggler_collective"].tolist() == ["all_reduce"]
    ok_ids = set(summary.loc[summary["error"].isna(), "trace_id"])
    for table in ("gaps", "kernels", "collectives", "steps"):
        df = pd.read_parquet(out / "tables" / table)
        assert set(df["trace_id"].astype(str)) == ok_ids, table
        dset = pads.dataset(out / "tables" / table, format="parquet", partitioning="hive")
        assert dset.to_table().num_rows == len(df)
    coll = pd.read_parquet(out / "tables" / "collectives")
    assert len(coll) == 12 and set(coll["collective"]) == {"all_reduce"}
    assert {"exposed_ns", "process_group", "msg_bytes", "stream"} <= set(coll.columns)


def test_cli_all_good_exits_zero(ok_dir, tmp_path):
    r = CliRunner().invoke(main, ["batch", str(ok_dir), "-o", str(tmp_path / "o"), "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "3 files: 3 analysed, 0 failed" in r.output


def test_analyze_dir_api(ok_dir, tmp_path):
    df = traceread.analyze_dir(ok_dir, jobs=1, out_dir=tmp_path / "o")
    assert isinstance(df, pd.DataFrame) and len(df) == 3 and df["error"].isna().all()
    assert (tmp_path / "o" / "summary.parquet").exists()


def test_worker_never_raises(tmp_path):
    for p in (tmp_path, tmp_path / "missing.json"):
        res = batch.analyze_file(str(p))
        assert res["row"]["error"] and res["tables"] == {} and res["rank_input"] is None


def test_fsspec_url(ok_dir):
    res = batch.run(f"file://{ok_dir}", jobs=1)
    assert len(res.summary) == 3 and res.failed == 0
    assert res.summary["file"].str.startswith("file://").all()
    assert res.ranks["straggler"].sum() == 1


def test_no_dask_without_scheduler(ok_dir):
    code = ("import sys, traceread.jobs.batch as b, traceread.cli; b.run(sys.argv[1], jobs=2); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code, str(ok_dir)], check=True, timeout=120)


@pytest.mark.corpus
def test_hta_corpus_subset(corpus_dir, tmp_path):
    """The real HTA 2-rank pair lives in two directories; non-traces beside them are errors."""
    hta = corpus_dir / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
    picks = ["timeline_analysis/sampled_rank-0.json.gz", "trace_filter/sampled_rank-1.json.gz",
             "execution_trace/benchmark_simple_add_et.json.gz", "memory_analysis/memory_timeline.raw.gz",
             "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "triton_example/triton_example.json.gz"]
    for rel in picks:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).symlink_to(hta / rel)
    res = batch.run(tmp_path, jobs=2)
    assert len(res.summary) == len(picks)
    bad = set(res.summary.loc[res.summary["error"].notna(), "file"].map(lambda p: Path(p).name))
    assert bad == {"benchmark_simple_add_et.json.gz", "memory_timeline.raw.gz"}
    assert len(res.jobs) == 1 and res.jobs[0].ranks == [0, 1]
    assert res.jobs[0].straggler["rank"] == 1
    assert res.jobs[0].straggler["median_delay_ns"] == (3_302_000 + 4_859_000) // 2  # see test_multirank


@pytest.mark.corpus
@pytest.mark.slow
def test_whole_corpus(corpus_dir, tmp_path):
    """One run over ../shared/corpus: a row per candidate file; every torch/nsys trace with
    events in the MANIFEST is analysed without error."""
    manifest = pd.read_csv(corpus_dir / "MANIFEST.tsv", sep="\t")
    r = CliRunner().invoke(main, ["batch", str(corpus_dir), "-o", str(tmp_path / "o"), "-j", "2"])
    assert r.exit_code == 1, r.output                   # the corpus holds non-traces
    s = pd.read_parquet(tmp_path / "o" / "summary.parquet")
    found, skipped = discover(corpus_dir)
    assert len(s) == len(found) == len(manifest)
    s["local_path"] = s["file"].map(lambda p: str(Path(p).relative_to(corpus_dir)))
    m = manifest.merge(s, on="local_path")
    traces = m[m["kind"].isin(["kineto-json", "kineto-json-gz", "nsys-sqlite"]) & (m["n_events"] > 0)]
    assert traces["error"].isna().all(), traces.loc[traces["error"].notna(), ["local_path", "error"]]


def test_comm_ms_of_a_gloo_rank_is_its_time_in_collectives():
    """gloo ddp2's rank 0 waits ~185 ms in its all_reduces for rank 1 (6 steps) and the
    job's ranks table says comm 202 ms; its summary row read comm_ms 0.0 (no NCCL kernel)."""
    from pathlib import Path

    from traceread.jobs.batch import analyze_file

    path = Path(__file__).parent / "fixtures" / "gloo" / "ddp2" / "rank-0.json.gz"
    row = analyze_file(str(path))["row"]
    assert 180 < row["comm_ms"] < 230
