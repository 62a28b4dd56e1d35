"""``serial``: CPU seconds by stage and the serial fraction (Amdahl), from 1 and 2 workers.

One big trace (``TRACE``, or ``--size`` tiled from ``--src`` with scripts/make_big_trace.py
under ``--workdir``, deleted after unless ``--keep``) is read and analysed in a fresh
process per worker count (``TRACEREAD_WORKERS``), stage by stage: imports, split + chunk
decode, finish (join, columns, sort, table), the events frame (Arrow -> pandas) and the
passes (``traceread.analyze``). Each stage's wall, the parent's CPU and its workers' CPU
(the decode pool, the forked side passes: children reaped by the stage's end).

The serial part is what the parent process runs itself, since its workers only ever take
work off it: the parent's CPU at 2 workers over the whole CPU at 1 worker is the
serial fraction f (an upper bound: some work that more workers would take stays on the
parent at 2). Amdahl then bounds the speed-up on n cores by 1 / (f + (1 - f) / n).
The Karp-Flatt metric from the walls, e = (2 / S - 1) with S = wall(1) / wall(2), is
printed too: on a shared machine it is noise-prone (the load average is printed).

That bound counts the parent's own share of parallel work (a chunk it decodes while the
pool decodes the others) as serial. What Amdahl's serial part is -- CPU that runs in one
process while the others wait -- is measured as well: a sampler process reads each process
of the probe's tree's ``/proc/PID/schedstat`` (ns on a CPU, ns runnable waiting for one)
every ``SAMPLE_S``; CPU a process used in an interval while no other process of the tree
was running or runnable (the others blocked: a worker idle on its pipe, the parent
waiting on a future) is serial, the *run-alone* CPU (``_intervals``). Runnable counts as
running, so a process the shared machine's load keeps off a core still counts as working. The measured
serial fraction is the run-alone CPU at ``more`` workers over all CPU at ``base``; its
split by stage is printed.

``--baseline REF`` measures other sources in the same run (interleaved rounds) and prints
each side's table, then this checkout's figures against each baseline's. The run kept per
(side, workers) is the one of least CPU (parent + workers): steadier than the wall on a
shared machine.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import harness as h

STAGES = ("imports", "split_decode", "finish", "events", "passes")
SAMPLE_S = 0.005      # the sampler's period (schedstat is in ns: no tick rounding)


def add_args(ap) -> None:
    ap.add_argument("trace", nargs="?", type=Path, help="the trace (default: tile --src)")
    ap.add_argument("--size", default="250MB", help="tiled size when no TRACE (e.g. 1GB)")
    ap.add_argument("--src", type=Path, default=Path("/work/shared/corpus/facebookresearch__"
                    "HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz"),
                    help="real trace to tile")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                    help="where a tiled trace is written")
    ap.add_argument("--keep", action="store_true", help="keep the tiled trace")
    ap.add_argument("--workers", default="1,2", help="TRACEREAD_WORKERS values (first: base)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best kept)")
    ap.add_argument("--bytecode", choices=("env", "cached"), default="env",
                    help="env: as the environment has it (PYTHONDONTWRITEBYTECODE=1 compiles "
                         "the sources every run: ~0.2 CPU-s of the analysis's modules, in the "
                         "parent); cached: bytecode written once per side to a temporary "
                         "PYTHONPYCACHEPREFIX, as an installed package has it")
    h.add_side_args(ap)


def main(args) -> int:
    made = None
    if args.trace is None:
        if not args.src.is_file():
            raise SystemExit(f"source trace {args.src} not found (pass TRACE or --src)")
        made = args.workdir / f"serial-{args.size}.json"
        if not made.exists():
            sys.path.insert(0, str(h.REPO / "scripts"))
            from make_big_trace import make

            h.say(f"making {made}")
            make(args.src, h.parse_size(args.size), made, quiet=True)
        args.trace = made
    try:
        return _measure(args)
    finally:
        if made is not None and not args.keep:
            made.unlink(missing_ok=True)


def _measure(args) -> int:
    workers = h.ints(args.workers)
    with tempfile.TemporaryDirectory(prefix="trserial-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + (", bytecode cached" if args.bytecode == "cached" else "")
              + "\n")
        env = {}
        if args.bytecode == "cached":   # written once per side, by a run over the example
            env = {"PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc"), "PYTHONDONTWRITEBYTECODE": ""}
            for side in sides:
                h.probe(side, staged, str(h.EXAMPLE), env=env)

        def measure(w, side):
            return h.probe(side, staged, str(args.trace),
                           env={**env, "TRACEREAD_WORKERS": str(w)})

        runs = h.interleave(workers, sides, args.repeat, measure)
    raw = h.raw_size(args.trace)
    every = {}
    for side in sides:
        res = {}
        for w in workers:
            good = [r for r in runs[(w, side.name)] if r is not None and r.ok]
            if not good:
                print(f"* {side.name}, {w} workers failed: {h.failure(runs[(w, side.name)])}")
                return 1
            res[w] = min(good, key=lambda r: _all_cpu(r.result)).result
            res[w]["peak"] = min(r.peak for r in good)
        every[side.name] = res
        print(f"{side.name}: {args.trace.name} ({raw / 1e6:.0f} MB raw), best of {args.repeat}, "
              f"load {h.load()}:\n")
        print(_table(res, workers, raw) + "\n")
        for line in _summary(res, workers):
            print(line)
        print()
    if len(sides) > 1:
        print(_against(every, sides, workers))
    print(f"\nload average after: {h.load()}")
    return 0


def _all_cpu(r: dict) -> float:
    return r["total"]["cpu"] + r["total"]["child"]


def _against(every: dict, sides, workers: list[int]) -> str:
    """This checkout's figures against each baseline's, same run."""
    base, names = workers[0], [s.name for s in sides]
    rows = [(f"CPU at {base} worker{'s' * (base > 1)} (all processes)",
             lambda r: _all_cpu(r[base]), h.fmt_s),
            (f"passes CPU at {base} worker{'s' * (base > 1)}",
             lambda r: r[base]["passes"]["cpu"] + r[base]["passes"]["child"], h.fmt_s)]
    for w in workers[1:]:
        rows += [(f"parent CPU at {w} workers", lambda r, w=w: r[w]["total"]["cpu"], h.fmt_s),
                 (f"passes: parent CPU at {w} workers",
                  lambda r, w=w: r[w]["passes"]["cpu"], h.fmt_s),
                 (f"serial fraction, bound (parent CPU at {w} / all CPU at {base})",
                  lambda r, w=w: serial_fraction(r, base, w), lambda x: f"{100 * x:.0f}%"),
                 (f"CPU run alone at {w} workers (the others waiting)",
                  lambda r, w=w: alone_cpu(r[w]), h.fmt_s),
                 (f"**serial fraction, measured** (CPU run alone at {w} / all CPU at {base})",
                  lambda r, w=w: measured_fraction(r, base, w), lambda x: f"{100 * x:.0f}%"),
                 (f"wall at {w} workers", lambda r, w=w: r[w]["total"]["wall"], h.fmt_s)]
    head = ["figure", *names] + [f"{n} / this" for n in names[1:]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, get, fmt in rows:
        vals = [get(every[n]) for n in names]
        out.append(f"| {label} | " + " | ".join(fmt(v) for v in vals) + " | "
                   + " | ".join(h.fmt_ratio(v, vals[0]) for v in vals[1:]) + " |")
    return "\n".join(out)


def _table(res: dict, workers: list[int], raw: int) -> str:
    head = ["stage"] + [f"{w} worker{'s' * (w > 1)}: wall / parent CPU / workers' CPU"
                        for w in workers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for st in (*STAGES, "total"):
        cells = [f"{h.fmt_s(res[w][st]['wall'])} / {h.fmt_s(res[w][st]['cpu'])} / "
                 f"{h.fmt_s(res[w][st]['child'])}" for w in workers]
        lines.append(f"| {st.replace('_', ' + ')} | " + " | ".join(cells) + " |")
    lines.append("| peak RSS (process tree) / raw | " + " | ".join(
        f"{h.fmt_mb(res[w]['peak'])} / {res[w]['peak'] / raw:.2f}x" for w in workers) + " |")
    return "\n".join(lines)


def serial_fraction(res: dict, base: int, more: int) -> float:
    """The parent's CPU at ``more`` workers over all CPU at ``base`` (see module doc)."""
    tot = res[base]["total"]
    return res[more]["total"]["cpu"] / (tot["cpu"] + tot["child"])


