"""``analyze``: why is the GPU underfed, and which lever to pull.

One call: read -> window -> passes -> facts -> decide. It runs every pass over the
trace's window -- steps, GPU idle gaps, gap attribution, communication overlap,
compilation, kernels --, gathers their results into one facts record
(``passes.facts.build_facts``), asks the verdict to judge that record
(``verdict.decide``) and returns an ``Analysis`` whose DataFrame attributes hold the
detail and whose ``to_dict()`` is the JSON contract documented in docs/analysis.md.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import verdict as verdict_mod
from .passes import attribution as attr_mod
from .passes import facts as facts_mod
from .passes import window as window_mod
from .passes import steady as steady_mod
from .passes import steps as steps_mod
from .passes import overhead as overhead_mod
from .passes import replay as replay_mod
from .passes import compile as compile_mod
from .passes.replay import split as split_mod
from .passes import utilization as util_mod
from .passes.factkit import Steps, drop_shared, sharing
from .passes.side import SidePasses, map_forked
from .passes.compile import compile_counts, compile_summary
from .passes.context import trace_context
from .passes.copies import copy_summary
from .passes.gaps import gpu_gaps
from .passes.graphs import graph_launches, graph_recording, graph_summary
from .passes.hostwork import HOSTWORK_GAP_COLUMNS, host_work_kind
from .passes.kernel_classes import time_by_class
from .passes.kernels import kernel_summary
from .passes.nccl import comm_and_collectives
from .passes.newfacts import trace_facts
from .passes.parallelism import parallelism
from .table import Trace, TraceMeta, release_heap_grown

LARGEST_GAPS = 20
TOP_KERNELS = 20


@dataclass(repr=False)  # the generated repr dumped every DataFrame (17 KB in a notebook)
class Analysis:
    """Everything ``analyze`` found. DataFrames hold integer-ns columns."""

    meta: TraceMeta
    events: int
    span_ns: int
    step_source: str                 # "ProfilerStep", "pattern", "optimizer", "whole_trace"
    step_pattern: str
    steps: pd.DataFrame              # one row per step (or one whole-trace window)
    step_stats: dict | None
    devices: pd.DataFrame            # pid, device, window_start/end, window_ns, busy_ns, idle_ns
    gaps: pd.DataFrame               # every idle gap, labelled (drain, cpu, cpu_<category>)
    attribution: dict                # by_cpu, by_drain, drain_x_cpu, by_sync_op
    top_ops: pd.DataFrame            # host ops inside gaps: name, category, ns, count
    nccl: pd.DataFrame               # comm_overlap per (pid, device)
    collectives: pd.DataFrame        # collective_summary
    compile: dict
    kernels: pd.DataFrame
    kernel_classes: pd.DataFrame
    verdict: dict
    graphs: dict = field(default_factory=dict)   # passes.graphs.graph_summary
    min_gap_ns: int = 0
    trace: Trace | None = field(default=None, repr=False)  # the analysed trace, for follow-ups
    window: Any = None               # passes.window.Window: what was analysed and excluded
    copies: dict = field(default_factory=dict)    # host<->device copies (passes.copies)
    context: dict = field(default_factory=dict)   # what the trace already does
    utilization: dict | None = None  # passes/utilization.py: MFU, busy classes, memory; + the
    #                                  verdict's levers and headline (verdict/busy.py)
    steady_state: dict | None = None  # passes/steady.py: cold start, JIT, sampled -- or steady
    parallelism: dict | None = None   # passes/parallelism.py: DDP/FSDP/TP/PP/EP and their losses
    facts: Any = None                 # passes.facts.WindowFacts: what the verdict was judged on
    replay: dict | None = None        # passes/replay: the steps replayed, error, critical path
    replay_graph: Any = field(default=None, repr=False)   # passes.replay.StepGraph (None: not replayable)

    def listed_gaps(self) -> pd.DataFrame:
        """Gaps longer than ``min_gap_ns`` (the listing filter; totals never use it)."""
        return self.gaps[self.gaps["duration"] > self.min_gap_ns]

    def to_dict(self) -> dict[str, Any]:
        from .render.json import analysis_to_dict

        return analysis_to_dict(self)

    def report(self, fmt: str = "text") -> str:
        """The report ``traceread analyze`` prints (``fmt``: text, json or html)."""
        from .render.base import render

        return render(self, fmt)

    def __repr__(self) -> str:
        v = self.verdict or {}
        w = self.window
        where = f"{w.mode}, {_fmt_ns(w.dur)}" if w is not None else f"{_fmt_ns(self.span_ns)}"
        return (f"<Analysis of {str(self.meta.path)!r} ({self.meta.format}): "
                f"{str(v.get('bound', 'unknown')).upper()}, {len(self.steps)} steps, window {where}>")

    def _repr_html_(self) -> str:
        from .render.html import summary_html

        return summary_html(self)


def _fmt_ns(ns) -> str:
    from .render.text import fmt_ns

    return fmt_ns(ns)


def analyze(trace_or_path, *, step_pattern: str | None = None, min_gap_ns: int = 0,
            steps: str | None = "auto", window: tuple | None = None,
            peak_tflops: float | None = None) -> Analysis:
    """Run every pass over a Trace (or a path, loaded with ``traceread.load``).

    ``steps``: ``auto`` (steady-state steps, the default), ``all`` or ``N:M``;
    ``window``: (start, end) ns after the trace's first event, overriding ``steps``;
    ``peak_tflops``: per-GPU dense peak for MFU (default: looked up from the device).
    """
    if isinstance(trace_or_path, (str, os.PathLike)):
        from .readers import read

        trace = read(trace_or_path)
    else:
        trace = trace_or_path
    from .readers.validate import require_events

    require_events(trace)   # an analysis of nothing is refused, not "100% idle"
    window = _checked_window(trace, window)
    min_gap_ns = _checked_args(trace, step_pattern, steps, min_gap_ns, peak_tflops)
    is_nsys = trace.meta.format == "nsys"
    all_ev = trace.events
    all_steps, pattern = steps_mod.find_steps(all_ev, step_pattern)
    inferred = pattern == steps_mod.OPTIMIZER_STEP_PATTERN
    if inferred:   # no step markers: the optimizer's range is the step's last phase, not one
        pattern = ""
    # the steps the anatomy finds with no pattern given (its own copy: later edits stay ours)
    found = all_steps.copy(deep=False) if step_pattern is None else None
    all_ops = _gpu_ops(all_ev, is_nsys)
    apart = _apart_window(trace, all_ev) if window is None else None
    win = window_mod.choose(all_ev, all_steps, all_ops, steps_spec=steps,
                            window=window if apart is None else apart)
    if apart is not None:
        win.note = (f"the part {trace.meta.extra['processes_apart']['analysed']} the gap "
                    "between processes apart (two clocks, or two traces in one file)")
    ev = window_mod.slice_events(all_ev, win.start, win.end) if win.mode != "whole_trace" \
        else all_ev
    step_rows = _window_steps(all_steps, win)
    if len(step_rows):
        source = "optimizer" if inferred else \
            "ProfilerStep" if pattern == steps_mod.DEFAULT_STEP_PATTERN else "pattern"
    else:
        step_rows, source = steps_mod.whole_trace_window(ev), "whole_trace"
    # the facts passes count per step over the steps found here where those are not the
    # ProfilerStep ranges they read by themselves: one step definition for every pass
    spans = (Steps(all_ev, all_steps, span_names=not inferred),
             Steps(ev, step_rows, span_names=not inferred)) \
        if source in ("optimizer", "pattern") else None
    # the window's GPU ops before the fork: the replay's side job reads them from there
    ops = all_ops if ev is all_ev else _gpu_ops(ev, is_nsys)
    del all_ops
    release_heap_grown()  # each pass frees its temporaries; hand the pages back before the next
    with SidePasses(_pass_workers(len(all_ev)), {"ev": ev, "all_ev": all_ev, "trace": trace,
                                                 "ops": ops}) as side, sharing():
        return _analyze_window(trace, side, all_ev, ev, ops, step_rows, source, pattern, win,
                               is_nsys, min_gap_ns, peak_tflops, found, spans)


def _apart_window(trace, all_ev) -> tuple | None:
    """The window (offsets after the first event) of the side of a ``processes_apart``
    gap that is analysed (readers/validate.py): span and idle across the gap are not
    real, so the analysis is of one side, not of a 1000 s window 99.9% idle."""
    apart = trace.meta.extra.get("processes_apart")
    if not apart or "analysed" not in apart or not len(all_ev):
        return None
    t0 = int(all_ev["ts"].min())
    if apart["analysed"] == "before":
        return (0, max(1, int(apart["before_end_ns"]) - t0))
    return (max(0, int(apart["after_start_ns"]) - t0), None)


def _checked_window(trace, window):
    """``window`` as (start, end) ints of ns, or TraceError: each bound a finite number
    (end may be None), 0 <= start < end, both inside int64 (``inf``, ``nan`` or 1e300
    raised OverflowError / ValueError deep in a pass)."""
    from .errors import TraceError

    if window is None:
        return None
    try:
        lo, hi = window
    except (TypeError, ValueError):
        raise TraceError(trace.meta.path, f"window must be (start_ns, end_ns), not {window!r}") \
            from None
    bounds = []
    for what, v in (("start", lo), ("end", hi)):
        if v is None and what == "end":
            bounds.append(None)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = float("nan")
        if not np.isfinite(f) or abs(f) >= 2 ** 62 or isinstance(v, bool):
            raise TraceError(trace.meta.path, f"window {what} {v!r} is not a finite number of "
                                              "ns (offsets after the first event, below 2**62)")
        bounds.append(int(v) if isinstance(v, (int, np.integer)) else int(round(f)))
    if bounds[1] is not None and bounds[1] <= max(bounds[0], 0):
        raise TraceError(trace.meta.path, f"window ({lo!r}, {hi!r}) is empty: it needs "
                                          "start < end, end > 0 (ns after the first event)")
    return tuple(bounds)


def _checked_args(trace, step_pattern, steps, min_gap_ns, peak_tflops) -> int:
    """TraceError for a bad ``step_pattern`` / ``steps`` / ``min_gap_ns`` / ``peak_tflops``
    (a raw re.error or ValueError from inside a pass otherwise); ``min_gap_ns`` as int."""
    import re

    from .errors import TraceError

    where = trace.meta.path
    if step_pattern is not None:
        try:
            re.compile(step_pattern)
        except (re.error, TypeError) as e:
            raise TraceError(where, f"step_pattern {step_pattern!r} is not a regex: {e}") from None
    try:
        window_mod.parse_steps(steps)
    except ValueError as e:
        raise TraceError(where, str(e)) from None
    except (AttributeError, TypeError):
        raise TraceError(where, f"steps must be auto, all, N:M or N, not {steps!r}") from None
    try:
        gap = int(min_gap_ns)
        if gap < 0 or gap != float(min_gap_ns):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise TraceError(where, f"min_gap_ns must be a whole number of ns >= 0, not "
                                f"{min_gap_ns!r}") from None
    if peak_tflops is not None:
        try:
            ok = float(peak_tflops) > 0 and np.isfinite(float(peak_tflops))
        except (TypeError, ValueError):
            ok = False
        if not ok or isinstance(peak_tflops, bool):
            raise TraceError(where, f"peak_tflops must be a positive finite number, not "
                                    f"{peak_tflops!r}")
    return gap


def _analyze_window(trace, side, all_ev, ev, ops, step_rows, source, pattern, win, is_nsys,
                    min_gap_ns, peak_tflops, found=None, spans=None) -> Analysis:
    """The passes over the window ``ev``; ``ops``: its GPU ops (None: not computed yet);
    ``found``: the trace's steps as ``find_steps(all_ev)`` finds them (None: not known);
    ``spans``: the facts passes' steps of the trace and of the window (None: their own)."""
    ref = side.ref
    # Passes that need neither the gaps nor the steps run beside the attribution: submitted
    # first, so a worker has them while this process finds the gaps
    side.submit("comm", comm_and_collectives, ref("ev"))   # overlap and collectives: one split
    side.submit("graphs", _graphs, ref("ev"), ref("all_ev"))
    side.submit("classes", _classes, ref("ev"))
    side.submit("ctx", trace_context, ref("ev"), trace.meta, spans[1] if spans else None)
    side.submit("copies", copy_summary, ref("ev"), [str(d.get("name", ""))
                                                    for d in trace.meta.devices
                                                    if isinstance(d, dict)])
    side.submit("kernels", kernel_summary, ref("ev"))
    if ev is not all_ev:   # the whole trace's compile counts, labelled apart from the window's
        side.submit("compile_whole", compile_counts, ref("all_ev"))
    # the window's leading warm-up steps, by the start-up work they run: one-time, not the
    # anatomy's odd step out (slowness alone is no evidence: anatomy/save's first save read
    # as "7.7x the median")
    warm = frozenset(int(x["step"]) for x in win.excluded or ()
                     if "step" in x and window_mod.by_startup_work(str(x.get("reason", ""))))
    side.submit("trace_facts", trace_facts, ref("all_ev"), ref("ev"), found, warm, spans)
    op_step = steps_mod.step_of_gpu_ops(step_rows, ops)
    gaps = gpu_gaps(ev, 0, skip_nonpositive=is_nsys)
    if win.mode != "whole_trace":
        gaps = _edge_gaps(gaps, ops, win)
    # which gaps the GPU spent with work queued reads only their bounds: a side pass beside
    # the rest of the attribution (a third of its time); a column selection is its own frame
    # already (copy-on-write under pandas 3, a copy under pandas 2): no deep copy held by the
    # side jobs until they run (~30 MB at 1 GB, three)
    bounds = gaps[list(GAP_BOUNDS)]
    side.submit("queued", attr_mod.queued, ref("ev"), bounds, ref("ops"))
    # the compile summary reads the gaps' bounds too (the GPU's idle time under compiles)
    side.submit("compile", compile_summary, ref("ev"), gaps=bounds)
    # the step replay, the levers' graph and its optimizer regions: one job beside the
    # attribution and the facts (a sampled window is not replayed: its ids, read once here).
    # Its result is two graphs of ~10^5 nodes, whose pickle there and back cost ~0.15 CPU-s
    # at 247 MB: the first job this process takes while it waits for a worker (round 9)
    sampled = steady_mod.sampled_ids(ev)
    side.submit("replay", _replay_side, ref("ev"), ref("ops"), step_rows, op_step, pattern,
                bool(sampled), here=True)
    step_tab = steps_mod.step_table(step_rows, ops, op_step)

    gaps["step_index"] = _step_of_gaps(gaps, ops, op_step)
    if source != "whole_trace":   # a gap whose closing op no step launched: the step it lies in
        lost = gaps["step_index"].to_numpy() < 0
        if lost.any():
            gaps.loc[lost, "step_index"] = steps_mod.assign_steps(
                step_rows, gaps["pid"].to_numpy()[lost], gaps["start"].to_numpy()[lost])
    release_heap_grown()
    if side.runs_here("queued"):   # run here anyway: before the attribution's host arrays exist
        queued = side.get("queued")
        queued_of = lambda: queued  # noqa: E731
    else:
        queued_of = lambda: side.get("queued", release=False, inside=True)  # noqa: E731
    att = attr_mod.attribute(ev, gaps, ops, pattern, queued_of=queued_of)
    del queued_of
    release_heap_grown()
    # compilation an untraced host shows only through the driver's module loads (nsys):
    # the host time of the gaps that end in freshly built code is compile time
    jit, jit_evidence = compile_mod.untraced_compile(ev, att["gaps"])
    gaps = compile_mod.charge_compile(att["gaps"], jit)
    # steady state reads only the gaps' bounds (set by the attribution): it runs beside the rest
    side.submit("steady", steady_mod.steady_state, ref("ev"), gaps[["start", "end"]],
                sampled)
    gaps["sync_share"] = attr_mod.sync_share(gaps, att["sync_blocked"])
    summary = attr_mod.summarize(gaps)
    step_tab = _step_idle(step_tab, gaps)
    gaps["step"] = np.where(gaps["step_index"] >= 0,
                            step_tab["step"].to_numpy()[np.maximum(gaps["step_index"], 0)]
                            if len(step_tab) else -1, -1)
    # the host work's kind reads only the gaps' bounds and drains: beside the rest too
    side.submit("hostwork", host_work_kind, ref("ev"),
                gaps[[c for c in HOSTWORK_GAP_COLUMNS if c in gaps]], ref("ops"))
    devices = _devices(ops, gaps, trace.meta, win)

    side.submit("utilization", util_mod.utilization, ref("trace"), step_tab, peak_tflops,
                events=ref("ev"))
    nccl, collectives = side.get("comm")
    release_heap_grown()
    # compile_summary(ev, gaps=gaps): their bounds, the same (small temporaries: no trim,
    # as when it ran here)
    comp = side.get("compile", release=False)
    comp["scope"] = "window" if ev is not all_ev else "whole_trace"
    comp["whole_trace"] = side.get("compile_whole") if ev is not all_ev else \
        {k: comp[k] for k in ("compiles", "recompiles", "graph_breaks")}
    kernels = side.get("kernels")
    classes = side.get("classes")
    copies = side.get("copies")
    ctx = side.get("ctx")
    _add_trace_facts(ctx, all_ev, side.get("trace_facts"))
    if len(jit):
        ctx["untraced_compile_gaps"] = int(len(jit))
    # the layout reads only these two context keys: it runs beside culprits and the verdict
    side.submit("layout", parallelism, ref("ev"), trace.meta,
                {k: ctx.get(k) for k in ("framework_evidence", "comm_backend")},
                step_rows if source != "whole_trace" else None)
    graphs = side.get("graphs")
    stats = steps_mod.step_stats(step_tab["dur"]) if source != "whole_trace" else None
    n_steps = len(step_tab) if stats else 0
    if n_steps and stats.get("mean_ns"):   # what the overhead estimate reads of the events
        side.submit("overhead_features", overhead_mod.cost_features, ref("ev"), n_steps)
    utilization = side.get("utilization")
    later = functools.lru_cache(maxsize=None)(side.get)   # each side result is taken once
    replay_graph, replay, priced, regions = side.get("replay")
    facts = facts_mod.build_facts(
        meta=trace.meta, ev=ev, window_mode=win.mode, source=source, ops=ops, gaps=gaps,
        top_ops=att["top_ops"], summary=summary, step_tab=step_tab, stats=stats,
        devices=devices, nccl=nccl, collectives=collectives, comp=comp, kernels=kernels,
        copies=copies, graphs=graphs, utilization=utilization, ctx=ctx, later=later)
    drop_shared()   # the window's host stacks: read by the facts, by nothing after them
    release_heap_grown()   # the facts' freed pages (~60 MB at 1 GB) before the profiler's replays
    facts.graph, facts.replay = replay_graph, replay   # the step as a graph (passes/replay)
    if jit_evidence:
        facts.evidence["untraced_compile_gaps"] = jit_evidence
    if priced is not None:
        # the levers' graph (built beside the attribution) with the compile stretches the
        # attribution found marked
        facts.graph = compile_mod.mark_compile(priced, gaps, jit)
        facts.frames["optimizer_regions"] = regions
    elif not len(ops) and replay_mod.host_only(replay) and source != "whole_trace" \
            and len(step_tab):
        # a host-only window (CPU trace): its steps as a graph, so the host levers are
        # priced by the same replay as a GPU trace's (the replay pass leaves it out)
        facts.graph = _host_graph(ev, ops, step_tab, pattern)
        if facts.graph is not None:
            facts.frames["optimizer_regions"] = split_mod.optimizer_regions(
                split_mod.within(ev, facts.graph))
    facts.figures["profiler_overhead"] = overhead_mod.estimate(
        ev, steps=n_steps, step_mean_ns=(stats or {}).get("mean_ns"),
        busy_step_ns=facts.figures.get("busy_step_mean_ns"),
        replay_ratio=replay_mod.whatif.profiler_ratio(facts.graph),
        features=later("overhead_features") if n_steps and stats.get("mean_ns") else None)
    if replay is not None and replay.get("replayable"):
        replay["profiler_overhead"] = facts.figures["profiler_overhead"]
    release_heap_grown()
    verdict = _decide(facts, side.workers)
    replay_mod.whatif.forget()   # the levers are priced: their base replays are let go
    utilization = _with_levers(utilization, verdict_mod.utilization_levers(facts))
    layout, steady = later("layout"), later("steady")
    span = int((all_ev["ts"] + all_ev["dur"]).max() - all_ev["ts"].min()) if len(all_ev) else 0
    return Analysis(meta=trace.meta, events=len(all_ev), span_ns=span, step_source=source,
                    step_pattern=pattern, steps=step_tab, step_stats=stats, devices=devices,
                    gaps=gaps, attribution=summary, top_ops=att["top_ops"], nccl=nccl,
                    collectives=collectives, compile=comp, kernels=kernels,
                    kernel_classes=classes, verdict=verdict, graphs=graphs,
                    min_gap_ns=int(min_gap_ns), trace=trace, window=win, copies=copies,
                    context=ctx, utilization=utilization, steady_state=steady,
                    parallelism=layout, facts=facts, replay=replay,
                    replay_graph=replay_graph)


