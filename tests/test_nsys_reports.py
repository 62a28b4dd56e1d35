"""nvtx_sum, osrt_sum, cuda_gpu_mem_*_sum, gpu_time_util: the real nsys 2023.4 goldens
byte for byte, and the rules (ties, row limits, chunking) on planted exports."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.cli.nsys_stats import gaps_csv
from traceread.passes import nsys_reports as R
from traceread.passes.api import api_summary, render_api
from traceread.passes.kernels import render_csv
from traceread.synth.nsys import NsysWriter
from traceread.table import Trace, TraceMeta, build_table

from conftest import CORPUS   # honours TRACEREAD_CORPUS (a worktree one folder deeper)

SHARED = CORPUS.parent
GOLDEN = SHARED / "golden" / "nsys-stats-2023.4"
REPORTS = ("nvtx_sum.csv", "osrt_sum.csv", "cuda_gpu_mem_time_sum.csv",
           "cuda_gpu_mem_size_sum.csv", "gpu_time_util.csv")


def _goldens() -> list[str]:
    if not GOLDEN.exists():
        return []
    return sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*.csv") if p.name in REPORTS)


def render(t, report: str, v: str = "2023.4") -> str:
    """The report as nsys stats ``v`` prints it (the goldens here are 2023.4's, whatever
    nsys version wrote the export)."""
    if report == "nvtx_sum.csv":
        return R.render_nvtx(R.nvtx_summary(t, v), "csv", v)
    if report == "osrt_sum.csv":
        return R.render_osrt(R.osrt_summary(t), "csv", v)
    if report == "cuda_gpu_mem_time_sum.csv":
        return R.render_memops(R.memop_time_summary(t), "time", "csv", v)
    if report == "cuda_gpu_mem_size_sum.csv":
        return R.render_memops(R.memop_size_summary(t), "size", "csv", v)
    return render_csv(R.UTIL_HEADERS, R.util_rows(t, R.gpu_time_util(t, version=v)))


@pytest.mark.corpus
@pytest.mark.parametrize("rel", _goldens() or ["<no goldens>"])
def test_golden(rel):
    golden = GOLDEN / rel
    sqlite = CORPUS / (str(Path(rel).parent) + ".sqlite")
    if not golden.exists() or not sqlite.exists():
        pytest.skip("shared goldens/corpus not available")
    assert render(traceread.load(sqlite), Path(rel).name) == golden.read_text()


@pytest.mark.corpus
def test_cli_csv_equals_golden():
    rel = "hpcgroup__pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda"
    sqlite = CORPUS / (rel + ".sqlite")
    if not sqlite.exists():
        pytest.skip("shared corpus not available")
    saxpy = "hpcgroup__pipit/pipit/tests/data/saxpy-mpi-cuda_nsys_perlmutter0"
    for db, args, gold in (
            (rel, ["memcpy", "--by", "size"], "cuda_gpu_mem_size_sum.csv"),
            (rel, ["memcpy"], "cuda_gpu_mem_time_sum.csv"), (rel, ["osrt"], "osrt_sum.csv"),
            (saxpy, ["nvtx"], "nvtx_sum.csv"), (saxpy, ["util"], "gpu_time_util.csv")):
        path = CORPUS / (db + ".sqlite")
        if not path.exists():
            continue
        r = CliRunner().invoke(main, args + [str(path), "--format", "csv",
                                             "--nsys-version", "2023.4"])
        assert r.exit_code == 0, r.output
        assert r.output.rstrip("\n") == (GOLDEN / db / gold).read_text().rstrip("\n")


def _ops(rows, fmt="nsys"):
    """rows: (ts, dur, pid, device)"""
    ts, dur, pid, dev = (np.array(c) for c in zip(*rows))
    cols = {"ts": ts, "dur": dur, "kind": ["kernel"] * len(rows), "pid": pid, "device": dev}
    return Trace(build_table(cols, len(rows)), TraceMeta(format=fmt))


def test_util_chunks_runs_and_weighted_average():
    # span 1000..2000 in 10 chunks of 100: chunk 0 doubly busy, chunk 1 25 %, 2-8 idle
    t = _ops([(1000, 100, 1, 0), (1000, 100, 1, 0), (1150, 25, 1, 0), (1900, 100, 1, 0)])
    u = R.gpu_time_util(t, threshold=50, chunks=10)
    assert u.to_dict("records") == [
        {"in_use": 3.1, "duration": 800, "start": 1100, "pid": 1, "device": 0}]  # 2500/800
    everything = R.gpu_time_util(t, threshold=1000, chunks=10)
    assert everything["duration"].sum() == 1000 and len(everything) == 1
    assert everything["in_use"].iloc[0] == round((200 * 100 + 25 * 100 + 100 * 100) / 1000, 1)


def test_util_last_chunk_is_clipped_and_rows_sorted_by_in_use():
    # span 1001 / 10 -> chunks of ceil(100.1) = 101 ns; the last one is 92 ns long
    t = _ops([(0 + 1, 1, 1, 0), (1001, 1, 1, 0), (1, 1001, 2, 1)])
    u = R.gpu_time_util(t, threshold=50, chunks=10, skip_nonpositive=False)
    assert u[["pid", "start", "duration"]].values.tolist() == [[1, 1, 1001]]
    assert u["in_use"].iloc[0] == 0.2  # 2 ns busy of 1001


def test_util_and_gaps_row_limit_keeps_the_earliest_rows(tmp_path):
    # 60 gaps on one GPU, growing in length: nsys's limit of 50 keeps the first 50
    w = NsysWriter(tmp_path / "g.sqlite")
    t0 = 1000
    for i in range(61):
        w.kernel(t0, t0 + 10, "k", pid=1)
        t0 += 10 + 2_000_000 + i
    t = traceread.load(w.close())
    lines = gaps_csv(t, 1_000_000).splitlines()
    assert len(lines) == 51
    assert lines[1].split(",")[1] == str(2_000_000 + 49)  # longest of the first 50
    assert len(gaps_csv(t, 1_000_000, rows=-1).splitlines()) == 61


def test_api_ties_in_string_id_order(tmp_path):
    w = NsysWriter(tmp_path / "a.sqlite")
    w.runtime(100, 150, "cudaStreamSynchronize_v3020", 1, 1)   # id 1, two calls
    w.runtime(200, 250, "cudaStreamSynchronize_v3020", 1, 1)
    w.runtime(300, 400, "cudaDeviceSynchronize_v3020", 1, 1)   # id 2, one call, same total
    t = traceread.load(w.close())
    names = [r.split(",")[-1] for r in render_api(api_summary(t)).splitlines()[1:]]
    assert names == ["cudaStreamSynchronize", "cudaDeviceSynchronize"]


def test_nvtx_domain_prefix_and_ties(tmp_path):
    w = NsysWriter(tmp_path / "n.sqlite")
    w.nvtx_domain(5, "MPI", 1, 1)
    w.nvtx_range(100, 200, "b", 1, 1)
    w.nvtx_range(300, 400, "a", 1, 1)
    w.nvtx_range(500, 700, "MPI_Send", 1, 1, domain_id=5)
    t = traceread.load(w.close())
    lines = R.render_nvtx(R.nvtx_summary(t, "2023.4")).splitlines()
    assert [ln.split(",")[-1] for ln in lines[1:]] == ["MPI:MPI_Send", "a", "b"]
    assert lines[1].startswith("50.0,200,1,200.0,200.0,200,200,0.0,PushPop,")
    # nsys 2025.3 prints the default domain's ranges with an empty prefix; the writer
    # stamps the export 2026.2, so that is also what auto picks
    lines = R.render_nvtx(R.nvtx_summary(t)).splitlines()
    assert [ln.split(",")[-1] for ln in lines[1:]] == ["MPI:MPI_Send", ":a", ":b"]


def test_nvtx_of_a_2025_1_export_prints_the_default_domain_bare(tmp_path):
    """nsys 2025.1's nvtx_sum printed an nvFuser export's empty-domain ranges as `Name`
    (issue 22): auto reads a 2025.1 export the 2023.4 way."""
    import sqlite3

    w = NsysWriter(tmp_path / "n.sqlite")
    w.nvtx_range(100, 200, "FusionExecutor::runFusion", 1, 1)
    path = w.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE META_DATA_EXPORT SET value = '2025.1.1.110' "
                   "WHERE name = 'EXPORT_PRODUCT_VERSION'")
    t = traceread.load(path)
    assert t.meta.extra["nsys_version"] == "2025.1.1.110"
    lines = R.render_nvtx(R.nvtx_summary(t), "csv", R.stats_version(t)).splitlines()
    assert lines[1].split(",")[-1] == "FusionExecutor::runFusion"


def test_osrt_leaves_out_profiler_markers(tmp_path):
    w = NsysWriter(tmp_path / "o.sqlite")
    w.osrt(100, 300, "poll", 1, 1)
    w.osrt(400, 400, R.OSRT_MARKERS[0], 1, 1)
    s = R.osrt_summary(traceread.load(w.close()))
    assert s["name"].tolist() == ["poll"]


def test_kineto_memcpy_labels(tmp_path):
    cols = {"ts": np.array([0, 10, 20]), "dur": np.array([5, 7, 9]),
            "kind": ["memcpy", "memcpy", "memset"],
            "name": ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
                     "Memset (Device)"], "copy_kind": ["HtoD", "DtoH", None],
            "bytes": np.array([4_000_000, 1000, 64])}
    t = Trace(build_table(cols, 3), TraceMeta(format="kineto"))
    assert R.memop_time_summary(t)["name"].tolist() == [
        "[CUDA memset]", "[CUDA memcpy Device-to-Host]", "[CUDA memcpy Host-to-Device]"]
    size = R.render_memops(R.memop_size_summary(t), "size").splitlines()
    assert size[1] == "4.000,1,4.000,4.000,4.000,4.000,0.000,[CUDA memcpy Host-to-Device]"
