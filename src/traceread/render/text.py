"""Plain-text renderings for the terminal."""
from __future__ import annotations

from typing import Any

from . import safe


def fmt_ns(ns: float) -> str:
    """Human duration: 1.23 s, 45.6 ms, 789 us, 12 ns."""
    ns = float(ns)
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s" if a < 1e11 else f"{ns / 1e9:.0f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.0f} ns"


def rel_time(ns: float) -> str:
    """Time after the trace's first event, to the microsecond: ``+1.234567 s``.

    Same origin as ``--window``, so a gap's start can be pasted into it.
    """
    return f"+{float(ns) / 1e9:.6f} s"


def render_info(info: dict[str, Any]) -> str:
    rank = "unknown" if info["rank"] < 0 else str(info["rank"])
    world = "" if info["world_size"] < 0 else f" of {info['world_size']}"
    version = f" (schema {info['format_version']})" if info["format_version"] else ""
    lines = [
        safe.name(info["path"]),
        f"  format     {info['format']}{version}"
        + (f", {safe.name(info['producer'])}" if info["producer"] else ""),
        f"  rank       {rank}{world}",
        f"  devices    {', '.join(_device(d, info) for d in info['devices']) or 'none (CPU-only trace)'}",
        *_processes(info),
        f"  span       {fmt_ns(info['span_ns'])}",
        f"  events     {info['events']:,}",
    ]
    for kind, n in info["by_kind"].items():
        lines.append(f"    {kind:<15}{n:>12,}")
    return "\n".join(lines)


def _processes(info: dict[str, Any], most: int = 4) -> list[str]:
    procs = [f"{pid} ({safe.name(name)})" for pid, name in (info.get("processes") or {}).items()]
    more = f", +{len(procs) - most} more" if len(procs) > most else ""
    return [f"  processes  {', '.join(procs[:most])}{more}"] if procs else []


def _device(d: int, info: dict[str, Any]) -> str:
    name = info["device_names"].get(str(d))
    return f"{d} ({safe.name(name)})" if name else str(d)


def utilization_lines(u: dict | None) -> list[str]:
    """The report section for passes/utilization.py: MFU, busy doing what, levers, memory."""
    if not u:
        return []
    out = ["", "GPU USE (when busy)"]
    m = u.get("mfu") or {}
    if not m.get("has_shapes"):
        out.append(f"  FLOPs/MFU: {m.get('note')}")
    else:
        peak = (f"{m['peak_tflops']:g} TFLOP/s {m['dtype']} dense ({m['peak_source']})"
                if m.get("peak_tflops") else "peak unknown")
        mfu = f"MFU {100 * m['mfu']:.1f}%" if m.get("mfu") is not None else "MFU n/a"
        wall = m.get("tflops_wall")
        gpu = m.get("tflops_gpu")
        out.append(f"  {mfu} on {m.get('device') or 'unknown device'} x{m.get('gpus', 1)} "
                   f"vs {peak}; achieved {wall or 0:.1f} TFLOP/s over wall time, "
                   f"{gpu or 0:.1f} over GPU-busy time ({m['flops'] / 1e12:.3g} TFLOP in "
                   f"{m.get('counted_ops', 0):,} ops)")
        if m.get("note"):
            out.append(f"  {m['note']}")
    b = u.get("busy") or {}
    if b.get("classes"):
        shares = ", ".join(f"{c['class']} {c['pct']:.0f}%" for c in b["classes"] if c["pct"] >= 1)
        out.append(f"  busy doing: {shares}")
        sk = b.get("small_kernels") or {}
        if sk.get("count"):
            out.append(f"  short kernels (< {sk['threshold_ns'] // 1000} us): {sk['count']:,} of "
                       f"{sk['of_kernels']:,}, {sk['pct_of_busy']:.1f}% of busy time")
        for c in b.get("copies") or []:
            if c.get("gb_per_s"):
                out.append(f"  memcpy {c['copy_kind']}: {c['count']:,} copies, "
                           f"{c['bytes'] / 1e9:.3g} GB at {c['gb_per_s']:.1f} GB/s")
        for lv in b.get("levers") or []:
            out.append(f"  lever {lv['lever']}: saves ~{fmt_ns(lv['saving_ns'])} "
                       f"({lv['saving_pct_of_busy']:.0f}% of busy) -- {lv['why']}")
    mem = u.get("memory") or {}
    for d in mem.get("devices") or []:
        if d["device"] >= 0:
            peak = (f"peak allocated {d['peak_allocated'] / 2**30:.2f} GiB, reserved "
                    f"{(d['peak_reserved'] or 0) / 2**30:.2f} GiB"
                    if d["peak_allocated"] is not None else
                    f"peak {d['peak_growth'] / 2**30:.2f} GiB above the trace start")
            out.append(f"  memory dev {d['device']}: {peak}, {d['allocs']:,} allocations "
                       f"({d['alloc_bytes'] / 2**30:.1f} GiB churn)")
    api = mem.get("api") or {}
    if api.get("count"):
        out.append(f"  device alloc/free API: {api['count']:,} calls, {fmt_ns(api['ns'])}")
    for lv in mem.get("levers") or []:
        out.append(f"  lever {lv['lever']}: {lv['why']} -- {lv['advice']}")
    return out
