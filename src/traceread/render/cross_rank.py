"""Cross-rank results of a job as JSON (the ``cross_rank`` object) and as text.

Text: ``render_summary`` is the job verdict that opens ``traceread analyze`` for a
job (who is slow, by how much, why, who waits); ``render_detail`` is the
per-rank table, clocks, matching and metrics that follow the per-rank reports.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..verdict.levers import PP_SLOW_X
from .text import fmt_ns


def _records(df: pd.DataFrame) -> list[dict]:
    recs = df.to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in recs]


def _unmatched(res) -> dict:
    um = pd.DataFrame(res.unmatched)
    if not len(um):
        return {"count": 0, "by_reason": []}
    um["collective"] = um["collective"].fillna("unknown")
    g = um.groupby(["lane", "rank", "collective", "reason"], dropna=False).size().reset_index(name="count")
    return {"count": int(len(um)), "by_reason": _records(g)}


def _clean(x):
    """Plain JSON values: numpy scalars -> Python, NaN -> None, dict keys -> str."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and x != x:
        return None
    return x


def job_to_dict(res) -> dict[str, Any]:
    """The documented ``cross_rank`` object of one job (docs/batch.md)."""
    return _clean(_job_dict(res))


def _job_dict(res) -> dict[str, Any]:
    m = res.matches
    methods = m.drop_duplicates("instance")["method"].value_counts() if len(m) else pd.Series(dtype=int)
    return {
        "job": res.job,
        "ranks": res.ranks,
        "world_size": res.world_size,
        "backend": res.backend,
        "source": res.source,
        "paths": {str(k): v for k, v in res.paths.items()},
        "verdict": res.verdict(),
        "matched_instances": int(m["instance"].nunique()) if len(m) else 0,
        "match_methods": {str(k): int(v) for k, v in methods.items()},
        "unmatched": _unmatched(res),
        "mismatched": int(res.mismatched),
        "cut_short": {str(r): c for r, c in sorted((getattr(res, "cut", None) or {}).items())},
        "clock": {"reference_rank": _reference(res),
                  "offsets": {str(r): o for r, o in sorted(res.clock.items())},
                  "max_spread_ns": max((o["spread_ns"] for o in res.clock.values()
                                        if not o.get("own_clock")), default=0)},
        "per_rank": _records(res.per_rank),
        "step_skew": {
            "steps": int(len(res.steps)),
            "mean_skew_ns": int(res.steps["skew_ns"].mean()) if len(res.steps) else 0,
            "max_skew_ns": int(res.steps["skew_ns"].max()) if len(res.steps) else 0,
            "by_step": _records(res.steps),
        },
        "metrics": res.seed,
        "inferred": res.inferred,
        "groups": res.groups,
        "pipeline_stages": res.stages,
        "windows": {str(r): w for r, w in sorted((res.windows or {}).items())},
        "parallelism": res.layout or None,
        "levers": res.levers,
    }


