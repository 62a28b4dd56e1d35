"""Small helpers shared by the subcommands."""
from __future__ import annotations

import json
import os
import re
import sys
from contextlib import contextmanager

import click

from .. import load as _load
from ..errors import TraceError, out_of_memory
from ..outputs import atomic_file, refuse_inputs
from ..render import safe
from ..table import Trace


_USE_CACHE = {"on": True}
LOADING: dict = {"path": None}
_STRICT = {"on": False}


TRACE_SUFFIXES = (".json.gz", ".json", ".sqlite")


def files_glob(folder: str, most: int = 5000) -> str:
    """A shell glob that matches the traces under ``folder``, where they are: ``DIR/*.json.gz``
    beside it, ``DIR/*/*.json.gz`` one folder down; mixed depths: ``$(find ...)``. The first
    ``most`` entries are looked at (a hint, not a scan)."""
    found: dict[tuple[int, str], int] = {}
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        depth = os.path.relpath(root, folder).count(os.sep) + (root != folder)
        for f in files:
            seen += 1
            suffix = next((x for x in TRACE_SUFFIXES if f.endswith(x)), None)
            if suffix:
                found[(depth, suffix)] = found.get((depth, suffix), 0) + 1
        if seen >= most:
            break
    if not found:
        return os.path.join(folder, "*.json.gz")
    (depth, suffix), _ = max(found.items(), key=lambda kv: kv[1])
    if len({d for d, _ in found}) > 1:
        return f"$(find {folder} -name '*{suffix}')"
    return os.path.join(folder, *(["*"] * depth), f"*{suffix}")


def load_trace(path: str) -> Trace:
    """Load with a progress indicator on stderr for slow files (tty only).

    Big traces go through the event-table cache (``traceread.readers.cache``) unless
    ``--no-cache`` was given or ``TRACEREAD_NO_CACHE`` is set. A trace cut short
    is analysed up to its last complete event, with one warning line on stderr
    (``--strict`` refuses it).
    """
    from ..readers.cache import worth_caching

    LOADING["path"] = path   # the file an out-of-memory error names (cli.main)
    if os.path.isdir(path):   # the one-trace commands: say what takes a folder
        raise TraceError(path, "is a directory, not a trace file: `traceread batch "
                         f"{path}` analyses every trace under it, or pass the files "
                         f"({files_glob(path)})")
    use = _USE_CACHE["on"] and not os.environ.get("TRACEREAD_NO_CACHE")
    trace = _load(path, progress=sys.stderr.isatty(), cache=use and worth_caching(path),
                  strict=_STRICT["on"])
    from ..readers.validate import apart_note, describe, require_events  # read() imported it

    foreign = trace.meta.extra.get("foreign")
    if foreign and trace.table.num_rows == 0:   # what was ignored says more than "no events"
        raise TraceError(path, foreign_note(foreign, refused=True))
    require_events(trace)

    notes = (("truncated", truncation_note), ("foreign", foreign_note),
             ("impossible", lambda odd: f"impossible events: {describe(odd)}"),
             ("processes_apart", apart_note))
    for key, note in notes:     # one warning line per thing the reader noted, in this order
        found = trace.meta.extra.get(key)
        if found:
            warn(f"{path}: {note(found)}")
    return trace


def foreign_note(note: dict, refused: bool = False) -> str:
    """One line about a Chrome trace that no torch.profiler wrote (``meta.extra["foreign"]``);
    ``refused``: nothing in it became a row, so there is nothing to analyse."""
    records, rows = note.get("records", 0), note.get("rows", 0)
    decoded = note.get("decoded", rows)
    cats = ", ".join(f"{c or '(no cat)'} {n:,}" for c, n in note.get("categories", {}).items())
    phases = ", ".join(f"{p} {n:,}" for p, n in note.get("ignored_phases", {}).items())
    what = f"{records:,} event{'' if records == 1 else 's'} of unknown categories"
    what += f" ({cats})" if cats else ""
    read = f"read as {rows:,} plain CPU range{'' if rows == 1 else 's'}"
    read += " (B/E pairs as one)" if decoded > rows else ""
    ignored = max(records - decoded, 0)
    read += f", {ignored:,} ignored" + (f" (ph {phases})" if phases else "")
    if refused:
        return f"not a torch.profiler trace: {what} {read}: nothing to analyse (not a trace)"
    return (f"not a torch.profiler trace: {what} {read}. Nothing in it marks GPU work, steps "
            "or idle causes, so the report says little: record with torch.profiler or nsys")


