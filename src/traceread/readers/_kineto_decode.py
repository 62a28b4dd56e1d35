"""Typed, columnar decoding of Chrome-trace events (Kineto and generic).

Two steps, independent of where the bytes come from, so a later reader can
stream a file in chunks:

1. ``decode_events(buf)`` / msgspec: JSON array of events -> list of ``Event``
   structs holding only the fields we use (unknown fields are skipped by the
   decoder, never materialised).
2. ``events_to_batch(events)`` -> ``Batch``: numpy / list columns for the
   events that become table rows, plus the metadata ('M') events.

``concat_batches`` joins batches. Trace-wide work (time base, GPU pid join,
kind mapping) happens in ``readers/kineto.py`` on the concatenated batch.
"""
from __future__ import annotations

import decimal
import re
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import repeat
from operator import attrgetter, is_, is_not
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

# Numbers in args are usually ints but some producers write floats or strings.
Num = Union[int, float, str, None]
# List-valued args (shapes, grid) are kept as the JSON text written in the file:
# no Python list per event, and the table stores them dictionary-encoded.
NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys we read; every other key is skipped by the decoder."""

    external_id: Num = msgspec.field(default=-1, name="External id")
    external_id_old: Num = msgspec.field(default=-1, name="external id")  # PyTorch 1.8-1.9
    correlation: Num = -1
    device: Num = -1
    stream: Num = -1
    bytes: Num = None
    size: Num = None                 # MTIA dma_request size
    kind: Any = None               # ROCm memcpy/memset kind ("DtoD"); kernels: "Dispatch Kernel"
    direction: Any = None          # MTIA dma direction ("DEVICE_TO_HOST")
    coll_name: Any = msgspec.field(default=None, name="Collective name")  # None: not a collective
    in_nelems: Num = msgspec.field(default=-1, name="In msg nelems")
    out_nelems: Num = msgspec.field(default=-1, name="Out msg nelems")
    dtype: Any = None
    group_size: Num = msgspec.field(default=-1, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_id: Num = msgspec.field(default=-1, name="Process Group ID")  # PyTorch 2.2-2.3
    name: Any = None               # 'M' events: process/thread name
    labels: Any = None             # 'M' process_labels
    # cpu_ops recorded with record_shapes / with_flops
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NO_RAW, name="Concrete Inputs")
    flops: Num = -1
    flops_cap: Num = msgspec.field(default=-1, name="Flops")  # spelling of some exporters
    # kernels: CUPTI launch configuration
    grid: msgspec.Raw = NO_RAW
    block: msgspec.Raw = NO_RAW
    registers: Num = msgspec.field(default=-1, name="registers per thread")
    shared_mem: Num = msgspec.field(default=-1, name="shared memory")
    occupancy: Num = msgspec.field(default=-1, name="est. achieved occupancy %")
    # profile_memory [memory] instants
    mem_bytes: Num = msgspec.field(default=None, name="Bytes")
    mem_allocated: Num = msgspec.field(default=-1, name="Total Allocated")
    mem_reserved: Num = msgspec.field(default=-1, name="Total Reserved")
    mem_device: Num = msgspec.field(default=-1, name="Device Id")


# Phases that become table rows. 'C' counters, 's'/'f'/'t' flows and the other
# Chrome phases are not events; 'M' metadata is collected separately.
ROW_PHASES = frozenset(("X", "i", "I", "B", "E"))
_META = frozenset(("M",))
# Every other phase of the Chrome trace-event format: decoded as empty structs
# (their content is skipped by the decoder, never materialised).
SKIP_PHASES = tuple("CbneSTpFstfPNODVvRc()")


def _event_type(ts_type: Any, label: str) -> Any:
    """A msgspec tagged union on ``ph``: one struct per phase.

    Row and 'M' structs hold the fields we use (``ts`` as float for the fast
    path or Decimal for the exact one); flows, counters etc. hold nothing. The
    phase is a class attribute, so ``event.ph`` still works. An event without
    ``ph`` or with an unknown phase fails validation and the document goes
    through the lenient path.
    """
    fields = [
        ("name", Any, ""),
        ("cat", Any, None),
        ("pid", Num, -1),
        ("tid", Num, -1),
        ("ts", ts_type, None),
        ("dur", Union[float, None], 0.0),
        ("args", Union[Args, None], None),  # None: no Args object for argument-less events
    ]
    kw = dict(tag_field="ph", gc=False)
    classes = [msgspec.defstruct(f"{label}_{p}", fields, tag=p, namespace={"ph": p}, **kw)
               for p in sorted(ROW_PHASES | _META)]
    classes += [msgspec.defstruct(f"{label}Skip_{ord(p)}", [], tag=p, namespace={"ph": p}, **kw)
                for p in SKIP_PHASES]
    return Union[tuple(classes)]


_NO_ARGS = Args()
# int | float keeps integer tokens apart: only float tokens can have lost a fraction.
Event = _event_type(Union[int, float, None], "Event")
ExactEvent = _event_type(Union[Decimal, None], "ExactEvent")
_EXACT_CLASSES = frozenset(ExactEvent.__args__)


def is_exact(events: list) -> bool:
    """True when the events were decoded with exact (Decimal) timestamps."""
    return bool(events) and type(events[0]) in _EXACT_CLASSES


_get = {f: attrgetter(f) for f in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args")}
# Present on most rows: extracted column-wise with C-level map().
DENSE_INT_FIELDS = ("external_id", "external_id_old", "correlation", "device", "stream")
# Present on few rows: found through one sentinel field, then read row by row.
COPY_INT_FIELDS = ("bytes", "size")
COPY_STR_FIELDS = ("kind", "direction")
COLL_INT_FIELDS = ("in_nelems", "out_nelems", "group_size", "pg_id")
COLL_STR_FIELDS = ("coll_name", "dtype", "pg_name", "pg_desc")
SHAPE_INT_FIELDS = ("flops",)    # args.flops, else args.Flops (merged at decode)
SHAPE_STR_FIELDS = ("input_dims", "input_type", "concrete_inputs")  # JSON text (Raw)
LAUNCH_INT_FIELDS = ("registers", "shared_mem", "occupancy")
LAUNCH_STR_FIELDS = ("grid", "block")             # JSON text (Raw in the struct)
MEM_INT_FIELDS = ("mem_bytes", "mem_allocated", "mem_reserved", "mem_device")
ARG_INT_FIELDS = (DENSE_INT_FIELDS + COPY_INT_FIELDS + COLL_INT_FIELDS + SHAPE_INT_FIELDS
                  + LAUNCH_INT_FIELDS + MEM_INT_FIELDS)
ARG_STR_FIELDS = COPY_STR_FIELDS + COLL_STR_FIELDS + SHAPE_STR_FIELDS + LAUNCH_STR_FIELDS
# Int args on few rows (ops with shapes, kernels, [memory] instants): the streaming
# path may hand them over as (rows, values) instead of a dense column; the reader
# expands them one at a time (``dense_ints``).
SPARSE_INT_FIELDS = SHAPE_INT_FIELDS + LAUNCH_INT_FIELDS + MEM_INT_FIELDS
# Fields whose absent value is the shared NO_RAW instance, not None.
RAW_FIELDS = frozenset(SHAPE_STR_FIELDS + LAUNCH_STR_FIELDS)
# String args present on many rows (every cpu_op / kernel): the streaming path
# ships them dictionary-coded rather than as one object per row.
DENSE_STR_FIELDS = SHAPE_STR_FIELDS + LAUNCH_STR_FIELDS
_aget = {f: attrgetter(f) for f in ARG_INT_FIELDS + ARG_STR_FIELDS + ("flops_cap",)}


@dataclass
class Batch:
    """Column arrays for one batch of decoded events (rows only, file order)."""

    n: int
    ph: list
    name: list
    cat: list
    pid: np.ndarray
    tid: np.ndarray
    pid_str: dict          # row -> non-numeric pid string ("Spans", "CPU functions")
    tid_str: dict          # row -> non-numeric tid string ("stream 7")
    ts_ns: np.ndarray      # int64: ts as written (µs) converted to ns, no time base added
    dur_ns: np.ndarray
    ts_lossy: bool         # float ts too large to hold ns: re-decode with ExactEvent
    ints: dict             # arg field -> int64 array (-1 unknown)
    strs: dict             # arg field -> list of str/None
    meta_events: list = field(default_factory=list)  # (name, pid, tid, args.name, args.labels)


class BadEvent(ValueError):
    """An event whose content cannot become a row; ``str()`` is the one-line reason."""


# Timestamps and ends must stay within +-2**62 ns so that any difference or sum of
# two of them fits in int64 (spans, gaps, busy time); that is +-146 years.
TS_NS_LIMIT = 2 ** 62
TS_US_LIMIT = TS_NS_LIMIT / 1000.0
MAX_DEPTH = 256
_TOKEN_RE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def nesting_reason(buf) -> str:
    """Reason for a document too deeply nested to decode (after a RecursionError)."""
    depth = 0
    for m in _TOKEN_RE.finditer(buf):
        c = buf[m.start()]
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return f"nesting deeper than {MAX_DEPTH} at byte {m.start():,}"
        elif c in (0x5D, 0x7D):
            depth -= 1
    return f"nesting too deep to decode (deeper than {MAX_DEPTH})"


def utf8_error(e: Exception) -> bool:
    """The decode failed on invalid UTF-8: ``UnicodeDecodeError`` from msgspec before 0.23,
    a ``DecodeError`` "Invalid UTF-8 encoded string" from 0.23 on (a fresh install's)."""
    return isinstance(e, UnicodeDecodeError) or (
        isinstance(e, msgspec.DecodeError) and "utf-8" in str(e).lower())


def utf8_repaired(buf) -> bytes:
    """``buf`` with every invalid UTF-8 sequence replaced by U+FFFD.

    Real traces carry such bytes in names (truncated multi-byte characters in
    kernel or op names); they are decoded with replacement, not refused.
    """
    return bytes(buf).decode("utf-8", "replace").encode("utf-8")


def decode_events(buf: bytes | memoryview, exact: bool = False) -> list:
    """JSON array of event objects -> list of Event structs (msgspec errors propagate)."""
    return msgspec.json.decode(buf, type=list[ExactEvent if exact else Event])


def _event_no(i: int, idx: list | None) -> int:
    return idx[i] if idx is not None else i


def check_strings(values: list, field: str, idx: list | None = None) -> None:
    """BadEvent when a name / cat is a JSON object or array (it has no string form)."""
    kinds = set(map(type, values))
    if not kinds & {dict, list}:
        return
    i = next(k for k, v in enumerate(values) if isinstance(v, (dict, list)))
    what = "an object" if isinstance(values[i], dict) else "an array"
    raise BadEvent(f"{field} is not a string at event {_event_no(i, idx):,} (it is {what})")


def check_ts_range(us: np.ndarray, rows: list, field: str, idx: list | None = None) -> None:
    """BadEvent naming the first event whose ``field`` (µs) is beyond +-2**62 ns."""
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.abs(us) > TS_US_LIMIT)
    if len(bad):
        i = int(bad[0])
        raise BadEvent(f"timestamp out of range at event {_event_no(i, idx):,} "
                       f"({_label(rows[i])}, {field} {us[i]:g} µs: beyond ±2^62 ns)")


