"""Where the top matmul kernels sit on the roofline: bytes moved, achieved bandwidth and its
share of the device's memory bandwidth, arithmetic intensity against the ridge point.

A GEMM/GEMV kernel is linked to the counted operator that launched it (``aten::mm``,
``addmm``, ``bmm``, ... with recorded shapes): the launch call's start lies inside the
operator on its thread. Its bytes are the operator's operands read once and its output
written once, ``(M*K + K*N + M*N) x batch x element size`` -- the least any kernel moves --
so the bandwidth is a lower bound of what the kernel moved. A batch-1 GEMV (M = 1) reads the
whole weight for 2*K*N FLOPs: intensity ~1 FLOP/byte, memory-bound on every GPU; batching
M requests multiplies the FLOPs for nearly the same bytes.

HBM bandwidth: vendor datasheets (TB/s), matched on the device name like peaks.py.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from .common import rows_of
from .factkit import launcher

HBM_TBPS: tuple[tuple[str, float], ...] = (
    (r"B200", 8.0), (r"H200|GH200", 4.8), (r"H100.*NVL", 3.9), (r"H100.*PCIe", 2.0),
    (r"H100|H800", 3.35), (r"H20\b", 4.0), (r"A100.*80|A800.*80", 2.039), (r"A100|A800", 1.555),
    (r"L40S|L40\b", 0.864), (r"\bL4\b", 0.3), (r"A10G|A10\b", 0.6), (r"RTX 4090", 1.008),
    (r"RTX 3090", 0.936), (r"V100", 0.9), (r"\bT4\b", 0.32), (r"MI325X", 6.0),
    (r"MI300X|MI300A", 5.3), (r"MI250X|MI250", 3.2))
_BW = tuple((re.compile(p, re.I), v) for p, v in HBM_TBPS)
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp64": 8, "fp8": 1, "int8": 1}
# (first operand, second operand) in the recorded input dims
_OPERANDS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::_addmm_activation": (1, 2),
             "aten::bmm": (0, 1), "aten::baddbmm": (1, 2), "aten::_scaled_mm": (0, 1)}
TOP = 5


def hbm_tbps(name: str) -> float | None:
    for rx, v in _BW:
        if rx.search(name or ""):
            return v
    return None


def mm_bytes(name: str, dims_text, dtype: str) -> int | None:
    """Least bytes a matmul moves: its operands read once, its output written once."""
    ab = _OPERANDS.get(name)
    size = ELEMENT_BYTES.get(dtype)
    if ab is None or size is None:
        return None
    try:
        dims = json.loads(dims_text) if isinstance(dims_text, str) else None
        x, w = dims[ab[0]], dims[ab[1]]
        if len(x) < 2 or len(w) < 2:
            return None
        batch = int(np.prod(x[:-2])) if len(x) > 2 else 1
        m, k, n = int(x[-2]), int(x[-1]), int(w[-1])
    except (TypeError, ValueError, IndexError):
        return None
    if name == "aten::_scaled_mm":
        size = 1       # fp8 operands; the output's dtype is not recorded (bf16 assumed: 2)
        return batch * (m * k + k * n) + 2 * batch * m * n
    return batch * (m * k + k * n + m * n) * size


def matmul_roofline(ev: pd.DataFrame, device: str, peaks: dict | None, ops: pd.DataFrame,
                    top: int = TOP) -> dict | None:
    """{"device", "hbm_tbps", "kernels": [{name, op, calls, ns, flops, bytes, tbps,
    bw_share, intensity, ridge, bound, m}]} for the ``top`` kernels by time that a counted
    matmul launched; None without GPU kernels linked to shaped matmuls."""
    bw = hbm_tbps(device)
    mm = ops[ops["name"].isin(list(_OPERANDS))]
    kern = rows_of(ev, ("kernel",))
    if not len(mm) or not len(kern) or "input_dims" not in ev:
        return None
    lr = launcher(ev, kern)
    ok = lr >= 0
    kern, lr = kern[ok], lr[ok]
    if not len(kern):
        return None
    lts = ev["ts"].to_numpy(np.int64)[lr]
    ltid = ev["tid"].to_numpy()[lr]
    k_op = _enclosing(mm, lts, ltid)
    hit = k_op >= 0
    if not hit.any():
        return None
    dims = _dims_of(ev, mm)
    rows = []
    for r, j in zip(kern[hit].tolist(), k_op[hit].tolist()):
        op = mm.iloc[j]
        rows.append((str(ev["name"].iat[r]), op["name"], int(ev["dur"].iat[r]), int(op["flops"]),
                     mm_bytes(op["name"], dims[j], op["dtype"]), op["dtype"], _m_of(dims[j], op["name"])))
    df = pd.DataFrame(rows, columns=["kernel", "op", "ns", "flops", "bytes", "dtype", "m"])
    df = df[df["bytes"].notna() & (df["ns"] > 0)]
    if not len(df):
        return None
    g = df.groupby("kernel").agg(op=("op", "first"), calls=("ns", "size"), ns=("ns", "sum"),
                                 flops=("flops", "sum"), bytes=("bytes", "sum"),
                                 dtype=("dtype", "first"), m=("m", "median"))
    g = g.sort_values("ns", ascending=False).head(top)
    out = []
    for name, x in g.iterrows():
        tbps = float(x["bytes"]) / float(x["ns"]) / 1e3
        intensity = float(x["flops"]) / float(x["bytes"]) if x["bytes"] else None
        peak = (peaks or {}).get(x["dtype"])
        ridge = peak / bw if peak and bw else None
        out.append({"name": name, "op": x["op"], "calls": int(x["calls"]), "ns": int(x["ns"]),
                    "flops": int(x["flops"]), "bytes": int(x["bytes"]), "tbps": tbps,
                    "bw_share": tbps / bw if bw else None, "intensity": intensity,
                    "ridge": ridge, "m": int(x["m"]),
                    "bound": None if ridge is None or intensity is None else
                    "memory" if intensity < ridge else "compute"})
    return {"device": device or None, "hbm_tbps": bw, "kernels": out}


def _enclosing(mm: pd.DataFrame, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Index (into ``mm``) of the innermost matmul op on ``tid`` whose span holds ``ts``."""
    out = np.full(len(ts), -1, np.int64)
    s = mm["ts"].to_numpy(np.int64)
    e = s + mm["dur"].to_numpy(np.int64)
    t = mm["tid"].to_numpy()
    for th in np.unique(t):
        idx = np.flatnonzero(t == th)
        order = idx[np.argsort(s[idx], kind="stable")]
        sel = np.flatnonzero(tid == th)
        k = np.searchsorted(s[order], ts[sel], side="right") - 1
        good = k >= 0
        cand = order[np.maximum(k, 0)]
        good &= ts[sel] < e[cand]
        out[sel[good]] = cand[good]
    return out


def _dims_of(ev: pd.DataFrame, mm: pd.DataFrame) -> list:
    """The input dims text of each matmul op (matched back by start, thread and name)."""
    host = rows_of(ev, ("cpu_op",))
    key = pd.MultiIndex.from_arrays([ev["ts"].to_numpy(np.int64)[host], ev["tid"].to_numpy()[host],
                                     ev["name"].take(host).astype(str).to_numpy()])
    dims = pd.Series(ev["input_dims"].take(host).astype(object).to_numpy(), index=key)
    dims = dims[~dims.index.duplicated()]
    want = pd.MultiIndex.from_arrays([mm["ts"].to_numpy(np.int64), mm["tid"].to_numpy(),
                                      mm["name"].to_numpy()])
    return dims.reindex(want).tolist()


def _m_of(dims_text, name: str) -> int:
    """Rows of the first operand (1: a GEMV)."""
    try:
        d = json.loads(dims_text)[_OPERANDS[name][0]]
        return int(d[-2])
    except (TypeError, ValueError, IndexError, KeyError):
        return -1
