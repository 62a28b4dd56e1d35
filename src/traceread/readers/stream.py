"""Streaming, multi-process ingest of big Kineto / Chrome JSON traces.

The small-file path (``kineto.read_kineto``) reads the whole file, decodes it
in one msgspec call and turns the events into column arrays. That holds the
raw bytes *and* every decoded event at once. Here, instead:

1. The ``traceEvents`` array is cut into chunks of ~``CHUNK_BYTES`` at event
   boundaries (``},`` + ``{``). A plain file is memory-mapped (never read
   whole); a gzip file is inflated as one stream (gzip is not splittable)
   with the fastest inflater available (python-isal, else stdlib).
2. Each chunk is decoded in a worker process with the same functions the
   small path uses (``_kineto_decode.decode_events`` + ``events_to_batch``);
   the worker de-duplicates the string columns so only column arrays and one
   object per distinct string travel back.
3. The batches are joined in file order (``concat_batches``) and finished by
   the very same trace-wide code as the small path (``kineto._columns``,
   ``_meta``, ``build_table``), so both paths give the same table bit for bit.

A boundary found by the byte scan may, in theory, sit inside a JSON string or
a nested object. Such a cut always makes the chunk before it invalid JSON (it
starts at a true boundary and ends inside a string or an open object), so a
chunk that fails to decode is merged with the next one and decoded again;
only a failure that merging cannot fix is reported as bad input.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import mmap
import multiprocessing as mp
import os
import time
import zlib
from collections import deque
from itertools import chain, repeat
from operator import is_not
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from .detect import GZ_RATIO_GUESS, estimated_raw_size, read_head, sniff  # noqa: F401
from ..errors import TraceError
from ..table import Trace, build_table, release_heap
from ._json_edges import inflate_cap_message, max_inflated
from . import _kineto_decode as dec
from . import _native
from .common import Chunk, coerce_event, json_error, mark_truncated, not_a_trace, progress_bar
# (re-exported: the byte-level helpers lived here before; tests and callers use them)
from ._json_edges import (_BOUNDARY_ANY, _BOUNDARY_NL, _HEAD_SCAN, _KEY_RE, _TAIL_SCAN,  # noqa: F401
                          Inflater, NotRecoverable, Truncated, _last_boundary, _next_start,
                          _zlib, check_cut, close_document, find_array_end, find_array_start,
                          find_boundary, last_complete_event, recover_cut, truncation_info)

CHUNK_BYTES = 16 << 20          # decoded per task; ~0.25 s of work, ~80 MB peak per worker
STREAM_MIN_BYTES = 32 << 20     # read() streams files at least this big (uncompressed estimate);
                                # at 61 MB both paths take ~1.5 s, streaming peaks at 215 vs 347 MB
STREAM_MIN_BYTES_NATIVE = 2 << 20  # with the native decoder streaming wins from ~1 MB (1 worker)

# A mis-cut heals after one merge; a chunk still invalid at this many chunk sizes
# (or 1 MB) is bad JSON, reported as such -- memory stays bounded either way.
_MERGE_CHUNKS = 4


def stream_min_bytes() -> int:
    """Uncompressed size (estimate) from which ``read()`` takes this path."""
    if _native.wanted():
        return min(STREAM_MIN_BYTES, STREAM_MIN_BYTES_NATIVE)
    return STREAM_MIN_BYTES


# --- worker side ----------------------------------------------------------------

STR_LISTS = ("ph", "name", "cat")


def _code(values: list):
    """(codes, uniques) for a list of str/None; the list itself if it holds anything else."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    try:
        codes, uniques = pd.factorize(arr, use_na_sentinel=True)
    except TypeError:  # unhashable oddities
        return values
    if not all(type(u) is str for u in uniques) or int((codes < 0).sum()) != values.count(None):
        return values  # ints/floats/bools: keep the exact objects
    return codes.astype(np.int32), list(uniques)


def _uncode(coded) -> list:
    if isinstance(coded, list):
        return coded
    codes, uniques = coded
    table = np.empty(len(uniques) + 1, dtype=object)
    table[:-1] = uniques
    table[-1] = None  # code -1
    return table[codes].tolist()


