"""What is in a trace: format, rank, devices, counts by kind, time span."""
from __future__ import annotations

from typing import Any

from ..table import Trace


def trace_info(trace: Trace) -> dict[str, Any]:
    ev = trace.events
    m = trace.meta
    counts = ev["kind"].value_counts(sort=False)
    counts = {str(k): int(v) for k, v in counts.items() if v}
    if len(ev):
        start = int(ev["ts"].min())
        end = int((ev["ts"] + ev["dur"]).max())
    else:
        start = end = 0
    gpu = ev[ev["device"] >= 0]
    return {
        "path": m.path,
        "format": m.format,
        "format_version": m.format_version,
        "producer": m.producer,
        "rank": m.rank,
        "world_size": m.world_size,
        "devices": sorted(int(d) for d in gpu["device"].unique()),
        "device_names": {str(d.get("device")): d.get("name", "") for d in m.devices},
        "processes": _processes(trace),
        "process_ranks": process_ranks(trace),
        "events": int(len(ev)),
        "by_kind": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "start_ns": start,
        "end_ns": end,
        "span_ns": end - start,
    }


def process_ranks(trace: Trace) -> dict[str, int]:
    """pid -> rank of each GPU process of an nsys export of several (the numbering
    ``analyze`` gives when it splits the export into ranks: readers/nsys_split.py)."""
    from ..readers.nsys_split import gpu_processes

    if trace.meta.format != "nsys" or trace.meta.rank >= 0:
        return {}
    procs = gpu_processes(trace)
    return {str(pid): r for r, (pid, _dev) in enumerate(procs)} if len(procs) >= 2 else {}


def _processes(trace: Trace) -> dict[str, str]:
    """pid -> name of the named processes that have events."""
    have = set(trace.events["pid"].unique().tolist())
    return {str(p): str(n) for p, n in sorted(trace.meta.processes.items()) if p in have}
