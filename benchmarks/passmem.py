"""``passmem``: where ``analyze`` holds its memory, pass by pass, vs baselines (issue 42, memory).

Each side runs ``traceread analyze --no-cache --format json TRACE`` in a fresh process, one
worker (the side passes run in process, where they can be measured), twice:

* RSS: a thread samples ``/proc/self/statm`` every 2 ms; each pass of ``PASSES`` gets the
  highest RSS seen while it ran, and its RSS at entry (the floor it climbed from);
* traced: under ``tracemalloc``, each pass's peak of live Python / numpy allocations above
  what was live at its entry (``reset_peak`` at entry), and what it left live at its exit.

The passes are disjoint (none runs inside another), so each figure is the pass's own.
The table gives the baseline over this checkout (``1.20×``: the baseline's figure is 1.2
times this one's). RSS figures move by a few MB between runs (the sampling, the heap);
the traced ones are exact for a given input. Use a trace of a few hundred MB
(``scripts/make_big_trace.py --size 500MB``): tracemalloc makes a run ~5× slower.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from . import harness as h

# (label, module, function): each wrapped wherever the analysis reaches it
PASSES = [
    ("attribution", "traceread.passes.attribution", "attribute"),
    ("replay side job (replay, levers' graph, marks)", "traceread.analysis", "_replay_side"),
    ("trace context (shared stacks, window facts)", "traceread.passes.context",
     "trace_context"),
    ("steps' anatomy", "traceread.passes.anatomy", "step_anatomy"),
    ("culprits", "traceread.passes.culprits", "culprits"),
    ("host work kind", "traceread.passes.hostwork", "host_work_kind"),
    ("steady state", "traceread.passes.steady", "steady_state"),
    ("overhead features", "traceread.passes.overhead", "cost_features"),
    ("what-if pricing (verdict)", "traceread.verdict.whatif", "price"),
]


def add_args(ap) -> None:
    ap.add_argument("trace", help="a trace of a few hundred MB (e.g. a 500 MB tiling)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (least kept)")
    h.add_side_args(ap)


def measure(trace: str, traced: bool) -> dict:
    """In the probe process: per pass, {"entry", "peak"} RSS bytes, or (``traced``) the
    tracemalloc peak above entry and what stayed live at exit; "maxrss" of the run."""
    import importlib
    import os
    import resource
    import sys
    import threading
    import time
    import tracemalloc

    os.environ["TRACEREAD_WORKERS"] = "1"
    from traceread.cli import main as cli_main
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict = {}
    now = [None]   # the pass running, read by the sampler

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    def wrap(label, fn):
        def run(*a, **k):
            if traced:
                c0 = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
            else:
                r0 = rss()
                now[0] = label
            try:
                return fn(*a, **k)
            finally:
                if traced:
                    c1, p = tracemalloc.get_traced_memory()
                    d = out.setdefault(label, {"peak": 0, "kept": 0})
                    d["peak"] = max(d["peak"], p - c0)
                    d["kept"] = max(d["kept"], c1 - c0)
                else:
                    now[0] = None
                    d = out.setdefault(label, {"entry": r0, "peak": 0})
                    d["peak"] = max(d["peak"], rss())
        return run

    importlib.import_module("traceread.analysis")
    for label, mod, name in PASSES:
        orig = getattr(importlib.import_module(mod), name)
        w = wrap(label, orig)
        for m in list(sys.modules.values()):   # every module that holds the function
            if getattr(m, "__name__", "").startswith("traceread") and \
                    getattr(m, name, None) is orig:
                setattr(m, name, w)
    stop = [False]

    def sample():
        while not stop[0]:
            label = now[0]
            if label is not None:
                d = out.get(label)
                if d is not None:
                    d["peak"] = max(d["peak"], rss())
            time.sleep(0.002)
    if traced:
        tracemalloc.start(1)
    else:
        t = threading.Thread(target=sample, daemon=True)
        t.start()
    argv, so = sys.argv, sys.stdout
    sys.argv = ["traceread", "analyze", "--no-cache", "--format", "json", trace]
    sys.stdout = open(os.devnull, "w")
    try:
        cli_main()
    except SystemExit:
        pass
    finally:
        sys.stdout.close()
        sys.argv, sys.stdout = argv, so
        stop[0] = True
    out["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def main(args) -> int:
    trace = str(Path(args.trace).resolve())
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave(["rss", "traced"], sides, args.repeat,
                            lambda case, side: h.probe(side, measure, trace, case == "traced",
                                                       env={"TRACEREAD_WORKERS": "1"}))
    names = [s.name for s in sides]
    got = {}
    for (case, side), rs in runs.items():
        good = [r for r in rs if r is not None and r.ok]
        if not good:
            print(f"{case} on {side}: failed: {h.failure(rs)}")
            return 1
        got[(case, side)] = good

    def least(case, side, label, key):
        vals = [r.result.get(label, {}).get(key) for r in got[(case, side)]]
        vals = [v for v in vals if v is not None]
        return min(vals) if vals else None

    print(f"{Path(trace).name} ({h.raw_size(Path(trace)) / 1e6:,.0f} MB raw), one worker; "
          f"least of {args.repeat}:\n")
    table = h.Table(sides, first="pass")
    for label, _, _ in PASSES:
        for case, key, what in (("rss", "entry", "RSS at entry"), ("rss", "peak", "peak RSS"),
                                ("traced", "peak", "traced peak above entry"),
                                ("traced", "kept", "traced, left at exit")):
            table.add(f"{label}: {what}", {n: least(case, n, label, key) for n in names},
                      h.fmt_mb)
    print(table.markdown())
    print("\npeak RSS of the run (ru_maxrss, untraced): " + ", ".join(
        f"{n} {h.fmt_mb(min(r.result['maxrss'] for r in got[('rss', n)]))}" for n in names))
    print(f"load average after: {h.load()}")
    return 0
