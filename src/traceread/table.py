"""The event table: one columnar schema shared by every reader.

Every reader (Kineto JSON, nsys SQLite, generic Chrome JSON) produces a
``pyarrow.Table`` with exactly the columns of ``SCHEMA``, sorted by ``ts``.
Passes read it as a pandas DataFrame (``Trace.events``). The meaning of each
column is documented in ``docs/event-table.md``; keep the two in step.

Integer columns use ``-1`` for "not known / not applicable" rather than nulls:
sentinel integers keep numpy fast paths (no masked arrays) in every pass.
String columns are dictionary-encoded and may be null.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

# The closed set of event kinds. Readers map every source category onto one.
KINDS = (
    "cpu_op",          # framework operator on a host thread (aten::mm, autograd nodes)
    "python",          # python function frame (with_stack / python tracer)
    "annotation",      # host range: record_function, ProfilerStep#N, NVTX push/pop or start/end
    "runtime",         # CUDA/HIP runtime API call (cudaLaunchKernel, hipMemcpyAsync, ...)
    "driver",          # CUDA driver API call (cuLaunchKernel, ...)
    "kernel",          # GPU kernel execution
    "memcpy",          # GPU memory copy
    "memset",          # GPU memory set
    "gpu_annotation",  # range projected onto a GPU stream (Kineto gpu_user_annotation)
    "sync",            # synchronization record (Kineto cuda_sync, nsys SYNCHRONIZATION)
    "osrt",            # OS runtime call (nsys OSRT_API: poll, ioctl, sem_wait, ...)
    "instant",         # zero-duration marker ('i' phase: [memory], overhead markers)
    "other",           # anything else (trace spans, generic Chrome events)
    "graph",           # one CUDA graph replay as a single GPU interval (nsys GRAPH_TRACE,
                       # --cuda-graph-trace=graph); never beside node rows of the same replay
)
# GPU busy time. A `graph` row stands for the kernels of one replay that the trace did
# not record one by one, so unions and sums over these kinds never count a replay twice.
GPU_OP_KINDS = ("kernel", "memcpy", "memset", "graph")

# Name rules (kernel classes, frameworks, collectives) read at most this many characters of
# a name: every real marker sits in the first few hundred, and a 64,000-character name
# must not cost 64,000 steps per pattern (issue 23, docs/robustness.md).
NAME_SCAN_CHARS = 2048


def scan_name(name: str) -> str:
    """The part of ``name`` that name patterns read (its first ``NAME_SCAN_CHARS``)."""
    return name if len(name) <= NAME_SCAN_CHARS else name[:NAME_SCAN_CHARS]
HOST_KINDS = ("cpu_op", "python", "annotation", "runtime", "driver", "osrt")

_STR = pa.dictionary(pa.int32(), pa.string())

# (column, arrow type, description) -- the single source of truth for the schema.
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("ts", pa.int64(), "start, integer ns on the trace clock (see TraceMeta.clock)"),
    ("dur", pa.int64(), "duration in ns; 0 for instants"),
    ("kind", _STR, "one of KINDS"),
    ("name", _STR, "event name (kernel demangled name, op name, API name without _vNNNN)"),
    ("cat", _STR, "source category (Kineto 'cat', or nsys table name)"),
    ("pid", pa.int64(), "host process id (for GPU ops: the launching process if known)"),
    ("tid", pa.int64(), "host thread id; -1 for GPU ops"),
    ("device", pa.int32(), "GPU device index; -1 on host"),
    ("stream", pa.int64(), "GPU stream id; -1 on host"),
    ("correlation", pa.int64(), "links a runtime/driver call to its GPU op; -1 if none"),
    ("external_id", pa.int64(), "links a cpu_op to the runtime calls it issued; -1 if none"),
    ("bytes", pa.int64(), "memcpy/memset size in bytes; -1 if none"),
    ("copy_kind", _STR, "memcpy direction: HtoD, DtoH, DtoD, HtoH, PtoP, ..."),
    ("collective", _STR, "collective type: all_reduce, all_gather, reduce_scatter, ..."),
    ("msg_nelems", pa.int64(), "collective message element count; -1 if unknown"),
    ("msg_bytes", pa.int64(), "collective message size in bytes; -1 if unknown"),
    ("dtype", _STR, "collective element dtype"),
    ("group_size", pa.int32(), "collective process-group size; -1 if unknown"),
    ("process_group", _STR, "collective process-group name/description"),
    ("seq", pa.int64(), "collective sequence number within its process group; -1 if unknown"),
    ("domain", _STR, "NVTX domain of an nsys annotation (e.g. NCCL); null otherwise"),
    ("short_name", _STR, "nsys kernel short name; null otherwise"),
    ("raw_name", _STR, "name exactly as the source recorded it, for rows whose `name` a reader "
                       "normalises (nsys API calls: with any _vNNNN suffix); null otherwise"),
    ("graph_id", pa.int32(), "CUDA graph id of a graph replay row, or of a GPU op a graph "
                             "replay ran (nsys graphId); -1 if none / unknown"),
    ("input_dims", _STR, "cpu_op input shapes as JSON text, e.g. [[8, 64], [64, 32], []] "
                         "(Kineto 'Input Dims', record_shapes=True); null otherwise"),
    ("input_type", _STR, "cpu_op input dtypes as JSON text, e.g. [\"c10::BFloat16\", \"Scalar\"]"),
    ("concrete_inputs", _STR, "cpu_op scalar/list argument values as JSON text, e.g. "
                              "[\"\",\"\",\"[2, 2]\"] (Kineto 'Concrete Inputs'); null otherwise"),
    ("flops", pa.int64(), "FLOPs torch estimated for the op (Kineto 'flops', with_flops); -1"),
    ("mem_bytes", pa.int64(), "[memory] instant: bytes allocated (> 0) or freed (< 0); -1 else"),
    ("mem_allocated", pa.int64(), "[memory] instant: allocator total allocated bytes after it"),
    ("mem_reserved", pa.int64(), "[memory] instant: allocator total reserved bytes after it"),
    ("mem_device", pa.int32(), "[memory] instant: device index; -1 for host memory / unknown"),
    ("launch", _STR, "kernel launch configuration as a compact JSON object: grid, block, "
                     "registers (per thread), shared_mem (bytes per block), occupancy (%)"),
)
SCHEMA = pa.schema([pa.field(n, t) for n, t, _ in COLUMNS])
INT_COLUMNS = tuple(n for n, t, _ in COLUMNS if pa.types.is_integer(t))
STR_COLUMNS = tuple(n for n, t, _ in COLUMNS if pa.types.is_dictionary(t))


@dataclass
class TraceMeta:
    """Per-trace facts that are not events."""

    path: str = ""
    format: str = ""            # "kineto", "nsys", "chrome" (generic Chrome trace)
    format_version: str = ""    # Kineto schemaVersion / nsys export schema version
    producer: str = ""          # e.g. "PyTorch 2.4" when known
    clock: str = ""             # "epoch_ns" (Kineto) or "session_ns" (nsys)
    epoch_offset_ns: int = 0    # add to ts to get UTC epoch ns, 0 if ts already is / unknown
    rank: int = -1
    world_size: int = -1
    rank_source: str = ""       # "distributedInfo", "file name", "" (unknown)
    distributed: dict = field(default_factory=dict)
    devices: list = field(default_factory=list)   # [{"device": i, "name": ..., ...}]
    processes: dict = field(default_factory=dict)  # pid -> name
    threads: dict = field(default_factory=dict)    # tid -> name
    extra: dict = field(default_factory=dict)      # reader-specific leftovers

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _libc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_MALLOC_TRIM = _libc_trim()


def release_heap() -> None:
    """Give freed heap pages back to the OS (glibc ``malloc_trim``; no-op elsewhere).

    numpy arrays of a few to 32 MB (a column of a few million rows) live on the
    glibc heap, whose free pages are not returned on their own: after a big read
    the process kept ~2.5x the table size resident (measured: 1.2 GB resident,
    0.47 GB after a trim, for a 1 GB trace).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    # Arrow's allocator (mimalloc / jemalloc) keeps freed pages too: 120 MB after the
    # events DataFrame of a 1 GB trace was built, all of it transient conversion buffers
    pa.default_memory_pool().release_unused()
    _TRIMMED[0] = _rss()


