"""Collective communication: how much communication time the GPU spent, and how much was hidden.

Definitions (see docs/nccl-and-compile.md):

* communication = GPU kernels that ``collectives.COMM_KERNELS`` names as such:
  NCCL/RCCL (``ncclKernel_*``, ``ncclDevKernel_*``, ``rccl*``), DeepEP
  dispatch/combine, NVSHMEM, symmetric-memory (``multimem_all_reduce_kernel``) and
  custom all-reduce kernels (vLLM ``cross_device_reduce_*``, TRT-LLM ``allReduce*``);
* compute = every *other* kernel, and every CUDA graph replay row (nsys
  ``--cuda-graph-trace=graph`` hides the replay's kernels; graphs are mostly
  compute). memcpy/memset operations are neither: a
  copy does not hide communication the way a GEMM does, and counting copies
  as compute would report bucket-flattening copies as "overlap";
* per (pid, device), over all streams: comm = union of comm kernels,
  compute = union of compute kernels, overlap = |comm ∩ compute|,
  exposed = |comm − compute|, overlap_pct = 100 · overlap / comm.
  NCCL kernels run on their own stream, so overlap with compute on other
  streams is the normal case, not an error.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = S / t with S the
message size in bytes as nccl-tests defines it (the full array: for
all_gather / reduce_scatter that is the per-rank count × ranks) and t the
kernel time; busbw = algbw × factor(n) with factor 2(n−1)/n for all_reduce,
(n−1)/n for all_gather, reduce_scatter and all_to_all, 1 for broadcast,
reduce, send, recv.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..collectives import collective_from_kernel, is_comm_kernel, normalize_collective
from . import intervals
from .common import device_groups, events_of, kind_in, lookup_at, lut_at, rows_of, take

INSTANCE_COLUMNS = ("ts", "dur", "pid", "device", "stream", "name", "collective", "msg_nelems",
                    "msg_bytes", "dtype", "group_size", "process_group", "seq", "exposed_ns")
OVERLAP_COLUMNS = ("pid", "device", "comm_ns", "compute_ns", "overlap_ns", "exposed_ns",
                   "overlap_pct", "comm_kernels", "compute_kernels")
SUMMARY_COLUMNS = ("collective", "count", "total_ns", "exposed_ns", "avg_ns", "msg_bytes",
                   "sized", "avg_msg_bytes", "algbw_gbps", "busbw_gbps", "group_size")

_STRIP = re.compile(r"^\s*(void\s+)?")

# Fields copied onto a comm kernel from the host op that launched it, when the kernel lacks them.
_INFO_STR = ("collective", "dtype", "process_group")
_INFO_INT = ("msg_nelems", "msg_bytes", "group_size", "seq")
_KERNEL_COLUMNS = ("ts", "dur", "pid", "device", "stream", "name", "correlation") + _INFO_STR \
    + _INFO_INT


def _kernel_collective(name: str) -> str | None:
    return collective_from_kernel(_STRIP.sub("", name))






def _is_comm_name(n: str) -> bool:
    return is_comm_kernel(_STRIP.sub("", n))


def comm_mask(ev: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the NCCL/RCCL kernels in an events frame."""
    return _mask(len(ev), _split_rows(ev)[0])


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, bool)
    m[rows] = True
    return m


