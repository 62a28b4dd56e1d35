"""`analyze` of one big trace: this checkout against a baseline revision, same run.

    python scripts/build_native.py
    PYTHONPATH=src python scripts/bench_analyze_passes.py TRACE [--baseline REV[,REV|DIR...]]
        [--workers 1,2] [--repeat 3]

Each baseline is `git archive REV` unpacked in a temporary directory (its C decoder
built there), so every side runs the same way; a DIR is a checkout used as it is
(e.g. a `git worktree add` with the decoder .so copied in). Ratios are against
the first baseline; with several (388d5d3,8119e17), each side's ratio is printed. For each worker count
(TRACEREAD_WORKERS) and side, alternating, each in a fresh process:

* passes: the trace read, its events frame built, then `traceread.analyze(trace)`
  timed alone -- wall, this process's CPU, the side-pass children's CPU (the
  decode workers of the read are not counted: they exit before);
* end to end: `traceread analyze --no-cache --format json TRACE` -- wall and CPU
  (user + sys of the command and its children); whether each baseline's JSON equals this one's is printed (one older than a pass differs).

Prints the best of --repeat per figure and each side's time / the first baseline's (1.20x: 20% slower).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PASSES = r"""
import json, os, resource, sys, time
import traceread
from traceread.readers import read
tr = read(sys.argv[1])
_ = tr.events
ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
w0, c0 = time.perf_counter(), time.process_time()
traceread.analyze(tr)
w1, c1 = time.perf_counter(), time.process_time()
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": w1 - w0, "cpu": c1 - c0,
                  "children": ch.ru_utime + ch.ru_stime - ch0.ru_utime - ch0.ru_stime}))
"""


def _baseline(rev: str, tmp: str) -> Path:
    if Path(rev).is_dir():
        return Path(rev).resolve()
    d = Path(tmp) / f"base-{rev}"
    d.mkdir()
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(d)], input=arch, check=True)
    subprocess.run([sys.executable, "scripts/build_native.py"], cwd=d, check=True,
                   capture_output=True)
    return d


def _env(src: Path, workers: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src / "src"), TRACEREAD_WORKERS=str(workers),
               TRACEREAD_NO_CACHE="1", NUMPY_MADVISE_HUGEPAGE="0")
    return env


def _passes(src: Path, trace: str, workers: int) -> dict:
    out = subprocess.run([sys.executable, "-c", PASSES, trace], env=_env(src, workers),
                         check=True, capture_output=True, text=True, cwd=src).stdout
    return json.loads(out.strip().splitlines()[-1])


def _cli(src: Path, trace: str, workers: int) -> tuple[dict, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "traceread.cli", "analyze", "--no-cache",
                          "--format", "json", trace], env=_env(src, workers), check=True,
                         capture_output=True, text=True, cwd=src).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu}, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--baseline", default="0fb7217")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        revs = [Path(r).name if Path(r).is_dir() else r for r in a.baseline.split(",")]
        sides = {n: _baseline(r, tmp) for n, r in zip(revs, a.baseline.split(","))}
        sides["this"] = ROOT
        first = revs[0]
        print(f"{a.trace}: baseline {a.baseline} vs this checkout; load {os.getloadavg()}")
        for w in [int(x) for x in a.workers.split(",")]:
            best: dict = {}
            outs = {}
            for _ in range(a.repeat):
                for name, src in sides.items():   # alternating: drift hits every side alike
                    for k, v in _passes(src, a.trace, w).items():
                        key = (name, "passes " + k)
                        best[key] = min(best.get(key, 1e9), v)
                    r, outs[name] = _cli(src, a.trace, w)
                    for k, v in r.items():
                        key = (name, "end to end " + k)
                        best[key] = min(best.get(key, 1e9), v)
            same = {n: outs[n] == outs["this"] for n in revs}
            print(f"\nTRACEREAD_WORKERS={w} (best of {a.repeat}; JSON equal to this: {same})")
            head = "".join(f" {n[:9]:>9s}" for n in sides)
            rat = "".join(f" {n[:9] + '/' + first[:7]:>17s}" for n in sides if n != first)
            print(f"  {'figure':24s}{head}{rat}")
            for fig in ("passes wall", "passes cpu", "passes children", "end to end wall",
                        "end to end cpu"):
                vals = "".join(f" {best[(n, fig)]:8.2f}s" for n in sides)
                b = best[(first, fig)]
                rs = "".join(f" {best[(n, fig)] / b if b else 0:16.2f}x" for n in sides
                             if n != first)
                print(f"  {fig:24s}{vals}{rs}")
        print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
