"""Busy is not used: how much of the GPU a busy kernel fills.

A kernel launched with fewer blocks than the device has SMs leaves the other SMs
empty for its whole duration, yet the GPU reads 100% busy. From the ``launch``
column (Kineto ``args.grid``/``block``/``est. achieved occupancy %``; nsys
``gridX..Z``/``blockX..Z``) and the SM count (``device_caps``: Kineto
``deviceProperties.numSms``, nsys ``TARGET_INFO_GPU.smCount``):

* **SM coverage** of a kernel = min(1, grid blocks / SMs); time-weighted over the
  kernels: sum(dur x coverage) / sum(dur).
* **SM-idle time** = sum(dur x (1 - coverage)): the kernel time during which SMs sat
  empty. Flagged as *busy but under-filled* when it is at least ``UNDERFILLED_SHARE``
  of the kernel time, with the kernels that leave the most SM-idle time.
* **estimated occupancy** (Kineto only): ``est. achieved occupancy %`` weighted by
  duration over the kernels that carry it (0 is what Kineto writes when it could not
  estimate it: left out).

Collective kernels (class ``nccl``) use few blocks by design, to leave the SMs to the
compute they overlap: they are left out.

Kernels that overlap on other streams can fill each other's empty SMs: with
concurrent kernels the coverage is a lower bound (``concurrent_pct`` says how much
kernel time overlaps another kernel).
"""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd

from .common import events_of, rows_of, table_of

UNDERFILLED_SHARE = 0.25     # SM-idle time / kernel time that flags "busy but under-filled"
TOP_KERNELS = 5


@lru_cache(maxsize=65536)
def _launch(text: str | None) -> tuple[int, int, float]:
    """(grid blocks, threads per block, est. occupancy % or nan) of one launch object."""
    try:
        d = json.loads(text) if text else None
    except ValueError:
        d = None
    if not isinstance(d, dict) or not isinstance(d.get("grid"), list):
        return -1, -1, float("nan")
    blocks = int(np.prod([max(int(x), 1) for x in d["grid"]]))
    threads = int(np.prod([max(int(x), 1) for x in d.get("block") or [1]]))
    occ = d.get("occupancy")
    return blocks, threads, float(occ) if isinstance(occ, (int, float)) and occ > 0 else np.nan


def occupancy_summary(trace, window: tuple[int, int] | None = None, caps: dict | None = None,
                      classes=None) -> dict:
    """Time-weighted SM coverage and estimated occupancy, per kernel class and in total,
    and the under-filled kernels. ``classes``: name -> busy class (``busy._pair_classes``)."""
    ev = events_of(trace)
    sms = (caps or {}).get("sm_count")
    out: dict = {"sm_count": sms, "has_launch": False, "note": None, "kernel_ns": 0,
                 "covered_ns": 0, "coverage": None, "sm_idle_ns": 0, "occupancy_pct": None,
                 "occupancy_ns": 0,
                 "concurrent_pct": None, "classes": [], "underfilled": None}
    if "launch" not in ev:
        out["note"] = "no kernel launch configuration in this trace"
        return out
    rows = rows_of(ev, ("kernel",))
    if window is not None:
        ts = ev["ts"].to_numpy().take(rows)
        rows = rows[(ts >= window[0]) & (ts < window[1])]
    g = _groups(ev, rows)
    g["cls"] = [classes.get(n, "other") if classes else "kernel" for n in g["name"]]
    # collectives use few blocks on purpose (they overlap compute): not a filling problem
    g = g[(g["blocks"] > 0) & (g["cls"] != "nccl")]
    if not len(g):
        out["note"] = "no kernel launch configuration in this trace"
        return out
    out["has_launch"] = True
    out["kernel_ns"] = int(g["ns"].sum())
    occ = g[g["occ"].notna()]
    if len(occ) and occ["ns"].sum() > 0:
        out["occupancy_pct"] = float((occ["occ"] * occ["ns"]).sum() / occ["ns"].sum())
        out["occupancy_ns"] = int(occ["ns"].sum())
    out["concurrent_pct"] = _concurrent_pct(ev, rows)
    if not sms:
        out["note"] = "the trace records no SM count (deviceProperties.numSms / smCount)"
        return out
    g["cov"] = np.minimum(1.0, g["blocks"] / sms)
    g["idle"] = g["ns"] * (1 - g["cov"])
    tot = float(g["ns"].sum())
    covered, idle = float((g["ns"] * g["cov"]).sum()), float(g["idle"].sum())
    out.update(covered_ns=int(round(covered)), sm_idle_ns=int(round(idle)))
    # shares from the unrounded sums: on short kernels rounding to ns moves them by points
    out["coverage"] = covered / tot if tot else None
    out["classes"] = _by_class(g, tot)
    share = idle / tot if tot else 0.0
    if share >= UNDERFILLED_SHARE:
        out["underfilled"] = {"sm_idle_pct": 100.0 * share, "kernels": _culprits(g, tot, sms)}
    return out


