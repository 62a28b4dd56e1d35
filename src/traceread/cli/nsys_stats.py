"""``traceread kernels | api | gaps | nvtx | memcpy | osrt | util``: ``nsys stats`` reports.

They work on any trace (Kineto or nsys) because they read only the event
table; ``--format csv`` prints exactly what ``nsys stats --format csv`` prints
(``cuda_gpu_kern_sum``, ``cuda_api_sum``, ``gpu_gaps``, ``nvtx_sum``,
``cuda_gpu_mem_time_sum`` / ``cuda_gpu_mem_size_sum``, ``osrt_sum``,
``gpu_time_util``) -- of the nsys version that wrote the export unless
``--nsys-version`` says which (passes/nsys_compat.py).
"""
from __future__ import annotations

import json

import click

from ..passes import nsys_reports as reports
from ..passes.api import api_summary, render_api
from ..passes.gaps import gpu_gaps, nsys_order
from ..passes.kernels import kernel_summary, render_csv, render_summary, render_text
from ..passes.nsys_compat import AUTO, STATS_VERSIONS, stats_version
from ..passes.window import trace_span
from ..render import safe
from ..render.text import fmt_ns, rel_time
from ..table import Trace
from . import main
from ._common import duration_callback, emit, format_callback, load_trace, output_option

stats_format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "csv", "json"]), default=None,
    show_default="text", callback=format_callback,
    help="Output format (default: by -o's suffix, else text; csv is byte-identical to nsys stats).")

GAP_HEADERS = ("Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID")

version_option = click.option(
    "--nsys-version", "nsys_version", type=click.Choice([AUTO, *STATS_VERSIONS]), default=AUTO,
    show_default=True,
    help="nsys stats version to match (auto: the one that wrote the export, else 2023.4).")

rows_option = click.option(
    "--rows", type=int, default=reports.NSYS_ROW_LIMIT, show_default=True,
    help="Row limit, applied as nsys applies it (-1: no limit).")

@main.command()
@click.argument("trace", type=click.Path(readable=False))
@stats_format_option
@output_option
@version_option
def kernels(trace, fmt, out, nsys_version):
    """GPU kernel summary of TRACE (nsys stats cuda_gpu_kern_sum)."""
    t = load_trace(trace)
    s = _text_names(kernel_summary(t), fmt)
    _emit(render_summary(s, fmt, version=stats_version(t, nsys_version)), out, fmt=fmt)


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("--real-calls-only", is_flag=True,
              help="Leave out nsys's CUDA-backtrace duplicate records (nsys counts them).")
@stats_format_option
@output_option
@version_option
def api(trace, real_calls_only, fmt, out, nsys_version):
    """CUDA API summary of TRACE (nsys stats cuda_api_sum)."""
    t = load_trace(trace)
    summary = api_summary(t, nsys_compat=not real_calls_only)
    _emit(render_api(_text_names(summary, fmt), fmt, stats_version(t, nsys_version)), out,
         fmt=fmt)


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("--min-gap", default="1ms", show_default=True, callback=duration_callback,
              metavar="DURATION",
              help="Report idle gaps strictly longer than this (1ms, 500us, 2s, 7ns: a unit is "
                   "required). nsys's gpu_gaps defaults to 500ms (gap=500, in ms): --min-gap "
                   "500ms gives its default rows.")
@stats_format_option
@output_option
@rows_option
@version_option
def gaps(trace, min_gap, fmt, out, rows, nsys_version):
    """GPU idle gaps of TRACE per process and device (nsys stats gpu_gaps)."""
    t = load_trace(trace)
    stats_version(t, nsys_version)   # checked like the other reports: gpu_gaps prints only
    _emit(render_gaps(t, min_gap, fmt, rows), out, fmt=fmt)   # integers, alike in both


def gap_rows(t: Trace, min_gap_ns: int, rows: int = reports.NSYS_ROW_LIMIT) -> list[list[str]]:
    """Rows in nsys order (longest first), with the CUDA context id when known."""
    g = nsys_order(gpu_gaps(t, min_gap_ns), rows)
    ctx = t.meta.extra.get("gpu_contexts", {}) if isinstance(t.meta.extra, dict) else {}
    rows = []
    for i, r in enumerate(g.itertuples(index=False), start=1):
        c = ctx.get(f"{r.pid}/{r.device}", "")
        rows.append([str(i), str(r.duration), str(r.start), str(r.pid), str(r.device), str(c)])
    return rows


def gaps_csv(t: Trace, min_gap_ns: int, rows: int = reports.NSYS_ROW_LIMIT) -> str:
    return render_csv(GAP_HEADERS, gap_rows(t, min_gap_ns, rows))


def render_gaps(t: Trace, min_gap_ns: int, fmt: str, limit: int = reports.NSYS_ROW_LIMIT) -> str:
    rows = gap_rows(t, min_gap_ns, limit)
    if fmt != "text":
        return _render_table(GAP_HEADERS, rows, fmt)
    if not rows:
        return f"no GPU gaps longer than {fmt_ns(min_gap_ns)}"
    # The terminal shows starts after the trace's first event; csv / json keep nsys's ns.
    t0 = _origins(t)
    rows = [r[:2] + [rel_time(int(r[2]) - t0(int(r[3])))] + r[3:] for r in rows]
    headers = GAP_HEADERS[:2] + ("Start",) + GAP_HEADERS[3:]
    return _render_table(headers, rows, fmt, plain=(0, 2, 3, 4, 5))


