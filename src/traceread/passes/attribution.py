"""Why was the GPU idle? Label every idle gap on two axes.

``drain`` -- why the GPU queue ran empty:
  * ``sync``: a blocking host synchronisation was waiting when the GPU drained
    and returned right after (see ``is_sync_drained``); the name of the call is
    kept (``aten::item`` is preferred over the runtime call inside it);
  * ``starved``: the host simply had not launched the next operation yet.

``cpu`` -- what the launching host threads were doing during the gap. Each
nanosecond of a gap goes to exactly one category, the first in ``CPU_CATEGORIES``
(priority order) that has an event on a launch thread covering it; what no event
covers is ``untraced``. Categories are interval unions carved out of the gaps
one after another, so the per-category times of a device sum exactly to its
idle time.

Launch threads of a (pid, device): the host threads whose runtime/driver calls
launched that device's GPU operations (correlation linkage); without linkage,
the threads of the process that made any runtime/driver call, then any thread
of the trace that did; without runtime calls at all, every host thread of the
process (then of the trace).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import intervals
from .compile import _is_compile_name
from .steps import DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN

# Priority order: a container (compile, data loading, collective wait) explains
# everything that happens inside it; launch beats the operator that issues it.
CPU_CATEGORIES = ("compile", "dataloader", "comm_wait", "sync", "alloc", "launch", "cpu_op",
                  "python", "untraced")
DRAINS = ("sync", "starved")

# A sync call "ended at the gap's start" when it was already running when the GPU
# went idle (start <= gap start + SKEW) and returned within [gap start - SKEW,
# gap start + SYNC_TOLERANCE_NS] and before the gap ended (+ SKEW). The host needs
# a few us to notice the drained queue; Kineto's CPU/GPU clock alignment adds a few more.
SYNC_TOLERANCE_NS = 50_000
SKEW_NS = 5_000

SYNC_API_RX = re.compile(
    r"^(?:(?:cuda|cu|hip)(?:Stream|Device|Ctx|Event)Synchronize"
    r"|(?:cuda|hip)Memcpy(?:2D|3D|Peer|FromSymbol|ToSymbol|DtoH|HtoD|DtoD)?"
    r"|cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D|Peer|AtoH|HtoA)?)(?:_v\d+)?(?:_ptsz|_ptds)?$")
# Device-memory allocation and release: not launches. cudaFree/hipFree block until the
# device is idle and can take ms each (allocator churn, torch.cuda.empty_cache()).
ALLOC_API_RX = re.compile(
    r"^(?:(?:cuda|hip)(?:Malloc|Free)(?:Async|Host|Managed|Pitch|Array|3D|3DArray)?"
    r"|(?:cuda|hip)(?:HostAlloc|HostFree|FreeHost|MallocHost)"
    r"|cuMem(?:Alloc|Free)(?:Async|Host|Managed|Pitch)?(?:_v\d+)?"
    r"|cuMem(?:Create|Release|Map|Unmap|AddressReserve|AddressFree)"
    r"|hipExtMallocWithFlags)(?:_v\d+)?$")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")
# Preference when several sync calls drained the same gap: the framework op the user wrote.
SYNC_NAME_RANK = {"aten::item": 0, "aten::_local_scalar_dense": 1}


_NVTX_SUFFIX = r", (?:seq|op_id|sizes|input_op_ids|stream) = .*$"
_NVTX_SUFFIX_RX = re.compile(_NVTX_SUFFIX)


def _memo(memo: dict, fn, key: str) -> int:
    v = memo.get(key)
    if v is None:
        v = memo[key] = fn(key)
    return v


def _op_base(name: str) -> str:
    """``aten::item, seq = 12, op_id = 3`` (nsys emit_nvtx) -> ``aten::item``."""
    return name.split(",", 1)[0].strip()

COMPILE_RX = re.compile(
    r"\(dynamo_timed\)|entire_frame_compile|compile_inner|_compile\.compile|compile_fx"
    r"|fx_codegen_and_compile|inductor_compile|call_user_compiler|backend_compile"
    r"|create_aot_dispatcher_function|aot_compile|async_compile|PT2 Compile|CompilationMetrics"
    r"|autotune_select_algorithm|benchmark_all_configs"
    r"|torch/_dynamo/(?:convert_frame|symbolic_convert|output_graph)\.py"
    r"|torch/_inductor/(?:compile_fx|graph|scheduler|codecache|select_algorithm)\.py")
DATALOADER_RX = re.compile(
    r"(?i)enumerate\(DataLoader\)|DataLoader|data_loader|data loading|_next_data"
    r"|torch/utils/data/")
COMM_RX = re.compile(
    r"^(?:c10d::|c10d_|nccl:|record_param_comms|ProcessGroup|gloo:|mpi:|aten::wait"
    r"|torch\.distributed)|ProcessGroupNCCL::wait|Work(?:NCCL)?::wait|torch/distributed/")
HOST_KINDS = ("cpu_op", "python", "annotation", "runtime", "driver", "osrt")


def _by_name(ev: pd.DataFrame, fn, rows: np.ndarray | None = None) -> np.ndarray:
    """Apply ``fn(name) -> int`` once per distinct name used by ``ev[rows]``; -1 elsewhere."""
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy()
    out = np.full(len(ev), -1, np.int64)
    if not len(ev):
        return out
    sel = codes >= 0
    if rows is not None:
        sel &= rows
    used = np.unique(codes[sel])
    # nsys traces carry tens of thousands of distinct NVTX texts: never touch unused ones
    texts = names.cat.categories.take(used).astype(str).tolist()
    # emit_nvtx makes every call a distinct name ("aten::add, seq = 12, op_id = 7"):
    # classify each base name once
    memo: dict[str, int] = {}
    vals = np.fromiter((_memo(memo, fn, _NVTX_SUFFIX_RX.sub("", t)) for t in texts), np.int64,
                       len(texts))
    lut = np.full(len(names.cat.categories), -1, np.int64)
    lut[used] = vals
    out[sel] = lut[codes[sel]]
    return out


def _strings(col: pd.Series) -> np.ndarray:
    """A string column as an object array, via its categories (no per-row conversion)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories.astype(str).tolist() + [""], dtype=object)
        codes = col.cat.codes.to_numpy()
        return cats[np.where(codes < 0, len(cats) - 1, codes)]
    return col.astype(str).to_numpy(object)


