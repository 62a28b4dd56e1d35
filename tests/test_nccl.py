"""NCCL pass: planted DDP overlap (table, Kineto JSON, nsys SQLite), a bitmap oracle, real traces."""
from __future__ import annotations

import numpy as np
import pytest

import traceread
from traceread.passes.nccl import (busbw_factor, collective_instances, collective_summary,
                                   comm_overlap, nccl_report)
from traceread.collectives import COMM_KERNELS, comm_kernel
from traceread.synth.scenarios_comm import (CUSTOM_ALLREDUCE, MULTIMEM, TRTLLM_ALLREDUCE, ddp_overlap,
                                            nsys_ddp_overlap)
from traceread.table import Trace, TraceMeta, build_table

from conftest import CORPUS   # TRACEREAD_CORPUS when set (a worktree is one folder deeper)
HTA = CORPUS / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"


def _check_overlap(trace, truth):
    ov = comm_overlap(trace)
    assert len(ov) == 1
    row = ov.iloc[0]
    for key in ("comm_ns", "compute_ns", "overlap_ns", "exposed_ns", "comm_kernels",
                "compute_kernels"):
        assert int(row[key]) == truth[key], key
    assert row["overlap_pct"] == pytest.approx(truth["overlap_pct"], rel=1e-12)
    assert (int(row["pid"]), int(row["device"])) == (truth["pid"], truth["device"])


def _check_summary(trace, truth, sized=True):
    summ = collective_summary(trace).set_index("collective")
    assert sorted(summ.index) == sorted(truth["collectives"])
    for coll, want in truth["collectives"].items():
        got = summ.loc[coll]
        assert int(got["count"]) == want["count"]
        assert int(got["total_ns"]) == want["total_ns"]
        assert int(got["exposed_ns"]) == want["exposed_ns"]
        if sized:
            assert int(got["msg_bytes"]) == want["msg_bytes"]
            assert int(got["group_size"]) == want["group_size"]
            assert got["algbw_gbps"] == pytest.approx(want["algbw_gbps"], rel=1e-12)
            assert got["busbw_gbps"] == pytest.approx(want["busbw_gbps"], rel=1e-12)
        else:
            assert int(got["msg_bytes"]) == -1 and int(got["sized"]) == 0
            assert np.isnan(got["algbw_gbps"]) and np.isnan(got["busbw_gbps"])


@pytest.mark.parametrize("generic", [False, True])
@pytest.mark.parametrize("on_kernel", [False, True])
def test_planted_ddp_table(generic, on_kernel):
    trace, truth = ddp_overlap(on_kernel=on_kernel, generic=generic)
    _check_overlap(trace, truth)
    _check_summary(trace, truth)
    inst = collective_instances(trace)
    assert list(inst["exposed_ns"]) == truth["instance_exposed_ns"]
    assert list(inst["seq"]) == list(range(len(inst)))
    assert set(inst["process_group"]) == {"0"} and set(inst["dtype"]) == {"Float"}
    assert (inst["stream"] == 20).all()


def test_memcpy_is_not_compute():
    """The planted DtoD bucket copy sits inside exposed all-reduce time; it must stay exposed."""
    trace, truth = ddp_overlap()
    ev = trace.events
    as_kernel = ev.assign(kind=ev["kind"].astype(str).replace({"memcpy": "kernel"}))
    row = comm_overlap(as_kernel).iloc[0]
    # Counted as compute, the 3 copies (200 µs each) would hide 600 µs more.
    assert int(row["overlap_ns"]) == truth["overlap_ns"] + 3 * 200_000


def test_planted_ddp_kineto_roundtrip(tmp_path):
    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    for generic in (False, True):
        trace, truth = ddp_overlap(generic=generic)
        for era in ("1.8", "2.0", "2.4"):
            path = write_kineto(trace, tmp_path / f"ddp-{era}-{generic}.json.gz", era=era)
            back = traceread.load(str(path))
            _check_overlap(back, truth)
            _check_summary(back, truth)
            assert list(collective_instances(back)["exposed_ns"]) == truth["instance_exposed_ns"]


@pytest.mark.parametrize("schema", ["3.x", "2.9.1"])
@pytest.mark.parametrize("generic", [False, True])
def test_planted_ddp_nsys_roundtrip(tmp_path, schema, generic):
    path, truth = nsys_ddp_overlap(tmp_path / "ddp.sqlite", schema=schema, generic=generic)
    trace = traceread.load(str(path))
    _check_overlap(trace, truth)
    # nsys has no message sizes: types from kernel names or the NVTX NCCL ranges.
    _check_summary(trace, truth, sized=False)


