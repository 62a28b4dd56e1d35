"""The verdict: which bound is the GPU under, and which levers to pull (cheapest first).

Time the GPU loses = idle time inside its active windows + exposed
communication (comm kernels running with no compute beside them). Each bound
gets a score in ns, from the gap attribution (drain x cpu cross-table):

* ``data``    -- idle time the launch threads spent in the DataLoader;
* ``compile`` -- idle time inside dynamo/inductor compilation;
* ``comms``   -- idle time blocked in collectives + exposed communication;
* ``sync``    -- the rest of every gap drained by a blocking sync (the host
  waited, then had to refill an empty queue): its sync, launch, operator,
  python and untraced time;
* ``launch``  -- the host-overhead time (launch calls, operators, python, syncs)
  of the gaps where the host simply had not launched the next op yet.

Rules (thresholds below, documented in docs/analysis.md):
1. no GPU operations at all -> ``cpu_only``;
2. lost time < ``GPU_BOUND_LOST`` of the active window -> ``gpu``;
3. untraced starved time >= ``UNKNOWN_SHARE`` of the lost time and no score
   reaches ``LEAD_SHARE`` of it -> ``unknown`` (the host was not traced: nothing
   to blame);
4. the best score >= ``DOMINANT_SHARE`` of the lost time, or >= ``LEAD_SHARE``
   of it and ``LEAD_RATIO`` x the runner-up -> that bound;
5. otherwise ``mixed`` (levers of the two largest scores).
"""
from __future__ import annotations

GPU_BOUND_LOST = 0.10
DOMINANT_SHARE = 0.50
LEAD_SHARE = 0.30
LEAD_RATIO = 1.5
UNKNOWN_SHARE = 0.50

BOUNDS = ("data", "sync", "launch", "comms", "compile")
HOST_OVERHEAD = ("sync", "alloc", "launch", "cpu_op", "python")

LEVERS = {
    "data": [
        "DataLoader(num_workers=N): load batches in worker processes, off the training thread",
        "DataLoader(pin_memory=True) and .to(device, non_blocking=True) for the batch copy",
        "persistent_workers=True: do not restart workers every epoch",
        "raise prefetch_factor so batches are ready before the step needs them",
        "faster storage / decoding: local SSD, pre-decoded or packed datasets, GPU decoding (DALI)",
    ],
    "sync": [
        "remove per-step host syncs: .item(), .cpu(), .tolist(), print(tensor), "
        "torch.cuda.synchronize() -- log every N steps, or accumulate metrics on the GPU",
        "avoid data-dependent shapes that force a sync (torch.nonzero, boolean masks, "
        "tensor-valued Python conditions)",
        "copy results with .to('cpu', non_blocking=True) into pinned memory and read them "
        "one step later",
    ],
    "launch": [
        "capture the step with CUDA graphs: torch.compile(mode=\"reduce-overhead\") "
        "or torch.cuda.graphs",
        "torch.compile to fuse small elementwise kernels (fewer launches)",
        "larger micro-batch: more work per kernel for the same launch cost",
        "fused optimizers (foreach=True / fused=True) and fused layers",
    ],
    "comms": [
        "overlap communication with compute: DDP bucket_cap_mb, gradient_as_bucket_view=True",
        "FSDP: forward/backward prefetch, limit_all_gathers, larger wrap units",
        "gradient accumulation with no_sync(): communicate once every N micro-batches",
        "check the interconnect: NCCL_DEBUG=INFO, topology, NVLink/IB placement",
    ],
    "compile": [
        "torch._dynamo.mark_dynamic / dynamic=True for the dimensions that vary",
        "pad inputs to a few fixed shapes (bucketing) to stop recompiles",
        "TORCH_LOGS=recompiles to see which guard fails; raise "
        "torch._dynamo.config.cache_size_limit only if recompiles are legitimate",
        "warm up (compile) before profiling; enable the inductor FX graph cache",
    ],
    "gpu": [
        "bf16/fp16 autocast (torch.autocast) for matmul- and conv-heavy models",
        "enable TF32: torch.backends.cuda.matmul.allow_tf32 = True "
        "(torch.set_float32_matmul_precision('high'))",
        "fused attention: F.scaled_dot_product_attention (flash / memory-efficient kernels)",
        "torch.compile for kernel fusion; channels_last for convolutions",
    ],
    "cpu_only": [
        "this trace has no GPU activity: profile with ProfilerActivity.CUDA "
        "(torch.profiler) or nsys --trace=cuda to see the GPU side",
    ],
    "unknown": [
        "host activity was not traced while the GPU idled: record CPU activities "
        "(ProfilerActivity.CPU, with_stack=True) or nsys --trace=cuda,nvtx,osrt",
    ],
}


def scores(attr: dict, exposed_comm_ns: int = 0) -> dict:
    """ns of lost time explained by each bound, from ``attribution.summarize`` output."""
    x = attr["drain_x_cpu"]
    by_cpu = attr["by_cpu"]
    return {
        "data": by_cpu["dataloader"],
        "sync": sum(x["sync"][c] for c in HOST_OVERHEAD + ("untraced",)),
        "launch": sum(x["starved"][c] for c in HOST_OVERHEAD),
        "comms": by_cpu["comm_wait"] + int(exposed_comm_ns),
        "compile": by_cpu["compile"],
    }


