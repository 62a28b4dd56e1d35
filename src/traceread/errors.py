"""The one exception type users see: a clean, one-line reason about one file."""
from __future__ import annotations

import os
import re

# os.fsdecode turns each byte of a file name that is not UTF-8 into a lone surrogate
# (U+DC80-U+DCFF, "surrogateescape"); no UTF-8 writer, pyarrow string or pandas 3 str
# column takes one, so a shown name carries such a byte as the visible escape \xNN.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def display_path(path: object) -> str:
    """``path`` (str, bytes or PathLike) as text any UTF-8 output takes: the bytes of a
    name that are not UTF-8 become ``\\xNN`` (``bad\\xff.json``), every other character
    stays (a newline too: terminal text escapes it, CSV quotes it, JSON escapes it)."""
    if isinstance(path, (bytes, bytearray)):
        path = os.fsdecode(bytes(path))
    elif isinstance(path, os.PathLike):
        path = os.fspath(path)
        path = os.fsdecode(path) if isinstance(path, bytes) else path
    s = str(path)
    return _SURROGATE.sub(_escape_surrogate, s) if _SURROGATE.search(s) else s


class TraceError(Exception):
    """Input we cannot read. ``str(err)`` is ``"<path>: <reason>"``, one line."""

    def __init__(self, path: object, reason: str):
        self.path = display_path(path)
        self.reason = display_path(" ".join(str(reason).split()))  # always one line
        super().__init__(f"{self.path}: {self.reason}")


def out_of_memory(path: object) -> str:
    """The one line for a MemoryError while reading or analysing ``path``: the size that
    caused it, so the user knows how much memory to find (not "internal error")."""
    size = ""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        size = f" ({st.st_size / 2**20:,.1f} MB on disk" + (
            ", gzip: about 10x that of JSON text" if gz else "") + ")"
    except (OSError, TypeError, ValueError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
        at = f" after reaching {peak:,.0f} MB"
    except (ImportError, OSError, ValueError):
        at = ""
    return (f"out of memory{at} reading or analysing this trace{size}: run it where more "
            "memory is free, or record a shorter capture")
