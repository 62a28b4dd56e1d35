"""Memory of the event table's all-default columns (issue 42): one shared array per type,
whether the table is built by a reader, read back from the cache or Parquet, or filtered
into an nsys rank's part; and the replay's string node columns read without a new Python
string per row."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES
from traceread.passes.replay import hostcost
from traceread.passes.replay.graph import copy_on_write, str_values
from traceread.readers import cache, read
from traceread.readers.parquet import read_parquet
from traceread.table import SCHEMA, build_table, filter_rows, share_defaults

SRC = FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"


def _distinct_buffers(table: pa.Table) -> int:
    """How many distinct columns' memory the table holds (by their value buffer)."""
    return len({c.chunk(0).buffers()[-1].address for c in table.columns
                if c.num_chunks and c.chunk(0).buffers()[-1] is not None})


def _small_table() -> pa.Table:
    n = 6
    cols = {"ts": np.arange(n, dtype=np.int64) * 10, "dur": np.full(n, 5, np.int64),
            "kind": ["kernel", "runtime"] * 3, "name": list("abcdef"),
            "pid": np.array([1, 1, 2, 2, 1, 2], np.int64),
            "bytes": np.array([-1, -1, -1, 64, -1, -1], np.int64),   # -1 except row 3
            "copy_kind": [None] * n}
    return build_table(cols, n)


def test_share_defaults_gives_back_the_readers_sharing():
    t = _small_table()
    back = pq.read_table(pa.BufferReader(_parquet_bytes(t)))
    back = back.replace_schema_metadata(None).cast(SCHEMA).combine_chunks()
    assert _distinct_buffers(back) > _distinct_buffers(t)   # Parquet: one copy a column
    shared = share_defaults(back)
    assert shared.equals(t) and shared.schema == SCHEMA
    assert _distinct_buffers(shared) <= _distinct_buffers(t)   # (copy_kind, given as
    # Nones, had its own array in build_table: it joins the shared null column here)
    # a column with one value other than -1 is its own
    assert shared.column("bytes").to_pylist() == [-1, -1, -1, 64, -1, -1]
    assert share_defaults(shared) is shared   # nothing left to share: the same table


def _parquet_bytes(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    return sink.getvalue().to_pybytes()


def test_filter_rows_is_filter_with_the_defaults_shared():
    t = _small_table()
    for pid in (1, 2):
        mask = pa.compute.equal(t.column("pid"), pid)
        part = filter_rows(t, mask)
        assert part.equals(t.filter(mask))
        assert _distinct_buffers(part) <= _distinct_buffers(t)
    # pid 1's rows have bytes -1 only: that column joins the shared int64 default there
    part = filter_rows(t, pa.compute.equal(t.column("pid"), 1))
    addr = lambda c: part.column(c).chunk(0).buffers()[-1].address  # noqa: E731
    assert addr("bytes") == addr("msg_bytes")


def test_cache_and_parquet_reads_share_the_default_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEREAD_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / SRC.name
    shutil.copy(SRC, p)
    fresh = read(p)
    assert cache.store(p, fresh) is not None
    back = cache.load(p)
    assert back.table.equals(fresh.table) and back.meta == fresh.meta
    assert _distinct_buffers(back.table) <= _distinct_buffers(fresh.table)
    assert back.events.equals(fresh.events)
    out = tmp_path / "t.parquet"
    fresh.to_parquet(out)
    again = read_parquet(out)
    assert again.table.equals(fresh.table)
    assert _distinct_buffers(again.table) <= _distinct_buffers(fresh.table)


def test_str_values_is_astype_str_with_the_columns_own_strings():
    names = np.asarray(["aten::mm", "cudaLaunchKernel", "aten::mm", ""], object)
    s = pd.Series(names, dtype=object)
    got = str_values(s)
    assert list(got) == list(s.astype(str).to_numpy(object))
    assert all(a is b for a, b in zip(got, names))   # no new string a row
    for odd in ([1, "a", 2.5], ["a", None, np.nan]):  # converted as astype(str) does
        s = pd.Series(odd, dtype=object)
        want = s.astype(str).to_numpy(object)
        assert [str(x) for x in str_values(s)] == [str(x) for x in want]


def test_the_fit_cache_holds_the_graphs_columns_not_copies():
    from traceread.analysis import analyze
    from test_replay import sync_loop

    g = analyze(sync_loop(), steps="all").replay_graph
    hostcost.forget()
    first = hostcost.fit(g)
    held = hostcost._FIT_LAST[0][0]
    if copy_on_write():
        assert np.shares_memory(held[FIT_NAME].to_numpy(), g.nodes["name"].to_numpy())
    # a write to the graph after the fit never reaches what the cache compares against
    c = g.copy()
    c.nodes.loc[c.nodes.index[c.nodes["kind"] == "launch"], "cost_ns"] += 1_000_000
    changed = hostcost.fit(c)
    hostcost.forget()
    assert changed.equals(hostcost.fit(c))
    assert hostcost.fit(g).equals(first)
    hostcost.forget()


FIT_NAME = hostcost.FIT_COLS.index("name")


@pytest.mark.parametrize("value", ["host", "dataloader"])
def test_filled_shares_one_string(value):
    from traceread.passes.replay.graph import filled

    a = filled(5, value)
    assert list(a) == [value] * 5 and len({id(x) for x in a}) == 1


def test_the_cli_runs_arrow_on_the_system_allocator_unless_told_otherwise():
    import os
    import subprocess
    import sys

    def pool(module: str, **env) -> str:
        e = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
        code = f"import {module}, pyarrow as pa; print(pa.default_memory_pool().backend_name)"
        out = subprocess.run([sys.executable, "-c", code], env={**e, **env},
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert pool("traceread.cli") == "system"
    default = pool("pyarrow")
    assert pool("traceread") == default   # the library leaves the user's process alone
    if default != "system":   # a value the user set wins
        assert pool("traceread.cli", ARROW_DEFAULT_MEMORY_POOL=default) == default


def test_a_packed_trace_gives_back_the_same_table_and_frame():
    from traceread.table import Trace

    fresh = read(SRC)
    t = Trace(fresh.table, fresh.meta)
    t.pack()
    assert t._table is None and t._packed is not None   # held compressed
    assert len(t) == len(fresh)
    assert t.table.equals(fresh.table) and t.table.schema == SCHEMA
    assert _distinct_buffers(t.table) <= _distinct_buffers(fresh.table)
    u = Trace(fresh.table, fresh.meta)
    u.pack()
    assert u.events.equals(read(SRC).events)   # the frame, straight from the packed table
    u.pack()   # a built frame: nothing to pack
    assert u._packed is None and u.has_frame


def test_split_parts_wait_packed_and_equal_the_filtered_export(tmp_path):
    import traceread
    from traceread.readers.nsys_split import split_processes
    from traceread.synth.multirank import JobSpec, write_nsys_job

    path = write_nsys_job(tmp_path / "job.sqlite", JobSpec(ranks=3, slow_rank=1,
                                                           with_seq=False, steps=3))
    whole = traceread.load(path)
    table = whole.table
    parts = split_processes(whole)
    assert [p._packed is not None for p in parts] == [False, True, True]
    for p in parts:
        pid = p.meta.extra["pid"]
        assert p.table.equals(table.filter(pa.compute.equal(table.column("pid"), pid)))
        assert _distinct_buffers(p.table) <= _distinct_buffers(table)
