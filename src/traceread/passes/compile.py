"""torch.compile: when the host was compiling, what it compiled, and what it cost the GPU.

Real torch.profiler traces (torch 2.13, also older releases) contain:

* compile spans -- ``cpu_op`` ranges written by ``dynamo_timed``: a phase name
  (``dynamo``, ``entire_frame_compile``, ``backend_compile``,
  ``inductor_compile``, ``compile_file``, ``compile_attempt_0`` ...) and the
  same phase again with a `` (dynamo_timed)`` suffix, nested;
* compile-id markers -- ``user_annotation`` ranges ``<phase>_data: compile_id=F/N``
  (torch >= 2.6) inside the spans of one compile;
* compiled-region runs -- ``Torch-Compiled Region: F/N`` (frame F, its N-th
  compile; N >= 1 is a recompile; ``!A/F/N`` or ``!A`` ids are compiled autograd; older
  releases write a bare ``Torch-Compiled Region``: a call counted, its frame unknown);
* guard evaluation -- ``TorchDynamo Cache Lookup`` before every call.

A *graph break* splits a function into compiled pieces: Dynamo compiles the code before
the break as frame A, runs the breaking code eagerly, and compiles the rest as a new
frame B (its resume function), which A's transformed code calls. In the trace the break
shows as a ``Torch-Compiled Region: B/*`` starting *inside* a ``Torch-Compiled Region: A/*``
of another frame on the same thread (torch 2.13, ``tests/test_torch_compile_real.py``:
``print()`` in the middle of a function). ``graph_breaks`` counts the distinct (A, B)
pairs seen running; ``graph_break_calls`` how many times such a nested region ran (each
one ran the code between the two regions eagerly: its ops and kernel launches are
outside any compiled graph). A break whose rest is not compiled leaves no region and is
not counted; compiled-autograd regions (``!``) are not frames of user code.

A *compile* here is one episode: a connected stretch of nested compile spans
on one host thread. Its compile id comes from the first ``compile_id=``
marker inside it; without markers (older torch) from the first
``Torch-Compiled Region`` that starts on the same thread after the episode
ends (the code that was just compiled running for the first time).
Times are unions (nested spans never double count).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import namerx
from ..table import GPU_OP_KINDS
from . import intervals
from .common import (MODULE_LOAD_RX, events_of, kind_in, map_names_at, name_codes, name_lut,
                     name_table)
from .frames import take_rows

# Phase names dynamo_timed writes without the " (dynamo_timed)" suffix.
COMPILE_PHASES = frozenset((
    "dynamo", "entire_frame_compile", "backend_compile", "inductor_compile", "code_gen",
    "compile_file", "fx_codegen_and_compile", "create_aot_dispatcher_function",
    "aot_collect_metadata", "aot_trace_joint_graph", "async_compile.wait",
    "GraphLowering.compile_to_fn", "PyCodeCache.load_by_key_path", "compile_fx_inner",
    "CacheBase.get_system.triton_key", "inductor_codecache_torch_key",
    "compile_fx.<locals>.fw_compiler_base", "compile_fx.<locals>.bw_compiler",
    "OutputGraph.call_user_compiler", "_compile.compile_inner",
))
_PHASE_RE = namerx.compile(r"^compile_attempt_\d+$|\(dynamo_timed\)$")
_COMPILE_ID_RE = namerx.compile(r"compile_id=(![0-9]+(?:/[0-9]+/[0-9]+)?|[0-9]+/[0-9]+)")


def _marker_search(s: str):
    """Same match as ``re.search(r"_data: .*compile_id=(...)", s)``, in linear time.

    That regex backtracks from the end of the line for every ``_data: `` (a name
    repeating it took minutes); here: the first ``_data: `` of a line, then the
    last compile id after it on that line (what the greedy ``.*`` picks).
    """
    for line in s.split("\n") if "\n" in s else (s,):
        i = line.find("_data: ")
        if i < 0:
            continue
        last = None
        for last in _COMPILE_ID_RE.finditer(line, i + 7):
            pass
        if last is not None:
            return last
    return None
_REGION_RE = namerx.compile(r"^Torch-Compiled Region: (\S+)$")
# older torch (2.2-2.3) names the region without its compile id: a call all the same
BARE_REGION = "Torch-Compiled Region"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"
_HOST_KINDS = ("cpu_op", "annotation")

EVENT_COLUMNS = ("compile_id", "frame", "attempt", "recompile", "compiled_autograd", "ts", "end",
                 "dur", "compile_ns", "pid", "tid", "step", "name", "id_source")






# dynamo_timed also wraps run-time work that is not compilation: CUDA-graph recording
# (``CUDAGraphNode.record (dynamo_timed)``, mode="reduce-overhead"), reported apart.
_CUDAGRAPH_RE = namerx.compile(r"^CUDAGraph|cudagraph", re.I)


def is_compile_name(s: str) -> bool:
    if _CUDAGRAPH_RE.search(s):
        return False
    return s in COMPILE_PHASES or bool(_PHASE_RE.search(s)) or bool(_marker_search(s))


def compile_name_lut(table: namerx.NameTable) -> np.ndarray:
    """``is_compile_name`` of every name of ``table`` (null slot False), once per table."""
    def make():
        return ~table.hits(_CUDAGRAPH_RE) & (table.equals(COMPILE_PHASES)
                                              | table.hits(_PHASE_RE) | marker_lut(table))
    return table.derived("compile_name", make)


def marker_lut(table: namerx.NameTable) -> np.ndarray:
    """Names holding a compile-id marker (``_marker_search``), null slot False."""
    def make():
        out = table.contains("_data: ").copy()
        idx = np.flatnonzero(out)
        out[idx] = [bool(_marker_search(table.names[i])) for i in idx.tolist()]
        return out
    return table.derived("compile_marker", make)


def _is_cudagraph_record(s: str) -> bool:
    return bool(_CUDAGRAPH_RE.search(s)) and s.endswith("(dynamo_timed)")


def _marker_id(s: str):
    m = _marker_search(s)
    return m.group(1) if m else None


def _region_id(s: str):
    m = _REGION_RE.match(s)
    return m.group(1) if m else None


def parse_compile_id(cid: str | None) -> tuple[str | None, int, bool]:
    """``"0/1"`` -> (frame "0", attempt 1, False); ``"!2/0/3"`` -> ("!2/0", 3, True); ``"!2"`` -> ("!2", 0, True)."""
    if not cid:
        return None, -1, False
    ca = cid.startswith("!")
    parts = cid.split("/")
    if len(parts) == 1:
        return cid, 0, ca
    return "/".join(parts[:-1]), int(parts[-1]), ca


def _host_rows(ev: pd.DataFrame) -> np.ndarray:
    return np.flatnonzero(kind_in(ev, _HOST_KINDS))


def _host(ev: pd.DataFrame, fn, rows: np.ndarray | None = None, cand=None) -> pd.DataFrame:
    """ts, dur, pid, tid, name and ``val = fn(name)`` of the host rows (``rows``: their
    positions, if known) whose ``fn`` is neither None nor False. ``cand(table)``: the names
    (a bool lut of the shared NameTable) outside which ``fn`` is None or False for sure:
    ``fn`` runs on those only."""
    if rows is None:
        rows = _host_rows(ev)
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        val = map_names_at(names, rows, fn)
        keep = rows[~pd.isna(val) & (val != False)]  # noqa: E712 -- object array of bool/str/None
        val = val[~pd.isna(val) & (val != False)]  # noqa: E712
    else:   # decide per distinct name, then gather only the rows kept
        lut = _fn_lut(names, fn, cand)
        ok = ~pd.isna(lut) & (lut != False)  # noqa: E712 -- object array of bool/str/None
        codes = names.cat.codes.to_numpy()[rows]   # code -1 (null) reads the last slot
        hit = ok[codes]
        keep, val = rows[hit], lut[codes[hit]]
    out = take_rows(ev, keep, ("ts", "dur", "pid", "tid", "name"))
    out.index = ev.index[keep]
    out["val"] = val
    return out


def _fn_lut(names: pd.Series, fn, cand) -> np.ndarray:
    """``fn`` per category (and ``fn("")`` in the null slot), run only where ``cand`` says."""
    table = name_table(names)
    if cand is None:
        return np.array([fn(n) for n in table.names] + [fn("")], dtype=object)
    lut = np.full(len(table) + 1, None, dtype=object)
    idx = np.flatnonzero(cand(table)[:-1]).tolist()
    vals = [fn(table.names[i]) for i in idx]
    for i, v in zip(idx, vals):
        lut[i] = v
    lut[-1] = fn("")
    return lut


def _region_cand(table):
    return table.hits(_REGION_RE, "match")


def _marker_cand(table):
    return table.contains("_data: ")


_MARKER_PREFIX_RE = namerx.compile(r"^(.+?)_data: ")


def compile_spans(events, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Every compile span: known phases, ``(dynamo_timed)`` ranges, compile-id markers,
    and any phase a marker names (``entire_backward_compile_data: ...`` makes
    ``entire_backward_compile`` a phase -- new torch releases add phases).
    ``rows``: the host rows' positions, when the caller has them."""
    ev = events_of(events)
    names = ev["name"]
    # a row subset keeps every category: the host rows' categories are the column's
    if names.dtype == "category":
        table = name_table(names)
        cats = [table.names[i] for i in np.flatnonzero(marker_lut(table)[:-1]).tolist()]
    else:
        cats = pd.Index(names.iloc[_host_rows(ev)].unique())
    marked = set()
    for c in cats:
        c = str(c)
        if _marker_search(c):
            m = _MARKER_PREFIX_RE.match(c)
            if m:
                marked.add(m.group(1))
    return _host(ev, lambda s: True if (is_compile_name(s) or (s in marked and not _CUDAGRAPH_RE.search(s)))
                 else None, rows,
                 cand=lambda t: compile_name_lut(t) | t.equals(marked))


