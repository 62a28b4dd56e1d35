"""The busy-time levers, the allocator levers and the GPU-use headline: judgement on the
figures the passes measured (passes/busy.py, passes/memory.py, in the facts record).

Each busy-time lever says what it would save, with a deliberately simple what-if model
(each estimate says its assumption):

* **TF32** (``torch.backends.cuda.matmul.allow_tf32 = True`` /
  ``torch.set_float32_matmul_precision('high')``) when FP32 SIMT GEMMs run:
  their time x (1 - fp32 peak / tf32 peak) -- the GEMMs keep the same
  fraction of the (higher) tensor-core peak.
* **bf16 autocast** (fp16 on devices without bf16, e.g. V100/T4) when the
  matmuls are fp32/TF32 (op dtypes, or f32 kernel names): SIMT GEMM time x
  (1 - fp32 peak / bf16 peak) + TF32 GEMM time x (1 - tf32 peak / bf16 peak).
  TF32 and autocast are alternatives for the same GEMMs: do not add them up.
  Unknown devices use fp32 : tf32 : bf16 = 1 : 4 : 8.
* **SDPA / flash attention** when attention is unfused (softmax kernels run
  and no fused attention kernel does): the softmax time, which a fused
  kernel never writes to memory (a lower bound: the bmm's traffic goes too).
* **channels_last** when the convolution library converts layouts (cuDNN's ``nchwToNhwc``,
  MIOpen's ``batched_transpose`` kernels): the
  conversion time.
* **torch.compile** when elementwise + reduction/norm kernels take over a
  quarter of the busy time: half of that time (fusion typically halves the
  memory traffic of chains of pointwise ops).

The lever table (levers.py) offers these in the verdict's to-do list under its own
predicates; ``utilization.busy.levers`` lists every one that has a saving.
"""
from __future__ import annotations


def _lever(name: str, why: str, saving: float, total: int, assumption: str) -> dict:
    return {"lever": name, "why": why, "saving_ns": int(saving),
            "saving_pct_of_busy": 100.0 * saving / total, "assumption": assumption}


def busy_levers(f: dict | None) -> list[dict]:
    """The busy-time levers with a saving, largest first, from ``passes.busy``'s figures."""
    if not f or not f.get("busy_ns"):
        return []
    total, t, p, src = f["busy_ns"], f["class_ns"], f["peaks"], f["peak_source"]
    simt, f32_tc = f["fp32_gemm_ns"], f["tf32_gemm_ns"]
    levers = []
    if simt > 0.05 * total and p["tf32"]:
        levers.append(_lever(
            "tf32", f"FP32 SIMT GEMMs (sgemm/ffma kernels) take {100 * simt / total:.0f}% "
            "of GPU busy time", simt * (1 - p["fp32"] / p["tf32"]), total,
            f"GEMMs run at the same fraction of the TF32 peak ({src}); "
            "torch.set_float32_matmul_precision('high')"))
    simt_f32 = simt if (f["fp32_ops"] or not p["tf32"]) else 0
    lowp_saving = simt_f32 * (1 - p["fp32"] / p["lowp"]) if p["lowp"] else 0
    if p["tf32"] and p["lowp"]:
        lowp_saving += f32_tc * (1 - p["tf32"] / p["lowp"])
    if (simt_f32 + f32_tc) > 0.1 * total and lowp_saving > 0:
        dt = p["lowp_dtype"]
        how = ("torch.autocast('cuda', dtype=torch.bfloat16)" if dt == "bf16" else
               "torch.autocast('cuda', dtype=torch.float16) with a torch.amp.GradScaler when "
               f"training ({f['device'] or 'this device'} has no fast bf16)")
        levers.append(_lever(
            f"{dt}_autocast", f"fp32/TF32 matmuls take {100 * (simt_f32 + f32_tc) / total:.0f}% "
            "of busy time", lowp_saving, total,
            f"matmuls at the same fraction of the {dt} peak ({src}); {how}"))
    softmax = f["softmax_ns"]
    if softmax > 0.02 * total and t["attention"] == 0:
        levers.append(_lever(
            "sdpa", "attention is unfused: softmax kernels run and no fused attention kernel does",
            softmax, total, "a fused kernel (F.scaled_dot_product_attention) never materialises "
            "the scores: at least the softmax time goes"))
    layout = f["layout_ns"]
    if layout > 0.02 * total:
        levers.append(_lever(
            "channels_last", "the convolution library converts NCHW<->NHWC around the "
            "convolutions (cuDNN's nchwToNhwc, MIOpen's batched_transpose)", layout, total,
            "model.to(memory_format=torch.channels_last) removes the conversions"))
    pointwise = t["elementwise"] + t["reduction"]
    if pointwise > 0.25 * total:
        levers.append(_lever(
            "torch_compile", f"elementwise/reduction kernels take {100 * pointwise / total:.0f}% "
            "of busy time", pointwise * 0.5, total,
            "fusing pointwise chains halves their memory traffic (torch.compile)"))
    return sorted(levers, key=lambda x: -x["saving_ns"])


