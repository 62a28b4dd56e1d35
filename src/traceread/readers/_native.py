"""Picks the per-chunk decoder of the streaming reader: native C or msgspec.

The native decoder (``_cscan.c``, built by ``setup.py`` where a C compiler is
available) turns one chunk of events into the same ``Chunk`` as
``stream.decode_chunk``'s msgspec path, bit for bit. It declines a chunk it
does not fully understand (returns None); the msgspec path then decodes that
chunk, so results and error messages are the Python path's either way.

``TRACEREAD_DECODER=python`` forces the msgspec path (``native`` requires the
extension: an error when it is not built).
"""
from __future__ import annotations

import os

try:
    from . import _cscan
except ImportError:  # no compiler at install time: the Python decoder only
    _cscan = None

ENV = "TRACEREAD_DECODER"
# What _cscan.c reads and returns, in its order. When _kineto_decode or the
# Chunk gains a field (a new arg column, say), the scanner would silently
# miss it: it is switched off (Python decodes everything) until updated.
SCANNED = {
    "event fields": ("name", "cat", "pid", "tid", "ts", "dur", "args"),
    "args keys": ("External id", "external id", "correlation", "device", "stream", "bytes",
                  "size", "kind", "direction", "Collective name", "In msg nelems",
                  "Out msg nelems", "dtype", "Group size", "Process Group Name",
                  "Process Group Description", "Process Group ID", "name", "labels"),
    "int arg columns": ("external_id", "external_id_old", "correlation", "device", "stream",
                        "bytes", "size", "in_nelems", "out_nelems", "group_size", "pg_id"),
    "str arg columns": ("kind", "direction", "coll_name", "dtype", "pg_name", "pg_desc"),
    "row phases": ("B", "E", "I", "X", "i"),
    "other phases": tuple("CbneSTpFstfPNODVvRc()"),
    "chunk fields": ("n", "strs_coded", "sparse", "arrays", "pid_str", "tid_str", "ts_lossy",
                     "meta_events"),
}
# The "ext" shape of Args: shapes (record_shapes / with_flops), kernel launch
# configuration and [memory] instants; Raw fields come back as JSON text,
# dictionary-coded (DENSE_STR_FIELDS).
EXT_RAW = ("input_dims", "input_type", "concrete_inputs", "grid", "block")
SCANNED_EXT = {
    **SCANNED,
    "args keys": SCANNED["args keys"] + (
        "Input Dims", "Input type", "Concrete Inputs", "flops", "Flops", "grid", "block",
        "registers per thread", "shared memory", "est. achieved occupancy %", "Bytes",
        "Total Allocated", "Total Reserved", "Device Id"),
    "int arg columns": SCANNED["int arg columns"] + (
        "flops", "registers", "shared_mem", "occupancy", "mem_bytes", "mem_allocated",
        "mem_reserved", "mem_device"),
    "str arg columns": SCANNED["str arg columns"] + EXT_RAW,
    "dense str columns": EXT_RAW,
}
SCANNED["dense str columns"] = ()
# chunks each decoder produced in this process (workers count their own)
stats = {"native": 0, "python": 0}


def stale() -> str:
    """'' when the scanner covers what the Python decode reads, else what differs."""
    return _shape()[1]


def _shape() -> tuple[dict | None, str]:
    """(the SCANNED table _kineto_decode matches, '') or (None, what differs)."""
    import dataclasses

    from . import _kineto_decode as dec  # imported here: `traceread --version` stays light
    from .common import Chunk

    event = dec.Event.__args__[0]
    now = {
        "event fields": event.__struct_fields__,
        "args keys": dec.Args.__struct_encode_fields__,
        "int arg columns": dec.ARG_INT_FIELDS,
        "str arg columns": dec.ARG_STR_FIELDS,
        "row phases": tuple(sorted(dec.ROW_PHASES)),
        "other phases": dec.SKIP_PHASES,
        # fields with a default (a flag only the Python path sets, such as a
        # repaired-UTF-8 mark) are left at it by the scanner
        "chunk fields": tuple(f.name for f in dataclasses.fields(Chunk)
                              if f.default is dataclasses.MISSING
                              and f.default_factory is dataclasses.MISSING),
        "dense str columns": tuple(getattr(dec, "DENSE_STR_FIELDS", ())),
    }
    for shape in (SCANNED, SCANNED_EXT):
        if all(now[k] == v for k, v in shape.items()):
            return shape, ""
    return None, ", ".join(k for k, v in SCANNED.items() if now[k] != v)


