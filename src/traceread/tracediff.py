"""``traceread diff BEFORE AFTER``: did the fix work?

Compares two analyses (``traceread.analyze``): step time, GPU busy / idle, idle
by cause, exposed communication, recompiles, the verdict, and the kernels
(matched by name: slower, faster, new, gone).

Two traces rarely hold the same number of steps, so when both have steps every
time is **per step** (total / steps); otherwise per trace (``unit``). A kernel
is *slower* / *faster* when its time per unit changed by more than
``KERNEL_MIN_PCT`` percent and ``KERNEL_MIN_NS``; *new* / *gone* when its name is
in one trace only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .passes.attribution import CPU_CATEGORIES

KERNEL_MIN_PCT = 5.0
KERNEL_MIN_NS = 1000
KERNEL_ROWS = 10


def summarize(a) -> dict[str, Any]:
    """The figures of one analysis that a diff compares (times per unit, see module doc)."""
    d = a.to_dict()
    stats = d["steps"].get("stats") or {}
    steps = int(d["steps"].get("count") or 0)
    per = steps if steps > 0 else 1
    dev = d.get("devices") or []
    window = sum(x["window_ns"] for x in dev)
    idle = sum(x["idle_ns"] for x in dev)
    comp = d.get("compile") or {}
    verdict = d.get("verdict") or {}
    return {
        "path": d["trace"]["path"], "format": d["trace"]["format"], "steps": steps,
        "unit": "step" if steps > 0 else "trace",
        "step_mean_ns": stats.get("mean_ns"), "step_median_ns": stats.get("median_ns"),
        "gpu_window_ns": window // per, "gpu_busy_ns": (window - idle) // per,
        "gpu_idle_ns": idle // per, "gpu_idle_pct": round(100.0 * idle / window, 2) if window else 0.0,
        "idle_by_cpu": {c: int(v) // per for c, v in d["attribution"]["by_cpu"].items()},
        "comm_ns": int(d["nccl"].get("comm_ns", 0)) // per,
        "exposed_comm_ns": int(d["nccl"].get("exposed_ns", 0)) // per,
        "compiles": int(comp.get("compiles", 0) or 0), "recompiles": int(comp.get("recompiles", 0) or 0),
        "verdict": verdict.get("bound"), "verdict_summary": verdict.get("summary", ""),
        "promised_saving_ns": promised_saving(verdict),
        "kernels": _kernel_table(a.kernels, per),
        "kernel_classes": _class_times(a.kernel_classes, per),
    }


def promised_saving(verdict: dict) -> int | None:
    """Per step: what fixing the verdict's first cause was estimated to give back (its action)."""
    actions = verdict.get("actions") or []
    if actions and isinstance(actions[0], dict):
        v = actions[0].get("saves_per_step_ns")
        if isinstance(v, (int, float)):
            return int(v)
    return None


