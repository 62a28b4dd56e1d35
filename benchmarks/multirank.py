"""``multirank``: time and peak memory of a multi-rank job vs its rank count (the batch path).

For each rank count N: writes a planted job (``synth.multirank``: no sequence numbers,
clock offsets of +-12 ms, rank N//2 late by 3 ms, ``--filler`` extra host ops per
step to grow the traces) and runs the batch analysis plus the cross-rank pass on it
with one worker, in a fresh process per side, so the peak RSS is that run's alone.
Per N: trace bytes, total seconds, seconds in the cross-rank pass, peak RSS, the size
of what is kept per rank (pickled ``RankInput``), and the ratios of time per rank and
of peak RSS against the smallest job of the same run (the yardstick). Bounded memory
means peak RSS stays flat as N grows: each worker keeps one trace at a time and the
cross-rank pass only the per-rank inputs.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from . import harness as h


def add_args(ap) -> None:
    ap.add_argument("--ranks", default="2,8,32,64")
    ap.add_argument("--pass-only", choices=("dp", "pp"),
                    help="time only the cross-rank pass (analyze_job) on per-rank inputs built in "
                         "memory: dp = one data-parallel group (rank N/2 late), pp = 4 pipeline "
                         "stages x N/4 data-parallel replicas (P2P lanes grow with N)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--filler", type=int, default=0, help="extra host ops per step per rank")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    ranks = h.ints(args.ranks)
    if args.pass_only:
        return pass_main(args, ranks)
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        size = {n: make(Path(tmp) / f"job{n}", n, args.steps, args.filler) for n in ranks}
        runs = h.interleave(ranks, sides, args.repeat,
                            lambda n, side: h.probe(side, job, str(Path(tmp) / f"job{n}")))
    best = {(n, s.name): h.best(runs[(n, s.name)]) for n in ranks for s in sides}
    table = h.Table(sides, "ranks")
    for s in sides:
        for n in ranks:
            if best[(n, s.name)] is None:
                print(f"{n} ranks on {s.name} failed: {h.failure(runs[(n, s.name)])}")
    for n in ranks:
        lab = f"{n} ranks ({h.fmt_mb(size[n])} of traces)"

        def col(f):
            return {s.name: f(best[(n, s.name)], best[(ranks[0], s.name)]) if best[(n, s.name)]
                    and best[(ranks[0], s.name)] else None for s in sides}

        table.add(f"{lab}: total", col(lambda r, b: r.result["seconds"]))
        table.add(f"{lab}: cross-rank pass", col(lambda r, b: r.result["cross_rank_s"]))
        table.add(f"{lab}: s per rank vs {ranks[0]} ranks",
                  col(lambda r, b: _per(r, n) / _per(b, ranks[0])), lambda x: f"{x:.2f}×")
        table.add(f"{lab}: peak RSS", col(lambda r, b: r.result["rss"]), h.fmt_mb)
        table.add(f"{lab}: peak RSS vs {ranks[0]} ranks",
                  col(lambda r, b: r.result["rss"] / b.result["rss"]), lambda x: f"{x:.2f}×")
        table.add(f"{lab}: kept per rank", col(lambda r, b: r.result["kept_kb"]),
                  lambda x: f"{x:,.1f} KB")
        table.add(f"{lab}: straggler", col(lambda r, b: f"rank {r.result['straggler']} "
                                                        f"+{r.result['delay_ns'] / 1e6:.2f} ms "
                                                        f"({r.result['matched']} matched)"))
    print(f"{args.steps} steps, filler {args.filler} (best of {args.repeat}):\n\n"
          f"{table.markdown()}")
    return 0


def _per(r, n: int) -> float:
    return r.result["seconds"] / n


def make(out: Path, ranks: int, steps: int, filler: int) -> int:
    """The planted job's traces under ``out``; returns their bytes."""
    sys.path.insert(0, str(h.SRC))
    from traceread.synth.kineto import write_kineto
    from traceread.synth.multirank import JobSpec, make_job

    spec = JobSpec(ranks=ranks, slow_rank=ranks // 2, steps=steps, with_seq=False,
                   clock_offset_ns=[((r * 37) % 9 - 4) * 3_000_000 for r in range(ranks)])
    out.mkdir(parents=True, exist_ok=True)
    size = 0
    for t in make_job(spec):
        if filler:
            t = _fill(t, filler)
        p = out / f"rank-{t.meta.rank}.json.gz"
        t.meta.path = str(p)
        write_kineto(t, p)
        size += p.stat().st_size
    return size


