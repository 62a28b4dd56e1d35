"""Plain-text renderings for the terminal."""
from __future__ import annotations

from typing import Any

from . import safe
from .fmt import tail_lines, width


TODO_ROWS = 8   # to-do items the text and HTML show before "and N more"
# two savings of one cause this close are one piece of time: verdict/levers.SAME_TIME_SHARE,
# which ranks them (a test holds the two equal; importing the verdict here loads pandas for
# every command that prints text, `info` too)
SAME_TIME_SHARE = 0.05
TODO_TITLE = ("To do, largest saving first (replayed: the step re-simulated with the lever "
              "pulled; [bound]: at most this, the rest of the step unchanged):")


def todo_title(v: dict) -> str:
    """TODO_TITLE, or the order the list follows where it is not the largest saving first:
    a job's lever leading a rank's list ahead of larger savings of its own (h200/ddp2 rank
    0: the straggler's 30.3 ms before NCCL's 96.2 ms); an unpriced kernel lever leading a
    GPU-bound list (``levers.rank``'s kernels_first: HTA's MTIA trace, extra-p con_kernel);
    a lever ranked after the one it needs done first (``Lever.after``: CUDA graphs after
    per-parameter reads) though it saves more -- not one saving about the same time of one
    cause as the lever above it (``levers._pointed_first``)."""
    acts = [x for x in v.get("actions") or [] if isinstance(x, dict)]
    title = TODO_TITLE if not any(x.get("basis") == "anatomy" for x in acts) else \
        TODO_TITLE.replace("unchanged):", "unchanged; [phases]: the step's phases' own model, "
                           "not a bound):")
    lead = acts[0] if acts else {}
    priced = [int(x["saves_ns"]) for x in acts if x.get("saves_ns") is not None]
    if lead.get("id") == "straggler" and any(
            (x.get("saves_ns") or 0) > (lead.get("saves_ns") or 0) for x in acts[1:]):
        order = "the job's lever first, then the largest saving"
    elif lead and lead.get("saves_ns") is None and priced:
        order = "the GPU's own work first (its kernels take the time), then the largest saving"
    elif any(b - a > SAME_TIME_SHARE * b for a, b in zip(priced, priced[1:])):
        # (within it, the two are one piece of time: the lever the trace points at leads)
        order = "largest saving first, each after any lever it needs done first"
    else:
        return title
    return title.replace("largest saving first", order)


def empty_todo(v: dict) -> str:
    """Why a verdict's to-do list is empty, in place of a bare title (text and HTML)."""
    text = ("nothing to pull: no lever of the table applies to this trace (each one's "
            "preconditions fail, or it would save under 1% of the window)")
    if v.get("bound") == "gpu":
        top = (v.get("evidence") or {}).get("top_kernel")
        text += ("; the GPU is busy with its own work: to make it cheaper, profile the "
                 "kernels that take the time (Nsight Compute, rocprof)")
        if top:
            text += f", first {safe.short(str(top), 60)}"
    return text


def projected_words(ns: int, floor_ns: int | None = None, per_sample: bool = False) -> str:
    """A projected step; one within 0.5% of the GPU's own busy time per step (``floor_ns``)
    is that busy time "at best": given-back idle time cannot shorten the GPU's work, so two
    levers of different savings that both reach it read the same, and say why. The verdict
    floors each projection already (scores._gain, whatif.projected); one below the busy time
    is a lever that removes GPU work (fused kernels, an exposed collective) and reads as is."""
    if floor_ns and not per_sample and floor_ns * 0.995 <= ns <= floor_ns * 1.005:
        return f"{fmt_ns(floor_ns)} at best (the GPU's own busy time per step)"
    return fmt_ns(ns)


