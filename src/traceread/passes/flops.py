"""FLOPs per operator from recorded shapes, achieved TFLOP/s and MFU.

Kineto records ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` for every
cpu_op when the profiler runs with ``record_shapes=True`` (table columns
``input_dims``, ``input_type``, ``concrete_inputs``). From them we count the
FLOPs of the operators that do the heavy arithmetic, with the conventions of
``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs; bias adds, softmax
and scaling are not counted; attention backward = 2x forward):

* ``aten::mm`` [M,K]x[K,N], ``addmm`` (bias first): 2MKN
* ``aten::bmm`` [B,M,K]x[B,K,N], ``baddbmm``: 2BMKN
* ``aten::convolution`` / ``_convolution``: 2 N Cout prod(out) (Cin/groups) prod(k),
  output size from stride/padding/dilation in ``Concrete Inputs``;
  ``convolution_backward``: that once per requested gradient (input, weight)
* ``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention`` (and the CPU
  flash kernel) on q [B,H,Sq,D], k/v [B,H,Sk,D]: 4 B H Sq Sk D; their
  ``_backward``: twice that
* a ``flops`` arg written by the profiler wins over the formula.

Operators recorded while their thread captures a CUDA graph
(``cudaStreamBeginCapture`` .. ``EndCapture``) are left out: their kernels
only run at replay, where no operator is recorded.

Composite operators (``aten::linear``, ``matmul``, ``conv2d``,
``scaled_dot_product_attention``) dispatch to the ones above, which are
recorded as their children: only the innermost counted operator of a nesting
counts, so nothing is counted twice (and an unknown composite whose children
are counted is still right).
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

import msgspec
import numpy as np
import pandas as pd

from . import intervals
from .common import device_groups, events_of, kind_in, lookup_at, rows_of, take

HOW_TO_RECORD = ("no operator shapes in this trace: record with "
                 "torch.profiler.profile(record_shapes=True) to get FLOPs and MFU")

_MM = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::_addmm_activation": (1, 2),
       "aten::bmm": (0, 1), "aten::baddbmm": (1, 2), "aten::addbmm": (1, 2),
       "aten::_scaled_mm": (0, 1)}
_CONV = ("aten::convolution", "aten::_convolution")
_SDPA = ("aten::_scaled_dot_product_flash_attention",
         "aten::_scaled_dot_product_efficient_attention",
         "aten::_scaled_dot_product_cudnn_attention",
         "aten::_scaled_dot_product_flash_attention_for_cpu",
         "aten::_scaled_dot_product_fused_attention_overrideable")
FLOP_OPS = frozenset(_MM) | frozenset(_CONV) | {"aten::convolution_backward"} \
    | frozenset(_SDPA) | frozenset(s + "_backward" for s in _SDPA)

# Input type -> dtype key of the peak table.
_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
           "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
           "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "c10::qint8": "int8"}


def _json(text):
    if not isinstance(text, str):
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs)


def _mm_flops(name: str, dims: list) -> int:
    a, b = _MM[name]
    x, w = dims[a], dims[b]
    if len(x) < 2 or len(w) < 2:
        return -1
    batch = _prod(x[:-2]) if len(x) > 2 else 1
    return 2 * batch * x[-2] * x[-1] * w[-1]


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _list(v, n: int, default: int) -> list:
    """A Concrete Inputs value ("[2, 2]", "1", "") as n ints."""
    parsed = _json(v) if isinstance(v, str) and v else None
    if isinstance(parsed, list) and parsed:
        vals = [int(x) for x in parsed]
        return (vals * n)[:n] if len(vals) == 1 else vals[:n]
    if isinstance(parsed, (int, float)):
        return [int(parsed)] * n
    return [default] * n


def _conv_flops(dims: list, conc: list | None, transposed: bool | None = None) -> int:
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x):
        return -1
    nsp = len(x) - 2
    c = conc or []
    get = lambda i: c[i] if i < len(c) else ""  # noqa: E731
    stride, pad, dil = _list(get(3), nsp, 1), _list(get(4), nsp, 0), _list(get(5), nsp, 1)
    if transposed is None:
        transposed = get(6) == "True"
    groups = _list(get(8), 1, 1)[0] or 1
    k = w[2:]
    if transposed:  # weight [Cin, Cout/groups, k...]: the FLOPs of the matching forward conv
        return 2 * x[0] * x[1] * _prod(x[2:]) * w[1] * _prod(k)
    out = [_conv_out(x[2 + i], k[i], stride[i], pad[i], dil[i]) for i in range(nsp)]
    return 2 * x[0] * w[0] * _prod(out) * (x[1] // groups) * _prod(k)


def _conv_backward_flops(dims: list, conc: list | None) -> int:
    """convolution_backward(grad_out, input, weight, ...): grad_out holds the output size."""
    g, x, w = dims[0], dims[1], dims[2]
    if len(g) < 3 or len(x) != len(g) or len(w) != len(g):
        return -1
    c = conc or []
    mask = _json(c[10]) if len(c) > 10 and c[10] else None
    groups = _list(c[9] if len(c) > 9 else "", 1, 1)[0] or 1
    transposed = len(c) > 7 and c[7] == "True"
    if transposed:
        one = 2 * g[0] * x[1] * _prod(x[2:]) * w[1] * _prod(w[2:])
    else:
        one = 2 * g[0] * g[1] * _prod(g[2:]) * (x[1] // groups) * _prod(w[2:])
    if isinstance(mask, list) and len(mask) >= 2:
        n = int(bool(mask[0])) + int(bool(mask[1]))
    else:
        n = 2
    return one * n


# where is_causal sits in each SDPA operator's arguments (its ATen schema)
_CAUSAL_ARG = {"aten::_scaled_dot_product_flash_attention": 4,
               "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
               "aten::_scaled_dot_product_efficient_attention": 6,
               "aten::_scaled_dot_product_cudnn_attention": 6,
               "aten::_scaled_dot_product_fused_attention_overrideable": 5,
               "aten::_scaled_dot_product_flash_attention_backward": 11,
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 7,
               "aten::_scaled_dot_product_efficient_attention_backward": 11,
               "aten::_scaled_dot_product_cudnn_attention_backward": 14,
               "aten::_scaled_dot_product_fused_attention_overrideable_backward": 11}


def causal_of(name: str, conc: list | None) -> bool:
    """The SDPA call's is_causal argument (recorded Concrete Inputs); False when absent."""
    i = _CAUSAL_ARG.get(name)
    return bool(i is not None and isinstance(conc, list) and len(conc) > i
                and str(conc[i]) == "True")