def render_summary(results: list) -> str:
    """The job verdict block that opens the report of a multi-rank job (its layout and levers
    are the job's own: ``JobResult.layout``, ``JobResult.levers``)."""
    lines: list[str] = []
    for res in results:
        jv = res.verdict()
        world = f" of {res.world_size}" if res.world_size > 0 else ""
        lines.append(f"JOB {res.job}: ranks {_ranks(res.ranks)}{world}"
                     f"{' · ' + res.backend if res.backend else ''}")
        lines += cut_lines(res)
        if jv["status"] == "cannot_tell":
            lines.append(f"  CANNOT TELL  who is late: {jv['why']}")
            lines.append(f"  record     {jv['how']}")
        elif jv["straggler_rank"] < 0:
            lines.append(f"  NO STRAGGLER  {jv['summary']}")
        else:
            lines.append(f"  STRAGGLER  {jv['headline']}{_late_per_step(jv, res)}")
            if jv["because"]:
                lines.append(f"  why        {jv['because']}")
        if jv["waiting"] and jv.get("basis") == "pipeline":
            parts = ", ".join(f"rank {x['rank']} {fmt_ns(x['wait_per_collective_ns'])}" for x in jv["waiting"][:6])
            lines.append(f"  waiting    on it per step (its excess, at most the rank's idle time): {parts}")
        elif jv["waiting"] and jv.get("basis") == "thread_waits":
            parts = ", ".join(f"rank {x['rank']} {fmt_ns(x['wait_per_collective_ns'])} (of its "
                              f"{fmt_ns(x['all_wait_ns'])}{' in ' + x['in'] if x.get('in') else ''})"
                              for x in jv["waiting"][:6])
            lines.append(f"  waiting    for it per {jv['per']} (median; beyond the straggler's own "
                         f"wait, the transfer every rank waits): {parts}")
        elif jv["waiting"]:
            w = sorted(jv["waiting"], key=lambda x: -x["wait_ns"])
            parts = ", ".join(f"rank {x['rank']} {fmt_ns(x['wait_per_collective_ns'])}" for x in w[:6])
            more = f" (+{len(w) - 6} more)" if len(w) > 6 else ""
            lines.append(f"  waiting    at each of those {jv['collective']}s: {parts}{more}")
        loc = (res.seed or {}).get("slowdown", {})
        if loc.get("locality") and jv["status"] != "cannot_tell":   # no straggler known: no locality
            work = loc.get("work_ns", {})
            s = jv["straggler_rank"]
            others = sorted(v for k, v in work.items() if k != s)
            detail = (f" (rank {s} works {fmt_ns(work[s])} per step, the others' median"
                      f" {fmt_ns(others[len(others) // 2])})") if loc["locality"] == "rank-local" and others and s in work else ""
            lines.append(f"  slowdown   {loc['locality']}{detail}")
        # (a cut rank no collective of the job's placed meets no group: not a missing member)
        left = {r for r, c in (getattr(res, "cut", None) or {}).items() if not c["placed"]}
        grp = groups_line(res.groups, res.stages, [r for r in res.ranks if r not in left])
        if grp:
            lines.append(f"  groups     {grp}")
        layout = layout_line(res.layout)
        if layout:
            lines.append(f"  layout     {layout}")
        for lv in res.levers:
            lines.append(f"  lever      {lv['lever']}{job_saving(lv, res)}")
        lines.append(f"  clocks     {_clock_line(res)}")
        lines.append("")
    return _fit_labelled(lines)


def _late_per_step(jv: dict, res) -> str:
    """The straggler's lateness per step, the figure its lever saves (its lateness intervals
    counted once each, over the job's analysed steps): one figure for one straggler."""
    n, ns = job_steps(res), jv.get("late_total_ns")
    return f"; {fmt_ns(ns / n)} a step in all" if n and ns else ""


def job_steps(res) -> int:
    """The analysed steps of a job: the most any of its ranks analysed (0: none); a
    straggler cut short: the steps it holds (its lateness is known on those alone)."""
    if (getattr(res, "straggler", None) or {}).get("steps"):
        return int(res.straggler["steps"])
    pr = getattr(res, "per_rank", None)
    if pr is None or not len(pr) or "steps" not in pr:
        return 0
    n = pr["steps"].max()
    return int(n) if n == n and n > 0 else 0


def job_saving(lv: dict, res) -> str:
    """A job lever's saving in the rank levers' unit: per step (its ``saves_ns`` is a total
    over the job's analysed steps), with the total beside it; '' when it has none."""
    ns = lv.get("saves_ns")
    if not ns:
        return ""
    n = job_steps(res)
    if not n:
        return f" (saves ~{fmt_ns(ns)} over the analysed window)"
    if n == 1:
        return f" (saves ~{fmt_ns(ns)} per step)"
    return f" (saves ~{fmt_ns(ns / n)} per step; {fmt_ns(ns)} over the {n} analysed steps)"


