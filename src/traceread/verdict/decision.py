"""The verdict in one call: ``decide`` reads one window's facts record (passes/facts.py) and
returns the verdict dict -- the bound, its title and summary, the evidence, the ranked to-do
list with what each lever saves, the diagnostics and what the trace cannot show.

It judges only: the record holds every figure and program fact (the passes computed them);
here the causes are scored (scores.py), the lever table asked (levers.py) with the program
facts and figures as its context, the busy-time levers priced (busy.py), and the window
named when it is not the steady state (steady.py).
"""
from __future__ import annotations

from ..passes.facts import WindowFacts
from . import scores, whatif
from .levers import BY_ID, fitting_busy, queued_kind_figures
from .busy import busy_levers, headline, memory_levers
from .steady import adjust_verdict
from .placement import busy_placement


def decide(facts: WindowFacts) -> dict:
    """The verdict of one analysed window, from its facts alone."""
    f = facts.figures
    blev = busy_levers(f.get("busy"))
    has_gpu = f["gpu_ops"] > 0
    ctx = lever_context(facts, blev)
    if facts.graph is not None:   # levers priced by replaying them (whatif.py); a CPU
        # trace's graph holds its host steps: the host levers are priced on it
        ctx["replay_levers"] = whatif.price(facts.graph, ctx, f["copies"],
                                            facts.frames.get("optimizer_regions"))
        facts.prices = whatif.saved_prices(ctx["replay_levers"])   # a saved record's prices
    elif facts.prices:   # a saved record: the prices it was judged with
        ctx["replay_levers"] = dict(facts.prices)
    window_ns, idle_ns, parts = f["window_ns"], f["idle_ns"], f["cause_ns"]
    run = one_op_run(f, facts.replay)
    if run:
        window_ns, idle_ns, parts = run
    verdict = scores.score(has_gpu=has_gpu, window_ns=window_ns, idle_ns=idle_ns,
                           parts=parts if has_gpu else None,
                           exposed_comm_ns=f["exposed_comm_ns"], copy=f["copies"],
                           ctx=ctx, extra_evidence=f["window_summary"],
                           facts_evidence=facts.evidence,
                           one_time_launch_ns=one_time_launch_ns(f.get("steady")))
    if run:
        verdict["evidence"]["judged_on_run_ns"] = window_ns
        verdict["summary"] += (f"; one GPU op in the trace, so its window shows no idle: "
                               f"judged on the run as replayed ({_ms(window_ns)}, its "
                               "critical path)")
    verdict["missing"] = missing(f.get("missing") or {}, ctx.get("pytorch", True))
    verdict["busy_placement"] = busy_placement(
        ctx, verdict.get("actions") or [], scores.MIN_ACTION_SHARE * window_ns) if has_gpu else []
    head = gpu_headline(f.get("utilization"), _as_priced(fitting_busy(blev, ctx),
                                                         verdict.get("actions") or []), ctx)
    if verdict["bound"] == "gpu" and head:
        verdict["summary"] += f"; {head}"
    adjust_verdict(verdict, f.get("steady") or {})
    on_bounds = whatif.bound_reasons(ctx, verdict.get("actions") or [], facts.replay)
    if on_bounds:   # a lever a model covers, priced by its bound: why (no unsettled replay)
        verdict["evidence"]["levers_on_bounds"] = on_bounds
    if ctx.get("replay_levers"):
        verdict["evidence"]["levers_replayed_on"] = ctx["replay_levers"]["steps_priced"]
        together = whatif.together(ctx["replay_levers"], verdict.get("actions") or [],
                                   {**ctx, "lost_ns": verdict["evidence"].get("lost_ns")},
                                   facts.together)
        if together:
            verdict["what_if"]["levers_together"] = together
    return verdict


# what each label of the replay's critical path (passes/replay/critical.py) is as an idle cause
PATH_CAUSE = {"host op": "host", "launch": "launch", "sync wait": "sync", "data load": "data",
              "collective": "comms", "another rank": "comms", "queued after launch": "queued",
              "unexplained": "unexplained"}