def _step_of(pid: np.ndarray, ts: np.ndarray, steps: pd.DataFrame | None) -> np.ndarray:
    """Step number containing each (pid, ts), -1 outside every step."""
    out = np.full(len(ts), -1, np.int64)
    if steps is None or not len(steps) or not len(ts):
        return out
    st = steps
    if "start" not in st.columns and "ts" in st.columns:
        st = st.assign(start=st["ts"], end=st["ts"] + st["dur"])
    has_pid = "pid" in st.columns
    groups = st.groupby("pid", sort=False) if has_pid else [(None, st)]
    for p, g in groups:
        g = g.sort_values("start", kind="stable")
        s = g["start"].to_numpy(np.int64)
        e = g["end"].to_numpy(np.int64)
        num = g["step"].to_numpy(np.int64)
        m = (pid == p) if has_pid else np.ones(len(ts), bool)
        j = np.searchsorted(s, ts[m], side="right") - 1
        jj = np.clip(j, 0, len(s) - 1)
        inside = (j >= 0) & (ts[m] < e[jj])
        out[np.flatnonzero(m)[inside]] = num[jj[inside]]
    return out


def _default_steps(ev: pd.DataFrame) -> pd.DataFrame | None:
    from .steps import find_steps

    st, _ = find_steps(ev)
    return st if len(st) else None


