"""How well the GPU is used when it is busy: FLOPs/MFU, work classes and levers, memory.

One entry point for ``analysis.py``: ``utilization(trace, steps)`` runs
``flops.mfu_summary``, ``busy.busy_breakdown`` and ``memory.memory_summary``
over the same steps (the analysis window) and returns their dicts.
"""
from __future__ import annotations

import pandas as pd

from . import busy, flops, memory


def utilization(trace, steps: pd.DataFrame | None = None, peak_tflops: float | None = None,
                events: pd.DataFrame | None = None) -> dict:
    """{"mfu": ..., "busy": ..., "memory": ...}.

    ``steps``: the analysed steps (start/end/step; None or the whole-trace pseudo
    step: the whole trace); ``events``: the analysed slice of ``trace.events``.
    """
    ev = trace.events if events is None else events
    meta = trace.meta
    real_steps = steps is not None and len(steps) > 0 and "step" in steps and \
        bool((steps["step"].to_numpy() >= 0).any())
    window = (int(steps["start"].min()), int(steps["end"].max())) if real_steps else None
    st = steps if real_steps else None
    mfu = flops.mfu_summary(ev, st, peak_tflops, meta=meta)
    ops = flops.op_flops(ev) if mfu.get("has_shapes") else None
    return {"mfu": mfu,
            "busy": busy.busy_breakdown(ev, window, ops, meta=meta),
            "memory": memory.memory_summary(ev, st, meta=meta)}
