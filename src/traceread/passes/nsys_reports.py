"""More ``nsys stats`` reports on the event table: ``nvtx_sum``, ``osrt_sum``,
``cuda_gpu_mem_time_sum``, ``cuda_gpu_mem_size_sum`` and ``gpu_time_util``.

Row order is what nsys's SQL gives: ``ORDER BY total DESC`` only, so rows with
equal totals keep the order of the ``GROUP BY`` before it -- the group key
ascending (the range text for NVTX, the operation label for memory ops, the
StringIds id for OS runtime calls when the reader recorded it). SQLite's
sorter keeps that order for ties (checked with SQLite 3.40).

``gpu_time_util`` follows nsys's rule (an expert-system report, like
``gpu_gaps``): per (process, device), the span from the first GPU operation
to the end of the last is cut into ``chunks`` equal chunks of
``ceil(span / chunks)`` ns; a chunk's in-use percent is the summed overlap of
the operations with it (concurrent operations add up) over its length;
chunks below ``threshold`` percent are kept, runs of consecutive kept chunks
are merged into one row with the length-weighted average. nsys applies its
row limit (50 by default) twice: first to the merged rows in (run, device,
process) order, then to the rows sorted by in-use percent and duration.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..table import Trace
from .common import events_of, kind_in
from .gaps import gap_ops, profiler_overheads
from .kernels import round1, summarize
from .nsys_compat import DEFAULT_VERSION, nvtx_default_prefix, stats_version

NSYS_ROW_LIMIT = 50  # nsys ExpertSystemsReport default (gpu_gaps, gpu_time_util)

# Markers nsys stores in OSRT_API with eventClass 31/32; osrt_sum counts eventClass 27 only.
OSRT_MARKERS = ("OS runtime libraries profiling started", "OS runtime libraries profiling finished")

# Kineto copy_kind -> nsys's ENUM_CUDA_MEMCPY_OPER label.
COPY_LABELS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
               "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array",
               "AtoH": "Array-to-Host", "AtoA": "Array-to-Array", "AtoD": "Array-to-Device",
               "DtoA": "Device-to-Array"}


def sql_order(summary: pd.DataFrame, tie_key=None) -> pd.DataFrame:
    """``ORDER BY total DESC`` with ties in group-key order (``tie_key`` column(s), else name)."""
    keys = ["total_ns"] + ([tie_key] if isinstance(tie_key, str) else list(tie_key or ["name"]))
    asc = [False] + [True] * (len(keys) - 1)
    return summary.sort_values(keys, ascending=asc, kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- nvtx_sum

def nvtx_summary(trace_or_events, version: str | None = None) -> pd.DataFrame:
    """``nvtx_sum``: NVTX (nsys) or user-annotation (Kineto) ranges by ``domain:name`` and style.

    Columns: the ``summarize`` columns plus ``style`` (``PushPop``; the table
    does not tell start/end ranges apart). ``version``: the ``nsys stats``
    version whose naming to imitate (None: ``stats_version`` of the trace).
    """
    ev = events_of(trace_or_events)
    version = version or stats_version(trace_or_events)
    r = ev.loc[(ev["kind"] == "annotation").to_numpy(), ["name", "domain", "dur"]]
    name = r["name"].astype(object).where(r["name"].notna(), "")
    dom = r["domain"].astype(object)
    inferred = _inferred_domains(trace_or_events)
    if inferred:  # nsys only knows domains from their NvtxDomainCreate rows
        dom = dom.where(~dom.isin(inferred), None)
    bare = nvtx_default_prefix(version) + name.astype(str)
    tag = np.where(dom.notna(), dom.fillna("").astype(str) + ":" + name.astype(str), bare)
    out = summarize(pd.Series(tag, dtype=object), r["dur"].to_numpy())
    out["style"] = "PushPop"
    return sql_order(out, ["name", "style"])


_INFERRED = re.compile(r"NVTX domain \d+ has no name in this export; named (\S+) from")


def _inferred_domains(trace) -> set:
    """Domain names the nsys reader inferred (time-sliced exports lose NvtxDomainCreate)."""
    if not isinstance(trace, Trace):
        return set()
    notes = trace.meta.extra.get("notes") or []
    return {m.group(1) for n in notes if isinstance(n, str) for m in [_INFERRED.search(n)] if m}


def render_nvtx(summary: pd.DataFrame, fmt: str = "csv", version: str = DEFAULT_VERSION) -> str:
    from .kernels import render_csv, render_text, summary_records

    headers, rows = _stat_rows(summary, "Instances", "Range", version)
    headers.insert(8, "Style")
    for row, style in zip(rows, summary["style"]):
        row.insert(8, style)
    if fmt == "csv":
        return render_csv(headers, rows)
    if fmt == "json":
        import json

        recs = summary_records(summary, headers[:8] + headers[9:], version)
        for rec, style in zip(recs, summary["style"]):
            rec["Style"] = style
        return json.dumps(recs, indent=2)
    return render_text(headers, rows, numeric_cols=8)


def _stat_rows(summary: pd.DataFrame, count_header: str, name_header: str,
               version: str = DEFAULT_VERSION):
    from .kernels import nsys_rows

    headers, rows = nsys_rows(summary, count_header, version)
    headers[-1] = name_header
    return headers, rows


def _render_stats(summary: pd.DataFrame, fmt: str, count_header: str, name_header: str,
                  version: str = DEFAULT_VERSION) -> str:
    from .kernels import render_csv, render_text, summary_records

    headers, rows = _stat_rows(summary, count_header, name_header, version)
    if fmt == "csv":
        return render_csv(headers, rows)
    if fmt == "json":
        import json

        return json.dumps(summary_records(summary, headers, version), indent=2)
    return render_text(headers, rows)


# ---------------------------------------------------------------- osrt_sum

def osrt_summary(trace: Trace) -> pd.DataFrame:
    """``osrt_sum``: OS runtime calls (nsys ``OSRT_API``) by name."""
    ev = events_of(trace)
    r = ev.loc[(ev["kind"] == "osrt").to_numpy(), ["name", "dur"]]
    r = r[~r["name"].isin(OSRT_MARKERS).to_numpy()]
    out = summarize(r["name"], r["dur"].to_numpy())
    return sql_order(out, _id_order(trace, out))


def _id_order(trace, summary: pd.DataFrame):
    """Tie key: the StringIds id of each name when the nsys reader recorded them."""
    ids = trace.meta.extra.get("name_ids") if isinstance(trace, Trace) else None
    if not ids:
        return None
    summary["_id"] = [ids.get(n, 1 << 62) for n in summary["name"]]
    return ["_id", "name"]


def render_osrt(summary: pd.DataFrame, fmt: str = "csv", version: str = DEFAULT_VERSION) -> str:
    return _render_stats(summary.drop(columns=["_id"], errors="ignore"), fmt, "Num Calls", "Name",
                         version)


# ---------------------------------------------------------------- memory operations

def _memops(ev: pd.DataFrame) -> pd.DataFrame:
    """Memcpy/memset rows with nsys's operation label (``[CUDA memcpy Host-to-Device]``)."""
    m = ev.loc[kind_in(ev, ("memcpy", "memset")),
               ["kind", "name", "copy_kind", "dur", "bytes"]]
    name = m["name"].astype(object)
    is_label = name.fillna("").str.startswith("[CUDA mem")
    ck = m["copy_kind"].astype(object)
    label = "[CUDA memcpy " + ck.map(lambda k: COPY_LABELS.get(k, k) if isinstance(k, str)
                                     else "Unknown") + "]"
    label = label.where(m["kind"] == "memcpy", "[CUDA memset]")
    return pd.DataFrame({"op": name.where(is_label, label).to_numpy(),
                         "dur": m["dur"].to_numpy(), "bytes": m["bytes"].to_numpy()})


