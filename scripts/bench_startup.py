"""Start-up time of ``traceread --help`` against the eager CLI it replaced.

Baseline, measured in the same run: ``--help`` after importing every subcommand
module up front (what the CLI did before its imports were made lazy), plus
``import pandas, pyarrow, click`` and the bare interpreter for scale. Best of N
subprocess runs each.

    PYTHONPATH=src python scripts/bench_startup.py [--runs 5]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
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


if __name__ == "__main__":
    main()
