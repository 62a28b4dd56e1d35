"""``traceread analyze`` (the report), ``traceread steps`` and ``traceread idle``."""
from __future__ import annotations

import re

import click

from . import main
from ._common import (duration_callback, each_trace, emit, emit_json, exit_if_failed,
                      format_callback, format_option, no_cache_option, output_option, parse_duration,
                      strict_option)
from ..analysis import analyze as run_analysis
from ..errors import TraceError
from ..render.json import gap_records
from ..render.fmt import fit_list, short_name
from ..render import safe
# the text renderers (render.report, render.text) are imported where a text report is made:
# `analyze --format json` never needs them

def _regex(ctx, param, value):
    if value is None:
        return None
    try:
        re.compile(value)
    except re.error as e:
        raise click.BadParameter(f"not a regular expression: {e}")
    return value


def _finite(ctx, param, value):
    """A rate must be a number: ``inf`` and ``nan`` pass click's range check but would be
    written into JSON as ``Infinity`` / ``NaN``, which no JSON reader takes."""
    import math

    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


def _steps_spec(ctx, param, value):
    from ..passes.window import parse_steps

    try:
        parse_steps(value)
    except ValueError as e:
        raise click.BadParameter(str(e))
    return value


def _window(ctx, param, value):
    """START:END after the trace's first event (durations; either side may be empty)."""
    if value is None:
        return None
    if ":" not in value:
        raise click.BadParameter(f"{value!r} is not START:END (e.g. 5s:9s, 2.5s:, :800ms)")
    a, b = value.split(":", 1)
    lo = parse_duration(a) if a.strip() else 0
    hi = parse_duration(b) if b.strip() else None
    if hi is not None and hi <= lo:
        raise click.BadParameter(f"{value!r}: END must come after START")
    return (lo, hi)


steps_option = click.option(
    "--steps", "steps_spec", default="auto", show_default=True, callback=_steps_spec,
    metavar="auto|all|N:M",
    help="Which steps to analyse: auto (steady state: leading warm-up steps and start-up "
         "excluded; without steps, the repeating part), all (without steps: the whole "
         "trace), or the steps numbered N..M (inclusive; N: or :M).")
window_option = click.option(
    "--window", "window", default=None, callback=_window, metavar="START:END",
    help="Analyse only this stretch, as times after the trace's first event "
         "(e.g. 5.4s:9s); overrides --steps.")
min_gap_option = click.option(
    "--min-gap", "min_gap", default=None, callback=duration_callback, metavar="DURATION",
    help="List only gaps longer than this (e.g. 100us, 1ms); totals always count every gap.")
peak_option = click.option(
    "--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite,
    metavar="TFLOPS", help="Peak dense TFLOP/s per GPU for MFU (default: looked up from the device).")
step_pattern_option = click.option(
    "--step-pattern", default=None, metavar="REGEX", callback=_regex,
    help="Regex for step ranges (default: ProfilerStep#N, then names like 'step 12' / 'iteration_3').")


html_format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json", "html"]), default=None,
    show_default="text", callback=format_callback,
    help="Output format (default: by -o's suffix, else text; html: one self-contained page, "
         "needs -o).")


def _trace_command(*extra, fmt_option=format_option):
    """A subcommand over TRACE... with the shared options, plus ``extra`` before --step-pattern."""
    shared = (click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False)),
              fmt_option, output_option, *extra, step_pattern_option, steps_option,
              window_option, no_cache_option, strict_option)

    def wrap(fn):
        for option in reversed(shared):
            fn = option(fn)
        return main.command()(fn)
    return wrap


def _analyses(traces, step_pattern, min_gap, steps_spec="auto", window=None, after=None,
              peak_tflops=None, split_ranks=False):
    """(analyses of the traces that loaded, number that failed); ``after(analysis)`` runs
    on each as soon as it is made. ``split_ranks``: an nsys export holding several GPU
    processes (``nsys profile torchrun ...``) gives one analysis per process (rank)."""
    from ..errors import TraceError
    from ..passes.window import StepsError

    def single(path, trace):
        try:
            a = run_analysis(trace, step_pattern=step_pattern, min_gap_ns=min_gap,
                             steps=steps_spec, window=window,
                             peak_tflops=peak_tflops)
        except StepsError as e:   # --steps names no step of this trace; any other: a bug
            raise TraceError(path, str(e)) from None
        if after is not None:
            after(a)
        return a

    def one(path, trace):
        if split_ranks:
            from ..readers.nsys_split import split_processes

            parts = split_processes(trace)
            if parts:   # one part alive at a time: the whole export and each analysed part
                del trace   # are let go (the part once its analysis drops it)
                return [single(path, parts.pop(0)) for _ in range(len(parts))]
        return single(path, trace)

    results, failed = each_trace(traces, one)
    return [x for r in results for x in (r if isinstance(r, list) else [r])], failed


