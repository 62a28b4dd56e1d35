"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> the event table.

Only the stdlib ``sqlite3`` module, read-only (``file:...?mode=ro``). Every
table and column is optional: nsys creates tables lazily and the schema drifts
between versions (2.9.1 ``EXPORT_META_DATA``, 3.x ``META_DATA_EXPORT``, pre-2.x
exports without metadata), so each table is probed before it is read.

Mapping (see docs/event-table.md, "Nsight Systems"):

==================================  ==========  ===========================================
table                               kind        notes
==================================  ==========  ===========================================
CUPTI_ACTIVITY_KIND_KERNEL          kernel      name = demangledName, short_name = shortName
CUPTI_ACTIVITY_KIND_MEMCPY          memcpy      bytes, copy_kind; name "[CUDA memcpy X-to-Y]"
CUPTI_ACTIVITY_KIND_MEMSET          memset      bytes; name "[CUDA memset]"
CUPTI_ACTIVITY_KIND_GRAPH_TRACE     graph       one row per graph replay (--cuda-graph-trace=
                                                graph); name "[CUDA graph N]", graph_id N;
                                                dropped when node rows of the replay exist
CUPTI_ACTIVITY_KIND_RUNTIME         runtime     eventClass 1 rows -> driver; 67-69 (backtrace
                                                duplicates of real calls) -> other
CUPTI_ACTIVITY_KIND_DRIVER          driver
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION sync        host thread via the runtime call's correlation
NVTX_EVENTS                         annotation  push/pop + start/end ranges, domain column
                                    instant     marks
OSRT_API                            osrt
PROFILER_OVERHEAD                   other       cat "PROFILER_OVERHEAD" (used by gpu_gaps)
==================================  ==========  ===========================================

