"""Is the analysed window the steady state? Cold start, JIT compilation, sampled traces.

The verdict's levers (CUDA graphs, fusion, fewer syncs) are about a loop that repeats.
A window that holds a program's first run, a JIT compiler at work, or a trace from which
most events were dropped is not that loop, and the analysis must say so instead.
Every state is proved by events of the window (docs/analysis.md, "Steady state"):

- ``cold_start``: one-time work of a first run -- start-up calls (module loading, library
  handles, context; ``window.STARTUP_RX``); a launch call >= ``OUTLIER_MIN_NS`` that
  launches a kernel for the first time (lazy module loading) and >= ``OUTLIER_RATIO`` x the
  median of its API's repeat launches (kernels seen before; none: the floor alone); the
  first allocation call of its API in the window as far above its API's later calls (none:
  not one; first-touch allocator growth, the first ``cudaFree`` that builds the
  context -- later ones are churn, a steady-state cost); the first call of a host op
  >= ``FIRST_RATIO`` x the median of its later calls (a first cuDNN conv picking its
  algorithm) unless a blocking wait or allocator calls fill half of it; the first run of
  a kernel as far above its later runs.
- ``jit``: JIT compilers other than dynamo/inductor (those are the ``compile`` cause):
  nvFuser, NVRTC / hipRTC, Triton's autotuner benchmarking, TorchScript's profiling
  executor and optimisation passes (``JIT_RX``).
- ``sampled``: the ids that the profiler hands out one by one jump: External ids of CPU
  ops by a median >= ``SAMPLED_EXT_JUMP``, or, with no such ids, correlation ids of
  runtime calls by a median >= ``SAMPLED_CORR_JUMP`` (CUPTI counts API calls Kineto does
  not record, so complete traces jump by up to ~10).

``cold_start`` and ``jit`` need the time their evidence covers inside the GPU's idle gaps
(plus the excess GPU time of slow first kernel runs) to reach ``STATE_SHARE`` of the idle
time and ``STATE_MIN_NS``; the larger wins. ``sampled`` wins over both: nothing measured
between the kept events can be trusted.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from .. import namerx
from . import intervals
from .attribution import ALLOC_API_RX, SYNC_API_RX
from .common import GRAPH_LAUNCH_RX, factorize_few, first_seen, kind_in, stable_by, table_of
from .window import STARTUP_RX

namerx.compile(STARTUP_RX)   # its literals in a trace's first name-table scan

OUTLIER_MIN_NS = 1_000_000     # a one-time call takes >= 1 ms ...
OUTLIER_RATIO = 50             # ... and >= 50x the median call of its API
FIRST_RATIO = 20               # a first call / first kernel run >= 20x its later median
FIRST_MIN_LATER = 2            # ... measured against at least 2 later calls
WAIT_FILLS = 0.5               # a first call half filled by a blocking wait is waiting
STATE_SHARE = 0.5              # evidence covers >= half of the idle time ...
STATE_MIN_NS = 1_000_000       # ... and >= 1 ms
SAMPLED_EXT_JUMP = 3           # median jump of consecutive External ids (complete: 1)
SAMPLED_CORR_JUMP = 30         # median jump of runtime correlation ids (complete: <= ~10)
SAMPLED_MIN_IDS = 100          # fewer ids: too few to tell
TOP_EVIDENCE = 5
LAZY_LAUNCH = "lazy module load (first launch)"
HOST_KINDS = ("runtime", "driver", "cpu_op", "annotation", "python", "osrt")

LAUNCH_API_RX = namerx.compile(
    r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel\w*$"
    r"|^(?:cuda|cu|hip)GraphLaunch\w*$")
# the allocator APIs that give memory back (ALLOC_API_RX's frees, releases and unmaps)
FREE_API_RX = namerx.compile(r"Free|Release|Unmap")
JIT_RX = namerx.compile(
    r"FusionKernelRuntime::compile|FusionExecutor::compile|nvfuser::.*compile"
    r"|Nvrtc::|^nvrtc(?:CompileProgram|CreateProgram|GetPTX|GetCUBIN)"
    r"|^hiprtc(?:CompileProgram|LinkComplete)|^cuLink(?:Create|AddData|Complete)"
    r"|triton/runtime/autotuner\.py\(\d+\): (?:_bench|benchmark|prune_configs)"
    r"|ProfilingGraphExecutorImpl|runProfilingOptimizations|runProfilingInsensitiveOptimizations"
    r"|runNondiffOptimization|torch::jit::.*(?:[Cc]ompile|[Oo]ptimi[sz])")

def steady_state(ev: pd.DataFrame, gaps: pd.DataFrame, sampled=False) -> dict:
    """{"state", "ns", "share_pct", "evidence", "cold_start_ns", "jit_ns", "sampled"}.

    ``ev``: the window's events; ``gaps``: its GPU idle gaps (start, end, duration).
    ``ns``: the idle time (plus excess first-run kernel time) the state's evidence covers.
    ``sampled``: ``sampled_ids(ev)`` when the caller has it already (False: not known yet).
    """
    idle = _idle(gaps)
    sampled = sampled_ids(ev) if sampled is False else sampled
    cold_ev, kernel_excess = _cold_evidence(ev)
    jit_ev = _rows(ev, _mask(ev, JIT_RX, HOST_KINDS), "JIT compilation")
    cold_ns = _covered(cold_ev, idle) + kernel_excess
    jit_ns = _covered(jit_ev, idle)
    base = int(idle[1].sum() - idle[0].sum()) if len(idle[0]) else 0
    # the idle time of lazy-loading launches: a launch call, so charged to the launch cause,
    # but paid once -- the verdict keeps it out of the steady causes (verdict/scores.py)
    lazy = [x for x in cold_ev if x["what"] == LAZY_LAUNCH]
    out = {"state": "steady", "ns": 0, "share_pct": 0.0, "evidence": [],
           "cold_start_ns": cold_ns, "jit_ns": jit_ns, "sampled": sampled,
           "one_time_launch_ns": _covered(lazy, idle),
           "one_time_launches": _top(lazy, idle)}
    if sampled:
        out.update(state="sampled", ns=base, share_pct=100.0 if base else 0.0,
                   evidence=[{"what": f"{sampled['ids']} id gaps",
                              "name": f"median jump {sampled['median_jump']}, "
                                      f"~{sampled['dropped_pct']:.0f}% of events dropped",
                              "ns": base, "start_ns": None, "median_ns": None,
                              "idle_ns": base}])
        return out
    for state, ns, items in sorted((("jit", jit_ns, jit_ev), ("cold_start", cold_ns, cold_ev)),
                                   key=lambda x: -x[1]):
        whole = base + (kernel_excess if state == "cold_start" else 0)
        if ns >= STATE_MIN_NS and ns >= STATE_SHARE * whole:
            out.update(state=state, ns=int(ns), evidence=_top(items, idle),
                       share_pct=round(100.0 * min(ns, base) / base, 1) if base else 0.0)
            break
    return out


def sampled_ids(ev: pd.DataFrame) -> dict | None:
    """{"ids", "count", "median_jump", "dropped_pct"} when ids jump as in a sampled trace."""
    ext = _jumps(ev, ("cpu_op",), "external_id")
    if ext and ext["count"] >= SAMPLED_MIN_IDS:
        return dict(ext, ids="External") if ext["median_jump"] >= SAMPLED_EXT_JUMP else None
    corr = _jumps(ev, ("runtime", "driver"), "correlation")
    if corr and corr["count"] >= SAMPLED_MIN_IDS and corr["median_jump"] >= SAMPLED_CORR_JUMP:
        return dict(corr, ids="correlation")
    return None


def _jumps(ev: pd.DataFrame, kinds: tuple, col: str) -> dict | None:
    """Ids of the process with the most of them: count, median jump, share never seen."""
    if col not in ev.columns or not len(ev):
        return None
    m = kind_in(ev, kinds)
    ids = ev[col].to_numpy()[m]
    pid = ev["pid"].to_numpy()[m]
    ok = ids > 0
    if not ok.any():
        return None
    # the process with most ids (the smallest pid of a tie), by hashing, not sorting
    code, pids = factorize_few(pid[ok])
    counts = np.bincount(code)
    top = pids[counts == counts.max()].min()
    # np.unique hashes first (~25 ms on 200 k ids); they come nearly sorted: sort, then drop repeats
    u = np.sort(ids[ok & (pid == top)].astype(np.int64), kind="stable")   # runs: merged
    u = u[np.r_[True, u[1:] != u[:-1]]] if len(u) else u
    if len(u) < 3:
        return None
    span = int(u[-1] - u[0] + 1)
    return {"count": int(len(u)), "median_jump": int(median_of_counts(np.diff(u))),
            "dropped_pct": round(100.0 * (1 - len(u) / span), 1)}


def median_of_counts(d: np.ndarray) -> float:
    """``np.median(d)`` of non-negative ints, by counting them when their range is small
    (the jumps between ids: mostly 1, where np.median's partition took ~30 ms at 200 k)."""
    n = len(d)
    if not n or int(d.min()) < 0 or int(d.max()) >= 4 * n + 4096:
        return float(np.median(d))
    c = np.cumsum(np.bincount(d))
    hi = int(np.searchsorted(c, n // 2 + 1))    # the (n // 2)-th smallest, 0-based
    if n % 2:
        return float(hi)
    lo = int(np.searchsorted(c, n // 2))        # and the one before it
    return (float(lo) + float(hi)) / 2.0


def _cold_evidence(ev: pd.DataFrame) -> tuple[list, int]:
    """Evidence rows of one-time work (see module doc) and the excess GPU time of slow
    first kernel runs."""
    codes, cats = _codes(ev)
    api = kind_in(ev, ("runtime", "driver"))
    host = kind_in(ev, HOST_KINDS)    # cudnnCreate / nccl:comm_init may be ops or ranges
    items = _rows(ev, host & _lut(cats, STARTUP_RX)[codes], "start-up call")
    if api.any():
        items += _api_outliers(ev, api, codes, cats)
    wait = api & (_lut(cats, SYNC_API_RX) | _lut(cats, ALLOC_API_RX))[codes]
    items += _first_calls(ev, kind_in(ev, ("cpu_op",)), "first call", codes, cats, wait)
    kern = _first_calls(ev, kind_in(ev, ("kernel",)), "first kernel run", codes, cats)
    return items + kern, int(sum(x["ns"] - x["median_ns"] for x in kern))


def _api_outliers(ev: pd.DataFrame, api: np.ndarray, codes: np.ndarray, cats) -> list:
    """Launch calls that launch a kernel for the first time and first allocation calls, each
    far above its API's steady calls (``_steady_median``)."""
    rows = np.flatnonzero(api)
    c = codes[rows]
    dur = ev["dur"].to_numpy(np.int64)[rows]
    is_launch = _lut(cats, LAUNCH_API_RX)[c]
    # only the first call of an allocation API: later slow ones are churn, not growth
    pid = ev["pid"].to_numpy(np.int64)[rows]
    first_of = _first_of_pairs(pid, c)
    is_alloc = _lut(cats, ALLOC_API_RX)[c] & first_of
    # each call against the API's steady calls, never its own kind: repeat launches for a
    # launch, the later calls for an allocation's first (``_steady_median``)
    med = np.zeros(len(rows))
    repeat = np.zeros(len(rows), bool)
    if (is_launch & (dur >= OUTLIER_MIN_NS)).any():
        corr = ev["correlation"].to_numpy(np.int64)[rows] if "correlation" in ev else \
            np.full(len(rows), -1, np.int64)
        repeat = _repeats(pid, corr, _first_launches(ev, codes))
        med = np.where(is_launch, _steady_median(c, dur, repeat), med)
        # a graph launch's time grows with its nodes, not a module load: its reference stays
        # the API's median (sglang decode: its one 1.6 ms hipGraphLaunch of ~550 kernels)
        graph = _lut(cats, GRAPH_LAUNCH_RX)[c]
        if graph.any():
            med = np.where(graph, pd.Series(dur).groupby(c).transform("median")
                           .to_numpy(np.float64), med)
    if (is_alloc & (dur >= OUTLIER_MIN_NS)).any():
        # with no later call to compare, the floor alone decides for an allocation (the
        # first pinned or device buffer: nsys-ai mock's only cudaHostAlloc, 3.6 ms) and for
        # a free before the process launched anything (cudaFree(0) building the context);
        # a lone free after launches frees what the program used (a wait, or churn)
        later = _steady_median(c, dur, ~first_of)
        lone = ~_lut(cats, FREE_API_RX)[c] | _before_first_launch(ev, rows, pid, is_launch)
        med = np.where(is_alloc, np.where(later > 0, later, np.where(lone, 0.0, np.inf)), med)
    big = (dur >= OUTLIER_MIN_NS) & (dur >= OUTLIER_RATIO * np.maximum(med, 1))
    launch = is_launch & big & ~repeat   # a kernel seen before: not lazy loading
    alloc = is_alloc & big
    ts = ev["ts"].to_numpy(np.int64)[rows]
    out = []
    for i in np.flatnonzero(launch):
        out.append(_item(LAZY_LAUNCH, cats[c[i]], int(ts[i]), int(dur[i]), med[i]))
    for i in np.flatnonzero(alloc):
        out.append(_item("first-call allocator growth", cats[c[i]], int(ts[i]), int(dur[i]),
                         med[i]))
    return out


def _before_first_launch(ev: pd.DataFrame, rows: np.ndarray, pid: np.ndarray,
                         is_launch: np.ndarray) -> np.ndarray:
    """Which calls (``rows``) began before their process's first launch call."""
    ts = ev["ts"].to_numpy(np.int64)[rows]
    first = pd.Series(np.where(is_launch, ts, np.iinfo(np.int64).max)).groupby(pid).transform(
        "min").to_numpy(np.int64)
    return ts < first


def _repeats(pid: np.ndarray, corr: np.ndarray, kernels: pd.DataFrame) -> np.ndarray:
    """Which (pid, correlation) calls launched a kernel seen before: linked to a kernel run
    that is not its name's first, and to no first run (``_first_launches``)."""
    calls = pd.MultiIndex.from_arrays([pid, corr])

    def linked(first: bool) -> np.ndarray:
        k = kernels[kernels["first"] == first]
        return calls.isin(pd.MultiIndex.from_arrays([k["pid"].to_numpy(), k["corr"].to_numpy()]))
    return linked(False) & ~linked(True)


def _steady_median(c: np.ndarray, dur: np.ndarray, steady: np.ndarray) -> np.ndarray:
    """Per API (``c``), the median duration of its ``steady`` calls -- a launch of a kernel
    seen before, an allocation call after the API's first. With none there is no steady
    call to compare with, and 0: the OUTLIER_MIN_NS floor alone decides (nsys-ai
    mock.sqlite: two kernels, each launched once, each launch 17.5 ms loading its module;
    the median of the two launches themselves hid both)."""
    g = pd.Series(np.where(steady, dur, np.nan).astype(np.float64)).groupby(c)
    med = g.transform("median").to_numpy(np.float64)
    return np.where(g.transform("count").to_numpy(np.int64) >= 1, med, 0.0)


def _first_of_pairs(pid: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``~DataFrame({"p": pid, "c": c}).duplicated()`` by one int64 key per row (the frame's
    hash tables were ~56 MB at 1 GB)."""
    if not len(c):
        return np.zeros(0, bool)
    pc = factorize_few(pid)[0].astype(np.int64)
    lo = int(c.min())
    width = int(c.max()) - lo + 1
    if (int(pc.max()) + 1) * width >= 2**62:
        return ~pd.DataFrame({"p": pid, "c": c}).duplicated().to_numpy()
    pc *= width
    pc += c
    pc -= lo
    return first_seen(factorize_few(pc, 1 << 16)[0])


def _first_launches(ev: pd.DataFrame, codes: np.ndarray) -> pd.DataFrame:
    """pid, corr of every linked GPU kernel run; ``first``: the first run of its name."""
    k = kind_in(ev, ("kernel",))
    if "correlation" not in ev or not k.any():
        return pd.DataFrame({"pid": [], "corr": [], "first": []}).astype(
            {"pid": np.int64, "corr": np.int64, "first": bool})
    df = pd.DataFrame({"pid": ev["pid"].to_numpy(np.int64)[k],
                       "corr": ev["correlation"].to_numpy(np.int64)[k],
                       "name": codes[k], "ts": ev["ts"].to_numpy(np.int64)[k]})
    df = df[df["corr"] > 0].sort_values("ts", kind="stable")
    df["first"] = ~df.duplicated(["pid", "name"])
    return df[["pid", "corr", "first"]]


def _first_calls(ev: pd.DataFrame, m: np.ndarray, what: str, codes: np.ndarray, cats,
                 wait: np.ndarray | None = None) -> list:
    """The first row of a name >= FIRST_RATIO x the median of its later rows (>= 2 of them)
    and >= OUTLIER_MIN_NS; with ``wait`` (rows of blocking and allocator calls), not when
    those fill half of it."""
    rows = np.flatnonzero(m & (codes >= 0))
    if len(rows) < FIRST_MIN_LATER + 1:
        return []
    args = (codes[rows], ev["ts"].to_numpy(np.int64)[rows], ev["dur"].to_numpy(np.int64)[rows],
            ev["pid"].to_numpy(np.int64)[rows])
    del rows   # not held through the pass (8 B a row)
    pid, code, ts, dur, med = _slow_firsts(*args)
    del args
    out = []
    for p, c, t, d, m_ in zip(pid.tolist(), code.tolist(), ts.tolist(), dur.tolist(),
                              med.tolist()):
        # exact ints: ns since the epoch pass 2**53, where float64 rounds to 256 ns
        s, e = t, t + d
        if wait is not None and _waits(ev, wait, p, s, e) >= WAIT_FILLS * (e - s):
            continue   # its time is a wait or the allocator's, judged by their own rules
        out.append(_item(what, cats[c], s, e - s, float(m_)))
    return _innermost(out)


def _slow_firsts(name, ts, dur, pid) -> tuple:
    """(pid, name, ts, dur, median of the later durs) of each (pid, name)'s first row (by
    ts) with >= FIRST_MIN_LATER later rows, >= OUTLIER_MIN_NS and >= FIRST_RATIO x their
    median; in the order of those first rows. Hashed groups, and only the few candidates'
    later rows sorted (a groupby of every row took ~25 ms at 250 MB);
    tests/test_speed_paths.py compares it with the pandas code it replaced."""
    if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():   # the event table's rows come sorted
        o = np.argsort(ts, kind="stable")
        name, ts, dur, pid = name[o], ts[o], dur[o], pid[o]
        del o
    n = len(name)
    if not n:
        e = np.zeros(0, np.int64)
        return e, e, e, e, np.zeros(0, np.float64)
    # each row's (pid, name) group, the temporaries freed as they are used (~100 B a row
    # at once made this the facts' peak at 1 GB)
    pc = factorize_few(pid)[0].astype(np.int64, copy=False)
    nm = name.astype(np.int64)
    nm -= int(name.min())
    width = int(nm.max()) + 1
    pairs = (int(pc.max()) + 1) * width   # at most this many distinct (pid, name)
    if pairs < 2**62:
        pc *= width
        pc += nm
        pair = pc
    else:
        pair = pd.MultiIndex.from_arrays([pc, nm])
    del pc, nm
    # by first appearance: ts order
    code = factorize_few(pair, min(pairs, 1 << 20))[0].astype(np.int64, copy=False)
    del pair
    is_first = first_seen(code)
    first = np.flatnonzero(is_first)                # group k's first row is first[k]
    size = np.bincount(code, minlength=len(first)) - 1
    cand = (size >= max(1, FIRST_MIN_LATER)) & (dur[first] >= OUTLIER_MIN_NS)
    later = np.flatnonzero(~is_first & cand[code])
    del is_first
    # each candidate's later durations sorted: its median from the middle one or two (each
    # whole-row temporary let go as soon as it is read: this was the facts' peak at 1 GB)
    lc = code[later]
    del code
    ld = dur[later]
    del later
    ld = ld[stable_by(lc, ld.astype(np.int64, copy=False))]
    del lc
    k = size[cand]
    b = np.r_[0, np.cumsum(k)][:-1]
    med = (ld[b + (k - 1) // 2].astype(np.float64) + ld[b + k // 2].astype(np.float64)) / 2.0
    f = first[cand]
    keep = dur[f] >= FIRST_RATIO * np.maximum(med, 1)
    f, med = f[keep], med[keep]
    return pid[f], name[f], ts[f], dur[f], med


def _innermost(items: list) -> list:
    """Items that enclose no other item: aten::conv2d's slow first call holds
    aten::convolution's and cudnn's; the innermost names the work."""
    span = [(x["start_ns"], x["start_ns"] + x["ns"]) for x in items]
    return [x for i, x in enumerate(items)
            if not any(j != i and span[i][0] <= a and b <= span[i][1] and (a, b) != span[i]
                       for j, (a, b) in enumerate(span))]


def _waits(ev: pd.DataFrame, wait: np.ndarray, pid: int, s: int, e: int) -> int:
    """Time of the ``wait`` rows (blocking and allocator calls) of process ``pid`` inside
    [s, e): a first call slow for those is judged by their own rules."""
    ts = ev["ts"].to_numpy(np.int64)
    rows = np.flatnonzero(wait & (ev["pid"].to_numpy() == pid) & (ts < e)
                          & (ts + ev["dur"].to_numpy() > s))
    if not len(rows):
        return 0
    a = np.maximum(ts[rows], s)
    b = np.minimum(ts[rows] + ev["dur"].to_numpy(np.int64)[rows], e)
    u = intervals.union(a, b)
    return int((u[1] - u[0]).sum())


def _codes(ev: pd.DataFrame) -> tuple[np.ndarray, pd.Index]:
    """Name codes (-1: no name) and the categories they index."""
    names = ev["name"]
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    return cat.cat.codes.to_numpy(), cat.cat.categories


def _lut(cats: pd.Index, rx) -> np.ndarray:
    """``rx`` searched once per category; one slot more (False) for code -1."""
    return table_of(cats).hits(rx)


def _mask(ev: pd.DataFrame, rx, kinds=None) -> np.ndarray:
    codes, cats = _codes(ev)
    m = _lut(cats, rx)[codes]
    return m & kind_in(ev, kinds) if kinds else m


def _rows(ev: pd.DataFrame, m: np.ndarray, what: str) -> list:
    rows = np.flatnonzero(m)
    codes, cats = _codes(ev)
    ts = ev["ts"].to_numpy(np.int64)[rows]
    dur = ev["dur"].to_numpy(np.int64)[rows]
    return [_item(what, cats[c], int(t), int(d), None)
            for c, t, d in zip(codes[rows].tolist(), ts.tolist(), dur.tolist())]


def _item(what: str, name: str, ts: int, ns: int, median) -> dict:
    return {"what": what, "name": str(name), "ns": int(ns), "start_ns": int(ts),
            "median_ns": None if median is None else int(median)}


def _idle(gaps: pd.DataFrame):
    if gaps is None or not len(gaps):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return intervals.union(gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64))


def _covered(items: list, idle) -> int:
    """Idle time covered by the host intervals of ``items`` (kernel runs excluded)."""
    host = [x for x in items if x["what"] != "first kernel run"]
    if not host or not len(idle[0]):
        return 0
    s = np.array([x["start_ns"] for x in host], np.int64)
    u = intervals.union(s, s + np.array([x["ns"] for x in host], np.int64))
    return int(intervals.overlap(idle, u[0], u[1]).sum())


def _top(items: list, idle) -> list:
    """The pieces of evidence that explain the most, one per (what, name), with their call
    counts: host calls by the idle time they cover, first kernel runs by their excess."""
    by: dict = {}
    for x in items:
        if x["what"] == "first kernel run":
            x = dict(x, idle_ns=None)
            key = x["ns"] - (x["median_ns"] or 0)
        else:
            s = np.array([x["start_ns"]], np.int64)
            x = dict(x, idle_ns=int(intervals.overlap(idle, s, s + x["ns"]).sum())
                     if len(idle[0]) else 0)
            key = x["idle_ns"]
        if not key:
            continue
        x["_key"] = key
        k = (x["what"], x["name"])
        if k not in by:
            by[k] = dict(x, calls=1)
        else:
            calls, key = by[k]["calls"] + 1, by[k]["_key"] + x["_key"]
            idle_ns = (by[k]["idle_ns"] or 0) + (x["idle_ns"] or 0)
            by[k] = dict(by[k] if by[k]["ns"] >= x["ns"] else x, calls=calls, _key=key,
                         idle_ns=idle_ns if x["idle_ns"] is not None else None)
    top = sorted(by.values(), key=lambda x: -x["_key"])[:TOP_EVIDENCE]
    return [{k: v for k, v in x.items() if k != "_key"} for x in top]
