"""``--format html``: one self-contained page, charts as inline SVG drawn here.

Why inline SVG generated in Python (and not plotly / Vega-Lite): no JavaScript at
all, so nothing to bundle (plotly's offline bundle is ~3.5 MB per file), no CDN,
no console errors, it opens offline and prints; the charts are plain shapes whose
size does not grow with the trace (the timeline is binned into ``COLUMNS``
columns), so the page stays ~100 KB for a 1 GB trace. Hover text comes from SVG
``<title>`` elements.

Sections: verdict and levers, GPU timeline per device (busy / idle coloured by
cause), per-step bars, idle by cause, largest gaps, top kernels and classes,
communication per collective, compile episodes. A ``TraceDiff`` renders as the
diff tables.
"""
from __future__ import annotations

from .safe import html as escape  # every string: one inert, escaped line
from .safe import html_block

import numpy as np

from ..passes.attribution import CPU_CATEGORIES
from .anatomy_html import anatomy_section
from .base import Renderer
from .fmt import plural
from .html_base import ACTIVITY_COLORS, COLORS, hbars, name_span, page, rect, svg, table
from .text import critical_stop, critical_stop_note, fmt_bytes, fmt_ns, fmt_rate, rel_time

COLUMNS = 800          # timeline resolution (SVG columns per device lane)
MAX_LANES = 8
MAX_STEPS = 60
TABLE_ROWS = 20
# Kernel classes are busy time: shades of "busy" blue, never an idle cause's colour.
CLASS_COLORS = ("#3b6ea8", "#5a87bd", "#2f5886", "#7aa1cf", "#46627f", "#9bbbe0", "#274a70",
                "#6f8aa6", "#8fa7bd", "#65798f", "#4f6d8f", "#8495a8")


class HtmlRenderer(Renderer):
    output_file_extension = "html"

    def render(self, result) -> str:
        if type(result).__name__ == "TraceDiff":
            from .html_diff import diff_body

            title, body = "traceread diff", diff_body(result)
        elif isinstance(result, (list, tuple)):  # several traces (ranks of a job): one page
            title = f"traceread: {plural(len(result), 'trace')}"
            body = job_body(list(result), self.options.get("jobs"))
        else:  # one trace; an nsys export of several processes may still be a job
            title = f"traceread: {result.meta.path}"
            body = analysis_body(result) + cross_rank_html(self.options.get("jobs"))
        return page(title, body)


# A notebook cell's summary: scoped, so it styles nothing else in the notebook.
SUMMARY_CSS = (".traceread-summary .meta{color:#666}.traceread-summary h1{font-size:16px;margin:0}"
               ".traceread-summary .verdict{border-left:6px solid #d62728;background:#fbf3f3;"
               "padding:8px 14px;margin:8px 0}.traceread-summary .verdict .bound{font-size:18px;"
               "font-weight:700}")


def summary_html(a) -> str:
    """The HTML report's head (the trace line and the verdict box), for a notebook."""
    d = a.to_dict()
    return (f'<div class="traceread-summary"><style>{SUMMARY_CSS}</style>{_header(d)}'
            f"{_verdict(a, d)}</div>")


def analysis_body(a) -> str:
    d = a.to_dict()
    parts = [_header(d), _verdict(a, d), _timeline_section(a), _steps_section(d),
             anatomy_section(d),
             _replay_section(d), _idle_section(d), _flame_section(a), _gaps_section(a, d),
             _kernels_section(d), _comm_section(d), _copies_section(d),
             _compile_section(a, d)]
    return "\n".join(p for p in parts if p)


def cross_rank_html(jobs) -> str:
    """The job verdict and cross-rank detail (``render/cross_rank.py``'s text) as a section."""
    if not jobs:
        return ""
    from .cross_rank import render_detail, render_summary

    text = (render_summary(jobs) + "\n\n" + render_detail(jobs)).strip()
    return f"<h2>Across ranks</h2>{''.join(_wait_bars(j) for j in jobs)}<pre>{html_block(text)}</pre>"


def _wait_bars(job) -> str:
    """The straggler chart: per rank, time spent waiting in collectives for later ranks."""
    pr = getattr(job, "per_rank", None)
    if pr is None or not len(pr) or "wait_ns" not in pr:
        return ""
    if "matched" in pr and not int(pr["matched"].sum()):
        return _thread_wait_bars(job)
    # every rank is last somewhere on a balanced job: say how often, not just "last"
    last = {int(r): int(n) for r, n in zip(pr["rank"], pr.get("times_last", [0] * len(pr)))}
    rows = [(f"rank {int(r)}", int(w), f"waits {fmt_ns(int(w))}" + _last_at(last.get(int(r), 0)),
             COLORS["comm_wait"] if w else COLORS["busy"]) for r, w in zip(pr["rank"], pr["wait_ns"])]
    return (f"<p class='meta'>{escape(str(job.job))}: time each rank waited inside collectives for "
            f"the last rank to arrive</p>" + hbars(rows[:64]))


