"""Planted traces for the bounds and the analysis window (host, copy, mixed, start-up,
CUDA-graph replay and recording). Like ``scenarios``: each returns ``(trace, truth)``
with the truth derived from the scenario's own parameters, never from the analysis.
"""
from __future__ import annotations

from .scenarios import DATALOADER_OP, MS, T0, US, TraceBuilder

H100 = [{"device": 0, "name": "NVIDIA H100 80GB HBM3"}]


def _kernels_after(b: TraceBuilder, t: int, n: int, kernel_dur: int, op: str = "aten::mm",
                   op_dur: int = 100 * US, api_off: int = 20 * US, api_dur: int = 10 * US,
                   lead: int = 100 * US) -> int:
    """``n`` ops from ``t`` (``op_dur`` apart); kernels back to back from ``t + lead``.

    Returns the end of the last kernel.
    """
    g0 = t + lead
    for i in range(n):
        b.op_with_kernel(op, t + i * op_dur, op_dur, api_off, api_dur, g0 + i * kernel_dur,
                         kernel_dur, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128")
    return g0 + n * kernel_dur


def host_bound(steps: int = 5, work: int = 20 * MS, kernels: int = 10,
               kernel_dur: int = 900 * US, python: str = "train.py(57): augment",
               data: int = 0) -> tuple:
    """Python work on the launching thread before every step's kernels.

    Step k at s (period P = data + work + 100us + kernels*kernel_dur + 900us):
      [s, s+data)              DataLoader __next__ (only when ``data`` > 0)
      [s+data, s+data+work)    the python frame ``python``
      then ``kernels`` ops of 100us (launch at +20us for 10us); kernels run back to
      back from 100us after the first op; 900us of untraced host time ends the step.
    Per step the GPU idles work + data + 100us (90us operator, 10us launch) + 900us.
    """
    b = TraceBuilder(path="host_bound.json")
    tail = 900 * US
    period = data + work + 100 * US + kernels * kernel_dur + tail
    for k in range(steps):
        s = T0 + k * period
        b.step(k, s, period)
        if data:
            b.cpu(DATALOADER_OP, s, data)
        b.cpu(python, s + data, work, kind="python")
        _kernels_after(b, s + data + work, kernels, kernel_dur)
    idle = steps * (data + work + 100 * US + tail)
    truth = {
        "steps": steps, "step_dur": period, "window_ns": steps * period,
        "busy_ns": steps * kernels * kernel_dur, "idle_ns": idle, "gap_count": steps + 1,
        "by_cpu": {k: v for k, v in {"dataloader": steps * data, "python": steps * work,
                                     "cpu_op": steps * 90 * US, "launch": steps * 10 * US,
                                     "untraced": steps * tail}.items() if v},
        # the first kernel starts 70us after its launch call returned: those 70us of
        # operator time are queued, not host time
        "scores": {"host": steps * (work + 20 * US + tail), "launch": steps * 10 * US,
                   "data": steps * data, "queued": steps * 70 * US},
        "culprit": python, "bound": "host",
    }
    return b.build(), truth


def mixed_data_host(steps: int = 5) -> tuple:
    """The num_workers=0 ResNet-50 shape: DataLoader 16 ms and host work 20 ms a step.

    Data explains 43% of the lost time and host work 57%: a close call (1.3x), so the
    verdict is ``mixed`` and both levers are listed, num_workers among them.
    """
    trace, truth = host_bound(steps=steps, data=16 * MS, work=20 * MS)
    truth.update(bound="mixed", runner_up="data")
    return trace, truth


def copy_bound(steps: int = 4, nbytes: int = 2 << 30, copy_dur: int = 236 * MS,
               kernels: int = 20, kernel_dur: int = 500 * US, period: int = 250 * MS) -> tuple:
    """Every step re-sends a 2 GiB pageable host tensor: the GPU is 'busy' copying.

    Step k at s: aten::copy_ [s, s+copy+40us) calls cudaMemcpyAsync [s+10us, s+copy+30us),
    whose HtoD pageable memcpy runs [s+20us, s+20us+copy) (9.1 GB/s); then ``kernels``
    ops of 50us from s+copy+40us (launch at +10us for 10us) with kernels back to back from
    s+copy+100us. Idle per step: 20us + 80us around the copy + the untraced tail.
    """
    b = TraceBuilder(path="copy_bound.json")
    for k in range(steps):
        s = T0 + k * period
        b.step(k, s, period)
        b.cpu("aten::copy_", s, copy_dur + 40 * US)
        b.launch(s + 10 * US, copy_dur + 20 * US, s + 20 * US, copy_dur, kind="memcpy",
                 api="cudaMemcpyAsync", name="Memcpy HtoD (Pageable -> Device)",
                 copy_kind="HtoD", bytes=nbytes)
        _kernels_after(b, s + copy_dur + 40 * US, kernels, kernel_dur, op_dur=50 * US,
                       api_off=10 * US, lead=60 * US)
    busy = copy_dur + kernels * kernel_dur
    tail = period - (copy_dur + 100 * US + kernels * kernel_dur)
    gbps = nbytes / copy_dur
    truth = {
        "steps": steps, "window_ns": steps * period, "busy_ns": steps * busy,
        "idle_ns": steps * (100 * US + tail), "exposed_copy_ns": steps * copy_dur,
        "pin_saves_ns": round(steps * copy_dur * (1 - gbps / 50.0)), "gbps": round(gbps, 2),
        "bytes": nbytes, "bound": "copy",
    }
    return b.build(devices=H100), truth


def _dense_step(b: TraceBuilder, n: int, s: int, dur: int, kernels: int = 20,
                kernel_dur: int = 4950 * US, ops_from: int | None = None) -> None:
    """A GPU-bound step: ops of 20us (launch at +5us for 10us) then dense kernels."""
    b.step(n, s, dur)
    s = s if ops_from is None else ops_from
    g0 = s + 100 * US
    for i in range(kernels):
        b.op_with_kernel("aten::mm", s + i * 20 * US, 20 * US, 5 * US, 10 * US,
                         g0 + i * kernel_dur, kernel_dur, name="sm90_gemm_bf16")


def whole_program(steps: int = 6, gap_to_steps: int = 5400 * MS,
                  compile_ns: int = 2400 * MS) -> tuple:
    """A whole-program capture: start-up, a long idle stretch, a compiling warm-up step,
    then GPU-bound steps (99% busy).

    T0: cuInit 100 ms, cuDevicePrimaryCtxRetain 250 ms, 10 x cuLibraryLoadData of 15 ms,
    cublasCreate_v2 50 ms, one 1 ms warm-up kernel at +700 ms. Step 0 starts at
    T0 + ``gap_to_steps`` and compiles for ``compile_ns`` before its kernels; steps 1..
    are 100 ms each: 100us of launches, 20 kernels of 4.95 ms, a 900us untraced tail.
    """
    b = TraceBuilder(path="whole_program.json")
    b.runtime("cuInit", T0, 100 * MS, kind="driver")
    b.runtime("cuDevicePrimaryCtxRetain", T0 + 100 * MS, 250 * MS, kind="driver")
    for i in range(10):
        b.runtime("cuLibraryLoadData", T0 + 400 * MS + i * 15300 * US, 15 * MS, kind="driver")
    b.runtime("cublasCreate_v2", T0 + 600 * MS, 50 * MS)
    b.launch(T0 + 700 * MS, 10 * US, T0 + 700 * MS + 50 * US, 1 * MS, name="fill_kernel")
    s0 = T0 + gap_to_steps
    step0 = compile_ns + 100 * MS
    b.cpu("_compile.compile_inner (dynamo_timed)", s0, compile_ns)
    _dense_step(b, 0, s0, step0, ops_from=s0 + compile_ns)   # its kernels follow the compile
    s = s0 + step0
    for k in range(1, steps):
        _dense_step(b, k, s, 100 * MS)
        s += 100 * MS
    n = steps - 1
    truth = {
        "bound": "gpu", "all_steps_bound": "compile", "steps_analysed": n, "first_step": 1,
        "window_start": s0 + step0, "window_ns": n * 100 * MS,
        "busy_ns": n * 20 * 4950 * US, "idle_ns": n * (100 * US + 900 * US),
        "before_ns": gap_to_steps, "step0_ns": step0,
        "startup_detail": ["cuDevicePrimaryCtxRetain", "cuLibraryLoadData", "cuInit"],
    }
    return b.build(devices=H100), truth


def graph_replay(steps: int = 3, eager_ops: int = 30, graph_kernels: int = 10) -> tuple:
    """Launch-bound steps that already replay a CUDA graph: tiny eager kernels (40us of
    host per 5us kernel), then one cudaGraphLaunch whose kernels share its correlation id.
    The levers must not tell this trace to start using CUDA graphs."""
    b = TraceBuilder(path="graph_replay.json")
    t = T0
    for k in range(steps):
        start = t
        for _ in range(eager_ops):
            b.op_with_kernel("aten::add", t, 40 * US, 20 * US, 15 * US, t + 40 * US, 5 * US,
                             name="void elementwise_kernel<128, 2>(int)")
            t += 40 * US
        corr = b.launch(t + 5 * US, 15 * US, t + 25 * US, 5 * US, api="cudaGraphLaunch",
                        name="triton_poi_fused_0")
        for i in range(1, graph_kernels):
            b.gpu("triton_poi_fused_0", t + 25 * US + i * 5 * US, 5 * US, correlation=corr)
        t += 40 * US + graph_kernels * 5 * US
        b.step(k, start, t - start)
    return b.build(), {"bound": "launch", "uses_cuda_graphs": True}


def graph_recording(record: int = 300 * MS) -> tuple:
    """A capture trace whose only long span is CUDA-graph recording under dynamo_timed:
    the GPU idles while ``CUDAGraphNode.record (dynamo_timed)`` runs. Not a compile."""
    b = TraceBuilder(path="graph_recording.json")
    b.step(0, T0, record + 2 * MS)
    b.launch(T0 + 10 * US, 10 * US, T0 + 20 * US, 500 * US, name="k0")
    b.cpu("CUDAGraphNode.record (dynamo_timed)", T0 + 600 * US, record)
    b.launch(T0 + record + 700 * US, 10 * US, T0 + record + 720 * US, 500 * US, name="k1")
    return b.build(), {"bound": "graph_capture", "record_ns": record}


BOUND_SCENARIOS = {
    "host": host_bound,
    "mixed": mixed_data_host,
    "copy": copy_bound,
    "whole_program": whole_program,
    "graph_replay": graph_replay,
    "graph_recording": graph_recording,
}
