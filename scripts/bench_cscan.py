#!/usr/bin/env python3
"""Native (C) vs msgspec chunk decoder: decode, ingest and `analyze`, one run.

    python scripts/bench_cscan.py [--big 500MB] [--workers 1,2] [--hta-python PY]

Inputs: HTA's ``df_index_resolver.json.gz`` from the corpus (as shipped, and
inflated to plain JSON) and a tiling of it to ``--big`` uncompressed bytes
(``scripts/make_big_trace.py``, under ``--workdir``; deleted afterwards
unless ``--keep``). For each input, measured in this one run, every step in
its own process (``TRACEREAD_DECODER`` picks the decoder):

* *decode*: the chunks' decode alone (``stream.decode_chunk`` over every
  16 MB chunk, bytes already in memory), CPU seconds of that process
* *ingest*: ``traceread.load(path)`` (streaming reader, default workers)
* *analyze*: ``traceread analyze --no-cache --format json`` end to end
  (process wall time, imports included) and its peak RSS (process tree)
* *workers*: ingest of the big trace with 1..N workers (native decoder)
* *HTA*: load + temporal breakdown when ``--hta-python`` has HTA installed

Every ratio is msgspec path / native path of the same step in the same run.
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import DEFAULT_SRC, fmt_mb, fmt_s, hta_available  # noqa: E402
from bench import run as _run  # noqa: E402
from make_big_trace import make, parse_size  # noqa: E402

DECODE = """
import sys, time, gzip
from traceread.readers import stream as S, _native
path = sys.argv[1]
raw = open(path, 'rb').read()
if raw[:2] == b'\\x1f\\x8b':
    raw = gzip.decompress(raw)
start = S.find_array_start(raw[:S._HEAD_SCAN])
end = S.find_array_end(raw, start, raw[:start - 1])
bufs = [S._wrap(memoryview(raw)[a:b]) for a, b in S._split(raw, start, end, S.CHUNK_BYTES)]
del raw
S.decode_chunk(bufs[0])  # warm: imports, first allocations
t = time.process_time(); n = 0
for b in bufs:
    n += S.decode_chunk(b).n
print('RESULT', time.process_time() - t, n, _native.stats['python'])
"""
READ = """
import sys, time
t = time.perf_counter()
import traceread
from traceread.readers import stream as S
w = int(sys.argv[2]) if len(sys.argv) > 2 else None
tr = S.read_stream(sys.argv[1], workers=w) if w else traceread.load(sys.argv[1])
print('RESULT', time.perf_counter() - t, len(tr))
"""
STAGES = """
import sys, time
c0 = time.process_time()
import traceread
from traceread.readers import stream as S
c1 = time.process_time()
fin = [0.0]
finish = S._finish
def timed(*a, **kw):
    c = time.process_time(); r = finish(*a, **kw); fin[0] += time.process_time() - c
    return r
