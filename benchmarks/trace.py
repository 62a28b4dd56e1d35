"""``trace`` and ``big``: the steps of reading and analysing whole traces (benchmarks/steps.py).

``trace TRACE... --steps read,analyze --baseline main``: this checkout against
baselines, every (step, workers, decoder) in its own process, interleaved rounds,
best of ``--repeat``; prints whether every side's ``analyze`` JSON is the same.

``big [TRACE...] [--size 500MB]``: one big file against the yardsticks of the same
run: ``orjson.loads`` of the same bytes and HTA's load + temporal breakdown; ingest,
``analyze`` and the chunk decode with each decoder (msgspec, native C), the stages
(1 worker and the most) and the worker curve (native decoder). Without TRACE,
``--size`` tiles ``--src`` (HTA's df_index_resolver) under ``--workdir`` first.
"""
from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import harness as h
from .steps import STEPS, Case, add_hta_args, hta, hta_available, measure, orjson_parse, rows

DECODERS = ("python", "native")


def add_trace_args(ap) -> None:
    ap.add_argument("traces", nargs="+", type=Path, help="traces to measure")
    ap.add_argument("--steps", default="read,analyze",
                    help=f"comma-separated, of {', '.join(STEPS)} (default read,analyze)")
    ap.add_argument("--workers", default="",
                    help="TRACEREAD_WORKERS values, e.g. 1,2 (default: the library's choice)")
    ap.add_argument("--decoder", default="",
                    help="TRACEREAD_DECODER values: python (msgspec), native (default: the "
                         "library's choice)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (best is kept)")
    ap.add_argument("--bytecode", choices=("env", "cached"), default="env",
                    help="env: as the environment has it (PYTHONDONTWRITEBYTECODE=1 compiles "
                         "the sources every run); cached: bytecode written once per side to "
                         "a temporary PYTHONPYCACHEPREFIX, as an installed package has it")
    ap.add_argument("--json-out", type=Path, help="also write every run's figures here")
    h.add_side_args(ap)


def trace_main(args) -> int:
    steps = [s for s in args.steps.split(",") if s]
    bad = set(steps) - set(STEPS)
    if bad:
        raise SystemExit(f"unknown steps {sorted(bad)}; known: {', '.join(STEPS)}")
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        pyc = str(Path(tmp) / "pyc") if args.bytecode == "cached" else ""
        cases = [Case(s, str(t), w, d, pyc) for t in args.traces
                 for w in (h.ints(args.workers) or [0])
                 for d in (args.decoder.split(",") if args.decoder else [""]) for s in steps]
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        if pyc:
            warm_bytecode(sides, Case("analyze", str(h.EXAMPLE), pyc=pyc))
        runs = h.interleave(cases, sides, args.repeat, measure)
    print(report(args.traces, cases, sides, runs, f"best of {args.repeat}") + "\n")
    same = same_json(cases, sides, runs)
    for line in over_info(cases, sides, runs):
        print(line)
    print(f"load average after: {h.load()}")
    h.write_json(args.json_out, {f"{c} on {s}": r for (c, s), r in runs.items()})
    return 0 if same is not False else 1


def warm_bytecode(sides, case: Case) -> None:
    """Each side's bytecode written to the case's PYTHONPYCACHEPREFIX (the site packages'
    too: the prefix holds every module's), by ``info`` and ``analyze`` of a small trace."""
    for s in sides:
        for step in ("info", "analyze"):
            measure(Case(step, case.trace, pyc=case.pyc), s)


def report(traces, cases, sides, runs, how: str) -> str:
    out = []
    for t in traces:
        raw = h.raw_size(Path(t))
        table = h.Table(sides)
        for c in [c for c in cases if c.trace == str(t)]:
            best = {s.name: h.best(runs[(c, s.name)]) for s in sides}
            rows(table, c, best, raw)
            for s in sides:
                if best[s.name] is None:
                    print(f"{c} on {s.name} failed: {h.failure(runs[(c, s.name)])}",
                          file=sys.stderr)
        out += [f"{Path(t).name} ({h.fmt_mb(Path(t).stat().st_size)} on disk, "
                f"{h.fmt_mb(raw)} raw JSON; {how}):", "", table.markdown(), ""]
    return "\n".join(out).rstrip()


