"""Kineto / Chrome JSON reader: exact timestamps, column mapping, eras, refusals."""
from __future__ import annotations

import functools
import gzip
import json
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest

from traceread import KINDS, TraceError, load
from traceread.readers import _kineto_decode as dec
from traceread.readers import common
from traceread.readers import kineto as K
from traceread.readers.kineto import rank_from_filename, read_kineto

FIX = Path(__file__).resolve().parent / "fixtures" / "kineto"


def _write(tmp_path: Path, doc, name="t.json", gz=False) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    p = tmp_path / name
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


def _raw_trace(events_json: str, header: str = '"schemaVersion": 1') -> bytes:
    return ('{' + header + ', "traceEvents": [' + events_json + ']}').encode()


# --- exact timestamps ---------------------------------------------------------

def test_epoch_float_us_with_ns_fraction_is_exact(tmp_path):
    # float64 cannot hold 1695835535123456.789 (ulp 0.25 us): the reader must re-decode.
    ev = ('{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1695835535123456.789,"dur":1.001},'
          '{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1695835535123457.001,"dur":0.999},'
          '{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":1695835535123458,"dur":2}')
    assert float("1695835535123456.789") * 1000 != 1695835535123456789  # the trap
    t = read_kineto(_write(tmp_path, _raw_trace(ev)))
    e = t.events
    assert e["ts"].tolist() == [1695835535123456789, 1695835535123457001, 1695835535123458000]
    assert e["dur"].tolist() == [1001, 999, 2000]
    assert t.meta.extra["exact_ts_decode"] is True
    assert t.meta.clock == "epoch_ns"


@pytest.mark.parametrize("stream", [False, True])
def test_epoch_float_whose_fraction_parses_to_zero_is_exact(tmp_path, stream):
    # ...456.123 parses to exactly ...456.0: a zero parsed fraction must not hide the lost 123 ns.
    assert float("1695835535123456.123") == 1695835535123456.0
    ev = ('{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1695835535123456.123,"dur":1},'
          '{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1695835535123458,"dur":2}')
    t = load(_write(tmp_path, _raw_trace(ev)), stream=stream)
    assert t.events["ts"].tolist() == [1695835535123456123, 1695835535123458000]
    assert t.meta.extra["exact_ts_decode"] is True


def test_integer_epoch_us_stays_on_the_fast_path(tmp_path):
    ev = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1695835535123456,"dur":1}'
    t = read_kineto(_write(tmp_path, _raw_trace(ev)))
    assert t.events["ts"].tolist() == [1695835535123456000]
    assert t.meta.extra["exact_ts_decode"] is False


def test_base_relative_float_us_fast_path_is_exact(tmp_path):
    base = 1735632360000000000
    vals = ["4203669603018.756", "4203669613175.703", "8796093022207.999", "0.001", "12.5"]
    ev = ",".join(f'{{"ph":"X","cat":"kernel","name":"k{i}","pid":0,"tid":7,"ts":{v},"dur":0.002,'
                  f'"args":{{"device":0,"stream":7}}}}' for i, v in enumerate(vals))
    t = read_kineto(_write(tmp_path, _raw_trace(ev, f'"schemaVersion":1,"baseTimeNanoseconds":{base}')))
    expect = sorted(base + int(Decimal(v) * 1000) for v in vals)
    assert t.events["ts"].tolist() == expect
    assert (t.events["dur"] == 2).all()
    assert t.meta.extra["exact_ts_decode"] is False  # below 2**43 us floats are exact


def test_us_to_ns_both_paths_agree_with_decimal():
    rng = np.random.default_rng(0)
    ns = rng.integers(0, 2**43 * 1000 - 1, 5000, dtype=np.int64)
    text = [f"{v // 1000}.{v % 1000:03d}" for v in ns.tolist()]
    fast, lossy = dec.us_to_ns(np.array([float(s) for s in text]))
    assert not lossy and np.array_equal(fast, ns)
    big = [f"{1_700_000_000_000_000 + i}.{i % 1000:03d}" for i in range(1000)]
    _, lossy = dec.us_to_ns(np.array([float(s) for s in big]))
    assert lossy
    exact = dec.exact_us_to_ns([Decimal(s) for s in big])
    assert exact.tolist() == [int(Decimal(s) * 1000) for s in big]


