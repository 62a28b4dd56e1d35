"""Where a job loses time, per group of ranks, and whether its pipeline stages are balanced
(docs/batch.md, "Groups"; docs/parallelism.md, "A job's pipeline").

Groups come from the matches, not from names: the ranks that meet in one matched
collective instance are one group (its ``process_group`` names it when the trace records
one); ranks linked by matched send/recv pairs are one pipeline, and stage k is the k-th rank
of each pipeline in rank order (``torch.distributed.pipelining`` places stages by rank in
the pipeline's group). A stage's compute is its ranks' ``busy_ns`` per step
(``inputs.step_busy``): the evidence of which stage is slow -- in a pipeline every stage
waits at send/recv by construction (fill and drain), so who arrives last there proves
nothing on its own.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

# a stage computing this many times the other stages' median per step is the slow one
IMBALANCE_X = 1.25
_KIND_RX = re.compile(r"(?:^|[^a-z])(dp|fsdp|tp|pp|ep|cp)(?:$|[^a-z])", re.I)


def rank_busy(inputs) -> dict[int, tuple[float, float]]:
    """rank -> (mean work per step, mean step time) over its steps: the job layout's stage
    compute (``parallelism._job_pipeline``: the work over the analysed steps, per step) --
    with medians pp_gpipe's slow stage read 2.95x here beside the layout's 3.2x."""
    out = {}
    for i in inputs:
        s = i.steps
        if len(s) and "busy_ns" in s and s["busy_ns"].notna().any():
            out[int(i.rank)] = (float(s["busy_ns"].mean()), float(s["dur"].mean()))
    return out


def rank_untraced(inputs) -> dict[int, float]:
    """rank -> median work per step that no profiled operator or kernel covers."""
    out = {}
    for i in inputs:
        s = i.steps
        if len(s) and "traced_ns" in s and "busy_ns" in s:
            out[int(i.rank)] = float((s["busy_ns"] - s["traced_ns"]).clip(lower=0).median())
    return out


def pipelines(m: pd.DataFrame) -> list[list[int]]:
    """The ranks linked by matched send/recv pairs, one sorted list per pipeline."""
    if not len(m):
        return []
    p2p = m[m["lane"].astype(str).str.startswith("p2p:")]
    parent: dict[int, int] = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for _, g in p2p.groupby("instance"):
        rs = [int(r) for r in g["rank"]]
        for r in rs[1:]:
            parent[root(r)] = root(rs[0])
    comps: dict[int, list[int]] = {}
    for r in list(parent):
        comps.setdefault(root(r), []).append(r)
    return sorted((sorted(c) for c in comps.values() if len(c) > 1), key=lambda c: c[0])


def stage_ranks(pipes: list[list[int]]) -> list[list[int]]:
    """Stage k = the k-th rank of each pipeline."""
    depth = max((len(p) for p in pipes), default=0)
    return [[p[k] for p in pipes if len(p) > k] for k in range(depth)]


def stage_balance(pipes: list[list[int]], busy: dict, untraced: dict | None = None) -> dict | None:
    """Each stage's compute per step and whether one stage computes ``IMBALANCE_X`` times the
    other stages' median: ``slow_stage`` (None: balanced), its busiest rank and ``excess_ns``
    = its compute per step minus the other stages' median."""
    stages = stage_ranks(pipes)
    per = [[busy[r][0] for r in rs if r in busy] for rs in stages]
    if len(stages) < 2 or not all(per):
        return None
    b = np.array([np.mean(x) for x in per])
    slow = int(b.argmax())
    others = float(np.median(np.delete(b, slow)))
    x = float(b[slow] / others) if others > 0 else None
    hot = max((r for r in stages[slow] if r in busy), key=lambda r: busy[r][0])
    # the part of the excess no profiled op records (a sleep, I/O, Python on that stage)
    un = untraced or {}
    u = np.array([np.mean([un.get(r, 0.0) for r in rs]) for rs in stages])
    return {"stages": len(stages), "pipelines": len(pipes),
            "untraced_excess_ns": int(max(0.0, u[slow] - float(np.median(np.delete(u, slow)))))
            if un else 0,
            "busy_ns_by_stage": [int(v) for v in b],
            "slowest_x_others": round(x, 2) if x is not None else None,
            "slow_stage": slow if x is None or x >= IMBALANCE_X else None,
            "slow_rank": hot, "excess_ns": int(b[slow] - others),
            "stage_ranks": stages,
            "idle_ns_by_rank": {str(r): int(max(0.0, st - bz)) for r, (bz, st) in sorted(busy.items())}}


