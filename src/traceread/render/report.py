"""The text report of ``traceread analyze``: verdict first, then the figures behind it."""
from __future__ import annotations

import re

import numpy as np

from ..passes.attribution import CPU_CATEGORIES, waited_summary
from ..verdict.bounds import TITLE
from . import safe
from .anatomy_text import anatomy_lines
from .fmt import TABLE_WIDTH, fit, fit_list, plural, short_name, tail_lines, width
from .words import (RULED_OUT_ROWS, RULED_OUT_TITLE, because_words, busy_note, ruled_out,
                    together_words)
from .text import (ORIGIN_NOTE, TODO_ROWS, action_gain, empty_todo, fmt_ns, projected_words,
                   rel_time, todo_title,
                   replay_lines, utilization_lines)

BOUND_TITLE = TITLE
STEP_ROWS = 12
GAP_ROWS = 8
OP_ROWS = 8
KERNEL_ROWS = 8


def _pct(a, b) -> str:
    return f"{100.0 * a / b:5.1f}%" if b else "    -"


def _bar(frac: float, width: int = 24) -> str:
    n = int(round(max(0.0, min(1.0, frac)) * width))
    return "█" * n


def render_report(a) -> str:
    out: list[str] = []
    out += _header(a)
    out += _window(a)
    out += _verdict(a)
    if len(a.devices):
        out += _devices(a)
        out += _attribution(a)
    out += _steps(a)
    out += replay_lines(getattr(a, "replay", None))
    if len(a.gaps):
        out += _gaps(a)
        out += _top_ops(a)
    out += _comms(a)
    out += _layout(getattr(a, "parallelism", None))
    out += _compile(a)
    out += _graphs(a)
    out += _kernels(a)
    u = getattr(a, "utilization", None)
    notes = {lv["lever"]: busy_note(lv["lever"], a.verdict.get("busy_placement"))
             for lv in ((u or {}).get("busy") or {}).get("levers") or []}
    if len(a.devices):   # a CPU-only trace: no GPU to use
        out += utilization_lines(u, notes, window_steps(a))
    return "\n".join(fit("\n".join(out).split("\n"))).rstrip() + "\n"


def window_steps(a) -> int:
    """What a window total divides by to be per step, as the to-do list's savings are: the
    analysed steps x the devices (0: no steps, figures stay over the window)."""
    n = (a.verdict.get("evidence") or {}).get("steps")
    if not isinstance(n, (int, float)) or n <= 0:
        return 0
    facts = getattr(a, "facts", None)
    dev = (getattr(facts, "figures", None) or {}).get("devices") if facts is not None else None
    return int(n) * max(1, int(dev or 1))


def _header(a) -> list[str]:
    m = a.meta
    bits = [m.format or "trace"]
    if m.format_version:
        bits[0] += f" (schema {m.format_version})"
    if m.producer:
        bits.append(m.producer)
    if m.rank >= 0:
        bits.append(f"rank {m.rank}" + (f" of {m.world_size}" if m.world_size > 0 else ""))
    bits.append(f"{a.events:,} events")
    bits.append(f"span {fmt_ns(a.span_ns)}")
    line = "  " + " · ".join(bits)
    if len(line) > width() and m.producer:  # the producer's version details go first
        line = line.replace(m.producer, re.sub(r"\s*\(.*?\)", "", m.producer), 1)
    return [safe.name(m.path), line]  # whole, even past the width: a path is copied


def _window(a) -> list[str]:
    w = getattr(a, "window", None)
    if w is None:
        return []
    d = w.to_dict()
    if d["mode"] == "whole_trace":
        return ["  analysed: the whole trace -- no steps found, so any start-up and warm-up is "
                "included (mark steps with torch.profiler's prof.step() or NVTX ranges named "
                "step_N, or pass --window)"]
    what = (f"steps #{d['first_step']}–#{d['last_step']} ({d['steps_analysed']} of "
            f"{d['steps_total']})" if d["steps_analysed"] else
            "the repeating part (no steps found; --steps all for the whole trace)"
            if d["mode"] == "steady" else (w.note or "an explicit window"))
    line = f"  analysed: {what}, {fmt_ns(d['dur_ns'])} from +{fmt_ns(d['offset_ns'])}"
    if d["mode"] == "explicit" and not w.note:   # a note: the reader chose it (processes apart)
        line += " (--window)"
    lines = [line]
    for x in d["excluded"]:
        detail = f" ({x['detail']})" if x.get("detail") else ""
        reason = "" if x["reason"] == x["what"] else f": {x['reason']}"
        lines.append(f"    excluded {fmt_ns(x['ns'])} {x['what']}{reason}{detail}")
    return lines


