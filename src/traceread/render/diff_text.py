"""The text of a ``TraceDiff`` (``traceread diff``), within 100 columns.

One pair: the figures, idle by cause, kernel classes and kernel changes. Several
(two folders of traces, two batch outputs): the jobs' changes, one row per
matched trace (worst step-time change first), then the worst pair in full.
"""
from __future__ import annotations

import textwrap

from ..passes.attribution import CPU_CATEGORIES
from . import safe
from .fmt import short_name, short_path
from .text import fmt_ns

PAIR_ROWS = 64


def render_diff(d) -> str:
    if d.pairs:
        return _many(d)
    return _one(d)


def _many(d) -> str:
    worst = d.slower_pct()
    what = {"batch": "batch outputs", "directories": "folders",
            "processes": "ranks of multi-process exports"}.get(d.source, "folders")
    lines = [f"{len(d.pairs)} matched traces ({what}, matched by {d.matched_by})"]
    if worst is not None:
        lines.append(f"worst step-time change: {worst:+.1f}% (--fail-if-slower checks it): "
                     + short_name(d.label, 40))
    for u in d.unmatched:
        lines.append("  " + short_name(f"not compared ({u['side']}): {u['path']}: {u['reason']}", 98))
    lines += _job_lines(d.jobs or [])
    lines += _pair_table(d.pairs)
    lead = next((p for p in d.pairs if p.label == d.label), d.pairs[0])
    lines += ["", short_name(f"In detail, the worst: {d.label}", 100), ""]
    return "\n".join(lines) + "\n" + _one(lead)


def pair_names(labels: list[str]) -> tuple[str, dict[str, str]]:
    """(the folder every label lies under, each label below it): rows then differ in what
    tells them apart, not in a shared prefix cut to the same few characters."""
    import posixpath

    parts = [str(x).split("/") for x in labels]
    common = []
    for level in zip(*parts) if len(parts) > 1 else []:
        if len(set(level)) > 1:
            break
        common.append(level[0])
    common = common[:min(len(p) for p in parts) - 1] if parts else []
    root = posixpath.join(*common) if common else ""
    return root, {x: str(x)[len(root) + 1:] if root else str(x) for x in labels}


def _pair_table(pairs: list) -> list[str]:
    root, names = pair_names([p.label for p in pairs])
    lines = ["", f"  {'trace':<30}{'step before':>12}{'after':>10}{'change':>9}"
                 f"{'idle% before':>14}{'after':>7}  verdict"]
    if root:
        lines[-1:-1] = [f"  (traces under {safe.name(root)}/)"]
    order = sorted(pairs, key=lambda p: -(p.slower_pct() if p.slower_pct() is not None else -1e9))
    for p in order[:PAIR_ROWS]:
        b, a = p.before, p.after
        key = p.time_key()
        pct = p.slower_pct()
        verdict = f"{str(b['verdict']).upper()} -> {str(a['verdict']).upper()}" \
            if b["verdict"] != a["verdict"] else str(b["verdict"]).upper()
        lines.append(f"  {short_path(names[p.label], 29):<30}{_ns(b.get(key)):>12}{_ns(a.get(key)):>10}"
                     f"{'' if pct is None else f'{pct:+.1f}%':>9}"
                     f"{b['gpu_idle_pct']:>13.1f}%{a['gpu_idle_pct']:>6.1f}%  {verdict}")
    if len(pairs) > PAIR_ROWS:
        lines.append(f"  … {len(pairs) - PAIR_ROWS} more (--format json lists every pair)")
    if any(p.unit != "step" for p in pairs):
        lines.append("  (a pair without steps on both sides compares GPU windows (wall time "
                     "without GPU work) per iteration or per trace, not steps)")
    if any(p.batch for p in pairs):
        lines.append("  (a pair whose batch size differs: change per sample)")
    return lines


def _ns(x) -> str:
    return "-" if x is None else fmt_ns(x)


