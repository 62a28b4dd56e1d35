"""Training steps: where they are on the host, which GPU work each one launched.

A step comes from a host range whose name matches the step pattern:
``ProfilerStep#N`` (torch.profiler's ``prof.step()``) by default, else an
NVTX/record_function range such as ``step 12``, ``iteration_3``, ``train_step 7``
(``FALLBACK_STEP_PATTERN``), else a range that repeats with no index (``train_step``,
``iteration``; ``UNNUMBERED_STEP_PATTERN``), else an inference-server step range
(``INFERENCE_STEP_PATTERN``: sglang's ``step[DECODE bs=32]`` / ``step[EXTEND ...]``, the
``execute_[<N>_]context_<M>(...)_generation_<K>(...)`` range of vLLM/sglang captures, vLLM's
``gpu_model_runner.py(...): execute_model`` frame; one such range is a step), or whatever
``--step-pattern`` says. The numbers inside inference ranges are batch sizes and token
counts, not step indices: those steps are numbered in time order.

Real traces repeat a step's range: once per thread, or nested twice on the
same thread (old Kineto wrote ``ProfilerStep#N`` both as an operator and a
user annotation). Ranges of one process that carry the same number and
overlap are merged into one step (earliest start, latest end); unnumbered
ranges nested inside one another are merged the same way. A step's CPU span
is then clipped to the start of the next step of its process, so the steps of
one process never overlap.

The GPU work of a step is the GPU operations *launched* during its CPU span:
each op is linked to its runtime/driver launch call through the correlation
id, and the launch timestamp decides the step. Ops without a launch record
(GPU-only traces, lost correlation) fall back to their own start time.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from .. import namerx
from ..table import GPU_OP_KINDS
from .common import kind_in, table_of
from .frames import code_in, take_columns

DEFAULT_STEP_PATTERN = r"^ProfilerStep#\d+$"
FALLBACK_STEP_PATTERN = (r"(?i)^(?:train(?:ing)?[_ ]?)?(?:step|iter|iteration|batch)"
                         r"[\s_#:=-]*\d+$")
# NVTX ranges that repeat with no index ("train_step" pushed every iteration): steps too,
# numbered in time order, when at least two of them exist.
UNNUMBERED_STEP_PATTERN = r"(?i)^(?:train(?:ing)?[_ ]?)?(?:step|iter|iteration)$"
# Inference servers mark each forward batch; the numbers in these names are batch sizes and
# token counts, so the steps they mark are numbered in time order.
INFERENCE_STEP_PATTERN = (r"^step\[[^\]]*\]$|^execute_(?:\d+_)?context_\d+\("
                          r"|^(?:.*[/\\]gpu_model_runner\.py\(\d+\): )?execute_model$")
STEP_KINDS = ("annotation", "cpu_op", "python")
# No step markers: a training loop's iterations end where its optimizer step ends
# (torch.optim's record_function "Optimizer.step#SGD.step"), so iteration k runs from the
# end of optimizer step k-1 to the end of step k (``optimizer_steps``).
OPTIMIZER_STEP_PATTERN = r"^Optimizer\.step#\w+\.step$"
OPTIMIZER_MIN_STEPS = 2   # iterations (3 optimizer steps): one interval is not a loop
for _p in (DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN, UNNUMBERED_STEP_PATTERN,
           INFERENCE_STEP_PATTERN, OPTIMIZER_STEP_PATTERN):
    namerx.compile(_p)
LAUNCH_KINDS = ("runtime", "driver")

STEP_COLUMNS = ("index", "step", "name", "pid", "tid", "start", "end", "dur")


def name_mask(ev: pd.DataFrame, pattern: str, kinds=None) -> np.ndarray:
    """Rows whose name matches ``pattern`` (regex searched once per distinct name used)."""
    names = ev["name"]
    if kinds is not None:
        keep = kind_in(ev, kinds)
    else:
        keep = np.ones(len(ev), bool)
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy()
    m = np.zeros(len(ev), bool)
    rows = np.flatnonzero(keep & (codes >= 0))
    if not len(rows):
        return m
    c = codes[rows]
    used = np.flatnonzero(np.bincount(c, minlength=len(names.cat.categories)))
    rx = namerx.compile(pattern)
    hit = used[table_of(names.cat.categories).hits(rx)[used]]   # names classified once
    if len(hit):
        m[rows] = code_in(c, hit)
    return m


def find_steps(ev: pd.DataFrame, pattern: str | None = None) -> tuple[pd.DataFrame, str]:
    """Steps of every process, sorted by (pid, start), and the pattern that found them.

    Columns: index (0..n-1), step (the number in the name, or the ordinal when
    names carry none), name, pid, tid, start, end, dur (int ns). With no
    ``pattern``, ``DEFAULT_STEP_PATTERN`` is tried, then ``FALLBACK_STEP_PATTERN`` and the
    other marker patterns, then the optimizer's steps (``optimizer_steps``; the pattern
    returned is then ``OPTIMIZER_STEP_PATTERN``).
    """
    patterns = [pattern] if pattern else [DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN,
                                          UNNUMBERED_STEP_PATTERN, INFERENCE_STEP_PATTERN]
    for pat in patterns:
        m = name_mask(ev, pat, STEP_KINDS) & (ev["dur"].to_numpy() > 0)
        if m.any():
            steps = _merge_ranges(ev[m], numbered=pat != INFERENCE_STEP_PATTERN)
            if pat == UNNUMBERED_STEP_PATTERN and len(steps) < 2:
                continue
            return _clip_to_recording(steps, recording_end(ev)), pat
    if not pattern:
        steps = optimizer_steps(ev)
        if len(steps):
            return _clip_to_recording(steps, recording_end(ev)), OPTIMIZER_STEP_PATTERN
    return _empty_steps(), patterns[0]


def optimizer_steps(ev: pd.DataFrame) -> pd.DataFrame:
    """A training loop's iterations where no range marks them: from the end of one optimizer
    step to the end of the next, on the thread of each process that runs the most of them
    (at least ``OPTIMIZER_MIN_STEPS`` iterations). Step k is the iteration ending with the
    k-th optimizer step after the first; its name is that optimizer step's. A range nested
    in another (a second record of one call) is one step. Two optimizers stepped one after
    the other in each iteration split it in two unlike halves: the steps' cv shows it."""
    m = name_mask(ev, OPTIMIZER_STEP_PATTERN, STEP_KINDS) & (ev["dur"].to_numpy() > 0)
    rows = np.flatnonzero(m)
    if len(rows) < OPTIMIZER_MIN_STEPS + 1:
        return _empty_steps()
    c = ev.iloc[rows]
    df = pd.DataFrame({"pid": c["pid"].to_numpy(np.int64), "tid": c["tid"].to_numpy(np.int64),
                       "name": c["name"].astype(str).to_numpy(object),
                       "ts": c["ts"].to_numpy(np.int64),
                       "end": (c["ts"] + c["dur"]).to_numpy(np.int64)})
    parts = [_iterations(g) for _, g in df.groupby("pid", sort=True)]
    parts = [p for p in parts if len(p) >= OPTIMIZER_MIN_STEPS]
    if not parts:
        return _empty_steps()
    out = pd.concat(parts, ignore_index=True)
    out.insert(0, "index", np.arange(len(out), dtype=np.int64))
    return out[list(STEP_COLUMNS)]


