"""PyTorch's Flight Recorder dumps as cross-rank input: a job with no profiler trace still
gets its late rank.

torch.distributed records each collective a process group issues in a ring buffer
(``TORCH_FR_BUFFER_SIZE``, or ``TORCH_NCCL_TRACE_BUFFER_SIZE``; torch 2.13 records one for
gloo as well as NCCL) and dumps it per rank -- as JSON (``_dump_fr_trace_json``) or pickled
(``_dump_fr_trace``, the dump-on-timeout files). Each entry names its process group, its
sequence number in that group, the collective (``profiling_name``: ``gloo:all_reduce``,
``nccl:all_reduce``), its tensors' sizes and dtypes, and ``time_created_ns``: when this rank
issued it, on the host's wall clock. Those are the rows of an ``issue``-source collectives
table (``inputs.py``): a rank's arrival is its issue time; a dump says nothing of durations
(gloo leaves ``time_discovered_*`` unset). A pickled dump is read with an unpickler that
builds only plain containers (no class is ever loaded: unpickling may not run code).
"""
from __future__ import annotations

import io
import json
import os
import pickle

# numpy, pandas and the rank-input module load when a dump is read: sniffing a trace
# for the dump's keys (every ``analyze`` does) needs none of them

# the dtype names the recorder writes -> the reader's dtype vocabulary
_DTYPES = {"Float": "float", "Double": "double", "Half": "c10::Half", "BFloat16": "c10::BFloat16",
           "Long": "long int", "Int": "int", "Byte": "unsigned char", "Char": "signed char",
           "Bool": "bool", "Short": "short int"}


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):   # a dump holds dicts, lists, str, int: nothing else
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a Flight Recorder dump")


# Bounds on what a dump may hold. torch's ring buffer keeps 2,000 entries by default
# (TORCH_FR_BUFFER_SIZE); a dump of 2,000 entries is ~2 MB. A dump is plain containers a
# few levels deep (document -> entries -> entry -> input_sizes -> dims).
MAX_DUMP_BYTES = 256 << 20      # the file, or what a gzip inflates to
MAX_ENTRIES = 200_000           # 100x the default buffer
MAX_DEPTH = 32                  # containers inside containers
MAX_INT_BITS = 128              # a dump's integers are times, ids and sizes: 64 bits
DUMP_KEYS = (b"comm_lib_version", b"entries", b"nccl_version", b"pg_config", b"pg_status",
             b"version")        # a JSON dump's first key (torch writes them sorted)
SNIFF = 1 << 16


def read_dump(path: str | os.PathLike) -> dict | None:
    """The dump at ``path`` as a dict, or None when it is not a Flight Recorder dump.

    A file that is one by its first bytes (JSON in UTF-8, with a BOM, UTF-16 or UTF-32,
    or a pickle; gzipped or not) is read within bounds of size, depth, sharing and integer
    width, and raises ``TraceError`` (with the file name) when it passes one or holds a
    field of the wrong type. A trace is never parsed here."""
    from ...errors import TraceError

    try:
        if not os.path.isfile(path):   # a FIFO or a device would block: never opened here
            return None
        with open(path, "rb") as f:
            raw_head = f.read(SNIFF)
            head = _plain_head(raw_head)
            if head is None or not _looks_like_dump(head):   # a trace is never parsed here
                return None
            data = _plain(path, raw_head + f.read(MAX_DUMP_BYTES + 1 - len(raw_head)), f)
    except PermissionError:   # the readers' own words (readers/detect.read_head)
        raise TraceError(path, "permission denied") from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    doc = _parse(path, data)
    if isinstance(doc, (bytes, str)):   # torch's pickled JSON text
        doc = _parse(path, _utf8(path, doc.encode() if isinstance(doc, str) else doc))
    if not (isinstance(doc, dict) and "entries" in doc and "version" in doc):
        return None if not isinstance(doc, dict) or "entries" not in doc else _bad(
            path, "a Flight Recorder dump without its version key")
    return _checked(path, doc)


def _bad(path, reason: str):
    from ...errors import TraceError

    raise TraceError(path, f"Flight Recorder dump: {reason}")


