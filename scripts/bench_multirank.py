"""Time and peak memory of a multi-rank job vs its rank count (``traceread batch`` path).

    python scripts/bench_multirank.py [--ranks 2,8,32,64] [--steps 100] [--filler 0]

For each rank count N: writes a planted job (``synth.multirank``: no sequence numbers,
clock offsets of +-12 ms, rank N//2 late by 3 ms, ``--filler`` extra host ops per step
to grow the traces) and runs ``traceread.jobs.batch.run`` on it in a fresh subprocess with
one worker, so the peak RSS is that run's alone. Prints per N: trace bytes, total
seconds, seconds in the cross-rank pass, peak RSS, the size of what is kept per rank
(pickled ``RankInput``), and the ratios of time per rank and of peak RSS against the
smallest job measured in the same run (the baseline). Bounded memory means peak RSS
stays flat as N grows: each worker keeps one trace at a time and the cross-rank pass
only the per-rank inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, pickle, resource, sys, time
from traceread.jobs import batch, multirank
from traceread.jobs.discover import discover
t0 = time.perf_counter()
results = batch.run_local(discover(sys.argv[1])[0], jobs=1)
t1 = time.perf_counter()
inputs = [r["rank_input"] for r in results if r["rank_input"] is not None]
jobs = multirank.analyze_inputs(inputs)
t2 = time.perf_counter()
kept = sum(len(pickle.dumps(i)) for i in inputs) / max(len(inputs), 1)
s = jobs[0].straggler
print(json.dumps({"seconds": t2 - t0, "cross_rank_s": t2 - t1, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "kept_kb_per_rank": kept / 1024, "straggler": s["rank"], "delay_ns": s["median_delay_ns"],
                  "matched": int(jobs[0].matches["instance"].nunique())}))
"""


def make(out: Path, ranks: int, steps: int, filler: int) -> int:
    from traceread.synth.multirank import JobSpec, make_job
    from traceread.synth.kineto import write_kineto

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
    fill = pd.DataFrame({"ts": ts, "dur": 500, "kind": "cpu_op", "name": "aten::add", "cat": "cpu_op",
                         "pid": pid, "tid": tid})
    ev = pd.concat([ev, fill], ignore_index=True).sort_values("ts", kind="stable")
    cols = {}
    for c in ev.columns:
        v = ev[c]
        if str(v.dtype) in ("category", "object", "string", "str"):
            cols[c] = v.astype(object).where(v.notna(), None).tolist()
        else:
            cols[c] = v.fillna(-1).to_numpy(np.int64)
    return Trace(build_table(cols, len(ev)), t.meta)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,8,32,64")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--filler", type=int, default=0, help="extra host ops per step per rank")
    a = p.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in a.ranks.split(",")]:
            d = Path(tmp) / f"job{n}"
            size = make(d, n, a.steps, a.filler)
            out = subprocess.run([sys.executable, "-c", CHILD, str(d)], capture_output=True, text=True, env=env)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(ranks=n, mb=size / 2**20)
            rows.append(r)
    base = rows[0]
    print(f"{'ranks':>5} {'traces MB':>9} {'total s':>8} {'cross s':>8} {'s/rank':>7} {'x base':>7}"
          f" {'peak MB':>8} {'x base':>7} {'kept KB/rank':>12}  straggler")
    for r in rows:
        per = r["seconds"] / r["ranks"]
        print(f"{r['ranks']:>5} {r['mb']:>9.1f} {r['seconds']:>8.2f} {r['cross_rank_s']:>8.2f} {per:>7.3f}"
              f" {per / (base['seconds'] / base['ranks']):>7.2f} {r['rss_mb']:>8.0f} {r['rss_mb'] / base['rss_mb']:>7.2f}"
              f" {r['kept_kb_per_rank']:>12.1f}  rank {r['straggler']} +{r['delay_ns'] / 1e6:.2f} ms"
              f" ({r['matched']} matched)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
