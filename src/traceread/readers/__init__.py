"""Readers: one per file format, each returning a ``Trace`` with the shared table."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .detect import as_path, sniff
from ..errors import TraceError

if TYPE_CHECKING:  # the table module imports pandas; `traceread --version` must not
    from ..table import Trace


def read(path: str | os.PathLike, progress: bool = False, cache: bool = False,
         stream: bool | None = None, strict: bool = False) -> Trace:
    """Load any supported trace file, detecting the format by content.

    ``cache=True`` reuses (or stores) the finished event table in the user cache
    dir, keyed by the file's identity (``readers/cache.py``). ``stream`` picks
    the JSON ingest path: None = streaming for big files (``readers/stream.py``),
    True / False = force it on / off (both give the same table).

    A JSON trace cut short (a killed run, a full disk) is read up to its last
    complete event and ``trace.meta.extra["truncated"]`` says where and how
    much (``docs/robustness.md``); ``strict=True`` refuses it instead.
    """
    path = as_path(path, "traceread.load")
    fmt = sniff(path)
    if cache:
        from . import cache as _cache

        hit = _cache.load(path)
        if hit is not None and not (strict and "truncated" in hit.meta.extra):
            return hit
        before = os.stat(path)  # a file changed while being read is not cached
    from .validate import validate

    trace = validate(_read_uncached(path, fmt, progress, stream, strict))
    if cache:
        _cache.store(path, trace, before=before)
    return trace


def _read_uncached(path, fmt: str, progress: bool, stream: bool | None,
                   strict: bool = False) -> Trace:
    if fmt == "sqlite":
        from .nsys import read_nsys

        return read_nsys(path, progress=progress)
    from . import stream as _stream

    if stream is None:
        stream = _stream.estimated_raw_size(path) >= _stream.stream_min_bytes()
    if stream and _wide_text(path, fmt):
        stream = False  # UTF-16/32 JSON is transcoded whole (the chunk splitter reads bytes)
    if stream:
        return _stream.read_stream(path, progress=progress, strict=strict)
    from .kineto import read_kineto

    return read_kineto(path, progress=progress, strict=strict)


def _wide_text(path, fmt: str) -> bool:
    """Whether a JSON trace's text (inflated, for gzip) is UTF-16 or UTF-32."""
    import zlib

    from .detect import read_head, wide_json_encoding

    head = read_head(path, 4096)
    if fmt == "json.gz":
        try:
            head = zlib.decompressobj(31).decompress(head, 4)
        except zlib.error:
            return False  # the reader says what is wrong with it
    return wide_json_encoding(head) is not None


def decoder_name(verify: bool = True) -> str:
    """Which chunk decoder the streaming JSON reader uses: native C or msgspec.

    ``verify=False`` (``traceread --version``) skips the check of the scanner
    against the Python decoder, which imports pandas (see ``_native.decoder_name``)."""
    from ._native import decoder_name as name

    return name(verify)


__all__ = ["read", "TraceError", "decoder_name"]
