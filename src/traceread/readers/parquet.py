"""``traceread.read_parquet``: load an event table written by ``Trace.to_parquet``.

A hostile file is one TraceError, never a KeyError / RecursionError: the columns are checked
against the event table's schema and the metadata against TraceMeta's fields.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from ..errors import TraceError
from ..table import COLUMNS, PARQUET_META_KEY, SCHEMA, Trace, TraceMeta, share_defaults
from .detect import as_path, read_head

STRING_TYPE = pa.dictionary(pa.int32(), pa.string())   # the table's text columns


def read_parquet(path: str | Path) -> Trace:
    """Load a table written by ``Trace.to_parquet``. Anything else -- not Parquet, a
    column missing or of another type, null times, metadata that is not our JSON
    object -- is a one-line TraceError (never KeyError / RecursionError)."""
    import pyarrow.parquet as pq

    path = as_path(path, "traceread.read_parquet")
    read_head(path, 4)  # missing, unreadable, a directory or a FIFO: its own clear reason
    try:
        table = pq.read_table(str(path))
    except (pa.ArrowException, OSError, ValueError, TypeError) as e:
        raise TraceError(path, f"not a readable Parquet file: {e}") from None
    except MemoryError:
        raise TraceError(path, "out of memory reading the Parquet file") from None
    raw = (table.schema.metadata or {}).get(PARQUET_META_KEY)
    meta = _parquet_meta(path, raw) if raw else TraceMeta(path=str(path))
    table = table.replace_schema_metadata(None)
    if table.schema != SCHEMA:
        missing = [n for n, _, _ in COLUMNS if n not in table.column_names]
        if missing:
            raise TraceError(path, f"not a traceread event table: no column {', '.join(missing)}")
        try:
            table = table.select([n for n, _, _ in COLUMNS]).cast(SCHEMA)
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise TraceError(path, f"not a traceread event table: {e}") from None
    for col in ("ts", "dur", "kind"):
        if table.column(col).null_count:
            raise TraceError(path, f"not a traceread event table: null values in {col!r}")
    return Trace(share_defaults(_clip_strings(table)), meta)   # Parquet: one copy a column


PARQUET_MAX_CHARS = 1 << 16   # = readers' MAX_NAME_CHARS: a hostile table's names, clipped


def _clip_strings(table: pa.Table) -> pa.Table:
    """``table`` with every text value longer than PARQUET_MAX_CHARS clipped (with a
    marker), as the readers clip names; untouched (no copy) when none is."""
    import pyarrow.compute as pc

    n = PARQUET_MAX_CHARS
    for i, f in enumerate(table.schema):
        if f.type != STRING_TYPE:
            continue
        col = table.column(i).combine_chunks()
        if not len(col.dictionary) or (pc.max(pc.utf8_length(col.dictionary)).as_py() or 0) <= n:
            continue
        vals = [v if v is None or len(v) <= n else f"{v[:n]}...[{len(v) - n:,} more chars]"
                for v in col.dictionary.to_pylist()]
        clipped = pa.array(vals, pa.string()).take(col.indices).dictionary_encode()
        table = table.set_column(i, f.name, clipped.cast(STRING_TYPE))
    return table


def _parquet_meta(path, raw: bytes) -> TraceMeta:
    """TraceMeta from the JSON we store; TraceError when it is anything else."""
    import json

    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise TraceError(path, f"metadata {PARQUET_META_KEY.decode()} is not valid JSON: "
                               f"{type(e).__name__}") from None
    fields = {f.name: f for f in dataclasses.fields(TraceMeta)}
    if not isinstance(doc, dict) or set(doc) - set(fields):
        raise TraceError(path, f"metadata {PARQUET_META_KEY.decode()} is not a traceread TraceMeta")
    kinds = {"path": str, "format": str, "format_version": str, "producer": str, "clock": str,
             "rank_source": str, "epoch_offset_ns": int, "rank": int, "world_size": int,
             "distributed": dict, "devices": list, "processes": dict, "threads": dict,
             "extra": dict}
    for k, v in doc.items():
        want = kinds.get(k)
        if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
            raise TraceError(path, f"metadata field {k!r} is a {type(v).__name__}, not "
                                   f"a {want.__name__}")
    return TraceMeta(**doc)