def _decide(facts, workers: int) -> dict:
    """The verdict, its what-if models' replays (independent, one per model) shared with
    ``workers - 1`` processes forked once the graph is built (passes/side.py ``map_forked``)."""
    if workers < 2 or facts.graph is None:
        return verdict_mod.decide(facts)
    pooled = functools.partial(map_forked, workers=workers)
    replay_mod.whatif.MAP.append(pooled)
    try:
        return verdict_mod.decide(facts)
    finally:
        replay_mod.whatif.MAP.remove(pooled)


def _replay_side(ev, ops, step_rows, op_step, pattern, sampled: bool) -> tuple:
    """(the replay's graph, its JSON result, the levers' graph, its optimizer regions): the
    step replay and the graph the what-if models change (passes/replay/whatif.py: a run of
    steps that stands for the window, host stretches cut at their ops, the profiler's cost
    per node marked); the last
    two None when the window was not replayed or has no GPU op."""
    with replay_mod.shared_windows():   # the measured steps: the result's, read by the sample
        graph, out = _replay(ev, ops, step_rows, op_step, pattern, sampled)
        if graph is None or not len(ops):
            return graph, out, None, None
        measured = split_mod.measured_steps(graph) if \
            len(graph.steps) > split_mod.PRICE_STEPS else None
    priced, priced_ev, span = split_mod.priced_graph_events(graph, ev, pattern,
                                                            measured=measured)
    priced = overhead_mod.mark(priced, ev)   # the profiler's cost per node
    replay_mod.critical.forget()   # the replay graph's kept shape: the pricing asks others
    if split_mod.span_of(priced) != span:
        priced_ev = split_mod.within(ev, priced)
    return graph, out, priced, split_mod.optimizer_regions(priced_ev)