def compile_events(events, steps=None, *, spans=None, regions=None) -> pd.DataFrame:
    """One row per compile episode (see module docstring), in time order.

    Columns: compile_id (str or None), frame, attempt (N of F/N, -1 unknown),
    recompile (attempt >= 1), compiled_autograd, ts, end, dur (episode span),
    compile_ns (union of its spans; equals dur for one thread), pid, tid,
    step (-1 when outside every step or no steps), name (outermost span),
    id_source ("marker", "region" or "").
    ``steps``: a DataFrame with step, start, end (and pid), e.g.
    ``passes.steps.find_steps(ev)[0]``; default: found in the trace. ``spans`` /
    ``regions``: ``compile_spans(ev)`` / ``_host(ev, _region_id)``, when already computed.
    """
    ev = events_of(events)
    if spans is None:
        spans = compile_spans(ev)
    if not len(spans):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in EVENT_COLUMNS})
    if steps is None:
        steps = _default_steps(ev)
    markers = _host(ev, _marker_id, cand=_marker_cand)
    if regions is None:
        regions = _host(ev, _region_id, cand=_region_cand)
    rows = []
    for (pid, tid), g in spans.groupby(["pid", "tid"], sort=False):
        s = g["ts"].to_numpy(np.int64)
        e = s + g["dur"].to_numpy(np.int64)
        us, ue = intervals.union(s, e)
        # Outermost span name: the earliest-starting, longest span of each episode.
        order = np.lexsort((-(e - s), s))
        first_in = np.searchsorted(s[order], us, side="left")
        names = g["name"].astype(str).to_numpy()[order][first_in]
        mk = markers[(markers["pid"] == pid) & (markers["tid"] == tid)].sort_values("ts")
        rg = regions[(regions["pid"] == pid) & (regions["tid"] == tid)].sort_values("ts")
        mk_ts = mk["ts"].to_numpy(np.int64)
        rg_ts = rg["ts"].to_numpy(np.int64)
        # First marker inside [us, ue); first region starting at/after ue.
        mi = np.searchsorted(mk_ts, us, side="left")
        m_ok = (mi < len(mk_ts)) & (mk_ts[np.clip(mi, 0, max(len(mk_ts) - 1, 0))] < ue) if len(mk_ts) \
            else np.zeros(len(us), bool)
        ri = np.searchsorted(rg_ts, ue, side="left")
        r_ok = ri < len(rg_ts)
        mvals = mk["val"].to_numpy(dtype=object)
        rvals = rg["val"].to_numpy(dtype=object)
        for k in range(len(us)):
            if m_ok[k]:
                cid, src = mvals[mi[k]], "marker"
            elif r_ok[k]:
                cid, src = rvals[ri[k]], "region"
            else:
                cid, src = None, ""
            frame, attempt, ca = parse_compile_id(cid)
            rows.append((cid, frame, attempt, attempt >= 1, ca, int(us[k]), int(ue[k]),
                         int(ue[k] - us[k]), int(ue[k] - us[k]), int(pid), int(tid), -1,
                         names[k], src))
    out = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    out["step"] = _step_of(out["pid"].to_numpy(np.int64), out["ts"].to_numpy(np.int64), steps)
    return out.sort_values(["ts", "pid", "tid"], kind="stable").reset_index(drop=True)


