"""``traceread overlay``: the trace plus traceread's tracks, for Perfetto / chrome://tracing."""
from __future__ import annotations

import click

from . import main
from ._common import load_trace, no_cache_option


@main.command()
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="Chrome trace JSON to write (.json.gz: gzip-compressed).")
@click.option("--step-pattern", default=None, metavar="REGEX",
              help="Regex for step ranges (default: ProfilerStep#N).")
@no_cache_option
def overlay(trace, out, step_pattern):
    """TRACE plus tracks for ui.perfetto.dev: idle gaps by cause, steps, exposed comm, compiles."""
    import os

    from ..analysis import analyze
    from ..errors import TraceError
    from ..render.overlay import write_overlay

    if os.path.abspath(out) == os.path.abspath(trace):
        raise TraceError(out, "refusing to overwrite the input trace")
    a = analyze(load_trace(trace), step_pattern=step_pattern)
    n = write_overlay(a, out)
    click.echo(f"wrote {out}: {n:,} traceread events added to {a.events:,} "
               f"(open in https://ui.perfetto.dev or chrome://tracing)", err=True)