def causal_kept(sq: int, sk: int) -> int:
    """Scores of the sq x sk matrix a causal (top-left aligned, torch's is_causal) mask
    keeps: row i sees min(i + 1, sk) keys."""
    n = min(sq, sk)
    return n * (n + 1) // 2 + max(0, sq - sk) * sk


def causal_fraction(sq: int, sk: int) -> float:
    """Share of the sq x sk score matrix a causal mask keeps (``causal_kept``)."""
    if sq <= 0 or sk <= 0:
        return 1.0
    return causal_kept(sq, sk) / (sq * sk)


def _sdpa_flops(dims: list, backward: bool, causal: bool = False) -> int:
    q, k, v = dims[1:4] if backward else dims[0:3]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return -1
    b, h, sq, d = q
    sk, dv = k[2], v[3]
    scores = causal_kept(sq, sk) if causal and sq > 0 and sk > 0 else sq * sk
    # causal: the masked half of the scores is never computed (flash / causal kernels)
    fwd = 2 * b * h * scores * d + 2 * b * h * scores * dv
    return 2 * fwd if backward else fwd


@lru_cache(maxsize=65536)
def flops_of(name: str, dims_text: str | None, conc_text: str | None) -> int:
    """FLOPs of one operator call from its recorded shapes; -1 when not countable."""
    dims = _json(dims_text)
    if not isinstance(dims, list) or not all(isinstance(d, list) for d in dims):
        return -1
    try:
        if name in _MM:
            return _mm_flops(name, dims)
        if name in _CONV:
            return _conv_flops(dims, _json(conc_text))
        if name == "aten::convolution_backward":
            return _conv_backward_flops(dims, _json(conc_text))
        base = name[:-9] if name.endswith("_backward") else name
        if base in _SDPA:
            return _sdpa_flops(dims, name != base, causal_of(name, _json(conc_text)))
    except (IndexError, TypeError, ValueError):
        return -1
    return -1


