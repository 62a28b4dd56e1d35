"""How well the GPU is used when it is busy: FLOPs/MFU, work classes, occupancy, memory.

One entry point for ``analysis.py``: ``utilization(trace, steps)`` runs
``flops.mfu_summary``, ``busy.busy_breakdown``, ``occupancy.occupancy_summary`` and
``memory.memory_summary`` over the same steps (the analysis window) and returns their dicts.
The levers on them and the GPU-bound headline are the verdict's (verdict/busy.py), from
the facts record.
"""
from __future__ import annotations

import pandas as pd

from . import busy, flops, memory, occupancy
from .peaks import device_caps


def utilization(trace, steps: pd.DataFrame | None = None, peak_tflops: float | None = None,
                events: pd.DataFrame | None = None) -> dict:
    """{"mfu": ..., "busy": ..., "occupancy": ..., "memory": ..., "busy_figures": ...}
    (``busy_figures``: what the busy-time levers read, for the facts record; not JSON).

    ``steps``: the analysed steps (start/end/step; None or the whole-trace pseudo
    step: the whole trace); ``events``: the analysed slice of ``trace.events``.
    """
    ev = trace.events if events is None else events
    meta = trace.meta
    real_steps = steps is not None and len(steps) > 0 and "step" in steps and \
        bool((steps["step"].to_numpy() >= 0).any())
    window = _window(steps) if real_steps else None
    st = steps if real_steps else None
    ops = flops.op_flops(ev) if flops.has_shapes(ev) else None   # once, for both passes
    mfu = flops.mfu_summary(ev, st, peak_tflops, meta=meta, ops=ops)
    b = busy.busy_breakdown(ev, window, ops, meta=meta)
    classes = b.pop("kernel_class", None) or {}
    figures = b.pop("figures", None)
    if ops is not None and len(ops):
        _uncounted(mfu, flops.uncounted_matmuls(ev, ops, classes, window), b["busy_ns"])
    out = {"mfu": mfu, "busy": b,
           "occupancy": occupancy.occupancy_summary(ev, window, device_caps(meta), classes),
           "memory": memory.memory_summary(ev, st, meta=meta), "busy_figures": figures}
    return out


def _uncounted(mfu: dict, u: dict | None, busy_ns: int) -> None:
    """Record (and note) the GEMM/attention busy time whose FLOPs MFU does not count."""
    if u is None or not busy_ns:
        return
    u["pct_of_busy"] = 100.0 * u["ns"] / busy_ns
    mfu["uncounted_matmul"] = u
    if u["pct_of_busy"] >= UNCOUNTED_NOTE_PCT:
        mfu["lower_bound"] = (f"GEMM/attention kernels taking {u['pct_of_busy']:.0f}% of busy "
                              "time have no counted operator")
        msg = (f"GEMM/attention kernels that no counted operator launched (custom ops, fp8/fp4 "
               f"GEMMs, graph replays) take {u['pct_of_busy']:.0f}% of busy time, e.g. "
               f"{u['kernels'][0]['name'][:60]}: their FLOPs are not counted, so MFU is a "
               "lower bound")
        mfu["note"] = "; ".join(x for x in (mfu.get("note"), msg) if x)


UNCOUNTED_NOTE_PCT = 1.0


def _window(steps: pd.DataFrame) -> tuple[int, int]:
    """The steps' host span, extended to the end of their GPU work (the host runs ahead)."""
    end = int(steps["end"].max())
    if "gpu_end" in steps:
        end = max(end, int(steps["gpu_end"].max()))
    return int(steps["start"].min()), end
