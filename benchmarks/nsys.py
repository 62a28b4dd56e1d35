"""``nsys``: the nsys reader on a big synthetic export: time, peak memory, a naive yardstick.

Writes an nsys-shaped SQLite export (``synth/nsys.py``: N kernels, the N runtime calls
that launch them and N/8 NVTX ranges with inline text; ~95 B per kernel row, 1 M
kernels: 89 MB, 6.5 M: ~0.6 GB) under /tmp, then, each in its own process:

* yardstick (once): ``pandas.read_sql_query`` of the kernel and runtime tables joined
  with StringIds and of NVTX_EVENTS, what most nsys scripts do (no table built);
* ``traceread.load`` on every side (e.g. ``--baseline 8c9534e``, the last reader that
  fetched whole tables with ``fetchall()``): wall, peak RSS (``ru_maxrss``), RSS after
  the imports, the table's ``nbytes`` (a buffer shared by several columns counted once
  per column), its bytes with each buffer once, per kernel row, and a digest of every
  column (values, nulls, dictionaries and their order): every side must build the same
  table;
* with ``--analyze``: ``traceread analyze --no-cache --format json`` end to end on every
  side (wall, CPU and peak memory of the process tree), per million kernel rows, and
  whether every side printed the same JSON; ``--timeout``
  stops a run that would take too long.

``--build-only`` writes the export to ``--out`` and stops (e.g. for profiling).
"""
from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from pathlib import Path

from . import harness as h
from .steps import Case, rows

BATCH = 1_000_000


def add_args(ap) -> None:
    ap.add_argument("--kernels", type=int, default=6_500_000)
    ap.add_argument("--out", default="/tmp/traceread_nsys_big.sqlite", help="the export")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the export")
    ap.add_argument("--analyze", action="store_true",
                    help="also time `traceread analyze --no-cache` end to end")
    ap.add_argument("--timeout", type=float, default=240.0, help="--analyze: stop a run after this")
    ap.add_argument("--build-only", action="store_true", help="only write the export to --out")
    ap.add_argument("--tile", metavar="SQLITE", help="tile this real export to --kernels "
                    "(scripts/make_big_nsys.py) instead of writing a synthetic one")
    ap.add_argument("--no-pandas", action="store_true", help="skip the read_sql yardstick")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    path = Path(args.out)
    if args.build_only or not (args.keep and path.exists()):
        h.say(f"writing {path} ({args.kernels:,} kernels)")
        if args.tile:
            _tile(Path(args.tile), path, args.kernels)
        else:
            build(path, args.kernels)
    if args.build_only:
        print(f"{path}: {h.fmt_mb(path.stat().st_size)}")
        return 0
    try:
        return measure_all(path, args)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)


