"""The verdict: which bound is the GPU under, which levers to pull, and what each saves.

Lost GPU time = idle time in the analysed window + exposed communication (comm
kernels with no compute beside them) + exposed copies (host<->device memcpy with
no compute beside them). Each cause gets a score in ns (``passes/causes.cause_parts``,
a figure of the facts record):

* ``data``    -- idle time the launch threads spent in the DataLoader;
* ``compile`` -- idle time inside dynamo/inductor compilation;
* ``graph_capture`` -- idle time while CUDA graphs were recorded;
* ``comms``   -- idle time blocked in collectives + exposed communication;
* ``copy``    -- exposed host<->device copy time;
* ``sync``    -- the part of every gap drained by a blocking sync (the host
  waited, then had to refill an empty queue) that the GPU work queued since the
  previous sync could have hidden (``sync_share``), plus time blocked in a sync
  call while the GPU idled;
* ``launch``  -- host time of short starved gaps (<= ``SHORT_GAP_NS``: the
  dispatch cost between back-to-back kernels) and launch-API time of longer ones;
* ``host``    -- operator / python / allocator / OS time of longer starved gaps,
  and their untraced time when the host was traced at all (untraced Python);
* ``queued``  -- the part of every gap after its closing op's launch call returned
  (``attribution.queued``): the GPU had the work and waited on something else. Every
  cause above counts only the host's part of each gap.

Rules (documented in docs/analysis.md):
1. no GPU operations at all -> ``cpu_only``;
2. lost time < ``GPU_BOUND_LOST`` of the window -> ``gpu``;
3. unexplained (untraced, host not traced) >= ``UNKNOWN_SHARE`` of the lost time
   and no score reaches ``LEAD_SHARE`` of it -> ``unknown``;
4. the best score >= ``LEAD_SHARE`` of the lost time and >= ``LEAD_RATIO`` x the
   runner-up -> that bound;
5. otherwise ``mixed``, naming the two largest causes with their levers.

Savings (the what-if model): fixing a cause gives back at most the lost time it
explains, assuming the GPU's own work is unchanged -- an upper bound. The copy
cause's "pin" lever saves only the time beyond pinned bandwidth.
"""
from __future__ import annotations

from . import levers as L
from .because import because, fact_item
from .units import StepSaving, per_sample_step, per_step, program_step_ns, window_steps
from .bounds import CAUSES, TITLE, WHAT

GPU_BOUND_LOST = 0.10
WAIT_SHARE = 0.5   # an unknown verdict whose unexplained time is mostly waits says so
WAITING_TITLE = "unknown: the launching threads wait on something the trace does not show"
LEAD_SHARE = 0.30
LEAD_RATIO = 1.5
UNKNOWN_SHARE = 0.50
MIN_ACTION_SHARE = 0.01       # causes worth < 1% of the window get no lever of their own


