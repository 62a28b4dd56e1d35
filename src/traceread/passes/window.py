"""The analysis window: which stretch of the trace the verdict is about.

A whole-program capture (``nsys profile python train.py``, torch.profiler with
no schedule) opens with CUDA context creation, lazy module loading, library
initialisation, compilation and warm-up steps. None of that is the steady state
the user wants explained, and a few seconds of it drown every later step.

``auto`` (the default): when steps exist, analyse the steady-state steps --
leading steps are dropped while they are warm-up (see ``warmup_reason``); the
window runs from the first kept step's start to the end of the last kept step
(or of the GPU work it launched, whichever is later). Without steps the window
is the whole trace, and the report says so. ``--steps N:M`` keeps the steps
numbered N..M (inclusive, either side optional); ``--steps all`` keeps every
step; ``--window START:END`` (times after the trace's first event) overrides
both.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .attribution import COMPILE_RX, GRAPH_RECORD_RX, SYNC_API_RX
from .compile import is_compile_name
from .steps import assign_steps, recording_end
from .common import fmt_ms as _ms, kind_in
from .frames import code_in, take_rows

# One-time start-up work: context and module loading, library handles, NCCL init.
STARTUP_RX = re.compile(
    r"^(?:cu(?:Library|Module)(?:Load|GetModule|GetFunction|GetKernel)\w*"
    r"|cu(?:Init|CtxCreate|DevicePrimaryCtxRetain|DevicePrimaryCtxSetFlags)\w*"
    r"|(?:cuda|hip)(?:SetDevice|GetDeviceProperties|DeviceGetAttribute|FuncGetAttributes)\w*"
    r"|hip(?:ModuleLoad|ModuleGetFunction|Init)\w*"
    r"|(?:cublas|cublasLt|cudnn|hipblas|hipblasLt|miopen|rocblas|cusparse|cufft)Create\w*"
    r"|ncclCommInit\w*|nccl:comm_init\w*|__cudaRegister\w*)$")
ALLOC_RX = re.compile(r"^(?:cuda|hip|cu)(?:Mem)?(?:Malloc|Alloc)\w*")

WARMUP_OUTLIER = 1.5          # a leading step slower than 1.5x the median of the later ones
WARMUP_OUTLIER_MIN_NS = 1_000_000   # ... by at least 1 ms
STARTUP_SHARE = 0.01          # start-up calls >= 1% of a step make it warm-up
STARTUP_MIN_NS = 1_000_000    # ... and >= 1 ms
# A blocking call (a sync, a synchronous copy) waits on the GPU or on data: no evidence of
# one-time work. One that fills half of a stretch is why that stretch is long, so the
# stretch is not dropped as warm-up when that wait would matter to the analysed window.
STALL_SHARE = 0.5             # the wait fills >= 50% of the leading part ...
STALL_KEPT_SHARE = 0.1        # ... and is >= 10% of the window that would be analysed


@dataclass
class Window:
    """What was analysed: [start, end) on the trace clock, and why."""

    mode: str                       # "steps" (auto), "all_steps", "steps N:M", "explicit",
    #                                 "steady" (no steps: the repeating part), "whole_trace"
    start: int
    end: int
    steps: pd.DataFrame             # the analysed steps (empty for whole_trace)
    total_steps: int = 0
    trace_start: int = 0
    trace_end: int = 0
    excluded: list = field(default_factory=list)   # [{"what", "ns", "reason", "detail"}]
    note: str = ""

    @property
    def dur(self) -> int:
        return max(0, self.end - self.start)

    def to_dict(self) -> dict:
        first = int(self.steps["step"].iloc[0]) if len(self.steps) else None
        last = int(self.steps["step"].iloc[-1]) if len(self.steps) else None
        return {"mode": self.mode, "start_ns": int(self.start), "end_ns": int(self.end),
                "dur_ns": int(self.dur), "offset_ns": int(self.start - self.trace_start),
                "trace_start_ns": int(self.trace_start), "trace_end_ns": int(self.trace_end),
                "steps_analysed": len(self.steps), "steps_total": int(self.total_steps),
                "first_step": first, "last_step": last,
                "excluded": self.excluded, "note": self.note}


def trace_span(ev: pd.DataFrame) -> tuple[int, int]:
    if not len(ev):
        return 0, 0
    return int(ev["ts"].min()), int((ev["ts"] + ev["dur"]).max())


class StepsError(ValueError):
    """A ``--steps`` the trace cannot take (a bad spec, or no step in its range): the user's
    input, told in one line -- unlike any other ValueError, which is a bug."""


def parse_steps(spec: str | None) -> tuple[str, int | None, int | None]:
    """``auto`` | ``all`` | ``N:M`` | ``N`` -> (mode, lo, hi); raises StepsError."""
    s = (spec or "auto").strip().lower()
    if s in ("auto", "all"):
        return s, None, None
    m = re.fullmatch(r"(-?\d*)\s*:\s*(-?\d*)|(\d+)", s)
    if not m:
        raise StepsError(f"--steps must be auto, all, N:M or N, not {spec!r}")
    if m.group(3) is not None:
        n = int(m.group(3))
        return "range", n, n
    lo = int(m.group(1)) if m.group(1) else None
    hi = int(m.group(2)) if m.group(2) else None
    if lo is not None and hi is not None and hi < lo:
        raise StepsError(f"--steps {spec}: the last step comes before the first")
    return "range", lo, hi


def choose(ev: pd.DataFrame, steps: pd.DataFrame, ops: pd.DataFrame, *,
           steps_spec: str | None = None, window: tuple[int, int] | None = None) -> Window:
    """The analysis window for a trace (see module doc).

    ``steps``: ``steps.find_steps`` output; ``ops``: ``steps.gpu_ops`` output;
    ``window``: (start, end) offsets in ns after the trace's first event.
    """
    t0, t1 = trace_span(ev)
    if window is not None:
        lo = t0 + max(0, int(window[0]))
        hi = t1 if window[1] is None else min(t1, t0 + int(window[1]))
        if lo >= t1 or hi <= lo:
            from ..errors import TraceError

            end = "" if window[1] is None else f"{int(window[1]) / 1e6:g}ms"
            raise TraceError("--window", f"{int(window[0]) / 1e6:g}ms:{end} lies outside the "
                             f"trace (0 to {(t1 - t0) / 1e6:g} ms after its first event)")
        kept = _steps_inside(steps, lo, hi)
        w = Window("explicit", lo, max(lo, hi), kept, len(steps), t0, t1)
        w.excluded = _edges(ev, w, "before the window", "after the window")
        return w
    if not len(steps):
        steady = None if steps_spec == "all" else steady_start(ops)
        if steady is None:
            return Window("whole_trace", t0, t1, steps, 0, t0, t1,
                          note="no steps found: the whole trace is analysed (start-up included)")
        hi = int(ops["end"].max())
        stall = _stall(ev, t0, steady)
        if stall and stall[1] >= STALL_SHARE * (steady - t0) and \
                stall[1] >= STALL_KEPT_SHARE * (hi - steady):
            return Window("whole_trace", t0, t1, steps, 0, t0, t1,
                          note=f"no steps found: the whole trace is analysed -- the part before "
                               f"the repeating kernels is kept: a blocking {stall[0]} of "
                               f"{_ms(stall[1])} fills it, and a wait is no evidence of "
                               "one-time work")
        w = Window("steady", steady, hi, steps, 0, t0, t1,
                   note="no steps found: analysed from the last first-seen recurring kernel on")
        w.excluded = _edges(ev, w, "before the repeating part", "after the last GPU op")
        if w.excluded and w.excluded[0]["what"] == "before the repeating part":
            w.excluded[0]["reason"] = ("warm-up: the recurring kernels run for the first time "
                                       "(module loading, first-touch allocation, set-up)")
        return w
    main = _main_steps(steps)
    mode, lo, hi = parse_steps(steps_spec)
    excluded: list = []
    cut: list = []
    if mode == "range":
        num = main["step"].to_numpy(np.int64)
        keep = np.ones(len(main), bool)
        if lo is not None:
            keep &= num >= lo
        if hi is not None:
            keep &= num <= hi
        if not keep.any():
            raise StepsError(f"--steps {steps_spec}: no step numbered in that range "
                             f"(steps #{int(num.min())}..#{int(num.max())})")
        kept = main[keep]
        label = f"steps {steps_spec}"
        for r in main[~keep].itertuples():
            excluded.append(_step_item(r, "not selected (--steps)", ""))
    elif mode == "all":
        kept, label = main, "all_steps"
    else:
        kept, warm = _drop_warmup(ev, main, ops)
        label = "steps"
        if warm and len(ops) and not _gpu_end_of(kept, ops):
            # the steps left launched nothing: a window without GPU work explains nothing
            kept, warm = main, []
        excluded += warm
        kept, cut = _drop_cut_last(kept, ops)
        excluded += cut
    start = int(kept["start"].min())
    end = max(int(kept["end"].max()), _gpu_end_of(kept, ops))
    w = Window(label, start, end, kept.reset_index(drop=True), len(main), t0, t1)
    # excluded steps are listed on their own: the leading edge stops at the first step
    w.excluded = _edges(ev, w, "before the first step", "after the last analysed step",
                        before_end=int(main["start"].iloc[0]) if excluded else None,
                        after_start=max(w.end, int(main["end"].iloc[-1])) if cut else None) \
        + excluded
    w.excluded.sort(key=lambda x: x.get("start_ns", 0))
    return w


STEADY_RECUR = 3          # a kernel seen >= 3 times is part of the loop
STEADY_NAMES = 0.9        # the loop has started once 90% of its kernels have been seen
STEADY_MIN_LAUNCHES = 30  # fewer recurring launches: no loop to speak of
STEADY_MIN_SHARE = 0.5    # the steady part must hold half of the recurring launches


def steady_start(ops: pd.DataFrame) -> int | None:
    """Without steps: where the repeating part of a program begins, or None.

    A training or inference loop launches the same kernels again and again; start-up and
    warm-up launch them for the first time (and run set-up with no kernels at all). The
    steady state starts when 90% of the recurring kernels (seen >= 3 times) have run once,
    at the end of that first run. None when there is no loop to find (few recurring
    launches, or the part after that point holds less than half of them).
    """
    if not len(ops):
        return None
    k = ops[(ops["kind"] == "kernel").to_numpy()]
    if not len(k):
        return None
    codes, uniq = pd.factorize(k["name"], sort=False, use_na_sentinel=False)  # no -1 codes
    counts = np.bincount(codes, minlength=len(uniq))
    recur = counts >= STEADY_RECUR
    rec_rows = recur[codes]
    if int(rec_rows.sum()) < STEADY_MIN_LAUNCHES:
        return None
    ts = k["ts"].to_numpy(np.int64)
    end = k["end"].to_numpy(np.int64)
    first_ts = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(first_ts, codes, ts)
    firsts = np.sort(first_ts[recur])
    pick = firsts[max(0, int(np.ceil(STEADY_NAMES * len(firsts))) - 1)]
    # the end of that kernel's first run
    at = int(end[(ts == pick) & rec_rows].max())
    if (ts[rec_rows] >= at).sum() < STEADY_MIN_SHARE * rec_rows.sum():
        return None
    if at <= int(ts.min()):
        return None
    return at


def _main_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps of the process with the most steps: a window is chosen on one timeline."""
    counts = steps["pid"].value_counts()
    pid = counts.index[0]
    return steps[steps["pid"] == pid].sort_values("start", kind="stable").reset_index(drop=True)


