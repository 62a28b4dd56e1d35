"""``traceread diff BEFORE AFTER``: step time, idle by cause, verdict and kernel changes."""
from __future__ import annotations

import re

import click

from . import main
from ._common import emit, format_callback, load_trace, no_cache_option, output_option


def _percent(ctx, param, value):
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", str(value))
    if not m:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 5%)")
    return float(m.group(1))


# Exit status of --fail-if-slower: 1 stays "an error" (a file that cannot be read, as for
# every command) and 2 click's usage error, so CI tells "slower" from "broken".
EXIT_SLOWER = 3


def _batch(ctx, param, value):
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
    if not m or not int(m.group(1)) or not int(m.group(2)):
        raise click.BadParameter(f"{value!r} is not BEFORE:AFTER batch sizes (e.g. 16:256)")
    return int(m.group(1)), int(m.group(2))


@main.command()
@click.argument("before", type=click.Path(readable=False))
@click.argument("after", type=click.Path(readable=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default=None,
              show_default="text", callback=format_callback,
              help="Output format (default: by -o's suffix, else text).")
@output_option
@click.option("--fail-if-slower", default=None, callback=_percent, metavar="PCT",
              help=f"Exit {EXIT_SLOWER} when AFTER is more than PCT slower than BEFORE (e.g. 5%): "
                   "per step, per iteration without steps, per sample when the batch differs.")
@click.option("--batch", default=None, callback=_batch, metavar="BEFORE:AFTER",
              help="Batch sizes of the two runs (e.g. 16:256): compare per sample. By default "
                   "read from the ops' input shapes when recorded (record_shapes=True).")
@click.option("--step-pattern", default=None, metavar="REGEX",
              help="Regex for step ranges (default: ProfilerStep#N).")
@no_cache_option
def diff(before, after, fmt, out, fail_if_slower, batch, step_pattern):
    """Compare two traces (or two directories of traces): did the fix work?

    BEFORE and AFTER may be two trace files, two folders of traces (matched by
    relative path, else rank, else position) or two `traceread batch -o` output
    folders (the same, read from the batch's tables). Folders also give each
    multi-rank job's change: straggler, delay, cause, step time. Times are per step
    when both sides have steps, per iteration when neither has (the repeating block of
    host ops), per sample when the batch size differs.
    --fail-if-slower: exit 3 when the (worst pair's) increase exceeds PCT; errors exit 1."""
    import sys

    from ..diffs.paths import diff_paths
    from ..render.base import get_renderer

    d = diff_paths(before, after, step_pattern=step_pattern, load=load_trace, batch=batch)
    if fmt == "html" and out is None:
        raise click.UsageError("--format html needs -o FILE")
    emit(get_renderer(fmt).render(d), out, terminal=fmt == "text")
    slower = d.slower_pct()
    if fail_if_slower is not None and slower is not None and slower > fail_if_slower:
        per = " per sample" if d.batch else ""
        click.echo(f"traceread: AFTER is {slower:.1f}% slower{per} than BEFORE "
                   f"(limit {fail_if_slower:g}%)", err=True)
        sys.exit(EXIT_SLOWER)
