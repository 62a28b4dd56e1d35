"""Start-up cost of ``traceread --help`` and of ``analyze`` on small traces.

Part 1, ``--help``: against the eager CLI it replaced (every subcommand module
imported before click parses argv), plus ``import pandas, pyarrow, click`` and
the bare interpreter for scale. Best of N subprocess runs each (wall).

Part 2, small traces (issue 24: most traces are small): ``analyze --no-cache``
of the bundled example (and of any ``--trace``) with these sources and, with
``--baseline-src``, with other sources (e.g. main's) in the same run, the runs
interleaved so both see the same load. CPU time (user + sys of the process and
the children it waited for) is the figure on a shared box; wall is printed too.
Bytecode is cached in a temporary ``PYTHONPYCACHEPREFIX`` after one warm-up run
(as an installed package has it); ``--source`` compiles the sources every run
instead (what ``PYTHONDONTWRITEBYTECODE=1`` does).

    PYTHONPATH=src python scripts/bench_startup.py [--runs 5]
        [--baseline-src /work/main/src] [--trace T ...] [--source]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")
EXAMPLE = str(Path(SRC) / "traceread" / "examples" / "h200_pageable_copy.json.gz")

# The pre-lazy CLI: every subcommand module imported before click parses argv.
EAGER = ("import importlib, sys; import traceread.cli as c; "
         "[importlib.import_module('traceread.cli.' + m) for m, _ in c._COMMANDS.values()]; "
         "sys.argv = ['traceread', '--help']; c.main(prog_name='traceread')")


def best(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return min(times)


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def env_for(src: str, pyc: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=src, TRACEREAD_NO_CACHE="1")
    if pyc is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pyc
    return env


def help_part(runs: int) -> None:
    py = sys.executable
    floor = best([py, "-c", "pass"], runs)
    base = best([py, "-c", "import pandas, pyarrow, click"], runs)
    eager = best([py, "-c", EAGER], runs)
    helptime = best([py, "-m", "traceread", "--help"], runs)
    version = best([py, "-m", "traceread", "--version"], runs)
    print(f"python -c pass                 {floor:6.3f} s  (floor)")
    print(f"import pandas, pyarrow, click  {base:6.3f} s")
    print(f"eager --help (before)          {eager:6.3f} s  (baseline)")
    print(f"traceread --help               {helptime:6.3f} s  ({helptime / eager:.2f}x baseline, "
          f"{eager / helptime:.1f}x faster)")
    print(f"traceread --version            {version:6.3f} s  ({version / eager:.2f}x baseline)")
    print(f"goal --help < 0.2 s: {'met' if helptime < 0.2 else 'NOT met'}")
    print(f"goal --version < 0.2 s: {'met' if version < 0.2 else 'NOT met'}")


def small_part(runs: int, traces: list[str], baseline: str | None, source: bool) -> None:
    py = sys.executable
    srcs = {"this": SRC} | ({"baseline": baseline} if baseline else {})
    with tempfile.TemporaryDirectory(prefix="tr_pyc_") as tmp:
        envs = {k: env_for(s, None if source else os.path.join(tmp, k)) for k, s in srcs.items()}
        cases = [("--help", ["--help"])] + [
            (f"analyze {Path(t).name}", ["analyze", "--no-cache", t]) for t in traces]
        res: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _, args in cases:  # warm-up: bytecode written, files in the page cache
            for k in srcs:
                timed([py, "-m", "traceread", *args], envs[k])
        for _ in range(runs):
            for label, args in cases:
                for k in srcs:  # interleaved: both see the same load
                    res.setdefault((label, k), []).append(
                        timed([py, "-m", "traceread", *args], envs[k]))
    print(f"\nsmall traces, {runs} runs each, {'sources compiled each run' if source else 'bytecode cached'}, "
          f"load {os.getloadavg()[0]:.1f}: CPU s = user + sys (median / min), wall s (min)")
    for label, _ in cases:
        row = []
        for k in srcs:
            cpu = [c for c, _ in res[(label, k)]]
            wall = [w for _, w in res[(label, k)]]
            row.append((k, statistics.median(cpu), min(cpu), min(wall)))
        line = "  ".join(f"{k}: {m:.3f} / {lo:.3f} CPU, {w:.3f} wall" for k, m, lo, w in row)
        if len(row) == 2:
            line += f"  -> {row[0][1] / row[1][1]:.2f}x baseline CPU"
        print(f"{label:44s} {line}")
        if label.startswith("analyze " + Path(EXAMPLE).name):
            print(f"  goal example analyze <= 0.7 s: CPU {'met' if row[0][1] <= 0.7 else 'NOT met'}, "
                  f"wall {'met' if row[0][3] <= 0.7 else 'NOT met'} (min of {runs})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-src", default=None,
                    help="a src/ directory of other traceread sources, timed in the same run")
    ap.add_argument("--trace", action="append", default=[],
                    help="more traces to analyse (the bundled example always runs)")
    ap.add_argument("--source", action="store_true",
                    help="compile the sources every run (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--skip-help", action="store_true", help="only the small-trace part")
    a = ap.parse_args()
    if not a.skip_help:
        help_part(a.runs)
    small_part(a.runs, [EXAMPLE, *a.trace], a.baseline_src, a.source)


if __name__ == "__main__":
    main()
