"""``names``: a trace whose every op name is distinct (issues 40 and 42).

Writes a valid one-line CPU-only Kineto trace of ``--names`` operators (default 800,000,
~70 MB), each with a name of its own that holds ``},{`` (the fake event boundary of
issue 40), then runs ``info`` and ``analyze --no-cache`` of it on every side, interleaved.
CPU time (user + sys) is the figure on a shared machine; wall is printed too.

Every name pattern of the passes used to be tried once per distinct name (and several
passes built Python lists of every name): 57 s where ``info`` took ~3 s. The shared
name table (``namerx.NameTable``) answers each pattern for all names in one vectorised
scan. The default baseline is the last commit before it (``--baseline REF`` for another).
Goal: ``analyze`` <= 5 s.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from . import harness as h

# the last commit whose passes tested each name pattern per distinct name
OLD_PATH = "52e18f4"


def write_trace(path: Path, n: int) -> int:
    """The trace of ``n`` distinct op names on one line; returns its size in bytes."""
    parts = [b'{"schemaVersion":1,"traceEvents":[']
    for i in range(n):
        name = json.dumps(f"op{i}" + '},{"x"')
        parts.append(b'{"ph":"X","cat":"cpu_op","name":%s,"pid":1,"tid":1,"ts":%d,"dur":1}'
                     % (name.encode(), 2 * i) + (b"," if i + 1 < n else b""))
    parts.append(b"]}")
    data = b"".join(parts)
    path.write_bytes(data)
    return len(data)


def add_args(ap) -> None:
    ap.add_argument("--names", type=int, default=800_000, help="distinct op names (events)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command (interleaved)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per command")
    h.add_side_args(ap)


def main(args) -> int:
    if not args.baseline and not args.baseline_src:
        args.baseline = [OLD_PATH]
    with tempfile.TemporaryDirectory(prefix="trbench-names-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        trace = Path(tmp) / "names.json"
        size = write_trace(trace, args.names)
        cases = {"info": ["info", str(trace)],   # info has no cache: it reads the file
                 "analyze": ["analyze", "--no-cache", "--format", "json", str(trace)]}

        def measure(case, side):
            return h.cli(side, *cases[case], timeout=args.timeout)

        runs = h.interleave(list(cases), sides, args.repeat, measure)
        table = h.Table(sides, f"{args.names:,} distinct names ({size / 1e6:.0f} MB)")
        best = {c: {s.name: h.best(runs[(c, s.name)]) for s in sides} for c in cases}
        for c in cases:
            table.add(f"{c}: CPU", {n: r.cpu if r else None for n, r in best[c].items()})
            table.add(f"{c}: wall", {n: r.wall if r else None for n, r in best[c].items()})
        table.add("analyze / info (CPU)", {
            s.name: (best["analyze"][s.name].cpu / best["info"][s.name].cpu)
            if best["analyze"][s.name] and best["info"][s.name] else None for s in sides},
            fmt=lambda x: f"{x:.2f}")
        print(f"best of {args.repeat}, load {h.load()}:\n\n{table.markdown()}\n")
        for c in cases:
            for s in sides:
                if not best[c][s.name]:
                    print(f"* {c} on {s.name} failed: {h.failure(runs[(c, s.name)])}")
        got = best["analyze"]["this"]
        if got:
            print(f"* goal: analyze <= 5 s: CPU {got.cpu:.1f} s "
                  f"{'met' if got.cpu <= 5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(None))