def _idle(ev: pd.DataFrame, gaps: pd.DataFrame | None) -> tuple[intervals.Intervals, bool]:
    """Time when no GPU of the trace was busy, and whether the trace has GPU ops at all.

    With ``gaps`` (``passes.gaps.gpu_gaps``): the instants idle on every
    (pid, device) that has gaps rows -- each device's holes between its first and
    last op. Without: the complement of all GPU ops inside the whole trace span
    (a compile before the first kernel also starves the GPU).
    """
    is_gpu = kind_in(ev, GPU_OP_KINDS)
    if not is_gpu.any():
        return (np.empty(0, np.int64), np.empty(0, np.int64)), False
    if gaps is not None:
        result = None
        keys = ["pid", "device"] if {"pid", "device"} <= set(gaps.columns) else None
        groups = gaps.groupby(keys, sort=True) if keys else [(None, gaps)]
        for _, g in groups:
            iv = intervals.union(g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
            result = iv if result is None else intervals.intersect(result, iv)
        if result is None:
            result = (np.empty(0, np.int64), np.empty(0, np.int64))
        return result, True
    s = ev["ts"].to_numpy(np.int64)[is_gpu]
    busy = intervals.union(s, s + ev["dur"].to_numpy(np.int64)[is_gpu])
    lo = int(ev["ts"].min())
    hi = int((ev["ts"] + ev["dur"]).max())
    return intervals.complement(busy, lo, hi), True


def compile_summary(events, gaps=None, steps=None) -> dict:
    """Compile counts and costs.

    Keys: compiles (distinct compile ids, plus episodes without one),
    recompiles (those with attempt >= 1), compile_ns (union of all compile
    spans), cache_lookup_ns / cache_lookups (``TorchDynamo Cache Lookup``),
    idle_overlap_ns (compile time during which no GPU was busy; 0 without GPU
    ops, see ``gpu_ops``), episodes, compiled_region_calls, cudagraph_record_ns
    (``CUDAGraphNode.record`` time: not compilation, kept apart), frames (list of
    dicts: frame, compiles, recompiles, compile_ns, steps, compile_ids,
    compiled_autograd, regions_seen -- compile ids seen *running*, which
    reveals recompiles that happened before the trace started), graph_breaks /
    graph_break_calls / breaks (``graph_breaks``).
    """
    ev = events_of(events)
    rows = _host_rows(ev)
    spans = compile_spans(ev, rows)
    regions = _host(ev, _region_id, rows, cand=_region_cand)
    ce = compile_events(ev, steps=steps, spans=spans, regions=regions)
    s = spans["ts"].to_numpy(np.int64)
    comp_iv = intervals.union(s, s + spans["dur"].to_numpy(np.int64))
    look = _host(ev, lambda n: True if n == CACHE_LOOKUP else None, rows,
                 cand=lambda t: t.equals((CACHE_LOOKUP,)))
    ls = look["ts"].to_numpy(np.int64)
    look_iv = intervals.union(ls, ls + look["dur"].to_numpy(np.int64))
    idle, has_gpu = _idle(ev, gaps)
    idle_overlap = intervals.total(intervals.intersect(comp_iv, idle)) if has_gpu else 0
    bare = _host(ev, lambda n: True if n == BARE_REGION else None, rows,
                 cand=lambda t: t.equals((BARE_REGION,)))
    cg = _host(ev, lambda n: True if _is_cudagraph_record(n) else None, rows,
               cand=lambda t: t.hits(_CUDAGRAPH_RE))
    cs = cg["ts"].to_numpy(np.int64)
    cg_ns = intervals.total(intervals.union(cs, cs + cg["dur"].to_numpy(np.int64)))

    ids = ce["compile_id"]
    known = ce[ids.notna()]
    distinct = known.drop_duplicates("compile_id")
    n_unknown = int(ids.isna().sum())
    frames = []
    frame_keys = sorted(set(known["frame"].astype(str)) | set(
        parse_compile_id(v)[0] for v in regions["val"].unique()), key=_frame_sort)
    for f in frame_keys:
        fc = known[known["frame"] == f]
        fd = fc.drop_duplicates("compile_id")
        seen = sorted(set(regions["val"][[parse_compile_id(v)[0] == f for v in regions["val"]]]),
                      key=_frame_sort) if len(regions) else []
        frames.append({
            "frame": f,
            "compiles": int(len(fd)),
            "recompiles": int(fd["recompile"].sum()),
            "compile_ns": int(fc["compile_ns"].sum()),
            "steps": sorted({int(x) for x in fc["step"] if x >= 0}),
            "compile_ids": list(fd["compile_id"]),
            "compiled_autograd": f.startswith("!"),
            "regions_seen": seen,
        })
    return {
        "compiles": int(len(distinct)) + n_unknown,
        "recompiles": int(distinct["recompile"].sum()),
        "compile_ns": intervals.total(comp_iv),
        "cache_lookup_ns": intervals.total(look_iv),
        "cache_lookups": int(len(look)),
        "idle_overlap_ns": int(idle_overlap),
        "gpu_ops": bool(has_gpu),
        "episodes": int(len(ce)),
        "compiled_region_calls": int(len(regions) + len(bare)),
        "cudagraph_record_ns": int(cg_ns),
        "frames": frames,
        **graph_breaks(regions),
    }


def graph_breaks(regions: pd.DataFrame) -> dict:
    """{graph_breaks, graph_break_calls, breaks: [{frame, resumes}]} from the compiled-region
    rows (``_host(ev, _region_id)``): a region nested in another frame's region on the same
    thread is that frame's resume function (see module doc)."""
    pairs: dict[tuple[str, str], int] = {}
    if len(regions):
        r = regions[[not str(v).startswith("!") for v in regions["val"]]]
        for _, g in r.sort_values(["ts", "dur"], ascending=[True, False]).groupby(["pid", "tid"], sort=False):
            stack: list[tuple[int, str]] = []   # (end, frame) of the enclosing regions
            for ts, dur, cid in zip(g["ts"].to_numpy(np.int64), g["dur"].to_numpy(np.int64), g["val"]):
                while stack and stack[-1][0] <= ts:
                    stack.pop()
                frame = parse_compile_id(cid)[0]
                if stack and stack[-1][1] != frame:
                    key = (stack[-1][1], frame)
                    pairs[key] = pairs.get(key, 0) + 1
                stack.append((int(ts + dur), frame))
    return {"graph_breaks": len(pairs), "graph_break_calls": int(sum(pairs.values())),
            "breaks": [{"frame": a, "resumes": b, "calls": n}
                       for (a, b), n in sorted(pairs.items(), key=lambda kv: (_frame_sort(kv[0][0]),
                                                                              _frame_sort(kv[0][1])))]}


def compile_counts(events) -> dict:
    """Compiles, recompiles and graph breaks alone (no idle overlap, no steps): the
    whole-trace figures an analysis of a window reports beside its own."""
    ev = events_of(events)
    rows = _host_rows(ev)
    spans = compile_spans(ev, rows)
    regions = _host(ev, _region_id, rows, cand=_region_cand)
    ce = compile_events(ev, steps=pd.DataFrame(), spans=spans, regions=regions)
    ids = ce["compile_id"]
    distinct = ce[ids.notna()].drop_duplicates("compile_id")
    return {"compiles": int(len(distinct)) + int(ids.isna().sum()),
            "recompiles": int(distinct["recompile"].sum()),
            "graph_breaks": graph_breaks(regions)["graph_breaks"]}


def _frame_sort(key: str):
    parts = re.findall(r"\d+", key)
    return (key.startswith("!"), [int(p) for p in parts], key)


# -- compilation an untraced host shows only through the driver ---------------------------
# An nsys capture without Python frames or dynamo ranges shows a recompile as a long GPU-idle
# gap on the launching thread that ends with the freshly built code being loaded into the
# driver (cuModuleLoad / cuModuleLoadData / cuLibraryLoadData). Lazy module loading loads a
# kernel once, at its first launch, and the gap around it is little more than the load; a
# build loads code in step after step, after host work many times the load's own length.
JIT_GAP_X = 20        # the gap's host time >= 20x the load call: code was built before it
JIT_MIN_GAP_NS = 1_000_000
JIT_MIN_STEPS = 2     # in at least two analysed steps: lazy loading loads each kernel once
HOST_COLS = ("untraced", "wait", "cpu_op", "python")   # the host work a build shows as


def untraced_compile(ev: pd.DataFrame, gaps: pd.DataFrame) -> tuple[np.ndarray, list[dict]]:
    """(the indices of the GPU-idle gaps in which the program built GPU code at run time --
    each inside an analysed step, holding a driver module load, its host time at least
    ``JIT_GAP_X`` x the load call and ``JIT_MIN_GAP_NS``, such gaps in at least
    ``JIT_MIN_STEPS`` steps --, evidence: the loads). Empty where the driver API is not
    traced (a Kineto trace names its compilation: ``compile_spans``)."""
    none = np.zeros(0, np.int64)
    if not len(gaps) or "step_index" not in gaps:
        return none, []
    rows = np.flatnonzero(kind_in(ev, ("driver",)))
    if not len(rows):
        return none, []
    rows = rows[name_lut(ev["name"], MODULE_LOAD_RX).take(name_codes(ev["name"])[rows])]
    if not len(rows):
        return none, []
    ts = ev["ts"].to_numpy(np.int64)[rows]
    dur = ev["dur"].to_numpy(np.int64)[rows]
    start, end = gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64)
    order = np.argsort(start, kind="stable")
    k = np.searchsorted(start[order], ts, side="right") - 1
    at = np.where(k >= 0, order[np.maximum(k, 0)], -1)
    inside = (at >= 0) & (ts < end[np.maximum(at, 0)])
    host = sum(gaps[f"cpu_{c}"].to_numpy(np.int64) for c in HOST_COLS if f"cpu_{c}" in gaps)
    step = gaps["step_index"].to_numpy(np.int64)
    a = np.maximum(at, 0)
    built = inside & (step[a] >= 0) & (host[a] >= JIT_GAP_X * dur) & \
        (host[a] >= JIT_MIN_GAP_NS)
    if len(np.unique(step[a[built]])) < JIT_MIN_STEPS:
        return none, []
    idx = np.unique(at[built])
    names = ev["name"].take(rows).astype(str).to_numpy()
    evidence = [{"name": names[i], "ts_ns": int(ts[i]),
                 "step": int(gaps["step"].iat[at[i]]) if "step" in gaps else None,
                 "detail": f"GPU code loaded after {host[at[i]] / 1e6:.1f} ms of host work "
                           f"with the GPU idle ({host[at[i]] / max(1, dur[i]):.0f}x the load): "
                           "built at run time"}
                for i in np.flatnonzero(built)[:5].tolist()]
    return idx, evidence


