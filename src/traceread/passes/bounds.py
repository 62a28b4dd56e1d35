"""Every bound the verdict can name, in one place: its title, what it means, its levers.

A lever is (text, cost): ``free`` (a setting or argument), ``code`` (a code
change), ``infra`` (hardware, storage, cluster). Levers are ranked by the time
they would save, then by cost (free first).
"""
from __future__ import annotations

# The causes that explain lost GPU time, in tie-break order.
CAUSES = ("data", "copy", "sync", "launch", "host", "comms", "compile", "graph_capture",
          "queued")
# Every verdict: a cause above, or one of these.
VERDICTS = CAUSES + ("gpu", "mixed", "unknown", "cpu_only")
COST_ORDER = {"free": 0, "code": 1, "infra": 2}

TITLE = {
    "data": "input-bound: the GPU waits for the DataLoader",
    "copy": "copy-bound: host<->device copies take the GPU's time",
    "sync": "sync-bound: blocking host syncs drain the GPU queue",
    "launch": "launch-bound: kernels are too small for the cost of launching them",
    "host": "host-bound: the launching thread is busy with other work",
    "comms": "communication-bound: collectives are exposed or the host waits on them",
    "compile": "compile-bound: the host compiles (dynamo/inductor) while the GPU idles",
    "graph_capture": "graph-capture-bound: the host records CUDA graphs while the GPU idles",
    "queued": "queued: the next kernel was already launched; the GPU waited on a dependency "
              "or its own front-end",
    "gpu": "GPU-bound: the GPU is densely busy; make the kernels cheaper",
    "mixed": "mixed: no single cause dominates the lost GPU time",
    "unknown": "unknown: the GPU idles while the host is not traced",
    "cpu_only": "CPU-only trace: no GPU activity recorded",
}

WHAT = {
    "data": "waiting for the DataLoader",
    "copy": "in host<->device copies with no compute beside them",
    "sync": "refilling the queue after blocking host syncs",
    "launch": "launch overhead between short kernels",
    "host": "the launching thread busy with non-launch work",
    "comms": "in exposed or blocking communication",
    "compile": "while the host compiled (dynamo/inductor)",
    "graph_capture": "while the host recorded CUDA graphs",
    "queued": "with the next operation already queued (not the host's doing)",
}