# Between passes: the heap is trimmed once the resident set grew TRIM_GROWTH bytes since the
# last trim. A trim's pages are faulted in again by the next pass that allocates (~2.5 us a
# 4 KB page here): trimming after every pass gave back ~450 MB per `analyze` of the 247 MB
# trace, 0.2-0.3 CPU-s of faults, for 2 MB of peak RSS; at 990 MB 1.9 GB, ~1 CPU-s, 35 MB.
TRIM_GROWTH = 64 << 20
_TRIMMED = [0]   # resident bytes after the last trim (0: none yet)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int | None:
    """Resident bytes of this process (Linux ``/proc/self/statm``), None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def release_heap_grown() -> None:
    """``release_heap`` once the resident set grew ``TRIM_GROWTH`` since the last trim (at
    most that much freed heap kept; a pass that reuses it faults nothing in); where the
    resident set cannot be read, every time. A resident set that shrank (an array's own
    mapping unmapped) is the new mark."""
    rss = _rss()
    if rss is None or _TRIMMED[0] is None or rss - _TRIMMED[0] >= TRIM_GROWTH:
        release_heap()
    elif rss < _TRIMMED[0]:
        _TRIMMED[0] = rss


def empty_columns(n: int) -> dict[str, Any]:
    """Default-filled column arrays for ``n`` events (ints -1, strings null)."""
    cols: dict[str, Any] = {}
    for name, typ, _ in COLUMNS:
        if pa.types.is_integer(typ):
            cols[name] = np.full(n, -1, dtype=typ.to_pandas_dtype())
        else:
            cols[name] = None
    return cols


def build_table(cols: dict[str, Any], n: int, consume: bool = False) -> pa.Table:
    """Assemble a schema-conformant table from per-column arrays, sorted by ts.

    ``cols`` maps column name to a numpy array, list, pyarrow array or None
    (None: all defaults). Missing columns get defaults. String columns may be
    given as plain strings or dictionary arrays.

    Columns entirely at their default (-1 / null: on a Kineto trace the nsys-only and
    collective columns, the shape / FLOP columns without record_shapes) all share one
    array per type, so they cost 8 B/row once instead of 8 B/row each (~120 MB at 1 GB).
    ``consume``: take the columns out of ``cols`` as they are converted (a column cast to
    its schema type, int64 device to int32, is then not held twice).
    """
    defaults: dict = {}
    arrays = []
    for name, typ, _ in COLUMNS:
        val = cols.pop(name, None) if consume else cols.get(name)
        if _all_default(val, typ, n):
            if typ not in defaults:
                defaults[typ] = _default_array(typ, n)
            arrays.append(defaults[typ])
        else:
            arrays.append(_to_arrow(val, typ, n))
        del val
    if n > 1:
        order = np.argsort(arrays[0].to_numpy(), kind="stable")
        if not np.all(order[1:] > order[:-1]):
            # column by column, each unsorted column dropped as soon as it is taken
            # (a whole-table take holds both copies of every column at once); a
            # shared default column is the same in any order
            idx = pa.array(order)
            del order
            shared = {id(a) for a in defaults.values()}
            for i in range(len(arrays)):
                if id(arrays[i]) not in shared:
                    arrays[i] = arrays[i].take(idx)
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def share_defaults(table: pa.Table) -> pa.Table:
    """``table`` with every column entirely at its default (-1 / null, no dictionary) as
    one shared array per type, as ``build_table`` makes them: a table read back from
    Parquet (the cache) or filtered row by row holds one copy per column, ~19 of 33 on a
    Kineto trace (~40 B a row more in the frame, every int64 one 8 B). Values, nulls,
    types and dictionaries are unchanged."""
    n = table.num_rows
    if n == 0:
        return table
    defaults: dict = {}
    arrays = list(table.columns)
    changed = False
    for i, (col, typ) in enumerate(zip(arrays, table.schema.types)):
        if not _column_default(col, typ):
            continue
        if typ not in defaults:
            defaults[typ] = (col if col.num_chunks == 1 else col.combine_chunks(),
                             _chunks_key(col))
        elif _chunks_key(col) != defaults[typ][1]:
            arrays[i] = defaults[typ][0]
            changed = True
    return pa.Table.from_arrays(arrays, schema=table.schema) if changed else table


def _column_default(col: pa.ChunkedArray, typ: pa.DataType) -> bool:
    """The column holds only its default: -1 without nulls, or nulls over no dictionary."""
    if pa.types.is_integer(typ):
        if col.null_count:
            return False
        for chunk in col.chunks:   # zero-copy views (no nulls)
            a = chunk.to_numpy()
            if len(a) and not (a.min() == -1 and a.max() == -1):
                return False
        return True
    if pa.types.is_dictionary(typ):
        return col.null_count == len(col) and all(len(c.dictionary) == 0 for c in col.chunks)
    return False


def filter_rows(table: pa.Table, mask) -> pa.Table:
    """``table.filter(mask)``, each distinct column filtered once: columns sharing one
    array (``build_table``'s defaults) share the filtered one, not one copy each (on a
    two-rank nsys export each rank's part held ~75 B a row more, and the split's peak
    the whole export's table plus every part's 33 columns); then ``share_defaults``."""
    done: dict = {}
    arrays = []
    for col in table.columns:
        key = _chunks_key(col)
        if key not in done:
            done[key] = col.filter(mask)
        arrays.append(done[key])
    del done
    return share_defaults(pa.Table.from_arrays(arrays, schema=table.schema))


def _chunks_key(col: pa.ChunkedArray) -> tuple:
    """Identity of a column's memory: its type and every chunk's offset, length and buffers."""
    return (str(col.type),) + tuple(
        (c.offset, len(c), tuple(b.address if b is not None else 0 for b in c.buffers()),
         c.dictionary.buffers()[-1].address if pa.types.is_dictionary(col.type)
         and len(c.dictionary) else 0)
        for c in col.chunks)


def _all_default(val: Any, typ: pa.DataType, n: int) -> bool:
    """True when ``val`` is None or holds only the column's default (-1 / null)."""
    if val is None:
        return True
    if isinstance(val, np.ndarray) and pa.types.is_integer(typ):
        return len(val) == n and n > 0 and val[0] == -1 and not (val != -1).any()
    if isinstance(val, pa.DictionaryArray):  # (a non-empty dictionary shows as categories)
        return len(val) == n and val.null_count == n and len(val.dictionary) == 0
    return False


