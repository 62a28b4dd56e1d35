"""Small helpers shared by the subcommands."""
from __future__ import annotations

import sys
from contextlib import contextmanager

import click

from .. import load as _load
from ..table import Trace


def load_trace(path: str) -> Trace:
    """Load with a progress indicator on stderr for slow files (tty only)."""
    return _load(path, progress=sys.stderr.isatty())


@contextmanager
def output_stream(path: str | None):
    """Yield a text stream: the file given with -o, else stdout."""
    if path is None or path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as f:
        yield f


def emit(text: str, out: str | None) -> None:
    with output_stream(out) as f:
        f.write(text)
        if not text.endswith("\n"):
            f.write("\n")


format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Output format.")
output_option = click.option(
    "-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
    help="Write to this file instead of stdout.")
