"""traceread: why is the GPU underfed? Offline analysis of torch.profiler and nsys traces."""
from __future__ import annotations

from .errors import TraceError
from .readers import read as load
from .table import COLUMNS, KINDS, SCHEMA, Trace, TraceMeta, read_parquet
from .analysis import Analysis, analyze

__version__ = "0.1.0"

__all__ = ["load", "Trace", "TraceMeta", "TraceError", "KINDS", "COLUMNS", "SCHEMA",
           "read_parquet", "analyze", "Analysis", "__version__"]