def score(*, has_gpu: bool, window_ns: int, idle_ns: int, parts: dict | None,
           exposed_comm_ns: int = 0, copy: dict | None = None, ctx: dict | None = None,
           extra_evidence: dict | None = None, facts_evidence: dict | None = None,
           one_time_launch_ns: int = 0) -> dict:
    """{"bound", "summary", "evidence", "levers", "actions", "diagnostics", "what_if"}.

    ``parts``: ``passes.causes.cause_parts`` output; ``copy``: ``copies.copy_summary`` output;
    ``ctx``: what the trace already does (``context``), the busy-time levers and the step
    figures -- the lever table (levers.py) reads it. ``actions`` is the one ranked
    to-do list (every offered lever with its saving); ``levers`` its texts, same order.
    ``facts_evidence``: the facts record's evidence, for each action's ``because``.
    ``one_time_launch_ns``: idle time of lazy-loading launches (passes/steady.py): paid once,
    it is kept out of the launch cause and the lost time -- no steady lever is priced on it
    -- unless without it the window is no longer idle-bound (then it is the cold start that
    steady.adjust_verdict names).
    """
    ev = dict(extra_evidence or {})
    proofs = facts_evidence or {}
    ctx = dict(ctx or {})
    if ctx.get("program_step_mean_ns"):   # the step savings are taken from (verdict/units.py)
        ev["program_step_ns"] = program_step_ns(ctx)
    if not has_gpu and L.not_cut(ctx) and L.cpu_comm_bound(ctx):
        return _cpu_comm_verdict(ctx, window_ns, ev, proofs)
    if not has_gpu:
        cut = (ctx.get("cpu_only") or {}).get("cut_before_gpu")
        launches = int((ctx.get("cpu_only") or {}).get("launches") or 0)
        out = _out("cpu_only", "the trace ends before its first GPU event: the file is cut "
                   "short" if cut else f"{launches} kernel launches recorded, no GPU activity "
                   "traced" if launches else "no GPU operations in this trace", ev,
                   L.rank(_cpu_actions(ctx, window_ns, proofs)))
        if (ctx.get("cpu_only") or {}).get("window_without_gpu"):
            out["title"] = "no GPU event in the analysed window (the trace has GPU work)"
            out["summary"] = "the analysed window holds no GPU event; the rest of the trace does"
        elif cut:
            out["title"] = "trace cut before its first GPU event"
        return out
    copy = copy or {}
    exposed_copy = int(copy.get("exposed_ns", 0))
    lost = int(idle_ns) + int(exposed_comm_ns) + exposed_copy
    sc = {c: int((parts or {}).get(c, 0)) for c in CAUSES}
    sc["comms"] += int(exposed_comm_ns)
    sc["copy"] += exposed_copy
    apart = min(int(one_time_launch_ns), sc["launch"])
    if apart > 0 and lost - apart >= GPU_BOUND_LOST * window_ns:
        sc["launch"] -= apart
        lost -= apart
        ev["one_time_apart_ns"] = apart
    unexplained = int((parts or {}).get("unexplained", 0))
    ev.update({
        "window_ns": int(window_ns), "idle_ns": int(idle_ns),
        "busy_ns": int(window_ns) - int(idle_ns), "idle_pct": _pct(idle_ns, window_ns),
        "exposed_comm_ns": int(exposed_comm_ns),
        "exposed_comm_pct": _pct(exposed_comm_ns, window_ns),
        "exposed_copy_ns": exposed_copy, "exposed_copy_pct": _pct(exposed_copy, window_ns),
        "lost_ns": lost, "lost_pct": _pct(lost, window_ns),
        "scores_ns": sc, "share_pct": {k: _pct(v, lost) for k, v in sc.items()},
        "unexplained_ns": unexplained, "unexplained_pct": _pct(unexplained, lost),
    })
    what_if = {c: _gain(ns, GAIN_KIND.get(c, "idle"), ctx, window_ns)
               for c, ns in _worth(sc, window_ns)}
    ranked = sorted(sc.items(), key=lambda kv: (-kv[1], CAUSES.index(kv[0])))
    (top, top_ns), (second, second_ns) = ranked[0], ranked[1]
    if lost < GPU_BOUND_LOST * window_ns or lost == 0:
        bound = "gpu"
        # busy as the device table counts it (copies and collectives are busy time); the
        # part of it that is exposed copies / collectives (lost, not compute) said beside it
        summary = f"GPU busy {100 - _pct(idle_ns, window_ns, 3):.1f}% of the analysed window"
        if lost > idle_ns:
            summary += (f" ({100 - _pct(lost, window_ns, 3):.1f}% without the exposed copies "
                        "and collectives)")
        share = ctx.get("gpu_path_share")
        if share is not None and share < HOST_PACED_SHARE:
            # busy, yet the program waits on the host: it launches each kernel just in time
            ev["gpu_path_share"] = round(share, 4)
            summary += (f"; yet the host paces it: the critical path is {100 * share:.0f}% "
                        "GPU work -- each kernel launched just in time, so faster kernels "
                        "alone would not shorten the loop")
    else:
        ev["dominant"], ev["dominant_pct"] = top, _pct(top_ns, lost)
        ev["runner_up"], ev["runner_up_pct"] = second, _pct(second_ns, lost)
        waiting = int((parts or {}).get("wait", 0))
        if unexplained >= UNKNOWN_SHARE * lost and top_ns < LEAD_SHARE * lost \
                and waiting >= WAIT_SHARE * unexplained:
            bound = "unknown"
            ev["waiting_ns"], ev["waiting_pct"] = waiting, _pct(waiting, lost)
            summary = (f"GPU idle {_pct(ev['idle_ns'], ev['window_ns'], 1)}% of the analysed window; for "
                       f"{ev['waiting_pct']:.0f}% of the lost time every launching thread sat "
                       "parked in a wait, on something the trace does not show")
        elif unexplained >= UNKNOWN_SHARE * lost and top_ns < LEAD_SHARE * lost:
            bound = "unknown"
            summary = (f"GPU idle {_pct(ev['idle_ns'], ev['window_ns'], 1)}% of the analysed window while the host "
                       "was not traced")
        elif top_ns >= LEAD_SHARE * lost and top_ns >= LEAD_RATIO * second_ns:
            bound, summary = top, _summary(top, ev, ctx)
        else:
            bound = "mixed"
            summary = (f"no single cause: {top} {ev['share_pct'][top]:.0f}%, "
                       f"{second} {ev['share_pct'][second]:.0f}% of lost GPU time")
    ctx.update(bound=bound, lost_ns=lost, launch_ns=sc["launch"])
    if L.cold_start(ctx):
        ev["startup_ns"] = int(ctx["startup"]["ns"])
        ev["startup_calls"] = [{"name": n, "ns": int(ns)} for n, ns in ctx["startup"]["calls"]]
    if bound == "gpu":
        _tensor_core_evidence(ev, ctx)
    actions = _actions(sc, parts or {}, copy, ctx, window_ns, proofs)
    if bound == "unknown":
        actions = _unpriced("waiting" if "waiting_ns" in ev else "unknown", ctx, proofs) + actions
    out = _out(bound, summary, ev, actions, what_if)
    if "waiting_ns" in ev:
        out["title"] = WAITING_TITLE
    out["diagnostics"] = L.diagnostics([c for c, _ in _worth(sc, window_ns)], ctx)
    out["withdrawn"] = [_withdrawn(w, ctx, proofs or {}) for w in
                        L.withdrawn(sc, ctx, MIN_ACTION_SHARE * window_ns, CAUSES)]
    return out


