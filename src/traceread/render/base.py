"""One renderer layer: every output format renders the same result object.

Modelled on pyinstrument's ``renderers/``: a renderer is a small object with
``render(result) -> str | bytes`` and says what it produces (``output_is_binary``,
``output_file_extension``). The result is an ``Analysis`` (``traceread.analyze``)
or, for renderers that support it, a ``TraceDiff`` (``traceread.diff``).

Formats: ``text`` (the terminal report), ``json`` (``Analysis.to_dict()`` plus
``schema_version``), ``html`` (one self-contained page, ``render/html.py``) and
``overlay`` (the original trace plus traceread's tracks, ``render/overlay.py``).
"""
from __future__ import annotations

import gzip
import importlib
import json
from typing import Any

# format -> "module:Class"; imported on first use so `--help` stays light.
RENDERERS = {
    "text": "traceread.render.base:TextRenderer",
    "json": "traceread.render.base:JsonRenderer",
    "html": "traceread.render.html:HtmlRenderer",
    "overlay": "traceread.render.overlay:OverlayRenderer",
}


class Renderer:
    """Turns a result into one document."""

    output_is_binary = False
    output_file_extension = "txt"

    def __init__(self, **options: Any) -> None:
        self.options = options

    def render(self, result) -> str | bytes:
        raise NotImplementedError

    def write(self, result, path: str) -> int:
        """Render into ``path`` (gzip-compressed when it ends in .gz); returns bytes written.

        Atomic (``outputs.write_bytes``): a failed write keeps the previous ``path``, a
        symlink or the result's own trace file at ``path`` is refused."""
        from ..outputs import write_bytes

        doc = self.render(result)
        from .safe import encodable   # a name's bytes that are not UTF-8: \xNN

        data = doc if isinstance(doc, bytes) else encodable(doc).encode("utf-8")
        if str(path).endswith(".gz"):
            data = gzip.compress(data, compresslevel=6)
        meta = getattr(result, "meta", None)
        write_bytes(path, data, [meta.path] if getattr(meta, "path", None) else [])
        return len(data)


class TextRenderer(Renderer):
    """The terminal report (``render/report.py``); diffs ``render/diff_text.py``."""

    def render(self, result) -> str:
        if _is_diff(result):
            from .diff_text import render_diff

            return render_diff(result)
        from .report import render_report
        from .safe import for_display

        return render_report(for_display(result))


class JsonRenderer(Renderer):
    """The JSON contract: ``result.to_dict()`` plus ``schema_version`` (docs/schema/)."""

    output_file_extension = "json"

    def render(self, result) -> str:
        from ..schema import versioned
        from .safe import encodable_all   # a path's non-UTF-8 bytes as \xNN, not lone surrogates

        return json.dumps(encodable_all(versioned(result.to_dict())), indent=2)


def _is_diff(result) -> bool:
    return type(result).__name__ == "TraceDiff"


def get_renderer(fmt: str, **options: Any) -> Renderer:
    """The renderer for ``fmt`` (one of ``RENDERERS``)."""
    try:
        module, cls = RENDERERS[fmt].split(":")
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(RENDERERS)}") from None
    return getattr(importlib.import_module(module), cls)(**options)


def render(result, fmt: str, **options: Any) -> str | bytes:
    return get_renderer(fmt, **options).render(result)