def _default_array(typ: pa.DataType, n: int) -> pa.Array:
    """``n`` rows of the column default: -1, or null (zero indices from calloc'd pages,
    never written, so they take no memory until read)."""
    if pa.types.is_integer(typ):
        return pa.array(np.full(n, -1, dtype=typ.to_pandas_dtype()), type=typ)
    idx = pa.array(np.zeros(n, np.int32), mask=np.ones(n, bool))
    return pa.DictionaryArray.from_arrays(idx, pa.array([], typ.value_type))


def _to_arrow(val: Any, typ: pa.DataType, n: int) -> pa.Array:
    if val is None and pa.types.is_dictionary(typ):
        return pa.nulls(n, typ)
    if pa.types.is_dictionary(typ):
        if isinstance(val, pa.ChunkedArray):
            val = val.combine_chunks()
        if isinstance(val, pa.Array):
            if pa.types.is_dictionary(val.type):
                if val.type != typ:
                    val = pa.DictionaryArray.from_arrays(
                        val.indices.cast(pa.int32()), val.dictionary.cast(pa.string()))
                return val
            return val.cast(pa.string()).dictionary_encode().cast(typ)
        if isinstance(val, pd.Categorical):
            return pa.array(val).cast(typ)
        return pa.array(val, type=pa.string()).dictionary_encode().cast(typ)
    if isinstance(val, (pa.Array, pa.ChunkedArray)):
        return val.cast(typ)
    return pa.array(np.asarray(val, dtype=typ.to_pandas_dtype()), type=typ)


