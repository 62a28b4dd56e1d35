"""Names classified once (issues 40 and 42): the shared name table gives exactly NameRx's
answers, for every pattern the passes made, on names chosen to break a vectorised
prefilter; and a trace of 800,000 distinct names analyses at table speed (slow)."""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import traceread.analysis  # noqa: E402,F401 -- every pass module: every pattern made
from traceread import namerx  # noqa: E402
from traceread.passes import attribution, blocking  # noqa: E402
from traceread.passes.common import lookup_at, name_hits, name_table  # noqa: E402

LONG = "x" * 3000
NAMES = [
    "aten::mm", "aten::item", " aten::item ", "aten::item, seq = 3, op_id = 2",
    "aten::_local_scalar_dense\n", "aten::item\x1c", "aten::ITEM", "ATEN::mm",
    "ProfilerStep#3", "ProfilerStep#3\n", "cudaLaunchKernel", "cudaStreamSynchronize",
    "cudaFree", "cuMemFree_v2", "<built-in method tolist of Tensor object at 0x1>",
    "torch/cuda/__init__.py(801): synchronize", "void ampere_fp16_s16816gemm_fp16_128x128",
    "nccl:all_reduce", "_MultiProcessingDataLoaderIter.__next__", "enumerate(DataLoader)#x",
    "Torch-Compiled Region: 0/1", "CUDAGraphNode.record (dynamo_timed)",
    "entire_frame_compile (dynamo_timed)", "compile_attempt_2", "dynamo",
    "foo_data: {compile_id=0/1}", "aten::scaled_dot_product_attention",
    "\u017fomething aten::mm", "K\u212aernel", "aten::mm\u00e9", "op1},{\"x\"",
    LONG + "aten::mm", "aten::mm" + LONG, LONG + ",aten::item", "", " ", "\t,",
    "aten::nonzero", "aten::index,", "aten::index",
]


@pytest.mark.parametrize("how", ["search", "match", "fullmatch"])
def test_every_pattern_answers_as_namerx(how):
    for arrow in (True, False):
        t = name_table(pd.Series(pd.Categorical(NAMES))) if arrow else \
            namerx.NameTable(list(pd.Categorical(NAMES).categories))
        names = t.names
        for rx in list(namerx.COMPILED):
            got = t.hits(rx, how)
            want = [bool(getattr(rx, how)(n)) for n in names]
            assert got[:-1].tolist() == want, (rx, how, arrow)
            assert not got[-1]
            assert np.all(t.may(rx)[:-1] >= got[:-1]), rx


def test_a_name_that_is_not_utf8_goes_to_re():
    t = namerx.NameTable(["aten::mm\udcff", "aten::mm"])
    assert t.hits(namerx.compile(r"^aten::mm$"), "match").tolist() == [False, True, False]
    assert t.hits(namerx.compile(r"^aten::mm"), "match").tolist() == [True, True, False]


def test_literal_classes():
    t = name_table(pd.Series(pd.Categorical(NAMES)))
    names = t.names
    assert t.contains(" = ")[:-1].tolist() == [" = " in n for n in names]
    assert t.equals({"dynamo", "aten::mm"})[:-1].tolist() == [n in ("dynamo", "aten::mm")
                                                             for n in names]
    assert t.bare()[:-1].tolist() == [n.isascii() and len(n) <= namerx.SCAN_CHARS
                                      and n.split(",", 1)[0].strip() == n for n in names]


def test_name_lists_read_the_table():
    t = namerx.NameTable(NAMES)
    lst = namerx.NameList(t, np.arange(len(NAMES)))
    rx = namerx.compile(r"^aten::")
    assert lst == NAMES
    assert namerx.where(rx, lst) == [n for n in NAMES if rx.search(n)]
    assert namerx.first(rx, lst, "match") == "aten::mm"
    assert namerx.first(rx, list(reversed(NAMES)), "match") == "aten::index"
    assert not namerx.any_of(namerx.compile("zzz_nothing"), lst)


def test_blocking_kinds_and_sync_ops_from_the_table():
    col = pd.Series(pd.Categorical(NAMES))
    t = name_table(col)
    codes = col.array.codes
    order = [k for k, _, _, _ in blocking.KINDS]
    for kind in ("cpu_op", "python", "annotation"):
        lut = blocking._kind_lut(t, kind, codes)
        want = [order.index(k) if k else -1 for k in (blocking._kind_of(n, kind) for n in t.names)]
        assert lut[:-1].tolist() == want, kind
    sync = t.hits(attribution.SYNC_BASE_RX, "fullmatch")[:-1].tolist()
    assert sync == [attribution._op_base(n) in attribution.SYNC_OPS for n in t.names]


def test_lookup_with_candidates_is_lookup_without():
    col = pd.Series(pd.Categorical(NAMES))
    rx = namerx.compile(r"aten::(\w+)")
    fn = lambda n: (m.group(1) if (m := rx.search(n)) else None)  # noqa: E731
    rows = np.arange(len(col))
    a = lookup_at(col, rows, fn, None)
    b = lookup_at(col, rows, fn, None, cand=lambda t: t.hits(rx))
    assert a.tolist() == b.tolist()
    assert name_hits(col, rx).tolist() == [bool(rx.search(n)) for n in NAMES]


def _cpu(*args) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "traceread", *args], capture_output=True,
                       text=True, timeout=1200)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.slow
def test_800k_distinct_names_at_table_speed(tmp_path):
    """Issue 40: 800,000 distinct names holding "},{" took 57 s to analyse (info ~3 s): each
    pass tried its patterns once per name. Now analyze costs about twice info."""
    from benchmarks.names import write_trace

    p = tmp_path / "names.json"
    write_trace(p, 800_000)
    info = _cpu("info", str(p))
    ana = _cpu("analyze", "--no-cache", "--format", "json", str(p))
    assert ana < 4 * info, (ana, info)
