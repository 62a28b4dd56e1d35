"""The step anatomy's compact lines (passes/anatomy.py's ``context.anatomy``) for the text
report and ``traceread steps``."""
from __future__ import annotations

from .text import fmt_ns

PHASES = ("data", "forward", "backward", "optimizer", "other")


def anatomy_lines(a) -> list[str]:
    """One phases line, then one line of what the steps hold (micro-batches, recomputation,
    inference batch, odd steps); none without the fact."""
    an = (getattr(a, "context", None) or {}).get("anatomy")
    if not an:
        return []
    ph = an["phases"]

    def one(p):
        g = ph[p]["gpu_ns"]
        return f"{p} {fmt_ns(ph[p]['host_ns'])}" + (f" / {fmt_ns(g)}" if g is not None else "")
    gpu = " (host / GPU)" if an.get("gpu_traced") else ""
    # a phase with no time on either side is noise; with only "other" nothing was recognised
    shown = [p for p in PHASES if ph[p]["host_ns"] or ph[p]["gpu_ns"]]
    lines = ([f"  Phases{gpu}, ordinary step: " + " · ".join(one(p) for p in shown)]
             if set(shown) - {"other"} else [])
    bits = []
    mb = an.get("micro_batches") or {}
    if mb.get("per_optimizer_step", 0) >= 2:
        s = mb.get("syncs_per_micro_batch") or 0
        bits.append(f"{mb['per_optimizer_step']} micro-batches per optimizer step "
                    f"({fmt_ns(mb['host_ns_each'])} each" + (f", {s:g} sync each)" if s else ")"))
    rc = an.get("recompute")
    if rc:
        mods = ", ".join(rc["modules"][:3]) or "forward ops"
        bits.append(f"recompute {fmt_ns(rc['host_ns_per_step'])} a step ({mods})")
    inf = an.get("inference")
    if inf:
        bits.append(f"inference batch {inf['batch']}, {fmt_ns(inf['request_ns'])} a request")
    for g in an.get("odd_steps") or []:
        n = len(g["steps"])   # no common period: once, or so many steps (param resnet: 6)
        every = f"every {g['period']}" if g.get("period") else "once" if n == 1 else \
            f"{n} steps, no common period"
        what = ", ".join(f"{h['count']} {h['what'].replace('_', ' ')}" if h["what"] != "save"
                         else "save" for h in g["holds"]) or "nothing of its own"
        if g.get("grew_phase"):
            what += f"; its {g['grew_phase']} phase +{fmt_ns(g['grew_ns'])}"
        more = ", ..." if len(g["steps"]) > 4 else ""   # the count says how many in all
        bits.append(f"odd steps {', '.join(f'#{k}' for k in g['steps'][:4])}{more} ({every}) "
                    f"+{fmt_ns(g['excess_ns'])}: {what}")
    for g in an.get("every_step") or []:
        h = g["holds"][0]
        what = "a save" if h["what"] == "save" else f"{h['count']} {h['what'].replace('_', ' ')}"
        bits.append(f"every step holds {what}: {fmt_ns(g['per_step_ns'])} a step")
    if bits:
        lines.append("  " + " · ".join(bits))
    return lines + roofline_lines(a)


def roofline_lines(a) -> list[str]:
    """The top matmul kernel's place on the roofline (passes/roofline.py), when linked."""
    mfu = ((getattr(a, "utilization", None) or {}).get("mfu") or {})
    r = mfu.get("roofline") if isinstance(mfu, dict) else None
    if not r or not r.get("kernels"):
        return []
    k = r["kernels"][0]
    bw = f" ({100 * k['bw_share']:.0f}% of {r['hbm_tbps']:g} TB/s)" if k.get("bw_share") else ""
    ridge = f" vs ridge {k['ridge']:.0f}: {k['bound']}-bound" if k.get("ridge") else ""
    gemv = " (GEMV)" if k.get("m") == 1 else ""
    return [f"  top matmul kernel{gemv}: {k['name'][:48]} moves >= {k['tbps']:.2f} TB/s{bw}, "
            f"{k['intensity']:.0f} FLOP/byte{ridge}"]