def _thread_wait_bars(job) -> str:
    """No collective matched: the waits the job read from the launching threads
    (``waits.infer``) -- each rank's wait for the straggler; none inferred, no chart (the
    collectives' chart read 'waits 0 ns' for every rank of h200/ddp2 beside 'rank 0 waits
    30.4 ms a step for rank 1')."""
    inf = getattr(job, "inferred", None) or {}
    if not inf.get("significant"):
        return ""
    rows = [(f"rank {int(r)}", int(v.get("waits_for_total_ns", 0)),
             f"waits {fmt_ns(int(v.get('waits_for_total_ns', 0)))}"
             + (" · the straggler" if int(r) == inf["rank"] else ""),
             COLORS["comm_wait"] if v.get("waits_for_total_ns") else COLORS["busy"])
            for r, v in sorted(inf["per_rank"].items())]
    return (f"<p class='meta'>{escape(str(job.job))}: time each rank's launching thread waited "
            f"for the straggler (no collective matched: read from its waits)</p>" + hbars(rows[:64]))


def _last_at(n: int) -> str:
    return f" · last to arrive at {n:,} call{'s' if n != 1 else ''}" if n else ""


def _step_stats(a) -> dict:
    """The step a trace's overview shows: the program step (``program_step_of``) where the
    trace has one, else the host spans' statistics (a CPU-only trace, where they are one)."""
    from ..passes.steps import program_step_of

    prog = program_step_of(a) if a.step_source != "whole_trace" and len(a.devices) else None
    return prog or a.step_stats or {}


def job_body(analyses: list, jobs=None) -> str:
    """Several traces: a per-trace overview, the cross-rank section (``jobs``: the caller's
    ``jobs.multirank.analyze_traces``), then each trace's report."""
    if len(analyses) == 1:
        return analysis_body(analyses[0]) + cross_rank_html(jobs)
    rows, bars = [], []
    palette = [c for k, c in COLORS.items() if k not in ("busy", "untraced")]
    ordered = sorted(analyses, key=lambda a: (a.meta.rank, a.meta.path))
    for i, a in enumerate(ordered):
        stats = _step_stats(a)
        dev = a.devices
        window = int(dev["window_ns"].sum()) if len(dev) else 0
        idle = int(dev["idle_ns"].sum()) if len(dev) else 0
        label = f"rank {a.meta.rank}" if a.meta.rank >= 0 else a.meta.path.rsplit("/", 1)[-1]
        rows.append([f'<a href="#t{i}">{escape(label)}</a>', escape(str(a.verdict.get("bound", "")).upper()),
                     fmt_ns(stats["mean_ns"]) if stats.get("mean_ns") and
                     a.step_source != "whole_trace" else "-",
                     f"{100 * idle / window:.1f}%" if window else "-",
                     f'<span class="name">{escape(a.meta.path)}</span>'])
        if stats.get("mean_ns") and a.step_source != "whole_trace":   # no steps: no step bar
            bars.append((label, stats["mean_ns"], fmt_ns(stats["mean_ns"]),
                         palette[i % len(palette)]))
    nosteps = len(analyses) - len(bars)
    parts = [f"<h1>{plural(len(analyses), 'trace')}</h1>",
             table(["trace", "verdict", "step (mean)", "GPU idle", "file"], rows, {2, 3}),
             "<h2>Step time per trace</h2>" + hbars(bars) if bars else "",
             f"<p class='meta'>{plural(nosteps, 'trace')} without steps: no step-time bar</p>"
             if bars and nosteps else "",
             cross_rank_html(jobs)]  # the caller analyses the job: a renderer only draws
    for i, a in enumerate(ordered):
        parts.append(f'<hr id="t{i}">' + analysis_body(a))
    return "\n".join(p for p in parts if p)


# --- pieces ------------------------------------------------------------------------


def _header(d: dict) -> str:
    t = d["trace"]
    bits = [t.get("format") or "trace", t.get("producer") or ""]
    if (t.get("rank") or -1) >= 0:
        bits.append(f"rank {t['rank']}" + (f" of {t['world_size']}" if t.get("world_size", -1) > 0 else ""))
    bits += [f"{t.get('events', 0):,} events", f"span {fmt_ns(t.get('span_ns', 0))}"]
    return (f'<h1>{escape(str(t.get("path", "")))}</h1><div class="meta">'
            f'{escape(" · ".join(b for b in bits if b))}</div>')


def _verdict(a, d: dict) -> str:
    from .report import BOUND_TITLE, busy_floor

    v = d.get("verdict") or {}
    bound = str(v.get("bound", "unknown"))
    title = v.get("title") or BOUND_TITLE.get(bound, bound)
    missing = "".join(f"<li>{escape(str(m))}</li>" for m in v.get("missing") or [])
    job = v.get("job") if isinstance(v.get("job"), dict) else None
    role = (f"<p><b>In {escape(str(job.get('job')))}: {escape(str(job.get('role')))}</b>"
            + (f" (waits for rank {job['waits_for']}, {fmt_ns(job.get('wait_ns') or 0)})"
               if job.get("waits_for") is not None else "")
            + f" — {escape(str(job.get('summary', '')))}</p>") if job else ""
    return (f'<div class="verdict" id="verdict"><div class="bound">VERDICT {escape(bound.upper())}</div>'
            f"<div>{escape(str(title))}</div><p>{escape(str(v.get('summary', '')))}</p>{role}"
            f"{_window_line(a, d)}{_utilization_line(d, v)}{_actions(v, busy_floor(a))}"
            + (f"<b>Not in this trace</b><ul>{missing}</ul>" if missing else "") + "</div>")


