"""Planted-truth scenarios for the communication and torch.compile passes.

``ddp_overlap`` -- a DDP rank whose gradient all-reduce is partly hidden
behind backward compute; ``recompile_storm`` -- a torch.compile run that keeps
recompiling two frames while the GPU waits. Both return ``(trace, truth)``;
the truth is derived from the layout parameters, never from the passes.
``nsys_ddp_overlap`` writes the DDP scenario as an Nsight Systems SQLite file
(NCCL kernels plus NVTX NCCL-domain ranges, no message sizes).
"""
from __future__ import annotations

from pathlib import Path

from .scenarios import MS, T0, US, TraceBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3>)")
OPTIMIZER = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
             "(anonymous namespace)::TensorListMetadata<4>>(int)")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GENERIC = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"  # NCCL >= 2.19: no type in the name
# All-reduce kernels that are not NCCL (collectives.COMM_KERNELS): symmetric memory, vLLM custom, TRT-LLM.
MULTIMEM = ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
            "unsigned long, unsigned long, c10d::symmetric_memory::SymmetricMemory*)")
CUSTOM_ALLREDUCE = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)"
TRTLLM_ALLREDUCE = "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)"

COMPUTE_STREAM, COMM_STREAM, COPY_STREAM = 7, 20, 21


def _ddp_layout(steps: int, world: int, generic: bool = False, allreduce: str = ALLREDUCE):
    """The DDP rank's events as plain tuples (shared by the table and nsys writers).

    Per step (offsets from the step start, ms): forward GEMMs 0.5..2.5, backward
    GEMMs 2.5..6.5, optimizer 7.5..8.0 on the compute stream; all-reduce bucket 1
    4.0..5.0 (hidden), bucket 2 6.0..7.5 (0.5 hidden, 1.0 exposed) on the NCCL
    stream; a DtoD bucket copy 6.8..7.0 on a copy stream (not compute: it must
    not hide the exposed all-reduce). Step 0 starts with a fully exposed
    broadcast 0.1..0.3 (parameter sync). With ``generic`` every NCCL kernel is
    ``ncclDevKernel_Generic``: the collective type must come from the launching op.
    ``allreduce`` names the all-reduce kernel (a non-NCCL one: ``CUSTOM_ALLREDUCE``...).
    """
    period = 10 * MS
    compute, comm, copies, steps_out = [], [], [], []
    seq = 0
    for k in range(steps):
        s = T0 + k * period
        steps_out.append((k, s, period - 100 * US))
        if k == 0:
            comm.append(dict(name=GENERIC if generic else BROADCAST, ts=s + 100 * US, dur=200 * US, coll="broadcast",
                             nelems=262_144, nbytes=1_048_576, dtype="Float", seq=seq,
                             api="nccl:broadcast"))
            seq += 1
        for i in range(12):  # 4 forward + 8 backward GEMMs, 0.5 ms each, back to back
            compute.append((GEMM, s + 500 * US + i * 500 * US, 500 * US))
        compute.append((OPTIMIZER, s + 7500 * US, 300 * US))
        compute.append((ELEMENTWISE, s + 7800 * US, 200 * US))
        comm.append(dict(name=GENERIC if generic else allreduce, ts=s + 4 * MS, dur=1 * MS, coll="all_reduce",
                         nelems=6_553_600, nbytes=26_214_400, dtype="Float", seq=seq,
                         api="nccl:all_reduce"))
        comm.append(dict(name=GENERIC if generic else allreduce, ts=s + 6 * MS, dur=1500 * US, coll="all_reduce",
                         nelems=2_621_440, nbytes=10_485_760, dtype="Float", seq=seq + 1,
                         api="nccl:all_reduce"))
        seq += 2
        copies.append((s + 6800 * US, 200 * US, 10_485_760))
    return period, compute, comm, copies, steps_out


