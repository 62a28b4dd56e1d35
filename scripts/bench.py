#!/usr/bin/env python3
"""Big-trace benchmark: traceread vs HTA vs orjson.loads, one run, one file.

    python scripts/bench.py TRACE [--workers 1,2,4,8] [--no-hta] [--json-out FILE]
    python scripts/bench.py --size 500MB [--src TRACE]   # tile a real trace under /tmp first
    python scripts/bench.py --inflate FILE.json.gz       # gzip inflaters only

Every step runs in its own process, one after the other, on the same file, in
this one run (ratios are only ever taken between figures of the same run):

* ``orjson.loads``: the bytes read (and gunzipped) first, then the parse alone
  (skipped when orjson is not installed);
* ingest, each decoder: ``traceread.load(path)`` with ``TRACEREAD_DECODER=python``
  (msgspec) and ``native`` (the C scanner), imports included;
* ``analyze`` end to end, each decoder: ``python -m traceread.cli analyze
  --no-cache --format json`` (process wall time, CPU time, peak RSS);
* stages of ``analyze`` (native, 1 worker and the most workers): imports,
  split + decode, finish (join, columns, sort, table), passes;
* HTA 0.5.0's load + ``get_temporal_breakdown`` in its own venv
  (``--hta-python``; skipped with ``--no-hta`` or when it is not installed);
* the worker curve: ingest and ``analyze`` (native) with 1, 2, 4 ... workers
  (``TRACEREAD_WORKERS``); by default powers of two up to ``os.cpu_count()``.

Peak memory is of the whole process tree (worker processes included), sampled
every 20 ms from /proc (psutil is not needed): the RSS sum, and PSS (a page
shared by forked processes counted once, split between them). CPU is user + system time of
the process and its children. The machine's load average is printed before
and after: on a shared machine wall times move with the other jobs.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SRC = (REPO.parent / "shared" / "corpus" / "facebookresearch__HolisticTraceAnalysis" / "tests"
               / "data" / "df_index_resolver" / "df_index_resolver.json.gz")
sys.path.insert(0, str(HERE))
from make_big_trace import parse_size  # noqa: E402

ORJSON = """
import sys, time, gzip
try:
    import orjson
except ImportError:
    print('SKIP orjson not installed'); sys.exit(0)
data = open(sys.argv[1], 'rb').read()
if data[:2] == b'\\x1f\\x8b':
    data = gzip.decompress(data)
t = time.perf_counter(); doc = orjson.loads(data); dt = time.perf_counter() - t
print('RESULT', dt, len(doc['traceEvents']) if isinstance(doc, dict) else len(doc))
"""
# RESULT: seconds from before `import traceread` to the finished table, rows.
READ = """
import sys, time
t = time.perf_counter()
import traceread
from traceread.readers import stream as S
w = int(sys.argv[2]) if len(sys.argv) > 2 else None
tr = S.read_stream(sys.argv[1], workers=w) if w else traceread.load(sys.argv[1])
print('RESULT', time.perf_counter() - t, len(tr))
"""
# RESULT: wall seconds of imports, split + decode, finish, passes (one process).
STAGES = """
import sys, time
t0 = time.perf_counter()
import traceread
from traceread.readers import stream as S
t1 = time.perf_counter()
fin = [0.0]
finish = S._finish
def timed(*a, **kw):
    t = time.perf_counter(); r = finish(*a, **kw); fin[0] += time.perf_counter() - t
    return r