def _replay(ev, ops, step_rows, op_step, pattern, sampled: bool) -> tuple:
    """(graph, JSON result) of the analysed steps' replay (passes/replay)."""
    try:
        graph, _sched, out = replay_mod.run(ev, ops, step_rows, step_pattern=pattern,
                                            sampled=sampled, op_step=op_step)
    except (ValueError, IndexError, KeyError, TypeError) as e:
        # the replay is one pass of many: a trace it cannot model keeps every other figure
        # (and the verdict prices levers by their bounds)
        return None, replay_mod.not_replayable(f"the graph could not be built ({type(e).__name__}: {e})")
    return graph, out


def _host_graph(ev, ops, steps, pattern):
    """The levers' graph of a host-only window (passes/replay/whatif.py ``graph_of``), None
    where it cannot be built or its replay does not settle."""
    from .passes.replay.graph import build_graph
    from .passes.replay.sim import simulate

    try:
        g = split_mod.priced_graph(build_graph(ev, ops, steps, step_pattern=pattern or None),
                                   ev, pattern or None)
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    return g if simulate(g).converged else None


def _with_levers(u: dict | None, judged: dict) -> dict | None:
    """The GPU-use section as the report shows it: the passes' figures with the verdict's
    busy-time and allocator levers and its headline (verdict.utilization_levers)."""
    if u is None:
        return None
    out = dict(u)
    if isinstance(u.get("busy"), dict):
        out["busy"] = {**u["busy"], "levers": judged["busy"]}
    if isinstance(u.get("memory"), dict):
        out["memory"] = {**u["memory"], "levers": judged["memory"]}
    out["headline"] = judged["headline"]
    return out