def over_info(cases, sides, runs) -> list[str]:
    """``analyze`` CPU over ``info`` CPU (same trace, workers, decoder) per side: issue 42's
    goal is <= 1.5 at 250 MB."""
    out = []
    for c in [c for c in cases if c.step == "analyze"]:
        info = Case("info", c.trace, c.workers, c.decoder, c.pyc)
        if info not in cases:
            continue
        cells = []
        for s in sides:
            a, i = h.best(runs[(c, s.name)]), h.best(runs[(info, s.name)])
            cells.append(f"{s.name} {a.cpu / i.cpu:.2f}" if a and i and i.cpu else
                         f"{s.name} —")
        out.append(f"* {c}: analyze / info (CPU): " + ", ".join(cells))
    return out


def same_json(cases, sides, runs) -> bool | None:
    """Prints whether each side's ``analyze`` JSON equals this checkout's; None if none ran."""
    verdict = None
    for c in [c for c in cases if c.step == "analyze"]:
        outs = {s.name: next((r.out for r in runs[(c, s.name)] if r.ok), None) for s in sides}
        same = {n: o == outs["this"] for n, o in outs.items() if n != "this" and o is not None}
        if same:
            print(f"{c}: JSON equal to this checkout's: {same}")
            verdict = (verdict is not False) and all(same.values())
    return verdict


# --- big ---------------------------------------------------------------------------------------

