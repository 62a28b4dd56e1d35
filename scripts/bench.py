#!/usr/bin/env python3
"""Big-trace benchmark: traceread vs HTA vs orjson.loads, time and peak RSS.

    python scripts/bench.py [--sizes 50MB,500MB,2GB] [--src TRACE] [--workdir /tmp/traceread-bench]

For each size, ``scripts/make_big_trace.py`` tiles a real Kineto trace to that
uncompressed size under ``--workdir`` (never in the repo). Then, each in its
own process, measured in this one run:

* ``orjson.loads``   -- the bytes read, then ``orjson.loads`` alone (timed inside)
* ``traceread read`` -- ingest only: ``traceread.load(path)`` (streaming path for big files)
* ``traceread analyze`` -- ``traceread analyze --no-cache --format json`` end to end (process wall time)
* ``analyze (cached)`` -- the same command again with the cache warm
* ``HTA load`` / ``HTA analyses`` -- ``TraceAnalysis(trace_dir=...)`` and then
  ``get_temporal_breakdown``, ``get_idle_time_breakdown``, ``get_comm_comp_overlap``
  (run with ``--hta-python``, a separate venv with HolisticTraceAnalysis; skipped
  politely when that interpreter or package is missing, or the trace is larger
  than ``--hta-max``)

Peak RSS is the peak of the *sum* over the process tree (worker processes
included), sampled every 20 ms with psutil. Prints one Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SRC = (REPO.parent / "shared" / "corpus" / "facebookresearch__HolisticTraceAnalysis" / "tests"
               / "data" / "df_index_resolver" / "df_index_resolver.json.gz")
sys.path.insert(0, str(HERE))
from make_big_trace import make, parse_size  # noqa: E402

ORJSON = """
import sys, time, orjson
data = open(sys.argv[1], 'rb').read()
t = time.perf_counter(); doc = orjson.loads(data); dt = time.perf_counter() - t
print('RESULT', dt, len(doc['traceEvents']))
"""
READ = """
import sys, time
t = time.perf_counter()
import traceread
tr = traceread.load(sys.argv[1])
print('RESULT', time.perf_counter() - t, len(tr))
"""
HTA = """
import sys, time, logging, warnings
warnings.filterwarnings('ignore'); logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t_load = time.perf_counter() - t
t = time.perf_counter()
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
print('RESULT', t_load, time.perf_counter() - t)
"""


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> dict:
    """Run a process; wall time, peak RSS of its whole tree, and its RESULT line."""
    t0 = time.perf_counter()
    # measure this checkout, whatever traceread the environment has installed
    pypath = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": pypath, **(env or {})})
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [ps] + ps.children(recursive=True)
            peak = max(peak, sum(_rss(p) for p in procs))
        except psutil.Error:
            pass
        if time.perf_counter() - t0 > timeout:
            proc.kill()
        time.sleep(0.02)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT"):
            result = [float(x) for x in line.split()[1:]]
    return {"ok": proc.returncode == 0, "wall": wall, "peak": peak, "result": result,
            "err": err.strip().splitlines()[-1:] if proc.returncode else []}


def _rss(p: psutil.Process) -> int:
    try:
        return p.memory_info().rss
    except psutil.Error:
        return 0


def hta_available(python: str) -> bool:
    if not python or not Path(python).exists():
        return False
    r = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return r.returncode == 0


def fmt_s(x) -> str:
    return "—" if x is None else (f"{x:.2f} s" if x < 100 else f"{x:.0f} s")


def fmt_mb(b) -> str:
    return "—" if not b else f"{b / 1e6:,.0f} MB"


def bench_one(path: Path, args, cache_dir: str, have_hta: bool) -> dict:
    raw = path.stat().st_size
    py = sys.executable
    r: dict = {"size": raw}
    r["orjson"] = run([py, "-c", ORJSON, str(path)])
    r["read"] = run([py, "-c", READ, str(path)], env={"TRACEREAD_NO_CACHE": "1"})
    tr = [py, "-m", "traceread.cli", "analyze"] if args.module else ["traceread", "analyze"]
    env = {"TRACEREAD_CACHE_DIR": cache_dir}
    r["analyze"] = run(tr + ["--format", "json", "-o", os.devnull, str(path)],
                       env={**env, "TRACEREAD_NO_CACHE": "1"})
    run(tr + ["--format", "json", "-o", os.devnull, str(path)], env=env)  # fills the cache
    r["cached"] = run(tr + ["--format", "json", "-o", os.devnull, str(path)], env=env)
    if have_hta and raw <= args.hta_max:
        r["hta"] = run([args.hta_python, "-c", HTA, str(path.parent)], timeout=args.hta_timeout)
    return r


def table(results: list[dict], have_hta: bool) -> str:
    rows = ["| trace (raw JSON) | table rows | orjson.loads | traceread read | traceread analyze "
            "| analyze (cached) | HTA load | HTA analyses | HTA load / analyze | orjson / read "
            "| peak RSS: orjson | read | analyze | HTA | analyze RSS / raw |",
            "|" + "---|" * 15]
    for r in results:
        o, rd, a, c, h = r["orjson"], r["read"], r["analyze"], r["cached"], r.get("hta")
        t_o = o["result"][0] if o["ok"] and o["result"] else None
        t_r = rd["result"][0] if rd["ok"] and rd["result"] else None
        t_a = a["wall"] if a["ok"] else None
        t_hl = h["result"][0] if h and h["ok"] and h["result"] else None
        t_ha = h["result"][1] if h and h["ok"] and h["result"] else None
        n = int(rd["result"][1]) if t_r else 0
        ratio_h = f"{t_hl / t_a:.1f}×" if t_hl and t_a else ("skipped" if not h else "failed")
        ratio_o = f"{t_o / t_r:.2f}×" if t_o and t_r else "—"
        rows.append(
            f"| {fmt_mb(r['size'])} | {n:,} | {fmt_s(t_o)} | {fmt_s(t_r)} | {fmt_s(t_a)} "
            f"| {fmt_s(c['wall'] if c['ok'] else None)} | {fmt_s(t_hl)} | {fmt_s(t_ha)} "
            f"| {ratio_h} | {ratio_o} | {fmt_mb(o['peak'])} | {fmt_mb(rd['peak'])} "
            f"| {fmt_mb(a['peak'])} | {fmt_mb(h['peak']) if h else '—'} "
            f"| {a['peak'] / r['size']:.2f} |")
    return "\n".join(rows)


INFLATE = """
import sys, time, importlib
mod = importlib.import_module(sys.argv[2])
t = time.perf_counter(); n = 0
with mod.open(sys.argv[1], 'rb') as f:
    while True:
        b = f.read(1 << 24)
        if not b:
            break
        n += len(b)