def _label(e) -> str:
    name = getattr(e, "name", "")
    name = name if isinstance(name, str) else str(name)
    return repr(name[:60] + ("..." if len(name) > 60 else ""))


def events_to_batch(events: list) -> Batch:
    """Turn decoded events into column arrays. Pure function of the events."""
    ph_all = list(map(_get["ph"], events))
    masks = phase_masks(ph_all, (ROW_PHASES, _META))
    keep = masks[0]
    meta_idx = np.flatnonzero(masks[1]).tolist()
    meta_events = [(e.name, e.pid, e.tid, a.name, a.labels)
                   for e in map(events.__getitem__, meta_idx)
                   for a in (_NO_ARGS if e.args is None else e.args,)]
    idx = None
    if keep.all():
        rows = events
        ph = ph_all
    else:
        idx = np.flatnonzero(keep).tolist()
        rows = list(map(events.__getitem__, idx))
        ph = list(map(ph_all.__getitem__, idx))
    n = len(rows)
    names = list(map(_get["name"], rows))
    cats = list(map(_get["cat"], rows))
    check_strings(names, "name", idx)
    check_strings(cats, "cat", idx)
    # Nearly every Kineto trace has string pids/tids ("Spans", "stream 7"): skip the fast try.
    pid, pid_str = int_column(list(map(_get["pid"], rows)), mixed=True)
    tid, tid_str = int_column(list(map(_get["tid"], rows)), mixed=True)
    ts_us = _floats(rows, _get["ts"], np.nan)
    check_ts_range(ts_us, rows, "ts", idx)
    if n and is_exact(rows):
        ts_ns, lossy = exact_us_to_ns(list(map(_get["ts"], rows))), False
    else:
        ts_ns, lossy = us_to_ns(ts_us)
        lossy = lossy or _big_float_token(rows, ts_us)
    dur_us = _floats(rows, _get["dur"], 0.0)
    check_ts_range(dur_us, rows, "dur", idx)
    dur_ns, _ = us_to_ns(dur_us)
    args = list(map(_get["args"], rows))
    no_args = np.flatnonzero(np.fromiter(map(is_, args, repeat(None)), dtype=bool, count=n))
    for i in no_args.tolist():
        args[i] = _NO_ARGS
    ints = {f: _ints(args, _aget[f]) for f in DENSE_INT_FIELDS}
    strs: dict = {}
    _sparse(args, n, ("bytes", "size"), COPY_INT_FIELDS, COPY_STR_FIELDS, ints, strs)
    _sparse(args, n, ("coll_name",), COLL_INT_FIELDS, COLL_STR_FIELDS, ints, strs)
    # one sentinel per group: torch writes Input Dims on every op when shapes are
    # recorded (with_flops implies them), and grid on every kernel
    _sparse(args, n, ("input_dims",), SHAPE_INT_FIELDS + ("flops_cap",), SHAPE_STR_FIELDS,
            ints, strs)
    cap = ints.pop("flops_cap")
    ints["flops"] = np.where(ints["flops"] >= 0, ints["flops"], cap)
    _sparse(args, n, ("grid",), LAUNCH_INT_FIELDS, LAUNCH_STR_FIELDS, ints, strs)
    _sparse(args, n, ("mem_bytes",), MEM_INT_FIELDS, (), ints, strs)
    return Batch(n=n, ph=ph, name=names, cat=cats,
                 pid=pid, tid=tid, pid_str=pid_str, tid_str=tid_str, ts_ns=ts_ns, dur_ns=dur_ns,
                 ts_lossy=lossy, ints=ints, strs=strs, meta_events=meta_events)