def truncation_note(cut: dict) -> str:
    """One line about a recovered cut (``meta.extra["truncated"]``)."""
    where = "gzip stream ends early" if cut.get("gzip_stream_cut") else "file cut short"
    return (f"truncated at byte {cut['truncated_at_byte']:,} ({where}): analysed the "
            f"{cut['events_recovered']:,} events before the cut "
            f"({100 * cut['share_of_file']:.1f}% of the bytes present: how much of the original "
            "file is missing cannot be known); --strict refuses such files")


def _set_no_cache(ctx, param, value):
    _USE_CACHE["on"] = not value  # click calls this on every run, flag given or not
    return value


def _set_strict(ctx, param, value):
    _STRICT["on"] = bool(value)
    return value


# Add to a command to offer --no-cache; it needs no parameter in the function.
no_cache_option = click.option(
    "--no-cache", is_flag=True, expose_value=False, is_eager=True, callback=_set_no_cache,
    help="Parse the file again instead of reusing the cached event table "
         "(cache: $TRACEREAD_CACHE_DIR or ~/.cache/traceread).")
strict_option = click.option(
    "--strict", is_flag=True, expose_value=False, is_eager=True, callback=_set_strict,
    help="Refuse a trace cut short instead of analysing its complete events.")


# --------------------------------------------------------------------------- output

def _inputs() -> list[str]:
    """The input paths of the running command (its trace / directory arguments)."""
    ctx = click.get_current_context(silent=True)
    out: list[str] = []
    while ctx is not None:
        for name in ("traces", "trace", "directory", "paths", "before", "after"):
            v = ctx.params.get(name)
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                out.extend(x for x in v if isinstance(x, str))
        ctx = ctx.parent
    return out


def check_output(path: str, inputs: list[str] | None = None) -> None:
    """Refuse an output path that is one of the inputs, by identity (``outputs.refuse_inputs``)."""
    refuse_inputs(path, _inputs() if inputs is None else inputs)


@contextmanager
def atomic_output(path: str, binary: bool = False):
    """Yield a temporary path beside ``path``; it replaces ``path`` only on success.

    ``outputs.atomic_file`` with this command's inputs: an input (by identity), a
    symlink to a file or a directory is refused before anything is read; a failed
    write leaves an existing ``path`` untouched; a device or pipe (``/dev/stdout``)
    is written in place. OSErrors become one-line TraceErrors.
    """
    with atomic_file(path, _inputs()) as tmp:
        yield tmp


@contextmanager
def output_stream(path: str | None):
    """Yield a text stream: the file given with -o (written atomically), else stdout."""
    if path is None or path == "-":
        yield sys.stdout
        return
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f


def emit(text: str, out: str | None, terminal: bool = True) -> None:
    """Write ``text`` to ``-o`` or stdout. ``terminal``: a text render, whose control
    characters are escaped (``render.safe.text``) wherever it goes, and which on a TTY
    is fitted to its width and coloured (``render.terminal``); machine formats
    (``terminal=False``: CSV, HTML) keep their bytes, except on a terminal."""
    if terminal or (out in (None, "-") and sys.stdout.isatty()):
        text = safe.text(text)
    else:   # a name's bytes that are not UTF-8 become \xNN: no UTF-8 writer takes them raw
        text = safe.encodable(text)
    if terminal and out in (None, "-"):
        from ..render.terminal import for_terminal

        text = for_terminal(text, sys.stdout)  # width and colour of a TTY; as is elsewhere
    with output_stream(out) as f:
        f.write(text)
        if not text.endswith("\n"):
            f.write("\n")


def warn(message: str) -> None:
    """One ``traceread: warning:`` line on stderr, terminal-safe."""
    click.echo(f"traceread: warning: {one_line(message)}", err=True)


def one_line(message: str) -> str:
    """A message as one terminal-safe line: every control character (a newline in a
    file or kernel name too) becomes a visible escape."""
    return safe.name(str(message).strip())


# -o's suffix names the format unless --format was given (-o report.html writes HTML).
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".csv": "csv",
                  ".txt": "text", ".folded": "folded", ".svg": "svg"}


def _suffix_format(out, choices) -> str | None:
    import os.path

    fmt = SUFFIX_FORMATS.get(os.path.splitext(str(out or ""))[1].lower())
    return fmt if fmt in choices else None


