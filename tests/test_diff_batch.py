"""``traceread diff`` on two ``traceread batch`` output folders: planted jobs prove the
arithmetic (and that a batch diff equals the diff of the traces), the kineto
num_workers 0 vs 4 samples prove it on real traces."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from traceread import schema
from traceread.jobs.batch import analyze_dir
from traceread.cli import main
from traceread.synth.multirank import JobSpec, write_job
from traceread.diffs.paths import diff_paths

# one worker builds this file's module fixture (`--dist loadgroup`), not both
pytestmark = pytest.mark.xdist_group("diff_batch")

MS = 1_000_000


def _batch(tmp_path, name: str, spec: JobSpec):
    traces = tmp_path / f"{name}-traces"
    write_job(traces, spec)
    out = tmp_path / name
    analyze_dir(traces, out_dir=out, jobs=2)
    return traces, out


@pytest.fixture(scope="module")
def straggler_fixed(tmp_path_factory):
    """Rank 2 sleeps 3 ms before each all_reduce; after the fix nobody does."""
    tmp = tmp_path_factory.mktemp("jobs")
    before = _batch(tmp, "before", JobSpec(ranks=4, steps=5, slow_rank=2, delay_ns=3 * MS))
    after = _batch(tmp, "after", JobSpec(ranks=4, steps=5, slow_rank=2, delay_ns=0))
    return before, after


def test_batch_outputs_pair_by_path_and_carry_the_job_change(straggler_fixed):
    (_, b), (_, a) = straggler_fixed
    d = diff_paths(str(b), str(a))
    assert d.source == "batch" and d.matched_by == "path" and len(d.pairs) == 4
    assert sorted(p.label for p in d.pairs) == [f"rank-{r}.json.gz" for r in range(4)]
    assert d.unmatched == []
    (job,) = d.jobs
    assert job["job_before"] == job["job_after"] == "job0" and job["ranks"] == 4
    truth = JobSpec(ranks=4, steps=5, slow_rank=2, delay_ns=3 * MS).truth()
    assert job["before"]["straggler_rank"] == 2 and job["before"]["late_by_ns"] == truth["delay_ns"]
    assert job["after"]["straggler_rank"] == -1 and job["straggler_changed"]
    doc = d.to_dict()
    schema.check("diff", json.loads(json.dumps(schema.versioned(doc))))


def test_batch_diff_equals_the_diff_of_the_traces(straggler_fixed):
    (tb, b), (ta, a) = straggler_fixed
    db, dt = diff_paths(str(b), str(a)), diff_paths(str(tb), str(ta))
    assert dt.source == "directories" and db.jobs == dt.jobs  # the same job change either way
    from_batch = {p.label: p._pair_dict() for p in db.pairs}
    from_traces = {p.label: p._pair_dict() for p in dt.pairs}
    assert from_batch.keys() == from_traces.keys()
    job_adjusted = ("verdict", "verdict_summary", "promised_saving_ns")  # batch: as for the job
    for label, x in from_batch.items():
        y = from_traces[label]
        for k in ("change", "kernels", "slower_pct", "unit"):
            assert x[k] == y[k], (label, k)
        for s in ("before", "after"):
            assert {k: v for k, v in x[s].items() if k not in job_adjusted} == \
                   {k: v for k, v in y[s].items() if k not in job_adjusted}, (label, s)


def test_fail_if_slower_on_batch_outputs(tmp_path):
    _, b = _batch(tmp_path, "before", JobSpec(ranks=2, steps=4, step_ns=20 * MS))
    _, a = _batch(tmp_path, "after", JobSpec(ranks=2, steps=4, step_ns=20 * MS, step_skew_ns=3 * MS))
    r = CliRunner().invoke(main, ["diff", str(b), str(a), "--fail-if-slower", "5%"])
    assert r.exit_code == 3, r.output  # 3: slower than allowed (1 is an error)
    assert "15.0% slower" in r.stderr  # rank 1's steps: 20 ms -> 23 ms
    assert r.stdout.startswith("2 matched traces (batch outputs, matched by path)")
    assert "worst step-time change: +15.0% (--fail-if-slower checks it): rank-1.json.gz" in r.stdout
    # rows keep within 100 columns; a line naming a path stays whole (the temp path is longer
    # under pytest-xdist)
    assert all(len(x) <= 100 for x in r.stdout.splitlines() if str(tmp_path) not in x)
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--fail-if-slower", "5%"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["diff", str(b), str(a), "--format", "html", "-o", str(tmp_path / "d.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "d.html").read_text()
    assert "Every matched trace" in page and "Jobs" in page and "<script" not in page


def test_a_batch_output_against_a_trace_folder_is_one_error_line(straggler_fixed):
    (tb, b), _ = straggler_fixed
    r = CliRunner().invoke(main, ["diff", str(b), str(tb)])
    assert r.exit_code == 1 and r.stderr.startswith("traceread: error: ")
    assert "not a `traceread batch` output folder" in r.stderr and "Traceback" not in r.output


def test_a_failed_trace_is_listed_not_compared(tmp_path):
    traces = tmp_path / "t"
    write_job(traces, JobSpec(ranks=2, steps=3))
    (traces / "rank-9.json").write_text("{")
    out = tmp_path / "b"
    analyze_dir(traces, out_dir=out, jobs=1)
    d = diff_paths(str(out), str(out))
    assert len(d.pairs) == 2 and d.slower_pct() == 0.0
    assert {(u["side"], u["path"].endswith("rank-9.json")) for u in d.unmatched} == \
        {("before", True), ("after", True)}
    assert all(u["reason"].startswith("failed in the batch: ") for u in d.unmatched)


SAMPLES = "pytorch__kineto/tb_plugin/samples"


def test_real_kineto_num_workers_0_vs_4_batch_outputs(corpus_dir, tmp_path):
    """Two recordings each of ResNet-50 with DataLoader num_workers=0 and 4 (kineto's
    tb_plugin samples): the data-loading idle time goes, the verdict leaves DATA."""
    outs = []
    for w in (0, 4):
        out = tmp_path / f"w{w}"
        analyze_dir(corpus_dir / SAMPLES / f"resnet50_num_workers_{w}", out_dir=out, jobs=2)
        outs.append(str(out))
    d = diff_paths(*outs)
    assert d.matched_by == "position" and len(d.pairs) == 2 and d.jobs == []
    for p in d.pairs:
        assert p.unit == "step" and p.before["verdict"] == "data" and p.after["verdict"] != "data"
        dl_b, dl_a = p.before["idle_by_cpu"]["dataloader"], p.after["idle_by_cpu"]["dataloader"]
        assert dl_b > 30 * MS and dl_a < 0.05 * dl_b  # ~35 ms per step of loading -> < 1 ms
        s = p.saving()
        assert s["realised_ns"] > 5 * MS and s["promised_ns"] >= s["realised_ns"]
        assert p.after["gpu_idle_pct"] < p.before["gpu_idle_pct"]
    assert d.slower_pct() < 0
    r = CliRunner().invoke(main, ["diff", *outs, "--fail-if-slower", "0%", "--format", "json"])
    assert r.exit_code == 0, r.output
    schema.check("diff", json.loads(r.stdout))
    text = CliRunner().invoke(main, ["diff", *outs]).stdout  # long names, cuDNN kernels
    # within 100 columns, except a "before/after PATH" line: paths print whole (copyable)
    rows = [x for x in text.splitlines() if not x.startswith(("before  ", "after   "))]
    assert text.startswith("2 matched traces") and max(map(len, rows)) <= 100


@pytest.mark.slow  # records a live 2-rank gloo job (~15 s; timing-sensitive under load)
def test_real_gloo_job_straggler_fixed(tmp_path):
    """The committed 2-rank gloo capture (rank 1 sleeps 30 ms before each forward) against
    the same job recorded here without the sleep: the job's straggler delay and its step
    time fall by about the planted 30 ms."""
    pytest.importorskip("torch")
    import shutil
    import sys

    from conftest import FIXTURES

    sys.path.insert(0, str(FIXTURES.parents[1] / "scripts"))
    from record_gloo_ddp import record

    before = tmp_path / "before-traces"
    before.mkdir()
    for r in (0, 1):
        shutil.copy(FIXTURES / "gloo" / "ddp2" / f"rank-{r}.json.gz", before)
    after = tmp_path / "after-traces"
    record(after, world=2, slow=1, delay_ms=0.0)
    (after / "truth.json").unlink()
    outs = []
    for name, folder in (("before", before), ("after", after)):
        analyze_dir(folder, out_dir=tmp_path / name, jobs=2)
        outs.append(str(tmp_path / name))
    d = diff_paths(*outs)
    (job,) = d.jobs
    b, a = job["before"], job["after"]
    assert b["straggler_rank"] == 1 and 25 * MS <= b["late_by_ns"] <= 40 * MS
    assert a["straggler_rank"] < 0 or a["late_by_ns"] < 10 * MS
    assert b["step_mean_ns"] - a["step_mean_ns"] > 20 * MS and job["step_pct"] < -40
    assert d.slower_pct() < -40
    r = CliRunner().invoke(main, ["diff", *outs, "--fail-if-slower", "5%"])
    assert r.exit_code == 0 and "JOB job0 (2 ranks matched)" in r.stdout
    assert [x for x in r.stdout.splitlines() if len(x) > 100] == []


def test_batch_diff_page_in_headless_chromium(straggler_fixed, tmp_path):
    from test_html import CHROMIUM, _chromium, _console

    if CHROMIUM is None:
        pytest.skip("chromium not installed")
    (_, b), (_, a) = straggler_fixed
    page = tmp_path / "diff.html"
    r = CliRunner().invoke(main, ["diff", str(b), str(a), "--format", "html", "-o", str(page)])
    assert r.exit_code == 0, r.output
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0 and _console(dom.stderr) == []
    assert "Every matched trace" in dom.stdout and "rank 2 3 ms late" in dom.stdout
    assert "worst step-time change" in dom.stdout


def test_a_damaged_batch_output_is_one_error_line(straggler_fixed, tmp_path):
    import shutil

    (_, b), (_, a) = straggler_fixed
    broken = tmp_path / "broken"
    shutil.copytree(b, broken)
    (broken / "summary.parquet").write_bytes(b"PAR1 not really")
    r = CliRunner().invoke(main, ["diff", str(broken), str(a)])
    assert r.exit_code == 1 and r.stderr.startswith(f"traceread: error: {broken}: cannot read")
    assert "Traceback" not in r.output and len(r.stderr.splitlines()) == 1


def test_a_split_exports_processes_pair_by_rank_across_two_batches():
    """batch rows each process of an nsys export (``job.sqlite#pid<PID>``); pids differ
    between two runs, so a diff of two batch outputs pairs those rows by rank, while other
    files keep pairing by path."""
    from traceread.diffs.batch import _rel
    from traceread.diffs.trace import pair_up

    def side(pids, root):
        rows = [(f"{root}/job.sqlite#pid{p}", r) for r, p in enumerate(pids)]
        rows.append((f"{root}/other.json", None))
        return [{"rel": _rel(f, root, r), "path": f, "rank": r, "item": f} for f, r in rows]
    m = pair_up(side([1442, 1443], "/b"), side([2001, 2002], "/a"), "/b", "/a")
    assert sorted(label for label, _, _ in m.pairs) == \
        ["job.sqlite#rank0", "job.sqlite#rank1", "other.json"] and not m.unmatched
    assert _rel("/b/x.sqlite#pidfoo", "/b", 0) == "x.sqlite#pidfoo"