def job_groups(m: pd.DataFrame, inputs, pipes: list[list[int]],
               cut: frozenset = frozenset()) -> list[dict]:
    """One row per group of ranks: each pipeline stage (``pp_stage``), each pipeline
    (``pp``) and each set of ranks that meet in a collective; per step, the members' mean
    compute, the members' wait at the group's own calls and the lateness members imposed
    there (see module doc). ``cut``: ranks whose file was cut short -- absent from the
    instances past their cut, so a set of ranks is told by the others (``_meeting``)."""
    busy = rank_busy(inputs)
    n_steps = {int(i.rank): max(1, len(i.steps)) for i in inputs}
    rows = []
    p2p = m["lane"].astype(str).str.startswith("p2p:") if len(m) else pd.Series([], dtype=bool)
    for k, rs in enumerate(stage_ranks(pipes)):
        rows.append(_row("pp_stage", rs, m[p2p.to_numpy()] if len(m) else m, busy, n_steps,
                         stage=k))
    for rs in pipes:
        sub = m[p2p.to_numpy() & m["rank"].isin(rs).to_numpy()]
        rows.append(_row("pp", rs, sub, busy, n_steps))
    coll = m[~p2p.to_numpy()] if len(m) else m
    if len(coll):
        sets = coll.groupby("instance")["rank"].agg(lambda r: tuple(sorted(int(x) for x in r)))
        for rs, inst in _meeting(sets, cut):
            sub = coll[coll["instance"].isin(inst)]
            rows.append(_row(_kind(sub), list(rs), sub, busy, n_steps))
    return rows


def _meeting(sets: pd.Series, cut: frozenset) -> list[tuple[tuple, list]]:
    """(ranks, instances) per set of ranks that meet: instances grouped by their whole
    ranks (a cut rank meets only the instances before its cut), each group's ranks those
    whole ranks and the cut ranks seen in any of its instances."""
    key = sets.map(lambda rs: tuple(r for r in rs if r not in cut) or rs) if cut else sets
    out = []
    for k, idx in key.groupby(key).groups.items():
        ranks = sorted({r for rs in sets.loc[idx] for r in rs})
        out.append((tuple(ranks), list(idx)))
    return out


def _kind(sub: pd.DataFrame) -> str:
    """A collective group's kind: what its process group's name says (DeviceMesh names
    ``dp``/``tp``...), else ``ep`` for all_to_all, else plain ``collective``."""
    lane = str(sub["lane"].iat[0])
    hit = _KIND_RX.search(lane[3:]) if lane.startswith("pg:") else None
    if hit:
        return hit.group(1).lower()
    return "ep" if (sub["collective"] == "all_to_all").all() else "collective"


def _row(kind: str, ranks: list[int], sub: pd.DataFrame, busy: dict, n_steps: dict,
         stage: int | None = None) -> dict:
    mine = sub[sub["rank"].isin(ranks)] if len(sub) else sub
    known = [busy[r] for r in ranks if r in busy]
    by = {int(r): g for r, g in mine.groupby("rank")} if len(mine) else {}
    wait = [_waited(by.get(r)) / n_steps.get(r, 1) for r in ranks]
    late = {r: _held_back(by.get(r)) / n_steps.get(r, 1) for r in ranks}
    hot = max(late, key=late.get) if late and max(late.values()) > 0 else None
    return {"kind": kind, "stage": stage, "ranks": [int(r) for r in ranks],
            "collectives": sorted(str(c) for c in pd.unique(mine["collective"].dropna()))
            if len(mine) else [],
            "instances": int(mine["instance"].nunique()) if len(mine) else 0,
            "busy_ns_per_step": int(np.mean([b for b, _ in known])) if known else None,
            "step_ns": int(np.mean([s for _, s in known])) if known else None,
            "wait_ns_per_step": int(np.mean(wait)) if wait else 0,
            "lateness_ns_per_step": int(sum(late.values())),
            "late_rank": hot}


def interval_total(start, end) -> int:
    """Length of the union of the intervals [start, end): time spent once, however many
    collectives overlap it (DDP's gradient buckets wait for a late rank together)."""
    from ...passes import intervals

    s, e = intervals.union(np.asarray(start, np.int64), np.asarray(end, np.int64))
    return int((e - s).sum())


def _waited(g: pd.DataFrame | None) -> int:
    """A rank's time waiting in its matched collectives (arrival .. arrival + wait), once
    (summed where the rows carry no time)."""
    if g is None or not len(g):
        return 0
    a = _arrival(g)
    w = g["wait_ns"].to_numpy(np.int64)
    return int(w.sum()) if a is None else interval_total(a, a + w)


def _held_back(g: pd.DataFrame | None) -> int:
    """The time a rank held the others back (arrival - lateness .. arrival), once."""
    if g is None or not len(g):
        return 0
    a = _arrival(g)
    late = g["lateness_ns"].to_numpy(np.int64)
    return int(late.sum()) if a is None else interval_total(a - late, a)


def _arrival(g: pd.DataFrame):
    for c in ("arrival_ns", "ts"):
        if c in g:
            return g[c].to_numpy(np.int64)
    return None


def pipeline_decides(s: dict) -> bool:
    """No significant straggler, or one late mostly at send/recv: in a pipeline every stage
    waits there by construction (fill and drain), so the stages' own compute decides
    (``stage_balance``)."""
    by = sorted(s["by_collective"].items(), key=lambda kv: -kv[1]["times_late"] * kv[1]["median_delay_ns"])
    return not s.get("significant") or not by or by[0][0] in ("send", "recv")


__all__ = ["IMBALANCE_X", "rank_busy", "pipelines", "stage_ranks", "stage_balance",
           "job_groups", "pipeline_decides"]
