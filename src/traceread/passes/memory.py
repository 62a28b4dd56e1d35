"""GPU memory: allocator peaks and churn, and the cost of device allocation calls.

From ``profile_memory=True`` traces, every ``[memory]`` instant carries the
allocation (+) or free (-) size and the caching allocator's totals after it
(table columns ``mem_bytes``, ``mem_allocated``, ``mem_reserved``,
``mem_device``): per device and per step we report the peak allocated and
reserved bytes, the number of allocations and the bytes allocated (churn).
From both formats, the device allocation API calls (``cudaMalloc``,
``cudaFree``, ``hipFree``, ``cuMemCreate`` ...) are counted and timed: in a
steady training loop the caching allocator should not call them at all, so
calls after the first step point at ``torch.cuda.empty_cache()`` in the loop,
or at an allocator that runs out of cached blocks (fragmentation / near
capacity: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; the levers that say so are
verdict/busy.py's ``memory_levers``).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .common import events_of, lookup_at, rows_of, take

HOW_TO_RECORD = ("no [memory] events in this trace: record with "
                 "torch.profiler.profile(profile_memory=True) for allocator peaks and churn")
ALLOC_API = re.compile(r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocManaged|"
                       r"MallocHost|FreeHost|HostAlloc|HostMalloc|HostFree|ExtMallocWithFlags|"
                       r"MallocPitch|Malloc3D)(_v\d+)?$|^cuMem(Alloc|Free|Create|Release|Map|Unmap|"
                       r"AddressReserve|AddressFree)\w*$")
_FREE = re.compile(r"Free|Release|Unmap", re.I)


def _mem_rows(ev: pd.DataFrame) -> pd.DataFrame:
    if "mem_bytes" not in ev:
        return ev.iloc[:0]
    rows = rows_of(ev, ("instant",))
    rows = rows[ev["mem_bytes"].to_numpy().take(rows) != -1]
    return take(ev, rows, ["ts", "pid", "mem_bytes", "mem_allocated", "mem_reserved",
                           "mem_device"])


def alloc_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """Device allocation API calls: ts, dur, pid, name, free (bool)."""
    rows = rows_of(ev, ("runtime", "driver"))
    hit = lookup_at(ev["name"], rows, lambda n: bool(ALLOC_API.match(n)), False, bool)
    a = take(ev, rows[hit], ["ts", "dur", "pid", "name"])
    a["name"] = a["name"].astype(str)
    a["free"] = a["name"].str.contains(_FREE)
    return a


def memory_summary(trace, steps: pd.DataFrame | None = None, meta=None) -> dict:
    """Allocator peaks/churn per device and step, and the allocation API's cost (the
    allocator levers that read them: verdict/busy.py)."""
    from .steps import assign_steps

    ev = events_of(trace)
    mem = _mem_rows(ev)
    out: dict = {"has_memory_events": bool(len(mem)), "note": None, "devices": [],
                 "steps": None, "api": None}
    have_steps = steps is not None and len(steps) > 0 and "start" in steps
    if len(mem):
        out["devices"] = _per_device(mem, _capacity(meta if meta is not None else
                                                   getattr(trace, "meta", None)))
        if have_steps:
            k = assign_steps(steps, mem["pid"].to_numpy(), mem["ts"].to_numpy())
            out["steps"] = _per_step(mem, k, steps)
    else:
        out["note"] = HOW_TO_RECORD
    calls = alloc_calls(ev)
    first_end = int(steps["end"].min()) if have_steps else None
    out["api"] = _api(calls, first_end, steps if have_steps else None)
    return out


def _capacity(meta) -> dict[int, int]:
    caps = {}
    for d in getattr(meta, "devices", None) or []:
        if isinstance(d, dict):
            total = d.get("totalGlobalMem") or d.get("totalMemory")
            if isinstance(total, (int, float)) and total > 0:
                caps[int(d.get("device", d.get("id", -1)))] = int(total)
    return caps


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row order, group starts in that order, key of each group): rows grouped by ``key``
    ascending, row order kept inside a group (what a sorted groupby sees)."""
    order = np.argsort(key, kind="stable") if len(key) and (key != key[0]).any() \
        else np.arange(len(key))
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.empty(0, np.intp)
    return order, starts, k[starts]


