"""Cross-rank analysis of one distributed job: collective matching, wait vs transfer,
stragglers and step-time skew.

A job is a set of traces of the same run, one per rank. Each NCCL collective runs on
every member rank; it cannot finish before the last member arrives. So, per matched
collective instance, the *fastest* rank's kernel duration is the transfer time and
every other rank's extra duration is time spent waiting for the late arrival:

    wait_r = dur_r - min(dur),  transfer = min(dur),  wait_r + transfer = dur_r

This is clock-free (durations only), so it holds across hosts whose clocks disagree.
The rank with the shortest kernel arrived last: it is that instance's straggler, and
it held the next-latest rank back by ``second-shortest dur - shortest dur``.

Instances are matched across ranks by (process group, sequence number) when the
trace records them; otherwise by position within a lane (process group or comm
stream) when counts and end times agree; otherwise (sampled or partial traces) by
end time, since every member of one collective finishes at about the same moment.

Everything here works on small per-rank inputs (``RankInput``: collective instances
and step times), so ``traceread batch`` can match ranks without re-reading traces.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .readers.kineto import rank_from_filename
from .table import Trace

# Columns of a collective-instance table that matching uses (passes.nccl contract).
COLL_COLUMNS = ("ts", "dur", "device", "stream", "collective", "msg_bytes", "group_size",
                "process_group", "seq")
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# End-time matching tolerance: max(END_TOL_NS, END_TOL_FRAC * shorter duration).
END_TOL_NS = 100_000
END_TOL_FRAC = 0.05


@dataclass
class RankInput:
    """What cross-rank analysis needs from one trace; small and picklable."""

    path: str
    rank: int
    world_size: int = -1
    backend: str = ""
    clock: str = ""
    start_ns: int = -1          # trace span on the epoch clock (-1: unknown)
    end_ns: int = -1
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)


# ----------------------------------------------------------------------------- inputs

def step_table(events: pd.DataFrame) -> pd.DataFrame:
    """Host ``ProfilerStep#N`` ranges: columns step, ts, dur (one row per step)."""
    host = events[events["kind"] == "annotation"]
    if host.empty:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "ts": pd.Series(dtype="int64"),
                             "dur": pd.Series(dtype="int64")})
    names = host["name"].astype("string")
    num = names.str.extract(STEP_RE, expand=False)
    steps = host.loc[num.notna(), ["ts", "dur"]].copy()
    steps["step"] = num[num.notna()].astype("int64").to_numpy()
    # A step may be recorded twice (e.g. nested duplicate): keep its longest range.
    steps = steps.sort_values(["step", "dur"], ascending=[True, False])
    steps = steps.drop_duplicates("step", keep="first")
    return steps[["step", "ts", "dur"]].astype("int64").reset_index(drop=True)


def collective_table(events: pd.DataFrame) -> pd.DataFrame:
    """Collective kernel instances of one trace (``passes.nccl.collective_instances``)."""
    from .passes.nccl import collective_instances

    coll = collective_instances(events)
    return _normalise_collectives(coll)


def _normalise_collectives(coll: pd.DataFrame) -> pd.DataFrame:
    """Just the matching columns: ints (-1 unknown), strings as object (None unknown)."""
    if coll.attrs.get("traceread.multirank"):
        return coll
    n = len(coll)
    cols: dict[str, np.ndarray] = {}
    for c in COLL_COLUMNS:
        if c in ("collective", "process_group"):
            if c in coll.columns:
                v = coll[c].astype(object).to_numpy()
                bad = pd.isna(v) | (v == "unknown")
                v = np.where(bad, None, v.astype(str)).astype(object)
            else:
                v = np.full(n, None, dtype=object)
        elif c in coll.columns:
            v = pd.to_numeric(coll[c], errors="coerce").fillna(-1).to_numpy(np.int64)
        else:
            v = np.full(n, -1, dtype=np.int64)
        cols[c] = v
    order = np.argsort(cols["ts"], kind="stable")
    out = pd.DataFrame({c: v[order] for c, v in cols.items()})
    out.attrs["traceread.multirank"] = True
    return out


