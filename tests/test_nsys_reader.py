"""nsys SQLite reader: planted synthetic exports in three schema flavours,
real fixtures, and clean refusals."""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import traceread
from traceread.errors import TraceError
from traceread.readers.nsys import read_nsys
from traceread.synth.nsys import EPOCH, FLUSH, GEMM, NCCL, NsysWriter, write_planted
from traceread.table import SCHEMA

FIX = Path(__file__).parent / "fixtures" / "nsys"


@pytest.fixture(params=["3.x", "2.9.1", "pre2"])
def planted(request, tmp_path):
    path = write_planted(tmp_path / f"planted_{request.param}.sqlite", request.param)
    return request.param, path, traceread.load(path)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_planted_kinds_and_meta(planted):
    schema, path, t = planted
    assert t.table.schema == SCHEMA
    counts = t.events["kind"].value_counts().to_dict()
    assert counts == {"kernel": 7, "runtime": 8, "driver": 1, "other": 2, "memcpy": 1,
                      "memset": 1, "sync": 1, "annotation": 4, "instant": 1, "osrt": 1}
    m = t.meta
    assert (m.format, m.clock, m.epoch_offset_ns) == ("nsys", "session_ns", EPOCH)
    assert m.format_version == {"3.x": "3.25.0", "2.9.1": "2.9.1", "pre2": ""}[schema]
    assert [d["device"] for d in m.devices] == [0, 1]
    assert m.processes == {100: "trainer", 200: "trainer"}
    assert m.threads == {101: "main", 102: "loader-caf\ufffd", 201: "main"}
    assert m.extra["gpu_contexts"] == {"100/0": 1, "200/1": 1}
    assert m.extra["foreign_tables"] == ["EXTRAP_GPU_IDLE"]
    ts = t.events["ts"].to_numpy()
    assert np.all(np.diff(ts) >= 0)


def test_planted_gpu_ops(planted):
    _, _, t = planted
    ev = t.events
    k = ev[ev["kind"] == "kernel"]
    assert set(k["tid"]) == {-1}
    gemm = k[k["name"] == GEMM]
    assert gemm["dur"].tolist() == [1000, 3000, 5000]
    assert set(gemm["pid"]) == {100} and set(gemm["device"]) == {0}
    assert gemm["short_name"].astype(str).tolist() == ["void gemm_kernel<float>"] * 3
    nccl = k[k["name"] == NCCL]
    assert nccl["collective"].tolist() == ["all_reduce"]
    assert k[k["name"] != NCCL]["collective"].isna().all()
    mc = ev[ev["kind"] == "memcpy"].iloc[0]
    assert (mc["name"], mc["copy_kind"], mc["bytes"], mc["ts"], mc["dur"]) == (
        "[CUDA memcpy Host-to-Device]", "HtoD", 4096, 10000, 1000)
    ms = ev[ev["kind"] == "memset"].iloc[0]
    assert (ms["name"], ms["bytes"]) == ("[CUDA memset]", 1024)
    # before the session start: kept, with its negative timestamp
    assert ev[ev["name"] == "early_kernel()"]["ts"].tolist() == [-500]


def test_planted_api_rows(planted):
    _, _, t = planted
    ev = t.events
    rt = ev[ev["kind"] == "runtime"]
    assert set(rt["name"]) == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamIsCapturing"}
    launch = rt[rt["name"] == "cudaLaunchKernel"]
    assert set(launch["raw_name"]) == {"cudaLaunchKernel_v7000"}
    assert sorted(zip(launch["pid"], launch["tid"], launch["correlation"])) == [
        (100, 101, 1), (100, 101, 2), (100, 101, 5), (200, 201, 1), (200, 201, 2), (200, 201, 3)]
    drv = ev[ev["kind"] == "driver"].iloc[0]
    assert (drv["name"], drv["raw_name"]) == ("cudaStreamSynchronize", "cudaStreamSynchronize_v3020")
    # the CUDA-backtrace duplicate (eventClass 67) is not an API call
    dup = ev[(ev["kind"] == "other") & (ev["cat"] == "CUPTI_ACTIVITY_KIND_RUNTIME")]
    assert dup[["ts", "dur"]].values.tolist() == [[9000, 700]]


