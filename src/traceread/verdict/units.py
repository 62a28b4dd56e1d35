"""Savings per step, with their unit: the step the program waits on.

A saving is only meaningful beside the step it is taken from. ``program_step_ns`` is that
step (passes/steps.program_step: per step the later of the host's span and the GPU's work
for it); ``StepSaving`` is a saving per step that cannot exceed it, nor -- when the caller
knows it -- the time there is to give back (the lost time plus the GPU work removed, per
step). Whole-window totals become per-step figures only through ``per_step``, which divides
by the window's own steps' worth of GPU work (``window_steps``: the analysed steps and the
backlog of earlier work the GPU drained in the window) and device count, so a total over
other steps (a job's collectives, the whole trace, a lagging GPU's earlier work) cannot
pass as one step's.
"""
from __future__ import annotations

from dataclasses import dataclass


def program_step_ns(ctx: dict) -> int:
    """The step the program waits on (mean, ns) from the facts' figures: the program step
    when the steps pass computed it, else the longer of the host's and the GPU's means."""
    prog = int(ctx.get("program_step_mean_ns") or 0)
    if prog:
        return prog
    return max(int(ctx.get("step_mean_ns") or 0), int(ctx.get("gpu_step_mean_ns") or 0))


def window_steps(ctx: dict) -> float:
    """The steps' worth of GPU work a window total covers: the analysed steps plus the
    backlog of earlier work the GPU drained in the window (passes/figures.backlog: a GPU
    that runs behind the host holds more than the steps' own work) -- what a window total is
    divided by to be one step's, and a saving per step multiplied by to be the window's.
    The step count where the record has no such figure; 0 without steps."""
    steps = int(ctx.get("steps") or 0)
    if steps <= 0:
        return 0.0
    return max(float(steps), float(ctx.get("window_steps") or 0.0))


def _held(ctx: dict, traced: bool) -> float:
    """Steps' worth x devices of a window total. A window without steps is one run (a
    replay's saving is the run's), or, with ``traced``, as many steps as the trace shows
    (figures counted per traced step: the anatomy's, a CPU trace's)."""
    held = window_steps(ctx) or float(max(1, int((ctx.get("steps_seen") if traced else 1) or 1)))
    return held * max(1, int(ctx.get("devices") or 1))


def window_total(per_step_ns: float, ctx: dict, traced: bool = False) -> int:
    """A saving per step as the window's total, the inverse of ``per_step``: x the window's
    steps' worth of work (``window_steps``) x its devices."""
    return int(round(float(per_step_ns) * _held(ctx, traced)))


def step_share(total_ns: float, ctx: dict, traced: bool = False) -> float:
    """A window total as one step's, unclamped (``window_total``'s inverse)."""
    return float(total_ns) / _held(ctx, traced)


def per_sample_step(k: float, per_ns: int, step_ns: int) -> int | None:
    """The step at ``k`` x the batch where a saving of ``per_ns`` per step's worth of
    samples is taken: k x (the step - the saving) -- a batch of k is one step, which grows,
    not the step less the saving. None when the saving is the whole step."""
    return int(k * (step_ns - per_ns)) if step_ns > per_ns else None


def gpu_bound(ctx: dict) -> bool:
    """Most analysed steps are paced by the GPU (passes/steps.program_step's ``bound_by``)."""
    return ((ctx.get("program_step") or {}).get("bound_by")) == "gpu"


@dataclass(frozen=True)
class StepSaving:
    """A saving per step (``ns``) of a step of ``step_ns``; ``clamped`` names what cut it
    (``"step"``: it was more than the whole step; ``"limit"``: more than the time there is
    to give back), None when nothing did."""

    ns: int
    step_ns: int
    clamped: str | None = None

    @classmethod
    def of(cls, ns: float, step_ns: int, limit_ns: float | None = None) -> "StepSaving":
        """``ns`` per step, clamped to ``[0, limit_ns]`` and to ``[0, step_ns]`` (a step of
        0 -- unknown -- caps nothing)."""
        got, why = max(0, int(round(ns))), None
        if limit_ns is not None and got > max(0, int(limit_ns)):
            got, why = max(0, int(limit_ns)), "limit"
        if step_ns > 0 and got > step_ns:
            got, why = int(step_ns), "step"
        return cls(got, int(step_ns), why)

    @property
    def pct(self) -> float | None:
        """Percent of the step (None when the step is unknown)."""
        return round(100.0 * self.ns / self.step_ns, 2) if self.step_ns > 0 else None

    def projected(self, floor_ns: int = 0) -> int | None:
        """The step with the saving taken, never below ``floor_ns`` (the GPU's busy time per
        step when the GPU paces the step); None when the step is unknown."""
        if self.step_ns <= 0:
            return None
        out = max(int(floor_ns), self.step_ns - self.ns)
        return out if out > 0 else None


def per_step(total_ns: float, steps: float, devices: int = 1, step_ns: int = 0,
             limit_ns: float | None = None) -> StepSaving | None:
    """A whole-window total as a saving per step: / the window's steps (``window_steps``:
    with the GPU's backlog) / its devices (None without steps). ``limit_ns``: the most there
    is to give back per step."""
    if not steps or steps <= 0:
        return None
    return StepSaving.of(total_ns / steps / max(1, int(devices)), step_ns, limit_ns)
