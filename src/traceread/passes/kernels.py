"""Per-name duration summaries, the ``nsys stats`` way (``cuda_gpu_kern_sum``).

``summarize`` is the shared engine (also used by the CUDA API summary):
group durations by name, fully vectorised, with nsys's statistics -- the
true median, the sample standard deviation (n-1, 0 for a single instance) --
and nsys's row order: total time descending, then instances ascending, then
name. ``render_summary`` prints the exact ``nsys stats`` CSV, an aligned text
table or JSON.
"""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pandas as pd

from . import nsys_compat
from .common import events_of, rows_of, take
from .nsys_compat import DEFAULT_VERSION

SUMMARY_COLUMNS = ("total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns",
                   "stddev_ns", "pct", "name")

# nsys column headers, in order, for the kernel summary.
KERN_SUM_HEADERS = ("Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                    "Min (ns)", "Max (ns)", "StdDev (ns)", "Name")


def summarize(names, durs, display=None) -> pd.DataFrame:
    """Group ``durs`` (int ns) by ``names``; one row per name, nsys order.

    Columns: total_ns, instances, min_ns, max_ns (int64); avg_ns, med_ns,
    stddev_ns, pct (float64, unrounded); name (str). ``display`` optionally
    maps each group key to the name shown (two keys may show the same name).
    """
    d = np.asarray(durs, dtype=np.int64)
    if len(d) == 0:
        return _empty()
    uniq, codes = _group_codes(names)
    order = _group_sort(codes, d, len(uniq))  # by group, then duration
    c, ds = codes[order], d[order]
    n = np.bincount(c, minlength=len(uniq))
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    # Exact integer totals via an int64 prefix sum (bincount weights are float64).
    csum = np.concatenate([[0], np.cumsum(ds)])
    total = csum[start + n] - csum[start]
    mean = total / n
    lo = ds[start + (n - 1) // 2]
    hi = ds[start + n // 2]
    med = (lo + hi) / 2.0
    dev = ds - mean[c]
    ss = np.bincount(c, weights=dev * dev, minlength=len(uniq))
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), 0.0)
    grand = total.sum()
    out = pd.DataFrame({
        "total_ns": total.astype(np.int64),
        "instances": n.astype(np.int64),
        "avg_ns": mean,
        "med_ns": med,
        "min_ns": ds[start].astype(np.int64),
        "max_ns": ds[start + n - 1].astype(np.int64),
        "stddev_ns": std,
        "pct": total * 100.0 / grand if grand else np.zeros(len(uniq)),
        "name": uniq.astype(object) if display is None else
                np.array([display(k) for k in uniq], dtype=object),
    })
    # nsys: ORDER BY total DESC, instances, name
    out = out.sort_values(["total_ns", "instances", "name"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)
    return out


def _group_sort(codes: np.ndarray, d: np.ndarray, ngroups: int) -> np.ndarray:
    """Order rows by (group, duration); one integer key when it fits in int64."""
    lo = int(d.min())
    span = int(d.max()) - lo + 1
    if ngroups * span < 2**62:
        return np.argsort(codes.astype(np.int64) * span + (d - lo))
    return np.lexsort((d, codes))


def _group_codes(names) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, per-row group index). Categorical input is grouped on its
    integer codes (no string sorting); missing names become ""."""
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        # object array of str: numpy's fixed-width "U" dtype pads every name to the
        # longest one (20k names, one of 50k chars: 4 GB)
        cats = np.array([str(c) for c in names.cat.categories], dtype=object)
        codes = names.cat.codes.to_numpy().astype(np.int64)
        if (codes < 0).any():
            cats = np.append(cats, "")
            codes = np.where(codes < 0, len(cats) - 1, codes)
        used, inv = np.unique(codes, return_inverse=True)
        return cats[used], inv
    arr = pd.Series(np.asarray(names, dtype=object)).fillna("").astype(str).to_numpy()
    return np.unique(arr, return_inverse=True)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({
        "total_ns": np.empty(0, np.int64), "instances": np.empty(0, np.int64),
        "avg_ns": np.empty(0), "med_ns": np.empty(0),
        "min_ns": np.empty(0, np.int64), "max_ns": np.empty(0, np.int64),
        "stddev_ns": np.empty(0), "pct": np.empty(0), "name": np.empty(0, object)})


def kernel_summary(trace_or_events) -> pd.DataFrame:
    """``cuda_gpu_kern_sum``: GPU kernels grouped by (demangled) name."""
    ev = events_of(trace_or_events)
    k = take(ev, rows_of(ev, ("kernel",)), ["name", "dur"])
    return summarize(k["name"], k["dur"].to_numpy())


# ---------------------------------------------------------------- rendering

def round1(x, version: str = DEFAULT_VERSION) -> np.ndarray:
    """Round to one decimal as SQLite's round(x, 1) does under that nsys version."""
    return nsys_compat.round1(x, version)


def _dec(x: float) -> str:
    """A rounded float the way Python (and so nsys stats' CSV) prints it."""
    return repr(float(x))


def nsys_rows(summary: pd.DataFrame, count_header: str = "Instances",
              version: str = DEFAULT_VERSION) -> tuple[list, list]:
    """(headers, rows of strings) exactly as ``nsys stats --format csv`` prints them."""
    headers = list(KERN_SUM_HEADERS)
    headers[2] = count_header
    pct, avg, med, std = _rounded(summary, version)
    rows = []
    for i, r in enumerate(summary.itertuples(index=False)):
        rows.append([_dec(pct[i]), str(r.total_ns), str(r.instances), _dec(avg[i]), _dec(med[i]),
                     str(r.min_ns), str(r.max_ns), _dec(std[i]), str(r.name)])
    return headers, rows


def render_csv(headers, rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(headers)
    w.writerows(rows)
    return buf.getvalue()


def render_text(headers, rows, numeric_cols: int | None = None, plain=()) -> str:
    """An aligned table like ``nsys stats`` prints to the terminal: the first
    ``numeric_cols`` columns right-aligned with thousands separators (except
    the column indexes in ``plain``)."""
    if numeric_cols is None:
        numeric_cols = len(headers) - 1
    shown = [[_thousands(v) if j < numeric_cols and j not in plain else v
              for j, v in enumerate(r)] for r in rows]
    widths = [max([len(h)] + [len(r[j]) for r in shown]) for j, h in enumerate(headers)]
    def line(cells):
        out = []
        for j, v in enumerate(cells):
            out.append(v.rjust(widths[j]) if j < numeric_cols else v.ljust(widths[j]))
        return "  ".join(out).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in shown])


