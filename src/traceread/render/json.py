"""The JSON contract of ``traceread analyze --format json`` (keys in docs/analysis.md).

Every time is an integer number of nanoseconds; percentages are floats.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from ..passes.attribution import CPU_CATEGORIES, drain_times
from ..passes.steps import program_step_of


def _py(x):
    """numpy / pandas scalars to plain JSON-able Python values."""
    if isinstance(x, dict):
        return {str(k): _py(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_py(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return [_py(v) for v in x.tolist()]
    if x is pd.NA or x is None:
        return None
    return x


def _records(df: pd.DataFrame, int_ns: tuple = ()) -> list[dict]:
    if df is None or not len(df):
        return []
    out = df.copy()
    for c in int_ns:
        if c in out:
            out[c] = out[c].round().astype(np.int64)
    return [_py(r) for r in out.to_dict(orient="records")]


def analysis_to_dict(a) -> dict[str, Any]:
    return {
        "trace": _trace(a),
        "window": _py(a.window.to_dict()) if getattr(a, "window", None) is not None else None,
        "steps": _steps(a),
        "devices": _devices(a),
        "gaps": _gaps(a),
        "attribution": _attribution(a),
        "nccl": _nccl(a),
        "compile": _py(a.compile) if a.compile else _empty_compile(),
        "kernels": _records(a.kernels.head(20), ("avg_ns", "med_ns", "stddev_ns")),
        "kernel_classes": _records(a.kernel_classes),
        "copies": _py(getattr(a, "copies", None) or {}),
        "context": _py(getattr(a, "context", None) or {}),
        "graphs": _py(getattr(a, "graphs", None) or {}),
        "verdict": _py(a.verdict),
        "utilization": utilization_dict(getattr(a, "utilization", None)),
        "steady_state": _py(getattr(a, "steady_state", None)),
        "parallelism": _py(getattr(a, "parallelism", None)),
        "replay": _py(getattr(a, "replay", None)),
        "facts": _facts(getattr(a, "facts", None)),
    }


def _facts(f) -> dict | None:
    """The facts record the verdict was judged on (passes/facts.py): figures, program facts,
    their evidence, the frames' sizes."""
    if f is None:
        return None
    d = f.to_dict()
    r = d.get("replay")
    if isinstance(r, dict) and isinstance(r.get("critical_path"), dict):
        # the segments are drawn from the top-level replay: not twice in the document
        d["replay"] = {**r, "critical_path": {k: v for k, v in r["critical_path"].items()
                                              if k != "segments"}}
    return _py(d)


def utilization_dict(u: dict | None) -> dict | None:
    """MFU, busy classes + levers, memory (passes/utilization.py); step tables as records."""
    if not u:
        return None
    out = {}
    for key, part in u.items():
        if not isinstance(part, dict):
            out[key] = _py(part)
            continue
        part = dict(part)
        steps = part.get("steps")
        if isinstance(steps, pd.DataFrame):
            part["steps"] = _records(steps)
        out[key] = _py(part)
    return out


def _trace(a) -> dict:
    m = a.meta
    return {"path": m.path, "format": m.format, "format_version": m.format_version,
            "producer": m.producer, "rank": m.rank, "world_size": m.world_size,
            "events": a.events, "span_ns": a.span_ns,
            "devices": [_py(d) for d in m.devices],
            # a trace cut short: where, and how much was recovered (else null)
            "truncated": _py(m.extra.get("truncated")),
            # rows traceread.readers.validate dropped or trimmed: {rule: rows} (else null)
            "impossible": _py(m.extra.get("impossible")),
            # processes whose activity lies minutes apart (traceread.readers.validate; else null)
            "processes_apart": _py(m.extra.get("processes_apart"))}


def _steps(a) -> dict:
    items = []
    st = a.steps
    for r in st.to_dict(orient="records"):
        items.append(_py({
            "step": r["step"], "name": r["name"], "pid": r["pid"], "tid": r["tid"],
            "start_ns": r["start"], "end_ns": r["end"], "dur_ns": r["dur"],
            "gpu_start_ns": r["gpu_start"], "gpu_end_ns": r["gpu_end"], "gpu_ops": r["gpu_ops"],
            "busy_ns": r["busy_ns"], "idle_ns": r["idle_ns"], "gaps": r["gaps"],
            "idle_by_cpu": {c: r[f"idle_{c}"] for c in CPU_CATEGORIES},
            "idle_in_span_ns": r["idle_in_span_ns"],
            "gpu_ns": r.get("gpu_ns"), "program_ns": r.get("program_ns"),
            "bound_by": r.get("bound_by"),
        }))
    return {"source": a.step_source, "pattern": a.step_pattern,
            "count": 0 if a.step_source == "whole_trace" else len(st),
            "stats": _py(a.step_stats), "items": items,
            "program": _py(program_step_of(a))}