def _job_lines(jobs: list) -> list[str]:
    lines = []
    for j in jobs:
        b, a = j.get("before") or {}, j.get("after") or {}
        name = j["job_before"] if j["job_before"] == j["job_after"] else \
            f"{j['job_before'] or '-'} -> {j['job_after'] or '-'}"
        lines += ["", f"JOB {name} ({j['ranks']} ranks matched)"]
        if b.get("step_mean_ns") is None and a.get("step_mean_ns") is None:
            # nothing to print as "- -> -": the ranks' own rows compare their windows
            lines.append("  step time    no steps on either side (the ranks below compare "
                         "their windows)")
        else:
            lines.append(f"  step time    {_ns(b.get('step_mean_ns'))} -> "
                         f"{_ns(a.get('step_mean_ns'))}"
                         + (f" ({j['step_pct']:+.1f}%)" if j.get("step_pct") is not None else "")
                         + " (slowest rank's mean)")
        lines.append(f"  straggler    {_strag(b)} -> {_strag(a)}")
        if b.get("status") != a.get("status"):
            lines.append(f"  verdict      {b.get('status') or 'not a job'} -> {a.get('status') or 'not a job'}")
        if b.get("summary") or a.get("summary"):
            for label, side in (("before", b), ("after", a)):
                prefix = f"  {label:<13}"
                lines.append(prefix + short_name(side.get("summary") or "not a job", 100 - len(prefix)))
    return lines


def _strag(s: dict) -> str:
    if not s:
        return "not a job"
    if s.get("straggler_rank") is None or s["straggler_rank"] < 0:
        return "none"
    return (f"rank {s['straggler_rank']} {fmt_ns(s['late_by_ns'])} late"
            + (f" ({s['cause']})" if s.get("cause") else ""))


_PER = {"step": " per step", "iteration": " per iteration"}
# the row labels' column: the longest label ("pageable copies per iteration", "time per
# sample (GPU window)") fits, so every figure column starts at the same place
LABEL_W = 31


def _one(d) -> str:
    b, a, unit = d.before, d.after, d.unit
    per = _PER.get(unit, " (whole trace)")
    # paths whole (copyable), even past the width
    lines = [f"before  {safe.name(b['path'])}", f"        ({b['format']}, {_steps(b)})",
             f"after   {safe.name(a['path'])}", f"        ({a['format']}, {_steps(a)})"]
    lines += _unit_lines(d)
    lines += ["", f"  {'':<{LABEL_W}}{'before':>12}{'after':>12}{'change':>12}"]
    rows = [("program step (mean)", "program_step_ns"), ("step time (mean)", "step_mean_ns"), ("step time (median)", "step_median_ns")]
    if unit != "step":
        rows.append(("wall time" + per, "wall_ns"))
    rows += [("GPU window" + per, "gpu_window_ns"), ("GPU busy" + per, "gpu_busy_ns"),
            ("GPU idle" + per, "gpu_idle_ns"), ("exposed comm" + per, "exposed_comm_ns"),
            ("copies" + per, "copy_ns"), ("exposed copies" + per, "exposed_copy_ns"),
            ("pageable copies" + per, "pageable_copy_ns")]
    for label, key in rows:
        if not b.get(key) and not a.get(key) and not key.startswith("step"):
            continue  # e.g. no GPU in either trace, no communication
        if b.get(key) is None and a.get(key) is None:
            continue
        lines.append(_row(label, b.get(key), a.get(key)))
    ps = d.per_sample()
    if ps is not None:
        lines.append(_row(f"time per sample ({_time_name(d)})", ps["before"], ps["after"]))
    if b["gpu_window_ns"] or a["gpu_window_ns"]:
        lines.append(f"  {'GPU idle %':<{LABEL_W}}{b['gpu_idle_pct']:>11.1f}%{a['gpu_idle_pct']:>11.1f}%"
                     f"{a['gpu_idle_pct'] - b['gpu_idle_pct']:>+8.1f} pts")
    if b["compiles"] or a["compiles"]:
        lines.append(f"  {'recompiles':<{LABEL_W}}{b['recompiles']:>12}{a['recompiles']:>12}"
                     f"{a['recompiles'] - b['recompiles']:>+12}")
    changed = "" if b["verdict"] == a["verdict"] else "  (changed)"
    lines += [f"  {'verdict':<{LABEL_W}}{str(b['verdict']).upper():>12}{str(a['verdict']).upper():>12}{changed}"]
    lines += _saving_lines(d)
    if any(b["idle_by_cpu"].values()) or any(a["idle_by_cpu"].values()):
        lines += ["", f"Idle by cause{per} (what the host was doing while the GPU idled)"]
    for c in sorted(CPU_CATEGORIES, key=lambda c: -max(b["idle_by_cpu"].get(c, 0),
                                                       a["idle_by_cpu"].get(c, 0))):
        x, y = b["idle_by_cpu"].get(c, 0), a["idle_by_cpu"].get(c, 0)
        if x or y:
            lines.append(_row(c, x, y))
    lines += _class_lines(b, a, per)
    lines += _kernel_lines(d.kernels, per)
    return "\n".join(lines) + "\n"