def _tile(src: Path, path: Path, kernels: int) -> None:
    """``scripts/make_big_nsys.py``: SRC's capture repeated until it holds ``kernels``."""
    import importlib.util

    if not src.is_file():
        raise SystemExit(f"--tile {src}: no such export (give its path)")

    spec = importlib.util.spec_from_file_location(
        "make_big_nsys", Path(__file__).resolve().parents[1] / "scripts" / "make_big_nsys.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    print(mod.tile(src, path, kernels))


def measure_all(path: Path, args) -> int:
    size, millions = path.stat().st_size, args.kernels / 1e6
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        yard = None if args.no_pandas else h.probe(sides[0], read_sql, str(path))
        cases = ["load"] + (["analyze"] if args.analyze else [])
        an = Case("analyze", str(path))

        def one(case, side):
            if case == "load":
                return h.probe(side, load, str(path))
            return h.run([sys.executable, "-m", "traceread", "analyze", "--no-cache", "--format",
                          "json", str(path)], side.env(), args.timeout)

        runs = h.interleave(cases, sides, args.repeat, one)
    best = {s.name: h.best(runs[("load", s.name)]) for s in sides}
    table = h.Table(sides)
    if yard is not None:
        table.add("pandas read_sql, no table (yardstick): seconds",
                  {"this": yard.result.get("seconds") if yard.ok else yard.err})
    get = lambda key: {n: r.result[key] if r else None for n, r in best.items()}  # noqa: E731
    table.add("traceread.load: seconds", get("seconds"))
    table.add("traceread.load: peak RSS", get("peak_rss"), h.fmt_mb)
    table.add("traceread.load: RSS after imports", get("rss_imports"), h.fmt_mb)
    table.add("traceread.load: table bytes (`nbytes`: shared buffers once per column)",
              get("nbytes"), h.fmt_mb)
    table.add("traceread.load: table bytes, each buffer once",
              {n: r.result.get("distinct") if r else None for n, r in best.items()}, h.fmt_mb)
    table.add("table bytes (each once) / kernel row",
              {n: r.result["distinct"] / args.kernels if r and r.result.get("distinct") and
               args.kernels else None for n, r in best.items()}, lambda v: f"{v:,.0f} B")
    x = lambda v: f"{v:.2f}×"  # noqa: E731
    table.add("peak RSS / table", {n: r.result["peak_rss"] / r.result["nbytes"] if r else None
                                   for n, r in best.items()}, x)
    table.add("(peak RSS - imports) / table",
              {n: (r.result["peak_rss"] - r.result["rss_imports"]) / r.result["nbytes"]
               if r else None for n, r in best.items()}, x)
    table.add("peak RSS / file", {n: r.result["peak_rss"] / size if r else None
                                  for n, r in best.items()}, x)
    if args.analyze:
        a = {s.name: h.best(runs[("analyze", s.name)]) for s in sides}
        rows(table, an, a, 0)
        table.add("analyze: CPU s / M kernel rows", {n: r.cpu / millions if r else None
                                                     for n, r in a.items()}, lambda v: f"{v:.2f}")
        table.add("analyze: peak RSS MB / M kernel rows",
                  {n: r.peak / 1e6 / millions if r else None for n, r in a.items()},
                  lambda v: f"{v:,.0f}")
    print(f"export: {path} {h.fmt_mb(size)}, {args.kernels:,} kernel rows "
          f"(+ launches + NVTX ranges); best of {args.repeat}:\n\n{table.markdown()}\n")
    for (case, name), rs in runs.items():
        if h.best(rs) is None:
            print(f"{case} on {name} failed or stopped: {h.failure(rs)}")
    if yard is not None and best["this"]:
        print(f"* pandas read_sql / traceread.load: "
              f"{h.fmt_ratio(yard.result.get('seconds'), best['this'].result['seconds'])}")
    if args.analyze:   # the analysis itself (JSON report) must not move either
        out = {n: hashlib.sha256(r.out).hexdigest() for n, r in a.items() if r}
        print(f"* analyze --format json identical to this checkout's: "
              f"{ {n: d == out.get('this') for n, d in out.items() if n != 'this'} }")
    checks = {n: (r.result["check"], r.result["rows"]) for n, r in best.items() if r}
    same = {n: c == checks.get("this") for n, c in checks.items() if n != "this"}
    if same:
        print(f"* same table as this checkout's: {same}")
    return 1 if not all(same.values()) else 0


def build(path: Path, n: int) -> None:
    """n kernels, n runtime launches, n/8 NVTX ranges (inline text), in executemany batches."""
    sys.path.insert(0, str(h.SRC))
    import numpy as np

    from traceread.synth.nsys import NsysWriter, gpid, gtid

    path.unlink(missing_ok=True)
    w = NsysWriter(path)
    w.con.commit()  # the pragmas below cannot run inside the writer's open transaction
    w.con.execute("PRAGMA journal_mode=OFF")
    w.con.execute("PRAGMA synchronous=OFF")
    w.session_start(1_700_000_000_000_000_000)
    w.process(100, "trainer")
    w.thread(100, 101, "main")
    w.gpu(0, "NVIDIA H100")
    names = np.array([w.sid(f"void kernel_{i}<float>(float *, int)") for i in range(200)])
    shorts = np.array([w.sid(f"kernel_{i}") for i in range(200)])
    api = w.sid("cudaLaunchKernel_v7000")
    rng = np.random.default_rng(0)
    gp, gt = gpid(100), gtid(100, 101)
    t = 0
    for lo in range(0, n, BATCH):
        m = min(BATCH, n - lo)
        start = t + np.cumsum(rng.integers(500, 5000, m))
        t = int(start[-1])
        end = start + rng.integers(100, 4000, m)
        k = rng.integers(0, 200, m)
        corr = np.arange(lo, lo + m)
        stream = 7 + (k % 4)
        w.con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,0,1,?,?,?,?,?,NULL,1,128)",
            zip(start.tolist(), end.tolist(), stream.tolist(), corr.tolist(), [gp] * m,
                names[k].tolist(), shorts[k].tolist()))
        w.con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0,NULL)",
            zip((start - 400).tolist(), (start - 100).tolist(), [gt] * m, corr.tolist(),
                [api] * m))
        sel = slice(0, m, 8)
        w.con.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
            "VALUES (?,?,59,?,?,0)",
            zip(start[sel].tolist(), (start[sel] + 3000).tolist(),
                [f"op {i % 50}" for i in corr[sel].tolist()], [gt] * len(corr[sel])))
    w.close()


