"""How well the GPU is used when it is busy: FLOPs/MFU, work classes and levers, memory.

One entry point for ``analysis.py``: ``utilization(trace, steps)`` runs
``flops.mfu_summary``, ``busy.busy_breakdown`` and ``memory.memory_summary``
over the same steps (the analysis window) and returns their dicts.
"""
from __future__ import annotations

import pandas as pd

from . import busy, flops, memory


def utilization(trace, steps: pd.DataFrame | None = None,
                peak_tflops: float | None = None) -> dict:
    """{"mfu": ..., "busy": ..., "memory": ...}; ``steps`` with start/end (None: whole trace)."""
    ev = trace.events
    real_steps = steps is not None and len(steps) and "step" in steps and \
        (steps["step"].to_numpy() >= 0).any()
    window = (int(steps["start"].min()), int(steps["end"].max())) if real_steps else None
    mfu = flops.mfu_summary(trace, steps if real_steps else None, peak_tflops)
    ops = flops.op_flops(ev) if mfu.get("has_shapes") else None
    return {"mfu": mfu,
            "busy": busy.busy_breakdown(trace, window, ops),
            "memory": memory.memory_summary(trace, steps if real_steps else None)}
