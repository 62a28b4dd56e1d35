"""Time the nsys reader on a large synthetic export against a naive baseline.

Baseline: pandas.read_sql_query of the kernel and runtime tables joined with
StringIds (what most nsys scripts do), no table assembly at all. Both run in
this process on the same file. Usage: python scripts/bench_nsys_read.py [N]
"""
from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from traceread.readers.nsys import read_nsys
from traceread.synth.nsys import NsysWriter, gpid, gtid


def build(path: Path, n: int) -> None:
    w = NsysWriter(path)
    names = [w.sid(f"kernel_{i}(float *, int)") for i in range(200)]
    api = w.sid("cudaLaunchKernel_v7000")
    rng = np.random.default_rng(0)
    start = np.cumsum(rng.integers(500, 5000, n))
    dur = rng.integers(100, 4000, n)
    nid = rng.choice(names, n)
    w.con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        ((int(s), int(s + d), 0, 1, 7, i, gpid(100), int(k), int(k), None, 1, 1)
         for i, (s, d, k) in enumerate(zip(start, dur, nid))))
    w.con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
        ((int(s) - 400, int(s) - 100, 0, gtid(100, 101), i, api, 0, None)
         for i, s in enumerate(start)))
    w.con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?,?,?,?,?,?)",
        ((int(s), int(s) + 3000, 59, f"op {i % 50}", gtid(100, 101), 0)
         for i, s in enumerate(start[::4])))
    w.close()


def baseline(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    k = pd.read_sql_query("SELECT k.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "LEFT JOIN StringIds s ON s.id = k.demangledName", con)
    r = pd.read_sql_query("SELECT r.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                          "LEFT JOIN StringIds s ON s.id = r.nameId", con)
    v = pd.read_sql_query("SELECT * FROM NVTX_EVENTS", con)
    con.close()
    return len(k) + len(r) + len(v)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.sqlite"
        build(path, n)
        t0 = time.perf_counter()
        rows = baseline(path)
        t1 = time.perf_counter()
        trace = read_nsys(path)
        t2 = time.perf_counter()
    print(f"{n} kernels, {len(trace)} events")
    print(f"baseline pandas.read_sql_query (no table): {t1 - t0:.2f} s for {rows} rows")
    print(f"traceread read_nsys (full event table):   {t2 - t1:.2f} s")
    print(f"ratio baseline / traceread: {(t1 - t0) / (t2 - t1):.2f}x")


if __name__ == "__main__":
    main()
