"""traceread: why is the GPU underfed? Offline analysis of torch.profiler and nsys traces."""
from __future__ import annotations

from .errors import TraceError
from .readers import read as load
from .table import COLUMNS, KINDS, SCHEMA, Trace, TraceMeta, read_parquet
from .analysis import Analysis, analyze
from .capture import capture

__version__ = "0.1.0"


def analyze_dir(path, **kwargs):
    """One summary row per trace under ``path`` (see ``traceread.batch.analyze_dir``)."""
    from .batch import analyze_dir as _analyze_dir

    return _analyze_dir(path, **kwargs)


def diff(before, after, **kwargs):
    """Compare two traces, two ``Analysis`` objects or two directories (``traceread.diff``)."""
    from .diff import diff_analyses, diff_paths

    if isinstance(before, Analysis) and isinstance(after, Analysis):
        return diff_analyses(before, after)
    return diff_paths(str(before), str(after), **kwargs)


__all__ = ["load", "Trace", "TraceMeta", "TraceError", "KINDS", "COLUMNS", "SCHEMA",
           "read_parquet", "analyze", "Analysis", "analyze_dir", "capture", "diff", "__version__"]