print('RESULT', time.perf_counter() - t, n)
"""
INFLATERS = (("stdlib gzip", "gzip"), ("python-isal igzip", "isal.igzip"),
             ("zlib-ng gzip_ng", "zlib_ng.gzip_ng"))


def bench_inflate(path: Path) -> int:
    """Streaming gunzip throughput of each inflater (separate processes), vs stdlib."""
    rows = ["| inflater | seconds | MB/s (inflated) | vs stdlib |", "|---|---|---|---|"]
    base = None
    for label, module in INFLATERS:
        r = run([sys.executable, "-c", INFLATE, str(path), module])
        if not r["ok"] or not r["result"]:
            rows.append(f"| {label} | unavailable | — | — |")
            continue
        dt, n = r["result"]
        base = base or dt
        rows.append(f"| {label} | {dt:.2f} | {n / 1e6 / dt:,.0f} | {base / dt:.2f}× |")
    print(f"{path.name}: {path.stat().st_size / 1e6:,.0f} MB compressed\n")
    print("\n".join(rows))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inflate", type=Path, metavar="FILE.gz",
                    help="only compare gzip inflaters on this file and exit")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC, help="real Kineto trace to tile")
    ap.add_argument("--sizes", default="50MB,500MB,2GB")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "traceread-bench")
    ap.add_argument("--gz", action="store_true", help="benchmark .json.gz files instead")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python",
                    help="interpreter of a venv with HolisticTraceAnalysis installed")
    ap.add_argument("--hta-max", type=parse_size, default=parse_size("1GB"),
                    help="skip HTA above this raw size (it needs ~8x the trace in RAM)")
    ap.add_argument("--hta-timeout", type=float, default=1800)
    ap.add_argument("--module", action="store_true", help="run the CLI as python -m")
    ap.add_argument("--keep", action="store_true", help="keep generated traces")
    ap.add_argument("--json", type=Path, help="also write raw results here")
    args = ap.parse_args(argv)
    if args.inflate:
        return bench_inflate(args.inflate)
    if not args.src.is_file():
        print(f"source trace {args.src} not found (pass --src)", file=sys.stderr)
        return 2
    have_hta = hta_available(args.hta_python)
    if not have_hta:
        print(f"HTA not available at {args.hta_python}: skipping its columns "
              "(python -m venv /tmp/hta-venv; /tmp/hta-venv/bin/pip install HolisticTraceAnalysis)",
              file=sys.stderr)
    results = []
    for size_text in args.sizes.split(","):
        size = parse_size(size_text)
        d = args.workdir / size_text.strip()
        d.mkdir(parents=True, exist_ok=True)
        path = d / ("rank-1.trace.json" + (".gz" if args.gz else ""))
        if not path.exists():
            print(f"making {path} ...", file=sys.stderr)
            make(args.src, size, path, quiet=True)
        cache_dir = tempfile.mkdtemp(prefix="trc-cache-", dir=args.workdir)
        print(f"benchmarking {path} ({path.stat().st_size / 1e6:,.0f} MB) ...", file=sys.stderr)
        r = bench_one(path, args, cache_dir, have_hta)
        if args.gz:  # ratios are against the uncompressed size
            r["size"] = r["size"] * 0 + _raw_size(path)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items()}, default=str), file=sys.stderr)
        subprocess.run(["rm", "-rf", cache_dir])
        if not args.keep:
            path.unlink()
    print(f"source: {args.src.name}; machine: {os.cpu_count()} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; "
          f"{'gzip' if args.gz else 'plain JSON'} inputs; load average during the run "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} (other jobs share the cores)\n")
    print(table(results, have_hta))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


def _raw_size(path: Path) -> int:
    import gzip

    n = 0
    with gzip.open(path, "rb") as f:
        while True:
            b = f.read(1 << 24)
            if not b:
                return n
            n += len(b)


if __name__ == "__main__":
    sys.exit(main())
