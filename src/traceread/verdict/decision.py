"""The verdict in one call: ``decide`` reads the passes' results and returns the verdict
dict -- the bound, its title and summary, the evidence, the ranked to-do list with what each
lever saves, the diagnostics and what the trace cannot show.

It completes the trace context (``trace_context``, run beside the passes) with what the
other passes found, scores the causes (scores.py), names the culprits (passes/culprits.py),
gathers the figures the lever table reads (figures.py), asks the table (levers.py) and says
what the window is when it is not the steady state (steady.py).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from ..passes import attribution as attr_mod
from ..passes import culprits as culprits_mod
from ..passes import window as window_mod
from ..passes.common import kind_in
from ..passes.frames import code_in
from ..passes.peaks import device_caps, device_name
from ..table import TraceMeta, release_heap
from . import scores, whatif
from .context import _has_non_step_ranges
from .figures import lever_context, slow_collective, startup, window_figures
from .steady import adjust_verdict


def decide(*, meta: TraceMeta, ev: pd.DataFrame, window_mode: str, source: str,
           ops: pd.DataFrame, gaps: pd.DataFrame, top_ops: pd.DataFrame, summary: dict,
           step_tab: pd.DataFrame, stats: dict | None, devices: pd.DataFrame,
           nccl: pd.DataFrame, collectives: pd.DataFrame, comp: dict, kernels: pd.DataFrame,
           copies: dict, graphs: dict, utilization: dict | None, ctx: dict,
           later: Callable[[str], Any], replay_graph=None) -> dict:
    """The verdict of one analysed window.

    ``ev``: the window's events; ``window_mode``: the window's (``whole_trace`` or a step
    window); ``source``: where the steps came from; ``ops``/``gaps``/``top_ops``/``summary``:
    its GPU ops, labelled idle gaps and the attribution's host ops and summary; ``ctx``:
    ``trace_context``'s dict, completed here in place (the device, CUDA graphs seen
    anywhere, graphs never replayed); ``later(name)``: the result of a side pass still
    running (``layout``, ``steady``), fetched only when the verdict needs it so that it
    runs beside the verdict's own work. ``replay_graph``: the replayable step graph
    (passes/replay), None when the window cannot be replayed: the levers it can price are
    priced by replaying it changed (whatif.py), the others keep their bound.
    """
    _complete_context(ctx, meta, graphs, source, len(ops))
    release_heap()

    exposed = int(nccl["exposed_ns"].sum()) if len(nccl) and "exposed_ns" in nccl else 0
    window_ns = int(devices["window_ns"].sum()) if len(devices) else 0
    idle = int(devices["idle_ns"].sum()) if len(devices) else 0
    extra = _evidence(stats, summary, top_ops, kernels, comp)
    extra["module_loads"] = _module_loads(ev) if window_mode != "whole_trace" else 0
    parts = scores.cause_parts(gaps, ctx["host_traced"], ctx["api_traced"])
    culprits = culprits_mod.culprits(ev, gaps, ops, summary, top_ops, copies, collectives,
                                     comp, kernels, parts, ctx)
    release_heap()   # culprits' interval sets; the layout and steady passes may run here next
    vctx = dict(ctx, steps=stats["count"] if stats else 0,
                step_mean_ns=stats["mean_ns"] if stats else 0, devices=max(1, len(devices)),
                culprits=culprits,
                **window_figures(step_tab if source != "whole_trace" else None, gaps,
                                 top_ops, utilization, kernels, comp, culprits,
                                 device_name(meta), max(1, len(devices))))
    if window_mode == "whole_trace" and len(ops):
        vctx["startup"] = startup(window_mod.one_time_calls(ev, gaps))
    vctx["slow_collective"] = slow_collective(collectives)
    vctx.update(lever_context(later("layout")))
    vctx["culprits"].setdefault("queued", attr_mod.waited_summary(gaps))
    vctx["queued_on"] = attr_mod.waited_by(gaps)
    if replay_graph is not None and len(ops):
        vctx["replay_levers"] = whatif.price_window(replay_graph, ev, vctx, copies)
    verdict = scores.score(has_gpu=len(ops) > 0, window_ns=window_ns, idle_ns=idle,
                           parts=parts if len(ops) else None, exposed_comm_ns=exposed,
                           copy=copies, ctx=vctx, extra_evidence=extra)
    verdict["missing"] = _missing(meta, ev, ctx)
    headline = (utilization or {}).get("headline")
    if verdict["bound"] == "gpu" and headline:
        verdict["summary"] += f"; {headline}"
    release_heap()
    adjust_verdict(verdict, later("steady"))
    if vctx.get("replay_levers"):
        verdict["evidence"]["levers_replayed_on"] = vctx["replay_levers"]["steps_priced"]
        together = whatif.together(vctx["replay_levers"], verdict.get("actions") or [], vctx)
        if together:
            verdict["what_if"]["levers_together"] = together
    return verdict


def _complete_context(ctx: dict, meta: TraceMeta, graphs: dict, source: str, ops: int) -> None:
    """What the trace already does, from the passes besides ``trace_context`` (in place)."""
    ctx["device"] = device_caps(meta)
    # a program that records or replays graphs anywhere already uses them
    ctx["uses_cuda_graphs"] = ctx["uses_cuda_graphs"] or graphs["uses_cuda_graphs"]
    # graphs set up but never replayed in steady state: a new shape every step
    ctx["graphs_not_replayed"] = bool(graphs["uses_cuda_graphs"] and not graphs["replays"]
                                      and source != "whole_trace" and ops)


_MODULE_LOAD_RX = r"^(?:cu|hip)(?:Module|Library)Load"


def _module_loads(ev: pd.DataFrame) -> int:
    """GPU code modules loaded inside the window: past start-up, new kernels appearing every
    step are being JIT-compiled (torch.compile recompiles, Triton autotuning)."""
    api = kind_in(ev, ("runtime", "driver"))
    if not api.any():
        return 0
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names[api].astype("category")
        return int(np.isin(names.cat.codes.to_numpy(), np.flatnonzero(
            names.cat.categories.astype(str).str.contains(_MODULE_LOAD_RX, regex=True))).sum())
    hit = np.flatnonzero(names.cat.categories.astype(str).str.contains(_MODULE_LOAD_RX,
                                                                       regex=True))
    if not len(hit):
        return 0
    return int(code_in(names.cat.codes.to_numpy()[api], hit).sum())


def _missing(meta: TraceMeta, ev: pd.DataFrame, ctx: dict) -> list[str]:
    """What this capture cannot show, and how to record it."""
    out = []
    if meta.format == "nsys" and not ctx["host_traced"]:
        out.append("no NVTX ranges or OS-runtime calls: DataLoader waits, .item() calls and "
                   "framework ops are invisible -- record with nsys profile "
                   "--trace=cuda,nvtx,osrt --pytorch=autograd-nvtx, or use torch.profiler")
    elif meta.format == "nsys" and not _has_non_step_ranges(ev):
        out.append("no framework operators: the DataLoader and .item() show only through "
                   "NVTX; nsys profile --pytorch=autograd-nvtx names them")
    return out


def _evidence(stats, summary, top_ops, kernels, comp) -> dict:
    ev: dict[str, Any] = {}
    if summary["by_sync_op"]:
        op, v = max(summary["by_sync_op"].items(), key=lambda kv: kv[1]["ns"])
        ev["top_sync_op"] = op
        ev["top_sync_op_gaps"] = v["gaps"]
    if len(top_ops):
        ev["top_gap_op"] = str(top_ops["name"].iloc[0])
    if len(kernels):
        ev["top_kernel"] = str(kernels["name"].iloc[0])
        ev["top_kernel_pct"] = round(float(kernels["pct"].iloc[0]), 2)
    if stats:
        ev["steps"] = stats["count"]
        ev["step_mean_ns"] = stats["mean_ns"]
        ev["step_cv"] = stats["cv"]
        ev["bursty"] = stats["bursty"]
    if comp:
        ev["recompiles"] = int(comp.get("recompiles", 0) or 0)
        ev["graph_breaks"] = int(comp.get("graph_breaks", 0) or 0)
        ev["compile_whole_trace"] = comp.get("whole_trace")
    return ev
