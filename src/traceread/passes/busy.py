"""When the GPU is busy, busy doing what -- and the figures the busy-time levers read.

``busy_breakdown`` splits GPU-op time (summed durations, like ``nsys stats``)
into work classes, refining ``kernel_classes``: GEMMs/convolutions are split
into tensor-core and FP32 SIMT ones (``sgemm``, ``*_ffma_*``, ``*simt*``,
``gemv``, cuDNN ``scudnn``, and ``<float>``-templated kernels without a
tensor-core marker such as cuDNN's ``dgrad_engine<float,...>``). It also reports the short
kernels (< 5 us, launch-dominated) and the achieved bandwidth of each copy direction, and
measures what the busy-time levers read (``figures``: GEMM time by the math its kernels run,
softmax and layout-conversion time, the device's peaks). The levers themselves -- TF32,
bf16 autocast, SDPA, channels_last, torch.compile -- and their saving models are judgement:
verdict/busy.py.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..table import GPU_OP_KINDS, scan_name
from .common import events_of, kind_in, rows_of, take
from .kernel_classes import gpu_op_pairs, pair_classes
from .peaks import device_caps, device_peaks

SMALL_KERNEL_NS = 5_000
BUSY_CLASSES = ("gemm_tensor", "gemm_simt", "attention", "elementwise", "reduction", "triton",
                "nccl", "memcpy", "memset", "graph", "other")

_SIMT = re.compile(r"sgemm|_ffma|simt|gemv|gemmSN|scudnn|implicit_convolve_sgemm|dgemm|dot_kernel",
                   re.I)
# fp32-templated kernels without a tensor-core marker (cuDNN dgrad/wgrad/winograd<float>)
_F32_TEMPLATE = re.compile(r"<\s*float\b")
# nvjet_*: cuBLAS's GEMMs on Hopper and later (CUDA 12.8+), always tensor-core
_TC_MARK = re.compile(r"^nvjet_|xmma|hmma|wgmma|tensorop|s884|h884|s1688|h1688|s16816|h16816|i8816|_mma|"
                      r"mfma|Cijk_|__half|bf16|f16|tf32", re.I)
_TF32 = re.compile(r"tf32", re.I)
_F32_ACC = re.compile(r"s1688|s16816|f32f32", re.I)   # fp32 accumulate: TF32 only with f32 inputs
# nvjet_[sm90_]<in><compute><out>_: t = bf16, h = fp16, e/q = fp8 inputs
_LOWP = re.compile(r"bf16|f16|fp16|half|h1688|h16816|i8|fp8|e4m3|e5m2|^nvjet_(?:sm\d+_)?[theq][a-z]{2}_",
                   re.I)
_SOFTMAX = re.compile(r"softmax", re.I)
# cuDNN's layout conversions; MIOpen's are its batched_transpose kernels around an NHWC
# convolution (precision.py reads the same pattern)
LAYOUT_PATTERN = r"(?i)nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|^batched_transpose_"
_LAYOUT = re.compile(LAYOUT_PATTERN)


def _pair_classes(pairs: pd.DataFrame) -> np.ndarray:
    """Busy class of each (name, kind) pair: ``kernel_classes``' class, GEMMs split into
    FP32 SIMT and tensor-core ones by name."""
    cls = pair_classes(pairs)
    gemm = np.flatnonzero(cls == "gemm")
    names = pairs["name"].to_numpy(object)
    for i in gemm.tolist():
        cls[i] = "gemm_simt" if is_simt(names[i]) else "gemm_tensor"
    return cls


def is_simt(name: str) -> bool:
    name = scan_name(name)
    return bool(_SIMT.search(name)) or (bool(_F32_TEMPLATE.search(name))
                                        and not _TC_MARK.search(name))


def is_tf32_kernel(name: str) -> bool:
    """A tensor-core GEMM on fp32 inputs (TF32): ``tf32`` in the name, or an fp32-accumulate
    tile (``s1688``, ``f32f32``) with no low-precision input type in the name -- and not a
    SIMT one (``sm80_xmma_gemm_f32f32_..._ffma_...`` is FP32 on CUDA cores)."""
    if _SIMT.search(name) and not _TF32.search(name):
        return False
    return bool(_TF32.search(name)) or (bool(_F32_ACC.search(name))
                                        and not _LOWP.search(name))


def _gpu_rows(ev: pd.DataFrame, window: tuple[int, int] | None) -> np.ndarray:
    rows = rows_of(ev, GPU_OP_KINDS)
    if window is not None:
        a, b = window
        ts = ev["ts"].to_numpy().take(rows)
        rows = rows[(ts >= a) & (ts < b)]
    return rows


def busy_breakdown(trace, window: tuple[int, int] | None = None, op_dtypes=None,
                   meta=None) -> dict:
    """Busy time by class, short kernels, copy bandwidth, and the figures the busy-time
    levers read (``figures``, taken out by utilization.py into the facts record).

    ``window``: (start, end) ns on the trace clock (ops starting inside count);
    ``op_dtypes``: the ``flops.op_flops`` table, to know the matmul dtype.
    """
    ev = events_of(trace)
    rows = _gpu_rows(ev, window)
    dur = ev["dur"].to_numpy(np.int64).take(rows)
    total = int(dur.sum())
    out: dict = {"busy_ns": total, "classes": [], "small_kernels": None, "copies": [],
                 "figures": None}
    if not total:
        return out
    # classes and lever figures are decided once per (name, kind), not per event
    pairs = gpu_op_pairs(ev, rows)
    pairs["cls"] = _pair_classes(pairs)
    by = pairs.groupby("cls")[["ns", "count"]].sum()
    out["classes"] = [{"class": c, "ns": int(by.loc[c, "ns"]), "count": int(by.loc[c, "count"]),
                       "pct": 100.0 * by.loc[c, "ns"] / total}
                      for c in sorted(by.index, key=lambda c: -by.loc[c, "ns"])]
    kern = kind_in(ev, ("kernel",)).take(rows)
    small = kern & (dur < SMALL_KERNEL_NS)
    out["small_kernels"] = {"threshold_ns": SMALL_KERNEL_NS, "count": int(small.sum()),
                            "of_kernels": int(kern.sum()), "ns": int(dur[small].sum()),
                            "pct_of_busy": 100.0 * dur[small].sum() / total}
    copies = rows[kind_in(ev, ("memcpy",)).take(rows)]
    out["copies"] = copy_bandwidth(take(ev, copies, ["ts", "dur", "kind", "bytes", "copy_kind"]))
    meta = meta if meta is not None else getattr(trace, "meta", None)
    # name -> class for occupancy.py (popped by utilization: not part of the JSON)
    out["kernel_class"] = dict(zip(pairs.loc[pairs["kind"] == "kernel", "name"],
                                   pairs.loc[pairs["kind"] == "kernel", "cls"]))
    out["figures"] = _busy_figures(pairs.rename(columns={"ns": "dur"}), total, meta, op_dtypes)
    return out


def copy_bandwidth(g: pd.DataFrame) -> list[dict]:
    """Per copy direction: count, bytes, time and achieved GB/s (bytes / summed time)."""
    c = g[(g["kind"] == "memcpy").to_numpy() & (g["bytes"].to_numpy() > 0)]
    if not len(c):
        return []
    kinds = c["copy_kind"].astype(object).fillna("unknown")
    out = []
    for k, d in c.groupby(kinds.to_numpy(), sort=True):
        b, t = int(d["bytes"].sum()), int(d["dur"].sum())
        out.append({"copy_kind": str(k), "count": len(d), "bytes": b, "ns": t,
                    "gb_per_s": b / t if t else None})
    return out


def _precisions(caps: dict) -> tuple[dict, str]:
    """Peak TFLOP/s for fp32, tf32 (None: the device has none) and the low-precision dtype
    (bf16, or fp16 where the device has no bf16: Volta, Turing)."""
    peaks = device_peaks(caps["name"], caps) if caps["name"] else None
    if peaks and peaks.get("fp32"):
        lowp = "bf16" if "bf16" in peaks else "fp16"
        return {"fp32": peaks["fp32"], "tf32": peaks.get("tf32"), "lowp": peaks.get(lowp),
                "lowp_dtype": lowp}, "device peaks"
    return {"fp32": 1.0, "tf32": None if caps["tf32"] is False else 4.0, "lowp": 8.0,
            "lowp_dtype": "fp16" if caps["bf16"] is False else "bf16"}, \
        "default ratios (device peaks unknown)"


def gemm_precision(name: str) -> str:
    """The math a GEMM/conv kernel runs, from its name: ``tf32``, ``fp32`` (SIMT on fp32
    data: ``sgemm``, ``*_ffma_*``, ``<float>`` templates), ``fp64`` (``dgemm``, ``double``),
    ``lowp`` (fp16/bf16/fp8/int8 in the name: ``__half``, ``bf16``, ``h1688``, ``nvjet_*t*``),
    else ``tensor`` (tensor-core, input type not named)."""
    if _FP64.search(name):
        return "fp64"
    if _LOWP.search(name):
        return "lowp"
    if is_tf32_kernel(name):
        return "tf32"
    return "fp32" if is_simt(name) else "tensor"


_FP64 = re.compile(r"dgemm|\bdouble\b|_f64|fp64|d884|dmma", re.I)


def _busy_figures(by_name: pd.DataFrame, total: int, meta, op_dtypes) -> dict:
    """What the busy-time levers (verdict/busy.py) read: busy ns per class, the GEMM time by
    the math its kernels run, whether the matmul ops are fp32, the softmax and layout-
    conversion kernels' time, and the device's peaks."""
    t = by_name.groupby("cls")["dur"].sum().to_dict()
    t = {c: int(t.get(c, 0)) for c in BUSY_CLASSES}
    names, dur, cls = (by_name[c].to_numpy() for c in ("name", "dur", "cls"))
    caps = device_caps(meta)
    p, src = _precisions(caps)
    prec = [gemm_precision(n) if c in ("gemm_simt", "gemm_tensor") else None
            for n, c in zip(names, cls)]
    fp32_ops = op_dtypes is not None and len(op_dtypes) > 0 and \
        bool((op_dtypes["dtype"] == "fp32").mean() > 0.5)
    # only GEMMs whose kernels run fp32 math: an fp16 gemv or a dgemm is no TF32 candidate
    return {"busy_ns": int(total), "class_ns": t,
            "fp32_gemm_ns": int(sum(d for d, q in zip(dur, prec) if q == "fp32")),
            "tf32_gemm_ns": int(sum(d for d, q in zip(dur, prec) if q == "tf32")),
            "fp32_ops": fp32_ops,
            "softmax_ns": int(sum(d for d, n in zip(dur, names) if _SOFTMAX.search(scan_name(n)))),
            "layout_ns": int(sum(d for d, n in zip(dur, names) if _LAYOUT.search(scan_name(n)))),
            "peaks": p, "peak_source": src, "device": caps["name"]}
