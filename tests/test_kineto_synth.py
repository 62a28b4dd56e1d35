"""write_kineto -> read_kineto reproduces the planted table exactly, for every era."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from traceread.readers.kineto import read_kineto
from traceread.synth.kineto import write_kineto
from traceread.table import COLUMNS, TraceMeta

B = 1_695_835_535_123_456_000  # epoch ns, µs-aligned
CHECKED = ("ts", "dur", "kind", "name", "pid", "tid", "device", "stream", "correlation",
           "external_id", "bytes", "copy_kind", "collective", "msg_nelems", "msg_bytes", "dtype",
           "group_size", "process_group")


def planted(ns_offsets: bool = False) -> pd.DataFrame:
    o = 789 if ns_offsets else 0  # sub-µs digits only where the era can carry them
    rows = [
        dict(ts=B, dur=50_000_000, kind="annotation", name="ProfilerStep#3", pid=100, tid=101),
        dict(ts=B + 1000 + o, dur=20_000, kind="cpu_op", name="aten::mm", pid=100, tid=101,
             external_id=7),
        dict(ts=B + 2000, dur=5_000 + o, kind="runtime", name="cudaLaunchKernel", pid=100, tid=101,
             external_id=7, correlation=11),
        dict(ts=B + 9000 + o, dur=30_000, kind="kernel", name="ampere_sgemm_128x64_tn", pid=100,
             tid=-1, device=0, stream=7, correlation=11, external_id=7),
        dict(ts=B + 10000, dur=4000, kind="runtime", name="cudaMemcpyAsync", pid=100, tid=102,
             correlation=12),
        dict(ts=B + 40000, dur=3000, kind="memcpy", name="Memcpy DtoH (Device -> Pinned)", pid=100,
             tid=-1, device=1, stream=9, correlation=12, bytes=4096, copy_kind="DtoH"),
        dict(ts=B + 50000, dur=7000, kind="cpu_op", name="record_param_comms", pid=100, tid=101,
             external_id=9, collective="all_reduce", msg_nelems=1000, msg_bytes=4000, dtype="Float",
             group_size=8, process_group="0"),
        dict(ts=B + 51000, dur=2000, kind="runtime", name="cudaLaunchKernel", pid=100, tid=101,
             correlation=13, external_id=9),
        dict(ts=B + 60000, dur=90000, kind="kernel", name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             pid=100, tid=-1, device=0, stream=20, correlation=13, external_id=9,
             collective="all_reduce", msg_nelems=1000, msg_bytes=4000, dtype="Float", group_size=8,
             process_group="0"),
        dict(ts=B + 61000, dur=89000, kind="gpu_annotation", name="nccl:all_reduce", pid=100, tid=-1,
             device=0, stream=20, external_id=9),
        dict(ts=B + 70000, dur=0, kind="instant", name="[memory]", pid=100, tid=101),
        dict(ts=B + 79000, dur=1000, kind="runtime", name="cudaMemsetAsync", pid=100, tid=101,
             correlation=14),
        dict(ts=B + 80000, dur=1000, kind="memset", name="Memset (Device)", pid=100, tid=-1,
             device=0, stream=7, correlation=14, bytes=64),
        dict(ts=B + 81000, dur=1000, kind="runtime", name="cudaStreamSynchronize", pid=100,
             tid=101, correlation=15),
        dict(ts=B + 82000, dur=1000, kind="sync", name="Stream Sync", pid=100, tid=-1, device=0,
             stream=7, correlation=15),
        dict(ts=B + 90000, dur=3000, kind="python", name="train.py(12): step", pid=100, tid=101),
        dict(ts=B + 95000, dur=1000, kind="driver", name="cuLaunchKernel", pid=100, tid=101,
             correlation=16),
        dict(ts=B + 97000, dur=1000, kind="kernel", name="triton_poi_fused_add_0", pid=100, tid=-1,
             device=0, stream=7, correlation=16),
    ]
    return pd.DataFrame(rows)


def _norm(df: pd.DataFrame) -> dict:
    out = {}
    for c in CHECKED:
        if c not in df:
            out[c] = None
            continue
        vals = df[c].astype(object).tolist()
        out[c] = [None if (v is None or (isinstance(v, float) and np.isnan(v))) else
                  (int(v) if isinstance(v, (float, np.integer)) else v) for v in vals]
    return out


def _expected(df: pd.DataFrame) -> dict:
    df = df.sort_values("ts", kind="stable").reset_index(drop=True)
    exp = _norm(df)
    n = len(df)
    for c, typ, _ in COLUMNS:
        if c in CHECKED and exp[c] is None:
            exp[c] = [-1] * n if str(typ).startswith("int") else [None] * n
        elif c in CHECKED and str(typ).startswith("int"):
            exp[c] = [-1 if v is None else v for v in exp[c]]
    return exp


@pytest.mark.parametrize("era,gz", [("1.8", False), ("2.0", True), ("2.4", False), ("2.4", True)])
def test_round_trip_exact(tmp_path, era, gz):
    df = planted(ns_offsets=era != "1.8")
    meta = TraceMeta(rank=3, world_size=8, devices=[{"device": 0, "name": "Synthetic H100"}],
                     processes={100: "python3"}, threads={101: "main"})
    p = write_kineto(df, tmp_path / f"trace.json{'.gz' if gz else ''}", era=era, meta=meta)
    t = read_kineto(p)
    assert _norm(t.events) == _expected(df)
    assert (t.meta.rank, t.meta.world_size, t.meta.rank_source) == (3, 8, "distributedInfo")
    assert t.meta.devices[0]["name"] == "Synthetic H100"
    assert t.meta.processes[100] == "python3" and t.meta.threads[101] == "main"
    assert t.meta.clock == "epoch_ns" and t.meta.format == "kineto"


def test_era_shapes(tmp_path):
    df = planted()
    old = json.loads(write_kineto(df, tmp_path / "a.json", era="1.8").read_text())
    cats = {e.get("cat") for e in old["traceEvents"]}
    assert {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"} <= cats
    k = next(e for e in old["traceEvents"] if e.get("cat") == "Kernel")
    assert k["tid"] == "stream 7" and isinstance(k["ts"], int) and "external id" in k["args"]
    new = json.loads(write_kineto(df, tmp_path / "b.json", era="2.4").read_text())
    assert new["baseTimeNanoseconds"] <= B
    assert any(e.get("cat") == "ac2g" and e["ph"] == "f" for e in new["traceEvents"])
    mid = (tmp_path / "c.json")
    write_kineto(planted(ns_offsets=True), mid, era="2.0")
    assert b'"ts":1695835535123465.789' in mid.read_bytes()  # exact decimal text


def test_integer_era_rejects_sub_us(tmp_path):
    with pytest.raises(ValueError, match="not µs-aligned"):
        write_kineto(planted(ns_offsets=True), tmp_path / "x.json", era="1.8")


def test_accepts_a_trace_and_missing_columns(tmp_path):
    df = pd.DataFrame({"ts": [B, B + 5000], "dur": [1000, 2000], "kind": ["cpu_op", "annotation"],
                       "name": ["aten::add", "ProfilerStep#0"], "pid": [7, 7], "tid": [8, 8]})
    t = read_kineto(write_kineto(df, tmp_path / "x.json.gz"))
    assert t.events.kind.tolist() == ["cpu_op", "annotation"]
    again = read_kineto(write_kineto(t, tmp_path / "y.json"))
    assert again.events.ts.tolist() == [B, B + 5000]
