"""The job's verdict (who is slow, by how much, why) and its effect on each rank's verdict.

A rank's own verdict (``verdict/``) sees one trace: a rank that waits for a
late peer reads ``comms``, and so may the late rank itself when its own collectives
are exposed. Across ranks we know better, so ``adjust_rank_verdicts`` post-adjusts
the per-rank verdict dicts:

* the straggler's verdict names its own cause (from its late windows), never
  ``comms``: a ``comms`` bound (or ``unknown``, when the cause is known) is replaced
  by the bound of that cause;
* a waiting rank's ``comms`` verdict (or ``mixed`` naming comms) names the rank it
  waits for, by how much and why, and leads its levers with fixing that rank;
* every rank's verdict gains a ``job`` entry (its role in the job).

In a job with send/recv pairs (a pipeline) whose collective straggler is not significant or
late mostly at send/recv, the stages' own compute decides (``groups.stage_balance``): every
stage waits there by construction (fill and drain).

"No straggler" is said only on evidence: matched collectives with no rank late, or
(no collective matched) launching threads that wait alike (``waits.py``). With no
collective matched and no wait to read, the job verdict is ``cannot_tell``, with why
and how to record what is missing -- never a clean bill.
"""
from __future__ import annotations

import copy

from ...verdict import bounds
from ...verdict.units import per_step
from ...verdict.levers import straggler_text
from ...render.text import fmt_ns
from .groups import IMBALANCE_X, interval_total, pipeline_decides
from .waits import HOW_TO_RECORD, LATE_MIN_NS as WAIT_LATE_MIN_NS
from .why import CAUSE_TEXT

# Cause of the straggler's late windows -> the verdict bound that names it.
CAUSE_BOUND = {"dataloader": "data", "compile": "compile", "graph_capture": "graph_capture", "sync": "sync",
               "launch": "launch", "copy_staging": "copy", "alloc": "host", "cpu_op": "host", "python": "host", "untraced": "host", "stage_untraced": "host",
               "gpu_compute": "gpu", "comm_wait": "mixed", "comm_own": "comms", "cpu_slower": "host", "wait": "mixed", "sleep": "host"}


def cause_bound(cause: str | None) -> str:
    """The verdict bound naming a late-window cause (``verdict/bounds.py`` vocabulary)."""
    b = CAUSE_BOUND.get(cause or "", "unknown")
    return b if b in bounds.VERDICTS else "unknown"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def job_verdict(res) -> dict:
    """{status, basis, straggler_rank, late_by_ns, cause, bound, summary, waiting, locality,
    evidence} of one job: the job's one answer. status: ``straggler``, ``none`` (evidence says
    no rank holds the others back) or ``cannot_tell`` (no evidence: ``summary`` says why and
    how to record it). ``evidence.collectives``: the collective matching's own figures (the
    rank last most often, its lateness per collective type), whatever the basis."""
    out = _job_verdict(res)
    out["evidence"] = {"collectives": res.straggler}
    return out


LATE_NS = 100_000
# a straggler's own-collective wait mostly after its collective ended: it resumed late
AFTER_END_SHARE = 0.5
LATE_DEF = f"late: arriving after the next-latest rank, by >= {fmt_ns(LATE_NS)}"