def _peaks(col: np.ndarray, order, starts) -> list:
    """``_peak`` of each group: its max, None where it is negative (not recorded)."""
    return [v if v >= 0 else None for v in np.maximum.reduceat(col[order], starts).tolist()]


def _alloc_stats(b: np.ndarray, starts) -> tuple[list, list]:
    """Per group of the ordered sizes ``b``: allocations, bytes allocated."""
    pos = b > 0
    return (np.add.reduceat(pos.astype(np.int64), starts).tolist(),
            np.add.reduceat(np.where(pos, b, 0), starts).tolist())


def _per_device(mem: pd.DataFrame, caps: dict) -> list[dict]:
    b = mem["mem_bytes"].to_numpy(np.int64)
    order, starts, devs = _groups(mem["mem_device"].to_numpy())
    peak_a = _peaks(mem["mem_allocated"].to_numpy(), order, starts)
    peak_r = _peaks(mem["mem_reserved"].to_numpy(), order, starts)
    bo = b[order]
    allocs, alloc_bytes = _alloc_stats(bo, starts)
    frees = np.add.reduceat((bo < 0).astype(np.int64), starts).tolist()
    ends = np.r_[starts[1:], len(bo)]
    out = []
    for i, dev in enumerate(devs.tolist()):
        pa, pr = peak_a[i], peak_r[i]
        out.append({"device": int(dev), "peak_allocated": pa, "peak_reserved": pr,
                    # PyTorch < 1.10 writes no totals: the running sum of the sizes instead
                    "peak_growth": int(np.cumsum(bo[starts[i]:ends[i]]).max(initial=0)),
                    "allocs": allocs[i], "frees": frees[i], "alloc_bytes": alloc_bytes[i],
                    "unused_reserved_at_peak": int(pr - pa) if pr and pa is not None else None,
                    "capacity": caps.get(int(dev))})
    return out


def _peak(col: pd.Series) -> int | None:
    """Max of an allocator total; None when the trace does not record it (-1 everywhere)."""
    v = int(col.max()) if len(col) else -1
    return v if v >= 0 else None


def _per_step(mem: pd.DataFrame, k: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    m = k >= 0
    rows: list[dict] = []
    cols = ["step", "device", "peak_allocated", "peak_reserved", "allocs", "alloc_bytes"]
    if not m.any():
        return pd.DataFrame(rows, columns=cols)
    dev = mem["mem_device"].to_numpy()[m]
    devs, dev_at = np.unique(dev, return_inverse=True)
    key = k[m].astype(np.int64) * max(len(devs), 1) + dev_at
    order, starts, keys = _groups(key)
    peak_a = _peaks(mem["mem_allocated"].to_numpy()[m], order, starts)
    peak_r = _peaks(mem["mem_reserved"].to_numpy()[m], order, starts)
    allocs, alloc_bytes = _alloc_stats(mem["mem_bytes"].to_numpy(np.int64)[m][order], starts)
    step_no = steps["step"].to_numpy() if "step" in steps else np.arange(len(steps))
    pos = {int(i): j for j, i in enumerate(steps["index"].to_numpy())} if "index" in steps \
        else {j: j for j in range(len(steps))}
    for i, key_i in enumerate(keys.tolist()):
        ki, d = divmod(key_i, max(len(devs), 1))
        rows.append({"step": int(step_no[pos.get(int(ki), 0)]), "device": int(devs[d]),
                     "peak_allocated": peak_a[i], "peak_reserved": peak_r[i],
                     "allocs": allocs[i], "alloc_bytes": alloc_bytes[i]})
    return pd.DataFrame(rows, columns=cols)


def _api(calls: pd.DataFrame, first_step_end: int | None, steps) -> dict:
    by = calls.groupby("name")["dur"].agg(["size", "sum"])
    rec = {"calls": {str(n): {"count": int(r["size"]), "ns": int(r["sum"])}
                     for n, r in by.sort_values("sum", ascending=False).iterrows()},
           "count": int(len(calls)), "ns": int(calls["dur"].sum()),
           "frees": int(calls["free"].sum()), "after_first_step": None}
    if first_step_end is not None and steps is not None:
        lo, hi = first_step_end, int(steps["end"].max())
        inside = (calls["ts"] >= lo) & (calls["ts"] < hi)
        rec["after_first_step"] = {"count": int(inside.sum()),
                                   "frees": int((inside & calls["free"]).sum()),
                                   "ns": int(calls.loc[inside, "dur"].sum())}
    return rec