@pytest.mark.parametrize("kernel", [MULTIMEM, CUSTOM_ALLREDUCE, TRTLLM_ALLREDUCE])
def test_planted_non_nccl_allreduce_counts_as_comm(tmp_path, kernel):
    """A symmetric-memory / custom all-reduce kernel is communication: same overlap,
    exposure and collective as the NCCL one it replaces, in both formats."""
    trace, truth = ddp_overlap(allreduce=kernel)
    _check_overlap(trace, truth)
    _check_summary(trace, truth)
    path, truth = nsys_ddp_overlap(tmp_path / "ddp.sqlite", allreduce=kernel)
    back = traceread.load(str(path))
    _check_overlap(back, truth)
    _check_summary(back, truth, sized=False)


@pytest.mark.parametrize("name,want", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "all_gather")),
    ("ncclDevKernel_Generic(x)", ("nccl", None)),
    ("rcclKernel_ReduceScatter(x)", ("rccl", "reduce_scatter")),
    (MULTIMEM, ("symm_mem", "all_reduce")),
    ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 8>(x)", ("symm_mem", "all_reduce")),
    (CUSTOM_ALLREDUCE, ("custom_ar", "all_reduce")),
    (TRTLLM_ALLREDUCE, ("custom_ar", "all_reduce")),
    ("void deep_ep::internode::dispatch<true, 8>(x)", ("deepep", "all_to_all")),
    ("void deep_ep::intranode::cached_notify_combine<8>(x)", ("deepep", "all_to_all")),
    ("nvshmemi_transfer_rma_p2p_get_kernel", ("nvshmem", None)),
    # compute that only looks like communication
    ("void at::native::reduce_kernel<512, 1>(x)", None),
    ("void cub::DeviceReduceKernel<Policy>(x)", None),
    ("void at::native::vectorized_gather_kernel<16, long>(x)", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32", None),
])
def test_comm_kernel_table(name, want):
    assert comm_kernel(name) == want
    assert {f for f, _, _ in COMM_KERNELS} >= {"nccl", "rccl", "deepep", "nvshmem", "symm_mem", "custom_ar"}


@pytest.mark.corpus
def test_real_b200_multimem_allreduce_is_comm(corpus_dir):
    """TraceLens b200 vLLM eager trace: 73 multimem_all_reduce_kernel launches (~2.1 ms) are
    symmetric-memory all-reduce; before the table they were counted as reduction compute."""
    from traceread.passes.kernel_classes import time_by_class

    f = corpus_dir / "AMD-AGI__TraceLens" / "tests" / "traces" / "b200" / "eager_trace.json.gz"
    if not f.exists():
        pytest.skip("TraceLens b200 trace not in the corpus")
    t = traceread.load(str(f))
    inst = collective_instances(t)
    mm = inst[inst["name"].astype(str).str.contains("multimem_all_reduce")]
    assert len(mm) == 73 and set(mm["collective"]) == {"all_reduce"}
    assert int(mm["dur"].sum()) == pytest.approx(2_119_548, abs=2_000)
    by = time_by_class(t).set_index("class")["total_ns"]
    assert int(by["nccl"]) >= int(mm["dur"].sum())


def _bitmap_oracle(rows, horizon):
    """Per device: comm, overlap from a boolean timeline (1 ns resolution)."""
    out = {}
    for dev in sorted({r[3] for r in rows}):
        comm = np.zeros(horizon, bool)
        comp = np.zeros(horizon, bool)
        for ts, dur, name, d, kind in rows:
            if d != dev or kind != "kernel":
                continue
            (comm if name.startswith("nccl") else comp)[ts:ts + dur] = True
        out[dev] = (int(comm.sum()), int(comp.sum()), int((comm & comp).sum()))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_overlap_matches_bitmap(seed):
    rng = np.random.default_rng(seed)
    n, horizon = 300, 5000
    ts = rng.integers(0, horizon - 100, n)
    dur = rng.integers(0, 100, n)
    dev = rng.integers(0, 2, n)
    name = rng.choice(["ncclKernel_AllReduce_RING_LL_Sum_float", "gemm", "relu",
                       "ncclDevKernel_Generic"], n)
    kind = rng.choice(["kernel", "kernel", "kernel", "memcpy"], n)
    trace = Trace(build_table(dict(ts=ts, dur=dur, name=name, kind=kind, device=dev, pid=np.ones(n),
                                   stream=dev + 7), n), TraceMeta())
    want = _bitmap_oracle(list(zip(ts, dur, name, dev, kind)), horizon)
    ov = comm_overlap(trace).set_index("device")
    for d, (c, k, o) in want.items():
        assert (int(ov.loc[d, "comm_ns"]), int(ov.loc[d, "compute_ns"]),
                int(ov.loc[d, "overlap_ns"]), int(ov.loc[d, "exposed_ns"])) == (c, k, o, c - o)
    inst = collective_instances(trace)
    assert int(inst["exposed_ns"].min()) >= 0
    assert (inst["exposed_ns"] <= inst["dur"]).all()