def _job_verdict(res) -> dict:
    s = res.straggler
    loc = (res.seed or {}).get("slowdown", {}).get("locality")
    spread = (res.seed or {}).get("step_time_spread_pct")
    tail = f"; step times differ by {spread:.1f}% on average" if spread is not None else ""
    if not s["instances"]:
        return _from_waits(res, loc, tail)
    if res.stages and pipeline_decides(s):
        return _pipeline_verdict(res, loc, tail)
    if s["rank"] < 0 or not s.get("significant"):
        what = f"no straggler: no rank is last in most collectives by >= {fmt_ns(100_000)}"
        if s["rank"] >= 0 and s.get("not_significant_because"):
            # the rank that held the others back longest, not beyond chance or noise: say
            # which and why not ("no rank is last ... by >= 100 us" was false of it)
            what = (f"no straggler: rank {s['rank']} held the others back longest, but "
                    f"{s['not_significant_because']}")
        return {"status": "none", "basis": "collectives", "straggler_rank": -1, "late_by_ns": 0,
                "cause": None, "bound": None, "summary": what + tail, "waiting": [], "locality": loc}
    r = s["rank"]
    why = s.get("why") or {}
    # lead with the collective type it holds the others back longest at
    by = sorted(s["by_collective"].items(), key=lambda kv: -kv[1]["times_late"] * kv[1]["median_delay_ns"])
    main, rec = by[0]
    text = (f"rank {r} arrives {fmt_ns(rec['median_delay_ns'])} late (median) at "
            f"{rec['times_late']}/{_plural(rec['instances'], main)}")
    if len(by) > 1:
        text += " (also " + ", ".join(f"{v['times_late']}/{_plural(v['instances'], k)}" for k, v in by[1:]) + ")"
    text += f" ({LATE_DEF})"
    why = rec.get("why") or why
    because, resumed_late = "", False
    if why.get("cause"):
        n = max(why["windows"], 1)
        where = "" if why["cause"] == "gpu_compute" else "its issuing thread was in "
        because = (f"in that time {where}{CAUSE_TEXT.get(why['cause'], why['cause'])}: "
                   f"{fmt_ns(why['cause_ns'] // n)} of {fmt_ns(why['window_ns'] // n)} per {main}")
        late = int(why.get("after_end_ns") or 0)
        # host collectives (gloo): the span is the work itself; a GPU sync waits for more
        resumed_late = why["cause"] == "comm_own" and res.source == "host" and \
            late >= AFTER_END_SHARE * why["cause_ns"]
        if resumed_late:
            because += (f"; {fmt_ns(late // n)} of it after its collective had ended on it (its "
                        f"wait returned late: its threads were not running -- a busy or "
                        f"oversubscribed host -- not a late transfer)")
        top = (why.get("op_excess") or {}).get("top") or []
        if why["cause"] in ("cpu_op", "cpu_slower") and top:
            t = top[0]
            because += (f"; {_short(t['name'])} takes {fmt_ns(t['ns_per_step'] - t['others_ns_per_step'])} "
                        f"more per step than the others' ({t['calls_per_step']:g} calls a step, "
                        f"theirs {t['others_calls_per_step']:g})")
        k = (s.get("why") or {}).get("kernels") or []
        if why["cause"] == "gpu_compute" and k:
            # a trace without steps: the figure is over its analysed window, not a step's
            per = "per step" if _steps_of(res, r) else "in the analysed window"
            because += (f"; its GPU spends {fmt_ns(k[0]['excess_ns_per_step'])} more {per} than the"
                        f" others in {_short(k[0]['name'])}")
    return {"status": "straggler", "basis": "collectives", "straggler_rank": r,
            "late_by_ns": int(rec["median_delay_ns"]), "collective": main,
            "late_total_ns": net_late_total(res, r),
            "cause": why.get("cause"),
            "bound": cause_bound(why.get("cause")), "summary": text + ("; " + because if because else ""),
            "headline": text, "because": because, "waiting": _waiting(res, r, main), "locality": loc,
            "resumed_late": resumed_late}


def _steps_of(res, r: int) -> int:
    """The analysed steps of rank ``r`` in the job (0: none, a whole window)."""
    pr = res.per_rank
    if pr is None or not len(pr) or "steps" not in pr:
        return 0
    n = pr.loc[pr["rank"] == r, "steps"]
    return int(n.max()) if len(n) else 0