def _split_rows(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row positions of the communication kernels and of the compute work (ts order)."""
    kernels = rows_of(ev, ("kernel",))
    comm = lookup_at(ev["name"], kernels, _is_comm_name, _is_comm_name(""), bool)
    # a graph replay row (nsys --cuda-graph-trace=graph) hides its kernels: counted as compute
    compute = kernels[~comm]
    graphs = rows_of(ev, ("graph",))
    if len(graphs):
        compute = np.flatnonzero(kind_in(ev, ("graph",)) | _mask(len(ev), compute))
    return kernels[comm], compute


def _by_device(ev: pd.DataFrame, rows: np.ndarray) -> dict[tuple[int, int], tuple]:
    """(pid, device) -> (union of the rows' [ts, ts + dur), row count), in key order."""
    if not len(rows):
        return {}
    group, _ = device_groups(ev, rows)
    order = np.argsort(group, kind="stable")
    g = group[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    pid = ev["pid"].to_numpy().take(rows)
    dev = ev["device"].to_numpy().take(rows)
    s = ev["ts"].to_numpy(np.int64).take(rows)
    e = s + ev["dur"].to_numpy(np.int64).take(rows)
    out = {}
    for a, b in zip(first.tolist(), first[1:].tolist() + [len(g)]):
        idx = order[a:b]
        out[(int(pid[idx[0]]), int(dev[idx[0]]))] = (intervals.union(s[idx], e[idx]), b - a)
    return dict(sorted(out.items()))


def comm_and_collectives(events) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``comm_overlap``, ``collective_summary``) of one frame: the kernels' comm / compute
    split and the compute kernels' union per device, which both read, made once."""
    ev = events_of(events)
    split = _split_rows(ev)
    given = (split, _by_device(ev, split[1]))
    return comm_overlap(ev, given), collective_summary(collective_instances(ev, given))


def comm_overlap(events, given: tuple | None = None) -> pd.DataFrame:
    """One row per (pid, device) that ran kernels: comm/compute/overlap/exposed ns, overlap %.

    overlap_pct is 0.0 on a device without communication. ``given``: ((comm rows, compute
    rows), the compute rows' ``_by_device``) of this frame, when the caller has them.
    """
    ev = events_of(events)
    (comm, compute), comp_by = given or (_split_rows(ev), None)
    comm_by = _by_device(ev, comm)
    comp_by = _by_device(ev, compute) if comp_by is None else comp_by
    comm_iv = {k: v[0] for k, v in comm_by.items()}
    comp_iv = {k: v[0] for k, v in comp_by.items()}
    keys = sorted(set(comm_iv) | set(comp_iv))
    n_comm = {k: v[1] for k, v in comm_by.items()}
    n_comp = {k: v[1] for k, v in comp_by.items()}
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    rows = []
    for key in keys:
        c, k = comm_iv.get(key, empty), comp_iv.get(key, empty)
        comm_ns = intervals.total(c)
        # |c ∩ k| summed over c's disjoint pieces: no sweep over both sets
        overlap_ns = int(intervals.overlap(k, c[0], c[1]).sum()) if len(c[0]) else 0
        rows.append((key[0], key[1], comm_ns, intervals.total(k), overlap_ns, comm_ns - overlap_ns,
                     100.0 * overlap_ns / comm_ns if comm_ns else 0.0,
                     int(n_comm.get(key, 0)), int(n_comp.get(key, 0))))
    out = pd.DataFrame(rows, columns=list(OVERLAP_COLUMNS))
    for col in OVERLAP_COLUMNS:
        if col != "overlap_pct":
            out[col] = out[col].astype(np.int64)
    return out


def collective_instances(events, given: tuple | None = None) -> pd.DataFrame:
    """One row per NCCL/RCCL kernel, in time order, with its collective and message facts.

    The collective type comes from the host op that launched the kernel
    (``record_param_comms``, ``nccl:all_reduce`` or an NVTX NCCL range enclosing
    the launch call) -- c10d's name is the user's collective, while NCCL runs
    all_to_all as ``SendRecv`` kernels -- else from the kernel row itself
    (reader-filled from its args or name), else "unknown". Message size, dtype,
    group size, process group and sequence number: the kernel's own values,
    else the launching op's. exposed_ns is the part of the
    kernel not covered by any compute kernel on its (pid, device). ``given``: as
    ``comm_overlap``'s.
    """
    ev = events_of(events)
    (comm, compute), comp_by = given or (_split_rows(ev), None)
    k = take(ev, comm, [c for c in ev.columns if c in _KERNEL_COLUMNS])
    n = len(k)
    out = {
        "ts": k["ts"].to_numpy(np.int64), "dur": k["dur"].to_numpy(np.int64),
        "pid": k["pid"].to_numpy(np.int64), "device": k["device"].to_numpy(np.int64),
        "stream": k["stream"].to_numpy(np.int64), "name": k["name"].astype(object).to_numpy(),
    }
    for c in _INFO_STR:
        out[c] = (np.array(k[c].astype(object).where(k[c].notna(), None), dtype=object)
                  if c in k else np.full(n, None, object))
    for c in _INFO_INT:
        out[c] = k[c].to_numpy(np.int64).copy() if c in k else np.full(n, -1, np.int64)
    # Normalise reader-provided spellings; fall back to the kernel name.
    coll = lookup_at(k["collective"], None, normalize_collective, None) if "collective" in k \
        else np.full(n, None, object)
    from_name = lookup_at(k["name"], None, _kernel_collective, _kernel_collective(""))
    own = np.where(pd.isna(coll), from_name, coll)
    # The launching op's collective wins: c10d says all_to_all where NCCL runs SendRecv kernels.
    out["collective"] = np.full(n, None, dtype=object)
    if n:
        _fill_from_launcher(ev, k, out)
    out["collective"] = np.where(pd.isna(out["collective"]), own, out["collective"])
    out["collective"] = np.where(pd.isna(out["collective"]), "unknown", out["collective"])
    # Exposed part of each kernel.
    exposed = out["dur"].copy()
    for key, (iv, _) in (_by_device(ev, compute) if comp_by is None else comp_by).items():
        m = (out["pid"] == key[0]) & (out["device"] == key[1])
        if m.any():
            s = out["ts"][m]
            exposed[m] = out["dur"][m] - intervals.overlap(iv, s, s + out["dur"][m])
    out["exposed_ns"] = exposed
    df = pd.DataFrame(out, columns=list(INSTANCE_COLUMNS))
    return df.sort_values(["ts", "device", "stream"], kind="stable").reset_index(drop=True)


def _fill_from_launcher(ev: pd.DataFrame, k: pd.DataFrame, out: dict) -> None:
    """Copy collective facts from the innermost host op enclosing each kernel's launch call.

    Kernel -> launch: the runtime/driver call with the same pid and correlation id.
    Launch -> op: host events on the same (pid, tid) that carry a collective
    (reader-filled column, or a name like ``nccl:all_reduce`` / ``c10d::allreduce_``
    / an NVTX range in the NCCL domain) and enclose the launch call.
    """
    need = np.ones(len(out["ts"]), bool)
    if "correlation" not in ev:
        return
    launch = pd.DataFrame({"i": np.flatnonzero(need), "pid": out["pid"][need],
                           "correlation": k["correlation"].to_numpy(np.int64)[need]})
    launch = launch[launch["correlation"] >= 0]
    # Only the launch calls whose correlation a comm kernel has (whole (pid, correlation)
    # keys kept or dropped, so the first of each key is the same), five columns of them.
    rows = rows_of(ev, ("runtime", "driver"))
    corr = ev["correlation"].to_numpy(np.int64).take(rows)
    rows = rows[(corr >= 0) & np.isin(corr, launch["correlation"].to_numpy())]
    if not len(rows):
        return
    rt = take(ev, rows, ["pid", "tid", "ts", "dur", "correlation"])
    rt = rt.drop_duplicates(["pid", "correlation"])
    launch = launch.merge(rt, on=["pid", "correlation"], how="inner")
    if not len(launch):
        return
    hosts = _collective_host_ops(ev)
    if not len(hosts):
        return
    for (pid, tid), lg in launch.groupby(["pid", "tid"], sort=False):
        hg = hosts[(hosts["pid"] == pid) & (hosts["tid"] == tid)]
        if not len(hg):
            continue
        hs = hg["ts"].to_numpy(np.int64)
        he = hs + hg["dur"].to_numpy(np.int64)
        ls = lg["ts"].to_numpy(np.int64)
        le = ls + lg["dur"].to_numpy(np.int64)
        idx = lg["i"].to_numpy()
        # Walk outward from the latest op starting before the launch: nesting is shallow
        # (record_param_comms > nccl:all_reduce), so a few steps reach every encloser.
        j = np.searchsorted(hs, ls, side="right") - 1
        for _ in range(6):
            ok = j >= 0
            jj = np.clip(j, 0, len(hs) - 1)
            enc = ok & (he[jj] >= le)
            if enc.any():
                _take(out, idx[enc], hg, jj[enc])
            j = j - 1
            if not (j >= 0).any():
                break


def _take(out: dict, rows: np.ndarray, hosts: pd.DataFrame, pick: np.ndarray) -> None:
    """Fill still-unknown fields of kernels ``rows`` from host ops ``pick`` (innermost first)."""
    for c in ("collective",) + _INFO_STR[1:]:
        vals = hosts[c].to_numpy(dtype=object)[pick] if c != "collective" else hosts["_coll"].to_numpy(dtype=object)[pick]
        cur = out[c][rows]
        fill = pd.isna(cur) & ~pd.isna(vals)
        out[c][rows[fill]] = vals[fill]
    for c in _INFO_INT:
        vals = hosts[c].to_numpy(np.int64)[pick]
        cur = out[c][rows]
        fill = (cur < 0) & (vals >= 0)
        out[c][rows[fill]] = vals[fill]


def _by_name(s: str):
    low = s.lower()
    if low.startswith(("nccl", "rccl", "c10d::")):
        return normalize_collective(s)
    return None


def _is_nccl_domain(d: str):
    return d.upper() == "NCCL"


def _collective_host_ops(ev: pd.DataFrame) -> pd.DataFrame:
    """Host ops that carry a collective (the column, an NCCL-like name or an NVTX range in
    the NCCL domain): pid, tid, ts, dur, the info columns and ``_coll``, by (pid, tid, ts).
    Which rows is decided on category lookups; values are built for those rows only."""
    rows = rows_of(ev, ("cpu_op", "annotation"))
    rows = rows[ev["tid"].to_numpy().take(rows) >= 0]
    clut, cc = lut_at(ev["collective"], rows, normalize_collective, None)
    nlut, nc = lut_at(ev["name"], rows, _by_name, None)
    keep = ~pd.isna(clut).take(cc) | ~pd.isna(nlut).take(nc)
    norm = None   # an NVTX range in the NCCL domain: its name, normalised
    if "domain" in ev:
        in_nccl = lookup_at(ev["domain"], rows, _is_nccl_domain, False, bool)
        if in_nccl.any():
            norm = np.full(len(rows), None, object)
            fill = in_nccl & pd.isna(nlut).take(nc)
            norm[fill] = lookup_at(ev["name"], rows[fill], normalize_collective, None)
            keep |= ~pd.isna(norm)
    coll, named = clut.take(cc[keep]), nlut.take(nc[keep])
    if norm is not None:
        named = np.where(pd.isna(named), norm[keep], named)
    coll = np.where(pd.isna(coll), named, coll)
    cols = ["pid", "tid", "ts", "dur"] + list(_INFO_STR[1:]) + list(_INFO_INT)
    h = take(ev, rows[keep], cols)
    h["_coll"] = coll
    for c in _INFO_STR[1:]:
        h[c] = h[c].astype(object).where(h[c].notna(), None)
    return h.sort_values(["pid", "tid", "ts"], kind="stable").reset_index(drop=True)


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth correction factor for ``n`` ranks (NaN if n unknown)."""
    if collective in ("broadcast", "reduce", "send", "recv", "send_recv"):
        return 1.0
    if n is None or n < 1:
        return float("nan")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return float("nan")


def collective_summary(events) -> pd.DataFrame:
    """Per collective type: count, total_ns, exposed_ns, message bytes and bandwidths.

    total_ns / exposed_ns sum kernel time (not a union). msg_bytes sums the
    instances with a known size (``sized`` of ``count``); algbw_gbps =
    Σbytes / Σtime over those instances (bytes per ns = GB/s); busbw_gbps =
    Σ(bytes · factor(n)) / Σtime over sized instances with a known group size.
    NaN where sizes or group sizes are unknown. group_size: the most common
    known group size (-1 if none).
    """
    inst = collective_instances(events) if not _is_instances(events) else events
    rows = []
    for coll, g in inst.groupby("collective", sort=True):
        dur = g["dur"].to_numpy(np.int64)
        b = g["msg_bytes"].to_numpy(np.int64)
        n = g["group_size"].to_numpy(np.int64)
        sized = b >= 0
        t_sized = int(dur[sized].sum())
        bytes_sum = int(b[sized].sum())
        algbw = bytes_sum / t_sized if t_sized > 0 else float("nan")
        sizes, at = np.unique(n, return_inverse=True)   # one factor per group size
        fac = np.array([busbw_factor(coll, int(x)) for x in sizes], dtype=float)[at]
        bb = sized & ~np.isnan(fac)
        t_bb = int(dur[bb].sum())
        busbw = float((b[bb] * fac[bb]).sum() / t_bb) if t_bb > 0 else float("nan")
        known_n = n[n > 0]
        gs = int(pd.Series(known_n).mode().iloc[0]) if len(known_n) else -1
        rows.append((str(coll), len(g), int(dur.sum()), int(g["exposed_ns"].sum()),
                     float(dur.mean()), bytes_sum if sized.any() else -1, int(sized.sum()),
                     bytes_sum / sized.sum() if sized.any() else float("nan"), algbw, busbw, gs))
    out = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    return out.sort_values(["total_ns", "collective"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)


def _is_instances(x) -> bool:
    return isinstance(x, pd.DataFrame) and "exposed_ns" in x.columns and "kind" not in x.columns


def nccl_report(events) -> dict:
    """Everything above as plain JSON-able data (for the CLI and analyze())."""
    ov, summ = comm_and_collectives(events)
    comm = int(ov["comm_ns"].sum()) if len(ov) else 0
    overlap = int(ov["overlap_ns"].sum()) if len(ov) else 0
    return {
        "comm_ns": comm,
        "exposed_ns": comm - overlap,
        "overlap_pct": 100.0 * overlap / comm if comm else 0.0,
        "devices": _records(ov),
        "collectives": _records(summ),
    }


def _records(df: pd.DataFrame) -> list[dict]:
    recs = df.to_dict(orient="records")
    for r in recs:
        for key, v in r.items():
            if isinstance(v, float) and np.isnan(v):
                r[key] = None
            elif isinstance(v, np.integer):
                r[key] = int(v)
            elif isinstance(v, np.floating):
                r[key] = float(v)
    return recs
