"""Cross-rank analysis of one job: match collectives, align clocks, find who is late and why.

A collective cannot finish before its last member arrives. With clocks aligned
(``clocks.py``), per matched instance:

    arrival_r  = start of rank r's instance (aligned clock)
    wait_r     = min(dur_r, max(arrival) - arrival_r)     time r waited for the last one
    transfer_r = dur_r - wait_r                            (wait + transfer = duration)

The rank with the unique latest arrival is that instance's *last* rank; its
``lateness`` is how long after the next-latest rank it arrived (how long it held
the others back). When every rank's instance ends together this equals the
duration form (wait = dur - min dur) of earlier versions, so it also holds for
traces whose clocks could not be aligned beyond end-time resolution.

The *straggler* is the rank that is last most often; ``why.py`` attributes its
late windows.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ...errors import display_path
from ...table import Trace
from . import clocks, groups, metrics, waits
from .grouping import group_jobs
from .inputs import RankInput, cut_record, rank_from_name, rank_input
from .match import END_TOL_NS, disagreements, match_rows
from .why import (explain, kernel_excess, late_windows, refine_comm_wait, refine_cpu_op,
                  wait_categories)

MATCH_COLUMNS = ["lane", "key", "instance", "method", "collective", "rank", "ts", "dur", "arrival_ns",
                 "transfer_ns", "wait_ns", "ranks", "last", "lateness_ns", "msg_bytes"]
# An instance is late when its last rank arrived this long after the next-latest; a
# straggler is worth naming when it is the late one in at least this share of them.
LATE_MIN_NS = 100_000
STRAGGLER_MIN_SHARE = 0.5
# ... and, against chance and the steps' own noise (issue 39): last more often than one
# rank in ``ranks`` would be by chance (one-sided binomial tail below LAST_P; fewer than
# LAST_MIN_N instances cannot tell), and late, net of the other ranks' lateness, by at least
# SPREAD_X of the step time's own spread a step (the steps' standard deviation; with fewer
# than SPREAD_MIN_STEPS steps, SPREAD_STEP_SHARE of the mean step)
LAST_P = 0.05
LAST_MIN_N = 10
SPREAD_MIN_STEPS = 3
SPREAD_STEP_SHARE = 0.01
SPREAD_X = 0.5


def score(rows: pd.DataFrame, offsets: dict[int, int], source: str = "kernel") -> pd.DataFrame:
    """Arrival, wait, transfer, last and lateness of every matched row (see module doc)."""
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in MATCH_COLUMNS})
    m = rows.copy()
    m["arrival_ns"] = m["ts"].astype("int64") + m["rank"].map(offsets).fillna(0).astype("int64")
    g = m.groupby(["lane", "key"], sort=False)
    m["ranks"] = g["rank"].transform("size")
    latest = g["arrival_ns"].transform("max")
    behind = latest - m["arrival_ns"]
    # issue ops say when a rank arrived, not how long it waited inside the collective
    m["wait_ns"] = behind if source == "issue" else np.minimum(behind, m["dur"])
    m["transfer_ns"] = np.where(source == "issue", 0, m["dur"] - m["wait_ns"])
    is_max = m["arrival_ns"] == latest
    n_max = is_max.groupby([m["lane"], m["key"]], sort=False).transform("sum")
    # a pair's message waits only on its sender: a receiver posting its recv late (busy
    # with its own stage) holds no one back, so it is never the late one of a P2P pair
    late_recv = m["lane"].astype(str).str.startswith("p2p:") & (m["collective"] == "recv")
    m["last"] = is_max & (n_max == 1) & ~late_recv
    # int64 throughout: epoch-ns times lose ~100 ns in float64
    others = m["arrival_ns"].where(~m["last"], np.iinfo(np.int64).min).astype("int64")
    second = others.groupby([m["lane"], m["key"]], sort=False).transform("max")
    m["lateness_ns"] = np.where(m["last"], m["arrival_ns"] - second, 0)
    first_ts = g["arrival_ns"].transform("min")
    m = m.assign(_first=first_ts).sort_values(["_first", "lane", "key", "rank"], kind="stable")
    m["instance"] = m.groupby(["lane", "key"], sort=False).ngroup()
    out = m[MATCH_COLUMNS].reset_index(drop=True)
    for c in ("key", "instance", "rank", "ts", "dur", "arrival_ns", "transfer_ns", "wait_ns", "ranks",
              "lateness_ns", "msg_bytes"):
        out[c] = out[c].astype("int64")
    out["last"] = out["last"].astype(bool)
    return out


def match_collectives(per_rank: dict[int, pd.DataFrame], clocks_comparable: bool = True,
                      source: str = "kernel") -> pd.DataFrame:
    """Match and score in one call (clock offsets estimated from the matches).

    ``clocks_comparable=False`` (separate nsys exports: session clocks) still aligns
    by end times; there is no absolute clock to trust either way.
    """
    ranks = sorted(per_rank)
    rows, _, info = match_rows(per_rank, _offset_fn(ranks, source, False))
    return score(rows, info["offsets"], source)


def _offset_fn(ranks: list[int], source: str, shared: bool):
    return lambda rows: clocks.applied(clocks.estimate_offsets(rows, ranks, source, shared))


# ----------------------------------------------------------------------------- summaries

def step_skew(steps: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Per step seen on >= 2 ranks: min/max/mean step time, skew (max - min) and the
    slowest rank."""
    parts = [s[["step", "dur"]].assign(rank=r) for r, s in steps.items() if s is not None and len(s)]
    cols = ["step", "ranks", "min_ns", "max_ns", "mean_ns", "skew_ns", "slowest_rank"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    s = pd.concat(parts, ignore_index=True)
    g = s.groupby("step")
    out = pd.DataFrame({
        "ranks": g["rank"].nunique(),
        "min_ns": g["dur"].min(),
        "max_ns": g["dur"].max(),
        "mean_ns": g["dur"].mean().round().astype("int64"),
    })
    out["skew_ns"] = out["max_ns"] - out["min_ns"]
    idx = g["dur"].idxmax()
    out["slowest_rank"] = s.loc[idx.to_numpy(), "rank"].to_numpy()
    out = out[out["ranks"] >= 2].reset_index()
    return out[cols].astype("int64")


def straggler_of(m: pd.DataFrame) -> dict[str, Any]:
    """The rank that holds the others back most often, by how much, at which collectives.

    An instance is *late* when its last rank arrived >= ``LATE_MIN_NS`` after the
    next-latest (below that, someone is always last by noise). The straggler is the
    rank whose late arrivals held the others back longest in total; it is ``significant``
    when it is late in >= ``STRAGGLER_MIN_SHARE`` of all late instances and its
    median lateness is >= ``LATE_MIN_NS``. Without any late instance, the rank last
    most often is reported, not significant.
    """
    n = int(m["instance"].nunique()) if len(m) else 0
    empty = {"rank": -1, "times_last": 0, "times_late": 0, "instances": n, "late_instances": 0,
             "share": 0.0, "median_delay_ns": 0, "mean_delay_ns": 0, "by_collective": {},
             "significant": False}
    if n == 0 or not m["last"].any():
        return empty
    last = m[m["last"]]
    late = last[last["lateness_ns"] >= LATE_MIN_NS]
    pool = late if len(late) else last
    score = pool.groupby("rank").agg(count=("lateness_ns", "size"), total=("lateness_ns", "sum"))
    top = int(score.sort_values(["total", "count"], ascending=False).index[0])
    mine = pool[pool["rank"] == top]
    colls = m["collective"].fillna("unknown")
    by_coll = {}
    for k, g in mine.groupby(mine["collective"].fillna("unknown")):
        by_coll[str(k)] = {"times_late": int(len(g)), "instances": int(m.loc[colls == k, "instance"].nunique()),
                           "median_delay_ns": int(g["lateness_ns"].median())}
    med = int(mine["lateness_ns"].median())
    share = float(len(mine) / len(pool))
    return {
        "rank": top,
        "times_last": int((last["rank"] == top).sum()),
        "times_late": int(len(mine)) if len(late) else 0,
        "instances": n,
        "late_instances": int(late["instance"].nunique()),
        "share": share,
        "median_delay_ns": med,
        "mean_delay_ns": int(round(mine["lateness_ns"].mean())),
        "by_collective": by_coll,
        "significant": bool(len(late) and med >= LATE_MIN_NS and share >= STRAGGLER_MIN_SHARE),
    }


def significance(strag: dict, m: pd.DataFrame, steps: dict) -> dict:
    """``strag`` with its significance tested against chance and noise (issue 39):
    ``last_p`` -- how often last: the chance of being last this often as one rank of
    ``ranks`` (one-sided binomial); ``net_late_per_step_ns`` -- by how much: its lateness
    less the other ranks' mean lateness, per step; ``spread_ns`` -- the steps' own spread
    (the median over ranks of their step times' standard deviation, or SPREAD_STEP_SHARE of
    the mean step). ``significant`` stays only when its net lateness per step is at least
    SPREAD_X of the spread and, unless it exceeds the whole spread, it is last more often
    than chance (with enough instances to tell); the reason it is not is in
    ``not_significant_because``."""
    if strag["rank"] < 0 or not strag["instances"] or not len(m):
        return strag
    r = strag["rank"]
    n = int(m.loc[m["rank"] == r, "instance"].nunique())
    ranks = max(2, int(m.groupby("instance")["rank"].nunique().median()))
    p = binomial_tail(int(strag["times_last"]), n, 1.0 / ranks)
    late = m[m["last"]].groupby("rank")["lateness_ns"].sum()
    others = float(late.drop(r, errors="ignore").sum()) / (ranks - 1)
    n_steps = max([len(s) for s in steps.values() if s is not None] + [1])
    net = int((float(late.get(r, 0)) - others) / n_steps)
    spread = step_spread(steps)
    frequent = n < LAST_MIN_N or p < LAST_P
    large = net >= max(LATE_MIN_NS, SPREAD_X * spread if spread else 0)
    # last no more often than chance: only a lateness beyond the whole spread still counts
    # (one collective a step held back by a planted 30 ms, the others on time) -- a spread
    # the steps measure: without steps nothing says what is beyond the noise (nsys-ai
    # mfu_2gpu_after: last in 13 of 29 all_to_alls, named for its window's net lateness)
    beyond = spread is not None and net >= max(LATE_MIN_NS, spread)
    strag.update(last_p=round(p, 4), net_late_per_step_ns=net, spread_ns=spread)
    if strag["significant"] and not (large and (frequent or beyond)):
        strag["significant"] = False
        strag["not_significant_because"] = (
            f"last in {strag['times_last']} of {n} collectives "
            f"({100 * strag['times_last'] / max(1, n):.0f}%, chance {100 / ranks:.0f}%: "
            f"p={p:.2g}){'' if spread is not None else '; no steps to weigh its lateness against'}"
            if not frequent else
            f"late by {net / 1e6:.2f} ms a step more than the other ranks, under half the "
            f"steps' own spread ({(spread or 0) / 1e6:.2f} ms)")
    return strag


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in log space (n may be thousands)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp
             + (n - i) * lq for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def step_spread(steps: dict) -> int | None:
    """The step time's own spread: the median over ranks of the standard deviation of their
    step times (>= SPREAD_MIN_STEPS steps); when no rank has that many, the standard
    deviation of every rank's steps together (>= SPREAD_MIN_STEPS of them); else
    SPREAD_STEP_SHARE of the mean step; None without steps. (gloo a2a4 on its 2 common
    steps: its steps last 1.3-7.1 ms, a 2 ms spread, where 1% of the mean step, 35 us,
    let a rank last at 3 of 4 collectives by 0.2-0.6 ms stand as the straggler.)"""
    sd, means, pooled = [], [], []
    for s in steps.values():
        if s is None or not len(s) or "dur" not in s:
            continue
        d = s["dur"].to_numpy(np.int64)
        means.append(float(d.mean()))
        pooled.append(d)
        if len(d) >= SPREAD_MIN_STEPS:
            sd.append(float(d.std()))
    if sd:
        return int(np.median(sd))
    if sum(len(d) for d in pooled) >= SPREAD_MIN_STEPS:
        return int(np.concatenate(pooled).std())
    return int(SPREAD_STEP_SHARE * np.median(means)) if means else None


@dataclass
class JobResult:
    """Cross-rank results of one job (``to_dict()``: the documented ``cross_rank`` object)."""

    job: str
    ranks: list[int]
    paths: dict[int, str]
    world_size: int
    matches: pd.DataFrame        # score(): one row per (matched instance, rank)
    per_rank: pd.DataFrame       # one row per rank
    steps: pd.DataFrame          # step_skew()
    straggler: dict[str, Any]
    backend: str = ""
    source: str = ""
    clock: dict = field(default_factory=dict)       # rank -> clocks.estimate_offsets entry
    unmatched: list = field(default_factory=list)   # match.match_rows records
    mismatched: int = 0
    methods: dict = field(default_factory=dict)     # lane -> method
    seed: dict = field(default_factory=dict)        # metrics.job_metrics()
    inferred: dict = field(default_factory=dict)    # waits.infer(): only when no collective matched
    groups: list = field(default_factory=list)      # groups.job_groups(): per group of ranks
    stages: dict | None = None                      # groups.stage_balance(): a pipeline's stages
    windows: dict = field(default_factory=dict)     # rank -> [start, end) analysed, None: whole trace
    layout: dict = field(default_factory=dict)      # passes/parallelism.job_parallelism + "levers"
    straggler_waits: dict = field(default_factory=dict)  # rank -> why.wait_categories
    cut: dict = field(default_factory=dict)         # rank -> cut_usage(): ranks cut short
    analyses: dict = field(default_factory=dict, repr=False)  # rank -> Analysis (traceread.jobs)

    @property
    def levers(self) -> list[dict]:
        """The job's levers, ranked: the straggler's own (its verdict) first, then the
        layout's (``verdict/parallel.job_levers``: pipeline balance, microbatches, EP)."""
        from .verdicts import straggler_lever

        jv = self.verdict()
        own = straggler_lever(jv)
        lay = list((self.layout or {}).get("levers") or [])
        if jv.get("cause") == "stage_untraced":   # no layer to move: find the untraced work
            lay = [x for x in lay if x["id"] != "pp_rebalance"]
        elif own and any(x["id"] == "pp_rebalance" for x in lay):
            own = None      # the pipeline's own rebalance lever says it with its saving
        return ([own] if own else []) + lay

    def verdict(self) -> dict[str, Any]:
        from .verdicts import job_verdict

        return job_verdict(self)

    def to_dict(self) -> dict[str, Any]:
        from ...render.cross_rank import job_to_dict

        return job_to_dict(self)


def analyze_job(inputs: Iterable[RankInput], job: str = "job0", link_gbps: float | None = None) -> JobResult:
    """Cross-rank analysis of the ranks of one job (one RankInput per rank)."""
    inputs = sorted(inputs, key=lambda i: i.rank)
    ranks = [i.rank for i in inputs]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks in job {job}: {ranks}")
    held = {i.rank: len(i.steps) for i in inputs if i.truncated}
    inputs = common_steps(inputs)
    whole = [i for i in inputs if not i.truncated] or inputs
    sources = {i.source for i in whole if i.source}
    source = "kernel" if "kernel" in sources else ("host" if "host" in sources else
                                                   ("issue" if sources else ""))
    inputs, astray = _cut_apart(inputs, source)
    cut = frozenset(held)
    own = frozenset(i.rank for i in inputs if i.truncated.get("own_clock"))
    domains = {i.clock_domain for i in inputs if i.rank not in own}
    shared = len(domains) == 1 and bool(next(iter(domains)))
    est: dict = {}

    def offsets_for(rows):
        est.update(clocks.estimate_offsets(rows, ranks, source, shared, own))
        return clocks.applied(est)

    tol = clocks.HOST_END_SKEW_NS if source == "host" else END_TOL_NS
    blind = unlabelled_subgroups(inputs, source)
    colls = {i.rank: i.collectives.iloc[0:0] if blind else i.collectives for i in inputs}
    rows, unmatched, info = match_rows(colls, offsets_for, tol, cut)
    if blind:
        unmatched = _blind_records(inputs, blind)
    offsets = offsets_for(rows)  # final estimate from every matched instance
    # a rank on its own clock that no collective placed: its arrivals are on no shared time
    unplaced = {r for r in own if not est.get(r, {}).get("instances")}
    for r in own:   # an offset from the epoch to a clock of its own: not a clock error
        est.setdefault(r, {})["own_clock"] = True
    if unplaced:
        rows = rows[~rows["rank"].isin(unplaced)].reset_index(drop=True)
        rows = rows[rows.groupby(["lane", "key"])["rank"].transform("size") >= 2].reset_index(drop=True)
    matches = score(rows, offsets, source)
    strag = significance(straggler_of(matches), matches, {i.rank: i.steps for i in inputs})
    by_rank = {i.rank: i for i in inputs}
    if strag["rank"] >= 0:
        s = strag["rank"]
        off = est.get(s, {}).get("offset_ns", 0)
        floor = LATE_MIN_NS if strag["times_late"] else 0
        win = late_windows(matches, s, off, floor)
        strag["why"] = explain(by_rank[s], *win)
        refine_comm_wait(strag["why"], by_rank[s], matches, s, *win, LATE_MIN_NS)
        refine_cpu_op(strag["why"], inputs, s)
        strag["why"]["kernels"] = kernel_excess(inputs, s)
        for coll, rec in strag["by_collective"].items():
            sub = matches[matches["collective"].fillna("unknown") == coll]
            win = late_windows(sub, s, off, floor)
            rec["why"] = explain(by_rank[s], *win)
            refine_comm_wait(rec["why"], by_rank[s], matches, s, *win, LATE_MIN_NS)
            refine_cpu_op(rec["why"], inputs, s)
    per_rank = _per_rank(inputs, matches)
    res = JobResult(job=job, ranks=ranks, paths={i.rank: i.path for i in inputs},
                    world_size=max((i.world_size for i in inputs), default=-1), matches=matches,
                    per_rank=per_rank, steps=step_skew({i.rank: i.steps for i in inputs}),
                    straggler=strag, backend=next((i.backend for i in inputs if i.backend), ""),
                    source=source, clock=est, unmatched=unmatched,
                    mismatched=len(disagreements(rows)), methods=info["methods"])
    res.cut = cut_usage(inputs, held, astray, unplaced, est, len(res.steps), source)
    if strag["rank"] >= 0:
        res.straggler_waits = {
            i.rank: wait_categories(i, matches, strag["rank"], est.get(i.rank, {}).get("offset_ns", 0),
                                    LATE_MIN_NS)
            for i in inputs if i.rank != strag["rank"]}
    pipes = groups.pipelines(matches)
    res.stages = groups.stage_balance(pipes, groups.rank_busy(inputs), groups.rank_untraced(inputs))
    res.groups = groups.job_groups(matches, inputs, pipes, cut)
    res.seed = metrics.job_metrics(res, inputs, link_gbps)
    if strag["rank"] in res.cut and res.cut[strag["rank"]]["steps_compared"]:
        _cut_straggler(res, inputs, source)
    if res.stages and groups.pipeline_decides(strag):
        res.seed["slowdown"] = metrics.stage_slowdown(res.stages, groups.rank_busy(inputs))
    if not strag["instances"]:
        res.inferred = waits.infer(inputs)
        inf = res.inferred
        if inf.get("significant") and inf.get("basis") == "steps":
            # the straggler the waits name, and each other rank's wait *for it* (not the
            # transfer every rank waits): read by the collectives' straggler, no rank is
            # significant and the locality said "global" beside "rank 1 sleeps 30 ms"
            res.seed["slowdown"] = metrics.slowdown(
                per_rank, {"rank": inf["rank"], "significant": True},
                {int(r): int(v.get("waits_for_ns", 0)) for r, v in inf["per_rank"].items()})
    return res


def _cut_straggler(res: JobResult, inputs: list[RankInput], source: str) -> None:
    """The straggler's file was cut short: past its cut nobody knows when it arrived, and the
    others' waits for it there read as transfer. Its figures are those of the steps it holds:
    its instances of each collective, and the slowdown locality from those steps alone
    (on the job's steps a planted 3 ms sleep read 'global', the others' work swollen by the
    waits past the cut)."""
    s = res.straggler["rank"]
    m = res.matches
    mine = set(m.loc[m["rank"] == s, "instance"])
    colls = m["collective"].fillna("unknown")
    for k, rec in res.straggler["by_collective"].items():
        rec["instances"] = int(m.loc[(colls == k).to_numpy() & m["instance"].isin(mine).to_numpy(),
                                     "instance"].nunique())
    held = set(next(i for i in inputs if i.rank == s).steps["step"].tolist())
    sub = [_keep_steps(i, held) for i in inputs]
    ms = m[m["instance"].isin(mine).to_numpy()]
    res.seed["slowdown"] = metrics.slowdown(_per_rank(sub, ms), res.straggler,
                                            metrics.blocked_per_step(sub, ms, source))
    res.straggler["steps"] = len(held)   # the steps its lateness is known on


def _cut_apart(inputs: list[RankInput], source: str) -> tuple[list[RankInput], set]:
    """A cut rank whose collectives are of another kind than the job's (kernels lost past the
    cut: only its host ops remain) is left out of the comparison -- its steps lack their GPU
    work. Returns the inputs (those ranks emptied) and their ranks."""
    import dataclasses

    astray = {i.rank for i in inputs if i.truncated and i.source != source and source}
    return [dataclasses.replace(i, steps=i.steps.iloc[0:0], collectives=i.collectives.iloc[0:0])
            if i.rank in astray else i for i in inputs], astray


SOURCE_WORDS = {"kernel": "collective kernels", "host": "backend collective ranges",
                "issue": "collective issue ops", "": "no collectives"}


def cut_usage(inputs: list[RankInput], held: dict, astray: set, unplaced: set, est: dict,
              steps: int, source: str) -> dict:
    """Per rank whose file was cut short: where it was cut and how the job used it --
    ``steps_held`` (whole steps before the cut), ``steps_compared`` (of the job's compared
    steps), ``placed`` (its collectives on the job's clock), ``used``: "compared" or
    "left_out", and ``why`` it was left out."""
    out = {}
    for i in inputs:
        if not i.truncated:
            continue
        n = len(i.steps)
        why = ""
        if i.rank in astray:
            why = (f"its file holds no {SOURCE_WORDS.get(source, source)} before the cut"
                   + (f" (only {SOURCE_WORDS.get(i.source, i.source)})" if i.source else ""))
        elif not n and steps:
            why = (f"holds none of the job's {steps} compared steps whole"
                   if held.get(i.rank) else "cut before its first whole step")
        out_why = (f"the cut lost some ({i.truncated['collectives_lost']})"
                   if i.truncated.get("collectives_lost") else i.truncated.get("collectives_out")
                   or ("its clock could not be placed on the job's"
                       if i.rank in unplaced and len(i.collectives) else ""))
        if out_why and not n and not why:
            why = f"its collectives left out: {out_why}"
        out[i.rank] = {"path": i.path, "truncated_at_byte": int(i.truncated.get("truncated_at_byte", -1)),
                       "own_clock": bool(i.truncated.get("own_clock")),
                       "steps_held": int(held.get(i.rank, 0)), "steps_compared": n,
                       "collectives": int(len(i.collectives)),
                       "placed": i.rank not in unplaced and bool(len(i.collectives)),
                       "clock": est.get(i.rank, {}).get("reason", ""),
                       "collectives_out": out_why or "",
                       "used": "left_out" if why else "compared", "why": why}
    return out


def unlabelled_subgroups(inputs: list[RankInput], source: str) -> list[tuple]:
    """The job's subgroups when its host collectives (gloo) name no process group: then
    which group each ran in cannot be told and no instance can be matched across ranks
    (a recording with groups [0, 1] and [1, 2]: group [0, 1]'s all_reduce on rank 0 was
    paired with group [1, 2]'s on ranks 1 and 2, and rank 0's 20 ms sleep, which rank 1
    passed on to rank 2, read 'no straggler'). [] when the matching can stand."""
    if source != "host":
        return []
    groups = sorted({g for i in inputs for g in (i.subgroups or ())})
    named = any("process_group" in i.collectives and i.collectives["process_group"].notna().any()
                for i in inputs)
    return [] if not groups or named else groups


def _blind_records(inputs: list[RankInput], groups: list[tuple]) -> list[dict]:
    why = (f"names no process group, and the job has subgroups "
           f"{', '.join(str(list(g)) for g in groups)}: which group it ran in cannot be told")
    return [{"rank": int(i.rank), "collective": c, "msg_bytes": -1, "ref_rank": -1, "reason": why,
             "lane": "", "missing_on": []}
            for i in inputs for c in i.collectives.get("collective", pd.Series(dtype=object)).fillna("unknown")]


def common_steps(inputs: list[RankInput]) -> list[RankInput]:
    """Each rank cut to the steps every rank analysed. A rank's analysis may leave out a
    step the others keep (its own warm-up: gloo a2a4's rank 3 analysed steps #2-#3, the
    others #1-#3); matched as they were, rank 3's first collectives paired with the
    others' step #1 ones -- a step apart, so it 'arrived' 1.5-2.5 ms late at every one and
    was named the straggler while rank 0 was the last to arrive. Only steps numbered alike
    on every rank are compared; without such steps the inputs stay as they are.

    A rank whose file was cut short (``RankInput.truncated``) holds only the steps before
    its cut: the compared steps are those every whole rank holds (a rank cut after one
    step shrank a job to that step), and a cut rank is compared on the ones of them it
    holds -- none: it is left out of the comparison (no steps, no collectives)."""
    whole = [i for i in inputs if not i.truncated] or inputs
    common = _compared_steps(whole, len(inputs))
    if common is None:
        return inputs
    # the whole ranks as before: left as they are when each holds just the compared steps
    alike = all(i.steps["step"].nunique() == len(common) for i in whole)
    return [i if alike and any(i is w for w in whole) else
            _keep_steps(i, common, prefix=i.truncated and not _all_seq(i)) for i in inputs]


def _all_seq(i: RankInput) -> bool:
    return bool(len(i.collectives)) and bool((i.collectives["seq"] >= 0).all())


def _compared_steps(whole: list[RankInput], n: int) -> set | None:
    """The step numbers every whole rank holds (None: no comparison by step number)."""
    sets = [set(i.steps["step"].tolist()) for i in whole if len(i.steps)]
    if len(sets) < len(whole) or n < 2:
        return None
    common = set.intersection(*sets)
    return common or None


def _keep_steps(i: RankInput, common: set, prefix: bool = False) -> RankInput:
    """``i`` with only the steps in ``common`` and the collectives that start in their span.
    ``prefix``: its collectives are matched by position (a cut rank without sequence
    numbers) -- kept only when its steps begin with the first compared step, so they are
    the first of the others' (a rank whose window began later would pair a step apart)."""
    import dataclasses

    st = i.steps[i.steps["step"].isin(common).to_numpy()].reset_index(drop=True)
    c = i.collectives
    cut = i.truncated
    if prefix and len(st) and len(c) and int(st["step"].min()) != min(common):
        cut = dict(cut, collectives_out=f"its steps begin at #{int(st['step'].min())}, after the "
                                        f"job's first compared step #{min(common)}")
    if len(st) and len(c) and cut is i.truncated:
        lo, hi = int(st["ts"].min()), int((st["ts"] + st["dur"]).max())
        keep = ((c["ts"] >= lo) & (c["ts"] < hi)).to_numpy()
    else:
        keep = np.zeros(len(c), bool)
    kept = c[keep].reset_index(drop=True)
    kept.attrs.update(c.attrs)
    return dataclasses.replace(i, steps=st, collectives=kept, truncated=cut)


def _rank_time(m: pd.DataFrame) -> pd.DataFrame:
    """Per rank: the time it spent in its matched collectives (``comm_ns``), waiting in them
    for the last rank (``wait_ns``) and not waiting (``transfer_ns`` = comm - wait; 0 for
    issue ops, whose spans say nothing of the transfer) -- each a union of time, so
    collectives in flight together (a pipeline's batched sends and receives) count once:
    summed, gloo pp_interleaved2's rank 0 was 'in collectives' 4.46 s of a 0.57 s window
    and rank 1 'waited' 252 ms a step in 185 ms steps."""
    from ...passes import intervals

    rows = []
    for r, g in m.groupby("rank", sort=True):
        ts = g["ts"].to_numpy(np.int64)
        wait = intervals.union(ts, ts + g["wait_ns"].to_numpy(np.int64))
        comm = intervals.union(ts, ts + g["dur"].to_numpy(np.int64))
        xfer = g["transfer_ns"].to_numpy(np.int64) > 0
        moved = intervals.subtract(intervals.union(ts[xfer] + g["wait_ns"].to_numpy(np.int64)[xfer],
                                                   ts[xfer] + g["dur"].to_numpy(np.int64)[xfer]), wait)
        rows.append({"rank": r, "comm_ns": intervals.total(comm), "wait_ns": intervals.total(wait),
                     "transfer_ns": intervals.total(moved)})
    return pd.DataFrame(rows, columns=["rank", "comm_ns", "wait_ns", "transfer_ns"])


def _per_rank(inputs: list[RankInput], m: pd.DataFrame) -> pd.DataFrame:
    base = pd.DataFrame({"rank": [i.rank for i in inputs], "file": [i.path for i in inputs],
                         "collectives": [len(i.collectives) for i in inputs]})
    if len(m):
        g = m.groupby("rank")
        agg = pd.DataFrame({
            "matched": g.size(),
            "times_last": g["last"].sum(),
            "lateness_ns": g["lateness_ns"].sum(),
        }).reset_index()
        agg = agg.merge(_rank_time(m), on="rank", how="left")
        base = base.merge(agg, on="rank", how="left")
    for c in ("matched", "comm_ns", "wait_ns", "transfer_ns", "times_last", "lateness_ns"):
        if c not in base:
            base[c] = 0
        base[c] = base[c].fillna(0).astype("int64")
    base["wait_pct"] = np.where(base["comm_ns"] > 0, 100.0 * base["wait_ns"] / base["comm_ns"].clip(lower=1), 0.0)
    steps = {i.rank: i.steps for i in inputs}
    base["steps"] = [len(steps[r]) for r in base["rank"]]
    base["step_mean_ns"] = [int(steps[r]["dur"].mean()) if len(steps[r]) else -1 for r in base["rank"]]
    return base


# ----------------------------------------------------------------------------- entry points

def analyze_traces(traces: list[Trace], link_gbps: float | None = None,
                   windows: list | None = None) -> list[JobResult]:
    """Group loaded traces into jobs and analyse each job with >= 2 ranks.

    Grouping needs only metadata and time spans: per-rank inputs are built for the
    members of a job only. ``windows``: per trace, None or the [start, end) its
    collectives and steps must start in (the analysis window).
    """
    windows = windows or [None] * len(traces)
    heads = [RankInput(path=t.meta.path, rank=int(t.meta.rank if t.meta.rank >= 0 else
                                                  rank_from_name(t.meta.path)),
                       world_size=int(t.meta.world_size), backend=_backend(t),
                       start_ns=_span(t)[0], end_ns=_span(t)[1],
                       truncated=cut_record(t.meta, t.events)) for t in traces]
    jobs = group_jobs(_info(heads))
    out = []
    for job in sorted(jobs.dropna().unique(), key=lambda j: int(j[3:])):
        members = [rank_input(traces[i], window=windows[i]) for i in np.flatnonzero((jobs == job).to_numpy())]
        out.append(analyze_job(members, job=job, link_gbps=link_gbps))
    return out


def _backend(t: Trace) -> str:
    return str((t.meta.distributed or {}).get("backend") or "")


def _span(t: Trace) -> tuple[int, int]:
    ev = t.events
    if not len(ev) or t.meta.clock == "session_ns" or cut_record(t.meta, ev).get("own_clock"):
        return -1, -1
    off = int(t.meta.epoch_offset_ns or 0)
    return int(ev["ts"].min()) + off, int((ev["ts"] + ev["dur"]).max()) + off


def _info(inputs: list[RankInput]) -> pd.DataFrame:
    return pd.DataFrame({
        "path": [display_path(i.path) for i in inputs], "rank": [i.rank for i in inputs],
        "world_size": [i.world_size for i in inputs], "backend": [i.backend for i in inputs],
        "start_ns": [i.start_ns for i in inputs], "end_ns": [i.end_ns for i in inputs],
        "cut": [bool(getattr(i, "truncated", None)) for i in inputs]})


def analyze_inputs(inputs: list[RankInput], link_gbps: float | None = None) -> list[JobResult]:
    """Group per-rank inputs into jobs and analyse each job with >= 2 ranks."""
    jobs = group_jobs(_info(inputs))
    out = []
    for job in sorted(jobs.dropna().unique(), key=lambda j: int(j[3:])):
        members = [inputs[i] for i in np.flatnonzero((jobs == job).to_numpy())]
        out.append(analyze_job(members, job=job, link_gbps=link_gbps))
    return out


__all__ = ["JobResult", "score", "match_collectives", "step_skew", "straggler_of", "analyze_job",
           "analyze_traces", "analyze_inputs", "MATCH_COLUMNS"]