def _pipeline_verdict(res, loc, tail: str) -> dict:
    """A pipeline's verdict from its stages' own compute per step (groups.stage_balance)."""
    st = res.stages
    base = {"basis": "pipeline", "waiting": [], "locality": loc, "collective": None}
    k = st["slow_stage"]
    if k is None:
        what = (f"no straggler: the {st['stages']} pipeline stages compute alike (the busiest "
                f"{st['slowest_x_others']}x the others' median per step, under {IMBALANCE_X}x); "
                f"their waits at send/recv are the schedule's fill and drain")
        return {**base, "status": "none", "straggler_rank": -1, "late_by_ns": 0, "cause": None,
                "bound": None, "summary": what + tail}
    r = st["slow_rank"]
    ranks = st["stage_ranks"][k]
    who = f"rank {r}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    n = int(res.per_rank.loc[res.per_rank["rank"] == r, "steps"].max() or 1) if len(res.per_rank) else 1
    head = (f"pipeline stage {k} ({who}) computes {fmt_ns(st['busy_ns_by_stage'][k])} per step, "
            f"{fmt_ns(st['excess_ns'])} ({st['slowest_x_others']}x) more than the other stages' "
            f"median")
    because = "every other stage waits on it at send/recv beyond the schedule's fill and drain"
    cause = "stage_compute"
    un = int(st.get("untraced_excess_ns") or 0)
    if un > st["excess_ns"] / 2:   # its extra work is where no profiled operator ran
        cause = "stage_untraced"
        because = (f"{fmt_ns(un)} of its excess per step runs outside any profiled operator (a "
                   f"sleep, I/O, logging or Python only that stage does); " + because)
    # what each other rank waits on it per step: the excess, at most the rank's idle time (the
    # rest of its idle time is the schedule's fill and drain)
    ex = int(st["excess_ns"])
    waiting = [{"rank": int(q), "instances": n, "wait_ns": min(int(v), ex) * n,
                "wait_per_collective_ns": min(int(v), ex)}
               for q, v in st["idle_ns_by_rank"].items() if int(q) not in ranks]
    return {**base, "status": "straggler", "straggler_rank": r, "late_by_ns": int(st["excess_ns"]),
            "waiting": waiting, "per": "step",
            "late_total_ns": int(st["excess_ns"]) * n, "cause": cause,
            "bound": "gpu" if res.source == "kernel" else "host",
            "summary": f"{head}; {because}", "headline": head, "because": because}


def _from_waits(res, loc, tail: str) -> dict:
    """The verdict of a job with no matched collective: from the launching threads' waits
    (``waits.infer``), else cannot tell."""
    inf = res.inferred or {}
    base = {"straggler_rank": -1, "late_by_ns": 0, "cause": None, "bound": None, "waiting": [],
            "locality": loc, "basis": "thread_waits"}
    per = "step" if inf.get("basis") == "steps" else "trace span"
    if inf.get("significant"):
        r, n = inf["rank"], inf["windows"]
        when = (f"per step ({inf['times_late']}/{_plural(n, 'step')})" if per == "step" else
                f"in total over the {fmt_ns(inf['span_ns'])} all ranks cover (no common steps)")
        head = (f"rank {r} is late by {fmt_ns(inf['median_delay_ns'])} {when}, from where the launching "
                f"threads wait (no collective matched)")
        per = "step" if per == "step" else "span"
        c = inf["cause"]
        because = (f"its launching thread sleeps {fmt_ns(inf['cause_ns'])} more per {per} than the others "
                   f"(clock_nanosleep / time.sleep)" if c == "sleep" else
                   f"in that time its launching thread was in {CAUSE_TEXT.get(c, c)}: "
                   f"{fmt_ns(inf['cause_ns'])} more per {per} than the others")
        # the wait for the straggler (beyond its own wait, the transfer every rank waits),
        # next to all of the rank's wait (waits.infer)
        waiting = [{"rank": int(q), "instances": int(inf["times_late"]),
                    "wait_ns": int(v.get("waits_for_total_ns", 0)),
                    "wait_per_collective_ns": int(v.get("waits_for_ns", 0)),
                    "all_wait_ns": int(v["wait_ns"]), "in": next(iter(v["wait_names"]), None)}
                   for q, v in sorted(inf["per_rank"].items()) if q != r]
        return {**base, "status": "straggler", "straggler_rank": r, "late_by_ns": int(inf["median_delay_ns"]),
                "late_total_ns": int(inf["median_delay_ns"]) * int(inf["times_late"]),
                "collective": None, "per": per, "cause": c, "bound": cause_bound(c),
                "summary": f"{head}; {because}", "headline": head, "because": because, "waiting": waiting}
    if inf.get("basis"):
        n = inf["windows"]
        what = (f"no straggler: no collective matched, and the launching threads wait within "
                f"{fmt_ns(WAIT_LATE_MIN_NS)} of each other in {_plural(n, per)}" if not inf["late_windows"] else
                f"no consistent straggler: no collective matched, and the rank that waits least changes "
                f"across the {inf['late_windows']} {per}s where the waits differ")
        return {**base, "status": "none", "summary": what + tail}
    why = _why_unmatched(res)
    reason = inf.get("reason")
    return {**base, "status": "cannot_tell", "why": why + (f"; {reason}" if reason else ""),
            "how": HOW_TO_RECORD,
            "summary": f"cannot tell who is late: {why}{'; ' + reason if reason else ''}{tail}"}


