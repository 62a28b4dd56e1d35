"""Batch analysis of a directory of traces: one row per trace, per-trace tables, and the
cross-rank summary of every multi-rank job found.

``analyze_file`` is the unit of work: it never raises and returns plain picklable data
(a summary row, per-trace DataFrames, the small per-rank input of cross-rank analysis),
so it runs unchanged in-process, in a local process pool or on a Dask cluster. Dask is
imported only when a scheduler address is given.

Inputs may be local paths or fsspec URLs (``s3://bucket/run/``); fsspec is imported
only for URLs.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from .detect import GZIP_MAGIC, SQLITE_MAGIC
from .errors import TraceError

SUMMARY_COLUMNS = [
    "file", "trace_id", "format", "rank", "world_size", "job", "events", "steps", "step_mean_ms",
    "idle_pct", "top_drain", "top_drain_pct", "top_cpu", "top_cpu_pct", "comm_ms", "exposed_comm_pct",
    "recompiles", "verdict", "error", "seconds",
]
# Per-trace tables written to the partitioned dataset (Analysis attribute or "collectives").
TABLES = ("steps", "gaps", "kernels", "collectives", "devices", "top_ops")
# Names that make a file a candidate even when its content does not look like a trace,
# so that it is reported (as an error row) rather than silently skipped.
TRACE_SUFFIXES = (".json", ".gz", ".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")


# ----------------------------------------------------------------------------- discovery

def is_url(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def _looks_like_trace(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return head.startswith(SQLITE_MAGIC) or head.startswith(GZIP_MAGIC) or text[:1] in (b"{", b"[")


def discover(root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Candidate trace files under ``root`` (recursively) and the files skipped.

    A file is a candidate when its first bytes are JSON, gzip or SQLite, or when its
    name looks like a trace (then a non-trace is reported as an error, not lost).
    ``root`` may be a single file. Sorted, deterministic.
    """
    if is_url(root):
        return _discover_url(str(root))
    root = Path(root)
    if root.is_file():
        return [str(root)], []
    if not root.is_dir():
        raise TraceError(root, "no such file or directory")
    found, skipped = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            try:
                with open(p, "rb") as f:
                    head = f.read(64)
            except OSError:
                head = b""
            if _looks_like_trace(head) or name.lower().endswith(TRACE_SUFFIXES):
                found.append(p)
            else:
                skipped.append(p)
    return found, skipped


def _discover_url(url: str) -> tuple[list[str], list[str]]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    paths = [root] if fs.isfile(root) else sorted(fs.find(root))
    found, skipped = [], []
    for p in paths:
        with fs.open(p, "rb") as f:
            head = f.read(64)
        full = p if "://" in p else f"{protocol}://{p}"
        (found if _looks_like_trace(head) or p.lower().endswith(TRACE_SUFFIXES) else skipped).append(full)
    return found, skipped


def _size(path: str) -> int:
    try:
        return os.path.getsize(path) if not is_url(path) else 0
    except OSError:
        return 0


# ----------------------------------------------------------------------------- the worker

def analyze_file(path: str, step_pattern: str | None = None) -> dict[str, Any]:
    """Analyse one file. Never raises: failures become the row's ``error``.

    Returns ``{"row": dict, "tables": {name: DataFrame}, "rank_input": RankInput|None}``.
    """
    t0 = time.perf_counter()
    row: dict[str, Any] = {c: None for c in SUMMARY_COLUMNS}
    row.update(file=str(path), rank=-1, world_size=-1)
    tables: dict[str, pd.DataFrame] = {}
    rank_input = verdict = None
    try:
        with _local_copy(path) as local:
            from .readers import read

            trace = read(local)
            trace.meta.path = str(path)
        row.update(format=trace.meta.format, rank=int(trace.meta.rank),
                   world_size=int(trace.meta.world_size), events=len(trace))
        from .analysis import analyze

        a = analyze(trace, step_pattern=step_pattern)
        row.update(summary_fields(a))
        verdict = a.verdict  # the job may adjust it (multirank.adjust_rank_verdicts)
        from . import multirank
        from .passes.nccl import collective_instances

        coll = collective_instances(trace.events)
        rank_input = multirank.rank_input(trace, collectives=coll, window=multirank.analysis_window(a))
        if row["rank"] < 0:
            row["rank"] = rank_input.rank
        for name in TABLES:
            df = coll if name == "collectives" else getattr(a, name, None)
            if isinstance(df, pd.DataFrame):
                tables[name] = df
    except TraceError as e:
        row["error"] = e.reason
    except MemoryError:
        row["error"] = "out of memory"
    except Exception as e:  # one bad file must not stop the batch
        row["error"] = f"internal error: {type(e).__name__}: {' '.join(str(e).split())}"
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return {"row": row, "tables": tables if row["error"] is None else {},
            "rank_input": rank_input if row["error"] is None else None,
            "verdict": verdict if row["error"] is None else None}