def decide(*, has_gpu: bool, window_ns: int, idle_ns: int, attr: dict | None,
           exposed_comm_ns: int = 0, extra_evidence: dict | None = None) -> dict:
    """{"bound", "summary", "evidence", "levers"} from the analysis figures."""
    ev = dict(extra_evidence or {})
    if not has_gpu:
        return _out("cpu_only", "no GPU operations in this trace", ev)
    lost = int(idle_ns) + int(exposed_comm_ns)
    ev.update({
        "window_ns": int(window_ns), "idle_ns": int(idle_ns),
        "busy_ns": int(window_ns) - int(idle_ns),
        "idle_pct": _pct(idle_ns, window_ns),
        "exposed_comm_ns": int(exposed_comm_ns),
        "exposed_comm_pct": _pct(exposed_comm_ns, window_ns),
        "lost_ns": lost, "lost_pct": _pct(lost, window_ns),
    })
    sc = scores(attr, exposed_comm_ns) if attr else {b: 0 for b in BOUNDS}
    unexplained = attr["drain_x_cpu"]["starved"]["untraced"] if attr else 0
    ev["scores_ns"] = sc
    ev["share_pct"] = {k: _pct(v, lost) for k, v in sc.items()}
    ev["unexplained_ns"] = int(unexplained)
    ev["unexplained_pct"] = _pct(unexplained, lost)
    if lost < GPU_BOUND_LOST * window_ns or lost == 0:
        return _out("gpu", f"GPU busy {100 - ev['lost_pct']:.1f}% of its active time", ev)
    ranked = sorted(sc.items(), key=lambda kv: (-kv[1], BOUNDS.index(kv[0])))
    (top, top_ns), (second, second_ns) = ranked[0], ranked[1]
    ev["dominant"] = top
    ev["dominant_pct"] = _pct(top_ns, lost)
    if unexplained >= UNKNOWN_SHARE * lost and top_ns < LEAD_SHARE * lost:
        return _out("unknown", f"GPU idle {ev['idle_pct']:.1f}% while the host was not traced", ev)
    if top_ns >= DOMINANT_SHARE * lost or (top_ns >= LEAD_SHARE * lost
                                           and top_ns >= LEAD_RATIO * second_ns):
        levers = _host_levers(top, attr, ev)
        return _out(top, _summary(top, ev), ev, levers=levers)
    ev["runner_up"] = second
    return _out("mixed", f"no single cause: {top} {ev['share_pct'][top]:.0f}%, "
                f"{second} {ev['share_pct'][second]:.0f}% of lost GPU time", ev,
                levers=LEVERS[top][:2] + LEVERS[second][:2])


ALLOC_LEVERS = [
    "stop device-memory churn: remove torch.cuda.empty_cache() from the loop; "
    "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF=expandable_segments:True",
    "keep shapes stable (pad or bucket) so the caching allocator can reuse blocks",
]


# Host-overhead time dominated by one kind of call: its levers lead, its name is in the summary.
HOST_DETAIL = {"alloc": "mostly device-memory malloc/free calls",
               "sync": "mostly blocked in synchronous host calls (sync, blocking memcpy)"}


def _host_levers(bound: str, attr: dict | None, ev: dict) -> list | None:
    """Levers for the biggest host category first, when it is allocation or a blocking call."""
    if bound not in ("launch", "sync") or not attr:
        return None
    drain = "starved" if bound == "launch" else "sync"
    parts = {c: attr["drain_x_cpu"][drain][c] for c in HOST_OVERHEAD}
    top = max(parts, key=lambda c: (parts[c], -HOST_OVERHEAD.index(c)))
    ev["host_top_category"] = top
    if top == "alloc":
        return ALLOC_LEVERS + LEVERS[bound]
    if top == "sync" and bound == "launch":
        return LEVERS["sync"] + LEVERS["launch"]
    return None


def _summary(bound: str, ev: dict) -> str:
    share = ev["share_pct"][bound]
    what = {
        "data": "waiting for the DataLoader",
        "sync": "refilling the queue after blocking host syncs",
        "launch": "waiting for the host to launch work (host overhead)",
        "comms": "in exposed or blocking communication",
        "compile": "while the host compiled (dynamo/inductor)",
    }[bound]
    detail = HOST_DETAIL.get(ev.get("host_top_category"))
    if detail and not (bound == "sync" and ev["host_top_category"] == "sync"):
        what += f", {detail}"
    return (f"GPU idle {ev['idle_pct']:.1f}% of its active time; {share:.0f}% of the lost "
            f"time is {what}")


def _out(bound: str, summary: str, ev: dict, levers=None) -> dict:
    return {"bound": bound, "summary": summary, "evidence": ev,
            "levers": list(levers if levers is not None else LEVERS[bound])}


def _pct(a, b) -> float:
    return round(100.0 * float(a) / float(b), 2) if b else 0.0
