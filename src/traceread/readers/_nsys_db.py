"""Low-level access to an nsys SQLite export: read-only connection, schema
probing (tables and columns come and go between export versions), bulk
column fetches into numpy, and the StringIds dictionary.
"""
from __future__ import annotations

import sqlite3
import urllib.parse
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import TraceError

# Tables whose presence (with StringIds) marks a file as an nsys export.
NSYS_MARKERS = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS", "OSRT_API", "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT", "EXPORT_META_DATA", "ThreadNames", "PROFILER_OVERHEAD",
)


# Rows per fetchmany(): ~20 MB of row tuples in flight, whatever the table size.
BATCH_ROWS = 1 << 18


class Coded(NamedTuple):
    """A text column as integer codes (-1 = NULL) into ``values`` (decoded str)."""
    codes: np.ndarray
    values: np.ndarray


class _Coder:
    """Dictionary-encodes text cells batch by batch; one decode per distinct value."""

    def __init__(self):
        self.ids: dict = {}

    def encode(self, cells, m: int) -> np.ndarray:
        codes, uniq = pd.factorize(np.fromiter(cells, object, m), use_na_sentinel=True)
        ids = np.array([self.ids.setdefault(u, len(self.ids)) for u in uniq], np.int64)
        return np.where(codes >= 0, ids[np.clip(codes, 0, None)] if len(ids) else -1, -1)

    def values(self) -> np.ndarray:
        return np.array([text(v) for v in self.ids], dtype=object)


# Query budget in SQLite VM instructions: real exports need < 1 per byte of file;
# a recursive view or a pathological schema would run forever.
VM_STEPS_PER_BYTE = 1000
VM_STEPS_BASE = 1_000_000_000
_VM_TICK = 10_000


class _Connection(sqlite3.Connection):
    """A connection that remembers its remaining VM budget."""

    budget_left: list


def connect(path: Path) -> sqlite3.Connection:
    """Open read-only and immutable through a URI: nothing is ever written to the
    file or created beside it (no -shm/-wal even for a WAL-mode export, no lock
    files), and every query runs under a VM-step budget that scales with the file.
    """
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True, factory=_Connection)
    except sqlite3.Error as e:
        raise TraceError(path, f"cannot open SQLite database: {e}") from None
    con.text_factory = bytes  # StringIds may hold non-UTF-8 bytes; decode ourselves
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    _set_budget(con, VM_STEPS_BASE + VM_STEPS_PER_BYTE * size)
    return con


