"""``traceread kernels | gaps | api``: ``nsys stats``-compatible summaries.

They work on any trace (Kineto or nsys) because they read only the event
table; ``--format csv`` prints exactly what ``nsys stats --format csv`` prints
(``cuda_gpu_kern_sum``, ``gpu_gaps``, ``cuda_api_sum``).
"""
from __future__ import annotations

import json

import click

from . import main
from ._common import emit, load_trace, output_option, parse_duration
from ..passes.api import api_summary, render_api
from ..passes.gaps import gpu_gaps, nsys_order
from ..passes.kernels import kernel_summary, render_csv, render_summary, render_text
from ..render.text import fmt_ns
from ..table import Trace

stats_format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text",
    show_default=True, help="Output format (csv is byte-identical to nsys stats).")

GAP_HEADERS = ("Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID")

@main.command()
@click.argument("trace", type=click.Path())
@stats_format_option
@output_option
def kernels(trace, fmt, out):
    """GPU kernel summary of TRACE (nsys stats cuda_gpu_kern_sum)."""
    emit(render_summary(kernel_summary(load_trace(trace)), fmt), out)


@main.command()
@click.argument("trace", type=click.Path())
@click.option("--real-calls-only", is_flag=True,
              help="Leave out nsys's CUDA-backtrace duplicate records (nsys counts them).")
@stats_format_option
@output_option
def api(trace, real_calls_only, fmt, out):
    """CUDA API summary of TRACE (nsys stats cuda_api_sum)."""
    summary = api_summary(load_trace(trace), nsys_compat=not real_calls_only)
    emit(render_api(summary, fmt), out)


@main.command()
@click.argument("trace", type=click.Path())
@click.option("--min-gap", default="1ms", show_default=True,
              help="Report idle gaps strictly longer than this (1ms, 500us, 2s, or ns).")
@stats_format_option
@output_option
def gaps(trace, min_gap, fmt, out):
    """GPU idle gaps of TRACE per process and device (nsys stats gpu_gaps)."""
    t = load_trace(trace)
    emit(render_gaps(t, parse_duration(min_gap), fmt), out)


def gap_rows(t: Trace, min_gap_ns: int) -> list[list[str]]:
    """Rows in nsys order (longest first), with the CUDA context id when known."""
    g = nsys_order(gpu_gaps(t, min_gap_ns))
    ctx = t.meta.extra.get("gpu_contexts", {}) if isinstance(t.meta.extra, dict) else {}
    rows = []
    for i, r in enumerate(g.itertuples(index=False), start=1):
        c = ctx.get(f"{r.pid}/{r.device}", "")
        rows.append([str(i), str(r.duration), str(r.start), str(r.pid), str(r.device), str(c)])
    return rows


def gaps_csv(t: Trace, min_gap_ns: int) -> str:
    return render_csv(GAP_HEADERS, gap_rows(t, min_gap_ns))


def render_gaps(t: Trace, min_gap_ns: int, fmt: str) -> str:
    rows = gap_rows(t, min_gap_ns)
    if fmt == "csv":
        return render_csv(GAP_HEADERS, rows)
    if fmt == "json":
        recs = [{h: (int(v) if v.lstrip("-").isdigit() else None) for h, v in zip(GAP_HEADERS, r)}
                for r in rows]
        return json.dumps(recs, indent=2)
    if not rows:
        return f"no GPU gaps longer than {fmt_ns(min_gap_ns)}"
    return render_text(GAP_HEADERS, rows, numeric_cols=len(GAP_HEADERS), plain=(0, 3, 4, 5))
