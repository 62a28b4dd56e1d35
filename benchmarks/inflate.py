"""``inflate``: streaming gunzip throughput of each inflater, against the stdlib's, one run.

Each inflater reads FILE.json.gz in 16 MB blocks in its own process (an inflater that
is not installed is reported as such).
"""
from __future__ import annotations

import time
from pathlib import Path

from . import harness as h

INFLATERS = (("stdlib gzip", "gzip"), ("python-isal igzip", "isal.igzip"),
             ("zlib-ng gzip_ng", "zlib_ng.gzip_ng"))


def add_args(ap) -> None:
    ap.add_argument("file", type=Path, metavar="FILE.json.gz")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")


def main(args) -> int:
    this = h.this_side()
    runs = h.interleave([m for _, m in INFLATERS], [this], args.repeat,
                        lambda m, side: h.probe(side, inflate, str(args.file), m))
    table = h.Table([this], "inflater")
    base = None
    lines = []
    for label, module in INFLATERS:
        r = h.best(runs[(module, "this")])
        if r is None:
            table.add(f"{label}: seconds", {"this": "unavailable"})
            continue
        dt, n = r.result["seconds"], r.result["bytes"]
        base = base or dt
        table.add(f"{label}: seconds", {"this": dt})
        table.add(f"{label}: MB/s inflated", {"this": n / 1e6 / dt}, lambda x: f"{x:,.0f}")
        lines.append(f"* {label}: {h.fmt_ratio(base, dt)} the stdlib's speed")
    print(f"{args.file.name}: {h.fmt_mb(args.file.stat().st_size)} compressed\n")
    print(table.markdown() + "\n\n" + "\n".join(lines))
    return 0


def inflate(path: str, module: str) -> dict:
    """Probe: seconds to stream-inflate ``path`` with ``module.open``."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return {"skip": f"{module} not installed"}
    t = time.perf_counter()
    n = 0
    with mod.open(path, "rb") as f:
        while b := f.read(1 << 24):
            n += len(b)
    return {"seconds": time.perf_counter() - t, "bytes": n}
