"""``traceread export``: the event table as Parquet."""
from __future__ import annotations

import click

from . import main
from ._common import load_trace


@main.command()
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="Parquet file to write.")
def export(trace, out):
    """Write the event table of TRACE to a Parquet file."""
    t = load_trace(trace)
    t.to_parquet(out)
    click.echo(f"wrote {len(t)} events to {out}", err=True)
