"""Jobs: many traces at once (docs/batch.md).

``batch`` -- ``traceread batch`` / ``analyze_dir``: every trace of a folder in isolated
worker processes (or on a Dask cluster), assembled into one result; ``output`` -- what
``batch -o OUT`` writes (the summary columns, the parquet tables, atomically);
``discover`` -- which files under a folder are traces; ``figures`` -- the per-trace
figures a batch stores and a diff compares; ``multirank`` -- the cross-rank analysis of
one distributed job (its submodules load on first use). Rendering lives in
``render/cross_rank.py`` and ``render/html_batch.py``.
"""