def _actions(v: dict, floor: int | None = None) -> str:
    """The verdict's one ranked to-do list -- the same items, order and words as the text
    report (render/text.py action_gain): the first TODO_ROWS, the rest folded, then the
    unranked diagnostics."""
    from .text import TODO_ROWS, action_gain, empty_todo, todo_title
    from .words import because_words

    def why(x: dict) -> str:   # a tooltip: the page keeps its height (charts above the fold)
        text = because_words(x.get("because") or [])
        return f" title='because: {escape(text)}'" if text else ""

    acts = [x for x in v.get("actions") or [] if isinstance(x, dict)]
    if acts:
        items = [f"<li{why(x)}>{escape(str(x.get('lever', '')))} <span class='meta'>"
                 f"[{escape(str(x.get('cost', '')))}]</span><br><span class='meta'>"
                 f"{escape(action_gain(x, acts[i - 1] if i else None, floor))}"
                 + (f"<br>{escape(str(x['note']))}" if x.get("note") else "") + "</span></li>"
                 for i, x in enumerate(acts)]
    else:
        items = [f"<li>{escape(str(lv))}</li>" for lv in v.get("levers", [])]
    if not items:
        out = [f"<b>{escape(todo_title(v))}</b><p>{escape(empty_todo(v))}</p>"]
    else:
        out = [f"<b>{escape(todo_title(v))}</b><ol>", "".join(items[:TODO_ROWS]), "</ol>"]
    if len(items) > TODO_ROWS:
        out.append(f"<details><summary>and {len(items) - TODO_ROWS} more</summary>"
                   f"<ol start='{TODO_ROWS + 1}'>{''.join(items[TODO_ROWS:])}</ol></details>")
    out.append(_ruled_out(v.get("withdrawn") or []))
    diag = v.get("diagnostics") or []
    if diag:
        out.append("<b>To find out more</b><ul>"
                   + "".join(f"<li>{escape(str(d))}</li>" for d in diag) + "</ul>")
    return "".join(out)


def _ruled_out(withdrawn: list[dict]) -> str:
    """The levers the program rules out, as the text report lists them (words.ruled_out)."""
    from .words import RULED_OUT_ROWS, RULED_OUT_TITLE, ruled_out

    rows = [f"<li>{escape(ids)}: {escape(why)}</li>" for ids, why in ruled_out(withdrawn)]
    if not rows:
        return ""
    more = (f"<details><summary>and {len(rows) - RULED_OUT_ROWS} more</summary><ul>"
            f"{''.join(rows[RULED_OUT_ROWS:])}</ul></details>") if len(rows) > RULED_OUT_ROWS else ""
    return f"<b>{escape(RULED_OUT_TITLE)}</b><ul>{''.join(rows[:RULED_OUT_ROWS])}</ul>{more}"


def _utilization_line(d: dict, v: dict) -> str:
    """The GPU-use headline; its top lever says where the to-do list has it, or why not."""
    from .words import busy_note

    u = d.get("utilization")
    head = u.get("headline") if isinstance(u, dict) else None
    if not head:
        return ""
    top = ((u.get("busy") or {}).get("levers") or [{}])[0].get("lever")
    note = busy_note(top, v.get("busy_placement")) if top else ""
    return f'<p class="meta">GPU use: {escape(str(head))}' + \
        (f" ({escape(note)})" if note else "") + "</p>"


def _window_line(a, d: dict) -> str:
    w = getattr(a, "window", None)
    w = w.to_dict() if hasattr(w, "to_dict") else d.get("window")
    if not isinstance(w, dict) or not w.get("mode"):
        return ""
    text = f"analysis window: {w['mode']}"
    if w.get("steps_analysed"):
        text += (f", steps #{w.get('first_step')}–#{w.get('last_step')} "
                 f"({w['steps_analysed']} of {w.get('steps_total')})")
    if w.get("dur_ns"):
        text += f", {fmt_ns(w['dur_ns'])} from +{fmt_ns(w.get('offset_ns', 0))}"
    excluded = [f"{x.get('what', '')} ({fmt_ns(x.get('ns', 0))})"
                for x in w.get("excluded") or [] if isinstance(x, dict)]
    if excluded:
        text += "; excluded: " + "; ".join(excluded)
    return f'<p class="meta">{escape(text)}</p>'


def _val(key: str, x) -> str:
    return fmt_ns(x) if key.endswith("_ns") and isinstance(x, (int, float)) else str(x)


def _legend(keys, colors=None, prefix: str = "") -> str:
    colors = COLORS if colors is None else colors
    return f'<div class="legend">{escape(prefix)}' + "".join(
        f'<span><i style="background:{colors.get(k, "#777777")}"></i>{escape(k)}</span>'
        for k in keys) + "</div>"


# --- GPU timeline --------------------------------------------------------------------