class CodedList:
    """A read-only list of str / None kept as int32 codes into ``uniques`` (-1: None).

    The streaming reader's joined ``ph`` column: a few distinct values over
    millions of rows, so the masks below work on the codes, never on a list.
    """

    def __init__(self, codes: np.ndarray, uniques: list):
        self.codes, self.uniques = codes, uniques
        self._table = np.array(list(uniques) + [None], dtype=object)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._table[self.codes[i]].tolist()
        return self._table[self.codes[i]]

    def __iter__(self):
        return iter(self._table[self.codes].tolist())


def phase_masks(ph, sets: tuple) -> list:
    """One boolean row mask per set of phases, from a single hash factorize of ``ph``."""
    if isinstance(ph, CodedList):
        codes, uniq = ph.codes, ph.uniques
    else:
        codes, uniq = pd.factorize(np.array(ph, dtype=object), use_na_sentinel=True)
    return [np.array([u in s for u in uniq] + [False], dtype=bool)[codes] for s in sets]


def distinct(values) -> set:
    """``set(values)`` of a list or a ``CodedList`` (its values, without a pass over rows)."""
    if isinstance(values, CodedList):
        out = set(values.uniques)   # a joined dictionary holds only values that occur
        if len(values.codes) and int(values.codes.min()) < 0:
            out.add(None)
        return out
    return set(values)