def _class_times(kc: pd.DataFrame, per: int) -> dict[str, int]:
    """Kernel time per class (gemm, attention, nccl, ...): comparable when names are not
    (another GPU, another library version)."""
    if kc is None or not len(kc):
        return {}
    return {str(c): int(ns) // per for c, ns in zip(kc["class"], kc["total_ns"])}


def _kernel_table(k: pd.DataFrame, per: int) -> pd.DataFrame:
    if k is None or not len(k):
        return pd.DataFrame({"name": [], "ns": [], "instances": [], "avg_ns": []})
    out = pd.DataFrame({"name": k["name"].astype(str), "ns": k["total_ns"].astype("int64") // per,
                        "instances": k["instances"].astype("int64"),
                        "avg_ns": k["avg_ns"].astype(float)})
    return out.groupby("name", as_index=False, sort=False).agg(
        {"ns": "sum", "instances": "sum", "avg_ns": "mean"})


@dataclass
class TraceDiff:
    before: dict
    after: dict
    kernels: dict = field(default_factory=dict)   # slower, faster, new, gone: lists of rows
    pairs: list = field(default_factory=list)     # directory diffs: one TraceDiff per matched file

    @property
    def unit(self) -> str:
        return "step" if self.before["unit"] == self.after["unit"] == "step" else "trace"

    def slower_pct(self) -> float | None:
        """Step time change in percent (positive = slower); GPU window when a side has no steps."""
        key = "step_mean_ns" if self.unit == "step" else "gpu_window_ns"
        b, a = self.before.get(key), self.after.get(key)
        if not b or a is None:
            return None
        return 100.0 * (a - b) / b

    def to_dict(self) -> dict[str, Any]:
        strip = ("kernels",)
        out = {"unit": self.unit,
               "before": {k: v for k, v in self.before.items() if k not in strip},
               "after": {k: v for k, v in self.after.items() if k not in strip},
               "change": _changes(self.before, self.after),
               "slower_pct": _round(self.slower_pct()),
               "verdict": {"before": self.before["verdict"], "after": self.after["verdict"],
                           "changed": self.before["verdict"] != self.after["verdict"]},
               "saving": self.saving(),
               "kernels": self.kernels}
        if self.pairs:
            out["pairs"] = [p.to_dict() for p in self.pairs]
        return out

    def saving(self) -> dict[str, Any]:
        """Realised saving per step vs what the before-verdict's lever promised (when it did)."""
        b, a = self.before.get("step_mean_ns"), self.after.get("step_mean_ns")
        realised = int(b - a) if self.unit == "step" and b is not None and a is not None else None
        return {"realised_ns": realised, "promised_ns": self.before.get("promised_saving_ns")}


def _round(x):
    return None if x is None else round(x, 2)


_COMPARED = ("step_mean_ns", "step_median_ns", "gpu_window_ns", "gpu_busy_ns", "gpu_idle_ns",
             "gpu_idle_pct", "comm_ns", "exposed_comm_ns", "compiles", "recompiles")


def _changes(b: dict, a: dict) -> dict[str, Any]:
    out = {}
    for k in _COMPARED:
        out[k] = _delta(b.get(k), a.get(k))
    out["idle_by_cpu"] = {c: _delta(b["idle_by_cpu"].get(c, 0), a["idle_by_cpu"].get(c, 0))
                          for c in CPU_CATEGORIES}
    classes = sorted(set(b.get("kernel_classes", {})) | set(a.get("kernel_classes", {})))
    out["kernel_classes"] = {c: _delta(b["kernel_classes"].get(c, 0), a["kernel_classes"].get(c, 0))
                             for c in classes}
    return out


def _delta(b, a) -> dict[str, Any]:
    if b is None or a is None:
        return {"before": b, "after": a, "delta": None, "pct": None}
    return {"before": b, "after": a, "delta": a - b,
            "pct": round(100.0 * (a - b) / b, 2) if b else None}


def compare_kernels(b: pd.DataFrame, a: pd.DataFrame, rows: int = KERNEL_ROWS) -> dict[str, Any]:
    m = b.merge(a, on="name", how="outer", suffixes=("_before", "_after"), indicator=True)
    for c in ("ns", "instances"):
        for s in ("_before", "_after"):
            m[c + s] = m[c + s].fillna(0).astype("int64")
    m["delta_ns"] = m["ns_after"] - m["ns_before"]
    both = m[m["_merge"] == "both"].copy()
    both["pct"] = 100.0 * both["delta_ns"] / both["ns_before"].where(both["ns_before"] > 0)
    moved = both[(both["delta_ns"].abs() >= KERNEL_MIN_NS) & (both["pct"].abs() >= KERNEL_MIN_PCT)]
    slower = moved[moved["delta_ns"] > 0].sort_values("delta_ns", ascending=False, kind="stable")
    faster = moved[moved["delta_ns"] < 0].sort_values("delta_ns", kind="stable")
    new = m[m["_merge"] == "right_only"].sort_values("ns_after", ascending=False, kind="stable")
    gone = m[m["_merge"] == "left_only"].sort_values("ns_before", ascending=False, kind="stable")
    return {"matched": int(len(both)), "before_count": int(len(b)), "after_count": int(len(a)),
            "slower_count": int(len(slower)), "faster_count": int(len(faster)),
            "new_count": int(len(new)), "gone_count": int(len(gone)),
            "slower": _rows(slower, rows), "faster": _rows(faster, rows),
            "new": _rows(new, rows), "gone": _rows(gone, rows)}


def _rows(df: pd.DataFrame, n: int) -> list[dict]:
    out = []
    for r in df.head(n).to_dict(orient="records"):
        pct = r.get("pct")
        out.append({"name": r["name"], "before_ns": int(r["ns_before"]), "after_ns": int(r["ns_after"]),
                    "delta_ns": int(r["delta_ns"]),
                    "pct": None if pct is None or pct != pct else round(float(pct), 2),
                    "before_instances": int(r["instances_before"]),
                    "after_instances": int(r["instances_after"])})
    return out


def diff_analyses(before, after) -> TraceDiff:
    """Compare two ``Analysis`` objects."""
    b, a = summarize(before), summarize(after)
    if b["unit"] != a["unit"]:  # one side has no steps: compare whole traces on both
        b, a = _per_trace(before, b), _per_trace(after, a)
    return TraceDiff(before=b, after=a, kernels=compare_kernels(b["kernels"], a["kernels"]))


def _per_trace(analysis, s: dict) -> dict:
    if s["unit"] == "trace":
        return s
    n = s["steps"]
    out = dict(s, unit="trace")
    for k in ("gpu_window_ns", "gpu_busy_ns", "gpu_idle_ns", "comm_ns", "exposed_comm_ns"):
        out[k] = s[k] * n
    out["idle_by_cpu"] = {c: v * n for c, v in s["idle_by_cpu"].items()}
    out["kernels"] = _kernel_table(analysis.kernels, 1)
    out["kernel_classes"] = _class_times(analysis.kernel_classes, 1)
    return out


def diff_paths(before: str, after: str, *, step_pattern: str | None = None, load=None) -> TraceDiff:
    """Diff two traces, or two directories of traces (matched by relative path, else by rank)."""
    from .analysis import analyze

    load = load or (lambda p: p)
    run = lambda p: analyze(load(p), step_pattern=step_pattern)  # noqa: E731
    if os.path.isdir(before) and os.path.isdir(after):
        pairs = [diff_analyses(run(x), run(y)) for x, y in match_dirs(before, after)]
        return _aggregate(pairs)
    return diff_analyses(run(before), run(after))


def match_dirs(before: str, after: str) -> list[tuple[str, str]]:
    """Pairs of trace files: same path relative to each directory, else same rank."""
    from .batch import discover
    from .errors import TraceError

    bs, as_ = discover(before)[0], discover(after)[0]
    for d, found in ((before, bs), (after, as_)):
        if not found:
            raise TraceError(d, "no trace files found")
    rel_b = {os.path.relpath(p, before): p for p in bs}
    rel_a = {os.path.relpath(p, after): p for p in as_}
    common = sorted(set(rel_b) & set(rel_a))
    if common:
        return [(rel_b[k], rel_a[k]) for k in common]
    rb, ra = _by_rank(bs), _by_rank(as_)
    if rb and ra and set(rb) & set(ra):
        return [(rb[r], ra[r]) for r in sorted(set(rb) & set(ra))]
    if len(bs) == 1 and len(as_) == 1:
        return [(bs[0], as_[0])]
    raise TraceError(after, f"no trace matches one in {before} by relative path or rank")


def _by_rank(paths: list[str]) -> dict[int, str]:
    from .readers.kineto import rank_from_filename

    out = {}
    for p in paths:
        r = rank_from_filename(os.path.basename(p))
        if r is None or r < 0 or r in out:
            return {}
        out[r] = p
    return out


def _aggregate(pairs: list[TraceDiff]) -> TraceDiff:
    """A directory diff: the slowest pair (by step time change) leads, every pair is listed."""
    lead = max(pairs, key=lambda p: p.slower_pct() if p.slower_pct() is not None else float("-inf"))
    return TraceDiff(before=lead.before, after=lead.after, kernels=lead.kernels, pairs=pairs)


# --- text ------------------------------------------------------------------------------


def render_text(d: TraceDiff) -> str:
    from .render.text import fmt_ns

    if d.pairs:
        blocks = [render_text(TraceDiff(p.before, p.after, p.kernels)) for p in d.pairs]
        worst = d.slower_pct()
        head = (f"{len(d.pairs)} matched traces; largest step-time change "
                f"{'+' if (worst or 0) >= 0 else ''}{worst:.1f}%: {d.after['path']}"
                if worst is not None else f"{len(d.pairs)} matched traces")
        return head + "\n\n" + "\n\n".join(blocks)
    b, a, unit = d.before, d.after, d.unit
    per = " per step" if unit == "step" else " (whole trace)"
    lines = [f"before  {b['path']}  ({b['format']}, {_steps(b)})",
             f"after   {a['path']}  ({a['format']}, {_steps(a)})", "",
             f"  {'':<26}{'before':>12}{'after':>12}{'change':>12}"]
    rows = [("step time (mean)", "step_mean_ns"), ("step time (median)", "step_median_ns"),
            ("GPU window" + per, "gpu_window_ns"), ("GPU busy" + per, "gpu_busy_ns"),
            ("GPU idle" + per, "gpu_idle_ns"), ("exposed comm" + per, "exposed_comm_ns")]
    for label, key in rows:
        if not b.get(key) and not a.get(key) and not key.startswith("step"):
            continue  # e.g. no GPU in either trace, no communication
        if b.get(key) is None and a.get(key) is None:
            continue
        lines.append(_row(label, b.get(key), a.get(key), fmt_ns))
    if b["gpu_window_ns"] or a["gpu_window_ns"]:
        lines.append(f"  {'GPU idle %':<26}{b['gpu_idle_pct']:>11.1f}%{a['gpu_idle_pct']:>11.1f}%"
                     f"{a['gpu_idle_pct'] - b['gpu_idle_pct']:>+9.1f} pts")
    if b["compiles"] or a["compiles"]:
        lines.append(f"  {'recompiles':<26}{b['recompiles']:>12}{a['recompiles']:>12}"
                     f"{a['recompiles'] - b['recompiles']:>+12}")
    changed = "" if b["verdict"] == a["verdict"] else "  (changed)"
    lines += [f"  {'verdict':<26}{str(b['verdict']).upper():>12}{str(a['verdict']).upper():>12}{changed}"]
    lines += _saving_lines(d, fmt_ns)
    if any(b["idle_by_cpu"].values()) or any(a["idle_by_cpu"].values()):
        lines += ["", f"Idle by cause{per} (what the host was doing while the GPU idled)"]
    for c in sorted(CPU_CATEGORIES, key=lambda c: -max(b["idle_by_cpu"].get(c, 0),
                                                       a["idle_by_cpu"].get(c, 0))):
        x, y = b["idle_by_cpu"].get(c, 0), a["idle_by_cpu"].get(c, 0)
        if x or y:
            lines.append(_row(c, x, y, fmt_ns))
    lines += _class_lines(b, a, per, fmt_ns)
    lines += _kernel_lines(d.kernels, per, fmt_ns)
    return "\n".join(lines) + "\n"


def _class_lines(b: dict, a: dict, per: str, fmt) -> list[str]:
    bc, ac = b.get("kernel_classes") or {}, a.get("kernel_classes") or {}
    if not bc and not ac:
        return []
    lines = ["", f"Kernel time by class{per}"]
    for c in sorted(set(bc) | set(ac), key=lambda c: -max(bc.get(c, 0), ac.get(c, 0))):
        lines.append(_row(c, bc.get(c, 0), ac.get(c, 0), fmt))
    return lines


def _steps(s: dict) -> str:
    return f"{s['steps']} steps" if s["steps"] else "no steps"


def _row(label: str, x, y, fmt) -> str:
    if x is None or y is None:
        return f"  {label:<26}{fmt(x) if x is not None else '-':>12}{fmt(y) if y is not None else '-':>12}"
    pct = f"{100.0 * (y - x) / x:+.1f}%" if x else ("new" if y else "")
    return f"  {label:<26}{fmt(x):>12}{fmt(y):>12}{pct:>12}"


def _saving_lines(d: TraceDiff, fmt) -> list[str]:
    s = d.saving()
    if s["realised_ns"] is None:
        return []
    r = s["realised_ns"]
    line = (f"  saving realised per step: {fmt(r)}" if r >= 0
            else f"  no saving: each step is {fmt(-r)} slower")
    if s["promised_ns"] is not None:
        line += f" (the before-verdict's top action promised {fmt(s['promised_ns'])})"
    return [line]


def _kernel_lines(k: dict, per: str, fmt) -> list[str]:
    if not k.get("before_count") and not k.get("after_count"):
        return []
    lines = ["", f"Kernels{per}, matched by name: {k['matched']} in both, "
             f"{k['slower_count']} slower, {k['faster_count']} faster, "
             f"{k['new_count']} new, {k['gone_count']} gone"]
    for title, key in (("slower", "slower"), ("faster", "faster"), ("new", "new"), ("gone", "gone")):
        if not k[key]:
            continue
        lines.append(f"  {title}:")
        for r in k[key]:
            pct = f"{r['pct']:+.0f}%" if r["pct"] is not None else ""
            lines.append(f"    {_signed(fmt, r['delta_ns']):>10} {pct:>6}  {fmt(r['before_ns']):>9} -> "
                         f"{fmt(r['after_ns']):<9}  {_short(r['name'])}")
    return lines


def _signed(fmt, ns: int) -> str:
    return ("+" if ns > 0 else "") + fmt(ns)


def _short(name: str, w: int = 70) -> str:
    name = " ".join(str(name).split())
    return name if len(name) <= w else name[: w - 1] + "…"