def layout_line(p: dict | None) -> str:
    """The job's strategies and where each loses time, in one line ('' if none is proved)."""
    if not p or not p.get("strategies"):
        return ""
    parts = [s["kind"].upper() + (f" x{s['group_size']}" if s["group_size"] else "")
             for s in p["strategies"]]
    pp, ep = p.get("pipeline"), p.get("ep")
    if pp:
        v = pp.get("virtual_stages") or 1
        sched = (f" ({pp['schedule']}, m={pp['microbatches']}{f', v={v}' if v > 1 else ''}, "
                 f"theory {pp['theoretical_bubble_pct']}%: the schedule's fill and drain)") \
            if pp["schedule"] else ""
        bub = ", ".join(f"{r}: {v}%" for r, v in pp["bubble_pct_by_stage"].items())
        x = pp.get("slowest_x_others", pp["slowest_busy_x_fastest"])
        who = (f"stage {pp['slowest_stage']} computes most ({x}x the other stages' median)"
               if x and x >= PP_SLOW_X else f"the stages compute alike ({x}x at most)")
        parts.append(f"stage bubbles {bub}{sched}; {who}")
    if ep and ep.get("recv_imbalance"):
        parts.append(f"all_to_all: rank {ep['hot_rank']} receives {ep['recv_imbalance']}x the mean")
    return "; ".join(parts)


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def cut_lines(res) -> list[str]:
    """One line per way the job used its ranks cut short (files truncated): the steps they
    were compared on, or why they were left out (ranks alike on one line)."""
    cut = getattr(res, "cut", None) or {}
    by: dict[str, list[int]] = {}
    for r, c in sorted(cut.items()):
        by.setdefault(_cut_use(c, res), []).append(r)
    out = []
    for use, ranks in by.items():
        who = f"rank {ranks[0]}: file" if len(ranks) == 1 else f"ranks {_ranks(ranks)}: files"
        out.append(f"  cut short  {who} cut short (truncated), {use}")
    return out


def _cut_use(c: dict, res) -> str:
    n = int(len(res.steps))
    if c["used"] == "left_out":
        return f"left out of the job's comparison: {c['why']}"
    they = "the steps it holds" if c["steps_compared"] else "the collectives it holds"
    use = (f"compared on {c['steps_compared']} of the job's {n} steps" if c["steps_compared"]
           else f"compared on {they}")
    if c.get("collectives_out"):
        use += f"; its collectives left out: {c['collectives_out']}"
    elif c["own_clock"] and c["placed"]:
        use += "; its clock placed from collective end times"
    return use


def _reference(res) -> int:
    """The rank whose clock the others are placed on (``clocks.reference_rank``)."""
    ref = [r for r, o in (res.clock or {}).items() if o.get("reason") == "reference clock"]
    return int(ref[0]) if ref else min(res.ranks)


def _clock_line(res) -> str:
    # (a cut rank left with no collective has no clock to place: not a reason here)
    idle = {r for r, c in (getattr(res, "cut", None) or {}).items() if not c["collectives"]}
    clock = {r: o for r, o in res.clock.items() if not o.get("own_clock") and r not in idle}
    own = sorted(r for r, o in res.clock.items() if o.get("own_clock") and o.get("applied"))
    aside = (f"; {'rank' if len(own) == 1 else 'ranks'} {_ranks(own)} on a clock of "
             f"{'its' if len(own) == 1 else 'their'} own (file cut short), placed from the same "
             "ends") if own else ""
    applied = {r: o for r, o in clock.items() if o["applied"]}
    if applied:
        big = sorted(applied.items(), key=lambda kv: -abs(kv[1]["offset_ns"]))[:4]
        txt = ", ".join(f"rank {r} {_signed(o['offset_ns'])}" for r, o in big)
        spread = max(o["spread_ns"] for o in applied.values())
        return (f"aligned from collective end times: {txt}"
                f"{' …' if len(applied) > 4 else ''} (spread {fmt_ns(spread)}){aside}")
    reasons = {o["reason"] for r, o in clock.items() if r != _reference(res)}
    est = max((abs(o["estimate_ns"]) for o in clock.values()), default=0)
    return (f"not shifted: {'; '.join(sorted(reasons)) or 'one rank'} (largest estimate "
            f"{fmt_ns(est)}){aside}")


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "-") + fmt_ns(abs(ns))