def binned_idle(gaps, start: int, end: int, columns: int = COLUMNS) -> dict[str, np.ndarray]:
    """Idle ns per column per cause; a gap's time per cause is spread evenly over the gap."""
    edges = np.linspace(start, end, columns + 1)
    out = {}
    if gaps is None or not len(gaps):
        return {c: np.zeros(columns) for c in CPU_CATEGORIES}
    s = gaps["start"].to_numpy(np.float64)
    e = gaps["end"].to_numpy(np.float64)
    dur = np.maximum(e - s, 1.0)
    for c in CPU_CATEGORIES:
        out[c] = np.diff(_integral(s, e, gaps[f"cpu_{c}"].to_numpy(np.float64) / dur, edges))
    return out


def _integral(s, e, rate, x):
    """F(x) = sum over intervals of rate * |[s, e) ∩ (-inf, x)|, at sorted points ``x``."""
    t = np.concatenate([s, e])
    r = np.concatenate([rate, -rate])
    order = np.argsort(t, kind="stable")
    t, r = t[order], r[order]
    slope = np.cumsum(r)
    f = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(t))]) if len(t) else np.zeros(0)
    k = np.searchsorted(t, x, side="right") - 1
    inside = k >= 0
    out = np.zeros(len(x))
    out[inside] = f[k[inside]] + slope[k[inside]] * (x[inside] - t[k[inside]])
    return out


def _timeline_section(a) -> str:
    dev = a.devices
    if dev is None or not len(dev):
        return ""
    lanes = dev.sort_values(["pid", "device"]).head(MAX_LANES).to_dict(orient="records")
    lane_h, label_w, width = 46, 90, COLUMNS + 90
    inner, y = [], 4
    exposed = _exposed(a)
    acts = {(int(r["pid"]), int(r["device"])): binned_activity(
        a.trace.events, int(r["pid"]), int(r["device"]), int(r["window_start"]),
        int(r["window_end"])) for r in lanes} if _activity_kinds(a) else {}
    for r in lanes:
        inner += _lane(a, r, label_w, y, lane_h, acts.get((int(r["pid"]), int(r["device"]))))
        y += lane_h + 2
        iv = exposed.get((int(r["pid"]), int(r["device"])))
        if iv is not None:
            inner += _comm_lane(iv, r, label_w, y)
            y += 8
        y += 8
    crit, y = _critical_lane(a, lanes, label_w, y)
    inner += crit
    more = f" (first {MAX_LANES} of {len(dev)} devices)" if len(dev) > MAX_LANES else ""
    steps = _step_ticks(a, lanes, label_w)
    head = (f"<h2>GPU timeline{more}</h2><p class='meta'>Each column is "
            f"{fmt_ns((lanes[0]['window_end'] - lanes[0]['window_start']) / COLUMNS)} of the device's "
            f"active window: the lower part is GPU busy, by kind (compute, copy, comm), the upper "
            f"part GPU idle, coloured by what the host was doing. Ticks: step starts."
            + (" Critical path: what held each replayed step (its end set by this chain)."
               if crit else "") + "</p>")
    kinds = ["compute", "copy", "comm"] if _activity_kinds(a) else ["compute"]
    keys = [*CPU_CATEGORIES] + (["exposed"] if exposed else [])
    return head + _legend(kinds, ACTIVITY_COLORS, "busy: ") + _legend(keys, prefix="idle: ") + \
        svg(width, y + 14, inner + steps, "GPU timeline") + _activity_bars(lanes, acts)


def _activity_bars(lanes: list[dict], acts: dict) -> str:
    """GPU time by activity kind over the drawn lanes' windows: compute, copy, comm, idle."""
    if not acts:
        return ""
    tot = {"compute": 0.0, "copy": 0.0, "comm": 0.0}
    window = idle = 0
    for r in lanes:
        act = acts[(int(r["pid"]), int(r["device"]))]
        for k in tot:
            tot[k] += float(act[k].sum())
        window += int(r["window_ns"])
        idle += int(r["idle_ns"])
    if not window:
        return ""
    rows = [(k, v, f"{fmt_ns(v)} ({100 * v / window:.1f}%)", ACTIVITY_COLORS[k])
            for k, v in (*tot.items(), ("idle", idle))]
    return ("<p class='meta'>GPU time by activity over the same window (kinds can overlap: "
            "communication hidden behind compute counts in both; idle is time with no GPU "
            "op at all).</p>" + hbars(rows))


# critical-path links: the label's colour (passes/replay/critical.py LABELS)
# one colour per thing on the page: a kernel the busy blue, a copy / collective the activity
# colours (html_base.ACTIVITY_COLORS), launch / sync / data / host the idle causes' (COLORS)
CRITICAL_COLORS = {"kernel": ACTIVITY_COLORS["compute"], "copy": ACTIVITY_COLORS["copy"],
                   "launch": COLORS["launch"], "queued after launch": "#f7b6d2",
                   "host op": COLORS["cpu_op"],
                   "sync wait": COLORS["sync"], "data load": COLORS["dataloader"],
                   "collective": ACTIVITY_COLORS["comm"], "another rank": "#7f7f7f",
                   "unexplained": COLORS["untraced"]}


