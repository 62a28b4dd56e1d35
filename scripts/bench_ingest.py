"""Kineto ingest speed against the baseline of merely parsing the JSON with orjson.

Usage: python scripts/bench_ingest.py TRACE[.json|.json.gz] [--repeat N]
(needs the bench extra: pip install -e '.[bench]')

Both sides start from the same decompressed JSON bytes, read from a temp file:

* baseline  -- ``orjson.loads(data)``: a dict per event, nothing else;
* traceread -- ``readers.kineto.ingest(data)``: typed decode, columns, GPU pid
  join, collective fields, the finished Arrow table.

Each side runs in its own subprocesses (so peak RSS is its own), alternating
orjson / traceread for several rounds so machine load hits both alike; the best
time of each side is reported. Prints both times, the ratio (traceread / orjson; <= 1.0 means
a finished table costs no more than the bare parse) and the peak RSS of each.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
kind, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(path, "rb").read()
if kind == "orjson":
    import orjson
    run = lambda: orjson.loads(data)
else:
    from traceread.readers.kineto import ingest
    run = lambda: ingest(data, path)
best = cpu = float("inf")
rows = None
for _ in range(repeat):
    t, c = time.perf_counter(), time.process_time()
    out = run()
    best = min(best, time.perf_counter() - t)
    cpu = min(cpu, time.process_time() - c)
    rows = len(out) if kind != "orjson" else len(out.get("traceEvents", out) if isinstance(out, dict) else out)
    del out
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
print(json.dumps({"seconds": best, "cpu": cpu, "peak_rss": peak, "rows": rows}))
"""


def _measure(kind: str, path: Path, repeat: int) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), str(repeat)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{kind} run failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _best(results: list) -> dict:
    return {"seconds": min(r["seconds"] for r in results), "cpu": min(r["cpu"] for r in results),
            "peak_rss": max(r["peak_rss"] for r in results), "rows": results[0]["rows"]}


def _decompressed(trace: Path, tmp: Path) -> Path:
    raw = trace.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        import gzip

        raw = gzip.decompress(raw)
    out = tmp / "trace.json"
    out.write_bytes(raw)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs inside each subprocess")
    ap.add_argument("--rounds", type=int, default=3, help="alternating subprocess pairs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = _decompressed(args.trace, Path(d))
        size = os.path.getsize(path)
        # Alternate the two subprocesses so a busy machine slows both sides alike;
        # keep each side's best time and its largest peak RSS.
        runs: dict = {"orjson": [], "traceread": []}
        for _ in range(args.rounds):
            for kind in runs:
                runs[kind].append(_measure(kind, path, args.repeat))
        base, ours = (_best(runs[k]) for k in ("orjson", "traceread"))
    mib = 1 << 20
    print(f"trace            {args.trace} ({size / mib:.1f} MiB JSON)")
    for label, r, what in (("orjson.loads", base, "events, dicts only"),
                           ("traceread ingest", ours, "table rows")):
        print(f"{label:<17}{r['seconds']:.3f} s wall, {r['cpu']:.3f} s CPU   "
              f"peak RSS {r['peak_rss'] / mib:5.0f} MiB   ({r['rows']:,} {what})")
    print(f"ratio            {ours['seconds'] / base['seconds']:.2f}x orjson wall time, "
          f"{ours['cpu'] / base['cpu']:.2f}x its CPU time, "
          f"{ours['peak_rss'] / base['peak_rss']:.2f}x its peak RSS")
    print(f"load average     {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs (wall times are only comparable on an idle machine)")

if __name__ == "__main__":
    main()