def test_correlation_links_per_process(planted):
    """Ranks reuse correlation ids: link on (pid, correlation)."""
    _, _, t = planted
    ev = t.events
    gpu = ev[ev["kind"].isin(["kernel", "memcpy"]) & (ev["correlation"] > 0)]
    api = ev[ev["kind"] == "runtime"]
    linked = gpu.merge(api, on=["pid", "correlation"], suffixes=("", "_api"))
    assert len(linked) == len(gpu) == 7
    assert (linked["ts_api"] <= linked["ts"]).all()
    sync = ev[ev["kind"] == "sync"].iloc[0]
    assert (sync["pid"], sync["tid"], sync["device"], sync["stream"], sync["name"]) == (
        100, 101, 0, 7, "Stream sync")


def test_planted_nvtx_and_host(planted):
    _, _, t = planted
    ev = t.events
    ann = ev[ev["kind"] == "annotation"].set_index("name")
    assert ann.loc["ncclAllReduce", "domain"] == "NCCL"
    assert (ann.loc["ncclAllReduce", "ts"], ann.loc["ncclAllReduce", "dur"]) == (19000, 6000)
    assert ann.loc["forward", "dur"] == 4400            # start/end range, text via textId
    assert ann.loc["step 0", "tid"] == 101 and str(ann.loc["step 0", "domain"]) == "nan"
    assert ann.loc["unfinished", "dur"] == 0             # never closed
    mark = ev[ev["kind"] == "instant"].iloc[0]
    assert (mark["name"], mark["ts"], mark["dur"]) == ("checkpoint", 700, 0)
    osrt = ev[ev["kind"] == "osrt"].iloc[0]
    assert (osrt["name"], osrt["pid"], osrt["tid"], osrt["dur"]) == ("poll", 100, 102, 3000)
    ov = ev[ev["cat"] == "PROFILER_OVERHEAD"].iloc[0]
    assert (ov["name"], ov["kind"], ov["ts"], ov["dur"]) == (FLUSH, "other", 20000, 5000)


def test_input_file_unchanged(tmp_path):
    path = write_planted(tmp_path / "p.sqlite")
    before = _sha(path)
    siblings = set(tmp_path.iterdir())
    traceread.load(path)
    assert _sha(path) == before
    assert set(tmp_path.iterdir()) == siblings  # no -journal / -wal files either


def test_lazily_created_tables(tmp_path):
    """Any table may be missing: only runtime calls, no kernels at all."""
    p = tmp_path / "nokernels.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (1, 'cudaMalloc_v3020')")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, "
                "correlationId INT, nameId INT)")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10, 30, ?, 5, 1)", ((7 << 24) | 9,))
    con.commit()
    con.close()
    t = traceread.load(p)
    assert t.events[["kind", "name", "pid", "tid", "dur"]].values.tolist() == [
        ["runtime", "cudaMalloc", 7, 9, 20]]


def test_gpu_pid_from_runtime_when_no_globalpid():
    """healthy_judged_1pct has no globalPid on kernels: take the launching call's pid."""
    t = traceread.load(FIX / "healthy_judged_1pct.sqlite")
    k = t.events[t.events["kind"] == "kernel"]
    assert len(k) == 20 and (k["pid"] >= 0).all()
    assert (k["pid"] == t.events[t.events["kind"] == "runtime"]["pid"].iloc[0]).all()


@pytest.mark.parametrize("name,version,quirk", [
    ("mock.sqlite", "3.24.14", None),
    ("concurrent_profile1.sqlite", "2.9.1", "tables added by other tools"),
    ("ex-gpu.s10.sqlite", "", "no export metadata table"),
])
def test_real_fixtures_load(name, version, quirk):
    t = read_nsys(FIX / name)
    assert t.meta.format_version == version
    assert (t.events["kind"] == "kernel").sum() > 0
    if quirk:
        assert any(quirk in n for n in t.meta.extra["notes"])


def test_pre2_backtrace_duplicates_not_api_calls():
    t = traceread.load(FIX / "ex-gpu.s10.sqlite")
    ev = t.events
    assert (ev["kind"] == "runtime").sum() == 18
    assert ((ev["kind"] == "other") & (ev["cat"] == "CUPTI_ACTIVITY_KIND_RUNTIME")).sum() == 18
    assert t.meta.devices[0]["name"] == "A100-PCIE-40GB"


# ---------------------------------------------------------------- refusals

def _one_line(err: TraceError) -> str:
    s = str(err)
    assert "\n" not in s
    return s


