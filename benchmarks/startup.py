"""``startup``: the cost of ``traceread --help`` and of ``analyze`` on small traces.

Part 1, ``--help`` and ``--version`` (best wall of ``--repeat`` runs), against the
eager CLI they replaced (every subcommand module imported before click parses
argv), plus ``import pandas, pyarrow, click`` and the bare interpreter for scale.

Part 2, small traces (most traces are small): ``--help`` and ``analyze --no-cache`` of
the bundled example (and of each ``--trace``), on every side, interleaved. CPU time
(user + sys of the process and its children) is the figure on a shared machine:
median and best; wall best. Bytecode is cached in a temporary ``PYTHONPYCACHEPREFIX``
per side after one warm-up run (as an installed package has it); ``--source``
compiles the sources every run instead (``PYTHONDONTWRITEBYTECODE=1``).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from . import harness as h

# The pre-lazy CLI: every subcommand module imported before click parses argv.
EAGER = ("import importlib, sys; import traceread.cli as c; "
         "[importlib.import_module('traceread.cli.' + m) for m, _ in c._COMMANDS.values()]; "
         "sys.argv = ['traceread', '--help']; c.main(prog_name='traceread')")
HELP_CASES = {"python -c pass (floor)": ["-c", "pass"],
              "import pandas, pyarrow, click": ["-c", "import pandas, pyarrow, click"],
              "eager --help (before)": ["-c", EAGER],
              "traceread --help": ["-m", "traceread", "--help"],
              "traceread --version": ["-m", "traceread", "--version"]}


def add_args(ap) -> None:
    ap.add_argument("--repeat", "--runs", type=int, default=5, dest="repeat",
                    help="runs of each command (interleaved)")
    ap.add_argument("--trace", action="append", default=[],
                    help="more traces to analyse (the bundled example always runs)")
    ap.add_argument("--source", action="store_true",
                    help="compile the sources every run (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--skip-help", action="store_true", help="only the small-trace part")
    h.add_side_args(ap)


def main(args) -> int:
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        if not args.skip_help:
            help_part(sides, args.repeat, Path(tmp))
        small_part(sides, args.repeat, [str(h.EXAMPLE), *args.trace], args.source, Path(tmp))
    return 0


def env_for(side: h.Side, pyc: Path | None) -> dict:
    env = side.env()
    if pyc is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pyc)
    return env


def help_part(sides: list[h.Side], repeat: int, tmp: Path) -> None:
    envs = {s.name: env_for(s, tmp / f"pyc-help-{s.name}") for s in sides}

    def measure(case, side):
        return h.run([sys.executable, *HELP_CASES[case]], envs[side.name])

    for case in HELP_CASES:  # warm-up: bytecode written
        for s in sides:
            measure(case, s)
    runs = h.interleave(list(HELP_CASES), sides, repeat, measure)
    table = h.Table(sides, "command (wall, best)")
    for case in HELP_CASES:
        table.add(case, {s.name: _wall(runs[(case, s.name)]) for s in sides})
    print(f"`--help`, best wall of {repeat}:\n\n{table.markdown()}\n")
    eager = _wall(runs[("eager --help (before)", "this")])
    for case in ("traceread --help", "traceread --version"):
        t = _wall(runs[(case, "this")])
        print(f"* {case}: {h.fmt_ratio(eager, t)} faster than the eager CLI; "
              f"goal < 0.2 s {'met' if t and t < 0.2 else 'NOT met'}")
    print()


def small_part(sides, repeat: int, traces: list[str], source: bool, tmp: Path) -> None:
    envs = {s.name: env_for(s, None if source else tmp / f"pyc-{s.name}") for s in sides}
    cases = {"--help": ["--help"]}
    cases |= {f"analyze {Path(t).name}": ["analyze", "--no-cache", t] for t in traces}

    def measure(case, side):
        return h.run([sys.executable, "-m", "traceread", *cases[case]], envs[side.name])

    for case in cases:  # warm-up: bytecode written, files in the page cache
        for s in sides:
            measure(case, s)
    runs = h.interleave(list(cases), sides, repeat, measure)
    table = h.Table(sides, "small traces")
    for case in cases:
        ok = {s.name: [r for r in runs[(case, s.name)] if r.ok] for s in sides}
        table.add(f"{case}: CPU median", {n: statistics.median(r.cpu for r in rs) if rs else None
                                          for n, rs in ok.items()})
        table.add(f"{case}: CPU best", {n: min((r.cpu for r in rs), default=None)
                                        for n, rs in ok.items()})
        table.add(f"{case}: wall best", {n: min((r.wall for r in rs), default=None)
                                         for n, rs in ok.items()})
    how = "sources compiled each run" if source else "bytecode cached"
    print(f"small traces, {repeat} runs each, {how}, load {h.load()}:\n\n{table.markdown()}\n")
    ex = [r for r in runs[(f"analyze {h.EXAMPLE.name}", "this")] if r.ok]
    if ex:
        cpu, wall = statistics.median(r.cpu for r in ex), min(r.wall for r in ex)
        print(f"* goal: example analyze <= 0.7 s: CPU {'met' if cpu <= 0.7 else 'NOT met'}, "
              f"wall {'met' if wall <= 0.7 else 'NOT met'}")


def _wall(runs: list[h.Run]):
    b = h.best(runs)
    return b.wall if b else None

