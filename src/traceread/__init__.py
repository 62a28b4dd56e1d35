"""traceread: why is the GPU underfed? Offline analysis of torch.profiler and nsys traces."""
from __future__ import annotations

from .errors import TraceError
from .readers import read as load
from .table import COLUMNS, KINDS, SCHEMA, Trace, TraceMeta, read_parquet
from .analysis import Analysis, analyze

__version__ = "0.1.0"


def analyze_dir(path, **kwargs):
    """One summary row per trace under ``path`` (see ``traceread.batch.analyze_dir``)."""
    from .batch import analyze_dir as _analyze_dir

    return _analyze_dir(path, **kwargs)


__all__ = ["load", "Trace", "TraceMeta", "TraceError", "KINDS", "COLUMNS", "SCHEMA",
           "read_parquet", "analyze", "Analysis", "analyze_dir", "__version__"]
