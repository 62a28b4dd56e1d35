"""Where events begin and end in Chrome-trace JSON text, and recovery of a cut file.

Byte-level helpers of the streaming reader (``readers/stream.py``) and, for a
trace cut short, of the small-file reader too:

* event boundaries (``},{``) and the start of the ``traceEvents`` array;
* ``find_array_end``: the ``]`` that closes ``traceEvents``, searched from the
  end with bounded work on any input (a flood of closing brackets used to take
  quadratic time) and accepting a last event of any size;
* truncation recovery: the last complete event before a cut, whether the end
  is a cut or malformed, and the ``meta.extra["truncated"]`` record;
* ``Inflater``: gzip inflation that keeps every byte before a cut stream.

The decoder does the structural work: ``msgspec`` reports where a value ends
("trailing characters (byte N)") or that it is cut ("truncated"), so every
probe is one zero-copy decode.
"""
from __future__ import annotations

import re
import zlib

import msgspec

try:  # python-isal inflates ~3x faster than stdlib zlib (see docs/performance.md)
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

_TAIL_SCAN = 4 << 20            # the closing ']' of traceEvents is searched in the last 4 MB
_HEAD_SCAN = 64 << 20           # "traceEvents" key must start within the first 64 MB
# Event boundary "}" "," "{". A newline inside the gap proves we are not inside a
# JSON string (strings cannot hold raw newlines); Kineto writes one there.
_BOUNDARY_NL = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{|\}[ \t\r]*\n[ \t\r\n]*,[ \t\r\n]*\{")
_BOUNDARY_ANY = re.compile(rb"\}\s*,\s*\{")
# Without a newline, prefer a "}" "," "{" followed by a key and ":" -- an object's start.
# Inside a string the "{" is followed by string text or the string's closing quote, and
# that quote then opens a "key" whose end is not followed by ":" (JSON escapes every quote
# within a string): names full of "},{" no longer cut chunks inside strings (issue 23:
# each false cut cost a re-decode of the merged chunks, and a valid file whose every
# candidate lay in a name was refused past the merge cap). Only a crafted key whose
# value starts with ":" can still pass; the chunk merge catches that.
_BOUNDARY_KEY = re.compile(rb'\}\s*,\s*\{(?=\s*"(?:[^"\\\x00-\x1f]|\\.){0,200}"\s*:)')
_KEY_LOOK = 256   # bytes past a window the key check may read
_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')


# A gzip trace inflates to at most this many times its compressed size (real Kineto traces:
# 10-30x, the corpus' most is 30x) or INFLATE_FLOOR, whichever is more; a gzip bomb (36 MB
# of zeros or tiny events -> 10 GB) is refused when it passes the cap, not after. The
# inflated bytes are counted as they come: a member's ISIZE trailer is never trusted.
INFLATE_RATIO = 100
INFLATE_FLOOR = 256 << 20
INFLATE_ENV = "TRACEREAD_MAX_INFLATED"   # bytes (K/M/G suffix); 0 = no cap


def max_inflated(compressed: int) -> int:
    """Most bytes a gzip of ``compressed`` bytes may inflate to (0: no cap)."""
    import os

    raw = os.environ.get(INFLATE_ENV, "").strip().upper()
    if raw:
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:], 1)
        try:
            return int(float(raw.rstrip("KMG")) * mult)
        except ValueError:
            raise ValueError(f"{INFLATE_ENV}={raw!r} is not a byte count") from None
    return max(INFLATE_FLOOR, INFLATE_RATIO * compressed)


def inflate_cap_message(cap: int, compressed: int) -> str:
    return (f"gzip inflates to more than {cap:,} bytes ({cap // max(1, compressed)}x its "
            f"{compressed:,} compressed bytes; real traces inflate 10-30x): a gzip bomb? "
            f"Set {INFLATE_ENV}=BYTES (0: no cap) to read it anyway")


class NotRecoverable(Exception):
    """A document that is malformed (not cut) or cut before its first event."""


def find_boundary(buf, pos: int, end: int) -> int:
    """First event boundary at or after ``pos``: index just past the ``}``; -1 if none.

    Prefers a boundary with a newline in the gap (provably outside strings).
    """
    window = 1 << 20
    while pos < end:
        hi = min(end, pos + window)
        m = _BOUNDARY_NL.search(buf, pos, hi)
        if m is None:
            m = _BOUNDARY_KEY.search(buf, pos, min(end, hi + _KEY_LOOK))
        if m is None:
            m = _BOUNDARY_ANY.search(buf, pos, hi)
        if m is not None:
            return m.start() + 1
        if hi >= end:
            return -1
        pos = hi - 64  # overlap so a boundary straddling windows is seen
    return -1


