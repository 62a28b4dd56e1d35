"""What the verdict says of a window that is not the steady state (``passes/steady.py``
finds the state and its evidence; docs/analysis.md, "Steady state").

A sampled window loses its idle figures; a cold-start or JIT window is named for what it
is, and its to-do list becomes the one lever that gets a steady window.
"""
from __future__ import annotations

from .bounds import TITLE

STATE_TEXT = {
    "cold_start": (TITLE["cold_start"],
                   "warm up before recording: run a few iterations first (torch.profiler "
                   "schedule(wait=1, warmup=2, active=3), or start nsys after the first "
                   "iterations with --capture-range=cudaProfilerApi), or pass --steps/--window "
                   "past the start-up; the steady-state levers can be judged only then"),
    "jit": (TITLE["jit"],
            "let the JIT finish before recording: warm up with the shapes of the run (nvFuser, "
            "NVRTC, Triton autotuning and TorchScript compile on first use per shape), cache "
            "the autotuning results, or pass --steps/--window past the compilation"),
    "sampled": ("unknown: sampled trace -- idle figures are not meaningful",
                "record the trace unsampled (no event sampling or filtering: torch.profiler "
                "with its default settings, or nsys): idle time and its causes are measured "
                "only between events that were all kept; kernel times stay valid"),
}
# verdict figures measured between events: meaningless when most events were dropped
IDLE_KEYS = ("idle_ns", "idle_pct", "busy_ns", "lost_ns", "lost_pct", "scores_ns", "share_pct",
             "unexplained_ns", "unexplained_pct", "dominant", "dominant_pct", "runner_up",
             "runner_up_pct", "exposed_comm_ns", "exposed_comm_pct", "exposed_copy_ns",
             "exposed_copy_pct")


IDLE_BOUND_LOST = 0.10   # verdict/scores.GPU_BOUND_LOST: below it a window is GPU-bound


def _idle_bound_without(ev: dict, one_time_ns: int) -> bool:
    """The window's lost time less the one-time events' is still >= IDLE_BOUND_LOST of the
    window: the steady idle time stands on its own."""
    window = int(ev.get("window_ns") or 0)
    # scores.score took the lazy-loading launches out of lost_ns already: the whole lost time
    lost = int(ev.get("lost_ns") or 0) + int(ev.get("one_time_apart_ns") or 0)
    return window > 0 and lost - one_time_ns >= IDLE_BOUND_LOST * window


def adjust_verdict(verdict: dict, steady: dict) -> None:
    """Say what the window is when it is not the steady state, in place.

    A sampled window loses its idle figures; a cold-start or JIT window (unless the GPU was
    busy anyway, or -- cold start -- what is left without the one-time events is still
    idle-bound: then both are reported) is named for what it is, and its to-do list becomes the one lever that gets a
    steady window (a whole trace keeps its lever to mark the steps, ``mark_steps``).
    """
    state = steady.get("state", "steady")
    if verdict.get("bound") == "cpu_only":
        return
    if state == "steady":
        _say_apart(verdict, steady)
        return
    ev = verdict["evidence"]
    ev["steady_state"] = state
    if state in ("cold_start", "jit") and verdict["bound"] == "gpu":
        return   # the GPU was busy regardless: the kernel levers still stand
    if state == "cold_start" and _idle_bound_without(ev, int(steady.get("ns") or 0)):
        # one-time events apart, the window is still idle-bound: both are reported, the
        # steady verdict and its levers stand (one lazy-loading launch is not the story)
        top = steady["evidence"][0] if steady["evidence"] else None
        ev["one_time_ns"] = int(steady.get("ns") or 0)
        ev["one_time_events"] = [{"what": e["what"], "name": e["name"], "ns": int(e["ns"])}
                                 for e in steady["evidence"][:3]]
        ev["steady_state"] = "steady_with_one_time_events"
        verdict["summary"] += (f"; besides, {_ms(ev['one_time_ns'])} of one-time start-up work"
                               + (f" ({top['name']})" if top else "")
                               + " -- kept apart from the steady idle time")
        return
    title, lever = STATE_TEXT[state]
    ev["bound_if_steady"] = verdict["bound"]
    proof = ""
    if state == "sampled":
        s = steady["sampled"]
        for k in IDLE_KEYS:
            ev.pop(k, None)
        verdict.update(bound="unknown", title=title, summary=(
            f"sampled trace: {s['ids']} ids jump by a median of {s['median_jump']} (~"
            f"{s['dropped_pct']:.0f}% of events dropped) -- idle time and its causes cannot "
            "be measured between the events that were kept; kernel times are still valid"))
    else:
        what = "one-time start-up work" if state == "cold_start" else "JIT compilation"
        top = steady["evidence"][0] if steady["evidence"] else None
        kind = f"{top['what']}: " if top and state == "cold_start" else ""
        proof = f"{kind}{top['name']} {_ms(top['ns'])}" if top else ""
        verdict.update(bound=state, title=title, summary=(
            f"{_ms(steady['ns'])} of the window's idle GPU time is {what}"
            f"{f' ({proof})' if proof else ''}: not the steady state, so its steady-state "
            "levers do not apply"))
    item = {"id": f"steady_{state}", "lever": lever, "cost": "free", "cause": state,
            "saves_ns": None, "saves_pct": None, "saves_per_step_ns": None,
            "projected_step_ns": None, "culprit": proof,
            "because": [{"fact": "steady.state", "value": state, "known": True,
                         "evidence": [_proof(x) for x in steady.get("evidence") or []]}]}
    keep = [a for a in verdict.get("actions", []) if a.get("id") == "mark_steps"]
    verdict["actions"] = [item] + keep
    verdict["levers"] = [a["lever"] for a in verdict["actions"]]
    verdict["what_if"] = {}


def _say_apart(verdict: dict, steady: dict) -> None:
    """A steady window whose lazy-loading launches were kept out of its causes
    (scores.score: ``one_time_apart_ns``) says so."""
    ev = verdict["evidence"]
    apart = int(ev.get("one_time_apart_ns") or 0)
    if not apart:
        return
    top = (steady.get("one_time_launches") or [None])[0]
    ev["one_time_ns"] = apart
    ev["one_time_events"] = [{"what": e["what"], "name": e["name"], "ns": int(e["ns"])}
                             for e in (steady.get("one_time_launches") or [])[:3]]
    verdict["summary"] += (f"; besides, {_ms(apart)} of one-time lazy-loading launches"
                           + (f" ({top['name']})" if top else "")
                           + " -- kept apart from the steady idle time")


def _proof(x: dict) -> dict:
    """One event of passes/steady.py's evidence as a proof of the facts record."""
    detail = f"{x.get('what', '')}: {_ms(int(x['ns']))}" if x.get("ns") else x.get("what", "")
    return {"name": str(x.get("name", "")), "ts_ns": x.get("start_ns"), "step": None,
            "detail": detail}


def _ms(ns: int) -> str:
    """A duration in the words of verdicts: 2.40 s, 30.6 ms, 173 us (passes.common.fmt_ms)."""
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} us"
