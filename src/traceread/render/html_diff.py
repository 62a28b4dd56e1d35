"""The HTML body of a ``TraceDiff`` (``traceread diff --format html``)."""
from __future__ import annotations

from .safe import html as escape  # every string: one inert, escaped line

from ..passes.attribution import CPU_CATEGORIES
from .html_base import COLORS, name_span, svg, table, word
from .diff_text import promise_text, proof_sentences, proof_unit
from .text import fmt_ns

_ROWS = (("program step (mean)", "program_step_ns"), ("step time (mean)", "step_mean_ns"),
         ("step time (median)", "step_median_ns"),
         ("GPU window", "gpu_window_ns"), ("GPU busy", "gpu_busy_ns"), ("GPU idle", "gpu_idle_ns"),
         ("exposed comm", "exposed_comm_ns"), ("copies", "copy_ns"),
         ("exposed copies", "exposed_copy_ns"), ("pageable copies", "pageable_copy_ns"))


def diff_body(d) -> str:
    if d.pairs:
        return _many(d)
    return _one(d)


def _many(d) -> str:
    """Folder / batch diffs: jobs, one row per matched trace, then the worst pair in full."""
    pct = d.slower_pct()
    head = (f"<h1>diff of {len(d.pairs)} matched traces (matched by {escape(str(d.matched_by))})</h1>"
            f'<div class="{_box(pct)}" id="verdict"><p>worst step-time change: '
            f"{'' if pct is None else f'{pct:+.1f}%'} ({escape(d.label)})</p></div>")
    out = [head]
    if d.unmatched:
        out.append("<h2>Not compared</h2>" + table(
            ["side", "trace", "why"], [[u["side"], escape(u["path"]), escape(u["reason"])]
                                       for u in d.unmatched], set()))
    if d.jobs:
        rows = []
        for j in d.jobs:
            b, a = j.get("before") or {}, j.get("after") or {}
            rows.append([escape(str(j["job_before"] or "-")), escape(str(j["job_after"] or "-")),
                         j["ranks"], _ns(b.get("step_mean_ns")), _ns(a.get("step_mean_ns")),
                         "" if j["step_pct"] is None else f"{j['step_pct']:+.1f}%",
                         escape(_strag(b)), escape(_strag(a))])
        out.append("<h2>Jobs</h2>" + table(
            ["job before", "job after", "ranks", "step before", "after", "change",
             "straggler before", "after"], rows, {2, 3, 4, 5}))
    rows = []
    for p in sorted(d.pairs, key=lambda p: -(p.slower_pct() if p.slower_pct() is not None else -1e9)):
        key = p.time_key()
        rows.append([name_span(p.label, 400), _ns(p.before.get(key)), _ns(p.after.get(key)),
                     _change(p.before.get(key), p.after.get(key)),
                     f"{p.before['gpu_idle_pct']:.1f}%", f"{p.after['gpu_idle_pct']:.1f}%",
                     f"{word(str(p.before['verdict']).upper())} → {word(str(p.after['verdict']).upper())}"])
    out.append("<h2>Every matched trace</h2>" + table(
        ["trace", "step before", "after", "change", "idle before", "idle after", "verdict"],
        rows, {1, 2, 3, 4, 5}))
    lead = next((p for p in d.pairs if p.label == d.label), d.pairs[0])
    out.append(f"<h2>In detail, the worst: {escape(d.label)}</h2>")
    out.append(_one(lead).replace('id="verdict"', 'id="lead-verdict"'))
    return "\n".join(out)


def _box(slower_pct) -> str:
    """The verdict box's class: green when AFTER is faster, red when slower."""
    return "verdict good" if slower_pct is not None and slower_pct < 0 else "verdict"


def _ns(x) -> str:
    return "-" if x is None else fmt_ns(x)


def _strag(s: dict) -> str:
    if not s:
        return "not a job"
    if s.get("straggler_rank", -1) < 0:
        return "cannot tell" if str(s.get("summary", "")).startswith("cannot tell") else "none"
    return f"rank {s['straggler_rank']} {fmt_ns(s['late_by_ns'])} late ({s.get('cause') or '?'})"


def _change(x, y) -> str:
    if x is None or y is None or not x:
        return ""
    pct = 100.0 * (y - x) / x
    cls = "up" if pct > 0 else "down" if pct < 0 else ""
    return f'<span class="{cls}">{pct:+.1f}%</span>'