def _pack_ints(a: np.ndarray):
    """A mostly -1 int64 column as (int32 rows, values); the array itself otherwise.

    Copy / collective args, the 1.8-era external id and the device / stream of
    GPU rows are -1 on most rows: stored sparse the parent holds ~70 B/row less.
    """
    rows = np.flatnonzero(a != -1)
    if len(rows) * 3 > len(a) or len(a) >= 2**31:
        return a
    return rows.astype(np.int32), a[rows]


def _unpack_into(out: np.ndarray, off: int, n: int, packed) -> None:
    if isinstance(packed, tuple):
        rows, vals = packed
        out[off + rows.astype(np.int64)] = vals
    else:
        out[off:off + n] = packed


def _to_chunk(batch: dec.Batch) -> Chunk:
    arrays = {"pid": batch.pid, "tid": batch.tid, "ts_ns": batch.ts_ns, "dur_ns": batch.dur_ns}
    arrays.update(batch.ints)
    arrays = {k: _pack_ints(a) for k, a in arrays.items()}
    sparse = {}
    for f, vals in batch.strs.items():
        rows = np.flatnonzero(np.fromiter(map(is_not, vals, repeat(None)), dtype=bool,
                                          count=len(vals)))
        present = [vals[i] for i in rows.tolist()]
        # shapes / grid sit on every cpu_op / kernel: ship codes, not one str per row
        sparse[f] = (rows, _code(present) if f in dec.DENSE_STR_FIELDS else present)
    return Chunk(n=batch.n, strs_coded={k: _code(getattr(batch, k)) for k in STR_LISTS},
                 sparse=sparse, arrays=arrays, pid_str=batch.pid_str, tid_str=batch.tid_str,
                 ts_lossy=batch.ts_lossy, meta_events=batch.meta_events)


def _join_codes(parts: list, n_all: int):
    """Chunks' (codes, uniques) -> one dictionary array with a running global dictionary.

    Dictionary in first-appearance order over the whole file and int32 codes,
    i.e. what ``kineto._dict_encode`` gives for the joined list -- without the
    list (8 B/row) or its object-array copy. None when a chunk kept a plain list.
    """
    joined = _join_code_parts(parts, n_all)
    if joined is None:
        return None
    codes, uniques = joined
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0),
                                          pa.array(uniques, type=pa.string()))


def _join_code_parts(parts: list, n_all: int):
    """(int32 codes, uniques) over all chunks, or None when a chunk kept a plain list."""
    if any(isinstance(p, list) for p in parts):
        return None
    index: dict = {}
    codes = np.empty(n_all, dtype=np.int32)
    pos = 0
    for c, uniques in parts:
        remap = np.array([index.setdefault(u, len(index)) for u in uniques] + [-1],
                         dtype=np.int32)
        codes[pos:pos + len(c)] = remap[c]  # code -1 picks the trailing -1
        pos += len(c)
    return codes, list(index)


def _join_sparse_ints(parts: list, offs: np.ndarray) -> tuple:
    """Chunks' packed int columns (see ``_pack_ints``) -> global (rows, values)."""
    rows, vals = [], []
    for p, off in zip(parts, offs.tolist()):
        if isinstance(p, tuple):
            r, v = p
            r = r.astype(np.int64)
        else:
            r = np.flatnonzero(p != -1)
            v = p[r]
        rows.append(r + off)
        vals.append(v)
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(rows), np.concatenate(vals).astype(np.int64)


def _join_sparse_codes(parts: list, offs: np.ndarray, n_all: int) -> pa.DictionaryArray:
    """Chunks' (rows, (codes, uniques)) -> one dictionary array, null where absent.

    Dictionary in first-appearance order over the file, as ``kineto._dict_encode``
    gives for the joined list.
    """
    index: dict = {}
    codes = np.full(n_all, -1, dtype=np.int32)
    for (rows, (c, uniques)), off in zip(parts, offs.tolist()):
        remap = np.array([index.setdefault(u, len(index)) for u in uniques] + [-1],
                         dtype=np.int32)
        codes[rows.astype(np.int64) + off] = remap[c]
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0),
                                          pa.array(list(index), type=pa.string()))