def _next_start(buf, cut: int) -> int:
    """Index of the ``{`` that starts the event after a boundary ending at ``cut``."""
    m = re.compile(rb"\s*,\s*").match(buf, cut)
    return m.end()


def _last_boundary(buf, lo: int, hi: int) -> int:
    """Last event boundary in buf[lo:hi]; index just past the ``}``; -1 if none."""
    last = -1
    for pat in (_BOUNDARY_NL, _BOUNDARY_KEY, _BOUNDARY_ANY):
        for m in pat.finditer(buf, lo, hi):
            last = m.start() + 1
        if last >= 0:
            return last
    return -1


def find_array_start(head) -> int:
    """Index just past the ``[`` that opens traceEvents (or the top-level array)."""
    i = 0
    n = len(head)
    while i < n and head[i] in b" \t\r\n\xef\xbb\xbf":
        i += 1
    if i < n and head[i:i + 1] == b"[":
        return i + 1
    m = _KEY_RE.search(head)
    return m.end() if m else -1


def _events_like(buf, need_ph: bool = True) -> bool:
    """True when ``buf`` (a JSON array text) holds event objects (each has "ph",
    or is any object when not ``need_ph``)."""
    try:
        items = msgspec.json.decode(buf)
    except (msgspec.DecodeError, RecursionError):
        return False
    return isinstance(items, list) and all(isinstance(e, dict) and (not need_ph or "ph" in e)
                                           for e in items)


# A "]" that can close traceEvents: then only "," / "}" (object document) or the
# end (top-level array) may follow. A flood of "]" is skipped without a decode.
_END_OBJ = re.compile(rb"\][ \t\r\n]*[,}]")
_END_LIST = re.compile(rb"\][ \t\r\n]*\Z")
_END_CANDIDATES = 64     # decoded "]" candidates; real trailers hold a handful of arrays


def find_array_end(buf, lo: int, prefix: bytes) -> int:
    """Index of the ``]`` closing traceEvents, searched backwards from the end of ``buf``.

    ``buf[lo:]`` starts at the first event. A candidate is accepted when (a)
    ``prefix + "[]" + rest`` is valid JSON and (b) the last item before it is an
    event object -- this skips arrays in keys written after traceEvents (newer
    Kineto puts deviceProperties there). Bounded work on any input: candidates
    are pre-filtered by what follows them and at most ``_END_CANDIDATES`` are
    decoded (a flood of closing brackets used to take quadratic time).
    """
    n = len(buf)
    scan_lo = max(lo, n - _TAIL_SCAN)
    top_list = not prefix.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    pat = _END_LIST if top_list else _END_OBJ
    cands = _end_candidates(buf, scan_lo, pat)
    loose = -1  # earliest candidate after a plain object (an event without "ph")
    for p in reversed(cands[-_END_CANDIDATES:]):
        try:
            msgspec.json.decode(prefix + b"[]" + bytes(buf[p + 1:]))
        except (msgspec.DecodeError, RecursionError):
            continue
        if _ends_with_event(buf, lo, p):
            return p
        if _ends_with_event(buf, lo, p, need_ph=False):
            loose = p
    return loose


def _end_candidates(buf, scan_lo: int, pat) -> list[int]:
    """The last ``_END_CANDIDATES`` matches of ``pat`` in ``buf[scan_lo:]``, in order.

    Searched in windows growing from the end, so a tail full of candidates
    (a flood of "]}") costs only the window that holds the last few.
    """
    n = len(buf)
    w = 1 << 16
    while True:
        w0 = max(scan_lo, n - w)
        found = [m.start() for m in pat.finditer(buf, w0)]
        if len(found) >= _END_CANDIDATES or w0 == scan_lo:
            return found[-_END_CANDIDATES:]
        w *= 4


def _ends_with_event(buf, lo: int, p: int, need_ph: bool = True) -> bool:
    """Is the item just before ``buf[p]`` an event object (or the array empty)?

    The item's start is one of the last event boundaries before it (or the
    array start); the decoder says where the object at a start ends, so each
    try is one zero-copy decode, whatever the size of the item.
    """
    q = p
    while q > lo and buf[q - 1] in b" \t\r\n":
        q -= 1
    if q == lo:
        return True  # empty array
    if buf[q - 1] != 0x7D:  # "}"
        return False
    if _empty_object_before(buf, lo, q - 1):
        return not need_ph   # "{}": an object (no key, so no event start is found in it)
    for tries, start in enumerate(_starts_backwards(buf, lo, q)):
        if tries >= _RECOVER_TRIES:
            break
        if _object_end(buf, start, need_ph) == q:
            return True
    return False


