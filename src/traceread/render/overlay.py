"""``traceread overlay``: the original trace plus the tracks traceread adds.

Perfetto (ui.perfetto.dev), Chromium DevTools and older chrome://tracing load Chrome
trace JSON. The overlay is the input trace with extra processes (``traceread · …``) holding:

* every GPU idle gap, one slice per gap, named by its cause (what the host was
  doing, or the sync call that drained the queue), one track per device;
* the steps (and the analysis window when the analysis has one);
* exposed communication: NCCL/RCCL kernel time with no compute kernel beside it;
* torch.compile compile/recompile episodes;
* for several ranks of one job: the straggler waits (the part of each matched
  collective a rank spent waiting for the last rank to arrive, ``multirank.py``);
* the critical path of the replayed steps (``passes/replay``): one slice per link, named
  by what held the step there (kernel, launch, host op, sync wait, ...) and the node;
* the verdict, as a global instant at the start of the GPU window.

Kineto / Chrome JSON input is copied byte for byte and the added events are
spliced in at the start of its ``traceEvents`` array, so every original event is
unchanged and memory stays flat on a 1 GB trace. nsys input has no Chrome JSON:
the event table is written out as Kineto-style events (host rows on their
pid/tid, GPU ops on pid = device, tid = stream, linked by ``correlation``).

Added events use ``cat: "traceread"``; traceread reads them back as kind
``other``, which no pass counts, so analysing an overlay gives the same answer.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from contextlib import contextmanager
from typing import Iterable, Iterator

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceError
from ..passes import intervals
from ..passes.attribution import CPU_CATEGORIES
from .base import Renderer

CAT = "traceread"
CAT_HEAD = {"ph": "X", "cat": CAT}
_ENC = msgspec.json.Encoder(enc_hook=lambda x: x.item() if isinstance(x, np.generic) else str(x)).encode
PID_BASE = 0x54524400  # "TRD\0": far above real pids and device indices
_CHUNK = 4 << 20
_PREFIX_MAX = 64 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class OverlayRenderer(Renderer):
    """``render`` gives the whole overlay document (small traces); ``write`` streams."""

    output_file_extension = "json.gz"

    def render(self, result) -> str:
        added = overlay_events(result)
        if _spliceable(result):
            import io

            out = io.BytesIO()
            with _open_source(result.meta.path) as src:
                _splice(src, out, added)
            return out.getvalue().decode("utf-8")
        return "".join(_table_document(result.trace, added))

    def write(self, result, path: str) -> int:
        return write_overlay(result, path)


def write_overlay(a, path: str, waits: pd.DataFrame | None = None) -> int:
    """Write the overlay of analysis ``a`` to ``path`` (.gz: gzip). Returns events added.

    Written to a temporary file beside ``path`` and renamed over it when complete
    (``outputs.atomic_file``): a failed write keeps the previous ``path``, and the
    source trace -- by identity, so also through a hardlink or symlink -- is refused
    as ``path`` before anything is opened."""
    from ..outputs import atomic_file

    added = overlay_events(a, waits)
    if a.trace is None and not _spliceable(a):
        raise TraceError(a.meta.path, "the analysis holds no trace to overlay")
    with atomic_file(path, [a.meta.path]) as tmp:
        with _open_out(tmp, path) as out:
            if _spliceable(a):
                with _open_source(a.meta.path) as src:
                    _splice(src, out, added)
            else:
                for text in _table_document(a.trace, added):
                    out.write(text.encode("utf-8"))
    return len(added)


@contextmanager
def _open_out(tmp: str, target: str):
    """gzip level 3 for .gz (1 GB trace: 13 s, 65 MB; level 9: 97 s, 44 MB; python -m benchmarks render).

    The gzip header names ``target``, not the temporary file being written."""
    with open(tmp, "wb") as raw:
        if not str(target).endswith(".gz"):
            yield raw
            return
        name = os.path.basename(str(target))[:-3]
        try:  # isal's gzip is several times faster; the "fast" extra installs it
            from isal import igzip

            z = igzip.IGzipFile(filename=name, mode="wb", fileobj=raw, compresslevel=2)
        except ImportError:
            z = gzip.GzipFile(filename=name, mode="wb", fileobj=raw, compresslevel=3)
        with z:
            yield z


# --- the added events ------------------------------------------------------------


def overlay_events(a, waits: pd.DataFrame | None = None) -> list[str]:
    """The added events as JSON texts (timestamps in the source file's microseconds).

    ``waits``: this rank's straggler waits (``straggler_waits``), for ranks of a job."""
    clock = _Clock(a)
    tracks = _Tracks(a)
    out: list[str] = []
    out += _gap_events(a, clock, tracks)
    out += _step_events(a, clock, tracks)
    out += _comm_events(a, clock, tracks)
    out += _wait_events(waits, clock, tracks)
    out += _compile_events(a, clock, tracks)
    out += _critical_events(a, clock, tracks)
    out += _verdict_event(a, clock, tracks)
    return tracks.metadata() + out


def straggler_waits(jobs) -> dict[str, pd.DataFrame]:
    """Per trace path: the matched collectives in which that rank waited for a later rank.

    ``jobs``: ``multirank.JobResult``s. Rows: ts, wait_ns, collective, instance, last_rank
    (the rank that arrived last, i.e. the one waited for)."""
    out = {}
    for job in jobs:
        m = job.matches
        if m is None or not len(m):
            continue
        last = m[m["last"].astype(bool)].groupby("instance")["rank"].first()
        for rank, path in job.paths.items():
            w = m[(m["rank"] == rank) & (m["wait_ns"] > 0)].copy()
            w["last_rank"] = w["instance"].map(last).fillna(-1).astype(int)
            out[path] = w[["ts", "wait_ns", "collective", "instance", "last_rank"]]
    return out


def _wait_events(waits: pd.DataFrame | None, clock: _Clock, tracks: _Tracks) -> list[str]:
    if waits is None or not len(waits):
        return []
    rows = list(waits.itertuples(index=False))
    lanes = lanes_of([int(r[0]) for r in rows], [int(r[0]) + int(r[1]) for r in rows])
    out = []
    for (ts, wait, coll, inst, last), lane in zip(rows, lanes):
        pid, tid = tracks.tid("traceread · straggler waits", _lane_name("waiting for another rank", lane))
        name = f"wait for rank {last}" if last >= 0 else "wait for other ranks"
        out.append(_slice(clock, pid, tid, name, int(ts), int(ts) + int(wait),
                          {"collective": str(coll), "wait_ns": int(wait), "instance": int(inst)}))
    return out


def lanes_of(starts: list[int], ends: list[int]) -> list[int]:
    """A lane per interval: 0, or k > 0 when it partly overlaps one already placed on the
    lower lanes. Perfetto (and chrome://tracing) drop a slice that starts inside another
    on its track and ends after it; nested or disjoint ones share a lane."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -(ends[i] - starts[i])))
    stacks: list[list[int]] = []  # per lane: the ends of its open slices
    lanes = [0] * len(starts)
    for i in order:
        s, e = starts[i], max(ends[i], starts[i])
        for k, stack in enumerate(stacks + [[]]):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                break
        if k == len(stacks):
            stacks.append([])
        stacks[k].append(e)
        lanes[i] = k
    return lanes


def _lane_name(thread: str, lane: int) -> str:
    return thread if not lane else f"{thread} ({lane + 1})"


class _Clock:
    """Table ns -> the file's ``ts`` microseconds, as exact decimal text."""

    def __init__(self, a) -> None:
        if not _spliceable(a):  # the document is ours (nsys): its own base
            self.base = table_base(a.trace) if a.trace is not None else 0
            return
        base = a.meta.extra.get("baseTimeNanoseconds", 0) if isinstance(a.meta.extra, dict) else 0
        try:
            self.base = int(base)
        except (TypeError, ValueError):
            self.base = 0

    def us(self, ns: int) -> str:
        return _us(int(ns) - self.base)


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(int(ns)), 1000)
    return f"{sign}{q}.{r:03d}" if r else f"{sign}{q}"