def _steps_inside(steps: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    if not len(steps):
        return steps
    m = (steps["start"].to_numpy() >= lo) & (steps["end"].to_numpy() <= hi)
    return steps[m].reset_index(drop=True)


def _gpu_end_of(kept: pd.DataFrame, ops: pd.DataFrame) -> int:
    """End of the last GPU op launched by the kept steps (their tail runs past the host)."""
    if not len(ops):
        return 0
    linked = ops["launch_ts"].to_numpy() >= 0
    ts = np.where(linked, ops["launch_ts"].to_numpy(np.int64), ops["ts"].to_numpy(np.int64))
    pid = np.where(linked, ops["launch_pid"].to_numpy(np.int64), ops["pid"].to_numpy(np.int64))
    k = assign_steps(kept.assign(index=np.arange(len(kept))), pid, ts)
    if not (k >= 0).any():
        return 0
    return int(ops["end"].to_numpy(np.int64)[k >= 0].max())


_HOST = ("runtime", "driver", "cpu_op", "annotation", "python", "osrt")


def _flagged_host(ev: pd.DataFrame, mask: np.ndarray) -> tuple[pd.DataFrame, dict]:
    """The host rows in ``mask`` (ts, dur, name) that compile, record graphs, run start-up
    work or allocate, with ``_flags`` of them: the only rows the warm-up tests read."""
    mask = mask & kind_in(ev, _HOST)
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        rows = ev.loc[mask, ["ts", "dur", "name"]]
        return rows, _flags(rows)
    luts = _flag_luts(names.cat.categories)
    codes = names.cat.codes.to_numpy()
    rows = np.flatnonzero(mask & code_in(codes, np.flatnonzero(np.logical_or.reduce(
        list(luts.values())))))
    c = codes[rows]
    return take_rows(ev, rows, ("ts", "dur", "name")), {k: v[c] for k, v in luts.items()}


def _flag_luts(cats: pd.Index) -> dict:
    """``_flags`` per category (one slot more, False, for a null name)."""
    text = [str(c) for c in cats]

    def lut(fn):
        return np.array([bool(fn(t)) for t in text] + [False], bool)
    graph = lut(GRAPH_RECORD_RX.search)
    comp = lut(COMPILE_RX.search) | lut(is_compile_name)
    return {"compile": comp & ~graph, "graph": graph, "startup": lut(STARTUP_RX.search),
            "alloc": lut(ALLOC_RX.search), "sync": lut(SYNC_API_RX.match)}


def _name_flags(names: pd.Series, rx) -> np.ndarray:
    cat = names.astype("category") if not isinstance(names.dtype, pd.CategoricalDtype) else names
    lut = np.array([bool(rx.search(str(c))) for c in cat.cat.categories] + [False], bool)
    return lut[cat.cat.codes.to_numpy()]


def _time_in(rows: pd.DataFrame, flags: np.ndarray, lo: int, hi: int) -> int:
    """Clipped time of flagged rows inside [lo, hi)."""
    s = rows["ts"].to_numpy(np.int64)[flags]
    e = s + rows["dur"].to_numpy(np.int64)[flags]
    return int(np.maximum(0, np.minimum(e, hi) - np.maximum(s, lo)).sum())


def _longest(rows: pd.DataFrame, flags: np.ndarray, lo: int, hi: int) -> int:
    """The longest flagged row inside [lo, hi), clipped (0 when none)."""
    s = rows["ts"].to_numpy(np.int64)[flags]
    e = s + rows["dur"].to_numpy(np.int64)[flags]
    ov = np.minimum(e, hi) - np.maximum(s, lo)
    return int(ov.max()) if len(ov) and ov.max() > 0 else 0


def _stall(ev: pd.DataFrame, lo: int, hi: int) -> tuple[str, int] | None:
    """(name, ns) of the longest blocking call (sync, synchronous copy) in [lo, hi)."""
    t = ev["ts"].to_numpy()
    rows, flags = _flagged_host(ev, (t < hi) & (t + ev["dur"].to_numpy() > lo))
    m = flags["sync"]
    if not m.any():
        return None
    s = rows["ts"].to_numpy(np.int64)[m]
    ov = np.minimum(s + rows["dur"].to_numpy(np.int64)[m], hi) - np.maximum(s, lo)
    k = int(np.argmax(ov))
    return str(rows["name"].to_numpy()[m][k]), int(ov[k])


def warmup_reason(ev_host: pd.DataFrame, flags: dict, start: int, end: int,
                  ref_ns: float | None, alloc_ref: float) -> str:
    """Why a leading step is warm-up ("" when it is steady state)."""
    dur = end - start
    # a step whose longest blocking wait outlasts its one-time work is long because of the
    # wait: start-up work that takes a small part of it does not make it warm-up
    wait = _longest(ev_host, flags["sync"], start, end)
    for what, key in (("compiles", "compile"), ("records CUDA graphs", "graph"),
                      ("runs start-up work", "startup")):
        t = _time_in(ev_host, flags[key], start, end)
        if t >= STARTUP_MIN_NS and t >= STARTUP_SHARE * dur and t >= wait:
            return f"warm-up: {what} ({_ms(t)})"
    t = _time_in(ev_host, flags["alloc"], start, end)
    if t >= STARTUP_MIN_NS and t >= 0.1 * dur and t > 10 * alloc_ref and t >= wait:
        return f"warm-up: grows the allocator ({_ms(t)} in allocations)"
    if ref_ns and dur > WARMUP_OUTLIER * ref_ns and dur - ref_ns > WARMUP_OUTLIER_MIN_NS:
        return f"warm-up: {dur / ref_ns:.1f}{SLOWER_ONLY}"
    return ""


def _flags(rows: pd.DataFrame) -> dict:
    names = rows["name"]
    comp = _name_flags(names, COMPILE_RX)
    cat = names.astype("category") if not isinstance(names.dtype, pd.CategoricalDtype) else names
    lut = np.array([is_compile_name(str(c)) for c in cat.cat.categories] + [False], bool)
    comp |= lut[cat.cat.codes.to_numpy()]
    graph = _name_flags(names, GRAPH_RECORD_RX)
    return {"compile": comp & ~graph, "graph": graph, "startup": _name_flags(names, STARTUP_RX),
            "alloc": _name_flags(names, ALLOC_RX), "sync": _name_flags(names, SYNC_API_RX)}


def _drop_warmup(ev: pd.DataFrame, main: pd.DataFrame, ops: pd.DataFrame):
    """Leading warm-up steps dropped (at least one step always stays)."""
    rows, flags = _flagged_host(ev, ev["pid"].to_numpy() == int(main["pid"].iloc[0]))
    start = main["start"].to_numpy(np.int64)
    end = main["end"].to_numpy(np.int64)
    dur = end - start
    n = len(main)
    allocs = [_time_in(rows, flags["alloc"], int(a), int(b)) for a, b in zip(start, end)]
    excluded = []
    first = 0
    # what the last step also does is the steady state (a recompile every step), not warm-up
    last = _kind_of(warmup_reason(rows, flags, int(start[-1]), int(end[-1]), None, float("inf")))
    while first < n - 1:
        later = dur[first + 1:]
        # one later step is no reference: the last step of a trace is often cut short
        ref = float(np.median(later)) if len(later) >= 2 else None
        alloc_ref = float(np.median(allocs[first + 1:])) if first + 1 < n else 0.0
        why = warmup_reason(rows, flags, int(start[first]), int(end[first]), ref, alloc_ref)
        if not why or (last and _kind_of(why) == last):
            break
        r = main.iloc[first]
        excluded.append(_step_item(r, why, _top_names(rows, flags, int(start[first]),
                                                      int(end[first]))))
        first += 1
    return main.iloc[first:], excluded


CUT_SHARE = 0.5   # a last step under half the median of the others ...


def _drop_cut_last(kept: pd.DataFrame, ops: pd.DataFrame):
    """The last step dropped when the trace ends inside it: it launched no GPU op while the
    steps before it did, and it is under CUT_SHARE of their median span -- the profiler
    stopped while the step had barely begun (a mean over it halves the step)."""
    if len(kept) < 2 or not len(ops):
        return kept, []
    dur = kept["dur"].to_numpy(np.int64)
    if dur[-1] >= CUT_SHARE * float(np.median(dur[:-1])) or _gpu_end_of(kept.iloc[-1:], ops) \
            or not _gpu_end_of(kept.iloc[:-1], ops):
        return kept, []
    r = kept.iloc[-1]
    return kept.iloc[:-1], [_step_item(r, "cut short: the trace ends inside it (no GPU work "
                                          "launched; the profiler stopped)", "")]


SLOWER_ONLY = "x the median of the later steps"   # warmup_reason's reason by duration alone


def by_startup_work(reason: str) -> bool:
    """A leading step excluded as warm-up by the one-time work it runs (compiles, graph
    recording, start-up calls, allocator growth), not by its length alone."""
    return reason.startswith("warm-up") and SLOWER_ONLY not in reason


def _kind_of(reason: str) -> str:
    """ "warm-up: compiles (2.40 s)" -> "warm-up: compiles" """
    return reason.split(" (", 1)[0]


def _step_item(r, reason: str, detail: str) -> dict:
    get = (lambda k: r[k]) if isinstance(r, pd.Series) else (lambda k: getattr(r, k))
    return {"what": f"step #{int(get('step'))}", "step": int(get("step")),
            "start_ns": int(get("start")), "ns": int(get("dur")), "reason": reason,
            "detail": detail}


def _top_names(rows: pd.DataFrame, flags: dict, lo: int, hi: int, k: int = 3) -> str:
    """The largest start-up / compile / graph-recording calls inside [lo, hi)."""
    m = flags["startup"] | flags["compile"] | flags["graph"]
    s = rows["ts"].to_numpy(np.int64)
    e = s + rows["dur"].to_numpy(np.int64)
    inside = m & (e > lo) & (s < hi)
    if not inside.any():
        return ""
    clip = np.minimum(e[inside], hi) - np.maximum(s[inside], lo)
    df = pd.DataFrame({"name": rows["name"].astype(str).to_numpy()[inside], "ns": clip})
    top = df.groupby("name")["ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return ", ".join(f"{n} {_ms(int(r['sum']))}" + (f" ×{int(r['size'])}" if r["size"] > 1 else "")
                     for n, r in top.head(k).iterrows())


def _edges(ev: pd.DataFrame, w: Window, before: str, after: str,
           before_end: int | None = None, after_start: int | None = None) -> list:
    """The trace before the window and after it; ``before_end`` / ``after_start``: where
    excluded steps listed on their own take over (the edges stop at them)."""
    out = []
    stop = min(w.start, before_end) if before_end is not None else w.start
    if stop > w.trace_start:
        rows, flags = _flagged_host(ev, ev["ts"].to_numpy() < stop)
        detail = _top_names(rows, flags, w.trace_start, stop) if len(rows) else ""
        reason = "start-up" if detail else before
        out.append({"what": before, "start_ns": int(w.trace_start),
                    "ns": int(stop - w.trace_start), "reason": reason, "detail": detail})
    begin = w.end if after_start is None else after_start
    stopped = recording_end(ev)
    last = w.trace_end if stopped is None or stopped >= w.trace_end else max(stopped, begin)
    if last > begin:
        out.append({"what": after, "start_ns": int(begin), "ns": int(last - begin),
                    "reason": after, "detail": ""})
    if w.trace_end > last:   # a range the profiler closed after it stopped: nothing recorded
        out.append({"what": "after the recording stopped", "start_ns": int(last),
                    "ns": int(w.trace_end - last),
                    "reason": "nothing recorded: a range closed after the profiler stopped "
                              "reaches here", "detail": ""})
    return out


COLD_MIN_NS = 10_000_000     # a one-time call takes >= 10 ms ...
COLD_RATIO = 50              # ... and >= 50x the median call of the same name


def one_time_calls(ev: pd.DataFrame, gaps: pd.DataFrame, top: int = 3) -> dict:
    """Runtime/driver calls of a cold start inside the idle gaps: start-up calls (context,
    modules, library handles) and calls >= 50x their name's median (the first
    cudaLaunchKernel that loads modules lazily, the first cudaFree that builds the context,
    a first-touch cudaMalloc). A window without steps contains them; they are not churn.

    Returns {"ns": idle ns they cover, "calls": [(name, ns), ...] largest first}.
    """
    from . import intervals

    api = ev["kind"].isin(("runtime", "driver")).to_numpy()
    if not api.any() or not len(gaps):
        return {"ns": 0, "calls": []}
    rows = ev.loc[api, ["ts", "dur", "name"]]
    names = rows["name"].astype(str)
    dur = rows["dur"].to_numpy(np.int64)
    med = rows.groupby(names.to_numpy())["dur"].transform("median").to_numpy(np.float64)
    cold = (dur >= COLD_MIN_NS) & ((dur >= COLD_RATIO * np.maximum(med, 1))
                                   | names.str.match(STARTUP_RX).to_numpy())
    if not cold.any():
        return {"ns": 0, "calls": []}
    s = rows["ts"].to_numpy(np.int64)[cold]
    e = s + dur[cold]
    iv = intervals.union(gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64))
    ov = intervals.overlap(iv, s, e)
    by = pd.Series(ov, index=names.to_numpy()[cold]).groupby(level=0).sum()
    by = by[by > 0].sort_values(ascending=False)
    covered = intervals.union(s[ov > 0], e[ov > 0])
    ns = int(intervals.overlap(iv, covered[0], covered[1]).sum()) if len(covered[0]) else 0
    return {"ns": ns, "calls": [(str(k), int(v)) for k, v in by.head(top).items()]}


