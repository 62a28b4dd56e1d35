"""``cache-hash``: hashing a whole trace vs a cache hit, why the cache checks content only
for entries stored right after the source changed (``traceread/readers/cache.py``).

Without TRACE a synthetic Kineto trace of N host ops + N kernels is written under /tmp.
In one process per side: a parse, a cache hit (identity check + entry MAC, no content
hash) and a full BLAKE2 hash of the source, and the ratios hash / hit, hash / parse.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from . import harness as h


def add_args(ap) -> None:
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--events", type=int, default=500_000, help="synthetic trace: host ops")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        src = args.trace or Path(tmp) / "trace.json"
        if not args.trace:
            synth(src, args.events)
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave([str(src)], sides, args.repeat, lambda t, side: h.probe(
            side, costs, t, env={"TRACEREAD_CACHE_DIR": f"{tmp}/cache-{side.name}",
                                 "TRACEREAD_NO_CACHE": ""}))
        size = src.stat().st_size
    best = {s.name: h.best(runs[(str(src), s.name)]) for s in sides}
    table = h.Table(sides)
    get = lambda k: {n: r.result[k] if r else None for n, r in best.items()}  # noqa: E731
    for key, label in (("parse", "parse"), ("hit", "cache hit"), ("hash", "full content hash")):
        table.add(label, get(key))
    table.add("cache entry", get("entry_bytes"), h.fmt_mb)
    x = lambda v: f"{v:.2f}×"  # noqa: E731
    table.add("hash / hit", {n: r.result["hash"] / r.result["hit"] if r else None
                             for n, r in best.items()}, x)
    table.add("hash / parse", {n: r.result["hash"] / r.result["parse"] if r else None
                               for n, r in best.items()}, x)
    print(f"source {h.fmt_mb(size)} (best of {args.repeat}):\n\n{table.markdown()}\n")
    for n, r in best.items():
        if r is None or not r.result["hit_ok"]:
            print(f"{n}: no cache hit ({h.failure(runs[(str(src), n)]) or 'load returned None'})")
    return 0 if all(r and r.result["hit_ok"] for r in best.values()) else 1


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


def costs(path: str) -> dict:
    """Probe: seconds of a parse, a cache hit (best of 3) and a full content hash (best of 3)."""
    from traceread.readers import cache
    from traceread.readers import read

    def best(fn, repeat=3):
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    src = Path(path)
    parse = best(lambda: read(src), 1)
    time.sleep(cache.RACY_S)  # an entry stored well after the last change: no content hash
    cache.store(src, read(src))
    return {"parse": parse, "hit": best(lambda: cache.load(src)),
            "hash": best(lambda: cache.content_hash(src)),
            "entry_bytes": cache.entry_path(src).stat().st_size,
            "hit_ok": cache.load(src) is not None}