def _origins(t: Trace):
    """pid -> the time the terminal's starts count from: the trace's first event, or, in an
    export that analyze, steps and idle report per process (several GPU processes), that
    process's first event -- so one gap has one start in all of them."""
    from ..readers.nsys_split import gpu_processes

    ev = t.events
    whole = trace_span(ev)[0]
    if t.meta.format != "nsys" or len(gpu_processes(t)) < 2:
        return lambda pid: whole
    first = ev.groupby("pid", observed=True)["ts"].min().to_dict()
    return lambda pid: int(first.get(pid, whole))


def _render_table(headers, rows, fmt: str, plain=()) -> str:
    if fmt == "csv":
        return render_csv(headers, rows)
    if fmt == "json":
        recs = [{h: _num(v) for h, v in zip(headers, r)} for r in rows]
        return json.dumps(recs, indent=2)
    return render_text(headers, rows, numeric_cols=len(headers), plain=plain)


def _emit(text: str, out, fmt: str) -> None:
    """``emit`` for the nsys reports. Their JSON keeps the shape of ``nsys stats --format
    json`` (a list of row objects); each row carries ``schema_version`` (docs/analysis.md §5)."""
    if fmt == "json":
        from ..schema import versioned

        text = json.dumps([versioned(r) for r in json.loads(text)], indent=2)
    emit(text, out, terminal=fmt == "text")


def _text_names(df, fmt: str):
    """For the text table, names as one terminal-safe line each (``render.safe``);
    csv and json keep them exact, as nsys writes them."""
    return safe.names(df) if fmt == "text" else df


def _num(v: str):
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        return float(v)
    except ValueError:
        return None


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@stats_format_option
@output_option
@version_option
def nvtx(trace, fmt, out, nsys_version):
    """NVTX range summary of TRACE (nsys stats nvtx_sum; Kineto: user annotations)."""
    t = load_trace(trace)
    v = stats_version(t, nsys_version)
    s = _text_names(reports.nvtx_summary(t, v), fmt)
    _emit(reports.render_nvtx(s, fmt, v) if len(s) or fmt != "text" else "no NVTX ranges", out,
         fmt=fmt)


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("--by", type=click.Choice(["time", "size"]), default="time", show_default=True,
              help="Summarise durations (cuda_gpu_mem_time_sum) or sizes (cuda_gpu_mem_size_sum).")
@stats_format_option
@output_option
@version_option
def memcpy(trace, by, fmt, out, nsys_version):
    """GPU memcpy/memset summary of TRACE by operation (nsys stats cuda_gpu_mem_*_sum)."""
    t = load_trace(trace)
    s = _text_names(reports.memop_time_summary(t) if by == "time" else reports.memop_size_summary(t),
                    fmt)
    text = reports.render_memops(s, by, fmt, stats_version(t, nsys_version))
    _emit(text if len(s) or fmt != "text" else "no GPU memcpy/memset", out, fmt=fmt)


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@stats_format_option
@output_option
@version_option
def osrt(trace, fmt, out, nsys_version):
    """OS runtime call summary of TRACE (nsys stats osrt_sum; nsys exports only)."""
    t = load_trace(trace)
    s = _text_names(reports.osrt_summary(t), fmt)
    text = reports.render_osrt(s, fmt, stats_version(t, nsys_version))
    _emit(text if len(s) or fmt != "text" else "no OS runtime calls", out, fmt=fmt)


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("--threshold", type=float, default=50, show_default=True,
              help="Report chunks whose GPU in-use percent is below this.")
@click.option("--chunks", type=click.IntRange(1, 1000), default=30, show_default=True,
              help="Equal-duration chunks per process and device.")
@rows_option
@stats_format_option
@output_option
@version_option
def util(trace, threshold, chunks, rows, fmt, out, nsys_version):
    """Low GPU time-utilisation regions of TRACE (nsys stats gpu_time_util)."""
    t = load_trace(trace)
    util_ = reports.gpu_time_util(t, threshold, chunks, rows,
                                  version=stats_version(t, nsys_version))
    table = reports.util_rows(t, util_)
    if fmt != "text":
        _emit(_render_table(reports.UTIL_HEADERS, table, fmt), out, fmt=fmt)
        return
    if not table:
        emit(f"no region below {threshold:g}% GPU utilisation", out)
        return
    # starts after the trace's first event, as gaps, idle, analyze and --window show them
    t0 = _origins(t)
    table = [r[:3] + [rel_time(int(r[3]) - t0(int(r[4])))] + r[4:] for r in table]
    headers = reports.UTIL_HEADERS[:3] + ("Start",) + reports.UTIL_HEADERS[4:]
    _emit(_render_table(headers, table, fmt, plain=(0, 3, 4, 5, 6)), out, fmt=fmt)
