"""Readers: one per file format, each returning a ``Trace`` with the shared table."""
from __future__ import annotations

import os

from ..detect import sniff
from ..errors import TraceError
from ..table import Trace


def read(path: str | os.PathLike, progress: bool = False) -> Trace:
    """Load any supported trace file, detecting the format by content."""
    fmt = sniff(path)
    if fmt == "sqlite":
        from .nsys import read_nsys

        return read_nsys(path, progress=progress)
    from .kineto import read_kineto

    return read_kineto(path, progress=progress)


__all__ = ["read", "TraceError"]
