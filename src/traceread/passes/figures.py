"""The figures of the facts record (passes/facts.py) that the lever table reads besides the
program facts: from the passes' results (busy classes, top kernel, compile counts, step
spans, the slowest collective, allocator churn, host dispatch, one-time start-up calls) and
from the parallelism layout.

Each figure names the pass result it comes from; the predicates that read them are in
verdict/levers.py, their rules in docs/analysis.md ("What each lever would save").
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals
from .attribution import ALLOC_API_RX, SHORT_GAP_NS
from .causes import HOST_PARTS

SLOW_BUSBW_GBPS = 10.0       # below any GPU interconnect (NVLink, xGMI, PCIe, IB) for ...
SLOW_BUSBW_MIN_BYTES = 1 << 20   # ... messages this large


def slow_collective(collectives) -> dict | None:
    """The GPU collective with the most exposed time when its bus bandwidth is far below any
    GPU interconnect (< SLOW_BUSBW_GBPS on messages >= 1 MiB, a group of several ranks): its
    time is mostly waiting for other ranks to arrive (or a slow transport), not moving data
    (TraceLens mi300/resnet_act_checkpoint: all_reduce of 11.7 MB at 2.6 GB/s over 8 MI300X)."""
    if collectives is None or not len(collectives) or "busbw_gbps" not in collectives:
        return None
    c = collectives.sort_values("exposed_ns", ascending=False).iloc[0]
    bw, size, group = c.get("busbw_gbps"), c.get("avg_msg_bytes"), c.get("group_size")
    if bw is None or size is None or pd.isna(bw) or pd.isna(size) or not group or group < 2:
        return None
    if bw >= SLOW_BUSBW_GBPS or size < SLOW_BUSBW_MIN_BYTES:
        return None
    return {"collective": str(c["collective"]), "busbw_gbps": round(float(bw), 2),
            "avg_msg_bytes": int(size), "group_size": int(group)}


def alloc_frees(top_ops) -> int:
    """Device-memory release calls (cudaFree, hipFree, cuMemFree...) inside the gaps: churn
    (an empty_cache() or an uncached allocator) rather than a caching allocator still growing."""
    if top_ops is None or not len(top_ops):
        return 0
    al = top_ops[top_ops["category"] == "alloc"]
    free = al["name"].astype(str).str.contains(r"Free|Release|Unmap", regex=True)
    return int(al.loc[free, "count"].sum())


def window_figures(step_tab, gaps, top_ops, utilization: dict | None, kernels, comp: dict,
                   culprits: dict, device: str, devices: int) -> dict:
    """What the lever table reads besides ``trace_context`` and the layout: the busy classes
    (passes/busy.py), the top kernel, the compile figures, the GPU's step span and busy time
    per step (the projected step starts from the GPU's step when it is the longer)."""
    busy = (utilization or {}).get("busy") or {}
    classes = {c.get("class"): int(c.get("ns", 0)) for c in busy.get("classes") or []}
    total = sum(classes.values())
    out = {"busy_classes": classes, "device_name": device,
           "attention_ns": classes.get("attention", 0),
           "triton_share": classes.get("triton", 0) / total if total else 0.0,
           "host_dispatch": host_dispatch(gaps, top_ops, culprits.get("host", "")),
           "alloc_gap_ns": int(gaps["cpu_alloc"].sum()) if "cpu_alloc" in gaps else 0,
           "alloc_frees": alloc_frees(top_ops)}
    if kernels is not None and len(kernels) and "name" in kernels:
        names = kernels["name"].astype(str)
        out["softmax_kernels"] = bool(names.str.contains("softmax", case=False).any())
        if "pct" in kernels:
            out["top_kernel"] = {"name": names.iloc[0], "pct": float(kernels["pct"].iloc[0]),
                                 "names": names.head(50).tolist()}
    if comp and "recompiles" in comp:
        out["recompiles"] = int(comp.get("recompiles") or 0)
    if step_tab is not None and len(step_tab) and "gpu_start" in step_tab:
        has = step_tab["gpu_start"].to_numpy(np.int64) >= 0
        if has.any():
            # the GPU's work per step as the program step reads it (steps.program_columns)
            span = (step_tab["gpu_ns"] if "gpu_ns" in step_tab else
                    step_tab["gpu_end"] - step_tab["gpu_start"]).to_numpy(np.int64)[has]
            out["gpu_step_mean_ns"] = int(span.mean())
            out["busy_step_mean_ns"] = int(busy_per_step(step_tab, devices)[has].mean())
            ahead = host_ahead_span(step_tab)
            if ahead is not None:
                out["host_ahead_span_mean_ns"] = ahead
    return out


def host_ahead_span(step_tab: pd.DataFrame) -> int | None:
    """The host's span per step (mean) where every step's GPU work began only after its
    host span had ended: the host ran a whole step ahead of the GPU, so it never waited
    for that work inside its span -- the span is the host's own time, which a lever that
    only shortens GPU work (a collective's exposed time) leaves as it is
    (TraceLens mi300 resnet_act_checkpoint: 16.2 ms of host a step, its GPU work starting
    13-19 ms after each span's end). None where some step's work started inside its span."""
    need = ("gpu_start", "end", "dur")
    if any(c not in step_tab for c in need):
        return None
    gs = step_tab["gpu_start"].to_numpy(np.int64)
    has = gs >= 0
    if not has.any() or not (gs[has] >= step_tab["end"].to_numpy(np.int64)[has]).all():
        return None
    return int(step_tab["dur"].to_numpy(np.int64)[has].mean())


def busy_per_step(step_tab: pd.DataFrame, devices: int) -> np.ndarray:
    """Per step, the GPU's busy time per device: its own ops' union (``busy_ns``, summed over
    the devices), at most its program step -- where a step's work overlaps the next one's
    (a collective on its own stream beside the next step's compute), each step's own union
    counts that time twice and a device cannot be busy longer than the step it paces (HTA's
    trace_diff test: 126.4 ms of busy time a step for a 124.0 ms step)."""
    busy = step_tab["busy_ns"].to_numpy(np.int64) / max(1, devices)
    if "program_ns" in step_tab:
        busy = np.minimum(busy, step_tab["program_ns"].to_numpy(np.int64))
    return busy


def backlog(step_tab, gaps: pd.DataFrame, devices: pd.DataFrame) -> dict:
    """The GPU work the window holds besides its steps': the GPU's busy time between the
    window's start and the first program step's start (``backlog_ns``, mean per device) --
    work launched before the window that the GPU was still draining while the host ran
    ahead. A program step starts where it is paced from (steps.program_columns): a GPU-bound
    step at its own GPU work, so a lagging GPU's earlier work lies before it; a host-bound
    step at its host span, which the backlog then overlaps and does not lengthen.
    ``window_steps``: the steps' worth of GPU work the window holds, the analysed steps plus
    that backlog in busy steps -- what a window total is divided by to be one step's
    (verdict/units.py). Empty without steps or a GPU."""
    need = ("gpu_start", "gpu_end", "gpu_ns", "bound_by", "busy_ns")
    if step_tab is None or not len(step_tab) or any(c not in step_tab for c in need) \
            or devices is None or not len(devices) or "window_start" not in devices:
        return {}
    has = step_tab["gpu_start"].to_numpy(np.int64) >= 0
    busy_step = step_tab["busy_ns"].to_numpy(np.int64)[has]
    if not len(busy_step) or busy_step.mean() <= 0:
        return {}
    gpu_paced = step_tab["bound_by"].to_numpy(object) == "gpu"
    if "gpu_by_own_work" in step_tab:
        # a step the GPU paces only with the work queued before the recording (steps.
        # busy_seen) waited on it inside its host span, which its program step is: that
        # backlog lies inside the step (TraceLens' h100 Qwen: one 47.2 ms step, 14.1 ms of it
        # a sync on an earlier forward's tail); a step its own work paces starts at that work
        gpu_paced &= step_tab["gpu_by_own_work"].to_numpy(bool)
    starts = np.where(has & gpu_paced, step_tab["gpu_end"].to_numpy(np.int64)
                      - step_tab["gpu_ns"].to_numpy(np.int64), step_tab["start"].to_numpy(np.int64))
    first = int(starts.min())
    busy = 0
    for dev, start in zip(devices["device"].to_numpy(), devices["window_start"].to_numpy(np.int64)):
        lead = first - int(start)
        if lead <= 0:
            continue
        idle = 0
        if len(gaps):   # as steps.idle_in_span: the device's gaps as one set, clipped
            g = gaps[gaps["device"].to_numpy() == dev]
            idle = int(intervals.overlap(intervals.union(g["start"].to_numpy(np.int64),
                                                         g["end"].to_numpy(np.int64)),
                                         [int(start)], [first])[0])
        busy += max(0, lead - idle)
    ndev = max(1, len(devices))
    per_dev = busy / ndev
    # busy_ns per step sums the devices (window_figures' busy_step_mean_ns divides them)
    return {"backlog_ns": int(round(per_dev)),
            "window_steps": round(len(step_tab) + per_dev / (busy_step.mean() / ndev), 4)}


HOST_DISPATCH_SHARE = 0.5
DISPATCH_OP_NS = 50_000     # per-op dispatch: many aten ops averaging under 50 us each
DISPATCH_MIN_OPS = 20


def host_dispatch(gaps: pd.DataFrame, top_ops: pd.DataFrame, host_culprit: str) -> bool:
    """The host-bound time is PyTorch's own per-op dispatch: in the long gaps (the host
    cause's), time inside operators is >= HOST_DISPATCH_SHARE of the host time (operators,
    Python, allocator, untraced), the innermost op over most of it is an ``aten::`` op, and
    the aten ops inside gaps are many (>= DISPATCH_MIN_OPS) and short (<= DISPATCH_OP_NS on
    average) -- one slow first call (a lazy-init ``aten::empty``) is not dispatch overhead."""
    if not host_culprit.startswith("aten::") or not len(gaps) or not len(top_ops):
        return False
    long_ = gaps["duration"].to_numpy(np.int64) > SHORT_GAP_NS
    by = {c: int(gaps[f"cpu_{c}"].to_numpy(np.int64)[long_].sum()) if f"cpu_{c}" in gaps else 0
          for c in HOST_PARTS + ("untraced",)}
    total = sum(by.values())
    aten = top_ops[(top_ops["category"] == "cpu_op")
                   & top_ops["name"].astype(str).str.startswith("aten::")]
    n = int(aten["count"].sum())
    return bool(total) and by["cpu_op"] >= HOST_DISPATCH_SHARE * total \
        and n >= DISPATCH_MIN_OPS and int(aten["ns"].sum()) <= DISPATCH_OP_NS * n


def startup(cold: dict) -> dict:
    """One-time start-up calls of a window without steps (window.one_time_calls), and whether
    the largest is an allocator call (then churn advice would be about start-up)."""
    top = cold["calls"][0][0] if cold.get("calls") else ""
    return {"ns": int(cold.get("ns") or 0), "calls": list(cold.get("calls") or []),
            "alloc": bool(ALLOC_API_RX.match(top))}


def layout_figures(layout: dict) -> dict:
    """The figures the lever table reads (verdict/levers.py), from one rank's layout or a job's
    (``job_parallelism``: the slowest stage and the receive imbalance are known only there)."""
    fsdp = layout.get("fsdp") or {}
    ag = fsdp.get("all_gather") or {}
    out = {"fsdp_all_gather_exposed_pct": ag.get("exposed_pct"),
           "fsdp_all_gather_exposed_ns": ag.get("exposed_ns"),
           "fsdp_free_compute_ns": fsdp.get("free_compute_ns")}
    tp = layout.get("tp") or {}
    if tp:
        worst = max(tp["layers"], key=lambda x: x["exposed_ns"])
        out.update(tp_exposed_pct=tp["step_share_pct"], tp_exposed_ns=tp["exposed_ns"],
                   tp_compute_ns=tp["compute_ns"], tp_worst_layer=worst["layer"],
                   tp_worst_layer_pct=worst["comm_pct"])
    pl = layout.get("pipeline") or {}
    if pl:
        bubbles = [b for b in pl["bubble_pct_by_stage"].values() if b is not None]
        # the schedule's share is the least bubble: the slowest stage idles only for the
        # fill and drain, the others wait on it too
        out.update(pp_stages=pl.get("stages"), pp_microbatches=pl.get("microbatches"),
                   pp_schedule=pl.get("schedule"), pp_virtual=pl.get("virtual_stages", 1),
                   pp_bubble_pct=min(bubbles) if bubbles else None,
                   pp_step_ns=pl.get("step_ns"), pp_slowest_stage=pl.get("slowest_stage"),
                   pp_slowest_x=pl.get("slowest_x_others", pl.get("slowest_busy_x_fastest")),
                   pp_excess_busy_ns=pl.get("excess_busy_ns"),
                   pp_others_compute_ns=pl.get("others_compute_ns"))
    if layout.get("cpu_design") is not None:   # a window with no GPU op (parallelism)
        out["cpu_design"] = layout["cpu_design"]
    if layout.get("host_comm"):   # a CPU job's exposed comm: the step thread's waits
        out["cpu_comm"] = layout["host_comm"]
    ep = layout.get("ep") or {}
    if ep:
        job = "recv_imbalance" in ep
        out.update(ep_hot_rank=ep.get("hot_rank"),
                   ep_imbalance=ep.get("recv_imbalance") if job else ep.get("send_imbalance"),
                   ep_imbalance_of="received" if job else "sent by this rank",
                   ep_a2a_ns=ep.get("a2a_ns"))
    return out