def alone_cpu(r: dict) -> float:
    """CPU that ran while every other process of the tree waited (see module doc)."""
    return sum(r["alone"][st] for st in STAGES)


def measured_fraction(res: dict, base: int, more: int) -> float:
    tot = res[base]["total"]
    return alone_cpu(res[more]) / (tot["cpu"] + tot["child"])


def _summary(res: dict, workers: list[int]) -> list[str]:
    base, out = workers[0], []
    tot = res[base]["total"]
    cpu1 = tot["cpu"] + tot["child"]
    by = ", ".join(f"{st.replace('_', ' + ')} {100 * (res[base][st]['cpu'] + res[base][st]['child']) / cpu1:.0f}%"
                   for st in STAGES)
    out.append(f"* CPU at {base} worker{'s' * (base > 1)}: {cpu1:.2f} s ({by})")
    for w in workers[1:]:
        f = serial_fraction(res, base, w)
        s = res[base]["total"]["wall"] / res[w]["total"]["wall"]
        kf = (1 / s - 1 / w) / (1 - 1 / w) if s else None
        bound = {n: 1 / (f + (1 - f) / n) for n in (2, 16)}
        out.append(f"* serial fraction, bound (parent CPU at {w} / all CPU at {base}): {100 * f:.0f}%"
                   f"; Amdahl's bound: {bound[2]:.2f}x on 2 cores, {bound[16]:.2f}x on 16")
        m = measured_fraction(res, base, w)
        alone = ", ".join(f"{st.replace('_', ' + ')} {h.fmt_s(res[w]['alone'][st])}"
                          for st in STAGES)
        seen = sum(res[w]["sampled"].values())
        out.append(f"* serial fraction, measured (CPU run alone at {w} / all CPU at {base}): "
                   f"**{100 * m:.0f}%** (run alone: {alone}; the sampler saw "
                   f"{h.fmt_s(seen)} of CPU); Amdahl: {1 / (m + (1 - m) / 16):.2f}x on 16")
        out.append(f"* wall {base} -> {w} workers: {s:.2f}x; Karp-Flatt serial fraction "
                   f"{'—' if kf is None else f'{100 * kf:.0f}%'} (walls under the load above)")
    return out