def rank_from_name(path: str) -> int:
    """Rank encoded in a file name, by the readers' rule (``rank-3``, ``worker3``...), else -1."""
    return rank_from_filename(os.path.basename(str(path)))


def rank_input(trace: Trace, collectives: pd.DataFrame | None = None) -> RankInput:
    """Per-rank input from a loaded trace."""
    m = trace.meta
    ev = trace.events
    rank = m.rank if m.rank >= 0 else rank_from_name(m.path)
    start = end = -1
    if len(ev) and m.clock != "session_ns":
        start = int(ev["ts"].min()) + int(m.epoch_offset_ns or 0)
        end = int((ev["ts"] + ev["dur"]).max()) + int(m.epoch_offset_ns or 0)
    if collectives is None:
        collectives = collective_table(ev)
    else:
        collectives = _normalise_collectives(collectives)
    return RankInput(path=m.path, rank=int(rank), world_size=int(m.world_size),
                     backend=str((m.distributed or {}).get("backend") or ""), clock=m.clock,
                     start_ns=start, end_ns=end, collectives=collectives,
                     steps=step_table(ev))


# ----------------------------------------------------------------------------- grouping

def _template(path: str) -> str:
    """File name with its rank number and other digit runs blanked (same run, any rank)."""
    return re.sub(r"\d+", "#", os.path.basename(str(path)))


def group_jobs(info: pd.DataFrame) -> pd.Series:
    """Assign a job id to every trace that belongs to a multi-rank job, else None.

    ``info`` has columns path, rank, world_size, backend, start_ns, end_ns (one row per
    trace). Traces join a job when they agree on world size (> 1) and backend, or,
    lacking a world size, live in one directory under one file-name template; and
    their time spans overlap (ranks of one run are profiled at the same time). Each
    job keeps one trace per rank and needs at least two ranks.
    """
    job = pd.Series([None] * len(info), index=info.index, dtype="object")
    if info.empty:
        return job
    df = info.copy()
    df["rank"] = df["rank"].fillna(-1).astype("int64")
    df["world_size"] = df["world_size"].fillna(-1).astype("int64")
    df = df[df["rank"] >= 0]
    keys = []
    for idx, r in df.iterrows():
        if r["world_size"] > 1:
            keys.append((idx, ("ws", int(r["world_size"]), str(r.get("backend") or ""))))
        elif rank_from_name(r["path"]) >= 0:
            keys.append((idx, ("name", os.path.dirname(str(r["path"])), _template(r["path"]))))
    by_key: dict[tuple, list] = {}
    for idx, k in keys:
        by_key.setdefault(k, []).append(idx)
    n = 0
    for k in sorted(by_key, key=str):
        for comp in _overlap_components(df.loc[by_key[k]]):
            comp = comp.sort_values("path", kind="stable").drop_duplicates("rank", keep="first")
            if comp["rank"].nunique() < 2:
                continue
            job.loc[comp.index] = f"job{n}"
            n += 1
    return job


def _overlap_components(df: pd.DataFrame) -> list[pd.DataFrame]:
    """Split traces into groups whose time spans overlap (unknown spans: one group)."""
    known = (df["start_ns"] >= 0) & (df["end_ns"] >= 0)
    groups = [df[~known]] if (~known).any() else []
    kd = df[known].sort_values("start_ns")
    if not kd.empty:
        run_end = kd["end_ns"].cummax().shift(1)
        new = (kd["start_ns"] > run_end).fillna(True)
        gid = new.cumsum()
        groups += [g for _, g in kd.groupby(gid, sort=True)]
    return groups


# ----------------------------------------------------------------------------- matching

def _lanes(per_rank: dict[int, pd.DataFrame]) -> dict[int, pd.DataFrame]:
    """Add a ``lane`` column: the process group, else the comm stream.

    Stream ids are per process; when ranks disagree on the set of comm streams, the
    stream's order of first use stands in for it.
    """
    stream_sets = {frozenset(df.loc[df["process_group"].isna(), "stream"]) for df in per_rank.values()}
    same_streams = len(stream_sets) <= 1
    out = {}
    for rank, df in per_rank.items():
        df = df.copy()
        if same_streams:
            s = "stream:" + df["stream"].astype(str)
        else:
            first = df.groupby("stream")["ts"].min().rank(method="first").astype(int)
            s = "stream#" + df["stream"].map(first).astype(str)
        df["lane"] = np.where(df["process_group"].notna(), "pg:" + df["process_group"].astype(str), s)
        out[rank] = df
    return out


