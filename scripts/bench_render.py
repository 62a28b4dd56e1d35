"""Cost of the HTML report and the Perfetto overlay against the analysis, same run.

For each trace: analyze (the baseline), then render the HTML page, build the
overlay's events and write the overlay (gzip level 3, the default, and with
``--level9`` also gzip level 9), each as a ratio to the analysis time, with the
output sizes. Usage:

    python scripts/bench_render.py [--level9] [TRACE ...]

Default trace: HTA's df_index_resolver (53.7 MB of JSON, 216k events). For the
1 GB figures in docs/see-it.md: ``scripts/make_big_trace.py SRC --size 1GB -o
/tmp/big1g.json`` first.
"""
from __future__ import annotations

import gzip
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from traceread.analysis import analyze
from traceread.render import overlay
from traceread.render.base import get_renderer

DEFAULT = (Path(__file__).resolve().parents[2] / "shared" / "corpus" /
           "facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/"
           "df_index_resolver.json.gz")


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def bench(path: str, level9: bool) -> None:
    a, t_an = _timed(lambda: analyze(path))
    html, t_html = _timed(lambda: get_renderer("html").render(a))
    added, t_ev = _timed(lambda: overlay.overlay_events(a))
    print(f"{path}\n  {a.events:,} events, verdict {a.verdict['bound']}")
    print(f"  analyze (baseline):    {t_an:7.2f} s")
    print(f"  html render:           {t_html:7.2f} s  ratio {t_html / t_an:.3f}  "
          f"size {len(html.encode()) / 1024:.0f} KB")
    print(f"  overlay events:        {t_ev:7.2f} s  ratio {t_ev / t_an:.3f}  ({len(added):,} events)")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "o.json.gz")
        _, t_w = _timed(lambda: overlay.write_overlay(a, out))
        print(f"  overlay write (gz 3):  {t_w:7.2f} s  ratio {t_w / t_an:.3f}  "
              f"size {os.path.getsize(out) / 2**20:.1f} MB")
        if level9:
            with mock.patch.object(overlay, "_open_out", lambda p: gzip.open(p, "wb", compresslevel=9)):
                _, t_9 = _timed(lambda: overlay.write_overlay(a, out))
            print(f"  overlay write (gz 9):  {t_9:7.2f} s  ratio {t_9 / t_an:.3f}  "
                  f"size {os.path.getsize(out) / 2**20:.1f} MB")


def main() -> None:
    args = sys.argv[1:]
    level9 = "--level9" in args
    paths = [a for a in args if a != "--level9"] or [str(DEFAULT)]
    for p in paths:
        bench(p, level9)


if __name__ == "__main__":
    main()