def _withdrawn(w, ctx: dict, proofs: dict) -> dict:
    """A refusal with the facts its failed precondition read, each with its value and the
    events that prove it (a replay's refusal carries its own reason)."""
    d = w.to_dict()
    d["because"] = [] if w.precondition == "replay" else [fact_item(k, ctx, proofs)
                                                          for k in w.facts]
    return d


def _worth(sc: dict, window_ns: int) -> list[tuple[str, int]]:
    """The causes worth >= MIN_ACTION_SHARE of the window, largest first."""
    return sorted(((c, ns) for c, ns in sc.items()
                   if ns > 0 and ns >= MIN_ACTION_SHARE * window_ns),
                  key=lambda kv: (-kv[1], CAUSES.index(kv[0]) if kv[0] in CAUSES else 99))


# what a lever of each cause gives back besides GPU idle time (verdict/units.StepSaving's
# limit): a busy-time lever shrinks GPU work; exposed copies and collectives are GPU work
GAIN_KIND = {"gpu": "busy", "copy": "work", "comms": "work"}


def _gain(ns: int | None, kind: str, ctx: dict, window_ns: int,
          gpu_only: bool = False) -> dict:
    """saves_ns / saves_pct / saves_per_step_ns / projected_step_ns of a saving of ``ns``.

    Per step (verdict/units.per_step): ns / the window's steps (``units.window_steps``: with
    the backlog of earlier GPU work the window holds) / devices, never above the program's
    step (units.program_step_ns: per step the later of the host's span and the GPU's work)
    nor above the time there is to give back per step -- the GPU's idle time, plus its busy
    time where the lever removes GPU work (``kind`` "busy": a busy-time lever; "work": a
    copy or communication lever, whose exposed transfers are GPU work; "replay": a host
    lever the replay priced, capped at the lost time and the GPU work it removes). The
    projected step is the program step less the saving, never below the GPU's busy time per
    step less the GPU work the lever removes ("busy" and "work": the saving itself): idle
    time given back cannot make the GPU's own work shorter; ``projected_floor`` says
    "gpu_busy" when that floor set it. ``gpu_only``: the lever shortens GPU work alone
    (a collective's bound): where the host ran a whole step ahead (facts
    ``host_ahead_span_mean_ns``) the step cannot drop below the host's own span, and the
    saving per step is cut to reach it (``projected_floor`` "host")."""
    if ns is None:
        return {"saves_ns": None, "saves_pct": None, "saves_per_step_ns": None,
                "projected_step_ns": None}
    steps = window_steps(ctx)
    devices = max(1, int(ctx.get("devices") or 1))
    busy = int(ctx.get("busy_step_mean_ns") or 0)
    idle = int(ctx.get("idle_ns") or 0) / steps / devices if steps else 0
    limit = None
    if steps and ctx.get("idle_ns") is not None and (busy or kind == "idle"):
        limit = idle + (busy if kind != "idle" else 0)
    got = per_step(ns, steps, devices, program_step_ns(ctx), limit)
    host = int(ctx.get("host_ahead_span_mean_ns") or 0) if gpu_only else 0
    if got is not None and host and got.step_ns and got.step_ns - got.ns < host:
        got = StepSaving(max(0, got.step_ns - host), got.step_ns, "host")
    if got is not None and got.clamped:   # the total follows its per-step unit
        ns = int(round(got.ns * steps * devices))
    span = share_span(ctx, window_ns)
    out = {"saves_ns": int(ns), "saves_pct": _pct(ns, span),
           "saves_per_step_ns": got.ns if got else None, "projected_step_ns": None}
    if span != window_ns:
        out["saves_pct_of"] = "run"
    if got is not None and got.step_ns:
        floor = busy - (got.ns if kind in ("busy", "work") else 0)
        out["projected_step_ns"] = got.projected(floor)
        if got.clamped == "host":
            out["projected_floor"] = "host"
        elif out["projected_step_ns"] and floor > 0 and out["projected_step_ns"] == floor:
            out["projected_floor"] = "gpu_busy"
    return out