def _end_tol(dur_a: np.ndarray, dur_b: np.ndarray) -> np.ndarray:
    return np.maximum(END_TOL_NS, END_TOL_FRAC * np.minimum(dur_a, dur_b))


def _match_lane(lane: dict[int, pd.DataFrame], clocks_comparable: bool) -> tuple[pd.DataFrame, str]:
    """Match one lane's instances across ranks. Returns (rows with a ``key``, method)."""
    ranks = sorted(lane)
    if all((lane[r]["seq"] >= 0).all() for r in ranks):
        rows = [lane[r].assign(rank=r, key=lane[r]["seq"].to_numpy()) for r in ranks]
        return pd.concat(rows, ignore_index=True), "seq"
    counts = {len(lane[r]) for r in ranks}
    if len(counts) == 1 and _same_collectives(lane, ranks):
        rows = [lane[r].assign(rank=r, key=np.arange(len(lane[r]))) for r in ranks]
        if not clocks_comparable or _ends_agree(lane, ranks):
            return pd.concat(rows, ignore_index=True), "order"
    if not clocks_comparable:
        return pd.DataFrame(), "unmatched"
    return _match_by_end(lane, ranks), "end"


def _same_collectives(lane: dict[int, pd.DataFrame], ranks: list[int]) -> bool:
    ref = lane[ranks[0]]["collective"].to_numpy(dtype=object)
    for r in ranks[1:]:
        other = lane[r]["collective"].to_numpy(dtype=object)
        known = pd.notna(ref) & pd.notna(other)
        if (ref[known] != other[known]).any():
            return False
    return True


def _ends_agree(lane: dict[int, pd.DataFrame], ranks: list[int]) -> bool:
    ref = lane[ranks[0]]
    ref_end = (ref["ts"] + ref["dur"]).to_numpy()
    for r in ranks[1:]:
        o = lane[r]
        end = (o["ts"] + o["dur"]).to_numpy()
        if (np.abs(end - ref_end) > _end_tol(ref["dur"].to_numpy(), o["dur"].to_numpy())).any():
            return False
    return True


def _match_by_end(lane: dict[int, pd.DataFrame], ranks: list[int]) -> pd.DataFrame:
    """Mutual-nearest end times against the rank with most instances, within tolerance,
    overlapping in time and naming the same collective."""
    ref_rank = max(ranks, key=lambda r: (len(lane[r]), -r))
    ref = lane[ref_rank].sort_values("ts").reset_index(drop=True)
    ref_end = (ref["ts"] + ref["dur"]).to_numpy()
    order = np.argsort(ref_end, kind="stable")
    sorted_end = ref_end[order]
    rows = [ref.assign(rank=ref_rank, key=np.arange(len(ref)))]
    for r in ranks:
        if r == ref_rank or lane[r].empty or ref.empty:
            continue
        o = lane[r].reset_index(drop=True)
        end = (o["ts"] + o["dur"]).to_numpy()
        j = _nearest(sorted_end, end)
        cand = order[j]                                   # index into ref
        # Mutual: the ref instance's nearest end on this rank is this instance.
        o_order = np.argsort(end, kind="stable")
        back = o_order[_nearest(end[o_order], ref_end[cand])]
        ok = back == np.arange(len(o))
        ok &= np.abs(end - ref_end[cand]) <= _end_tol(o["dur"].to_numpy(), ref["dur"].to_numpy()[cand])
        ok &= (o["ts"].to_numpy() < ref_end[cand]) & (ref["ts"].to_numpy()[cand] < end)
        rc = ref["collective"].to_numpy(dtype=object)[cand]
        oc = o["collective"].to_numpy(dtype=object)
        ok &= pd.isna(rc) | pd.isna(oc) | (rc == oc)
        rows.append(o[ok].assign(rank=r, key=cand[ok]))
    return pd.concat(rows, ignore_index=True)