GPU ops: pid = (globalPid >> 24) & 0xFFFFFF, tid = -1. Host events: pid from
globalTid the same way, tid = globalTid & 0xFFFFFF. ts stays session-relative
ns (meta.clock "session_ns"); meta.epoch_offset_ns is the UTC session start.
"""
from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import TraceError
from ..table import Trace, TraceMeta, build_table
from ._nsys_db import Db, Strings, bounded, budget_spent, concat_dict, connect, dict_array, text

K = "CUPTI_ACTIVITY_KIND_"
_API_SUFFIX = re.compile(r"_v\d+$")
# ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver, 67..69 CUDA backtrace (duplicates
# of real calls, written when backtraces are collected).
_EC_DRIVER = 1
_EC_BACKTRACE = (67, 68, 69)
# ENUM_NSYS_EVENT_TYPE values in NVTX_EVENTS.
_NVTX_MARKS = (34, 65)
_NVTX_RANGES = (59, 60, 70, 71)      # push/pop and start/end ranges (NVTX and NVTXT)
_NVTX_DOMAIN_CREATE = 75
# CUPTI memcpy kinds: (nsys label, short copy_kind)
_MEMCPY_KINDS = {
    0: ("Unknown", "Unknown"), 1: ("Host-to-Device", "HtoD"), 2: ("Device-to-Host", "DtoH"),
    3: ("Host-to-Array", "HtoA"), 4: ("Array-to-Host", "AtoH"), 5: ("Array-to-Array", "AtoA"),
    6: ("Array-to-Device", "AtoD"), 7: ("Device-to-Array", "DtoA"),
    8: ("Device-to-Device", "DtoD"), 9: ("Host-to-Host", "HtoH"), 10: ("Peer-to-Peer", "PtoP"),
    11: ("Unified Host-to-Device", "HtoD"), 12: ("Unified Device-to-Host", "DtoH"),
    13: ("Unified Device-to-Device", "DtoD"),
}
_SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
               4: "Context sync"}

_API_KINDS = np.array(["runtime", "driver", "other"], dtype=object)
_NVTX_KINDS = np.array(["annotation", "instant"], dtype=object)
_INT_OUT = ("ts", "dur", "pid", "tid", "device", "stream", "correlation", "bytes", "graph_id")
_STR_OUT = ("kind", "name", "cat", "copy_kind", "collective", "domain", "short_name", "raw_name",
            "launch")


def read_nsys(path: str | os.PathLike, progress: bool = False) -> Trace:
    """Load an nsys SQLite export; TraceError for anything that is not one."""
    p = Path(path)
    con = connect(p)
    try:
        db = Db(con, p)
        if not db.is_nsys():
            raise TraceError(p, "SQLite database but not an Nsight Systems export "
                                "(no StringIds/CUPTI/NVTX tables)")
        return _read(db)
    except sqlite3.Error as e:
        if budget_spent(con):
            raise TraceError(p, "reading the database did not finish within its work budget "
                                "(a pathological schema or query?)") from None
        raise TraceError(p, f"corrupt or unreadable SQLite database: {e}") from None
    except (ValueError, TypeError, OverflowError) as e:
        raise TraceError(p, f"unexpected content in nsys export: {e}") from None
    finally:
        con.close()


# ------------------------------------------------------------------ blocks

def _block(n: int, cat: str, kind, **cols) -> dict:
    b = {"n": n, "cat": cat, "kind": kind}  # str: that value on every row (see concat_dict)
    b.update(cols)
    return b


def _pid(g: np.ndarray) -> np.ndarray:
    return np.where(g >= 0, (g >> 24) & 0xFFFFFF, -1)


def _tid(g: np.ndarray) -> np.ndarray:
    return np.where(g >= 0, g & 0xFFFFFF, -1)


def _const(n: int, v: str) -> str:
    return v  # concat_dict expands a str to n rows as dictionary codes


UNKNOWN_KERNEL = "[unknown kernel: its name id is not in StringIds]"


def _kernels(db: Db, s: Strings) -> dict | None:
    t = K + "KERNEL"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                     "corr": "correlationId", "gpid": "globalPid", "dname": "demangledName",
                     "sname": "shortName", "gid": "graphId", **_LAUNCH_COLS})
    n = len(c["start"])
    pos = s.positions(c["dname"])
    spos = s.positions(c["sname"])
    name_pos = np.where(pos >= 0, pos, spos)  # fall back to shortName when demangled is absent
    # a name id that points nowhere (2**63-1, -2**63, a dropped StringIds row): a kernel still
    # ran; it is named as unknown rather than left without a name
    values = np.append(s.values, UNKNOWN_KERNEL)
    names = dict_array(np.where(name_pos >= 0, name_pos, len(s.values)), values)
    return _block(n, t, _const(n, "kernel"), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(c["gpid"]), device=c["device"], stream=c["stream"],
                  correlation=c["corr"], name=names, short_name=dict_array(spos, s.values),
                  collective=_collectives(names), graph_id=_node_graph_id(c["gid"]),
                  launch=_launch(c))


_LAUNCH_COLS = {"gx": "gridX", "gy": "gridY", "gz": "gridZ", "bx": "blockX", "by": "blockY",
                "bz": "blockZ", "reg": "registersPerThread", "ssm": "staticSharedMemory",
                "dsm": "dynamicSharedMemory"}


def _launch(c: dict) -> pa.DictionaryArray | None:
    """The ``launch`` column (as Kineto's): ``{"grid":[x,y,z],"block":[x,y,z],"registers":r,
    "shared_mem":static+dynamic}`` per distinct configuration; None without grid sizes."""
    cols = [c[k] for k in _LAUNCH_COLS]
    if not len(cols[0]) or (cols[0] < 0).all():
        return None
    for i in (1, 2, 4, 5):       # an export without gridY/Z or blockY/Z: one along them
        cols[i] = np.where(cols[i] < 0, 1, cols[i])
    key = np.zeros(len(cols[0]), np.int64)
    for col in cols:   # re-coded each step: the key stays < rows x values
        codes, uniq = pd.factorize(col)
        key = pd.factorize(key * len(uniq) + codes)[0].astype(np.int64)
    first = np.unique(key, return_index=True)[1]     # a row of each configuration, by code
    gx, gy, gz, bx, by, bz, reg, ssm, dsm = (col[first].tolist() for col in cols)
    texts = np.array([f'{{"grid":[{a},{b},{d}],"block":[{e},{f},{g}]'
                      + (f',"registers":{r}' if r >= 0 else "")
                      + (f',"shared_mem":{max(x, 0) + max(y, 0)}' if x >= 0 or y >= 0 else "")
                      + "}" for a, b, d, e, f, g, r, x, y in
                      zip(gx, gy, gz, bx, by, bz, reg, ssm, dsm)], dtype=object)
    return dict_array(np.where(cols[0] >= 0, key, -1), texts)


def _collectives(names: pa.DictionaryArray) -> pa.DictionaryArray | None:
    """NCCL collective type per kernel, computed once per distinct name."""
    try:
        from ..collectives import collective_from_kernel
    except ImportError:  # shared vocabulary not installed yet: leave `collective` empty
        return None
    coll = np.array([collective_from_kernel(x) for x in names.dictionary.to_pylist()], dtype=object)
    if not any(c is not None for c in coll):
        return None
    valid = np.array([c is not None for c in coll], dtype=bool)
    idx = _codes(names)
    pos = np.where((idx >= 0) & valid[np.clip(idx, 0, None)], idx, -1)
    return dict_array(pos, coll)


def _codes(arr: pa.DictionaryArray) -> np.ndarray:
    """Dictionary codes as int64, -1 for nulls."""
    return arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _memcpy_labels(db: Db) -> dict[int, tuple[str, str]]:
    labels = dict(_MEMCPY_KINDS)
    enum = db.scalar_map("ENUM_CUDA_MEMCPY_OPER", "id", "label")
    for k, v in enum.items():
        if v and k not in labels:
            labels[k] = (v, v)
    return labels


def _memcpy(db: Db) -> dict | None:
    t = K + "MEMCPY"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                     "corr": "correlationId", "gpid": "globalPid", "bytes": "bytes",
                     "ck": "copyKind", "src": "srcKind", "dst": "dstKind", "gid": "graphId"})
    n = len(c["start"])
    labels = _memcpy_labels(db)
    raw = _memcpy_raw_names(db, c, labels)
    kinds = np.unique(c["ck"])
    long_v = np.array([f"[CUDA memcpy {labels.get(int(k), ('Unknown',))[0]}]" for k in kinds],
                      dtype=object)
    short_v = np.array([labels.get(int(k), ("", "Unknown"))[1] for k in kinds], dtype=object)
    pos = np.searchsorted(kinds, c["ck"])
    extra = {"raw_name": raw} if raw is not None else {}
    return _block(n, t, _const(n, "memcpy"), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(c["gpid"]), device=c["device"], stream=c["stream"],
                  correlation=c["corr"], bytes=c["bytes"], name=dict_array(pos, long_v),
                  copy_kind=dict_array(pos, short_v), graph_id=_node_graph_id(c["gid"]),
                  **extra)


_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
              5: "Device Static", 6: "Managed Static"}


def _memcpy_raw_names(db: Db, c: dict, labels: dict):
    """Kineto-style names that keep the memory kinds: ``Memcpy HtoD (Pageable -> Device)``.

    nsys keeps pageable vs pinned in srcKind/dstKind (ENUM_CUDA_MEM_KIND); the copy
    pass reads it from here. None where the export has no srcKind column.
    """
    if (c["src"] < 0).all():
        return None
    kinds = dict(_MEM_KINDS)
    kinds.update({k: v for k, v in db.scalar_map("ENUM_CUDA_MEM_KIND", "id", "label").items()
                  if v})
    key = (c["ck"] * 64 + np.clip(c["src"], -1, 62) + 1) * 64 + np.clip(c["dst"], -1, 62) + 1
    uniq, pos = np.unique(key, return_inverse=True)
    vals = []
    for k in uniq.tolist():
        ck, src, dst = k // 4096, (k // 64) % 64 - 1, k % 64 - 1
        short = labels.get(int(ck), ("", "Unknown"))[1]
        vals.append(f"Memcpy {short} ({kinds.get(src, 'Unknown')} -> {kinds.get(dst, 'Unknown')})")
    return dict_array(pos, np.array(vals, dtype=object))


def _memset(db: Db) -> dict | None:
    t = K + "MEMSET"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                     "corr": "correlationId", "gpid": "globalPid", "bytes": "bytes",
                     "gid": "graphId"})
    n = len(c["start"])
    return _block(n, t, _const(n, "memset"), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(c["gpid"]), device=c["device"], stream=c["stream"],
                  correlation=c["corr"], bytes=c["bytes"], name=_const(n, "[CUDA memset]"),
                  graph_id=_node_graph_id(c["gid"]))


# ------------------------------------------------------------------ CUDA graphs

_INT32_MAX = (1 << 31) - 1


def _graph_id(g: np.ndarray) -> np.ndarray:
    """graph ids as the int32 column: -1 where absent or out of range."""
    return np.where((g >= 0) & (g <= _INT32_MAX), g, -1)


def _node_graph_id(g: np.ndarray) -> np.ndarray:
    # CUPTI writes graphId 0 on GPU ops that no graph launched
    return _graph_id(np.where(g == 0, -1, g))


def _graph_trace(db: Db) -> dict | None:
    """One row per graph replay (nsys's default --cuda-graph-trace=graph): the replay's
    GPU time as one interval; its kernels are not recorded one by one."""
    t = K + "GRAPH_TRACE"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                     "corr": "correlationId", "gpid": "globalPid", "gid": "graphId"})
    n = len(c["start"])
    gid = _graph_id(c["gid"])
    ids = np.unique(gid)
    names = np.array([f"[CUDA graph {i}]" if i >= 0 else "[CUDA graph]" for i in ids.tolist()],
                     dtype=object)
    return _block(n, t, _const(n, "graph"), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(c["gpid"]), device=c["device"], stream=c["stream"],
                  correlation=c["corr"], graph_id=gid,
                  name=dict_array(np.searchsorted(ids, gid), names))


def _drop_replays_with_nodes(graph: dict | None, nodes: list, notes: list) -> dict | None:
    """Graph rows of replays whose kernels/copies the export also has one by one are
    dropped: the node rows already hold that GPU time (never counted twice)."""
    if graph is None or not graph["n"]:
        return graph
    node = [b for b in nodes if b is not None and b["n"]]
    if not node:
        return graph
    key = np.unique(np.concatenate([_pid_corr(b["pid"], b["correlation"]) for b in node]))
    dup = np.isin(_pid_corr(graph["pid"], graph["correlation"]), key) & (graph["correlation"] > 0)
    if not dup.any():
        return graph
    notes.append(f"{K}GRAPH_TRACE: {int(dup.sum())} graph replay rows dropped, their GPU ops "
                 "are recorded one by one (--cuda-graph-trace=node)")
    keep = ~dup
    out = {"n": int(keep.sum())}
    for k, v in graph.items():
        if k == "n":
            continue
        if isinstance(v, np.ndarray):
            out[k] = v[keep]
        elif isinstance(v, pa.Array):
            out[k] = v.filter(pa.array(keep))
        else:
            out[k] = v
    return out


def _pid_corr(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (np.asarray(pid, np.int64) << 32) | (np.asarray(corr, np.int64) & 0xFFFFFFFF)


def _api(db: Db, s: Strings, table: str, default_kind: str, notes: list) -> dict | None:
    if not db.has(table):
        return None
    c = db.fetch(table, {"start": "start", "end": "end", "gtid": "globalTid",
                         "corr": "correlationId", "name_id": "nameId", "ec": "eventClass"},
                 texts={"tname": "name"})
    n = len(c["start"])
    ec = c["ec"]
    dup = np.isin(ec, _EC_BACKTRACE)
    if dup.any():
        notes.append(f"{table}: {int(dup.sum())} CUDA backtrace duplicate rows (eventClass 67-69) "
                     "kept as kind 'other', not as API calls")
    pos = s.positions(c["name_id"])
    raw = s.values
    tname = c["tname"]
    if tname is not None and (tname.codes >= 0).any():
        # schema 2.9.1 has a `name` column; use it where nameId does not resolve
        raw = np.concatenate([s.values, tname.values])
        pos = np.where((pos < 0) & (tname.codes >= 0), len(s.values) + tname.codes, pos)
    raw_names = dict_array(pos, raw)
    clean = np.array([_API_SUFFIX.sub("", x) for x in raw_names.dictionary.to_pylist()], dtype=object)
    kind = np.full(n, 0 if default_kind == "runtime" else 1, np.int64)  # codes into _API_KINDS
    if default_kind == "runtime":
        kind[ec == _EC_DRIVER] = 1
    kind[dup] = 2
    g = c["gtid"]
    return _block(n, table, dict_array(kind, _API_KINDS), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(g), tid=_tid(g), correlation=c["corr"], name=_remap(raw_names, clean),
                  raw_name=raw_names)


def _remap(arr: pa.DictionaryArray, new_values: np.ndarray) -> pa.DictionaryArray:
    """Same rows, dictionary values replaced (and deduplicated)."""
    if len(new_values) == 0:
        return dict_array(np.full(len(arr), -1), np.empty(0, object))
    # object array of str, never the fixed-width "U" dtype (padded to the longest name)
    uniq, inv = np.unique(np.array([str(v) for v in new_values], dtype=object),
                          return_inverse=True)
    codes = _codes(arr)
    pos = np.where(codes >= 0, inv[np.clip(codes, 0, None)], -1)
    return dict_array(pos, uniq.astype(object))


def _sync(db: Db, api: dict | None) -> dict | None:
    t = K + "SYNCHRONIZATION"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                     "corr": "correlationId", "gpid": "globalPid", "st": "syncType"})
    n = len(c["start"])
    pid = _pid(c["gpid"])
    tid = np.full(n, -1, np.int64)
    if api is not None and api["n"] and n:
        tid = _link_tid(pid, c["corr"], api)
    types = np.unique(c["st"])
    vals = np.array([_SYNC_TYPES.get(int(x), f"sync type {int(x)}") for x in types], dtype=object)
    return _block(n, t, _const(n, "sync"), ts=c["start"], dur=c["end"] - c["start"], pid=pid,
                  tid=tid, device=c["device"], stream=c["stream"], correlation=c["corr"],
                  name=dict_array(np.searchsorted(types, c["st"]), vals))


def _link_tid(pid: np.ndarray, corr: np.ndarray, api: dict) -> np.ndarray:
    """Host thread of the API call with the same (process, correlation id)."""
    key_api = (api["pid"].astype(np.int64) << 32) | (api["correlation"] & 0xFFFFFFFF)
    order = np.argsort(key_api, kind="stable")
    ks, ts = key_api[order], api["tid"][order]
    key = (pid.astype(np.int64) << 32) | (corr & 0xFFFFFFFF)
    k = np.clip(np.searchsorted(ks, key), 0, max(len(ks) - 1, 0))
    hit = (ks[k] == key) & (corr >= 0)
    return np.where(hit, ts[k], -1)


def _nccl_schema_domains(db: Db) -> set[int]:
    """NVTX domain ids whose payload schemas are NCCL's ("NCCL communicator ID", ...)."""
    t = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
    if not db.has(t) or not {"domainId", "name"} <= db.columns(t):
        return set()
    rows = db.con.execute(f"SELECT DISTINCT domainId FROM {t} WHERE CAST(name AS TEXT) LIKE 'NCCL %'")
    return {int(r[0]) for r in rows if r[0] is not None}


def _nvtx(db: Db, s: Strings, notes: list) -> dict | None:
    t = "NVTX_EVENTS"
    if not db.has(t):
        return None
    c = db.fetch(t, {"start": "start", "end": "end", "type": "eventType", "gtid": "globalTid",
                     "text_id": "textId", "domain": "domainId"}, texts={"text": "text"})
    et = c["type"]
    # Inline text as codes into tvals (-1: none, use textId).
    tcodes, tvals = c["text"] if c["text"] is not None else (np.full(len(et), -1, np.int64),
                                                              np.empty(0, object))
    # Domain names come from NvtxDomainCreate rows (text or textId keyed by domainId).
    dom_rows = et == _NVTX_DOMAIN_CREATE
    dom_names = {}
    for d, code, tid in zip(c["domain"][dom_rows], tcodes[dom_rows], c["text_id"][dom_rows]):
        dom_names[int(d)] = tvals[code] if code >= 0 else s.get(int(tid))
    # Time-sliced exports can lose the NvtxDomainCreate row; NCCL's domain is still
    # recognisable by the payload schemas NCCL registers in it.
    for d in sorted(set(np.unique(c["domain"]).tolist()) - set(dom_names) - {0, -1}):
        if d in _nccl_schema_domains(db):
            dom_names[d] = "NCCL"
            notes.append(f"NVTX domain {d} has no name in this export; named NCCL from its "
                         "NCCL payload schemas")
        else:
            notes.append(f"NVTX domain {d} has no name in this export (domain column left null)")
    keep = np.isin(et, _NVTX_RANGES + _NVTX_MARKS)
    n = int(keep.sum())
    start, end = c["start"][keep], c["end"][keep]
    mark = np.isin(et[keep], _NVTX_MARKS)
    open_range = (end < 0) & ~mark  # unterminated range (end NULL): zero duration
    dur = np.where(mark | open_range, 0, end - start)
    # Text: inline `text` or a StringIds id.
    tx = tcodes[keep]
    values = np.concatenate([s.values, tvals])
    pos = np.where(tx >= 0, len(s.values) + tx, s.positions(c["text_id"][keep]))
    doms = c["domain"][keep]
    udom = np.unique(doms)
    dvals = np.array([dom_names.get(int(d)) for d in udom], dtype=object)
    named = np.array([v is not None for v in dvals], dtype=bool)
    dpos = np.searchsorted(udom, doms)
    dpos = np.where(named[dpos], dpos, -1) if len(udom) else dpos
    g = c["gtid"][keep]
    return _block(n, t, dict_array(mark.astype(np.int64), _NVTX_KINDS), ts=start, dur=dur,
                  pid=_pid(g), tid=_tid(g), name=dict_array(pos, values),
                  domain=dict_array(dpos, dvals),
                  open_ranges=int(open_range.sum()))


def _host_table(db: Db, s: Strings, table: str, kind: str) -> dict | None:
    if not db.has(table):
        return None
    c = db.fetch(table, {"start": "start", "end": "end", "gtid": "globalTid", "name_id": "nameId"})
    n = len(c["start"])
    g = c["gtid"]
    return _block(n, table, _const(n, kind), ts=c["start"], dur=c["end"] - c["start"],
                  pid=_pid(g), tid=_tid(g), name=s.lookup(c["name_id"]))


# ------------------------------------------------------------------ assembly

def _read(db: Db) -> Trace:
    s = Strings(db)
    notes: list[str] = []
    runtime = _api(db, s, K + "RUNTIME", "runtime", notes)
    driver = _api(db, s, K + "DRIVER", "driver", notes)
    api_all = _merge_api(runtime, driver)
    kernels = _kernels(db, s)
    gpu = [kernels, _memcpy(db), _memset(db)]
    gpu.append(_graph_trace(db))
    for b in gpu:
        if b is not None:
            _fill_missing_pid(b, api_all)
    gpu[-1] = _drop_replays_with_nodes(gpu[-1], gpu[:-1], notes)
    nvtx = _nvtx(db, s, notes)
    blocks = [b for b in gpu + [runtime, driver, _sync(db, api_all), nvtx,
                                 _host_table(db, s, "OSRT_API", "osrt"),
                                 _host_table(db, s, "PROFILER_OVERHEAD", "other")] if b is not None]
    open_ranges = nvtx["open_ranges"] if nvtx is not None else 0
    del runtime, driver, api_all, kernels, gpu, nvtx  # blocks own the columns now
    n = sum(b["n"] for b in blocks)
    cols: dict = {}
    # pop each block's column as it is concatenated, so it is freed right away
    for name in _INT_OUT:
        parts = [np.asarray(b.pop(name), np.int64) if name in b else np.full(b["n"], -1, np.int64)
                 for b in blocks]
        cols[name] = np.concatenate(parts) if parts else np.empty(0, np.int64)
        del parts
    for name in _STR_OUT:
        parts = [(b.pop(name, None), b["n"]) for b in blocks]
        if any(p is not None for p, _ in parts):
            cols[name] = concat_dict(parts)
        del parts
    del blocks
    _sort_by_ts(cols, n)
    table = build_table(cols, n)
    if open_ranges:
        notes.append(f"NVTX_EVENTS: {open_ranges} unterminated ranges kept with dur 0")
    neg = int((cols["ts"] < 0).sum()) if n else 0
    if neg:
        notes.append(f"{neg} event(s) start before time 0 (before the session/profiler start)")
    return Trace(table, _meta(db, s, cols, notes))


def _sort_by_ts(cols: dict, n: int) -> None:
    """Stable sort by ts, one column at a time, so build_table (which sorts the
    same way) finds the rows in order and needs no second copy of the table."""
    if n < 2:
        return
    order = np.argsort(cols["ts"], kind="stable")
    if np.all(order[1:] > order[:-1]):
        return
    take = pa.array(order)
    for k, v in cols.items():
        cols[k] = v[order] if isinstance(v, np.ndarray) else v.take(take)


def _merge_api(*blocks) -> dict | None:
    blocks = [b for b in blocks if b is not None and b["n"]]
    if not blocks:
        return None
    return {"n": sum(b["n"] for b in blocks),
            **{k: np.concatenate([b[k] for b in blocks]) for k in ("pid", "tid", "correlation")}}


def _fill_missing_pid(block: dict, api: dict | None) -> None:
    """Exports without globalPid on GPU tables: take the pid of the launching API
    call, when every API row with that correlation id belongs to one process."""
    if api is None or not block["n"] or (block["pid"] >= 0).all():
        return
    order = np.argsort(api["correlation"], kind="stable")
    cs, ps = api["correlation"][order], api["pid"][order]
    ids, first = np.unique(cs, return_index=True)
    lo, hi = np.minimum.reduceat(ps, first), np.maximum.reduceat(ps, first)
    corr = block["correlation"]
    k = np.clip(np.searchsorted(ids, corr), 0, len(ids) - 1)
    hit = (ids[k] == corr) & (lo[k] == hi[k])
    block["pid"] = np.where((block["pid"] < 0) & hit, lo[k], block["pid"])


def _meta(db: Db, s: Strings, cols: dict, notes: list) -> TraceMeta:
    m = TraceMeta(path=str(db.path), format="nsys", clock="session_ns")
    info = {}
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(t):
            info = db.scalar_map(t, "name", "value")
            m.extra["metadata_table"] = t
            break
    if not info:
        notes.append("no export metadata table (pre-2.x export)")
    m.format_version = info.get("EXPORT_SCHEMA_VERSION") or ""
    if info.get("EXPORT_PRODUCT_VERSION"):
        m.producer = f"Nsight Systems {info['EXPORT_PRODUCT_VERSION']}"
        m.extra["nsys_version"] = info["EXPORT_PRODUCT_VERSION"]  # passes/nsys_compat.py
    if db.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in db.columns(
            "TARGET_INFO_SESSION_START_TIME"):
        row = db.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0] is not None:
            m.epoch_offset_ns = int(row[0])
    m.devices = _devices(db)
    pids = set(np.unique(cols["pid"]).tolist()) - {-1}
    tids = set(np.unique(cols["tid"]).tolist()) - {-1}
    m.processes = {p: n for p, n in _processes(db).items() if p in pids}
    m.threads = {t: n for t, n in _threads(db, s).items() if t in tids}
    m.extra["gpu_contexts"] = _contexts(db)
    m.extra["name_ids"] = _name_ids(s, cols)
    extra_tables = sorted(t for t in db.tables if t and not _known_prefix(t))
    if extra_tables:
        m.extra["foreign_tables"] = extra_tables
        notes.append("tables added by other tools: " + ", ".join(extra_tables))
    m.extra["notes"] = notes
    return m