S._finish = timed
tr = S.read_stream(sys.argv[1], workers=1)
c2 = time.process_time()
traceread.analyze(tr)
c3 = time.process_time()
print('RESULT', c1 - c0, c2 - c1 - fin[0], fin[0], c3 - c2)
"""
HTA = """
import sys, time, logging, warnings
warnings.filterwarnings('ignore'); logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
print('RESULT', time.perf_counter() - t)
"""
CLI = "import sys; from traceread.cli import main; sys.argv[0] = 'traceread'; main()"
DECODERS = ("python", "native")


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> dict:
    """bench.run plus "cpu": user + sys seconds of the process and its workers.

    On a shared machine wall time swings with the other jobs' load; CPU time
    much less, so both are reported.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = _run(cmd, env=env, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r


def _env(decoder: str, cache: str) -> dict:
    return {"TRACEREAD_DECODER": decoder, "TRACEREAD_NO_CACHE": "1", "TRACEREAD_CACHE_DIR": cache}


def bench_file(path: Path, cache: str, args) -> dict:
    py = sys.executable
    out: dict = {"path": path, "raw": _raw_size(path)}
    for d in DECODERS:
        env = _env(d, cache)
        out[f"decode/{d}"] = run([py, "-c", DECODE, str(path)], env=env)
        out[f"read/{d}"] = run([py, "-c", READ, str(path)], env=env)
        out[f"analyze/{d}"] = run([py, "-c", CLI, "analyze", "--no-cache",
                                   "--format", "json", "-o", os.devnull, str(path)], env=env)
    if args.have_hta and out["raw"] <= args.hta_max:
        with tempfile.TemporaryDirectory(dir=args.workdir) as d:  # HTA reads a directory
            os.symlink(path, Path(d) / path.name)
            out["hta"] = run([args.hta_python, "-c", HTA, d], timeout=3600)
    return out


def _t(r: dict, wall: bool = False):
    if not r or not r["ok"]:
        return None
    return r["wall"] if wall else (r["result"][0] if r["result"] else None)


def _cpu(r: dict):
    return r["cpu"] if r and r["ok"] else None


def _ratio(a, b) -> str:
    return f"**{a / b:.2f}×**" if a and b else "—"


def table(results: list[dict]) -> str:
    rows = ["| trace | raw JSON | rows | decode msgspec | decode native | decode ratio "
            "| ingest msgspec | ingest native | ingest ratio | analyze msgspec | analyze native "
            "| analyze ratio | analyze CPU msgspec / native | analyze peak RSS msgspec / native "
            "| HTA load + temporal | HTA / analyze native | HTA CPU / analyze native CPU |",
            "|" + "---|" * 17]
    for r in results:
        dp, dn = _t(r["decode/python"]), _t(r["decode/native"])
        rp, rn = _t(r["read/python"]), _t(r["read/native"])
        ap, an = _t(r["analyze/python"], True), _t(r["analyze/native"], True)
        hta = _t(r.get("hta"))
        rows_n = int(r["read/native"]["result"][1]) if rn else 0
        declined = int(r["decode/native"]["result"][2]) if dn else 0
        name = r["path"].name + (f" ({declined} chunks declined)" if declined else "")
        rows.append(
            f"| {name} | {fmt_mb(r['raw'])} | {rows_n:,} | {fmt_s(dp)} | {fmt_s(dn)} "
            f"| {_ratio(dp, dn)} | {fmt_s(rp)} | {fmt_s(rn)} | {_ratio(rp, rn)} | {fmt_s(ap)} "
            f"| {fmt_s(an)} | {_ratio(ap, an)} "
            f"| {fmt_s(_cpu(r['analyze/python']))} / {fmt_s(_cpu(r['analyze/native']))} "
            f"= {_ratio(_cpu(r['analyze/python']), _cpu(r['analyze/native']))} "
            f"| {fmt_mb(r['analyze/python']['peak'])} / {fmt_mb(r['analyze/native']['peak'])} "
            f"| {fmt_s(hta)} | {_ratio(hta, an) if hta else 'not run'} "
            f"| {_ratio(_cpu(r.get('hta')), _cpu(r['analyze/native'])) if hta else 'not run'} |")
    return "\n".join(rows)


def stages(path: Path, cache: str) -> str:
    """CPU seconds by stage, one process, one worker: where the time goes after the decode."""
    rows = ["| decoder | imports | split + decode | finish (join chunks, columns, sort, table) "
            "| analysis passes | total |", "|---|---|---|---|---|---|"]
    for d in DECODERS:
        r = run([sys.executable, "-c", STAGES, str(path)], env=_env(d, cache))
        if not r["ok"] or not r["result"]:
            rows.append(f"| {d} | failed | | | | |")
            continue
        rows.append(f"| {d} | " + " | ".join(fmt_s(x) for x in r["result"])
                    + f" | {fmt_s(sum(r['result']))} |")
    return "\n".join(rows)


def workers_curve(path: Path, cache: str, counts: list[int]) -> str:
    rows = ["| workers | " + " | ".join(str(w) for w in counts) + " |",
            "|---|" + "---|" * len(counts)]
    for d in DECODERS:
        rs = [run([sys.executable, "-c", READ, str(path), str(w)], env=_env(d, cache))
              for w in counts]
        rows.append(f"| ingest, {d} (wall / CPU) | "
                    + " | ".join(f"{fmt_s(_t(r))} / {fmt_s(_cpu(r))}" for r in rs) + " |")
    return "\n".join(rows)


def _raw_size(path: Path) -> int:
    if path.read_bytes()[:2] != b"\x1f\x8b":
        return path.stat().st_size
    with gzip.open(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--big", default="500MB", help="tiled trace size (uncompressed); 0 to skip")
    ap.add_argument("--workers", default="1,2", help="worker counts for the scaling curve")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "traceread-cscan")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--hta-max", type=parse_size, default=parse_size("600MB"))
    ap.add_argument("--keep", action="store_true", help="keep the generated traces")
    args = ap.parse_args(argv)
    if not args.src.is_file():
        print(f"source trace {args.src} not found (pass --src)", file=sys.stderr)
        return 2
    args.have_hta = hta_available(args.hta_python)
    args.workdir.mkdir(parents=True, exist_ok=True)
    plain = args.workdir / "df_index_resolver.json"
    plain.write_bytes(gzip.decompress(args.src.read_bytes()))
    inputs = [args.src, plain]
    big = None
    if parse_size(args.big):
        big = args.workdir / f"big-{args.big}.json"
        if not big.exists():
            print(f"making {big} ...", file=sys.stderr)
            make(args.src, parse_size(args.big), big, quiet=True)
        inputs.append(big)
    cache = tempfile.mkdtemp(prefix="cache-", dir=args.workdir)
    try:
        load0 = os.getloadavg()
        results = []
        for p in inputs:
            print(f"benchmarking {p.name} ...", file=sys.stderr)
            results.append(bench_file(p, cache, args))
        stage_tables = [(p, stages(p, cache)) for p in inputs[1:]]
        curve = workers_curve(big, cache, [int(w) for w in args.workers.split(",")]) if big else ""
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores; load average before / after the run: "
          f"{' / '.join(f'{x:.1f}' for x in load0)} -> {' / '.join(f'{x:.1f}' for x in load1)}; "
          f"HTA: {'run' if args.have_hta else 'not installed'}\n")
    print(table(results))
    for p, t in stage_tables:
        print(f"\nCPU time by stage, {p.name} (one process, 1 worker):\n")
        print(t)
    if curve:
        print(f"\nIngest of {big.name} by worker count (streaming reader, wall time):\n")
        print(curve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
