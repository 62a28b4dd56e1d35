"""The HTML body of a ``TraceDiff`` (``traceread diff --format html``)."""
from __future__ import annotations

from html import escape

from ..passes.attribution import CPU_CATEGORIES
from .html import COLORS, _name, _svg, table
from .text import fmt_ns

_ROWS = (("step time (mean)", "step_mean_ns"), ("step time (median)", "step_median_ns"),
         ("GPU window", "gpu_window_ns"), ("GPU busy", "gpu_busy_ns"), ("GPU idle", "gpu_idle_ns"),
         ("exposed comm", "exposed_comm_ns"))


def diff_body(d) -> str:
    if d.pairs:
        return "\n".join(_one(p) for p in d.pairs)
    return _one(d)


def _change(x, y) -> str:
    if x is None or y is None or not x:
        return ""
    pct = 100.0 * (y - x) / x
    cls = "up" if pct > 0 else "down" if pct < 0 else ""
    return f'<span class="{cls}">{pct:+.1f}%</span>'


def _one(d) -> str:
    b, a = d.before, d.after
    per = "per step" if d.unit == "step" else "whole trace"
    rows = [[escape(label), fmt_ns(b[k]), fmt_ns(a[k]), _change(b[k], a[k])]
            for label, k in _ROWS if b.get(k) is not None and a.get(k) is not None]
    rows.append(["GPU idle %", f"{b['gpu_idle_pct']:.1f}%", f"{a['gpu_idle_pct']:.1f}%",
                 f"{a['gpu_idle_pct'] - b['gpu_idle_pct']:+.1f} pts"])
    rows.append(["recompiles", b["recompiles"], a["recompiles"], ""])
    rows.append(["verdict", escape(str(b["verdict"]).upper()), escape(str(a["verdict"]).upper()),
                 "changed" if b["verdict"] != a["verdict"] else ""])
    out = [f"<h1>diff: {escape(b['path'])} → {escape(a['path'])}</h1>",
           f'<div class="verdict" id="verdict"><div class="bound">{escape(str(b["verdict"]).upper())} → '
           f'{escape(str(a["verdict"]).upper())}</div><p>{_headline(d)}</p></div>',
           f"<h2>Figures ({per})</h2>", table(["", "before", "after", "change"], rows, {1, 2, 3}),
           f"<h2>Idle by cause ({per})</h2>", _paired_bars(b["idle_by_cpu"], a["idle_by_cpu"])]
    bc, ac = b.get("kernel_classes") or {}, a.get("kernel_classes") or {}
    if bc or ac:
        crow = [[escape(c), fmt_ns(bc.get(c, 0)), fmt_ns(ac.get(c, 0)), _change(bc.get(c, 0), ac.get(c, 0))]
                for c in sorted(set(bc) | set(ac), key=lambda c: -max(bc.get(c, 0), ac.get(c, 0)))]
        out += [f"<h2>Kernel time by class ({per})</h2>",
                table(["class", "before", "after", "change"], crow, {1, 2, 3})]
    for key in ("slower", "faster", "new", "gone"):
        ks = d.kernels.get(key) or []
        if ks:
            krows = [[fmt_ns(r["before_ns"]), fmt_ns(r["after_ns"]),
                      ("+" if r["delta_ns"] > 0 else "") + fmt_ns(r["delta_ns"]),
                      f"{r['pct']:+.0f}%" if r["pct"] is not None else "",
                      _name(r["name"])] for r in ks]
            out.append(f"<h2>Kernels {key} ({d.kernels.get(key + '_count', len(ks))}, {per})</h2>")
            out.append(table(["before", "after", "change", "%", "name"], krows, {0, 1, 2, 3}))
    return "\n".join(out)


def _headline(d) -> str:
    pct = d.slower_pct()
    if pct is None:
        return "no step time to compare"
    word = "slower" if pct > 0 else "faster"
    text = f"AFTER is {abs(pct):.1f}% {word} ({'step time' if d.unit == 'step' else 'GPU window'})"
    s = d.saving()
    if s["realised_ns"] is not None:
        r = s["realised_ns"]
        text += (f"; saving realised per step {fmt_ns(r)}" if r >= 0 else
                 f"; each step {fmt_ns(-r)} slower")
        if s["promised_ns"] is not None:
            text += f" (the before-verdict's top action promised {fmt_ns(s['promised_ns'])})"
    return escape(text)


def _paired_bars(b: dict, a: dict) -> str:
    cats = [c for c in CPU_CATEGORIES if b.get(c) or a.get(c)]
    top = max([b.get(c, 0) for c in cats] + [a.get(c, 0) for c in cats] + [1])
    inner = []
    for i, c in enumerate(cats):
        y = i * 34
        inner.append(f'<text x="0" y="{y + 18}">{escape(c)}</text>')
        for j, (side, v) in enumerate((("before", b.get(c, 0)), ("after", a.get(c, 0)))):
            w = 520 * v / top
            op = "0.5" if side == "before" else "1"
            inner.append(f'<rect x="110" y="{y + j * 14}" width="{w:.2f}" height="12" fill="{COLORS.get(c, "#777777")}" '
                         f'fill-opacity="{op}"><title>{side}: {fmt_ns(v)}</title></rect>')
            inner.append(f'<text x="{116 + w:.0f}" y="{y + j * 14 + 10}">{side} {fmt_ns(v)}</text>')
    return _svg(800, max(len(cats) * 34, 10), inner, "idle by cause, before and after")