def empty_table() -> pa.Table:
    return build_table({}, 0)


class Trace:
    """A loaded trace: the event table plus its metadata.

    ``trace.table`` is the Arrow table, ``trace.events`` the same as a pandas
    DataFrame (string columns as ``category``), computed once.

    Memory: building ``events`` hands the table's columns to pandas (integer
    columns zero-copy) and lets go of the table, whose dictionary indices would
    otherwise stay beside the frame's category codes (56 B/row vs ~12). Asking for
    ``table`` afterwards builds it again from the frame -- the same table.
    """

    def __init__(self, table: pa.Table, meta: TraceMeta):
        if table.schema != SCHEMA:
            raise ValueError("event table does not match traceread.table.SCHEMA")
        self._table: pa.Table | None = table
        self.meta = meta
        self._events: pd.DataFrame | None = None
        self._packed: tuple | None = None   # (Arrow IPC bytes, rows): see ``pack``

    def pack(self) -> None:
        """Hold the table as LZ4-compressed Arrow IPC until it is next asked for: a rank of
        a split nsys export waiting for its turn (113 MB -> 16 MB a rank at 252 k kernels,
        ~0.3 CPU-s to pack and unpack). The same table comes back. No-op once the frame
        is built."""
        if self._table is None or self._events is not None:
            return
        import pyarrow.ipc as ipc

        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, self._table.schema,
                            options=ipc.IpcWriteOptions(compression="lz4")) as w:
            w.write_table(self._table)
        self._packed, self._table = (sink.getvalue(), self._table.num_rows), None

    def _unpack(self) -> None:
        if self._packed is not None:
            import pyarrow.ipc as ipc

            release_heap()   # what the rank before let go, before this one's table lands
            buf, self._packed = self._packed[0], None
            with ipc.open_stream(buf) as r:
                table = r.read_all()
            del buf
            # one chunk a column as written; IPC gives each shared default column its own
            self._table = share_defaults(table.combine_chunks())

    @property
    def table(self) -> pa.Table:
        if self._table is None:
            self._unpack()
        if self._table is None:
            self._table = pandas_to_table(self._events)
        return self._table

    @table.setter
    def table(self, table: pa.Table) -> None:
        self._table = table
        self._events = None
        self._packed = None

    @property
    def has_frame(self) -> bool:
        """``events`` is built (and the table let go: asking for ``table`` rebuilds it)."""
        return self._events is not None

    @property
    def events(self) -> pd.DataFrame:
        if self._events is None:
            self._unpack()
            table, self._table = self._table, None
            self._events = table_to_pandas(table, release=True)
            del table
            release_heap()
        return self._events

    def __len__(self) -> int:
        if self._packed is not None:
            return self._packed[1]
        return self._table.num_rows if self._table is not None else len(self._events)

    def __repr__(self) -> str:
        return f"<Trace {self.meta.format} {self.meta.path!r}: {len(self)} events>"

    def to_parquet(self, path: str | Path) -> None:
        """Write the event table (with metadata) to Parquet."""
        write_parquet(self, path)


