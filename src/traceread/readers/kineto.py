"""Reader for torch.profiler (Kineto) Chrome-JSON traces, ``.json`` or ``.json.gz``.

Also loads the old autograd-profiler export (a top-level JSON array) and generic
Chrome traces from other tools (TensorFlow, Horovod timelines) as format
"chrome" with kind ``other`` rows. See ``docs/event-table.md`` for the mapping
of every column.

Pipeline: bytes (gunzip) -> msgspec typed decode (``_kineto_decode``) ->
column batch -> trace-wide fix-ups here (time base, kinds, GPU pid join,
memcpy / collective fields) -> ``build_table``.
"""
from __future__ import annotations

import os
import re
import zlib
from itertools import repeat
from operator import is_not
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from ..collectives import collective_from_kernel, dtype_size, normalize_collective
from .detect import sniff, to_utf8
from ..errors import TraceError
from ..table import KINDS, Trace, TraceMeta, build_table, release_heap
from . import _kineto_decode as dec
from .common import JSON_OUT, coerce_event, json_error, mark_truncated, not_a_trace, progress_bar
from ._json_edges import Inflater, inflate_cap_message, max_inflated, truncation_info

try:  # isal's zlib is ~3x faster at inflate; the "fast" extra installs it
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

# --- category -> kind ---------------------------------------------------------

# Keys are lower-cased Kineto 'cat' values, all eras. Anything else -> "other".
CAT_KIND = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "python_function": "python",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime", "runtime": "runtime", "mtia_runtime": "runtime",
    "xpu_runtime": "runtime", "privateuse1_runtime": "runtime",
    "cuda_driver": "driver", "privateuse1_driver": "driver",
    "kernel": "kernel", "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_sync": "sync",
    "cpu_instant_event": "instant",
}
# MTIA command-processor events are device-side; most are compute, these are not.
MTIA_CCP_KIND = {"event_wait": "sync", "event_record": "sync", "dma_request": "memcpy"}
KINETO_CATS = frozenset(CAT_KIND) | {"trace", "ac2g", "async", "async_gpu", "async_cpu_to_gpu",
                                     "fwdbwd", "overhead", "cuda_profiler_range"}
_K = {k: i for i, k in enumerate(KINDS)}
_DEVICE_KINDS = np.array([_K["kernel"], _K["memcpy"], _K["memset"], _K["gpu_annotation"]])
_HOST_KINDS = np.array([_K[k] for k in ("cpu_op", "python", "annotation", "runtime", "driver")])

# Top-level keys copied to TraceMeta.extra when present.
EXTRA_KEYS = ("trace_id", "traceName", "displayTimeUnit", "baseTimeNanoseconds", "cupti_version",
              "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version",
              "hip_driver_version", "roctracer_version", "record_shapes", "with_stack",
              "profile_memory", "with_flops", "with_modules", "group_trace_id", "host_name")

_GZ_CHUNK = 4 << 20


_DOC_META_FIELDS = ("schemaVersion", "deviceProperties", "computeProperties", "distributedInfo",
                    "baseTimeNanoseconds", "traceName", "displayTimeUnit", "trace_id",
                    "group_trace_id", "cupti_version", "cuda_runtime_version",
                    "cuda_driver_version", "hip_runtime_version", "hip_driver_version",
                    "roctracer_version", "record_shapes", "with_stack", "profile_memory",
                    "with_flops", "with_modules", "host_name")


def _doc_type(event: type) -> type:
    """Top-level object: the events plus the header keys we keep (others skipped)."""
    return msgspec.defstruct(
        "Doc", [("traceEvents", Union[list[event], None], None)]
        + [(f, Any, None) for f in _DOC_META_FIELDS], gc=False)


_Doc = _doc_type(dec.Event)
_ExactDoc = _doc_type(dec.ExactEvent)
_DOC_TYPE = Union[_Doc, list[dec.Event]]
_EXACT_DOC_TYPE = Union[_ExactDoc, list[dec.ExactEvent]]


# --- entry point --------------------------------------------------------------

def read_kineto(path: str | os.PathLike, progress: bool = False, strict: bool = False) -> Trace:
    """Load a Kineto / Chrome JSON trace (optionally gzipped) into a ``Trace``.

    A file cut short (a killed run) is read up to its last complete event and
    ``meta.extra["truncated"]`` says so; ``strict=True`` refuses it instead.
    """
    p = Path(path)
    fmt = sniff(p)
    if fmt == "sqlite":
        raise TraceError(p, "is an SQLite database, not a JSON trace")
    with progress_bar(p, progress) as tick:
        buf, gz_cut = _read_bytes(p, fmt, tick, strict)
        trace = ingest(buf, p, tick, strict=strict)
        if gz_cut and "truncated" not in trace.meta.extra:  # JSON complete, gzip trailer lost
            mark_truncated(trace, truncation_info(len(buf), len(buf), len(buf),
                                                  gzip_stream_cut=True))
        elif gz_cut:
            trace.meta.extra["truncated"]["gzip_stream_cut"] = True
        tick("done")
    return trace