class _local_copy:
    """Context manager yielding a local path for a local path or an fsspec URL."""

    def __init__(self, path: str):
        self.path = str(path)
        self.tmp: str | None = None

    def __enter__(self) -> str:
        if not is_url(self.path):
            return self.path
        import fsspec

        suffix = "".join(Path(self.path.split("?")[0]).suffixes[-2:])
        fd, self.tmp = tempfile.mkstemp(prefix="traceread-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as out, fsspec.open(self.path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
        except FileNotFoundError:
            raise TraceError(self.path, "no such file") from None
        except OSError as e:
            raise TraceError(self.path, f"cannot read: {e}") from None
        return self.tmp

    def __exit__(self, *exc) -> None:
        if self.tmp:
            os.unlink(self.tmp)


def summary_fields(a) -> dict[str, Any]:
    """The summary-row fields of one ``Analysis``."""
    ev = a.verdict.get("evidence", {}) if isinstance(a.verdict, dict) else {}
    by_drain = {k: v for k, v in (a.attribution.get("by_drain") or {}).items() if v}
    by_cpu = {k: v for k, v in (a.attribution.get("by_cpu") or {}).items() if v}
    idle = ev.get("idle_ns") or 0
    top_drain = max(by_drain.items(), key=lambda kv: kv[1]) if by_drain else (None, 0)
    top_cpu = max(by_cpu.items(), key=lambda kv: kv[1]) if by_cpu else (None, 0)
    stats = a.step_stats or {}
    comm = int(a.nccl["comm_ns"].sum()) if len(a.nccl) and "comm_ns" in a.nccl else 0
    return {
        "steps": int(stats.get("count", 0)),
        "step_mean_ms": stats["mean_ns"] / 1e6 if stats.get("mean_ns") is not None else None,
        "idle_pct": ev.get("idle_pct"),
        "top_drain": top_drain[0],
        "top_drain_pct": round(100.0 * top_drain[1] / idle, 2) if idle and top_drain[0] else None,
        "top_cpu": top_cpu[0],
        "top_cpu_pct": round(100.0 * top_cpu[1] / idle, 2) if idle and top_cpu[0] else None,
        "comm_ms": comm / 1e6,
        "exposed_comm_pct": ev.get("exposed_comm_pct"),
        "recompiles": int((a.compile or {}).get("recompiles", 0) or 0),
        "verdict": a.verdict.get("bound") if isinstance(a.verdict, dict) else None,
    }


# ----------------------------------------------------------------------------- running

ProgressFn = Callable[[dict], None]


def run_local(paths: list[str], jobs: int = 1, step_pattern: str | None = None,
              on_result: ProgressFn | None = None) -> list[dict]:
    """Run ``analyze_file`` over ``paths``: in-process for one job, else a process pool.

    Results come back in the order of ``paths``; the biggest files start first.
    """
    results: dict[int, dict] = {}
    order = sorted(range(len(paths)), key=lambda i: -_size(paths[i]))
    if jobs <= 1 or len(paths) <= 1:
        for i in order:
            results[i] = analyze_file(paths[i], step_pattern)
            if on_result:
                on_result(results[i])
        return [results[i] for i in range(len(paths))]
    import concurrent.futures as cf
    import multiprocessing as mp

    # forkserver: no fork of a threaded parent (progress bar, notebooks); the preload
    # makes each worker start with pandas/pyarrow/traceread already imported.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["traceread.batch", "traceread.analysis", "traceread.readers.kineto"])
    with cf.ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=ctx) as pool:
        futs = {pool.submit(analyze_file, paths[i], step_pattern): i for i in order}
        for fut in cf.as_completed(futs):
            i = futs[fut]
            try:
                results[i] = fut.result()
            except Exception as e:  # a worker died (killed, OOM): the file is an error row
                results[i] = _crashed(paths[i], e)
            if on_result:
                on_result(results[i])
    return [results[i] for i in range(len(paths))]