def test_integer_epoch_us(tmp_path):
    ev = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1661938466265032,"dur":17}'
    t = read_kineto(_write(tmp_path, _raw_trace(ev)))
    assert t.events["ts"].tolist() == [1661938466265032000]
    assert t.events["dur"].tolist() == [17000]


# --- mapping ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _read_fixture(path) -> object:
    return read_kineto(path)


def _events(path) -> pd.DataFrame:
    return _read_fixture(path).events


def test_pytorch_18_era_fixture():
    t = read_kineto(FIX / "tb_plugin_gpu_metrics_input.json")
    e = t.events
    assert t.meta.format == "kineto" and t.meta.clock == "epoch_ns"
    assert t.meta.devices[0]["name"] == "Tesla V100-DGXS-32GB"  # computeProperties
    cpy = e[e.kind == "memcpy"].iloc[0]
    assert (cpy["name"], cpy["bytes"], cpy["copy_kind"]) == ("Memcpy HtoD (Pageable -> Device)", 640, "HtoD")
    assert (cpy["device"], cpy["stream"], cpy["tid"], cpy["pid"]) == (0, 7, -1, 24572)
    assert (cpy["correlation"], cpy["external_id"]) == (311, 31)  # lower-case 'external id'
    assert cpy["ts"] == 1621401187224556000 and cpy["dur"] == 1000
    k = e[e.kind == "kernel"]
    assert len(k) == 30 and (k.stream == 7).all() and (k.device == 0).all() and (k.pid == 24572).all()
    # ProfilerStep was an 'Operator' in 1.8: it is an annotation here.
    assert e.loc[e.name == "ProfilerStep#2", "kind"].tolist() == ["annotation"]
    host = e[e.kind == "cpu_op"]
    assert set(host.tid) == {24572, 24610}  # string tids "24572" parsed
    assert (e.kind == "runtime").sum() == 42
    rt = e[e.correlation == 311]
    assert sorted(rt.kind) == ["memcpy", "runtime"]
    assert t.meta.threads[24610] == "thread 24610 (python)"


def test_old_categories_without_schema_version():
    e = _events(FIX / "inference_rank_1.json.gz")
    assert sorted(e.kind.unique()) == ["instant", "kernel", "other", "runtime"]
    k = e[e.kind == "kernel"]
    assert (k.external_id >= 0).all() and (k.device >= 0).all()