def _class_lines(b: dict, a: dict, per: str) -> list[str]:
    bc, ac = b.get("kernel_classes") or {}, a.get("kernel_classes") or {}
    if not bc and not ac:
        return []
    lines = ["", f"Kernel time by class{per}"]
    for c in sorted(set(bc) | set(ac), key=lambda c: -max(bc.get(c, 0), ac.get(c, 0))):
        lines.append(_row(c, bc.get(c, 0), ac.get(c, 0)))
    return lines


def _steps(s: dict) -> str:
    if s["steps"]:
        return f"{s['steps']} step{'s' * (s['steps'] != 1)}"
    n = int(s.get("iterations") or 1)
    return f"no steps, {n} iterations" if n > 1 else "no steps"


def _time_name(d) -> str:
    return {"program_step_ns": "step", "step_mean_ns": "step", "gpu_window_ns": "GPU window", "wall_ns": "wall"}[d.time_key()]


def _unit_lines(d) -> list[str]:
    """How the two sides were made comparable, and why they are not quite."""
    lines = []
    if d.unit == "iteration":
        lines += _wrap("compared per iteration (no step markers):")
        for who, s in (("before", d.before), ("after", d.after)):
            lines += _wrap(f"{who}: {s.get('iteration_evidence') or 'one iteration (no block of host ops or kernels repeats)'}", "    ")
    if d.batch:
        lines += _wrap(f"batch {d.batch['before']} -> {d.batch['after']}, compared per sample "
                       f"(from {d.batch['evidence']})")
    for w in d.warnings:
        lines += _wrap(f"warning: {w}")
    return lines


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False)


def _row(label: str, x, y) -> str:
    if x is None or y is None:
        return f"  {label:<{LABEL_W}}{_ns(x):>12}{_ns(y):>12}"
    pct = f"{100.0 * (y - x) / x:+.1f}%" if x else ("new" if y else "")
    return f"  {label:<{LABEL_W}}{fmt_ns(x):>12}{fmt_ns(y):>12}{pct:>12}"


def _saving_lines(d) -> list[str]:
    s = d.saving()
    ps = d.per_sample()
    if ps is not None and ps["delta"] is not None:
        x = ps["delta"]
        lines = [f"  saving realised per sample: {fmt_ns(-x)}" if x <= 0
                 else f"  no saving: each sample takes {fmt_ns(x)} longer"]
        # the proof's figures are per BEFORE's batch of samples (diffs/proof._realised)
        return lines + (_proof_lines(d.proof, proof_unit(d)) if d.proof else [])
    if s["realised_ns"] is None:
        return []
    r = s["realised_ns"]
    lines = [f"  saving realised per step: {fmt_ns(r)}" if r >= 0
             else f"  no saving: each step is {fmt_ns(-r)} slower"]
    if d.time_key() == "program_step_ns" and any(_gpu_paced(x) for x in (d.before, d.after)):
        lines[-1] += " (on the program's step: the GPU paces it, not the host's span)"
    if d.proof:
        lines += _proof_lines(d.proof)
    elif promise_text(d):
        lines.append(f"    ({promise_text(d)})")
    return lines


def _promise_source(p: dict) -> str:
    """Where a proof's promise comes from: BEFORE's replay, its step anatomy's own model
    (``basis`` anatomy: priced on the phases, no bound), or its verdict's bound."""
    if p["basis"] == "replay":
        return "BEFORE's replay with the change"
    if p["basis"] == "anatomy":
        return "the before-verdict's step phases (their own model, not a bound)"
    return f"the before-verdict's bound ({p.get('not_replayed') or 'not replayable'})"


def promise_text(d) -> str | None:
    """The one promised figure of a diff, worded the same in text and HTML: the proof's
    (the lever that changed, priced by BEFORE's replay or bound) where there is one, else
    the before-verdict's top action's. None: nothing was promised."""
    p = d.proof
    if p:
        if p["promised_ns"] is None:
            return None
        how = _promise_source(p)
        pct = f" ({p['promised_pct']:.1f}% of the step)" if p.get("promised_pct") is not None \
            else ""
        return f"promised {fmt_ns(p['promised_ns'])} per step{pct}, from {how}"
    s = d.saving()
    if s["promised_ns"] is None:
        return None
    return f"the before-verdict's top action promised {fmt_ns(s['promised_ns'])} per step"


def _gpu_paced(side: dict) -> bool:
    """The GPU sets the side's step and the host's span is over 1% shorter than it."""
    prog, host = side.get("program_step_ns"), side.get("step_mean_ns")
    return side.get("step_bound_by") == "gpu" and bool(prog) and host is not None \
        and prog - host > 0.01 * prog