def table_to_pandas(table: pa.Table, release: bool = False) -> pd.DataFrame:
    """The event table as a DataFrame (string columns ``category``), what
    ``table.to_pandas(split_blocks=True)`` gives, converted one column at a time.

    Integer columns (no nulls, one chunk) are zero-copy views of the Arrow buffers,
    not a second copy of the table (~95 B/row); pandas' copy-on-write keeps them
    read-only either way. ``release``: the caller has dropped its own reference to
    ``table``, and each column's Arrow memory is freed as soon as it is converted
    where nothing else holds it (dictionary indices: 4 B/row per string column).
    Converting the whole table at once held ~150 MB of conversion buffers at 1 GB.
    """
    names = table.column_names
    cols = table.columns
    del table
    parts = []
    done: dict = {}  # the buffers of a column shared by several (build_table's defaults)
    for i, name in enumerate(names):
        key = _buffers_key(cols[i]) if _SHARE_SERIES else None
        if key in done:  # pandas 3: a copy-on-write view of the same codes
            parts.append(done[key].rename(name))
            continue
        if _all_minus_one(cols[i]):   # a default column: one value, no memory
            parts.append(pd.Series(np.broadcast_to(
                np.array(-1, cols[i].type.to_pandas_dtype()), len(cols[i])), name=name,
                copy=False))
            if release:
                cols[i] = None
            continue
        one = pa.Table.from_arrays([cols[i]], names=[name])
        if release:
            cols[i] = None
        parts.append(one.to_pandas(types_mapper=None, ignore_metadata=True, split_blocks=True,
                                   self_destruct=release, use_threads=False)[name])
        if key is not None:
            done[key] = parts[-1]
        del one
    del cols, done
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, axis=1, **_NO_COPY)