def format_callback(ctx, param, value):
    """--format: as given; else the -o suffix's format when this command writes it, else
    text. (click runs the two options' callbacks in command-line order: both look; the
    option's default is None so that a given --format text is told from none.)"""
    if value is not None:
        return value
    ctx.meta["traceread.fmt_defaulted"] = True
    return _suffix_format(ctx.params.get("out"), param.type.choices) or "text"


def _output_callback(ctx, param, value):
    # the text renders at a terminal's width (wrapped once, there), else the 100-column layout
    from ..render.fmt import set_width
    from ..render.terminal import width_for

    set_width(width_for(sys.stdout) if value in (None, "-") else None)
    fmt = next((p for p in ctx.command.params if p.name == "fmt"), None)
    if value and fmt is not None and ctx.meta.get("traceread.fmt_defaulted"):
        ctx.params["fmt"] = _suffix_format(value, fmt.type.choices) or ctx.params["fmt"]
    return value


format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default=None, show_default="text",
    callback=format_callback, help="Output format (default: by -o's suffix, else text).")
output_option = click.option(
    "-o", "--output", "out", type=click.Path(dir_okay=False, readable=False), default=None,
    callback=_output_callback,
    help="Write to this file instead of stdout (.html/.json/.csv/.txt pick the format).")


_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text) -> int:
    """'1ms', '500us', '2s', '1.5ms', '7ns' (or a bare 0) -> integer ns.

    A bare number is refused: nsys's gap= counts ms, our ns, so "5" would silently
    mean a different time to whoever typed it."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*", str(text).lower())
    if not m:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 1ms, 500us, 2s)")
    if m.group(2) is None and float(m.group(1)) != 0:
        raise click.BadParameter(f"{text!r} has no unit: write {m.group(1)}ns, {m.group(1)}us, "
                                 f"{m.group(1)}ms or {m.group(1)}s")
    return int(round(float(m.group(1)) * _UNITS[m.group(2) or "ns"]))


def duration_callback(ctx, param, value) -> int:
    """click callback: a duration option, 0 when absent."""
    return 0 if value is None else parse_duration(value)


def emit_json(docs: list, out: str | None, inputs: int, **envelope) -> None:
    """The one JSON shape of the per-trace commands (docs/schema, README "JSON output").

    One TRACE argument read as one trace: that trace's object. Otherwise -- several TRACE
    arguments (even if only one loaded) or one export split into several processes --
    ``{"schema_version", **envelope, "traces": [...]}``, never a bare list; ``envelope``
    holds the keys every such document has (``analyze``: ``cross_rank``, null when none).
    Each item of ``traces`` is exactly the object one input would give (with its
    ``schema_version``)."""
    from ..schema import versioned

    docs = [safe.encodable_all(versioned(d)) for d in docs]   # a path's non-UTF-8 bytes: \xNN
    envelope = safe.encodable_all(envelope)
    whole = (docs[0] if inputs == 1 and len(docs) == 1 and not any(envelope.values())
             else versioned({**envelope, "traces": docs}))
    emit(json.dumps(whole, indent=2), out, terminal=False)


def each_trace(paths, fn) -> tuple[list, int]:
    """``fn(path, trace)`` for every path. A bad file costs one error line, not the others.

    Any failure of one file (a TraceError, but also an unexpected exception or
    running out of memory) is that file's error line; the other files' results
    are kept. Returns (results of the files that worked, number that failed);
    exits 1 at once when none worked. After printing the results, ``exit_if_failed(n)``.
    """
    results, failed = [], 0
    for p in paths:
        try:
            results.append(fn(p, load_trace(p)))
        except TraceError as e:
            file_error(str(e))
            failed += 1
        except MemoryError:
            file_error(f"{p}: {out_of_memory(p)}")
            failed += 1
        except Exception as e:  # noqa: BLE001 - one file's bug must not lose the others
            if os.environ.get("TRACEREAD_DEBUG"):
                raise
            file_error(f"{p}: internal error: {type(e).__name__}: {' '.join(str(e).split())} "
                        "(set TRACEREAD_DEBUG=1 for a traceback)")
            failed += 1
    if not results:
        sys.exit(1)
    return results, failed


def file_error(message: str) -> None:
    click.echo(f"traceread: error: {one_line(message)}", err=True)


def exit_if_failed(failed: int) -> None:
    if failed:
        sys.exit(1)
