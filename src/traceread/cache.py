"""Cached event tables: re-analysing an unchanged trace skips parsing.

The first ``read(path, cache=True)`` stores the finished event table as
Parquet (plus the ``TraceMeta``) under the user cache directory; later reads
of the same unchanged file load it back in a fraction of the parse time.

* Location: ``$TRACEREAD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/traceread``,
  else ``~/.cache/traceread``. Never beside or inside the input.
* Key: resolved path + size + mtime (ns) + traceread version + event-table
  schema. Any change to the file, the package or the schema misses.
* Writes are atomic (temp file + rename); a damaged or unreadable entry is
  ignored and rewritten, never an error.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import TraceError
from .table import SCHEMA, Trace, TraceMeta

_META_KEY = b"traceread.meta.msgpack"
MAX_ENTRIES = 64  # oldest entries beyond this are removed after each store
MIN_BYTES = 16 << 20  # smaller files parse in well under a second: not worth an entry


def cache_dir() -> Path:
    env = os.environ.get("TRACEREAD_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "traceread"


def _version() -> str:
    from . import __version__

    return __version__


def worth_caching(path: str | os.PathLike) -> bool:
    """True for files big enough that a cache hit saves noticeable time."""
    try:
        from .readers.stream import estimated_raw_size

        return estimated_raw_size(path) >= MIN_BYTES
    except (OSError, TraceError):
        return False


def cache_key(path: str | os.PathLike) -> str:
    """Hex key of a file's identity (path, size, mtime) + package version + schema."""
    p = Path(path).resolve()
    st = p.stat()
    ident = "\0".join((str(p), str(st.st_size), str(st.st_mtime_ns), _version(),
                       SCHEMA.to_string(show_schema_metadata=False)))
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def entry_path(path: str | os.PathLike) -> Path:
    return cache_dir() / f"{cache_key(path)}.parquet"


def load(path: str | os.PathLike) -> Trace | None:
    """The cached Trace for ``path`` if there is a valid entry, else None."""
    try:
        entry = entry_path(path)
        if not entry.is_file():
            return None
        table = pq.read_table(entry)
        raw = (table.schema.metadata or {}).get(_META_KEY)
        if raw is None:
            return None
        meta = TraceMeta(**msgspec.msgpack.decode(raw))
        table = _normalise(table.replace_schema_metadata(None))
        if table is None:
            return None
        return Trace(table, meta)
    except Exception:  # noqa: BLE001 - a bad cache entry is a miss, never an error
        return None


def store(path: str | os.PathLike, trace: Trace) -> Path | None:
    """Write ``trace`` as the cache entry of ``path``; None when it cannot be cached."""
    try:
        meta_dict = trace.meta.to_dict()
        raw = msgspec.msgpack.encode(meta_dict)
        if msgspec.msgpack.decode(raw) != meta_dict:
            return None  # meta would not round-trip exactly (odd header values)
        entry = entry_path(path)
        entry.parent.mkdir(parents=True, exist_ok=True)
        table = trace.table.replace_schema_metadata({_META_KEY: raw})
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".parquet")
        os.close(fd)
        try:
            pq.write_table(table, tmp, compression="zstd", compression_level=1)
            os.replace(tmp, entry)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _prune(entry.parent)
        return entry
    except Exception:  # noqa: BLE001 - caching is best effort (read-only home, full disk)
        return None


def _normalise(table: pa.Table) -> pa.Table | None:
    """One chunk per column and the exact SCHEMA types (Parquet may re-chunk)."""
    if table.schema != SCHEMA:
        if table.schema.names != SCHEMA.names:
            return None
        table = table.cast(SCHEMA)
    return table.combine_chunks()


def _prune(directory: Path) -> None:
    entries = sorted(directory.glob("*.parquet"), key=lambda e: e.stat().st_mtime)
    for e in entries[:-MAX_ENTRIES]:
        try:
            e.unlink()
        except OSError:
            pass


def clear() -> int:
    """Delete every cache entry; returns how many were removed."""
    n = 0
    d = cache_dir()
    if d.is_dir():
        for e in d.glob("*.parquet"):
            try:
                e.unlink()
                n += 1
            except OSError:
                pass
    return n


__all__ = ["worth_caching", "cache_dir", "cache_key", "entry_path", "load", "store", "clear"]