def ingest(buf: bytes, path: str | os.PathLike = "", tick=None, strict: bool = False) -> Trace:
    """Decoded JSON bytes (already gunzipped) -> Trace. ``path`` is for messages/meta."""
    p = Path(path)
    tick = tick or (lambda stage, frac=None: None)
    if buf[:3] == b"\xef\xbb\xbf":  # UTF-8 BOM (some Windows tools write one)
        buf = memoryview(buf)[3:]
    text = buf
    cut = None
    tick("parse")
    try:
        try:
            doc, events, lenient, batch, exact, buf = _decode_batch(p, text, tick)
        except _Cut as e:
            if strict:
                raise TraceError(p, str(e)) from None
            text, cut = _recover(p, text)
            doc, events, lenient, batch, exact, buf = _decode_batch(p, text, tick)
    except dec.BadEvent as e:
        raise TraceError(p, str(e)) from None
    except RecursionError:
        raise TraceError(p, dec.nesting_reason(buf)) from None
    tick("table")
    header = _header(doc)
    fmt_name = _format_name(header, batch, isinstance(doc, list))
    meta = _meta(p, header, batch, fmt_name)
    if lenient:
        meta.extra["lenient_decode"] = True
    if buf is not text:
        meta.extra["invalid_utf8_replaced"] = True
    meta.extra["exact_ts_decode"] = exact
    try:
        cols, n = _columns(batch, fmt_name, header, meta)
    except dec.BadEvent as e:
        raise TraceError(p, str(e)) from None
    del batch
    _foreign_records(doc, events, meta)
    del doc, events
    table = build_table(cols, n, consume=True)
    del cols
    release_heap()
    trace = Trace(table, meta)
    if cut is not None:
        mark_truncated(trace, cut)
    return trace


class _Cut(Exception):
    """The JSON text ends early (msgspec: truncated); ``str()`` is the strict-mode reason."""


def _recover(p: Path, buf) -> tuple[bytes, dict]:
    """(the document closed after its last complete event, truncation info)."""
    from ._json_edges import NotRecoverable, recover_document

    try:
        return recover_document(buf)
    except NotRecoverable as e:
        raise TraceError(p, str(e)) from None


def _decode_batch(p: Path, buf, tick):
    """-> (doc, events, lenient, batch, exact, buf); ``buf`` is the (repaired) text."""
    try:
        doc, events, lenient = _decode(p, buf)
    except _BadUtf8:
        buf = dec.utf8_repaired(buf)
        doc, events, lenient = _decode(p, buf)
    tick("columns")
    batch = dec.events_to_batch(events)
    exact = False
    if batch.ts_lossy:
        # Float epoch µs (PyTorch 2.0-2.3) cannot hold ns: read ts again, exactly.
        exact = True
        ts = None if lenient else _exact_ts(buf, batch.n)
        if ts is not None:
            batch.ts_ns, batch.ts_lossy = ts, False
        else:
            doc, events, lenient = _decode(p, buf, exact=True)
            batch = dec.events_to_batch(events)
    return doc, events, lenient, batch, exact, buf


def _exact_ts(buf: bytes, n: int) -> np.ndarray | None:
    """Second, ts-only decode with Decimal timestamps; None if it does not line up."""
    try:
        ts = dec.exact_row_ts(msgspec.json.decode(buf, type=dec.TS_ONLY_DOC))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return ts if len(ts) == n else None


def _used_exact(events: list) -> bool:
    return dec.is_exact(events)


# --- bytes --------------------------------------------------------------------

