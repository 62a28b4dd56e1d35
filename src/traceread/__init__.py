"""traceread: why is the GPU underfed? Offline analysis of torch.profiler and nsys traces."""
from __future__ import annotations

from importlib import import_module

from .errors import TraceError
from .capture import capture  # stdlib only; eager so the submodule cannot shadow it

from .version import __version__

# Loaded on first use (PEP 562) so `import traceread.cli` and `traceread --help`
# do not import pandas / pyarrow / numpy.
_LAZY = {"load": ("readers", "read"), "Trace": ("table", "Trace"),
         "TraceMeta": ("table", "TraceMeta"), "COLUMNS": ("table", "COLUMNS"),
         "KINDS": ("table", "KINDS"), "SCHEMA": ("table", "SCHEMA"),
         "read_parquet": ("readers.parquet", "read_parquet"), "Analysis": ("analysis", "Analysis")}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def analyze(trace_or_path, **kwargs):
    """Run every pass over a Trace or a trace file (``traceread.analysis.analyze``).

    Anything else -- a DataFrame of events, an open file -- is a TypeError that says
    what to pass, not an AttributeError from deep inside a pass.
    """
    import os

    from .analysis import analyze as _analyze
    from .table import Trace

    if isinstance(trace_or_path, bytes):   # a path as the OS gives it (any name)
        trace_or_path = os.fsdecode(trace_or_path)
    if not isinstance(trace_or_path, (str, os.PathLike, Trace)):
        kind = type(trace_or_path).__name__
        hint = (" (pass the trace file's path, or traceread.load(path); a DataFrame of "
                "events is trace.events, an output, not an input)" if kind == "DataFrame" else "")
        raise TypeError(f"traceread.analyze takes a Trace or a path to a trace file, "
                        f"not a {kind}{hint}")
    return _analyze(trace_or_path, **kwargs)


def analyze_dir(path, **kwargs):
    """One summary row per trace under ``path`` (see ``traceread.jobs.batch.analyze_dir``)."""
    from .jobs.batch import analyze_dir as _analyze_dir

    return _analyze_dir(path, **kwargs)


def all_jobs(paths_or_analyses, *, link_gbps=None, **kwargs):
    """The multi-rank jobs that trace files, Traces or Analyses form (one per rank; an nsys
    export of several GPU processes counts one rank per process): the same jobs -- windows,
    verdict, layout, levers -- as ``traceread analyze``, ``batch``, ``overlay``, ``diff``
    and the HTML report give (``traceread.jobs.multirank.jobs_of``). ``kwargs``: as for
    ``analyze`` (steps, window, step_pattern ...). (Not ``traceread.jobs``: that is the
    package of the batch and job code.)"""
    from .jobs.multirank import jobs_of

    return jobs_of(paths_or_analyses, link_gbps=link_gbps, **kwargs)


def job(paths_or_analyses, *, link_gbps=None, **kwargs):
    """The one job the inputs form (``all_jobs``); a ValueError when they form none or several.
    ``job.verdict()``, ``job.levers``, ``job.layout``, ``job.windows``, ``job.to_dict()``
    (the ``cross_rank`` object of ``analyze --format json``), ``job.analyses``."""
    found = all_jobs(paths_or_analyses, link_gbps=link_gbps, **kwargs)
    if len(found) != 1:
        raise ValueError(f"these traces form {len(found)} multi-rank jobs"
                         + (": use traceread.all_jobs()" if found else
                            " (give each rank's trace, or one export holding several processes)"))
    return found[0]


def diff(before, after, **kwargs):
    """Compare two traces, two ``Analysis`` objects or two directories (``traceread.diff``)."""
    from .analysis import Analysis
    from .diffs.paths import diff_paths
    from .diffs.trace import diff_analyses

    if isinstance(before, Analysis) and isinstance(after, Analysis):
        return diff_analyses(before, after)
    return diff_paths(str(before), str(after), **kwargs)


__all__ = ["load", "Trace", "TraceMeta", "TraceError", "KINDS", "COLUMNS", "SCHEMA",
           "read_parquet", "analyze", "Analysis", "analyze_dir", "capture", "diff", "job", "all_jobs",
           "__version__"]