LEVERS: dict[str, list[tuple[str, str]]] = {
    "data": [
        ("DataLoader(num_workers=N): load batches in worker processes, off the training thread",
         "free"),
        ("DataLoader(pin_memory=True) and .to(device, non_blocking=True) for the batch copy",
         "free"),
        ("persistent_workers=True: do not restart workers every epoch", "free"),
        ("raise prefetch_factor so batches are ready before the step needs them", "free"),
        ("faster storage / decoding: local SSD, pre-decoded or packed datasets, GPU decoding "
         "(DALI)", "infra"),
    ],
    "data_workers": [
        ("the DataLoader already uses worker processes and they cannot keep up: raise "
         "num_workers (and prefetch_factor), or make each sample cheaper to load", "free"),
        ("DataLoader(pin_memory=True) and .to(device, non_blocking=True) for the batch copy",
         "free"),
        ("faster storage / decoding: local SSD, pre-decoded or packed datasets, GPU decoding "
         "(DALI)", "infra"),
    ],
    "copy": [
        ("pin the host tensor (tensor.pin_memory() once, or DataLoader(pin_memory=True)) and "
         "copy with .to(device, non_blocking=True)", "free"),
        ("keep the data on the GPU: do not re-send the same tensor every step", "code"),
        ("prefetch the next batch on a side stream so the copy overlaps compute", "code"),
    ],
    "sync": [
        ("remove per-step host syncs: .item(), .cpu(), .tolist(), print(tensor), "
         "torch.cuda.synchronize() -- log every N steps, or accumulate metrics on the GPU",
         "code"),
        ("avoid data-dependent shapes that force a sync (torch.nonzero, boolean masks, "
         "tensor-valued Python conditions)", "code"),
        ("copy results with .to('cpu', non_blocking=True) into pinned memory and read them "
         "one step later", "code"),
    ],
    "launch": [
        ("capture the step with CUDA graphs: torch.compile(mode=\"reduce-overhead\") "
         "or torch.cuda.graphs", "code"),
        ("torch.compile to fuse small elementwise kernels (fewer launches)", "code"),
        ("larger micro-batch: more work per kernel for the same launch cost", "code"),
        ("fused optimizers (foreach=True / fused=True) and fused layers", "free"),
    ],
    "launch_graphs": [
        ("the step already replays CUDA graphs: bring the parts still launched eagerly into "
         "the graph (graph breaks, optimizer, loss/metrics code)", "code"),
        ("torch.compile to fuse the remaining small elementwise kernels", "code"),
    ],
    "host": [
        ("move the host work off the step path: precompute, cache, or do it in DataLoader "
         "workers / a background thread", "code"),
        ("find the Python that runs between launches: py-spy record --native, or "
         "torch.profiler(with_stack=True)", "free"),
        ("capture the step with CUDA graphs so the GPU runs ahead of the host: "
         "torch.compile(mode=\"reduce-overhead\")", "code"),
    ],
    "comms": [
        ("overlap communication with compute: DDP bucket_cap_mb, gradient_as_bucket_view=True",
         "free"),
        ("FSDP: forward/backward prefetch, limit_all_gathers, larger wrap units", "free"),
        ("gradient accumulation with no_sync(): communicate once every N micro-batches", "code"),
        ("check the interconnect: NCCL_DEBUG=INFO, topology, NVLink/IB placement", "infra"),
    ],
    "compile": [
        ("torch._dynamo.mark_dynamic / dynamic=True for the dimensions that vary", "code"),
        ("pad inputs to a few fixed shapes (bucketing) to stop recompiles", "code"),
        ("TORCH_LOGS=recompiles to see which guard fails; raise "
         "torch._dynamo.config.cache_size_limit only if recompiles are legitimate", "free"),
        ("warm up (compile) before profiling; enable the inductor FX graph cache", "free"),
    ],
    "graph_capture": [
        ("keep input shapes fixed (pad or bucket) so recorded CUDA graphs are replayed, not "
         "re-recorded", "code"),
        ("record the graphs during warm-up, before the measured steps", "free"),
    ],
    # one lever per kind of evidence in ``waited_on`` (see queued_levers)
    "queued": [
        ("the queued kernels wait on events (cudaStreamWaitEvent): record the event earlier, "
         "or run the waited-on stream's work (copies, collectives) earlier", "code"),
        ("GPU-side gaps between back-to-back kernels: fewer, larger kernels (torch.compile "
         "fusion) or CUDA graphs cut the per-kernel front-end latency", "code"),
        ("the GPU idles with work queued and nothing traced explains it: look for another "
         "process or context sharing the GPU, or GPU work the profiler did not record (CUDA "
         "graph nodes: nsys --cuda-graph-trace=node)", "free"),
    ],
    "alloc_uncached": [
        ("turn PyTorch's caching allocator back on: unset PYTORCH_NO_CUDA_MEMORY_CACHING / "
         "PYTORCH_NO_HIP_MEMORY_CACHING (tensors' frees call the driver inside the ops)",
         "free"),
        ("keep shapes stable (pad or bucket) so the caching allocator can reuse blocks", "code"),
    ],
    "alloc": [
        ("stop device-memory churn: remove torch.cuda.empty_cache() from the loop; "
         "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF=expandable_segments:True", "free"),
        ("keep shapes stable (pad or bucket) so the caching allocator can reuse blocks", "code"),
    ],
    "gpu": [
        ("bf16/fp16 autocast (torch.autocast) for matmul- and conv-heavy models", "code"),
        ("enable TF32: torch.backends.cuda.matmul.allow_tf32 = True "
         "(torch.set_float32_matmul_precision('high'))", "free"),
        ("fused attention: F.scaled_dot_product_attention (flash / memory-efficient kernels)",
         "code"),
        ("torch.compile for kernel fusion; channels_last for convolutions", "code"),
    ],
    "cpu_only": [
        ("this trace has no GPU activity: profile with ProfilerActivity.CUDA "
         "(torch.profiler) or nsys --trace=cuda to see the GPU side", "free"),
    ],
    "unknown": [
        ("host activity was not traced while the GPU idled: record CPU activities "
         "(ProfilerActivity.CPU, with_stack=True) or nsys --trace=cuda,nvtx,osrt", "free"),
    ],
}