def action_gain(x: dict, prev: dict | None = None, floor_ns: int | None = None) -> str:
    """One to-do item's saving, projected step and culprit, in the words every renderer uses;
    an item saving the same time of the same cause as ``prev`` says so (alternatives for one
    piece of lost time, not savings to add up)."""
    if prev and prev.get("cause") == x.get("cause") and x.get("saves_ns") is not None \
            and prev.get("saves_ns") is not None:
        a, b = int(prev["saves_ns"]), int(x["saves_ns"])
        if a == b:
            return f"the same {x.get('cause')} time as the lever above (not in addition to it)"
        if abs(a - b) <= SAME_TIME_SHARE * max(a, b):   # two replays of one cause's time
            # (h200 cold.bad: late_read 377 us beside remove_syncs' 383 us read as two savings)
            per = x.get("saves_per_step_ns")
            amount = f"~{fmt_ns(per)} per step" if per is not None else f"~{fmt_ns(b)}"
            return (f"{amount}: about the same {x.get('cause')} time as the lever above "
                    "(not in addition to it)")
    parts = []
    per, ns = x.get("saves_per_step_ns"), x.get("saves_ns")
    k = x.get("per_sample_x")
    if per is not None and k:
        parts.append(f"saves ~{fmt_ns(per)} per step's worth of samples at {k:g}x the batch")
    elif per is not None:
        parts.append(f"saves ~{fmt_ns(per)} per step")
    elif ns is not None:
        parts.append(f"saves ~{fmt_ns(ns)}")
    else:
        parts.append("saving not estimated")
    if isinstance(x.get("saves_pct"), (int, float)):
        parts[-1] += f" ({x['saves_pct']:.1f}% of the {x.get('saves_pct_of') or 'window'})"
    if x.get("basis") in ("bound", "anatomy"):
        parts[-1] += " [bound]" if x["basis"] == "bound" else " [phases]"
    if x.get("net_of_wait_ns"):   # a waiting rank's own comms lever (jobs/multirank)
        parts[-1] += f", less its wait for the straggler ({fmt_ns(x['net_of_wait_ns'])} in all)"
    if x.get("projected_step_ns"):
        at = f" at {k:g}x the batch" if k else ""
        parts.append(f"step{at} -> {projected_words(x['projected_step_ns'], floor_ns, bool(k))}")
        if x.get("projected_floor") == "gpu_busy" and "at best" not in parts[-1]:
            parts[-1] += " (the GPU's busy time)"   # the GPU-bound step's own work stays
        elif x.get("projected_floor") == "host":   # the host, a step ahead, paces it then
            parts[-1] += " at best (the host's own span per step: it ran a step ahead)"
    text = ", ".join(parts)
    cause = x.get("cause", "")
    culprit = " ".join(str(x.get("culprit") or "").split())
    if culprit and cause == "gpu" and culprit in str(x.get("lever", "")):
        culprit = ""   # a busy-time lever names its evidence in its text already
    return f"{text}; {cause}: {culprit}" if culprit else f"{text} ({cause})"


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


def fmt_bytes(n: float) -> str:
    """Human size in decimal units: 6.11 kB, 45.6 MB, 1.2 GB, 12 B (never 6.11e-06 GB)."""
    n = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_rate(gb_per_s: float) -> str:
    """A bandwidth from GB/s, in the unit that shows it: 12.3 GB/s, 45.6 MB/s, 7 kB/s."""
    return fmt_bytes(gb_per_s * 1e9) + "/s"


# Every listed start (analyze's gaps, idle, gaps, steps) counts from the trace's first event.
ORIGIN_NOTE = "  (start: time after the trace's first event, as in analyze, idle, gaps and --window)"


def rel_time(ns: float) -> str:
    """Time after the trace's first event, to the microsecond: ``+1.234567 s``.

    Same origin as ``--window``, so a gap's start can be pasted into it.
    """
    return f"+{float(ns) / 1e9:.6f} s"


