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
    several traces of one job, and each nsys export holding several GPU processes -- with
    each rank's window, the job's layout and levers (``build_jobs``)."""
    have = [a for a in analyses if a.trace is not None]
    return build_jobs([prepare(a, with_input=len(have) >= 2) for a in have], link_gbps)


def prepare(a, with_input: bool = True) -> dict:
    """What the job model needs of one ``Analysis`` -- its ``RankInput`` (and, for an nsys
    export of several GPU processes, one per process), its analysis window and its
    ``parallelism`` -- so the caller can drop the trace at once (``analyze`` of 64 ranks
    keeps 64 small inputs, not 64 event tables)."""
    from ...readers.nsys_split import split_processes

    win = analysis_window(a)
    parts = split_processes(a.trace) if a.trace is not None else []
    rank_input = _get("rank_input") if with_input or parts else None
    prog = getattr(a, "steps", None)   # the analysis' program steps: one step definition
    return {"path": a.meta.path,
            "input": rank_input(a.trace, window=win, program=prog) if with_input else None,
            "split": [rank_input(p, window=win) for p in parts], "window": win,
            "parallelism": getattr(a, "parallelism", None)}


def jobs_of_prepared(prepared: list[dict], link_gbps: float | None = None) -> list[JobResult]:
    """``build_jobs`` (the older name)."""
    return build_jobs(prepared, link_gbps)


def build_jobs(prepared: list[dict], link_gbps: float | None = None) -> list[JobResult]:
    """The jobs of ``prepare`` outputs: the one job model every entry point uses (``analyze``,
    ``batch``, ``overlay``, ``diff``, HTML, ``traceread.job``). Each job carries its ranks'
    analysis windows, its cross-rank verdict and its layout (``passes/parallelism
    .job_parallelism`` of its ranks) with the layout's levers."""
    _check_link(link_gbps)
    inputs = [p["input"] for p in prepared if p.get("input") is not None]
    # (loaded only when there is a job: a single trace's analyze needs none of it)
    jobs = _get("analyze_inputs")(inputs, link_gbps) if len(inputs) >= 2 else []
    for p in prepared:
        if p.get("split"):
            for res in _get("analyze_inputs")(p["split"], link_gbps):
                res.job = f"job{len(jobs)}"
                jobs.append(res)
    by_path = {str(p["path"]): p for p in prepared}
    for res in jobs:
        _attach(res, by_path, link_gbps)
    return jobs


def _check_link(link_gbps) -> None:
    """A link peak is a finite positive number of GB/s (``inf`` would reach JSON as
    ``Infinity``)."""
    import math

    if link_gbps is None:
        return
    if isinstance(link_gbps, bool) or not isinstance(link_gbps, (int, float)):
        raise TypeError(f"link_gbps must be a number of GB/s, not {type(link_gbps).__name__}")
    if not (math.isfinite(link_gbps) and link_gbps > 0):
        raise ValueError(f"link_gbps must be a finite positive number of GB/s, not {link_gbps}")


def _attach(res: JobResult, by_path: dict, link_gbps: float | None) -> None:
    """The job's windows and layout from its members' ``prepare`` records (a process of a
    split export has no analysis of its own here: its layout stays empty)."""
    from ...passes.parallelism import agree_with_job, job_parallelism, with_link
    from ...verdict.parallel import job_levers

    members = {r: by_path.get(str(path)) for r, path in res.paths.items()}
    res.windows = {r: (list(m["window"]) if m and m.get("window") else None)
                   for r, m in members.items()}
    ranks = {r: m["parallelism"] for r, m in members.items() if m and m.get("parallelism")}
    layout = job_parallelism(ranks)
    agree_with_job(ranks, layout)   # a rank's report says the job's schedule, not its guess
    layout = with_link(layout, link_gbps) or layout
    layout["levers"] = job_levers(layout)
    res.layout = layout