def _verdict(a) -> list[str]:
    v = a.verdict
    title = v.get("title") or BOUND_TITLE.get(v["bound"], v["bound"])
    lines = ["", f"VERDICT  {v['bound'].upper()} — {title}",
             f"  {v['summary']}"]
    ev = v["evidence"]
    facts = []
    if "lost_pct" in ev and ev.get("exposed_comm_ns"):
        facts.append(f"exposed communication {ev['exposed_comm_pct']:.1f}% of the window")
    if ev.get("exposed_copy_pct", 0) >= 0.5:
        facts.append(f"exposed host<->device copies {ev['exposed_copy_pct']:.1f}% of the window")
    if ev.get("top_sync_op") and v["bound"] in ("sync", "mixed"):
        facts.append(f"queue drained by {ev['top_sync_op']} in {plural(ev['top_sync_op_gaps'], 'gap')}")
    if ev.get("bursty"):
        facts.append(f"step times are bursty (cv {ev['step_cv']:.2f})")
    if ev.get("recompiles") or ev.get("graph_breaks"):
        facts.append(", ".join(x for x in (plural(ev["recompiles"], "recompile") if ev.get("recompiles") else "",
                                           plural(ev["graph_breaks"], "graph break") if ev.get("graph_breaks")
                                           else "") if x) + " in the analysed window")
    elif ev.get("module_loads", 0) >= max(2, ev.get("steps", 0) // 2):
        facts.append(f"{plural(ev['module_loads'], 'GPU module')} loaded inside the analysed steps: "
                     "kernels are still being JIT-compiled (torch.compile recompiles? "
                     "TORCH_LOGS=recompiles)")
    if ev.get("startup_ns"):
        calls = ", ".join(f"{c['name']} {fmt_ns(c['ns'])}" for c in ev["startup_calls"])
        facts.append(f"one-time start-up calls cover {fmt_ns(ev['startup_ns'])} of the idle time "
                     f"({calls}): context creation, lazy module loading, first-touch "
                     "allocations -- not the steady state")
    facts += _steady(getattr(a, "steady_state", None))
    if v["bound"] == "gpu" and ev.get("top_kernel"):
        facts.append(f"top kernel {ev['top_kernel_pct']:.1f}% of GPU time: "
                     f"{short_name(ev['top_kernel'], 50)}")
    facts += _job_role(v.get("job"))
    for f in facts:
        lines.append(f"  {f}")
    for m in v.get("missing", []):
        lines.append(f"  missing: {m}")
    lines += todo_lines(v, busy_floor(a))
    return lines


def busy_floor(a) -> int | None:
    """The GPU's busy time per step (facts ``busy_step_mean_ns``): no projected step is
    shorter (docs/analysis.md, "Projected step"). None where the record lacks it."""
    facts = getattr(a, "facts", None)
    ns = (getattr(facts, "figures", None) or {}).get("busy_step_mean_ns") \
        if facts is not None else None
    return int(ns) if ns else None


def todo_lines(v: dict, floor_ns: int | None = None) -> list[str]:
    """The verdict's one ranked to-do list (``verdict.actions``; plain ``levers`` when a
    verdict has none), the first TODO_ROWS of it, then the unranked diagnostics."""
    acts = [x for x in v.get("actions") or [] if isinstance(x, dict)]
    lines = ["", f"  {todo_title(v)}"]
    if acts:
        for i, x in enumerate(acts[:TODO_ROWS], 1):
            lines += tail_lines(f"    {i}. ", f"{x['lever']} [{x.get('cost', '')}]")
            gain = action_gain(x, acts[i - 2] if i > 1 else None, floor_ns)
            if gain:
                lines += tail_lines("       ", gain)
            if x.get("note"):   # what the replay left unpriced (verdict/whatif.kept_note)
                lines += tail_lines("       ", str(x["note"]))
            why = because_words(x.get("because") or [])
            if why:
                lines += tail_lines("       ", f"because: {why}")
    elif v.get("levers"):
        lines += [f"    {i}. {lv}" for i, lv in enumerate(v.get("levers", [])[:TODO_ROWS], 1)]
    else:
        lines += tail_lines("    ", empty_todo(v))
    more = max(len(acts), len(v.get("levers", []))) - TODO_ROWS
    if more > 0:
        lines.append(f"    ... and {more} more (all in the JSON's verdict.actions)")
    both = (v.get("what_if") or {}).get("levers_together")
    if isinstance(both, dict) and both.get("saves_ns") is not None:
        step = f", step -> {projected_words(both['projected_step_ns'], floor_ns)}" \
            if both.get("projected_step_ns") else ""
        per = both.get("saves_per_step_ns")
        saves = f"{fmt_ns(per)} per step" if per is not None else fmt_ns(both["saves_ns"])
        lines += tail_lines("  ", f"The replayed levers together ({together_words(both, acts)}),"
                            f" replayed at once, not summed: saves ~{saves}{step}")
    lines += ruled_out_lines(v.get("withdrawn") or [])
    diag = v.get("diagnostics") or []
    if diag:
        lines += ["", "  To find out more:"] + [f"    - {d}" for d in diag]
    return lines


def ruled_out_lines(withdrawn: list[dict]) -> list[str]:
    """The levers the program rules out (words.ruled_out), one line per reason, under the
    to-do list: why a reader does not see, say, CUDA graphs offered."""
    rows = ruled_out(withdrawn)
    if not rows:
        return []
    lines = ["", f"  {RULED_OUT_TITLE}"]
    for ids, why in rows[:RULED_OUT_ROWS]:
        lines += tail_lines("    - ", f"{ids}: {why}")
    more = len(rows) - RULED_OUT_ROWS
    if more > 0:
        lines.append(f"    ... and {more} more (the JSON's verdict.withdrawn)")
    return lines


def _steady(st: dict | None) -> list[str]:
    """Not the steady state: which state, and the events that prove it (passes/steady.py)."""
    if not st or st.get("state", "steady") == "steady":
        return []
    if st["state"] == "sampled":
        return [f"not steady state: sampled trace ({st['evidence'][0]['what']}: "
                f"{st['evidence'][0]['name']}): the idle figures below are not meaningful"]
    proof = ", ".join(f"{x['name']} {fmt_ns(x['ns'])}" + (f" ×{x['calls']}" if x.get("calls", 1) > 1
                                                         else "") for x in st["evidence"][:3])
    what = {"cold_start": "cold start", "jit": "JIT compilation"}
    return [f"not steady state: {what.get(st['state'], st['state'])} explains "
            f"{fmt_ns(st['ns'])} of idle time" + (f" ({proof})" if proof else "")]


def _job_role(job: dict | None) -> list[str]:
    """This rank's role in its multi-rank job (``multirank.adjust_rank_verdicts``)."""
    if not job or job.get("role") not in ("straggler", "waiting"):
        return []
    if job["role"] == "straggler" and job.get("cause") in ("stage_compute", "stage_untraced"):
        return [f"{job['job']}: this rank's pipeline stage is the slow one: it works "
                f"{fmt_ns(job['late_by_ns'])} per step more than the other stages' median"]
    if job["role"] == "straggler" and job.get("basis") == "thread_waits":
        return [f"{job['job']}: this rank is the straggler, {fmt_ns(job['late_by_ns'])} late (median; "
                f"from how long the other ranks' launching threads wait)"]
    if job["role"] == "straggler":   # the job verdict's one lateness, as it defines it
        return [f"{job['job']}: this rank is the straggler, {fmt_ns(job['late_by_ns'])} late (median; "
                f"late: arriving after the next-latest rank)"]
    return [f"{job['job']}: waits {fmt_ns(job['wait_ns'])} in all for rank {job['waits_for']}, the straggler"]


def _devices(a) -> list[str]:
    whole = getattr(a, "window", None) is None or a.window.mode == "whole_trace"
    # (name, window, figure, share, gaps) column widths; one space apart when narrow
    n, w, f, p, k = (6, 9, 8, 6, 6) if narrow() else (14, 10, 9, 8, 7)
    g = _gap()
    lines = ["", "GPU activity (" + ("first to last GPU op of each device)" if whole
                                    else "in the analysed window)"),
             f"  {'device':<{n}}{'window':>{w}}{g}{'busy':>{f + 1 + p}}{g}"
             f"{'idle':>{f + 1 + p}}{g}{'gaps':>{k}}"]
    for r in a.devices.itertuples():
        name = f"{r.device}" + (f" pid {r.pid}" if a.devices["pid"].nunique() > 1 else "")
        lines.append(f"  {name:<{n}}{fmt_ns(r.window_ns):>{w}}{g}"
                     f"{fmt_ns(r.busy_ns):>{f}} {_pct(r.busy_ns, r.window_ns):>{p}}{g}"
                     f"{fmt_ns(r.idle_ns):>{f}} {_pct(r.idle_ns, r.window_ns):>{p}}{g}{r.gaps:>{k},}")
    return lines


def narrow() -> bool:
    """A terminal narrower than the tables' TABLE_WIDTH: columns one space apart and the
    free-text column cut, so each row stays on one line (a 60-column terminal)."""
    return width() < TABLE_WIDTH


def _gap() -> str:
    return " " if narrow() else "  "


def _attribution(a) -> list[str]:
    s = a.attribution
    idle = sum(s["by_cpu"].values())
    if not idle:
        return ["", "No idle time inside the GPU's active window."]
    lines = ["", f"Where the idle GPU time went ({fmt_ns(idle)}): what the launching host "
             "threads were doing"]
    for c in sorted(CPU_CATEGORIES, key=lambda c: -s["by_cpu"][c]):
        ns = s["by_cpu"][c]
        if not ns:
            continue
        lines.append(f"  {c:<11}{fmt_ns(ns):>10} {_pct(ns, idle)}  {_bar(ns / idle)}")
    d = s["by_drain"]
    lines.append(f"  queue drained by a blocking sync: {fmt_ns(d['sync'])} {_pct(d['sync'], idle).strip()}"
                 f"; host simply late (starved): {fmt_ns(d['starved'])} "
                 f"{_pct(d['starved'], idle).strip()}")
    late_q = int(s.get("host_late_queued_ns") or 0)
    queued = int(d.get("queued") or 0) + late_q   # the verdict's queued time: both kinds
    if queued:
        lines.append(f"  next op already queued (GPU waited on something else): "
                     f"{fmt_ns(queued)} {_pct(queued, idle).strip()}" + _waited(a.gaps))
    if late_q:
        lines += tail_lines("    ", f"{fmt_ns(late_q)} of it inside host-late gaps: the host was "
                            "busy (the bars above) but the GPU already had its next op, so the "
                            "verdict charges that time to queued, not to the host")
    for op, v in sorted(s["by_sync_op"].items(), key=lambda kv: -kv[1]["ns"])[:4]:
        lines.append(f"    after {op}: {fmt_ns(v['ns'])} in {plural(v['gaps'], 'gap')}")
    return lines


def _waited(gaps) -> str:
    text = waited_summary(gaps)
    return f"; on {text}" if text else ""


# The per-step idle columns: launch-charged (the verdict's) and where it occurs.
STEP_IDLE_LEGEND = ("  GPU idle: the gaps ended by work the step launched (the last step's: and "
                    "the window's tail after its last GPU op); in span: idle inside the step's "
                    "own host time; program: the later of the host's time and the GPU's work "
                    "(* GPU-bound)")


def step_stats_line(a, program: bool = False) -> str:
    """Count, mean, median, p90 and cv of the step markers' host spans. With a ``program``
    step line below it (a GPU trace) they are called host spans and the evenness is judged
    there, on the step the program waits on: a host span is not the step where the GPU
    paces it. "even" / "BURSTY" judges only how alike the steps are; whether the window is
    the steady state is passes/steady's word."""
    s = a.step_stats
    name = short_name(a.steps['name'].iloc[0], 30)
    what = (f"iterations, from one {name} end to the next: no step markers"
            if a.step_source == "optimizer" else f"{name} …")
    head = f"Steps: {s['count']} ({what}), " + ("host spans: mean " if program else "mean ")
    tail = "" if program else f" ({evenness(s['bursty'], s['count'], s['cv'])} step times)"
    return (head + f"{fmt_ns(s['mean_ns'])}, median {fmt_ns(s['median_ns'])}, "
            f"p90 {fmt_ns(s['p90_ns'])}, cv {s['cv']:.2f}" + tail)


def evenness(bursty: bool, count: int, cv: float) -> str:
    # bursty needs 3 steps (passes/steps.step_stats); two unlike steps are not "even", and
    # one step is not even with anything
    if count < 2:
        return "one step: nothing to compare"
    return "BURSTY" if bursty else "even" if count >= 3 or cv <= 0.25 else "too few to judge"


def step_head(start: bool = False) -> str:
    """The step table's header (``start``: the ``steps`` command's start column)."""
    g = _gap()
    at = f"{g}{'start':>11}" if start else ""
    span = f"{'in span':>8}{g}" if _with_span(start) else ""
    head = (f"  {'step':>6}{at}{g}{'host':>8}{g}{'program':>8}{g}"
            f"{'GPU busy':>8}{g}{'GPU idle':>8}{g}{span}{'gaps':>5}{g}")
    room = _table_width() - len(head)
    return head + next(w for w in ("main idle cause", "idle cause", "cause") if len(w) <= room
                       or w == "cause")


def _with_span(start) -> bool:
    """The in-span column (a part of GPU idle) where the row has room for it: not on a
    narrow terminal, nor beside the ``steps`` command's start column."""
    return not narrow() and not start


QUEUE_PACED = 0.5   # a GPU-paced step the GPU is busy less than half of: its queue paces it


def program_step_line(a) -> str | None:
    """The step the program waits on (passes/steps.program_step) and what bounds it:
    "program step 18.2 ms mean (GPU-bound: the host runs ahead by 12 ms; 6 of 6 steps)"."""
    from ..passes.steps import program_step_of

    p = program_step_of(a)
    if not p:
        return None
    n = f"{p['gpu_bound_steps']} of {p['steps']} steps GPU-bound"
    busy = _gpu_paced_busy_share(a)
    if p["bound_by"] == "gpu" and busy is not None and busy < QUEUE_PACED:
        # paced by the GPU's timeline while it mostly idles: its queued work waits (on an
        # event, another stream, its front-end), not busy kernels
        what = (f"paced by the GPU's queue, busy only {100 * busy:.0f}% of it: "
                f"its queued work waits; {p['gpu_bound_steps']} of {p['steps']} steps paced by "
                "the GPU")
    elif p["bound_by"] == "gpu":
        why = (f"the host runs ahead by {fmt_ns(p['host_ahead_ns'])}" if p["host_ahead_ns"] > 0
               else "the host waits on it")
        what = f"GPU-bound: {why}; {n}"
    else:
        what = f"host-bound: the GPU waits on the host; {n}"
    cv = (f", cv {p['cv']:.2f}, {evenness(p['bursty'], p['steps'], p['cv'])}"
          if "cv" in p else "")
    return (f"  program step {fmt_ns(p['mean_ns'])} mean, median {fmt_ns(p['median_ns'])}{cv} "
            f"({what}): per step the later of the host's span and the GPU's work, "
            "from the previous step's end")


def _gpu_paced_busy_share(a) -> float | None:
    """How busy the GPU is on the steps it paces (their busy time over their program steps).
    Over every step, a few host-bound stalls (a DataLoader that falls behind every few
    steps: param's resnet) read a GPU 99% busy on its own steps as "busy only 47%"."""
    st = a.steps   # a program step line has these columns (passes/steps.program_columns)
    gpu = st["bound_by"].to_numpy(object) == "gpu"
    prog = st["program_ns"].to_numpy(np.int64)[gpu]
    # the busiest device's (busy_ns sums the devices: two half-busy GPUs are not one busy one),
    # with the work queued before the recording that it ran (steps.busy_seen)
    col = next(c for c in ("busy_seen_ns", "busy_max_ns", "busy_ns") if c in st)
    busy = np.minimum(st[col].to_numpy(np.int64)[gpu], prog)
    return int(busy.sum()) / int(prog.sum()) if prog.sum() > 0 else None


def overhead_lines(a) -> list[str]:
    """The profiler's estimated cost (passes/overhead.py), where it is material:
    "Profiler: profiled 40.8 ms a step; ~27 ms without the profiler (...)"."""
    o = ((a.facts.figures if a.facts is not None else {}) or {}).get("profiler_overhead")
    if not o or not o.get("material"):
        return []
    how = [f"{o['busiest_thread_ops_per_step']:,.0f} ops a step on the busiest thread"]
    how += [w for w, on in (("record_shapes", o["record_shapes"]),
                            ("with_stack", o["with_stack"])) if on]
    return [f"Profiler: profiled {fmt_ns(o['profiled_step_ns'])} a step; "
            f"~{fmt_ns(o['unprofiled_step_ns'])} without the profiler ({', '.join(how)}; "
            f"host levers priced without it)"]




def _table_width() -> int:
    return min(width(), TABLE_WIDTH)


STEP_HEAD = step_head()


def step_row(r: dict, start: str | None = None) -> str:
    """One step's row; ``start`` (the ``steps`` command's column) after the step number.
    The cause's time is dropped where the row would pass TABLE_WIDTH."""
    g = _gap()
    prog = r.get("program_ns")
    prog = "-" if prog is None else fmt_ns(prog) + ("*" if r.get("bound_by") == "gpu" else " ")
    at = f"{g}{start:>11}" if start is not None else ""
    span = f"{fmt_ns(r['idle_in_span_ns']):>8}{g}" if _with_span(start) else ""
    row = (f"  {'#' + str(r['step']):>6}{at}{g}{fmt_ns(r['dur']):>8}{g}{prog:>8}{g}"
           f"{fmt_ns(r['busy_ns']):>8}{g}{fmt_ns(r['idle_ns']):>8}{g}{span}{r['gaps']:>5,}{g}")
    if not r["idle_ns"]:
        return row.rstrip()
    vals = np.array([r[f"idle_{c}"] for c in CPU_CATEGORIES])
    j = int(vals.argmax())
    cause = f"{CPU_CATEGORIES[j]} {fmt_ns(vals[j])}"
    room = _table_width() - len(row)
    return row + (cause if len(cause) <= room else CPU_CATEGORIES[j][:max(room, 4)])


def _steps(a) -> list[str]:
    st = a.steps
    if a.step_source == "whole_trace":
        w = getattr(a, "window", None)   # the analysed stretch, as the header says it
        what = {"steady": "the repeating part", "explicit": "the --window"}.get(
            getattr(w, "mode", None), "the whole trace")
        return ["", "Steps: none found (no ProfilerStep#N, step-like ranges or optimizer "
                "steps); "
                f"{what} is analysed as one stretch (use --step-pattern REGEX)"]
    gpu = bool(len(a.devices))
    prog = [x for x in [program_step_line(a)] if x and gpu]
    lines = ["", step_stats_line(a, program=bool(prog))] + prog + \
        overhead_lines(a) + anatomy_lines(a) + ([STEP_IDLE_LEGEND, step_head()] if gpu
                                                else [host_step_head()])
    rows = st
    if len(st) > STEP_ROWS:  # the slowest steps matter most
        key = "program_ns" if "program_ns" in st else "dur"
        rows = st.sort_values(key, ascending=False, kind="stable").head(STEP_ROWS).sort_values(
            "start", kind="stable")
        lines[1] += f"; showing the {STEP_ROWS} slowest"
    row = step_row if gpu else host_step_row
    lines += [row(r) for r in rows.to_dict(orient="records")]
    return lines


def host_step_head(start: bool = False) -> str:
    """The step table of a trace without GPU work: the host's span is the step."""
    g = _gap()
    at = f"{g}{'start':>11}" if start else ""
    return f"  {'step':>6}{at}{g}{'host':>8}"


def host_step_row(r: dict, start: str | None = None) -> str:
    g = _gap()
    at = f"{g}{start:>11}" if start is not None else ""
    return f"  {'#' + str(r['step']):>6}{at}{g}{fmt_ns(r['dur']):>8}"


def render_steps(a) -> str:
    """``traceread steps``: every step (start on analyze's origin), its main idle cause,
    and the step-time statistics."""
    lines = [safe.name(a.meta.path)]
    if a.step_source == "whole_trace" or not len(a.steps):
        return "\n".join(fit(lines + _steps(a)[1:])) + "\n"
    t0 = trace_origin(a)
    gpu = bool(len(a.devices))
    head = step_head(start=True) if gpu else host_step_head(start=True)
    prog = [x for x in [program_step_line(a)] if x and gpu]
    lines += [step_stats_line(a, program=bool(prog))] + prog + \
        anatomy_lines(a) + ([STEP_IDLE_LEGEND] if gpu else []) + [ORIGIN_NOTE, head]
    row = step_row if gpu else host_step_row
    lines += [row(r, rel_time(r["start"] - t0)) for r in a.steps.to_dict(orient="records")]
    return "\n".join(fit(lines)) + "\n"


def trace_origin(a) -> int:
    """The one time origin of every listed time: the trace's first event (``--window``'s)."""
    w = a.window
    if w is not None:
        return int(w.trace_start)
    ev = a.trace.events if a.trace is not None else None
    return int(ev["ts"].min()) if ev is not None and len(ev) else 0


def _gaps(a) -> list[str]:
    g = a.listed_gaps()
    total = int(a.gaps["duration"].sum())
    title = f"Largest idle gaps (of {len(a.gaps):,}, {fmt_ns(total)} in total"
    if a.min_gap_ns:
        title += f"; {len(g):,} longer than {fmt_ns(a.min_gap_ns)}"
    sp, dw = _gap(), (12 if narrow() else 20)
    lines = ["", title + ")", ORIGIN_NOTE,
             f"  {'start':>11}{sp}{'duration':>9}{sp}{'dev':>3}{sp}{'step':>6}{sp}"
             f"{'drained by':<{dw}}{sp}host was in"]
    if not len(g):
        return lines[:2]
    t0 = trace_origin(a)
    top = g.sort_values(["duration", "start"], ascending=[False, True], kind="stable").head(GAP_ROWS)
    for r in top.to_dict(orient="records"):
        parts = sorted(((r[f"cpu_{c}"], c) for c in CPU_CATEGORIES if r[f"cpu_{c}"]), reverse=True)
        drain = "sync " + r["drain_op"] if r["drain"] == "sync" else r["drain"]
        if r["drain"] == "queued" and r.get("waited_on"):
            drain = "queued: " + r["waited_on"]
        step = "#" + str(r["step"]) if r["step"] >= 0 else "-"
        row = (f"  {rel_time(r['start'] - t0):>11}{sp}{fmt_ns(r['duration']):>9}{sp}"
               f"{r['device']:>3}{sp}{step:>6}{sp}{short_name(drain, dw):<{dw}}{sp}")
        lines.append(row + fit_list(row, [f"{c} {fmt_ns(ns)}" for ns, c in parts[:3]]))
    return lines


def _top_ops(a) -> list[str]:
    t = a.top_ops
    if not len(t):
        return []
    lines = ["", "Host ops running during the gaps (inclusive time inside gaps)"]
    for r in t.head(OP_ROWS).itertuples():
        lines.append(f"  {fmt_ns(r.ns):>10}  {r.count:>7,}x  {r.category:<10}  "
                     f"{short_name(r.name, _table_width() - 36)}")
    return lines


def _comms(a) -> list[str]:
    n = a.nccl
    if n is None or not len(n) or not int(n["comm_ns"].sum()):
        return []
    comm, exposed, ov = int(n["comm_ns"].sum()), int(n["exposed_ns"].sum()), int(n["overlap_ns"].sum())
    lines = ["", f"Communication: {fmt_ns(comm)} of comm kernels, {fmt_ns(exposed)} exposed, "
             f"{100.0 * ov / comm:.1f}% overlapped with compute"]
    c = a.collectives
    if c is not None and len(c):
        for r in c.head(6).to_dict(orient="records"):
            bw = r.get("busbw_gbps")
            bw = f", busbw {bw:.1f} GB/s" if isinstance(bw, float) and bw == bw else ""
            lines.append(f"  {str(r['collective']):<16}{r['count']:>7,}x  {fmt_ns(r['total_ns']):>10}"
                         f"  exposed {fmt_ns(r['exposed_ns'])}{bw}")
    return lines


def _layout(p: dict | None) -> list[str]:
    """One line: the strategies and each one's loss (passes/parallelism.py)."""
    if not p or not (p.get("strategies") or p.get("comm_model")):
        return []
    parts = [f"{s['kind'].upper()}" + (f" x{s['group_size']}" if s["group_size"] else "")
             for s in p["strategies"]]
    pp, ep, dp = p.get("pipeline"), p.get("ep"), p.get("ddp")
    if pp:
        bubble = next(iter(pp["bubble_pct_by_stage"].values()))
        own = f", the job's; this stage alone reads {pp['schedule_own']}" \
            if pp.get("schedule_own") else ""
        theory = f" (schedule {pp['schedule']}{own}, m={pp['microbatches']}: " \
                 f"{pp['theoretical_bubble_pct']}% in theory)" if pp["theoretical_bubble_pct"] else ""
        parts.append(f"stage {pp['stage']} idle {bubble}% of the step{theory}")
    if ep and ep.get("send_imbalance"):
        parts.append(f"all_to_all sends {ep['send_imbalance']}x the mean to rank {ep['hot_rank']}")
    if dp and dp.get("overlap_efficiency") is not None:
        parts.append(f"all_reduce {100 * dp['overlap_efficiency']:.0f}% hidden, exposed tail "
                     f"{fmt_ns(dp['exposed_tail_ns'])} ({dp['tail_step_share_pct']}% of the steps)")
    tp = p.get("tp")
    if tp:
        worst = max(tp["layers"], key=lambda x: x["exposed_ns"])
        parts.append(f"TP all_reduce exposed {fmt_ns(tp['exposed_ns'])} ({tp['step_share_pct']}% of "
                     f"the steps, {tp['layers_per_step']} per step; layer {worst['layer']} "
                     f"{worst['comm_pct']}% comm)")
    for coll, x in (p.get("fsdp") or {}).items():
        if isinstance(x, dict) and x.get("exposed_pct") is not None:
            parts.append(f"FSDP {coll} {x['exposed_pct']}% exposed ({fmt_ns(x['exposed_ns'])})")
    parts += [_comm_model_text(m) for m in p.get("comm_model") or []]
    return ["", "Parallelism: " + "; ".join(parts)]


def _comm_model_text(m: dict) -> str:
    """One size regime's fit, its link share and its slowest call (passes/parallelism.py)."""
    t = (f"{m['collective']} x{m['group_size']} {_size(m['min_bytes'])}..{_size(m['max_bytes'])} "
         f"fits {m['alpha_us']:.0f} us + bus bytes / {m['beta_gbps']} GB/s (median "
         f"{m['fit_error_pct']}%, worst {m['worst_error_pct']}% off)")
    if m.get("link_pct") is not None:
        t += f", {m['link_pct']:.0f}% of the {m['link_gbps']:g} GB/s link" + \
            (" -- far below it" if m.get("below_link") else "")
    lim = m.get("limit")
    if lim:   # why the worst error cannot be small: two sizes no line meets both closely
        (a, b), (ta, tb) = lim["bytes"], lim["median_ns"]
        how = (f"{_size(a)} takes {fmt_ns(ta)}, {_size(b)} only {fmt_ns(tb)}"
               if lim["why"] == "time_falls" else
               f"{_size(b)} costs more per byte than {_size(a)} ({fmt_ns(tb)} vs {fmt_ns(ta)})")
        t += f" -- {how}: no latency-bandwidth line is within {lim['floor_pct']}% of both"
    t += f", {plural(m['slow_calls'], 'call')} over 2x the fit"
    s = m.get("slowest_call")
    if s:
        t += (f" (worst: {_size(s['bytes'])} at +{fmt_ns(s['offset_ns'])} into the window took "
              f"{fmt_ns(s['dur_ns'])}, {m['worst_x_fit']}x the fit: contention or a late peer)")
    return t


def _size(b: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b / k:g} {unit}"
    return f"{b} B"


def _compile(a) -> list[str]:
    c = a.compile
    if not c or not (c.get("compiles") or c.get("compile_ns") or c.get("cache_lookup_ns")):
        return []
    scope = "in the analysed window" if c.get("scope") == "window" else "in the whole trace"
    line = (f"torch.compile {scope}: {_counts(c)}, "
            f"{fmt_ns(c.get('compile_ns', 0))} compiling")
    if c.get("idle_overlap_ns"):
        line += f" ({fmt_ns(c['idle_overlap_ns'])} while the GPU idled)"
    if c.get("cache_lookup_ns"):
        line += f", guard checks {fmt_ns(c['cache_lookup_ns'])}"
    out = ["", line]
    w = c.get("whole_trace") or {}
    if c.get("scope") == "window" and w:
        out.append(f"  whole trace: {_counts(w)}")
    for b in c.get("breaks") or []:
        out.append(f"  graph break: frame {b['frame']} resumes in frame {b['resumes']} ({plural(b['calls'], 'call')}): "
                   "the code between the two compiled regions runs eagerly")
    return out


def _counts(c: dict) -> str:
    """``N compiles (M recompiles), K graph breaks`` of a compile summary or its whole-trace part."""
    text = f"{plural(c.get('compiles', 0), 'compile')} ({plural(c.get('recompiles', 0), 'recompile')})"
    return text + (f", {plural(c['graph_breaks'], 'graph break')}" if c.get("graph_breaks") else "")


def _graphs(a) -> list[str]:
    g = getattr(a, "graphs", None) or {}
    rec = (g.get("recording") or {}).get("ns", 0)
    if not g.get("replays") and not rec and not g.get("first_runs"):
        return []
    parts = []
    if g.get("replays"):
        parts.append(f"{plural(g['replays'], 'replay')} of {plural(len(g.get('graphs', [])), 'graph')}, "
                     f"{fmt_ns(g.get('replay_gpu_ns', 0))} on the GPU "
                     f"({g.get('replay_share_pct', 0):.1f}% of busy time)")
    if rec:
        parts.append(f"recording {fmt_ns(rec)}")
    if g.get("first_runs"):
        n = g["first_runs"]
        parts.append(f"1 graph launch right after its recording (its first run, no replay)"
                     if n == 1 else f"{n:,} graph launches right after their recording (each "
                     "a graph's first run, no replay)")
    return ["", "CUDA graphs: " + "; ".join(parts)]


def _kernels(a) -> list[str]:
    k = a.kernels
    if k is None or not len(k):
        return []
    lines = ["", f"Top kernels ({len(k):,} distinct)",
             f"  {'time':>6}  {'total':>10}  {'count':>7}  {'avg':>9}  name"]
    for r in k.head(KERNEL_ROWS).itertuples():
        lines.append(f"  {r.pct:5.1f}%  {fmt_ns(r.total_ns):>10}  {r.instances:>7,}  "
                     f"{fmt_ns(r.avg_ns):>9}  {short_name(r.name, _table_width() - 44)}")
    kc = a.kernel_classes
    if kc is not None and len(kc):
        lines.append("  by class: " + ", ".join(
            f"{r['class']} {r['pct']:.0f}%" for r in kc.head(6).to_dict(orient="records")))
    return lines
