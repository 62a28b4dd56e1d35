"""Matching collective instances across ranks: which instance on rank A is the same
collective as which instance on rank B.

Within a *lane* (the process group, else the comm stream, else the default group),
every member issues the same collectives in the same order -- that is what makes
collectives deadlock-free -- so, per lane:

1. ``seq``: by sequence number when every instance of every rank records one;
2. ``order``: by position when every rank issued the same sequence of
   (collective, message size) tokens;
3. ``align``: otherwise each rank's token sequence is aligned to the rank with the
   most instances (longest common subsequence, ``difflib``), so a rank that issued
   one extra collective (a logging all_gather, a barrier) or lost one (a sampled
   trace) does not shift every later pair. Unaligned instances are reported with
   the reason (extra on a rank, missing on a rank, type or size differs);
4. ``end``: when an unaligned instance sits in a run of identical tokens, token
   order cannot say which one is missing: those lanes are matched by end time
   (every member of a collective finishes at about the same moment) after the
   clock offsets are known. Instances must then end within max(100 us, 5% of the
   shorter one), overlap in time and name the same collective.

Matched instances must agree on collective, size and dtype where both ranks
know them; disagreements are counted (``mismatched``), never silently paired.
"""
from __future__ import annotations

import difflib

import numpy as np
import pandas as pd

from .inputs import _normalise_collectives

END_TOL_NS = 100_000
END_TOL_FRAC = 0.05
ROW_COLUMNS = ["lane", "key", "rank", "ts", "dur", "collective", "msg_bytes", "dtype", "method"]


# ----------------------------------------------------------------------------- lanes

def add_lanes(per_rank: dict[int, pd.DataFrame]) -> dict[int, pd.DataFrame]:
    """Add a ``lane`` column: the process group, else the comm stream, else ``default``.

    Stream ids are per process; when ranks disagree on the set of comm streams, the
    stream's order of first use stands in for it. Host collectives (gloo) have no
    stream: they run in the default group unless the trace names one.
    """
    stream_sets = {frozenset(df.loc[df["process_group"].isna() & (df["stream"] >= 0), "stream"])
                   for df in per_rank.values()}
    same_streams = len(stream_sets) <= 1
    out = {}
    for rank, df in per_rank.items():
        df = df.copy()
        if same_streams:
            s = "stream:" + df["stream"].astype(str)
        else:
            first = df.groupby("stream")["ts"].min().rank(method="first").astype(int)
            s = "stream#" + df["stream"].map(first).astype(str)
        s = np.where(df["stream"] < 0, "pg:default", s)
        df["lane"] = np.where(df["process_group"].notna(), "pg:" + df["process_group"].astype(str), s)
        out[rank] = df
    return out


def _tokens(df: pd.DataFrame) -> list[tuple]:
    return list(zip(df["collective"].tolist(), df["msg_bytes"].tolist()))


# ----------------------------------------------------------------------------- pass 1: by token

def match_lane(lane: dict[int, pd.DataFrame]) -> tuple[pd.DataFrame, str, list[dict], bool]:
    """Match one lane by seq / order / align. Returns (rows, method, unmatched, ambiguous)."""
    ranks = sorted(lane)
    if all((lane[r]["seq"] >= 0).all() for r in ranks):
        rows = [lane[r].assign(rank=r, key=lane[r]["seq"].to_numpy()) for r in ranks]
        return pd.concat(rows, ignore_index=True), "seq", [], False
    toks = {r: _tokens(lane[r]) for r in ranks}
    if all(toks[r] == toks[ranks[0]] for r in ranks):
        rows = [lane[r].assign(rank=r, key=np.arange(len(lane[r]))) for r in ranks]
        return pd.concat(rows, ignore_index=True), "order", [], False
    ref = max(ranks, key=lambda r: (len(lane[r]), -r))
    rows = [lane[ref].assign(rank=ref, key=np.arange(len(lane[ref])))]
    unmatched: list[dict] = []
    ambiguous = False
    for r in ranks:
        if r == ref:
            continue
        sm = difflib.SequenceMatcher(None, toks[ref], toks[r], autojunk=False)
        keys = np.full(len(toks[r]), -1, np.int64)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "equal":
                keys[j1:j2] = np.arange(i1, i2)
                continue
            ambiguous |= _in_run(toks[ref], i1, i2) or _in_run(toks[r], j1, j2)
            unmatched += _why(op, toks[ref][i1:i2], toks[r][j1:j2], ref, r)
        ok = keys >= 0
        rows.append(lane[r][ok].assign(rank=r, key=keys[ok]))
    return pd.concat(rows, ignore_index=True), "align", unmatched, ambiguous