def memop_time_summary(trace_or_events) -> pd.DataFrame:
    """``cuda_gpu_mem_time_sum``: memcpy/memset durations by operation."""
    m = _memops(events_of(trace_or_events))
    return sql_order(summarize(m["op"], m["dur"]))


def memop_size_summary(trace_or_events) -> pd.DataFrame:
    """``cuda_gpu_mem_size_sum``: memcpy/memset sizes (bytes) by operation.

    Same columns as ``summarize`` with sizes in place of durations.
    """
    m = _memops(events_of(trace_or_events))
    return sql_order(summarize(m["op"], np.maximum(m["bytes"].to_numpy(), 0)))


MEM_SIZE_HEADERS = ("Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)",
                    "StdDev (MB)", "Operation")


def _mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def memop_size_rows(summary: pd.DataFrame) -> list[list[str]]:
    return [[_mb(r.total_ns), str(r.instances), _mb(r.avg_ns), _mb(r.med_ns), _mb(r.min_ns),
             _mb(r.max_ns), _mb(r.stddev_ns), str(r.name)]
            for r in summary.itertuples(index=False)]


def render_memops(summary: pd.DataFrame, by: str, fmt: str = "csv",
                  version: str = DEFAULT_VERSION) -> str:
    from .kernels import render_csv, render_text

    if by == "time":
        return _render_stats(summary, fmt, "Count", "Operation", version)
    rows = memop_size_rows(summary)
    if fmt == "csv":
        return render_csv(MEM_SIZE_HEADERS, rows)
    if fmt == "json":
        import json

        return json.dumps([{h: (v if h in ("Operation",) else float(v) if "." in v else int(v))
                            for h, v in zip(MEM_SIZE_HEADERS, r)} for r in rows], indent=2)
    return render_text(MEM_SIZE_HEADERS, rows)


# ---------------------------------------------------------------- gpu_time_util

UTIL_COLUMNS = ("in_use", "duration", "start", "pid", "device")