def _empty_object_before(buf, lo: int, close: int) -> bool:
    """Is ``buf[close]`` ("}") the end of an empty object ``{ }`` that is an array item
    (after "[" or ",")?"""
    k = close - 1
    while k >= lo and buf[k] in b" \t\r\n":
        k -= 1
    if k < lo or buf[k] != 0x7B:  # "{"
        return False
    k -= 1
    while k >= 0 and buf[k] in b" \t\r\n":
        k -= 1
    return k >= 0 and buf[k] in b",["


# --- truncation recovery (a killed run, a full disk) ---------------------------
#
# A trace cut short has no closing "]": every complete event before the cut is
# recovered and analysed, and the Trace says so (meta.extra["truncated"]).
# A document that is closed but malformed after its events (e.g. a flood of
# "]") is not a cut: it stays invalid JSON.



class Truncated(Exception):
    """The document ends inside traceEvents (a cut file); ``str()`` is the reason."""


def last_complete_event(buf, lo: int) -> tuple[int, int]:
    """(end, start) of the last complete event in ``buf[lo:]``; (lo, -1) if none.

    ``end`` is just past its ``}``. Event starts are tried backwards from the
    last boundary; the decoder itself says where the value at a start ends
    ("trailing characters (byte N)") or that it is cut ("truncated"), so each
    try is one zero-copy decode. At most ``_RECOVER_TRIES`` starts are tried.
    """
    for tries, start in enumerate(_starts_backwards(buf, lo)):
        if tries >= _RECOVER_TRIES:
            break
        end = _object_end(buf, start)
        if end > 0:
            return end, start
    return lo, -1


def _starts_backwards(buf, lo: int, hi: int | None = None):
    """Candidate event starts before ``hi``, last first: after each boundary, then
    the first event."""
    hi = len(buf) if hi is None else hi
    window = 1 << 20
    while hi > lo:
        w0 = max(lo, hi - window)
        # an object's start (a key and ":" follow): a name full of "},{" (escaped quotes)
        # offers none, so 64 tries are not spent inside one long string of the last event
        found = [m.start() + 1 for m in _BOUNDARY_KEY.finditer(buf, w0, min(len(buf), hi + _KEY_LOOK))
                 if m.start() < hi]
        if not found:
            found = [m.start() + 1 for m in _BOUNDARY_ANY.finditer(buf, w0, hi)]
        for cut in reversed(found):
            yield _next_start(buf, cut)
        if w0 == lo:
            break
        # the next window overlaps this one by 64 bytes (a boundary across the
        # edge) but stops before the first boundary already yielded
        hi = min(w0 + 64, found[0] - 1) if found else w0 + 64
    head = bytes(buf[lo:lo + 4096])
    yield lo + len(head) - len(head.lstrip())


_TRAILING_RE = re.compile(r"trailing characters \(byte (\d+)\)")
_RECOVER_TRIES = 64


def _object_end(buf, start: int, need_ph: bool = True) -> int:
    """End of the complete event object at ``buf[start]``, or -1 (cut, or no event;
    any object counts when not ``need_ph``)."""
    view = memoryview(buf)[start:]
    try:
        obj = msgspec.json.decode(view)
        n = len(view)
        while n and view[n - 1] in b" \t\r\n":  # the rest is this value + whitespace
            n -= 1
    except msgspec.DecodeError as e:
        m = _TRAILING_RE.search(str(e))
        if m is None:
            return -1
        # msgspec reports the byte just past the first trailing character
        n = len(bytes(view[:int(m.group(1)) - 1]).rstrip())
        try:
            obj = msgspec.json.decode(view[:n])
        except (msgspec.DecodeError, RecursionError):
            return -1
    except RecursionError:
        return -1
    if not (isinstance(obj, dict) and (not need_ph or "ph" in obj)):
        return -1
    return start + n


def check_cut(buf, lo: int, item_start: int, prefix: bytes) -> None:
    """Raise ``Truncated`` when ``buf`` is a document cut short after ``item_start``
    (the start of its last complete event, or ``lo``); return when it is not
    (then it is malformed, and the caller reports invalid JSON)."""
    tail = bytes(buf[item_start if item_start >= 0 else lo:])
    try:
        msgspec.json.decode(prefix + b"[" + tail)
    except msgspec.DecodeError as e:
        if "truncated" in str(e).lower():
            raise Truncated(f"truncated JSON at byte {len(buf)} "
                            "(traceEvents array never closed; file cut short?)") from None
    except RecursionError:
        pass


