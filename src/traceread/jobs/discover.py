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


class Skipped(list):
    """The files ``discover`` did not take, each named; ``why[path]``: the reason."""

    def __init__(self):
        super().__init__()
        self.why: dict[str, str] = {}
        self.outputs: dict[str, int] = {}   # an earlier batch's OUT -> its files skipped here

    def add(self, path: str, why: str, out: str | None = None) -> None:
        self.append(path)
        self.why[path] = why
        if out is not None:
            self.outputs[out] = self.outputs.get(out, 0) + 1


NOT_A_TRACE = "not a trace by content or name"
EARLIER_OUTPUT = "written by an earlier traceread batch (its manifest holds these bytes)"


def discover(root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Candidate trace files under ``root`` (recursively) and the files skipped.

    A file is a candidate when its first bytes are JSON, gzip or SQLite, or when its
    name looks like a trace (then a non-trace is reported as an error, not lost).
    ``root`` may be a single file. Sorted, deterministic. The skipped list (a
    ``Skipped``) names every other file with its reason: nothing is left out unnamed.
    A file that an earlier ``traceread batch -o`` wrote is skipped only when its bytes are
    those the run's manifest recorded (``OUT/tables/.traceread-batch``): never by its name.
    """
    if is_url(root):
        return _discover_url(str(root))
    root = Path(root)
    if not root.exists():
        raise TraceError(root, "no such file or directory")
    if not root.is_dir():
        return [str(root)], Skipped()  # one file; a FIFO or device is refused by the worker
    found, skipped = [], Skipped()
    earlier: dict[str, list] = {}     # path -> [size, sha256] an earlier batch wrote there
    out_of: dict[str, str] = {}       # path -> that batch's OUT
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        wrote = batch_manifest(dirpath)
        earlier.update(wrote)
        out_of.update(dict.fromkeys(wrote, dirpath))
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if p in earlier and (earlier[p] == "manifest" or file_digest(p) == earlier[p]):
                skipped.add(p, EARLIER_OUTPUT, out_of[p])
            elif is_trace_candidate(p, name):
                found.append(p)
            else:
                skipped.add(p, NOT_A_TRACE)
    return found, skipped


BATCH_MARKER = ".traceread-batch"   # in OUT/tables/: the manifest of what the run wrote
MANIFEST_KIND = "traceread batch"
MANIFEST_MAX = 64 << 20             # a manifest lists a few files per trace: far below this


def batch_manifest(dirpath: str) -> dict[str, list | str]:
    """{path: [size, sha256]} of the files a ``traceread batch -o DIRPATH`` run wrote, read
    from its manifest (empty without one; a marker that is not a manifest proves nothing)."""
    import json

    marker = os.path.join(dirpath, "tables", BATCH_MARKER)
    try:
        if not os.path.isfile(marker) or os.path.getsize(marker) > MANIFEST_MAX:
            return {}
        with open(marker, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) and doc.get("written_by") == MANIFEST_KIND \
        else None
    if not isinstance(files, dict):
        return {}
    out = {os.path.join(dirpath, *rel.split("/")): v for rel, v in files.items()
           if isinstance(rel, str) and ".." not in rel.split("/") and isinstance(v, list)}
    out[marker] = "manifest"      # the manifest itself: it parsed as one
    return out


def file_digest(path: str) -> list:
    """[size, sha256 hex] of the file at ``path`` ([-1, ""] when it cannot be read)."""
    import hashlib

    try:
        if not os.path.isfile(path):   # a FIFO or device is never opened
            return [-1, ""]
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
        return [size, h.hexdigest()]
    except OSError:
        return [-1, ""]


def _discover_url(url: str) -> tuple[list[str], list[str]]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    paths = [root] if fs.isfile(root) else sorted(fs.find(root))
    found, skipped = [], Skipped()
    for p in paths:
        with fs.open(p, "rb") as f:
            head = f.read(64)
        full = p if "://" in p else f"{protocol}://{p}"
        if looks_like_trace(head) or p.lower().endswith(TRACE_SUFFIXES):
            found.append(full)
        else:
            skipped.add(full, NOT_A_TRACE)
    return found, skipped