def test_refuse_non_nsys_sqlite(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE test (a INT)")
    con.commit()
    con.close()
    with pytest.raises(TraceError) as e:
        traceread.load(p)
    assert "not an Nsight Systems export" in _one_line(e.value)


def test_refuse_corrupt(tmp_path):
    good = write_planted(tmp_path / "good.sqlite")
    data = bytearray(good.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # header magic intact, schema page garbage
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceError) as e:
        traceread.load(bad)
    assert str(bad) in _one_line(e.value)


def test_refuse_truncated(tmp_path):
    good = write_planted(tmp_path / "good.sqlite")
    bad = tmp_path / "trunc.sqlite"
    bad.write_bytes(good.read_bytes()[:3000])
    with pytest.raises(TraceError) as e:
        traceread.load(bad)
    _one_line(e.value)


def test_refuse_empty(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    with pytest.raises(TraceError) as e:
        traceread.load(p)
    assert "empty" in _one_line(e.value)


def test_refuse_magic_only(tmp_path):
    p = tmp_path / "magic.sqlite"
    p.write_bytes(b"SQLite format 3\x00")
    with pytest.raises(TraceError) as e:
        traceread.load(p)
    _one_line(e.value)


def test_detected_by_content_not_extension(tmp_path):
    p = write_planted(tmp_path / "capture.bin")
    assert traceread.load(p).meta.format == "nsys"


def test_writer_rejects_unknown_schema(tmp_path):
    with pytest.raises(ValueError):
        NsysWriter(tmp_path / "x.sqlite", schema="9.9")


def test_291_inline_runtime_name(tmp_path):
    """Schema 2.9.1 runtime rows may carry the API name in a `name` column."""
    p = write_planted(tmp_path / "p291.sqlite", "2.9.1")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 99999, name = 'cudaFoo_v1234' "
                "WHERE start = 36000")
    con.commit()
    con.close()
    ev = traceread.load(p).events
    row = ev[(ev["ts"] == 36000) & (ev["kind"] == "runtime")].iloc[0]
    assert (row["name"], row["raw_name"]) == ("cudaFoo", "cudaFoo_v1234")


def test_cuda_device_index_from_target_info_cuda_device(tmp_path):
    """TARGET_INFO_GPU without cuDevice: TARGET_INFO_CUDA_DEVICE maps gpuId -> cudaId."""
    p = write_planted(tmp_path / "p.sqlite")
    con = sqlite3.connect(p)
    con.execute("DROP TABLE TARGET_INFO_GPU")
    con.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT)")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 5, 'GPU five'), (0, 6, 'GPU six')")
    con.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER)")
    con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (5, 1, 100), (6, 0, 100)")
    con.commit()
    con.close()
    devs = traceread.load(p).meta.devices
    assert [(d["device"], d["name"], d["gpu_id"]) for d in devs] == [(0, "GPU six", 6),
                                                                      (1, "GPU five", 5)]


def test_unnamed_nccl_domain_from_payload_schemas(tmp_path):
    """Time-sliced exports lose NvtxDomainCreate; NCCL's payload schemas still name it."""
    w = NsysWriter(tmp_path / "sliced.sqlite")
    w.nvtx_range(10, 20, "ncclAllReduce", 1, 2, domain_id=3)
    w.nvtx_range(30, 40, "other", 1, 2, domain_id=4)
    w.con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, "
                  "idx INTEGER, flags INTEGER, type INTEGER, name TEXT, description TEXT, "
                  "arrayOrUnionDetail INTEGER, offset INTEGER)")
    w.con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES "
                  "(3, 16777223, 1, NULL, 22, 'Message size [bytes]', NULL, NULL, 8), "
                  "(3, 16777223, 0, NULL, 18, 'NCCL communicator ID', NULL, NULL, NULL)")
    t = traceread.load(w.close())
    ev = t.events.set_index("name")
    assert ev.loc["ncclAllReduce", "domain"] == "NCCL"
    assert str(ev.loc["other", "domain"]) == "nan"
    assert any("domain 4 has no name" in n for n in t.meta.extra["notes"])


def test_missing_globalpid_only_filled_when_unambiguous(tmp_path):
    p = write_planted(tmp_path / "p.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL")
    con.commit()
    con.close()
    k = traceread.load(p).events
    k = k[k["kind"] == "kernel"].set_index("ts")
    # correlation 1, 2 and 3 exist in both processes: ambiguous -> unknown
    assert k.loc[1000, "pid"].tolist() == [-1, -1]
    # correlation 5 only in pid 100 (its backtrace duplicate shares the pid)
    assert k.loc[30000, "pid"] == 100
