"""Where the host time inside GPU-idle gaps went, as collapsed stacks (a flame graph).

Every instant of a GPU-idle gap, each launching host thread of the gap's process is
somewhere: inside a Python frame (``with_stack=True``: ``python`` rows), an operator, a
CUDA call, an NVTX range -- nested ranges on that thread -- or in none of them. The
innermost open range and the ranges around it are that instant's stack. Summing, over
the gaps, the time each stack held gives the collapsed stacks that flamegraph.pl and
speedscope open (``frame;frame;frame NS`` per line), weighted by host time in idle gaps.

Which threads: those whose CUDA calls launched the process' GPU work (joined on the
correlation id: a pin-memory thread's cudaHostAlloc does not make it a launcher), else
those calling the CUDA runtime/driver at all, else every thread with host ranges -- a
DataLoader worker's stacks would bury the launching thread's. Time in a gap
with no range open is the frame ``[untraced]``. An address in a frame's name (``object
at 0x7fe0...``) is dropped, so one function is one frame however many objects called it.
nsys exports give their nested ranges (NVTX, CUDA API, OS runtime); nsys's sampled
backtraces are not in the event table, so they are not used.
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pandas as pd

from ..table import GPU_OP_KINDS

from .intervals import covered_before, union

HOST_RANGE_KINDS = ("python", "cpu_op", "annotation", "runtime", "driver", "osrt")
UNTRACED = "[untraced]"
# A stack keeps its outermost MAX_STACK frames; the ranges nested deeper give their time to
# one frame DEEPER below them. Real stacks (Python frames with with_stack, operators, CUDA
# calls, NVTX) stay well inside it; 16,000 nested ranges made every stack, its key and its
# folded line as long as the nesting: time and output quadratic in the depth.
MAX_STACK = 128
DEEPER = "[deeper]"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MODULE_INSTANCE = re.compile(r"^(nn\.Module: .+?)_\d+$")
_STEP_NUMBER = re.compile(r"#\d+$")        # ProfilerStep#12 -> ProfilerStep#N
# torch.autograd.profiler.emit_nvtx names each op call: "aten::add, seq = 47318, op_id = 998541"
_NVTX_OP_ARGS = re.compile(r"^([\w:.<>]+), (?:seq|op_id|sizes|input_op_ids) = .*$")


def frame_name(name: str) -> str:
    """One frame of a collapsed stack: one line, no ';' (the separator), no object address,
    no module instance number (``nn.Module: Linear_3`` is ``nn.Module: Linear``), no step
    number (``ProfilerStep#12`` is ``ProfilerStep#N``): one function, module class or step
    range is one frame, however many objects or steps ran it."""
    text = " ".join(_ADDRESS.sub("", str(name)).split())
    text = _STEP_NUMBER.sub("#N", _MODULE_INSTANCE.sub(r"\1", text))
    text = _NVTX_OP_ARGS.sub(r"\1", text)    # one op is one frame, not one per call
    return text.replace(";", ",") or "?"


def idle_stacks(events: pd.DataFrame, gaps: pd.DataFrame) -> dict[tuple[str, ...], int]:
    """{stack (outermost first): ns of host time inside ``gaps``} over the launching threads.

    ``gaps``: start, end, pid (an analysis' ``gaps``). With several threads the stack
    starts with ``thread TID``, with several processes ``pid PID``."""
    if gaps is None or not len(gaps) or events is None or not len(events):
        return {}
    host = events[events["kind"].isin(HOST_RANGE_KINDS).to_numpy() & (events["dur"] > 0).to_numpy()]
    if "correlation" not in events:   # a hand-made frame: no launch links to follow
        events = events.assign(correlation=-1)
    gpu = events[events["kind"].isin(GPU_OP_KINDS).to_numpy()
                 & (events["correlation"] >= 0).to_numpy()]
    out: dict[tuple[str, ...], int] = defaultdict(int)
    for pid, g in gaps.groupby("pid", sort=True):
        spans = union(g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
        if not len(spans[0]):
            continue
        mine = host[(host["pid"] == pid).to_numpy()]
        threads = _launch_threads(mine, gpu[(gpu["pid"] == pid).to_numpy()]["correlation"])
        proc = (f"pid {pid}",) if gaps["pid"].nunique() > 1 else ()
        for tid in threads:
            rows = mine[(mine["tid"] == tid).to_numpy()]
            root = proc + ((f"thread {tid}",) if len(threads) > 1 else ())
            for stack, ns in _thread_stacks(rows, spans).items():
                out[root + stack] += ns
    return dict(out)


def _launch_threads(host: pd.DataFrame, gpu_correlation: pd.Series) -> list[int]:
    calls = host[host["kind"].isin(["runtime", "driver"]).to_numpy()]
    launched = calls[calls["correlation"].isin(gpu_correlation).to_numpy()
                     & (calls["correlation"] >= 0).to_numpy()]
    pick = launched if len(launched) else calls if len(calls) else host
    return sorted(int(t) for t in pick["tid"].unique())


def _thread_stacks(rows: pd.DataFrame, spans: tuple[np.ndarray, np.ndarray]) -> dict:
    """One thread's ranges nested (each range's parent: the innermost open one when it
    starts); each range's self time inside the idle ``spans`` (merged, sorted) -- its
    overlap less its children's -- goes to its stack. Ranges that touch no span are
    skipped."""
    s0, s1 = spans
    ts = rows["ts"].to_numpy(np.int64)
    te = ts + rows["dur"].to_numpy(np.int64)
    # a range matters only if some span overlaps it (its ancestors then overlap too)
    first = np.searchsorted(s1, ts, side="right")      # first span ending after the start
    keep = (first < len(s0)) & (s0[np.minimum(first, len(s0) - 1)] < te)
    ts, te = ts[keep], te[keep]
    raw = rows["name"].to_numpy(object)[keep]
    frames = {n: frame_name(n) for n in set(raw)}     # each distinct name cleaned once
    names = [frames[n] for n in raw]
    order = np.lexsort((-te, ts))                     # parents (longer) before children
    n = len(ts)
    starts, ends, up = ts.tolist(), te.tolist(), [-1] * n  # a child ends by its parent's end
    stack: list[int] = []
    for i in order.tolist():                           # the only per-range Python: nesting
        start = starts[i]
        while stack and ends[stack[-1]] <= start:
            stack.pop()
        if stack:
            p = stack[-1]
            up[i] = p
            if ends[i] > ends[p]:
                ends[i] = ends[p]
        stack.append(i)
    parent, end = np.asarray(up, np.int64), np.asarray(ends, np.int64)
    # each range's time inside the spans, less its children's: its self time there
    cov = covered_before(spans, end) - covered_before(spans, ts)
    has = parent >= 0
    self_ns = cov - np.bincount(parent[has], weights=cov[has], minlength=n).astype(np.int64)
    out: dict[tuple[str, ...], int] = defaultdict(int)
    paths: list = [None] * n
    own = self_ns.tolist()
    for i in order.tolist():                           # parents first: their paths exist
        p = up[i]
        paths[i] = _child_path(paths[p], names[i]) if p >= 0 else (names[i],)
        if own[i] > 0:
            out[paths[i]] += own[i]
    untraced = int((s1 - s0).sum() - cov[~has].sum())  # span time with no range open
    if untraced > 0:
        out[(UNTRACED,)] += untraced
    return out


def _child_path(parent: tuple, frame: str) -> tuple:
    """A range's stack from its parent's: at most MAX_STACK frames and one DEEPER
    (a path that already ends in DEEPER is shared, not copied: linear in the ranges)."""
    if len(parent) < MAX_STACK:
        return parent + (frame,)
    return parent if parent[-1] == DEEPER else parent + (DEEPER,)


def bounded(frames) -> tuple:
    """A sampled call stack (outermost first) cut like a range stack: MAX_STACK frames
    and DEEPER."""
    frames = tuple(frames)
    return frames if len(frames) <= MAX_STACK else frames[:MAX_STACK] + (DEEPER,)


def sampled_idle_stacks(samples: pd.DataFrame, events: pd.DataFrame,
                        gaps: pd.DataFrame) -> dict[tuple[str, ...], int]:
    """The same picture from sampled call stacks (nsys ``--sample=cpu``: ``readers.
    nsys_stacks.cpu_samples``): each sample of a launching thread taken inside a gap
    stands for one sampling period of it (the median interval between that thread's
    samples). {stack: ns}, a ``thread TID`` root with several threads."""
    if samples is None or not len(samples) or gaps is None or not len(gaps):
        return {}
    if "correlation" not in events:
        events = events.assign(correlation=-1)
    host = events[events["kind"].isin(HOST_RANGE_KINDS).to_numpy()]
    gpu = events[events["kind"].isin(GPU_OP_KINDS).to_numpy()
                 & (events["correlation"] >= 0).to_numpy()]
    out: dict[tuple[str, ...], int] = defaultdict(int)
    every = _period(samples)      # a thread with one sample: the export's sampling period
    for pid, g in gaps.groupby("pid", sort=True):
        s0, s1 = union(g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
        mine = samples[(samples["pid"] == pid).to_numpy()]
        if not len(s0) or not len(mine):
            continue
        launchers = set(_launch_threads(host[(host["pid"] == pid).to_numpy()],
                                        gpu[(gpu["pid"] == pid).to_numpy()]["correlation"]))
        if launchers & set(mine["tid"].unique().tolist()):
            mine = mine[mine["tid"].isin(launchers).to_numpy()]
        tids = sorted(int(t) for t in mine["tid"].unique())
        proc = (f"pid {pid}",) if gaps["pid"].nunique() > 1 else ()
        for tid in tids:
            rows = mine[(mine["tid"] == tid).to_numpy()].sort_values("ts", kind="stable")
            ts = rows["ts"].to_numpy(np.int64)
            period = int(np.median(np.diff(ts))) if len(ts) > 1 else every
            k = np.searchsorted(s0, ts, side="right") - 1
            inside = (k >= 0) & (ts < s1[np.maximum(k, 0)])
            root = proc + ((f"thread {tid}",) if len(tids) > 1 else ())
            for frames in rows["frames"].to_numpy(object)[inside]:
                out[root + bounded(frame_name(f) for f in frames)] += period
    return {k: v for k, v in out.items() if v > 0}


def _period(samples: pd.DataFrame) -> int:
    """The median interval between a thread's consecutive samples, over all threads."""
    s = samples.sort_values(["pid", "tid", "ts"], kind="stable")
    d = np.diff(s["ts"].to_numpy(np.int64))
    same = (np.diff(s["pid"].to_numpy()) == 0) & (np.diff(s["tid"].to_numpy()) == 0)
    d = d[same & (d > 0)]
    return int(np.median(d)) if len(d) else 0


def collapsed(stacks: dict[tuple[str, ...], int]) -> str:
    """The collapsed-stack text (``a;b;c 123`` per line, heaviest first; ns), names as they
    are: what reaches a file or terminal is ``render.flame.folded`` (names escaped)."""
    rows = sorted(stacks.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{';'.join(k)} {v}\n" for k, v in rows if v > 0)


def total(stacks: dict) -> int:
    return int(sum(stacks.values()))