def _groups(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """Kernel time per distinct (name, launch configuration), in order of first appearance
    (a missing name counts as ""; a missing launch is a group of its own)."""
    name, nc = _codes_at(ev["name"], rows, "")
    launch, lc = _codes_at(ev["launch"], rows, None)
    # one key per (name, launch) pair of codes: groups of integers, not of strings
    key, first = pd.factorize(nc * np.int64(len(launch) + 1) + (lc + 1), sort=False)
    agg = pd.Series(ev["dur"].to_numpy(np.int64).take(rows)).groupby(key, sort=True) \
        .agg(["sum", "size"])
    ni, li = np.divmod(first.astype(np.int64), np.int64(len(launch) + 1))
    launches = [launch[i - 1] if i else np.nan for i in li.tolist()]
    g = pd.DataFrame({"name": pd.array([name[i] for i in ni.tolist()], dtype=object),
                      # all missing: NaN floats, as a groupby over the values gives them
                      "launch": np.array(launches, dtype=object if not len(li) or li.any() else float),
                      "ns": agg["sum"].to_numpy(np.int64),
                      "count": agg["size"].to_numpy(np.int64)})
    parsed = [_launch(x if isinstance(x, str) else None) for x in g["launch"]]
    g["blocks"] = [p[0] for p in parsed]
    g["threads"] = [p[1] for p in parsed]
    g["occ"] = [p[2] for p in parsed]
    return g


def _codes_at(col: pd.Series, rows: np.ndarray, null) -> tuple[list, np.ndarray]:
    """The distinct values of ``col`` (str) and each row's code into them; a missing value
    is ``null``: a code of its own (-1) when None, else merged with that string."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        # the categories' strings from the shared table (built once per trace)
        codes, cats = col.cat.codes.to_numpy().take(rows).astype(np.int64), \
            list(table_of(col.cat.categories).names)
    else:
        vals = col.take(rows).to_numpy(dtype=object)
        codes, uniq = pd.factorize(vals, use_na_sentinel=True)
        codes, cats = codes.astype(np.int64), [str(c) for c in uniq]
    if null is not None and (codes < 0).any():
        at = {c: i for i, c in enumerate(cats)}
        if null not in at:
            cats = cats + [null]
            at[null] = len(cats) - 1
        codes = np.where(codes < 0, at[null], codes)
    return cats, codes


def _by_class(g: pd.DataFrame, tot: float) -> list[dict]:
    out = []
    for c, d in g.groupby("cls", sort=False):
        ns = float(d["ns"].sum())
        occ = d[d["occ"].notna()]
        out.append({"class": str(c), "ns": int(ns), "pct": 100.0 * ns / tot if tot else 0.0,
                    "coverage": float((d["ns"] * d["cov"]).sum() / ns) if ns else None,
                    "occupancy_pct": float((occ["occ"] * occ["ns"]).sum() / occ["ns"].sum())
                    if len(occ) and occ["ns"].sum() > 0 else None})
    return sorted(out, key=lambda r: -r["ns"])


def _culprits(g: pd.DataFrame, tot: float, sms: int) -> list[dict]:
    """The kernels (by name) that leave the most SM-time empty."""
    by = g.groupby("name", sort=False).agg(ns=("ns", "sum"), count=("count", "sum"),
                                           idle=("idle", "sum"))
    blocks = g.assign(w=g["blocks"] * g["ns"]).groupby("name", sort=False)["w"].sum()
    by = by[by["idle"] > 0].sort_values("idle", ascending=False).head(TOP_KERNELS)
    return [{"name": str(n), "ns": int(r["ns"]), "count": int(r["count"]),
             "sm_idle_ns": int(round(r["idle"])), "pct_of_kernel_time": 100.0 * r["ns"] / tot,
             "blocks": int(round(blocks[n] / r["ns"])) if r["ns"] else 0,
             "coverage": float(1 - r["idle"] / r["ns"]) if r["ns"] else None, "sms": int(sms)}
            for n, r in by.iterrows()]


def _concurrent_pct(ev: pd.DataFrame, rows: np.ndarray) -> float | None:
    """Share of kernel time that overlaps another kernel on the same device."""
    from . import intervals

    if not len(rows):
        return None
    ts = ev["ts"].to_numpy(np.int64).take(rows)
    end = ts + ev["dur"].to_numpy(np.int64).take(rows)
    dev = ev["device"].to_numpy(np.int64).take(rows)
    total = int((end - ts).sum())
    union = 0
    for d in np.unique(dev):
        m = dev == d
        union += intervals.total(intervals.union(ts[m], end[m]))
    return 100.0 * (total - union) / total if total else None