class _Tracks:
    """Allocates the added processes/threads and writes their name metadata."""

    def __init__(self, a) -> None:
        used = set()
        if a.trace is not None and len(a.trace.events):
            used = set(np.unique(a.trace.events["pid"].to_numpy(np.int64)).tolist())
        self._next = PID_BASE
        while self._next in used:
            self._next += 16
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}
        self._meta: list[str] = []

    def tid(self, process: str, thread: str) -> tuple[int, int]:
        if process not in self._pids:
            pid = self._pids[process] = self._next + len(self._pids)
            self._meta.append(_meta(pid, 0, "process_name", {"name": process}))
            self._meta.append(_meta(pid, 0, "process_sort_index", {"sort_index": -100 + len(self._pids)}))
        pid = self._pids[process]
        key = (pid, thread)
        if key not in self._tids:
            tid = self._tids[key] = 1 + sum(1 for p, _ in self._tids if p == pid)
            self._meta.append(_meta(pid, tid, "thread_name", {"name": thread}))
            self._meta.append(_meta(pid, tid, "thread_sort_index", {"sort_index": tid}))
        return pid, self._tids[key]

    def metadata(self) -> list[str]:
        return list(self._meta)


def _meta(pid: int, tid: int, name: str, args: dict) -> str:
    return json.dumps({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args},
                      separators=(",", ":"))