def _in_run(tok: list, a: int, b: int) -> bool:
    """An unaligned stretch [a, b) touching an identical neighbour: its position is a guess."""
    if a >= b:  # insertion point: ambiguous when the neighbours on both sides are equal
        return 0 < a < len(tok) and tok[a - 1] == tok[a]
    return (a > 0 and tok[a - 1] == tok[a]) or (b < len(tok) and tok[b] == tok[b - 1])


def _why(op: str, ref_tok: list, tok: list, ref: int, rank: int) -> list[dict]:
    out = []
    if op == "replace" and len(ref_tok) == len(tok):
        for a, b in zip(ref_tok, tok):
            what = "type differs" if a[0] != b[0] else "size differs"
            out.append({"rank": rank, "collective": b[0], "msg_bytes": int(b[1]), "ref_rank": ref,
                        "reason": f"{what} from rank {ref} ({a[0]}, {a[1]} B)"})
        return out
    for b in tok:
        out.append({"rank": rank, "collective": b[0], "msg_bytes": int(b[1]), "ref_rank": ref,
                    "reason": f"not issued by rank {ref}"})
    for a in ref_tok:
        out.append({"rank": ref, "collective": a[0], "msg_bytes": int(a[1]), "ref_rank": rank,
                    "reason": f"not issued by rank {rank}"})
    return out


# ----------------------------------------------------------------------------- pass 2: by end time

def match_by_end(lane: dict[int, pd.DataFrame], offsets: dict[int, int]) -> tuple[pd.DataFrame, list[dict]]:
    """Mutual-nearest end times (clock-corrected) against the rank with most instances,
    within tolerance, overlapping in time and naming the same collective."""
    ranks = sorted(lane)
    ref_rank = max(ranks, key=lambda r: (len(lane[r]), -r))
    ref = lane[ref_rank].reset_index(drop=True)
    ref_ts = ref["ts"].to_numpy() + offsets.get(ref_rank, 0)
    ref_end = ref_ts + ref["dur"].to_numpy()
    order = np.argsort(ref_end, kind="stable")
    rows = [ref.assign(rank=ref_rank, key=np.arange(len(ref)))]
    unmatched = []
    for r in ranks:
        if r == ref_rank or lane[r].empty or ref.empty:
            continue
        o = lane[r].reset_index(drop=True)
        ts = o["ts"].to_numpy() + offsets.get(r, 0)
        end = ts + o["dur"].to_numpy()
        cand = order[_nearest(ref_end[order], end)]
        o_order = np.argsort(end, kind="stable")
        back = o_order[_nearest(end[o_order], ref_end[cand])]
        ok = back == np.arange(len(o))
        ok &= np.abs(end - ref_end[cand]) <= _end_tol(o["dur"].to_numpy(), ref["dur"].to_numpy()[cand])
        ok &= (ts < ref_end[cand]) & (ref_ts[cand] < end)
        rc = ref["collective"].to_numpy(dtype=object)[cand]
        oc = o["collective"].to_numpy(dtype=object)
        ok &= pd.isna(rc) | pd.isna(oc) | (rc == oc)
        rows.append(o[ok].assign(rank=r, key=cand[ok]))
        for c in o.loc[~ok, "collective"]:
            unmatched.append({"rank": r, "collective": c, "msg_bytes": -1, "ref_rank": ref_rank,
                              "reason": f"no instance of rank {ref_rank} ends at the same time"})
    return pd.concat(rows, ignore_index=True), unmatched


