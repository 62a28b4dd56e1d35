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

import numpy as np

from . import _kineto_decode as dec

try:
    from . import _cscan
except ImportError:  # no compiler at install time: the Python decoder only
    _cscan = None

ENV = "TRACEREAD_DECODER"
INT_COLUMNS = ("pid", "tid", "ts_ns", "dur_ns") + dec.ARG_INT_FIELDS
# chunks each decoder produced in this process (workers count their own)
stats = {"native": 0, "python": 0}


def available() -> bool:
    return _cscan is not None


def wanted() -> bool:
    """True when chunks should go to the native decoder."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "python":
        return False
    if choice == "native" and _cscan is None:
        raise RuntimeError(f"{ENV}=native but the native decoder is not built "
                           "(reinstall with a C compiler)")
    return _cscan is not None


def decoder_name() -> str:
    """Which chunk decoder the streaming reader uses here, in words."""
    if wanted():
        return "native (C, readers/_cscan.c; msgspec for chunks it declines)"
    if _cscan is None:
        return "python (msgspec; native decoder not built)"
    return f"python (msgspec; forced by {ENV})"


def decode(buf, exact: bool, bare: bool = False):
    """``[`` + events + ``]`` bytes -> stream.Chunk, or None to use the msgspec path.

    ``bare``: buf holds the events without the brackets (a view into the
    file: no copy).
    """
    if not wanted():
        return None
    res = _cscan.scan(buf, exact, bare)
    if res is None:
        stats["python"] += 1
        return None
    stats["native"] += 1
    return _chunk(res)


def _chunk(res: tuple):
    from .stream import Chunk, _pack_ints

    (n, ph, ph_u, name, name_u, cat, cat_u, ints, sparse, pid_str, tid_str, lossy,
     meta) = res
    arrays = {k: _pack_ints(np.frombuffer(b, dtype=np.int64)) for k, b in zip(INT_COLUMNS, ints)}
    coded = {k: (np.frombuffer(b, dtype=np.int32), u)
             for k, b, u in (("ph", ph, ph_u), ("name", name, name_u), ("cat", cat, cat_u))}
    sparse = {f: (np.array(rows, dtype=np.int64), vals)
              for f, (rows, vals) in zip(dec.ARG_STR_FIELDS, sparse)}
    return Chunk(n=n, strs_coded=coded, sparse=sparse, arrays=arrays, pid_str=pid_str,
                 tid_str=tid_str, ts_lossy=lossy, meta_events=meta)