def charge_compile(gaps: pd.DataFrame, idx: np.ndarray) -> pd.DataFrame:
    """``gaps`` with the host time of the gaps ``idx`` (``untraced_compile``) moved to the
    compile category (the host's and the queued part alike)."""
    if not len(idx):
        return gaps
    out = gaps.copy()
    for pre in ("cpu_", "qcpu_"):
        if f"{pre}compile" not in out:
            continue
        total = out[f"{pre}compile"].to_numpy(np.int64).copy()
        for c in HOST_COLS:
            col = f"{pre}{c}"
            if col in out:
                v = out[col].to_numpy(np.int64).copy()
                total[idx] += v[idx]
                v[idx] = 0
                out[col] = v
        out[f"{pre}compile"] = total
    if "cpu" in out:   # the gap's leading category
        cpu = out["cpu"].astype(object).to_numpy().copy()
        cpu[idx] = "compile"
        out["cpu"] = cpu
    return out


def mark_compile(graph, gaps: pd.DataFrame, idx: np.ndarray):
    """The replay graph with its host stretches inside the gaps ``idx`` (``untraced_compile``)
    labelled compile: what the no-recompile change removes (passes/replay/whatif.py)."""
    if graph is None or not len(idx):
        return graph
    n = graph.nodes
    start = gaps["start"].to_numpy(np.int64)[idx]
    end = gaps["end"].to_numpy(np.int64)[idx]
    # a stretch belongs to the gap its middle lies in: the build starts while the GPU still
    # drains the work queued before it, so its first stretch begins before the gap
    mid = n["ts_ns"].to_numpy(np.int64) + n["dur_ns"].to_numpy(np.int64) // 2
    o = np.argsort(start)
    start, end = start[o], end[o]
    k = np.searchsorted(start, mid, side="right") - 1
    within = (k >= 0) & (mid < end[np.maximum(k, 0)])
    host = (n["kind"].astype(str).to_numpy() == "host") & \
        n["cat"].astype(str).isin(HOST_COLS).to_numpy()
    m = within & host
    if not m.any():
        return graph
    m |= _timed_runs(graph, m)
    cat = n["cat"].astype(object).to_numpy().copy()
    cat[m] = "compile"
    graph.nodes = n.assign(cat=cat)
    return graph