def classify_host(ev: pd.DataFrame, step_pattern: str | None = None) -> np.ndarray:
    """CPU category index (into CPU_CATEGORIES) of every row; -1 for rows that never count.

    Never counted: GPU-side rows, instants, generic spans, and the step ranges
    themselves (they cover everything and say nothing).
    """
    cat = {c: i for i, c in enumerate(CPU_CATEGORIES)}
    step_rx = [re.compile(p) for p in ([step_pattern] if step_pattern
                                       else [DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN])]

    def by_name(n: str) -> int:
        if any(r.search(n) for r in step_rx):
            return -2
        if COMPILE_RX.search(n) or _is_compile_name(n):
            return cat["compile"]
        if DATALOADER_RX.search(n):
            return cat["dataloader"]
        if COMM_RX.search(n):
            return cat["comm_wait"]
        if _op_base(n) in SYNC_OPS:
            return cat["sync"]
        return -1

    def api(n: str) -> int:
        if SYNC_API_RX.match(n):
            return cat["sync"]
        return cat["alloc"] if ALLOC_API_RX.match(n) else cat["launch"]

    kind = _strings(ev["kind"])
    is_api = (kind == "runtime") | (kind == "driver")
    named = _by_name(ev, by_name, ~is_api)
    api_cat = _by_name(ev, api, is_api)
    out = np.full(len(ev), -1, np.int64)
    out[is_api] = api_cat[is_api]
    for k, default in (("cpu_op", cat["cpu_op"]), ("annotation", cat["cpu_op"]),
                       ("osrt", cat["cpu_op"]), ("python", cat["python"])):
        m = kind == k
        out[m] = np.where(named[m] >= 0, named[m], np.where(named[m] == -2, -1, default))
    if "domain" in ev and len(ev):
        nccl = (kind == "annotation") & (_strings(ev["domain"]) == "NCCL")
        out[nccl] = cat["comm_wait"]
    return out


def sync_calls(ev: pd.DataFrame) -> np.ndarray:
    """Rows that are blocking host syncs (runtime/driver sync APIs, aten::item)."""
    kind = _strings(ev["kind"])
    is_api = (kind == "runtime") | (kind == "driver")
    # aten::item as an operator (Kineto) or as an NVTX range (nsys, emit_nvtx)
    is_op = (kind == "cpu_op") | (kind == "annotation")
    api = _by_name(ev, lambda n: 1 if SYNC_API_RX.match(n) else 0, is_api) == 1
    op = _by_name(ev, lambda n: 1 if _op_base(n) in SYNC_OPS else 0, is_op) == 1
    return (is_api & api) | (is_op & op)