# a GPU-bound window whose critical path is under this share GPU work is paced by its host
HOST_PACED_SHARE = 0.5


def share_span(ctx: dict, window_ns: int) -> int:
    """What a saving is a share of: the GPU's window; with no steps (the whole trace is one
    run) the run as the replay measured it where that is longer -- host work before the
    first GPU op (start-up allocations) is saved from the run, not from the GPU's window."""
    if int(ctx.get("steps") or 0):
        return window_ns
    run = int((ctx.get("replay_levers") or {}).get("before_ns") or 0)
    return max(int(window_ns), run)


def _actions(sc: dict, parts: dict, copy: dict, ctx: dict, window_ns: int,
             proofs: dict | None = None) -> list[dict]:
    """The ranked to-do list: every lever the table offers (levers.offered), with its saving
    per step and projected step, and ``because``: the facts that made it apply."""
    items = L.offered(sc, parts, copy, ctx, MIN_ACTION_SHARE * window_ns, CAUSES)
    busy = ctx.get("busy_levers") or {}
    culprits = ctx.get("culprits") or {}
    out = []
    for x in items:
        lv = L.BY_ID[x["id"]]
        if lv.saves == "busy":
            why = (busy.get(lv.busy) or {}).get("why", "")
            culprit = why
        elif lv.saves == "buffers":
            culprit = "DDP's buffer broadcast before each forward"
        else:
            culprit = culprits.get(x["cause"], "")
        kind = GAIN_KIND.get(x["cause"], "idle")
        if kind == "idle" and x.get("basis") == "replay":
            kind = "replay"   # capped already at the lost time + the GPU work it removes
        # a collective's bound frees GPU time alone; a busy-time lever may cut host work too
        # (torch.compile, SDPA: fewer ops) and the replay prices the host where it replays
        gain = _gain(x["saves_ns"], kind, ctx, window_ns,
                     gpu_only=x["cause"] == "comms" and x.get("basis") != "replay")
        if x.get("projected_step_ns") is not None:   # replayed: the replay's projection
            _replayed_projection(gain, x["projected_step_ns"])
        elif x.get("per_sample_x") and gain["saves_per_step_ns"] is not None:
            gain.pop("projected_floor", None)
            gain["projected_step_ns"] = per_sample_step(x["per_sample_x"],
                                                        gain["saves_per_step_ns"],
                                                        program_step_ns(ctx))
        # the replayed saving per step; over the window where it has no steps (whole trace)
        per = gain["saves_per_step_ns"] if gain["saves_per_step_ns"] is not None \
            else gain["saves_ns"]
        priced = ("replay_levers." + x["model"], per) \
            if x.get("basis") == "replay" else _priced(lv, sc, busy)
        out.append({**{k: v for k, v in x.items() if k != "model"}, **gain,
                    "culprit": culprit or "", "because": because(lv, ctx, proofs or {}, priced)})
    # ranked again on the savings as shown: a bound clamped to the time there is to give back
    # per step ranked on its raw figure (TraceLens' h100 Qwen: request batching's 19 ms bound,
    # shown as 4 ms, led the replayed 14.2 ms fusion under "largest saving first")
    return L.rank(out, L.gpu_bound(ctx), ctx)


