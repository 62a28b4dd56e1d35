"""``ingest``: Kineto ingest against merely parsing the same JSON bytes with orjson.

Both start from the same decompressed bytes, read from a temporary file:

* yardstick -- ``orjson.loads(data)``: a dict per event, nothing else;
* traceread -- ``readers.kineto.ingest(data)``: typed decode, columns, GPU pid join,
  collective fields, the finished Arrow table (on every side).

Each runs ``--inner`` times in its own process (so its peak RSS is its own), the
processes alternating for ``--repeat`` rounds so machine load hits all alike; the best
time of each is kept. traceread / orjson <= 1.0 means a finished table costs no more
than the bare parse. Needs the bench extra: pip install -e '.[bench]'.
"""
from __future__ import annotations

import gzip
import tempfile
import time
from pathlib import Path

from . import harness as h

FIGURES = (("seconds", "wall"), ("cpu", "CPU"), ("peak_rss", "peak RSS"))


def add_args(ap) -> None:
    ap.add_argument("trace", type=Path, help="TRACE.json or .json.gz")
    ap.add_argument("--inner", type=int, default=2, help="timed runs inside each process")
    ap.add_argument("--repeat", "--rounds", type=int, default=3, dest="repeat",
                    help="alternating rounds of processes")
    h.add_side_args(ap)


def main(args) -> int:
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        raw = args.trace.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        path = Path(tmp) / "trace.json"
        path.write_bytes(raw)
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")

        def measure(kind, side):
            if kind == "orjson" and side.name != "this":
                return None  # the yardstick is the same on every side
            return h.probe(side, in_memory, kind, str(path), args.inner)

        runs = h.interleave(["orjson", "ingest"], sides, args.repeat, measure)
    best = {(k, s.name): h.best(runs[(k, s.name)]) for k in ("orjson", "ingest") for s in sides}
    o = best[("orjson", "this")]
    if o is None:
        raise SystemExit(f"orjson failed: {h.failure(runs[('orjson', 'this')])}")
    table = h.Table(sides)
    for fig, name in FIGURES:
        fmt = h.fmt_mb if fig == "peak_rss" else h.fmt_s
        table.add(f"orjson.loads: {name}", {"this": o.result[fig]}, fmt)
        table.add(f"traceread ingest: {name}", {s.name: _fig(best[("ingest", s.name)], fig)
                                                for s in sides}, fmt)
    for fig, name in FIGURES:
        table.add(f"ingest / orjson: {name}", {s.name: _ratio(best[("ingest", s.name)], o, fig)
                                               for s in sides}, lambda x: f"{x:.2f}×")
    print(f"{args.trace} ({len(raw) / 2**20:.1f} MiB JSON, {o.result['rows']:,} events; "
          f"best of {args.repeat} x {args.inner}):\n\n{table.markdown()}\n")
    print(f"load average after: {h.load()} (wall times are only comparable on an idle machine)")
    return 0


def _fig(r, fig):
    return r.result[fig] if r else None


def _ratio(r, o, fig):
    return r.result[fig] / o.result[fig] if r and o.result[fig] else None


def in_memory(kind: str, path: str, inner: int) -> dict:
    """Probe: the best of ``inner`` parses of the file's bytes, already in memory."""
    import resource

    data = open(path, "rb").read()
    if kind == "orjson":
        try:
            import orjson
        except ImportError:
            return {"skip": "orjson not installed (pip install -e '.[bench]')"}

        def parse():
            doc = orjson.loads(data)
            return len(doc.get("traceEvents", doc) if isinstance(doc, dict) else doc)
    else:
        from traceread.readers.kineto import ingest

        def parse():
            return len(ingest(data, path))
    best = cpu = float("inf")
    rows = 0
    for _ in range(inner):
        t, c = time.perf_counter(), time.process_time()
        rows = parse()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"seconds": best, "cpu": cpu, "peak_rss": peak, "rows": rows}