def _name_ids(s: Strings, cols: dict) -> dict[str, int]:
    """StringIds id of each API (raw) name and OS runtime call name.

    nsys stats groups these reports by name id, so rows with equal totals come
    out in id order (passes/nsys_reports.py); the table itself keeps strings.
    """
    wanted: set = set()
    raw = cols.get("raw_name")
    if isinstance(raw, pa.DictionaryArray):
        wanted.update(v for v in raw.dictionary.to_pylist() if v is not None)
    kind, name = cols.get("kind"), cols.get("name")
    if isinstance(kind, pa.DictionaryArray) and isinstance(name, pa.DictionaryArray):
        k = kind.dictionary.to_pylist()
        if "osrt" in k:
            rows = np.flatnonzero(_codes(kind) == k.index("osrt"))
            codes = np.unique(_codes(name)[rows])
            vals = name.dictionary.to_pylist()
            wanted.update(vals[c] for c in codes.tolist() if c >= 0)
    if not wanted:
        return {}
    out: dict[str, int] = {}
    for i, v in zip(s.ids.tolist(), s.values.tolist()):
        if v in wanted and v not in out:
            out[v] = int(i)
    return out


# Table-name prefixes nsys itself writes (2.x .. 3.25). Anything else was added by
# another tool (e.g. Extra-P's EXTRAP_*); only reported in meta, never read.
_NSYS_PREFIXES = ("CUPTI_", "NVTX_", "OSRT_", "TARGET_INFO_", "ENUM_", "META_DATA_", "EXPORT_",
                  "CUDA_", "CUDNN_", "CUBLAS_", "OPENGL_", "OPENACC", "OPENMP_", "VULKAN_", "DX1",
                  "D3D1", "WDDM_", "GPU_", "SCHED_", "SAMPLING_", "COMPOSITE_", "PROFILER_",
                  "ANALYSIS_", "DIAGNOSTIC_", "MPI_", "UCP_", "NVSHMEM_", "SLI_", "NVVIDEO_",
                  "NIC_", "IB_", "NET_", "PMU_", "MEMORY_", "DEMOTED_", "TOTAL_BYTES_", "KHR_",
                  "NV_", "ETW_", "SYSCALL", "UNCORE_", "PERF_", "GENERIC_", "LLM_", "POWER_",
                  "DX12", "NVDRIVER_", "NVTX", "OSRT", "UnwindMethodType", "StringIds",
                  "ThreadNames", "ProcessStreams", "PROCESSES", "FECS_", "GR_", "OPENXR_",
                  "PYTHON_", "NVVIDEO", "SQLITE_", "TEGRA_", "JIT_", "DRIVER_", "NVENC", "NVDEC",
                  "NVJPEG", "CUPTI")