def _replayed_projection(gain: dict, projected_ns: int) -> None:
    """The replay's projected step in place of ``_gain``'s (in place). ``_gain``'s floor
    named what limited its own figure: kept only where the replay's is that figure (gpu/sync
    .bad: the replay's 1.79 ms step is under the GPU's 1.87 ms busy time a step, not it)."""
    if gain.get("projected_step_ns") != projected_ns:
        gain.pop("projected_floor", None)
    gain["projected_step_ns"] = projected_ns


def _host_actions(ctx: dict, window_ns: int, proofs: dict | None = None) -> list[dict]:
    """A CPU trace's levers priced by the replay of its steps (levers.offered_host), with
    their saving per step: what the change saves on the host, whatever the device. Advice
    to record the GPU saves no step time and ranks after them."""
    if not ctx.get("replay_levers"):
        return []
    # no GPU window: the steps' span is the window a saving is a share of
    span = window_ns or program_step_ns(ctx) * int(ctx.get("steps") or 0)
    out = []
    for x in L.offered_host(ctx, MIN_ACTION_SHARE * span):
        lv = L.BY_ID[x["id"]]
        gain = _gain(x["saves_ns"], "work", ctx, span)
        if x.get("projected_step_ns") is not None:
            _replayed_projection(gain, x["projected_step_ns"])
        per = gain["saves_per_step_ns"] if gain["saves_per_step_ns"] is not None \
            else gain["saves_ns"]
        out.append({**{k: v for k, v in x.items() if k != "model"}, **gain, "culprit": "",
                    "because": because(lv, ctx, proofs or {},
                                       ("replay_levers." + x["model"], per))})
    return out


def _priced(lv, sc: dict, busy: dict) -> tuple[str, object] | None:
    """The figure a lever's saving stands on: its busy-time lever's evidence, or the score of
    the cause it saves."""
    if lv.saves == "busy":
        return f"busy_levers.{lv.busy}", (busy.get(lv.busy) or {}).get("why", "")
    if lv.saves in L.CAUSE_PRICED:
        return f"cause_ns.{lv.cause}", int(sc.get(lv.cause, 0))
    return None


