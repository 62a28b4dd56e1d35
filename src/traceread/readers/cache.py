"""Cached event tables: re-analysing an unchanged trace skips parsing.

The first ``read(path, cache=True)`` stores the finished event table as
Parquet (plus the ``TraceMeta``) under the user cache directory; later reads
of the same unchanged file load it back in a fraction of the parse time.

* Location: ``$TRACEREAD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/traceread``,
  else ``~/.cache/traceread``. Never beside or inside the input.
* Private: the directory is created 0700; a directory (or entry) owned by
  someone else, or writable by group / others, is not used at all.
* Key: resolved path + the source's identity (device, inode, size, mtime_ns,
  ctime_ns) + traceread version + event-table schema. An in-place edit that
  keeps the size and restores the mtime still changes the ctime (which no
  user can set), so it misses. On filesystems whose ctime is coarse, an entry
  stored less than ``RACY_S`` after the file's last change also records a
  content hash of the source, checked on every load (as git does for "racily
  clean" files).
* Each entry's file name carries a keyed BLAKE2 MAC of its bytes (key: a
  per-user secret in the directory, mode 0600): a damaged, foreign or planted
  entry fails the check and is rebuilt, never served.
* Writes are atomic (temp file + rename), so concurrent runs on one new file
  neither crash nor read a half-written entry; pruning removes only this
  module's own entries (name pattern + owner), oldest first beyond
  ``MAX_ENTRIES``.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import tempfile
from pathlib import Path

import msgspec
import pyarrow as pa

from ..errors import TraceError
from ..table import SCHEMA, Trace, TraceMeta, share_defaults

_META_KEY = b"traceread.meta.msgpack"
_SOURCE_KEY = b"traceread.source"
MAX_ENTRIES = 64  # oldest entries beyond this are removed after each store
MIN_BYTES = 16 << 20  # smaller files parse in well under a second: not worth an entry
RACY_S = 3.0  # a source changed this recently when stored also gets a content hash
_ENTRY_RE = re.compile(r"^[0-9a-f]{32}\.[0-9a-f]{32}\.parquet$")
_KEY_FILE = ".key"


def cache_dir() -> Path:
    env = os.environ.get("TRACEREAD_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "traceread"


def _version() -> str:
    from ..version import __version__

    return __version__


def worth_caching(path: str | os.PathLike) -> bool:
    """True for files big enough that a cache hit saves noticeable time."""
    try:
        from .stream import estimated_raw_size

        return estimated_raw_size(path) >= MIN_BYTES
    except (OSError, TraceError):
        return False


# --------------------------------------------------------------------------- identity

def _identity(st: os.stat_result) -> list:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def cache_key(path: str | os.PathLike) -> str:
    """Hex key of a file's identity (path, device, inode, size, mtime, ctime) +
    package version + schema."""
    p = Path(path).resolve()
    ident = "\0".join([str(p), *map(str, _identity(p.stat())), _version(),
                       SCHEMA.to_string(show_schema_metadata=False)])
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def content_hash(path: str | os.PathLike) -> str:
    """BLAKE2b of the whole file (only for sources changed just before caching)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- directory

def _private_dir(create: bool) -> Path | None:
    """The cache directory if it is safe to use (ours, 0700), else None."""
    d = cache_dir()
    try:
        if create and not d.exists():
            d.mkdir(parents=True, mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None  # a symlink, a file, or someone else's directory
    if st.st_mode & 0o077:
        try:  # ours but too open (made by an older version, or umask 000): tighten
            os.chmod(d, 0o700)
        except OSError:
            return None
    return d


def _secret(d: Path, create: bool) -> bytes | None:
    """The per-user MAC key (32 random bytes, mode 0600); None if unusable."""
    p = d / _KEY_FILE
    key = _read_key(p)
    if key is None and create:
        _make_key(d, p)
        key = _read_key(p)
    return key


def _read_key(p: Path) -> bytes | None:
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        key = f.read(64)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) != 32:
        return None
    return key


def _make_key(d: Path, p: Path) -> None:
    """Write the key whole or not at all (a temporary beside, then linked in): a run on a
    full disk left an empty ``.key`` that made every later run skip the cache. Our own
    damaged key (not 32 bytes) is replaced; anything else there is left alone."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError:
        return
    if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                           or st.st_size == 32):
        return
    tmp = d / f"{_KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        if st is None:
            os.link(tmp, p)     # another run's key, made first, wins
        else:
            os.replace(tmp, p)
    except OSError:
        pass
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _mac(key: bytes, data) -> str:
    return hashlib.blake2b(data, key=key, digest_size=16).hexdigest()


def _entries(d: Path, key: str | None = None) -> list[Path]:
    """This module's entries in ``d`` (all, or those of one key), newest first."""
    out = []
    for e in d.iterdir():
        if _ENTRY_RE.match(e.name) and (key is None or e.name.startswith(key + ".")):
            try:
                st = os.lstat(e)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                out.append((st.st_mtime_ns, e))
    return [e for _, e in sorted(out, reverse=True)]


def entry_path(path: str | os.PathLike) -> Path:
    """The current entry of ``path`` if there is one, else where its key points."""
    key = cache_key(path)
    d = cache_dir()
    try:
        found = _entries(d, key)
    except OSError:
        found = []
    return found[0] if found else d / f"{key}.parquet"


# --------------------------------------------------------------------------- load / store