def _ddp_truth(steps: int, world: int) -> dict:
    per_step_comm = 1 * MS + 1500 * US
    per_step_overlap = 1 * MS + 500 * US
    comm_ns = steps * per_step_comm + 200 * US
    overlap_ns = steps * per_step_overlap
    ar_bytes = steps * (26_214_400 + 10_485_760)
    ar_time = steps * per_step_comm
    return {
        "pid": 4242, "device": 0,
        "comm_ns": comm_ns,
        "compute_ns": steps * (6 * MS + 500 * US),
        "overlap_ns": overlap_ns,
        "exposed_ns": comm_ns - overlap_ns,
        "overlap_pct": 100.0 * overlap_ns / comm_ns,
        "comm_kernels": 2 * steps + 1,
        "compute_kernels": 14 * steps,
        "collectives": {
            "all_reduce": {"count": 2 * steps, "total_ns": ar_time, "exposed_ns": steps * 1 * MS,
                           "msg_bytes": ar_bytes, "algbw_gbps": ar_bytes / ar_time,
                           "busbw_gbps": ar_bytes / ar_time * 2 * (world - 1) / world,
                           "group_size": world},
            "broadcast": {"count": 1, "total_ns": 200 * US, "exposed_ns": 200 * US,
                          "msg_bytes": 1_048_576, "algbw_gbps": 1_048_576 / (200 * US),
                          "busbw_gbps": 1_048_576 / (200 * US), "group_size": world},
        },
        # per-instance exposure, in time order
        "instance_exposed_ns": [200 * US] + [0, 1 * MS] * steps,
        "steps": steps,
    }


def ddp_overlap(steps: int = 3, world: int = 8, on_kernel: bool = False, generic: bool = False,
                allreduce: str = ALLREDUCE):
    """One DDP rank (pid 4242, GPU 0) with a partly hidden gradient all-reduce.

    Collective facts (type, size, dtype, group, seq) sit on the host
    ``record_param_comms`` op that launches each NCCL kernel, as c10d records
    them; with ``on_kernel`` they are also on the kernel rows (newer Kineto
    copies them into the kernel's args). Returns (trace, truth).
    """
    period, compute, comm, copies, steps_out = _ddp_layout(steps, world, generic, allreduce)
    b = TraceBuilder(path="ddp_overlap.json")
    for k, s, dur in steps_out:
        b.step(k, s, dur)
    for name, ts, dur in compute:
        b.launch(ts - 100 * US, 10 * US, ts, dur, name=name, stream=COMPUTE_STREAM)
    for c in comm:
        api_ts = c["ts"] - 150 * US
        info = dict(collective=c["coll"], msg_nelems=c["nelems"], msg_bytes=c["nbytes"],
                    dtype=c["dtype"], group_size=world, process_group="0", seq=c["seq"])
        b.cpu("record_param_comms", api_ts - 5 * US, 40 * US, **info)
        b.cpu(c["api"], api_ts - 4 * US, 30 * US, kind="annotation")
        b.launch(api_ts, 10 * US, c["ts"], c["dur"], name=c["name"], stream=COMM_STREAM,
                 **(info if on_kernel else {}))
    for ts, dur, nbytes in copies:
        b.launch(ts - 120 * US, 10 * US, ts, dur, name="Memcpy DtoD (Device -> Device)",
                 api="cudaMemcpyAsync", kind="memcpy", stream=COPY_STREAM, bytes=nbytes,
                 copy_kind="DtoD")
    trace = b.build(rank=0, world_size=world, rank_source="distributedInfo")
    return trace, _ddp_truth(steps, world)