def _known_prefix(t: str) -> bool:
    return t.startswith(_NSYS_PREFIXES)


def _devices(db: Db) -> list[dict]:
    out = []
    if db.has("TARGET_INFO_GPU"):
        have = db.columns("TARGET_INFO_GPU")
        # 3.x: id (+ cuDevice); pre-2.x exports key the table by deviceId.
        key = "cuDevice" if "cuDevice" in have else ("deviceId" if "deviceId" in have else "id")
        fields = [f for f in ("name", "busLocation", "totalMemory", "smCount", "computeMajor",
                              "computeMinor", "id") if f in have]
        # Without cuDevice, TARGET_INFO_CUDA_DEVICE maps the GPU id to the CUDA device index.
        cuda_of = {} if key != "id" else db.scalar_map("TARGET_INFO_CUDA_DEVICE", "gpuId", "cudaId")
        if key in have:
            sel = ", ".join([f'CAST("{key}" AS INTEGER)'] + [  # names bounded, numbers typed
                bounded(f) if f in ("name", "busLocation") else f'CAST("{f}" AS INTEGER)'
                for f in fields])
            for row in db.con.execute(f'SELECT {sel} FROM TARGET_INFO_GPU'):
                dev = cuda_of.get(row[0], row[0])
                d = {"device": int(dev) if dev is not None else -1}
                for f, v in zip(fields, row[1:]):
                    d[f if f != "id" else "gpu_id"] = text(v) if isinstance(v, bytes) else v
                out.append(d)
    if not out and db.has("TARGET_INFO_CUDA_GPU") and {"deviceId", "name"} <= db.columns(
            "TARGET_INFO_CUDA_GPU"):
        for d, name in db.con.execute('SELECT DISTINCT CAST(deviceId AS INTEGER), '
                                      f'{bounded("name")} FROM TARGET_INFO_CUDA_GPU'):
            if d is None:
                continue
            out.append({"device": int(d), "name": text(name)})
    seen, uniq = set(), []
    for d in out:  # one GPU per device index (vmId variants repeat it)
        if d["device"] not in seen:
            seen.add(d["device"])
            uniq.append(d)
    return sorted(uniq, key=lambda d: d["device"])


