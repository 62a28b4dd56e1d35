"""Periodic stalls: steps several times the median, every k-th step, and what runs in them
(docs/analysis.md, "Periodic stalls").

A checkpoint every 100 steps, an evaluation every epoch, a log flush: each makes a few
steps ``STALL_X`` x the median step or more, at a fixed period. The steady-state window
leaves such steps out, yet they cost time every period, so the fact is read over every
step of the trace: the stalled steps, their period (the common difference of their step
numbers; one stall alone has none), the excess over the median per stall, and the
operation inside them -- the host frame or op whose time in the stalled steps most exceeds
its time in an ordinary step, among the frames ordinary steps never run, explaining at
least ``SHARE`` of the excess (slow steps with no work of their own are noise, not a
stall). ``what`` names it: checkpoint, eval, flush/log, else the frame itself.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import namerx
from .common import CHECKPOINT_RX, kind_in
from .factkit import STEP_RX, Steps, item
from .userframe import frame_text, is_user_frame, readable

STALL_X = 3.0          # a stalled step is >= 3x the median step
MIN_STEPS = 4          # fewer steps: no median to stand out of
EVAL_RX = namerx.compile(r"(?i)\beval(?:uate|uation)?\b|\bvalidat|\bval_|\btest_step")
FLUSH_RX = namerx.compile(r"(?i)\bflush\b|\blog(?:ging|ger)?\b|\bprint\b|tensorboard|wandb"
                          r"|SummaryWriter|\bwrite\b")
SHARE = 0.5            # the op explains at least half the largest excess


def periodic_stalls(ev: pd.DataFrame, steps: Steps | None = None) -> dict | None:
    """{"period", "stalled_steps", "median_step_ns", "excess_ns_per_stall", "op", "what",
    "evidence"} or None (no stall)."""
    steps = steps or Steps(ev)
    if len(steps) < MIN_STEPS:
        return None
    # one process: the one with the most steps
    pid = pd.Series(steps.pid).value_counts().index[0]
    sel = np.flatnonzero(steps.pid == pid)
    dur = (steps.end - steps.start)[sel]
    med = float(np.median(dur))
    if med <= 0:
        return None
    stalled = sel[dur >= STALL_X * med]
    if not len(stalled) or len(stalled) > len(sel) // 2:
        return None
    nums = steps.number[stalled]
    diffs = np.diff(np.sort(nums))
    period = int(diffs[0]) if len(diffs) and (diffs == diffs[0]).all() and diffs[0] > 0 \
        else None
    excess = int(np.median((steps.end - steps.start)[stalled] - med))
    op, op_ns = _stall_op(ev, steps, stalled, sel[dur < STALL_X * med], pid)
    if op is None or op_ns < SHARE * excess:
        return None      # slow steps with no work of their own: not a periodic operation
    what = _what(op)
    evidence = [item(f"ProfilerStep#{int(steps.number[s])}", steps.start[s],
                     int(steps.number[s]),
                     f"{(steps.end[s] - steps.start[s]) / 1e6:.1f} ms, "
                     f"{(steps.end[s] - steps.start[s]) / med:.1f}x the median step")
                for s in stalled[:5].tolist()]
    if op:
        evidence.append(item(op, None, None, f"{what}: {op_ns / 1e6:.1f} ms more per stalled "
                                              "step than in an ordinary one"))
    return {"period": period, "stalled_steps": [int(n) for n in nums],
            "steps_seen": int(len(sel)), "median_step_ns": int(med),
            "excess_ns_per_stall": excess, "op": readable(frame_text(op)) if op else None,
            "what": what, "evidence": evidence}


def _stall_op(ev, steps: Steps, stalled, normal, pid) -> tuple[str | None, int]:
    """The innermost host frame/op whose time per stalled step most exceeds its time per
    ordinary step (within SHARE of the largest excess)."""
    host = np.flatnonzero(kind_in(ev, ("cpu_op", "python", "annotation"))
                          & (ev["pid"].to_numpy() == pid))
    if not len(host):
        return None, 0
    ts = ev["ts"].to_numpy(np.int64)[host]
    dur = ev["dur"].to_numpy(np.int64)[host]
    si = steps.index_of(np.full(len(host), pid), ts)
    code, label = _name_codes(ev["name"], host)
    df = pd.DataFrame({"n": code, "s": si, "d": dur})
    df = df[df["s"] >= 0]
    step = _step_names(label) | np.isin(label, np.array(sorted(steps.names), dtype=object))
    df = df[~step[df["n"].to_numpy()]]
    per = df.groupby(["n", "s"], sort=False)["d"].sum().unstack(fill_value=0)
    per.index = label[per.index.to_numpy()]   # codes -> names (one name per code)
    st = [s for s in stalled.tolist() if s in per.columns]
    no = [s for s in normal.tolist() if s in per.columns]
    if not st:
        return None, 0
    base = per[no].median(axis=1) if no else pd.Series(0, index=per.index)
    gain = per[st].median(axis=1) - base
    # only work the ordinary steps do not do: a step that is merely slower is noise
    gain = gain[(gain > 0) & (base == 0)]
    if not len(gain):
        return None, 0
    best = float(gain.max())
    cand = gain[gain >= SHARE * best]
    # the innermost: the shortest mean call among the candidates, a user frame or a
    # recognised operation first
    mean = df.groupby("n")["d"].mean()
    mean.index = label[mean.index.to_numpy()]
    def rank(n):
        known = bool(CHECKPOINT_RX.search(n) or EVAL_RX.search(n) or FLUSH_RX.search(n))
        return (not known, not is_user_frame(n), mean.get(n, 0))
    known = [n for n in cand.index if CHECKPOINT_RX.search(n) or EVAL_RX.search(n)
             or FLUSH_RX.search(n)]
    pool = known or list(cand.index)
    # of the recognised ones, the outermost user call (save_checkpoint over its internals):
    # the longest mean among user frames, else torch's own entry point
    users = [n for n in pool if is_user_frame(n)]
    if users:
        n = max(users, key=lambda n: mean.get(n, 0))
    else:
        n = min(pool, key=rank)
    return n, int(gain[n])


def _name_codes(col: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a code per row, the name of each code): the names as ``astype(str)`` reads them,
    without a Python string per host row (1.6 M of them were ~200 MB at 1 GB). A null
    reads "nan", the code of a category "nan" when there is one."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        code, uniq = pd.factorize(col.take(rows).astype(str).to_numpy(), sort=False)
        return code, np.asarray(uniq, object)
    label = np.asarray(col.cat.categories.astype(str), object)
    code = col.cat.codes.to_numpy()[rows].astype(np.int64)
    if (code < 0).any():
        same = np.flatnonzero(label == "nan")
        code[code < 0] = same[0] if len(same) else len(label)
        label = label if len(same) else np.r_[label, np.array(["nan"], object)]
    return code, label


def _step_names(label: np.ndarray) -> np.ndarray:
    """Per name: a step marker (``str.match`` of ``STEP_RX``'s pattern, as per row before)."""
    import re

    rx = re.compile(STEP_RX.pattern)
    return np.array([rx.match(n) is not None for n in label.tolist()], bool)


def _what(op: str | None) -> str:
    if not op:
        return "unknown"
    if CHECKPOINT_RX.search(op):
        return "checkpoint"
    if EVAL_RX.search(op):
        return "eval"
    if FLUSH_RX.search(op):
        return "flush"
    return "other"
