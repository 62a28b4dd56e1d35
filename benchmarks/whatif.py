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

* **validation** (``--validate``; docs/analysis.md "Validation"), from this checkout only:
  (a) every recorded pair -- Kineto and nsys captures of the GPU pairs, the CPU pairs --:
  the change the traces show applied to BEFORE's graph, priced without the profiler where
  it is material (passes/overhead.py); the promise and the realised saving in points of
  BEFORE's step (realised on the unprofiled timings where the pair recorded them, else on
  the profiled steps), the AFTER step predicted (BEFORE's mean step x the replay's after /
  before) against AFTER's measured mean step, and whether BEFORE's first lever is one of
  the change's; (b) every trace's steps each held out and predicted from the others
  (passes/replay/holdout.py: from its graph and the other steps' times) against the median
  of the other steps, per trace better / tie / worse; (c) per GPU scenario, the promise for
  the same change on the Kineto and the nsys capture of the BAD run; (d) the profiler's
  overhead estimate against the plain runs. ``--tables b`` (any of abcd) prints only those:
  every trace is analysed once either way, the pairs are priced only for (a) and (c).

    python -m benchmarks whatif [--trace T ...] [--repeat N] [--costs-only]
                                [--validate [--tables abcd]]
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
CPU_NAMES = ("workers", "compile", "fused_opt", "batch", "item", "persist", "ckpt", "accum",
             "valid", "log", "zero", "save")
CPU_PAIRS = [("pairs", s, "before", "after") for s in CPU_NAMES]
TRACES = [FIX / "gpu" / "compile.bad.json.gz", FIX / "h200" / "xformer.bad.json.gz",
          FIX / "h200" / "queue.bad.json.gz"]


def add_args(ap) -> None:
    ap.add_argument("--trace", type=Path, action="append", default=None,
                    help="a trace to time replay + levers on (repeatable)")
    ap.add_argument("--repeat", "--reps", type=int, default=3, dest="repeat")
    ap.add_argument("--costs-only", action="store_true",
                    help="only the replay + levers vs analyze table (skip the pairs)")
    ap.add_argument("--validate", action="store_true",
                    help="only the validation tables (pairs, held-out steps, nsys vs Kineto)")
    ap.add_argument("--tables", default="abcd",
                    help="with --validate: which tables, e.g. 'b' (held-out steps only) or 'ac' "
                         "(default: abcd)")
    h.add_side_args(ap)


def main(args) -> int:
    if args.validate:
        tables = "".join(c for c in "abcd" if c in args.tables.lower())
        if not tables:
            print(f"--tables: none of a, b, c, d in {args.tables!r}")
            return 2
        r = h.probe(h.this_side(), validate, tables)
        if not r.ok:
            print(f"failed: {r.err}")
            return 1
        print(validation_tables(r.result))
        return 0
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


# -- validation (--validate) ---------------------------------------------------------------

NSYS = ("data", "sync", "copy", "launch", "host", "compile", "alloc", "graphs")
VAL_PAIRS = [("gpu", s_, "bad", "fixed", "kineto") for s_ in NSYS] + \
    [("gpu", s_, "bad", "fixed", "nsys") for s_ in NSYS] + \
    [("h200", s_, "bad", "fixed", "kineto") for s_ in ("pageable", "queue", "cold")] + \
    [("h200", s_, "bad", "fixed", "nsys") for s_ in ("pageable", "queue", "cold")] + \
    [("pairs", s_, "before", "after", "kineto") for s_ in CPU_NAMES] + \
    [("cpu", "batch", "batch16", "batch256", "kineto")]


MIN_REALISED_PTS = 1.0   # as verdict.scores.MIN_ACTION_SHARE: under 1% of the step is no lever


def _path(folder, name, variant, fmt, tmp: Path) -> Path | None:
    """The trace of one side: the Kineto JSON, or the nsys capture decompressed into tmp."""
    import lzma

    stem = f"{name}.{variant}" if folder != "cpu" else variant
    if fmt == "kineto":
        p = FIX / folder / f"{stem}.json.gz"
        return p if p.exists() else None
    xz = FIX / folder / f"{stem}.sqlite.xz"
    if not xz.exists():
        return None
    out = tmp / f"{folder}.{stem}.sqlite"
    if not out.exists():
        out.write_bytes(lzma.open(xz).read())
    return out


def _unprofiled(folder, name, variant, nsys=None) -> float | None:
    """The unprofiled step of one side where the pair recorded it: the plain run's loop
    time per step (back-to-back steps, one sync at the end) where recorded; else the later
    of the plain run's host step (the median after the first two) and its GPU's window per
    step, read from the nsys capture of that same run (``nsys``: a callable giving its
    analysis) -- a host that runs ahead finishes its steps before the GPU does, so the host
    alone undercounts the program's step (h200/queue.fixed: 10.69 ms host, 11.57 ms GPU);
    the truth's step for the CPU pairs."""
    if folder in ("gpu", "h200"):
        p = FIX / folder / f"{name}.{variant}.plain.truth.json"
        if not p.exists():
            return None
        t = json.loads(p.read_text())
        if t.get("loop_ns_per_step"):
            return float(t["loop_ns_per_step"])
        host = float(statistics.median(v for k, v in t["step_ns"].items() if int(k) >= 2))
        gpu = _gpu_window(nsys() if nsys else None)
        return max(host, gpu) if gpu else host
    if folder == "pairs":
        t = json.loads((FIX / "pairs" / "truth.json").read_text()).get(name, {})
        side = "before" if variant == "before" else "after"
        return float(t["step_ns"][side]) if "step_ns" in t else None
    return None


def _gpu_window(a) -> float | None:
    """The median GPU window per step (first start to last end of the step's GPU work)
    over the steps after the first two, from an analysis of the plain run's capture."""
    st = getattr(a, "steps", None) if a is not None else None
    if st is None or "gpu_ns" not in st:
        return None
    import pandas as pd

    n = st["name"].astype(str).str.extract(r"step_(\d+)$", expand=False)
    keep = n.notna() & (pd.to_numeric(n, errors="coerce") >= 2)
    return float(st.loc[keep, "gpu_ns"].median()) if keep.any() else None


def validate(tables: str = "abcd") -> dict:
    """Probe: the validation tables' rows, for the ``tables`` asked (letters a-d): the pairs
    are priced only for (a) and (c), every trace is analysed once and shared."""
    import traceread
    from traceread.diffs.proof import changed, signature
    from traceread.diffs.trace import diff_analyses
    from traceread.passes.replay import holdout as H
    from traceread.passes.replay import whatif as W

    cache: dict = {}
    rows, loso, same = [], [], {}
    with tempfile.TemporaryDirectory(prefix="trval-") as tmp:
        def analysis(path):
            if path not in cache:
                cache[path] = traceread.analyze(str(path))
            return cache[path]

        for folder, name, b, a, fmt in VAL_PAIRS:
            pb, pa = (_path(folder, name, v, fmt, Path(tmp)) for v in (b, a))
            if pb is None or pa is None:
                continue
            before, after = analysis(pb), analysis(pa)
            if "a" not in tables and "c" not in tables:
                continue
            def plain(v, folder=folder, name=name):   # the nsys capture of that plain run
                return _nsys_of(folder, name, v, Path(tmp), analysis)

            row = _pair_row(before, after, folder, name, b, a, fmt, W, changed, signature,
                            diff_analyses, plain)
            rows.append(row)
            if folder in ("gpu", "h200") and row.get("levers"):
                same.setdefault(name, {})[fmt] = row
        for path, a in cache.items() if "b" in tables else ():
            g = a.replay_graph
            if g is None:
                g, _ = W.graph_of(a)
            rows_ = H.leave_one_out(g) if g is not None else []
            sc = H.score(rows_)
            note = "no graph" if g is None else (
                f"{len(rows_)} steps: too few to score (fewer than {H.MIN_STEPS})"
                if len(rows_) < H.MIN_STEPS else "no prediction")
            p_ = Path(str(path))   # an nsys capture's name carries its folder already
            label = p_.name if p_.suffix == ".sqlite" else f"{p_.parent.name}/{p_.name}"
            loso.append({"trace": label, **(sc or {"note": note})})
        nk = []
        for name, by in sorted(same.items()) if "c" in tables else ():
            k = by.get("kineto")
            n = by.get("nsys")
            if not k or not n:
                continue
            # the same change (the Kineto pair's) priced on the nsys capture of the bad run
            nb = analysis(_path(k["folder"], name, "bad", "nsys", Path(tmp)))
            other, refused = _promise(nb, k["levers_ids"], k.get("params") or {}, W)
            nk.append({"pair": f"{k['folder']}/{name}", "levers": k["levers"],
                       "kineto_pts": k["promise_pts"], "nsys_pts": other,
                       "nsys_refused": refused})
        over = []
        for path, a in list(cache.items()) if "d" in tables else ():
            p_ = Path(str(path))
            if not p_.name.endswith(".json.gz") or p_.parent.name not in ("gpu", "h200"):
                continue
            name, variant = p_.name[:-len(".json.gz")].split(".", 1)
            truth = _unprofiled(p_.parent.name, name, variant, lambda f=p_.parent.name, n=name,
                                v=variant: _nsys_of(f, n, v, Path(tmp), analysis))
            o = a.facts.figures.get("profiler_overhead") if a.facts is not None else None
            if truth and o:
                over.append({"trace": f"{p_.parent.name}/{name}.{variant}", "truth_ns": truth,
                             "profiled_ns": o["profiled_step_ns"],
                             "estimate_ns": o["unprofiled_step_ns"], "basis": o["basis"]})
    return {"pairs": rows, "loso": loso, "nsys_kineto": nk, "overhead": over,
            "tables": tables}


def _nsys_of(folder, name, variant, tmp, analysis):
    """The analysis of a side's nsys capture (the plain run), or None."""
    q = _path(folder, name, variant, "nsys", tmp)
    return analysis(q) if q is not None else None


def _promise(before, ids, params, W):
    """(the promise of the models ``ids`` on BEFORE, in points of its replayed step --
    without the profiler where that is material -- or None; the models refused: why)."""
    g, why = W.graph_of(before)
    if g is None:
        return None, {"all": why}
    base, _, _ = W.unprofiled_base(g)
    r = W.replay_models(base, W.facts_from_analysis(before), ids, params)
    pts = round(100.0 * r["saves_ns"] / r["before_ns"], 1) if r["applied"] and \
        r["before_ns"] else None
    return pts, r["refused"]


def _pair_row(before, after, folder, name, b, a, fmt, W, changed, signature, diff_analyses,
              plain=None):
    from traceread.verdict.anatomy import anatomy_changes

    d = diff_analyses(before, after)
    row = {"pair": f"{folder}/{name}", "folder": folder, "format": fmt}
    ch = changed(signature(before), signature(after), d.batch)
    # the step anatomy's changes, as diffs/proof.py reads them: the syncs a removed pass
    # took with it are not a drop_syncs of their own
    anat = anatomy_changes(before.context or {}, after.context or {})
    if any(x["sync_drop"] for x in anat):
        ch = [x for x in ch if x[0] != "drop_syncs"]
    if not ch and anat:
        return _anatomy_row(row, anat, before, after, folder, name, b, a, plain)
    if not ch:
        row["note"] = "no change found in the traces"
        return row
    ids = [m for m, _, _ in ch]
    params = {m: p for m, _, p in ch}
    if folder == "pairs":   # the change's own worker count (not in the traces)
        t = json.loads((FIX / "pairs" / "truth.json").read_text()).get(name, {})
        if "num_workers" in t:
            params["workers"] = {"workers": t["num_workers"]["after"]}
    row.update(levers=", ".join(ids), levers_ids=ids, params=params)
    g, why = W.graph_of(before)
    if g is None:
        row["note"] = f"not replayed: {why}"
        return row
    facts = W.facts_from_analysis(before)
    base, _, profiled = W.unprofiled_base(g)
    prof = W.replay_models(g, facts, ids, params)
    unp = W.replay_models(base, facts, ids, params) if profiled else prof
    if not unp["applied"]:
        row["note"] = "; ".join(f"{k}: {v}" for k, v in unp["refused"].items())
        return row
    x = float(unp.get("per_sample_x") or 1.0)
    row["promise_pts"] = round(100.0 * unp["saves_ns"] / unp["before_ns"], 1)
    row["unprofiled_base"] = bool(profiled)
    tb, ta = (_unprofiled(folder, name, v, (lambda v=v: plain(v)) if plain else None)
              for v in (b, a))
    mb, ma = _measured_step(before), _measured_step(after)
    k = x if x != 1.0 else (d.batch["after"] / d.batch["before"]
                            if d.batch and d.batch.get("before") and d.batch.get("after")
                            else 1.0)
    if tb and ta:
        row.update(realised_pts=round(100.0 * (tb - ta / k) / tb, 1), truth="unprofiled")
        if k == 1.0:   # AFTER's unprofiled step from BEFORE's and the promise, unrounded:
            # 0.05 points of gpu/compile's 647 ms step are 0.32 ms of its 0.62 ms AFTER
            pred_u = tb * (1 - unp["saves_ns"] / unp["before_ns"])
            row.update(after_u_pred_ms=round(pred_u / 1e6, 3), after_u_ms=round(ta / 1e6, 3),
                       after_u_err_pct=round(100.0 * (pred_u - ta) / ta, 1))
    elif mb and ma:
        row.update(realised_pts=round(100.0 * (mb - ma / k) / mb, 1), truth="profiled")
    if row.get("realised_pts") is not None:
        row["error_pts"] = round(row["promise_pts"] - row["realised_pts"], 1)
    if mb and ma and prof["applied"] and prof["before_ns"]:
        pred = mb * prof["after_ns"] / prof["before_ns"]
        row.update(after_pred_ms=round(pred / 1e6, 3), after_ms=round(ma / 1e6, 3),
                   after_err_pct=round(100.0 * (pred - ma) / ma, 1))
    # pinning every pageable copy includes pinning the reads (pin_read's model, pin_reads)
    _first_lever(row, before, set(ids) | ({"pin_reads"} if "pin_copies" in ids else set()))
    return row


def _anatomy_row(row, anat, before, after, folder, name, b, a, plain) -> dict:
    """A pair whose only changes are the step anatomy's (verdict/anatomy.py): the promise is
    BEFORE's own saving model for each (a bound read from its facts), priced on the anatomy
    without the profiler (passes/anatomy.without_profiler: each figure less the profiler's
    cost of the ops and frames inside it, as the replay rows are priced), in points of
    BEFORE's step without it; realised on the unprofiled truth where recorded."""
    from traceread.passes.anatomy import without_profiler
    from traceread.verdict.anatomy import anatomy_changes

    got = [x["promised_per_step_ns"] for x in anat if x["promised_per_step_ns"] is not None]
    ids = [x["lever"] for x in anat]
    row.update(levers=", ".join(ids), levers_ids=ids, params={}, basis="anatomy")
    mb, ma = _measured_step(before), _measured_step(after)
    if not got or not mb:
        row["note"] = "; ".join(f"{x['lever']}: no saving model" for x in anat)
        return row

    def unprofiled(x):
        c = dict(x.context or {})
        c["anatomy"] = without_profiler(c["anatomy"])
        return c
    cb = unprofiled(before)
    got_u = [x["promised_per_step_ns"] or 0 for x in anatomy_changes(cb, unprofiled(after))]
    row["promise_pts"] = round(100.0 * sum(got_u) / cb["anatomy"]["mean_step_ns"], 1)
    row["unprofiled_base"] = True
    tb, ta = (_unprofiled(folder, name, v, (lambda v=v: plain(v)) if plain else None)
              for v in (b, a))
    if tb and ta:
        row.update(realised_pts=round(100.0 * (tb - ta) / tb, 1), truth="unprofiled")
        pred_u = tb * (1 - row["promise_pts"] / 100)
        row.update(after_u_pred_ms=round(pred_u / 1e6, 3), after_u_ms=round(ta / 1e6, 3),
                   after_u_err_pct=round(100.0 * (pred_u - ta) / ta, 1))
    elif ma:
        row.update(realised_pts=round(100.0 * (mb - ma) / mb, 1), truth="profiled")
    if row.get("realised_pts") is not None:
        row["error_pts"] = round(row["promise_pts"] - row["realised_pts"], 1)
    if ma:
        pred = mb - sum(got)
        row.update(after_pred_ms=round(pred / 1e6, 3), after_ms=round(ma / 1e6, 3),
                   after_err_pct=round(100.0 * (pred - ma) / ma, 1))
    _first_lever(row, before, set(ids) | {f"{i}_cpu" for i in ids}, by_id=True)
    return row


def _first_lever(row, before, covers, by_id=False) -> None:
    """BEFORE's first lever, whether it is one of the change's (``covers``: model ids, or the
    lever ids themselves with ``by_id``) and where the change's own lever ranks."""
    from traceread.verdict.whatif import MODEL_OF

    acts = (before.verdict or {}).get("actions") or []
    key = (lambda x: x["id"]) if by_id else (lambda x: MODEL_OF.get(x["id"]))
    row["first"] = acts[0]["id"] if acts else None
    row["first_fixes"] = bool(acts) and key(acts[0]) in covers
    fix = [i for i, x in enumerate(acts) if key(x) in covers]
    row["fix_rank"], row["fix"] = (fix[0] + 1, acts[fix[0]]["id"]) if fix else (None, None)


def _measured_step(a) -> float | None:
    """A profiled side's mean step: the program's step (the later of the host's span and
    the GPU's work, per step) where the trace has one, else the host's steps."""
    from traceread.passes.steps import program_step_of

    p = program_step_of(a) or {}
    return p.get("mean_ns") or (a.step_stats or {}).get("mean_ns")


def _fix_note(x: dict) -> str:
    """Where the change's own lever ranked, when another one came first."""
    if x.get("first_fixes") or "fix_rank" not in x:
        return ""
    if x.get("fix_rank"):
        return f" ({x['fix']} #{x['fix_rank']})"
    return " (the change's lever not offered)"


def validation_tables(r: dict) -> str:
    """The validation's tables (those ``r["tables"]`` names) and their summaries, in
    markdown."""
    part = {}
    out = ["### (a) promised vs realised, every recorded pair (points of BEFORE's step)\n",
           "| pair | capture | change (models) | promise | realised | error | AFTER predicted "
           "/ measured (profiled) | AFTER predicted / run (unprofiled) | first lever |",
           "|---|---|---|---|---|---|---|---|---|"]
    errs, after_errs, firsts, after_u = [], [], [], []
    for x in r["pairs"]:
        if x.get("promise_pts") is None:
            out.append(f"| {x['pair']} | {x['format']} | {x.get('levers') or '—'} | — | — | "
                       f"{x.get('note', '')} | — | — | — |")
            continue
        real = "—" if x.get("realised_pts") is None else \
            f"{x['realised_pts']:+.1f} ({x['truth']})"
        err = "—" if x.get("error_pts") is None else f"{x['error_pts']:+.1f}"
        if x.get("error_pts") is not None:
            errs.append(abs(x["error_pts"]))
        aft = "—"
        if x.get("after_err_pct") is not None:
            after_errs.append(abs(x["after_err_pct"]))
            aft = f"{x['after_pred_ms']:.3f} / {x['after_ms']:.3f} ms ({x['after_err_pct']:+.1f}%)"
        aft_u = "—"
        if x.get("after_u_err_pct") is not None:
            after_u.append(abs(x["after_u_err_pct"]))
            aft_u = (f"{x['after_u_pred_ms']:.3f} / {x['after_u_ms']:.3f} ms "
                     f"({x['after_u_err_pct']:+.1f}%)")
        # a change that realised under MIN_REALISED_PTS fixed nothing: no lever should lead
        nothing = x.get("realised_pts") is not None and x["realised_pts"] < MIN_REALISED_PTS
        mark = " (n/a: the change realised under 1 point)" if nothing else \
            (" ✓" if x["first_fixes"] else " ✗") + _fix_note(x)
        if not nothing:
            firsts.append(x["first_fixes"])
        # the anatomy's promise is its phases model's (no bound)
        base = " (phases model, unprofiled base)" if x.get("basis") == "anatomy" else \
            " (unprofiled base)" if x.get("unprofiled_base") else ""
        out.append(f"| {x['pair']} | {x['format']} | {x['levers']} | "
                   f"{x['promise_pts']:+.1f}{base} | {real} | {err} | {aft} | {aft_u} | "
                   f"{x['first']}{mark} |")
    if errs:
        out.append(f"\n|promise - realised|: median {statistics.median(errs):.1f} points, "
                   f"worst {max(errs):.1f} points over {len(errs)} pairs (goal: 5 / 15); "
                   f"AFTER predicted: median |error| "
                   f"{statistics.median(after_errs) if after_errs else float('nan'):.1f}% "
                   f"(goal 10%), against the unprofiled runs "
                   f"{statistics.median(after_u) if after_u else float('nan'):.1f}% over "
                   f"{len(after_u)} pairs; the change's lever first on {sum(firsts)} of "
                   f"{len(firsts)} (pairs that realised under {MIN_REALISED_PTS:g} point "
                   f"not counted)")
    part["a"], out = out, []
    out += ["\n### (b) leave one step out (median |error| over the held-out steps)\n",
            "| trace | steps | replay | median of the other steps | outcome | closer on "
            "| mean |error| replay / baseline |", "|---|---|---|---|---|---|---|"]
    count = {"better": 0, "tie": 0, "worse": 0}
    by_mean = unscored = 0
    for x in r["loso"]:
        if "replay_error_pct" not in x:
            unscored += 1
            out.append(f"| {x['trace']} | — | — | — | {x.get('note', '')} | — | — |")
            continue
        outcome = x.get("outcome") or ("better" if x["beats_baseline"] else "worse")
        count[outcome] += 1
        mean_r, mean_b = x.get("replay_mean_error_pct"), x.get("baseline_mean_error_pct")
        by_mean += mean_r is not None and mean_r < mean_b
        out.append(f"| {x['trace']} | {x['steps']} | {x['replay_error_pct']:.2f}% | "
                   f"{x['baseline_error_pct']:.2f}% | {outcome} | "
                   f"{x.get('closer_steps', '—')} of {x['steps']} | "
                   + (f"{mean_r:.2f}% / {mean_b:.2f}%" if mean_r is not None else "—") + " |")
    tot = sum(count.values())
    if tot:
        out.append(f"\nthe replay beats the baseline on {count['better']} of {tot} traces "
                   f"({100 * count['better'] / tot:.0f}%; goal 80%), ties on {count['tie']}, "
                   f"is worse on {count['worse']}; by mean |error| it is better on {by_mean} of "
                   f"{tot}" + (f"; {unscored} trace(s) not scored" if unscored else ""))
    part["b"], out = out, []
    out += ["\n### (c) one run, two tracers: the same change priced on each capture of BAD\n",
            "| pair | change | Kineto | nsys | difference | refused on nsys |",
            "|---|---|---|---|---|---|"]
    diffs = []
    for x in r["nsys_kineto"]:
        k, n = x["kineto_pts"], x["nsys_pts"]
        dif = None if k is None or n is None else round(n - k, 1)
        if dif is not None:
            diffs.append(abs(dif))
        out.append(f"| {x['pair']} | {x['levers']} | {k if k is not None else '—'} | "
                   f"{n if n is not None else '—'} | "
                   f"{'—' if dif is None else f'{dif:+.1f}'} | "
                   + "; ".join(f"{m}: {w}" for m, w in (x.get("nsys_refused") or {}).items())
                   + " |")
    if diffs:
        within = sum(d_ <= 5 for d_ in diffs)
        out.append(f"\nwithin 5 points on {within} of {len(diffs)}; median |difference| "
                   f"{statistics.median(diffs):.1f}, worst {max(diffs):.1f} points")
    part["c"], out = out, []
    out += ["\n### (d) the unprofiled step: estimate vs the plain run (Kineto captures)\n",
            "| trace | profiled | estimate | unprofiled run | error of the estimate | "
            "error of the profiled step |", "|---|---|---|---|---|---|"]
    e_est, e_prof = [], []
    for x in r.get("overhead") or []:
        t = x["truth_ns"]
        a_, b_ = (x["estimate_ns"] - t) / t, (x["profiled_ns"] - t) / t
        e_est.append(abs(a_))
        e_prof.append(abs(b_))
        out.append(f"| {x['trace']} | {x['profiled_ns'] / 1e6:.3f} ms | "
                   f"{x['estimate_ns'] / 1e6:.3f} ms | {t / 1e6:.3f} ms | {100 * a_:+.1f}% | "
                   f"{100 * b_:+.1f}% |")
    if e_est:
        out.append(f"\nmedian |error|: estimate {100 * statistics.median(e_est):.1f}%, "
                   f"profiled step {100 * statistics.median(e_prof):.1f}%; mean "
                   f"{100 * statistics.mean(e_est):.1f}% vs {100 * statistics.mean(e_prof):.1f}%")
    part["d"] = out
    text = "\n".join(x for t in r.get("tables", "abcd") for x in part[t])
    return text.lstrip("\n")