@lru_cache(maxsize=4096)
def dtype_of(types_text: str | None) -> str:
    """Dtype key of an op from its ``Input type`` list (the first floating tensor)."""
    types = _json(types_text)
    if isinstance(types, list):
        for t in types:
            if t in _DTYPES:
                return _DTYPES[t]
    return "unknown"


OP_COLUMNS = ("ts", "dur", "pid", "tid", "name", "flops", "dtype")


def op_flops(trace_or_events) -> pd.DataFrame:
    """One row per counted operator call (innermost of a nesting), in ts order.

    Columns: ts, dur, pid, tid (host), name, flops (int), dtype (bf16, fp16, fp32, ...).
    """
    ev = events_of(trace_or_events)
    if "input_dims" not in ev:
        return _empty()
    rows = rows_of(ev, ("cpu_op",))
    counted = lookup_at(ev["name"], rows, lambda n: n in FLOP_OPS, False, bool)
    rows = rows[counted | (ev["flops"].to_numpy().take(rows) >= 0)]
    c = take(ev, rows, ["ts", "dur", "pid", "tid", "name", "input_dims", "input_type",
                        "concrete_inputs", "flops"])
    if not len(c):
        return _empty()
    # an op's FLOPs depend on its (name, shapes, scalar args) only: once per distinct triple
    fl = _per_distinct(c[["name", "input_dims", "concrete_inputs"]],
                       lambda n, d, k: flops_of(n, d, k), np.int64)
    fl = np.where(c["flops"].to_numpy() >= 0, c["flops"].to_numpy(), fl)
    out = pd.DataFrame({"ts": c["ts"].to_numpy(), "dur": c["dur"].to_numpy(),
                        "pid": c["pid"].to_numpy(), "tid": c["tid"].to_numpy(),
                        "name": c["name"].astype(str).to_numpy(), "flops": fl,
                        "dtype": _per_distinct(c[["input_type"]], dtype_of, object).tolist()})
    out = out[out["flops"] >= 0]
    out = out[~_in_capture(ev, out)]
    return _innermost(out).reset_index(drop=True)


def _per_distinct(cols: pd.DataFrame, fn, dtype) -> np.ndarray:
    """``fn(*row)`` of each row of categorical ``cols`` (None for a null), called once per
    distinct combination of their codes."""
    cols = {c: s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")
            for c, s in cols.items()}
    codes = [s.cat.codes.to_numpy().astype(np.int64) for s in cols.values()]
    cats = [np.array(list(s.cat.categories.astype(object)) + [None], dtype=object)
            for s in cols.values()]
    at = codes[0] + 1
    for c, cat in zip(codes[1:], cats[1:]):   # re-coded each step: the key stays < rows x cats
        at = pd.factorize(at)[0].astype(np.int64) * (len(cat) + 1) + c + 1
    at, uniq = pd.factorize(at)
    first = np.zeros(len(uniq), np.int64)
    first[at[::-1]] = np.arange(len(at))[::-1]       # a row of each combination
    vals = [fn(*(cat[c[i]] for c, cat in zip(codes, cats))) for i in first.tolist()]
    return np.array(vals, dtype=dtype).take(at) if dtype is not object else \
        _objects(vals).take(at)


def _objects(vals: list) -> np.ndarray:
    out = np.empty(len(vals), object)
    out[:] = vals
    return out


_CAPTURE = re.compile(r"^(?:cuda|hip)StreamBeginCapture|^cuStreamBeginCapture")
_CAPTURE_END = re.compile(r"^(?:cuda|hip)StreamEndCapture|^cuStreamEndCapture")


