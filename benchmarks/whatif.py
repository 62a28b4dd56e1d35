"""``whatif``: the levers' promises against what the change realised, and what pricing costs.

Two tables, each from fresh processes on this checkout (``--baseline`` sides too):

* **promised vs realised** per before/after pair (tests/fixtures/gpu, h200: H100/H200
  traces; tests/fixtures/pairs: CPU traces with unprofiled truth): the lever the traces show
  pulled, BEFORE's replay saving for it (``diffs/proof.py``) and the realised saving per
  step -- for a CPU pair in shares of the step against the unprofiled truth (the profiler's
  per-op cost inflates a CPU trace's steps), with the truth's worker count for ``workers``;
  the error, and the median and worst of them;
* **replay + levers vs analyze** per trace (``--trace``, default: the largest pair traces):
  ``analyze`` end to end, then, on the same window, the replay alone (``passes.replay.run``:
  graph + unmodified replay + critical path) and the levers (``whatif.price_models``: the
  host stretches cut at their ops, every model replayed once) -- their share of analyze, by
  wall time and by CPU time (analyze's side-pass workers counted: on a loaded machine the
  CPU share is the steadier one). Each figure is the lowest of the repeats, the share too
  (the lowest per-run share, not a ratio of lowest figures).

    python -m benchmarks whatif [--trace T ...] [--repeat N] [--costs-only]
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from . import harness as h

FIX = h.REPO / "tests" / "fixtures"
GPU_PAIRS = [("gpu", s, "bad", "fixed") for s in
             ("data", "sync", "copy", "launch", "host", "compile", "alloc", "graphs")] + \
            [("h200", s, "bad", "fixed") for s in ("pageable", "queue")]
CPU_PAIRS = [("pairs", s, "before", "after") for s in
             ("workers", "compile", "fused_opt", "batch", "item")]
TRACES = [FIX / "gpu" / "compile.bad.json.gz", FIX / "h200" / "xformer.bad.json.gz",
          FIX / "h200" / "queue.bad.json.gz"]


def add_args(ap) -> None:
    ap.add_argument("--trace", type=Path, action="append", default=None,
                    help="a trace to time replay + levers on (repeatable)")
    ap.add_argument("--repeat", "--reps", type=int, default=3, dest="repeat")
    ap.add_argument("--costs-only", action="store_true",
                    help="only the replay + levers vs analyze table (skip the pairs)")
    h.add_side_args(ap)


def main(args) -> int:
    traces = [str(t) for t in (args.trace or TRACES)]
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        pairs = {} if args.costs_only else {s.name: h.probe(s, promises) for s in sides}
        runs = h.interleave(traces, sides, args.repeat, lambda t, s: h.probe(s, costs, t))
    for name, r in pairs.items():
        print(f"### promised vs realised ({name})\n")
        if not r.ok:
            print(f"failed: {r.err}\n")
            continue
        print(_pair_table(r.result["rows"]) + "\n")
    table = h.Table(sides, "trace / figure")
    for t in traces:
        got = {s.name: h.best(runs[(t, s.name)]) for s in sides}
        label = Path(t).name
        for key, what in (("analyze_s", "analyze"), ("replay_s", "replay (graph + replay + "
                                                                  "critical path)"),
                          ("levers_s", "levers (cut + every model replayed)")):
            table.add(f"{label}: {what}",
                      {n: r.result.get(key) if r else None for n, r in got.items()})
        table.add(f"{label}: replay + levers / analyze",
                  {n: r.result.get("share") if r else None for n, r in got.items()},
                  fmt=lambda x: f"{100 * x:.1f}%")
        for key, what in (("analyze_cpu_s", "analyze CPU (with its side-pass workers)"),
                          ("replay_levers_cpu_s", "replay + levers CPU")):
            table.add(f"{label}: {what}",
                      {n: r.result.get(key) if r else None for n, r in got.items()})
        table.add(f"{label}: replay + levers / analyze (CPU)",
                  {n: r.result.get("share_cpu") if r else None for n, r in got.items()},
                  fmt=lambda x: f"{100 * x:.1f}%")
        table.add(f"{label}: nodes, steps replayed",
                  {n: f"{r.result.get('nodes')} nodes, {r.result.get('steps')} steps"
                   if r else None for n, r in got.items()}, fmt=str)
    print(table.markdown())
    return 0


def _pair_table(rows: list[dict]) -> str:
    out = ["| pair | lever (model) | promised | realised | error |", "|---|---|---|---|---|"]
    errs = []
    for r in rows:
        if r.get("promised") is None:
            out.append(f"| {r['pair']} | {r.get('levers') or '—'} | — | — | {r.get('note', '')} |")
            continue
        err = r.get("error")
        if err is not None and r.get("counted", True):
            errs.append(abs(err))
        out.append(f"| {r['pair']} | {r['levers']} | {r['promised']} | {r['realised']} | "
                   + ("—" if err is None else f"{100 * err:+.1f}%")
                   + (f" ({r['note']})" if r.get("note") else "") + " |")
    if errs:
        out.append(f"\nmedian |error| {100 * statistics.median(errs):.1f}%, worst "
                   f"{100 * max(errs):.1f}% over {len(errs)} pairs")
    return "\n".join(out)


# -- probes ------------------------------------------------------------------------------

def promises() -> dict:
    """Probe: one row per pair."""
    import traceread
    from traceread.diffs.proof import proof
    from traceread.diffs.trace import diff_analyses
    from traceread.passes.replay import whatif as W

    truth = json.loads((FIX / "pairs" / "truth.json").read_text())
    rows = []
    for folder, name, b, a in GPU_PAIRS + CPU_PAIRS:
        pb, pa = FIX / folder / f"{name}.{b}.json.gz", FIX / folder / f"{name}.{a}.json.gz"
        if not pb.exists() or not pa.exists():
            continue
        before, after = traceread.analyze(str(pb)), traceread.analyze(str(pa))
        d = diff_analyses(before, after)
        p = proof(before, after, d)
        row = {"pair": f"{folder}/{name}"}
        if p is None or p["promised_ns"] is None:
            row.update(promised=None, note="no lever change found in the traces"
                       if p is None else f"not priced ({p.get('not_replayed')})")
            rows.append(row)
            continue
        row["levers"] = ", ".join(p["levers"])
        if folder != "pairs":
            row.update(promised=_ms(p["promised_ns"]), realised=_ms(p["realised_ns"]),
                       error=(p["promised_ns"] - p["realised_ns"]) / p["realised_ns"])
        else:
            t = truth[name]
            promised = p["promised_ns"] / p["replay_before_ns"]
            if "num_workers" in t:   # the change's own worker count (not in the traces)
                g, _ = W.graph_of(before)
                r = W.replay_models(g, W.facts_from_analysis(before), p["levers"],
                                    {"workers": {"workers": t["num_workers"]["after"]}})
                promised = r["saves_ns"] / r["before_ns"]
            sb, sa = t["step_ns"]["before"], t["step_ns"]["after"]
            x = t.get("batch", {}).get("after", 1) / t.get("batch", {}).get("before", 1)
            realised = (sb - sa / x) / sb
            row.update(promised=f"{100 * promised:.1f}% of the step",
                       realised=f"{100 * realised:.1f}% (unprofiled)")
            if abs(realised) < 0.02:
                row.update(error=None, note="nothing to realise on a CPU: both ~0")
            else:
                row["error"] = (promised - realised) / realised
        if p["refused"]:
            row["note"] = "; ".join(f"{k}: {v}" for k, v in p["refused"].items())
        rows.append(row)
    return {"rows": rows}


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.2f} ms"


def costs(trace: str) -> dict:
    """Probe: analyze's wall time, then the replay and the levers alone on its window."""
    import traceread
    from traceread.passes import replay as R
    from traceread.passes import steps as S
    from traceread.passes import window as Wm
    from traceread.passes.replay import whatif as W

    import resource

    def cpu() -> float:   # this process and the side-pass workers it waited for
        return time.process_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + \
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime

    t, c = time.perf_counter(), cpu()
    a = traceread.analyze(trace)
    t_an, c_an = time.perf_counter() - t, cpu() - c
    w = a.window
    ev = a.trace.events if w.mode == "whole_trace" else Wm.slice_events(a.trace.events,
                                                                         w.start, w.end)
    ops = S.gpu_ops(ev, positive_ts=a.meta.format == "nsys")
    t, c = time.perf_counter(), time.process_time()
    graph, _, res = R.run(ev, ops, a.steps, step_pattern=a.step_pattern or None)
    t_rep, c_rep = time.perf_counter() - t, time.process_time() - c
    if graph is None:
        return {"skip": f"not replayable: {res.get('reason')}"}
    from traceread.passes.replay.split import optimizer_regions, priced_graph, within

    ctx = dict(a.context, steps=len(a.steps), step_mean_ns=(a.step_stats or {}).get("mean_ns"))
    t, c = time.perf_counter(), time.process_time()
    g = priced_graph(graph, ev, a.step_pattern or None)
    W.price_models(g, ctx, a.copies, optimizer_regions(within(ev, g)))
    t_lev, c_lev = time.perf_counter() - t, time.process_time() - c
    return {"analyze_s": t_an, "replay_s": t_rep, "levers_s": t_lev,
            "share": (t_rep + t_lev) / t_an, "analyze_cpu_s": c_an,
            "replay_levers_cpu_s": c_rep + c_lev, "share_cpu": (c_rep + c_lev) / c_an,
            "nodes": int(len(graph.nodes)),
            "steps": int(len(graph.steps))}
