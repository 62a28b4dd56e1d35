"""The lever table's parallelism rows for a whole job: what ``traceread analyze`` of several
ranks offers beside each rank's own verdict (the job's merged layout gives the figures)."""
from __future__ import annotations

from ..passes.facts import layout_figures
from .levers import offered

PARALLEL_LEVERS = ("pp_microbatches", "pp_rebalance", "ep_balance")


def job_levers(layout: dict) -> list[dict]:
    """The lever table's parallelism rows (verdict/levers.py) that a job's merged layout
    (``passes.parallelism.job_parallelism``) proves, ranked, with their savings: id, lever,
    cost, cause, saves_ns."""
    items = offered({}, {}, {}, layout_figures(layout), 1, ())
    return [x for x in items if x["id"] in PARALLEL_LEVERS]