def memory_levers(m: dict | None) -> list[dict]:
    """The allocator levers from ``passes.memory``'s figures: device alloc/free calls after the
    first step (``after_first_step``) and each device's reserved vs allocated peak. Their
    words and preconditions are the lever table's memory rows (levers.MEMORY_LEVERS); the
    per-device peaks decide the last two here, device by device."""
    from .levers import BY_ID

    m = m or {}
    ctx = {"memory": m}
    late = m.get("after_first_step")
    levers = []
    if BY_ID["no_empty_cache_in_loop"].holds(ctx):
        levers.append({
            "lever": "no_empty_cache_in_loop",
            "why": f"{late['frees']} device free call(s) after the first step "
                   f"({late['ns'] / 1e6:.1f} ms of allocation API time)",
            "saving_ns": late["ns"], "advice": BY_ID["no_empty_cache_in_loop"].words(ctx)})
    elif BY_ID["memory_growth"].holds(ctx):
        levers.append({
            "lever": "allocator_growth",   # the JSON's name of the memory_growth row
            "why": f"{late['count']} device allocation call(s) after the first step",
            "saving_ns": late["ns"], "advice": BY_ID["memory_growth"].words(ctx)})
    calls = BY_ID["expandable_segments"].holds(ctx)
    for d in m.get("devices") or []:
        cap, r, a = d.get("capacity"), d["peak_reserved"], d["peak_allocated"]
        if not r or a is None:
            continue
        if r > 0 and d["device"] >= 0 and (r - a) > 0.25 * r and calls:
            levers.append({
                "lever": "expandable_segments",
                "why": f"device {d['device']}: {100 * (r - a) / r:.0f}% of reserved memory unused "
                       "at the peak while the allocator still calls the driver (fragmentation)",
                "saving_ns": 0, "advice": BY_ID["expandable_segments"].words(ctx)})
        if cap and r > 0.9 * cap and calls:  # vLLM reserves 90% by design
            levers.append({
                "lever": "near_capacity",
                "why": f"device {d['device']}: reserved peak {r / 2**30:.1f} GiB of "
                       f"{cap / 2**30:.1f} GiB",
                "saving_ns": 0, "advice": BY_ID["near_capacity"].words(ctx)})
    return levers


def headline(u: dict | None, levers: list[dict]) -> str:
    """One sentence for a GPU-bound verdict: how well the GPU is used and the top lever.
    ``u``: the facts record's ``utilization`` figures (mfu, busy class shares, under-filled)."""
    u = u or {}
    bits = []
    m = u.get("mfu") or {}
    if m.get("mfu") is not None and m.get("peak_tflops") and m.get("flops"):
        low = m.get("lower_bound")
        bits.append(f"MFU {'>= ' if low else ''}{100 * m['mfu']:.1f}% of {m['peak_tflops']:g} "
                    f"TFLOP/s {m['dtype']}" + (f" ({m['device']})" if m.get("device") else "")
                    + (f" (a lower bound: {low})" if low else ""))
    elif m.get("has_shapes") is False:
        bits.append("no shapes recorded (record_shapes=True gives MFU)")
    share = u.get("class_pct") or {}
    gemm = share.get("gemm_tensor", 0.0) + share.get("gemm_simt", 0.0)
    if gemm:
        bits.append(f"GEMMs {gemm:.0f}% of busy time, {share.get('gemm_tensor', 0.0):.0f}% "
                    "on tensor cores")
    under = u.get("underfilled_sm_idle_pct")
    if under is not None:
        bits.append(f"busy but under-filled: {under:.0f}% of kernel time leaves "
                    "SMs empty (grids smaller than the SM count)")
    if levers:
        top = levers[0]
        if top.get("replayed_pct_of_window") is not None:   # the to-do item's own figure
            bits.append(f"top lever {top['lever']} (~{top['replayed_pct_of_window']:.1f}% of "
                        "the window, replayed)")
        else:
            bits.append(f"top lever {top['lever']} (~{top['saving_pct_of_busy']:.0f}% of busy "
                        "time)")
    return "; ".join(bits)
