"""Peak memory of the nsys reader on a big synthetic export, before vs after.

Writes an nsys-shaped SQLite export with ``synth/nsys.py`` (kernels, the
runtime calls that launch them, NVTX ranges with inline text; default
6 M + 6 M + 0.75 M rows, ~0.6 GB) under /tmp, then loads it with
``traceread.load`` in separate processes:

* *before*: the reader as of ``--baseline REV`` (default: the last commit
  that fetched whole tables with ``fetchall()``), extracted with
  ``git archive`` into a temporary directory and put first on PYTHONPATH;
* *after*: this checkout.

Each child reports its wall time, peak RSS (``ru_maxrss``), RSS after the
imports (the constant), the finished table's ``nbytes`` and a checksum of
its columns (both readers must build the same table). Prints the ratios
peak RSS / table bytes and peak RSS / file size.

    python scripts/bench_nsys_memory.py [--kernels 6000000] [--keep] [--no-baseline]

``--analyze``: instead of ``traceread.load``, time ``traceread analyze --no-cache``
end to end (a child process each; wall, user + sys CPU and peak RSS from
``wait4``, which include the forked side-pass workers), for the reader at
``--baseline`` (default ``main`` here) and this checkout, in the same run, and
print per million kernel rows and the ratio baseline / this. ``--timeout`` stops
a run that would take too long (reported as stopped, with its RSS so far).

    python scripts/bench_nsys_memory.py --analyze --kernels 1000000 --out /tmp/nsys_1m.sqlite --keep

``--build-only`` writes the export and stops (1 M kernels: 89 MB, ~6 s; 5 M:
479 MB; the layout is ~95 B per kernel row with its launch and 1/8 NVTX range).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from traceread.synth.nsys import NsysWriter, gpid, gtid

# Last commit whose Db.fetch used fetchall() + zip(*rows).
BASELINE = "8c9534e"
BATCH = 1_000_000

CHILD = r"""
import hashlib, json, resource, sys, time
t0 = time.perf_counter()
import numpy as np, pyarrow as pa, traceread
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t1 = time.perf_counter()
trace = traceread.load(sys.argv[1])
t2 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before the digests below
tab = trace.table
# digest of every column (values, null masks, dictionaries and their order)
check = {}
for c in tab.column_names:
    col = tab.column(c).combine_chunks()
    h = hashlib.blake2b(digest_size=12)
    if pa.types.is_dictionary(col.type):
        h.update("\0".join(col.dictionary.to_pylist()).encode())
        col = col.indices
    h.update(np.asarray(col.fill_null(-1)).tobytes())
    h.update(np.asarray(col.is_null()).tobytes())
    check[c] = h.hexdigest()
print(json.dumps({"module": traceread.__file__, "seconds": t2 - t1, "rows": tab.num_rows,
                  "nbytes": tab.nbytes, "rss_imports": rss0,
                  "peak_rss": peak,
                  "check": check}))
"""


def build(path: Path, n: int) -> None:
    """n kernels, n runtime launches, n/8 NVTX ranges (inline text), in executemany batches."""
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


def export_rev(rev: str, dest: Path) -> Path:
    """The package source at ``rev``, without touching the work tree or index."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/traceread"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "src"