def _fill(t, n: int):
    """Add ``n`` short host operators per step on the main thread (bigger traces)."""
    import numpy as np
    import pandas as pd

    from traceread.table import Trace, build_table

    ev = t.events
    steps = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
    pid, tid = int(steps["pid"].iloc[0]), int(steps["tid"].iloc[0])
    ts = (steps["ts"].to_numpy()[:, None] + 200_000 + np.arange(n)[None, :] * 1_000).ravel()
    fill = pd.DataFrame({"ts": ts, "dur": 500, "kind": "cpu_op", "name": "aten::add",
                         "cat": "cpu_op", "pid": pid, "tid": tid})
    ev = pd.concat([ev, fill], ignore_index=True).sort_values("ts", kind="stable")
    cols = {}
    for c in ev.columns:
        v = ev[c]
        if str(v.dtype) in ("category", "object", "string", "str"):
            cols[c] = v.astype(object).where(v.notna(), None).tolist()
        else:
            cols[c] = v.fillna(-1).to_numpy(np.int64)
    return Trace(build_table(cols, len(ev)), t.meta)


def job(folder: str) -> dict:
    """Probe: the batch run of the job's traces with one worker, then the cross-rank pass."""
    import pickle

    batch = h.first_module("traceread.jobs.batch", "traceread.batch")
    multirank = h.first_module("traceread.jobs.multirank", "traceread.multirank")
    t0 = time.perf_counter()
    results = batch.run_local(batch.discover(folder)[0], jobs=1)
    t1 = time.perf_counter()
    inputs = [r["rank_input"] for r in results if r["rank_input"] is not None]
    jobs = multirank.analyze_inputs(inputs)
    t2 = time.perf_counter()
    s = jobs[0].straggler
    return {"seconds": t2 - t0, "cross_rank_s": t2 - t1,
            "rss": h.own_peak_rss(),
            "kept_kb": sum(len(pickle.dumps(i)) for i in inputs) / max(len(inputs), 1) / 1024,
            "straggler": s["rank"], "delay_ns": s["median_delay_ns"],
            "matched": int(jobs[0].matches["instance"].nunique())}


# --- the cross-rank pass alone ------------------------------------------------------------------

def pass_main(args, ranks: list[int]) -> int:
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave(ranks, sides, args.repeat,
                            lambda n, side: h.probe(side, cross_pass, n, args.pass_only, args.steps))
    best = {(n, s.name): h.best(runs[(n, s.name)]) for n in ranks for s in sides}
    for key, r in best.items():
        if r is None:
            print(f"{key[0]} ranks on {key[1]} failed: {h.failure(runs[key])}")
    table = h.Table(sides, "ranks")
    for n in ranks:
        def col(f):
            return {s.name: f(best[(n, s.name)].result, best[(ranks[0], s.name)].result)
                    if best[(n, s.name)] and best[(ranks[0], s.name)] else None for s in sides}

        lab = f"{n} ranks"
        table.add(f"{lab}: cross-rank pass", col(lambda r, b: r["seconds"]))
        table.add(f"{lab}: s per rank vs {ranks[0]} ranks",
                  col(lambda r, b: r["seconds"] / n / (b["seconds"] / ranks[0])), lambda x: f"{x:.2f}×")
        table.add(f"{lab}: peak allocated (tracemalloc)", col(lambda r, b: r["peak"]), h.fmt_mb)
        table.add(f"{lab}: peak per rank vs {ranks[0]} ranks",
                  col(lambda r, b: r["peak"] / n / (b["peak"] / ranks[0])), lambda x: f"{x:.2f}×")
        table.add(f"{lab}: inputs held", col(lambda r, b: r["inputs"]), h.fmt_mb)
        table.add(f"{lab}: lanes / unmatched records",
                  col(lambda r, b: f"{r['lanes']} / {r['unmatched']}"))
        table.add(f"{lab}: straggler", col(lambda r, b: f"rank {r['straggler']} "
                                                        f"+{r['delay_ns'] / 1e6:.2f} ms"))
    print(f"the cross-rank pass alone, {args.pass_only} job, {args.steps} steps "
          f"(best of {args.repeat}):\n\n{table.markdown()}")
    return 0


def cross_pass(n: int, shape: str, steps: int) -> dict:
    """Probe: per-rank inputs of a planted job built in memory (not timed), then
    ``analyze_job`` timed, then run again under tracemalloc for its peak allocation."""
    import pickle
    import tracemalloc

    from traceread.jobs.multirank.inputs import rank_input
    from traceread.jobs.multirank.job import analyze_job

    if shape == "pp":
        from traceread.synth.pipeline import PPxDP, make_pp_dp_job

        traces = make_pp_dp_job(PPxDP(stages=4, dp=max(1, n // 4), steps=max(1, steps)))
    else:
        from traceread.synth.multirank import JobSpec, make_job

        traces = make_job(JobSpec(ranks=n, slow_rank=n // 2, steps=steps, with_seq=False,
                                  clock_offset_ns=[((r * 37) % 9 - 4) * 3_000_000 for r in range(n)]))
    inputs = [rank_input(t) for t in traces]
    del traces
    t0 = time.perf_counter()
    res = analyze_job(inputs)
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    analyze_job(inputs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": seconds, "peak": peak, "inputs": len(pickle.dumps(inputs)),
            "lanes": len(res.methods), "unmatched": len(res.unmatched),
            "straggler": res.straggler["rank"], "delay_ns": res.straggler["median_delay_ns"]}