def proof_unit(d) -> str:
    """What the proof's figures are per: a step, or BEFORE's batch of samples when the
    batch changed (promised and realised for the samples one BEFORE step trains)."""
    if d.per_sample() is not None:
        return f"per {d.batch['before']} samples (BEFORE's batch)"
    return "per step"


def _proof_lines(p: dict, per: str = "per step") -> list[str]:
    """Promised vs realised for the lever(s) that changed (diffs/proof.py), wrapped."""
    lines = []
    for depth, text in proof_sentences(p, per):
        lines += _wrap(text, "  " * (depth + 1))
    return lines


def proof_sentences(p: dict, per: str = "per step") -> list[tuple[int, str]]:
    """(depth, sentence) of a proof, worded the same in text and HTML: the change, what it
    promised, what it realised (without the profiler where the captures pay differently)."""
    what = ", ".join(p["levers"])
    out = [(0, f"the change: {what} ({'; '.join(p['evidence'])})")]
    for x in p.get("anatomy") or []:     # the step anatomy's changes (verdict/anatomy.py)
        if x["lever"] not in p["levers"]:
            bound = f", its bound {fmt_ns(x['promised_per_step_ns'])} per step" \
                if x.get("promised_per_step_ns") is not None else ""
            out.append((0, f"also: {x['lever']} ({x['evidence']}){bound}"))
    refused = p.get("refused") or {}
    if p["promised_ns"] is None:
        # the refusal says why BEFORE's replay could not make the change the traces show
        # (HTA trace_diff: AFTER replays graphs, the model cannot capture BEFORE's step)
        why = "BEFORE's replay could not make the change: " + _refusals(refused) if refused \
            else "no replay, no bound for this lever"
        out.append((1, f"promised: not priced -- {why}"))
    else:
        how = _promise_source(p)
        pct = f" ({p['promised_pct']:.1f}% of the step)" if p.get("promised_pct") is not None \
            else ""
        out.append((1, f"promised {fmt_ns(p['promised_ns'])} {per}{pct}, from {how}"))
    if p["realised_ns"] is not None:
        rp = f" ({p['realised_pct']:.1f}%)" if p.get("realised_pct") is not None else ""
        # the steps' own spread: how exact the measured saving is
        pm = f" ± {fmt_ns(p['noise_ns'])}" if p.get("noise_ns") is not None else ""
        err = f", promise off by {p['error_pct']:+.1f}%" if p.get("error_pct") is not None \
            else ""
        if p.get("realised_unprofiled_ns") is not None:   # judged without the profiler
            ub, ua = p["unprofiled_steps_ns"]
            out.append((1, f"realised {fmt_ns(p['realised_ns'])}{pm} {per}{rp} as profiled"))
            out.append((1, f"without the profiler (estimated: {fmt_ns(ub)} -> {fmt_ns(ua)} a "
                           f"step, the captures pay different profiler costs): "
                           f"{fmt_ns(p['realised_unprofiled_ns'])} {per}{err}"))
        else:
            out.append((1, f"realised {fmt_ns(p['realised_ns'])}{pm} {per}{rp}{err}"))
    if p.get("not_judged"):
        out.append((1, f"not judged: {p['not_judged']}"))
    if p["promised_ns"] is not None:   # a lever of several the replay could not make
        for m, why in refused.items():
            out.append((1, f"{m} left out of the promise (BEFORE's replay could not make "
                           f"it): {why}"))
    return out


def _refusals(refused: dict) -> str:
    """The models' reasons, named by model where there are several."""
    if len(refused) == 1:
        return next(iter(refused.values()))
    return "; ".join(f"{m}: {why}" for m, why in refused.items())


def _kernel_lines(k: dict, per: str) -> list[str]:
    if not k.get("before_count") and not k.get("after_count"):
        return []
    lines = ["", f"Kernels{per}, matched by name: {k['matched']} in both, "
             f"{k['slower_count']} slower, {k['faster_count']} faster, "
             f"{k['new_count']} new, {k['gone_count']} gone"]
    for key in ("slower", "faster", "new", "gone"):
        if not k[key]:
            continue
        lines.append(f"  {key}:")
        for r in k[key]:
            pct = f"{r['pct']:+.0f}%" if r["pct"] is not None else ""
            lines.append(f"    {_signed(r['delta_ns']):>10} {pct:>6}  {fmt_ns(r['before_ns']):>9} -> "
                         f"{fmt_ns(r['after_ns']):<9}  {short_name(r['name'], 52)}")
    return lines


def _signed(ns: int) -> str:
    return ("+" if ns > 0 else "") + fmt_ns(ns)