def _critical_lane(a, lanes: list[dict], x0: int, y: int) -> tuple[list[str], int]:
    """The replay's critical path under the device lanes, on the first lane's time axis:
    each column coloured by the label that held the most of it."""
    r = getattr(a, "replay", None) or {}
    segs = (r.get("critical_path") or {}).get("segments") or []
    if not segs or not lanes:
        return [], y
    w0, w1 = int(lanes[0]["window_start"]), int(lanes[0]["window_end"])
    edges = np.linspace(w0, w1, COLUMNS + 1)
    labels = sorted({s["label"] for s in segs})
    per = {}
    for lab in labels:
        mine = [s for s in segs if s["label"] == lab]
        st = np.array([s["start_ns"] for s in mine], np.float64)
        en = np.array([s["end_ns"] for s in mine], np.float64)
        per[lab] = np.diff(_integral(st, en, np.ones(len(st)), edges))
    stack = np.vstack([per[lab] for lab in labels])
    top = stack.argmax(axis=0)
    out = [f'<text x="2" y="{y + 8}">critical path</text>']
    for col in np.flatnonzero(stack.max(axis=0) > 0):
        lab = labels[int(top[col])]
        out.append(f'<rect x="{x0 + col}" y="{y}" width="1" height="10" '
                   f'fill="{CRITICAL_COLORS.get(lab, "#777777")}"><title>{escape(lab)}</title></rect>')
    keys = " ".join(f'<tspan fill="{CRITICAL_COLORS.get(lab, "#777")}">■ {escape(lab)}</tspan>'
                    for lab in labels)
    out.append(f'<text x="{x0}" y="{y + 22}">{keys}</text>')
    stop = critical_stop(r.get("critical_path") or {})
    if stop is not None and w0 <= stop < w1:   # the links end before the window: say where
        x = x0 + int(COLUMNS * (stop - w0) / (w1 - w0))
        out.append(f'<line x1="{x}" y1="{y - 2}" x2="{x}" y2="{y + 12}" stroke="#222"/>')
        out.append(f'<text x="{x0}" y="{y + 36}">{escape(critical_stop_note(r["critical_path"]))}'
                   "</text>")
        return out, y + 44
    return out, y + 30


def _exposed(a) -> dict:
    if a.trace is None:
        return {}
    from .overlay import exposed_comm

    return exposed_comm(a.trace.events)


def _comm_lane(iv, r: dict, x0: int, y: int) -> list[str]:
    """Exposed communication under a device lane: comm kernels with no compute beside them."""
    w0, w1 = int(r["window_start"]), int(r["window_end"])
    col_ns = max((w1 - w0) / COLUMNS, 1.0)
    s, e = iv[0].astype(np.float64), iv[1].astype(np.float64)
    per_col = np.diff(_integral(s, e, np.ones(len(s)), np.linspace(w0, w1, COLUMNS + 1)))
    out = [f'<text x="2" y="{y + 6}">exposed comm</text>']
    for col in np.flatnonzero(per_col > col_ns * 0.01):
        op = min(per_col[col] / col_ns, 1.0)
        out.append(f'<rect x="{x0 + col}" y="{y}" width="1" height="6" fill="{COLORS["exposed"]}" '
                   f'fill-opacity="{op:.2f}"/>')
    return out


def binned_activity(ev, pid: int, device: int, start: int, end: int,
                    columns: int = COLUMNS) -> dict[str, np.ndarray]:
    """GPU time per column per activity kind (copy: memcpy/memset; comm: NCCL/RCCL
    kernels; compute: every other kernel or graph) of one device lane: the union of each
    kind's ops (streams overlapping within a kind count once; kinds may overlap)."""
    from ..passes.intervals import union
    from ..passes.nccl import comm_mask

    edges = np.linspace(start, end, columns + 1)
    ops = ev[ev["kind"].isin(["kernel", "memcpy", "memset", "graph"]).to_numpy()
             & (ev["pid"] == pid).to_numpy() & (ev["device"] == device).to_numpy()]
    kinds = np.where(ops["kind"].isin(["memcpy", "memset"]).to_numpy(), "copy",
                     np.where(comm_mask(ops), "comm", "compute"))
    s = ops["ts"].to_numpy(np.int64)
    e = s + ops["dur"].to_numpy(np.int64)
    out = {}
    for k in ("compute", "copy", "comm"):
        us, ue = union(s[kinds == k], e[kinds == k])
        us, ue = np.maximum(us, start), np.minimum(ue, end)
        out[k] = np.diff(_integral(us.astype(np.float64), ue.astype(np.float64),
                                   np.ones(len(us)), edges))
    return out


def _activity_kinds(a) -> bool:
    """Whether the page can colour busy time by kind (it needs the trace's events)."""
    return a.trace is not None and a.trace.events is not None and len(a.trace.events) > 0