def available() -> bool:
    return _cscan is not None and not _stale()


_STALE: list = []


def _stale() -> str:
    if not _STALE:  # computed once, on first use (stream imports this module)
        shape, why = _shape()
        _STALE.extend([why, shape is SCANNED_EXT])
    return _STALE[0]


def _ext() -> bool:
    _stale()
    return bool(_STALE[1:] and _STALE[1])


def wanted() -> bool:
    """True when chunks should go to the native decoder."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "python":
        return False
    if choice == "native" and not available():
        raise RuntimeError(f"{ENV}=native but the native decoder is "
                           + (f"out of date ({_stale()} changed)" if _cscan else
                              "not built (reinstall with a C compiler)"))
    return available()


def decoder_name(verify: bool = True) -> str:
    """Which chunk decoder the streaming reader uses here, in words.

    ``verify=False`` does not run the stale check unless it already ran: that
    check imports ``_kineto_decode`` and ``stream`` (pandas, ~0.5 s), too much
    for ``traceread --version``. Any commit CI passes has a current scanner
    (tests/test_cscan.py asserts ``stale() == ""``), so a built one is used.
    """
    if os.environ.get(ENV, "").strip().lower() == "python":
        return f"python (msgspec; forced by {ENV})"
    if _cscan is None:
        return "python (msgspec; native decoder not built)"
    if (verify or _STALE) and _stale():
        return f"python (msgspec; native decoder out of date: {_stale()} changed)"
    return "native (C, readers/_cscan.c; msgspec for chunks it declines)"


def decode(buf, exact: bool, bare: bool = False):
    """``[`` + events + ``]`` bytes -> stream.Chunk, or None to use the msgspec path.

    ``bare``: buf holds the events without the brackets (a view into the
    file: no copy).
    """
    if not wanted():
        return None
    ext = _ext()
    res = _cscan.scan(buf, exact, bare, ext)
    if res is None:
        stats["python"] += 1
        return None
    stats["native"] += 1
    return _chunk(res, ext)


def _chunk(res: tuple, ext: bool = False):
    import numpy as np

    from .common import Chunk

    (n, ph, ph_u, name, name_u, cat, cat_u, ints, sparse, pid_str, tid_str, lossy,
     meta) = res
    shape = SCANNED_EXT if ext else SCANNED
    int_columns = ("pid", "tid", "ts_ns", "dur_ns") + shape["int arg columns"]
    # packed by the scanner as _pack_ints does: (int32 rows, values) or the dense column
    arrays = {k: (np.frombuffer(b[0], dtype=np.int32), np.frombuffer(b[1], dtype=np.int64))
              if isinstance(b, tuple) else np.frombuffer(b, dtype=np.int64)
              for k, b in zip(int_columns, ints)}
    coded = {k: (np.frombuffer(b, dtype=np.int32), u)
             for k, b, u in (("ph", ph, ph_u), ("name", name, name_u), ("cat", cat, cat_u))}
    sparse = {f: _sparse(v) for f, v in zip(shape["str arg columns"], sparse)}
    return Chunk(n=n, strs_coded=coded, sparse=sparse, arrays=arrays, pid_str=pid_str,
                 tid_str=tid_str, ts_lossy=lossy, meta_events=meta)


def _sparse(v: tuple) -> tuple:
    """(rows, values), or for Raw text columns (rows, (codes, dictionary))."""
    import numpy as np

    if len(v) == 2:
        rows, vals = v
        return np.array(rows, dtype=np.int64), vals
    rows, codes, uniques = v
    return np.frombuffer(rows, dtype=np.int64), (np.frombuffer(codes, dtype=np.int32), uniques)