def test_busbw_factors_nccl_tests():
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert busbw_factor("all_gather", 4) == busbw_factor("reduce_scatter", 4) == 3 / 4
    assert busbw_factor("all_to_all", 2) == 0.5
    for c in ("broadcast", "reduce", "send", "recv", "send_recv"):
        assert busbw_factor(c, 16) == 1.0
    assert np.isnan(busbw_factor("all_reduce", -1))


def test_no_comm_is_empty_not_an_error():
    trace = Trace(build_table(dict(ts=[0, 10], dur=[5, 5], kind=["kernel", "cpu_op"],
                                   name=["gemm", "aten::mm"], device=[0, -1], pid=[1, 1]), 2),
                  TraceMeta())
    ov = comm_overlap(trace)
    assert list(ov["comm_ns"]) == [0] and list(ov["overlap_pct"]) == [0.0]
    assert collective_summary(trace).empty and collective_instances(trace).empty
    assert nccl_report(trace)["comm_ns"] == 0


@pytest.mark.corpus
def test_real_nccl_data_trace():
    path = HTA / "nccl_parser_config" / "nccl_data.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    ov = comm_overlap(trace)
    assert (ov["overlap_ns"] + ov["exposed_ns"] == ov["comm_ns"]).all()
    assert ((ov["overlap_pct"] >= 0) & (ov["overlap_pct"] <= 100)).all()
    summ = collective_summary(trace).set_index("collective")
    # 15 all-reduce and 6 broadcast NCCL kernels; the kernel args carry sizes (c10d >= 2.1).
    assert int(summ.loc["all_reduce", "count"]) == 15
    assert int(summ.loc["broadcast", "count"]) == 6
    assert int(summ.loc["all_reduce", "sized"]) == 15
    assert int(summ.loc["all_reduce", "group_size"]) == 2
    ar = summ.loc["all_reduce"]
    # busbw = algbw * 2(n-1)/n with n = 2
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"] * 1.0)


@pytest.mark.corpus
@pytest.mark.parametrize("rank", [0, 1])
def test_real_sampled_ranks(rank):
    sub = "timeline_analysis" if rank == 0 else "trace_filter"
    path = HTA / sub / f"sampled_rank-{rank}.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    ov = comm_overlap(trace)
    assert len(ov) >= 1 and int(ov["comm_ns"].sum()) > 0
    assert (ov["overlap_ns"] + ov["exposed_ns"] == ov["comm_ns"]).all()
    inst = collective_instances(trace)
    assert (inst["exposed_ns"] <= inst["dur"]).all() and (inst["exposed_ns"] >= 0).all()
    if rank == 0:
        # NCCL runs these as SendRecv kernels; the c10d names (nccl:all_to_all ...) win.
        assert set(inst["name"].str.slice(0, 19)) == {"ncclKernel_SendRecv"}
        assert inst["collective"].value_counts().to_dict() == {
            "all_to_all": 4, "all_reduce": 4, "all_gather": 2}


def test_cli_nccl_json_and_text(tmp_path):
    import json

    from click.testing import CliRunner

    from traceread.cli import main

    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    trace, truth = ddp_overlap()
    path = write_kineto(trace, tmp_path / "ddp.json")
    r = CliRunner().invoke(main, ["nccl", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["comm_ns"] == truth["comm_ns"] and doc["exposed_ns"] == truth["exposed_ns"]
    assert {c["collective"]: c["count"] for c in doc["collectives"]} == {"all_reduce": 6, "broadcast": 1}
    r = CliRunner().invoke(main, ["nccl", str(path)])
    assert r.exit_code == 0 and "all_reduce" in r.output and "58.4%" in r.output


@pytest.mark.corpus
def test_real_nsys_sendrecv():
    """nsys export with NCCL NVTX ranges (ncclSend/ncclRecv inside ncclGroupStart/End)."""
    path = CORPUS / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    ov = comm_overlap(trace)
    assert list(ov["device"]) == [0, 1] and list(ov["comm_kernels"]) == [33, 33]
    assert (ov["overlap_ns"] + ov["exposed_ns"] == ov["comm_ns"]).all()
    inst = collective_instances(trace)
    # ncclGroupStart/End and ncclCommCount name no collective; the NVTX range around them
    # does (Ulysses' nccl:all_to_all, issue 39): the kernel name decides only outside one
    assert inst["collective"].value_counts().to_dict() == {"all_to_all": 64, "send_recv": 2}
    assert (inst["msg_bytes"] == -1).all()