def _devices(a) -> list[dict]:
    d = a.devices
    out = []
    for r in d.to_dict(orient="records"):
        w = r["window_ns"]
        out.append(_py({"pid": r["pid"], "device": r["device"], "name": r["name"],
                        "window_start_ns": r["window_start"], "window_end_ns": r["window_end"],
                        "window_ns": w, "busy_ns": r["busy_ns"], "idle_ns": r["idle_ns"],
                        "idle_pct": round(100.0 * r["idle_ns"] / w, 2) if w else 0.0,
                        "gaps": r["gaps"]}))
    return out


def gap_records(gaps: pd.DataFrame) -> list[dict]:
    out = []
    for r in gaps.to_dict(orient="records"):
        out.append(_py({
            "start_ns": r["start"], "end_ns": r["end"], "duration_ns": r["duration"],
            "pid": r["pid"], "device": r["device"], "step": r["step"],
            "drain": r["drain"], "drain_op": r["drain_op"] or None,
            "queued_ns": r.get("queued_ns", 0), "waited_on": r.get("waited_on") or None,
            "cpu": r["cpu"],
            "by_cpu": {c: r[f"cpu_{c}"] for c in CPU_CATEGORIES if r[f"cpu_{c}"]},
        }))
    return out


def _gaps(a) -> dict:
    g = a.gaps
    dur = g["duration"].to_numpy(np.int64)
    listed = np.flatnonzero(dur > a.min_gap_ns)   # ``a.listed_gaps()``, as positions
    # the 20 longest, earliest first on ties (a stable sort of every listed gap's row took
    # ~25 ms at 90 k gaps; two columns suffice)
    top = listed[np.lexsort((g["start"].to_numpy(np.int64)[listed], -dur[listed]))][:20]
    return {"total_idle_ns": int(dur.sum()) if len(g) else 0, "count": len(g),
            "min_gap_ns": a.min_gap_ns, "listed": len(listed),
            "listed_ns": int(dur[listed].sum()) if len(listed) else 0,
            "largest": gap_records(g.iloc[top])}


def _attribution(a) -> dict:
    s = a.attribution
    per_dev = []
    g = a.gaps
    for (pid, dev), part in g.groupby(["pid", "device"], sort=True):
        dur = part["duration"].to_numpy(np.int64)
        per_dev.append(_py({
            "pid": pid, "device": dev, "idle_ns": int(dur.sum()),
            "by_cpu": {c: int(part[f"cpu_{c}"].sum()) for c in CPU_CATEGORIES},
            "by_drain": drain_times(part)}))
    return {"by_cpu": s["by_cpu"], "by_drain": s["by_drain"],
            "host_late_queued_ns": int(s.get("host_late_queued_ns", 0)),
            "drain_x_cpu": s["drain_x_cpu"],
            "by_sync_op": s["by_sync_op"], "devices": per_dev,
            "top_ops": _records(a.top_ops)}


def _nccl(a) -> dict:
    n, c = a.nccl, a.collectives
    if n is None or not len(n):
        base = {"comm_ns": 0, "exposed_ns": 0, "overlap_ns": 0, "overlap_pct": 0.0}
    else:
        comm = int(n["comm_ns"].sum())
        overlap = int(n["overlap_ns"].sum())
        base = {"comm_ns": comm, "exposed_ns": int(n["exposed_ns"].sum()),
                "overlap_ns": overlap,
                "overlap_pct": round(100.0 * overlap / comm, 2) if comm else 0.0}
    base["devices"] = _records(n)
    base["by_collective"] = _records(c)
    return base


def _empty_compile() -> dict:
    return {"compiles": 0, "recompiles": 0, "compile_ns": 0, "cache_lookup_ns": 0, "frames": []}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2)