def nsys_ddp_overlap(path: str | Path, steps: int = 3, world: int = 8, schema: str = "3.x",
                     generic: bool = False, allreduce: str = ALLREDUCE):
    """The DDP scenario as an nsys SQLite export: NCCL kernels, NVTX ``NCCL`` domain
    ranges around their launches (no payloads, so message sizes are unknown).

    Times are session-relative (the layout shifted so step 0 starts at 1 ms).
    Returns (path, truth); truth's message sizes and bandwidths do not apply.
    """
    from .nsys import NsysWriter

    period, compute, comm, copies, steps_out = _ddp_layout(steps, world, generic, allreduce)
    shift = T0 - 1 * MS
    pid, tid = 4242, 4243
    w = NsysWriter(path, schema)
    w.session_start(T0)
    w.process(pid, "python")
    w.thread(pid, tid, "python")
    w.gpu(0, "NVIDIA H100")
    if schema != "pre2":
        w.nvtx_domain(1, "NCCL", pid, tid)
    corr = 1
    for name, ts, dur in compute:
        t = ts - shift
        w.runtime(t - 100 * US, t - 90 * US, "cudaLaunchKernel_v7000", pid, tid, corr=corr)
        w.kernel(t, t + dur, name, pid, 0, COMPUTE_STREAM, corr=corr)
        corr += 1
    nvtx_name = {"all_reduce": "ncclAllReduce", "broadcast": "ncclBroadcast"}
    for c in comm:
        t = c["ts"] - shift
        api = t - 150 * US
        w.nvtx_range(api - 5 * US, api + 35 * US, nvtx_name[c["coll"]], pid, tid,
                     domain_id=1 if schema != "pre2" else 0)
        w.runtime(api, api + 10 * US, "cudaLaunchKernel_v7000", pid, tid, corr=corr)
        w.kernel(t, t + c["dur"], c["name"], pid, 0, COMM_STREAM, corr=corr)
        corr += 1
    for ts, dur, nbytes in copies:
        t = ts - shift
        w.runtime(t - 120 * US, t - 110 * US, "cudaMemcpyAsync_v3020", pid, tid, corr=corr)
        w.memcpy(t, t + dur, nbytes, 8, pid, 0, COPY_STREAM, corr=corr)
        corr += 1
    w.close()
    truth = _ddp_truth(steps, world)
    truth["pid"] = pid
    return Path(path), truth


# --------------------------------------------------------------------------- torch.compile

# (frame, compile N) -> (step, compile duration): frame 0 recompiles in steps 2, 3, 5;
# frame 1 (the graph-break resume function) in step 3.
STORM = {
    (0, 0): (0, 5 * MS), (1, 0): (0, 3 * MS),
    (0, 1): (2, 4 * MS),
    (0, 2): (3, 4 * MS), (1, 1): (3, 2 * MS),
    (0, 3): (5, 3 * MS),
}
_SPANS = (  # (name, start offset, end offset from the episode end), nested like torch 2.13
    ("dynamo", 0, 0),
    ("entire_frame_compile", 5 * US, 5 * US),
    ("_compile.compile_inner (dynamo_timed)", 6 * US, 6 * US),
    ("compile_attempt_0", 8 * US, 8 * US),
)