def _unpriced(cause: str, ctx: dict, proofs: dict | None = None,
              priced=lambda lv, ctx: False) -> list[dict]:
    """The table's levers for a verdict with no cause to price (cpu_only, unknown), but
    those ``priced`` (lever, ctx) says are priced elsewhere."""
    return [{"id": str(lv.id), "lever": lv.words(ctx), "cost": lv.cost, "cause": cause,
             "saves_ns": None, "saves_pct": None, "saves_per_step_ns": None,
             "projected_step_ns": None, "culprit": "",
             "because": because(lv, ctx, proofs or {}, _unpriced_fact(cause, ctx))}
            for lv in L.rows(cause, ctx) if not priced(lv, ctx)]


def _cpu_actions(ctx: dict, window_ns: int, proofs: dict | None = None) -> list[dict]:
    """A CPU trace's levers: those its steps' replay priced, the step anatomy's priced by
    their bound -- but where a replayed lever of the same group prices the change (the
    checkpoint lever's replay of the save), which the replay prices better -- and the rest
    unpriced."""
    replayed = _host_actions(ctx, window_ns, proofs)
    groups = {L.BY_ID[x["id"]].group or x["id"] for x in replayed}
    anatomy = [x for x in _anatomy_actions(ctx, window_ns, proofs)
               if L.BY_ID[x["id"]].group not in groups]
    shown = {x["id"] for x in replayed + anatomy}
    return replayed + anatomy + _unpriced("cpu_only", ctx, proofs,
                                          priced=lambda lv, c: str(lv.id) in shown)


def _cpu_comm_verdict(ctx: dict, window_ns: int, ev: dict, proofs: dict) -> dict:
    """A CPU program whose steps mostly wait on collectives (levers.cpu_comm_bound):
    communication is its bound, with the share of each step the host waits in them
    (passes/parallelism.host_comm), the collective that holds it, and the levers its
    preconditions allow, each priced by its saving model; then the CPU trace's own levers."""
    cc, top = ctx["cpu_comm"], (ctx["cpu_comm"].get("collectives") or [{}])[0]
    design = ctx.get("cpu_design") or {}
    ev.update(cpu_comm_pct=cc["share_pct"], cpu_comm_ns=int(cc["exposed_ns"]),
              cpu_comm_step_ns=int(cc["step_ns"]), cpu_comm_top=top.get("name"),
              cpu_by_design=design.get("by_design"))
    why = "; ".join(design.get("for") or []) if design.get("by_design") else \
        "no GPU activity recorded"
    summary = (f"CPU program ({why}): the host waits on collectives {cc['share_pct']:g}% of "
               f"each step ({cc['share_min_pct']:g}-{cc['share_max_pct']:g}%), nothing "
               f"overlapping them; {top.get('name')} {top.get('share_pct', 0):g}% of each step")
    span = window_ns or int(cc["step_ns"])
    actions = _cpu_comm_actions(ctx, span, proofs) + _cpu_actions(ctx, window_ns, proofs)
    out = _out("comms", summary, ev, L.rank(actions, False, ctx))
    out["withdrawn"] = [_withdrawn(w, ctx, proofs) for w in L.withdrawn_cpu(ctx)]
    return out


def _cpu_comm_actions(ctx: dict, span: int, proofs: dict | None = None) -> list[dict]:
    """A CPU program's communication levers (levers.cpu_comm_rows), each priced by its saving
    model over the steps' span."""
    out = []
    for lv in L.cpu_comm_rows(ctx):
        ns = L.SAVING_MODELS[lv.saves].price(lv, 0, {}, {}, ctx)
        if ns is not None and ns < MIN_ACTION_SHARE * span:
            continue
        gain = _gain(ns, "work", ctx, span)
        per = gain["saves_per_step_ns"] if gain["saves_per_step_ns"] is not None \
            else gain["saves_ns"]
        out.append({"id": str(lv.id), "lever": lv.words(ctx), "cost": lv.cost,
                    "cause": "comms", "basis": "bound", **gain,
                    "culprit": str((ctx["cpu_comm"].get("collectives") or [{}])[0].get("name")),
                    "because": because(lv, ctx, proofs or {}, (f"cpu_comm.{lv.saves}", per))})
    return out


