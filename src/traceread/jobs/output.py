"""What ``traceread batch -o OUT`` writes: the summary row's columns, the per-trace
tables, and the writing itself -- atomic (``outputs.Staging``), refusing an OUT that
would destroy an input or foreign data, with a partial summary while the batch runs.

The batch parent imports this module while its workers run: numpy, pandas and pyarrow
are imported only by the writing itself."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..errors import TraceError
from ..outputs import Staging, fresh_file, make_dir, same_file
from ..render.safe import encodable, encodable_all
from .discover import is_url

SUMMARY_COLUMNS = [
    "file", "trace_id", "format", "rank", "world_size", "job", "events", "steps", "step_mean_ms",
    "idle_pct", "top_drain", "top_drain_pct", "top_cpu", "top_cpu_pct", "comm_ms", "exposed_comm_pct",
    "recompiles", "verdict", "error", "seconds", "truncated_at_byte",
]
# Per-trace tables written to the partitioned dataset (Analysis attribute, "collectives",
# or "figures": the one row ``traceread diff`` compares, see jobs/figures.py).
TABLES = ("steps", "gaps", "kernels", "kernel_classes", "collectives", "devices", "top_ops",
          "figures")


def write(result, out_dir: str | os.PathLike, report: str | None = None) -> Path:
    """A ``batch.BatchResult`` as summary.parquet/.csv, ranks.parquet, jobs.parquet,
    matches.parquet, jobs.json, tables/<name>/trace_id=<id>/*.parquet (hive-partitioned,
    one dataset per table) and, given its text, report.html.

    Everything is built beside its target (``outputs.Staging``) and swapped in only
    when all of it is written: a failed write (full disk, file-size limit) keeps the
    previous run's outputs, tables/ included. OUT itself is created, never its parents.
    """
    import json

    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from .multirank import jobs_table  # one row per multi-rank job: its verdict in columns

    out = Path(out_dir)
    raw = list(getattr(result, "file_bytes", None) or [])
    if len(raw) != len(result.summary) or not all(isinstance(b, bytes) for b in raw):
        raw = [os.fsencode(f) if isinstance(f, str) else b"" for f in result.summary["file"]]
    inputs = [os.fsdecode(b) for b in raw if b and not is_url(os.fsdecode(b))]
    check_out_dir(out, inputs)
    make_dir(out)
    with Staging(out, inputs) as st:
        # ``file`` is the name as text (a byte that is not UTF-8 shown \xNN); the Parquet
        # also keeps the exact bytes, ``file_bytes``, to open the file again
        pq.write_table(_to_arrow(result.summary).append_column(
            "file_bytes", pa.array(raw, pa.binary())), st.file("summary.parquet"))
        result.summary.to_csv(st.file("summary.csv"), index=False)
        pq.write_table(_to_arrow(result.ranks), st.file("ranks.parquet"))
        pq.write_table(_to_arrow(result.matches), st.file("matches.parquet"))
        pq.write_table(_to_arrow(jobs_table(result.jobs)), st.file("jobs.parquet"))
        with open(st.file("jobs.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(encodable_all([j.to_dict() for j in result.jobs]), indent=2,
                               default=str))
        if report is not None:
            with open(st.file("report.html"), "w", encoding="utf-8") as f:
                f.write(encodable(report))
        tables_dir = Path(st.dir("tables"))
        for name, df in result.tables.items():
            ds.write_dataset(_to_arrow(df), tables_dir / name, format="parquet",
                             partitioning=["trace_id"], partitioning_flavor="hive",
                             existing_data_behavior="overwrite_or_ignore")
        # the marker is the manifest of what this run wrote (its content, not its names, is
        # what a later batch over a folder holding OUT recognises: jobs/discover.py)
        (tables_dir / TABLES_MARKER).write_text(json.dumps(_manifest(st, tables_dir)))
        st.commit()
    partial = out / PARTIAL_SUMMARY
    if partial.is_file() and not partial.is_symlink():
        partial.unlink()
    return out


OUTPUT_FILES = ("summary.parquet", "summary.csv", "ranks.parquet", "matches.parquet",
                "jobs.parquet", "jobs.json", "report.html")
PARTIAL_SUMMARY = "summary.partial.csv"
TABLES_MARKER = ".traceread-batch"


def _manifest(st, tables_dir: Path) -> dict:
    """{"written_by", "files": {path relative to OUT: [size, sha256]}} of the staged outputs."""
    from .discover import MANIFEST_KIND, file_digest

    files = {name: file_digest(tmp) for name, tmp in st.files.items()}
    for dirpath, _, filenames in os.walk(tables_dir):
        for f in filenames:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, tables_dir).replace(os.sep, "/")
            files["tables/" + rel] = file_digest(full)
    return {"written_by": MANIFEST_KIND, "files": files}


def check_out_dir(out: str | os.PathLike, inputs: Iterable[str]) -> None:
    """Refuse an output directory whose writing would destroy an input or foreign data.

    ``write`` replaces OUT/tables and the output files: an input that *is* one of
    them (by identity: a hardlink or symlink counts), or is stored under OUT/tables/
    (``batch DIR -o DIR`` with traces under DIR/tables/), would be lost; a tables/
    directory not made by traceread is never removed.
    """
    out = Path(out).resolve()
    tables = out / "tables"
    owned = [out / f for f in OUTPUT_FILES + (PARTIAL_SUMMARY,)]
    for p in inputs:
        if is_url(p):
            continue
        try:
            rp = Path(p).resolve()
        except (RuntimeError, OSError):  # a symlink loop is no output file: its row says why
            continue
        if rp in owned or tables in rp.parents or any(same_file(p, o) for o in owned):
            raise TraceError(out, f"input {p} would be overwritten or deleted by writing the "
                                  "results here: choose another output directory")
    for o in owned + [tables]:
        if o.is_symlink():  # checked before the (long) batch runs, and again when writing
            raise TraceError(o, "is a symbolic link: refusing to write through it "
                                "(remove the link or choose another output directory)")
    if tables.is_dir() and not _ours(tables):
        raise TraceError(out, f"{tables} exists and was not written by traceread batch: "
                              "not replacing it (choose another output directory)")


def _ours(tables: Path) -> bool:
    """A tables/ directory written by traceread batch: our marker, or (older
    versions, no marker) nothing but <table>/trace_id=<id>/*.parquet."""
    if (tables / TABLES_MARKER).exists():
        return True
    for dirpath, dirnames, filenames in os.walk(tables):
        rel = Path(dirpath).relative_to(tables).parts
        if len(rel) == 0 and (filenames or not set(dirnames) <= set(TABLES)):
            return False
        if len(rel) == 1 and (filenames or not all(d.startswith("trace_id=") for d in dirnames)):
            return False
        if len(rel) == 2 and (dirnames or not all(f.endswith(".parquet") for f in filenames)):
            return False
    return True


class PartialSummary:
    """OUT/summary.partial.csv: one row appended (and flushed) per finished file.

    A batch killed midway leaves the rows of every file it finished; the final
    ``write`` removes it.
    """

    def __init__(self, out_dir: str | os.PathLike):
        import csv

        out = make_dir(out_dir)  # the directory named, never its parents
        self.f = fresh_file(out / PARTIAL_SUMMARY, newline="", encoding="utf-8")
        self.w = csv.writer(self.f)
        self.w.writerow(SUMMARY_COLUMNS)
        self.f.flush()

    def add(self, res: dict) -> None:
        # an nsys export split by process: a row for each (``batch.analyze_file``'s "more")
        for r in (res, *(res.get("more") or ())):
            row = r["row"]   # a name's bytes that are not UTF-8 as \xNN: the row is never lost
            self.w.writerow(["" if row.get(c) is None else encodable(row.get(c)) if isinstance(
                row.get(c), str) else row.get(c) for c in SUMMARY_COLUMNS])
        self.f.flush()

    def close(self) -> None:
        self.f.close()


# Columns whose -1 means "unknown" / "none" in the analysis' frames: null in the Parquet a
# user reads (as summary's rank), so a filter or a mean never takes -1 for a value.
UNKNOWN_IS_MINUS_ONE = frozenset({
    "rank", "world_size", "step", "step_index", "pid", "tid", "gpu_start", "gpu_end",
    "msg_nelems", "msg_bytes", "group_size", "seq", "straggler_rank", "waits_for"})


def _to_arrow(df):
    """DataFrame -> Arrow; categories become plain strings, mixed-type columns strings,
    -1 in an UNKNOWN_IS_MINUS_ONE column null."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    df = df.copy()
    for c in df.columns:
        if c in UNKNOWN_IS_MINUS_ONE and pd.api.types.is_integer_dtype(df[c]) \
                and (df[c] == -1).any():
            df[c] = df[c].astype("Int64").mask(df[c] == -1)
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = df[c] = s.astype(object).where(s.notna(), None)
        if s.dtype == object:
            try:
                pa.array(s, from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                df[c] = s.map(lambda v: None if v is None or v is np.nan else str(v))
    return pa.Table.from_pandas(df, preserve_index=False)