def slice_events(ev: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """Events overlapping [start, end), clipped to it (instants: start <= ts < end).

    Rows are in ts order, so the kept rows are a run [r, b) (those starting inside the
    window) plus a few head rows H before it that reach into the window (the trace-span
    event, an enclosing annotation). The result is ev's rows [r - |H|, b) with the first
    |H| rows replaced by H: a column whose values at H equal its values at
    [r - |H|, r) stays a view of ev's (usually all but ts, dur, kind, name, cat:
    ~20 B/row, not the ~165 of a copy of every column); the others are copied.
    """
    if not len(ev):
        return ev
    ts_all = ev["ts"].to_numpy(np.int64)
    dur_all = ev["dur"].to_numpy(np.int64)
    m = _in_window(ts_all, dur_all, start, end)
    if not m.any():
        return _clipped(ev.iloc[:0].copy(deep=False), ts_all[:0].copy(), dur_all[:0], start, end)
    b = len(m) - int(np.argmax(m[::-1]))         # one past the last kept row
    back = m[b - 1::-1]                          # from row b - 1 backwards
    r = 0 if back.all() else b - int(np.argmin(back))   # where the last run of kept rows starts
    head = np.flatnonzero(m[:r])
    del m, back
    if r == 0 and b == len(ev) and ts_all.min() >= start and int((ts_all + dur_all).max()) <= end:
        return ev
    lo = r - len(head)
    out = ev.iloc[lo:b].copy(deep=False)         # views of ev's columns
    out.index = pd.RangeIndex(len(out))          # reset_index deep-copies without copy-on-write
    rows = np.concatenate([head, np.arange(r, b)]) if len(head) else slice(r, b)
    for col in ev.columns if len(head) else ():
        if col not in ("ts", "dur") and not _same_at(ev[col], head, lo):
            out[col] = pd.Series(_take(ev[col], rows), index=out.index, copy=False)
    ts = ts_all[rows] if len(head) else ts_all[rows].copy()
    return _clipped(out, ts, dur_all[rows], start, end)


def _same_at(s: pd.Series, head: np.ndarray, lo: int) -> bool:
    """The column's values at rows ``head`` equal those at rows [lo, lo + len(head))."""
    a = s.cat.codes.to_numpy() if isinstance(s.dtype, pd.CategoricalDtype) else s.to_numpy()
    return bool(np.array_equal(a[head], a[lo:lo + len(head)]))


def _take(s: pd.Series, rows: np.ndarray):
    if isinstance(s.dtype, pd.CategoricalDtype):
        return s.array.take(rows)
    return s.to_numpy()[rows]


def _in_window(ts: np.ndarray, dur: np.ndarray, start: int, end: int) -> np.ndarray:
    te = ts + dur
    m = (te > start) | ((dur == 0) & (ts >= start))
    del te
    m &= ts < end
    return m


def _clipped(out: pd.DataFrame, ts: np.ndarray, dur: np.ndarray, start: int,
             end: int) -> pd.DataFrame:
    """``out`` with ts / dur clipped to [start, end). ``ts``: the rows' start times, a
    new array (clipped in place); ``dur``: theirs (may be a view)."""
    s = ts
    e = np.add(s, dur)
    np.minimum(e, end, out=e)
    np.maximum(s, start, out=s)
    np.subtract(e, s, out=e)
    np.maximum(e, 0, out=e)
    # as Series: a bare array assigned to a column is copied again
    out["ts"] = pd.Series(s, index=out.index, copy=False)
    out["dur"] = pd.Series(e, index=out.index, copy=False)
    return out