def _why_unmatched(res) -> str:
    held = int(res.per_rank["collectives"].sum()) if len(res.per_rank) else 0
    if not held:
        return "no rank's trace holds a collective (no communication kernel, no gloo/NCCL/c10d range)"
    um = res.unmatched or []
    reasons = sorted({str(u.get("reason")) for u in um if u.get("reason")})
    return (f"{held} collectives recorded but none matched across ranks"
            + (f" ({'; '.join(reasons[:3])})" if reasons else ""))


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def _waiting(res, r: int, collective: str) -> list[dict]:
    """How long each other rank waited, at the ``collective`` instances where ``r`` was late
    (by >= ``LATE_NS``, the headline's instances: fsdp2 read 'rank 1 arrives 566 us late
    (median) at 3/12 all_gathers' over 'waiting at each of those: rank 0 156 us', a mean
    over 9 instances, 6 of them late by 0.1-90 us). Per collective: the median, as the
    headline's lateness."""
    m = res.matches
    late = m.loc[(m["rank"] == r) & m["last"] & (m["lateness_ns"] >= LATE_NS)
                 & (m["collective"].fillna("unknown") == collective), "instance"]
    sub = m[m["instance"].isin(late) & (m["rank"] != r)]
    out = []
    for q, g in sub.groupby("rank"):
        # the time it spent waiting, once: a rank waiting at two collectives issued together
        # (DDP's gradient buckets) waits the straggler's lateness once, not twice
        start = g["arrival_ns"].to_numpy("int64")
        out.append({"rank": int(q), "instances": int(len(g)),
                    "wait_ns": interval_total(start, start + g["wait_ns"].to_numpy("int64")),
                    "wait_per_collective_ns": int(g["wait_ns"].median())})
    return out


def late_total(res, r: int) -> int:
    """The time rank ``r`` held the others back over the matched collectives: the union of
    its lateness intervals (arrival - lateness .. arrival), so collectives issued together
    count their common lateness once (a median x a count would count it at each)."""
    m = res.matches
    mine = m[(m["rank"] == r) & m["last"] & (m["lateness_ns"] >= LATE_NS)]
    end = mine["arrival_ns"].to_numpy("int64")
    return interval_total(end - mine["lateness_ns"].to_numpy("int64"), end)


def net_late_total(res, r: int) -> int:
    """What making rank ``r`` arrive on time would give back: its ``late_total`` less the
    other ranks' mean ``late_total`` -- the time they held it back, which it would then spend
    waiting for them instead (a FSDP2 recording with 23 ms of extra work a step on rank 1:
    32.2 ms a step of lateness, rank 0 late 6.9 ms a step of it; net 25.2)."""
    others = [int(q) for q in res.matches["rank"].unique() if int(q) != r]
    back = sum(late_total(res, q) for q in others) / len(others) if others else 0
    return max(0, int(late_total(res, r) - back))