def test_rocm_fixture():
    t = read_kineto(FIX / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    e = t.events
    assert t.meta.producer == "torch.profiler (ROCm)"
    rt = e[e.kind == "runtime"]
    assert rt.name.astype(str).str.startswith("hip").all()
    k = e[e.kind == "kernel"]
    assert len(k) == 14 and (k.device >= 0).all()
    assert set(k.pid) <= set(rt.pid) and (k.tid == -1).all()
    assert (e[e.kind == "gpu_annotation"].device >= 0).all()
    assert e.ts.iloc[0] >= 1735632360000000000


def test_cuda_sync_and_driver():
    e = _events(FIX / "kineto_after_fix_trace.json")
    s = e[e.kind == "sync"]
    assert len(s) == 2 and (s.device == 0).all() and (s.pid == 514683).all()
    assert s.stream.tolist() == [1, 1]  # 'Event Sync' has stream -1 in args: falls back to tid
    e = _events(FIX / "triton_example.json.gz")
    assert (e.kind == "driver").sum() == 1
    k = e[e.kind == "kernel"].iloc[0]
    launch = e[(e.kind == "driver") & (e.correlation == k.correlation)]
    assert len(launch) == 1 and k.pid == launch.pid.iloc[0]


def test_collectives_from_b200_args():
    t = _read_fixture(FIX / "tracelens_b200_eager_trace.json.gz")
    e = t.events
    assert (t.meta.rank, t.meta.world_size, t.meta.rank_source) == (0, 8, "distributedInfo")
    assert t.meta.devices[0]["name"] == "NVIDIA B200"
    assert t.meta.extra["cupti_version"] == 28
    c = e[e.collective.notna()]
    # the 73 symmetric-memory all-reduce kernels are communication too (collectives.COMM_KERNELS):
    # their collective comes from the name, they carry no c10d args
    mm = c[c.name.astype(str).str.contains("multimem_all_reduce_kernel")]
    assert len(mm) == 73 and (mm.collective == "all_reduce").all() and (mm.msg_nelems == -1).all()
    c = c.drop(mm.index)
    assert sorted(c.kind) == ["cpu_op", "kernel"]
    for _, r in c.iterrows():
        assert r.collective == "all_gather"          # '_allgather_base'
        assert r.msg_nelems == 201088                 # max(in 25136, out 201088)
        assert r["dtype"] == "BFloat16" and r.msg_bytes == 201088 * 2
        assert r.group_size == 8 and r.process_group == "3"
    assert (e.kind == "python").sum() == 15230


def test_nccl_kernel_without_args_gets_collective_from_name():
    e = _events(FIX / "hta_sampled_rank-1.json.gz")
    nccl = e[e.name.astype(str).str.startswith("ncclKernel")]
    assert len(nccl) > 0 and (nccl.collective == "send_recv").all()
    assert (nccl.msg_nelems == -1).all()


def test_large_integer_arg_and_tiny_relative_clock():
    t = read_kineto(FIX / "rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz")
    assert len(t) == 2 and t.meta.rank == 70 and t.meta.rank_source == "file name"
    assert t.meta.clock == "trace_ns"  # ts 100 us: not an epoch clock
    assert t.events.ts.tolist() == [100_000, 200_000]


def test_cpu_only_trace_with_base_time():
    t = read_kineto(FIX / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert (t.meta.rank, t.meta.world_size) == (34, 300)
    assert (t.events.device == -1).all()
    assert t.events.ts.min() > 1719853884000000000


def test_generic_chrome_trace_pairs_begin_end():
    t = read_kineto(FIX / "horovod_timeline_small.json")
    e = t.events
    assert t.meta.format == "chrome"
    assert set(e.kind) <= {"other", "instant"}
    raw = json.loads((FIX / "horovod_timeline_small.json").read_text())
    n_b = sum(1 for x in raw if x.get("ph") == "B")
    n_x = sum(1 for x in raw if x.get("ph") == "X")
    assert len(e) == n_b + n_x + sum(1 for x in raw if x.get("ph") == "i")


def test_begin_end_durations_exact(tmp_path):
    ev = [{"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 10},
          {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 12},
          {"ph": "E", "pid": 1, "tid": 1, "ts": 15},
          {"ph": "B", "name": "other-thread", "pid": 1, "tid": 2, "ts": 11},
          {"ph": "E", "pid": 1, "tid": 1, "ts": 20},
          {"ph": "E", "pid": 1, "tid": 2, "ts": 30.5},
          {"ph": "C", "name": "counter", "pid": 1, "ts": 12, "args": {"v": 3}}]
    t = read_kineto(_write(tmp_path, ev))
    got = dict(zip(t.events.name.astype(str), t.events.dur))
    assert got == {"outer": 10_000, "inner": 3_000, "other-thread": 19_500}
    assert t.meta.format == "chrome" and t.meta.clock == "trace_ns"


def test_old_autograd_profiler_array(tmp_path):
    ev = [{"name": "aten::add", "ph": "X", "ts": 5.5, "dur": 3.25, "tid": 1, "pid": "CPU functions",
           "args": {}},
          {"name": "add_kernel", "ph": "s", "ts": 5.5, "tid": 1, "pid": "CPU functions", "id": 0,
           "cat": "cpu_to_cuda", "args": {}},
          {"name": "add_kernel", "ph": "X", "ts": 9.0, "dur": 1.0, "tid": 0, "pid": "CUDA functions",
           "args": {}}]
    t = read_kineto(_write(tmp_path, ev))
    e = t.events
    assert t.meta.format == "kineto" and t.meta.clock == "trace_ns"
    assert e.kind.tolist() == ["cpu_op", "kernel"]
    assert e.ts.tolist() == [5500, 9000] and e.dur.tolist() == [3250, 1000]
    assert e.device.tolist() == [-1, 0]


def test_lenient_decode_of_odd_values(tmp_path):
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 3", "ts": "1000.5",
           "dur": 2, "args": {"device": "0", "correlation": 4, "External id": None}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 999,
           "dur": 1, "args": ["not", "a", "dict"]},
          {"ph": "X", "cat": "cpu_op", "name": 42, "pid": None, "tid": 9, "ts": 998, "dur": 1}]
    t = read_kineto(_write(tmp_path, {"schemaVersion": 1, "traceEvents": ev}))
    e = t.events.set_index("name")
    assert t.meta.extra["lenient_decode"] is True
    assert e.loc["k", "ts"] == 1_000_500 and e.loc["k", "stream"] == 3 and e.loc["k", "device"] == 0
    assert e.loc["42", "kind"] == "cpu_op" and e.loc["42", "pid"] == -1


def test_streaming_batches_concatenate_to_the_same_columns():
    raw = gzip.decompress((FIX / "mi250_minitoy_train_ROCm6_2_kineto.json.gz").read_bytes())
    events = msgspec.json.decode(raw, type=K._DOC_TYPE).traceEvents
    whole = dec.events_to_batch(events)
    parts = dec.concat_batches([dec.events_to_batch(events[:77]), dec.events_to_batch(events[77:])])
    assert whole.n == parts.n
    for f in ("ts_ns", "dur_ns", "pid", "tid"):
        assert np.array_equal(getattr(whole, f), getattr(parts, f))
    for f in dec.ARG_INT_FIELDS:
        assert np.array_equal(whole.ints[f], parts.ints[f])
    assert whole.name == parts.name and whole.strs == parts.strs
    assert whole.pid_str == parts.pid_str and whole.tid_str == parts.tid_str


def test_gzip_content_with_json_name_and_plain_with_gz_name(tmp_path):
    src = (FIX / "kineto_after_fix_trace.json").read_bytes()
    a = tmp_path / "looks_plain.json"
    a.write_bytes(gzip.compress(src))
    b = tmp_path / "looks_gz.json.gz"
    b.write_bytes(src)
    assert len(load(a)) == len(load(b)) == 11


def test_multi_member_gzip(tmp_path):
    src = (FIX / "kineto_after_fix_trace.json").read_bytes()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(src[:5000]) + gzip.compress(src[5000:]))
    assert len(load(p)) == 11


