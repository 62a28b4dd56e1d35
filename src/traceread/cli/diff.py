"""``traceread diff BEFORE AFTER``: step time, idle by cause, verdict and kernel changes."""
from __future__ import annotations

import re

import click

from . import main
from ._common import emit, load_trace, no_cache_option, output_option


def _percent(ctx, param, value):
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", str(value))
    if not m:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 5%)")
    return float(m.group(1))


@main.command()
@click.argument("before", type=click.Path(readable=False))
@click.argument("after", type=click.Path(readable=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text",
              show_default=True, help="Output format.")
@output_option
@click.option("--fail-if-slower", default=None, callback=_percent, metavar="PCT",
              help="Exit 1 when AFTER's step time is more than PCT slower than BEFORE's (e.g. 5%).")
@click.option("--step-pattern", default=None, metavar="REGEX",
              help="Regex for step ranges (default: ProfilerStep#N).")
@no_cache_option
def diff(before, after, fmt, out, fail_if_slower, step_pattern):
    """Compare two traces (or two directories of traces): did the fix work?

    BEFORE and AFTER may be two trace files, two folders of traces (matched by
    relative path, else rank, else position) or two `traceread batch -o` output
    folders (the same, read from the batch's tables). Folders also give each
    multi-rank job's change: straggler, delay, cause, step time. Times are per step
    when both sides have steps.
    --fail-if-slower: exit 1 when the (worst pair's) step-time increase exceeds PCT."""
    import sys

    from ..tracediff import diff_paths
    from ..render.base import get_renderer

    d = diff_paths(before, after, step_pattern=step_pattern, load=load_trace)
    if fmt == "html" and out is None:
        raise click.UsageError("--format html needs -o FILE")
    emit(get_renderer(fmt).render(d), out, terminal=fmt == "text")
    slower = d.slower_pct()
    if fail_if_slower is not None and slower is not None and slower > fail_if_slower:
        click.echo(f"traceread: AFTER is {slower:.1f}% slower than BEFORE "
                   f"(limit {fail_if_slower:g}%)", err=True)
        sys.exit(1)
