"""The steps of reading and analysing one trace, each measured in its own process.

Every step runs on a side (``harness.Side``) with ``TRACEREAD_WORKERS`` and
``TRACEREAD_DECODER`` set from the case, no cache:

* ``read``: ``traceread.load(path)``, from before ``import traceread`` to the finished
  table (``seconds``), imports included;
* ``analyze``: ``traceread analyze --no-cache --format json TRACE`` end to end, the
  whole process (its JSON is kept: every side must print the same bytes);
* ``passes``: the trace read and its events frame built, then ``traceread.analyze``
  timed alone: ``read_s``, ``analyze_s`` (wall), ``analyze_cpu`` (this process) and
  ``children_cpu`` (the side-pass workers; the decode workers exit before);
* ``decode``: the chunk decode alone (every 16 MB chunk through ``decode_chunk``, the
  bytes already in memory): CPU seconds, MB/s and the chunks the C decoder declined;
* ``stages``: one process, ``read_stream`` then ``analyze``: wall and CPU of the
  imports, split + decode, finish (join, columns, sort, table) and the passes.

``orjson`` (the bare parse of the same bytes) and ``hta`` (HTA's load + temporal
breakdown, in its own venv) do not depend on the side: they run once per trace.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import harness as h

STEPS = ("read", "analyze", "info", "passes", "decode", "stages")


@dataclass(frozen=True)
class Case:
    step: str
    trace: str
    workers: int = 0      # 0: the library's own choice
    decoder: str = ""     # "": the library's own choice
    pyc: str = ""         # a PYTHONPYCACHEPREFIX: bytecode cached there, as an install has it

    def env(self) -> dict:
        env = {}
        if self.pyc:   # (else the environment's choice: PYTHONDONTWRITEBYTECODE compiles
            #            every module of traceread on every run)
            env["PYTHONPYCACHEPREFIX"] = self.pyc
            env["PYTHONDONTWRITEBYTECODE"] = ""
        if self.workers:
            env["TRACEREAD_WORKERS"] = str(self.workers)
        if self.decoder:
            env["TRACEREAD_DECODER"] = self.decoder
        return env

    def label(self) -> str:
        bits = [f"{self.workers} worker{'s' * (self.workers > 1)}" if self.workers else "",
                {"python": "msgspec", "native": "native C"}.get(self.decoder, "")]
        bits = [b for b in bits if b] + (["bytecode cached"] if self.pyc else [])
        return self.step + (f" ({', '.join(bits)})" if bits else "")

    def __str__(self) -> str:
        return f"{self.label()} of {Path(self.trace).name}"


def measure(case: Case, side: h.Side) -> h.Run:
    if case.step == "analyze":
        return h.cli(side, "analyze", "--no-cache", "--format", "json", case.trace,
                     env=case.env())
    if case.step == "info":   # the CLI's read alone (imports + read + summary): analyze's yardstick
        return h.cli(side, "info", case.trace, env=case.env())
    fn = {"read": read_table, "passes": passes, "decode": decode, "stages": stages}[case.step]
    return h.probe(side, fn, case.trace, env=case.env())


def rows(table: h.Table, case: Case, runs: dict, raw: int) -> None:
    """The rows of one case (``runs``: side name -> best Run or None)."""
    lab = case.label()

    def res(key):
        return {s: (r.result.get(key) if r else None) for s, r in runs.items()}

    if case.step == "read":
        table.add(f"{lab}: seconds", res("seconds"))
        table.add_runs(lab, runs, ("cpu", "peak", "pss"))
    elif case.step == "analyze":
        table.add_runs(lab, runs)
    elif case.step == "info":
        table.add_runs(lab, runs, ("wall", "cpu"))
    elif case.step == "passes":
        for key, name in (("read_s", "read"), ("analyze_s", "analyze wall"),
                          ("analyze_cpu", "analyze CPU"), ("children_cpu", "side workers' CPU")):
            table.add(f"{lab}: {name}", res(key))
    elif case.step == "decode":
        table.add(f"{lab}: CPU", res("cpu"))
        table.add(f"{lab}: MB/s", res("mb_s"), lambda x: f"{x:,.0f}")
        table.add(f"{lab}: chunks declined", res("declined"), lambda x: f"{x:.0f}")
    elif case.step == "stages":
        for key in ("imports", "split_decode", "finish", "passes"):
            table.add(f"{lab}: {key.replace('_', ' + ')} wall / CPU",
                      {s: (f"{h.fmt_s(r.result[key][0])} / {h.fmt_s(r.result[key][1])}"
                           if r else None) for s, r in runs.items()})
    if case.step in ("read", "analyze") and raw:
        table.add(f"{lab}: peak PSS / raw JSON",
                  {s: (r.pss / raw if r and r.pss else None) for s, r in runs.items()},
                  lambda x: f"{x:.2f}×")


# --- the probes (run in the side's process) -------------------------------------------------

def read_table(path: str) -> dict:
    t = time.perf_counter()
    import traceread

    tr = traceread.load(path)
    return {"seconds": time.perf_counter() - t, "rows": len(tr)}


def passes(path: str) -> dict:
    import resource

    import traceread

    t = time.perf_counter()
    tr = traceread.load(path)
    _ = tr.events  # the DataFrame conversion is part of loading
    read_s = time.perf_counter() - t
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0, c0 = time.perf_counter(), time.process_time()
    traceread.analyze(tr)
    w1, c1 = time.perf_counter(), time.process_time()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"read_s": read_s, "analyze_s": w1 - w0, "analyze_cpu": c1 - c0,
            "children_cpu": ch.ru_utime + ch.ru_stime - ch0.ru_utime - ch0.ru_stime}


def decode(path: str) -> dict:
    import gzip

    from traceread.readers import _native
    from traceread.readers import stream as S

    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    start = S.find_array_start(raw[:S._HEAD_SCAN])
    end = S.find_array_end(raw, start, raw[:start - 1])
    bufs = [S._wrap(memoryview(raw)[a:b]) for a, b in S._split(raw, start, end, S.CHUNK_BYTES)]
    size = end - start
    del raw
    S.decode_chunk(bufs[0])  # warm: imports, first allocations
    declined = _native.stats["python"]
    t = time.process_time()
    n = sum(S.decode_chunk(b).n for b in bufs)
    cpu = time.process_time() - t
    return {"cpu": cpu, "mb_s": size / 1e6 / cpu if cpu else 0, "rows": n,
            "declined": _native.stats["python"] - declined}


def stages(path: str) -> dict:
    def now():
        return time.perf_counter(), time.process_time()

    t0 = now()
    import traceread
    from traceread.readers import stream as S

    t1 = now()
    fin = [0.0, 0.0]
    finish = S._finish

    def timed(*a, **kw):
        s = now()
        r = finish(*a, **kw)
        e = now()
        fin[0] += e[0] - s[0]
        fin[1] += e[1] - s[1]
        return r

    S._finish = timed
    tr = S.read_stream(path, workers=int(os.environ.get("TRACEREAD_WORKERS") or 1))
    t2 = now()
    traceread.analyze(tr)
    t3 = now()
    return {"imports": [t1[0] - t0[0], t1[1] - t0[1]],
            "split_decode": [t2[0] - t1[0] - fin[0], t2[1] - t1[1] - fin[1]],
            "finish": fin, "passes": [t3[0] - t2[0], t3[1] - t2[1]]}


def orjson_parse(path: str) -> dict:
    import gzip

    try:
        import orjson
    except ImportError:
        return {"skip": "orjson not installed (pip install -e '.[bench]')"}
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    t = time.perf_counter()
    doc = orjson.loads(data)
    dt = time.perf_counter() - t
    return {"seconds": dt, "rows": len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)}


HTA = """
import json, sys, time, logging, warnings
warnings.filterwarnings('ignore'); logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print('LOADED', time.perf_counter() - t, flush=True)
ta.get_temporal_breakdown(visualize=False)
print('RESULT ' + json.dumps({"seconds": time.perf_counter() - t}))
"""


def hta_available(python: str) -> bool:
    if not python or not Path(python).exists():
        return False
    return subprocess.run([python, "-c", "import hta.trace_analysis"],
                          capture_output=True).returncode == 0


def hta(path: str, python: str, timeout: float) -> h.Run:
    """HTA's load + temporal breakdown of ``path`` (it reads a directory); ``result``
    holds ``seconds`` and, when only the load finished, ``loaded``."""
    with tempfile.TemporaryDirectory() as d:
        os.symlink(Path(path).resolve(), Path(d) / Path(path).name)
        r = h.run([python, "-c", HTA, d], timeout=timeout)
    for line in r.out.decode().splitlines():
        if line.startswith("LOADED"):
            r.result.setdefault("loaded", float(line.split()[1]))
    return r


def add_hta_args(ap) -> None:
    ap.add_argument("--no-hta", action="store_true", help="do not run HTA")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python",
                    help="interpreter of a venv with HolisticTraceAnalysis installed "
                         "(python -m venv /tmp/hta-venv; /tmp/hta-venv/bin/pip install "
                         "HolisticTraceAnalysis)")
    ap.add_argument("--hta-max", default="1.2GB",
                    help="skip HTA above this raw size (it needs ~4-8x the trace in RAM)")
    ap.add_argument("--hta-timeout", type=float, default=1800)