# The autotuner times each candidate kernel once it is built: a device-wide sync, CUDA
# events recorded around its launches, a device-wide sync, the events' times read back.
DEVICE_SYNC_RX = namerx.compile(r"^(?:cuda|hip)DeviceSynchronize(?:_v\d+)?$|^cuCtxSynchronize(?:_v\d+)?$")
EVENT_RECORD_RX = namerx.compile(r"^(?:cuda|hip|cu)EventRecord")
EVENT_CALL_RX = namerx.compile(r"^(?:cuda|hip|cu)Event(?:Query|Destroy|ElapsedTime|Synchronize)")


def _timed_runs(graph, built: np.ndarray) -> np.ndarray:
    """The nodes of the build's benchmark runs: on each lane, in each step with marked build
    stretches (``built``), from the last of them to the last device-wide sync (cudaDevice-
    Synchronize) that ends a run of calls recording CUDA events -- the autotuner timing its
    candidate kernels -- and on to the calls that read the events back right after. The
    program's own step work follows; a step that builds without timing keeps all of it."""
    n = graph.nodes
    o = np.lexsort((n["seq"].to_numpy(), n["lane"].to_numpy()))
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    names = n["name"].astype(str).to_numpy(object)[o]
    kind = n["kind"].astype(str).to_numpy(object)[o]
    call = np.isin(kind, ("launch", "sync_wait"))
    codes, uniq = pd.factorize(names)   # each distinct name tested once

    def hits(rx):
        return np.array([bool(rx.search(x)) for x in uniq], bool)[codes]

    dsync, record = call & hits(DEVICE_SYNC_RX), call & hits(EVENT_RECORD_RX)
    readout = call & hits(EVENT_CALL_RX) | \
        ((kind == "host") & (n["cat"].astype(str).to_numpy(object)[o] == "untraced"))
    b = np.asarray(built, bool)[o]
    out = np.zeros(len(o), bool)
    for ln, st in set(zip(lane[b].tolist(), step[b].tolist())):
        if st < 0:
            continue
        here = np.flatnonzero((lane == ln) & (step == st))
        lo = int(here[b[here]].max()) + 1
        after = here[here >= lo]
        end, seen = -1, False
        for i in after.tolist():
            seen |= bool(record[i])
            if dsync[i]:
                if seen:
                    end = i
                seen = False
        if end < 0:
            continue
        hi = j = end + 1
        while j <= int(here.max()) and readout[j]:
            j += 1
            hi = j if kind[j - 1] != "host" else hi   # through the last event call
        out[lo:hi] = True
    res = np.zeros(len(o), bool)
    res[o] = out
    return res