def _read_bytes(p: Path, fmt: str, tick, strict: bool = False) -> tuple[bytes, bool]:
    """(JSON text, whether a gzip stream ended early and was read as far as it goes)."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    cut = False
    if fmt == "json.gz":
        data, cut = _gunzip(p, data, tick, strict)
        if not data.strip():
            raise TraceError(p, "empty after gunzip")
    return to_utf8(p, data), cut


def _gunzip(p: Path, data: bytes, tick, strict: bool = False) -> tuple[bytes, bool]:
    """Inflate all gzip members, with progress; clean errors for bad input.

    A stream that ends early (a killed writer) gives what it inflated so far
    and True, unless ``strict``. The streaming reader's ``Inflater`` does the work, so
    both paths read every multi-member file the same way.
    """
    import io

    n = len(data)
    src = io.BytesIO(data)
    inf = Inflater(src, _GZ_CHUNK)
    parts = []
    cap, total = max_inflated(n), 0
    try:
        while True:
            # bounded per call: a bomb is stopped at the cap, not after inflating
            out = inf.read(_GZ_CHUNK * 64)
            if not out:
                break
            parts.append(out)
            total += len(out)
            if cap and total > cap:
                raise TraceError(p, inflate_cap_message(cap, n))
            tick("gunzip", src.tell() / max(1, n))
    except EOFError:
        if strict:
            raise TraceError(p, f"truncated gzip: compressed data ends at byte {n}") from None
        return b"".join(parts), True
    except (zlib.error, getattr(_zlib, "error", zlib.error)) as e:
        raise TraceError(p, f"corrupt gzip: {e}") from None
    return b"".join(parts), inf.cut


# --- decode -------------------------------------------------------------------

class _BadUtf8(Exception):
    """The bytes hold invalid UTF-8: decode them again repaired (U+FFFD)."""


def _decode(p: Path, buf: bytes, exact: bool = False):
    """-> (doc struct or list, events, lenient?)."""
    try:
        doc = msgspec.json.decode(buf, type=_EXACT_DOC_TYPE if exact else _DOC_TYPE)
    except msgspec.ValidationError:
        return _decode_lenient(p, buf, exact)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        if dec.utf8_error(e):
            raise _BadUtf8() from None
        reason = json_error(e, len(buf))
        if reason.startswith("truncated"):
            raise _Cut(reason) from None
        raise TraceError(p, reason) from None
    if isinstance(doc, list):
        return doc, doc, False
    if doc.traceEvents is None:
        raise TraceError(p, not_a_trace(buf))
    return doc, doc.traceEvents, False


def _decode_lenient(p: Path, buf: bytes, exact: bool):
    """Odd but valid JSON (nulls, wrong arg types): decode generically, coerce per event."""
    try:
        obj = msgspec.json.Decoder(float_hook=dec.Decimal if exact else None).decode(buf)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        if dec.utf8_error(e):
            raise _BadUtf8() from None
        reason = json_error(e, len(buf))
        if reason.startswith("truncated"):
            raise _Cut(reason) from None
        raise TraceError(p, reason) from None
    if isinstance(obj, dict):
        events = obj.get("traceEvents")
        if events is None:
            raise TraceError(p, not_a_trace(buf))
        doc = msgspec.convert({k: v for k, v in obj.items() if k != "traceEvents"},
                              _ExactDoc if exact else _Doc, strict=False)
    else:
        events, doc = obj, obj
    if not isinstance(events, list):
        raise TraceError(p, "traceEvents is not a JSON array: not a trace")
    if events and not any(isinstance(e, dict) for e in events[:100]):
        raise TraceError(p, "JSON array without event objects (e.g. a memory_timeline export): "
                         "not a trace")
    etype = dec.ExactEvent if exact else dec.Event
    out = []
    for e in events:
        ev = coerce_event(e, etype)
        if ev is not None:
            out.append(ev)
    # a top-level list keeps its raw objects as ``doc``: a non-torch file's warning counts them
    return doc, out, True


# --- metadata -----------------------------------------------------------------

def _header(doc: Any) -> dict:
    if isinstance(doc, list):
        return {}
    return {f: getattr(doc, f) for f in doc.__struct_fields__
            if f != "traceEvents" and getattr(doc, f) is not None}


_AUTOGRAD_PIDS = frozenset(("CPU functions", "CUDA functions"))


def _format_name(header: dict, batch: dec.Batch, top_list: bool) -> str:
    """"kineto" for torch.profiler output (any era), else "chrome"."""
    if any(k in header for k in ("schemaVersion", "deviceProperties", "distributedInfo",
                                 "baseTimeNanoseconds", "computeProperties")):
        return "kineto"
    if top_list and any(v in _AUTOGRAD_PIDS for v in batch.pid_str.values()):
        return "kineto"  # old torch.autograd.profiler export_chrome_trace
    distinct = (batch.cat.dictionary.to_pylist() if isinstance(batch.cat, pa.DictionaryArray)
                else set(batch.cat))
    cats = {c.lower() for c in distinct if isinstance(c, str)}
    return "kineto" if cats & set(CAT_KIND) else "chrome"


_RANK_RE = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_from_filename(name: str) -> int:
    """``rank-3``, ``rank3``, ``rank_3``, ``worker3`` in a file name -> 3; else -1."""
    m = _RANK_RE.search(name)
    return int(m.group(1)) if m else -1


def _as_int(v: Any, default: int = -1) -> int:
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, (float, dec.Decimal)) and v == int(v):
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return default


def _meta(p: Path, header: dict, batch: dec.Batch, fmt_name: str) -> TraceMeta:
    meta = TraceMeta(path=str(p), format=fmt_name)
    if "schemaVersion" in header:
        meta.format_version = str(header["schemaVersion"])
    header = {k: _bounded(v) for k, v in header.items()}  # every string, as names: 64 Ki chars
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        meta.distributed = dist
        meta.world_size = _as_int(dist.get("world_size"))
        r = _as_int(dist.get("rank"))
        if r >= 0:
            meta.rank, meta.rank_source = r, "distributedInfo"
    if meta.rank < 0:
        r = rank_from_filename(p.name)
        if r >= 0:
            meta.rank, meta.rank_source = r, "file name"
    props = header.get("deviceProperties") or header.get("computeProperties") or []
    # the header lists the devices the profiler saw: recorded and empty, it saw none (a CPU
    # build, or no GPU on the host); absent (older torch, other writers), unknown
    meta.extra["devices_recorded"] = any(isinstance(header.get(k), list)
                                         for k in ("deviceProperties", "computeProperties"))
    if isinstance(props, list):
        for d in props:
            if isinstance(d, dict):
                meta.devices.append({"device": _as_int(d.get("id")), **d})
    for name, pid, tid, arg_name, labels in batch.meta_events:
        if name == "process_name" and arg_name is not None:
            meta.processes[pid] = _bounded(str(arg_name))
        elif name == "thread_name" and arg_name is not None:
            meta.threads[_as_int(tid, tid)] = _bounded(str(arg_name))
        elif name == "process_labels" and labels is not None:
            meta.extra.setdefault("process_labels", {})[pid] = _bounded(str(labels))
    meta.producer = _producer(header, fmt_name)
    for k in EXTRA_KEYS:
        if k in header:
            meta.extra[k] = header[k]
    return meta


def _bounded(v, depth: int = 0):
    """``v`` with every string in it clipped like an event name (``dec.MAX_NAME_CHARS``):
    50 MB process, thread and device names cost 48 s and 1.9 GB, and came back whole in
    every JSON output."""
    if isinstance(v, str):
        n = dec.MAX_NAME_CHARS
        return v if len(v) <= n else f"{v[:n]}...[{len(v) - n:,} more chars]"
    if depth > 64:
        return v
    if isinstance(v, dict):
        return {_bounded(k, depth + 1): _bounded(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_bounded(x, depth + 1) for x in v]
    return v


def _producer(header: dict, fmt_name: str) -> str:
    if fmt_name != "kineto":
        return ""
    parts = []
    if "cuda_runtime_version" in header:
        v = _as_int(header["cuda_runtime_version"])
        parts.append(f"CUDA {v // 1000}.{v % 1000 // 10}" if v > 0 else "CUDA")
    if "cupti_version" in header:
        parts.append(f"CUPTI {header['cupti_version']}")
    names = " ".join(str(d.get("name", "")) for d in header.get("deviceProperties") or []
                     if isinstance(d, dict))
    if ("hip_runtime_version" in header or "roctracer_version" in header
            or any(w in names for w in ("AMD", "Radeon", "Instinct"))):
        parts.append("ROCm")
    return "torch.profiler" + (f" ({', '.join(parts)})" if parts else "")


# --- columns ------------------------------------------------------------------

def _str_list(values: list) -> list:
    return [v if v is None or isinstance(v, str) else str(v) for v in values]


def _dict_encode(values) -> pa.DictionaryArray:
    """Dictionary-encode via pandas' hash factorize (far cheaper than arrow from str lists).

    A dictionary array (the streaming path joins its chunks' codes into one, in
    first-appearance order, exactly what the factorize below gives) passes through.
    """
    if isinstance(values, pa.DictionaryArray):
        return values
    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
    uniq = [u if isinstance(u, str) else str(u) for u in uniques]
    if len(set(uniq)) != len(uniq):  # e.g. 1 and "1" both present: merge
        remap, uniq = pd.factorize(np.array(uniq, dtype=object))
        codes = np.where(codes >= 0, remap[codes], -1)
        uniq = list(uniq)
    idx = pa.array(codes.astype(np.int32), mask=codes < 0)
    return pa.DictionaryArray.from_arrays(idx, pa.array(uniq, type=pa.string()))


def _sparse_strings_at(n: int, at: np.ndarray, vals: np.ndarray) -> pa.DictionaryArray | None:
    """Dictionary array of ``n`` rows, ``vals`` (object, str/None) at rows ``at`` (ascending);
    None when no row has a value (``build_table``'s all-null default).

    No n-sized object array: the set rows are few (copies, collectives).
    """
    vals = np.asarray(vals, dtype=object)
    set_ = vals != None  # noqa: E711 - elementwise
    rows, vals = np.asarray(at, dtype=np.int64)[set_], vals[set_]
    if not len(rows):
        return None
    codes = np.full(n, -1, dtype=np.int32)
    if len(rows):
        c, u = pd.factorize(np.array([str(v) for v in vals], dtype=object))  # not fixed-width
        codes[rows] = c
        uniq = list(u)
    else:
        uniq = []
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0),
                                          pa.array(uniq, type=pa.string()))


def _codes(d: pa.DictionaryArray) -> np.ndarray:
    """Dictionary indices as int64 numpy, -1 for null."""
    return d.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _per_unique(d: pa.DictionaryArray, fn, dtype=object, null=None) -> np.ndarray:
    """fn(value) for each dictionary value, broadcast to rows (null rows -> ``null``)."""
    vals = d.dictionary.to_pylist()
    table = np.array([fn(v) for v in vals] + [null], dtype=dtype)
    return table[_codes(d)]  # code -1 picks the trailing null entry


def _per_unique_at(d: pa.DictionaryArray, fn, rows: np.ndarray, dtype=object,
                   null=None) -> np.ndarray:
    """``_per_unique`` for the given rows only (no n-sized temporaries)."""
    vals = d.dictionary.to_pylist()
    table = np.array([fn(v) for v in vals] + [null], dtype=dtype)
    codes = d.indices.take(pa.array(rows, pa.int64())).fill_null(-1)
    return table[codes.to_numpy(zero_copy_only=False).astype(np.int64)]


def _is_mtia(cat_d: pa.DictionaryArray) -> np.ndarray:
    """Rows of MTIA command-processor events (device-side)."""
    return _per_unique(cat_d, lambda c: c.lower() == "mtia_ccp_events", bool, False)


def _is_mtia_runtime(cat_d: pa.DictionaryArray) -> np.ndarray:
    """Rows of the MTIA runtime's category (host calls, or the device's queue entries)."""
    return _per_unique(cat_d, lambda c: c.lower() == "mtia_runtime", bool, False)


def _category_counts(cat_d: pa.DictionaryArray, top: int = 5) -> dict:
    """The ``top`` most frequent categories of a non-torch trace -> count ("" for none)."""
    codes = _codes(cat_d)
    names = [str(v) for v in cat_d.dictionary.to_pylist()] + [""]
    counts = np.bincount(np.where(codes < 0, len(names) - 1, codes), minlength=len(names))
    order = np.argsort(-counts, kind="stable")[:top]
    return {names[i]: int(counts[i]) for i in order if counts[i]}


def _foreign_records(doc: Any, events: list, meta: TraceMeta) -> None:
    """A non-torch trace: add the records the decoder made no row of (async ``b``/``e``,
    counters, objects that are no trace events at all), by phase. Only this reader sees
    them; the streaming reader's note stops at the decoded rows (docs/event-table.md)."""
    note = meta.extra.get("foreign")
    raw = doc if isinstance(doc, list) else (events or [])
    if note is None or not raw:
        return
    phases: dict = {}
    for e in raw:
        ph = e.get("ph") if isinstance(e, dict) else getattr(e, "ph", None)
        if ph not in _ROW_PHASES:
            key = str(ph) if ph else "none"
            phases[key] = phases.get(key, 0) + 1
    if phases:
        note["records"] = note.get("decoded", 0) + sum(phases.values())
        note["ignored_phases"] = dict(sorted(phases.items(), key=lambda kv: -kv[1])[:5])


