"""Plain-text renderings for the terminal."""
from __future__ import annotations

from typing import Any


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


def render_info(info: dict[str, Any]) -> str:
    rank = "unknown" if info["rank"] < 0 else str(info["rank"])
    world = "" if info["world_size"] < 0 else f" of {info['world_size']}"
    version = f" (schema {info['format_version']})" if info["format_version"] else ""
    lines = [
        f"{info['path']}",
        f"  format     {info['format']}{version}" + (f", {info['producer']}" if info["producer"] else ""),
        f"  rank       {rank}{world}",
        f"  devices    {', '.join(_device(d, info) for d in info['devices']) or 'none (CPU-only trace)'}",
        f"  span       {fmt_ns(info['span_ns'])}",
        f"  events     {info['events']:,}",
    ]
    for kind, n in info["by_kind"].items():
        lines.append(f"    {kind:<15}{n:>12,}")
    return "\n".join(lines)


def _device(d: int, info: dict[str, Any]) -> str:
    name = info["device_names"].get(str(d))
    return f"{d} ({name})" if name else str(d)