def _in_capture(ev: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Ops recorded while their thread captured a CUDA graph: their kernels did not run then."""
    hit = np.zeros(len(ops), bool)
    rows = rows_of(ev, ("runtime", "driver"))
    is_begin = lookup_at(ev["name"], rows, lambda n: bool(_CAPTURE.match(n)), False, bool)
    if not is_begin.any():
        return hit
    is_end = lookup_at(ev["name"], rows, lambda n: bool(_CAPTURE_END.match(n)), False, bool)
    begin = take(ev, rows[is_begin], ["ts", "pid", "tid", "name"])
    end = take(ev, rows[is_end], ["ts", "pid", "tid", "name"])
    pid, tid, ts = (ops[c].to_numpy() for c in ("pid", "tid", "ts"))
    for (p, t), b in begin.groupby(["pid", "tid"]):
        e = end[(end["pid"] == p) & (end["tid"] == t)]["ts"].to_numpy()
        for start in b["ts"].to_numpy():
            later = e[e > start]
            stop = later.min() if len(later) else np.iinfo(np.int64).max
            hit |= (pid == p) & (tid == t) & (ts >= start) & (ts < stop)
    return hit


def _innermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Drop an op that encloses another counted op on its thread (its child does the work)."""
    o = ops.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False],
                        kind="stable")
    pid, tid = o["pid"].to_numpy(), o["tid"].to_numpy()
    ts, end = o["ts"].to_numpy(), (o["ts"] + o["dur"]).to_numpy()
    nxt_same = np.zeros(len(o), bool)
    nxt_same[:-1] = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1])
    encloses = np.zeros(len(o), bool)
    encloses[:-1] = nxt_same[:-1] & (ts[1:] < end[:-1]) & (end[1:] <= end[:-1])
    return o[~encloses].sort_values("ts", kind="stable")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=object if c in ("name", "dtype") else np.int64)
                         for c in OP_COLUMNS})


def has_shapes(trace_or_events) -> bool:
    ev = events_of(trace_or_events)
    return "input_dims" in ev and bool(ev["input_dims"].notna().any())



# ---------------------------------------------------------------- achieved FLOP/s and MFU

def _tf32_used(ev: pd.DataFrame) -> bool:
    """fp32 matmuls run on tensor cores (TF32) when the GEMM kernels say so."""
    from .busy import is_tf32_kernel

    return bool(lookup_at(ev["name"], rows_of(ev, ("kernel",)), is_tf32_kernel, False,
                          bool).any())


def _window(ev: pd.DataFrame, steps: pd.DataFrame | None) -> pd.DataFrame:
    if steps is not None and len(steps) and "start" in steps:
        return steps
    from .steps import whole_trace_window

    return whole_trace_window(ev)


def _busy(ev: pd.DataFrame, w: pd.DataFrame) -> np.ndarray:
    """GPU busy ns per window row: ``busy_ns`` when the step table has it, else the union
    of GPU ops inside the row, per device, summed."""
    if "busy_ns" in w:
        return w["busy_ns"].to_numpy(np.int64)
    from . import intervals
    from ..table import GPU_OP_KINDS

    g = ev.loc[kind_in(ev, GPU_OP_KINDS), ["ts", "dur", "device"]]
    out = np.zeros(len(w), np.int64)
    for i, (a, b) in enumerate(zip(w["start"].to_numpy(), w["end"].to_numpy())):
        for _, d in g.groupby("device", sort=False):
            s = np.clip(d["ts"].to_numpy(np.int64), a, b)
            e = np.clip((d["ts"] + d["dur"]).to_numpy(np.int64), a, b)
            out[i] += intervals.total(intervals.union(s, e))
    return out


# Where a checkpointed segment's forward runs again under backward: the non-reentrant
# checkpoint's recompute_fn frame (with_stack), the reentrant CheckpointFunctionBackward node.
_RECOMPUTE = re.compile(r"checkpoint\.py\(\d+\): recompute_fn$|CheckpointFunctionBackward")
_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: |Backward\d*$")