@pytest.mark.parametrize("name,rank", [
    ("rank-3.json.gz", 3), ("trace_rank7.json", 7), ("profile_trace_rank_12_annotation.json.gz", 12),
    ("worker0.1623143089861.pt.trace.json.gz", 0), ("bs_32_rank0.json.gz", 0),
    ("frank5.json", -1), ("trace.json", -1), ("ranking.json", -1)])
def test_rank_from_filename(name, rank):
    assert rank_from_filename(name) == rank


def test_rank_missing_everywhere_is_minus_one(tmp_path):
    ev = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}'
    t = read_kineto(_write(tmp_path, _raw_trace(ev, '"distributedInfo": {"backend": "nccl"}'), "x.json"))
    assert (t.meta.rank, t.meta.world_size, t.meta.rank_source) == (-1, -1, "")


def test_every_row_has_a_known_kind():
    for p in sorted(FIX.iterdir()):
        if p.name.startswith("benchmark_simple_add_et"):
            continue
        e = _events(p)
        assert set(e.kind.astype(str)) <= set(KINDS), p.name
        assert e.ts.is_monotonic_increasing, p.name
        gpu = e[e.kind.isin(["kernel", "memcpy", "memset"])]
        assert (gpu.device >= 0).all() and (gpu.tid == -1).all(), p.name


