"""Matching collective instances across ranks: which instance on rank A is the same
collective as which instance on rank B.

Within a *lane* (the process group, else the comm stream, else the default group),
every member issues the same collectives in the same order -- that is what makes
collectives deadlock-free -- so, per lane:

1. ``seq``: by sequence number when every instance of every rank records one;
2. ``order``: by position when every rank issued the same sequence of
   (collective, message size) tokens;
3. ``align``: otherwise each rank's token sequence is aligned to the rank with the
   most instances (longest common subsequence, Myers' diff), so a rank that issued
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

from .inputs import normalise_collectives

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
        df["lane"] = np.where(_p2p(df), _p2p_lane(df, rank), df["lane"])
        out[rank] = df
    return out


def _p2p(df: pd.DataFrame) -> np.ndarray:
    """Send / recv rows whose peer is known: a pair of ranks, not the whole group."""
    if "peer" not in df:
        return np.zeros(len(df), bool)
    return (df["collective"].isin(("send", "recv")) & (df["peer"] >= 0)).to_numpy()


def _p2p_lane(df: pd.DataFrame, rank: int) -> np.ndarray:
    """One lane per direction: rank a's sends to b meet b's receives from a, in order (a
    pair's messages are delivered in the order sent). The peer is taken as a global rank
    (gloo calls name no group: the default group's ranks)."""
    send = (df["collective"] == "send").to_numpy()
    peer = df["peer"].to_numpy().astype(str)
    me = np.full(len(df), str(rank), dtype=object)
    return np.where(send, "p2p:" + me + ">" + peer.astype(object), "p2p:" + peer.astype(object) + ">" + me)


def _tokens(df: pd.DataFrame) -> list[tuple]:
    """What must agree for two ranks' instances to pair: the collective and its size (a
    send meets a recv: in a P2P lane only the size)."""
    p2p = _p2p(df)
    coll = np.where(p2p, "p2p", df["collective"].astype(object).to_numpy())
    return list(zip(coll.tolist(), df["msg_bytes"].tolist()))


# ----------------------------------------------------------------------------- pass 1: by token

def match_lane(lane: dict[int, pd.DataFrame], cut: frozenset = frozenset()
               ) -> tuple[pd.DataFrame, str, list[dict], bool]:
    """Match one lane by seq / order / align. Returns (rows, method, unmatched, ambiguous).

    ``cut``: ranks whose file was cut short -- what they hold of the lane is its first
    instances, so ``order`` holds when each is a prefix of the others' sequence, and the
    others' instances past its end are not "missing" on it."""
    ranks = sorted(lane)
    if all((lane[r]["seq"] >= 0).all() for r in ranks):
        rows = [lane[r].assign(rank=r, key=lane[r]["seq"].to_numpy()) for r in ranks]
        return pd.concat(rows, ignore_index=True), "seq", [], False
    toks = {r: _tokens(lane[r]) for r in ranks}
    first = toks[next((r for r in ranks if r not in cut), ranks[0])]
    if all(toks[r] == (first[:len(toks[r])] if r in cut else first) for r in ranks):
        rows = [lane[r].assign(rank=r, key=np.arange(len(lane[r]))) for r in ranks]
        return pd.concat(rows, ignore_index=True), "order", [], False
    ref = max(ranks, key=lambda r: (len(lane[r]), -r))
    rows = [lane[ref].assign(rank=ref, key=np.arange(len(lane[ref])))]
    unmatched: list[dict] = []
    ambiguous = False
    for r in ranks:
        if r == ref:
            continue
        keys = np.full(len(toks[r]), -1, np.int64)
        for op, i1, i2, j1, j2 in opcodes(toks[ref], toks[r]):
            if op == "equal":
                keys[j1:j2] = np.arange(i1, i2)
                continue
            if op == "delete" and r in cut and j1 == len(toks[r]) and i2 == len(toks[ref]):
                continue   # past the end of a cut file: not issued is not known
            ambiguous |= _in_run(toks[ref], i1, i2) or _in_run(toks[r], j1, j2)
            unmatched += _why(op, toks[ref][i1:i2], toks[r][j1:j2], ref, r, i1, j1)
        ok = keys >= 0
        rows.append(lane[r][ok].assign(rank=r, key=keys[ok]))
    return pd.concat(rows, ignore_index=True), "align", unmatched, ambiguous


MAX_EDITS = 512


def opcodes(a: list, b: list) -> list[tuple]:
    """difflib-style opcodes of a longest common subsequence of ``a`` and ``b``.

    ``difflib.SequenceMatcher`` is not an LCS (it grows the longest *contiguous*
    block first: one extra all_gather between all_reduces can unpair the one before
    it); Myers' O((n + m) D) diff is, and D -- the number of unaligned instances --
    is small. Beyond ``MAX_EDITS`` it falls back to difflib.
    """
    pairs = _myers(a, b)
    if pairs is None:
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    out = []
    pi = pj = 0
    for i, j in pairs + [(len(a), len(b))]:
        if i > pi or j > pj:
            op = "replace" if i > pi and j > pj else ("delete" if i > pi else "insert")
            out.append((op, pi, i, pj, j))
        if i < len(a):
            out.append(("equal", i, i + 1, j, j + 1))
        pi, pj = i + 1, j + 1
    return out


def _myers(a: list, b: list) -> list[tuple[int, int]] | None:
    """Matched (i, j) pairs of an LCS, in order; None past MAX_EDITS edits."""
    n, m = len(a), len(b)
    v = {1: 0}
    trace = []
    for d in range(min(n + m, MAX_EDITS) + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[dict], x: int, y: int) -> list[tuple[int, int]]:
    pairs = []
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        prev_k = k + 1 if k == -d or (k != d and v.get(k - 1, -1) < v.get(k + 1, -1)) else k - 1
        prev_x = v.get(prev_k, 0)
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    return pairs[::-1]


def _in_run(tok: list, a: int, b: int) -> bool:
    """An unaligned stretch [a, b) touching an identical neighbour: its position is a guess."""
    if a >= b:  # nothing unaligned on this side
        return False
    return (a > 0 and tok[a - 1] == tok[a]) or (b < len(tok) and tok[b] == tok[b - 1])


def _why(op: str, ref_tok: list, tok: list, ref: int, rank: int, i0: int, j0: int) -> list[dict]:
    out = []
    if op == "replace" and len(ref_tok) == len(tok):
        for k, (a, b) in enumerate(zip(ref_tok, tok)):
            what = "type differs" if a[0] != b[0] else "size differs"
            out.append({"rank": rank, "collective": b[0], "msg_bytes": int(b[1]), "ref_rank": ref,
                        "index": j0 + k, "reason": f"{what} from rank {ref} ({a[0]}, {a[1]} B)"})
        return out
    for k, b in enumerate(tok):
        out.append({"rank": rank, "collective": b[0], "msg_bytes": int(b[1]), "ref_rank": ref,
                    "index": j0 + k, "reason": f"not issued by rank {ref}"})
    for k, a in enumerate(ref_tok):
        out.append({"rank": ref, "collective": a[0], "msg_bytes": int(a[1]), "ref_rank": rank,
                    "index": i0 + k, "reason": f"not issued by rank {rank}"})
    return out


# ----------------------------------------------------------------------------- pass 2: by end time

def match_by_end(lane: dict[int, pd.DataFrame], offsets: dict[int, int],
                 tol_ns: int = END_TOL_NS) -> tuple[pd.DataFrame, list[dict]]:
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
        ok &= np.abs(end - ref_end[cand]) <= _end_tol(o["dur"].to_numpy(), ref["dur"].to_numpy()[cand], tol_ns)
        ok &= (ts < ref_end[cand]) & (ref_ts[cand] < end)
        rc = ref["collective"].to_numpy(dtype=object)[cand]
        oc = o["collective"].to_numpy(dtype=object)
        ok &= pd.isna(rc) | pd.isna(oc) | (rc == oc)
        rows.append(o[ok].assign(rank=r, key=cand[ok]))
        for c in o.loc[~ok, "collective"]:
            unmatched.append({"rank": r, "collective": c, "msg_bytes": -1, "ref_rank": ref_rank,
                              "reason": f"no instance of rank {ref_rank} ends at the same time"})
    paired = set(np.concatenate([p["key"].to_numpy() for p in rows[1:]])) if len(rows) > 1 else set()
    for k, c in enumerate(ref["collective"]):
        if k not in paired:
            unmatched.append({"rank": ref_rank, "collective": c, "msg_bytes": -1, "ref_rank": -1,
                              "reason": "no other rank's instance ends at the same time"})
    return pd.concat(rows, ignore_index=True), unmatched


def _end_tol(dur_a: np.ndarray, dur_b: np.ndarray, tol_ns: int = END_TOL_NS) -> np.ndarray:
    return np.maximum(tol_ns, END_TOL_FRAC * np.minimum(dur_a, dur_b))


def _nearest(sorted_vals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index of the nearest value in ``sorted_vals`` for each ``x``."""
    i = np.clip(np.searchsorted(sorted_vals, x), 1, max(len(sorted_vals) - 1, 1))
    lo = np.clip(i - 1, 0, len(sorted_vals) - 1)
    hi = np.clip(i, 0, len(sorted_vals) - 1)
    return np.where(np.abs(x - sorted_vals[lo]) <= np.abs(sorted_vals[hi] - x), lo, hi)


# ----------------------------------------------------------------------------- driver

def match_rows(per_rank: dict[int, pd.DataFrame], offsets_for=None,
               end_tol_ns: int = END_TOL_NS, cut: frozenset = frozenset()
               ) -> tuple[pd.DataFrame, list[dict], dict]:
    """Match every lane. ``offsets_for(rows) -> {rank: ns}`` estimates clock offsets from
    the token-matched rows; ambiguous lanes are then matched by corrected end time.
    ``cut``: the ranks whose file was cut short (``match_lane``; a lane they lack may
    have begun after their cut: no "issued none" record for them).

    Returns (rows: one per (lane, key, rank) seen on >= 2 ranks, unmatched records,
    {"offsets": ..., "methods": {lane: method}}).
    """
    per_rank = add_lanes({r: normalise_collectives(df) for r, df in per_rank.items()})
    lanes = sorted({lane for df in per_rank.values() for lane in df["lane"].unique()})
    by_lane = split_lanes(per_rank, lanes)
    parts, unmatched, methods, redo = [], [], {}, []
    for lane in lanes:
        members = by_lane.pop(lane)   # each lane's tables are dropped once it is matched
        if len(members) < 2:
            for r, d in members.items():
                unmatched += [{"rank": r, "collective": c, "msg_bytes": -1, "ref_rank": -1, "lane": lane,
                               "reason": "lane seen on one rank only"} for c in d["collective"]]
            continue
        absent = [r for r in expected_absent(lane, members, per_rank) if r not in cut]
        if absent:   # one reason text per lane
            n = max(len(d) for d in members.values())
            why = f"issued none of this lane's collectives ({n} on other ranks)"
            unmatched += [{"rank": r, "collective": None, "msg_bytes": -1, "ref_rank": -1,
                           "lane": lane, "reason": why} for r in absent]
        rows, method, um, ambiguous = match_lane(members, cut)
        if ambiguous:
            redo.append((lane, members))
            continue
        parts.append(rows.assign(method=method))
        unmatched += [dict(u, lane=lane) for u in um]
        methods[lane] = method
    offsets = offsets_for(_finish(parts)) if offsets_for else {}
    if redo and not parts:  # nothing paired yet: let the end times vote
        from .clocks import vote_offsets

        offsets = vote_offsets({r: pd.concat([m[r] for _, m in redo if r in m]) for r in per_rank},
                               end_tol_ns)
    for lane, members in redo:
        rows, um = match_by_end(members, offsets, end_tol_ns)
        parts.append(rows.assign(method="end"))
        unmatched += [dict(u, lane=lane) for u in um]
        methods[lane] = "end"
    return _finish(parts), _dedupe(unmatched), {"offsets": offsets, "methods": methods}


def expected_absent(lane: str, members: dict, per_rank: dict) -> list[int]:
    """The ranks outside ``members`` that the lane should have held, sorted.

    A P2P lane (``p2p:a>b``) is the pair a, b; a named group whose rows give its size and
    already has that many members expects no one else. Any other lane (the default
    group, a comm stream, a group of unknown size) expects every rank. Listing every
    absent rank for every lane made lanes x ranks records on a pipeline (one P2P lane
    per pair of neighbours), nearly all of them ranks that were never in the lane.
    """
    if lane.startswith("p2p:"):
        pair = set()
        for r in lane[4:].split(">"):
            try:
                pair.add(int(r))
            except ValueError:   # a peer the trace wrote oddly: expect every rank
                return sorted(set(per_rank) - set(members))
        return sorted((pair & set(per_rank)) - set(members))
    if lane.startswith("pg:") and lane != "pg:default":
        size = max((int(d["group_size"].max()) for d in members.values()
                    if "group_size" in d and len(d)), default=-1)
        if 0 < size <= len(members):
            return []
    return sorted(set(per_rank) - set(members))


def split_lanes(per_rank: dict[int, pd.DataFrame], lanes: list) -> dict:
    """{lane: {rank: that rank's rows of the lane}} (ranks in ``per_rank``'s order, rows in
    their order), in one pass over each rank's table: filtering every table once per lane
    cost ranks x lanes, quadratic when lanes grow with the ranks (P2P pairs, groups)."""
    out: dict = {lane: {} for lane in lanes}
    for r, df in per_rank.items():
        codes, names = pd.factorize(df["lane"], sort=False)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        for k, lane in enumerate(names):
            out[lane][r] = df.iloc[order[bounds[k]:bounds[k + 1]]]
    return out


def _dedupe(unmatched: list[dict]) -> list[dict]:
    """One record per unmatched instance: "not issued by rank a", "... rank b" merge."""
    out: dict = {}
    for u in unmatched:   # records made by match_rows alone: completed in place, not copied
        k = (u.get("lane"), u["rank"], u.get("index", id(u)))
        missing = u["reason"].startswith("not issued by")
        if k in out:
            if missing and out[k]["reason"].startswith("not issued by"):
                out[k]["missing_on"].append(u["ref_rank"])
            continue
        u["missing_on"] = [u["ref_rank"]] if missing else []
        out[k] = u
    for u in out.values():
        if len(u["missing_on"]) > 1:
            u["reason"] = f"not issued by {len(u['missing_on'])} ranks"
        u.pop("index", None)
    return list(out.values())


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
        if col == "collective":   # a send meets a recv in a P2P lane
            v = v.where(~rows["lane"].astype(str).str.startswith("p2p:"), "p2p")
        known = v.notna() if unknown is None else (v != unknown)
        g = v[known].groupby([rows.loc[known, "lane"], rows.loc[known, "key"]]).nunique()
        bad.append(g[g > 1].index)
    idx = bad[0].union(bad[1]).union(bad[2])
    return pd.DataFrame(list(idx), columns=["lane", "key"])


__all__ = ["add_lanes", "match_lane", "match_by_end", "match_rows", "disagreements"]
