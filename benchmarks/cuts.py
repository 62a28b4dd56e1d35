"""``cuts``: the CPU of the passes issue 42's speed rounds cut, one trace, in process, vs baselines.

Each side loads the trace once in a fresh process, then times (CPU seconds, best of
``--inner`` calls) the functions whose cost a round changed, on the same inputs every
side builds through its own code: ``kind_in`` over the window's kind sets the passes ask
most, validate's far-from-trace rule, the what-if pricing of every model on the levers'
graph (``price_models``, its caches emptied first), the profiler's marks on that graph
(``overhead.mark``), the overhead estimate's features, the comm calls of the layout
pass, the optimizer regions of the levers' graph's events, the levers' graph itself
(``priced_graph``), the replay's critical path, the steps' anatomy, the launch calls'
pattern over the window's runtime calls, the capture model alone and the pricing followed by
the joint replay of the models it applied (round 6), the replay's result, the recording's end
and the comm passes (round 7), and ``analyze`` itself. Sides
run in interleaved rounds (``--repeat``), the least CPU kept; the table gives each
baseline over this checkout (``2.00×``: the baseline takes twice the CPU).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import harness as h

# the kind sets the passes ask most of the window (an instrumented analyze of the 247 MB
# trace: 117 kind_in calls, these 10 sets are 80 of them)
KIND_SETS = [("runtime", "driver"), ("kernel", "memcpy", "memset", "graph"), ("cpu_op",),
             ("memcpy",), ("kernel",), ("cpu_op", "annotation", "python"), ("graph",),
             ("annotation", "cpu_op"), ("python", "cpu_op"),
             ("runtime", "driver", "cpu_op", "annotation", "python", "osrt")]


def add_args(ap) -> None:
    ap.add_argument("trace", help="the trace (e.g. /tmp/speed/big.json, 247 MB tiled)")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds (best is kept)")
    ap.add_argument("--inner", type=int, default=3, help="calls per function per round")
    h.add_side_args(ap)


ROWS = [("kind_in", "kind_in × 10 kind sets (window)"),
        ("far_from_trace", "validate: far-from-trace rule"),
        ("price_models", "what-if pricing (price_models, 18 models)"),
        ("mark", "profiler marks on the levers' graph (overhead.mark)"),
        ("features", "overhead estimate's features"),
        ("comm_calls", "layout: comm_calls"),
        ("optimizer_regions", "optimizer regions (within + regions)"),
        ("priced_graph", "levers' graph: sample, split (priced_graph)"),
        ("critical_path", "critical path of the replay (critical_path)"),
        ("step_anatomy", "steps' anatomy (step_anatomy)"),
        ("launch_calls", "kernel launch calls by name (kernel_launch_calls)"),
        ("capture", "CUDA-graph capture model alone (cuda_graphs on the levers' graph)"),
        ("price_together", "what-if pricing, then the levers together (price + together)"),
        ("replay_result", "replay's result: program steps + critical path (result)"),
        ("recording_end", "recording's end, asked twice (recording_end)"),
        ("comm", "comm overlap + collectives' summary"),
        ("analyze", "analyze (in process, trace loaded)")]


def main(args) -> int:
    trace = str(Path(args.trace).resolve())
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        env = {"TRACEREAD_WORKERS": "1"}
        runs = h.interleave([trace], sides, args.repeat,
                            lambda t, side: h.probe(side, cut_cpu, t, args.inner, env=env))
    best = {s.name: h.best(runs[(trace, s.name)]) for s in sides}
    for s in sides:
        if best[s.name] is None:
            print(f"{s.name}: failed: {h.failure(runs[(trace, s.name)])}")
    table = h.Table(sides)
    for key, label in ROWS:
        table.add(f"{label}: CPU", {n: r.result.get(key) if r else None
                                    for n, r in best.items()}, h.fmt_s)
    print(f"{Path(trace).name} (best of {args.repeat} rounds x {args.inner} calls, 1 "
          f"worker; load {h.load()}):\n\n{table.markdown()}")
    same = {n: r.result.get("digest") == best[sides[0].name].result.get("digest")
            for n, r in best.items() if r and best[sides[0].name]}
    print("\nsame results as this checkout (prices, marks, features, comm calls, regions, "
          f"levers' graph, critical path, anatomy, launch calls, capture, together, replay result, "
          f"recording end, comm): {same}")
    return 0


def _cpu(fn, inner: int) -> tuple[float, object]:
    """(least CPU seconds of ``inner`` calls of ``fn``, its last result)."""
    best, out = None, None
    for _ in range(inner):
        t = time.process_time()
        out = fn()
        t = time.process_time() - t
        best = t if best is None else min(best, t)
    return best, out


def cut_cpu(path: str, inner: int) -> dict:
    """Probe: CPU seconds of each cut function on this side's code (see module doc)."""
    import hashlib
    import json

    import numpy as np

    import traceread
    from traceread.analysis import analyze
    from traceread.passes import overhead, parallelism
    from traceread.passes import window as window_mod
    from traceread.passes.common import kind_in
    from traceread.passes.replay import split, whatif
    from traceread.readers import validate as val

    tr = traceread.load(path)
    out: dict = {}
    out["analyze"], a = _cpu(lambda: analyze(tr), 1)
    ev = tr.events
    if a.window.mode != "whole_trace":
        ev = window_mod.slice_events(ev, a.window.start, a.window.end)
    out["kind_in"], _ = _cpu(lambda: [kind_in(ev, k) for k in KIND_SETS], inner)
    ts = tr.events["ts"].to_numpy(np.int64)
    dur = tr.events["dur"].to_numpy(np.int64)
    end = ts + np.maximum(dur, 0)
    out["far_from_trace"], far = _cpu(lambda: val._far_from_trace(ts, end, dur), inner)
    digest = {"far": int(far.sum())}
    g = a.facts.graph if a.facts is not None else None
    if g is None or a.replay_graph is None:   # nothing replayed: the levers' cuts not timed
        out["digest"] = hashlib.sha256(json.dumps(digest).encode()).hexdigest()[:16]
        return out
    regions = a.facts.frames.get("optimizer_regions")

    def price():
        whatif._LAST.clear()
        whatif._MEMO.clear()
        return whatif.price_models(g, a.context, a.copies, regions)
    out["price_models"], priced = _cpu(price, inner)
    digest["prices"] = {k: (v["after_ns"], sorted(v["refused"])) for k, v in
                        priced["models"].items()}
    bare = split.priced_graph(a.replay_graph, ev, a.step_pattern or None)
    out["mark"], marked = _cpu(lambda: overhead.mark(bare, ev), inner)
    digest["marks"] = int(marked.nodes["profiler_ns"].sum())
    steps = len(a.steps) if a.step_stats else 0
    out["features"], feat = _cpu(lambda: overhead.cost_features(ev, max(1, steps)), inner)
    digest["features"] = feat
    out["comm_calls"], cc = _cpu(lambda: parallelism.comm_calls(ev), inner)
    digest["comm_calls"] = [len(cc), int(cc["row"].sum()) if len(cc) else 0]
    out["optimizer_regions"], reg = _cpu(
        lambda: split.optimizer_regions(split.within(ev, bare)), inner)
    digest["regions"] = reg.to_dict("list")
    out["priced_graph"], pg = _cpu(
        lambda: split.priced_graph(a.replay_graph, ev, a.step_pattern or None), inner)
    digest["priced_graph"] = [len(pg.nodes), int(pg.nodes["cost_ns"].sum()), len(pg.edges)]
    _round5(out, digest, a, ev, inner)
    out["digest"] = hashlib.sha256(json.dumps(digest, sort_keys=True, default=str)
                                   .encode()).hexdigest()[:16]
    return out


