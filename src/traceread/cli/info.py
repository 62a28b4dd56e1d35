"""``traceread info``: what is in a trace file."""
from __future__ import annotations


import click

from . import main
from ._common import emit_json, emit, format_option, load_trace, no_cache_option, output_option
from ..passes.info import trace_info
from ..render.text import render_info


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@format_option
@output_option
@no_cache_option
def info(traces, fmt, out):
    """Format, version, rank, devices, event counts by kind and time span."""
    results = [trace_info(load_trace(t)) for t in traces]
    if fmt == "json":
        emit_json(results, out)
    else:
        emit("\n\n".join(render_info(r) for r in results), out)
