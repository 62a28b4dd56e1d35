"""Planted CUDA-graph traces: a recording phase, then one graph replay per step.

``graph_replay`` builds the torch.profiler (Kineto) shape: every replayed kernel
is its own row, linked to the step's ``cudaGraphLaunch`` runtime call by the
launch's correlation id (how Kineto and CUPTI record graph kernels).
``write_nsys_graphs`` writes the same run as an Nsight Systems export, either
as nsys records it by default (``--cuda-graph-trace=graph``: one
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` row per replay, no kernel rows) or with
``--cuda-graph-trace=node`` (kernel rows carrying ``graphId``).

Timeline (all ns, ``T0`` origin, step k starts at ``s = T0 + warm + k*period``):

* warm-up: one eager kernel ``[T0 + 10us, T0 + 10us + eager)`` launched by
  ``cudaLaunchKernel`` at ``T0``;
* recording: ``CUDAGraphNode.record (dynamo_timed)`` over
  ``[T0 + rec_at, T0 + rec_at + record)`` holding ``cudaStreamBeginCapture``,
  ``cudaStreamEndCapture`` and ``cudaGraphInstantiate`` calls; no GPU work runs;
* step k: ``ProfilerStep#k`` over ``[s, s + period)``; ``cudaGraphLaunch`` at
  ``s + 100us`` (20 us); the replay's ``kernels`` nodes run back to back from
  ``s + 150us``, ``kernel_dur`` each with ``bubble`` between nodes; then
  ``cudaStreamSynchronize`` until the replay ends.
"""
from __future__ import annotations

from pathlib import Path

from ..table import Trace
from .scenarios import MS, T0, US, TraceBuilder

GRAPH_LAUNCH = "cudaGraphLaunch"
RECORD_SPAN = "CUDAGraphNode.record (dynamo_timed)"
EAGER_KERNEL = "void warmup_kernel<float>(float*)"


def graph_replay(steps: int = 4, kernels: int = 8, kernel_dur: int = 200 * US,
                 bubble: int = 2 * US, period: int = 5 * MS, record: int = 30 * MS,
                 eager: int = 1 * MS) -> tuple[Trace, dict]:
    """(trace, truth) of a recording phase followed by ``steps`` graph replays."""
    b = TraceBuilder(path="graph_replay.json")
    b.launch(T0, 5 * US, T0 + 10 * US, eager, name=EAGER_KERNEL)
    rec_at = 2 * MS
    r0 = T0 + rec_at
    b.cpu(RECORD_SPAN, r0, record)
    b.runtime("cudaStreamBeginCapture", r0 + 10 * US, 5 * US)
    b.runtime("cudaStreamEndCapture", r0 + record - 2 * MS, 5 * US)
    b.runtime("cudaGraphInstantiate", r0 + record - 1 * MS, 500 * US)
    first = T0 + rec_at + record + 1 * MS
    span = kernels * kernel_dur + (kernels - 1) * bubble
    replays = []
    for k in range(steps):
        s = first + k * period
        b.step(k, s, period)
        corr = b._corr
        b._corr += 1
        b.runtime(GRAPH_LAUNCH, s + 100 * US, 20 * US, correlation=corr)
        g0 = s + 150 * US
        for j in range(kernels):
            t = g0 + j * (kernel_dur + bubble)
            b.gpu(f"graph_node_kernel_{j % 3}", t, kernel_dur, correlation=corr)
        b.runtime("cudaStreamSynchronize", s + 120 * US, g0 + span - (s + 120 * US) + 3 * US)
        replays.append((corr, g0, g0 + span))
    truth = {
        "replays": steps, "kernels_per_replay": kernels,
        "replay_node_ns": kernels * kernel_dur,          # union of one replay's kernels
        "replay_span_ns": span,                          # one GRAPH_TRACE row
        "record_ns": record, "eager_ns": eager,
        "busy_node_ns": eager + steps * kernels * kernel_dur,
        "busy_graph_ns": eager + steps * span,
        "window": (T0 + 10 * US, replays[-1][2]),
        "replay_intervals": replays,
        "record_interval": (r0, r0 + record),
        "steps": steps,
    }
    return b.build(), truth


def write_nsys_graphs(trace: Trace, path: str | Path, mode: str = "graph", graph_id: int = 1,
                      start_ns: int = 1 * MS) -> Path:
    """Write ``graph_replay``'s trace as an nsys export in ``mode`` "graph" or "node".

    GPU ops sharing a ``cudaGraphLaunch``'s correlation id are the replay's nodes:
    "graph" writes one GRAPH_TRACE row from the first node's start to the last
    node's end; "node" writes the kernels with ``graphId``. Host ranges become NVTX.
    """
    from .nsys import NsysWriter

    if mode not in ("graph", "node"):
        raise ValueError("mode must be 'graph' or 'node'")
    ev = trace.events
    shift = int(ev["ts"].min()) - start_ns
    launches = set(ev.loc[ev["name"] == GRAPH_LAUNCH, "correlation"].astype(int))
    w = NsysWriter(path)
    w.session_start(shift)
    for p in sorted(int(p) for p in ev["pid"].unique() if p >= 0):
        w.process(p, "python")
    w.gpu(0, "NVIDIA H100")
    replay: dict[int, list] = {}
    for r in ev.itertuples(index=False):
        s, e = int(r.ts) - shift, int(r.ts + r.dur) - shift
        corr = max(int(r.correlation), 0)
        kind, name = str(r.kind), str(r.name)
        if kind == "kernel" and corr in launches:
            if mode == "node":
                w.kernel(s, e, name, int(r.pid), int(r.device), int(r.stream), corr=corr,
                         graph_id=graph_id)
            else:
                lo, hi = replay.get(corr, (s, e))[:2]
                replay[corr] = [min(lo, s), max(hi, e), int(r.pid), int(r.device), int(r.stream)]
        elif kind == "kernel":
            w.kernel(s, e, name, int(r.pid), int(r.device), int(r.stream), corr=corr)
        elif kind == "runtime":
            w.runtime(s, e, name + "_v10000" if name == GRAPH_LAUNCH else name, int(r.pid),
                      int(r.tid), corr=corr)
        elif kind in ("cpu_op", "python", "annotation"):
            w.nvtx_range(s, e, name, int(r.pid), int(r.tid))
    for corr, (s, e, pid, dev, stream) in sorted(replay.items()):
        w.graph_trace(s, e, pid, graph_id, device=dev, stream=stream, corr=corr)
    return w.close()
