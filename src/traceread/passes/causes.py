"""Each cause's share of the idle GPU time, from the labelled gaps (``cause_parts``).

The causes are the vocabulary the passes and the verdict share: the passes measure each
one's ns here (a figure of the facts record, ``passes/facts.py``), the verdict scores and
names them (``verdict/bounds.py``, ``verdict/scores.py``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import SHORT_GAP_NS, is_sync_drained, queued_ns, sync_share

# The causes that explain lost GPU time, in tie-break order.
CAUSES = ("data", "copy", "sync", "launch", "host", "comms", "compile", "graph_capture",
          "queued")
HOST_PARTS = ("cpu_op", "python", "alloc")


def cause_parts(gaps: pd.DataFrame, host_traced: bool = True, api_traced: bool = True) -> dict:
    """ns of idle time per cause (+ ``unexplained``, ``alloc``) from the labelled gaps.

    Untraced time counts as launch overhead in short gaps when launch calls were
    traced, and as host work in long gaps when host activity was traced; else it
    is unexplained. A gap drained by a sync counts as ``sync`` only up to the GPU
    work queued since the previous sync (``sync_share``): without the sync the host's
    work after it could have overlapped that much and no more; the rest of the gap
    is whatever the host did (a 15 ms Python tail after a 0.4 ms step is host time).
    Allocator time in a drained gap is never the sync's (cudaFree synchronizes itself).
    Time inside a copy call that stages pageable host memory (``copy_staging``) is the
    copy's own host cost: the ``copy`` cause's, whole (pinned memory removes it; removing
    a sync or a launch does not), also returned alone as ``copy_staging``.
    Queued time (``queued_ns``: the GPU sat with the gap's closing op already launched) is
    its own cause, ``queued``; host causes count only the host's part of each gap (the
    categories of the queued part, ``qcpu_<category>``, are taken out).
    """
    out = {c: 0 for c in CAUSES}
    out.update(unexplained=0, alloc=0, wait=0, copy_staging=0)
    if not len(gaps):
        return out
    n = len(gaps)
    dur = gaps["duration"].to_numpy(np.int64)
    # the queued part of a gap is no host cause's: each category keeps the host's part only
    qn = queued_ns(gaps)
    cols = {c: _col(gaps, f"cpu_{c}") - _col(gaps, f"qcpu_{c}") for c in _CPU_COLS}
    sync = is_sync_drained(gaps)
    # 1 where the whole gap is the sync's, 0 if none (analysis stores the capped share)
    f = gaps["sync_share"].to_numpy(float) if "sync_share" in gaps else sync_share(gaps)
    short = dur <= SHORT_GAP_NS

    def part(c, m, w=None):
        v = cols[c][m] if w is None else cols[c][m] * w[m]
        return int(np.rint(v.sum()))

    rest = 1.0 - f                           # the share of each gap left to the host's causes
    whole = np.ones(n)
    out["queued"] = int(qn.sum())
    out["data"] = part("dataloader", whole > 0)
    out["compile"] = part("compile", whole > 0)
    out["graph_capture"] = part("graph_capture", whole > 0)
    out["comms"] = part("comm_wait", whole > 0)
    out["copy_staging"] = part("copy_staging", whole > 0)
    out["copy"] = out["copy_staging"]
    # every launch thread waiting, on nothing traced: unexplained, and said to be a wait
    out["wait"] = part("wait", whole > 0)
    out["unexplained"] += out["wait"]
    # allocator calls are never the sync's: cudaFree synchronizes on its own, so removing
    # the .item() before an empty_cache() saves none of it
    w = {c: (whole if c == "alloc" else rest) for c in _CPU_COLS}
    out["sync"] = sum(part(c, sync, f) for c in _HOST_ALL if c != "alloc") \
        + part("sync", ~sync) + part("sync", sync, rest)
    out["launch"] = sum(part(c, short, w[c]) for c in ("alloc", "launch", "cpu_op", "python")) \
        + part("launch", ~short, rest)
    if api_traced:
        out["launch"] += part("untraced", short, rest)
    else:
        out["unexplained"] += part("untraced", short, rest)
    out["host"] = sum(part(c, ~short, w[c]) for c in HOST_PARTS)
    out["alloc"] = part("alloc", ~short, whole)
    untraced = part("untraced", ~short, rest)
    if host_traced:
        out["host"] += untraced
        out["host_untraced"] = untraced
    else:
        out["unexplained"] += untraced
    return out


def _col(gaps: pd.DataFrame, name: str) -> np.ndarray:
    return gaps[name].to_numpy(np.int64) if name in gaps else np.zeros(len(gaps), np.int64)


_CPU_COLS = ("dataloader", "compile", "graph_capture", "comm_wait", "sync", "copy_staging", "alloc",
             "launch", "wait", "cpu_op", "python", "untraced")
_HOST_ALL = ("sync", "alloc", "launch", "cpu_op", "python", "untraced")