S._finish = timed
tr = S.read_stream(sys.argv[1], workers=int(sys.argv[2]))
t2 = time.perf_counter()
traceread.analyze(tr)
t3 = time.perf_counter()
print('RESULT', t1 - t0, t2 - t1 - fin[0], fin[0], t3 - t2)
"""
HTA = """
import sys, time, logging, warnings
warnings.filterwarnings('ignore'); logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t_load = time.perf_counter() - t
print('LOADED', t_load, flush=True)
ta.get_temporal_breakdown(visualize=False)
print('RESULT', time.perf_counter() - t, t_load)
"""
CLI = "import sys; from traceread.cli import run; sys.argv[0] = 'traceread'; run()"   # the console script
DECODERS = ("python", "native")
# the CLI sets this itself before numpy loads; the library processes get the same
BASE_ENV = {"NUMPY_MADVISE_HUGEPAGE": "0", "TRACEREAD_NO_CACHE": "1"}


# --- running one step ------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _mem(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of one process; PSS is 0 where smaps_rollup is missing."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return rss, pss


def _tree_mem(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of pid and all its descendants (Linux /proc; zeros elsewhere).

    Forked workers map the parent's pages: the RSS sum counts those once per
    process, PSS splits each shared page between the processes mapping it.
    """
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        r, s = _mem(p)
        rss, pss = rss + r, pss + s
        todo += _children(p)
    return rss, pss


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> dict:
    """Run a process: wall time, CPU (user + sys, children included), peak RSS of its
    whole tree, and the numbers of its ``RESULT`` line (``SKIP why`` marks a skip)."""
    pypath = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": pypath, **(env or {})})
    peak = peak_pss = 0
    while proc.poll() is None:
        rss, pss = _tree_mem(proc.pid)
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        if time.perf_counter() - t0 > timeout:
            proc.kill()
        time.sleep(0.02)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if not peak:  # no /proc: the largest single process instead of the tree
        peak = int(after.ru_maxrss * 1024)
    result, skip, loaded = None, None, None
    for line in out.splitlines():
        if line.startswith("RESULT"):
            result = [float(x) for x in line.split()[1:]]
        elif line.startswith("SKIP"):
            skip = line[5:]
        elif line.startswith("LOADED"):
            loaded = float(line.split()[1])
    return {"ok": proc.returncode == 0 and not skip, "wall": wall, "cpu": cpu, "peak": peak,
            "peak_pss": peak_pss,
            "result": result, "skip": skip, "loaded": loaded,
            "err": err.strip().splitlines()[-1:] if proc.returncode else []}


def hta_available(python: str) -> bool:
    if not python or not Path(python).exists():
        return False
    r = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return r.returncode == 0


def fmt_s(x) -> str:
    return "—" if x is None else (f"{x:.2f} s" if x < 100 else f"{x:.0f} s")


def fmt_mb(b) -> str:
    return "—" if not b else f"{b / 1e6:,.0f} MB"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


def _res(r: dict | None, i: int = 0):
    return r["result"][i] if r and r["ok"] and r["result"] and len(r["result"]) > i else None


def _wall(r: dict | None):
    return r["wall"] if r and r["ok"] else None


def _cpu(r: dict | None):
    return r["cpu"] if r and r["ok"] else None


# --- the steps ---------------------------------------------------------------------

def _env(decoder: str, workers: int | None = None, cache: str | None = None) -> dict:
    env = {**BASE_ENV, "TRACEREAD_DECODER": decoder}
    if workers:
        env["TRACEREAD_WORKERS"] = str(workers)
    if cache:
        env["TRACEREAD_CACHE_DIR"] = cache
    return env


def _analyze_cmd(path: Path) -> list[str]:
    return [sys.executable, "-c", CLI, "analyze", "--no-cache", "--format", "json",
            "-o", os.devnull, str(path)]


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bench_file(path: Path, args) -> dict:
    py = sys.executable
    out: dict = {"path": str(path), "file_bytes": path.stat().st_size, "raw": _raw_size(path)}
    cache = tempfile.mkdtemp(prefix="trc-cache-")
    try:
        _say("orjson.loads")
        out["orjson"] = run([py, "-c", ORJSON, str(path)])
        for d in DECODERS:
            _say(f"ingest, {d} decoder")
            out[f"read/{d}"] = run([py, "-c", READ, str(path)], env=_env(d, cache=cache))
            _say(f"analyze, {d} decoder")
            out[f"analyze/{d}"] = run(_analyze_cmd(path), env=_env(d, cache=cache))
        out["stages"] = {}
        for w in sorted({1, max(args.workers)}):
            _say(f"stages, {w} worker(s)")
            out["stages"][w] = run([py, "-c", STAGES, str(path), str(w)], env=_env("native", w))
        out["curve"] = {}
        for w in args.workers:
            _say(f"workers {w}: ingest, analyze")
            out["curve"][w] = {
                "read": run([py, "-c", READ, str(path), str(w)], env=_env("native", w)),
                "analyze": run(_analyze_cmd(path), env=_env("native", w, cache)),
            }
        if args.have_hta and out["raw"] <= args.hta_max:
            _say("HTA load + temporal breakdown")
            with tempfile.TemporaryDirectory() as d:  # HTA reads a directory
                os.symlink(path.resolve(), Path(d) / path.name)
                out["hta"] = run([args.hta_python, "-c", HTA, d], timeout=args.hta_timeout)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


