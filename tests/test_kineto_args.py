"""Kineto args carried into the event table: shapes, dtypes, FLOPs, launch config, [memory]."""
import gzip
import json

import pytest

from traceread.readers.kineto import read_kineto
from traceread.readers.stream import read_stream


def _trace(indent=None):
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 3, "Input Dims": [[8, 64], [64, 32]],
                  "Input type": ["c10::BFloat16", "c10::BFloat16"], "flops": 32768}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"External id": 4}},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 30,
         "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 9, "grid": [132, 1, 1],
                            "block": [384, 1, 1], "registers per thread": 168,
                            "shared memory": 231424, "est. achieved occupancy %": 12}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 40,
         "s": "t", "args": {"Total Reserved": 2097152, "Total Allocated": 4096, "Bytes": -512,
                            "Device Id": 0, "Device Type": 1}},
    ]
    doc = {"schemaVersion": 1, "traceEvents": ev}
    return json.dumps(doc, indent=indent)


@pytest.mark.parametrize("indent", [None, 2])
def test_args_become_columns(tmp_path, indent):
    p = tmp_path / "t.json"
    p.write_text(_trace(indent))
    ev = read_kineto(p).events.set_index("name")
    mm = ev.loc["aten::mm"]
    assert mm.input_dims == "[[8,64],[64,32]]"
    assert mm.input_type == '["c10::BFloat16","c10::BFloat16"]'
    assert mm.flops == 32768
    relu = ev.loc["aten::relu"]
    assert relu.input_dims is None or relu.input_dims != relu.input_dims  # null
    assert relu.flops == -1
    k = ev.loc["sm90_xmma_gemm_bf16"]
    assert k.launch == ('{"grid":[132,1,1],"block":[384,1,1],"registers":168,'
                        '"shared_mem":231424,"occupancy":12}')
    m = ev.loc["[memory]"]
    assert (m.mem_bytes, m.mem_allocated, m.mem_reserved, m.mem_device) == (-512, 4096, 2097152, 0)
    assert m.launch is None or m.launch != m.launch  # null


def test_stream_path_gives_the_same_columns(tmp_path):
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        f.write(_trace(1))
    small = read_kineto(p)
    big = read_stream(p, chunk_bytes=200, workers=1)
    for name in ("input_dims", "input_type", "flops", "launch", "mem_bytes"):
        assert big.table.column(name).equals(small.table.column(name)), name


def test_lenient_path_keeps_shapes(tmp_path):
    # a string 'dur' sends the document through the lenient (coercing) decode
    doc = json.loads(_trace())
    doc["traceEvents"][0]["dur"] = "5"
    doc["traceEvents"][0]["args"]["External id"] = {"odd": 1}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    t = read_kineto(p)
    assert t.meta.extra.get("lenient_decode")
    ev = t.events.set_index("name")
    assert ev.loc["aten::mm"].input_dims == "[[8,64],[64,32]]"


def test_launch_numbering_by_key_equals_the_row_sort():
    """`_launch_column` numbers configurations through one factorized int key; the
    whole-row sort it falls back on (too many distinct values) gives the same column."""
    import numpy as np
    import pyarrow as pa

    from traceread.readers import kineto as K

    rng = np.random.default_rng(5)
    n, m = 5000, 1200
    rows = np.sort(rng.choice(n, m, replace=False))
    grid = pa.array(["[1,1,1]", "[132,1,1]", "[8,4,1]"])
    block = pa.array(["[128,1,1]", "[384,1,1]"])

    def dict_col(k):
        idx = np.full(n, -1, np.int32)
        idx[rows] = rng.integers(-1, k, m)
        return idx

    strs = [pa.DictionaryArray.from_arrays(pa.array(i, mask=i < 0), d)
            for i, d in ((dict_col(3), grid), (dict_col(2), block))]
    ints = [(rows, rng.choice([-1, 32, 168, 255], m)), (rows, rng.choice([-1, 0, 231424], m)),
            (rows, rng.integers(-1, 3, m))]
    got = K._launch_column(_Batch(n, strs, ints))
    cols = [d.indices.take(pa.array(rows)).fill_null(-1).to_numpy(zero_copy_only=False)
            .astype(np.int64) for d in strs] + [v for _, v in ints]
    any_ = np.any(np.stack(cols, axis=1) >= 0, axis=1)
    want = K._launch_column_sorted(n, rows[any_], [c[any_] for c in cols], strs)
    assert got.dictionary.to_pylist() == want.dictionary.to_pylist()
    assert got.indices.to_pylist() == want.indices.to_pylist()
    assert len(got.dictionary) > 20


class _Batch:
    """The two fields `_launch_column` reads, as a decoded batch holds them."""

    def __init__(self, n, strs, ints):
        from traceread.readers import _kineto_decode as dec

        self.n = n
        self.strs = dict(zip(dec.LAUNCH_STR_FIELDS, strs))
        self.ints = {f: _dense(n, r, vals)
                     for f, (r, vals) in zip(dec.LAUNCH_INT_FIELDS, ints)}


def _dense(n, rows, vals):
    import numpy as np

    out = np.full(n, -1, np.int64)
    out[rows] = vals
    return out