class SparseColumn:
    """Read-only list stand-in for a mostly-None column: len, [i], iteration.

    Collective / memcpy-direction args exist on a handful of rows; a real list
    would cost 8 bytes per row per field (6 fields) for Nones.
    """

    def __init__(self, n: int, rows: np.ndarray, values: list):
        self.n = n
        self.rows = rows
        self.values = values
        self.index = dict(zip(rows.tolist(), values))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        i = int(i)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.index.get(i)

    def __iter__(self):
        segs = []
        prev = 0
        for r, v in zip(self.rows.tolist(), self.values):
            segs.append(repeat(None, r - prev))
            segs.append((v,))
            prev = r + 1
        segs.append(repeat(None, self.n - prev))
        return chain.from_iterable(segs)


# Int args on few rows whose readers (``kineto._unsorted_columns``) take either form:
# copy sizes, collective args, the 1.8-era external id. Dense, each is 8 B/row of -1.
RARE_INT_FIELDS = dec.COPY_INT_FIELDS + dec.COLL_INT_FIELDS + ("external_id_old",)


def chunks_to_batch(chunks: list) -> dec.Batch:
    """Join chunks (file order) into one ``Batch``, freeing each part as it is used."""
    n_all = sum(c.n for c in chunks)
    offs = np.cumsum([0] + [c.n for c in chunks])
    lists = {}
    for k in STR_LISTS:
        parts = [c.strs_coded.pop(k) for c in chunks]
        if k == "ph":  # a few distinct values: kept as codes (dec.CodedList)
            coded = _join_code_parts(parts, n_all)
            joined = dec.CodedList(*coded) if coded is not None else None
        else:
            joined = _join_codes(parts, n_all)
        if joined is None:  # a chunk with non-str values
            joined = []
            for part in parts:
                joined.extend(_uncode(part))
        lists[k] = joined
        del parts
    arrays = {}
    for k in dec.SPARSE_INT_FIELDS:  # stay (rows, values): the reader expands one at a time
        arrays[k] = _join_sparse_ints([c.arrays.pop(k) for c in chunks], offs)
    for k in RARE_INT_FIELDS:  # (rows, values) when rare: the reader reads them at few rows
        parts = [c.arrays[k] for c in chunks]
        if sum(len(p[0]) if isinstance(p, tuple) else len(p) for p in parts) * 3 <= n_all:
            arrays[k] = _join_sparse_ints(parts, offs)
            for c in chunks:
                del c.arrays[k]
        del parts
    for k in ("pid", "tid", "ts_ns", "dur_ns") + dec.ARG_INT_FIELDS:
        if k in arrays:
            continue
        out = np.full(n_all, -1, dtype=np.int64)
        for c, off in zip(chunks, offs.tolist()):
            _unpack_into(out, off, c.n, c.arrays.pop(k))
        arrays[k] = out
        release_heap()  # the chunks' parts are small heap blocks: hand them back now
    strs = {}
    for f in dec.DENSE_STR_FIELDS:
        strs[f] = _join_sparse_codes([c.sparse.pop(f) for c in chunks], offs, n_all)
    for f in dec.ARG_STR_FIELDS:
        if f in strs:
            continue
        rows = [c.sparse[f][0] + off for c, off in zip(chunks, offs)]
        vals = [v for c in chunks for v in c.sparse[f][1]]
        strs[f] = SparseColumn(n_all, np.concatenate(rows) if rows else np.empty(0, np.int64),
                               vals)
    pid_str, tid_str = {}, {}
    for c, off in zip(chunks, offs.tolist()):
        pid_str.update({off + k: v for k, v in c.pid_str.items()})
        tid_str.update({off + k: v for k, v in c.tid_str.items()})
    return dec.Batch(n=n_all, ph=lists["ph"], name=lists["name"], cat=lists["cat"],
                     pid=arrays["pid"], tid=arrays["tid"], pid_str=pid_str, tid_str=tid_str,
                     ts_ns=arrays["ts_ns"], dur_ns=arrays["dur_ns"],
                     ts_lossy=any(c.ts_lossy for c in chunks),
                     ints={f: arrays[f] for f in dec.ARG_INT_FIELDS}, strs=strs,
                     meta_events=[m for c in chunks for m in c.meta_events])


