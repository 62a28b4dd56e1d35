"""``render``: the cost of the HTML report and the Perfetto overlay against the analysis.

For each trace, in one process per side: ``analyze`` (the yardstick), then the HTML
page rendered (and, apart, the idle-gap flame stacks it draws), the overlay's events built and the overlay written (gzip level 3,
the default; with ``--level9`` also level 9), each with its ratio to the analysis
time and its output size. Default trace: HTA's df_index_resolver (53.7 MB of JSON,
216k events). For the 1 GB figures in docs/see-it.md:
``scripts/make_big_trace.py SRC --size 1GB -o /tmp/big1g.json`` first.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import harness as h

FIGURES = (("analyze_s", "analyze (yardstick)"), ("html_s", "html render"),
           ("flame_s", "idle flame stacks (in the html)"),
           ("overlay_events_s", "overlay events"), ("write3_s", "overlay write (gz 3)"),
           ("write9_s", "overlay write (gz 9)"))
SIZES = (("html_kb", "html size", "KB"), ("write3_mb", "overlay size (gz 3)", "MB"),
         ("write9_mb", "overlay size (gz 9)", "MB"))


def add_args(ap) -> None:
    ap.add_argument("traces", nargs="*", type=Path, help="default: HTA's df_index_resolver")
    ap.add_argument("--level9", action="store_true", help="also write the overlay at gzip level 9")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best is kept)")
    h.add_side_args(ap)


def main(args) -> int:
    traces = [str(t) for t in args.traces] or [str(h.HTA_TRACE)]
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        runs = h.interleave(traces, sides, args.repeat,
                            lambda t, side: h.probe(side, costs, t, args.level9))
    for t in traces:
        best = {s.name: h.best(runs[(t, s.name)]) for s in sides}
        table = h.Table(sides)
        for key, label in FIGURES:
            table.add(label, _get(best, key))
            if key != "analyze_s":
                table.add(f"{label} / analyze", {n: r.result[key] / r.result["analyze_s"]
                                                 if r and key in r.result else None
                                                 for n, r in best.items()},
                          lambda x: f"{x:.3f}")
        for key, label, unit in SIZES:
            table.add(label, _get(best, key), lambda x, u=unit: f"{x:,.1f} {u}")
        r = best["this"]
        what = f"{r.result['events']:,} events, verdict {r.result['verdict']}" if r else \
            f"failed: {h.failure(runs[(t, 'this')])}"
        print(f"{t} ({what}; best of {args.repeat}):\n\n{table.markdown()}\n")
    return 0


def _get(best: dict, key: str) -> dict:
    return {n: r.result.get(key) if r else None for n, r in best.items()}


def costs(path: str, level9: bool) -> dict:
    """Probe: seconds of analyze, the HTML page, the overlay's events and its writes."""
    import gzip
    import os
    from unittest import mock

    from traceread import analyze
    from traceread.render import overlay
    from traceread.render.base import get_renderer

    out: dict = {}

    def timed(key, fn):
        t = time.perf_counter()
        res = fn()
        out[key] = time.perf_counter() - t
        return res

    a = timed("analyze_s", lambda: analyze(path))
    html = timed("html_s", lambda: get_renderer("html").render(a))
    try:    # the page's flame graph, on its own (a baseline from before it has none)
        from traceread.passes.flame import idle_stacks
    except ImportError:
        idle_stacks = None
    if idle_stacks is not None:
        timed("flame_s", lambda: idle_stacks(a.trace.events, a.gaps))
    added = timed("overlay_events_s", lambda: overlay.overlay_events(a))
    out.update(events=a.events, verdict=a.verdict["bound"], overlay_events=len(added),
               html_kb=len(html.encode()) / 1024)
    with tempfile.TemporaryDirectory() as d:
        dest = os.path.join(d, "o.json.gz")
        timed("write3_s", lambda: overlay.write_overlay(a, dest))
        out["write3_mb"] = os.path.getsize(dest) / 2**20
        if level9:
            def nine(tmp, target):  # overlay._open_out's signature
                return gzip.open(tmp, "wb", compresslevel=9)

            with mock.patch.object(overlay, "_open_out", nine):
                timed("write9_s", lambda: overlay.write_overlay(a, dest))
            out["write9_mb"] = os.path.getsize(dest) / 2**20
    return out