def _floats(items: list, getter, fill: float) -> np.ndarray:
    try:  # no intermediate list in the common all-numbers case
        return np.fromiter(map(getter, items), dtype=np.float64, count=len(items))
    except (TypeError, ValueError):
        return float_column(list(map(getter, items)), fill=fill)


def _big_float_token(rows: list, us: np.ndarray) -> bool:
    """True when a ts above EXACT_US_LIMIT was written as a float.

    Its parsed value may have lost the fraction entirely (``...456.123`` parses
    to ``...456.0``), so a zero fraction after parsing proves nothing.
    """
    big = np.flatnonzero(np.abs(us) >= EXACT_US_LIMIT)
    get = _get["ts"]
    return any(type(get(rows[i])) is float for i in big.tolist())


def _ints(items: list, getter) -> np.ndarray:
    try:
        return np.fromiter(map(getter, items), dtype=np.int64, count=len(items))
    except (TypeError, ValueError, OverflowError):
        return int_column(list(map(getter, items)))[0]


def _sparse(args: list, n: int, sentinels: tuple, int_fields: tuple, str_fields: tuple,
            ints: dict, strs: dict) -> None:
    """Fill sparse arg columns: only rows where a sentinel field is present are read."""
    mask = np.zeros(n, dtype=bool)
    for f in sentinels:
        absent = NO_RAW if f in RAW_FIELDS else None
        mask |= np.fromiter(map(is_not, map(_aget[f], args), repeat(absent)), dtype=bool, count=n)
    rows = np.flatnonzero(mask).tolist()
    sub = [args[i] for i in rows]
    for f in int_fields:
        col = np.full(n, -1, dtype=np.int64)
        if rows:
            col[rows] = int_column(list(map(_aget[f], sub)))[0]
        ints[f] = col
    for f in str_fields:
        col = [None] * n
        vals = map(_aget[f], sub)
        if f in RAW_FIELDS:
            vals = _raw_texts(list(vals))
        for i, v in zip(rows, vals):
            col[i] = v
        strs[f] = col


