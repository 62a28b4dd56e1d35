"""``traceread overlay``: the trace plus traceread's tracks, for Perfetto / chrome://tracing."""
from __future__ import annotations

import click

from . import main
from ._common import load_trace, no_cache_option
from .analyze import step_pattern_option, steps_option, window_option


@main.command()
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="Chrome trace JSON to write (.json.gz: gzip-compressed).")
@step_pattern_option
@steps_option
@window_option
@no_cache_option
def overlay(trace, out, step_pattern, steps_spec, window):
    """TRACE plus tracks for ui.perfetto.dev: idle gaps by cause, steps, exposed comm, compiles."""
    import os

    from ..analysis import analyze
    from ..errors import TraceError
    from ..render.overlay import write_overlay

    if os.path.abspath(out) == os.path.abspath(trace):
        raise TraceError(out, "refusing to overwrite the input trace")
    try:
        a = analyze(load_trace(trace), step_pattern=step_pattern, steps=steps_spec, window=window)
    except ValueError as e:  # --steps names no step of this trace
        raise TraceError(trace, str(e)) from None
    n = write_overlay(a, out)
    click.echo(f"wrote {out}: {n:,} traceread events added to {a.events:,} "
               f"(open in https://ui.perfetto.dev or chrome://tracing)", err=True)