# --- the probe (run in a fresh process) ------------------------------------------------------

def _now():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), time.process_time(), ch.ru_utime + ch.ru_stime   # the sampler's clock


def _span(a, b) -> dict:
    return {"wall": b[0] - a[0], "cpu": b[1] - a[1], "child": b[2] - a[2]}


def staged(path: str) -> dict:
    sampler = _start_sampler()
    t0 = _now()
    import traceread
    from traceread.readers import stream as S

    t1 = _now()
    fin = {"wall": 0.0, "cpu": 0.0, "child": 0.0}
    fin_at: list = []
    finish = S._finish

    def timed(*a, **kw):
        s = _now()
        r = finish(*a, **kw)
        e = _now()
        fin_at[:] = [s[0], e[0]]
        d = _span(s, e)
        for k in fin:
            fin[k] += d[k]
        return r

    S._finish = timed
    tr = S.read_stream(path, workers=int(os.environ.get("TRACEREAD_WORKERS") or 1))
    t2 = _now()
    tr.events   # noqa: B018 - the Arrow table -> pandas conversion, on its own
    t3 = _now()
    traceread.analyze(tr)
    import gc

    gc.collect()   # the side-pass pool's workers reaped: their CPU counted
    t4 = _now()
    read = _span(t1, t2)
    split = {k: read[k] - fin[k] for k in read}
    cuts = [t0[0], t1[0], fin_at[0] if fin_at else t2[0], fin_at[1] if fin_at else t2[0],
            t2[0], t3[0], t4[0]]
    alone, sampled = _stop_sampler(sampler, cuts)
    return {"imports": _span(t0, t1), "split_decode": split, "finish": fin,
            "events": _span(t2, t3), "passes": _span(t3, t4), "total": _span(t0, t4),
            "alone": alone, "sampled": sampled}


