"""Write a table-shaped DataFrame as a Kineto (torch.profiler) trace of a given era.

Planted-truth scenarios are built as DataFrames with the columns of
``traceread.table.COLUMNS`` and written through ``write_kineto``; reading the
file back with ``read_kineto`` reproduces ts, dur, kind, name, pid, tid,
device, stream, correlation, external_id, bytes, copy_kind and the collective
columns exactly (integer-µs eras need µs-aligned ts/dur).

Eras:

* ``"1.8"`` -- PyTorch 1.8/1.9: integer epoch µs, ``Operator``/``Runtime``/
  ``Kernel``/``Memcpy``/``Memset`` categories, ``"stream N"`` GPU tids, string
  host tids, ``external id`` on GPU and runtime rows, ``async`` flows.
* ``"2.0"`` -- PyTorch 2.0-2.3: float epoch µs with ns decimals, modern
  categories, ``ac2g`` flows.
* ``"2.4"`` -- PyTorch >= 2.4: ``baseTimeNanoseconds`` plus float µs relative
  to it.

Numbers are written as exact decimal text (never through a float), so
sub-µs digits survive even where float64 could not hold them.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..table import COLUMNS, Trace, TraceMeta

ERAS = ("1.8", "2.0", "2.4")

_CAT = {
    "2": {"cpu_op": "cpu_op", "python": "python_function", "annotation": "user_annotation",
          "gpu_annotation": "gpu_user_annotation", "runtime": "cuda_runtime",
          "driver": "cuda_driver", "kernel": "kernel", "memcpy": "gpu_memcpy",
          "memset": "gpu_memset", "sync": "cuda_sync", "instant": "cpu_instant_event",
          "other": "Trace", "osrt": "Trace"},
    "1": {"cpu_op": "Operator", "python": "python_function", "annotation": "user_annotation",
          "gpu_annotation": "gpu_user_annotation", "runtime": "Runtime", "driver": "cuda_driver",
          "kernel": "Kernel", "memcpy": "Memcpy", "memset": "Memset", "sync": "cuda_sync",
          "instant": None, "other": "Trace", "osrt": "Trace"},
}
_DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "sync")


def write_kineto(events: pd.DataFrame | Trace, path: str | Path, *, era: str = "2.4",
                 meta: TraceMeta | dict | None = None, gz: bool | None = None) -> Path:
    """Write ``events`` (table-shaped DataFrame, or a Trace) as a Kineto trace file.

    ``meta`` (TraceMeta or dict) supplies rank/world_size (-> distributedInfo),
    devices (-> deviceProperties), process/thread names (-> 'M' events) and
    format_version (-> schemaVersion). ``gz`` defaults to "path ends with .gz".
    """
    if isinstance(events, Trace):
        meta = events.meta if meta is None else meta
        events = events.events
    if era not in ERAS:
        raise ValueError(f"era must be one of {ERAS}, not {era!r}")
    meta = _meta_dict(meta)
    df = _normalise(events)
    doc = _document(df, era, meta)
    data = msgspec.json.encode(doc)
    path = Path(path)
    if gz is None:
        gz = path.name.endswith(".gz")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def _meta_dict(meta: TraceMeta | dict | None) -> dict:
    if meta is None:
        return {}
    if isinstance(meta, TraceMeta):
        return meta.to_dict()
    return dict(meta)


def _normalise(events: pd.DataFrame) -> pd.DataFrame:
    """All table columns present, ints as int64 (-1 default), strings as object/None."""
    n = len(events)
    out = {}
    for name, typ, _ in COLUMNS:
        if name in events.columns:
            col = events[name]
        else:
            col = None
        if str(typ).startswith("int"):
            out[name] = (np.full(n, -1, dtype=np.int64) if col is None
                         else pd.to_numeric(col).fillna(-1).to_numpy(dtype=np.int64))
        else:
            vals = [None] * n if col is None else col.astype(object).tolist()
            out[name] = [None if (v is None or (isinstance(v, float) and v != v)) else str(v)
                         for v in vals]
    return pd.DataFrame(out)


def _us_text(ns: int) -> msgspec.Raw:
    """Exact decimal µs for integer ns: 1695835535123456789 -> 1695835535123456.789."""
    sign = "-" if ns < 0 else ""
    a = abs(int(ns))
    return msgspec.Raw(f"{sign}{a // 1000}.{a % 1000:03d}".encode())


def _us_int(ns: int, what: str) -> int:
    if ns % 1000:
        raise ValueError(f"era 1.8 writes integer µs: {what}={ns} ns is not µs-aligned")
    return int(ns) // 1000


def _document(df: pd.DataFrame, era: str, meta: dict) -> dict:
    old = era == "1.8"
    cats = _CAT["1" if old else "2"]
    base = 0
    if era == "2.4" and len(df):
        base = int(df["ts"].min()) // 10**9 * 10**9  # whole second at or before the first event

    def t(ns: int, what: str):
        if old:
            return _us_int(ns, what)
        return _us_text(ns - base if what == "ts" else ns)

    ext_key_gpu = "external id" if old else "External id"
    events: list[dict] = []
    host_pids: set = set()
    device_pids: set = set()
    for r in df.itertuples(index=False):
        kind = r.kind or "other"
        on_device = kind in _DEVICE_KINDS and r.device >= 0
        ev: dict[str, Any] = {"ph": "i" if kind == "instant" else "X"}
        cat = cats.get(kind, "Trace")
        if old and kind == "annotation" and str(r.name).startswith("ProfilerStep#"):
            cat = "Operator"  # 1.8-1.9 logged steps as operators
        if r.cat is not None and _same_kind(r.cat, kind, r.name):
            cat = r.cat  # keep the source category when it maps to the same kind
        if cat is not None:
            ev["cat"] = cat
        ev["name"] = r.name if r.name is not None else ""
        if on_device:
            ev["pid"] = int(r.device)
            stream = int(r.stream)
            ev["tid"] = f"stream {stream}" if old else stream
            device_pids.add(int(r.device))
        else:
            ev["pid"] = int(r.pid)
            ev["tid"] = str(int(r.tid)) if old and r.tid >= 0 else int(r.tid)
            host_pids.add(int(r.pid))
        ev["ts"] = t(int(r.ts), "ts")
        if kind == "instant":
            ev["s"] = "t"
        else:
            ev["dur"] = t(int(r.dur), "dur")
        args: dict[str, Any] = {}
        if r.external_id >= 0:
            gpu_style = on_device or kind in ("runtime", "driver")
            args[ext_key_gpu if gpu_style else "External id"] = int(r.external_id)
        if r.correlation >= 0:
            args["correlation"] = int(r.correlation)
        if on_device:
            args["device"] = int(r.device)
            args["stream"] = int(r.stream)
        if r.bytes >= 0 and kind in ("memcpy", "memset"):
            args["bytes"] = int(r.bytes)
        if kind == "memcpy" and r.copy_kind is not None and not _name_has_copy_kind(r.name, r.copy_kind):
            args["kind"] = r.copy_kind
        _collective_args(r, args)
        if args:
            ev["args"] = args
        events.append(ev)
        if kind in ("runtime", "driver") and r.correlation >= 0 and not old:
            events.append({"ph": "s", "id": int(r.correlation), "pid": ev["pid"], "tid": ev["tid"],
                           "ts": ev["ts"], "cat": "ac2g", "name": "ac2g"})
        elif on_device and r.correlation >= 0 and not old and kind != "gpu_annotation":
            events.append({"ph": "f", "id": int(r.correlation), "pid": ev["pid"], "tid": ev["tid"],
                           "ts": ev["ts"], "cat": "ac2g", "name": "ac2g", "bp": "e"})
    events = _meta_events(meta, host_pids, device_pids, old, t(int(df["ts"].min()), "ts")
                          if len(df) else 0) + events
    doc: dict[str, Any] = {"schemaVersion": _schema_version(meta)}
    if meta.get("devices"):
        doc["deviceProperties"] = [{"id": d.get("device", i), **{k: v for k, v in d.items()
                                                                  if k not in ("device", "id")}}
                                   for i, d in enumerate(meta["devices"])]
    if meta.get("rank", -1) is not None and meta.get("rank", -1) >= 0:
        dist = {k: v for k, v in (meta.get("distributed") or {}).items()}
        dist["rank"] = meta["rank"]
        if meta.get("world_size", -1) >= 0:
            dist["world_size"] = meta["world_size"]
        doc["distributedInfo"] = dist
    doc["traceEvents"] = events
    if era == "2.4":
        doc["displayTimeUnit"] = "ms"
        doc["baseTimeNanoseconds"] = base
    return doc


def _schema_version(meta: dict) -> Any:
    v = meta.get("format_version") or "1"
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


def _same_kind(cat: str, kind: str, name: Any) -> bool:
    from ..readers.kineto import CAT_KIND

    mapped = CAT_KIND.get(str(cat).lower())
    if mapped == "cpu_op" and str(name).startswith("ProfilerStep#"):
        mapped = "annotation"
    return mapped == kind or (mapped is None and kind == "other")


def _name_has_copy_kind(name: Any, copy_kind: str) -> bool:
    from ..readers.kineto import copy_kind_from_name

    return name is not None and copy_kind_from_name(str(name)) == copy_kind


def _collective_args(r: Any, args: dict) -> None:
    """record_param_comms / NCCL kernel args (PyTorch >= 2.1 names) from collective columns."""
    if r.collective is None:
        return
    args["Collective name"] = r.collective
    if r.msg_nelems >= 0:
        args["In msg nelems"] = int(r.msg_nelems)
        args["Out msg nelems"] = int(r.msg_nelems)
    if r.dtype is not None:
        args["dtype"] = r.dtype
    if r.group_size >= 0:
        args["Group size"] = int(r.group_size)
    if r.process_group is not None:
        args["Process Group Name"] = r.process_group


def _meta_events(meta: dict, host_pids: set, device_pids: set, old: bool, ts: Any) -> list:
    out = []
    procs = {int(k) if str(k).lstrip("-").isdigit() else k: v
             for k, v in (meta.get("processes") or {}).items()}
    for pid in sorted(host_pids):
        name = procs.get(pid, "python")
        out.append({"name": "process_name", "ph": "M", "ts": ts, "pid": pid, "tid": 0,
                    "args": {"name": name}})
        out.append({"name": "process_labels", "ph": "M", "ts": ts, "pid": pid, "tid": 0,
                    "args": {"labels": "CPU"}})
    for dev in sorted(device_pids):
        out.append({"name": "process_name", "ph": "M", "ts": ts, "pid": dev, "tid": 0,
                    "args": {"name": "python"}})
        out.append({"name": "process_labels", "ph": "M", "ts": ts, "pid": dev, "tid": 0,
                    "args": {"labels": f"GPU {dev}"}})
    for tid, name in (meta.get("threads") or {}).items():
        for pid in sorted(host_pids):
            tid_v = int(tid) if str(tid).lstrip("-").isdigit() else tid
            out.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": pid,
                        "tid": str(tid_v) if old else tid_v, "args": {"name": name}})
    return out


__all__ = ["write_kineto", "ERAS"]