def adjust_rank_verdicts(verdicts: dict[int, dict], res) -> dict[int, dict]:
    """New per-rank verdict dicts for the ranks of ``res`` (inputs are not modified)."""
    jv = job_verdict(res)
    out = {}
    s = jv["straggler_rank"]
    waits = {w["rank"]: w for w in jv["waiting"]}
    for rank, v in verdicts.items():
        v = copy.deepcopy(v)
        if s < 0:
            role = "unknown" if jv["status"] == "cannot_tell" else "none"
            v["job"] = {"job": res.job, "role": role, "summary": jv["summary"]}
        elif rank == s:
            v["job"] = {"job": res.job, "role": "straggler", "late_by_ns": jv["late_by_ns"],
                        "cause": jv["cause"], "summary": jv["summary"], "basis": jv.get("basis")}
            # its own trace blames communication, or cannot tell: the job knows its cause --
            # unless its trace is sampled: nothing measured between its kept events can say
            # what the rank did, so it stays unknown (the job's lateness is still reported)
            if _sampled(v):
                v["summary"] = (f"{v.get('summary', '')}; straggler of the job "
                                f"({jv['summary']}), but its trace is sampled: its own cause "
                                "cannot be read from it")
            elif _blames_comms(v) or (v.get("bound") == "unknown"
                                      and jv["bound"] not in (None, "unknown")):
                _straggler_not_comms(v, jv, s, _moves_data(res, s))
        else:
            w = waits.get(rank, {})
            v["job"] = {"job": res.job, "role": "waiting", "waits_for": s,
                        "wait_ns": w.get("wait_ns", 0), "summary": jv["summary"]}
            if res.source == "host" and jv.get("basis") == "collectives":
                _batch_net_of_the_wait(v, held_wait(res.straggler_waits.get(rank) or {}), s)
            if _blames_comms(v):
                v["summary"] = (f"{v.get('summary', '')}; it waits for rank {s} "
                                f"({fmt_ns(w.get('wait_per_collective_ns', 0))} per {jv.get('per', 'collective')})"
                                f": {jv['summary']}")
                # what this rank gets back is the straggler's lateness, not all of its wait (it
                # would still wait for the collective's own transfer, or a GPU both share)
                saves = min(int(w.get("wait_ns", 0)), int(jv.get("late_total_ns") or 0)) \
                    or w.get("wait_ns", 0)
                _lead_with(v, f"make rank {s} arrive on time: {_lever(jv, s)}", saves,
                           jv["summary"])
                _net_of_the_wait(v, v["actions"][0].get("saves_ns") or 0)
                # 'analyse every rank's trace together to find the rank it waits for': done,
                # and it is rank s (h200/ddp2's rank 0 was told to, beside the answer)
                v["actions"] = [a for a in v["actions"] if a.get("id") != "find_the_wait"]
                v["levers"] = [a["lever"] for a in v["actions"]]
        out[rank] = v
    return out


def _sampled(v: dict) -> bool:
    """The rank's own trace is sampled (verdict/steady.py): its idle figures mean nothing."""
    return (v.get("evidence") or {}).get("steady_state") == "sampled"


def _blames_comms(v: dict) -> bool:
    """``comms``, or ``mixed`` with communication as one of its two causes."""
    ev = v.get("evidence") or {}
    if v.get("bound") == "unknown" and ev.get("waiting_ns"):
        return True   # its launching threads sat in waits: the job shows what they waited for
    return v.get("bound") == "comms" or (v.get("bound") == "mixed" and "comms" in (ev.get("dominant"),
                                                                                    ev.get("runner_up")))


def _moves_data(res, r: int) -> bool:
    """Rank ``r``'s matched collectives are mostly its own transfer, not waits for later
    ranks (wait under half of its time in them); with none matched (the job read its lateness
    from the threads' waits: h200/ddp2, gloo on nsys), the straggler's own communication is
    its transfer -- it arrives last, so it waits for no one."""
    pr = res.per_rank
    row = pr[pr["rank"] == r] if pr is not None and len(pr) and "comm_ns" in pr else None
    if row is None or not len(row) or int(row["comm_ns"].iloc[0]) <= 0:
        return not len(res.matches) if res.matches is not None else True
    return int(row["wait_ns"].iloc[0]) < 0.5 * int(row["comm_ns"].iloc[0])