def gpu_time_util(trace_or_events, threshold: float = 50, chunks: int = 30,
                  rows: int = NSYS_ROW_LIMIT, *, skip_nonpositive: bool | None = None,
                  version: str | None = None) -> pd.DataFrame:
    """Low-utilisation regions per (process, device), in nsys's order.

    Columns: in_use (percent, rounded to 0.1), duration, start (ns), pid, device.
    ``rows`` < 0 means no limit. ``version``: whose rounding (None: the trace's).
    """
    if not 1 <= chunks <= 1000:
        raise ValueError("chunks must be between 1 and 1000")
    version = version or stats_version(trace_or_events)
    ev, ops = gap_ops(trace_or_events, skip_nonpositive)
    ov = profiler_overheads(ev)
    recs = []
    for (pid, dev), g in ops.groupby(["pid", "device"], sort=True, observed=True):
        s = g["ts"].to_numpy(np.int64)
        e = s + g["dur"].to_numpy(np.int64)
        if len(ov):
            mine = ov[ov["pid"].to_numpy() == pid]
            os_ = mine["ts"].to_numpy(np.int64)
            oe = os_ + mine["dur"].to_numpy(np.int64)
            inside = (os_ > s.min()) & (oe < e.max())
            s, e = np.concatenate([s, os_[inside]]), np.concatenate([e, oe[inside]])
        for run in _low_runs(s, e, threshold, chunks, version):
            recs.append((*run, int(pid), int(dev)))
    # nsys: the inner LIMIT sees rows grouped by (run id, device, pid)
    recs.sort(key=lambda r: (r[0], r[5], r[4]))
    if rows >= 0:
        recs = recs[:rows]
    out = pd.DataFrame([r[1:] for r in recs], columns=UTIL_COLUMNS)
    out = out.sort_values(["in_use", "duration"], kind="stable").reset_index(drop=True)
    return out.iloc[:rows] if rows >= 0 else out


def _low_runs(s: np.ndarray, e: np.ndarray, threshold: float, chunks: int,
              version: str = DEFAULT_VERSION) -> list[tuple]:
    """(run id, in_use, duration, start) of each run of consecutive low chunks."""
    start, end = int(s.min()), int(e.max())
    size = float(math.ceil(float(end - start) / chunks))
    if size <= 0:
        return []
    # chunk bounds as offsets from the first start, then back to int64: Kineto's epoch ns
    # (~1.8e18) are past float64's exact integers (2^53) and came out rounded to 256 ns;
    # nsys's session ns are small, where the offsets give the same values as its floats
    k = np.arange(chunks, dtype=np.float64)
    rel = k * size
    rel_end = np.minimum(rel + size, float(end - start))
    live = rel < rel_end
    ids = np.flatnonzero(live)
    cstart = rel[live].astype(np.int64) + start
    cend = rel_end[live].astype(np.int64) + start
    util = _chunk_util(s, e, cstart, cend)
    low = util < threshold
    ids, cstart, cend, util = ids[low], cstart[low], cend[low], util[low]
    group = ids - np.arange(len(ids))  # nsys: rangeId - ROW_NUMBER()
    runs = []
    for gid in np.unique(group):
        m = group == gid
        w = cend[m] - cstart[m]
        avg = float(round1((w * util[m]).sum() / w.sum(), version))
        runs.append((int(gid), avg, int(cend[m].max() - cstart[m].min()), int(cstart[m].min())))
    return runs


def _chunk_util(s, e, cstart, cend) -> np.ndarray:
    """Percent of each chunk covered by the operations (overlaps add up).

    Covered time up to x is F(x) = sum over ops of max(0, min(x, end) - start),
    from prefix sums of the sorted starts and ends -- exact integers (relative
    to the first start), as nsys's per-operation sum is.
    """
    base = int(s.min())
    ss = np.sort(s - base)
    es = np.sort(e - base)
    cs_s = np.concatenate([[0], np.cumsum(ss)])
    cs_e = np.concatenate([[0], np.cumsum(es)])

    def covered(x: np.ndarray) -> np.ndarray:
        ns = np.searchsorted(ss, x, side="left")
        ne = np.searchsorted(es, x, side="left")
        return (ns * x - cs_s[ns]) - (ne * x - cs_e[ne])

    a = cstart.astype(np.int64) - base
    b = cend.astype(np.int64) - base
    return (covered(b) - covered(a)).astype(np.float64) / (b - a).astype(np.float64) * 100


UTIL_HEADERS = ("Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID",
                "Context ID")


def util_rows(trace: Trace, util: pd.DataFrame) -> list[list[str]]:
    ctx = trace.meta.extra.get("gpu_contexts", {}) if isinstance(trace.meta.extra, dict) else {}
    return [[str(i), repr(float(r.in_use)), str(r.duration), str(r.start), str(r.pid),
             str(r.device), str(ctx.get(f"{r.pid}/{r.device}", ""))]
            for i, r in enumerate(util.itertuples(index=False), start=1)]
