"""When was each GPU busy, and where are the idle holes (``nsys stats`` ``gpu_gaps``)?

``gpu_busy`` is the union of GPU operations (kernel, memcpy, memset, CUDA graph
replay rows -- never sync records or annotations) per (pid, device). ``gpu_gaps`` lists the idle
holes between the first and last GPU operation of each (pid, device), with
the same rule as Nsight Systems' ``gpu_gaps`` report:

* the GPU operations of one process on one device are pooled (all streams and
  contexts); a hole is an instant covered by none of them;
* CUDA profiling overheads recorded by nsys (``PROFILER_OVERHEAD`` rows named
  "CUDA profiling data flush overhead", "CUDA profiling stop overhead" or
  "CUDA profiling overhead") count as busy for every device of their process,
  but only when they lie strictly inside that device's first..last span --
  the user cannot do anything about those gaps;
* on an nsys trace, operations that start at or before time 0 (session
  relative: recorded before the session/profiler start) are ignored;
* a gap is reported when its duration is strictly greater than ``min_gap_ns``.

nsys pairs the j-th smallest end with the (j+1)-th smallest start; that is the
hole set of the union, except that a zero-length operation inside a hole
splits it in two. We compute it the same way so the rows match exactly.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..table import GPU_OP_KINDS, Trace
from . import intervals
from .common import events_of, kind_in
from .frames import take_rows

# PROFILER_OVERHEAD names nsys counts as GPU-busy time (gpustats.py in nsys reports).
NSYS_GPU_OVERHEADS = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead",
                      "CUDA profiling overhead")
OVERHEAD_CAT = "PROFILER_OVERHEAD"

GAP_COLUMNS = ("start", "end", "duration", "pid", "device")




def _gpu_ops(ev: pd.DataFrame) -> pd.DataFrame:
    # the four columns of the GPU rows only, not every column of them first
    return take_rows(ev, np.flatnonzero(kind_in(ev, GPU_OP_KINDS)), ("ts", "dur", "pid", "device"))


def gpu_busy(events_df) -> dict[tuple[int, int], intervals.Intervals]:
    """(pid, device) -> (starts, ends): disjoint union of kernel/memcpy/memset/graph time."""
    return intervals.union_by_device(_gpu_ops(events_of(events_df)))


def gpu_gaps(trace_or_events, min_gap_ns: int = 0, *, skip_nonpositive: bool | None = None,
             overheads: bool = True) -> pd.DataFrame:
    """Idle holes of each (pid, device) longer than ``min_gap_ns``, sorted by start.

    Columns: start, end, duration (int64 ns), pid, device.
    ``skip_nonpositive`` (default: True for nsys traces) ignores operations
    starting at ts <= 0; ``overheads`` counts nsys CUDA profiling overheads as busy.
    """
    ev, ops = gap_ops(trace_or_events, skip_nonpositive)
    ov = profiler_overheads(ev) if overheads else None
    parts = []
    for (pid, dev), g in ops.groupby(["pid", "device"], sort=True, observed=True):
        s = g["ts"].to_numpy(np.int64)
        e = s + g["dur"].to_numpy(np.int64)
        if ov is not None and len(ov):
            mine = ov[ov["pid"].to_numpy() == pid]
            os_ = mine["ts"].to_numpy(np.int64)
            oe = os_ + mine["dur"].to_numpy(np.int64)
            inside = (os_ > s.min()) & (oe < e.max())
            s = np.concatenate([s, os_[inside]])
            e = np.concatenate([e, oe[inside]])
        gs, ge = _holes(s, e)
        keep = (ge - gs) > min_gap_ns
        if keep.any():
            parts.append(pd.DataFrame({
                "start": gs[keep], "end": ge[keep], "duration": (ge - gs)[keep],
                "pid": np.full(int(keep.sum()), pid, np.int64),
                "device": np.full(int(keep.sum()), dev, np.int64)}))
    if not parts:
        return pd.DataFrame({c: np.empty(0, np.int64) for c in GAP_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    if len(parts) == 1:   # one device: its holes come in start order already
        return out
    return out.sort_values(["start", "pid", "device"], kind="stable").reset_index(drop=True)


def gap_ops(trace_or_events, skip_nonpositive: bool | None = None):
    """(events, GPU ops the gap rules count): on nsys traces (by default) ops at ts <= 0 go."""
    ev = events_of(trace_or_events)
    if skip_nonpositive is None:
        skip_nonpositive = isinstance(trace_or_events, Trace) and trace_or_events.meta.format == "nsys"
    ops = _gpu_ops(ev)
    return ev, (ops[ops["ts"] > 0] if skip_nonpositive else ops)


def _holes(s: np.ndarray, e: np.ndarray) -> intervals.Intervals:
    """nsys's hole rule: j-th smallest end paired with the (j+1)-th smallest start."""
    # the starts come in ts order (the events' order) unless overheads were added: no sort
    s = s if len(s) < 2 or bool((s[1:] >= s[:-1]).all()) else np.sort(s)
    e = np.sort(e)
    gs, ge = e[:-1], s[1:]
    keep = gs < ge
    return gs[keep], ge[keep]


def profiler_overheads(ev: pd.DataFrame) -> pd.DataFrame:
    if "cat" not in ev or not len(ev):
        return ev.iloc[:0]
    m = ev["cat"] == OVERHEAD_CAT
    if m.any():   # (a Kineto trace has none: no test of every name)
        m &= ev["name"].isin(NSYS_GPU_OVERHEADS)
    return ev.loc[m, ["ts", "dur", "pid"]]


def nsys_order(gaps: pd.DataFrame, rows: int = -1) -> pd.DataFrame:
    """The rows of ``nsys stats -r gpu_gaps``: longest first, then by start.

    ``rows`` >= 0 applies nsys's row limit the way its SQL does (default there:
    50): first to the gaps in (process, device, start) order, then to the
    sorted rows -- so the limit keeps the *earliest* gaps, not the longest.
    """
    if rows >= 0:
        gaps = gaps.sort_values(["pid", "device", "start"], kind="stable").iloc[:rows]
    out = gaps.sort_values(["duration", "start"], ascending=[False, True], kind="stable")
    return (out.iloc[:rows] if rows >= 0 else out).reset_index(drop=True)
