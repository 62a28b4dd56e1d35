"""``side``: the side passes of ``analyze`` (passes/side.py), this checkout against baselines.

Each side, in its own processes, interleaved:

* CPU seconds of each side pass run in one process (``TRACEREAD_WORKERS=1``: the jobs
  ``analyze`` hands to ``SidePasses``, each timed again alone, best of ``--repeat``),
  and a digest of each result (values and dtypes): every side must agree;
* ``traceread analyze --no-cache --format json`` end to end with ``--workers``: wall,
  CPU of the process tree (forked side workers included), peak RSS and PSS (best of
  ``--repeat``); the JSON outputs must be the same bytes.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import harness as h
from .steps import Case, measure, rows
from .trace import same_json


def add_args(ap) -> None:
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", "--reps", type=int, default=3, dest="repeat")
    ap.add_argument("--workers", type=int, default=2, help="TRACEREAD_WORKERS of the end-to-end run")
    h.add_side_args(ap)


def main(args) -> int:
    t = str(args.trace)
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        cpu = {s.name: h.probe(s, side_passes, t, args.repeat, env={"TRACEREAD_WORKERS": "1"})
               for s in sides}
        case = Case("analyze", t, args.workers)
        runs = h.interleave([case], sides, args.repeat, measure)
    table = h.Table(sides, "side pass (CPU, best)")
    keys = list(dict.fromkeys(k for r in cpu.values() if r.ok for k in r.result))
    differ = []
    for k in keys:
        table.add(k, {n: r.result[k][0] if r.ok and k in r.result else None
                      for n, r in cpu.items()})
        digests = {r.result[k][1] for r in cpu.values() if r.ok and k in r.result}
        differ += [k] if len(digests) > 1 else []
    table.add("**all**", {n: sum(v[0] for v in r.result.values()) if r.ok else None
                          for n, r in cpu.items()})
    rows(table, case, {s.name: h.best(runs[(case, s.name)]) for s in sides}, 0)
    print(table.markdown() + "\n")
    for n, r in cpu.items():
        if not r.ok:
            print(f"side passes on {n} failed: {r.err}")
    print(f"side-pass results that differ between sides: {differ or 'none'}")
    same = same_json([case], sides, runs)
    return 1 if differ or same is False else 0


def side_passes(trace: str, reps: int) -> dict:
    """Probe: {job key: [best CPU seconds, digest of its result]}."""
    import hashlib

    import traceread
    from traceread.passes import side as _side
    from traceread.readers import stream

    jobs = []
    get = _side.SidePasses.get

    def record(self, key):
        fn, args, kw = self.jobs[key]
        a, k = _side._resolve(args, kw, self.shared)
        jobs.append((key, fn, a, k))
        return get(self, key)

    _side.SidePasses.get = record
    traceread.analyze(stream.read_stream(trace, workers=1))
    out = {}
    for key, fn, a, k in jobs:
        best = float("inf")
        for _ in range(reps):
            t = time.process_time()
            r = fn(*a, **k)
            best = min(best, time.process_time() - t)
        out[str(key)] = [best, hashlib.sha1(repr(_canon(r)).encode()).hexdigest()[:16]]
    return out


def _canon(o):
    import numpy as np
    import pandas as pd

    if isinstance(o, pd.DataFrame):
        return ("DF", list(o.columns), [str(t) for t in o.dtypes], list(o.index),
                [_canon(o[c].to_numpy()) for c in o.columns])
    if isinstance(o, np.ndarray):
        return ("A", str(o.dtype), o.tolist() if o.dtype == object else o.tobytes())
    if isinstance(o, dict):
        return ("D", [(repr(k), _canon(v)) for k, v in o.items()])
    if isinstance(o, (list, tuple)):
        return (type(o).__name__, [_canon(v) for v in o])
    if isinstance(o, float) and o != o:
        return ("nan",)
    return (type(o).__name__, repr(o))