def _straggler_not_comms(v: dict, jv: dict, s: int, moves: bool = False) -> None:
    """The straggler's verdict names its own cause; its communication levers stay after
    its own when its collectives are its own transfer (``moves``: it waits little in them,
    being the last): gpu/ddp2's rank 1 lost 'use NCCL for GPU tensors' (gloo's transfer,
    ~120 ms of its 168 ms step) while rank 0 kept it."""
    v.setdefault("evidence", {})["bound_before_job"] = v.get("bound")
    v["bound"] = jv["bound"] or "unknown"
    v["title"] = bounds.TITLE.get(v["bound"], v.get("title", ""))
    v["summary"] = f"straggler of the job: {jv['summary']}"
    acts = v.get("actions") or []
    keep = {v["bound"], "comms"} if moves else {v["bound"]}
    own = [a for a in acts if a.get("cause") == v["bound"]]
    if not own and v["bound"] in bounds.LEVERS:
        # the bound's own advice, unpriced, each with an id of its own (one id per item: all
        # were "straggler", the job lever's, three times in h200/ddp2 rank 1's list)
        own = [dict(_item(t, c, None, "", v["bound"]), id=f"job_{v['bound']}_{i}")
               for i, (t, c) in enumerate(bounds.LEVERS[v["bound"]])]
        acts = own + acts
    v["actions"] = [a for a in acts if a.get("cause") in keep]   # the rank's own order
    _lead_with(v, _lever(jv, s), jv.get("late_total_ns") or jv.get("late_by_ns"),
               jv["summary"], cause=v["bound"])


def _lead_with(v: dict, text: str, ns, culprit: str, cause: str = "comms") -> None:
    """Put the job's lever first in the rank's to-do list (``actions``) and in ``levers``
    (its texts, same order): the job knows better than the rank's own trace."""
    ev = v.get("evidence") or {}
    item = _item(text, "code", ns, culprit, cause)
    # per step of this rank's analysed window, never above its step (verdict/units.py)
    got = per_step(ns, int(ev.get("steps") or 0), 1,
                   int(ev.get("program_step_ns") or ev.get("step_mean_ns") or 0)) if ns else None
    if got is not None:
        item["saves_per_step_ns"] = got.ns
        item["projected_step_ns"] = got.projected() if got.ns < got.step_ns else None
        ns = got.ns * int(ev["steps"])
        item["saves_ns"] = ns
    if ns and ev.get("window_ns"):
        item["saves_pct"] = round(100.0 * ns / ev["window_ns"], 2)
    v["actions"] = [item] + [a for a in v.get("actions") or [] if a.get("lever") != text]
    v["levers"] = [a["lever"] for a in v["actions"]]


def _net_of_the_wait(v: dict, wait_ns: int) -> None:
    """The rank's own communication levers (a faster backend, overlap) less the time it waits
    for the straggler (``wait_ns`` over its window): its communication time holds that wait,
    which no change of its own transfers gives back (h200/ddp2 rank 0: NCCL for gloo promised
    126 ms a step, 30.3 ms of them the wait for rank 1)."""
    for a in list(v.get("actions") or []):
        total = a.get("saves_ns")
        if a.get("id") == "straggler" or a.get("cause") != "comms" or not total or not wait_ns:
            continue
        left = max(0, int(total) - int(wait_ns))
        f = left / int(total)
        per = a.get("saves_per_step_ns")
        if per is not None:
            a["saves_per_step_ns"] = int(round(per * f))
            if a.get("projected_step_ns") is not None:
                a["projected_step_ns"] = int(a["projected_step_ns"] + per - a["saves_per_step_ns"])
        if a.get("saves_pct") is not None:
            a["saves_pct"] = round(a["saves_pct"] * f, 2)
        a["saves_ns"] = left
        a["net_of_wait_ns"] = int(total) - left
        _sink(v["actions"], a)


def held_wait(cats: dict) -> int:
    """Of a rank's wait for the straggler (``why.wait_categories``), the part a host-only
    replay of a larger batch holds fixed per step (all but ``BATCH_GROWN_HOST``)."""
    from ...passes.replay.whatif import BATCH_GROWN_HOST

    return int(sum(v for c, v in cats.items() if c not in BATCH_GROWN_HOST))