# --- the report --------------------------------------------------------------------

def report(r: dict, args) -> str:
    raw = r["raw"]
    rows_n = int(_res(r["read/native"], 1) or _res(r["read/python"], 1) or 0)
    lines = [f"trace: {r['path']} ({fmt_mb(r['file_bytes'])} on disk, {fmt_mb(raw)} raw JSON, "
             f"{rows_n:,} table rows)", ""]
    t = ["| step | wall | CPU | peak RSS (tree sum) | peak PSS | peak PSS / raw |",
         "|---|---|---|---|---|---|"]

    def row(label, rr, inner=None):
        if rr is None:
            return
        if not rr["ok"]:
            why = rr.get("skip") or " ".join(rr.get("err") or ["failed"])
            t.append(f"| {label} | {why} | | | | |")
            return
        w = inner if inner is not None else rr["wall"]
        t.append(f"| {label} | {fmt_s(w)} | {fmt_s(rr['cpu'])} | {fmt_mb(rr['peak'])} "
                 f"| {fmt_mb(rr['peak_pss'])} | {rr['peak_pss'] / raw:.2f}× |")

    row("orjson.loads (parse alone, bytes in memory)", r["orjson"], _res(r["orjson"]))
    for d in DECODERS:
        label = "msgspec" if d == "python" else "native C"
        row(f"ingest `traceread.load`, {label} decoder", r[f"read/{d}"], _res(r[f"read/{d}"]))
    for d in DECODERS:
        label = "msgspec" if d == "python" else "native C"
        row(f"`traceread analyze --no-cache`, {label} decoder", r[f"analyze/{d}"])
    if r.get("hta"):
        row("HTA load + temporal breakdown", r["hta"], _res(r["hta"]))
    lines += t + [""]

    an, ap = _wall(r["analyze/native"]), _wall(r["analyze/python"])
    rn, rp = _res(r["read/native"]), _res(r["read/python"])
    o = _res(r["orjson"])
    hta = _res(r.get("hta"))
    ratios = [f"* ingest: native vs msgspec {_ratio(rp, rn)} wall, "
              f"{_ratio(_cpu(r['read/python']), _cpu(r['read/native']))} CPU; "
              f"orjson.loads / native ingest {_ratio(o, rn)}",
              f"* analyze: native vs msgspec {_ratio(ap, an)} wall, "
              f"{_ratio(_cpu(r['analyze/python']), _cpu(r['analyze/native']))} CPU"]
    if hta:
        ratios.append(f"* **HTA / traceread analyze: {_ratio(hta, an)} wall, "
                      f"{_ratio(_cpu(r['hta']), _cpu(r['analyze/native']))} CPU** "
                      f"(HTA load alone {fmt_s(_res(r['hta'], 1))})")
    elif r.get("hta"):
        h = r["hta"]
        why = " ".join(h.get("err") or []) or "failed"
        if h.get("loaded"):
            ratios.append(f"* HTA's temporal breakdown failed ({why}) after its load; "
                          f"**HTA load alone / traceread analyze: {_ratio(h['loaded'], an)} "
                          f"wall** (load {fmt_s(h['loaded'])}; a lower bound on HTA's time)")
        else:
            ratios.append(f"* HTA failed: {why}")
    else:
        ratios.append("* HTA: not run" + (" (--no-hta)" if args.no_hta else
                                          f" (not installed at {args.hta_python})"))
    lines += ratios + [""]

    lines += ["Stages, native decoder, one process (wall; the workers decode chunks and run "
              "side passes):", "",
              "| workers | imports | split + decode | finish | passes | total |",
              "|---|---|---|---|---|---|"]
    for w, s in r["stages"].items():
        v = s["result"] if s["ok"] and s["result"] else None
        lines.append(f"| {w} | " + (" | ".join(fmt_s(x) for x in v) + f" | {fmt_s(sum(v))} |"
                                    if v else "failed | | | | |"))
    lines += ["", "Worker curve, native decoder (wall / CPU; speed-up vs 1 worker):", "",
              "| workers | ingest | ingest speed-up | analyze | analyze speed-up "
              "| analyze peak PSS / RSS sum |",
              "|---|---|---|---|---|---|"]
    c = r["curve"]
    r1 = _res(c[min(c)]["read"]) if c else None
    a1 = _wall(c[min(c)]["analyze"]) if c else None
    for w, x in c.items():
        ri, ai = _res(x["read"]), _wall(x["analyze"])
        lines.append(f"| {w} | {fmt_s(ri)} / {fmt_s(_cpu(x['read']))} | {_ratio(r1, ri)} "
                     f"| {fmt_s(ai)} / {fmt_s(_cpu(x['analyze']))} | {_ratio(a1, ai)} "
                     f"| {fmt_mb(x['analyze']['peak_pss'])} / {fmt_mb(x['analyze']['peak'])} |")
    return "\n".join(lines)