def _one(d) -> str:
    b, a = d.before, d.after
    per = {"step": "per step", "iteration": "per iteration"}.get(d.unit, "whole trace")
    shown = _ROWS if d.unit == "step" else _ROWS[:3] + (("wall time", "wall_ns"),) + _ROWS[3:]
    rows = [[escape(label), fmt_ns(b[k]), fmt_ns(a[k]), _change(b[k], a[k])]
            for label, k in shown if b.get(k) is not None and a.get(k) is not None
            and (b[k] or a[k] or k.startswith("step"))]
    ps = d.per_sample()
    if ps is not None:
        rows.append(["time per sample", fmt_ns(ps["before"]), fmt_ns(ps["after"]),
                     _change(ps["before"], ps["after"])])
    rows.append(["GPU idle %", f"{b['gpu_idle_pct']:.1f}%", f"{a['gpu_idle_pct']:.1f}%",
                 f"{a['gpu_idle_pct'] - b['gpu_idle_pct']:+.1f} pts"])
    rows.append(["recompiles", b["recompiles"], a["recompiles"], ""])
    rows.append(["verdict", word(str(b["verdict"]).upper()), word(str(a["verdict"]).upper()),
                 "changed" if b["verdict"] != a["verdict"] else ""])
    out = [f"<h1>diff: {escape(b['path'])} → {escape(a['path'])}</h1>",
           f'<div class="{_box(d.slower_pct())}" id="verdict"><div class="bound">{escape(str(b["verdict"]).upper())} → '
           f'{escape(str(a["verdict"]).upper())}</div><p>{_headline(d)}</p></div>',
           *_notes(d), *_proof(d),
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
                      name_span(r["name"])] for r in ks]
            out.append(f"<h2>Kernels {key} ({d.kernels.get(key + '_count', len(ks))}, {per})</h2>")
            out.append(table(["before", "after", "change", "%", "name"], krows, {0, 1, 2, 3}))
    return "\n".join(out)


def _notes(d) -> list[str]:
    """How the sides were made comparable, and the warnings (text: diff_text._unit_lines)."""
    items = []
    if d.batch:
        items.append(f"batch {d.batch['before']} → {d.batch['after']}, compared per sample "
                     f"(from {d.batch['evidence']})")
    if d.unit == "iteration":
        for who, s in (("before", d.before), ("after", d.after)):
            items.append(f"{who}: {s.get('iteration_evidence') or 'one iteration (nothing repeats)'}")
    items += [f"warning: {w}" for w in d.warnings]
    return [f"<ul>{''.join(f'<li>{escape(x)}</li>' for x in items)}</ul>"] if items else []


def _proof(d) -> list[str]:
    """Promised vs realised for the lever that changed, as the text says it (the headline
    alone set a profiled 2.76 ms against a 57 us promise: h200/queue, whose programs differ
    by 31 us without the profiler)."""
    if not d.proof:
        return []
    rows = "".join(f'<li style="margin-left:{1.5 * depth:g}em">{escape(text)}</li>'
                   for depth, text in proof_sentences(d.proof, proof_unit(d)))
    return ["<h2>Promised vs realised</h2>", f"<ul>{rows}</ul>"]


_TIME_NAME = {"program_step_ns": "step time", "step_mean_ns": "step time", "gpu_window_ns": "GPU window", "wall_ns": "wall time"}


def _headline(d) -> str:
    pct = d.slower_pct()
    if pct is None:
        return "no step time to compare"
    word = "slower" if pct > 0 else "faster"
    what = _TIME_NAME[d.time_key()] + (" per sample" if d.per_sample() is not None else "")
    text = f"AFTER is {abs(pct):.1f}% {word} ({what})"
    s = d.saving()
    if d.per_sample() is not None:  # a step of another batch size is no saving or loss
        return escape(text)
    if s["realised_ns"] is not None:
        r = s["realised_ns"]
        text += (f"; saving realised per step {fmt_ns(r)}" if r >= 0 else
                 f"; each step {fmt_ns(-r)} slower")
        promise = promise_text(d)
        if promise:
            text += f" ({promise})"
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
    return svg(800, max(len(cats) * 34, 10), inner, "idle by cause, before and after")