def _end_tol(dur_a: np.ndarray, dur_b: np.ndarray) -> np.ndarray:
    return np.maximum(END_TOL_NS, END_TOL_FRAC * np.minimum(dur_a, dur_b))


def _nearest(sorted_vals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index of the nearest value in ``sorted_vals`` for each ``x``."""
    i = np.clip(np.searchsorted(sorted_vals, x), 1, max(len(sorted_vals) - 1, 1))
    lo = np.clip(i - 1, 0, len(sorted_vals) - 1)
    hi = np.clip(i, 0, len(sorted_vals) - 1)
    return np.where(np.abs(x - sorted_vals[lo]) <= np.abs(sorted_vals[hi] - x), lo, hi)


# ----------------------------------------------------------------------------- driver

def match_rows(per_rank: dict[int, pd.DataFrame], offsets_for=None) -> tuple[pd.DataFrame, list[dict], dict]:
    """Match every lane. ``offsets_for(rows) -> {rank: ns}`` estimates clock offsets from
    the token-matched rows; ambiguous lanes are then matched by corrected end time.

    Returns (rows: one per (lane, key, rank) seen on >= 2 ranks, unmatched records,
    {"offsets": ..., "methods": {lane: method}}).
    """
    per_rank = add_lanes({r: _normalise_collectives(df) for r, df in per_rank.items()})
    lanes = sorted({lane for df in per_rank.values() for lane in df["lane"].unique()})
    parts, unmatched, methods, redo = [], [], {}, []
    for lane in lanes:
        members = {r: df[df["lane"] == lane] for r, df in per_rank.items()}
        members = {r: d for r, d in members.items() if len(d)}
        if len(members) < 2:
            for r, d in members.items():
                unmatched += [{"rank": r, "collective": c, "msg_bytes": -1, "ref_rank": -1, "lane": lane,
                               "reason": "lane seen on one rank only"} for c in d["collective"]]
            continue
        rows, method, um, ambiguous = match_lane(members)
        if ambiguous:
            redo.append((lane, members))
            continue
        parts.append(rows.assign(method=method))
        unmatched += [dict(u, lane=lane) for u in um]
        methods[lane] = method
    offsets = offsets_for(_finish(parts)) if offsets_for else {}
    if redo and offsets_for and not parts:  # nothing unambiguous: estimate from the guesses
        guesses = [match_lane(m)[0].assign(method="align") for _, m in redo]
        offsets = offsets_for(_finish(guesses))
    for lane, members in redo:
        rows, um = match_by_end(members, offsets)
        parts.append(rows.assign(method="end"))
        unmatched += [dict(u, lane=lane) for u in um]
        methods[lane] = "end"
    return _finish(parts), unmatched, {"offsets": offsets, "methods": methods}


def _finish(parts: list[pd.DataFrame]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ROW_COLUMNS})
    m = pd.concat(parts, ignore_index=True)
    m = m.drop_duplicates(["lane", "key", "rank"], keep="first")
    n = m.groupby(["lane", "key"], sort=False)["rank"].transform("size")
    return m[n >= 2][ROW_COLUMNS].reset_index(drop=True)


def disagreements(rows: pd.DataFrame) -> pd.DataFrame:
    """Matched (lane, key) groups whose ranks disagree on collective, size or dtype."""
    if not len(rows):
        return rows.iloc[0:0]
    bad = []
    for col, unknown in (("collective", None), ("msg_bytes", -1), ("dtype", None)):
        v = rows[col]
        known = v.notna() if unknown is None else (v != unknown)
        g = v[known].groupby([rows.loc[known, "lane"], rows.loc[known, "key"]]).nunique()
        bad.append(g[g > 1].index)
    idx = bad[0].union(bad[1]).union(bad[2])
    return pd.DataFrame(list(idx), columns=["lane", "key"])


__all__ = ["add_lanes", "match_lane", "match_by_end", "match_rows", "disagreements"]
