"""``traceread batch``: every trace of a directory, one table back, cross-rank summary."""
from __future__ import annotations

import os

import click

from . import main
from ..render import safe


@main.command()
@click.argument("directory")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: number of CPUs).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, readable=False), default="traceread-batch",
              show_default=True, help="Output directory.")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run on this existing Dask distributed scheduler instead of local processes.")
@click.option("--step-pattern", default=None, help="Regex naming the step ranges (default ProfilerStep#N).")
@click.pass_context
def batch(ctx, directory, jobs, out_dir, scheduler, step_pattern):
    """Analyse every trace under DIRECTORY (recursively, found by content).

    Writes OUT/summary.parquet and summary.csv (one row per file; a file that fails is
    a row with its error), OUT/tables/<table>/trace_id=<id>/ (per-trace gaps, kernels,
    collectives, steps... as a hive-partitioned Parquet dataset), OUT/ranks.parquet and
    OUT/matches.parquet (cross-rank results of multi-rank jobs) and OUT/jobs.json.
    DIRECTORY may be an fsspec URL (s3://...) readable by the workers. Exit status 1
    when any file failed.

    Each file runs in its own worker under a time and memory limit that scale with
    its size; a worker that is killed or exceeds them is that file's error row.
    OUT/summary.partial.csv grows by one row per finished file (a killed batch
    keeps it) and is removed when the batch completes. OUT is refused when writing
    there would overwrite an input or a tables/ directory not made by traceread.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..jobs import batch as b
    from ..jobs import output
    from ..jobs.discover import discover

    if scheduler:
        _need_dask(scheduler)
    paths, skipped = discover(directory)
    if not paths:
        from ..errors import TraceError

        raise TraceError(directory, f"no trace files found ({len(skipped)} other files)")
    output.check_out_dir(out_dir, paths)
    partial = output.PartialSummary(out_dir)  # a killed batch keeps the rows it finished
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console,
                  disable=not console.is_terminal, transient=True) as progress:
        task = progress.add_task("analysing", total=len(paths), last="")

        def tick(res):
            partial.add(res)
            last = escape(safe.name(os.path.basename(res["row"]["file"])))  # rich markup too
            progress.update(task, advance=1, last=last)

        try:
            res = b.run(directory, jobs=jobs, scheduler=scheduler, step_pattern=step_pattern,
                        on_result=tick, paths=paths)
        finally:
            partial.close()
    res.skipped = skipped
    from ..render.html_batch import batch_page

    out = output.write(res, out_dir, report=batch_page(res))
    click.echo(safe.text(render_summary(res, str(out))))
    if res.failed:
        _say_failed(res.summary)
        ctx.exit(1)


_MAX_ERROR_LINES = 20


def _say_failed(summary) -> None:
    """Exit 1 says why on stderr: one error line per failed file (a FIFO and a corrupt
    SQLite left stderr empty, issue 23), the rest counted."""
    from ._common import file_error

    bad = summary[summary["error"].notna()]
    for r in bad.head(_MAX_ERROR_LINES).itertuples():
        file_error(f"{r.file}: {r.error}")
    if len(bad) > _MAX_ERROR_LINES:
        file_error(f"{len(bad) - _MAX_ERROR_LINES} more files failed: see summary.csv")


def _need_dask(scheduler: str) -> None:
    """Say at once, before any work, that --scheduler cannot run here."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        from ..errors import TraceError

        raise TraceError(scheduler, "--scheduler needs dask.distributed, which is not "
                                    "installed (pip install 'traceread[dask]')") from None


SKIPPED_SHOWN = 20


def _skipped_lines(skipped) -> list[str]:
    """Every skipped file named with why (the first SKIPPED_SHOWN, then how many more); an
    earlier batch's output as its folder and its count of files."""
    from ..jobs.discover import EARLIER_OUTPUT, NOT_A_TRACE

    why = getattr(skipped, "why", {})
    outputs = getattr(skipped, "outputs", {})
    out = [f"  skipped: {safe.name(d)}{os.sep}: the output of an earlier traceread batch "
           f"({n} files, the bytes its manifest recorded)" for d, n in outputs.items()]
    rest = [p for p in skipped if why.get(p) != EARLIER_OUTPUT]
    out += [f"  skipped: {safe.name(p)}: {why.get(p, NOT_A_TRACE)}" for p in rest[:SKIPPED_SHOWN]]
    if len(rest) > SKIPPED_SHOWN:
        out.append(f"  ... {len(rest) - SKIPPED_SHOWN} more skipped")
    return out


def render_summary(res, out: str) -> str:
    from ..render.cross_rank import render_text

    s = res.summary
    ok = s[s["error"].isna()]
    files = res.files if res.files >= 0 else len(s)
    # an nsys export of several GPU processes is a row (a trace) per process
    head = f"{files} files" if files == len(s) else f"{files} files, {len(s)} traces (per process)"
    lines = [f"{head}: {len(ok)} analysed, {res.failed} failed"
             + (f", {len(res.skipped)} skipped" if res.skipped else "")]
    if len(ok):
        verdicts = ok["verdict"].fillna("?").value_counts()
        lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
    for r in s[s["error"].notna()].itertuples():
        lines.append(f"  failed: {safe.name(r.file)}: {safe.name(r.error)}")
    lines += _skipped_lines(res.skipped)
    if "truncated_at_byte" in s:
        for r in s[s["truncated_at_byte"].notna() & s["error"].isna()].itertuples():
            lines.append(f"  truncated: {safe.name(r.file)}: cut at byte {r.truncated_at_byte:,}, "
                         f"analysed the {r.events:,} events before the cut")
    if res.jobs:
        lines.append("")
        lines.append(render_text(res.jobs))
    lines.append("")
    lines.append(f"wrote {safe.name(out)}/summary.parquet, summary.csv, ranks.parquet, jobs.parquet, tables/, report.html")
    return "\n".join(lines)