def _plain_head(head: bytes) -> bytes | None:
    """The first bytes of the dump's text or pickle: inflated (gzip) and as UTF-8."""
    import zlib

    from ...readers.detect import wide_json_encoding

    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, SNIFF)
        except zlib.error:
            return None
    enc = wide_json_encoding(head[:4])
    if enc is not None:
        width = 4 if "32" in enc else 2
        head = head[: len(head) // width * width].decode(enc, "replace").encode()
    return head.lstrip(b"\xef\xbb\xbf")


def _plain(path, data: bytes, f) -> bytes:
    """The whole dump inflated and as UTF-8 (a pickle stays bytes), bounded in size."""
    import io

    from ...readers.common import Inflater

    if len(data) > MAX_DUMP_BYTES:
        _bad(path, f"larger than {MAX_DUMP_BYTES:,} bytes: refused")
    if data[:2] == b"\x1f\x8b":
        inf, parts, size = Inflater(io.BytesIO(data)), [], 0
        try:
            while (b := inf.read(1 << 20)):
                parts.append(b)
                size += len(b)
                if size > MAX_DUMP_BYTES:
                    _bad(path, f"gzip inflates to more than {MAX_DUMP_BYTES:,} bytes: refused")
        except (EOFError, OSError, ValueError) as e:   # zlib.error is an Exception: below
            _bad(path, f"corrupt gzip: {e}")
        except Exception as e:  # noqa: BLE001 - zlib.error
            _bad(path, f"corrupt gzip: {e}")
        data = b"".join(parts)
    return data if data[:1] == b"\x80" else _utf8(path, data)


def _utf8(path, data: bytes) -> bytes:
    from ...readers.detect import to_utf8
    from ...errors import TraceError

    try:
        return to_utf8(path, data).lstrip(b"\xef\xbb\xbf")
    except TraceError as e:
        _bad(path, e.reason if hasattr(e, "reason") else str(e))


def _parse(path, data: bytes):
    """JSON (msgspec: no recursion limit of its own to hit) or a pickle (scanned first)."""
    import msgspec

    if data[:1] == b"\x80":
        _scan_pickle(path, data)
        try:
            return _PlainUnpickler(io.BytesIO(data)).load()
        except Exception as e:  # noqa: BLE001 - every unpickling failure is the file's
            _bad(path, f"not a plain pickle: {' '.join(str(e).split())[:200]}")
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        _bad(path, "nesting too deep to decode")
    except (msgspec.DecodeError, UnicodeDecodeError, ValueError) as e:
        _bad(path, f"invalid JSON: {' '.join(str(e).split())[:200]}")


# pickle opcodes that change a container already on the stack (its depth is its own)
_MUTATE = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}


def _scan_pickle(path, data: bytes) -> None:
    """Refuse a pickle before it is loaded when it shares a container (a memo reference to
    a list, dict, tuple or set: a 64-level tuple DAG of 905 bytes is 2^64 nodes to hash or
    walk), nests containers deeper than MAX_DEPTH, or holds an integer wider than
    MAX_INT_BITS. One pass over its opcodes (``pickletools.genops``), linear in its size."""
    import pickletools

    mark = pickletools.markobject
    stack: list = []          # per stack item: its depth (0: an atom), or None for a MARK
    memo: dict = {}
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in ("LONG1", "LONG4", "LONG", "INT") and isinstance(arg, int) \
                    and arg.bit_length() > MAX_INT_BITS:
                _bad(path, f"an integer of {arg.bit_length():,} bits at byte {pos:,}: refused")
            if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1] if stack else 0
                continue
            if name in ("GET", "BINGET", "LONG_BINGET"):
                if memo.get(arg, 0):
                    _bad(path, f"shares a container (a pickle memo reference at byte {pos:,}): "
                               "a dump holds plain trees")
                stack.append(0)
                continue
            before, after = op.stack_before, op.stack_after
            popped: list = []
            if mark in before:
                while stack and stack[-1] is not None:
                    popped.append(stack.pop())
                if stack:
                    stack.pop()
                below = before.index(mark)
            else:
                below = len(before)
            for _ in range(below):
                popped.append(stack.pop() if stack else 0)
            popped = [d for d in popped if d is not None]
            for obj in after:
                if obj is mark:
                    stack.append(None)
                    continue
                if name in _MUTATE:       # the container itself came off last
                    own = popped[-1] if popped else 1
                    items = popped[:-1]
                    depth = max([own] + [1 + d for d in items])
                elif obj.name in ("list", "dict", "tuple", "set", "frozenset", "any"):
                    depth = 1 + max(popped, default=0)
                else:
                    depth = 0
                if depth > MAX_DEPTH:
                    _bad(path, f"containers nested deeper than {MAX_DEPTH} at byte {pos:,}: refused")
                stack.append(depth)
    except ValueError as e:    # genops: an opcode it cannot read (a cut or crafted stream)
        _bad(path, f"not a plain pickle: {' '.join(str(e).split())[:200]}")


def _looks_like_dump(head: bytes) -> bool:
    """The dump's own keys near its start (JSON: its first key one of the dump's; a pickle:
    ``version``, ``pg_config`` ...) and no profiler trace's."""
    import re

    if b"traceEvents" in head:
        return False
    if head[:1] == b"\x80":
        return b"entries" in head or b"pg_config" in head or b"pg_status" in head
    first = re.match(rb'\s*\{\s*"([^"\\]{1,40})"\s*:', head)
    return bool(first) and first.group(1) in DUMP_KEYS and b'"entries"' in head