def run_dask(paths: list[str], scheduler: str, step_pattern: str | None = None,
             on_result: ProgressFn | None = None) -> list[dict]:
    """Same work on an existing Dask distributed cluster at ``scheduler``."""
    from dask.distributed import Client, as_completed

    results: dict[int, dict] = {}
    with Client(scheduler, set_as_default=False) as client:
        futs = client.map(analyze_file, paths, step_pattern=step_pattern, pure=False)
        index = {f.key: i for i, f in enumerate(futs)}
        for fut in as_completed(futs, loop=client.loop):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except Exception as e:
                results[i] = _crashed(paths[i], e)
            fut.release()
            if on_result:
                on_result(results[i])
    return [results[i] for i in range(len(paths))]


def _crashed(path: str, e: BaseException) -> dict:
    row = {c: None for c in SUMMARY_COLUMNS}
    row.update(file=str(path), rank=-1, world_size=-1,
               error=f"worker failed: {type(e).__name__}: {' '.join(str(e).split())}")
    return {"row": row, "tables": {}, "rank_input": None}


# ----------------------------------------------------------------------------- assembling

@dataclass
class BatchResult:
    summary: pd.DataFrame                      # one row per file
    tables: dict[str, pd.DataFrame]            # name -> rows of every trace, with "trace_id"
    ranks: pd.DataFrame                        # one row per (job, rank)
    matches: pd.DataFrame                      # one row per (job, collective instance, rank)
    jobs: list = field(default_factory=list)   # multirank.JobResult
    skipped: list = field(default_factory=list)

    @property
    def failed(self) -> int:
        return int(self.summary["error"].notna().sum())


def assemble(results: list[dict], skipped: Iterable[str] = ()) -> BatchResult:
    from . import multirank

    rows = [r["row"] for r in results]
    width = max(5, len(str(max(len(rows) - 1, 0))))
    for i, row in enumerate(rows):
        row["trace_id"] = f"t{i:0{width}d}"
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for c in ("rank", "world_size", "events", "steps", "recompiles"):
        summary[c] = summary[c].astype("Int64")
    for c in ("step_mean_ms", "idle_pct", "top_drain_pct", "top_cpu_pct", "comm_ms", "exposed_comm_pct", "seconds"):
        summary[c] = summary[c].astype("float64")
    inputs = [(i, r["rank_input"]) for i, r in enumerate(results) if r["rank_input"] is not None]
    jobs = multirank.analyze_inputs([ri for _, ri in inputs])
    job_of = {}
    ranks, matches = [], []
    for job in jobs:
        for rank, path in job.paths.items():
            job_of[path] = job.job
        s = job.straggler
        pr = job.per_rank.assign(job=job.job, world_size=job.world_size,
                                 straggler=lambda d, s=s: d["rank"] == s["rank"],
                                 straggler_delay_ns=s["median_delay_ns"],
                                 step_skew_mean_ns=int(job.steps["skew_ns"].mean()) if len(job.steps) else 0)
        ranks.append(pr)
        matches.append(job.matches.assign(job=job.job))
    summary["job"] = [job_of.get(f) for f in summary["file"]]
    _job_verdicts(summary, results, jobs)
    tables: dict[str, list] = {}
    for i, r in enumerate(results):
        for name, df in r["tables"].items():
            if len(df):
                tables.setdefault(name, []).append(df.assign(trace_id=rows[i]["trace_id"]))
    merged = {name: pd.concat(parts, ignore_index=True) for name, parts in tables.items()}
    ranks_df = pd.concat(ranks, ignore_index=True) if ranks else pd.DataFrame(
        columns=["job", "rank", "file", "matched", "comm_ns", "wait_ns", "transfer_ns", "times_last"])
    if len(ranks_df):
        first = ["job", "rank", "file", "world_size", "straggler"]
        ranks_df = ranks_df[first + [c for c in ranks_df.columns if c not in first]]
    matches_df = pd.concat(matches, ignore_index=True) if matches else pd.DataFrame()
    return BatchResult(summary=summary, tables=merged, ranks=ranks_df, matches=matches_df,
                       jobs=jobs, skipped=list(skipped))