def render_detail(results: list) -> str:
    """Per-rank wait/transfer table, matching, step skew and metrics of each job."""
    lines: list[str] = []
    for res in results:
        d = job_to_dict(res)
        world = f" of {res.world_size}" if res.world_size > 0 else ""
        lines.append(f"Cross-rank ({res.job}: ranks {', '.join(map(str, res.ranks))}{world})")
        meth = ", ".join(f"{k} {v}" for k, v in d["match_methods"].items()) or "none"
        lines.append(f"  collectives matched   {d['matched_instances']} instances (by {meth};"
                     f" {res.source or 'none'} events)")
        um = d["unmatched"]
        if um["count"] or d["mismatched"]:
            why = "; ".join(f"rank {x['rank']} {x['count']} {x['collective']} {x['reason']}"
                            for x in um["by_reason"][:4])
            mis = f"; {d['mismatched']} matched with differing type/size" if d["mismatched"] else ""
            lines.append(f"  unmatched             {um['count']} instances{': ' + why if why else ''}{mis}")
        s = res.straggler
        jv = d["verdict"]
        if s["rank"] >= 0:
            per = ", ".join(f"{k} {fmt_ns(v['median_delay_ns'])} at {v['times_late']}/{v['instances']}"
                            for k, v in s["by_collective"].items())
            aside = "" if jv["straggler_rank"] == s["rank"] and jv.get("basis") == "collectives" else (
                f" -- not the verdict's basis ({jv.get('basis')}): "
                + ("in a pipeline every stage waits at send/recv by construction"
                   if jv.get("basis") == "pipeline" else
                   # the significance test's own reason (chance, the steps' spread) when it
                   # gave one: 'too few late instances' was said of 120 collectives too
                   s.get("not_significant_because") or "too few late instances to name it"))
            lines.append(f"  collective matching   rank {s['rank']} last in {s['times_last']}/{s['instances']},"
                         f" late in {s['times_late']}/{s['late_instances']} of the late ones; its lateness"
                         f" (median, per collective type): {per or '-'}{aside}")
            why = s.get("why") or {}
            if why.get("by_category"):
                cats = ", ".join(f"{k} {fmt_ns(v)}" for k, v in list(why["by_category"].items())[:4])
                gpu = f"; GPU compute {fmt_ns(why['gpu_compute_ns'])}" if why["gpu_compute_ns"] else ""
                lines.append(f"  its late windows      {fmt_ns(why['window_ns'])} in {why['windows']}: {cats}{gpu}")
        elif res.inferred.get("basis"):
            inf = res.inferred
            waits = ", ".join(f"rank {r} waits {fmt_ns(v['wait_ns'])}, sleeps {fmt_ns(v['sleep_ns'])}"
                              for r, v in sorted(inf["per_rank"].items()))
            lines.append(f"  from thread waits     per {'step' if inf['basis'] == 'steps' else 'trace span'}"
                         f" (median of {inf['windows']}): {waits}")
        else:
            lines.append("  straggler             none (no matched collective with a unique last rank)")
        eff = (res.seed or {}).get("overlap_efficiency", {})
        lines.append(f"  {'rank':>5} {'matched':>8} {'comm':>10} {'wait':>10} {'transfer':>10} {'wait%':>6}"
                     f" {'last':>5} {'step mean':>10} {'overlap eff':>11}")
        for r in res.per_rank.itertuples():
            step = fmt_ns(r.step_mean_ns) if r.step_mean_ns >= 0 else "-"
            e = eff.get(int(r.rank))
            lines.append(f"  {r.rank:>5} {r.matched:>8} {fmt_ns(r.comm_ns):>10} {fmt_ns(r.wait_ns):>10}"
                         f" {fmt_ns(r.transfer_ns):>10} {r.wait_pct:>5.1f}% {r.times_last:>5} {step:>10}"
                         f" {('-' if e is None else f'{e:.2f}'):>11}")
        sk = d["step_skew"]
        if sk["steps"]:
            slow = res.steps["slowest_rank"].value_counts()
            lines.append(f"  step skew             {sk['steps']} steps, mean {fmt_ns(sk['mean_skew_ns'])},"
                         f" max {fmt_ns(sk['max_skew_ns'])}; slowest most often: rank {int(slow.index[0])}")
        else:
            lines.append("  step skew             no ProfilerStep seen on two ranks")
        for b in (res.seed or {}).get("bandwidth", []):
            if b["busbw_gbps"] is not None:
                link = f" ({b['link_pct']:.0f}% of {res.seed['link_gbps']:g} GB/s)" if b["link_pct"] is not None else ""
                lines.append(f"  bus bandwidth         {b['collective']}: {b['busbw_gbps']:.2f} GB/s{link}"
                             f" over {b['sized']} sized instances")
        lines.append("")
    return _fit_labelled(lines)