def _processes(db: Db) -> dict[int, str]:
    if not db.has("PROCESSES") or not {"pid", "name"} <= db.columns("PROCESSES"):
        return {}
    return {int(p): text(n) or "" for p, n in db.con.execute(
            f"SELECT CAST(pid AS INTEGER), {bounded('name')} FROM PROCESSES")
            if p is not None}


def _threads(db: Db, s: Strings) -> dict[int, str]:
    if not db.has("ThreadNames") or not {"nameId", "globalTid"} <= db.columns("ThreadNames"):
        return {}
    out = {}
    for name_id, g in db.con.execute("SELECT nameId, globalTid FROM ThreadNames"):
        if g is not None and name_id is not None:
            out[int(g) & 0xFFFFFF] = s.get(int(name_id)) or ""
    return out


def _contexts(db: Db) -> dict[str, int]:
    """"pid/device" -> CUDA context id, when a process uses one context per device."""
    seen: dict[str, set] = {}
    for t in (K + "KERNEL", K + "MEMCPY", K + "MEMSET"):
        if db.has(t) and {"globalPid", "deviceId", "contextId"} <= db.columns(t):
            q = f'SELECT DISTINCT globalPid, deviceId, contextId FROM "{t}"'
            for g, d, ctx in db.con.execute(q):
                if g is None or d is None or ctx is None:
                    continue
                seen.setdefault(f"{(int(g) >> 24) & 0xFFFFFF}/{int(d)}", set()).add(int(ctx))
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}
