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
        ours = batch_outputs(dirpath, filenames, dirnames)
        dirnames[:] = [d for d in dirnames if d not in ours]
        for name in sorted(filenames):
            if name in ours:   # what an earlier `traceread batch -o` wrote here
                continue
            p = os.path.join(dirpath, name)
            if is_trace_candidate(p, name):
                found.append(p)
            else:
                skipped.append(p)
    return found, skipped


# What ``traceread batch -o OUT`` writes into OUT (jobs/output.py); kept here, below it.
BATCH_FILES = ("summary.parquet", "summary.csv", "ranks.parquet", "matches.parquet",
               "jobs.parquet", "jobs.json", "report.html", "summary.partial.csv")
BATCH_MARKER = ".traceread-batch"   # in OUT/tables/


def batch_outputs(dirpath: str, filenames, dirnames) -> set[str]:
    """The names in ``dirpath`` that a ``traceread batch`` run wrote there (its files and
    its tables/), empty when it holds no batch output. A batch over a folder that holds
    an earlier one's output (``batch DIR -o DIR/out`` run twice) must not read its
    jobs.json as a trace nor refuse to replace its own files as inputs."""
    names = set(filenames)
    tables = "tables" in dirnames and os.path.isfile(os.path.join(dirpath, "tables", BATCH_MARKER))
    summary = bool(names & {"summary.parquet", "summary.csv", "summary.partial.csv"})
    if not (tables or (summary and names & {"jobs.json", "jobs.parquet", "ranks.parquet",
                                             "summary.partial.csv"})):
        return set()
    return (names & set(BATCH_FILES)) | ({"tables"} if tables else set())


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