def _batch_net_of_the_wait(v: dict, held_ns: int, s: int) -> None:
    """A larger batch's promise on a waiting rank less what it amortised of the wait for the
    straggler: its replay holds that wait fixed per step (untraced, or in a collective), so
    spread it over k times the samples -- the straggler's own time (a sleep, extra work),
    which the job's lever gives back, not this rank's. gloo ddp2 rank 0 (waiting 30.9 ms a
    step for rank 1's 30 ms sleep, untraced) was promised 17.2 ms a step at 2x the batch;
    rank 1 itself keeps its promise: its sleep is its own per-step time."""
    steps = int((v.get("evidence") or {}).get("steps") or 0)
    for a in list(v.get("actions") or []):   # _sink reorders the list under us
        k = float(a.get("per_sample_x") or 1.0)
        per = a.get("saves_per_step_ns")
        if a.get("id") != "larger_batch" or k <= 1 or per is None or not steps or not held_ns:
            continue
        cut = min(int(per), int(round((1 - 1 / k) * held_ns / steps)))
        if cut <= 0:
            continue
        f = (int(per) - cut) / int(per) if per else 0.0
        a["saves_per_step_ns"] = int(per) - cut
        if a.get("projected_step_ns") is not None:   # the step at k x the batch
            a["projected_step_ns"] = int(a["projected_step_ns"] + k * cut)
        if a.get("saves_ns") is not None:
            a["net_of_wait_ns"] = int(a["saves_ns"]) - int(round(a["saves_ns"] * f))
            a["saves_ns"] = int(round(a["saves_ns"] * f))
        if a.get("saves_pct") is not None:
            a["saves_pct"] = round(a["saves_pct"] * f, 2)
        for b in a.get("because") or []:   # the figure its saving line shows
            if str(b.get("fact", "")).startswith("replay_levers.") and b.get("value"):
                b["value"] = a["saves_per_step_ns"]
        a.setdefault("because", []).append(
            {"fact": "job.wait_for_straggler_ns", "value": int(held_ns), "known": True, "evidence": None,
             "rank": int(s)})
        _sink(v["actions"], a)
        v["levers"] = [x["lever"] for x in v["actions"]]


def _sink(actions: list, a: dict) -> None:
    """Move ``a`` (its saving just lowered) down past the rank's own levers that now save
    more, the job's lever staying first: nsys-ai mfu_2gpu_before rank 0 listed
    "interconnect" (8.73 ms, net of the wait) above "fewer ops" (11.4 ms) under "largest
    saving first". Unpriced items are not passed: their place is the ranking's."""
    i = actions.index(a)
    actions.pop(i)
    while i < len(actions) and actions[i].get("id") != "straggler" and \
            actions[i].get("saves_ns") is not None and actions[i]["saves_ns"] > a["saves_ns"]:
        i += 1
    actions.insert(i, a)


def _item(text: str, cost: str, ns, culprit: str, cause: str) -> dict:
    # why: what the job's ranks showed together (no single trace's fact proves it): the
    # lateness over the window (the union of its intervals), of which the saving is per step
    why = [{"fact": "job.late_total_ns", "value": int(ns), "known": True, "evidence": None}] \
        if ns else []
    return {"id": "straggler", "lever": text, "cost": cost, "cause": cause,
            "saves_ns": int(ns) if ns else None, "saves_pct": None, "saves_per_step_ns": None,
            "projected_step_ns": None, "culprit": culprit, "because": why}


def straggler_lever(jv: dict) -> dict | None:
    """The job verdict's own lever (make the straggler arrive on time) with what it saves:
    the lateness it imposes over the analysed steps; None without a straggler."""
    s = jv.get("straggler_rank", -1)
    if s is None or s < 0:
        return None
    return {"id": "straggler", "lever": _lever(jv, s), "cost": "code",
            "cause": jv.get("bound") or "unknown", "saves_ns": int(jv.get("late_total_ns") or 0) or None,
            "rank": int(s)}


def lever_cause(jv: dict) -> str | None:
    """The cause whose job row (verdict/levers.py ``STRAGGLER_ROWS``) words the straggler's
    lever: a wait that returned after its own collective had ended is the threads', not the
    link's."""
    cause = jv.get("cause")
    return "comm_own_resumed_late" if cause == "comm_own" and jv.get("resumed_late") else cause


def _lever(jv: dict, s: int) -> str:
    cause = jv.get("cause")
    text = straggler_text(lever_cause(jv), s)   # the lever table's job rows (verdict/levers.py)
    if text is not None:
        return text
    b = cause_bound(cause)
    levers = bounds.lever_texts(b) if b in bounds.LEVERS else []
    return levers[0] if levers else f"profile rank {s} to see why it is late"


__all__ = ["job_verdict", "adjust_rank_verdicts", "cause_bound", "straggler_lever", "held_wait",
           "lever_cause"]