def read_sql(path: str) -> dict:
    """Probe (the yardstick): the tables as DataFrames, names joined, no event table."""
    import sqlite3

    import pandas as pd

    t = time.perf_counter()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    k = pd.read_sql_query("SELECT k.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "LEFT JOIN StringIds s ON s.id = k.demangledName", con)
    r = pd.read_sql_query("SELECT r.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                          "LEFT JOIN StringIds s ON s.id = r.nameId", con)
    v = pd.read_sql_query("SELECT * FROM NVTX_EVENTS", con)
    con.close()
    return {"seconds": time.perf_counter() - t, "rows": len(k) + len(r) + len(v)}


def load(path: str) -> dict:
    """Probe: ``traceread.load`` of the export; peak RSS before the digests below."""
    import hashlib
    import resource

    t0 = time.perf_counter()
    import numpy as np
    import pyarrow as pa

    import traceread

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t1 = time.perf_counter()
    trace = traceread.load(path)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tab = trace.table
    check = {}
    for c in tab.column_names:
        col = tab.column(c).combine_chunks()
        d = hashlib.blake2b(digest_size=12)
        if pa.types.is_dictionary(col.type):
            d.update("\0".join(col.dictionary.to_pylist()).encode())
            col = col.indices
        d.update(np.asarray(col.fill_null(-1)).tobytes())
        d.update(np.asarray(col.is_null()).tobytes())
        check[c] = d.hexdigest()
    return {"seconds": t2 - t1, "imports_s": t1 - t0, "rows": tab.num_rows, "nbytes": tab.nbytes,
            "distinct": distinct_bytes(tab), "rss_imports": rss0, "peak_rss": peak,
            "check": check}


def distinct_bytes(tab) -> int:
    """Bytes of the table's buffers, each counted once. ``Table.nbytes`` counts a buffer
    once per column that holds it, and the reader shares one all-default (-1 / null)
    array among the columns a trace never fills: 19 of 33 on a Kineto trace, ~12 on nsys."""
    seen: dict[int, int] = {}
    for col in tab.columns:
        for chunk in col.chunks:
            arrays = [chunk, chunk.dictionary] if hasattr(chunk, "dictionary") else [chunk]
            for arr in arrays:
                for b in arr.buffers():
                    if b is not None:
                        seen[b.address] = max(seen.get(b.address, 0), b.size)
    return sum(seen.values())