def render_info(info: dict[str, Any]) -> str:
    rank = "unknown" if info["rank"] < 0 else str(info["rank"])
    world = "" if info["world_size"] < 0 else f" of {info['world_size']}"
    pr = info.get("process_ranks") or {}
    if info["rank"] < 0 and pr:  # one export of several ranks: say how analyze numbers them
        rank = ", ".join(f"{r} (pid {p})" for p, r in sorted(pr.items(), key=lambda kv: kv[1]))
        world = f" of {len(pr)}: one per GPU process, as analyze splits this export"
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


def _occupancy_lines(o: dict) -> list[str]:
    """SM coverage (blocks vs SMs) and occupancy: busy is not used (passes/occupancy.py)."""
    if o.get("coverage") is None:
        return []
    occ = (f", est. achieved occupancy {o['occupancy_pct']:.0f}% (the "
           f"{100 * o['occupancy_ns'] / o['kernel_ns']:.0f}% of kernel time that records it)"
           if o.get("occupancy_pct") is not None and o.get("kernel_ns") else "")
    out = [f"  SM coverage {100 * o['coverage']:.0f}% of kernel time (grid blocks vs "
           f"{o['sm_count']} SMs){occ}"]
    under = o.get("underfilled")
    if under:
        out.append(f"  busy but under-filled: SMs sit empty for {under['sm_idle_pct']:.0f}% of "
                   "kernel time; the kernels responsible:")
        for k in under["kernels"][:3]:
            name = " ".join(k["name"].split())[:70].rstrip()   # one-space words: it wraps
            out.append(f"    {name} -- {k['blocks']:,} blocks on {k['sms']} SMs, "
                       f"{k['pct_of_kernel_time']:.0f}% of kernel time, {k['count']:,} "
                       f"launch{'' if k['count'] == 1 else 'es'}")
    return out


def utilization_lines(u: dict | None, notes: dict | None = None, steps: int = 0) -> list[str]:
    """The report section for passes/utilization.py: MFU, busy doing what, levers, memory;
    each busy-time lever says where the to-do list has it, or why not (``notes``: busy lever
    id -> words, render/words.py ``busy_note``); ``steps``: what a window total divides by."""
    if not u:
        return []
    out = ["", "GPU USE (when busy)"]
    m = u.get("mfu") or {}
    if not m.get("has_shapes"):
        out.append(f"  FLOPs/MFU: {m.get('note')}")
    else:
        peak = (f"{m['peak_tflops']:g} TFLOP/s {m['dtype']} dense ({m['peak_source']})"
                if m.get("peak_tflops") else "peak unknown")
        low = ">= " if m.get("lower_bound") else ""
        mfu = f"MFU {low}{100 * m['mfu']:.1f}%" if m.get("mfu") is not None else "MFU n/a"
        wall = m.get("tflops_wall")
        gpu = m.get("tflops_gpu")
        rate = (f"achieved {wall:.1f} TFLOP/s over the step time, {gpu:.1f} over GPU-busy time"
                if wall is not None and gpu is not None else "achieved TFLOP/s n/a")
        out.append(f"  {mfu} on {m.get('device') or 'unknown device'} x{m.get('gpus', 1)} "
                   f"vs {peak}; {rate} ({m['flops'] / 1e12:.3g} TFLOP in "
                   f"{m.get('counted_ops', 0):,} ops)")
        if m.get("hfu") is not None:
            out.append(f"  HFU {100 * m['hfu']:.1f}% (MFU counts the model's FLOPs once; "
                       f"{m['recomputed_flops'] / 1e12:.3g} TFLOP of forward ops recomputed under "
                       "backward: activation checkpointing)")
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
                n = c["count"]
                out.append(f"  memcpy {c['copy_kind']}: {n:,} cop{'y' if n == 1 else 'ies'}, "
                           f"{fmt_bytes(c['bytes'])} at {fmt_rate(c['gb_per_s'])}")
        for lv in b.get("levers") or []:
            note = (notes or {}).get(lv["lever"], "")
            ns = lv["saving_ns"]
            amount = (f"~{fmt_ns(ns / steps)} of GPU time per step" if steps else
                      f"~{fmt_ns(ns)} of GPU time over the window")
            out.append(f"  lever {lv['lever']}: saves {amount} "
                       f"({lv['saving_pct_of_busy']:.0f}% of busy) -- {lv['why']}"
                       + (f"; {note}" if note else ""))
    out += _occupancy_lines(u.get("occupancy") or {})
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
        out.append(f"  device alloc/free API: {api['count']:,} call{'' if api['count'] == 1 else 's'}, "
                   f"{fmt_ns(api['ns'])}")
    for lv in mem.get("levers") or []:
        out.append(f"  lever {lv['lever']}: {lv['why']} -- {lv['advice']}")
    return out


