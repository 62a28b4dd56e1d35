"""``traceread export``: the event table as Parquet."""
from __future__ import annotations

import click

from . import main
from ._common import atomic_output, load_trace, strict_option


@main.command()
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="Parquet file to write.")
@strict_option
def export(trace, out):
    """Write the event table of TRACE to a Parquet file.

    Written to a temporary file that replaces OUT only when complete: a failed
    export leaves an existing OUT as it was.
    """
    t = load_trace(trace)
    with atomic_output(out) as tmp:
        t.to_parquet(tmp)
    click.echo(f"wrote {len(t)} events to {out}", err=True)