_INT64_MAX = (1 << 63) - 1

# Phases that become rows (E folds into its B) or names (M): never "ignored".
_ROW_PHASES = frozenset(("X", "B", "E", "i", "I", "M"))


def _kinds(batch: dec.Batch, cat_d: pa.DictionaryArray, name_d: pa.DictionaryArray,
           fmt_name: str) -> np.ndarray:
    other = _K["other"]
    if fmt_name == "chrome":
        kind = np.full(batch.n, other, dtype=np.int32)
    else:
        kind = _per_unique(cat_d, lambda c: _K[CAT_KIND.get(c.lower(), "other")], np.int32, other)
        mtia = _is_mtia(cat_d)
        if mtia.any():
            mk = _per_unique(name_d, lambda nm: _K[MTIA_CCP_KIND.get(nm, "kernel")], np.int32, other)
            kind[mtia] = mk[mtia]
        step = _per_unique(name_d, lambda nm: nm.startswith("ProfilerStep#"), bool, False)
        kind[step & (kind == _K["cpu_op"])] = _K["annotation"]  # 1.8-1.9 logged steps as Operator
        for i, s in batch.pid_str.items():  # old autograd-profiler export
            if s == "CPU functions":
                kind[i] = _K["cpu_op"]
            elif s == "CUDA functions":
                kind[i] = _K["kernel"]
    kind[dec.phase_masks(batch.ph, (_INSTANT,))[0]] = _K["instant"]
    return kind


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[first i with keys[i] == q] for each q, -1 when absent (vectorised join)."""
    out = np.full(len(query), -1, dtype=np.int64)
    ok = keys >= 0
    keys, values = keys[ok], values[ok]
    if not len(keys) or not len(query):
        return out
    order = np.argsort(keys, kind="stable")
    ks, vs = keys[order], values[order]
    pos = np.searchsorted(ks, query)
    pos_c = np.minimum(pos, len(ks) - 1)
    hit = (query >= 0) & (ks[pos_c] == query)
    out[hit] = vs[pos_c[hit]]
    return out


_MEMCPY_RE = re.compile(r"memcpy\s+([A-Za-z]+)", re.IGNORECASE)
_DIRECTION = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD",
              "HOST_TO_HOST": "HtoH"}


def copy_kind_from_name(name: str) -> str | None:
    m = _MEMCPY_RE.search(name)
    return m.group(1) if m else None


def _columns(batch: dec.Batch, fmt_name: str, header: dict, meta: TraceMeta):
    """Table columns of the kept rows in ts order. Consumes ``batch`` (its arrays are dropped).

    Memory: the batch is released as soon as the unsorted columns exist, and the
    sort takes one column at a time, dropping each unsorted column as it goes
    (a whole-table take would hold both copies at once).
    """
    records = batch.n
    cols, keep = _unsorted_columns(batch, fmt_name, header, meta)
    _release(batch)
    release_heap()
    meta.clock = _clock(fmt_name, header, cols["ts"][keep])
    # Kept rows in ts order (stable): Kineto appends GPU rows after host rows.
    sel = np.flatnonzero(keep)
    del keep
    order = sel[np.argsort(cols["ts"][sel], kind="stable")]
    del sel
    if len(order) != len(cols["ts"]) or not np.all(order[1:] > order[:-1]):
        for k in list(cols):
            cols[k] = _take(cols.pop(k), order)
    if fmt_name == "chrome":
        meta.extra["foreign"].update(records=records, decoded=records, rows=len(order))
    return cols, len(order)


def _at(v, rows: np.ndarray) -> np.ndarray:
    """An int arg column's values at ascending ``rows``; ``v`` dense, or (rows, values)
    of its non -1 entries (the streaming join keeps rare args that way)."""
    if not isinstance(v, tuple):
        return v[rows]
    r, vals = v
    out = np.full(len(rows), -1, dtype=np.int64)
    if len(r) and len(rows):
        pos = np.minimum(np.searchsorted(r, rows), len(r) - 1)
        hit = r[pos] == rows
        out[hit] = vals[pos[hit]]
    return out


def _either(a: np.ndarray, b) -> np.ndarray:
    """``np.where(a >= 0, a, b)`` written into ``a``; ``b`` dense or (rows, values)."""
    neg = a < 0
    if not neg.any():
        return a
    if isinstance(b, tuple):
        a[neg] = -1
        r, vals = b
        take = neg[r]
        a[r[take]] = vals[take]
    else:
        a[neg] = b[neg]
    return a


def _release(batch: dec.Batch) -> None:
    """Drop the batch's row arrays/lists (the caller keeps only n and the small dicts)."""
    batch.ph = batch.name = batch.cat = []
    batch.pid = batch.tid = batch.ts_ns = batch.dur_ns = None
    batch.ints, batch.strs = {}, {}


