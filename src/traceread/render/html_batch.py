"""``traceread batch``'s job summary as one self-contained page (OUT/report.html)."""
from __future__ import annotations

from .safe import html as escape  # every string: one inert, escaped line

import pandas as pd

from .fmt import plural
from .html_base import hbars, page, table, word

# One colour per verdict, no two alike (tests/test_html.py): a chart coloured by verdict
# must tell mixed from cold start from unknown.
VERDICT_COLORS = {"data": "#ff7f0e", "copy": "#8c564b", "sync": "#d62728", "launch": "#e377c2",
                  "host": "#bcbd22", "comms": "#17becf", "compile": "#9467bd",
                  "graph_capture": "#c5b0d5", "queued": "#aec7e8", "gpu": "#3b6ea8",
                  "mixed": "#222222", "cold_start": "#66a61e", "jit": "#e6ab02",
                  "unknown": "#9e9e9e", "cpu_only": "#d9d9d9"}
MAX_ROWS = 200


def batch_page(res) -> str:
    """The summary rows (one per file), verdict counts, GPU idle per file, the cross-rank text."""
    s: pd.DataFrame = res.summary
    ok = s[s["error"].isna()]
    bad = s[s["error"].notna()]
    head = (f"<h1>{plural(len(s), 'trace')}: {len(ok)} analysed, {len(bad)} failed</h1>")
    parts = [head]
    if len(ok):
        counts = ok["verdict"].fillna("?").value_counts()
        parts.append("<h2>Verdicts</h2>" + hbars([(str(k), int(v), plural(int(v), "trace"),
                                                    VERDICT_COLORS.get(str(k), "#777777"))
                                                   for k, v in counts.items()]))
        gpu = ok[ok["idle_pct"].notna()]  # a CPU-only trace has no GPU idle to draw (was "nan%")
        root = _root(ok["file"])
        worst = gpu.sort_values("idle_pct", ascending=False).head(40)
        nogpu = len(ok) - len(gpu)
        if len(worst):
            parts.append("<h2>GPU idle per trace (worst first, coloured by verdict)</h2>" + hbars(
                [(_short(_rel(r["file"], root)), float(r["idle_pct"]), f"{float(r['idle_pct']):.1f}% "
                  f"({r['verdict']})", VERDICT_COLORS.get(str(r["verdict"]), "#777777"))
                 for _, r in worst.iterrows()], label_w=260))
        if nogpu:
            parts.append(f"<p class='meta'>{plural(nogpu, 'trace')} without a GPU idle figure "
                         "(no GPU work analysed): no idle bar drawn</p>")
        parts.append("<h2>Every trace</h2>"
                     + (f"<p class='meta'>files under {escape(root)}</p>" if root else "")
                     + _summary_table(ok, root))
    if len(bad):
        parts.append("<h2>Failed</h2>" + table(["file", "error"], [
            [f'<span class="name">{escape(str(r["file"]))}</span>', escape(str(r["error"]))]
            for _, r in bad.iterrows()]))
    skipped = list(getattr(res, "skipped", None) or [])
    if skipped:   # nothing left out unnamed (jobs/discover.py)
        why = getattr(res.skipped, "why", {})
        parts.append(f"<h2>Skipped ({len(skipped)})</h2>" + table(["file", "why"], [
            [f'<bdi class="name">{escape(str(p))}</bdi>', escape(why.get(p, "not a trace"))]
            for p in skipped]))
    if getattr(res, "jobs", None):
        from .html import cross_rank_html

        parts.append(cross_rank_html(res.jobs))
    return page("traceread batch", "\n".join(parts))


def _short(path: str, w: int = 40) -> str:
    p = str(path)
    return p if len(p) <= w else "…" + p[-(w - 1):]


def _num(v, fmt: str) -> str:
    return "-" if v is None or v != v else fmt.format(v)


def _root(files) -> str:
    """The folder every file lies under ("" when none is common): paths are shown below it,
    so the table fits the page (absolute paths ran off its right edge)."""
    import os

    paths = [str(f) for f in files]
    if len(paths) < 2:
        return os.path.dirname(paths[0]) if paths else ""
    try:
        return os.path.commonpath(paths)
    except ValueError:  # relative and absolute mixed
        return ""


def _rel(path, root: str) -> str:
    import os

    p = str(path)
    return os.path.relpath(p, root) if root and p.startswith(root) else p


def _summary_table(ok: pd.DataFrame, root: str = "") -> str:
    rows = []
    for _, r in ok.sort_values(["job", "rank", "file"], na_position="last").head(MAX_ROWS).iterrows():
        top = f"{r['top_cpu']} {_num(r['top_cpu_pct'], '{:.0f}%')}" if isinstance(r["top_cpu"], str) else "-"
        rank = None if pd.isna(r["rank"]) or r["rank"] < 0 else r["rank"]
        rows.append([f'<span class="name">{escape(_rel(r["file"], root))}</span>', _num(rank, "{:.0f}"), word(str(r["verdict"]).upper()),
                     _num(r["steps"], "{:.0f}"), _num(r["step_mean_ms"], "{:.1f} ms"),
                     _num(r["idle_pct"], "{:.1f}%"), escape(top), _num(r["exposed_comm_pct"], "{:.1f}%"),
                     _num(r["recompiles"], "{:.0f}")])
    more = f"<p class='meta'>first {MAX_ROWS} of {len(ok)}</p>" if len(ok) > MAX_ROWS else ""
    return table(["file", "rank", "verdict", "steps", "step (mean)", "GPU idle", "idle mostly",
                  "exposed comm", "recompiles"], rows, {1, 3, 4, 5, 7, 8}) + more
