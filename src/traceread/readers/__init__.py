"""Readers: one per file format, each returning a ``Trace`` with the shared table."""
from __future__ import annotations

import os

from ..detect import sniff
from ..errors import TraceError
from ..table import Trace


def read(path: str | os.PathLike, progress: bool = False, cache: bool = False,
         stream: bool | None = None) -> Trace:
    """Load any supported trace file, detecting the format by content.

    ``cache=True`` reuses (or stores) the finished event table in the user cache
    dir, keyed by path + size + mtime (``traceread.cache``). ``stream`` picks
    the JSON ingest path: None = streaming for big files (``readers/stream.py``),
    True / False = force it on / off (both give the same table).
    """
    fmt = sniff(path)
    if cache:
        from .. import cache as _cache

        hit = _cache.load(path)
        if hit is not None:
            return hit
    trace = _read_uncached(path, fmt, progress, stream)
    if cache:
        _cache.store(path, trace)
    return trace


def _read_uncached(path, fmt: str, progress: bool, stream: bool | None) -> Trace:
    if fmt == "sqlite":
        from .nsys import read_nsys

        return read_nsys(path, progress=progress)
    from . import stream as _stream

    if stream is None:
        stream = _stream.estimated_raw_size(path) >= _stream.stream_min_bytes()
    if stream:
        return _stream.read_stream(path, progress=progress)
    from .kineto import read_kineto

    return read_kineto(path, progress=progress)


def decoder_name() -> str:
    """Which chunk decoder the streaming JSON reader uses: native C or msgspec."""
    from ._native import decoder_name as name

    return name()


__all__ = ["read", "TraceError", "decoder_name"]