def _unsorted_columns(batch: dec.Batch, fmt_name: str, header: dict, meta: TraceMeta):
    """Columns in file order. The batch's arrays are reused in place and its lists
    and arg columns dropped as soon as they are used (the caller consumes it)."""
    n = batch.n
    ints = batch.ints
    name_d, clipped = dec.clip_long(_dict_encode(batch.name))
    cat_d, clipped_cat = dec.clip_long(_dict_encode(batch.cat))
    if clipped or clipped_cat:
        meta.extra["long_names_clipped"] = clipped + clipped_cat
    batch.name = batch.cat = []
    if fmt_name == "chrome":
        meta.extra["foreign"] = {"categories": _category_counts(cat_d)}
    kind = _kinds(batch, cat_d, name_d, fmt_name)

    # Rows to keep: drop missing-ts rows and 'E' rows (folded into their 'B').
    ts = batch.ts_ns
    dur = batch.dur_ns
    keep = ts != dec.NS_MISSING
    _pair_begin_end(batch, ts, dur, keep, meta)
    batch.ph = []

    pid = batch.pid
    tid = batch.tid
    for i in batch.pid_str:
        pid[i] = -1
    tid_stream = dec.stream_from_tid(batch.tid_str)

    # Device-side rows: GPU ops, GPU annotations, syncs placed on a device timeline.
    device_side = np.isin(kind, _DEVICE_KINDS) | _is_mtia(cat_d)
    # (the batch's arrays are rewritten in place: np.where would add a column each)
    device = np.asarray(ints.pop("device"), dtype=np.int64)
    no_dev = device < 0
    # MTIA's runtime entries the device records on its own submission queues (pid = the
    # device: "Stream 102 Submission Queue") are queue entries, not host calls: the device's
    # sync records, as its event waits are (HTA's MTIA inference trace: 113 "synchronize")
    queue = (kind == _K["runtime"]) & (device == pid) & ~no_dev & _is_mtia_runtime(cat_d)
    kind[queue] = _K["sync"]
    device_side |= (kind == _K["sync"]) & ~no_dev
    device[no_dev] = pid[no_dev]
    del no_dev
    device[~device_side] = -1
    stream = np.asarray(ints.pop("stream"), dtype=np.int64)
    if tid_stream:
        rows = np.fromiter(tid_stream.keys(), dtype=np.int64)
        tstr = np.fromiter(tid_stream.values(), dtype=np.int64)
        tid[rows] = tstr
    no_stream = stream < 0
    stream[no_stream] = tid[no_stream]
    del no_stream
    for i, s in batch.pid_str.items():
        if s == "CUDA functions":  # old autograd export: tid is the device, no stream
            device[i], stream[i] = tid[i], -1
    stream[~device_side] = -1

    correlation = ints["correlation"]
    external_id = _either(ints.pop("external_id"), ints.pop("external_id_old"))

    # Host pid of device rows: the runtime call with the same correlation, else the
    # host op with the same external id, else the only host process.
    is_host = np.isin(kind, _HOST_KINDS) & (pid >= 0) & ~device_side
    is_launch = is_host & ((kind == _K["runtime"]) | (kind == _K["driver"]))
    # (joins on the row subsets only: no n-sized key/query temporaries)
    dev = np.flatnonzero(device_side)
    launch = np.flatnonzero(is_launch)
    host_pid = _lookup(correlation[launch], pid[launch], correlation[dev])
    del launch
    miss = host_pid < 0
    if miss.any():
        host = np.flatnonzero(is_host)
        host_pid[miss] = _lookup(external_id[host], pid[host], external_id[dev[miss]])
        del host
        miss = host_pid < 0
        if miss.any():
            host_pid[miss] = _main_pid(pid, is_launch, is_host)
    pid[dev] = host_pid
    del dev, host_pid, miss, is_launch, is_host
    tid[device_side] = -1
    for i in batch.tid_str:
        if i not in tid_stream:
            tid[i] = -1

    # memcpy / memset
    is_copy = kind == _K["memcpy"]
    is_set = kind == _K["memset"]
    copy_set = np.flatnonzero(is_copy | is_set)
    nbytes = None  # (None: -1 on every row)
    if len(copy_set):
        nbytes = np.full(n, -1, dtype=np.int64)
        nbytes[copy_set] = _either(_at(ints.pop("bytes"), copy_set), _at(ints.pop("size"), copy_set))
    del copy_set
    copy_rows = np.flatnonzero(is_copy)
    copy_kind = np.full(len(copy_rows), None, dtype=object)
    if len(copy_rows):
        from_name = _per_unique_at(name_d, copy_kind_from_name, copy_rows)
        for j, i in enumerate(copy_rows.tolist()):
            # Name ("Memcpy HtoD (Pageable -> Device)"), else ROCm 'kind', else MTIA 'direction'.
            d = batch.strs["direction"][i]
            k = batch.strs["kind"][i]
            copy_kind[j] = from_name[j] or (k if isinstance(k, str) else None) or (
                _DIRECTION.get(d) if isinstance(d, str) else None)

    coll = _collective_columns(batch, name_d, kind, n)
    args = _arg_columns(batch)

    dec.add_base(ts, dur, keep, _as_int(header.get("baseTimeNanoseconds"), 0), name_d)
    cols = {
        "ts": ts,
        "dur": dur,
        "kind": pa.DictionaryArray.from_arrays(pa.array(kind, pa.int32()), pa.array(KINDS)),
        "name": name_d, "cat": cat_d,
        "pid": pid, "tid": tid, "device": device, "stream": stream,
        "correlation": correlation, "external_id": external_id,
        "bytes": nbytes, "copy_kind": _sparse_strings_at(n, copy_rows, copy_kind),
        **coll, **args,
    }
    return cols, keep


