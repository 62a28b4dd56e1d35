"""Cross-rank analysis of distributed jobs (see docs/batch.md, "Multi-rank jobs").

``inputs`` -- what is kept per rank; ``grouping`` -- which traces form a job;
``match`` -- collective matching; ``clocks`` -- clock alignment; ``job`` -- waits,
stragglers, steps; ``why`` -- the straggler's cause; ``metrics`` -- seed metrics;
``verdicts`` -- the job verdict and its effect on each rank's verdict;
``nsys_split`` -- one nsys export holding several ranks.
"""
from __future__ import annotations

from .grouping import group_jobs
from .inputs import RankInput, collective_table, rank_from_name, rank_input, step_table
from .job import (JobResult, analyze_inputs, analyze_job, analyze_traces, match_collectives,
                  step_skew)
from .verdicts import adjust_rank_verdicts, job_verdict


def jobs_of_analyses(analyses: list, link_gbps: float | None = None) -> list[JobResult]:
    """Jobs formed by the traces of ``analyses`` (``Analysis`` objects holding their trace)."""
    if len(analyses) < 2:
        return []
    return analyze_traces([a.trace for a in analyses if a.trace is not None], link_gbps)


def apply_job_verdicts(analyses: list, jobs: list[JobResult]) -> None:
    """Replace each member rank's ``Analysis.verdict`` by its job-adjusted verdict."""
    by_path = {a.meta.path: a for a in analyses}
    for res in jobs:
        members = {r: by_path[p] for r, p in res.paths.items() if p in by_path}
        new = adjust_rank_verdicts({r: a.verdict for r, a in members.items()}, res)
        for r, a in members.items():
            a.verdict = new[r]


def render_text(results: list[JobResult]) -> str:
    from ..render.cross_rank import render_text as _render

    return _render(results)


__all__ = ["RankInput", "JobResult", "step_table", "collective_table", "rank_input", "group_jobs",
           "match_collectives", "step_skew", "analyze_job", "analyze_traces", "analyze_inputs",
           "render_text", "rank_from_name", "jobs_of_analyses", "apply_job_verdicts",
           "adjust_rank_verdicts", "job_verdict"]