def _add_trace_facts(ctx: dict, all_ev: pd.DataFrame, tf: dict) -> None:
    """The facts read over every step of the trace (periodic stalls, the steps' anatomy:
    ``newfacts.trace_facts``, a side pass), into the context."""
    from .passes.factkit import has_gpu

    ctx.setdefault("facts_evidence", {}).update(tf.pop("facts_evidence", {}))
    ctx.update(tf)
    if ctx.get("cpu_only") and all_ev is not None and has_gpu(all_ev):
        ctx["cpu_only"]["window_without_gpu"] = True   # the trace has GPU work, not here


def _pass_workers(rows: int) -> int:
    """Processes for the side passes: none for small traces (a fork costs more)."""
    from .readers.stream import default_workers, env_workers

    if rows < PARALLEL_PASSES_ROWS:
        return 1
    return env_workers() or default_workers()


# What ``attribution.queued`` and ``compile_summary`` read of the gaps (side passes: only
# these travel)
GAP_BOUNDS = ("start", "end", "pid", "device")

# Below this many events the passes run in one process (measured: ~0.1 s of passes).
PARALLEL_PASSES_ROWS = 200_000


def _gpu_ops(ev: pd.DataFrame, is_nsys: bool) -> pd.DataFrame:
    # nsys: the gap pass ignores ops recorded before the session start; so do we
    return steps_mod.gpu_ops(ev, positive_ts=is_nsys)