# The same causes in a program that is not PyTorch (CUDA/HIP C++, other frameworks): the
# PyTorch levers would name calls it never makes. Causes missing here keep LEVERS' words.
NATIVE_LEVERS: dict[str, list[tuple[str, str]]] = {
    "copy": [
        ("pinned host memory (cudaHostAlloc / cudaHostRegister) for the host<->device copies",
         "free"),
        ("keep the data on the GPU between iterations", "code"),
        ("cudaMemcpyAsync on a second stream so the copy overlaps compute", "code"),
    ],
    "sync": [
        ("remove blocking syncs from the loop (cudaDeviceSynchronize, cudaStreamSynchronize, "
         "synchronous cudaMemcpy): wait on an event only where the result is needed", "code"),
        ("cudaMemcpyAsync into pinned memory and read the result one iteration later", "code"),
    ],
    "launch": [
        ("CUDA graphs: capture the loop body once (cudaStreamBeginCapture, cudaGraphLaunch)",
         "code"),
        ("fuse small kernels: more work per launch", "code"),
    ],
    "launch_graphs": [
        ("the program already launches CUDA graphs: bring the kernels still launched one by "
         "one into them", "code"),
        ("fuse small kernels: more work per launch", "code"),
    ],
    "host": [
        ("profile the host code between launches: nsys profile --sample=cpu, or perf", "free"),
        ("move host work off the launching thread, or overlap it with queued GPU work", "code"),
        ("CUDA graphs so the GPU runs ahead of the host", "code"),
    ],
    "comms": [
        ("overlap communication with compute: collectives on their own stream, issued early",
         "code"),
        ("check the interconnect: NCCL_DEBUG=INFO, topology, NVLink/IB placement", "infra"),
    ],
    "alloc": [
        ("allocate once outside the loop and reuse the buffers, or a stream-ordered pool "
         "(cudaMallocAsync / cudaMemPool)", "code"),
    ],
    "gpu": [
        ("tensor-core precision for GEMM-heavy code (TF32 / BF16 / FP16: cuBLAS math mode)",
         "code"),
        ("fuse kernels to cut memory traffic", "code"),
    ],
}


# The busy-time levers of passes/busy.py, by id, in the words of the "gpu" levers.
GPU_LEVER_TEXT = {
    "tf32": LEVERS["gpu"][1][0],
    "bf16_autocast": LEVERS["gpu"][0][0],
    "fp16_autocast": "fp16 autocast (torch.autocast(dtype=torch.float16)) with a GradScaler: "
                     "this GPU has no fast bf16",
    "sdpa": LEVERS["gpu"][2][0],
    "channels_last": "channels_last memory format for the convolution model and its inputs",
    "torch_compile": "torch.compile to fuse the elementwise/reduction kernels",
}


def queued_levers(waited: dict, ns: int) -> list[tuple[str, str, int]]:
    """LEVERS["queued"] as (text, cost, ns it could save): each lever saves the queued ns its
    evidence explains (``waited``: ns per ``waited_on`` text); levers with no evidence are
    left out. Without any breakdown, every lever with the whole ``ns``."""
    levers = LEVERS["queued"]
    by = [0, 0, 0]
    for text, v in (waited or {}).items():
        by[1 if text == "GPU-side" else 2 if text.startswith(("nothing", "inside")) else 0] += int(v)
    if not any(by):
        return [(t, c, int(ns)) for t, c in levers]
    return [(t, c, min(int(ns), by[i])) for i, (t, c) in enumerate(levers) if by[i]]


def lever_texts(key: str) -> list[str]:
    return [t for t, _ in LEVERS[key]]