link_gbps_option = click.option(
    "--link-gbps", "link_gbps", type=click.FloatRange(min=0, min_open=True), default=None,
    metavar="GB/S", callback=_finite,
    help="Interconnect peak in GB/s: multi-rank jobs report collective bus bandwidth as a % of it; "
         "each trace's fitted communication model (parallelism.comm_model) too.")


@_trace_command(min_gap_option, link_gbps_option, peak_option, fmt_option=html_format_option)
def analyze(traces, fmt, out, min_gap, link_gbps, peak_tflops, step_pattern, steps_spec,
            window):
    """Why is the GPU underfed? Verdict, levers and evidence for each TRACE.

    Several TRACEs of one distributed job (one per rank) are also analysed as a job:
    the job verdict (straggler, delay, cause) comes first. An nsys export holding several
    GPU processes (nsys profile torchrun ...) is reported per process, as ranks of one job.
    """
    from ..jobs import multirank

    if fmt == "html" and out is None:
        raise click.UsageError("--format html needs -o FILE.html")
    # one trace's HTML page draws from its events (exposed comm, compile episodes)
    keep_trace = fmt == "html" and len(traces) == 1

    prepared: list = []
    errors: list = []

    def keep_rank_input(a):  # then drop the event table: memory stays bounded on big jobs
        try:
            if link_gbps:   # the fitted bus bandwidths against the link (parallelism.with_link)
                from ..passes.parallelism import with_link

                a.parallelism = with_link(getattr(a, "parallelism", None), link_gbps)
            part = "split_from" in (a.meta.extra or {})   # one process of a multi-rank export
            prepared.append(multirank.prepare(a, with_input=len(traces) + len(dumps) >= 2 or part))
        except Exception as e:  # reported below; the trace's own report still prints
            errors.append(e)
        finally:
            if not keep_trace:   # the step graphs too: the verdict priced its levers on
                a.trace = None   # them, the reports read only the replay's figures
                a.replay_graph = None
                if a.facts is not None:
                    a.facts.graph = None

    dumps = _flight_dumps(traces)   # Flight Recorder dumps: ranks of a job, no trace
    traces = [t for t in traces if t not in dumps]
    if dumps and not traces and fmt == "html":
        raise click.UsageError("--format html draws traces: Flight Recorder dumps alone give "
                               "text or json")
    results, failed = _analyses(traces, step_pattern, min_gap, steps_spec, window, keep_rank_input,
                                peak_tflops, split_ranks=True) if traces else ([], 0)
    prepared += [dumps[t] for t in dumps]
    try:
        if errors:
            raise errors[0]
        jobs = multirank.build_jobs(prepared, link_gbps)   # the one job model (traceread.job)
        multirank.apply_job_verdicts(results, jobs)
        if dumps:   # a dump that is no job's rank is said so, never an empty report
            from ..jobs.multirank.flight import check_members

            check_members(list(dumps.values()), jobs, others=len(traces))
    except TraceError as e:   # an input's fault: its one line; the per-rank reports still print
        click.echo(f"traceread: error: {safe.name(str(e))}", err=True)
        failed += 1
    except Exception as e:  # the per-rank reports still print; the run fails
        click.echo(f"traceread: error: cross-rank analysis: {type(e).__name__}: {safe.name(' '.join(str(e).split()))}",
                   err=True)
        jobs, failed = [], failed + 1
    if fmt == "html":
        from ..render.base import get_renderer

        page = get_renderer("html", jobs=jobs).render(results if len(results) > 1 else results[0])
        emit(page, out, terminal=False)
    elif fmt == "json":
        cross = [j.to_dict() for j in jobs] or None
        emit_json([a.to_dict() for a in results], out, len(traces), cross_rank=cross)
    else:
        from ..render.report import render_report

        head = []
        if jobs:  # (a single trace's report needs none of the cross-rank rendering)
            from ..render.cross_rank import render_summary

            head = [render_summary(jobs)]
        parts = head + [render_report(safe.for_display(a)) for a in results]
        if jobs:
            from ..render.cross_rank import render_detail

            parts.append(render_detail(jobs))
        if parts or not dumps:   # dumps that formed no job print nothing: their error says why
            emit("\n\n".join(parts), out)
    exit_if_failed(failed)


