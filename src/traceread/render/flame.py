"""A flame graph (icicle: outermost frame on top) of collapsed stacks as one inline SVG.

Drawn here, no JavaScript: each frame a rectangle as wide as its share of the time, its
name inside where it fits, and the full name with its time on hover (SVG ``<title>``).
Used for the host time inside GPU-idle gaps (``passes/flame.py``): the HTML report's
section and ``traceread flame -o x.svg``.
"""
from __future__ import annotations

import zlib

from .safe import folded as _frame, xml as escape
from .text import fmt_ns

ROW_H = 17
MAX_DEPTH = 60
MIN_PX = 1.0          # frames narrower than this are left out (their time stays in the parent)
CHAR_PX = 6.4         # an 11 px system-ui character, about: labels are cut to fit


def _tree(stacks: dict) -> dict:
    root = {"name": "all", "ns": 0, "kids": {}}
    for stack, ns in stacks.items():
        root["ns"] += ns
        node = root
        for frame in stack[:MAX_DEPTH]:
            node = node["kids"].setdefault(frame, {"name": frame, "ns": 0, "kids": {}})
            node["ns"] += ns
    return root


def frame_colour(name: str) -> str:
    """Warm colours by what the frame is: Python, an operator, a CUDA call, untraced."""
    h = zlib.crc32(name.encode()) % 40
    if name == "[untraced]":
        return "#bdbdbd"
    if name.startswith(("cuda", "cu", "hip", "nccl")):
        return f"hsl(0,{60 + h // 2}%,{62 + h % 8}%)"            # CUDA calls: red
    if name.startswith("aten::") or "::" in name:
        return f"hsl(210,{45 + h // 2}%,{68 + h % 8}%)"          # operators: blue
    if name.startswith("nn.Module"):
        return f"hsl(120,{35 + h // 2}%,{62 + h % 8}%)"          # modules: green
    return f"hsl({25 + h},{75 + h % 15}%,{60 + h % 10}%)"        # Python and the rest: orange


def flame_svg(stacks: dict, width: int = 1060, what: str = "host time inside GPU-idle gaps"
              ) -> str:
    """The SVG (empty string for no stacks)."""
    root = _tree(stacks)
    if root["ns"] <= 0:
        return ""
    scale = width / root["ns"]
    rects: list[str] = []
    depth = _draw(root, 0.0, 0, scale, root["ns"], rects, what)
    height = (depth + 1) * ROW_H
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="flame graph of the '
            f'{escape(what)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'font-family="system-ui,sans-serif" font-size="11">' + "".join(rects) + "</svg>")


def _draw(node: dict, x: float, depth: int, scale: float, whole: int, out: list[str],
          what: str) -> int:
    w = node["ns"] * scale
    y = depth * ROW_H
    pct = 100.0 * node["ns"] / whole
    label = "all " + what if depth == 0 else node["name"]
    tip = escape(f"{label}: {fmt_ns(node['ns'])} ({pct:.1f}%)")
    fill = "#e6e6e6" if depth == 0 else frame_colour(node["name"])
    text = _fit(label if depth else f"{what}: {fmt_ns(node['ns'])}", w)
    out.append(f'<g><title>{tip}</title><rect x="{x:.2f}" y="{y}" width="{max(w - 0.5, 0.1):.2f}" '
               f'height="{ROW_H - 1}" fill="{fill}" rx="1"/>'
               + (f'<text x="{x + 3:.1f}" y="{y + 12}" fill="#222">{escape(text)}</text>'
                  if text else "") + "</g>")
    deepest = depth
    cx = x
    for kid in sorted(node["kids"].values(), key=lambda k: (-k["ns"], k["name"])):
        if kid["ns"] * scale >= MIN_PX:
            deepest = max(deepest, _draw(kid, cx, depth + 1, scale, whole, out, what))
        cx += kid["ns"] * scale
    return deepest


def _fit(text: str, px: float) -> str:
    room = int((px - 6) / CHAR_PX)
    if room < 3:
        return ""
    return text if len(text) <= room else text[: room - 1] + "…"


def folded(stacks: dict) -> str:
    """The collapsed-stack text (``a;b;c 123`` per line, heaviest first; ns) with every frame
    escaped (``safe.folded``): a name cannot start a line or add a frame."""
    rows = sorted(stacks.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{';'.join(_frame(f) for f in k)} {v}\n" for k, v in rows if v > 0)


SOURCES = ("auto", "ranges", "samples")


def idle_flame(a, source: str = "auto", gaps=None) -> tuple[dict, str]:
    """(stacks, what they are made of) for an analysis' idle gaps (``gaps``: default all).

    ``ranges``: the nested ranges of the event table (Python frames with with_stack,
    operators, CUDA calls, NVTX). ``samples``: the CPU call stacks an nsys export sampled
    (``readers.nsys_stacks``). ``auto``: samples when the export has some inside the gaps,
    else ranges."""
    from ..errors import TraceError
    from ..passes.flame import idle_stacks, sampled_idle_stacks

    gaps = a.gaps if gaps is None else gaps
    events = a.trace.events
    if source in ("auto", "samples") and a.meta.format == "nsys" and len(gaps):
        from ..readers.nsys_stacks import cpu_samples

        w = getattr(a, "window", None)   # the analysed window: the period needs samples
        lo = min(int(gaps["start"].min()), int(w.start)) if w is not None else None
        hi = max(int(gaps["end"].max()), int(w.end)) if w is not None else None
        # one process of a split export (path#pidN): the export's file
        path = (a.meta.extra or {}).get("split_from") or a.meta.path
        try:
            samples = cpu_samples(path, lo, hi)
        except TraceError:   # the file is gone or unreadable now: draw the ranges instead
            samples = None
        stacks = sampled_idle_stacks(samples, events, gaps)
        if stacks or source == "samples":
            cut = " (the first 2,000,000 samples)" if samples is not None and \
                samples.attrs.get("cut") else ""
            return stacks, f"nsys CPU samples{cut}, each one sampling period"
    if source == "samples":
        return {}, "nsys CPU samples"
    return idle_stacks(events, gaps), "the nested ranges of the trace"


def top_frames(stacks: dict, n: int = 5) -> list[tuple[str, int]]:
    """The innermost frames holding the most time (self time), heaviest first."""
    self_ns: dict[str, int] = {}
    for stack, ns in stacks.items():
        self_ns[stack[-1]] = self_ns.get(stack[-1], 0) + ns
    return sorted(self_ns.items(), key=lambda kv: -kv[1])[:n]