def _window_steps(all_steps: pd.DataFrame, win) -> pd.DataFrame:
    """The analysed steps: the window's own, plus other processes' steps inside it."""
    if win.mode == "whole_trace" or not len(all_steps):
        return all_steps.iloc[:0] if win.mode != "whole_trace" else all_steps
    main_pid = int(win.steps["pid"].iloc[0]) if len(win.steps) else None
    s, e = all_steps["start"].to_numpy(np.int64), all_steps["end"].to_numpy(np.int64)
    other = (all_steps["pid"].to_numpy() != main_pid) & (s < win.end) & (e > win.start)
    parts = [win.steps, all_steps[other]] if len(win.steps) else [all_steps[other]]
    out = pd.concat(parts, ignore_index=True)
    out["start"] = np.maximum(out["start"].to_numpy(np.int64), win.start)
    out["end"] = np.minimum(out["end"].to_numpy(np.int64), win.end)
    out["dur"] = out["end"] - out["start"]
    out = out.sort_values(["pid", "start"], kind="stable").reset_index(drop=True)
    out["index"] = np.arange(len(out), dtype=np.int64)
    return out


def _edge_gaps(gaps: pd.DataFrame, ops: pd.DataFrame, win) -> pd.DataFrame:
    """Idle time between the window's edges and each device's first / last op.

    Inside a step window the GPU is idle from the step's start until its first op
    runs (the host was fetching data, say): that time is lost too.
    """
    if not len(ops):
        return gaps
    g = ops.groupby(["pid", "device"], sort=True).agg(first=("ts", "min"), last=("end", "max"))
    pid = g.index.get_level_values(0).to_numpy(np.int64)
    dev = g.index.get_level_values(1).to_numpy(np.int64)
    first, last = g["first"].to_numpy(np.int64), g["last"].to_numpy(np.int64)
    lead, tail = first > win.start, last < win.end
    edge = pd.DataFrame({
        "start": np.concatenate([np.full(lead.sum(), win.start, np.int64), last[tail]]),
        "end": np.concatenate([first[lead], np.full(tail.sum(), win.end, np.int64)]),
        "pid": np.concatenate([pid[lead], pid[tail]]),
        "device": np.concatenate([dev[lead], dev[tail]])})
    if not len(edge):
        return gaps
    edge["duration"] = edge["end"] - edge["start"]
    out = pd.concat([gaps, edge[list(gaps.columns)].astype(np.int64)], ignore_index=True)
    order = _merge_order(gaps, edge)
    if order is None:
        return out.sort_values(["start", "pid", "device"], kind="stable").reset_index(drop=True)
    return out.take(order).reset_index(drop=True)