def _lane(a, r: dict, x0: int, y: int, h: int, act: dict | None = None) -> list[str]:
    g = a.gaps
    g = g[(g["pid"] == r["pid"]) & (g["device"] == r["device"])] if len(g) else g
    w0, w1 = int(r["window_start"]), int(r["window_end"])
    col_ns = max((w1 - w0) / COLUMNS, 1.0)
    idle = binned_idle(g, w0, w1)
    label = f"GPU {r['device']}" + (f" pid {r['pid']}" if a.devices["pid"].nunique() > 1 else "")
    out = [f'<text x="2" y="{y + h / 2 + 4:.0f}">{escape(label)}</text>',
           rect(x0, y, COLUMNS, h, ACTIVITY_COLORS["compute"], f"{label}: busy "
                f"{fmt_ns(r['busy_ns'])}, idle {fmt_ns(r['idle_ns'])}")]
    total = sum(idle.values())
    busy_h = h - h * np.minimum(total / col_ns, 1.0)
    if act is not None:   # copies and comm drawn over the compute blue, from the bottom
        ops = act["compute"] + act["copy"] + act["comm"]
        for col in np.flatnonzero((act["copy"] + act["comm"]) > 0):
            yy = y + h
            for k in ("copy", "comm"):
                hh = busy_h[col] * act[k][col] / ops[col]
                if hh >= 0.05:
                    yy -= hh
                    out.append(rect(x0 + col, yy, 1.0, hh, ACTIVITY_COLORS[k]))
    for col in np.flatnonzero(total > col_ns * 0.002):
        yy = y
        for c in CPU_CATEGORIES:  # idle stacks from the top; what is left below is busy
            hh = h * min(idle[c][col] / col_ns, 1.0)
            if hh >= 0.05:
                out.append(rect(x0 + col, yy, 1.0, hh, COLORS.get(c, "#777777")))
                yy += hh
    return out


def _step_ticks(a, lanes: list[dict], x0: int) -> list[str]:
    if a.step_source == "whole_trace" or not len(a.steps) or not lanes:
        return []
    w0, w1 = int(lanes[0]["window_start"]), int(lanes[0]["window_end"])
    out = []
    for r in a.steps.head(MAX_STEPS * 4).to_dict(orient="records"):
        if w0 <= r["start"] <= w1:
            x = x0 + COLUMNS * (r["start"] - w0) / max(w1 - w0, 1)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="4" stroke="#000"/>')
    return out


# --- steps, idle by cause ------------------------------------------------------------


def _replay_section(d: dict) -> str:
    """The replay's fit to the measured steps and the critical path's top links."""
    from .text import replay_lines

    lines = replay_lines(d.get("replay"))
    if not lines:
        return ""
    return "<h2>Replay</h2><pre>" + html_block("\n".join(x.strip("\n") for x in lines[1:])) + "</pre>"


def _steps_section(d: dict) -> str:
    st = d["steps"]
    items = st.get("items") or []
    if not st.get("count") or not items:
        return ""
    shown = items[:MAX_STEPS]
    top = max(it["dur_ns"] for it in shown) or 1
    bar_w, row_h, x0 = 760, 16, 70
    gpu = bool(d.get("devices"))   # a CPU-only trace: the bar is the host's span alone
    inner = []
    for i, it in enumerate(shown):
        y = i * (row_h + 3)
        inner.append(f'<text x="0" y="{y + 12}">#{escape(str(it["step"]))}</text>')
        x = x0
        parts = step_segments(it) if gpu else [("host", float(it["dur_ns"]), "#e0e0e0")]
        for key, ns, color in parts:
            w = bar_w * ns / top
            inner.append(rect(x, y, w, row_h, color, f"step {it['step']}: {key} {fmt_ns(ns)}"))
            x += w
        label = (f' (GPU busy {fmt_ns(it["busy_ns"])}, idle {fmt_ns(it["idle_in_span_ns"])})'
                 if gpu else "")
        inner.append(f'<text x="{x0 + bar_w * it["dur_ns"] / top + 4:.0f}" y="{y + 12}">'
                     f'{fmt_ns(it["dur_ns"])}{label}</text>')
    s = st.get("stats") or {}
    more = f"; first {MAX_STEPS} of {len(items)}" if len(items) > MAX_STEPS else ""
    if not gpu:
        return (f"<h2>Steps</h2><p class='meta'>{plural(st['count'], 'step')}{_inferred(st)}, mean "
                f"{fmt_ns(s.get('mean_ns', 0))}, median {fmt_ns(s.get('median_ns', 0))}, cv "
                f"{s.get('cv', 0):.2f}{more}. Each bar is the step's host time (no GPU work in "
                "the trace).</p>" + svg(x0 + bar_w + 290, len(shown) * (row_h + 3), inner,
                                        "per-step host time"))
    p = st.get("program") or {}
    prog = (f"; the program step (the later of the host's span and the GPU's work) "
            f"{fmt_ns(p['mean_ns'])} mean, median {fmt_ns(p['median_ns'])}, "
            f"{p.get('gpu_bound_steps', 0)} of {p.get('steps', 0)} GPU-bound"
            if p.get("mean_ns") else "")
    head = (f"<h2>Steps</h2><p class='meta'>{plural(st['count'], 'step')}{_inferred(st)}: host "
            f"spans mean {fmt_ns(s.get('mean_ns', 0))}, median {fmt_ns(s.get('median_ns', 0))}, "
            f"cv {s.get('cv', 0):.2f}{prog}{more}. Each bar is "
            f"the step's host span, labelled with it: GPU busy inside the step, then the GPU idle "
            f"inside it, shared among causes as the gaps the step's work ended were (grey: "
            f"neither, e.g. busy time counted past the step's end).</p>")
    return head + _legend(["busy", *CPU_CATEGORIES]) + svg(x0 + bar_w + 290, len(shown) * (row_h + 3),
                                                             inner, "per-step time: GPU busy and idle")


