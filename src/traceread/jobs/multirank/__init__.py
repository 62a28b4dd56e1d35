"""Cross-rank analysis of distributed jobs (see docs/batch.md, "Multi-rank jobs").

``inputs`` -- what is kept per rank; ``grouping`` -- which traces form a job;
``match`` -- collective matching; ``clocks`` -- clock alignment; ``job`` -- waits,
stragglers, steps; ``why`` -- the straggler's cause; ``metrics`` -- seed metrics;
``groups`` -- per group of ranks (pipeline stages, collective groups); ``verdicts`` -- the job verdict and its effect on each rank's verdict;
``nsys_split`` -- one nsys export holding several ranks.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .job import JobResult

# The submodules load on first use: a single-trace ``analyze`` needs none of them, and
# importing them all (pandas-heavy, ~120 KB of source) cost every run (docs/performance.md,
# "CLI start-up").
_LAZY = {
    "group_jobs": "grouping",
    "RankInput": "inputs", "collective_table": "inputs", "rank_from_name": "inputs",
    "rank_input": "inputs", "step_table": "inputs",
    "JobResult": "job", "analyze_inputs": "job", "analyze_job": "job", "analyze_traces": "job",
    "match_collectives": "job", "step_skew": "job",
    "adjust_rank_verdicts": "verdicts", "job_verdict": "verdicts",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # once loaded, a plain attribute (monkeypatch sees it)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _get(name: str):
    """``name`` as this module holds it now (loaded on demand, or as a test replaced it)."""
    return globals()[name] if name in globals() else __getattr__(name)


def jobs_of_analyses(analyses: list, link_gbps: float | None = None) -> list[JobResult]:
    """Jobs formed by the traces of ``analyses`` (``Analysis`` objects holding their trace):
    several traces of one job, and each nsys export holding several GPU processes."""
    from ...readers.nsys_split import split_processes

    have = [a for a in analyses if a.trace is not None]
    traces = [a.trace for a in have]
    analyze_traces = _get("analyze_traces")
    jobs = analyze_traces(traces, link_gbps, [analysis_window(a) for a in have]) if len(traces) >= 2 else []
    for a, t in zip(have, traces):
        parts = split_processes(t)
        if parts:
            for res in analyze_traces(parts, link_gbps, [analysis_window(a)] * len(parts)):
                res.job = f"job{len(jobs)}"
                jobs.append(res)
    return jobs


def prepare(a, with_input: bool = True) -> dict:
    """What the job analysis needs of one ``Analysis`` -- its ``RankInput`` and, for an
    nsys export of several GPU processes, one per process -- so the caller can drop the
    trace at once (``analyze`` of 64 ranks keeps 64 small inputs, not 64 event tables)."""
    from ...readers.nsys_split import split_processes

    win = analysis_window(a)
    parts = split_processes(a.trace)
    rank_input = _get("rank_input") if with_input or parts else None
    return {"path": a.meta.path, "input": rank_input(a.trace, window=win) if with_input else None,
            "split": [rank_input(p, window=win) for p in parts]}


def jobs_of_prepared(prepared: list[dict], link_gbps: float | None = None) -> list[JobResult]:
    """``jobs_of_analyses`` from ``prepare`` outputs."""
    inputs = [p["input"] for p in prepared if p["input"] is not None]
    jobs = _get("analyze_inputs")(inputs, link_gbps) if len(inputs) >= 2 else []
    for p in prepared:
        if p["split"]:
            for res in _get("analyze_inputs")(p["split"], link_gbps):
                res.job = f"job{len(jobs)}"
                jobs.append(res)
    return jobs


def analysis_window(a) -> tuple[int, int] | None:
    """The [start, end) an ``Analysis`` analysed (None: the whole trace): the job uses the
    same steady-state steps as the per-rank reports."""
    win = getattr(a, "window", None)
    if win is None or getattr(win, "mode", "whole_trace") == "whole_trace":
        return None
    return int(win.start), int(win.end)


def apply_job_verdicts(analyses: list, jobs: list[JobResult]) -> None:
    """Replace each member rank's ``Analysis.verdict`` by its job-adjusted verdict."""
    by_path = {a.meta.path: a for a in analyses}
    for res in jobs:
        members = {r: by_path[p] for r, p in res.paths.items() if p in by_path}
        new = _get("adjust_rank_verdicts")({r: a.verdict for r, a in members.items()}, res)
        for r, a in members.items():
            a.verdict = new[r]


JOB_COLUMNS = ["job", "world_size", "ranks", "backend", "source", "matched_instances", "unmatched",
               "mismatched", "straggler_rank", "straggler_collective", "late_by_ns", "times_late",
               "instances", "cause", "cause_ns_per_collective", "locality", "step_time_spread_pct",
               "max_clock_offset_ns", "max_clock_spread_ns", "status", "summary"]


def jobs_table(results: list[JobResult]):
    """One row per job (``batch``'s ``jobs.parquet``): the job verdict in columns."""
    import pandas as pd

    rows = []
    for res in results:
        jv = res.verdict()
        s = res.straggler
        rec = s.get("by_collective", {}).get(jv.get("collective") or "", {})
        why = rec.get("why") or s.get("why") or {}
        rows.append({
            "job": res.job, "world_size": res.world_size, "ranks": len(res.ranks), "backend": res.backend,
            "source": res.source, "matched_instances": int(res.matches["instance"].nunique()) if len(res.matches) else 0,
            "unmatched": len(res.unmatched), "mismatched": int(res.mismatched),
            "straggler_rank": jv["straggler_rank"], "straggler_collective": jv.get("collective"),
            "late_by_ns": jv["late_by_ns"], "times_late": rec.get("times_late", 0),
            "instances": rec.get("instances", 0), "cause": jv["cause"],
            "cause_ns_per_collective": int(why.get("cause_ns", 0) // max(why.get("windows", 0), 1)),
            "locality": jv["locality"], "step_time_spread_pct": (res.seed or {}).get("step_time_spread_pct"),
            "max_clock_offset_ns": max((abs(o["offset_ns"]) for o in res.clock.values()), default=0),
            "max_clock_spread_ns": max((o["spread_ns"] for o in res.clock.values()), default=0),
            "status": jv["status"], "summary": jv["summary"]})
    df = pd.DataFrame(rows, columns=JOB_COLUMNS)
    # no straggler: null, not -1, in jobs.parquet
    df["straggler_rank"] = df["straggler_rank"].astype("Int64").mask(df["straggler_rank"] < 0)
    return df


__all__ = ["RankInput", "JobResult", "step_table", "collective_table", "rank_input", "group_jobs",
           "match_collectives", "step_skew", "analyze_job", "analyze_traces", "analyze_inputs",
           "rank_from_name", "jobs_of_analyses", "apply_job_verdicts",
           "adjust_rank_verdicts", "job_verdict", "jobs_table", "JOB_COLUMNS", "analysis_window",
           "prepare", "jobs_of_prepared"]