def _raw_texts(raws: list) -> list:
    """JSON texts of Raw args; None where absent (empty) or ``null``."""
    out = list(map(str, raws, repeat("utf-8")))
    if "" in out or "null" in out:
        out = [None if t in ("", "null") else t for t in out]
    return out


def dense_ints(v, n: int) -> np.ndarray:
    """An int arg column: a dense int64 array, or (rows, values) expanded to one (-1 elsewhere)."""
    if isinstance(v, tuple):
        rows, vals = v
        out = np.full(n, -1, dtype=np.int64)
        out[rows] = vals
        return out
    return v


def concat_batches(batches: list[Batch]) -> Batch:
    """Join batches in order (row numbers in pid_str/tid_str are shifted)."""
    if len(batches) == 1:
        return batches[0]
    offs = np.cumsum([0] + [b.n for b in batches])
    pid_str, tid_str = {}, {}
    for off, b in zip(offs, batches):
        pid_str.update({int(off) + k: v for k, v in b.pid_str.items()})
        tid_str.update({int(off) + k: v for k, v in b.tid_str.items()})
    cat = lambda attr: [x for b in batches for x in getattr(b, attr)]  # noqa: E731
    return Batch(
        n=int(offs[-1]), ph=cat("ph"), name=cat("name"), cat=cat("cat"),
        pid=np.concatenate([b.pid for b in batches]), tid=np.concatenate([b.tid for b in batches]),
        pid_str=pid_str, tid_str=tid_str,
        ts_ns=np.concatenate([b.ts_ns for b in batches]),
        dur_ns=np.concatenate([b.dur_ns for b in batches]),
        ts_lossy=any(b.ts_lossy for b in batches),
        ints={f: np.concatenate([dense_ints(b.ints[f], b.n) for b in batches])
              for f in ARG_INT_FIELDS},
        strs={f: [x for b in batches for x in b.strs[f]] for f in ARG_STR_FIELDS},
        meta_events=cat("meta_events"))


# --- scalar columns -----------------------------------------------------------

