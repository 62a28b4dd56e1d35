"""A text report as a terminal shows it: fitted to its width, coloured when it can be.

Pipes and files get the 100-column layout. On a terminal (stdout is a TTY) the command
renders its report at the terminal's width (rich's console width: ``$COLUMNS``, else the
terminal's own size; at most 100), so prose is wrapped once, there; table rows keep
within 80 columns. A line still longer than a narrower terminal (a table row) is wrapped
here at a space, its continuation indented under it, instead of the terminal cutting it
anywhere; a line of one word (a path) is never cut, so it can be copied.
Colour (ANSI SGR) only on a TTY, never with ``NO_COLOR`` set (https://no-color.org) or
``TERM=dumb``: the verdict line bold, section titles bold, parenthesised notes dim.
Runs after ``safe.text``: the escape sequences added here are the only ones written.
"""
from __future__ import annotations

import os
import re
import shutil
import textwrap

DESIGN_WIDTH = 100
MIN_WIDTH = 40

BOLD, DIM, RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
VERDICT = "\x1b[1;33m"   # bold yellow: the one line to read first


def width_for(stream, env=None) -> int | None:
    """Columns to fit a report to on ``stream``: None off a terminal (pipes, files keep
    the layout); ``$COLUMNS`` when set, else the terminal's size."""
    env = os.environ if env is None else env
    if not _isatty(stream):
        return None
    cols = env.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return max(MIN_WIDTH, int(cols))
    try:    # rich's console width: the terminal's size, as rich measures it
        from rich.console import Console

        return max(MIN_WIDTH, Console(file=stream, force_terminal=True).width)
    except Exception:  # noqa: BLE001 - any failure: the size the OS reports
        return max(MIN_WIDTH, shutil.get_terminal_size((DESIGN_WIDTH, 24)).columns)


def colour_for(stream, env=None) -> bool:
    env = os.environ if env is None else env
    return _isatty(stream) and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def fit(text: str, width: int | None) -> str:
    """Wrap every line longer than ``width`` at spaces (alignment inside lines kept)."""
    if not width:
        return text
    return "\n".join(x for line in text.split("\n") for x in _fit_line(line, width))


def _fit_line(line: str, width: int) -> list[str]:
    if len(line) <= width or " " not in line.strip():   # a path prints whole
        return [line]
    lead = line[:len(line) - len(line.lstrip(" "))]
    more = lead + "    " if len(lead) + 4 < width // 2 else lead
    return textwrap.wrap(line.lstrip(" "), width, initial_indent=lead, subsequent_indent=more,
                         break_long_words=True, break_on_hyphens=False,
                         replace_whitespace=False) or [line[:width]]


_TITLE = re.compile(r"^[A-Z]")


def style_of(line: str) -> str:
    """The SGR prefix of one report line ("" for none): the verdict, a section title (a
    line at column 0 that starts with a capital), a parenthesised note."""
    if line.startswith("VERDICT"):
        return VERDICT
    if _TITLE.match(line) and not line.startswith("Row#"):
        return BOLD
    if line.lstrip().startswith("(") and line.rstrip().endswith(")"):
        return DIM
    return ""


def for_terminal(text: str, stream, env=None) -> str:
    """``text`` fitted to and coloured for ``stream`` (unchanged off a terminal)."""
    width, col = width_for(stream, env), colour_for(stream, env)
    if not width and not col:
        return text
    out = []
    for line in text.split("\n"):
        pieces = _fit_line(line, width) if width else [line]
        sgr = style_of(line) if col else ""
        out += [sgr + p + RESET if sgr and p else p for p in pieces]
    return "\n".join(out)