def _fit_labelled(lines: list[str]) -> str:
    """``  label   text`` lines wrap their text under itself within 100 columns."""
    import re

    from .fmt import fit, tail_lines

    out = []
    for line in lines:
        m = re.match(r"(\s*[A-Za-z][\w ]*?\s{2,})(\S.*)", line)
        if len(line) > 100 and m and len(m.group(1)) <= 30:
            out += tail_lines(m.group(1), m.group(2))
        else:
            out += fit([line])
    return "\n".join(out).rstrip("\n")


def render_text(results: list) -> str:
    """Summary then detail (the whole cross-rank text of ``results``)."""
    return render_summary(results) + "\n\n" + render_detail(results)


def groups_line(groups: list[dict], balance: dict | None, ranks: list[int] | None = None) -> str:
    """One line: the stage that computes most (when the stages are not balanced), the group
    that holds the others back most, and the one that waits most. A job of one collective
    group of all its ``ranks`` gets no group figures: the straggler line is that group's,
    and a second figure for the same lateness (summed over its collectives) only confuses."""
    parts = []
    if balance:
        k = balance["slow_stage"]
        if k is None:
            parts.append(f"{balance['stages']} pipeline stages balanced "
                         f"({balance['slowest_x_others']}x at most)")
        else:
            rs = balance["stage_ranks"][k]
            who = f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ", ".join(map(str, rs))
            parts.append(f"stage {k} ({who}) computes {balance['slowest_x_others']}x the "
                         f"other stages, {fmt_ns(balance['excess_ns'])} more per step")
    coll = [g for g in groups if g["kind"] not in ("pp_stage", "pp")]
    if ranks and len(coll) == 1 and set(coll[0]["ranks"]) >= set(ranks):
        coll = []
    late = max(coll, key=lambda g: g["lateness_ns_per_step"], default=None)
    if late and late["lateness_ns_per_step"] > 0:
        parts.append(f"{group_label(late)} held back {fmt_ns(late['lateness_ns_per_step'])} per step"
                     f" by rank {late['late_rank']}")
    wait = max(coll, key=lambda g: g["wait_ns_per_step"], default=None)
    if wait and wait["wait_ns_per_step"] > 0:
        parts.append(f"{group_label(wait)} waits most: {fmt_ns(wait['wait_ns_per_step'])} per step"
                     f" per rank")
    return "; ".join(parts)


def group_label(g: dict) -> str:
    """A group in a few words: its kind, its first ranks, its collectives."""
    ranks = ", ".join(map(str, g["ranks"][:8])) + (" …" if len(g["ranks"]) > 8 else "")
    what = "/".join(g["collectives"][:2])
    return f"{g['kind']} group [{ranks}] ({what})"


__all__ = ["job_to_dict", "render_summary", "render_detail", "render_text", "groups_line"]
