"""Cost of hashing a whole trace vs. a cache hit: why the cache checks content only
for entries stored right after the source changed (``traceread/cache.py``).

    python scripts/bench_cache_hash.py [TRACE] [--events N]

Without TRACE a synthetic Kineto trace of N host ops + launches + kernels is written
under /tmp. Prints the time of a full BLAKE2 hash of the source, of a parse, of a
cache hit (identity check + entry MAC, no content hash) and the ratio hash / hit,
all measured in this run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def synth(path: Path, n: int) -> None:
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(n):
            sep = ",\n" if i else ""
            f.write(sep + json.dumps({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}",
                                      "pid": 1, "tid": 1, "ts": 1000 + 10 * i, "dur": 5,
                                      "args": {"External id": i}}))
            f.write(",\n" + json.dumps({"ph": "X", "cat": "kernel", "name": f"k{i % 9}",
                                        "pid": 0, "tid": 7, "ts": 1003 + 10 * i, "dur": 4,
                                        "args": {"correlation": i, "device": 0,
                                                 "stream": 7}}))
        f.write("\n]}\n")


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--events", type=int, default=500_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="traceread-bench-"))
    os.environ["TRACEREAD_CACHE_DIR"] = str(tmp / "cache")
    from traceread import cache
    from traceread.readers import read

    src = Path(args.trace) if args.trace else tmp / "trace.json"
    if not args.trace:
        synth(src, args.events)
    size = src.stat().st_size
    parse = best(lambda: read(src), 1)
    time.sleep(cache.RACY_S)  # an entry stored well after the last change: no content hash
    cache.store(src, read(src))
    entry = cache.entry_path(src)
    hit = best(lambda: cache.load(src))
    full = best(lambda: cache.content_hash(src))
    print(f"source {size / 2**20:.0f} MB, entry {entry.stat().st_size / 2**20:.1f} MB, "
          f"hit ok: {cache.load(src) is not None}")
    print(f"parse {parse:.2f} s | cache hit {hit:.2f} s | full content hash {full:.2f} s")
    print(f"hash / hit = {full / hit:.2f}x   hash / parse = {full / parse:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