def recompile_storm(steps: int = 6, markers: bool = True, compiles: dict | None = None,
                    graph_break: bool = False):
    """A compiled model (two frames) that recompiles while the GPU waits.

    Step k starts at T0 + 20 ms·k. The GPU is busy for the first 1 ms of every
    step (work queued by the previous step); then the host thread runs, per
    frame: a 20 µs ``TorchDynamo Cache Lookup``, the compile episode if
    ``compiles`` schedules one for this (frame, step) (nested phase spans, plus a
    ``dynamo_data: compile_id=F/N`` marker when ``markers``), and a 300 µs
    ``Torch-Compiled Region: F/N`` whose kernel runs 50..250 µs into it.
    Without markers (older torch) the compile id must come from the region.
    With ``graph_break``, frame 1 is frame 0's resume function after a graph break, as
    torch records it: frame 1's cache lookup, compile and region run *inside* frame 0's
    region (which then lasts 100 µs + frame 1's work + 50 µs). Returns (trace, truth).
    """
    compiles = STORM if compiles is None else compiles
    period, busy = 20 * MS, 1 * MS
    b = TraceBuilder(path="recompile_storm.json")
    current = {}  # frame -> compile N in force
    idle_overlap = compile_ns = lookups = 0
    frames: dict[str, dict] = {}
    episodes = []
    break_calls = 0
    for k in range(steps):
        s = T0 + k * period
        b.step(k, s, period - 100 * US)
        # queued by the previous step, on its own stream: the compiled region's kernel runs
        # beside it (one stream runs its kernels one after another)
        b.launch(s - 20 * US, 10 * US, s, busy, name=GEMM, stream=8)
        t = s + 100 * US
        for frame in (0, 1):
            b.cpu("TorchDynamo Cache Lookup", t, 20 * US)
            lookups += 1
            t += 20 * US
            due = [n for (f, n), (st, _) in compiles.items() if f == frame and st == k]
            for n in due:
                dur = compiles[(frame, n)][1]
                for name, a, z in _SPANS:
                    b.cpu(name, t + a, dur - a - z)
                b.cpu("backend_compile", t + dur // 2, dur // 2 - 10 * US)
                b.cpu("inductor_compile", t + dur // 2 + 1 * US, dur // 2 - 12 * US)
                if markers:
                    b.cpu(f"dynamo_data: compile_id={frame}/{n}", t + 1 * US, 1 * US,
                          kind="annotation")
                # The GPU is busy during [s, s + busy): the rest of the episode starves it.
                hidden = max(0, min(t + dur, s + busy) - max(t, s))
                idle_overlap += dur - hidden
                compile_ns += dur
                episodes.append((f"{frame}/{n}", k, t, dur))
                fr = frames.setdefault(str(frame), {"frame": str(frame), "compiles": 0,
                                                    "recompiles": 0, "compile_ns": 0, "steps": []})
                fr["compiles"] += 1
                fr["recompiles"] += int(n >= 1)
                fr["compile_ns"] += dur
                if k not in fr["steps"]:
                    fr["steps"].append(k)
                current[frame] = n
                t += dur
            if frame in current and graph_break and frame == 0:
                outer = (t, f"Torch-Compiled Region: 0/{current[0]}")   # closed after frame 1
                # its kernel ends before frame 1 starts: frame 1's compile starves the GPU
                b.launch(t + 20 * US, 10 * US, t + 50 * US, 40 * US, name=ELEMENTWISE)
                t += 100 * US
            elif frame in current:
                b.cpu(f"Torch-Compiled Region: {frame}/{current[frame]}", t, 300 * US)
                b.launch(t + 20 * US, 10 * US, t + 50 * US, 200 * US, name=ELEMENTWISE)
                t += 300 * US
                break_calls += int(graph_break and frame == 1 and 0 in current)
        if graph_break and 0 in current:
            b.cpu(outer[1], outer[0], t + 50 * US - outer[0])
            t += 50 * US
        assert t < s + period - 100 * US, "step overflows its period"
    trace = b.build()
    truth = {
        "compiles": len(episodes),
        "recompiles": sum(1 for (f, n) in compiles if n >= 1 and compiles[(f, n)][0] < steps),
        "compile_ns": compile_ns,
        "cache_lookup_ns": lookups * 20 * US,
        "cache_lookups": lookups,
        "idle_overlap_ns": idle_overlap,
        "frames": [frames[f] for f in sorted(frames)],
        "episodes": episodes,  # (compile_id, step, ts, dur) in time order
        "graph_breaks": int(break_calls > 0),
        "graph_break_calls": break_calls,
    }
    return trace, truth


def nsys_recompile_storm(path: str | Path, **kw):
    """``recompile_storm`` as an nsys export: host ranges become NVTX ranges (what
    ``torch.autograd.profiler.emit_nvtx`` records), kernels and launches CUPTI rows.
    Returns (path, truth)."""
    from .nsys import NsysWriter

    trace, truth = recompile_storm(**kw)
    shift = T0 - 1 * MS
    pid, tid = 4242, 4243
    w = NsysWriter(path)
    w.session_start(T0)
    w.process(pid, "python")
    w.thread(pid, tid, "python")
    w.gpu(0, "NVIDIA H100")
    for r in trace.events.itertuples(index=False):
        a, z = int(r.ts) - shift, int(r.ts + r.dur) - shift
        if r.kind == "kernel":
            w.kernel(a, z, str(r.name), pid, 0, 7, corr=int(r.correlation))
        elif r.kind == "runtime":
            w.runtime(a, z, "cudaLaunchKernel_v7000", pid, tid, corr=int(r.correlation))
        elif r.kind in ("cpu_op", "annotation"):
            w.nvtx_range(a, z, str(r.name), pid, tid)
    return w.close(), truth


__all__ = ["ddp_overlap", "nsys_ddp_overlap", "recompile_storm", "nsys_recompile_storm", "STORM"]
