"""``traceread flame``: the host time inside GPU-idle gaps as a flame graph."""
from __future__ import annotations

import click

from . import main
from ._common import (_output_callback, duration_callback, emit, exit_if_failed,
                      format_callback, no_cache_option, strict_option, warn)
from ..errors import TraceError

# -o suffixes flame writes; any other is refused (not folded text under an .html name)
FLAME_SUFFIXES = (".folded", ".collapsed", ".txt", ".svg")

output_option = click.option(
    "-o", "--output", "out", type=click.Path(dir_okay=False, readable=False), default=None,
    callback=_output_callback,
    help="Write to this file instead of stdout: .folded (or .collapsed, .txt) for the "
         "collapsed stacks, .svg for the picture; other suffixes are refused.")


def check_output(out, fmt_given: bool) -> None:
    """Refuse an -o whose suffix names a format flame does not write (``x.html``, ``x.json``)
    unless --format says what to write into it."""
    import os.path

    if not out or out == "-" or fmt_given:
        return
    suffix = os.path.splitext(str(out))[1].lower()
    if suffix and suffix not in FLAME_SUFFIXES:
        raise TraceError(out, f"flame writes collapsed stacks (.folded) or an .svg, not "
                              f"{suffix}: name the output .folded or .svg (the HTML report, "
                              "`traceread analyze TRACE -o report.html`, draws the flame graph "
                              "too)")
from .analyze import _analyses, step_pattern_option, steps_option, window_option


@main.command()
@click.argument("trace", type=click.Path(readable=False))
@click.option("--format", "fmt", type=click.Choice(["folded", "svg"]), default=None,
              show_default="folded", callback=format_callback,
              help="folded: collapsed stacks (flamegraph.pl, speedscope; weights in ns); "
                   "svg: the picture (default: by -o's suffix, else folded).")
@output_option
@click.option("--from", "source", type=click.Choice(["auto", "ranges", "samples"]), default="auto",
              show_default=True,
              help="ranges: the trace's nested ranges (Python frames, operators, CUDA calls, "
                   "NVTX); samples: an nsys export's sampled CPU call stacks (--sample=cpu); "
                   "auto: samples when there are some in the gaps, else ranges.")
@click.option("--min-gap", "min_gap", default=None, callback=duration_callback, metavar="DURATION",
              help="Count only the gaps longer than this (e.g. 100us, 1ms); default: every gap.")
@step_pattern_option
@steps_option
@window_option
@no_cache_option
@strict_option
def flame(trace, fmt, out, source, min_gap, step_pattern, steps_spec, window):
    """Flame graph of the host time inside GPU-idle gaps of TRACE (collapsed stacks).

    Each line is a stack of the launching thread (Python frames with
    torch.profiler(with_stack=True), operators, CUDA calls, NVTX ranges), outermost
    first, and the ns it held while the GPU idled in the analysed window; [untraced]:
    no range open. An nsys export sampled with --sample=cpu gives its call stacks
    instead (--from). `-o idle.folded` opens in speedscope or flamegraph.pl;
    `-o idle.svg` draws it.
    """
    from ..render.flame import flame_svg, folded, idle_flame

    check_output(out, not click.get_current_context().meta.get("traceread.fmt_defaulted"))
    results, failed = _analyses([trace], step_pattern, 0, steps_spec, window)
    a = results[0]
    gaps = a.gaps[a.gaps["duration"] > min_gap] if min_gap else a.gaps
    stacks, made_of = idle_flame(a, source, gaps)
    if fmt == "svg":
        emit(flame_svg(stacks) or _empty_svg(), out, terminal=False)
    else:
        emit(folded(stacks) or "", out, terminal=False)
    if not stacks:
        warn(f"{trace}: no GPU-idle gaps in the analysed window: nothing to draw" if not len(gaps)
             else f"{trace}: nothing inside the GPU-idle gaps to draw (from {made_of})")
    exit_if_failed(failed)


def _empty_svg() -> str:
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="400" height="20">'
            '<text x="4" y="14" font-size="11">no GPU-idle gaps</text></svg>')