_INT_RE = re.compile(r"^\s*-?\d+\s*$")
_STREAM_RE = re.compile(r"^\s*stream\s+(-?\d+)", re.IGNORECASE)


def int_column(values: list, mixed: bool = False) -> tuple[np.ndarray, dict]:
    """int64 array from ints (fast path) or mixed values; -1 where unknown.

    Returns the array and ``{row: string}`` for strings that are not numbers
    (``"Spans"``, ``"stream 7"``). Mixed columns (pid/tid) hold few distinct
    values, so they are converted per distinct value after a hash factorize.
    """
    n = len(values)
    if not mixed:
        try:
            return np.fromiter(values, dtype=np.int64, count=n), {}
        except (TypeError, ValueError, OverflowError):
            pass
    codes, uniq = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
    conv = np.array([_to_int(u) for u in uniq] + [-1], dtype=np.int64)
    out = conv[codes]  # code -1 (None) picks the trailing -1
    strings: dict = {}
    for k, u in enumerate(uniq):
        if isinstance(u, str) and not _INT_RE.match(u):
            strings.update(dict.fromkeys(np.flatnonzero(codes == k).tolist(), u))
    return out, strings


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else -1
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 9.2e18 else -1
    if isinstance(v, str) and _INT_RE.match(v):
        iv = int(v)
        return iv if -2**63 <= iv < 2**63 else -1
    return -1


def float_column(values: list, fill: float = np.nan) -> np.ndarray:
    n = len(values)
    try:
        return np.fromiter(values, dtype=np.float64, count=n)
    except (TypeError, ValueError):
        pass
    out = np.full(n, fill, dtype=np.float64)
    for i, v in enumerate(values):
        if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            out[i] = v
        elif isinstance(v, str):
            try:
                out[i] = float(v)
            except ValueError:
                pass
    return out


# float64 holds every multiple of 1 ns exactly below 2**43 µs (ulp < 1 ns there;
# the integer/fraction split below keeps the *1000 from adding error).
EXACT_US_LIMIT = float(2 ** 43)
NS_MISSING = np.iinfo(np.int64).min  # ts that was null/absent; such rows are dropped


def us_to_ns(us: np.ndarray) -> tuple[np.ndarray, bool]:
    """Microseconds (float64) -> int64 ns, rounding to the nearest ns.

    Exact for every value written with <= 3 decimals below 2**43 µs and for
    integral values up to 2**53. ``lossy`` is True when some value is above the
    limit with a fraction: the parsed float may be off by up to 0.25 µs and the
    caller must re-decode those timestamps exactly.
    """
    missing = np.isnan(us)
    if missing.any():
        us = np.where(missing, 0.0, us)
    ip = np.floor(us)
    frac = us - ip
    ns = ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)
    big = np.abs(us) >= EXACT_US_LIMIT
    lossy = bool(big.any() and (frac[big] != 0).any())
    if missing.any():
        ns[missing] = NS_MISSING
    return ns, lossy


def exact_us_to_ns(values: list) -> np.ndarray:
    """Decimal / int / str microseconds -> int64 ns, exact (round half to even)."""
    ctx = decimal.Context(prec=40, rounding=decimal.ROUND_HALF_EVEN)
    scale, to_int = ctx.scaleb, ctx.to_integral_value
    three = Decimal(3)
    out = [NS_MISSING if v is None else
           int(to_int(scale(v if isinstance(v, Decimal) else Decimal(str(v)), three)))
           for v in values]
    return np.array(out, dtype=np.int64)


def _ts_only_type() -> tuple:
    """Tagged union decoding nothing but an exact ``ts`` of row events."""
    kw = dict(tag_field="ph", gc=False)
    rows = [msgspec.defstruct(f"ExactTs_{p}", [("ts", Union[Decimal, None], None)], tag=p,
                              namespace={"ph": p}, **kw) for p in sorted(ROW_PHASES)]
    skip = [msgspec.defstruct(f"ExactTsSkip_{ord(p)}", [], tag=p, namespace={"ph": p}, **kw)
            for p in SKIP_PHASES + ("M",)]
    return Union[tuple(rows + skip)], frozenset(rows)


