"""Fit CUPTI's cost per traced runtime / driver call (passes/overhead.py ``CALL_NS``) on the
Kineto captures that carry unprofiled timings (tests/fixtures/{gpu,h200}/*.plain.truth.json),
leave one pair out: for each pair, the costs are fitted on the other pairs' traces and that
pair's two traces are predicted with them. Prints, per trace, the estimate without per-call
costs (today's model), the in-sample fit and the leave-one-pair-out prediction.

    PYTHONPATH=src python scripts/fit_overhead.py [--cache DIR]

Each trace is analysed once (``--cache`` keeps the graphs between runs); a candidate is
the marked graph (``overhead.mark`` with those costs) replayed without the profiler.
"""
from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
PAIRS = [("gpu", s, "bad", "fixed") for s in
         ("data", "sync", "copy", "launch", "host", "compile", "alloc", "graphs")] + \
        [("h200", s, "bad", "fixed") for s in ("pageable", "queue", "cold")]


def plain_step(folder: str, stem: str) -> float | None:
    """The plain run's step: the median of its steps after the first two."""
    p = FIX / folder / f"{stem}.plain.truth.json"
    if not p.exists():
        return None
    st = json.loads(p.read_text())["step_ns"]
    return float(statistics.median(v for k, v in st.items() if int(k) >= 2))


def sample(folder: str, stem: str, cache: Path | None) -> dict | None:
    """One trace's marked graph, its runtime / driver calls, profiled step and truth."""
    c = cache / f"{folder}.{stem}.pkl" if cache else None
    if c is not None and c.exists():
        return pickle.loads(c.read_bytes())
    import traceread

    truth = plain_step(folder, stem)
    path = FIX / folder / f"{stem}.json.gz"
    if truth is None or not path.exists():
        return None
    a = traceread.analyze(str(path))
    o = (a.facts.figures if a.facts is not None else {}).get("profiler_overhead")
    g = a.facts.graph if a.facts is not None else None
    if not o or g is None or o["basis"] != "replay":
        return None
    ev = a.trace.events
    ev = ev[ev["kind"].isin(["cpu_op", "python", "runtime", "driver"]).to_numpy()]
    s = {"trace": f"{folder}/{stem}", "pair": f"{folder}/{stem.split('.')[0]}", "graph": g,
         "ev": ev[["kind", "name", "pid", "tid", "ts", "dur", "input_dims"]
                  if "input_dims" in ev else ["kind", "name", "pid", "tid", "ts", "dur"]],
         "profiled": o["profiled_step_ns"], "estimate": o["unprofiled_step_ns"], "truth": truth}
    if c is not None:
        c.write_bytes(pickle.dumps(s))
    return s


def predict(s: dict, call_ns: dict) -> float:
    """The unprofiled step with these per-call costs: the profiled step x (replay without
    the profiler / replay with it), as passes/overhead.py ``estimate`` with a replay."""
    from traceread.passes import overhead as O
    from traceread.passes.replay.sim import simulate
    from traceread.passes.replay.whatif import step_mean

    g = O.mark(s["graph"], s["ev"], call_ns)
    if "s0" not in s:
        s["s0"] = step_mean(simulate(g), g)
    bare = O.without(g)
    r = step_mean(simulate(bare), bare) / s["s0"]
    return s["profiled"] * min(1.0, max(0.0, r))


def main() -> int:
    from traceread.passes import overhead as O

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    samples = [x for f, n, b, a in PAIRS for v in (b, a)
               if (x := sample(f, f"{n}.{v}", args.cache)) is not None]
    memo: dict = {}

    def pred(s, c):
        k = (s["trace"], tuple(sorted(c.items())))
        if k not in memo:
            memo[k] = predict(s, c)
        return memo[k]

    pooled = O.fit_call_ns(samples, pred)
    print(f"in-sample (all pairs): {pooled}")
    print("| trace | profiled | today's estimate | in-sample | fitted without its pair "
          "(launch/driver/alloc/other ns) | leave-one-pair-out | unprofiled run | error today | "
          "error in-sample | error LOPO |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    e0, e1, e2 = [], [], []
    for r in O.leave_one_pair_out(samples, pred):
        s, c, t = r["sample"], r["call_ns"], r["sample"]["truth"]
        ins = pred(s, pooled)
        a0, a1, a2 = ((x - t) / t for x in (s["estimate"], ins, r["predicted_ns"]))
        e0.append(abs(a0))
        e1.append(abs(a1))
        e2.append(abs(a2))
        print(f"| {s['trace']} | {s['profiled'] / 1e6:.3f} ms | {s['estimate'] / 1e6:.3f} ms | "
              f"{ins / 1e6:.3f} ms | {'/'.join(str(v) for v in c.values())} | "
              f"{r['predicted_ns'] / 1e6:.3f} ms | {t / 1e6:.3f} ms | {100 * a0:+.1f}% | "
              f"{100 * a1:+.1f}% | {100 * a2:+.1f}% |")
    for label, e in (("today", e0), ("in-sample", e1), ("leave-one-pair-out", e2)):
        print(f"{label}: median |error| {100 * statistics.median(e):.1f}%, worst "
              f"{100 * max(e):.1f}%, mean {100 * statistics.mean(e):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