# Batch arg fields that become event-table columns of the same name.
ARG_COLUMNS = dec.SHAPE_INT_FIELDS + dec.SHAPE_STR_FIELDS + dec.MEM_INT_FIELDS
LAUNCH_KEYS = dec.LAUNCH_STR_FIELDS + dec.LAUNCH_INT_FIELDS   # key order in `launch`


def _arg_columns(batch: dec.Batch) -> dict:
    """Args carried as written: shapes/dtypes (JSON text), FLOPs, memory, launch config."""
    out = {}
    for f in ARG_COLUMNS:
        if f in batch.strs:
            d = _compact_json(_dict_encode(batch.strs.pop(f)))
            # no row has it (no record_shapes): build_table's shared default, never sorted
            out[f] = None if d.null_count == len(d) and not len(d.dictionary) else d
        else:
            v = batch.ints.pop(f)
            # (rows, values) with no row: -1 everywhere, build_table's shared default
            out[f] = None if isinstance(v, tuple) and not len(v[0]) else dec.dense_ints(v, batch.n)
    out["launch"] = _launch_column(batch)
    return out


def _launch_column(batch: dec.Batch) -> pa.DictionaryArray:
    """Kernel launch configuration as one compact JSON object per distinct configuration:
    ``{"grid":[132,1,1],"block":[384,1,1],"registers":168,"shared_mem":231424,"occupancy":12}``
    (one dictionary-encoded column instead of five: kernels share few configurations).
    Works on the rows that have any of the five args only (no n-sized temporaries)."""
    n = batch.n
    strs = [_compact_json(_dict_encode(batch.strs.pop(f))) for f in dec.LAUNCH_STR_FIELDS]
    ints = [_sparse_ints(batch.ints.pop(f)) for f in dec.LAUNCH_INT_FIELDS]
    has = np.zeros(n, bool)   # 1 B/row: a union of the row sets without a sort
    for d in strs:
        has |= d.indices.is_valid().to_numpy(zero_copy_only=False)
    for r, _ in ints:
        has[r] = True
    rows = np.flatnonzero(has)
    del has
    out = np.full(n, -1, np.int32)
    if not len(rows):
        return pa.DictionaryArray.from_arrays(pa.array(out, mask=out < 0), pa.array([], pa.string()))
    cols = [d.indices.take(pa.array(rows)).fill_null(-1).to_numpy(zero_copy_only=False)
            .astype(np.int64) for d in strs]
    for r, v in ints:
        col = np.full(len(rows), -1, np.int64)
        col[np.searchsorted(rows, r)] = v
        cols.append(col)
    # One int key per row (mixed radix of each column's factorized codes); its
    # factorize numbers the configurations in first-appearance order, as every
    # other dictionary of the table (np.unique(axis=0) sorted rows: ~10x slower).
    key, radix, parts = np.zeros(len(rows), np.int64), 1, []
    for col in cols:
        c, u = pd.factorize(col)
        key += c.astype(np.int64) * radix
        parts.append((radix, len(u), u))
        radix *= max(len(u), 1)
        if radix >= 2**62:  # absurdly many distinct values: too many for one key
            return _launch_column_sorted(n, rows, cols, strs)
    inv, ukey = pd.factorize(key)
    out[rows] = inv
    uniq = np.stack([u[(ukey // r) % k] for r, k, u in parts], axis=1)
    return pa.DictionaryArray.from_arrays(pa.array(out, mask=out < 0),
                                          pa.array(_launch_texts(uniq, strs), pa.string()))


def _launch_texts(uniq: np.ndarray, strs: list) -> list[str]:
    """The JSON object of each distinct configuration (a row of codes / ints)."""
    texts = [d.dictionary.to_pylist() for d in strs]
    m = len(dec.LAUNCH_STR_FIELDS)
    values = []
    for u in uniq.tolist():
        parts = [f'"{k}":{texts[i][u[i]]}' for i, k in enumerate(dec.LAUNCH_STR_FIELDS) if u[i] >= 0]
        parts += [f'"{k}":{u[m + i]}' for i, k in enumerate(dec.LAUNCH_INT_FIELDS) if u[m + i] >= 0]
        values.append("{" + ",".join(parts) + "}")
    return values


def _launch_column_sorted(n: int, rows: np.ndarray, cols: list, strs: list) -> pa.DictionaryArray:
    """``_launch_column``'s numbering by sorting whole rows (any number of distinct values)."""
    out = np.full(n, -1, np.int32)
    uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    inv = inv.ravel()
    values = _launch_texts(uniq, strs)
    # first-appearance order, as every other dictionary of the table
    first = np.full(len(uniq), n, np.int64)
    np.minimum.at(first, inv, rows)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    out[rows] = rank[inv]
    return pa.DictionaryArray.from_arrays(pa.array(out, mask=out < 0),
                                          pa.array([values[k] for k in order], pa.string()))


def _sparse_ints(v) -> tuple[np.ndarray, np.ndarray]:
    """(rows, values) of an int arg column given dense (-1 = absent) or already sparse."""
    if isinstance(v, tuple):
        rows, vals = v
        keep = vals != -1
        return rows[keep].astype(np.int64), vals[keep]
    rows = np.flatnonzero(v != -1)
    return rows, v[rows]


def _compact_json(d: pa.DictionaryArray) -> pa.DictionaryArray:
    """Rewrite each distinct JSON text compactly (``[[8,64],[]]``), merging equal ones.

    Files re-saved with indentation hold the same shapes as multi-line text;
    the work is per distinct value, not per row.
    """
    vals = d.dictionary.to_pylist()
    out = [_compact(v) for v in vals]
    if out == vals:
        return d
    codes, uniq = pd.factorize(np.array(out, dtype=object))
    if len(uniq) == len(out):
        return pa.DictionaryArray.from_arrays(d.indices, pa.array(out, type=pa.string()))
    idx = d.indices.to_numpy(zero_copy_only=False)
    valid = d.indices.is_valid().to_numpy(zero_copy_only=False)
    new = np.where(valid, codes.astype(np.int32)[np.where(valid, idx, 0).astype(np.int64)], -1)
    return pa.DictionaryArray.from_arrays(pa.array(new.astype(np.int32), mask=~valid),
                                          pa.array(list(uniq), type=pa.string()))


def _compact(text: str) -> str:
    try:
        return JSON_OUT.encode(msgspec.json.decode(text)).decode()
    except msgspec.DecodeError:
        return text.strip()


def _main_pid(pid: np.ndarray, is_launch: np.ndarray, is_host: np.ndarray) -> int:
    """The process that launched most GPU work (else with most host rows); -1 if none.

    Used for device rows whose launch is outside the trace window (kernels
    queued before profiling started) -- in practice one process drives a GPU.
    """
    for mask in (is_launch, is_host):
        if mask.any():
            vals, counts = np.unique(pid[mask], return_counts=True)
            return int(vals[np.argmax(counts)])
    return -1


def _take(v, order: np.ndarray):
    if v is None:  # a column at its default on every row
        return None
    if isinstance(v, pa.Array):  # dictionary arrays too: indices and validity in one pass
        return v.take(pa.array(order))
    if isinstance(v, list):
        return [v[i] for i in order.tolist()]
    return v[order]


def _clock(fmt_name: str, header: dict, ts: np.ndarray) -> str:
    if "baseTimeNanoseconds" in header:
        return "epoch_ns"
    # µs since 1970: anything after 2001 is > 1e18 ns; relative clocks are far smaller.
    if fmt_name == "kineto" and len(ts) and ts.min() > 10**18:
        return "epoch_ns"
    return "trace_ns"


def _collective_columns(batch: dec.Batch, name_d: pa.DictionaryArray, kind: np.ndarray, n: int):
    """Collective columns; None for a column no row sets (the usual single-GPU case)."""
    ints, strs = batch.ints, batch.strs
    coll_raw = strs["coll_name"]
    has_args = _present(coll_raw, n)
    arg_rows = np.flatnonzero(has_args)
    coll_rows = arg_rows
    collective = np.array([_collective_name(coll_raw[i]) for i in arg_rows.tolist()] or [],
                          dtype=object)
    kernel_rows = np.flatnonzero((kind == _K["kernel"]) & ~has_args)
    del has_args
    if len(kernel_rows):
        from_name = _per_unique_at(name_d, collective_from_kernel, kernel_rows)
        hit = from_name != None  # noqa: E711
        if hit.any():  # merge the two row sets, keeping row order
            coll_rows = np.concatenate([arg_rows, kernel_rows[hit]])
            order = np.argsort(coll_rows, kind="stable")
            coll_rows = coll_rows[order]
            collective = np.concatenate([collective, from_name[hit]])[order]
    rows = arg_rows
    out = {"collective": _sparse_strings_at(n, coll_rows, collective)}
    if not len(rows):
        return dict(out, msg_nelems=None, msg_bytes=None, dtype=None, group_size=None,
                    process_group=None)
    # nccl-tests convention: the larger buffer (all_gather output, reduce_scatter input).
    nelems_at = np.maximum(_at(ints["in_nelems"], rows), _at(ints["out_nelems"], rows))
    nelems = np.full(n, -1, dtype=np.int64)
    nelems[rows] = nelems_at
    msg_bytes = np.full(n, -1, dtype=np.int64)
    dts = [strs["dtype"][i] if isinstance(strs["dtype"][i], str) else None for i in rows.tolist()]
    dtype = np.array(dts, dtype=object)
    size = np.array([dtype_size(d) for d in dts], dtype=np.int64)
    ok = (size > 0) & (nelems_at >= 0)
    msg_bytes[rows[ok]] = nelems_at[ok] * size[ok]
    pg_id = _at(ints["pg_id"], rows).tolist()
    pg = np.array([_pg_name(strs["pg_name"][i], g, strs["pg_desc"][i])
                   for i, g in zip(rows.tolist(), pg_id)], dtype=object)
    group_size = np.full(n, -1, dtype=np.int64)
    group_size[rows] = _at(ints["group_size"], rows)
    return dict(out, msg_nelems=nelems, msg_bytes=msg_bytes,
                dtype=_sparse_strings_at(n, rows, dtype), group_size=group_size,
                process_group=_sparse_strings_at(n, rows, pg))


def _present(values, n: int) -> np.ndarray:
    """Rows whose value is not None; a sparse column (the streaming join) knows them."""
    rows = getattr(values, "rows", None)
    if rows is not None and len(getattr(values, "values", ())) == len(rows):
        out = np.zeros(n, bool)
        present = np.fromiter(map(is_not, values.values, repeat(None)), dtype=bool,
                              count=len(rows))
        out[np.asarray(rows, np.int64)[present]] = True
        return out
    return np.fromiter(map(is_not, values, repeat(None)), dtype=bool, count=n)


def _collective_name(raw: Any) -> str | None:
    """Canonical name; unknown spellings kept as written; ``wait`` (work.wait) is none."""
    raw = str(raw)
    if raw.strip().lower() in ("wait", ""):
        return None
    return normalize_collective(raw) or raw


def _pg_name(name: Any, pg_id: int, desc: Any) -> str | None:
    if name is not None and name != "":
        return str(name)
    if pg_id >= 0:
        return str(pg_id)
    return str(desc) if desc not in (None, "") else None


_BE = frozenset(("B", "E"))
_INSTANT = frozenset(("i", "I"))


def _pair_begin_end(batch: dec.Batch, ts: np.ndarray, dur: np.ndarray, keep: np.ndarray,
                    meta: TraceMeta) -> None:
    """Fold 'B'/'E' pairs (per pid, tid stack) into one row with a duration."""
    if not any(p in _BE for p in dec.distinct(batch.ph)):
        return
    be = np.flatnonzero(dec.phase_masks(batch.ph, (_BE,))[0]).tolist()
    if not be:
        return
    stacks: dict = {}
    unmatched = 0
    order = sorted(be, key=lambda i: (ts[i], 0 if batch.ph[i] == "E" else 1))
    for i in order:
        key = (batch.pid[i], batch.pid_str.get(i), batch.tid[i], batch.tid_str.get(i))
        if batch.ph[i] == "B":
            stacks.setdefault(key, []).append(i)
            dur[i] = 0
        else:
            keep[i] = False
            st = stacks.get(key)
            if st:
                b = st.pop()
                # in Python ints: hostile times far apart would wrap an int64 to a negative
                dur[b] = min(int(ts[i]) - int(ts[b]), _INT64_MAX)
    unmatched = sum(len(s) for s in stacks.values())
    if unmatched:
        meta.extra["unmatched_begin_events"] = unmatched


__all__ = ["read_kineto", "ingest", "rank_from_filename", "CAT_KIND"]