def _iterations(g: pd.DataFrame) -> pd.DataFrame:
    """One process's optimizer steps (``optimizer_steps``) as the iterations between their ends."""
    tid = g["tid"].value_counts(sort=True).index[0]   # ties: the first thread seen
    g = g[g["tid"].to_numpy() == tid].sort_values("ts", kind="stable")
    end = g["end"].to_numpy(np.int64)
    outer = np.r_[True, g["ts"].to_numpy(np.int64)[1:] >= np.maximum.accumulate(end)[:-1]]
    g = g[outer]
    end = np.maximum.accumulate(g["end"].to_numpy(np.int64))
    n = len(g) - 1
    return pd.DataFrame({"step": np.arange(1, n + 1, dtype=np.int64),
                         "name": g["name"].to_numpy(object)[1:],
                         "pid": g["pid"].to_numpy(np.int64)[1:],
                         "tid": np.full(n, tid, np.int64),
                         "start": end[:-1], "end": end[1:], "dur": end[1:] - end[:-1]})


RECORD_END = "Record Window End"


def recording_end(ev: pd.DataFrame) -> int | None:
    """When the profiler stopped recording (Kineto's "Record Window End" instant), or None:
    nothing after it was recorded."""
    if "kind" not in ev or not len(ev):
        return None
    inst = np.flatnonzero(kind_in(ev, ("instant",)))
    if not len(inst):
        return None
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        # the one category's code, not every instant's name as a string (~9 ms a call at
        # 247 MB; the window and the steps both ask)
        k = int(col.cat.categories.get_indexer([RECORD_END])[0])
        at = inst[col.array.codes[inst] == k] if k >= 0 else inst[:0]
    else:
        at = inst[col.take(inst).astype(str).to_numpy() == RECORD_END]
    return int(ev["ts"].to_numpy(np.int64)[at].max()) if len(at) else None


def _clip_to_recording(steps: pd.DataFrame, rec_end: int | None) -> pd.DataFrame:
    """Steps end no later than the recording: a step range closed after the profiler
    stopped (HTA's triton example: ProfilerStep#1 spans 13.3 s, the recording 1.8 ms of it)
    holds no recorded work after the stop -- its span there is no host time."""
    if rec_end is None or not len(steps):
        return steps
    end = steps["end"].to_numpy(np.int64)
    start = steps["start"].to_numpy(np.int64)
    if not ((end > rec_end) & (start < rec_end)).any():
        return steps
    out = steps.copy()
    out["end"] = np.where(start < rec_end, np.minimum(end, rec_end), end).astype(np.int64)
    out["dur"] = out["end"] - out["start"]
    return out


