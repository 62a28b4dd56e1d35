"""traceread's benchmark harness: ``python -m benchmarks SUBCOMMAND --help`` (repo root).

Every measurement goes through ``harness.py``: a baseline measured in the same run
(``--baseline main`` / ``--baseline-src DIR``), each figure from a fresh process,
interleaved repeats, one markdown table (docs/performance.md) with the ratios.
"""