def is_dump(path) -> bool:
    return read_dump(path) is not None


def _checked(path, doc: dict) -> dict:
    """``doc`` with its entries and process groups of the types the reader takes, each
    bounded; a field of another type is a ``TraceError`` naming the entry and field."""
    if doc.get(_CHECKED):
        return doc
    entries = doc.get("entries")
    if not isinstance(entries, list):
        _bad(path, f"entries is not a list (it is {_kind(entries)})")
    if len(entries) > MAX_ENTRIES:
        _bad(path, f"{len(entries):,} entries, more than {MAX_ENTRIES:,}: refused")
    doc = dict(doc)
    doc["entries"] = [_entry(path, i, e) for i, e in enumerate(entries)]
    doc["pg_config"] = _pg_config(path, doc.get("pg_config"))
    doc[_CHECKED] = True
    return doc


_CHECKED = "__traceread_checked__"


def _kind(v) -> str:
    return {dict: "an object", list: "a list", tuple: "a tuple", str: "a string", bytes: "bytes",
            bool: "a boolean", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _int_field(path, i: int, e: dict, key: str, lo: int = -(1 << 63), hi: int = (1 << 63) - 1):
    v = e.get(key)
    if v is None:
        return None
    if type(v) is not int or not lo <= v <= hi:
        _bad(path, f"entry {i}: {key} is not an integer in [{lo}, {hi}] (it is {_kind(v)})")
    return v


def _str_field(path, i: int, e: dict, key: str) -> str:
    v = e.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        _bad(path, f"entry {i}: {key} is not a string (it is {_kind(v)})")
    return v[:1024]


def _entry(path, i: int, e) -> dict | None:
    """One entry as the fields ``collectives_of`` reads (None: not a collective record)."""
    if not isinstance(e, dict):
        return None
    t = _int_field(path, i, e, "time_created_ns", 0)
    if t is None:
        return None
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)):
        pg = pg[0] if pg else ""
    if pg is not None and not isinstance(pg, (str, int)) or isinstance(pg, bool):
        _bad(path, f"entry {i}: process_group is not a name (it is {_kind(pg)})")
    sizes, dtypes = e.get("input_sizes") or [], e.get("input_dtypes") or []
    if not isinstance(sizes, list) or not all(
            isinstance(d, list) and all(type(x) is int and 0 <= x < (1 << 62) for x in d)
            for d in sizes):
        _bad(path, f"entry {i}: input_sizes is not a list of shapes (lists of sizes)")
    if not isinstance(dtypes, list) or not all(isinstance(t_, str) for t_ in dtypes):
        _bad(path, f"entry {i}: input_dtypes is not a list of dtype names")
    return {"time_created_ns": t, "process_group": "" if pg is None else str(pg)[:1024],
            "profiling_name": _str_field(path, i, e, "profiling_name"),
            "is_p2p": bool(e.get("is_p2p")) if isinstance(e.get("is_p2p"), (bool, int)) else False,
            "collective_seq_id": _int_field(path, i, e, "collective_seq_id"),
            "p2p_seq_id": _int_field(path, i, e, "p2p_seq_id"),
            "input_sizes": sizes, "input_dtypes": [x[:64] for x in dtypes]}


def _pg_config(path, cfg) -> dict:
    """{process group name: {"ranks": [rank, ...]}} (``ranks`` given as a list or its JSON text)."""
    import msgspec

    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        _bad(path, f"pg_config is not an object (it is {_kind(cfg)})")
    out = {}
    for key, g in cfg.items():
        ranks = g.get("ranks") if isinstance(g, dict) else None
        if isinstance(ranks, str):
            try:
                ranks = msgspec.json.decode(ranks[:1 << 20])
            except (msgspec.DecodeError, RecursionError, ValueError):
                ranks = None
        if isinstance(ranks, list) and all(type(r) is int for r in ranks):
            out[str(key)[:1024]] = {"ranks": ranks}
    return out


def collectives_of(doc: dict):
    """The dump's entries (as ``read_dump`` checked them) as an ``issue``-source
    collectives table (see module doc)."""
    import pandas as pd

    from ...collectives import normalize_collective
    from .inputs import normalise_collectives

    doc = _checked("Flight Recorder dump", doc)
    sizes = _group_sizes(doc)
    rows = []
    for e in doc["entries"]:
        if e is None:
            continue
        name = e["process_group"]
        p2p = e["is_p2p"]
        seq = e["p2p_seq_id"] if p2p else e["collective_seq_id"]
        rows.append({"ts": e["time_created_ns"], "dur": 0,
                     "collective": normalize_collective(e["profiling_name"]),
                     "msg_bytes": _bytes(e), "dtype": _dtype(e),
                     "group_size": sizes.get(name, -1), "process_group": name,
                     "seq": -1 if seq is None else seq, "peer": -1})
    df = pd.DataFrame(rows, columns=["ts", "dur", "collective", "msg_bytes", "dtype", "group_size",
                                     "process_group", "seq", "peer"])
    df.attrs["source"] = "issue"
    out = normalise_collectives(df)
    out.attrs["source"] = "issue"
    return out


