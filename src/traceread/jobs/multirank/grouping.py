"""Which traces form one job: same world size and backend (or one file-name template in
one directory), overlapping time spans, one trace per rank."""
from __future__ import annotations

import os
import re

import pandas as pd

from .inputs import rank_from_name


def _template(path: str) -> str:
    """File name with its rank number and other digit runs blanked (same run, any rank)."""
    return re.sub(r"\d+", "#", os.path.basename(str(path)))


def group_jobs(info: pd.DataFrame) -> pd.Series:
    """Assign a job id to every trace that belongs to a multi-rank job, else None.

    ``info`` has columns path, rank, world_size, backend, start_ns, end_ns (one row per
    trace) and optionally cut (the file was cut short). Traces join a job when they agree
    on world size (> 1) and backend, or, lacking a world size, live in one directory under
    one file-name template; and their time spans overlap (ranks of one run are profiled at
    the same time). A cut file with no span (its clock was in the lost trailer) joins the
    one job of its kind that lacks its rank (``_place_cut``). Each job keeps one trace per
    rank and needs at least two ranks.
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
        for comp in _place_cut(_overlap_components(df.loc[by_key[k]])):
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


def _place_cut(groups: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """The groups with each cut trace of unknown span moved into the one spanned group that
    lacks its rank (a file cut short lost the clock its span would be read on, not its
    world size, backend or name: the job it belongs to is the one missing its rank); when
    two spanned groups lack it, the one in its directory under its file-name template, else
    it stays where it was (with the other unknown spans)."""
    if not groups or "cut" not in groups[0]:
        return groups
    known = [g for g in groups if ((g["start_ns"] >= 0) & (g["end_ns"] >= 0)).all()]
    unknown = [g for g in groups if not any(g is k for k in known)]
    if not known or not unknown:
        return groups
    rest = unknown[0]
    for idx, r in rest[rest["cut"].fillna(False).astype(bool)].iterrows():
        lack = [i for i, g in enumerate(known) if r["rank"] not in set(g["rank"])]
        if len(lack) > 1:
            here = (os.path.dirname(str(r["path"])), _template(r["path"]))
            lack = [i for i in lack if any((os.path.dirname(str(p)), _template(p)) == here
                                           for p in known[i]["path"])]
        if len(lack) == 1:
            known[lack[0]] = pd.concat([known[lack[0]], rest.loc[[idx]]])
            rest = rest.drop(idx)
    return ([rest] if len(rest) else []) + known


__all__ = ["group_jobs"]