# --- gzip inflaters (unchanged) ----------------------------------------------------

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


def _raw_size(path: Path) -> int:
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    with gzip.open(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))


def _powers_of_two(n: int) -> list[int]:
    out, w = [], 1
    while w < n:
        out.append(w)
        w *= 2
    return out + [n]


def _machine() -> dict:
    from traceread.readers import decoder_name

    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 0
    from traceread.readers import _json_edges

    return {"cores": os.cpu_count(), "memory_bytes": mem, "python": platform.python_version(),
            "platform": platform.platform(), "decoder": decoder_name(),
            "inflater": _json_edges._zlib.__name__, "load_before": os.getloadavg()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, help="trace to measure (.json or .json.gz)")
    ap.add_argument("--size", help="no TRACE: tile --src to this raw size under --workdir (500MB)")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC, help="real Kineto trace to tile")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "traceread-bench")
    ap.add_argument("--workers", help="worker counts for the curve, e.g. 1,2,4,8 "
                    "(default: powers of two up to the core count)")
    ap.add_argument("--no-hta", action="store_true", help="do not run HTA")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python",
                    help="interpreter of a venv with HolisticTraceAnalysis installed")
    ap.add_argument("--hta-max", type=parse_size, default=parse_size("1.2GB"),
                    help="skip HTA above this raw size (it needs ~4-8x the trace in RAM)")
    ap.add_argument("--hta-timeout", type=float, default=1800)
    ap.add_argument("--json-out", type=Path, help="also write every raw figure here")
    ap.add_argument("--keep", action="store_true", help="keep a tiled trace")
    ap.add_argument("--inflate", type=Path, metavar="FILE.gz",
                    help="only compare gzip inflaters on this file and exit")
    args = ap.parse_args(argv)
    if args.inflate:
        return bench_inflate(args.inflate)
    sys.path.insert(0, str(REPO / "src"))
    args.workers = ([int(w) for w in args.workers.split(",")] if args.workers
                    else _powers_of_two(os.cpu_count() or 1))
    args.have_hta = not args.no_hta and hta_available(args.hta_python)
    if not args.no_hta and not args.have_hta:
        _say(f"HTA not available at {args.hta_python}: skipping it "
             "(python -m venv /tmp/hta-venv; /tmp/hta-venv/bin/pip install HolisticTraceAnalysis)")
    path, made = args.trace, False
    if path is None:
        from make_big_trace import make

        if not args.src.is_file():
            print(f"source trace {args.src} not found (pass TRACE or --src)", file=sys.stderr)
            return 2
        args.workdir.mkdir(parents=True, exist_ok=True)
        path = args.workdir / f"big-{args.size or '500MB'}.json"
        if not path.exists():
            _say(f"making {path}")
            make(args.src, parse_size(args.size or "500MB"), path, quiet=True)
            made = not args.keep
    elif not path.is_file():
        print(f"{path}: not a file", file=sys.stderr)
        return 2
    machine = _machine()
    try:
        r = bench_file(path, args)
    finally:
        if made:
            path.unlink()
    machine["load_after"] = os.getloadavg()
    print(f"machine: {machine['cores']} cores, {machine['memory_bytes'] / 2**30:.0f} GiB, "
          f"Python {machine['python']}; decoder: {machine['decoder']}; gzip inflater: "
          f"{machine['inflater']}; load average before / "
          f"after: {' / '.join(f'{x:.1f}' for x in machine['load_before'])} -> "
          f"{' / '.join(f'{x:.1f}' for x in machine['load_after'])}\n")
    print(report(r, args))
    if args.json_out:
        args.json_out.write_text(json.dumps({"machine": machine, **r}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