def _job_verdicts(summary: pd.DataFrame, results: list[dict], jobs: list) -> None:
    """Each job member's ``verdict`` as ``traceread analyze`` gives it for the job
    (the straggler names its own cause; see docs/batch.md)."""
    from .multirank import adjust_rank_verdicts

    row_of = {r["row"]["file"]: i for i, r in enumerate(results) if r.get("verdict")}
    for job in jobs:
        members = {rank: row_of[p] for rank, p in job.paths.items() if p in row_of}
        new = adjust_rank_verdicts({rank: results[i]["verdict"] for rank, i in members.items()}, job)
        for rank, i in members.items():
            summary.loc[i, "verdict"] = new[rank].get("bound")


# ----------------------------------------------------------------------------- writing

def write(result: BatchResult, out_dir: str | os.PathLike) -> Path:
    """summary.parquet/.csv, ranks.parquet, jobs.parquet, matches.parquet, jobs.json and
    tables/<name>/trace_id=<id>/*.parquet (hive-partitioned, one dataset per table)."""
    import json

    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result.summary.to_parquet(out / "summary.parquet", index=False)
    result.summary.to_csv(out / "summary.csv", index=False)
    pq.write_table(_to_arrow(result.ranks), out / "ranks.parquet")
    pq.write_table(_to_arrow(result.matches), out / "matches.parquet")
    from .multirank import jobs_table  # one row per multi-rank job: its verdict in columns

    pq.write_table(_to_arrow(jobs_table(result.jobs)), out / "jobs.parquet")
    (out / "jobs.json").write_text(json.dumps([j.to_dict() for j in result.jobs], indent=2, default=str))
    tables_dir = out / "tables"
    if tables_dir.exists():
        shutil.rmtree(tables_dir)
    for name, df in result.tables.items():
        ds.write_dataset(_to_arrow(df), tables_dir / name, format="parquet",
                         partitioning=["trace_id"], partitioning_flavor="hive",
                         existing_data_behavior="overwrite_or_ignore")
    return out


def _to_arrow(df: pd.DataFrame):
    """DataFrame -> Arrow; categories become plain strings, mixed-type columns strings."""
    import pyarrow as pa

    df = df.copy()
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = df[c] = s.astype(object).where(s.notna(), None)
        if s.dtype == object:
            try:
                pa.array(s, from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                df[c] = s.map(lambda v: None if v is None or v is np.nan else str(v))
    return pa.Table.from_pandas(df, preserve_index=False)


# ----------------------------------------------------------------------------- entry point

def run(path: str | os.PathLike, *, jobs: int | None = None, scheduler: str | None = None,
        step_pattern: str | None = None, on_result: ProgressFn | None = None,
        paths: list[str] | None = None) -> BatchResult:
    """Discover and analyse every trace under ``path`` (or the given ``paths``)."""
    skipped: list[str] = []
    if paths is None:
        paths, skipped = discover(path)
    if scheduler:
        results = run_dask(paths, scheduler, step_pattern, on_result)
    else:
        results = run_local(paths, jobs or os.cpu_count() or 1, step_pattern, on_result)
    return assemble(results, skipped)


def analyze_dir(path: str | os.PathLike, *, jobs: int | None = None, out_dir: str | os.PathLike | None = None,
                scheduler: str | None = None, step_pattern: str | None = None) -> pd.DataFrame:
    """One summary row per trace under ``path``; also writes ``out_dir`` when given.

    The full result (per-trace tables, cross-rank ``ranks``) is ``run(path)``.
    """
    res = run(path, jobs=jobs, scheduler=scheduler, step_pattern=step_pattern)
    if out_dir is not None:
        write(res, out_dir)
    return res.summary


__all__ = ["discover", "analyze_file", "run_local", "run_dask", "assemble", "write", "run",
           "analyze_dir", "BatchResult", "SUMMARY_COLUMNS"]
