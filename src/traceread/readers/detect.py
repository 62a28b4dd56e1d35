"""Sniff a file's container format from its first bytes, never its name."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")
GZ_RATIO_GUESS = 10             # typical Kineto gzip ratio, for the size estimate only


def as_path(path, who: str):
    """``path`` as a str path (a bytes path -- any name the OS allows -- decoded as the OS
    does); TypeError saying what to pass for anything else."""
    if isinstance(path, (bytes, bytearray)):
        return os.fsdecode(bytes(path))
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
        return os.fsdecode(path) if isinstance(path, bytes) else path
    if isinstance(path, str):
        return path
    raise TypeError(f"{who} takes a path to a trace file (str, bytes or os.PathLike), "
                    f"not a {type(path).__name__}")


def special_file_reason(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is refused (None for a regular file).

    A FIFO or a character device can block a reader forever or stream without
    end (``/dev/zero``), so they are refused before any read.
    """
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a trace file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "not a regular file"


def estimated_raw_size(path: str | os.PathLike) -> int:
    """Uncompressed size estimate used to choose the streaming path (here, with the
    standard library only, so a batch parent sizes its workers' limits without pandas)."""
    size = os.path.getsize(path)
    if read_head(path, 2) == GZIP_MAGIC:  # read_head: a FIFO is refused, never waited on
        return size * GZ_RATIO_GUESS
    return size


def read_head(path: str | os.PathLike, n: int = 4096) -> bytes:
    """First ``n`` bytes of a regular file; TraceError for anything else.

    Opened non-blocking and checked with fstat on the open descriptor, so a
    FIFO is refused without waiting for a writer (and without a stat/open race).
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except PermissionError:
        raise TraceError(p, "permission denied") from None
    except IsADirectoryError:
        raise TraceError(p, "is a directory, not a trace file") from None
    except OSError as e:
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    try:
        reason = special_file_reason(os.fstat(fd).st_mode)
        if reason:
            raise TraceError(p, reason)
        return os.read(fd, n)
    except OSError as e:
        if e.errno == 21:  # EISDIR on some systems
            raise TraceError(p, "is a directory, not a trace file") from None
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def sniff(path: str | os.PathLike) -> str:
    """Return "json", "json.gz" or "sqlite"; raise TraceError otherwise."""
    p = Path(path)
    head = read_head(p)
    if not head:
        raise TraceError(p, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(GZIP_MAGIC):
        return "json.gz"
    if _looks_like_json(head):
        return "json"
    scalar = _json_scalar(head)
    if scalar:
        raise TraceError(p, f"a JSON {scalar}, not an object or array: not a trace")
    if p.suffix.lower() in NSYS_REPORT_SUFFIXES:
        # The name only shapes the hint; the refusal itself came from the content.
        raise TraceError(p, f"an Nsight Systems report, not its SQLite export: run "
                            f"`nsys export --type sqlite {p}` and pass the .sqlite")
    raise TraceError(p, "unknown format (not JSON, gzip or SQLite)")


def _json_scalar(head: bytes) -> str | None:
    """'number' / 'string' / 'boolean' / 'null' when ``head`` (a whole small file) is one
    JSON scalar; None otherwise (a longer file, or not JSON at all)."""
    import json

    if len(head) >= 4096:
        return None
    try:
        v = json.loads(head.decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", type(None): "null"}
    return kinds.get(type(v))


def _looks_like_json(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return text[:1] in (b"{", b"[") or wide_json_encoding(head) is not None


# RFC 8259 asks for UTF-8 when JSON is exchanged, but RFC 7159/4627 allowed UTF-16 and
# UTF-32, and Windows tools write them (PowerShell 5's `>` writes UTF-16LE with a BOM):
# such a file is read by transcoding it to UTF-8 first (docs/robustness.md).
_BOMS = ((b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe\x00\x00", "utf-32-le"),
         (b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le"))


def wide_json_encoding(head: bytes) -> str | None:
    """'utf-16-le' / '-be' or 'utf-32-le' / '-be' when ``head`` (a document's first bytes)
    starts JSON text in that encoding (by its BOM, else the pattern of zero bytes around
    its first ASCII character, RFC 4627 section 3); None for UTF-8 (or not JSON)."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc
    h = head[:4]
    if len(h) < 4 or 0 not in h:
        return None
    if h[0] == 0 and h[1] == 0 and h[2] == 0 and h[3]:
        return "utf-32-be"
    if h[0] and h[1] == 0 and h[2] == 0 and h[3] == 0:
        return "utf-32-le"
    if h[0] == 0 and h[1] and h[2] == 0 and h[3]:
        return "utf-16-be"
    if h[0] and h[1] == 0 and h[2] and h[3] == 0:
        return "utf-16-le"
    return None


def to_utf8(path, data: bytes) -> bytes:
    """``data`` as UTF-8 JSON text: UTF-16/32 (``wide_json_encoding``) transcoded, else
    as is."""
    enc = wide_json_encoding(data[:4])
    if enc is None:
        return data
    try:
        text = data.decode(enc)
    except UnicodeDecodeError as e:
        raise TraceError(path, f"invalid {enc.upper()} text at byte {e.start}") from None
    return text.lstrip("\ufeff").encode("utf-8", "surrogatepass")


# Names that make a file a candidate even when its content does not look like a trace,
# so that it is reported (as an error row) rather than silently skipped.
TRACE_SUFFIXES = (".json", ".gz", ".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")


def looks_like_trace(head: bytes) -> bool:
    """JSON, gzip or SQLite by its first bytes."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return (head.startswith(SQLITE_MAGIC) or head.startswith(GZIP_MAGIC) or text[:1] in (b"{", b"[")
            or wide_json_encoding(head) is not None)


def is_trace_candidate(p: str, name: str) -> bool:
    """Trace by name, or a regular file whose first bytes look like one.

    Special files (FIFOs, devices, sockets) are never opened here: a FIFO
    without a writer would hang the whole batch. One named like a trace is
    kept, so that its row says why it was refused.
    """
    if name.lower().endswith(TRACE_SUFFIXES):
        return True
    try:
        head = read_head(p, 64)
    except TraceError:
        return False
    return looks_like_trace(head)
