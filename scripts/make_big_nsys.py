#!/usr/bin/env python3
"""Scale a real nsys SQLite export to any number of kernel rows by tiling its capture.

    python scripts/make_big_nsys.py SRC.sqlite --kernels 20000000 -o OUT.sqlite

The whole capture of SRC is repeated back to back: every row of every table with
``start`` and ``end`` columns (kernels, runtime calls, copies, NVTX ranges, syncs,
OS runtime calls, ...) is copied k times, shifted by k * period in time (period =
the capture's span + 1 ms) and by k * id_span in ``correlationId`` (so launches still
pair with their kernels). Other tables (strings, threads, processes, devices, stream
info, metadata) stay as they are. Copies are made by doubling inside SQLite
(``INSERT ... SELECT``), so a 20 M-kernel export takes minutes, not hours. The source
is only read. Never commit the outputs: generate them under /tmp at benchmark time.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import sys
import time
from pathlib import Path

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"


def _timed_tables(db: sqlite3.Connection) -> dict[str, list[tuple[str, bool]]]:
    """{table: [(column, is the integer primary key)]} of the tables with start and end."""
    out = {}
    for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        cols = [(r[1], bool(r[5]) and r[2].upper() == "INTEGER")
                for r in db.execute(f'PRAGMA table_info("{t}")')]
        names = {c for c, _ in cols}
        if {"start", "end"} <= names and db.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone():
            out[t] = cols
    return out


def _span(db, tables) -> tuple[int, int, int]:
    """(first start, period, correlation id span) over the timed tables."""
    lo, hi, corr = None, None, 0
    for t, cols in tables.items():
        a, b = db.execute(f'SELECT MIN(start), MAX("end") FROM "{t}"').fetchone()
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
        if any(c == "correlationId" for c, _ in cols):
            corr = max(corr, db.execute(f'SELECT MAX(correlationId) FROM "{t}"').fetchone()[0] or 0)
    return lo, (hi - lo) + 1_000_000, corr + 1


def _copy(db, t, cols, shift_ns: int, shift_corr: int, below_ns: int | None) -> None:
    """Insert the rows of ``t`` (those starting before ``below_ns``) shifted by one offset."""
    keep = [c for c, pk in cols if not pk]   # the integer primary key renumbers itself
    sel = []
    for c in keep:
        if c in ("start", "end"):
            sel.append(f'"{c}" + {shift_ns}')
        elif c == "correlationId":
            sel.append(f'CASE WHEN "{c}" IS NULL THEN NULL ELSE "{c}" + {shift_corr} END')
        else:
            sel.append(f'"{c}"')
    where = f" WHERE start < {below_ns}" if below_ns is not None else ""
    names = ", ".join(f'"{c}"' for c in keep)
    db.execute(f'INSERT INTO "{t}" ({names}) SELECT {", ".join(sel)} FROM "{t}"{where}')


def tile(src: Path, out: Path, kernels: int) -> dict:
    shutil.copyfile(src, out)
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    tables = _timed_tables(db)
    if KERNEL_TABLE not in tables:
        raise SystemExit(f"{src}: no {KERNEL_TABLE} rows to tile")
    per_copy = db.execute(f"SELECT COUNT(*) FROM {KERNEL_TABLE}").fetchone()[0]
    copies = max(1, math.ceil(kernels / per_copy))
    lo, period, corr = _span(db, tables)
    have = 1
    while have < copies:   # doubling: copies [0, have) -> [have, have + n)
        n = min(have, copies - have)
        for t, cols in tables.items():
            _copy(db, t, cols, have * period, have * corr,
                  lo + n * period if n < have else None)
        db.commit()
        have += n
    got = db.execute(f"SELECT COUNT(*) FROM {KERNEL_TABLE}").fetchone()[0]
    db.execute("ANALYZE")
    db.close()
    return {"copies": copies, "kernels": got, "period_ns": period, "corr_span": corr,
            "tables": len(tables)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--kernels", type=int, required=True, help="kernel rows wanted (at least)")
    ap.add_argument("-o", "--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.out.resolve() == a.src.resolve():
        print("the output must not be the source", file=sys.stderr)
        return 2
    t0 = time.time()
    info = tile(a.src, a.out, a.kernels)
    print(" ".join(f"{k}={v}" for k, v in info.items()),
          f"bytes={a.out.stat().st_size} seconds={time.time() - t0:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