def _merge_order(gaps: pd.DataFrame, edge: pd.DataFrame) -> np.ndarray | None:
    """The stable (start, pid, device) order of ``gaps`` followed by the few ``edge`` rows,
    when ``gaps`` is in that order already (None otherwise): the edges are put in place
    instead of sorting every gap again."""
    keys = ("start", "pid", "device")
    g = [gaps[k].to_numpy(np.int64) for k in keys]
    n = len(g[0])
    if n > 1:
        same = g[0][1:] == g[0][:-1]
        back = (g[1][1:] < g[1][:-1]) | ((g[1][1:] == g[1][:-1]) & (g[2][1:] < g[2][:-1]))
        if (g[0][1:] < g[0][:-1]).any() or (same & back).any():
            return None
    e = [edge[k].to_numpy(np.int64) for k in keys]
    e_order = np.lexsort((e[2], e[1], e[0]))
    pos = []
    for i in e_order.tolist():
        lo = int(np.searchsorted(g[0], e[0][i], "left"))
        hi = int(np.searchsorted(g[0], e[0][i], "right"))
        # equal starts: gap rows with (pid, device) <= the edge's come first (stable sort)
        pos.append(lo + int(((g[1][lo:hi] < e[1][i])
                             | ((g[1][lo:hi] == e[1][i]) & (g[2][lo:hi] <= e[2][i]))).sum()))
    return np.insert(np.arange(n), pos, n + e_order)