def jobs_of(items, link_gbps: float | None = None, **analyze_kwargs) -> list[JobResult]:
    """``traceread.all_jobs``: the jobs that trace files, ``Trace`` objects, ``Analysis``
    objects (holding their trace) or Flight Recorder dumps (``flight.py``) form -- the same
    jobs ``traceread analyze`` of those files reports. A path or Trace is analysed with ``analyze_kwargs`` (steps, window,
    step_pattern ...); an nsys export holding several GPU processes is analysed per process,
    one rank each. Each member's verdict is adjusted for its job, as in the CLI; the
    analyses stay reachable as ``job.analyses`` (rank -> Analysis)."""
    import os

    from ...analysis import Analysis, analyze
    from ...readers import read
    from ...readers.nsys_split import split_processes
    from ...table import Trace

    from . import flight

    import inspect

    unknown = set(analyze_kwargs) - set(inspect.signature(analyze).parameters)
    if unknown:   # checked before any input is read: a dump alone never calls analyze
        raise TypeError(f"unexpected keyword argument(s) {', '.join(sorted(unknown))} "
                        "(they go to traceread.analyze)")
    _check_link(link_gbps)
    if isinstance(items, (str, bytes, os.PathLike, Trace, Analysis)):
        items = [items]
    analyses, dumps = [], []
    for x in items:
        if isinstance(x, bytes):   # a file name as bytes (not UTF-8 maybe): as the OS gives it
            x = os.fsdecode(x)
        doc = flight.read_dump(x) if isinstance(x, (str, os.PathLike)) else None
        if doc is not None:   # a Flight Recorder dump: a rank with no trace
            dumps.append({"path": str(x), "input": flight.rank_input_of(x, doc), "split": [],
                          "window": None, "parallelism": None})
            continue
        if isinstance(x, Analysis):
            if x.trace is None:
                raise ValueError(f"{x.meta.path}: this Analysis no longer holds its trace "
                                 "(pass the path, or analyze it again)")
            analyses.append(x)
            continue
        t = x if isinstance(x, Trace) else read(x)
        parts = split_processes(t)
        analyses += [analyze(q, **analyze_kwargs) for q in (parts or [t])]
    prepared = [prepare(a, with_input=len(analyses) + len(dumps) >= 2
                        or "split_from" in (a.meta.extra or {})) for a in analyses] + dumps
    jobs = build_jobs(prepared, link_gbps)
    if dumps:   # a dump that is no job's rank is a TraceError, not an empty list
        flight.check_members(dumps, jobs, others=len(analyses))
    apply_job_verdicts(analyses, jobs)
    by_path = {str(a.meta.path): a for a in analyses}
    for res in jobs:
        res.analyses = {r: by_path[str(p)] for r, p in res.paths.items() if str(p) in by_path}
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
            # (a rank on a clock of its own, cut short, is no clock error: left out)
            "max_clock_offset_ns": max((abs(o["offset_ns"]) for o in res.clock.values()
                                        if not o.get("own_clock")), default=0),
            "max_clock_spread_ns": max((o["spread_ns"] for o in res.clock.values()
                                        if not o.get("own_clock")), default=0),
            "status": jv["status"], "summary": jv["summary"]})
    df = pd.DataFrame(rows, columns=JOB_COLUMNS)
    # no straggler: null, not -1, in jobs.parquet
    df["straggler_rank"] = df["straggler_rank"].astype("Int64").mask(df["straggler_rank"] < 0)
    return df


__all__ = ["RankInput", "JobResult", "step_table", "collective_table", "rank_input", "group_jobs",
           "match_collectives", "step_skew", "analyze_job", "analyze_traces", "analyze_inputs",
           "rank_from_name", "jobs_of_analyses", "apply_job_verdicts",
           "adjust_rank_verdicts", "job_verdict", "jobs_table", "JOB_COLUMNS", "analysis_window",
           "prepare", "jobs_of_prepared", "build_jobs", "jobs_of"]
