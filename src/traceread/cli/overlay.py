"""``traceread overlay``: the trace plus traceread's tracks, for Perfetto (or Chromium DevTools)."""
from __future__ import annotations

import os

import click

from . import main
from ._common import load_trace, no_cache_option
from .analyze import step_pattern_option, steps_option, window_option


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(readable=False),
              help="Chrome trace JSON to write (.json.gz: gzip-compressed); with several "
                   "TRACEs a directory, one NAME.overlay.json.gz per trace.")
@step_pattern_option
@steps_option
@window_option
@no_cache_option
def overlay(traces, out, step_pattern, steps_spec, window):
    """TRACE plus tracks for ui.perfetto.dev: idle gaps by cause, steps, exposed comm, compiles.

    Several TRACEs that are ranks of one job also get each rank's straggler waits."""
    from ..outputs import refuse_inputs
    from ..render.overlay import straggler_waits, write_overlay
    from ..render.safe import name

    targets = _targets(traces, out)
    for dst in targets:  # before any trace is read: an input is never opened for writing
        refuse_inputs(dst, traces)
    analyses = [_analyze(t, load_trace(t), step_pattern, steps_spec, window) for t in traces]
    waits = {}
    if len(analyses) > 1:   # the job model: the waits of each rank's analysed window
        from ..jobs.multirank import jobs_of_analyses

        waits = straggler_waits(jobs_of_analyses(analyses))
    for a, dst in zip(analyses, targets):
        n = write_overlay(a, dst, waits.get(a.meta.path))
        click.echo(f"wrote {name(dst)}: {n:,} traceread events added to {a.events:,} "
                   f"(open in https://ui.perfetto.dev, or Chromium DevTools > Performance > "
                   f"Load profile)", err=True)


def _targets(traces, out) -> list[str]:
    from ..outputs import make_dir

    if len(traces) == 1:
        return [out]
    make_dir(out)  # the directory named, never its parents
    names = [os.path.basename(t).split(".json")[0].split(".sqlite")[0] for t in traces]
    if len(set(names)) != len(names):  # same file names in different folders: number them
        names = [f"{i}-{n}" for i, n in enumerate(names)]
    return [os.path.join(out, n + ".overlay.json.gz") for n in names]


def _analyze(path, trace, step_pattern, steps_spec, window):
    from ..analysis import analyze
    from ..errors import TraceError
    from ..passes.window import StepsError

    try:
        return analyze(trace, step_pattern=step_pattern, steps=steps_spec, window=window)
    except StepsError as e:  # --steps names no step of this trace; any other: a bug
        raise TraceError(path, str(e)) from None