def recomputed(ev: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Counted ops that recompute a checkpointed forward: inside a recompute range on their
    thread and not inside a backward node nested in it (the reentrant checkpoint runs the
    segment's backward there too)."""
    out = np.zeros(len(ops), bool)
    rows = rows_of(ev, ("cpu_op", "python", "annotation"))
    if not len(ops) or not len(rows):
        return out
    out |= _module_in_backward(ev, rows, ops)
    is_rc = lookup_at(ev["name"], rows, lambda x: bool(_RECOMPUTE.search(x)), False, bool)
    if not is_rc.any():
        return out
    rc = take(ev, rows[is_rc], ["ts", "dur", "pid", "tid", "name"])
    is_bw = lookup_at(ev["name"], rows, lambda x: bool(_BACKWARD.search(x)), False, bool)
    bw = take(ev, rows[is_bw], ["ts", "dur", "pid", "tid"])
    pid, tid, ts = (ops[c].to_numpy() for c in ("pid", "tid", "ts"))
    for r in rc.itertuples(index=False):
        inside = (pid == r.pid) & (tid == r.tid) & (ts >= r.ts) & (ts < r.ts + r.dur)
        if not inside.any() or "recompute_fn" in r.name:
            out |= inside
            continue
        nb = bw[(bw["pid"] == r.pid) & (bw["tid"] == r.tid) & (bw["ts"] > r.ts)
                & (bw["ts"] < r.ts + r.dur)]
        for b in nb.itertuples(index=False):
            inside &= ~((ts >= b.ts) & (ts < b.ts + b.dur))
        out |= inside
    return out


def _module_in_backward(ev: pd.DataFrame, rows: np.ndarray, ops: pd.DataFrame) -> np.ndarray:
    """Ops inside a module frame that runs inside a backward node (with_stack): the non-
    reentrant checkpoint recomputes the module's forward in the node's unpack hook."""
    out = np.zeros(len(ops), bool)
    is_mod = lookup_at(ev["name"], rows, lambda x: x.startswith("nn.Module: "), False, bool)
    if not is_mod.any():
        return out
    is_bw = lookup_at(ev["name"], rows, lambda x: bool(_BACKWARD.search(x)), False, bool)
    if not is_bw.any():
        return out
    mod = take(ev, rows[is_mod], ["ts", "dur", "pid", "tid"])
    bw = take(ev, rows[is_bw], ["ts", "dur", "pid", "tid"])
    pid, tid, ts = (ops[c].to_numpy() for c in ("pid", "tid", "ts"))
    for (p, t), b in bw.groupby(["pid", "tid"]):
        m = mod[(mod["pid"] == p) & (mod["tid"] == t)]
        if not len(m):
            continue
        bs, be = intervals.union(b["ts"].to_numpy(), (b["ts"] + b["dur"]).to_numpy())
        mt = m["ts"].to_numpy(np.int64)
        k = np.searchsorted(bs, mt, side="right") - 1
        inb = (k >= 0) & (mt < be[np.maximum(k, 0)])
        ms, me = intervals.union(mt[inb], (m["ts"] + m["dur"]).to_numpy(np.int64)[inb])
        if not len(ms):
            continue
        sel = (pid == p) & (tid == t)
        j = np.searchsorted(ms, ts[sel], side="right") - 1
        out[np.flatnonzero(sel)] = (j >= 0) & (ts[sel] < me[np.maximum(j, 0)])
    return out


_MATMUL_CLASSES = ("gemm_tensor", "gemm_simt", "attention")


def uncounted_matmuls(ev: pd.DataFrame, ops: pd.DataFrame, classes: dict,
                      window: tuple[int, int] | None = None) -> dict | None:
    """GEMM/attention kernel time that no counted operator launched (fp8/fp4 GEMMs inside
    custom ops, fused MoE, ...): their FLOPs are not in MFU. A kernel is covered when its
    launch call (same correlation id) lies inside a counted op on the same thread. None when
    no such kernel links to a launch call (nothing can be said)."""
    rows = rows_of(ev, ("kernel",))
    if window is not None:
        t = ev["ts"].to_numpy().take(rows)
        rows = rows[(t >= window[0]) & (t < window[1])]
    mm = lookup_at(ev["name"], rows, lambda x: classes.get(x) in _MATMUL_CLASSES, False, bool)
    rows = rows[mm]
    if not len(rows) or "correlation" not in ev:
        return None
    api = rows_of(ev, ("runtime", "driver"))
    a = take(ev, api, ["correlation", "ts", "pid", "tid"])
    a = a[a["correlation"] >= 0].drop_duplicates(["correlation", "pid"])
    # a GPU op's pid is its launching process's (docs/event-table.md): ids repeat across them
    k = take(ev, rows, ["correlation", "pid", "dur", "name"]).merge(
        a, on=["correlation", "pid"], how="left")
    linked = k["ts"].notna().to_numpy()
    if not linked.any():
        return None
    k = k[linked]
    covered = np.zeros(len(k), bool)
    lts, lpid, ltid = (k[c].to_numpy(np.int64) for c in ("ts", "pid", "tid"))
    for (p, t), o in ops.groupby(["pid", "tid"], sort=False):
        sel = np.flatnonzero((lpid == p) & (ltid == t))
        if not len(sel):
            continue
        o = o.sort_values("ts")
        s, e = o["ts"].to_numpy(np.int64), (o["ts"] + o["dur"]).to_numpy(np.int64)
        i = np.searchsorted(s, lts[sel], side="right") - 1
        ok = i >= 0
        covered[sel[ok]] = lts[sel[ok]] < e[i[ok]]
    miss = k[~covered]
    if not len(miss):
        return {"ns": 0, "kernels": []}
    top = miss.groupby("name")["dur"].sum().sort_values(ascending=False).head(3)
    return {"ns": int(miss["dur"].sum()),
            "kernels": [{"name": str(n), "ns": int(v)} for n, v in top.items()]}


def _tf32_headroom(ops, dt, k, peaks: dict, ideal: np.ndarray, time_gpus: int) -> float | None:
    """MFU with the fp32 matmuls measured against the TF32 peak instead of the FP32 one:
    what a badly used TF32 card looks like (None when no FP32 FLOPs or no TF32 peak)."""
    f32 = (dt == "fp32").to_numpy() & (k >= 0)
    if not f32.any() or not peaks.get("tf32") or not peaks.get("fp32") or not time_gpus:
        return None
    fl = ops["flops"].to_numpy(float)[f32].sum()
    shift = fl / peaks["fp32"] / 1e3 - fl / peaks["tf32"] / 1e3
    return float((ideal.sum() - shift) / time_gpus)


def _gpu_span(w: pd.DataFrame) -> np.ndarray:
    """Per window row, the span of the GPU work it launched (``gpu_start`` .. ``gpu_end`` of
    the step table; 0 when unknown -- the whole-trace window already covers its GPU ops)."""
    if "gpu_start" not in w or "gpu_end" not in w:
        return np.zeros(len(w), np.int64)
    gs, ge = w["gpu_start"].to_numpy(np.int64), w["gpu_end"].to_numpy(np.int64)
    return np.where((gs >= 0) & (ge > gs), ge - gs, 0)


def _refusal(ideal: float, busy: int, bad_steps: int, steps: int) -> str | None:
    """Why MFU is not given: the counted FLOPs would need longer at the dense peak than the
    GPUs were busy (MFU over busy time > 100%), in total or in some steps."""
    if busy and ideal > busy:
        return (f"MFU refused: the counted FLOPs need {ideal / busy:.2f}x the GPU-busy time at "
                "the dense peak -- their kernels are not all in the window, or the peak is "
                "wrong for this device (pass --peak-tflops)")
    if bad_steps:
        return (f"per step MFU refused in {bad_steps} of {steps} steps: their counted FLOPs "
                "need longer at the dense peak than their GPU-busy time (FLOPs counted in one "
                "step whose kernels ran in another)")
    return None


def _gpus(ev: pd.DataFrame) -> int:
    from ..table import GPU_OP_KINDS

    rows = rows_of(ev, GPU_OP_KINDS)
    return max(1, len(np.unique(device_groups(ev, rows)[0]))) if len(rows) else 1


def mfu_summary(trace, steps: pd.DataFrame | None = None,
                peak_tflops: float | None = None, meta=None, ops=None) -> dict:
    """Achieved TFLOP/s (over the step time and over GPU-busy time) and MFU, per step and in
    total.

    ``steps``: rows with start/end/dur (and gpu_start/gpu_end/busy_ns of the step table) --
    the analysis window; the whole trace when None. A step's time is the longer of its host
    span and the span of the GPU work it launched (the host runs ahead of a GPU-bound
    step); MFU = (sum over ops of FLOPs / their dtype's peak) / (time x GPUs). A step whose
    FLOPs need longer at peak than its busy time gets no figures (``refused`` says why).
    ``ops``: ``op_flops(trace)`` when the caller has it already.
    """
    from .peaks import device_caps, device_peaks
    from .steps import assign_steps

    ev = events_of(trace)
    meta = meta if meta is not None else getattr(trace, "meta", None)
    caps = device_caps(meta)
    name = caps["name"]
    out: dict = {"has_shapes": has_shapes(ev), "device": name, "note": None}
    if not out["has_shapes"]:
        out["note"] = HOW_TO_RECORD
        return out
    ops = op_flops(ev) if ops is None else ops
    tf32 = caps["tf32"] is not False and _tf32_used(ev)
    dt = ops["dtype"].where(ops["dtype"] != "fp32", "tf32" if tf32 else "fp32")
    by_dtype = {str(k): int(v) for k, v in ops.groupby(dt)["flops"].sum().items()}
    dominant = max(by_dtype, key=by_dtype.get) if by_dtype else "unknown"
    table = device_peaks(name, caps)
    peaks = dict(table or {})
    if peak_tflops:
        peaks = {d: float(peak_tflops) for d in set(by_dtype) | {dominant}}
    peak = peaks.get(dominant)
    per_op_peak = dt.map(lambda d: peaks.get(d, peak)).to_numpy(dtype=float)
    ideal_ns = ops["flops"].to_numpy(float) / np.where(per_op_peak > 0, per_op_peak, np.nan) / 1e3

    w = _window(ev, steps)
    k = assign_steps(w, ops["pid"].to_numpy(), ops["ts"].to_numpy())
    n = len(w)
    m = k >= 0
    flops = np.bincount(k[m], weights=ops["flops"].to_numpy(float)[m], minlength=n)[:n]
    ideal = np.bincount(k[m], weights=np.nan_to_num(ideal_ns[m]), minlength=n)[:n]
    # MFU counts the model's FLOPs once: recomputed forward ops (activation checkpointing)
    # count in HFU only
    again = recomputed(ev, ops) & m
    ideal_again = np.bincount(k[again], weights=np.nan_to_num(ideal_ns[again]), minlength=n)[:n]
    host = w["dur"].to_numpy(np.int64)
    span = _gpu_span(w)
    # the program's step (steps.program_columns): the GPU's time when the host runs ahead
    wall = w["program_ns"].to_numpy(np.int64) if "program_ns" in w else np.maximum(host, span)
    busy = _busy(ev, w)
    gpus = _gpus(ev)
    # never shorter than the GPU work counted in it: the step's ops attributed by launch
    # (program_ns) and by time (busy) can differ on a step whose work spills over
    wall = np.maximum(wall, busy // max(gpus, 1))
    per_step = pd.DataFrame({"step": w["step"].to_numpy() if "step" in w else np.arange(n),
                             "flops": flops.astype(np.int64), "dur": host, "gpu_span_ns": span,
                             "time_ns": wall, "busy_ns": busy})
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step["tflops_wall"] = np.where(wall > 0, flops / wall / 1e3, np.nan)
        per_step["tflops_gpu"] = np.where(busy > 0, flops * gpus / busy / 1e3, np.nan)
        per_step["mfu"] = np.where((wall > 0) & bool(peak), (ideal - ideal_again) / (wall * gpus),
                                   np.nan)
        # the counted FLOPs need more time at peak than the GPUs were busy: impossible
        bad = bool(peak) & (ideal > busy) & (flops > 0)
    per_step.loc[bad, ["tflops_wall", "tflops_gpu", "mfu"]] = np.nan
    tot_f, tot_w, tot_b = float(flops.sum()), int(wall.sum()), int(busy.sum())
    refused = _refusal(float(ideal.sum()), tot_b, int(bad.sum()), n) if peak else None
    mfu_tf32 = _tf32_headroom(ops, dt, k, peaks, ideal, tot_w * gpus) \
        if not peak_tflops and caps["tf32"] is not False else None
    calls = ops.groupby("name")["flops"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    whole_ok = refused is None or refused.startswith("per step")
    out.update({
        "gpus": gpus, "dtype": dominant, "tf32": tf32, "flops": int(tot_f),
        "flops_by_dtype": by_dtype, "counted_ops": int(len(ops)),
        "peak_tflops": peak, "peak_source": ("override" if peak_tflops else
                                             "table" if table else None),
        "window_ns": tot_w, "host_ns": int(host.sum()), "gpu_span_ns": int(span.sum()),
        "gpu_busy_ns": tot_b,
        "tflops_wall": tot_f / tot_w / 1e3 if tot_w and whole_ok else None,
        "tflops_gpu": tot_f * gpus / tot_b / 1e3 if tot_b and whole_ok else None,
        "mfu": float((ideal.sum() - ideal_again.sum()) / (tot_w * gpus))
        if tot_w and peak and whole_ok else None,
        "recomputed_flops": int(ops["flops"].to_numpy()[again].sum()),
        "hfu": float(ideal.sum() / (tot_w * gpus))
        if tot_w and peak and whole_ok and again.any() else None,
        "refused": refused, "mfu_if_tf32": mfu_tf32 if whole_ok else None,
        "top_ops": [{"name": str(nm), "flops": int(r["sum"]), "calls": int(r["size"]),
                     "pct": 100.0 * float(r["sum"]) / tot_f if tot_f else 0.0}
                    for nm, r in calls.head(5).iterrows()],
        "steps": per_step,
    })
    notes = []
    if not len(ops):
        notes.append("no matmul, convolution or attention operator with shapes in the window")
    elif table is None and not peak_tflops:
        notes.append(f"no peak known for device {name!r}: pass --peak-tflops for MFU"
                     if name else "no device name in the trace: pass --peak-tflops for MFU")
    elif peak is None and not peak_tflops:
        notes.append(f"no {dominant} peak listed for {name!r}: pass --peak-tflops for MFU")
    if refused:
        notes.append(refused)
    elif mfu_tf32 is not None and out["mfu"] is not None:
        notes.append(f"fp32 matmuls run on CUDA cores (FP32, {peaks['fp32']:g} TFLOP/s): MFU "
                     f"{100 * out['mfu']:.1f}% against FP32 would be {100 * mfu_tf32:.1f}% against "
                     f"the TF32 peak ({peaks['tf32']:g}) this device has -- "
                     "torch.set_float32_matmul_precision('high') would use it")
    if _graph_replays(ev):
        out["lower_bound"] = "graph replays"
        notes.append("kernels replayed from CUDA graphs have no recorded operator shapes: their "
                     "FLOPs are not counted, so achieved FLOP/s and MFU are lower bounds")
    out["note"] = "; ".join(notes) or None
    # bytes moved and bandwidth share of the top matmul kernels (passes/roofline.py)
    from .roofline import matmul_roofline
    out["roofline"] = matmul_roofline(ev, name, peaks, ops)
    return out


def _graph_replays(ev: pd.DataFrame) -> bool:
    from .common import GRAPH_LAUNCH_RX

    if bool((ev["kind"] == "graph").any()):
        return True
    return bool(lookup_at(ev["name"], rows_of(ev, ("runtime", "driver")),
                          lambda n: bool(GRAPH_LAUNCH_RX.match(n)), False, bool).any())
