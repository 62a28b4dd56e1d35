"""Sniff a file's container format from its first bytes, never its name."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def sniff(path: str | os.PathLike) -> str:
    """Return "json", "json.gz" or "sqlite"; raise TraceError otherwise."""
    p = Path(path)
    try:
        if p.is_dir():
            raise TraceError(p, "is a directory, not a trace file")
        with open(p, "rb") as f:
            head = f.read(4096)
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except PermissionError:
        raise TraceError(p, "permission denied") from None
    except IsADirectoryError:
        raise TraceError(p, "is a directory, not a trace file") from None
    except OSError as e:
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    if not head:
        raise TraceError(p, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(GZIP_MAGIC):
        return "json.gz"
    if _looks_like_json(head):
        return "json"
    raise TraceError(p, "unknown format (not JSON, gzip or SQLite)")


def _looks_like_json(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return text[:1] in (b"{", b"[")