def _graphs(ev: pd.DataFrame, all_ev: pd.DataFrame) -> dict:
    """Graph replays of the window; recording (usually start-up) of the whole trace too."""
    g = graph_summary(ev)
    if ev is not all_ev:
        rec = graph_recording(all_ev)
        g["recording_whole_trace"] = rec
        g["uses_cuda_graphs"] = g["uses_cuda_graphs"] or rec["spans"] > 0 or \
            bool(graph_launches(all_ev).shape[0])
    return g


def _step_of_gaps(gaps: pd.DataFrame, ops: pd.DataFrame, op_step: np.ndarray) -> np.ndarray:
    """A gap belongs to the step that launched the GPU op ending it (the work it waited for);
    the window's tail after the device's last op, to the step of that last op (its trailing
    edge: the per-step idle adds up to the window's)."""
    out = np.full(len(gaps), -1, np.int64)
    if not len(gaps) or not len(ops):
        return out
    opid = ops["pid"].to_numpy(np.int64)
    odev = ops["device"].to_numpy(np.int64)
    ots = ops["ts"].to_numpy(np.int64)
    for (pid, dev), idx in gaps.groupby(["pid", "device"], sort=False).indices.items():
        sel = np.flatnonzero((opid == pid) & (odev == dev))
        order = sel[np.argsort(ots[sel], kind="stable")]
        k = np.searchsorted(ots[order], gaps["end"].to_numpy(np.int64)[idx], side="left")
        k = np.clip(k, 0, len(order) - 1)
        out[idx] = op_step[order[k]]
    return out


