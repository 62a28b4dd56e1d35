"""Clock alignment without a barrier: every member of one collective finishes at about
the same moment, so the difference of two ranks' end times over many matched
instances is the difference of their clocks.

Per rank r against the reference rank (the lowest rank; a rank sharing no instance
with it goes through a rank that does): ``estimate = median(end_ref - end_r)`` over
their common instances, ``spread`` = median absolute deviation of those
differences around the estimate. ``aligned_ts = ts + offset``.

The estimate is *applied* unless:

* the ranks share one clock for sure (one nsys export split into processes, or Kineto
  traces with one ``host_name``: processes of one host read one system clock): 0;
* it is within what "ends together" can resolve: |estimate| <= max(floor, 3 x
  spread), with floor 0 for GPU kernels (NCCL kernels of one collective end within
  microseconds) and ``HOST_END_SKEW_NS`` for host-side collectives (gloo's ranks
  leave a ring all_reduce up to ~1 ms apart: measured on the committed captures);
* only issue ops were recorded (their ends are not the collective's end): nothing
  to estimate from.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

HOST_END_SKEW_NS = 2_000_000
FLOOR_NS = {"kernel": 0, "host": HOST_END_SKEW_NS}


def estimate_offsets(rows: pd.DataFrame, ranks: list[int], source: str = "kernel",
                     shared_clock: bool = False, own: frozenset = frozenset()) -> dict[int, dict]:
    """{rank: {offset_ns, estimate_ns, spread_ns, instances, via, applied, reason}}.

    ``own``: ranks on a clock of their own (a file cut before the trailer that held its
    base: ``inputs.cut_record``) -- never the reference, never on the shared clock."""
    ref = reference_rank(ranks, own)
    out = {ref: _entry(0, 0, 0, -1, ref, False, "reference clock")}
    if not len(rows) or source == "issue":
        why = "only issue times recorded" if source == "issue" else "no matched collective"
        return {r: out[ref] if r == ref else _entry(0, 0, 0, 0, ref, False, why) for r in ranks}
    # relative to the earliest start: the pivot goes through float64, exact below 2**53 ns;
    # a rank on a clock of its own, relative to its own earliest start (epoch and trace
    # clocks lie ~1.7e18 ns apart: one base lost 128 ns to float64 on every end)
    mine = rows["rank"].isin(own).to_numpy() if own else np.zeros(len(rows), bool)
    first = int(rows.loc[~mine, "ts"].min()) if (~mine).any() else 0
    base = {r: first for r in ranks}
    for r in own:
        at = rows.loc[(rows["rank"] == r).to_numpy(), "ts"]
        if len(at):
            base[r] = int(at.min())
    rel = rows["ts"] - rows["rank"].map(base).fillna(0).astype("int64")
    end = rows.assign(end=rel + rows["dur"]).pivot_table(
        index=["lane", "key"], columns="rank", values="end", aggfunc="first")
    col = {r: i for i, r in enumerate(end.columns)}
    vals = end.to_numpy(np.float64)
    have = ~np.isnan(vals)
    done = {ref: 0}
    todo = [r for r in ranks if r != ref]
    while todo:
        progress = False
        for r in list(todo):
            via = next((q for q in done if q in col and r in col
                        and (have[:, col[q]] & have[:, col[r]]).any()), None)
            if via is None:
                continue
            both = have[:, col[via]] & have[:, col[r]]
            d = vals[both, col[via]] - vals[both, col[r]]
            est = int(round(float(np.median(d)))) + done[via] + (base.get(via, 0) - base.get(r, 0))
            spread = int(np.median(np.abs(d - np.median(d))))
            floor = FLOOR_NS.get(source, 0)
            if shared_clock and r not in own:
                applied, why = False, "one clock (same export or same host)"
            elif abs(est) <= max(floor, 3 * spread):
                applied, why = False, ("within end-time resolution"
                                       f" ({'3 x spread' if 3 * spread > floor else _ms(floor)})")
            else:
                applied, why = True, "ends of matched collectives"
            done[r] = est if applied else 0
            out[r] = _entry(done[r], est, spread, len(d), via, applied, why)
            todo.remove(r)
            progress = True
        if not progress:
            break
    for r in todo:
        out[r] = _entry(0, 0, 0, 0, ref, False, "no collective shared with the other ranks")
    return out


def reference_rank(ranks: list[int], own: frozenset = frozenset()) -> int:
    """The clock the others are placed on: the lowest rank not on a clock of its own."""
    return min((r for r in ranks if r not in own), default=min(ranks))


VOTE_MAX_INSTANCES = 500  # pairwise differences: 500 x 500 per rank


def vote_offsets(per_rank: dict[int, pd.DataFrame], tol_ns: int) -> dict[int, int]:
    """Offsets when instances cannot be paired yet: the shift that makes the most end
    times of a rank coincide (within ``tol_ns``) with the reference rank's.

    Every pairwise end difference votes; the densest ``tol_ns`` window wins (its
    median). A shift by one step period also lines up most instances, so this is
    right when the true offset wins by at least one instance -- the usual case,
    since the aliased shift loses the first or last step.
    """
    ranks = sorted(per_rank)
    ref = ranks[0]
    e_ref = _ends(per_rank[ref])
    out = {ref: 0}
    for r in ranks[1:]:
        e = _ends(per_rank[r])
        if not len(e) or not len(e_ref):
            out[r] = 0
            continue
        d = np.sort((e_ref[:, None] - e[None, :]).ravel())
        count = np.searchsorted(d, d + tol_ns, side="right") - np.arange(len(d))
        k = int(np.argmax(count))
        out[r] = int(np.median(d[k:k + count[k]]))
    return out


def _ends(df: pd.DataFrame) -> np.ndarray:
    e = (df["ts"] + df["dur"]).to_numpy(np.int64)
    return e[:VOTE_MAX_INSTANCES]


def _ms(ns: int) -> str:
    return f"{ns / 1e6:g} ms"


def _entry(offset, est, spread, n, via, applied, reason) -> dict:
    return {"offset_ns": int(offset), "estimate_ns": int(est), "spread_ns": int(spread),
            "instances": int(n), "via": int(via), "applied": bool(applied), "reason": reason}


def applied(offsets: dict[int, dict]) -> dict[int, int]:
    return {r: int(o["offset_ns"]) for r, o in offsets.items()}


__all__ = ["estimate_offsets", "applied", "reference_rank", "HOST_END_SKEW_NS"]