def launch_threads(ev: pd.DataFrame, ops: pd.DataFrame, pid: int, device: int) -> set:
    """(pid, tid) pairs of the host threads that feed (pid, device); see module doc."""
    mine = ops[(ops["pid"].to_numpy() == pid) & (ops["device"].to_numpy() == device)]
    linked = mine[mine["launch_tid"].to_numpy() >= 0]
    if len(linked):
        return set(zip(linked["launch_pid"].tolist(), linked["launch_tid"].tolist()))
    host = ev[ev["kind"].isin(("runtime", "driver"))]
    for sel in (host[host["pid"] == pid], host):
        if len(sel):
            return set(zip(sel["pid"].tolist(), sel["tid"].tolist()))
    host = ev[ev["kind"].isin(("cpu_op", "python", "annotation"))]
    for sel in (host[host["pid"] == pid], host):
        if len(sel):
            return set(zip(sel["pid"].tolist(), sel["tid"].tolist()))
    return set()


def _thread_mask(ev: pd.DataFrame, threads: set) -> np.ndarray:
    if not threads:
        return np.zeros(len(ev), bool)
    key = ev["pid"].to_numpy(np.int64) * (1 << 32) + (ev["tid"].to_numpy(np.int64) & 0xFFFFFFFF)
    want = np.array([p * (1 << 32) + (t & 0xFFFFFFFF) for p, t in threads], np.int64)
    return np.isin(key, want)


def attribute(ev: pd.DataFrame, gaps: pd.DataFrame, ops: pd.DataFrame,
              step_pattern: str | None = None, top: int = 15) -> dict:
    """Label and split every gap.

    ``gaps``: start, end, duration, pid, device (+ anything else, kept).
    ``ops``: ``steps.gpu_ops(ev)`` (launch linkage decides the launch threads).
    Returns {"gaps": gaps + drain, drain_op, cpu (largest category) and one
    ``cpu_<category>`` ns column per category; "top_ops": DataFrame name,
    category, ns (inclusive time inside gaps), count}.
    """
    gaps = gaps.reset_index(drop=True).copy()
    n = len(gaps)
    split = np.zeros((n, len(CPU_CATEGORIES)), np.int64)
    drain = np.full(n, "starved", object)
    drain_op = np.full(n, "", object)
    host_mask = ev["kind"].isin(HOST_KINDS).to_numpy()
    cols = [c for c in ("ts", "dur", "kind", "name", "pid", "tid", "domain") if c in ev]
    host = ev.loc[host_mask, cols]
    host_names = _strings(host["name"])
    cats = classify_host(host, step_pattern)
    is_sync = sync_calls(host)
    hs = host["ts"].to_numpy(np.int64)
    he = hs + host["dur"].to_numpy(np.int64)
    top_parts = []
    for (pid, dev), idx in gaps.groupby(["pid", "device"], sort=True).indices.items():
        gs = gaps["start"].to_numpy(np.int64)[idx]
        ge = gaps["end"].to_numpy(np.int64)[idx]
        on = _thread_mask(host, launch_threads(ev, ops, int(pid), int(dev)))
        split[idx] = _carve(gs, ge, cats[on], hs[on], he[on])
        sync_names = np.array([_op_base(n) for n in host_names[on & is_sync]],
                              object)
        d, dop = _drain(gs, ge, sync_names,
                        hs[on & is_sync], he[on & is_sync])
        drain[idx], drain_op[idx] = d, dop
        top_parts.append(_top_ops(host[on], cats[on], hs[on], he[on], gs, ge))
    for j, c in enumerate(CPU_CATEGORIES):
        gaps[f"cpu_{c}"] = split[:, j]
    gaps["cpu"] = np.array(CPU_CATEGORIES, object)[split.argmax(axis=1)] if n else \
        np.empty(0, object)
    gaps["drain"] = drain
    gaps["drain_op"] = drain_op
    return {"gaps": gaps, "top_ops": _merge_top(top_parts, top)}


def _carve(gs, ge, cats, hs, he) -> np.ndarray:
    """ns of each gap per category, by priority; the remainder is untraced."""
    out = np.zeros((len(gs), len(CPU_CATEGORIES)), np.int64)
    remaining = intervals.union(gs, ge)
    for j, _ in enumerate(CPU_CATEGORIES[:-1]):
        m = cats == j
        if not m.any() or not len(remaining[0]):
            continue
        cover = intervals.union(hs[m], he[m])
        piece = intervals.intersect(remaining, cover)
        out[:, j] = intervals.overlap(piece, gs, ge)
        remaining = intervals.subtract(remaining, piece)
    out[:, -1] = intervals.overlap(remaining, gs, ge)
    return out