def _set_budget(con: sqlite3.Connection, steps: int) -> None:
    left = [steps // _VM_TICK]

    def tick() -> int:
        left[0] -= 1
        return 1 if left[0] < 0 else 0  # non-zero interrupts the running statement

    con.set_progress_handler(tick, _VM_TICK)
    if isinstance(con, _Connection):
        con.budget_left = left


def budget_spent(con: sqlite3.Connection) -> bool:
    left = getattr(con, "budget_left", None)
    return bool(left) and left[0] < 0


# Every text cell is cut to this many characters inside SQLite, before Python sees it (the
# Kineto bound, MAX_NAME_CHARS; no real kernel, API or NVTX name comes close): a 256 MB
# StringIds value cost 50 s and 3.7 GB and ended in MemoryError. The cut counts characters
# (SQLite's substr of text, in UTF-8 whatever the database's encoding): a cut of the bytes
# split a multi-byte character (a U+FFFD in the name) or a UTF-16 surrogate pair.
MAX_TEXT_BYTES = 1 << 16


def bounded(col: str, table: str | None = None) -> str:
    """SQL for text column ``col`` (of ``table``, an alias, when given) cut to
    MAX_TEXT_BYTES characters, with a marker saying how many bytes were cut (NULL stays
    NULL; a number keeps its text)."""
    q = (f'{table}."{col}"' if table else f'"{col}"')
    t = f"CAST({q} AS TEXT)"
    b = f"CAST({q} AS BLOB)"
    cut = f"substr({t}, 1, {MAX_TEXT_BYTES})"
    return (f"CASE WHEN length({b}) > {MAX_TEXT_BYTES} AND length({t}) > {MAX_TEXT_BYTES} "
            f"THEN {cut} || printf('...[%d more bytes]', length({b}) - length(CAST({cut} AS BLOB))) "
            f"ELSE {q} END")


def text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


class Db:
    """Schema-aware view of one export."""

    def __init__(self, con: sqlite3.Connection, path: Path):
        self.con = con
        self.path = path
        rows = con.execute("SELECT type, name FROM sqlite_master "
                           "WHERE type IN ('table', 'view')").fetchall()
        self.tables = {text(r[1]) for r in rows if text(r[0]) == "table"}
        self.views = {text(r[1]) for r in rows if text(r[0]) == "view"}
        self._cols: dict[str, set[str]] = {}

    def has(self, table: str) -> bool:
        """True for a real table. A view is never executed: exports have none, and
        a view can run forever (a recursive one) or cost anything."""
        if table in self.views:
            raise TraceError(self.path, f"{table} is a view, not a table: views are not executed "
                                        "(not an unmodified nsys export?)")
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            rows = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._cols[table] = {text(r[1]) for r in rows}
        return self._cols[table]

    def is_nsys(self) -> bool:
        return self.has("StringIds") and any(self.has(t) for t in NSYS_MARKERS)

    def fetch(self, table: str, ints: dict[str, str | None], texts: dict[str, str | None] | None = None,
              where: str = "", batch: int | None = None) -> dict[str, np.ndarray | Coded | None]:
        """Fetch columns of ``table``: ``ints`` maps output name -> SQL column (or
        expression over present columns); None or a missing column gives -1s.
        ``texts`` likewise for text columns, returned as ``Coded`` (None when the
        column is absent).

        Rows are pulled ``batch`` at a time and written straight into preallocated
        numpy columns, so no Python copy of the whole table ever exists (a 500 MB
        export would otherwise cost several GB of row tuples)."""
        have = self.columns(table)
        for key in ("start", "end"):  # an interval without its start or end is no interval
            if ints.get(key) == key and key not in have:
                raise TraceError(self.path, f"{table} has no '{key}' column: its rows have "
                                            "no time (not a complete Nsight Systems export)")
        # Text columns the table lacks come back as None (not a column of nulls).
        missing = [k for k, col in (texts or {}).items() if col is None or col not in have]
        texts = {k: col for k, col in (texts or {}).items() if k not in missing}
        exprs = []
        for col in ints.values():
            if col is not None and col in have:
                exprs.append(f'COALESCE(CAST("{col}" AS INTEGER), -1)')
            else:
                exprs.append("-1")
        for col in texts.values():
            exprs.append(bounded(col))
        tail = f'FROM "{table}"' + (f" WHERE {where}" if where else "")
        n = self.con.execute(f"SELECT COUNT(*) {tail}").fetchone()[0]
        cols = [np.empty(n, np.int64) for _ in range(len(ints) + len(texts))]
        coders = [_Coder() for _ in texts]
        cur = self.con.execute(f'SELECT {", ".join(exprs)} {tail}')
        size = batch or BATCH_ROWS
        filled = 0
        while rows := cur.fetchmany(size):
            m = len(rows)
            if filled + m > len(cols[0]):  # the count was stale: grow
                cols = [np.concatenate([c, np.empty(filled + m - len(c), np.int64)]) for c in cols]
            # every int cell is an integer (CAST ... COALESCE -1): one C pass over the
            # row tuples, ~3x faster than a fromiter per column
            block = np.array(rows if not texts else list(map(itemgetter(slice(0, len(ints))),
                                                                rows)), np.int64)
            for j, col in enumerate(cols):
                if j < len(ints):
                    col[filled:filled + m] = block[:, j]
                else:
                    col[filled:filled + m] = coders[j - len(ints)].encode(
                        map(itemgetter(j), rows), m)
            del block
            filled += m
            del rows
        out: dict[str, np.ndarray | Coded | None] = {}
        for j, name in enumerate(ints):
            out[name] = cols[j][:filled] if filled < len(cols[j]) else cols[j]
        for j, name in enumerate(texts):
            col = cols[len(ints) + j]
            out[name] = Coded(col[:filled] if filled < len(col) else col, coders[j].values())
        for name in missing:
            out[name] = None
        return out

    def scalar_map(self, table: str, key: str, value: str) -> dict:
        """{key: value} for two columns of a small table (missing -> {})."""
        if not self.has(table) or not {key, value} <= self.columns(table):
            return {}
        rows = self.con.execute(f'SELECT "{key}", {bounded(value)} FROM "{table}"')
        return {text(k) if isinstance(k, bytes) else k: text(v) for k, v in rows}


class Strings:
    """StringIds as a vectorised id -> string lookup."""

    def __init__(self, db: Db):
        if db.has("StringIds") and {"id", "value"} <= db.columns("StringIds"):
            rows = db.con.execute(f"SELECT id, {bounded('value')} FROM StringIds "
                                  "ORDER BY id").fetchall()
        else:
            rows = []
        self.ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        self.values = np.array([text(r[1]) or "" for r in rows], dtype=object)

    def get(self, i: int) -> str | None:
        k = int(np.searchsorted(self.ids, i))
        if k < len(self.ids) and self.ids[k] == i:
            return self.values[k]
        return None

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``values`` for each id; -1 where the id is unknown."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.ids) == 0:
            return np.full(len(ids), -1, np.int64)
        k = np.clip(np.searchsorted(self.ids, ids), 0, len(self.ids) - 1)
        return np.where(self.ids[k] == ids, k, -1)

    def lookup(self, ids: np.ndarray) -> pa.DictionaryArray:
        """Dictionary array of the strings (null for unknown ids), compact dictionary."""
        return dict_array(self.positions(ids), self.values)


def dict_array(pos: np.ndarray, values: np.ndarray) -> pa.DictionaryArray:
    """Dictionary array from positions into ``values`` (-1 = null), keeping only used values."""
    pos = np.asarray(pos, dtype=np.int64)
    used, inv = np.unique(pos, return_inverse=True)
    null_code = used[0] == -1 if len(used) else False
    dictionary = values[used[1:]] if null_code else values[used]
    codes = inv.astype(np.int32) - (1 if null_code else 0)
    mask = pos < 0
    return pa.DictionaryArray.from_arrays(
        pa.array(codes, type=pa.int32(), mask=mask),
        pa.array(list(dictionary), type=pa.string()))


def concat_dict(parts: list) -> pa.Array:
    """Concatenate string columns given as (part, length) pairs; a part is a
    DictionaryArray, a str (that value on every row), a list, or None (nulls).

    Works on dictionary codes only (no string per row is ever materialised); the
    result's dictionary is in order of first appearance, as ``dictionary_encode``
    of the concatenated strings would give."""
    if not parts:
        return pa.array([], type=pa.string())
    index: dict[str, int] = {}
    codes = []
    for part, n in parts:
        if part is None:
            codes.append(np.full(n, -1, np.int32))
            continue
        if isinstance(part, str):
            part = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([part]))
        elif not isinstance(part, pa.DictionaryArray):
            part = pa.array(part, type=pa.string()).dictionary_encode()
        remap = np.array([-1 if v is None else index.setdefault(v, len(index))
                          for v in part.dictionary.cast(pa.string()).to_pylist()] + [-1], np.int32)
        idx = part.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        codes.append(remap[idx])  # -1 (null) picks the trailing -1
    allc = np.concatenate(codes)
    del codes
    enc = pa.array(allc, mask=allc < 0).dictionary_encode()
    values = pa.array(list(index), type=pa.string())
    return pa.DictionaryArray.from_arrays(enc.indices, values.take(enc.dictionary))