def _round5(out: dict, digest: dict, a, ev, inner: int) -> None:
    """Round 5's cuts: the critical path (its lane and label lookups), the steps' anatomy
    (its host rows' dims mask), the launch calls' pattern per distinct name."""
    from traceread.passes import anatomy
    from traceread.passes.replay import critical
    from traceread.passes.replay.graph import kernel_launch_calls, str_at
    from traceread.passes.replay.sim import simulate
    from traceread.passes.common import rows_of

    g = a.replay_graph
    sched = simulate(g)
    out["critical_path"], cp = _cpu(lambda: critical.critical_path(g, sched), inner)
    digest["critical_path"] = [cp["total_ns"], cp["by_label"], cp["top"]]
    out["step_anatomy"], an = _cpu(lambda: anatomy.step_anatomy(ev), inner)
    digest["step_anatomy"] = an
    names = str_at(ev["name"], rows_of(ev, ("runtime", "driver")))
    out["launch_calls"], lc = _cpu(lambda: kernel_launch_calls(names), inner)
    digest["launch_calls"] = int(lc.sum())
    _round6(out, digest, a, inner)


def _round6(out: dict, digest: dict, a, inner: int) -> None:
    """Round 6's cuts: the capture model (its runs per step and lane, the runs' drains at
    once) alone on the levers' graph; the pricing followed by the joint replay of the models
    it applied, as the verdict's ``together`` asks it (the pricing's answers kept for it)."""
    from traceread.passes.replay import whatif

    g = a.facts.graph
    regions = a.facts.frames.get("optimizer_regions")
    facts = whatif.Facts(ctx=a.context, device=a.context.get("device") or {},
                         copies=dict(a.copies or {}), **whatif.regions_of(regions))

    def capture():
        whatif.forget()
        return whatif.replay_models(g, facts, ["cuda_graphs"])
    out["capture"], cap = _cpu(capture, inner)
    digest["capture"] = [cap["after_ns"], sorted(cap["refused"])]

    def price_together():
        whatif.forget()
        p = whatif.price_models(g, a.context, a.copies, regions)
        ids = [m for m, r in p["models"].items() if r["applied"] and m != "larger_batch"]
        return whatif.replay_models(p["graph"], p["facts"], ids, before_ns=p["before_ns"])
    out["price_together"], tog = _cpu(price_together, inner)
    digest["together"] = [tog["after_ns"], tog["applied"], sorted(tog["refused"])]
    whatif.forget()
    _round7(out, digest, a, inner)


def _round7(out: dict, digest: dict, a, inner: int) -> None:
    """Round 7's cuts: the replay's JSON result (its three askers of the steps' windows),
    the recording's end as the window and the steps ask it, the comm overlap with the
    collectives' summary (one comm / compute split where a side has ``comm_and_collectives``)."""
    from traceread.passes import nccl, steps
    from traceread.passes import replay as replay_mod
    from traceread.passes.replay.sim import simulate

    g = a.replay_graph
    sched = simulate(g)
    out["replay_result"], res = _cpu(lambda: replay_mod.result(g, sched), inner)
    digest["replay_result"] = [res["measured_ns"], res["replayed_ns"], res["error_pct"],
                               res["critical_path"]["total_ns"]]
    ev = a.trace.events
    out["recording_end"], rec = _cpu(lambda: [steps.recording_end(ev) for _ in range(2)], inner)
    digest["recording_end"] = rec

    def comm():
        both = getattr(nccl, "comm_and_collectives", None)
        if both is not None:
            return both(ev)
        return nccl.comm_overlap(ev), nccl.collective_summary(ev)
    out["comm"], (ov, summ) = _cpu(comm, inner)
    digest["comm"] = [ov.to_dict("list"), summ.to_dict("list")]
