"""``traceread info``: what is in a trace file."""
from __future__ import annotations


import click

from . import main
from ._common import (each_trace, emit, emit_json, exit_if_failed, format_option,
                      no_cache_option, output_option, strict_option)
from ..passes.info import trace_info
from ..render.text import render_info


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False))
@format_option
@output_option
@no_cache_option
@strict_option
def info(traces, fmt, out):
    """Format, version, rank, devices, event counts by kind and time span."""
    results, failed = each_trace(traces, lambda p, t: trace_info(t))
    if fmt == "json":
        emit_json(results, out, len(traces))
    else:
        emit("\n\n".join(render_info(r) for r in results), out)
    exit_if_failed(failed)