def _step_idle(step_tab: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    n = len(step_tab)
    k = gaps["step_index"].to_numpy(np.int64)
    m = k >= 0
    step_tab = step_tab.copy()
    step_tab["idle_ns"] = _sum_by(k[m], gaps["duration"].to_numpy(np.int64)[m], n)
    step_tab["gaps"] = np.bincount(k[m], minlength=n)[:n].astype(np.int64)
    step_tab["idle_in_span_ns"] = steps_mod.idle_in_span(step_tab, gaps)
    for c in attr_mod.CPU_CATEGORIES:
        step_tab[f"idle_{c}"] = _sum_by(k[m], gaps[f"cpu_{c}"].to_numpy(np.int64)[m], n)
    lead = steps_mod.queued_lead(step_tab, gaps)
    starved = steps_mod.starved_in_window(step_tab, gaps)
    # the GPU held a step's work before its first op started: its time; it waited on the
    # host inside its window: not its time
    if lead.any() or starved.any():
        step_tab = steps_mod.program_columns(step_tab, step_tab["busy_max_ns"].to_numpy(), lead,
                                             starved, step_tab["busy_seen_ns"].to_numpy())
    return step_tab


def _sum_by(k: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    if len(v) and int(np.abs(v).max()) * len(v) < 2**53:
        # every partial sum is an integer a double holds exactly: bincount is exact
        return np.bincount(k, weights=v, minlength=n)[:n].astype(np.int64)
    out = np.zeros(n, np.int64)
    np.add.at(out, k, v)
    return out


def _devices(ops: pd.DataFrame, gaps: pd.DataFrame, meta: TraceMeta, win=None) -> pd.DataFrame:
    """Per (pid, device): its window, busy and idle ns.

    The window is the analysis window when it comes from steps (or --window), else
    the device's active span (first to last GPU op).
    """
    cols = ["pid", "device", "window_start", "window_end", "window_ns", "busy_ns", "idle_ns",
            "gaps", "name"]
    if not len(ops):
        return pd.DataFrame({c: pd.Series([], dtype=object if c == "name" else np.int64)
                             for c in cols})
    g = ops.groupby(["pid", "device"], sort=True)
    d = pd.DataFrame({"window_start": g["ts"].min(), "window_end": g["end"].max()}).reset_index()
    if win is not None and win.mode != "whole_trace":
        d["window_start"] = np.minimum(d["window_start"].to_numpy(np.int64), win.start)
        d["window_end"] = np.maximum(d["window_end"].to_numpy(np.int64), win.end)
    d["window_ns"] = d["window_end"] - d["window_start"]
    if len(gaps):
        idle = gaps.groupby(["pid", "device"])["duration"].agg(["sum", "size"]).reset_index()
        idle.columns = ["pid", "device", "idle_ns", "gaps"]
        d = d.merge(idle, on=["pid", "device"], how="left")
    else:
        d["idle_ns"] = 0
        d["gaps"] = 0
    d["idle_ns"] = d["idle_ns"].fillna(0).astype(np.int64)
    d["gaps"] = d["gaps"].fillna(0).astype(np.int64)
    d["busy_ns"] = d["window_ns"] - d["idle_ns"]
    names = {int(x.get("device", -1)): str(x.get("name", "")) for x in meta.devices
             if isinstance(x, dict)}
    d["name"] = [names.get(int(v), "") for v in d["device"]]
    for c in cols[:-1]:
        d[c] = d[c].astype(np.int64)
    return d[cols]


def _classes(ev: pd.DataFrame) -> pd.DataFrame:
    # time_by_class classifies each (name, kind) of the GPU ops once
    return time_by_class(ev)