def _flight_dumps(paths) -> dict:
    """path -> its job member (``multirank.flight``) for each PATH that is a Flight Recorder
    dump (torch.distributed's per-rank record of the collectives it issued)."""
    from ..jobs.multirank import flight

    out = {}
    for p in paths:
        doc = flight.read_dump(p)   # sniffs the first 64 KB: a trace is never parsed here
        if doc is not None:   # a dump that names no rank, or one outside its world: TraceError
            out[p] = {"path": str(p), "input": flight.rank_input_of(p, doc), "split": [],
                      "window": None, "parallelism": None}
    return out


@_trace_command()
def steps(traces, fmt, out, step_pattern, steps_spec, window):
    """Per-step host time, GPU busy/idle and idle causes for each TRACE.

    An nsys export holding several GPU processes is reported per process, as analyze does."""
    # split as analyze: one export's ranks were one table of every rank's steps, their
    # starts counted from another origin than analyze's
    results, failed = _analyses(traces, step_pattern, 0, steps_spec, window, split_ranks=True)
    if fmt == "json":
        docs = [{"trace": a.meta.path, **a.to_dict()["steps"]} for a in results]
        emit_json(docs, out, len(traces))
        exit_if_failed(failed)
        return
    from ..render.report import render_steps

    emit("\n\n".join(render_steps(safe.for_display(a)).rstrip("\n") for a in results), out)
    exit_if_failed(failed)


idle_rows_option = click.option(
    "--rows", type=int, default=50, show_default=True,
    help="List the first N gaps in time order (-1: all; JSON always has all).")


@_trace_command(min_gap_option, idle_rows_option)
def idle(traces, fmt, out, min_gap, rows, step_pattern, steps_spec, window):
    """Every GPU idle gap of each TRACE with its step, drain cause and host activity.

    An nsys export holding several GPU processes is reported per process, as analyze does."""
    results, failed = _analyses(traces, step_pattern, min_gap, steps_spec, window,
                                split_ranks=True)   # as analyze and steps
    if fmt == "json":
        docs = [{"trace": a.meta.path, "min_gap_ns": a.min_gap_ns,
                 "gaps": gap_records(a.listed_gaps())} for a in results]
        emit_json(docs, out, len(traces))
        exit_if_failed(failed)
        return
    from ..render.text import ORIGIN_NOTE, fmt_ns, rel_time

    blocks = []
    for a in results:
        g = a.listed_gaps()
        t0 = a.window.trace_start if a.window is not None else 0
        pids = g["pid"].nunique() > 1  # the pid column only when it tells gaps apart
        pid_head = f"{'pid':>8}  " if pids else ""
        lines = [safe.name(a.meta.path), ORIGIN_NOTE, f"  {'start':>11}  {'duration':>9}  {pid_head}{'dev':>3}  "
                 f"{'step':>6}  {'drain':<20}  host (largest first)"]
        recs = gap_records(g)
        for r in recs if rows < 0 else recs[:rows]:
            drain = r["drain"] + (f" {r['drain_op']}" if r["drain_op"] else "")
            pid = f"{r['pid']:>8}  " if pids else ""
            step = f"#{r['step']}" if r["step"] >= 0 else "-"   # as analyze's gap table
            row = (f"  {rel_time(r['start_ns'] - t0):>11}  {fmt_ns(r['duration_ns']):>9}  {pid}"
                   f"{r['device']:>3}  {step:>6}  {short_name(drain, 20):<20}  ")
            host = [f"{k} {fmt_ns(v)}" for k, v in sorted(r["by_cpu"].items(), key=lambda kv: -kv[1])]
            lines.append(row + fit_list(row, host))
        if 0 <= rows < len(recs):
            lines.append(f"  ... {len(recs) - rows:,} more gaps ({len(recs):,} in all): --rows -1 "
                         "lists every one, --min-gap 1ms only the longer ones")
        blocks.append("\n".join(lines))
    emit("\n\n".join(blocks), out)
    exit_if_failed(failed)
