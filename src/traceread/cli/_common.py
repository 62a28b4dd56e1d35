"""Small helpers shared by the subcommands."""
from __future__ import annotations

import os
import json
import re
import sys
from contextlib import contextmanager

import click

from .. import load as _load
from ..table import Trace


_USE_CACHE = {"on": True}


def load_trace(path: str) -> Trace:
    """Load with a progress indicator on stderr for slow files (tty only).

    Big traces go through the event-table cache (``traceread.cache``) unless
    ``--no-cache`` was given or ``TRACEREAD_NO_CACHE`` is set.
    """
    from ..cache import worth_caching

    use = _USE_CACHE["on"] and not os.environ.get("TRACEREAD_NO_CACHE")
    return _load(path, progress=sys.stderr.isatty(), cache=use and worth_caching(path))


def _set_no_cache(ctx, param, value):
    _USE_CACHE["on"] = not value  # click calls this on every run, flag given or not
    return value


# Add to a command to offer --no-cache; it needs no parameter in the function.
no_cache_option = click.option(
    "--no-cache", is_flag=True, expose_value=False, is_eager=True, callback=_set_no_cache,
    help="Parse the file again instead of reusing the cached event table "
         "(cache: $TRACEREAD_CACHE_DIR or ~/.cache/traceread).")


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


_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text) -> int:
    """'1ms', '500us', '2s', '1.5ms' or a bare number of ns -> integer ns."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*", str(text).lower())
    if not m:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 1ms, 500us, 2s)")
    return int(round(float(m.group(1)) * _UNITS[m.group(2) or "ns"]))


def duration_callback(ctx, param, value) -> int:
    """click callback: a duration option, 0 when absent."""
    return 0 if value is None else parse_duration(value)


def emit_json(docs: list, out: str | None) -> None:
    """One document as an object, several as a list; each object carries ``schema_version``."""
    from ..schema import versioned

    docs = [versioned(d) if isinstance(d, dict) else d for d in docs]
    emit(json.dumps(docs if len(docs) > 1 else docs[0], indent=2), out)


def each_trace(paths, fn) -> tuple[list, int]:
    """``fn(path, trace)`` for every path. A bad file costs one error line, not the others.

    Returns (results of the files that worked, number that failed); exits 1 at once
    when none worked. After printing the results, ``exit_if_failed(n)``.
    """
    from ..errors import TraceError

    results, failed = [], 0
    for p in paths:
        try:
            results.append(fn(p, load_trace(p)))
        except TraceError as e:
            click.echo(f"traceread: error: {e}", err=True)
            failed += 1
    if not results:
        sys.exit(1)
    return results, failed


def exit_if_failed(failed: int) -> None:
    if failed:
        sys.exit(1)