def _empty_steps() -> pd.DataFrame:
    cols = {c: np.empty(0, np.int64) for c in STEP_COLUMNS}
    cols["name"] = np.empty(0, object)
    return pd.DataFrame(cols)


def _merge_ranges(c: pd.DataFrame, numbered: bool = True) -> pd.DataFrame:
    names = c["name"].astype(str)
    if numbered:
        num = pd.to_numeric(names.str.extract(r"(\d+)\D*$", expand=False), errors="coerce")
        num = num.fillna(-1).astype(np.int64).to_numpy()
    else:
        num = np.full(len(c), -1, np.int64)
    df = pd.DataFrame({
        "pid": c["pid"].to_numpy(np.int64),
        "tid": c["tid"].to_numpy(np.int64),
        "num": num,
        "name": names.to_numpy(object),
        "start": c["ts"].to_numpy(np.int64),
        "end": (c["ts"] + c["dur"]).to_numpy(np.int64),
    })
    df = df.sort_values(["pid", "num", "start"], kind="stable").reset_index(drop=True)
    # A new step begins where a range starts after everything of its (pid, num) so far
    # ended. Integer arithmetic throughout: epoch-ns timestamps do not survive float64.
    pid, num = df["pid"].to_numpy(), df["num"].to_numpy()
    first = np.r_[True, (pid[1:] != pid[:-1]) | (num[1:] != num[:-1])]
    reach = _group_cummax(first, df["end"].to_numpy(np.int64))
    start = df["start"].to_numpy(np.int64)
    new = first | (start >= np.r_[0, reach[:-1]])
    df["occ"] = np.cumsum(new)
    g = df.groupby("occ", sort=False)
    out = pd.DataFrame({
        "step": g["num"].first(), "name": g["name"].first(), "pid": g["pid"].first(),
        "tid": g["tid"].first(), "start": g["start"].min(), "end": g["end"].max()})
    out = out.sort_values(["pid", "start"], kind="stable").reset_index(drop=True)
    # Unnumbered ranges: number them in time order within their process.
    unnumbered = out["step"].to_numpy() < 0
    if unnumbered.any():
        ordinal = out.groupby("pid").cumcount().to_numpy()
        out.loc[unnumbered, "step"] = ordinal[unnumbered]
    # Clip each step at the start of the next one of its process.
    pid = out["pid"].to_numpy()
    start = out["start"].to_numpy(np.int64)
    end = out["end"].to_numpy(np.int64)
    has_next = np.r_[pid[1:] == pid[:-1], False]
    nxt = np.r_[start[1:], 0]
    out["end"] = np.where(has_next, np.minimum(end, nxt), end).astype(np.int64)
    out["dur"] = out["end"] - out["start"]
    out.insert(0, "index", np.arange(len(out), dtype=np.int64))
    return out[list(STEP_COLUMNS)]