def measure(path: Path, src: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure_analyze(path: Path, src: Path, timeout: float) -> dict:
    """``traceread analyze --no-cache`` in a child; wall, CPU and peak RSS from wait4."""
    import time
    env = dict(os.environ, PYTHONPATH=str(src))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "traceread", "analyze", "--no-cache", str(path)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stopped = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t0 > timeout:
            proc.kill()
            stopped = True
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    return {"seconds": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime,
            "peak_rss": ru.ru_maxrss * 1024, "stopped": stopped, "status": status}


def analyze_main(a, path: Path) -> None:
    size = path.stat().st_size
    millions = a.kernels / 1e6
    print(f"export: {path} {mb(size)}, {a.kernels:,} kernel rows; load average {os.getloadavg()}")
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        if not a.no_baseline:
            runs[f"base {a.baseline}"] = measure_analyze(path, export_rev(a.baseline, Path(d)),
                                                       a.timeout)
        runs["this"] = measure_analyze(path, ROOT / "src", a.timeout)
    print(f"{'':14} {'wall':>8} {'CPU':>8} {'peak RSS':>10} {'s / M rows':>10} {'MB / M rows':>11}")
    for k, r in runs.items():
        flag = " (stopped)" if r["stopped"] else ("" if r["status"] == 0 else " (failed)")
        print(f"{k:14} {r['seconds']:>7.1f}s {r['cpu']:>7.1f}s {mb(r['peak_rss']):>10} "
              f"{r['cpu'] / millions:>10.2f} {r['peak_rss'] / 1e6 / millions:>11.0f}{flag}")
    if len(runs) == 2:
        b, n = runs.values()
        print(f"baseline / this: CPU {b['cpu'] / n['cpu']:.2f}x, wall {b['seconds'] / n['seconds']:.2f}x, "
              f"peak RSS {b['peak_rss'] / n['peak_rss']:.2f}x"
              + (" (baseline stopped: a lower bound)" if b["stopped"] else ""))


def mb(x: float) -> str:
    return f"{x / 1e6:,.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", type=int, default=6_500_000)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the 'before' reader")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--out", default="/tmp/traceread_nsys_big.sqlite")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the export")
    ap.add_argument("--analyze", action="store_true",
                    help="time `traceread analyze --no-cache` end to end (baseline: main)")
    ap.add_argument("--timeout", type=float, default=240.0, help="--analyze: stop a run after this")
    ap.add_argument("--build-only", action="store_true",
                    help="only write the export to --out (kept), e.g. for profiling")
    a = ap.parse_args()
    if a.build_only:
        build(Path(a.out), a.kernels)
        print(f"{a.out}: {mb(Path(a.out).stat().st_size)}")
        return
    if a.analyze and a.baseline == BASELINE:
        a.baseline = "main"
    path = Path(a.out)
    if not (a.keep and path.exists()):
        build(path, a.kernels)
    if a.analyze:
        try:
            analyze_main(a, path)
        finally:
            if not a.keep:
                path.unlink(missing_ok=True)
        return
    size = path.stat().st_size
    print(f"export: {path} {mb(size)} (kernels + runtime launches + NVTX ranges); "
          f"load average {os.getloadavg()}")
    runs = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            if not a.no_baseline:
                runs["before"] = measure(path, export_rev(a.baseline, Path(d)))
            runs["after"] = measure(path, ROOT / "src")
    finally:
        if not a.keep:
            path.unlink(missing_ok=True)
    print(f"{'':8} {'rows':>12} {'time':>8} {'peak RSS':>10} {'imports':>9} {'table':>9} "
          f"{'RSS/table':>9} {'(RSS-imports)/table':>19} {'RSS/file':>8}")
    for k, r in runs.items():
        print(f"{k:8} {r['rows']:>12,} {r['seconds']:>7.1f}s {mb(r['peak_rss']):>10} "
              f"{mb(r['rss_imports']):>9} {mb(r['nbytes']):>9} "
              f"{r['peak_rss'] / r['nbytes']:>8.2f}x "
              f"{(r['peak_rss'] - r['rss_imports']) / r['nbytes']:>18.2f}x "
              f"{r['peak_rss'] / size:>7.2f}x")
    if "before" in runs:
        b, n = runs["before"], runs["after"]
        # nbytes may differ by a few bytes of buffer slack in the dictionaries; the
        # digests compare every value, null and dictionary (order included)
        same = b["check"] == n["check"] and b["rows"] == n["rows"]
        print(f"same table: {same}; peak RSS before/after {b['peak_rss'] / n['peak_rss']:.2f}x, "
              f"time before/after {b['seconds'] / n['seconds']:.2f}x")
        if not same:
            sys.exit("tables differ between the two readers")


if __name__ == "__main__":
    main()
