"""The whole-window figures of one analysis: what ``traceread batch`` stores per trace
(its ``figures`` table) and what ``traceread diff`` compares, so a batch output diffs
like the traces themselves (``diffs/``).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..passes.attribution import CPU_CATEGORIES


def figures(a) -> dict[str, Any]:
    """The whole-window totals of one analysis that a diff compares (batch stores them
    as its ``figures`` table, so batch outputs diff like the traces themselves)."""
    from ..passes.peaks import device_name
    from ..passes.steps import program_step_of

    stats = a.step_stats or {}
    steps = 0 if a.step_source == "whole_trace" else int(len(a.steps))
    prog = program_step_of(a) if steps else None
    dev = a.devices
    n = a.nccl
    comp = a.compile or {}
    cp = getattr(a, "copies", None) or {}
    verdict = a.verdict or {}
    return {
        "path": str(a.meta.path), "format": str(a.meta.format), "steps": steps,
        "step_mean_ns": _int(stats.get("mean_ns")) if steps else None,
        "step_median_ns": _int(stats.get("median_ns")) if steps else None,
        # the step the program waits on (passes/steps.program_step): diff's step
        "program_step_ns": _int(prog.get("mean_ns")) if steps and prog else None,
        "step_bound_by": prog.get("bound_by") if steps and prog else None,
        "gpu_window_ns": int(dev["window_ns"].sum()) if len(dev) else 0,
        "gpu_idle_ns": int(dev["idle_ns"].sum()) if len(dev) else 0,
        "idle_by_cpu": {c: int(a.attribution["by_cpu"].get(c, 0)) for c in CPU_CATEGORIES},
        "comm_ns": int(n["comm_ns"].sum()) if n is not None and len(n) else 0,
        "exposed_comm_ns": int(n["exposed_ns"].sum()) if n is not None and len(n) else 0,
        "copy_ns": int(cp.get("copy_ns", 0) or 0), "exposed_copy_ns": int(cp.get("exposed_ns", 0) or 0),
        "pageable_copy_ns": int(cp.get("pageable_ns", 0) or 0),
        "compiles": int(comp.get("compiles", 0) or 0), "recompiles": int(comp.get("recompiles", 0) or 0),
        "verdict": verdict.get("bound"), "verdict_summary": str(verdict.get("summary", "")),
        "promised_saving_ns": promised_saving(verdict),
        "compile_ns": int(comp.get("compile_ns", 0) or 0),
        # the job and the hardware: a diff across different ones is not like for like
        "world_size": int(getattr(a.meta, "world_size", -1) or -1),
        "device_name": device_name(a.meta),
        **_window_figures(a, steps),
    }


def _window_figures(a, steps: int) -> dict[str, Any]:
    """The analysed window's kind and length, and its iterations when it has no steps."""
    from ..passes.iterations import count_iterations

    w = a.window
    if w is None:
        return {"window_mode": None, "window_ns": int(a.span_ns or 0), "iterations": 1,
                "iteration_evidence": "", "iteration_ns": None, "first_step": None,
                "last_step": None}
    it = None
    if not steps and a.trace is not None:
        it = count_iterations(a.trace.events, int(w.start), int(w.end))
    nums = w.steps["step"] if steps and len(w.steps) else None
    return {"window_mode": str(w.mode), "window_ns": int(w.dur),
            "iterations": steps or (it.count if it else 1),
            "iteration_evidence": it.evidence if it else "",
            "iteration_ns": it.period_ns if it else None,   # one iteration's period
            # the analysed steps' numbers: a diff of two batch outputs can tell when the
            # sides analysed different steps (one side's warm-up left out, the other's kept)
            "first_step": int(nums.min()) if nums is not None else None,
            "last_step": int(nums.max()) if nums is not None else None}


def _int(x):
    return None if x is None or x != x else int(x)


def promised_saving(verdict: dict) -> int | None:
    """Per step: what the verdict's first to-do item with a per-step saving promised (the
    figure its report prints first, and what diff calls the top action's promise), else
    what removing the verdict's cause whole was estimated to give back (its what-if: HTA
    trace_compare's 111 ms, the whole step, where its top action says 108 ms)."""
    cands = [a for a in verdict.get("actions") or [] if isinstance(a, dict)]
    w = (verdict.get("what_if") or {}).get(verdict.get("bound"))
    cands += [w] if isinstance(w, dict) else []
    for c in cands:
        v = c.get("saves_per_step_ns")
        if isinstance(v, (int, float)) and v == v:
            return int(v)
    return None


def figures_table(a) -> pd.DataFrame:
    """``figures`` of one analysis as a one-row table (idle by cause as
    ``idle_<category>`` columns): what ``traceread diff`` reads from a batch output."""
    f = figures(a)
    row = {k: v for k, v in f.items() if k != "idle_by_cpu"}
    row.update({f"idle_{c}": v for c, v in f["idle_by_cpu"].items()})
    df = pd.DataFrame([row])
    for c in ("step_mean_ns", "step_median_ns", "promised_saving_ns", "program_step_ns",
              "first_step", "last_step", "iteration_ns"):
        df[c] = df[c].astype("Int64")
    df["step_bound_by"] = df["step_bound_by"].astype(object)
    return df