TsOnlyEvent, _TS_ROW_CLASSES = _ts_only_type()
_TsDoc = msgspec.defstruct("TsDoc", [("traceEvents", Union[list[TsOnlyEvent], None], None)])
TS_ONLY_DOC = Union[_TsDoc, list[TsOnlyEvent]]


def exact_row_ts(doc: Any) -> np.ndarray:
    """Exact ns ts of the row events of a ``TS_ONLY_DOC`` decode, in file order."""
    events = doc if isinstance(doc, list) else (doc.traceEvents or [])
    keep = np.fromiter(map(_TS_ROW_CLASSES.__contains__, map(type, events)), dtype=bool,
                       count=len(events))
    rows = list(map(events.__getitem__, np.flatnonzero(keep).tolist()))
    return exact_us_to_ns(list(map(_get["ts"], rows)))


def stream_from_tid(tid_str: dict) -> dict:
    """{row: stream} for "stream 7" style tids (PyTorch 1.8-1.9 GPU rows)."""
    out = {}
    for i, s in tid_str.items():
        m = _STREAM_RE.match(s)
        if m:
            out[i] = int(m.group(1))
    return out


# --- trace-wide checks on the columns (readers/kineto.py) ----------------------

def add_base(ts: np.ndarray, dur: np.ndarray, keep: np.ndarray, base: int,
              name_d: pa.DictionaryArray) -> None:
    """ts += baseTimeNanoseconds, refusing any start or end beyond +-2**62 ns.

    numpy would wrap silently past int64 (negative spans and busy times).
    """
    lim = TS_NS_LIMIT
    if not -lim <= base <= lim:
        raise BadEvent(f"baseTimeNanoseconds {base} out of range (beyond ±2^62 ns)")
    if not keep.any():
        return
    # masked reductions: no copy of the kept rows (3 columns of temporaries at 1 GB: 57 MB)
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    # in Python ints: the sums below must not wrap while being checked
    lo = (int(ts.min(where=keep, initial=top)) + base
          + min(0, int(dur.min(where=keep, initial=top))))
    hi = (int(ts.max(where=keep, initial=bottom)) + base
          + max(0, int(dur.max(where=keep, initial=bottom))))
    if -lim <= lo and hi <= lim:
        if base:
            ts += base
        return
    rows = np.flatnonzero(keep)
    t, d = ts[rows], dur[rows]
    t = t.astype(object) + base
    end = t + d.astype(object)
    i = int(np.flatnonzero((t < -lim) | (t > lim) | (end < -lim) | (end > lim))[0])
    name = name_d[int(rows[i])].as_py()
    raise BadEvent(f"timestamp out of range at event {int(rows[i]):,} ({name!r}, "
                       f"ts {t[i]} ns, end {end[i]} ns"
                       + (f" with baseTimeNanoseconds {base}" if base else "")
                       + ": beyond ±2^62 ns)")


MAX_NAME_CHARS = 1 << 16  # longer names are clipped: no real op or kernel name comes close


def clip_long(d: pa.DictionaryArray) -> tuple[pa.DictionaryArray, int]:
    """Names longer than MAX_NAME_CHARS clipped (with a marker); (array, how many).

    Every pass runs its name patterns over each distinct name: one name of
    200 MB made the analysis take minutes and gigabytes.
    """
    import pyarrow.compute as pc

    if not len(d.dictionary):
        return d, 0
    lengths = pc.utf8_length(d.dictionary)
    if pc.max(lengths).as_py() <= MAX_NAME_CHARS:
        return d, 0
    vals = d.dictionary.to_pylist()
    n = sum(len(v) > MAX_NAME_CHARS for v in vals)
    vals = [v if len(v) <= MAX_NAME_CHARS else
            f"{v[:MAX_NAME_CHARS]}...[{len(v) - MAX_NAME_CHARS:,} more chars]" for v in vals]
    codes = d.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    remap, uniq = pd.factorize(np.array(vals, dtype=object))  # clipping may merge two names
    new = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
    return pa.DictionaryArray.from_arrays(pa.array(new.astype(np.int32), mask=new < 0),
                                          pa.array(list(uniq), type=pa.string())), n