def _inferred(st: dict) -> str:
    """Where the steps come from when no range marks them (passes/steps.optimizer_steps)."""
    return (" (iterations, from one optimizer step's end to the next: no step markers)"
            if st.get("source") == "optimizer" else "")


def step_segments(it: dict) -> list[tuple[str, float, str]]:
    """One step's bar: (what, ns, colour) pieces that add up to the step's own duration."""
    dur = max(float(it["dur_ns"]), 0.0)
    busy = min(float(it["busy_ns"]), dur)
    idle = min(float(it.get("idle_in_span_ns") or 0), dur - busy)
    out = [("busy", busy, COLORS["busy"])]
    by = {c: float(v) for c, v in (it.get("idle_by_cpu") or {}).items() if v}
    total = sum(by.values())
    if idle and total:
        out += [(c, idle * by[c] / total, COLORS.get(c, "#777777")) for c in CPU_CATEGORIES
                if by.get(c)]
    elif idle:
        out.append(("idle", idle, COLORS["untraced"]))
    if dur - busy - idle > 0:
        out.append(("neither", dur - busy - idle, "#e0e0e0"))
    return [x for x in out if x[1] > 0]


def _idle_section(d: dict) -> str:
    att = d.get("attribution") or {}
    by = att.get("by_cpu") or {}
    idle = sum(by.values())
    if not idle:
        return ""
    rows = [(c, by[c], f"{fmt_ns(by[c])} ({100 * by[c] / idle:.1f}%)", COLORS.get(c, "#777777"))
            for c in sorted(CPU_CATEGORIES, key=lambda c: -by.get(c, 0)) if by.get(c)]
    dr = att.get("by_drain") or {}
    late_q = int(att.get("host_late_queued_ns") or 0)
    queued = int(dr.get("queued", 0)) + late_q   # the verdict's queued time: both kinds
    late = (f" ({fmt_ns(late_q)} of it inside host-late gaps: the host was busy, but the GPU "
            "already had its next op, so the verdict charges it to queued)" if late_q else "")
    drain = (f"<p>queue drained by a blocking sync: {fmt_ns(dr.get('sync', 0))}; host simply late "
             f"(starved): {fmt_ns(dr.get('starved', 0))}; next op already queued: "
             f"{fmt_ns(queued)}{escape(late)}</p>")
    return (f"<h2>Where the idle GPU time went ({fmt_ns(idle)})</h2>"
            f"<p class='meta'>What the launching host threads were doing while the GPU idled.</p>"
            + hbars(rows) + drain)


def _flame_section(a) -> str:
    """The host time inside the GPU-idle gaps as a flame graph (passes/flame.py)."""
    if a.trace is None or a.gaps is None or not len(a.gaps):
        return ""
    from ..passes.flame import UNTRACED
    from .flame import flame_svg, idle_flame, top_frames

    stacks, made_of = idle_flame(a)
    if not stacks:
        return ""
    head = ("<h2>Which host code kept the GPU waiting: a flame graph of the host time inside "
            "the idle gaps</h2>")
    if set(stacks) == {(UNTRACED,)}:
        return head + ("<p class='meta'>No host range was open on the launching thread during "
                       "the gaps: record with torch.profiler(with_stack=True) (Python frames) "
                       "or NVTX ranges to see which code ran.</p>")
    top = ", ".join(f"{escape(n)} {fmt_ns(ns)}" for n, ns in top_frames(stacks, 3))
    sampled = made_of.startswith("nsys CPU samples")
    if not sampled and not (a.trace.events["kind"] == "python").any():
        top += (". This trace has no Python frames: time in a range with no operator open "
                "is Python nobody recorded; torch.profiler(with_stack=True) records it")
    what = (f"a call stack the CPU sampler took on the launching thread ({escape(made_of)})"
            if sampled else "a frame on the launching thread (Python with "
            "<code>with_stack=True</code>, operators, CUDA calls, NVTX ranges)")
    return (head + f"<p class='meta'>Each bar is {what}, outermost on top, as wide as the "
            "GPU-idle time it was on the stack; hover for the time. "
            f"Innermost frames holding the most: {top}. The same stacks as text: "
            "<code>traceread flame TRACE -o idle.folded</code> (speedscope, "
            "flamegraph.pl).</p>" + flame_svg(stacks))


# --- tables ------------------------------------------------------------------------


