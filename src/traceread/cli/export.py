"""``traceread export``: the event table as Parquet or CSV."""
from __future__ import annotations

from pathlib import Path

import click

from . import main
from ._common import atomic_output, load_trace, strict_option
from ..errors import TraceError
from ..render import safe

# Suffix -> format; no suffix (e.g. /dev/stdout) stays Parquet, as before CSV existed.
_FORMATS = {".parquet": "parquet", ".pq": "parquet", "": "parquet", ".csv": "csv"}


def output_format(out: str) -> str:
    """The format ``out``'s suffix asks for; a TraceError for one we cannot write."""
    suffix = Path(out).suffix.lower()
    if suffix not in _FORMATS:
        raise TraceError(out, f"cannot write {suffix} files: name the output .parquet or .csv")
    return _FORMATS[suffix]


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, readable=False),
              help="File to write: .parquet (with the trace's metadata) or .csv.")
@strict_option
def export(trace, out):
    """Write the event table of TRACE to a Parquet or CSV file (by OUT's suffix).

    Written to a temporary file that replaces OUT only when complete: a failed
    export leaves an existing OUT as it was.
    """
    fmt = output_format(out)  # refused before the (possibly long) load
    t = load_trace(trace)
    with atomic_output(out) as tmp:
        if fmt == "csv":
            t.events.to_csv(tmp, index=False)
        else:
            t.to_parquet(tmp)
    click.echo(f"wrote {len(t)} events to {safe.name(out)}", err=True)
