"""The nsys reader pulls query results in fetchmany() batches: any batch size
must give the same table (and meta) as reading each table in one go."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from traceread.readers import _nsys_db
from traceread.readers._nsys_db import Db, concat_dict, connect
from traceread.readers.nsys import read_nsys
from traceread.synth.nsys import NsysWriter, write_planted

FIX = Path(__file__).parent / "fixtures" / "nsys"
UNBATCHED = (1 << 31) - 1  # fetchmany(): one batch holds every row


def _busy(path: Path, schema: str) -> Path:
    """The planted scenario plus rows that span many batches: repeated and NULL
    inline texts, 2.9.1 inline runtime names, unresolved name ids."""
    write_planted(path, schema)
    con = sqlite3.connect(path)
    rows = [(50_000 + 10 * i, 50_005 + 10 * i if i % 5 else None, 59 if i % 7 else 34,
             f"step {i % 4}" if i % 3 else None, (1 << 56) | (100 << 24) | 101, 1 if i % 3 else None,
             0) for i in range(40)]
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, "
                    "domainId) VALUES (?,?,?,?,?,?,?)", rows)
    if schema == "2.9.1":
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 99999, "
                    "name = 'cudaFoo_v1234' WHERE start IN (900, 29000)")
    con.commit()
    con.close()
    return path


def _read(path: Path, batch: int, monkeypatch):
    monkeypatch.setattr(_nsys_db, "BATCH_ROWS", batch)
    return read_nsys(path)


@pytest.mark.parametrize("schema", ["3.x", "2.9.1", "pre2"])
def test_batch_size_does_not_change_the_table(schema, tmp_path, monkeypatch):
    p = _busy(tmp_path / f"b_{schema}.sqlite", schema)
    ref = _read(p, UNBATCHED, monkeypatch)
    assert ref.table.num_rows > 60
    for batch in (1, 3, 16):
        got = _read(p, batch, monkeypatch)
        assert got.table.equals(ref.table), batch
        assert got.meta.to_dict() == ref.meta.to_dict()


@pytest.mark.parametrize("name", ["mock.sqlite", "healthy_judged_1pct.sqlite"])
def test_batch_size_real_fixtures(name, monkeypatch):
    p = FIX / name
    ref = _read(p, UNBATCHED, monkeypatch)
    got = _read(p, 5, monkeypatch)
    assert got.table.equals(ref.table)


def test_fetch_matches_fetchall(tmp_path):
    """Batched columns equal a plain fetchall(), text cells decoded through their codes."""
    p = _busy(tmp_path / "f.sqlite", "3.x")
    con = connect(p)
    try:
        c = Db(con, p).fetch("NVTX_EVENTS", {"start": "start", "end": "end", "nope": "nope"},
                             texts={"text": "text", "gone": "gone"}, batch=3)
        rows = con.execute("SELECT start, end, text FROM NVTX_EVENTS").fetchall()
    finally:
        con.close()
    assert c["start"].tolist() == [r[0] for r in rows]
    assert c["end"].tolist() == [-1 if r[1] is None else r[1] for r in rows]
    assert c["nope"].tolist() == [-1] * len(rows)
    assert c["gone"] is None
    codes, values = c["text"]
    assert len(values) == len(set(values))  # one entry per distinct text
    assert [values[k] if k >= 0 else None for k in codes] == \
        [None if r[2] is None else r[2].decode() for r in rows]


def test_concat_dict_first_appearance_order():
    import pyarrow as pa
    a = pa.array(["y", None, "x", "y"]).dictionary_encode()
    got = concat_dict([(None, 2), ("x", 2), (a, 4), (["z", None], 2)])
    want = pa.array([None, None, "x", "x", "y", None, "x", "y", "z", None]).dictionary_encode()
    assert got.equals(want)
    assert concat_dict([]).to_pylist() == []


def test_empty_tables(tmp_path):
    w = NsysWriter(tmp_path / "e.sqlite")
    w.kernel(1, 2, "k()", 1)
    p = w.close()
    t = read_nsys(p)
    assert t.table.num_rows == 1
    assert np.asarray(t.table.column("ts")).tolist() == [1]
