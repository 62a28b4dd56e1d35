"""Text helpers every renderer shares: names shortened to one inert line, rows that wrap
their free-text column, prose fitted to the report's width (``WIDTH`` columns)."""
from __future__ import annotations

import re
import textwrap

from . import safe

NAME_W = 60
WIDTH = 100  # the layout of pipes and -o files (prose wraps, kernel names shorten)
MIN_WIDTH = 40
TABLE_WIDTH = 80  # table rows keep within this on every terminal: only prose rewraps
_WIDTH = [WIDTH]


def width() -> int:
    """The columns the text being rendered keeps to: WIDTH, or a narrower terminal's
    (set once per command by ``set_width``, before rendering: text is wrapped once)."""
    return _WIDTH[0]


def set_width(columns: int | None) -> None:
    """Render for ``columns`` (a terminal's; None: the 100-column layout of files)."""
    _WIDTH[0] = WIDTH if not columns else max(MIN_WIDTH, min(WIDTH, int(columns)))


def short_name(name: str, w: int = NAME_W) -> str:
    return safe.short(name, w)  # one inert line, inductor names keep their tail (render/safe.py)


def tail_lines(prefix: str, text: str, width: int | None = None) -> list[str]:
    """A table row whose last column is free text: the text wraps inside that column
    (continuation lines indented to it), so the row never passes ``width``."""
    width = width or _WIDTH[0]
    room = width - len(prefix)
    if len(prefix) + len(text) <= width or room < 20:
        return [prefix + text]
    glued = glue_units(" ".join(text.split()))
    parts = [x.replace("\x00", " ") for x in textwrap.wrap(
        glued, room, break_long_words=True, break_on_hyphens=False)]
    return [prefix + parts[0]] + [" " * len(prefix) + x for x in parts[1:]]


def glue_units(text: str) -> str:
    """"10 us" -> "10\\x00us": a wrap never parts a number from its unit (\\x00 -> " " after)."""
    return re.sub(r"(\d) (?=(?:ns|us|µs|ms|s|min|h|%)(?:\W|$))", "\\1\x00", text)


def fit_list(prefix: str, items: list[str], width: int | None = None) -> str:
    """As many of ``items`` (largest first), joined by ", ", as fit after ``prefix``
    (within TABLE_WIDTH: the free-text column of a table row)."""
    width = width or min(_WIDTH[0], TABLE_WIDTH)
    items = [safe.name(x) for x in items]
    for n in range(len(items), 0, -1):
        text = ", ".join(items[:n])
        if len(prefix) + len(text) <= width:
            return text
    room = width - len(prefix)
    return short_name(items[0], room) if items and room >= 8 else ""


def short_path(path: str, width: int | None = None) -> str:
    """A path that fits ``width``: its start and its end (the file name) with … between.
    For a path inside prose only: a header prints its path whole, so that it can be copied."""
    path = safe.name(path)
    width = width or _WIDTH[0]
    if len(path) <= width:
        return path
    tail = path[-(width * 2 // 3):]
    return path[: width - len(tail) - 1] + "…" + tail


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def fit(lines: list[str], width: int | None = None) -> list[str]:
    """Wrap prose lines longer than ``width``; table rows and paths stay whole.

    A row has a two-space column gap after its indent; a path (a line of one word)
    has no spaces and stays whole. Inside prose, a word too long for a line (a
    pybind11 type name, say) loses its middle to "…". Continuations indent past a
    ``1.`` / ``-`` marker.
    """
    width = width or _WIDTH[0]
    out = []
    for line in lines:
        body = line.lstrip(" ")
        # a row: an indented line with a column gap (a title at column 0 -- VERDICT  HOST --
        # is prose, wrapped here, not by the terminal)
        if len(line) <= width or ("  " in body and body != line) or " " not in body:
            out.append(line)
            continue
        indent = line[: len(line) - len(body)]
        marker = re.match(r"(\d+\.|-|\*) ", body)
        hang = indent + " " * (len(marker.group(0)) if marker else 2)
        room = width - len(hang)
        words = [w if len(w) <= room else short_path(w, room) for w in body.split(" ")]
        out += [x.replace("\x00", " ") for x in textwrap.wrap(
            glue_units(indent + " ".join(words)), width, subsequent_indent=hang,
            break_long_words=False, break_on_hyphens=False)]
    return out