# pandas 2 copies in concat unless told not to; pandas 3 never copies and deprecates the flag
_PANDAS3 = int(pd.__version__.split(".")[0]) >= 3
_NO_COPY = {} if _PANDAS3 else {"copy": False}
# Only with copy-on-write (pandas 3) may two columns share one array of category codes.
_SHARE_SERIES = _PANDAS3
SHARE_COLUMNS = _SHARE_SERIES   # for the passes: columns of a frame may share one array


def _all_minus_one(col: pa.ChunkedArray) -> bool:
    """An integer column holding -1 on every row (no null): in the frame a read-only array
    of one value repeated (stride 0) instead of a view of its Arrow buffer, so the table's
    shared all-default buffers (~12 B a row on a Kineto trace: msg_*, seq, flops,
    group_size, graph_id) are freed with the table. Same dtype and values; a write copies
    (copy-on-write), as it does to the Arrow views."""
    if not pa.types.is_integer(col.type) or not len(col) or col.null_count:
        return False
    import pyarrow.compute as pc
    mm = pc.min_max(col)
    return mm["min"].as_py() == -1 and mm["max"].as_py() == -1


def _buffers_key(col: pa.ChunkedArray):
    """Identity of a one-chunk dictionary column's buffers (None for other columns)."""
    if col.num_chunks != 1 or not pa.types.is_dictionary(col.type):
        return None
    arr = col.chunk(0)
    return (str(col.type), len(arr), arr.offset,
            tuple(b.address if b is not None else 0 for b in arr.buffers()),
            arr.dictionary.buffers()[-1].address if len(arr.dictionary) else 0)


def pandas_to_table(ev: pd.DataFrame) -> pa.Table:
    """``table_to_pandas`` undone: the same schema, values, nulls and dictionaries."""
    arrays = []
    for name, typ, _ in COLUMNS:
        s = ev[name]
        if pa.types.is_dictionary(typ):
            cat = s.array
            codes = np.asarray(cat.codes)
            idx = pa.array(codes.astype(np.int32), mask=codes < 0)
            values = pa.array(np.asarray(cat.categories, dtype=object), type=pa.string())
            arrays.append(pa.DictionaryArray.from_arrays(idx, values))
        else:
            arrays.append(pa.array(s.to_numpy(), type=typ))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


PARQUET_META_KEY = b"traceread.meta"   # the TraceMeta JSON in the Parquet schema
_META_KEY = PARQUET_META_KEY


def write_parquet(trace: Trace, path: str | Path) -> None:
    import json

    import pyarrow.parquet as pq  # here: analysing a trace needs no Parquet

    meta = json.dumps(trace.meta.to_dict(), default=str).encode()
    schema_meta = dict(trace.table.schema.metadata or {})
    schema_meta[_META_KEY] = meta
    pq.write_table(trace.table.replace_schema_metadata(schema_meta), str(path))