def truncation_info(at_byte: int, recovered_bytes: int, total: int, **extra) -> dict:
    """The ``meta.extra["truncated"]`` record (events_recovered is set by the caller)."""
    return {"truncated_at_byte": int(at_byte), "bytes_recovered": int(recovered_bytes),
            "share_of_file": round(recovered_bytes / max(1, total), 4), **extra}


def recover_cut(buf, lo: int, prefix: bytes, where: str = "") -> int:
    """End of the recoverable events of a document whose traceEvents never close.

    Raises ``NotRecoverable`` when the document is malformed rather than cut, or cut
    before its first complete event; ``Truncated`` is left to the caller.
    """
    end, start = last_complete_event(buf, lo)
    try:
        check_cut(buf, lo, start, prefix)
    except Truncated:
        if start < 0:
            raise NotRecoverable(f"truncated JSON at byte {len(buf)}{where} before the first "
                                 "complete event (file cut short?)") from None
        return end
    raise NotRecoverable(f"invalid JSON after the last event{where}: the traceEvents array "
                         "is not closed properly (malformed end of document)")


def recover_document(buf) -> tuple[bytes, dict]:
    """A whole JSON text cut short -> (the document closed after its last complete
    event, its truncation info). NotRecoverable when there is nothing to recover."""
    start = find_array_start(memoryview(buf)[:_HEAD_SCAN])
    if start < 0:
        raise NotRecoverable(f"truncated JSON at byte {len(buf)} before traceEvents "
                             "(file cut short?)")
    end = recover_cut(buf, start, bytes(buf[:start - 1]))
    return close_document(buf, start, end), truncation_info(len(buf), end, len(buf))


def close_document(buf: bytes, prefix_end: int, cut: int) -> bytes:
    """The recovered document: text up to ``cut`` with traceEvents (and the object) closed."""
    top_list = not bytes(buf[:prefix_end]).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    return bytes(buf[:cut]) + (b"\n]" if top_list else b"\n]}")


class Inflater:
    """``read(n)`` over the inflated content of a (multi-member) gzip file.

    Unlike ``gzip.GzipFile`` it hands out every byte inflated before a cut
    (a killed writer) and only then raises EOFError, and it never inflates
    more than ``n`` bytes per call (a gzip bomb stays bounded per read). The one
    inflater of every gzip path (the small-file reader and the streaming reader), so
    a multi-member file reads the same at every size, level and block size.
    """

    def __init__(self, f, block: int = 1 << 20):
        self.f, self.block = f, block
        self.d = _zlib.decompressobj(31)
        self.pending = b""
        self.done = self.cut = False

    def read(self, n: int) -> bytes:
        out = []
        size = 0
        while size < n and not self.done:
            if not self.pending:
                self.pending = self.f.read(self.block)
                if not self.pending:  # end of file inside a member: a cut
                    out.append(self.d.flush())
                    self.done = self.cut = True
                    break
            b = self.d.decompress(self.pending, n - size)
            out.append(b)
            size += len(b)
            if self.d.eof:
                # at a member's end zlib leaves what follows it in unused_data, and
                # (when this input was an earlier call's unconsumed_tail) in
                # unconsumed_tail too: the next member starts from unused_data alone
                self.pending = b""
                self._next_member()
            else:
                self.pending = self.d.unconsumed_tail
        data = b"".join(out)
        if not data and self.cut:
            raise EOFError("compressed data ends early")
        return data

    def _next_member(self) -> None:
        rest = self.d.unused_data
        while len(rest) < 2:  # the next member's magic may straddle a block boundary
            more = self.f.read(self.block)
            if not more:
                break
            rest += more
        if rest[:2] == b"\x1f\x8b":
            self.d, self.pending = _zlib.decompressobj(31), rest
        elif rest.strip(b"\x00"):
            raise zlib.error("trailing garbage after the gzip stream")
        else:
            self._drain_zeros()

    def _drain_zeros(self) -> None:
        """A zero-padded tail (a preallocated file) ends the stream; anything else there is garbage."""
        while True:
            more = self.f.read(self.block)
            if not more:
                self.done, self.pending = True, b""
                return
            if more.strip(b"\x00"):
                raise zlib.error("trailing garbage after the gzip stream")
