"""The side passes of ``analyze`` (passes/_side.py), this checkout against a baseline, one run.

    PYTHONPATH=src python scripts/bench_side.py TRACE [--base REF] [--reps 3] [--workers 2]

The baseline is ``git archive REF src`` unpacked in a temporary folder (the C decoder
built here is copied in when REF's ``_cscan.c`` is the same file). Each side, in its own
processes, interleaved:

* CPU seconds of each side pass run in one process (``TRACEREAD_WORKERS=1``: the jobs
  ``analyze`` hands to ``SidePasses``, each timed again alone, best of ``--reps``), and a
  digest of each result (values and dtypes): the two sides must agree;
* ``traceread analyze --no-cache --format json`` end to end with ``--workers``: wall,
  CPU of the process tree (forked side workers included) and peak PSS of the tree
  (median of ``--reps``); the JSON outputs must be the same bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench import _tree_mem  # noqa: E402

SIDE = r"""
import hashlib, json, os, sys, time
import numpy as np, pandas as pd
import traceread
from traceread.passes import _side

jobs = []
get = _side.SidePasses.get
def record(self, key):
    fn, args, kw = self.jobs[key]
    a, k = _side._resolve(args, kw, self.shared)
    jobs.append((key, fn, a, k))
    return get(self, key)
_side.SidePasses.get = record

def canon(o):
    if isinstance(o, pd.DataFrame):
        return ("DF", list(o.columns), [str(t) for t in o.dtypes], list(o.index),
                [canon(o[c].to_numpy()) for c in o.columns])
    if isinstance(o, np.ndarray):
        return ("A", str(o.dtype), o.tolist() if o.dtype == object else o.tobytes())
    if isinstance(o, dict):
        return ("D", [(repr(k), canon(v)) for k, v in o.items()])
    if isinstance(o, (list, tuple)):
        return (type(o).__name__, [canon(v) for v in o])
    if isinstance(o, float) and o != o:
        return ("nan",)
    return (type(o).__name__, repr(o))

from traceread.readers import stream
traceread.analyze(stream.read_stream(sys.argv[1], workers=1))
out = {}
for key, fn, a, k in jobs:
    best = float("inf")
    for _ in range(int(sys.argv[2])):
        t = time.process_time(); r = fn(*a, **k); best = min(best, time.process_time() - t)
    out[key] = [best, hashlib.sha1(repr(canon(r)).encode()).hexdigest()[:16]]
print("RESULT " + json.dumps(out))
"""
CLI = "import sys; from traceread.cli import main; sys.argv[0] = 'traceread'; main()"


def _run(cmd: list[str], src: Path, env: dict) -> dict:
    """Wall, CPU of the tree (children reaped), peak PSS (20 ms samples), stdout."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:  # no pipe to fill
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe,
                                env={**os.environ, "PYTHONPATH": str(src),
                                     "NUMPY_MADVISE_HUGEPAGE": "0", **env})
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_mem(proc.pid)[1])
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"failed ({src}): {err.decode().strip().splitlines()[-1:]}")
    return {"wall": wall, "cpu": after.ru_utime - before.ru_utime + after.ru_stime
            - before.ru_stime, "pss": peak, "out": out}


def _baseline(ref: str, into: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    here = REPO / "src/traceread/readers"
    there = into / "src/traceread/readers"
    if (there / "_cscan.c").exists() and \
            (there / "_cscan.c").read_bytes() == (here / "_cscan.c").read_bytes():
        for so in here.glob("_cscan*.so"):
            shutil.copy2(so, there)
    return into / "src"


def _side_cpu(trace: str, src: Path, reps: int) -> dict:
    r = _run([sys.executable, "-c", SIDE, trace, str(reps)], src, {"TRACEREAD_WORKERS": "1"})
    line = [x for x in r["out"].decode().splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[7:])


def _analyze(trace: str, src: Path, workers: int) -> dict:
    return _run([sys.executable, "-c", CLI, "analyze", "--no-cache", "--format", "json",
                 trace], src, {"TRACEREAD_WORKERS": str(workers)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--base", default="0fb7217", help="git ref of the baseline")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench_side_"))
    try:
        sides = {"base": _baseline(a.base, tmp), "this": REPO / "src"}
        print(f"trace {a.trace}; base {a.base}; load {os.getloadavg()[0]:.2f}", flush=True)
        cpu = {k: _side_cpu(a.trace, s, a.reps) for k, s in sides.items()}
        runs: dict = {k: [] for k in sides}
        for _ in range(a.reps):
            for k, s in sides.items():
                runs[k].append(_analyze(a.trace, s, a.workers))
        print(f"load after {os.getloadavg()[0]:.2f}\n")
        print("| side pass | base CPU ms | this CPU ms | ratio | same result |")
        print("|---|---|---|---|---|")
        tb = tt = 0.0
        for key in cpu["base"]:
            b, t = cpu["base"][key], cpu["this"].get(key, [float("nan"), ""])
            tb, tt = tb + b[0], tt + t[0]
            print(f"| {key} | {1e3 * b[0]:.1f} | {1e3 * t[0]:.1f} | {b[0] / t[0]:.2f}x | "
                  f"{'yes' if b[1] == t[1] else 'NO'} |")
        print(f"| **all** | {1e3 * tb:.1f} | {1e3 * tt:.1f} | {tb / tt:.2f}x | |\n")
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "pss")}
               for k, v in runs.items()}
        print(f"`analyze --no-cache` with {a.workers} workers, median of {a.reps}:")
        print("| | wall s | CPU s (tree) | peak PSS MB |\n|---|---|---|---|")
        for k in sides:
            m = med[k]
            print(f"| {k} | {m['wall']:.2f} | {m['cpu']:.2f} | {m['pss'] / 2**20:,.0f} |")
        b, t = med["base"], med["this"]
        print(f"| base / this | {b['wall'] / t['wall']:.2f}x | {b['cpu'] / t['cpu']:.2f}x | "
              f"{b['pss'] / t['pss']:.2f}x |")
        same = all(r["out"] == runs["base"][0]["out"] for v in runs.values() for r in v)
        print(f"\nanalyze JSON identical across all runs: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