def _group_sizes(doc: dict) -> dict[str, int]:
    """Process group name -> its size (the checked ``pg_config``); a dump of the default
    group alone names it with an empty key."""
    out = {}
    for key, g in (doc.get("pg_config") or {}).items():
        out[key] = len(g["ranks"])
        if key == "":
            out["0"] = len(g["ranks"])
    return out


def _bytes(e: dict) -> int:
    """The entry's input bytes, in Python integers (no overflow, no warning), capped."""
    from ...collectives import dtype_size

    total = 0
    for dims, t in zip(e["input_sizes"], e["input_dtypes"]):
        n = 1
        for d in dims:
            n = min(n * d, 1 << 62)
        total = min(total + n * dtype_size(_DTYPES.get(t, t)), 1 << 62)
    return total or -1


def _dtype(e: dict) -> str | None:
    t = e["input_dtypes"][0] if e["input_dtypes"] else None
    return _DTYPES.get(t, t) if t else None


def rank_input_of(path: str | os.PathLike, doc: dict | None = None, rank: int | None = None):
    """A ``RankInput`` from one rank's dump; its rank from ``rank``, else the file name
    (``fr-rank-3.json``, torch's ``nccl_trace_rank_3``). A dump that names no rank, or a
    rank outside its own world, is a ``TraceError``."""
    import pandas as pd

    from ...errors import TraceError
    from .inputs import RankInput, rank_from_name

    doc = doc if doc is not None else read_dump(path)
    if doc is None:
        raise TraceError(path, "not a Flight Recorder dump")
    doc = _checked(path, doc)
    r = rank if rank is not None else rank_from_name(str(path))
    if r is None or r < 0:
        raise TraceError(path, "a Flight Recorder dump names no rank: put it in the file "
                               "name (fr-rank-3.json; torch writes <prefix><rank>)")
    coll = collectives_of(doc)
    world = max(_group_sizes(doc).values(), default=-1)
    if world > 0 and r >= world:
        raise TraceError(path, f"a Flight Recorder dump of rank {r} in a world of {world} "
                               "(its pg_config): the rank in its name is wrong")
    span = (int(coll["ts"].min()), int(coll["ts"].max())) if len(coll) else (-1, -1)
    return RankInput(path=str(path), rank=int(r), world_size=world,
                     backend=_backend(doc), clock="epoch_ns", start_ns=span[0], end_ns=span[1],
                     collectives=coll, source="issue" if len(coll) else "",
                     steps=pd.DataFrame({"step": pd.Series(dtype="int64"),
                                         "ts": pd.Series(dtype="int64"),
                                         "dur": pd.Series(dtype="int64")}))


def _backend(doc: dict) -> str:
    names = {e["profiling_name"].split(":")[0] for e in doc["entries"] if e is not None}
    return next((n for n in ("nccl", "gloo", "ucc", "mpi", "xccl") if n in names), "")


def check_members(dumps: list[dict], jobs: list, others: int = 0) -> None:
    """Every dump given is a rank of some job: raise ``TraceError`` for one that is not (the
    one rank's dump of a hang, two dumps of one rank) instead of an empty report that exits 0.
    ``dumps``: the job members made of dumps; ``others``: how many other inputs there were."""
    from ...errors import TraceError

    seen: dict = {}
    for m in dumps:
        r = m["input"].rank
        if r in seen:
            raise TraceError(m["path"], f"claims rank {r}, as does {seen[r]}: two dumps of one "
                                        "rank form no job (give one dump per rank)")
        seen[r] = m["path"]
    members = {str(p) for j in jobs for p in getattr(j, "paths", {}).values()}
    for m in dumps:
        if str(m["path"]) not in members:
            world = m["input"].world_size
            alone = len(dumps) + others < 2
            why = (f"one rank's Flight Recorder dump forms no job: give every rank's dump "
                   f"(rank {m['input'].rank} of {world if world > 0 else '?'})" if alone else
                   "this Flight Recorder dump forms no job with the other inputs (no collective "
                   "of it matches theirs)")
            raise TraceError(m["path"], why)


__all__ = ["read_dump", "is_dump", "collectives_of", "rank_input_of", "check_members"]