def one_op_run(f: dict, replay: dict | None) -> tuple[int, int, dict] | None:
    """(window, idle, cause parts) of a whole trace holding one GPU op, judged on the run the
    replay measured where that is longer: one op's window is all busy and shows no gap, so
    it cannot tell a GPU that paces the run from a host that does (HTA's triton_example: one
    2.24 us kernel in a 172 us run of host op, launch and sync wait read "GPU-bound: densely
    busy"). The run's idle is split as its critical path's time is. None otherwise."""
    run = int((replay or {}).get("measured_ns") or 0)
    path = ((replay or {}).get("critical_path") or {}).get("by_label") or {}
    if f.get("window_mode") != "whole_trace" or int(f.get("gpu_ops") or 0) != 1 \
            or not (replay or {}).get("replayable") or run <= int(f["window_ns"]):
        return None
    busy = int(f["window_ns"]) - int(f["idle_ns"])
    idle = run - busy
    causes: dict = {}
    for label, ns in path.items():
        c = PATH_CAUSE.get(label)
        if c:
            causes[c] = causes.get(c, 0) + int(ns)
    known = sum(causes.values())
    parts = dict(f["cause_ns"])
    if known <= 0:
        parts["unexplained"] = parts.get("unexplained", 0) + idle
        return run, idle, parts
    # the path's shares of the idle run, the rounding's remainder to its largest
    for c, ns in causes.items():
        parts[c] = parts.get(c, 0) + idle * ns // known
    parts[max(causes, key=causes.get)] += idle - sum(idle * ns // known for ns in causes.values())
    return run, idle, parts


def _ms(ns: int) -> str:
    if ns < 1_000:
        return f"{ns} ns"
    return f"{ns / 1e3:.0f} us" if ns < 1_000_000 else f"{ns / 1e6:.1f} ms"


def one_time_launch_ns(steady: dict | None) -> int:
    """Idle time of the window's lazy-loading launches (passes/steady.py), none in a sampled
    window (its idle figures are dropped)."""
    s = steady or {}
    return 0 if s.get("state") == "sampled" else int(s.get("one_time_launch_ns") or 0)


def lever_context(facts: WindowFacts, blev: list[dict] | None = None) -> dict:
    """What the lever table's predicates read: the program facts, the figures, and the
    busy-time levers priced on them (``busy_levers``: lever id -> its saving and why)."""
    blev = busy_levers(facts.figures.get("busy")) if blev is None else blev
    return dict(facts.program, **facts.figures,
                **queued_kind_figures(facts.figures.get("queued_on")),
                busy_levers={lv["lever"]: lv for lv in blev},
                gpu_path_share=gpu_path_share(facts.replay, facts.figures))


def gpu_path_share(replay: dict | None, figures: dict | None = None) -> float | None:
    """The share of the replayed steps' critical path (passes/replay/critical.py) that is
    the GPU's own work (kernels, copies), of its explained time; None without a replay,
    where the profiler's own cost is material (passes/overhead.py: the path is the profiled
    program's, and a host the profiler slows may pace a GPU that paces the plain run --
    h200/queue.fixed: 33% of the profiled path, 96% busy unprofiled), or where half the path
    or more has no traced cause (its "unexplained" links: HTA's MTIA trace, 99%), or where
    half the GPU's time or more was in ops queued behind earlier work
    (``queued_busy_share``): the host ran ahead of the GPU, whatever path the graph found
    (HTA's MTIA inference trace: its median op queued 9 ms, its path "0% GPU work"). Faster
    kernels shorten the step only where they are on that path: a host that launches each
    kernel just in time paces a GPU it keeps busy."""
    cp = (replay or {}).get("critical_path") or {}
    total = int(cp.get("total_ns") or 0)
    if not (replay or {}).get("replayable") or total <= 0 \
            or ((figures or {}).get("profiler_overhead") or {}).get("material") \
            or ((figures or {}).get("queued_busy_share") or 0) >= 0.5:
        return None
    by = cp.get("by_label") or {}
    # of the path's explained time: an unexplained stretch (no traced cause) is neither the
    # host's nor the GPU's; mostly unexplained, the share is not known
    known = total - int(by.get("unexplained", 0))
    if known <= total // 2:
        return None
    return min(1.0, (int(by.get("kernel", 0)) + int(by.get("copy", 0))) / known)


def utilization_levers(facts: WindowFacts) -> dict:
    """The levers of the GPU-use section (``utilization.busy.levers``,
    ``utilization.memory.levers``) and its headline sentence."""
    f = facts.figures
    ctx = lever_context(facts)
    blev = fitting_busy(busy_levers(f.get("busy")), ctx)
    return {"busy": blev, "memory": memory_levers(f.get("memory")),
            "headline": gpu_headline(f.get("utilization"), blev, ctx)}


def gpu_headline(u: dict | None, fitted: list[dict], ctx: dict) -> str:
    """The GPU-use headline (busy.headline) of the fitting busy levers ``fitted``, naming no
    lever where the host paces a busy GPU (``scores.HOST_PACED_SHARE``): faster kernels are
    no lever there (nsys-ai's healthy_1pct read "top lever tf32 (~43% of busy time)" beside
    "yet the host paces it" and an empty to-do list)."""
    share = ctx.get("gpu_path_share")
    paced = share is not None and share < scores.HOST_PACED_SHARE
    return headline(u, [] if paced else fitted)


def _as_priced(fitted: list[dict], actions: list[dict]) -> list[dict]:
    """The busy levers, the top one carrying the to-do list's replayed saving where the
    replay priced it: one figure for one lever (h200/xformer.bad's headline read "top lever
    torch_compile (~14% of busy time)" over its to-do item's replayed 10.3 ms, 11.9% of the
    window)."""
    if not fitted:
        return fitted
    top = fitted[0]
    for x in actions:
        lv = BY_ID.get(x.get("id"))
        if lv is not None and lv.busy == top["lever"] and x.get("basis") == "replay" \
                and x.get("saves_pct") is not None:
            return [dict(top, replayed_pct_of_window=x["saves_pct"])] + fitted[1:]
    return fitted


def missing(m: dict, pytorch: bool = True) -> list[str]:
    """What this capture cannot show, and how to record it (PyTorch's options only for a
    PyTorch program: a CUDA code of its own names its phases with NVTX itself)."""
    if m.get("nsys_host_untraced"):
        if not pytorch:
            return ["no NVTX ranges or OS-runtime calls: what the host does between launches "
                    "is invisible -- record with nsys profile --trace=cuda,nvtx,osrt and mark "
                    "the loop's phases with NVTX ranges (nvtxRangePush / nvtxRangePop)"]
        return ["no NVTX ranges or OS-runtime calls: DataLoader waits, .item() calls and "
                "framework ops are invisible -- record with nsys profile "
                "--trace=cuda,nvtx,osrt --pytorch=autograd-nvtx, or use torch.profiler"]
    if m.get("nsys_no_framework_ranges"):
        if not pytorch:
            return ["no NVTX ranges: mark the loop's phases (nvtxRangePush / nvtxRangePop) to "
                    "see which part of the host's work the GPU waits on"]
        return ["no framework operators: the DataLoader and .item() show only through "
                "NVTX; nsys profile --pytorch=autograd-nvtx names them"]
    return []