def _nearest(sorted_vals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index of the nearest value in ``sorted_vals`` for each ``x``."""
    i = np.clip(np.searchsorted(sorted_vals, x), 1, max(len(sorted_vals) - 1, 1))
    lo = np.clip(i - 1, 0, len(sorted_vals) - 1)
    hi = np.clip(i, 0, len(sorted_vals) - 1)
    return np.where(np.abs(x - sorted_vals[lo]) <= np.abs(sorted_vals[hi] - x), lo, hi)


MATCH_COLUMNS = ["lane", "key", "instance", "method", "collective", "rank", "ts", "dur",
                 "transfer_ns", "wait_ns", "ranks", "last", "lateness_ns", "msg_bytes"]


def match_collectives(per_rank: dict[int, pd.DataFrame], clocks_comparable: bool = True) -> pd.DataFrame:
    """One row per (matched collective instance, rank).

    ``per_rank`` maps rank -> collective-instance table. Instances seen on fewer than
    two ranks are dropped. Columns: lane, key, instance (job-wide id), method
    (seq/order/end), collective, rank, ts, dur, transfer_ns (fastest rank's dur),
    wait_ns (dur - transfer_ns), ranks (ranks in the match), last (this rank arrived
    last: unique shortest kernel), lateness_ns (on the last rank: how long it held the
    next-latest rank back), msg_bytes.
    """
    per_rank = {r: _normalise_collectives(df) for r, df in per_rank.items()}
    per_rank = _lanes(per_rank)
    lanes = sorted({lane for df in per_rank.values() for lane in df["lane"].unique()})
    parts = []
    for lane in lanes:
        members = {r: df[df["lane"] == lane] for r, df in per_rank.items()}
        members = {r: d for r, d in members.items() if len(d)}
        if len(members) < 2:
            continue
        rows, method = _match_lane(members, clocks_comparable)
        if rows.empty:
            continue
        rows["method"] = method
        parts.append(rows)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in MATCH_COLUMNS})
    m = pd.concat(parts, ignore_index=True)
    m = m.drop_duplicates(["lane", "key", "rank"], keep="first")
    g = m.groupby(["lane", "key"], sort=False)
    m["ranks"] = g["rank"].transform("size")
    m = m[m["ranks"] >= 2].copy()
    g = m.groupby(["lane", "key"], sort=False)
    m["transfer_ns"] = g["dur"].transform("min")
    m["wait_ns"] = m["dur"] - m["transfer_ns"]
    # Last arrival: the unique shortest kernel; ties mean nobody waited on anybody.
    fastest = m["wait_ns"] == 0
    n_min = fastest.groupby([m["lane"], m["key"]], sort=False).transform("sum")
    m["last"] = fastest & (n_min == 1)
    # Second-shortest duration of each instance (groups have >= 2 rows).
    by_dur = m.sort_values("dur", kind="stable")
    nth = by_dur.groupby(["lane", "key"], sort=False)["dur"].nth(1)
    second = by_dur.loc[nth.index, ["lane", "key"]].assign(second=nth.to_numpy())
    second = m[["lane", "key"]].merge(second, on=["lane", "key"], how="left")["second"].to_numpy()
    m["lateness_ns"] = np.where(m["last"], second - m["dur"].to_numpy(), 0)
    first_ts = g["ts"].transform("min")
    m = m.assign(_first=first_ts).sort_values(["_first", "lane", "key", "rank"], kind="stable")
    m["instance"] = m.groupby(["lane", "key"], sort=False).ngroup()
    m = m.drop(columns="_first")
    out = m[MATCH_COLUMNS].reset_index(drop=True)
    for c in ("key", "instance", "rank", "ts", "dur", "transfer_ns", "wait_ns", "ranks",
              "lateness_ns", "msg_bytes"):
        out[c] = out[c].astype("int64")
    out["last"] = out["last"].astype(bool)
    return out


# ----------------------------------------------------------------------------- summaries

def step_skew(steps: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Per step seen on >= 2 ranks: min/max/mean step time, skew (max - min) and the
    slowest rank."""
    parts = [s.assign(rank=r) for r, s in steps.items() if s is not None and len(s)]
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


@dataclass
class JobResult:
    """Cross-rank results of one job."""

    job: str
    ranks: list[int]
    paths: dict[int, str]
    world_size: int
    matches: pd.DataFrame        # match_collectives()
    per_rank: pd.DataFrame       # one row per rank
    steps: pd.DataFrame          # step_skew()
    straggler: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        methods = self.matches.drop_duplicates("instance")["method"].value_counts()
        return {
            "job": self.job,
            "ranks": self.ranks,
            "world_size": self.world_size,
            "paths": {str(k): v for k, v in self.paths.items()},
            "matched_instances": int(self.matches["instance"].nunique()) if len(self.matches) else 0,
            "match_methods": {str(k): int(v) for k, v in methods.items()},
            "straggler": self.straggler,
            "per_rank": _records(self.per_rank),
            "step_skew": {
                "steps": int(len(self.steps)),
                "mean_skew_ns": int(self.steps["skew_ns"].mean()) if len(self.steps) else 0,
                "max_skew_ns": int(self.steps["skew_ns"].max()) if len(self.steps) else 0,
                "by_step": _records(self.steps),
            },
        }


def _records(df: pd.DataFrame) -> list[dict]:
    recs = df.to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in recs]


def analyze_job(inputs: Iterable[RankInput], job: str = "job0") -> JobResult:
    """Cross-rank analysis of the ranks of one job (one RankInput per rank)."""
    inputs = sorted(inputs, key=lambda i: i.rank)
    ranks = [i.rank for i in inputs]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks in job {job}: {ranks}")
    comparable = all(i.clock != "session_ns" and i.start_ns >= 0 for i in inputs)
    matches = match_collectives({i.rank: i.collectives for i in inputs}, comparable)
    skew = step_skew({i.rank: i.steps for i in inputs})
    per_rank = _per_rank(inputs, matches)
    world = max((i.world_size for i in inputs), default=-1)
    return JobResult(job=job, ranks=ranks, paths={i.rank: i.path for i in inputs}, world_size=world,
                     matches=matches, per_rank=per_rank, steps=skew,
                     straggler=_straggler(matches))


def _per_rank(inputs: list[RankInput], m: pd.DataFrame) -> pd.DataFrame:
    base = pd.DataFrame({"rank": [i.rank for i in inputs], "file": [i.path for i in inputs],
                         "collectives": [len(i.collectives) for i in inputs]})
    if len(m):
        g = m.groupby("rank")
        agg = pd.DataFrame({
            "matched": g.size(),
            "comm_ns": g["dur"].sum(),
            "wait_ns": g["wait_ns"].sum(),
            "transfer_ns": g["transfer_ns"].sum(),
            "times_last": g["last"].sum(),
            "lateness_ns": g["lateness_ns"].sum(),
        }).reset_index()
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


def _straggler(m: pd.DataFrame) -> dict[str, Any]:
    """The rank that arrives last most often and by how much it holds the others back."""
    n = int(m["instance"].nunique()) if len(m) else 0
    last = m[m["last"]] if len(m) else m
    if n == 0 or last.empty:
        return {"rank": -1, "times_last": 0, "instances": n, "share": 0.0,
                "median_delay_ns": 0, "mean_delay_ns": 0, "by_collective": {}}
    counts = last["rank"].value_counts()
    top = counts[counts == counts.max()].index.min()
    mine = last[last["rank"] == top]
    by_coll = mine.groupby(mine["collective"].fillna("unknown"))["lateness_ns"].median()
    return {
        "rank": int(top),
        "times_last": int(counts.loc[top]),
        "instances": n,
        "share": float(counts.loc[top] / n),
        "median_delay_ns": int(mine["lateness_ns"].median()),
        "mean_delay_ns": int(round(mine["lateness_ns"].mean())),
        "by_collective": {str(k): int(v) for k, v in by_coll.items()},
    }


# ----------------------------------------------------------------------------- entry points

def analyze_traces(traces: list[Trace]) -> list[JobResult]:
    """Group loaded traces into jobs and analyse each job with >= 2 ranks."""
    inputs = [rank_input(t) for t in traces]
    return analyze_inputs(inputs)


def analyze_inputs(inputs: list[RankInput]) -> list[JobResult]:
    info = pd.DataFrame({
        "path": [i.path for i in inputs], "rank": [i.rank for i in inputs],
        "world_size": [i.world_size for i in inputs], "backend": [i.backend for i in inputs],
        "start_ns": [i.start_ns for i in inputs], "end_ns": [i.end_ns for i in inputs]})
    jobs = group_jobs(info)
    out = []
    for job in sorted(jobs.dropna().unique(), key=lambda j: int(j[3:])):
        members = [inputs[i] for i in np.flatnonzero((jobs == job).to_numpy())]
        out.append(analyze_job(members, job=job))
    return out


def cross_rank_section(analyses: list, paths: list) -> str:
    """Text appended to ``traceread analyze`` when several traces form a job ("" if none).

    Groups by the analyses' metadata first, so only traces that belong to a job are
    read again (for their collective instances).
    """
    if len(analyses) < 2:
        return ""
    from .readers import read

    info = pd.DataFrame({
        "path": [str(p) for p in paths],
        "rank": [a.meta.rank if a.meta.rank >= 0 else rank_from_name(str(p)) for a, p in zip(analyses, paths)],
        "world_size": [a.meta.world_size for a in analyses],
        "backend": [str((a.meta.distributed or {}).get("backend") or "") for a in analyses],
        "start_ns": -1, "end_ns": -1})
    jobs = group_jobs(info)
    members = [i for i in range(len(paths)) if jobs.iloc[i] is not None]
    if not members:
        return ""
    traces = [analyses[i].trace if analyses[i].trace is not None else read(paths[i]) for i in members]
    results = analyze_traces(traces)
    return ("\n\n" + render_text(results)) if results else ""


def render_text(results: list[JobResult]) -> str:
    """The cross-rank section of ``traceread analyze`` for several traces."""
    from .render.text import fmt_ns

    lines: list[str] = []
    for res in results:
        d = res.to_dict()
        world = f" of {res.world_size}" if res.world_size > 0 else ""
        lines.append(f"Cross-rank ({res.job}: ranks {', '.join(map(str, res.ranks))}{world})")
        meth = ", ".join(f"{k} {v}" for k, v in d["match_methods"].items()) or "none"
        lines.append(f"  collectives matched   {d['matched_instances']} instances (by {meth})")
        s = res.straggler
        if s["rank"] >= 0:
            lines.append(f"  straggler             rank {s['rank']}: last in {s['times_last']}/{s['instances']}"
                         f" ({100 * s['share']:.0f}%), holds others back by {fmt_ns(s['median_delay_ns'])}"
                         f" (median; mean {fmt_ns(s['mean_delay_ns'])})")
        else:
            lines.append("  straggler             none (no matched collective with a unique last rank)")
        lines.append(f"  {'rank':>5} {'matched':>8} {'comm':>10} {'wait':>10} {'transfer':>10} {'wait%':>6}"
                     f" {'last':>5} {'step mean':>10}")
        for r in res.per_rank.itertuples():
            step = fmt_ns(r.step_mean_ns) if r.step_mean_ns >= 0 else "-"
            lines.append(f"  {r.rank:>5} {r.matched:>8} {fmt_ns(r.comm_ns):>10} {fmt_ns(r.wait_ns):>10}"
                         f" {fmt_ns(r.transfer_ns):>10} {r.wait_pct:>5.1f}% {r.times_last:>5} {step:>10}")
        sk = d["step_skew"]
        if sk["steps"]:
            slow = res.steps["slowest_rank"].value_counts()
            lines.append(f"  step skew             {sk['steps']} steps, mean {fmt_ns(sk['mean_skew_ns'])},"
                         f" max {fmt_ns(sk['max_skew_ns'])}; slowest most often: rank {int(slow.index[0])}")
        else:
            lines.append("  step skew             no ProfilerStep seen on two ranks")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


__all__ = ["RankInput", "JobResult", "cross_rank_section", "step_table", "collective_table", "rank_input", "group_jobs",
           "match_collectives", "step_skew", "analyze_job", "analyze_traces", "analyze_inputs",
           "render_text", "rank_from_name"]