def load(path: str | os.PathLike) -> Trace | None:
    """The cached Trace for ``path`` if there is a valid entry, else None."""
    try:
        d = _private_dir(create=False)
        secret = d and _secret(d, create=False)
        if not secret:
            return None
        key = cache_key(path)
        for entry in _entries(d, key):
            trace = _load_entry(entry, secret, path)
            if trace is not None:
                return trace
        return None
    except Exception:  # noqa: BLE001 - a bad cache entry is a miss, never an error
        return None


def _load_entry(entry: Path, secret: bytes, source) -> Trace | None:
    data = entry.read_bytes()
    if not hmac.compare_digest(entry.name.split(".")[1], _mac(secret, data)):
        return None  # damaged, or not written by us with our key
    # no reader thread: one still alive at interpreter exit aborts the process ("terminate
    # called without an active exception", apache/arrow#34314; 3 of 120 runs of four processes
    # sharing a new entry). read_table(use_threads=False) still starts one (the dataset
    # scanner's I/O thread: CI failed on it once more); ParquetFile.read starts none
    import pyarrow.parquet as pq  # here: a small trace, never cached, needs no Parquet

    table = _read_table(pq, data)
    del data
    md = table.schema.metadata or {}
    head = msgspec.json.decode(md.get(_SOURCE_KEY, b"null"))
    st = os.stat(source)
    if not isinstance(head, dict) or head.get("identity") != _identity(st):
        return None
    if head.get("content") and head["content"] != content_hash(source):
        return None
    raw = md.get(_META_KEY)
    if raw is None:
        return None
    meta = TraceMeta(**msgspec.msgpack.decode(raw))
    # the path as this run spelled it, not as the run that stored the entry did
    meta.path = str(os.fspath(source))
    table = _normalise(table.replace_schema_metadata(None))
    return None if table is None else Trace(table, meta)


def _read_table(pq, data: bytes) -> pa.Table:
    """The entry's table, read one column at a time on the system allocator, each
    all-default column as one shared array per type (``share_defaults``).

    A whole-file read held ~2.3x the table at its peak (the decoder's buffers of every
    column at once, on Arrow's mimalloc pool, which kept ~50 MB of them after a 113 MB
    table); column by column on the system allocator it holds ~1.05x, and the buffers the
    frame lets go (dictionary indices) return to the heap the passes reuse."""
    old = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())   # the reader takes the pool it opens with
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        schema = pf.schema_arrow
        cols = [pf.read(columns=[name], use_threads=False).column(0) for name in schema.names]
        del pf
    finally:
        pa.set_memory_pool(old)
    return pa.Table.from_arrays(cols, schema=schema)


def store(path: str | os.PathLike, trace: Trace, before: os.stat_result | None = None) -> Path | None:
    """Write ``trace`` as the cache entry of ``path``; None when it cannot be cached.

    ``before``: the source's stat taken before it was read; when the file
    changed since, nothing is stored (the table may not match either version).
    """
    try:
        meta_dict = trace.meta.to_dict()
        raw = msgspec.msgpack.encode(meta_dict)
        if msgspec.msgpack.decode(raw) != meta_dict:
            return None  # meta would not round-trip exactly (odd header values)
        st = os.stat(path)
        if before is not None and _identity(before) != _identity(st):
            return None
        d = _private_dir(create=True)
        secret = d and _secret(d, create=True)
        if not secret:
            return None
        head = {"identity": _identity(st), "path": str(Path(path).resolve()),
                "content": content_hash(path) if _racy(st) else None}
        table = trace.table.replace_schema_metadata(
            {_META_KEY: raw, _SOURCE_KEY: msgspec.json.encode(head)})
        entry = _write_entry(d, cache_key(path), secret, table)
        _prune(d, keep=entry)
        return entry
    except Exception:  # noqa: BLE001 - caching is best effort (read-only home, full disk)
        return None


def _racy(st: os.stat_result) -> bool:
    """Changed so recently that a later same-tick edit might keep every timestamp."""
    import time

    return time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9


def _write_entry(d: Path, key: str, secret: bytes, table: pa.Table) -> Path:
    import pyarrow.parquet as pq

    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd", compression_level=1)
        with open(tmp, "rb") as f:
            mac = _mac(secret, f.read())
        entry = d / f"{key}.{mac}.parquet"
        os.replace(tmp, entry)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in _entries(d, key):  # older versions of the same source
        if old != entry:
            _unlink(old)
    return entry


def _normalise(table: pa.Table) -> pa.Table | None:
    """One chunk per column, the exact SCHEMA types (Parquet may re-chunk) and one shared
    array per type for the all-default columns, as the reader built them (Parquet gives
    each its own: ~40 B a row more in the frame)."""
    if table.schema != SCHEMA:
        if table.schema.names != SCHEMA.names:
            return None
        table = table.cast(SCHEMA)
    return share_defaults(table.combine_chunks())


def _unlink(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False


def _prune(d: Path, keep: Path | None = None) -> None:
    """Remove this module's oldest entries beyond MAX_ENTRIES (never other files)."""
    for e in _entries(d)[MAX_ENTRIES:]:
        if e != keep:
            _unlink(e)


def clear() -> int:
    """Delete every cache entry (only this module's own files); returns how many."""
    d = _private_dir(create=False)
    if d is None:
        return 0
    return sum(_unlink(e) for e in _entries(d))


__all__ = ["worth_caching", "cache_dir", "cache_key", "entry_path", "load", "store", "clear",
           "content_hash"]