def _thousands(v: str) -> str:
    if not v or not (v[0].isdigit() or v[0] == "-"):
        return v
    whole, dot, frac = v.partition(".")
    try:
        return f"{int(whole):,}" + (dot + frac)
    except ValueError:
        return v


def render_summary(summary: pd.DataFrame, fmt: str = "csv", count_header: str = "Instances",
                   version: str = DEFAULT_VERSION) -> str:
    """``version``: the ``nsys stats`` version whose rounding to imitate (nsys_compat)."""
    headers, rows = nsys_rows(summary, count_header, version)
    if fmt == "csv":
        return render_csv(headers, rows)
    if fmt == "json":
        return json.dumps(summary_records(summary, headers, version), indent=2)
    return render_text(headers, rows)


def _rounded(summary: pd.DataFrame, version: str) -> list[np.ndarray]:
    return [round1(summary[c].to_numpy(), version) for c in ("pct", "avg_ns", "med_ns",
                                                             "stddev_ns")]


def summary_records(summary: pd.DataFrame, headers, version: str = DEFAULT_VERSION) -> list[dict]:
    """JSON records with numbers as numbers (rounded like the CSV)."""
    recs = []
    pct, avg, med, std = _rounded(summary, version)
    for i, r in enumerate(summary.itertuples(index=False)):
        vals = [float(pct[i]), int(r.total_ns), int(r.instances), float(avg[i]), float(med[i]),
                int(r.min_ns), int(r.max_ns), float(std[i]), str(r.name)]
        recs.append(dict(zip(headers, vals)))
    return recs
