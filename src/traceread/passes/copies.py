"""Host<->device copies: how long the GPU spends copying with no compute beside it.

A copy is *exposed* for the part of it that no compute kernel of the same
(pid, device) overlaps: the GPU does nothing else then. Pageable copies (Kineto
names them ``Memcpy HtoD (Pageable -> Device)``) move through a staging buffer
at a fraction of the link's speed; pinning the host memory brings them to the
pinned bandwidth, so the "pin" lever saves ``exposed * (1 - achieved / pinned)``.
When the trace does not say whether memory was pageable (nsys), a copy of at
least 1 MiB running below half the pinned bandwidth is taken as pageable.

The pinned bandwidth is the best one a pinned copy of >= 1 MiB reached in this
trace, else a documented figure for the device's PCIe generation
(``PINNED_GBPS``).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import intervals

HOST_DIRECTIONS = ("HtoD", "DtoH", "HtoH", "HtoA", "AtoH")
BIG_COPY = 1 << 20
# Practical pinned host<->device bandwidth, GB/s (PCIe Gen5 x16 on Hopper/Blackwell,
# Gen4 x16 on Ampere/Ada and MI200/MI300 hosts; a conservative default otherwise).
PINNED_GBPS = ((re.compile(r"H100|H200|H800|GH200|B100|B200|GB200", re.I), 50.0),
               (re.compile(r"A100|A800|A10|A30|A40|L4|L40|RTX|MI2\d\d|MI3\d\d", re.I), 24.0))
DEFAULT_PINNED_GBPS = 24.0
_PAGEABLE_RX = re.compile(r"pageable", re.I)
_PINNED_RX = re.compile(r"pinned", re.I)


def pinned_reference(device_names: list[str]) -> float:
    for name in device_names:
        for rx, gbps in PINNED_GBPS:
            if rx.search(name or ""):
                return gbps
    return DEFAULT_PINNED_GBPS


def copy_summary(ev: pd.DataFrame, device_names: list[str] | None = None) -> dict:
    """Exposed copy time, pageable share, what pinning would save; the largest copy."""
    m = (ev["kind"] == "memcpy").to_numpy()
    empty = {"exposed_ns": 0, "copy_ns": 0, "bytes": 0, "count": 0, "pageable_ns": 0,
             "pin_saves_ns": 0, "pinned_gbps": None, "by_direction": [], "largest": None}
    if not m.any():
        return empty
    cols = ["ts", "dur", "pid", "device", "bytes", "copy_kind", "name", "raw_name"]
    cp = ev.loc[m, cols + (["stream"] if "stream" in ev else [])].copy()
    cp["copy_kind"] = cp["copy_kind"].astype(object).fillna("").astype(str)
    cp = cp[cp["copy_kind"].isin(HOST_DIRECTIONS).to_numpy() & (cp["dur"].to_numpy() > 0)]
    if not len(cp):
        return empty
    cp["exposed"] = _exposed(ev, cp)
    # Kineto names the memory kinds; the nsys reader keeps them in raw_name
    names = cp["name"].astype(str) + " " + cp["raw_name"].astype(object).fillna("").astype(str)
    nbytes = cp["bytes"].to_numpy(np.int64)
    gbps = np.where(nbytes > 0, nbytes / np.maximum(cp["dur"].to_numpy(np.int64), 1), np.nan)
    cp["gbps"] = gbps
    said_pageable = names.str.contains(_PAGEABLE_RX).to_numpy()
    said_pinned = names.str.contains(_PINNED_RX).to_numpy()
    big = nbytes >= BIG_COPY
    seen = gbps[big & said_pinned]
    ref = float(np.nanmax(seen)) if len(seen) and np.isfinite(seen).any() else \
        pinned_reference(device_names or [])
    slow = big & ~said_pinned & (gbps < 0.5 * ref)
    pageable = said_pageable | slow
    gain = np.where(pageable & (gbps < ref), 1.0 - np.nan_to_num(gbps) / ref, 0.0)
    exposed = cp["exposed"].to_numpy(np.int64)
    out = dict(empty)
    out.update({
        "exposed_ns": int(exposed.sum()), "copy_ns": int(cp["dur"].sum()),
        "bytes": int(np.maximum(nbytes, 0).sum()), "count": int(len(cp)),
        "pageable_ns": int(exposed[pageable].sum()),
        "pageable_inferred": bool((slow & ~said_pageable).any()),
        "pin_saves_ns": int(np.round(exposed * gain).sum()), "pinned_gbps": round(ref, 1),
        "by_direction": _by_direction(cp, pageable),
        "largest": _largest(cp, pageable),
    })
    return out


def _exposed(ev: pd.DataFrame, cp: pd.DataFrame) -> np.ndarray:
    """Per copy: ns not overlapped by any kernel of its (pid, device).

    A copy on a stream that runs no kernels (a prefetch stream) during which compute
    kernels start was not waited for: the compute ran on while it copied, and the GPU's
    idle time beside it has another cause (the gaps say which), so it counts 0.
    """
    km = (ev["kind"] == "kernel").to_numpy()
    cols = ["ts", "dur", "pid", "device"] + (["stream"] if "stream" in ev else [])
    k = ev.loc[km, cols]
    out = np.zeros(len(cp), np.int64)
    s = cp["ts"].to_numpy(np.int64)
    e = s + cp["dur"].to_numpy(np.int64)
    key = list(zip(cp["pid"].to_numpy().tolist(), cp["device"].to_numpy().tolist()))
    groups = k.groupby(["pid", "device"], observed=True).indices if len(k) else {}
    stream = cp["stream"].to_numpy(np.int64) if "stream" in cp and "stream" in k else None
    for pd_key in set(key):
        sel = np.flatnonzero([x == pd_key for x in key])
        idx = groups.get(pd_key)
        if idx is None:
            out[sel] = e[sel] - s[sel]
            continue
        ks = k["ts"].to_numpy(np.int64)[idx]
        kiv = intervals.union(ks, ks + k["dur"].to_numpy(np.int64)[idx])
        out[sel] = (e[sel] - s[sel]) - intervals.overlap(kiv, s[sel], e[sel])
        if stream is not None:
            kstreams = set(k["stream"].to_numpy(np.int64)[idx].tolist())
            side = np.array([st >= 0 and st not in kstreams for st in stream[sel]], bool)
            starts = np.sort(ks)
            began = np.searchsorted(starts, e[sel]) > np.searchsorted(starts, s[sel], "right")
            out[sel[side & began]] = 0
    return out


def _by_direction(cp: pd.DataFrame, pageable: np.ndarray) -> list[dict]:
    rows = []
    for kind, g in cp.assign(pageable=pageable).groupby("copy_kind", sort=True):
        b = int(np.maximum(g["bytes"].to_numpy(np.int64), 0).sum())
        d = int(g["dur"].sum())
        rows.append({"direction": kind, "count": int(len(g)), "bytes": b, "copy_ns": d,
                     "exposed_ns": int(g["exposed"].sum()),
                     "gbps": round(b / d, 2) if d and b else None,
                     "pageable": int(g["pageable"].sum())})
    return rows


def _largest(cp: pd.DataFrame, pageable: np.ndarray) -> dict:
    i = int(np.argmax(cp["exposed"].to_numpy()))
    r = cp.iloc[i]
    same = (cp["bytes"].to_numpy() == r["bytes"]) & (cp["copy_kind"].to_numpy() == r["copy_kind"])
    return {"direction": r["copy_kind"], "bytes": int(r["bytes"]), "count": int(same.sum()),
            "dur_ns": int(r["dur"]), "gbps": None if not np.isfinite(r["gbps"]) else
            round(float(r["gbps"]), 2), "pageable": bool(pageable[i])}
