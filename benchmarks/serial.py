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

``--baseline REF`` measures other sources in the same run (interleaved rounds) and prints
each side's table, then this checkout's figures against each baseline's. The run kept per
(side, workers) is the one of least CPU (parent + workers): steadier than the wall on a
shared machine.
"""
from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from . import harness as h

STAGES = ("imports", "split_decode", "finish", "events", "passes")


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
        print(h.machine(sides) + "\n")

        def measure(w, side):
            return h.probe(side, staged, str(args.trace), env={"TRACEREAD_WORKERS": str(w)})

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
                 (f"**serial fraction** (parent CPU at {w} / all CPU at {base})",
                  lambda r, w=w: serial_fraction(r, base, w), lambda x: f"{100 * x:.0f}%"),
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
        out.append(f"* serial fraction (parent CPU at {w} / all CPU at {base}): **{100 * f:.0f}%**"
                   f"; Amdahl's bound: {bound[2]:.2f}x on 2 cores, {bound[16]:.2f}x on 16")
        out.append(f"* wall {base} -> {w} workers: {s:.2f}x; Karp-Flatt serial fraction "
                   f"{'—' if kf is None else f'{100 * kf:.0f}%'} (walls under the load above)")
    return out


# --- the probe (run in a fresh process) ------------------------------------------------------

def _now():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time(), ch.ru_utime + ch.ru_stime


def _span(a, b) -> dict:
    return {"wall": b[0] - a[0], "cpu": b[1] - a[1], "child": b[2] - a[2]}


def staged(path: str) -> dict:
    t0 = _now()
    import traceread
    from traceread.readers import stream as S

    t1 = _now()
    fin = {"wall": 0.0, "cpu": 0.0, "child": 0.0}
    finish = S._finish

    def timed(*a, **kw):
        s = _now()
        r = finish(*a, **kw)
        d = _span(s, _now())
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
    return {"imports": _span(t0, t1), "split_decode": split, "finish": fin,
            "events": _span(t2, t3), "passes": _span(t3, t4), "total": _span(t0, t4)}


if __name__ == "__main__":
    sys.exit(main(None))
