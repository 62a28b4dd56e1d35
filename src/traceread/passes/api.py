"""CUDA API summary, the ``nsys stats`` ``cuda_api_sum`` way.

What nsys 2023.4 does, and so what we reproduce by default (``nsys_compat``):

* it summarises every row of ``CUPTI_ACTIVITY_KIND_RUNTIME`` -- runtime calls,
  the driver calls nsys records there (eventClass 1, e.g. ``cuModuleGetLoadingMode``)
  and also the "CUDA backtrace" duplicates (eventClass 67) that nsys writes
  when backtraces are collected. Those duplicates enclose a real call and are
  named without the version suffix, so nsys reports e.g. two ``cudaMalloc``
  rows with slightly different times: the call is counted twice.
* it groups by the recorded name id, then shows the name with a 6-character
  ``_vNNNN`` suffix removed (``cudaMalloc_v3020`` -> ``cudaMalloc``) but keeps
  longer ones (``cudaStreamIsCapturing_v10000`` stays as is).

With ``nsys_compat=False`` the backtrace duplicates are left out (each call
counted once) and names are the table's normalised ``name``. On Kineto traces
both modes summarise the runtime/driver events by name.
"""
from __future__ import annotations

import pandas as pd

from ..table import Trace
from .common import events_of
from .kernels import render_summary, summarize
from .nsys_compat import DEFAULT_VERSION

API_KINDS = ("runtime", "driver")
_NSYS_API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")


def nsys_api_name(raw: str) -> str:
    """nsys stats' display name: drop a trailing ``_vNNNN`` of exactly 6 characters."""
    return raw[:-6] if len(raw) > 6 and raw[-6:-4] == "_v" else raw


def api_summary(trace_or_events, nsys_compat: bool = True) -> pd.DataFrame:
    """One row per API: total_ns, instances (calls), avg/med/min/max/stddev, pct, name."""
    ev = events_of(trace_or_events)
    sel = ev["kind"].isin(API_KINDS)
    if nsys_compat:
        sel |= (ev["kind"] == "other") & ev["cat"].isin(_NSYS_API_TABLES)
    a = ev.loc[sel.to_numpy(), ["name", "raw_name", "dur"]]
    if not nsys_compat:
        return summarize(a["name"], a["dur"].to_numpy())
    raw = a["raw_name"]
    if raw.isna().any():  # Kineto: no raw names; nsys always has them on API rows
        raw = raw.astype(object).where(raw.notna(), a["name"].astype(object))
    ids = trace_or_events.meta.extra.get("name_ids") if isinstance(trace_or_events, Trace) else None
    if not ids:
        return summarize(raw, a["dur"].to_numpy(), display=nsys_api_name)
    # nsys groups by name id and orders by total only: ties come out in id order
    out = summarize(raw, a["dur"].to_numpy())
    out["_id"] = [ids.get(n, 1 << 62) for n in out["name"]]
    out["name"] = [nsys_api_name(n) for n in out["name"]]
    out = out.sort_values(["total_ns", "_id"], ascending=[False, True], kind="stable")
    return out.drop(columns="_id").reset_index(drop=True)


def render_api(summary: pd.DataFrame, fmt: str = "csv", version: str = DEFAULT_VERSION) -> str:
    return render_summary(summary, fmt, count_header="Num Calls", version=version)
