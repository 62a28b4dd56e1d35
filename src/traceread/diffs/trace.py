"""``traceread diff BEFORE AFTER``: did the fix work?

Compares two analyses (``traceread.analyze``): step time, GPU busy / idle, idle
by cause, exposed communication, recompiles, the verdict, and the kernels
(matched by name: slower, faster, new, gone). Two directories of traces are
matched file by file (``pair_up``); two ``traceread batch`` output folders are
compared from what the batch wrote (``diffs/batch.py``), with the jobs' changes.

Two traces rarely hold the same number of steps, so when both have steps every
time is **per step** (total / steps). Without steps on either side, per
**iteration**: the window's repeats of one block of host ops
(``passes/iterations.py``); when neither repeats, per trace. One side with steps
and one without: per trace, with a warning. When the batch size differs
(``batch_sizes``, or the user's ``--batch``) the step time is also compared **per
sample**, and ``slower_pct`` (what ``--fail-if-slower`` checks) is per sample. A
diff lists ``warnings`` when its figures are not like for like. A kernel
is *slower* / *faster* when its time per unit changed by more than
``KERNEL_MIN_PCT`` percent and ``KERNEL_MIN_NS``; *new* / *gone* when its name is
in one trace only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..jobs.figures import figures
from ..passes.attribution import CPU_CATEGORIES

KERNEL_MIN_PCT = 5.0
KERNEL_MIN_NS = 1000
KERNEL_ROWS = 10


def side(fig: dict, kernels: pd.DataFrame | None, classes: pd.DataFrame | None,
         unit: str | None = None) -> dict[str, Any]:
    """One side of a diff: ``figures`` per ``unit`` (step, iteration or trace; default:
    step when it has steps, else trace), plus its kernel table and kernel time per class
    on the same unit."""
    steps = int(fig["steps"] or 0)
    unit = unit or ("step" if steps > 0 else "trace")
    iters = int(fig.get("iterations") or 1)
    per = steps if unit == "step" and steps > 0 else iters if unit == "iteration" else 1
    window, idle = int(fig["gpu_window_ns"]), int(fig["gpu_idle_ns"])
    out = {k: fig[k] for k in ("path", "format", "steps", "step_mean_ns", "step_median_ns")}
    out["program_step_ns"] = _opt_int(fig.get("program_step_ns")) if unit == "step" else None
    out["step_bound_by"] = fig.get("step_bound_by") if out["program_step_ns"] else None
    out["first_step"], out["last_step"] = fig.get("first_step"), fig.get("last_step")
    out.update({
        "unit": unit, "iterations": iters, "iteration_evidence": fig.get("iteration_evidence", ""),
        "window_mode": fig.get("window_mode"), "compile_ns": int(fig.get("compile_ns") or 0),
        "wall_ns": _wall(fig, unit, per),
        "gpu_window_ns": window // per, "gpu_busy_ns": (window - idle) // per,
        "gpu_idle_ns": idle // per, "gpu_idle_pct": round(100.0 * idle / window, 2) if window else 0.0,
        "idle_by_cpu": {c: int(fig["idle_by_cpu"].get(c, 0)) // per for c in CPU_CATEGORIES},
        "comm_ns": int(fig["comm_ns"]) // per, "exposed_comm_ns": int(fig["exposed_comm_ns"]) // per,
        "copy_ns": int(fig["copy_ns"]) // per, "exposed_copy_ns": int(fig["exposed_copy_ns"]) // per,
        "pageable_copy_ns": int(fig["pageable_copy_ns"]) // per,
        "compiles": int(fig["compiles"]), "recompiles": int(fig["recompiles"]),
        "verdict": fig["verdict"], "verdict_summary": fig["verdict_summary"],
        "promised_saving_ns": fig["promised_saving_ns"],
        "kernels": _kernel_table(kernels, per),
        "kernel_classes": _class_times(classes, per),
    })
    return out


def _wall(fig: dict, unit: str, per: int) -> int:
    """The analysed wall time per unit; per iteration, the iterations' own period where the
    window repeats (the window may run on to the profiler's last instant)."""
    if unit == "iteration" and fig.get("iteration_ns"):
        return int(fig["iteration_ns"])
    return int(fig.get("window_ns") or 0) // per


def summarize(a) -> dict[str, Any]:
    """The figures of one analysis that a diff compares (times per unit, see module doc)."""
    return side(figures(a), a.kernels, a.kernel_classes)


def _class_times(kc: pd.DataFrame | None, per: int) -> dict[str, int]:
    """Kernel time per class (gemm, attention, nccl, ...): comparable when names are not
    (another GPU, another library version)."""
    if kc is None or not len(kc):
        return {}
    return {str(c): int(ns) // per for c, ns in zip(kc["class"], kc["total_ns"])}


def _kernel_table(k: pd.DataFrame | None, per: int) -> pd.DataFrame:
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
    batch: dict | None = None                     # batch sizes when they differ (batch_sizes)
    warnings: list = field(default_factory=list)  # why figures are not like for like
    pairs: list = field(default_factory=list)     # directory diffs: one TraceDiff per matched file
    label: str = ""                               # a pair's key in a directory diff (rank / path)
    matched_by: str | None = None                 # directory diffs: path, rank, single, position
    unmatched: list = field(default_factory=list)  # {side, path, reason} left out of the pairs
    jobs: list | None = None                      # batch diffs: one change record per job
    source: str = "traces"                        # traces | directories | batch
    proof: dict | None = None                     # promised vs realised (diffs/proof.py)
    steps_compared: dict | None = None            # the common steps, when the sides' differed

    @property
    def unit(self) -> str:
        return self.before["unit"] if self.before["unit"] == self.after["unit"] else "trace"

    def time_key(self) -> str:
        """The figure ``slower_pct`` compares and the realised saving is taken on: the
        program's step (the later of the host's span and the GPU's work, per step) when both
        sides have it, else the host's step time; without steps the GPU window per unit, or
        the analysed wall time when a side has no GPU work."""
        if self.unit == "step":
            both = self.before.get("program_step_ns") and self.after.get("program_step_ns")
            return "program_step_ns" if both else "step_mean_ns"
        return "gpu_window_ns" if self.before["gpu_window_ns"] and self.after["gpu_window_ns"] \
            else "wall_ns"

    def per_sample(self) -> dict[str, Any] | None:
        """Time per sample (``time_key`` / batch size) when the batch size differs."""
        if not self.batch:
            return None
        key = self.time_key()
        b, a = self.before.get(key), self.after.get(key)
        if b is None or a is None:
            return None
        return delta(round(b / self.batch["before"], 1), round(a / self.batch["after"], 1))

    def slower_pct(self) -> float | None:
        """Time change in percent (positive = slower): per sample when the batch size
        differs, else of ``time_key`` (the step time when both sides have steps)."""
        ps = self.per_sample()
        if ps is not None:
            return ps["pct"]
        key = self.time_key()
        b, a = self.before.get(key), self.after.get(key)
        if not b or a is None:
            return None
        return 100.0 * (a - b) / b

    def to_dict(self) -> dict[str, Any]:
        out = self._pair_dict()
        out["source"] = self.source
        if self.pairs:
            out["pairs"] = [p._pair_dict() for p in self.pairs]
            out["matched_by"] = self.matched_by
            out["unmatched"] = self.unmatched
        if self.jobs is not None:
            out["jobs"] = self.jobs
        return out

    def _pair_dict(self) -> dict[str, Any]:
        strip = ("kernels",)
        return {"unit": self.unit, "label": self.label,
                "before": {k: v for k, v in self.before.items() if k not in strip},
                "after": {k: v for k, v in self.after.items() if k not in strip},
                "change": _changes(self.before, self.after),
                "slower_pct": _round(self.slower_pct()),
                "verdict": {"before": self.before["verdict"], "after": self.after["verdict"],
                            "changed": self.before["verdict"] != self.after["verdict"]},
                "saving": self.saving(), "proof": self.proof,
                "batch": self.batch, "per_sample": self.per_sample(),
                "warnings": list(self.warnings), "steps_compared": self.steps_compared,
                "kernels": self.kernels}

    def saving(self) -> dict[str, Any]:
        """Realised saving per step (on ``time_key``: the program's step) vs what the
        before-verdict's lever promised (when it did)."""
        key = self.time_key()
        b, a = self.before.get(key), self.after.get(key)
        realised = int(b - a) if self.unit == "step" and b is not None and a is not None else None
        return {"realised_ns": realised, "promised_ns": self.before.get("promised_saving_ns")}


def _opt_int(x):
    return None if x is None or x != x else int(x)


def _round(x):
    return None if x is None else round(x, 2)


_COMPARED = ("program_step_ns", "step_mean_ns", "step_median_ns", "gpu_window_ns", "gpu_busy_ns", "gpu_idle_ns",
             "gpu_idle_pct", "comm_ns", "exposed_comm_ns", "copy_ns", "exposed_copy_ns",
             "pageable_copy_ns", "compiles", "recompiles")


def _changes(b: dict, a: dict) -> dict[str, Any]:
    out = {}
    for k in _COMPARED:
        out[k] = delta(b.get(k), a.get(k))
    out["idle_by_cpu"] = {c: delta(b["idle_by_cpu"].get(c, 0), a["idle_by_cpu"].get(c, 0))
                          for c in CPU_CATEGORIES}
    classes = sorted(set(b.get("kernel_classes", {})) | set(a.get("kernel_classes", {})))
    out["kernel_classes"] = {c: delta(b["kernel_classes"].get(c, 0), a["kernel_classes"].get(c, 0))
                             for c in classes}
    return out


def delta(b, a) -> dict[str, Any]:
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


def diff_sides(before: tuple, after: tuple, label: str = "",
               batch: dict | None = None) -> TraceDiff:
    """Compare two (figures, kernels, kernel_classes) triples: per step when both have
    steps, per iteration when neither has and one repeats, else both per trace.
    ``batch``: {"before", "after", "source", "evidence"} batch sizes (compared per
    sample when they differ)."""
    fb, fa = before[0], after[0]
    unit = _unit(fb, fa)
    b, a = side(*before, unit=unit), side(*after, unit=unit)
    if batch and batch["before"] == batch["after"]:
        batch = None
    return TraceDiff(before=b, after=a, kernels=compare_kernels(b["kernels"], a["kernels"]),
                     label=label, batch=batch, warnings=not_alike(fb, fa))


def _unit(fb: dict, fa: dict) -> str:
    sb, sa = int(fb["steps"] or 0), int(fa["steps"] or 0)
    if sb and sa:
        return "step"
    if not sb and not sa and max(int(fb.get("iterations") or 1), int(fa.get("iterations") or 1)) > 1:
        return "iteration"
    return "trace"


_KIND = {"steady": "the repeating part (warm-up dropped)",
         "whole_trace": "the whole trace (start-up included)", "explicit": "a --window"}


def _window_kind(fig: dict) -> str | None:
    mode = fig.get("window_mode")
    if mode is None:
        return None
    return _KIND.get(mode, "its steps")


def not_alike(fb: dict, fa: dict) -> list[str]:
    """Why the two sides' figures are not like for like (one line each)."""
    from ..render.text import fmt_ns

    out = []
    sb, sa = int(fb["steps"] or 0), int(fa["steps"] or 0)
    if bool(sb) != bool(sa):
        has, n, other = ("BEFORE", sb, "AFTER") if sb else ("AFTER", sa, "BEFORE")
        out.append(f"{has} has {n} step{'s' * (n != 1)}, {other} none: whole windows are "
                   "compared, not one step with one step")
    out += _steps_apart(fb, fa)
    kb, ka = _window_kind(fb), _window_kind(fa)
    if kb and ka and kb != ka and bool(sb) == bool(sa):
        out.append(f"the windows differ in kind: BEFORE analyses {kb}, AFTER {ka}")
    out += not_the_same_job(fb, fa)
    cb, ca = int(fb.get("compile_ns") or 0), int(fa.get("compile_ns") or 0)
    if bool(cb) != bool(ca) and not _recompiles_each_step(fb if cb else fa):
        who, ns = ("BEFORE", cb) if cb else ("AFTER", ca)
        out.append(f"{who} compiles (torch.compile, {fmt_ns(ns)}) in its window, the other "
                   "does not: a first call's compilation is not a per-iteration cost")
    return out


def _steps_apart(fb: dict, fa: dict) -> list[str]:
    """Where the sides' numbered steps overlap but differ (a batch output holds each side's
    own window; ``same_steps`` aligns two analyses, so only batch diffs still warn)."""
    rb, ra = (fb.get("first_step"), fb.get("last_step")), (fa.get("first_step"), fa.get("last_step"))
    if None in rb or None in ra or rb == ra or max(rb[0], ra[0]) > min(rb[1], ra[1]):
        return []
    return [f"the sides analysed different steps: BEFORE #{rb[0]}..#{rb[1]}, AFTER "
            f"#{ra[0]}..#{ra[1]} (each its own warm-up left out) -- diff the traces to compare "
            "the steps both analysed"]


def _recompiles_each_step(fig: dict) -> bool:
    """The side recompiles in at least half its steps (iterations): its compilation is a
    cost of every step -- what a dynamic-shapes fix removes (gpu/compile.bad: 3 recompiles
    in 3 steps) -- not a first call's, so comparing it is like for like."""
    n = int(fig.get("iterations") or fig.get("steps") or 1)
    return int(fig.get("recompiles") or 0) >= max(1, n / 2)


def diff_analyses(before, after, label: str = "", batch: tuple | None = None) -> TraceDiff:
    """Compare two ``Analysis`` objects. ``batch``: the user's (before, after) batch
    sizes; else they are read from the traces' shapes (``batch_sizes``)."""
    from ..passes.batchsize import batch_sizes

    from .proof import proof

    before, after, same = same_steps(before, after)
    found = user_batch(batch) if batch else batch_sizes(before, after)
    fb, fa = figures(before), figures(after)
    d = diff_sides((fb, before.kernels, before.kernel_classes),
                   (fa, after.kernels, after.kernel_classes), label, found)
    if same:
        d.steps_compared = same
        d.warnings.insert(0, steps_warning(same))
    d.proof = proof(before, after, d)
    apart = not_the_same_job(fb, fa)
    if d.proof and apart:   # the change is not the only difference: no error is measured
        d.proof.update(error_pct=None, not_judged=apart[0].split(" -- ")[0]
                       + " (the change is not the only difference)")
    return d


def analysed_steps(a) -> list[int]:
    """The step numbers an analysis analysed ([] for a window without steps)."""
    if a.step_source == "whole_trace" or a.window is None or not len(a.window.steps):
        return []
    return sorted(int(x) for x in a.window.steps["step"])


def same_steps(before, after):
    """(before, after, record): the two analyses on the steps both analysed. Each side drops
    its own warm-up (passes/window.py), so a cold-start fix reads BEFORE's steady steps
    against AFTER's every step (h200/cold: BEFORE's 227 ms first call left out, AFTER's
    15.2 ms one kept, "no saving: 678 us slower"). Where the numbered steps overlap, a side
    analysing steps the other left out is analysed again on the common range, and those
    steps are listed with each side's time. record None: nothing to align."""
    from ..analysis import analyze

    nb, na = analysed_steps(before), analysed_steps(after)
    if not nb or not na or nb == na:
        return before, after, None
    if any(a.window.mode != "steps" for a in (before, after)):
        return before, after, None   # a window the user chose (--steps, --window) stays
    lo, hi = max(nb[0], na[0]), min(nb[-1], na[-1])
    if lo > hi or before.trace is None or after.trace is None:
        return before, after, None
    out = []
    for a, n in ((before, nb), (after, na)):
        if n[0] < lo or n[-1] > hi:
            a = analyze(a.trace, step_pattern=a.step_pattern or None, steps=f"{lo}:{hi}")
        out.append(a)
    left = sorted((set(nb) | set(na)) - set(range(lo, hi + 1)))
    rows = [{"step": s, **_step_time(before, s, "before"), **_step_time(after, s, "after")}
            for s in left]
    return out[0], out[1], {"first": lo, "last": hi, "left_out": rows}


def _step_time(a, step: int, side: str) -> dict:
    """A step's host span on one side and why its analysis left it out ("" if it did not)."""
    st = a.window.steps
    row = st[st["step"] == step]
    if len(row):
        return {f"{side}_ns": int(row["end"].iloc[0] - row["start"].iloc[0]), f"{side}_reason": ""}
    for x in a.window.excluded:
        if x.get("step") == step:
            return {f"{side}_ns": int(x["ns"]), f"{side}_reason": str(x.get("reason") or "")}
    return {f"{side}_ns": None, f"{side}_reason": "not in the trace"}


def steps_warning(rec: dict) -> str:
    """One line: the common steps compared, and each left-out step's time on both sides."""
    from ..render.text import fmt_ns

    def one(ns, why):
        return "-" if ns is None else fmt_ns(ns) + (f" ({why})" if why else "")

    rows = rec["left_out"]
    parts = [f"#{r['step']} {one(r['before_ns'], r['before_reason'])} BEFORE, "
             f"{one(r['after_ns'], r['after_reason'])} AFTER" for r in rows[:WARN_STEPS]]
    if len(rows) > WARN_STEPS:   # 36 of them made one warning of a screen (the JSON has all)
        parts.append(f"and {len(rows) - WARN_STEPS} more (steps_compared in the JSON)")
    return (f"the sides analysed different steps: both are compared on steps "
            f"#{rec['first']}..#{rec['last']}; left out: " + "; ".join(parts))


WARN_STEPS = 4   # left-out steps a warning lists


def not_the_same_job(fb: dict, fa: dict) -> list[str]:
    """Where the two captures ran on different jobs or hardware (the figures' world size
    and device name, from the traces' distributedInfo and device properties): a rank's
    share of the work, or the GPU's speed, changed with the program, so the change's effect
    is not what the figures show. Unknown on either side: not claimed."""
    out = []
    wb, wa = int(fb.get("world_size") or -1), int(fa.get("world_size") or -1)
    if wb > 0 and wa > 0 and wb != wa:
        out.append(f"the jobs differ: {wb} ranks BEFORE, {wa} AFTER -- each rank's share of "
                   "the work and its collectives changed with the program")
    db, da = fb.get("device_name") or "", fa.get("device_name") or ""
    if db and da and db != da:
        out.append(f"the GPUs differ: {db} BEFORE, {da} AFTER")
    gb, ga = int(fb.get("gpu_window_ns") or 0), int(fa.get("gpu_window_ns") or 0)
    if bool(gb) != bool(ga):   # gloo/ddp2 (CPU) against gpu/ddp2 read as a plain slowdown
        cpu, gpu, dev = ("BEFORE", "AFTER", da) if ga else ("AFTER", "BEFORE", db)
        out.append(f"the devices differ: {cpu} runs no GPU work, {gpu} runs on "
                   f"{dev or 'a GPU'}")
    return out


def user_batch(batch: tuple) -> dict:
    """The user's ``--batch BEFORE:AFTER`` as a ``TraceDiff.batch`` record."""
    return {"before": int(batch[0]), "after": int(batch[1]), "source": "option",
            "evidence": "--batch"}


@dataclass
class Matched:
    pairs: list            # (label, before item, after item)
    by: str                # path | rank | single | position
    unmatched: list        # {side, path, reason}


def pair_up(before: list[dict], after: list[dict], before_name: str, after_name: str) -> Matched:
    """Pair items ``{"rel": path relative to its folder, "rank": int, "item": ...}``:
    same relative path, else same rank, else the only one of each, else by position
    (sorted relative paths, equal counts)."""
    from ..errors import TraceError

    rel_b, rel_a = {x["rel"]: x for x in before}, {x["rel"]: x for x in after}
    common = sorted(set(rel_b) & set(rel_a))
    if common:
        return _matched([(k, rel_b[k], rel_a[k]) for k in common], "path", before, after)
    rb, ra = _by_rank(before), _by_rank(after)
    if rb and ra and set(rb) & set(ra):
        keys = sorted(set(rb) & set(ra))
        return _matched([(f"rank {r}", rb[r], ra[r]) for r in keys], "rank", before, after)
    if len(before) == 1 and len(after) == 1:
        return _matched([(before[0]["rel"], before[0], after[0])], "single", before, after)
    if len(before) == len(after) and before:
        bs, as_ = sorted(before, key=lambda x: x["rel"]), sorted(after, key=lambda x: x["rel"])
        return _matched([(f"{x['rel']} ~ {y['rel']}", x, y) for x, y in zip(bs, as_)],
                        "position", before, after)
    raise TraceError(after_name, f"no trace matches one in {before_name} by relative path or "
                                 f"rank ({len(before)} vs {len(after)} traces)")


def _matched(pairs: list, by: str, before: list, after: list) -> Matched:
    used_b = {id(x) for _, x, _ in pairs}
    used_a = {id(y) for _, _, y in pairs}
    left = [{"side": "before", "path": x["path"], "reason": "no match in AFTER"}
            for x in before if id(x) not in used_b]
    left += [{"side": "after", "path": y["path"], "reason": "no match in BEFORE"}
             for y in after if id(y) not in used_a]
    return Matched([(label, x["item"], y["item"]) for label, x, y in pairs], by, left)


def _by_rank(items: list[dict]) -> dict[int, dict]:
    out = {}
    for x in items:
        r = x.get("rank")
        if r is None or r < 0 or r in out:
            return {}
        out[r] = x
    return out


def aggregate(pairs: list[TraceDiff], matched: Matched, source: str,
              jobs: list | None = None) -> TraceDiff:
    """A directory / batch diff: the worst pair (largest step-time increase) leads, so
    ``slower_pct`` and ``--fail-if-slower`` see it."""
    lead = max(pairs, key=lambda p: p.slower_pct() if p.slower_pct() is not None else float("-inf"))
    # the top level is the lead pair whole: its proof and aligned steps too (they were
    # left out, so a folder diff's JSON read "proof": null beside the lead's saving)
    return TraceDiff(before=lead.before, after=lead.after, kernels=lead.kernels, pairs=pairs,
                     label=lead.label, batch=lead.batch, warnings=lead.warnings,
                     matched_by=matched.by, unmatched=matched.unmatched, jobs=jobs,
                     source=source, proof=lead.proof, steps_compared=lead.steps_compared)

