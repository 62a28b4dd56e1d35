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


def read_dump(path: str | os.PathLike) -> dict | None:
    """The dump at ``path`` as a dict, or None when it is not a Flight Recorder dump."""
    try:
        if not os.path.isfile(path):   # a FIFO or a device would block: never opened here
            return None
        with open(path, "rb") as f:
            head = f.read(SNIFF)
            if not _looks_like_dump(head):   # a trace is never parsed here
                return None
            data = head + f.read()
    except OSError:
        return None
    doc = None
    if head[:1] in (b"{", b" ", b"\n"):
        try:
            doc = json.loads(data)
        except ValueError:
            return None
    elif head[:1] == b"\x80":     # a pickle protocol >= 2
        try:
            doc = _PlainUnpickler(io.BytesIO(data)).load()
        except Exception:  # noqa: BLE001 - not a plain dump
            return None
    if isinstance(doc, bytes):
        try:
            doc = json.loads(doc)
        except ValueError:
            return None
    ok = isinstance(doc, dict) and isinstance(doc.get("entries"), list) and "version" in doc
    return doc if ok else None


SNIFF = 1 << 16


def _looks_like_dump(head: bytes) -> bool:
    """The dump's own keys near its start (JSON: sorted keys, ``comm_lib_version`` then
    ``entries``; a pickle: ``version``, ``pg_config`` ...) and no profiler trace's."""
    if b"traceEvents" in head:
        return False
    if head[:1] == b"\x80":
        return b"entries" in head or b"pg_config" in head or b"pg_status" in head
    return head.lstrip()[:1] == b"{" and b'"entries"' in head and (
        b'"profiling_name"' in head or b'"collective_seq_id"' in head or b'"comm_lib_version"' in head)


def is_dump(path) -> bool:
    return read_dump(path) is not None


def collectives_of(doc: dict):
    """The dump's entries as an ``issue``-source collectives table (see module doc)."""
    import pandas as pd

    from ...collectives import normalize_collective
    from .inputs import normalise_collectives

    sizes = _group_sizes(doc)
    rows = []
    for e in doc["entries"]:
        if not isinstance(e, dict) or e.get("time_created_ns") is None:
            continue
        pg = e.get("process_group") or ["", ""]
        name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(pg)
        p2p = bool(e.get("is_p2p"))
        rows.append({"ts": int(e["time_created_ns"]), "dur": 0,
                     "collective": normalize_collective(str(e.get("profiling_name") or "")),
                     "msg_bytes": _bytes(e), "dtype": _dtype(e),
                     "group_size": sizes.get(name, -1), "process_group": name,
                     "seq": int(e.get("p2p_seq_id") if p2p else e.get("collective_seq_id") or -1),
                     "peer": -1})
    df = pd.DataFrame(rows, columns=["ts", "dur", "collective", "msg_bytes", "dtype", "group_size",
                                     "process_group", "seq", "peer"])
    df.attrs["source"] = "issue"
    out = normalise_collectives(df)
    out.attrs["source"] = "issue"
    return out


def _group_sizes(doc: dict) -> dict[str, int]:
    """Process group name -> its size (``pg_config``: ``ranks`` as a list or its JSON text);
    a dump of the default group alone names it with an empty key."""
    out = {}
    for key, g in (doc.get("pg_config") or {}).items():
        ranks = g.get("ranks") if isinstance(g, dict) else None
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                ranks = None
        if isinstance(ranks, list):
            out[str(key)] = len(ranks)
            if str(key) == "":
                out["0"] = len(ranks)
    return out


def _bytes(e: dict) -> int:
    import numpy as np

    from ...collectives import dtype_size

    sizes, types = e.get("input_sizes") or [], e.get("input_dtypes") or []
    total = 0
    for dims, t in zip(sizes, types):
        n = int(np.prod(dims)) if isinstance(dims, list) else 0
        total += n * dtype_size(_DTYPES.get(str(t), str(t)))
    return total or -1


def _dtype(e: dict) -> str | None:
    t = (e.get("input_dtypes") or [None])[0]
    return _DTYPES.get(str(t), str(t)) if t else None


def rank_input_of(path: str | os.PathLike, doc: dict | None = None, rank: int | None = None):
    """A ``RankInput`` from one rank's dump; its rank from ``rank``, else the file name
    (``fr-rank-3.json``, torch's ``nccl_trace_rank_3``)."""
    import pandas as pd

    from .inputs import RankInput, rank_from_name

    doc = doc if doc is not None else read_dump(path)
    if doc is None:
        raise ValueError(f"{path}: not a Flight Recorder dump")
    r = rank if rank is not None else rank_from_name(str(path))
    if r is None or r < 0:
        raise ValueError(f"{path}: a Flight Recorder dump names no rank: put it in the file "
                         "name (fr-rank-3.json; torch writes <prefix><rank>)")
    coll = collectives_of(doc)
    sizes = [v for v in _group_sizes(doc).values()]
    span = (int(coll["ts"].min()), int(coll["ts"].max())) if len(coll) else (-1, -1)
    return RankInput(path=str(path), rank=int(r), world_size=max(sizes, default=-1),
                     backend=_backend(doc), clock="epoch_ns", start_ns=span[0], end_ns=span[1],
                     collectives=coll, source="issue" if len(coll) else "",
                     steps=pd.DataFrame({"step": pd.Series(dtype="int64"),
                                         "ts": pd.Series(dtype="int64"),
                                         "dur": pd.Series(dtype="int64")}))


def _backend(doc: dict) -> str:
    names = {str(e.get("profiling_name", "")).split(":")[0] for e in doc.get("entries") or []
             if isinstance(e, dict)}
    return next((n for n in ("nccl", "gloo", "ucc", "mpi", "xccl") if n in names), "")


__all__ = ["read_dump", "is_dump", "collectives_of", "rank_input_of"]