def _slice(clock: _Clock, pid: int, tid: int, name: str, start: int, end: int, args: dict) -> str:
    head = _ENC(CAT_HEAD | {"name": name, "pid": pid, "tid": tid})[:-1].decode()
    return (f'{head},"ts":{clock.us(start)},"dur":{_us(max(int(end) - int(start), 0))},'
            f'"args":{_ENC(args).decode()}}}')


def _plain(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return str(x)


def _device_label(a, pid: int, dev: int) -> str:
    several = a.devices["pid"].nunique() > 1 if len(a.devices) else False
    return f"GPU {dev}" + (f" (pid {pid})" if several else "")


def gap_cause(row: dict) -> str:
    """A gap's name on the timeline: the sync call that drained it, else the host's main activity."""
    if row.get("drain") == "sync" and row.get("drain_op"):
        return f"idle: drained by {row['drain_op']}"
    if row.get("drain") == "queued":
        return "idle: next op already queued"
    return f"idle: {row.get('cpu') or 'untraced'}"


def _gap_events(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    g = a.gaps
    if g is None or not len(g):
        return []
    out = []
    cpu_cols = [f"cpu_{c}" for c in CPU_CATEGORIES]
    for (p, d), part in g.groupby(["pid", "device"], sort=True):
        pid, tid = tracks.tid("traceread · GPU idle gaps", _device_label(a, p, d))
        host = part[cpu_cols].to_numpy(np.int64)
        cols = zip(part["start"].tolist(), part["end"].tolist(), part["step"].tolist(),
                   part["drain"].tolist(), part["drain_op"].tolist(), part["cpu"].tolist(), host)
        for start, end, step, drain, op, cpu, h in cols:
            args = {"duration_ns": end - start, "step": step, "drain": drain,
                    "host_ns": {c: int(v) for c, v in zip(CPU_CATEGORIES, h) if v}}
            if op:
                args["drain_op"] = op
            name = gap_cause({"drain": drain, "drain_op": op, "cpu": cpu})
            out.append(_slice(clock, pid, tid, name, start, end, args))
    return out


def _step_events(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    out = []
    win = analysis_window(a)
    if win is not None:
        pid, tid = tracks.tid("traceread · steps", "analysis window")
        out.append(_slice(clock, pid, tid, "analysis window", win[0], win[1], win[2]))
    st = a.steps
    if a.step_source == "whole_trace" or st is None or not len(st):
        return out
    recs = st.to_dict(orient="records")
    lanes = lanes_of([int(r["start"]) for r in recs], [int(r["end"]) for r in recs])
    for r, lane in zip(recs, lanes):  # steps of two threads may overlap
        pid, tid = tracks.tid("traceread · steps", _lane_name("steps (host span)", lane))
        args = {"busy_ns": int(r.get("busy_ns", 0)), "idle_ns": int(r.get("idle_ns", 0)),
                "gaps": int(r.get("gaps", 0)), "gpu_ops": int(r.get("gpu_ops", 0))}
        out.append(_slice(clock, pid, tid, f"step #{r['step']}", r["start"], r["end"], args))
    return out


def analysis_window(a):
    """(start_ns, end_ns, args) of the steady-state analysis window when the analysis has one."""
    w = getattr(a, "window", None)
    if hasattr(w, "to_dict"):
        w = w.to_dict()
    if not isinstance(w, dict):
        return None
    start = w.get("start_ns", w.get("start"))
    end = w.get("end_ns", w.get("end"))
    if start is None or end is None or int(end) <= int(start):
        return None
    args = {k: v for k, v in w.items() if isinstance(v, (int, float, str, bool))}
    return int(start), int(end), args


def exposed_comm(ev: pd.DataFrame) -> dict[tuple[int, int], intervals.Intervals]:
    """Per (pid, device): comm-kernel time with no compute kernel running (``passes/nccl.py``)."""
    from ..passes.nccl import comm_mask

    comm = comm_mask(ev)
    if not comm.any():
        return {}
    compute = _per_device(ev, (ev["kind"] == "kernel").to_numpy() & ~comm)
    out = {}
    for key, iv in _per_device(ev, comm).items():
        exp = intervals.subtract(iv, compute[key]) if key in compute else iv
        if len(exp[0]):
            out[key] = exp
    return out


def _per_device(ev: pd.DataFrame, mask: np.ndarray) -> dict:
    return intervals.union_by_device(ev.loc[mask, ["ts", "dur", "pid", "device"]])


def _comm_events(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    if a.trace is None:
        return []
    out = []
    ev = a.trace.events
    w = getattr(a, "window", None)
    if w is not None and w.mode != "whole_trace":   # the same events the analysis measured
        from ..passes.window import slice_events
        ev = slice_events(ev, w.start, w.end)
    for (p, d), (s, e) in exposed_comm(ev).items():
        pid, tid = tracks.tid("traceread · exposed communication", _device_label(a, p, d))
        for x, y in zip(s.tolist(), e.tolist()):
            out.append(_slice(clock, pid, tid, "exposed comm", x, y, {"duration_ns": y - x}))
    return out


def _compile_events(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    if a.trace is None:
        return []
    from ..passes.compile import compile_events

    recs = compile_events(a.trace.events).to_dict(orient="records")
    lanes = {}
    for key in {(r["pid"], r["tid"]) for r in recs}:
        mine = [i for i, r in enumerate(recs) if (r["pid"], r["tid"]) == key]
        for i, lane in zip(mine, lanes_of([int(recs[i]["ts"]) for i in mine],
                                          [int(recs[i]["end"]) for i in mine])):
            lanes[i] = lane
    out = []
    for i, r in enumerate(recs):
        thread = _lane_name(f"compile (pid {r['pid']} tid {r['tid']})", lanes[i])
        pid, tid = tracks.tid("traceread · torch.compile", thread)
        kind = "recompile" if r.get("recompile") else "compile"
        name = f"{kind} {r['compile_id']}" if r.get("compile_id") else kind
        args = {"compile_ns": int(r["compile_ns"]), "step": int(r["step"]), "span": str(r["name"])}
        out.append(_slice(clock, pid, tid, name, r["ts"], r["end"], args))
    return out


def _critical_events(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    """The replay's critical path, as the analysis gives it (``replay.critical_path``)."""
    r = getattr(a, "replay", None) or {}
    segs = (r.get("critical_path") or {}).get("segments") or []
    if not segs:
        return []
    pid, tid = tracks.tid("traceread · critical path", "what held each step")
    segs = sorted(segs, key=lambda x: (int(x["start_ns"]), int(x["end_ns"])))
    out = []
    for i, x in enumerate(segs):
        s, e = int(x["start_ns"]), int(x["end_ns"])
        nxt = int(segs[i + 1]["start_ns"]) if i + 1 < len(segs) else None
        if nxt is not None and e >= nxt and nxt - s > 1:
            e = nxt - 1   # 1 ns apart: a viewer's float microseconds never overlap them
        out.append(_slice(clock, pid, tid, f"{x['label']}: {x['name']}", s, e,
                          {"label": x["label"], "lane": x["lane"], "step": x["step"]}))
    from .text import critical_stop, critical_stop_note

    cp = r.get("critical_path") or {}
    stop = critical_stop(cp)
    if stop is not None:   # the track ends early: an instant there says so
        head = json.dumps({"ph": "i", "s": "t", "cat": CAT, "name": critical_stop_note(cp),
                           "pid": pid, "tid": tid}, separators=(",", ":"))[:-1]
        out.append(f'{head},"ts":{clock.us(stop)}}}')
    return out


def _verdict_event(a, clock: _Clock, tracks: _Tracks) -> list[str]:
    v = a.verdict or {}
    if not len(a.devices):
        return []
    pid, tid = tracks.tid("traceread · steps", "verdict")
    t0 = int(a.devices["window_start"].min())
    text = f"verdict: {str(v.get('bound', '?')).upper()}: {v.get('summary', '')}"
    head = json.dumps({"ph": "i", "s": "g", "cat": CAT, "name": text, "pid": pid, "tid": tid},
                      separators=(",", ":"))[:-1]
    args = json.dumps({"levers": list(v.get("levers", []))}, separators=(",", ":"))
    return [f'{head},"ts":{clock.us(t0)},"args":{args}}}']


# --- splicing into a Chrome JSON source ------------------------------------------


def _spliceable(a) -> bool:
    return a.meta.format in ("kineto", "chrome")


def _open_source(path: str):
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _splice(src, out, added: list[str]) -> None:
    """Copy ``src`` to ``out`` with ``added`` inserted first in its traceEvents array."""
    buf = b""
    at = -1
    while at < 0:
        chunk = src.read(_CHUNK)
        buf += chunk
        at = _array_start(buf)
        if at < 0 and (not chunk or len(buf) > _PREFIX_MAX):
            raise TraceError(getattr(src, "name", "trace"), "no traceEvents array found to add tracks to")
    while len(buf) == at or (buf[at:].strip() == b"" and len(buf) - at < _CHUNK):
        more = src.read(_CHUNK)
        if not more:
            break
        buf += more
    rest = buf[at:]
    out.write(buf[:at])
    if added:
        out.write(",".join(added).encode("utf-8"))
        if not rest.lstrip().startswith(b"]"):
            out.write(b",")
    out.write(rest)
    while True:
        chunk = src.read(_CHUNK)
        if not chunk:
            break
        out.write(chunk)


def _array_start(buf: bytes) -> int:
    """Offset just after the '[' opening the top-level traceEvents array (or a bare array); -1."""
    head = buf.lstrip()
    if head.startswith(b"["):
        return len(buf) - len(head) + 1
    for m in _EVENTS_KEY.finditer(buf):
        if _depth_at(buf, m.start()) == 1:
            return m.end()
    return -1


def _depth_at(buf: bytes, end: int) -> int:
    """JSON nesting depth at ``end`` (-1 when inside a string)."""
    depth, in_str, esc = 0, False, False
    for c in buf[:end]:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:  # backslash
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
    return -1 if in_str else depth


# --- a Chrome JSON document from the event table (nsys input) -------------------

_KIND_CAT = {"cpu_op": "cpu_op", "python": "python_function", "annotation": "user_annotation",
             "runtime": "cuda_runtime", "driver": "cuda_driver", "kernel": "kernel",
             "memcpy": "gpu_memcpy", "memset": "gpu_memset", "gpu_annotation": "gpu_user_annotation",
             "sync": "cuda_sync", "osrt": "osrt", "instant": "cpu_instant_event", "other": "other"}
_GPU = ("kernel", "memcpy", "memset", "gpu_annotation", "graph")  # on pid = device, tid = stream


def table_base(trace) -> int:
    """``baseTimeNanoseconds`` of the document written from a table: 0, or minus the
    whole microseconds that bring its earliest event to ts >= 0 (nsys rows can start
    before the session; Perfetto's sorter drops negative timestamps)."""
    ev = trace.events
    lo = int(ev["ts"].min()) if len(ev) else 0
    return 0 if lo >= 0 else -(((-lo) + 999) // 1000 * 1000)


def _table_document(trace, added: list[str]) -> Iterator[str]:
    """A Kineto-style document (schemaVersion 1) holding every row of the table, then ``added``.

    GPU ops go on pid = device, tid = stream (with ``thread_name`` "stream N"), as
    modern Kineto writes them; host rows keep their pid/tid. Times are µs after
    ``baseTimeNanoseconds`` (``table_base``), so every ts is >= 0 and the table
    reads back unchanged."""
    m = trace.meta
    base = table_base(trace)
    head = {"schemaVersion": 1, "traceName": m.path, "displayTimeUnit": "ms",
            "deviceProperties": [{"id": int(d.get("device", i)), "name": str(d.get("name", ""))}
                                 for i, d in enumerate(m.devices) if isinstance(d, dict)]}
    if base:
        head["baseTimeNanoseconds"] = base
    if m.rank >= 0:
        head["distributedInfo"] = {"rank": m.rank, "world_size": m.world_size}
    yield json.dumps(head)[:-1] + ',"traceEvents":[\n'
    first = True
    lanes = gpu_lanes(trace.events)
    for text in _process_names(trace, lanes) + list(_table_events(trace.events, base, lanes)) + added:
        yield ("" if first else ",\n") + text
        first = False
    yield "\n]}\n"


def _process_names(trace, lanes: np.ndarray) -> list[str]:
    out = [_meta(int(p), 0, "process_name", {"name": str(n)}) for p, n in trace.meta.processes.items()
           if str(p).lstrip("-").isdigit()]
    ev = trace.events
    gpu_rows = ev["kind"].isin(_GPU).to_numpy()
    gpu = ev[gpu_rows]
    for d in sorted(set(gpu["device"].astype(int).tolist())):
        out.append(_meta(d, 0, "process_name", {"name": f"GPU {d}"}))
    tracks = pd.DataFrame({"d": gpu["device"].to_numpy(np.int64), "s": gpu["stream"].to_numpy(np.int64),
                           "lane": lanes[gpu_rows]}).drop_duplicates()
    for d, st, lane in sorted(tracks.itertuples(index=False)):
        name = f"stream {st}" + (f" (overlapping ops {lane})" if lane else "")
        out.append(_meta(int(d), int(st) + LANE_TID * int(lane), "thread_name", {"name": name}))
    return out


def _any_overlap(ts: np.ndarray, end: np.ndarray, dev: np.ndarray, st: np.ndarray) -> bool:
    """Sorted by (device, stream, ts): does any op start before an earlier one of its
    stream has ended?"""
    if len(ts) < 2:
        return False
    key = dev * (1 << 20) + st
    start_group = np.r_[True, key[1:] != key[:-1]]
    run_max = end.copy()
    for g in np.split(np.arange(len(end)), np.flatnonzero(start_group)[1:]):
        run_max[g] = np.maximum.accumulate(end[g])
    prev = np.r_[np.iinfo(np.int64).min, run_max[:-1]]
    return bool(((ts < prev) & ~start_group).any())


LANE_TID = 1_000_000  # tid of a stream's overflow lane k: stream + k * LANE_TID


def gpu_lanes(ev: pd.DataFrame) -> np.ndarray:
    """Per row, the lane of a GPU op on its (device, stream): 0, or k > 0 for an op that
    starts before an earlier op on that stream has ended (CUPTI/nsys timestamps can
    overlap by a few ns). Perfetto drops a slice that partly overlaps another on its
    track, so such ops go to lane tracks of their own; host rows get 0."""
    lanes = np.zeros(len(ev), np.int64)
    rows = np.flatnonzero(ev["kind"].isin(_GPU).to_numpy())
    if not len(rows):
        return lanes
    ts, dur = ev["ts"].to_numpy(np.int64)[rows], np.maximum(ev["dur"].to_numpy(np.int64)[rows], 0)
    dev, st = ev["device"].to_numpy(np.int64)[rows], ev["stream"].to_numpy(np.int64)[rows]
    order = np.lexsort((-dur, ts, st, dev))
    if not _any_overlap(ts[order], (ts + dur)[order], dev[order], st[order]):
        return lanes  # the usual case: one pass in numpy, no loop
    ends: dict = {}
    for i in order.tolist():
        free = ends.setdefault((dev[i], st[i]), [])
        lane = next((k for k, e in enumerate(free) if e <= ts[i]), len(free))
        if lane == len(free):
            free.append(0)
        free[lane] = ts[i] + dur[i]
        lanes[rows[i]] = lane
    return lanes


def _unique_ids(pid: np.ndarray, col: pd.Series) -> np.ndarray:
    """Ids unique across processes: nsys numbers correlations per process, Kineto per trace."""
    ids = col.to_numpy(np.int64)
    out = np.full(len(ids), -1, np.int64)
    has = ids >= 0
    if has.any():
        out[has] = pd.factorize(pd.MultiIndex.from_arrays([pid[has], ids[has]]))[0]
    return out


def _table_events(ev: pd.DataFrame, base: int = 0, lanes: np.ndarray | None = None) -> Iterable[str]:
    n = len(ev)
    if not n:
        return
    kind = ev["kind"].astype(str).to_numpy()
    ts, dur = ev["ts"].to_numpy(np.int64) - base, ev["dur"].to_numpy(np.int64)
    lanes = np.zeros(n, np.int64) if lanes is None else lanes
    pid, tid = ev["pid"].to_numpy(np.int64), ev["tid"].to_numpy(np.int64)
    device, stream = ev["device"].to_numpy(np.int64), ev["stream"].to_numpy(np.int64)
    corr, ext = _unique_ids(pid, ev["correlation"]), _unique_ids(pid, ev["external_id"])
    nbytes = ev["bytes"].to_numpy(np.int64)
    names = ev["name"].astype(object).to_numpy()
    dumps = json.dumps
    for i in range(n):
        k = kind[i]
        args = {}
        if corr[i] >= 0:
            args["correlation"] = int(corr[i])
        if ext[i] >= 0:
            args["External id"] = int(ext[i])
        if k in _GPU:
            p, t = int(device[i]), str(int(stream[i]) + LANE_TID * int(lanes[i]))  # tid = stream
            args["device"], args["stream"] = int(device[i]), int(stream[i])
            if nbytes[i] >= 0:
                args["bytes"] = int(nbytes[i])
        else:
            p, t = max(int(pid[i]), 0), str(max(int(tid[i]), 0))  # Perfetto: ids in [0, 2^32)
        name = dumps(names[i] if isinstance(names[i], str) else "")
        ph = '"ph":"i","s":"t"' if k == "instant" else f'"ph":"X","dur":{_us(max(dur[i], 0))}'
        yield (f'{{{ph},"cat":"{_KIND_CAT.get(k, "other")}","name":{name},"pid":{p},"tid":{t},'
               f'"ts":{_us(ts[i])},"args":{dumps(args)}}}')