def _anatomy_actions(ctx: dict, window_ns: int, proofs: dict | None = None) -> list[dict]:
    """A CPU trace's step-anatomy levers (a validation, micro-batches, a save, logging,
    recomputation) priced by their anatomy bound (verdict/anatomy.py ANATOMY_SAVINGS): on a
    CPU the step is host time, so the anatomy's host time is what the change gives back --
    ranked with the replayed levers, not after them."""
    span = window_ns or program_step_ns(ctx) * int(ctx.get("steps") or 0)
    out = []
    for lv in L.rows("cpu_only", ctx):
        ns = L.anatomy_saving(lv, ctx)
        if ns is None or ns <= 0:
            continue
        gain = _gain(ns, "work", ctx, span)
        k = L.batch_factor(ctx) if lv.saves == "batch_requests" else None
        if k and gain["saves_per_step_ns"] is not None:   # per request: the step grows to k
            gain.pop("projected_floor", None)
            gain.update(per_sample_x=float(k), projected_step_ns=per_sample_step(
                float(k), gain["saves_per_step_ns"], program_step_ns(ctx)))
        per = gain["saves_per_step_ns"] if gain["saves_per_step_ns"] is not None \
            else gain["saves_ns"]
        twin = L.BY_ID.get(str(lv.id).removesuffix("_cpu"))   # its GPU trace's row
        out.append({"id": str(lv.id), "lever": lv.words(ctx), "cost": lv.cost,
                    "cause": twin.cause if twin else "cpu_only", "basis": L.basis_of(lv), **gain,
                    "culprit": "",
                    "because": because(lv, ctx, proofs or {}, ("anatomy." + lv.saves, per))})
    return out


# what makes a verdict with no cause to price: no GPU op; the host not traced
_UNPRICED_FACT = {"cpu_only": "gpu_ops", "unknown": "host_traced"}


def _unpriced_fact(cause: str, ctx: dict) -> tuple[str, object] | None:
    key = _UNPRICED_FACT.get(cause)
    return (key, ctx[key]) if key in ctx else None


def _tensor_core_evidence(ev: dict, ctx: dict) -> None:
    b = ctx.get("busy_classes") or {}
    total = sum(b.values())
    if total and b.get("gemm_tensor", 0) > 0 and b["gemm_tensor"] >= b.get("gemm_simt", 0):
        ev["tensor_core_gemm_pct"] = round(100 * b["gemm_tensor"] / total, 1)


def _summary(bound: str, ev: dict, ctx: dict) -> str:
    share = ev["share_pct"][bound]
    what = WHAT[bound]
    culprit = ctx.get("culprits", {}).get(bound)
    text = (f"GPU idle {_pct(ev['idle_ns'], ev['window_ns'], 1)}% of the analysed window; {share:.0f}% of the lost "
            f"time is {what}")
    return text + (f" ({culprit})" if culprit else "")


def _out(bound: str, summary: str, ev: dict, actions: list, what_if=None) -> dict:
    return {"bound": bound, "title": TITLE[bound], "summary": summary, "evidence": ev,
            "levers": [a["lever"] for a in actions], "actions": list(actions),
            "diagnostics": [], "what_if": dict(what_if or {}), "withdrawn": []}


def _pct(a, b, digits: int = 2) -> float:
    # prose rounds once, from the ns (49.448 -> 49.4, as the tables), not from a rounded 49.45
    return round(100.0 * float(a) / float(b), digits) if b else 0.0