def _group_cummax(first: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Running maximum of ``x`` restarting where ``first`` is True (int64, no floats)."""
    out = x.copy()
    bounds = np.flatnonzero(first).tolist() + [len(x)]
    if len(bounds) - 1 > 64:  # many groups: offset trick keeps it vectorised
        g = np.cumsum(first) - 1
        lo = int(x.min()) if len(x) else 0
        span = int(x.max()) - lo + 1 if len(x) else 1
        if span * (int(g.max()) + 1) < 2**62:
            off = g * span - lo
            return np.maximum.accumulate(x + off) - off
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = np.maximum.accumulate(x[a:b])
    return out


def whole_trace_window(ev: pd.DataFrame) -> pd.DataFrame:
    """One pseudo-step covering the whole trace (for traces without step ranges)."""
    if len(ev):
        lo = int(ev["ts"].min())
        hi = int((ev["ts"] + ev["dur"]).max())
    else:
        lo = hi = 0
    return pd.DataFrame({"index": [0], "step": [-1], "name": ["whole trace"], "pid": [-1],
                         "tid": [-1], "start": [lo], "end": [hi], "dur": [hi - lo]})


def gpu_ops(ev: pd.DataFrame, positive_ts: bool = False) -> pd.DataFrame:
    """Kernels, memcpys and memsets with their launch call's time, pid and tid.

    Adds ``launch_ts`` / ``launch_pid`` / ``launch_tid`` (-1 when no runtime or
    driver call with the same correlation id exists) and ``end``. ``positive_ts``: only
    the ops with ts > 0 (nsys: the ops before the session start are left out), chosen
    before any column is gathered (each op's launch is found on its own, so the other
    ops do not change it). The frame is built in one go: adding columns one at a time
    copies each.
    """
    mask = kind_in(ev, GPU_OP_KINDS)
    if positive_ts:
        mask &= ev["ts"].to_numpy() > 0
    rows = np.flatnonzero(mask)
    del mask
    cols = take_columns(ev, rows, ("ts", "dur", "kind", "name", "pid", "device", "stream",
                                   "correlation"))
    cols["end"] = cols["ts"] + cols["dur"]
    n = len(rows)
    launch = {k: np.full(n, -1, np.int64) for k in ("launch_ts", "launch_pid", "launch_tid")}
    if n:
        _link_launches(ev, cols, launch)
    cols.update(launch)
    return pd.DataFrame(cols, copy=False)


def _link_launches(ev: pd.DataFrame, ops: pd.DataFrame, launch: dict) -> None:
    """Fill ``launch`` (ts, pid, tid per op) from the runtime/driver call of each op's
    correlation id: the first such call of the op's process, else -- GPU ops without a
    launching pid (older Kineto: pid = device) -- the one process that made that call."""
    corr_all = ev["correlation"].to_numpy()
    rt = np.flatnonzero(kind_in(ev, LAUNCH_KINDS) & (corr_all >= 0))
    if not len(rt):
        return
    r_corr = corr_all[rt].astype(np.int64, copy=False)
    r_pid = ev["pid"].to_numpy()[rt].astype(np.int64, copy=False)
    corr = np.asarray(ops["correlation"], np.int64)
    o_pid = np.asarray(ops["pid"], np.int64)
    todo = np.flatnonzero(corr >= 0)
    if not len(todo):
        return
    pair = pair_keys(r_pid, r_corr, o_pid[todo], corr[todo])
    # first call per (pid, correlation), in row order (drop_duplicates keep="first")
    got = first_rows(pair[0], pair[1])
    if got is None:
        first = ~pair[0].duplicated(keep="first")
        k = pair[0][first].get_indexer(pair[1])
    else:
        first, k = got
    rt, r_corr, r_pid = rt[first], r_corr[first], r_pid[first]
    r_ts = ev["ts"].to_numpy()[rt].astype(np.int64, copy=False)
    r_tid = ev["tid"].to_numpy()[rt].astype(np.int64, copy=False)
    _set_launch(launch, todo, k, r_ts, r_pid, r_tid)
    todo = todo[k < 0]
    if not len(todo):
        return
    # by the id alone: only ids one process used (ambiguous across processes otherwise)
    once = ~pd.Index(r_corr).duplicated(keep=False)
    k = pd.Index(r_corr[once]).get_indexer(corr[todo])
    _set_launch(launch, todo, k, r_ts[once], r_pid[once], r_tid[once])


def first_rows(keys: pd.Index, wanted: pd.Index) -> tuple[np.ndarray, np.ndarray] | None:
    """(mask of each key's first row in ``keys``, per ``wanted`` the position of its key among
    those first rows, -1: none): ``~keys.duplicated(keep="first")`` and
    ``keys[first].get_indexer(wanted)`` by a table over the keys' range, not two hash
    tables (~8 ms for 170 k launch calls); None for keys that are not plain integers in a
    range a few times their count (the caller hashes)."""
    if isinstance(keys, pd.MultiIndex) or isinstance(wanted, pd.MultiIndex):
        return None
    a, b = keys.to_numpy(), wanted.to_numpy()
    if a.dtype != np.int64 or b.dtype != np.int64 or not len(a):
        return None
    lo = int(min(a.min(), b.min())) if len(b) else int(a.min())
    hi = int(max(a.max(), b.max())) if len(b) else int(a.max())
    if hi - lo + 1 > 16 * (len(a) + len(b)) + 4096:
        return None
    n = len(a)
    # row positions as int32 where they fit: the table spans up to 16x the keys (43 MB of
    # int64 at 1 GB, 5.4 M slots for 680 k launch calls)
    pos_t = np.int32 if n < 2**31 - 1 else np.int64
    at = np.arange(n, dtype=pos_t)
    lut = np.full(hi - lo + 1, n, pos_t)   # n: no row holds the key
    slot = a - lo
    np.minimum.at(lut, slot, at)              # the first row of each key
    first = lut[slot] == at
    del slot, at
    rank = np.cumsum(first) - 1               # a first row's position among the first rows
    row = lut[b - lo]
    del lut
    return first, np.where(row < n, rank[np.minimum(row, n - 1)], -1)


def pair_keys(pid_a, corr_a, pid_b, corr_b) -> tuple[pd.Index, pd.Index]:
    """(pid, correlation) pairs of two row sets as comparable index values: one int64 per
    pair when the ranges allow (a hash lookup on ints), else tuples."""
    both = np.concatenate([pid_a, pid_b])
    lo, hi = (int(both.min()), int(both.max())) if len(both) else (0, 0)
    span = max(int(corr_a.max(initial=0)), int(corr_b.max(initial=0))) + 1
    if (hi - lo + 1) * span < 2**62:
        return pd.Index((pid_a - lo) * span + corr_a), pd.Index((pid_b - lo) * span + corr_b)
    return pd.MultiIndex.from_arrays([pid_a, corr_a]), pd.MultiIndex.from_arrays([pid_b, corr_b])


def _set_launch(launch: dict, todo, k, ts, pid, tid) -> None:
    hit = k >= 0
    at, k = todo[hit], k[hit]
    launch["launch_ts"][at] = ts[k]
    launch["launch_pid"][at] = pid[k]
    launch["launch_tid"][at] = tid[k]


def assign_steps(steps: pd.DataFrame, pid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Index of the step whose span [start, end) contains ``ts`` in process ``pid``; -1 if none.

    A pseudo-step with pid -1 matches every process.
    """
    pid = np.asarray(pid, np.int64)
    ts = np.asarray(ts, np.int64)
    out = np.full(len(ts), -1, np.int64)
    if not len(steps) or not len(ts):
        return out
    any_pid = steps["pid"].to_numpy() < 0
    groups = [(None, steps[any_pid])] if any_pid.any() else []
    groups += [(p, g) for p, g in steps[~any_pid].groupby("pid", sort=False)]
    unknown = pid < 0
    for p, g in groups:
        s = g["start"].to_numpy(np.int64)
        e = g["end"].to_numpy(np.int64)
        idx = g["index"].to_numpy(np.int64)
        # Ops with no known pid can only be placed when one process has steps.
        sel = (out < 0) & ((pid == p) | (unknown & (len(groups) == 1))) if p is not None \
            else (out < 0)
        if not sel.any():
            continue
        k = np.searchsorted(s, ts[sel], side="right") - 1
        kk = np.clip(k, 0, len(s) - 1)
        ok = (k >= 0) & (ts[sel] < e[kk])
        out[np.flatnonzero(sel)[ok]] = idx[kk[ok]]
    return out


def step_of_gpu_ops(steps: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Step index of each GPU op: by its launch call when known, else by its start.

    Leftover work is the exception: an op with no launch record that runs before the first
    launched-and-recorded op of its (pid, device) was launched before the recording began
    (a scheduled torch.profiler drops the warm-up step's launches while the GPU, a step
    behind the host, still runs their kernels): it belongs to no analysed step (-1). Placed
    by its start it would double the first step's GPU work (real H200 capture
    ``h200/xformer.bad``: step #3 held 167 ms of GPU work for an 87 ms step)."""
    linked = ops["launch_ts"].to_numpy() >= 0
    ts = np.where(linked, ops["launch_ts"].to_numpy(np.int64), ops["ts"].to_numpy(np.int64))
    pid = np.where(linked, ops["launch_pid"].to_numpy(np.int64), ops["pid"].to_numpy(np.int64))
    out = assign_steps(steps, pid, ts)
    if linked.any() and not linked.all():
        out[_leftover(ops, linked)] = -1
    return out


def _leftover(ops: pd.DataFrame, linked: np.ndarray) -> np.ndarray:
    """Unlinked ops that start before the first linked op of their (pid, device)."""
    key = ops["pid"].to_numpy(np.int64) * 1_000_003 + ops["device"].to_numpy(np.int64)
    start = ops["ts"].to_numpy(np.int64)
    first = pd.Series(start[linked]).groupby(key[linked]).min()
    lim = first.reindex(key).to_numpy()   # NaN where the (pid, device) has no linked op
    return ~linked & (start < np.nan_to_num(lim, nan=-np.inf))


def grouped_union_total(group: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                        n_groups: int) -> np.ndarray:
    """Length of the union of the intervals of each group (groups 0..n_groups-1)."""
    out = np.zeros(n_groups, np.int64)
    keep = (group >= 0) & (ends > starts)
    if not keep.any():
        return out
    g, s, e = group[keep], starts[keep], ends[keep]
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    first = np.r_[True, g[1:] != g[:-1]]
    # Running reach within each group: shift every group onto its own stretch of the line.
    lo = s.min()
    span = int(e.max() - lo) + 1
    if span * (int(g.max()) + 1) < 2**62:
        off = g * span - lo
        reach = np.maximum.accumulate(e + off) - off
    else:  # enormous spans: per-group fallback
        reach = np.empty_like(e)
        bounds = np.flatnonzero(first).tolist() + [len(g)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            reach[a:b] = np.maximum.accumulate(e[a:b])
    prev_reach = np.r_[0, reach[:-1]]
    new = first | (s > prev_reach)
    # Each piece contributes its reach minus its start; a piece ends where the next begins.
    piece_start = s[new]
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]
    piece_len = reach[last] - piece_start
    np.add.at(out, g[new], piece_len)
    return out


def step_table(steps: pd.DataFrame, ops: pd.DataFrame, op_step: np.ndarray) -> pd.DataFrame:
    """Per step: CPU span plus the GPU span, op count and busy time of the work it launched.

    ``busy_ns`` is the union over each device of the step's own GPU ops, summed over devices.
    """
    n = len(steps)
    out = steps.copy()
    gpu_start = np.full(n, -1, np.int64)
    gpu_end = np.full(n, -1, np.int64)
    count = np.zeros(n, np.int64)
    busy = np.zeros(n, np.int64)
    busy_max = np.zeros(n, np.int64)
    if len(ops) and n:
        st = op_step
        m = st >= 0
        if m.any():
            s = ops["ts"].to_numpy(np.int64)[m]
            e = ops["end"].to_numpy(np.int64)[m]
            k = st[m]
            count = np.bincount(k, minlength=n).astype(np.int64)
            has = count > 0
            mn = np.full(n, np.iinfo(np.int64).max, np.int64)
            mx = np.full(n, np.iinfo(np.int64).min, np.int64)
            np.minimum.at(mn, k, s)
            np.maximum.at(mx, k, e)
            gpu_start = np.where(has, mn, -1)
            gpu_end = np.where(has, mx, -1)
            dev = ops["device"].to_numpy(np.int64)[m]
            dev_codes, dev_idx = np.unique(dev, return_inverse=True)
            grp = k * len(dev_codes) + dev_idx
            per = grouped_union_total(grp, s, e, n * len(dev_codes))
            busy = per.reshape(n, len(dev_codes)).sum(axis=1)
            busy_max = per.reshape(n, len(dev_codes)).max(axis=1)
    out["gpu_start"] = gpu_start
    out["gpu_end"] = gpu_end
    out["gpu_ops"] = count
    out["busy_ns"] = busy
    out["busy_max_ns"] = busy_max   # what program_columns reads again with the queued lead
    seen = busy_seen(out, ops, op_step) if len(ops) and n else busy_max
    out["busy_seen_ns"] = seen
    return program_columns(out, busy_max, busy_seen=seen)


def busy_seen(tab: pd.DataFrame, ops: pd.DataFrame, op_step: np.ndarray) -> np.ndarray:
    """Per step: its busiest device's busy time counting, beside the step's own ops, the
    work queued before the recording began (ops no step launched and no launch record names)
    inside the step's host span. That work is no step's (``step_of_gpu_ops``), but a host
    that blocks on it waits on the GPU: TraceLens' h100 Qwen step spends 14.1 of its 47.2 ms
    in ``cudaDeviceSynchronize`` while the GPU runs 13.7 ms of an earlier forward's tail."""
    busy_max = tab["busy_max_ns"].to_numpy(np.int64)
    before = (op_step < 0) & (ops["launch_ts"].to_numpy() < 0)
    if not before.any():
        return busy_max
    s = ops["ts"].to_numpy(np.int64)
    e = ops["end"].to_numpy(np.int64)
    pid = ops["pid"].to_numpy(np.int64)
    k = assign_steps(tab, pid[before], e[before] - 1)   # by where it ends: it may start earlier
    if not (k >= 0).any():
        return busy_max
    at = np.flatnonzero(before)[k >= 0]
    k = k[k >= 0]
    own = np.flatnonzero(op_step >= 0)
    lo, hi = tab["start"].to_numpy(np.int64), tab["end"].to_numpy(np.int64)
    step = np.r_[op_step[own], k]
    start = np.r_[s[own], np.maximum(s[at], lo[k])]   # clipped to the step's span
    end = np.r_[e[own], np.minimum(e[at], hi[k])]
    dev = ops["device"].to_numpy(np.int64)[np.r_[own, at]]
    dev_codes, dev_idx = np.unique(dev, return_inverse=True)
    n = len(tab)
    per = grouped_union_total(step * len(dev_codes) + dev_idx, start, end, n * len(dev_codes))
    return np.maximum(per.reshape(n, len(dev_codes)).max(axis=1), busy_max)


# A step whose GPU is busy this share of it is the GPU's even when the host's span is the
# longer: the host spent the rest waiting on it (a sync, a full launch queue).
GPU_BOUND_BUSY = 0.9


def program_columns(tab: pd.DataFrame, busy_max: np.ndarray,
                    lead: np.ndarray | None = None,
                    starved: np.ndarray | None = None,
                    busy_seen: np.ndarray | None = None) -> pd.DataFrame:
    """The step the program waits on (docs/analysis.md, "The program's step"), per step.

    ``gpu_ns``: the GPU's work for the step -- first start to last end of the ops it
    launched, from ``lead`` ns earlier where its first op was already queued while the GPU
    idled (``queued_lead``: the GPU had the step's work), less what overlaps the previous
    step's GPU work of the same process (when the GPU lags, the GPU window per step);
    ``program_ns``: the later of the host's span and ``gpu_ns``, at most the time from the
    previous step's end (its GPU work's where the GPU paces it, else its host span's) to
    this step's own (the later of the two);
    ``bound_by``: "gpu" when ``gpu_ns``, less ``starved`` (the GPU's idle inside its window
    waiting for the host to launch: ``starved_in_window``), is longer than the host's span
    after that previous end, or the busiest device was busy >= GPU_BOUND_BUSY of the step,
    else "host"; ``busy_seen`` (``steps.busy_seen``: with the work queued before the
    recording) stands for ``busy_max`` in that last test only -- that work decides whom the
    step waits on, not where its own work ends. A kernel launched before a host stall (a
    DataLoader that falls behind) stretches the GPU's window over the stall, and that step
    is the host's. Steps sorted by (pid, start), as ``find_steps`` returns them. Adds the
    columns to ``tab`` itself."""
    out = tab
    n = len(out)
    gs = out["gpu_start"].to_numpy(np.int64)
    if lead is not None:
        gs = np.where(gs >= 0, gs - np.maximum(lead, 0), gs)
    ge = out["gpu_end"].to_numpy(np.int64)
    dur = out["dur"].to_numpy(np.int64)
    has = gs >= 0
    prev = np.full(n, -1, np.int64)
    if n > 1:
        pid = out["pid"].to_numpy(np.int64)
        first = np.r_[True, pid[1:] != pid[:-1]]
        reach = _group_cummax(first, np.where(has, ge, -1))
        prev[1:] = np.where(first[1:], -1, reach[:-1])
    gpu = np.where(has, np.maximum(0, ge - np.maximum(gs, prev)), 0)
    host = dur
    prog = np.maximum(dur, gpu)
    paced = (gpu > dur) | (has & (busy_max >= GPU_BOUND_BUSY * np.maximum(prog, 1)))
    if n > 1:
        # a step adds to the program's time at most what lies between the previous step's
        # end and its own: a host that starts the next step while the GPU still runs this
        # one overlaps the two steps, and only its host time after that end can pace the
        # step. A step ends with its GPU work where the GPU paces it, else with its host
        # span (a host-paced step's stray late kernel does not hold the next one back).
        h_end = out["end"].to_numpy(np.int64)
        end = np.maximum(h_end, np.where(has, ge, -1))
        reach_end = _group_cummax(first, np.where(paced, end, h_end))
        prev_end = np.full(n, -1, np.int64)
        prev_end[1:] = np.where(first[1:], -1, reach_end[:-1])
        after = prev_end >= 0
        prog = np.where(after, np.minimum(prog, np.maximum(end - prev_end, 0)), prog)
        host = np.where(after, np.maximum(0, h_end - np.maximum(out["start"].to_numpy(np.int64),
                                                                prev_end)), dur)
    own = gpu if starved is None else np.maximum(gpu - np.maximum(starved, 0), 0)
    floor = GPU_BOUND_BUSY * np.maximum(prog, 1)
    by_own = (own > host) | (has & (busy_max >= floor))
    seen = busy_max if busy_seen is None else busy_seen
    gpu_bound = by_own | ((has | (seen > 0)) & (seen >= floor))
    out["gpu_ns"] = gpu.astype(np.int64)
    out["program_ns"] = prog.astype(np.int64)
    out["bound_by"] = np.where(gpu_bound, "gpu", "host").astype(object)
    # the GPU paces the step by its own work, not only by the work queued before the
    # recording (figures.backlog: where that work alone paces it, it lies inside the step)
    out["gpu_by_own_work"] = by_own
    return out


def queued_lead(tab: pd.DataFrame, gaps: pd.DataFrame) -> np.ndarray:
    """Per step: how long its first GPU op had been queued when it started, where the GPU sat
    idle before it (the queued part of the gap that ends at it, ``queued_ns`` from the
    attribution): the GPU held the step's work and waited on its front-end or on something
    the trace does not show -- the GPU's time for the step, not the host's."""
    n = len(tab)
    out = np.zeros(n, np.int64)
    if not n or not len(gaps) or "queued_ns" not in gaps:
        return out
    k = gaps["step_index"].to_numpy(np.int64)
    m = (k >= 0) & (k < n)
    gs = tab["gpu_start"].to_numpy(np.int64)
    end = gaps["end"].to_numpy(np.int64)
    m &= end == gs[np.clip(k, 0, n - 1)]
    if m.any():
        q = np.minimum(gaps["queued_ns"].to_numpy(np.int64),
                       gaps["duration"].to_numpy(np.int64))
        np.maximum.at(out, k[m], np.maximum(q[m], 0))
    return out


def starved_in_window(tab: pd.DataFrame, gaps: pd.DataFrame) -> np.ndarray:
    """Per step: the GPU's idle inside the step's GPU window (``gpu_start``..``gpu_end``)
    in the gaps its own ops ended, less their queued part (``queued_ns``: the GPU had the
    next op) -- time the GPU waited for the host to launch. Only on steps whose GPU work is
    one device's (``busy_ns`` == ``busy_max_ns``): another device busy meanwhile is not
    starved."""
    n = len(tab)
    out = np.zeros(n, np.int64)
    need = ("step_index", "start", "end", "duration", "queued_ns")
    if not n or not len(gaps) or any(c not in gaps for c in need) \
            or "busy_max_ns" not in tab or "busy_ns" not in tab:
        return out
    k = gaps["step_index"].to_numpy(np.int64)
    m = k >= 0
    kk = np.maximum(k, 0)
    gs = tab["gpu_start"].to_numpy(np.int64)[kk]
    ge = tab["gpu_end"].to_numpy(np.int64)[kk]
    m &= (gs >= 0) & (gaps["start"].to_numpy(np.int64) >= gs) & \
        (gaps["end"].to_numpy(np.int64) <= ge)
    idle = np.maximum(gaps["duration"].to_numpy(np.int64)
                      - np.maximum(gaps["queued_ns"].to_numpy(np.int64), 0), 0)
    np.add.at(out, k[m], idle[m])
    one = tab["busy_ns"].to_numpy(np.int64) == tab["busy_max_ns"].to_numpy(np.int64)
    return np.where(one, out, 0)


def program_step(tab: pd.DataFrame | None) -> dict | None:
    """The window's program step (``program_columns``): mean and median of ``program_ns``,
    the host's and the GPU's means beside it, which bounds most steps, how far the host
    runs ahead of the GPU on the GPU-bound steps (mean of program - host span), and the
    program steps' cv and burstiness (``step_stats``)."""
    if tab is None or not len(tab) or "program_ns" not in tab:
        return None
    prog = tab["program_ns"].to_numpy(np.int64)
    gpu_bound = tab["bound_by"].to_numpy(object) == "gpu"
    ahead = np.maximum(prog - tab["dur"].to_numpy(np.int64), 0)[gpu_bound]
    st = step_stats(prog)
    return {"mean_ns": int(round(float(prog.mean()))),
            "median_ns": int(round(float(np.median(prog)))),
            "host_mean_ns": int(round(float(tab["dur"].mean()))),
            "gpu_mean_ns": int(round(float(tab["gpu_ns"].mean()))),
            "bound_by": "gpu" if 2 * int(gpu_bound.sum()) >= len(prog) else "host",
            "gpu_bound_steps": int(gpu_bound.sum()), "steps": int(len(prog)),
            "host_ahead_ns": int(round(float(ahead.mean()))) if len(ahead) else 0,
            # how alike the program's steps are (step_stats): a host whose spans vary while
            # the GPU keeps its pace is not a bursty program
            "cv": st["cv"], "bursty": st["bursty"]}


def program_step_of(a) -> dict | None:
    """An analysis's program step: its facts record's figure, else from its step table
    (None for a window without steps)."""
    fig = getattr(getattr(a, "facts", None), "figures", None) or {}
    if "program_step" in fig:
        return fig["program_step"]
    return program_step(a.steps) if a.step_source != "whole_trace" else None


def idle_in_span(steps: pd.DataFrame, gaps: pd.DataFrame) -> np.ndarray:
    """Per step: GPU idle ns that lies inside the step's own CPU span [start, end).

    Each gap is split at step boundaries (clipped to the spans of its own process; a
    pseudo-step with pid -1 takes every process), summed over devices. Unlike the gap's
    step (the step that launched the op ending it), this is steady on a steady loop.
    """
    from . import intervals

    n = len(steps)
    out = np.zeros(n, np.int64)
    if not n or not len(gaps):
        return out
    spid = steps["pid"].to_numpy(np.int64)
    s, e = steps["start"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)
    gs, ge = gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64)
    for (pid, _dev), idx in gaps.groupby(["pid", "device"], sort=False).indices.items():
        sel = (spid == pid) | (spid < 0)
        if sel.any():
            out[sel] += intervals.overlap(intervals.union(gs[idx], ge[idx]), s[sel], e[sel])
    return out


def step_stats(durs, bursty_cv: float = 0.25, bursty_max_ratio: float = 2.0) -> dict | None:
    """mean, median, p90, min, max, stddev (population), cv; bursty flag.

    ``bursty``: at least 3 steps and (cv > ``bursty_cv`` or the slowest step takes
    more than ``bursty_max_ratio`` times the median).
    """
    d = np.asarray(durs, np.int64)
    if not len(d):
        return None
    mean = float(d.mean())
    med = float(np.median(d))
    std = float(d.std())
    cv = std / mean if mean > 0 else 0.0
    bursty = bool(len(d) >= 3 and (cv > bursty_cv or d.max() > bursty_max_ratio * med))
    return {
        "count": int(len(d)),
        "total_ns": int(d.sum()),
        "mean_ns": int(round(mean)),
        "median_ns": int(round(med)),
        "p90_ns": int(round(float(np.percentile(d, 90)))),
        "min_ns": int(d.min()),
        "max_ns": int(d.max()),
        "stddev_ns": int(round(std)),
        "cv": round(cv, 4),
        "bursty": bursty,
    }


# an op that started this long after its launch call began sat queued behind earlier work:
# a launch call takes ~5-50 us, and the GPU took it when it was done with what came before
QUEUED_NS = 500_000


def queued_busy_share(ops: pd.DataFrame) -> float | None:
    """The share of the launched GPU ops' time in ops that started QUEUED_NS or more after
    their launch call began: work the GPU had waiting for it (None: no launched op). A host
    that launches each kernel just in time leaves this near 0; HTA's MTIA inference trace,
    whose critical path read "0% GPU work", has its median op queued 9 ms."""
    if not len(ops) or "launch_ts" not in ops:
        return None
    lt = ops["launch_ts"].to_numpy(np.int64)
    m = lt >= 0
    if not m.any():
        return None
    dur = ops["dur"].to_numpy(np.int64)[m]
    total = int(dur.sum())
    if total <= 0:
        return None
    waited = ops["ts"].to_numpy(np.int64)[m] - lt[m] >= QUEUED_NS
    return float(dur[waited].sum()) / total