def test_progress_bar_draws_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(common, "PROGRESS_MIN_BYTES", 0)
    t = read_kineto(FIX / "hta_sampled_rank-1.json.gz", progress=True)
    assert len(t) == 4676


# --- refusals -----------------------------------------------------------------

def _refused(path) -> str:
    with pytest.raises(TraceError) as ei:
        load(path, strict=True)  # strict: a file cut short is refused, not recovered
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(str(path))
    return msg


def test_truncated_json_reports_byte(tmp_path):
    src = (FIX / "kineto_after_fix_trace.json").read_bytes()
    p = tmp_path / "cut.json"
    p.write_bytes(src[:7000])
    assert "truncated JSON at byte 7000" in _refused(p)


def test_truncated_json_inside_gzip(tmp_path):
    raw = gzip.decompress((FIX / "triton_example.json.gz").read_bytes())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(raw[:3000]))
    assert "truncated JSON at byte 3000" in _refused(p)


def test_bad_gzip(tmp_path):
    good = (FIX / "hta_sampled_rank-1.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(good[: len(good) // 2])
    assert "truncated gzip" in _refused(cut)
    bad = bytearray(good)
    bad[1000:1100] = b"\x00" * 100
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(bytes(bad))
    assert "corrupt gzip" in _refused(corrupt)
    notgz = tmp_path / "notgz.json.gz"
    notgz.write_bytes(b"\x00\x05\x16\x07 Mac OS X AppleDouble")
    assert "not JSON, gzip or SQLite" in _refused(notgz)


def test_empty_inputs(tmp_path):
    p = tmp_path / "empty.json"
    p.write_bytes(b"")
    assert "empty file" in _refused(p)
    g = tmp_path / "empty.json.gz"
    g.write_bytes(gzip.compress(b"  \n"))
    assert "empty after gunzip" in _refused(g)


def test_not_a_trace(tmp_path):
    assert "execution trace" in _refused(FIX / "benchmark_simple_add_et.json.gz")
    assert "memory_timeline" in _refused(_write(tmp_path, [[1, 2, 3], [4, 5, 6]], "m.json"))
    msg = _refused(_write(tmp_path, {"rocprofiler-sdk-tool": []}, "r.json"))
    assert "rocprofiler" in msg
    msg = _refused(_write(tmp_path, {"foo": 1, "bar": [1]}, "o.json"))
    assert "without traceEvents (keys: foo, bar)" in msg
    assert "invalid JSON at byte" in _refused(_write(tmp_path, b'{"traceEvents": [1 2]}', "bad.json"))
    assert "no such file" in _refused(tmp_path / "missing.json")


def test_bom_and_empty_event_lists(tmp_path):
    body = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1,
                                        "tid": 1, "ts": 5, "dur": 1}]}).encode()
    assert load(_write(tmp_path, b"\xef\xbb\xbf" + body, "bom.json")).events.kind.tolist() == ["cpu_op"]
    t = load(_write(tmp_path, {"schemaVersion": 1, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "py"}}]}, "m.json"))
    assert len(t) == 0 and t.meta.processes == {1: "py"} and t.meta.format == "kineto"


def test_exact_ts_through_the_lenient_path(tmp_path):
    ev = ('{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1695835535123456.789,"dur":1,'
          '"args":["odd"]},'
          '{"ph":"X","cat":"cpu_op","name":"b","pid":null,"tid":1,"ts":1695835535123457.001,"dur":1}')
    t = read_kineto(_write(tmp_path, _raw_trace(ev)))
    assert t.events["ts"].tolist() == [1695835535123456789, 1695835535123457001]
    assert t.meta.extra["exact_ts_decode"] is True and t.meta.extra["lenient_decode"] is True
