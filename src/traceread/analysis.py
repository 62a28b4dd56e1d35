"""``analyze``: why is the GPU underfed, and which lever to pull.

One call runs every pass over a trace -- steps, GPU idle gaps, gap
attribution, communication overlap, compilation, kernels -- and returns an
``Analysis`` whose DataFrame attributes hold the detail and whose
``to_dict()`` is the JSON contract documented in docs/analysis.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .passes import attribution as attr_mod
from .passes import steps as steps_mod
from .passes import utilization as util_mod
from .passes import verdict as verdict_mod
from .passes.compile import compile_summary
from .passes.gaps import gpu_gaps
from .passes.kernel_classes import time_by_class
from .passes.kernels import kernel_summary
from .passes.nccl import collective_summary, comm_overlap
from .table import GPU_OP_KINDS, Trace, TraceMeta, release_heap

LARGEST_GAPS = 20
TOP_KERNELS = 20


@dataclass
class Analysis:
    """Everything ``analyze`` found. DataFrames hold integer-ns columns."""

    meta: TraceMeta
    events: int
    span_ns: int
    step_source: str                 # "ProfilerStep", "pattern", "whole_trace"
    step_pattern: str
    steps: pd.DataFrame              # one row per step (or one whole-trace window)
    step_stats: dict | None
    devices: pd.DataFrame            # pid, device, window_start/end, window_ns, busy_ns, idle_ns
    gaps: pd.DataFrame               # every idle gap, labelled (drain, cpu, cpu_<category>)
    attribution: dict                # by_cpu, by_drain, drain_x_cpu, by_sync_op
    top_ops: pd.DataFrame            # host ops inside gaps: name, category, ns, count
    nccl: pd.DataFrame               # comm_overlap per (pid, device)
    collectives: pd.DataFrame        # collective_summary
    compile: dict
    kernels: pd.DataFrame
    kernel_classes: pd.DataFrame
    verdict: dict
    min_gap_ns: int = 0
    trace: Trace | None = field(default=None, repr=False)  # the analysed trace, for follow-ups
    utilization: dict | None = None  # passes/utilization.py: MFU, busy classes + levers, memory

    def listed_gaps(self) -> pd.DataFrame:
        """Gaps longer than ``min_gap_ns`` (the listing filter; totals never use it)."""
        return self.gaps[self.gaps["duration"] > self.min_gap_ns]

    def to_dict(self) -> dict[str, Any]:
        from .render.json import analysis_to_dict

        return analysis_to_dict(self)


def analyze(trace_or_path, *, step_pattern: str | None = None, min_gap_ns: int = 0,
            peak_tflops: float | None = None) -> Analysis:
    """Run every pass over a Trace (or a path, loaded with ``traceread.load``)."""
    if isinstance(trace_or_path, (str, os.PathLike)):
        from .readers import read

        trace = read(trace_or_path)
    else:
        trace = trace_or_path
    ev = trace.events
    is_nsys = trace.meta.format == "nsys"

    steps, pattern = steps_mod.find_steps(ev, step_pattern)
    if len(steps):
        source = "ProfilerStep" if pattern == steps_mod.DEFAULT_STEP_PATTERN else "pattern"
    else:
        steps, source = steps_mod.whole_trace_window(ev), "whole_trace"
    ops = steps_mod.gpu_ops(ev)
    if is_nsys:  # the gap pass ignores ops recorded before the session start; so do we
        ops = ops[ops["ts"] > 0].reset_index(drop=True)
    release_heap()  # each pass frees its temporaries; hand the pages back before the next
    op_step = steps_mod.step_of_gpu_ops(steps, ops)
    step_tab = steps_mod.step_table(steps, ops, op_step)

    gaps = gpu_gaps(trace, 0)
    gaps["step_index"] = _step_of_gaps(gaps, ops, op_step)
    release_heap()
    att = attr_mod.attribute(ev, gaps, ops, pattern)
    release_heap()
    gaps = att["gaps"]
    summary = attr_mod.summarize(gaps)
    step_tab = _step_idle(step_tab, gaps)
    gaps["step"] = np.where(gaps["step_index"] >= 0,
                            step_tab["step"].to_numpy()[np.maximum(gaps["step_index"], 0)]
                            if len(step_tab) else -1, -1)
    devices = _devices(ops, gaps, trace.meta)

    nccl, collectives = comm_overlap(ev), collective_summary(ev)
    release_heap()
    comp = compile_summary(ev, gaps=gaps)
    kernels = kernel_summary(ev)
    classes = _classes(ev)
    release_heap()

    exposed = int(nccl["exposed_ns"].sum()) if len(nccl) and "exposed_ns" in nccl else 0
    window = int(devices["window_ns"].sum()) if len(devices) else 0
    idle = int(devices["idle_ns"].sum()) if len(devices) else 0
    stats = steps_mod.step_stats(step_tab["dur"]) if source != "whole_trace" else None
    extra = _evidence(stats, summary, att["top_ops"], kernels, comp)
    verdict = verdict_mod.decide(has_gpu=len(ops) > 0, window_ns=window, idle_ns=idle,
                                 attr=summary if len(ops) else None, exposed_comm_ns=exposed,
                                 extra_evidence=extra)
    if len(ev):
        span = int((ev["ts"] + ev["dur"]).max() - ev["ts"].min())
    else:
        span = 0
    return Analysis(meta=trace.meta, events=len(ev), span_ns=span, step_source=source,
                    step_pattern=pattern, steps=step_tab, step_stats=stats, devices=devices,
                    gaps=gaps, attribution=summary, top_ops=att["top_ops"], nccl=nccl,
                    collectives=collectives, compile=comp, kernels=kernels,
                    kernel_classes=classes, verdict=verdict, min_gap_ns=int(min_gap_ns),
                    trace=trace,
                    utilization=util_mod.utilization(trace, step_tab, peak_tflops))


def _step_of_gaps(gaps: pd.DataFrame, ops: pd.DataFrame, op_step: np.ndarray) -> np.ndarray:
    """A gap belongs to the step that launched the GPU op ending it (the work it waited for)."""
    out = np.full(len(gaps), -1, np.int64)
    if not len(gaps) or not len(ops):
        return out
    opid = ops["pid"].to_numpy(np.int64)
    odev = ops["device"].to_numpy(np.int64)
    ots = ops["ts"].to_numpy(np.int64)
    for (pid, dev), idx in gaps.groupby(["pid", "device"], sort=False).indices.items():
        sel = np.flatnonzero((opid == pid) & (odev == dev))
        order = sel[np.argsort(ots[sel], kind="stable")]
        k = np.searchsorted(ots[order], gaps["end"].to_numpy(np.int64)[idx], side="left")
        k = np.clip(k, 0, len(order) - 1)
        out[idx] = op_step[order[k]]
    return out


def _step_idle(step_tab: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    n = len(step_tab)
    k = gaps["step_index"].to_numpy(np.int64)
    m = k >= 0
    step_tab = step_tab.copy()
    step_tab["idle_ns"] = _sum_by(k[m], gaps["duration"].to_numpy(np.int64)[m], n)
    step_tab["gaps"] = np.bincount(k[m], minlength=n)[:n].astype(np.int64)
    for c in attr_mod.CPU_CATEGORIES:
        step_tab[f"idle_{c}"] = _sum_by(k[m], gaps[f"cpu_{c}"].to_numpy(np.int64)[m], n)
    return step_tab


def _sum_by(k: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, k, v)
    return out


def _devices(ops: pd.DataFrame, gaps: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """Per (pid, device): active window (first to last GPU op), busy and idle ns."""
    cols = ["pid", "device", "window_start", "window_end", "window_ns", "busy_ns", "idle_ns",
            "gaps", "name"]
    if not len(ops):
        return pd.DataFrame({c: pd.Series([], dtype=object if c == "name" else np.int64)
                             for c in cols})
    g = ops.groupby(["pid", "device"], sort=True)
    d = pd.DataFrame({"window_start": g["ts"].min(), "window_end": g["end"].max()}).reset_index()
    d["window_ns"] = d["window_end"] - d["window_start"]
    if len(gaps):
        idle = gaps.groupby(["pid", "device"])["duration"].agg(["sum", "size"]).reset_index()
        idle.columns = ["pid", "device", "idle_ns", "gaps"]
        d = d.merge(idle, on=["pid", "device"], how="left")
    else:
        d["idle_ns"] = 0
        d["gaps"] = 0
    d["idle_ns"] = d["idle_ns"].fillna(0).astype(np.int64)
    d["gaps"] = d["gaps"].fillna(0).astype(np.int64)
    d["busy_ns"] = d["window_ns"] - d["idle_ns"]
    names = {int(x.get("device", -1)): str(x.get("name", "")) for x in meta.devices
             if isinstance(x, dict)}
    d["name"] = [names.get(int(v), "") for v in d["device"]]
    for c in cols[:-1]:
        d[c] = d[c].astype(np.int64)
    return d[cols]


def _classes(ev: pd.DataFrame) -> pd.DataFrame:
    # Only GPU ops, with only their own names: the classifier runs once per category.
    gpu = ev.loc[ev["kind"].isin(GPU_OP_KINDS).to_numpy(), ["kind", "name", "dur"]]
    if isinstance(gpu["name"].dtype, pd.CategoricalDtype):
        gpu["name"] = gpu["name"].cat.remove_unused_categories()
    return time_by_class(gpu)


def _evidence(stats, summary, top_ops, kernels, comp) -> dict:
    ev: dict[str, Any] = {}
    if summary["by_sync_op"]:
        op, v = max(summary["by_sync_op"].items(), key=lambda kv: kv[1]["ns"])
        ev["top_sync_op"] = op
        ev["top_sync_op_gaps"] = v["gaps"]
    if len(top_ops):
        ev["top_gap_op"] = str(top_ops["name"].iloc[0])
    if len(kernels):
        ev["top_kernel"] = str(kernels["name"].iloc[0])
        ev["top_kernel_pct"] = round(float(kernels["pct"].iloc[0]), 2)
    if stats:
        ev["steps"] = stats["count"]
        ev["step_mean_ns"] = stats["mean_ns"]
        ev["step_cv"] = stats["cv"]
        ev["bursty"] = stats["bursty"]
    if comp:
        ev["recompiles"] = int(comp.get("recompiles", 0) or 0)
    return ev