# --- what ran alone (a sampler process over the probe's tree) -------------------------------

def _start_sampler() -> subprocess.Popen:
    out = tempfile.NamedTemporaryFile(prefix="trserial-sample-", suffix=".json", delete=False)
    out.close()
    code = "from benchmarks.serial import sample; sample()"
    proc = subprocess.Popen([sys.executable, "-c", code, str(os.getpid()), out.name],
                            stdout=subprocess.PIPE)
    proc.stdout.readline()   # it is sampling
    proc.out = out.name
    return proc


def _stop_sampler(proc: subprocess.Popen, cuts: list[float]) -> tuple[dict, dict]:
    """(run-alone CPU by stage, all sampled CPU by stage); ``cuts``: the stages' bounds
    (imports, split + decode, finish, split + decode after it, events, passes)."""
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    with open(proc.out) as f:
        rows = json.load(f)
    os.unlink(proc.out)
    spans = ["imports", "split_decode", "finish", "split_decode", "events", "passes"]
    alone = dict.fromkeys(STAGES, 0.0)
    seen = dict.fromkeys(STAGES, 0.0)
    for mid, cpu, sole in _intervals(rows):
        k = next((i for i in range(len(spans)) if cuts[i] <= mid < cuts[i + 1]), None)
        if k is None:
            continue
        seen[spans[k]] += cpu
        alone[spans[k]] += sole
    return alone, seen


def _intervals(rows: list):
    """(midpoint, CPU of the tree, CPU run alone) of each interval between two samples.

    A process's share of an interval it was running or runnable, ``a``, stands for the
    chance that it was at any moment of it; a process's CPU ran alone in the share of
    the interval none of the others was: ``cpu * prod(1 - a_other)``. With short
    intervals each share is 0 or 1 and this is the plain count; it holds up when the
    machine's load stretches the sampler's intervals."""
    prev_t, prev = None, {}
    for t, procs in rows:
        now = {p: (c, w) for p, c, w in procs}
        if prev_t is not None:
            span = (t - prev_t) * 1e9
            deltas = {p: (max(0, c - prev.get(p, (0, 0))[0]), max(0, w - prev.get(p, (0, 0))[1]))
                      for p, (c, w) in now.items()}
            share = {p: min(1.0, (c + w) / span) if span > 0 else 0.0
                     for p, (c, w) in deltas.items()}
            sole = 0.0
            for p, (c, _) in deltas.items():
                others = 1.0
                for q, a in share.items():
                    if q != p:
                        others *= 1.0 - a
                sole += c * others
            cpu = sum(c for c, _ in deltas.values())
            yield (t + prev_t) / 2, cpu / 1e9, sole / 1e9
        prev_t, prev = t, now


def _tree(root: int, skip: int) -> list[int]:
    """``root`` and its descendants (every thread's children), ``skip`` left out."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid == skip:
            continue
        out.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    return out


def sample() -> None:
    """The sampler process: argv = root pid, output file. Each ``SAMPLE_S``: (monotonic
    time, [(pid, ns on a CPU, ns runnable)]) of the root's tree, written at SIGTERM."""
    root, path = int(sys.argv[1]), sys.argv[2]
    rows, stop = [], []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    me = os.getpid()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while not stop:
        t = time.monotonic()
        procs = []
        for pid in _tree(root, me):
            try:
                with open(f"/proc/{pid}/schedstat") as f:
                    c, w = f.read().split()[:2]
            except (OSError, ValueError):
                continue
            procs.append((pid, int(c), int(w)))
        rows.append((t, procs))
        time.sleep(SAMPLE_S)
    with open(path, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    sys.exit(main(None))
