"""What every HTML page of traceread shares: the page shell and its CSS, the idle-cause
colours, and the small inline-SVG and table helpers (``html.py``, ``html_diff.py``,
``html_batch.py``)."""
from __future__ import annotations

from .safe import html as escape  # every string: one inert, escaped line

# GPU activity kinds: compute blue, copies brown-orange, comm teal -- no idle cause's colour.
ACTIVITY_COLORS = {"compute": "#3b6ea8", "copy": "#a0522d", "comm": "#00838f", "idle": "#c9c9c9"}
COLORS = {"busy": "#3b6ea8", "compile": "#9467bd", "graph_capture": "#c5b0d5", "dataloader": "#ff7f0e", "comm_wait": "#17becf",
          "sync": "#d62728", "alloc": "#8c564b", "launch": "#e377c2", "cpu_op": "#bcbd22",
          "python": "#2ca02c", "untraced": "#9e9e9e", "exposed": "#006d77", "hidden": "#83c5be"}
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}h1{font-size:20px;margin:0;overflow-wrap:anywhere}h2{font-size:16px;margin:28px 0 8px;
border-bottom:1px solid #ddd;padding-bottom:4px}.meta{color:#666}.verdict{border-left:6px solid #d62728;
background:#fbf3f3;padding:10px 16px;margin:16px 0}.verdict .bound{font-size:22px;font-weight:700}
table{border-collapse:collapse;font-size:13px;max-width:100%}td,th{padding:3px 10px;text-align:left;
border-bottom:1px solid #eee;vertical-align:top;overflow-wrap:anywhere}td.n,th.n{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}svg{max-width:100%;height:auto}
.verdict.good{border-left-color:#1b7f3b;background:#f0f8f2}h2,p,li{overflow-wrap:anywhere}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;
width:10px;height:10px;margin-right:4px;vertical-align:middle}.name{font-family:ui-monospace,monospace;
font-size:12px;white-space:normal;word-break:break-all}svg text{font:11px system-ui,sans-serif;fill:#333}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}.word{white-space:nowrap;overflow-wrap:normal;word-break:normal}.up{color:#b00020}.down{color:#1b7f3b}@media print{body{margin:0}}
"""


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n{body}\n"
            f'<p class="meta">made by traceread</p></body></html>\n')


def rect(x, y, w, h, color, title="") -> str:
    t = f"<title>{escape(title)}</title>" if title else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.2f}" height="{h:.1f}" '
            f'fill="{color}">{t}</rect>')


def svg(width: int, height: int, inner: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(label)}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">' + "".join(inner)
            + "</svg>")


def hbars(rows: list[tuple[str, float, str, str]], label_w: int = 130, bar_w: int = 520) -> str:
    """Horizontal bars: (label, value, text, colour)."""
    top = max((v for _, v, _, _ in rows), default=0) or 1
    inner = []
    for i, (label, v, text, color) in enumerate(rows):
        y = i * 22
        w = bar_w * v / top
        inner.append(f'<text x="0" y="{y + 13}">{escape(label)}</text>')
        inner.append(rect(label_w, y, w, 16, color, f"{label}: {text}"))
        inner.append(f'<text x="{label_w + w + 6:.0f}" y="{y + 13}">{escape(text)}</text>')
    # room for the longest value label after the longest bar (11 px text, ~6.6 px a char)
    text_w = max((len(t) for _, _, t, _ in rows), default=0) * 6.6 + 12
    return svg(int(label_w + bar_w + max(text_w, 60)), len(rows) * 22, inner, "bars")


def table(head: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    th = "".join(f'<th class="{"n" if i in numeric else ""}">{escape(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"n" if i in numeric else ""}">{c}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def word(text) -> str:
    """A word a table cell must not break (a verdict: ``GRAPH_CAPTURE``, never ``GRAPH/_CAPTU/RE``):
    the cells wrap anywhere so long names fit; this one keeps whole and widens its column."""
    return f'<span class="word">{escape(str(text))}</span>'


def name_span(name, width: int = 160) -> str:
    """A kernel/op name, cut to ``width`` characters (the full name on hover)."""
    full = " ".join(str(name).split())
    short = full if len(full) <= width else full[: width - 1] + "…"
    return f'<bdi class="name" title="{escape(full)}">{escape(short)}</bdi>'