def decode_chunk(buf, exact: bool = False, lenient: bool = False, native: bool = True) -> Chunk:
    """``[`` + events + ``]`` bytes -> Chunk. Raises msgspec errors."""
    if native and not lenient:  # native decoder when built; it declines odd chunks (None)
        chunk = _native.decode(buf, exact)
        if chunk is not None:
            return chunk
    if lenient:

        etype = dec.ExactEvent if exact else dec.Event
        raw = msgspec.json.Decoder(float_hook=dec.Decimal if exact else None).decode(buf)
        if not isinstance(raw, list):
            raise msgspec.DecodeError("chunk is not an array")
        events = [e for e in (coerce_event(x, etype) for x in raw) if e is not None]
    else:
        events = dec.decode_events(buf, exact=exact)
    batch = dec.events_to_batch(events)
    del events
    return _to_chunk(batch)


def _wrap(view) -> bytearray:
    buf = bytearray(len(view) + 2)
    buf[0] = 0x5B  # [
    buf[1:-1] = view
    buf[-1] = 0x5D  # ]
    return buf


def _decode_range(path: str, start: int, end: int, exact: bool, lenient: bool):
    """Worker task for a memory-mapped plain file: bytes [start, end) are events."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        with memoryview(mm)[start:end] as view:
            chunk = _native_bare(view, exact, lenient)
            if chunk is not None:
                return "ok", chunk
            buf = _wrap(view)
    return _decode_guarded(buf, exact, lenient, native=False)


def _native_bare(view, exact: bool, lenient: bool):
    """The native decode of the events in place (no ``[`` ``]`` copy); None: not done."""
    return None if lenient else _native.decode(view, exact, bare=True)


def _decode_range_item(path: str, exact: bool, lenient: bool, r: tuple):
    return _decode_range(path, r[0], r[1], exact, lenient)


def _decode_bytes_item(exact: bool, lenient: bool, item: tuple):
    return _decode_bytes(item[0], exact, lenient)


def _decode_bytes(buf: bytes, exact: bool, lenient: bool):
    chunk = _native_bare(buf, exact, lenient)
    if chunk is not None:
        return "ok", chunk
    return _decode_guarded(_wrap(buf), exact, lenient, native=False)


def _decode_guarded(buf, exact: bool, lenient: bool, native: bool = True):
    """-> ("ok", chunk) | ("invalid" | "types" | "bad", message) (pickle-safe).

    "bad" is content no retry can fix (a name that is an object, a timestamp
    out of range, nesting too deep); invalid UTF-8 is repaired, not refused.
    """
    try:
        return "ok", _decode_repairing(buf, exact, lenient, native)
    except msgspec.ValidationError as e:
        return "types", str(e)
    except msgspec.DecodeError as e:
        return "invalid", str(e)
    except dec.BadEvent as e:
        return "bad", str(e)
    except RecursionError:
        return "bad", dec.nesting_reason(buf)


def _decode_repairing(buf, exact: bool, lenient: bool, native: bool = True) -> Chunk:
    """``decode_chunk``, again with U+FFFD for invalid UTF-8 if the bytes need it."""
    try:
        return decode_chunk(buf, exact, lenient, native)
    except (UnicodeDecodeError, msgspec.DecodeError) as e:
        if not dec.utf8_error(e):
            raise
        chunk = decode_chunk(dec.utf8_repaired(buf), exact, lenient, native)
        chunk.utf8_repaired = True
        return chunk


def _no_events(buf, whole: bool) -> str:
    """Reason for a document without traceEvents (the small path's wording if we can)."""
    if whole:

        data = bytes(buf)
        try:
            msgspec.json.decode(data)
        except msgspec.DecodeError as e:
            return json_error(e, len(data))
        return not_a_trace(data)
    return "JSON but no traceEvents array in the first 64 MB: not a trace"


# --- drivers -----------------------------------------------------------------------

def _pool(workers: int):
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


WORKERS_ENV = "TRACEREAD_WORKERS"


def env_workers() -> int | None:
    """``$TRACEREAD_WORKERS`` as a worker count (benchmarks, pinned jobs); None if unset."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        raise TraceError(WORKERS_ENV, f"must be a whole number of workers, not {text!r}") from None
    return max(1, n)


def default_workers() -> int:
    """Worker processes worth starting: the cores that are idle right now.

    On a busy machine a pool only adds pickling and page-fault overhead (measured:
    2 workers slower than in-process decode at load average ~4 on 2 cores), so
    with no idle core the chunks are decoded in this process.
    """
    cores = os.cpu_count() or 1
    if cores == 1:
        return 1
    at, n = _LAST_DEFAULT
    if time.monotonic() - at < _DEFAULT_REUSE_S:  # the read just sampled: the passes reuse it
        return n
    n = max(1, min(int(_idle_cores(cores) + 0.5), cores, 8))
    _LAST_DEFAULT[:] = [time.monotonic(), n]
    return n


_LAST_DEFAULT: list = [-1e9, 1]   # (monotonic time, workers) of the last sample
_DEFAULT_REUSE_S = 10.0   # the sample sleeps 0.1 s; a read and its analysis share one


def _idle_cores(cores: int, interval: float = 0.1) -> float:
    """Idle cores over a short sample of /proc/stat (Linux); load average elsewhere.

    The 1-minute load average lags (it still counts a process that just ended),
    so the direct sample is preferred.
    """
    def sample():
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        return vals[3] + (vals[4] if len(vals) > 4 else 0), sum(vals)

    try:
        i0, t0 = sample()
        time.sleep(interval)
        i1, t1 = sample()
        return cores * (i1 - i0) / max(1, t1 - t0)
    except (OSError, ValueError, IndexError):
        try:
            return cores - os.getloadavg()[0]
        except OSError:
            return float(cores)


class _Bad(Exception):
    """A chunk decode problem the driver handles (retry exact / lenient / merge)."""

    def __init__(self, kind: str, msg: str):
        self.kind, self.msg = kind, msg


def read_stream(path: str | os.PathLike, progress: bool = False, workers: int | None = None,
                chunk_bytes: int = CHUNK_BYTES, strict: bool = False) -> Trace:
    """Streaming equivalent of ``read_kineto``: same ``Trace``, bounded memory.

    A file cut short is read up to its last complete event (``strict``: refused).
    """
    p = Path(path)
    fmt = sniff(p)
    if fmt == "sqlite":
        raise TraceError(p, "is an SQLite database, not a JSON trace")

    if not workers:
        workers = env_workers()
    if not workers:  # a pool costs ~0.3 s to start: only for files of several chunks
        workers = max(1, min(default_workers(), estimated_raw_size(p) // (2 * chunk_bytes)))
    exact = lenient = False
    with progress_bar(p, progress) as tick:
        while True:  # at most three passes: float ts, then exact ts, then lenient types
            try:
                cut: dict = {}
                if fmt == "json.gz":
                    prefix, suffix, batches = _gz_batches(p, workers, chunk_bytes, exact,
                                                          lenient, tick, cut, strict)
                else:
                    prefix, suffix, batches = _mmap_batches(p, workers, chunk_bytes, exact,
                                                            lenient, tick, cut, strict)
            except _Bad as bad:
                if bad.kind == "lossy" and not exact:
                    exact = True
                    continue
                if bad.kind == "types" and not lenient:
                    lenient = True
                    continue
                raise TraceError(p, bad.msg) from None
            break
        tick("table")
        trace = _finish(p, prefix, suffix, batches, exact, lenient)
        if cut:
            mark_truncated(trace, cut)
        tick("done")
    return trace


def _finish(p: Path, prefix: bytes, suffix: bytes, batches: list, exact: bool,
            lenient: bool) -> Trace:
    from . import kineto as K

    top_list = not prefix.strip().startswith(b"{")
    if top_list:
        doc = []
    else:
        skeleton = prefix + b"[]" + suffix
        try:
            doc = msgspec.json.decode(skeleton, type=K._EXACT_DOC_TYPE if exact else K._DOC_TYPE)
        except msgspec.ValidationError:
            doc, _, _ = K._decode_lenient(p, skeleton, exact)
        except msgspec.DecodeError as e:
            raise TraceError(p, json_error(e, len(skeleton))) from None
    repaired = any(c.utf8_repaired for c in batches)
    batch = chunks_to_batch(batches) if batches else dec.events_to_batch([])
    batches.clear()
    release_heap()
    header = K._header(doc)
    fmt_name = K._format_name(header, batch, top_list)
    meta = K._meta(p, header, batch, fmt_name)
    if lenient:
        meta.extra["lenient_decode"] = True
    if repaired:
        meta.extra["invalid_utf8_replaced"] = True
    meta.extra["exact_ts_decode"] = bool(exact and batch.n)
    try:
        cols, n = K._columns(batch, fmt_name, header, meta)
    except dec.BadEvent as e:
        raise TraceError(p, str(e)) from None
    del batch
    table = build_table(cols, n, consume=True)
    del cols
    release_heap()
    return Trace(table, meta)


def _check(result, batches: list, where: str = "") -> None:
    status, val = result
    if status == "types":
        raise _Bad("types", val)
    if status == "bad":
        raise _Bad("bad", f"{val}{where}")
    if status != "ok":
        raise _Bad("invalid", _chunk_error(val, where))
    if val.ts_lossy:
        raise _Bad("lossy", "")
    batches.append(val)


def _chunk_error(msg: str, where: str) -> str:
    if "truncated" in msg.lower():
        return f"truncated JSON{where} (file cut short?)"
    return f"invalid JSON{where}: {msg}"


class _Done:
    """A result computed in this process, standing in a queue of futures."""

    def __init__(self, value):
        self.value = value

    def done(self) -> bool:
        return True

    def result(self):
        return self.value

    def cancel(self) -> bool:
        return False


def _map_ordered(fn, items, workers: int, helps: bool = False):
    """Yield (item, fn(item)) in order; fn runs on a process pool when workers > 1.

    At most ``workers + 1`` tasks are in flight, so memory stays flat while the
    producer (mmap splitter or gzip inflater) runs ahead in this process.
    ``helps``: this process is one of the ``workers`` (its producer is idle, as
    the mmap splitter is): the pool has one process fewer, and when all of
    them are busy this process decodes the next item itself -- that chunk is
    never pickled, and one fork less.
    """
    if workers <= 1:
        for it in items:
            yield it, fn(it)
        return
    procs = workers - 1 if helps else workers
    with _pool(procs) as pool:
        futs: deque = deque()
        try:
            for it in items:
                if helps and sum(not f.done() for _, f in futs) >= procs:
                    futs.append((it, _Done(fn(it))))
                else:
                    futs.append((it, pool.submit(fn, it)))
                while futs and futs[0][1].done():  # in order, as soon as they are there
                    it0, fut = futs.popleft()
                    yield it0, fut.result()
                if len(futs) > workers:
                    it0, fut = futs.popleft()
                    yield it0, fut.result()
            while futs:
                it0, fut = futs.popleft()
                yield it0, fut.result()
        finally:
            for _, fut in futs:
                fut.cancel()


def _collect(pairs, fn, merge, where, size, merge_cap: int, tick=None, done=None) -> list:
    """Check results in order; a chunk that is not valid JSON is merged with the next."""
    batches: list = []
    held = None
    for item, res in pairs:
        if tick is not None:
            tick("parse", done(item))
        if held is not None:
            item = merge(held, item)
            res = fn(item)
        if res[0] == "invalid" and size(item) < merge_cap:
            held, held_res = item, res
            continue
        held = None
        _check(res, batches, where(item))
    if held is not None:
        _check(held_res, batches, where(held))
    return batches


def _mmap_batches(p: Path, workers: int, chunk_bytes: int, exact: bool, lenient: bool,
                  tick=None, cut: dict | None = None, strict: bool = False):
    try:
        f = open(p, "rb")
    except OSError as e:
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    with f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        size = len(mm)
        start = find_array_start(memoryview(mm)[:min(size, _HEAD_SCAN)])
        if start < 0:
            raise _Bad("invalid", _no_events(mm, size <= _HEAD_SCAN))
        refuse_zeros(mm, start, size)
        prefix = _no_bom(bytes(mm[:start - 1]))
        end = find_array_end(mm, start, prefix)
        if end >= 0:
            suffix = bytes(mm[end + 1:])
        else:
            end, suffix = _recover_mmap(mm, start, prefix, strict, cut)
        ranges = _split(mm, start, end, chunk_bytes)
    fn = functools.partial(_decode_range_item, str(p), exact, lenient)
    batches = _collect(_map_ordered(fn, ranges, min(workers, len(ranges)), helps=True), fn,
                       lambda a, b: (a[0], b[1]), lambda r: f" in bytes {r[0]}-{r[1]}",
                       lambda r: r[1] - r[0], max(_MERGE_CHUNKS * chunk_bytes, 1 << 20),
                       tick, lambda r: r[1] / max(1, size))
    return prefix, suffix, batches


def _recover_mmap(mm, start: int, prefix: bytes, strict: bool, cut: dict | None):
    """(end of the recovered events, skeleton suffix) of a plain file cut short."""
    try:
        end = recover_cut(mm, start, prefix)
    except NotRecoverable as e:
        raise _Bad("invalid", str(e)) from None
    if strict:
        raise _Bad("invalid", f"truncated JSON at byte {len(mm)} (traceEvents array never "
                              "closed; file cut short?)")
    if cut is not None:
        cut.update(truncation_info(len(mm), end, len(mm)))
    top_list = not prefix.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    return end, (b"" if top_list else b"}")


def refuse_zeros(buf, start: int, size: int) -> None:
    """Refuse a file whose events are NUL bytes (a sparse or preallocated file) at the
    first NUL, before any scan of the rest: no JSON text holds a raw NUL, and scanning an
    8 GiB hole for event boundaries took 50 s and 20 GB (issue 23)."""
    i = start
    while i < size and i < start + 4096 and buf[i] in b" \t\r\n":
        i += 1
    if i < size and buf[i] == 0:
        raise _Bad("invalid", f"invalid JSON at byte {i}: a NUL byte cannot continue the "
                              "document (a sparse or zero-filled file?)")
    if size and buf[size - 1] == 0:
        lo, hi = start, size - 1      # the zero tail's first byte: buf[hi] == 0
        while lo < hi:                # binary search, trusting that a hole is one run
            mid = (lo + hi) // 2
            if buf[mid] == 0:
                hi = mid
            else:
                lo = mid + 1
        raise _Bad("invalid", f"invalid JSON at byte {hi}: a NUL byte cannot continue the "
                              "document (a file padded with zeros?)")


def _split(buf, start: int, end: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Cut buf[start:end] (the array body) into event-aligned ranges."""
    ranges = []
    a = start
    while a < end:
        if end - a <= chunk_bytes * 3 // 2:
            ranges.append((a, end))
            break
        cut = find_boundary(buf, a + chunk_bytes, end)
        if cut < 0:
            ranges.append((a, end))
            break
        ranges.append((a, cut))
        a = _next_start(buf, cut)
    return ranges


class _GzChunks:
    """Iterate event-aligned chunks of an inflating gzip stream; sets prefix/suffix."""

    def __init__(self, p: Path, chunk_bytes: int, strict: bool = False):
        self.p, self.chunk_bytes, self.strict = p, chunk_bytes, strict
        self.prefix = self.suffix = b""
        self.inflated = 0
        self.gz_cut = False   # the compressed stream ended early (not strict: read on)
        self.cut: dict = {}   # truncation_info when the JSON was cut short

    def __iter__(self):
        try:
            f = open(self.p, "rb")
        except OSError as e:
            raise TraceError(self.p, f"cannot read: {e.strerror or e}") from None
        with f:
            self.csize = os.fstat(f.fileno()).st_size
            self.cap = max_inflated(self.csize)
            yield from self._chunks(Inflater(f))

    def _read(self, f) -> bytes:
        if self.gz_cut:
            return b""
        try:
            b = f.read(self.chunk_bytes)
        except EOFError:
            if self.strict:
                raise _Bad("invalid", "truncated gzip: compressed data ends early") from None
            self.gz_cut = True  # everything inflated so far is kept; the cut is handled below
            return b""
        except (OSError, zlib.error, getattr(_zlib, "error", zlib.error)) as e:
            raise _Bad("invalid", f"corrupt gzip: {e}") from None
        self.inflated += len(b)
        if self.cap and self.inflated > self.cap:
            raise _Bad("invalid", inflate_cap_message(self.cap, self.csize))
        return b

    def _chunks(self, f):
        buf = bytearray()
        start = -1
        while start < 0:
            block = self._read(f)
            if not block:
                break
            buf += block
            start = find_array_start(buf)
            if start < 0 and len(buf) > _HEAD_SCAN:
                break
        if start < 0:
            if not buf.strip():
                raise _Bad("invalid", "empty after gunzip")
            raise _Bad("invalid", _no_events(buf, len(buf) <= _HEAD_SCAN))
        self.prefix = _no_bom(bytes(buf[:start - 1]))
        del buf[:start]
        while True:
            block = self._read(f)
            if not block:
                break
            buf += block
            # keep a tail of whole events back: at EOF the closing "]" is found by
            # checking that the item before it is an event, which needs one intact
            keep = min(4 * self.chunk_bytes, 1 << 20)
            if len(buf) < self.chunk_bytes + keep:
                continue
            hi = len(buf) - keep
            cut = _last_boundary(buf, max(0, hi - (1 << 20)), hi)
            if cut < 0:
                continue
            nxt = _next_start(buf, cut)
            with memoryview(buf) as mv:  # one copy (buf[:cut] would copy once more)
                item = (bytes(mv[:cut]), bytes(mv[cut:nxt]))  # events, separator after them
            del buf[:nxt]
            yield item
        end = find_array_end(buf, 0, self.prefix)
        if end >= 0:
            self.suffix = bytes(buf[end + 1:])
        else:
            end = self._recover(buf)
        with memoryview(buf) as mv:
            last = bytes(mv[:end]).strip()
        del buf
        if last:
            yield last, b""


    def _recover(self, buf) -> int:
        """End of the recoverable events in the unyielded tail ``buf`` of a cut stream."""
        where = " of the inflated data"
        try:
            end = recover_cut(buf, 0, self.prefix, where)
        except NotRecoverable as e:
            raise _Bad("invalid", str(e)) from None
        if self.strict:
            raise _Bad("invalid", f"truncated JSON at byte {self.inflated}{where} "
                                  "(traceEvents array never closed; file cut short?)")
        top_list = not self.prefix.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
        self.suffix = b"" if top_list else b"}"
        base = self.inflated - len(buf)  # inflated offset of buf[0]
        self.cut = truncation_info(self.inflated, base + end, self.inflated,
                                   gzip_stream_cut=self.gz_cut)
        return end


def _gz_batches(p: Path, workers: int, chunk_bytes: int, exact: bool, lenient: bool,
                tick=None, cut: dict | None = None, strict: bool = False):
    """Inflate here (one stream: gzip is not splittable); decode chunks in workers."""
    chunks = _GzChunks(p, chunk_bytes, strict)
    guess = max(1, estimated_raw_size(p))
    fn = functools.partial(_decode_bytes_item, exact, lenient)
    # a merge keeps the original separator bytes: a mis-cut may sit inside a string
    batches = _collect(_map_ordered(fn, chunks, workers), fn,
                       lambda a, b: (a[0] + a[1] + b[0], b[1]),
                       lambda d: " in the inflated data", lambda d: len(d[0]),
                       max(_MERGE_CHUNKS * chunk_bytes, 1 << 20),
                       tick, lambda d: min(0.99, chunks.inflated / guess))
    if cut is not None:
        if chunks.cut:
            cut.update(chunks.cut)
        elif chunks.gz_cut:  # the JSON happened to be complete: nothing lost but the trailer
            cut.update(truncation_info(chunks.inflated, chunks.inflated, chunks.inflated,
                                       gzip_stream_cut=True))
    return chunks.prefix, chunks.suffix, batches


__all__ = ["read_stream", "decode_chunk", "find_boundary", "find_array_start", "find_array_end",
           "estimated_raw_size", "STREAM_MIN_BYTES", "CHUNK_BYTES", "stream_min_bytes"]


def _no_bom(prefix: bytes) -> bytes:
    """The document's text before traceEvents' ``[``, without a UTF-8 BOM (a decoder
    of the prefix alone would refuse it; RFC 8259 lets a reader ignore it)."""
    return prefix[3:] if prefix.startswith(b"\xef\xbb\xbf") else prefix
