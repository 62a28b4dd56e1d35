"""Which files under a folder (or an fsspec URL) are traces: what ``traceread batch``
analyses and what a folder diff pairs up.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceError
from ..readers.detect import TRACE_SUFFIXES, is_trace_candidate, looks_like_trace


def is_url(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def discover(root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Candidate trace files under ``root`` (recursively) and the files skipped.

    A file is a candidate when its first bytes are JSON, gzip or SQLite, or when its
    name looks like a trace (then a non-trace is reported as an error, not lost).
    ``root`` may be a single file. Sorted, deterministic.
    """
    if is_url(root):
        return _discover_url(str(root))
    root = Path(root)
    if not root.exists():
        raise TraceError(root, "no such file or directory")
    if not root.is_dir():
        return [str(root)], []  # one file; a FIFO or device is refused by the worker
    found, skipped = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if is_trace_candidate(p, name):
                found.append(p)
            else:
                skipped.append(p)
    return found, skipped


def _discover_url(url: str) -> tuple[list[str], list[str]]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    paths = [root] if fs.isfile(root) else sorted(fs.find(root))
    found, skipped = [], []
    for p in paths:
        with fs.open(p, "rb") as f:
            head = f.read(64)
        full = p if "://" in p else f"{protocol}://{p}"
        (found if looks_like_trace(head) or p.lower().endswith(TRACE_SUFFIXES) else skipped).append(full)
    return found, skipped
