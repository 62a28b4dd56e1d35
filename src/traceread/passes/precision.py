"""What the program already uses for its math (docs/analysis.md, "Precision, convolutions,
attention"): the precision each GEMM kernel runs in, autocast and its dtype, convolutions
by operator, the SDPA backend and whether an explicit mask is passed, channels_last.

* GEMM precision, by kernel name: fp8 (``e4m3``/``e5m2``, ``nvjet_*e``/``q``), bf16, fp16
  (``fp16``/``f16``/``half``/``h16816``: ``ampere_fp16_s16816gemm_fp16_*`` is fp16 with
  fp32 accumulation, not TF32), TF32 (``busy.is_tf32_kernel``), FP32 on CUDA cores
  (``busy.is_simt``); ns of GPU time each.
* autocast: torch.autocast wraps a matmul/conv/attention op and casts its inputs inside it
  (an ``aten::to``/``_to_copy`` to bfloat16 (dtype code 15) or half (5) directly inside
  ``aten::linear`` ...): the dtype of those casts.
* convolutions: ``aten::conv*`` / ``cudnn_convolution`` / ``convolution_backward``
  operators. Kernel names decide only when the trace has no operators at all, and never
  an attention kernel (cuDNN's fused attention ``cudnn_generated_fort_native_sdpa_*`` is
  attention, not a convolution).
* SDPA backend: the op ``aten::scaled_dot_product_attention`` dispatches to
  (``_scaled_dot_product_flash_attention`` flash, ``_efficient_attention`` mem-efficient,
  ``_cudnn_attention`` cudnn, ``_scaled_dot_product_attention_math`` or none of them
  math), else the kernels' names; ``explicit_mask``: its ``attn_mask`` input has a shape
  (``record_shapes``).
* channels_last: convolution kernels on NHWC tensors (``nhwc`` in the name) with no layout
  conversion kernel (``nchwToNhwc``) beside them.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .. import namerx
from ..table import scan_name
from .busy import LAYOUT_PATTERN, is_simt, is_tf32_kernel
from .common import kind_in, name_codes, name_table, rows_of
from .factkit import Stacks, Steps, item, rows_named
from .kernel_classes import _classify_one

FP8_RX = namerx.compile(r"(?i)e4m3|e5m2|fp8|^nvjet_(?:sm\d+_)?[eq][a-z]{2}_")
BF16_RX = namerx.compile(r"(?i)bf16|bfloat16|^nvjet_(?:sm\d+_)?t[a-z]{2}_")
FP16_RX = namerx.compile(r"(?i)fp16|f16|half|h1688|h16816|h884|hgemm|^nvjet_(?:sm\d+_)?h[a-z]{2}_")
CONV_OP_RX = namerx.compile(r"^aten::(?:_?convolution|(?:cudnn|miopen|mkldnn)_convolution\w*"
                            r"|conv[123]d|conv_transpose[123]d|convolution_backward"
                            r"|_convolution_mode|conv_tbc)$")
CONV_KERNEL_RX = namerx.compile(r"(?i)implicit_?convolve|scudnn|winograd|conv(?:olution)?_?(?:fwd|bwd)"
                                r"|_conv[123]d|conv2d|dgrad|wgrad|fprop|grouped_conv|naive_conv"
                                r"|miopen.*conv|igemm_(?:fwd|bwd|wrw)")
ATTENTION_KERNEL_RX = namerx.compile(r"(?i)sdpa|fmha|flash|attn|attention|mha_")
SDPA_OP_RX = namerx.compile(r"^aten::scaled_dot_product_attention$")
SDPA_BACKEND_OPS = tuple((b, namerx.compile(p)) for b, p in (
    ("flash", r"^aten::_scaled_dot_product_flash_attention(?:_for_cpu)?$|^aten::_flash_attention_forward$"),
    ("mem_efficient", r"^aten::_scaled_dot_product_efficient_attention$|^aten::_efficient_attention_forward$"),
    ("cudnn", r"^aten::_scaled_dot_product_cudnn_attention$"),
    ("fused", r"^aten::_scaled_dot_product_fused_attention_overrideable$"),
    ("math", r"^aten::_scaled_dot_product_attention_math(?:_for_mps)?$"),
))
SDPA_BACKEND_KERNELS = tuple((b, namerx.compile(p)) for b, p in (
    ("cudnn", r"(?i)cudnn_generated_fort_native_sdpa|cudnn.*sdpa"),
    ("flash", r"(?i)pytorch_flash::|flash_fwd|flash_bwd|flash_attn"),
    ("mem_efficient", r"(?i)fmha_cutlass|efficient_attention|mem_eff"),
))
NHWC_RX = namerx.compile(r"(?i)nhwc")
# cuDNN's layout conversions; MIOpen's are its batched_transpose kernels around an NHWC
# solver's convolution (igemm_fwd_gtcx3_nhwc, CK grouped_conv) on NCHW tensors
LAYOUT_RX = namerx.compile(LAYOUT_PATTERN)
GEMM_OP_RX = namerx.compile(r"^aten::(?:linear|matmul|mm|addmm|bmm|baddbmm|conv[123]d"
                            r"|convolution|_convolution|scaled_dot_product_attention|einsum)$")
CAST_RX = namerx.compile(r"^aten::(?:to|_to_copy)$")
LOWP_CODES = {15: "bf16", 5: "fp16"}
_AUTOCAST_SAMPLE = 400


def gemm_kernel_precision(name: str) -> str:
    """fp8 / bf16 / fp16 / tf32 / fp32 for a GEMM (or conv) kernel name."""
    n = scan_name(name)
    if FP8_RX.search(n):
        return "fp8"
    if BF16_RX.search(n):
        return "bf16"
    if FP16_RX.search(n):
        return "fp16"
    if is_tf32_kernel(n):
        return "tf32"
    if is_simt(n):
        return "fp32"
    return "unknown"


def precision_facts(ev: pd.DataFrame, steps: Steps | None = None,
                    stacks: Stacks | None = None) -> dict:
    steps = steps or Steps(ev)
    out: dict = {"evidence": {}}
    try:
        out.update(_gemm_precision(ev, out["evidence"]))
        out.update(_autocast(ev, out["evidence"], stacks))
        out.update(_convolutions(ev, steps, out["evidence"]))
        out.update(_sdpa(ev, steps, out["evidence"]))
    finally:
        _KERNELS.clear()   # the window's events are not held past this pass
    return out


_KERNELS: list = []   # [(the events, their kernel table)] while precision_facts runs (4 asks)


def _kernel_table(ev: pd.DataFrame) -> pd.DataFrame:
    """Per distinct kernel name (first-seen order; unnamed kernels left out): name, ns
    (summed), ts (first start). Grouped by name code, names from the shared table."""
    if _KERNELS and _KERNELS[0][0] is ev:
        return _KERNELS[0][1]
    rows = rows_of(ev, ("kernel",))
    codes = name_codes(ev["name"]).take(rows)
    keep = codes >= 0
    rows, codes = rows[keep], codes[keep]
    if not len(rows):
        out = pd.DataFrame({"name": [], "ns": [], "ts": []})
    else:
        df = pd.DataFrame({"c": codes, "ns": ev["dur"].to_numpy(np.int64)[rows],
                           "ts": ev["ts"].to_numpy(np.int64)[rows]})
        g = df.groupby("c", sort=False).agg(ns=("ns", "sum"), ts=("ts", "min"))
        names = name_table(ev["name"]).names
        out = pd.DataFrame({"name": [names[c] for c in g.index.tolist()],
                            "ns": g["ns"].to_numpy(np.int64), "ts": g["ts"].to_numpy(np.int64)})
    _KERNELS[:] = [(ev, out)]
    return out


def _gemm_precision(ev, evidence) -> dict:
    k = _kernel_table(ev)
    by: dict[str, int] = {}
    first: dict[str, tuple] = {}
    for n, ns, t in zip(k["name"], k["ns"], k["ts"]):
        if _classify_one(n) != "gemm" or ATTENTION_KERNEL_RX.search(scan_name(n)):
            continue
        p = gemm_kernel_precision(n)
        by[p] = by.get(p, 0) + int(ns)
        if p not in first or ns > first[p][1]:
            first[p] = (n, int(ns), int(t))
    evidence["gemm_precision"] = [item(n, t, None, f"{p} GEMM kernel: {ns / 1e6:.2f} ms")
                                  for p, (n, ns, t) in first.items()]
    return {"gemm_precision_ns": by}


def _autocast(ev, evidence, stacks: Stacks | None = None) -> dict:
    casts = rows_named(ev, CAST_RX, ("cpu_op",))
    if not len(casts) or "concrete_inputs" not in ev:
        return {"autocast": None}
    conc = ev["concrete_inputs"].take(casts).astype(object).to_numpy()
    lowp = []
    for r, c in zip(casts.tolist(), conc.tolist()):
        code = _dtype_code(c)
        if code in LOWP_CODES:
            lowp.append((r, LOWP_CODES[code]))
    if not lowp:
        return {"autocast": None}
    stacks = stacks or Stacks(ev, ("cpu_op",))
    is_op = kind_in(ev, ("cpu_op",))
    seen: dict[str, tuple] = {}
    for r, dt in lowp[:_AUTOCAST_SAMPLE]:
        around = [a for a in stacks.around_row(r).tolist() if is_op[a]]
        if not around:
            continue
        parent = str(ev["name"].iat[around[-1]])
        if GEMM_OP_RX.search(parent) and dt not in seen:
            seen[dt] = (parent, int(stacks.ts[r]))
    if not seen:
        return {"autocast": None}
    dt = "bf16" if "bf16" in seen else "fp16"
    evidence["autocast"] = [item(p, t, None, f"inputs cast to {d} inside {p}: torch.autocast")
                            for d, (p, t) in seen.items()]
    return {"autocast": dt}


def _dtype_code(c) -> int | None:
    if not isinstance(c, str):
        return None
    try:
        v = json.loads(c)
    except ValueError:
        return None
    if isinstance(v, list) and len(v) > 1:
        try:
            return int(v[1])
        except (TypeError, ValueError):
            return None
    return None


def _convolutions(ev, steps: Steps, evidence) -> dict:
    ops = rows_named(ev, CONV_OP_RX, ("cpu_op",))
    host_ops = bool(len(rows_named(ev, namerx.compile(r"^aten::"), ("cpu_op",))))
    if len(ops):
        ops = _outermost(ev, ops)   # aten::convolution > aten::cudnn_convolution: one call
        evidence["convolutions"] = [item(ev["name"].iat[r], ev["ts"].iat[r],
                                         steps.of(ev["pid"].to_numpy()[[r]],
                                                  ev["ts"].to_numpy()[[r]])[0],
                                         "convolution operator")
                                    for r in ops[:2].tolist()]
        return {"convolution_ops": True, "convolution_ops_per_step":
                round(len(ops) / steps.count(), 1),
                "channels_last": _channels_last(ev, evidence)}
    if host_ops:   # operators traced and none is a convolution
        return {"convolution_ops": False, "convolution_ops_per_step": 0.0,
                "channels_last": None}
    k = _kernel_table(ev)
    conv = [(n, t) for n, t in zip(k["name"], k["ts"])
            if CONV_KERNEL_RX.search(scan_name(n)) and not ATTENTION_KERNEL_RX.search(scan_name(n))]
    if conv:
        evidence["convolutions"] = [item(n, t, None, "convolution kernel (no operators traced)")
                                    for n, t in conv[:2]]
        return {"convolution_ops": True, "convolution_ops_per_step": None,
                "channels_last": _channels_last(ev, evidence)}
    return {"convolution_ops": False if len(k) else None, "convolution_ops_per_step": None,
            "channels_last": None}


def _outermost(ev, rows: np.ndarray) -> np.ndarray:
    """The rows not nested in an earlier one of ``rows`` on the same thread."""
    from .factkit import thread_key

    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    key = thread_key(ev, rows)
    keep = np.ones(len(rows), bool)
    for t in np.unique(key).tolist():
        idx = np.flatnonzero(key == t)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        reach = np.maximum.accumulate(end[idx])
        prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
        keep[idx] = end[idx] > prev
    return rows[keep]


def _channels_last(ev, evidence: dict) -> bool | None:
    """True: the convolution kernels run on NHWC tensors and no layout conversion runs;
    False: a layout conversion kernel runs (the tensors are NCHW); None: no convolution
    kernel. Its evidence: the kernel that decided."""
    k = _kernel_table(ev)
    if not len(k):
        return None
    rows = list(zip((scan_name(n) for n in k["name"]), k["name"], k["ts"].tolist()))
    layout = next((r for r in rows if LAYOUT_RX.search(r[0])), None)
    if layout is not None:
        evidence["channels_last"] = [item(layout[1], layout[2], None,
                                          "layout conversion kernel: NCHW tensors")]
        return False
    conv = [r for r in rows if CONV_KERNEL_RX.search(r[0]) and not ATTENTION_KERNEL_RX.search(r[0])]
    if not conv:
        return None
    nhwc = next((r for r in conv if NHWC_RX.search(r[0])), None)
    if nhwc is not None:
        evidence["channels_last"] = [item(nhwc[1], nhwc[2], None,
                                          "NHWC convolution kernel, no layout conversion")]
    return nhwc is not None


def _sdpa(ev, steps: Steps, evidence) -> dict:
    calls = rows_named(ev, SDPA_OP_RX, ("cpu_op",))
    backend, b_ev = None, None
    for b, rx in SDPA_BACKEND_OPS:
        r = rows_named(ev, rx, ("cpu_op",))
        if len(r):
            backend, b_ev = b, (str(ev["name"].iat[r[0]]), int(ev["ts"].iat[r[0]]))
            break
    if backend is None:
        k = _kernel_table(ev)
        for b, rx in SDPA_BACKEND_KERNELS:
            hit = [(n, t) for n, t in zip(k["name"], k["ts"]) if rx.search(scan_name(n))]
            if hit:
                backend, b_ev = b, (hit[0][0], int(hit[0][1]))
                break
    if backend is None and len(calls):
        backend = "math"     # the op ran and no fused backend op or kernel did
        b_ev = (str(ev["name"].iat[calls[0]]), int(ev["ts"].iat[calls[0]]))
    if backend is None:
        return {"sdpa": None}
    mask = None
    if len(calls) and "input_dims" in ev:
        dims = ev["input_dims"].take(calls[:50]).astype(object).tolist()
        seen = [_mask_shape(d) for d in dims]
        known = [s for s in seen if s is not None]
        if known:
            mask = any(known)
    evidence["sdpa"] = [item(b_ev[0], b_ev[1], None, f"SDPA backend: {backend}")]
    if mask:
        r = calls[0]
        evidence["sdpa"].append(item(ev["name"].iat[r], ev["ts"].iat[r], None,
                                     f"attn_mask input of shape {json.loads(dims[0])[3]}"))
    return {"sdpa": {"backend": backend, "explicit_mask": mask,
                     "calls_per_step": round(len(calls) / steps.count(), 1)}}


def _mask_shape(d) -> bool | None:
    """Whether SDPA's 4th input (attn_mask) has a shape; None: not recorded."""
    if not isinstance(d, str):
        return None
    try:
        v = json.loads(d)
    except ValueError:
        return None
    if not isinstance(v, list) or len(v) < 4:
        return None
    return bool(v[3])
