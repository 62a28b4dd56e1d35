"""``traceread diff BEFORE AFTER`` on two ``traceread batch`` output folders.

A batch output holds, per trace, the ``figures`` row ``traceread diff`` compares
(``jobs.figures.figures``), its kernel table and kernel time per class; and, per
multi-rank job, its verdict (``jobs.parquet``). Traces pair up as in a folder
diff (``diffs.trace.pair_up``: same path under the batch's input folder, else the
same rank, ...); a trace that failed in the batch is listed as not compared.
Jobs pair up through their members: the AFTER job holding the partners of most
of a BEFORE job's ranks.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import TraceError
from ..jobs.output import TABLES_MARKER
from ..passes.attribution import CPU_CATEGORIES
from .trace import Matched, TraceDiff, aggregate, diff_sides, pair_up, user_batch

MARKER = Path("tables") / TABLES_MARKER


def is_batch_output(path: str | os.PathLike) -> bool:
    """A folder written by ``traceread batch -o``: summary.parquet and its tables/ marker."""
    p = Path(path)
    return p.is_dir() and (p / "summary.parquet").is_file() and (p / MARKER).is_file()


class BatchOutput:
    """The parts of one batch output folder a diff reads."""

    def __init__(self, path: str):
        try:
            self._read(path)
        except TraceError:
            raise
        except Exception as e:  # a damaged or half-written output: one clear line
            raise TraceError(path, f"cannot read this batch output: {type(e).__name__}: "
                                   f"{' '.join(str(e).split())[:200]}") from None

    def _read(self, path: str) -> None:
        self.path = path
        p = Path(path)
        self.summary = pd.read_parquet(p / "summary.parquet")
        if not (p / "tables" / "figures").is_dir() and self.summary["error"].isna().any():
            raise TraceError(path, "written by an older traceread batch (no tables/figures): "
                                   "run `traceread batch` on its traces again to diff it")
        self.tables = {name: _table(p / "tables" / name)
                       for name in ("figures", "kernels", "kernel_classes")}
        jobs = p / "jobs.parquet"
        self.jobs = pd.read_parquet(jobs) if jobs.is_file() else pd.DataFrame()

    def items(self) -> tuple[list[dict], list[dict]]:
        """(pairable traces, failed ones as {side, path, reason})."""
        files = [f for f in self.summary["file"] if isinstance(f, str)]
        root = os.path.commonpath(files) if len(files) > 1 else os.path.dirname(files[0]) if files else ""
        ok, failed = [], []
        for r in self.summary.to_dict(orient="records"):
            if isinstance(r.get("error"), str):
                failed.append({"path": r["file"], "reason": f"failed in the batch: {r['error']}"})
                continue
            rank = r.get("rank")
            rank = None if pd.isna(rank) else int(rank)
            ok.append({"rel": _rel(r["file"], root, rank), "path": r["file"], "rank": rank,
                       "item": r["trace_id"]})
        return ok, failed

    def side(self, trace_id: str) -> tuple:
        """(figures, kernels, kernel_classes) of one trace, as ``diffs.trace.diff_sides`` takes."""
        f = self.tables["figures"]
        row = f[f["trace_id"] == trace_id]
        if not len(row):
            raise TraceError(self.path, f"tables/figures has no row for {trace_id}")
        return (_figures(row.iloc[0].to_dict()), _of(self.tables["kernels"], trace_id),
                _of(self.tables["kernel_classes"], trace_id))


def _rel(file: str, root: str, rank: int | None) -> str:
    """A row's path under its batch's input folder; a process of a split nsys export
    (``report.sqlite#pid<PID>``) by its rank (``report.sqlite#rank0``): pids differ between
    two runs of one job, ranks do not."""
    rel = os.path.relpath(file, root) if root else file
    base, sep, pid = rel.rpartition("#pid")
    if sep and pid.isdigit() and rank is not None:
        return f"{base}#rank{rank}"
    return rel


def _table(path: Path) -> pd.DataFrame:
    if not path.is_dir():
        return pd.DataFrame({"trace_id": pd.Series([], dtype=str)})
    df = pd.read_parquet(path)
    df["trace_id"] = df["trace_id"].astype(str)
    return df


def _of(df: pd.DataFrame, trace_id: str) -> pd.DataFrame:
    return df[df["trace_id"] == trace_id].reset_index(drop=True)


def _figures(row: dict) -> dict[str, Any]:
    """A ``figures`` table row back to ``jobs.figures.figures``' dict (nulls to None)."""
    def val(k):
        v = row.get(k)
        return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v

    out = {k: val(k) for k in ("path", "format", "verdict")}
    out["verdict_summary"] = val("verdict_summary") or ""
    for k in ("steps", "gpu_window_ns", "gpu_idle_ns", "comm_ns", "exposed_comm_ns", "copy_ns",
              "exposed_copy_ns", "pageable_copy_ns", "compiles", "recompiles"):
        out[k] = int(val(k) or 0)
    for k in ("step_mean_ns", "step_median_ns", "promised_saving_ns", "program_step_ns",
              "first_step", "last_step", "iteration_ns"):   # none in an older batch output
        out[k] = None if val(k) is None else int(val(k))
    out["step_bound_by"] = val("step_bound_by")   # an older batch output has neither
    out["idle_by_cpu"] = {c: int(val(f"idle_{c}") or 0) for c in CPU_CATEGORIES}
    # written since the per-iteration diff; an older batch output has none of them
    out["window_mode"] = val("window_mode")
    out["iteration_evidence"] = val("iteration_evidence") or ""
    for k in ("window_ns", "compile_ns", "iterations"):
        out[k] = int(val(k) or 0)
    out["iterations"] = out["iterations"] or 1
    # written since the job/GPU warnings; an older batch output has neither (unknown)
    out["world_size"] = int(val("world_size") if val("world_size") is not None else -1)
    out["device_name"] = val("device_name") or ""
    return out


def diff_batches(before: str, after: str, batch: tuple | None = None) -> TraceDiff:
    """Diff two batch output folders: every matched trace, and every matched job."""
    b, a = BatchOutput(before), BatchOutput(after)
    (ib, fb), (ia, fa) = b.items(), a.items()
    if not ib or not ia:
        raise TraceError(before if not ib else after, "no analysed trace in this batch output")
    matched = pair_up(ib, ia, before, after)
    matched.unmatched += [dict(x, side="before") for x in fb] + [dict(x, side="after") for x in fa]
    user = user_batch(batch) if batch else None  # a batch output holds no shapes to read
    pairs = [diff_sides(b.side(x), a.side(y), label, user) for label, x, y in matched.pairs]
    jobs = job_changes(batch_jobs(b), batch_jobs(a), matched)
    return aggregate(pairs, matched, source="batch", jobs=jobs)


@dataclass
class JobView:
    """One side's multi-rank jobs as a diff sees them: ``jobs`` in ``multirank.JOB_COLUMNS``
    (batch's jobs.parquet), each trace's job and mean step time, by the key pairs use."""

    jobs: pd.DataFrame
    job_of: dict = field(default_factory=dict)    # trace key -> job name
    step_of: dict = field(default_factory=dict)   # trace key -> mean step ns (or None)


def batch_jobs(o: BatchOutput) -> JobView:
    s = o.summary
    job_of = {t: j for t, j in zip(s["trace_id"], s["job"]) if isinstance(j, str)}
    return JobView(o.jobs, job_of, {t: _pace(o.side(t)[0]) for t in job_of})


def _pace(fig: dict):
    """A trace's step as a diff reads it: the program's when the batch wrote it."""
    return fig.get("program_step_ns") or fig.get("step_mean_ns")


def traces_jobs(prepared: list[dict], steps: dict, alias: dict) -> JobView:
    """The jobs among a folder's traces (``multirank.prepare`` of each analysis);
    ``alias``: a trace's meta path -> its key in the pairs."""
    from ..jobs.multirank import jobs_of_prepared, jobs_table

    jobs = jobs_of_prepared(prepared)
    job_of = {alias.get(str(p), p): job.job for job in jobs for p in job.paths.values()}
    return JobView(jobs_table(jobs), job_of, {p: steps.get(p) for p in job_of})


def job_changes(b: JobView, a: JobView, matched: Matched) -> list[dict]:
    """One record per BEFORE job (and per AFTER job without a BEFORE one): straggler,
    its delay and cause, and the job's step time (its slowest rank's mean) on each side.
    A BEFORE job pairs with the AFTER job holding most of its traces' partners."""
    partner = {x: y for _, x, y in matched.pairs}
    out, seen = [], set()
    for name in _names(b.jobs):
        members = [t for t, j in b.job_of.items() if j == name]
        votes = pd.Series([a.job_of.get(partner[t]) for t in members if t in partner],
                          dtype=object).dropna()
        other = votes.value_counts().index[0] if len(votes) else None
        seen.add(other)
        out.append(_job_record(name, other, b, a, [(t, partner.get(t)) for t in members]))
    back = {y: x for x, y in partner.items()}
    for name in _names(a.jobs):
        if name not in seen:
            members = [t for t, j in a.job_of.items() if j == name]
            out.append(_job_record(None, name, b, a, [(back.get(t), t) for t in members]))
    return out


def _names(jobs: pd.DataFrame) -> list[str]:
    return [str(j) for j in jobs["job"]] if len(jobs) else []


def _job_record(nb, na, b: JobView, a: JobView, members: list) -> dict:
    sb = _job_side(b, nb, [x for x, _ in members if x])
    sa = _job_side(a, na, [y for _, y in members if y])
    mb, ma = sb.get("step_mean_ns"), sa.get("step_mean_ns")
    return {"job_before": nb, "job_after": na,
            "ranks": sum(1 for x, y in members if x and y),
            "before": sb or None, "after": sa or None,
            "straggler_changed": sb.get("straggler_rank") != sa.get("straggler_rank"),
            "verdict_changed": (sb.get("status"), sb.get("straggler_rank"), sb.get("cause")) !=
                               (sa.get("status"), sa.get("straggler_rank"), sa.get("cause")),
            "step_pct": round(100.0 * (ma - mb) / mb, 2) if mb and ma is not None else None}


def _job_side(v: JobView, name: str | None, keys: list) -> dict[str, Any]:
    if name is None:
        return {}
    row = v.jobs[v.jobs["job"] == name].iloc[0].to_dict()
    steps = [v.step_of.get(k) for k in keys]
    steps = [int(s) for s in steps if s is not None]
    return {"job": name, "world_size": int(row["world_size"]),
            "straggler_rank": -1 if pd.isna(row["straggler_rank"]) else int(row["straggler_rank"]),
            "collective": row.get("straggler_collective") or None,
            "late_by_ns": int(row["late_by_ns"] or 0), "cause": row.get("cause") or None,
            "locality": row.get("locality") or None, "summary": str(row.get("summary") or ""),
            "status": row.get("status") or None,
            "step_mean_ns": max(steps) if steps else None}
