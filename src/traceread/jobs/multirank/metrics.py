"""Seed metrics of a job (definitions in docs/batch.md, "Multi-rank jobs").

* **overlap efficiency** per rank and step: ``|compute ∩ comm| / min(compute, comm)``:
  1 when the shorter of compute and communication hides entirely under the
  longer one, 0 when they run back to back (time that is neither -- a sleep, a data
  wait -- does not count against it). compute = union of the rank's GPU
  compute kernels in the step (CPU-only ranks: its issuing thread's traced host
  time outside collectives); comm = union of its collective instances in the step.
  Steps where either is 0 are skipped; the rank's value is the mean over steps.
* **slowdown locality**: per rank, ``work = program step - collective wait per
  step`` (CPU collectives: with the thread's blocked time, ``blocked_per_step``). Synchronous training equalises step times (everybody waits for the
  slowest), so the spread of *work* says whether one rank is slow (``rank-local``:
  a significant straggler whose work exceeds the others' median by
  ``LOCAL_SPREAD``) or everyone is (``global``).
* **bus bandwidth** per collective type (nccl-tests' definition): Σ(bytes ×
  factor(n)) / Σ transfer over matched instances with a known size, where an
  instance's transfer is its shortest duration across ranks (the time it ran
  once everyone had arrived). With ``link_gbps`` it is also a % of that peak.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...passes.nccl import busbw_factor

LOCAL_SPREAD = 0.10


def overlap_efficiency(steps: pd.DataFrame) -> float | None:
    if not len(steps) or "compute_ns" not in steps:
        return None
    c = steps["compute_ns"].to_numpy(np.float64)
    m = steps["comm_ns"].to_numpy(np.float64)
    d = steps["dur"].to_numpy(np.float64)
    lo, hi = np.minimum(c, m), np.maximum(c, m)
    ok = lo > 0
    if not ok.any():
        return None
    if "both_ns" in steps:
        # the share of the shorter that ran under the longer, measured: time in the step
        # that is neither (a sleep, a data wait) is no failure to overlap -- by the step's
        # length, the real GPU ddp2's rank 1 read 0.00 beside rank 0's 0.70 for the same
        # DDP schedule, its 20 ms sleep counted as compute and comm run back to back
        eff = np.clip(steps["both_ns"].to_numpy(np.float64)[ok] / lo[ok], 0.0, 1.0)
    else:
        eff = np.clip(1.0 - (d[ok] - hi[ok]) / lo[ok], 0.0, 1.0)
    return round(float(eff.mean()), 4)


def slowdown(per_rank: pd.DataFrame, straggler: dict, blocked: dict | None = None) -> dict:
    """``blocked``: rank -> its wait per step where the job knows more than the collectives'
    own wait (``blocked_per_step``); else ``wait_ns`` per step."""
    pr = per_rank[per_rank["steps"] > 0]
    if len(pr) < 2:
        return {"locality": None, "work_ns": {}, "work_spread_pct": None}
    wait = pr["wait_ns"] // pr["steps"]
    if blocked:
        wait = pd.Series([blocked.get(int(r), w) for r, w in zip(pr["rank"], wait)], index=pr.index)
    work = pr["step_mean_ns"] - wait
    work_by = {int(r): int(w) for r, w in zip(pr["rank"], work)}
    s = straggler.get("rank", -1)
    others = [w for r, w in work_by.items() if r != s]
    med = float(np.median(others)) if others else 0.0
    spread = 100.0 * (work_by.get(s, med) - med) / med if med > 0 and s in work_by else 0.0
    local = straggler.get("significant") and spread >= 100 * LOCAL_SPREAD
    return {"locality": "rank-local" if local else "global", "work_ns": work_by,
            "work_spread_pct": round(spread, 2)}


def stage_slowdown(stages: dict, busy: dict) -> dict:
    """A pipeline's locality from its stages' own compute (groups.stage_balance): a stage's
    wait at send/recv holds the schedule's fill and drain, so step - wait is no measure of
    work there; ``rank-local`` when one stage is the slow one."""
    k = stages["slow_stage"]
    return {"locality": "global" if k is None else "rank-local",
            "work_ns": {int(r): int(b) for r, (b, _) in sorted(busy.items())},
            "work_spread_pct": round(100.0 * (stages["slowest_x_others"] - 1), 2)
            if stages["slowest_x_others"] is not None else None}


def bandwidth(matches: pd.DataFrame, world: int, link_gbps: float | None) -> list[dict]:
    if not len(matches):
        return []
    inst = matches.groupby("instance").agg(collective=("collective", "first"), bytes=("msg_bytes", "max"),
                                           transfer=("dur", "min"), ranks=("ranks", "first"))
    out = []
    for coll, g in inst.groupby(inst["collective"].fillna("unknown")):
        sized = g[(g["bytes"] > 0) & (g["transfer"] > 0)]
        rec = {"collective": str(coll), "instances": int(len(g)), "sized": int(len(sized)),
               "busbw_gbps": None, "link_pct": None}
        if len(sized):
            n = world if world > 1 else int(sized["ranks"].iloc[0])
            fac = busbw_factor(str(coll), n)
            if not np.isnan(fac):
                bw = float((sized["bytes"] * fac).sum() / sized["transfer"].sum())
                rec["busbw_gbps"] = round(bw, 3)
                if link_gbps:
                    rec["link_pct"] = round(100.0 * bw / link_gbps, 1)
        out.append(rec)
    return out


def blocked_per_step(inputs, matches: pd.DataFrame, source: str) -> dict:
    """Per CPU-collective rank (``host`` / ``issue`` source): the time per step its issuing
    thread waited -- in a collective for the last rank, or blocked on one's completion
    (its ``comm_wait`` activity: ``c10d`` / ``_c10d_functional::wait_tensor``) -- as a union
    inside its steps. None of it is the rank's work: gloo tp2's rank 1 'worked' 36.4 ms a
    step, ~30 ms of it in ``wait_tensor``."""
    from ...passes import intervals

    if source not in ("host", "issue") or not len(matches):
        return {}
    out = {}
    for i in inputs:
        st = i.steps
        if not len(st):
            continue
        mine = matches[matches["rank"] == i.rank]
        ts = mine["ts"].to_numpy(np.int64)
        cw = i.activity.get("comm_wait", (np.empty(0, np.int64), np.empty(0, np.int64)))
        waits = intervals.union(np.concatenate([ts, cw[0]]),
                                np.concatenate([ts + mine["wait_ns"].to_numpy(np.int64), cw[1]]))
        qs = st["ts"].to_numpy(np.int64)
        inside = intervals.overlap(waits, qs, qs + st["dur"].to_numpy(np.int64))
        out[int(i.rank)] = int(inside.sum() // len(st))
    return out


def job_metrics(res, inputs, link_gbps: float | None = None) -> dict:
    eff = {int(i.rank): overlap_efficiency(i.steps) for i in inputs}
    spread = None
    if len(res.steps):
        spread = round(float((100.0 * res.steps["skew_ns"] / res.steps["mean_ns"].clip(lower=1)).mean()), 2)
    return {"overlap_efficiency": eff, "step_time_spread_pct": spread,
            "slowdown": slowdown(res.per_rank, res.straggler,
                                 blocked_per_step(inputs, res.matches, res.source)),
            "bandwidth": bandwidth(res.matches, res.world_size, link_gbps),
            "link_gbps": link_gbps}


__all__ = ["overlap_efficiency", "slowdown", "stage_slowdown", "bandwidth", "job_metrics"]
