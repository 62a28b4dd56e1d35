"""The step anatomy in the HTML report: each step's host time as phase bars (data, forward,
backward, optimizer, other), the odd steps marked, with the text lines under them."""
from __future__ import annotations

from html import escape
from types import SimpleNamespace

from .anatomy_text import anatomy_lines
from .html_base import rect, svg
from .text import fmt_ns

PHASE_COLORS = {"data": "#ff7f0e", "forward": "#3b6ea8", "backward": "#9467bd",
                "optimizer": "#2ca02c", "other": "#c7c7c7"}
MAX_ROWS = 40


def anatomy_section(d: dict) -> str:
    """"" without the fact (no steps)."""
    an = (d.get("context") or {}).get("anatomy")
    if not an or not an.get("per_step"):
        return ""
    rows = an["per_step"][:MAX_ROWS]
    odd = {n for g in an.get("odd_steps") or [] for n in g["steps"]}
    top = max(r["dur_ns"] for r in rows) or 1
    bar_w, row_h, x0 = 760, 14, 70
    inner = []
    for i, r in enumerate(rows):
        y = i * (row_h + 3)
        mark = " *" if r["step"] in odd else ""
        inner.append(f'<text x="0" y="{y + 11}">#{escape(str(r["step"]))}{mark}</text>')
        x = x0
        for p, color in PHASE_COLORS.items():
            ns = r["host_ns"].get(p) or 0
            w = bar_w * ns / top
            inner.append(rect(x, y, w, row_h, color, f"step {r['step']}: {p} {fmt_ns(ns)}"))
            x += w
        inner.append(f'<text x="{x + 4:.0f}" y="{y + 11}">{fmt_ns(r["dur_ns"])}</text>')
    legend = " ".join(f"<span style='color:{c}'>&#9632;</span> {p}"
                      for p, c in PHASE_COLORS.items())
    # the text lines read an analysis' context and utilization: the JSON's have both
    view = SimpleNamespace(context=d.get("context"), utilization=d.get("utilization"))
    text = "\n".join(x.strip() for x in anatomy_lines(view))
    return ("<h2>Step anatomy</h2><p class='meta'>Each step's host time by phase "
            "(passes/anatomy.py); * marks an odd step.</p><p>" + legend + "</p>"
            + svg(x0 + bar_w + 120, len(rows) * (row_h + 3), inner, "per-step phases")
            + "<pre>" + escape(text) + "</pre>")