def replay_lines(r: dict | None) -> list[str]:
    """The replay (passes/replay): how well it reproduces the steps, and the critical path."""
    if not r:
        return []
    if not r.get("replayable"):
        if str(r.get("reason", "")).startswith("no GPU work"):   # a CPU-only trace: nothing to say
            return []
        return ["", f"Replay: not replayable -- {r.get('reason')}; savings are bounds"]
    worst = r.get("max_error_pct")
    sampled = f" (sampled: {r['steps_replayed']} of {r['steps_total']} steps)" \
        if r.get("sampled") else ""
    out = ["", f"Replay: {r['steps_replayed']} step(s) as a graph of {r['nodes']:,} nodes, "
           f"{r['edges']:,} cross-lane edges{sampled}: measured {fmt_ns(r['measured_ns'])}, "
           f"replayed {fmt_ns(r['replayed_ns'])} (error {r['error_pct']:+.2f}%"
           + (f", worst step {worst:+.2f}%)" if worst is not None else ")")]
    cp = r.get("critical_path") or {}
    total = cp.get("total_ns") or 0
    if total:
        by = cp["by_label"]
        labels = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in
                           sorted(by.items(), key=lambda kv: -kv[1]) if v >= 0.01 * total)
        out.append(f"  critical path: {labels}")
        if by.get("unexplained", 0) >= UNEXPLAINED_SAID * total:
            out += tail_lines("    ", "unexplained: the chain back from the step's end reaches "
                              "work that nothing traced starts (the first op of a thread "
                              "another thread woke, a GPU op with no launch record); the time "
                              "before it has no traced cause")
        top = cp.get("top", [])[:4]
        lw = max([10] + [len(t["label"]) for t in top])
        for t in top:
            label = t["label"]
            row = f"    {label:<{lw}} {fmt_ns(t['ns']):>10} {t['pct']:5.1f}%  "
            name = " ".join(str(t["name"]).split())   # the row keeps within the table width
            if label == "unexplained":
                name = f"before {name}"
            out.append(row + safe.short(name, max(12, min(width(), 80) - len(row))))
    return out


UNEXPLAINED_SAID = 0.05   # the critical path's unexplained share worth a line of its own


def critical_stop(cp: dict) -> int | None:
    """Where the critical path's drawn links stop when the analysis kept only the first of
    them (passes/replay/critical.py keeps at most MAX_SEGMENTS): the last link's end; None
    when the links cover the whole path (their time adds up to its total)."""
    segs = cp.get("segments") or []
    total = int(cp.get("total_ns") or 0)
    drawn = sum(int(s["end_ns"]) - int(s["start_ns"]) for s in segs)
    if not segs or not total or drawn >= 0.99 * total:
        return None
    return max(int(s["end_ns"]) for s in segs)


def critical_stop_note(cp: dict) -> str:
    """The words for where the drawn critical path stops (HTML lane, overlay track)."""
    segs = cp.get("segments") or []
    drawn = sum(int(s["end_ns"]) - int(s["start_ns"]) for s in segs)
    return (f"the critical path is drawn only up to the bar: the analysis keeps its first "
            f"links ({fmt_ns(drawn)} of its {fmt_ns(cp['total_ns'])}); its totals count every link")
