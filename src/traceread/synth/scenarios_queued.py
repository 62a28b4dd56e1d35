"""Planted truth for the ``queued`` drain and blocking calls found by behaviour.

One stretch of GPU work (the whole trace is the window: no steps, no edge gaps). The
host launches kernels A..F far ahead, then sits in ``cudaDeviceSynchronize`` while the
GPU works through them; every gap inside that sync is queued, so none of it is sync
time. Times in us from T0 (s7: compute stream, s9: copy stream):

  A  launch [0, 10)    s7 [20, 520)
  B  launch [12, 22)   s7 [523, 1023)      gap 1 [520, 523)    3us: queued, GPU-side
  C  cudaMemcpyAsync [24, 34) -> Memcpy HtoD (Pinned -> Device) s9 [1023, 1100)
     cudaStreamWaitEvent [36, 40)
  D  launch [42, 52)   s7 [1120, 1620)     gap 2 [1100, 1120) 20us: queued, waited on C
     cudaStreamWaitEvent [54, 58)
  E  launch [60, 70)   s7 [3620, 4120)     gap 3 [1620, 3620)  2ms: queued, the event wait
  F  launch [72, 82)   s7 [5120, 5620)     gap 4 [4120, 5120)  1ms: queued, nothing traced
     cudaDeviceSynchronize [90, 5625): returns 5us after the GPU drained
  aten::add [5630, 5830), its launch [5800, 5810)
  G            s7 [5850, 6350)             gap 5 [5620, 5850) 230us: sync-drained; the last
                                           40us (after G's launch returned) are queued
  cudaMemcpyAsync [5860, 6360) -> Memcpy DtoH (Device -> Pageable) s7 [6350, 6355): a
     pageable copy, so a blocking call; it returns 5us after its copy
  aten::zero_ [6370, 6870), its launch [6850, 6860)
  H            s7 [6862, 7362)             gap 6 [6355, 6862) 507us: drained by the copy
"""
from __future__ import annotations

from .scenarios import MS, T0, US, TraceBuilder  # noqa: F401

PAGEABLE_DRAIN = "cudaMemcpyAsync (DtoH pageable)"


def queued_and_blocking_copy() -> tuple:
    """The trace above and its truth (ns)."""
    b = TraceBuilder(path="queued.json")

    def t(us: int) -> int:
        return T0 + us * US

    kern = "void gemm_kernel<float>(float*)"
    b.launch(t(0), 10 * US, t(20), 500 * US, name=kern)                      # A
    b.launch(t(12), 10 * US, t(523), 500 * US, name=kern)                    # B
    b.launch(t(24), 10 * US, t(1023), 77 * US, api="cudaMemcpyAsync", kind="memcpy",
             name="Memcpy HtoD (Pinned -> Device)", copy_kind="HtoD", bytes=1 << 20,
             stream=9)                                                       # C
    b.runtime("cudaStreamWaitEvent", t(36), 4 * US)
    b.launch(t(42), 10 * US, t(1120), 500 * US, name=kern)                   # D
    b.runtime("cudaStreamWaitEvent", t(54), 4 * US)
    b.launch(t(60), 10 * US, t(3620), 500 * US, name=kern)                   # E
    b.launch(t(72), 10 * US, t(5120), 500 * US, name=kern)                   # F
    b.runtime("cudaDeviceSynchronize", t(90), 5535 * US)
    b.cpu("aten::add", t(5630), 200 * US)
    b.launch(t(5800), 10 * US, t(5850), 500 * US, name=kern)                 # G
    b.launch(t(5860), 500 * US, t(6350), 5 * US, api="cudaMemcpyAsync", kind="memcpy",
             name="Memcpy DtoH (Device -> Pageable)", copy_kind="DtoH", bytes=704)
    b.cpu("aten::zero_", t(6370), 500 * US)
    b.launch(t(6850), 10 * US, t(6862), 500 * US, name=kern)                 # H
    gaps = [  # start, end (us), drain, drain_op, queued_ns, waited_on
        (520, 523, "queued", "", 3 * US, "GPU-side"),
        (1100, 1120, "queued", "", 20 * US, "stream 9: Memcpy HtoD (Pinned -> Device)"),
        (1620, 3620, "queued", "", 2000 * US, "cudaStreamWaitEvent"),
        (4120, 5120, "queued", "", 1000 * US, "nothing traced"),
        (5620, 5850, "sync", "cudaDeviceSynchronize", 40 * US, "GPU-side"),
        (6355, 6862, "sync", PAGEABLE_DRAIN, 0, ""),
    ]
    truth = {
        "gaps": [(t(s), t(e), d, op, q, w) for s, e, d, op, q, w in gaps],
        "window_ns": 7342 * US, "idle_ns": 3760 * US,
        # by label: the sync-drained gap counts whole, its 40 us queued tail included
        "by_drain": {"queued": 3023 * US, "sync": 737 * US, "starved": 0},
        "by_cpu": {"sync": 3033 * US, "untraced": 35 * US, "cpu_op": 672 * US,
                   "launch": 20 * US},
        # the sync scores only the host's part of the two drained gaps (190us + 507us):
        # the 3 ms it spent waiting on a GPU with work queued is not a sync cost
        "scores": {"queued": 3063 * US, "sync": 697 * US},
        "bound": "queued",
    }
    return b.build(), truth