def _gaps_section(a, d: dict) -> str:
    g = d.get("gaps") or {}
    largest = g.get("largest") or []
    if not largest:
        return ""
    t0 = (d.get("window") or {}).get("trace_start_ns") or 0
    rows = []
    for r in largest[:TABLE_ROWS]:
        host = ", ".join(f"{escape(k)} {fmt_ns(v)}" for k, v in
                         sorted((r.get("by_cpu") or {}).items(), key=lambda kv: -kv[1])[:3])
        drain = f"sync {escape(r['drain_op'])}" if r.get("drain") == "sync" and r.get("drain_op") \
            else ("queued" if r.get("drain") == "queued" else "starved")
        rows.append([rel_time(r["start_ns"] - t0), fmt_ns(r["duration_ns"]), r["device"],
                     f"#{r['step']}" if r.get("step", -1) >= 0 else "-", drain, host])
    return (f"<h2>Largest idle gaps (of {g.get('count', 0):,}, {fmt_ns(g.get('total_idle_ns', 0))})</h2>"
            + "<p>start: after the trace's first event, as in <code>traceread idle</code>, "
              "<code>gaps</code> and <code>--window</code>.</p>"
            + table(["start", "duration", "device", "step", "drained by", "host was in"], rows, {0, 1, 2}))


def _kernels_section(d: dict) -> str:
    ks = d.get("kernels") or []
    if not ks:
        return ""
    rows = [[f"{k['pct']:.1f}%", fmt_ns(k["total_ns"]), f"{k['instances']:,}", fmt_ns(k["avg_ns"]),
             name_span(k["name"])] for k in ks[:TABLE_ROWS]]
    out = "<h2>Top kernels</h2>" + table(["time", "total", "count", "avg", "name"], rows, {0, 1, 2, 3})
    kc = d.get("kernel_classes") or []
    if kc:
        bars = [(str(c["class"]), c["total_ns"], f"{fmt_ns(c['total_ns'])} ({c['pct']:.1f}%)",
                 CLASS_COLORS[i % len(CLASS_COLORS)]) for i, c in enumerate(kc[:12])]
        out += "<h2>Kernel time by class</h2>" + hbars(bars)
    return out


def _comm_section(d: dict) -> str:
    n = d.get("nccl") or {}
    comm = n.get("comm_ns") or 0
    if not comm:
        return ""
    hidden, exposed = n.get("overlap_ns", 0), n.get("exposed_ns", 0)
    bars = hbars([("hidden", hidden, fmt_ns(hidden), COLORS["hidden"]),
                   ("exposed", exposed, fmt_ns(exposed), COLORS["exposed"])])
    rows = []
    for c in (n.get("by_collective") or [])[:TABLE_ROWS]:
        total = c.get("total_ns") or 0
        exp = c.get("exposed_ns") or 0
        bw = c.get("busbw_gbps")
        rows.append([escape(str(c.get("collective"))), f"{c.get('count', 0):,}", fmt_ns(total),
                     fmt_ns(exp), f"{100 * (total - exp) / total:.1f}%" if total else "-",
                     f"{bw:.1f}" if isinstance(bw, (int, float)) else "-"])
    return (f"<h2>Communication: {fmt_ns(comm)} of NCCL kernels, {n.get('overlap_pct', 0):.1f}% hidden "
            f"behind compute</h2>" + bars
            + table(["collective", "count", "total", "exposed", "overlapped", "busbw GB/s"], rows,
                    {1, 2, 3, 4, 5}))


def _copies_section(d: dict) -> str:
    c = d.get("copies") or {}
    if not c.get("count"):
        return ""
    rows = [[escape(str(x.get("direction"))), f"{x.get('count', 0):,}", fmt_bytes(x.get("bytes", 0)),
             fmt_ns(x.get("copy_ns", 0)), fmt_ns(x.get("exposed_ns", 0)),
             fmt_rate(x["gbps"]) if isinstance(x.get("gbps"), (int, float)) else "-",
             f"{x.get('pageable', 0):,}"] for x in c.get("by_direction") or []]
    pin = (f"; pinning the pageable ones would save about {fmt_ns(c['pin_saves_ns'])}"
           if c.get("pin_saves_ns") else "")
    return (f"<h2>Host↔device copies: {fmt_ns(c.get('copy_ns', 0))}, {fmt_ns(c.get('exposed_ns', 0))} "
            f"with no kernel running{pin}</h2>"
            + table(["direction", "count", "bytes", "time", "exposed", "rate", "pageable"], rows,
                    {1, 2, 3, 4, 5, 6}))


def _compile_section(a, d: dict) -> str:
    c = d.get("compile") or {}
    if not (c.get("compiles") or c.get("compile_ns")):
        return ""
    head = (f"<h2>torch.compile: {plural(c.get('compiles', 0), 'compile')} ({plural(c.get('recompiles', 0), 'recompile')}), "
            f"{fmt_ns(c.get('compile_ns', 0))} compiling</h2>")
    rows = []
    if a.trace is not None:
        from ..passes.compile import compile_events

        for r in compile_events(a.trace.events).head(TABLE_ROWS).to_dict(orient="records"):
            rows.append([escape(str(r.get("compile_id") or "?")), "yes" if r.get("recompile") else "",
                         f"#{r['step']}" if r.get("step", -1) >= 0 else "-", fmt_ns(r["dur"]),
                         name_span(r["name"])])
    return head + (table(["compile id", "recompile", "step", "duration", "span"], rows, {3}) if rows else "")