def _drain(gs, ge, names, ss, se) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: "sync" + the call's name when a sync call drained it, else "starved"."""
    drain = np.full(len(gs), "starved", object)
    which = np.full(len(gs), "", object)
    if not len(ss) or not len(gs):
        return drain, which
    order = np.argsort(se, kind="stable")
    ss, se, names = ss[order], se[order], names[order]
    lo = np.searchsorted(se, gs - SKEW_NS, side="left")
    hi = np.searchsorted(se, np.minimum(gs + SYNC_TOLERANCE_NS, ge + SKEW_NS), side="right")
    cnt = np.maximum(hi - lo, 0)
    if not cnt.any():
        return drain, which
    gap_i = np.repeat(np.arange(len(gs)), cnt)
    first = np.repeat(lo, cnt)
    within = np.arange(len(gap_i)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    cand = first + within
    ok = ss[cand] <= gs[gap_i] + SKEW_NS
    gap_i, cand = gap_i[ok], cand[ok]
    if not len(gap_i):
        return drain, which
    rank = np.array([SYNC_NAME_RANK.get(n, 9) for n in names[cand]], np.int64)
    dist = np.abs(se[cand] - gs[gap_i])
    pick = np.lexsort((dist, rank, gap_i))
    gap_i, cand = gap_i[pick], cand[pick]
    firsts = np.r_[True, gap_i[1:] != gap_i[:-1]]
    drain[gap_i[firsts]] = "sync"
    which[gap_i[firsts]] = names[cand[firsts]]
    return drain, which


def _top_ops(host, cats, hs, he, gs, ge) -> pd.DataFrame:
    """Inclusive time each host op/call spends inside the gaps (python frames excluded)."""
    kinds = _strings(host["kind"])
    m = (cats >= 0) & (kinds != "python")
    if not m.any():
        return pd.DataFrame({"name": [], "category": [], "ns": [], "count": []})
    ov = intervals.overlap(intervals.union(gs, ge), hs[m], he[m])
    hit = ov > 0
    names = host["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy().astype(np.int64)[m][hit]
    ncat = len(CPU_CATEGORIES)
    key = codes * ncat + cats[m][hit]
    uniq, inv = np.unique(key, return_inverse=True)
    ns = np.zeros(len(uniq), np.int64)
    np.add.at(ns, inv, ov[hit])
    text = names.cat.categories.astype(str).to_numpy(object)
    name_codes = uniq // ncat
    return pd.DataFrame({
        "name": np.where(name_codes >= 0, text[np.maximum(name_codes, 0)] if len(text) else "", ""),
        "category": np.array(CPU_CATEGORIES, object)[uniq % ncat],
        "ns": ns, "count": np.bincount(inv, minlength=len(uniq)).astype(np.int64)})


def _merge_top(parts, top: int) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({"name": pd.Series([], dtype=object),
                             "category": pd.Series([], dtype=object),
                             "ns": pd.Series([], dtype=np.int64),
                             "count": pd.Series([], dtype=np.int64)})
    df = pd.concat(parts, ignore_index=True)
    # emit_nvtx ranges carry per-call suffixes ("aten::add, seq = 12, op_id = 7"): pool them
    df["name"] = df["name"].astype(str).str.replace(_NVTX_SUFFIX, "", regex=True)
    df = df.groupby(["name", "category"], as_index=False, sort=False).agg(
        ns=("ns", "sum"), count=("count", "sum"))
    df["ns"] = df["ns"].astype(np.int64)
    df["count"] = df["count"].astype(np.int64)
    return df.sort_values(["ns", "name"], ascending=[False, True], kind="stable").head(
        top).reset_index(drop=True)


def summarize(gaps: pd.DataFrame) -> dict:
    """Totals over a labelled gap table: by_cpu, by_drain, drain x cpu, sync ops."""
    by_cpu = {c: int(gaps[f"cpu_{c}"].sum()) for c in CPU_CATEGORIES}
    dur = gaps["duration"].to_numpy(np.int64)
    sync = gaps["drain"].to_numpy() == "sync"
    by_drain = {"sync": int(dur[sync].sum()), "starved": int(dur[~sync].sum())}
    cross = {d: {c: int(gaps.loc[(sync if d == "sync" else ~sync), f"cpu_{c}"].sum())
                 for c in CPU_CATEGORIES} for d in DRAINS}
    ops = gaps.loc[sync].groupby("drain_op")["duration"].agg(["sum", "size"])
    by_sync_op = {str(k): {"ns": int(r["sum"]), "gaps": int(r["size"])} for k, r in ops.iterrows()}
    return {"by_cpu": by_cpu, "by_drain": by_drain, "drain_x_cpu": cross, "by_sync_op": by_sync_op}