def add_big_args(ap) -> None:
    ap.add_argument("traces", nargs="*", type=Path, help="traces to measure (.json or .json.gz)")
    ap.add_argument("--size", help="also tile --src to these raw sizes under --workdir (e.g. "
                                   "500MB or 50MB,2GB); 500MB is the default without TRACE")
    ap.add_argument("--src", type=Path, default=h.HTA_TRACE, help="real Kineto trace to tile")
    ap.add_argument("--inflated", action="store_true",
                    help="also measure a gunzipped copy of each .gz trace (the mmap path)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "traceread-bench")
    ap.add_argument("--keep", action="store_true", help="keep the tiled / inflated traces")
    ap.add_argument("--workers", help="worker counts for the curve, e.g. 1,2,4,8 "
                    "(default: powers of two up to the core count)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    ap.add_argument("--json-out", type=Path, help="also write every raw figure here")
    add_hta_args(ap)
    h.add_side_args(ap)


def big_main(args) -> int:
    made = inputs(args)
    workers = h.ints(args.workers or "") or h.powers_of_two(os.cpu_count() or 1)
    have_hta = not args.no_hta and hta_available(args.hta_python)
    if not args.no_hta and not have_hta:
        h.say(f"HTA not available at {args.hta_python}: skipping it (see --hta-python)")
    try:
        with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
            sides = h.sides(args, Path(tmp))
            print(h.machine(sides) + "\n")
            for t in args.traces:
                big_one(str(t), sides, workers, have_hta, args)
    finally:
        for p in made:
            p.unlink(missing_ok=True)
    print(f"load average after: {h.load()}")
    return 0


def big_one(t: str, sides, workers: list[int], have_hta: bool, args) -> None:
    cases = [Case(s, t, 0, d) for s in ("read", "analyze", "decode") for d in DECODERS]
    cases += [Case("stages", t, w, "native") for w in sorted({1, max(workers)})]
    curve = [Case(s, t, w, "native") for w in workers for s in ("read", "analyze")]
    cases += [c for c in curve if c not in cases]
    this = sides[0]
    h.say(f"orjson.loads of {t}")
    fixed = {"orjson": h.probe(this, orjson_parse, t)}
    if have_hta and h.raw_size(Path(t)) <= h.parse_size(args.hta_max):
        h.say("HTA load + temporal breakdown")
        fixed["hta"] = hta(t, args.hta_python, args.hta_timeout)
    runs = h.interleave(cases, sides, args.repeat, measure)
    print(report([t], cases, sides, runs, f"best of {args.repeat}"))
    print()
    best = {c: h.best(runs[(c, "this")]) for c in cases}
    print("\n".join(ratios(t, best, fixed, workers)) + "\n")
    h.write_json(args.json_out and args.json_out.with_suffix(f".{Path(t).name}.json"),
                 {"fixed": fixed, **{f"{c} on {s}": r for (c, s), r in runs.items()}})


def ratios(t: str, best: dict, fixed: dict, workers: list[int]) -> list[str]:
    """Figures of this checkout against each other and the yardsticks, this run."""
    def fig(step, dec="", w=0, key=None, cpu=False):
        r = best.get(Case(step, t, w, dec))
        if r is None:
            return None
        return r.cpu if cpu else (r.result.get(key) if key else r.wall)

    o = fixed["orjson"]
    orj = o.result.get("seconds") if o.ok else None
    rp, rn = fig("read", "python", key="seconds"), fig("read", "native", key="seconds")
    ap, an = fig("analyze", "python"), fig("analyze", "native")
    out = [f"* orjson.loads alone (bytes in memory): {h.fmt_s(orj) if o.ok else o.err}",
           f"* ingest: native vs msgspec {h.fmt_ratio(rp, rn)} wall, "
           f"{h.fmt_ratio(fig('read', 'python', cpu=True), fig('read', 'native', cpu=True))} "
           f"CPU; native ingest / orjson.loads {h.fmt_ratio(rn, orj)}",
           f"* analyze: native vs msgspec {h.fmt_ratio(ap, an)} wall, "
           f"{h.fmt_ratio(fig('analyze', 'python', cpu=True), fig('analyze', 'native', cpu=True))}"
           " CPU",
           f"* chunk decode alone: native vs msgspec "
           f"{h.fmt_ratio(fig('decode', 'python', key='cpu'), fig('decode', 'native', key='cpu'))}"
           " CPU"]
    r = fixed.get("hta")
    if r is None:
        out.append("* HTA: not run")
    elif r.ok:
        out.append(f"* **HTA / traceread analyze: {h.fmt_ratio(r.result['seconds'], an)} wall, "
                   f"{h.fmt_ratio(r.cpu, fig('analyze', 'native', cpu=True))} CPU** "
                   f"(HTA load alone {h.fmt_s(r.result.get('loaded'))})")
    elif r.result.get("loaded"):
        out.append(f"* HTA's temporal breakdown failed ({r.err}) after its load; HTA load alone / "
                   f"traceread analyze: {h.fmt_ratio(r.result['loaded'], an)} wall (a lower bound)")
    else:
        out.append(f"* HTA failed: {r.err}")
    w1 = min(workers)
    for w in workers:
        if w != w1:
            out.append(f"* speed-up, {w} workers vs {w1}: ingest "
                       f"{h.fmt_ratio(fig('read', 'native', w1, 'seconds'), fig('read', 'native', w, 'seconds'))}"
                       f", analyze "
                       f"{h.fmt_ratio(fig('analyze', 'native', w1), fig('analyze', 'native', w))}")
    return out


def inputs(args) -> list[Path]:
    """Fills ``args.traces`` (tiled / inflated copies added); returns the files made here."""
    made: list[Path] = []
    if args.size or not args.traces:
        if not args.src.is_file():
            raise SystemExit(f"source trace {args.src} not found (pass TRACE or --src)")
        args.workdir.mkdir(parents=True, exist_ok=True)
        for size in (args.size or "500MB").split(","):
            path = args.workdir / f"big-{size}.json"
            if not path.exists():
                sys.path.insert(0, str(h.REPO / "scripts"))
                from make_big_trace import make

                h.say(f"making {path}")
                make(args.src, h.parse_size(size), path, quiet=True)
                made += [] if args.keep else [path]
            args.traces.append(path)
    if args.inflated:
        for t in [t for t in args.traces if t.name.endswith(".gz")]:
            plain = args.workdir / t.name[:-3]
            args.workdir.mkdir(parents=True, exist_ok=True)
            with gzip.open(t, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
            made += [] if args.keep else [plain]
            args.traces.append(plain)
    for t in args.traces:
        if not t.is_file():
            raise SystemExit(f"{t}: not a file")
    return made


