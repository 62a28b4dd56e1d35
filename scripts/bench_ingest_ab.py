#!/usr/bin/env python3
"""Ingest CPU, msgspec vs native decoder, this tree vs a baseline tree, one run.

    python scripts/bench_ingest_ab.py TRACE... [--base SRC] [--workers 1,2] [--rounds 2]

For each trace (plain JSON: the mmap path), every step in its own process
(``scripts/bench.py``'s ``run``: CPU = user + sys of the process tree, imports
included, no cache), rounds interleaved so machine load hits all alike:

* ingest (``read_stream(path, workers=W)``) with ``TRACEREAD_DECODER=python``,
  and with the native decoder of this tree and of ``--base`` (a ``src``
  directory of another checkout with its ``_cscan`` built, e.g.
  ``git archive main src | tar -x -C /tmp/base && (cd /tmp/base/src/...)``);
* the chunk decode alone (``_cscan.scan`` over the 16 MB chunks in memory),
  this tree and ``--base``: CPU seconds and MB/s.

Prints the best CPU of each step and the ratios between figures of this run.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import BASE_ENV, run  # noqa: E402

REPO = HERE.parent
READ = """
import sys
from traceread.readers import stream as S
print('RESULT', len(S.read_stream(sys.argv[1], workers=int(sys.argv[2]))))
"""
SCAN = """
import sys, time
from traceread.readers import stream as S, _native
raw = open(sys.argv[1], 'rb').read()
start = S.find_array_start(raw[:S._HEAD_SCAN])
end = S.find_array_end(raw, start, raw[:start - 1])
views = [memoryview(raw)[a:b] for a, b in S._split(raw, start, end, S.CHUNK_BYTES)]
ext = _native._ext()
best = 1e9
for _ in range(2):
    t = time.process_time()
    n = sum(_native._cscan.scan(v, False, True, ext)[0] for v in views)
    best = min(best, time.process_time() - t)
print('RESULT', best, n, sum(len(v) for v in views))
"""


def _env(src: Path, decoder: str) -> dict:
    return {**BASE_ENV, "PYTHONPATH": str(src), "TRACEREAD_DECODER": decoder}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--base", type=Path, help="src directory of the baseline checkout")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    py = sys.executable
    here = REPO / "src"
    trees = {"this": here, **({"base": args.base} if args.base else {})}
    workers = [int(w) for w in args.workers.split(",")]
    for path in args.traces:
        best: dict = {}

        def step(key, cmd, env):
            r = run(cmd, env=env)
            if not r["ok"]:
                print(f"  {key}: failed {r['err']}", file=sys.stderr)
                return
            val = r["result"][0] if key[0] == "scan" else r["cpu"]
            best[key] = min(best.get(key, 1e9), val)
            if key[0] == "scan":
                best["bytes"] = r["result"][2]

        for _ in range(args.rounds):
            for w in workers:
                step(("read", "msgspec", w), [py, "-c", READ, str(path), str(w)],
                     _env(here, "python"))
                for name, src in trees.items():
                    step(("read", name, w), [py, "-c", READ, str(path), str(w)],
                         _env(src, "native"))
            for name, src in trees.items():
                step(("scan", name, 0), [py, "-c", SCAN, str(path)], _env(src, "native"))
        print(f"{path} ({path.stat().st_size / 1e6:,.0f} MB), load average {os.getloadavg()[0]:.1f}")
        for name in trees:
            s = best.get(("scan", name, 0))
            if s:
                print(f"  chunk decode alone, {name}: {s:.3f} CPU-s, {best['bytes'] / s / 1e6:,.0f} MB/s")
        if ("scan", "base", 0) in best and ("scan", "this", 0) in best:
            print(f"    base / this: {best['scan', 'base', 0] / best['scan', 'this', 0]:.2f}×")
        for w in workers:
            m = best.get(("read", "msgspec", w))
            line = f"  ingest, {w} worker(s): msgspec {m:.2f} CPU-s" if m else f"  ingest, {w}:"
            for name in trees:
                c = best.get(("read", name, w))
                if c:
                    line += f"; native {name} {c:.2f} ({m / c:.2f}× less)" if m else f"; {c:.2f}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
