"""Levers priced by replaying the step with the lever pulled (issue 30): predict, don't bound.

The what-if models (passes/replay/whatif.py) change the replayable step graph the way a
program change would and replay it; here each lever of the table (levers.py) is tied to
the model of the change it asks for (``MODEL_OF``), priced from the window's replay
(``price``: every model once, on the facts record's graph), and the levers offered
together are replayed at once (``together``), never summed. A lever no model covers, and
every lever of a window that cannot be replayed, keeps its bound (levers.saving).
"""
from __future__ import annotations

from ..passes.replay import price_models, replay_models, unfit
from .units import program_step_ns, step_share, window_total

# lever id -> the what-if model of the change it asks for (docs/analysis.md)
MODEL_OF = {
    **dict.fromkeys(("remove_syncs", "per_param_item", "remove_syncs_native"), "drop_syncs"),
    # reading results a step later removes the read-backs' waits, not every sync's
    **dict.fromkeys(("late_read", "late_read_native"), "drop_reads"),
    **dict.fromkeys(("cuda_graphs", "graphs_host", "cuda_graphs_native",
                     "graphs_host_native"), "cuda_graphs"),
    **dict.fromkeys(("compile_fuse", "compile_pointwise", "compile_dispatch", "compile_model_host",
                     "compile_fuse_rest", "compile_generic", "fuse_native"), "fuse_pointwise"),
    **dict.fromkeys(("tf32", "tf32_generic"), "tf32"),
    **dict.fromkeys(("bf16_autocast", "autocast_generic"), "bf16"),
    **dict.fromkeys(("fp16_autocast", "fp16_for_bf16", "fp16_generic"), "fp16"),
    **dict.fromkeys(("pin_copy", "pin_copy_native"), "pin_copies"),
    # DataLoader(pin_memory=True) changes the batch's copies, not a copy made in the model
    "pin_batch": "pin_batch",
    # a read-back lever is priced on the device->host copies alone, not the inputs sent
    **dict.fromkeys(("pin_read", "pin_read_native"), "pin_reads"),
    **dict.fromkeys(("side_stream_copy", "async_copy_native"), "overlap_copies"),
    # workers already loading (more_workers): the replay cannot tell how many more would
    # keep up -- its bound, not the model's refusal ("already num_workers > 0")
    "num_workers": "workers",
    "persistent_workers": "persistent_workers",
    **dict.fromkeys(("fused_optimizer", "foreach_optimizer", "foreach_to_fused"),
                    "fused_optimizer"),
    # the native program's allocator calls in the step go too when it reuses its buffers
    **dict.fromkeys(("no_empty_cache", "allocator_on", "reuse_buffers_native"),
                    "no_empty_cache"),
    **dict.fromkeys(("graphs_not_replayed", "graphs_not_replayed_host", "fixed_shapes_capture",
                     "capture_in_warmup"), "replay_graphs"),
    **dict.fromkeys(("mark_dynamic", "bucket_shapes", "warm_up"), "no_recompile"),
    **dict.fromkeys(("off_step_path", "off_thread_native"), "host_off_path"),
    **dict.fromkeys(("checkpoint_off_path", "cpu_checkpoint"), "checkpoint_off_path"),
    "larger_batch": "larger_batch",
    **dict.fromkeys(("channels_last", "channels_last_generic"), "channels_last"),
}


# a model that took over a lever from another: what a record saved before it holds instead
MODEL_BEFORE = {"pin_batch": "pin_copies"}


def idle_cap(lever_id: str, ctx: dict) -> int | None:
    """The most a replayed lever can save over the window: the window's lost time plus the
    GPU work its change removed (``gpu_saved_ns`` per step x steps). Idle time given back
    cannot shorten the GPU's own work -- and the replay can miss some of it (kernels queued
    before the trace began carry no step) and promise a step shorter than the GPU's busy
    time. A larger batch, compared per sample: the lost time plus the GPU work less its
    share per sample were it all fixed cost. None: no cap (the lost time unknown)."""
    r = lever_price(ctx, lever_id)
    return None if r is None else cap_of(r, ctx)


def cap_of(r: dict, ctx: dict) -> int | None:
    """``idle_cap`` of one replay result."""
    lost = ctx.get("lost_ns")
    if lost is None:
        return None
    k = float(r.get("per_sample_x") or 1.0)
    if k != 1.0:
        # per sample: at most the lost time, and the GPU work were it all fixed cost
        # (busy / k per sample) -- a one-time call kept out of lost_ns is no per-sample saving
        busy = window_total(int(ctx.get("busy_step_mean_ns") or 0), ctx)
        return max(0, int(lost)) + int(busy * max(0.0, 1 - 1 / k)) if k > 1 else None
    return max(0, int(lost)) + window_total(int(r.get("gpu_saved_ns") or 0), ctx)


def levers_of(model: str) -> list[str]:
    """The levers that ask for the change ``model`` makes."""
    return [lv for lv, m in MODEL_OF.items() if m == model]


def price(graph, ctx: dict, copies: dict, regions=None) -> dict:
    """Every model replayed once on the window's graph (passes/replay/whatif.py
    ``price_models``): what ``lever_price`` reads (``ctx["replay_levers"]``)."""
    return price_models(graph, ctx, copies, regions)


def withdrawn(r: dict) -> bool:
    """A replay result whose model refused because the change does not fit the program
    (the lever is not offered); any other refusal leaves the lever its bound."""
    return not r["applied"] and any(unfit(why) for why in r["refused"].values())


def lever_price(ctx: dict, lever_id: str) -> dict | None:
    """The replay result of the model that prices ``lever_id`` (None: no model, or the
    window was not replayed)."""
    r = ctx.get("replay_levers")
    m = MODEL_OF.get(lever_id)
    if not r or m is None:
        return None
    got = r["models"].get(m)
    # a record saved before the model existed is judged on the one that priced the lever then
    return got if got is not None else r["models"].get(MODEL_BEFORE.get(m))


def kept_note(ctx: dict, lever_id: str) -> str | None:
    """What the replay of ``lever_id`` left at its measured time and why, for the lever's
    text (None: nothing to say). ``host_off_path`` keeps the launching lanes' dispatch
    (``dispatch_kept``, passes/replay/whatif.py): where every step holds the moved work no
    op ran warm, and the trace shows no faster dispatch (gpu/host.bad: 15 ms of json.dumps
    before each step; its ops run 2-7x AFTER's) -- the saving may be short of the change's."""
    r = lever_price(ctx, lever_id)
    if not r or not r.get("applied"):
        return None
    kept = ((r.get("params") or {}).get(MODEL_OF.get(lever_id)) or {}).get("dispatch_kept")
    if not kept or kept.get("warm_seen") is not False:
        return None
    return (f"not priced: the launching threads' dispatch, "
            f"{int(kept.get('ns_per_step') or 0) / 1e6:.2f} ms a step -- {kept.get('why')}")


EXCLUSIVE = (("tf32", "bf16", "fp16"),)


def saved_prices(prices: dict) -> dict:
    """``price``'s result without the graph and the replay's facts: what a saved facts
    record keeps to judge again (passes/facts.py ``WindowFacts.prices``)."""
    return {k: v for k, v in prices.items() if k not in ("graph", "facts")}


def together(prices: dict, actions: list[dict], ctx: dict,
             saved: dict | None = None) -> dict | None:
    """The offered replay-priced levers applied together and replayed once (never summed):
    a what-if row (saves_ns over the window, per step, projected step) with the models in
    ``models``; of mutually exclusive precisions the one saving most; a larger batch is
    left out (it changes what a step is)."""
    models = []
    for x in actions:
        m = MODEL_OF.get(x["id"])
        if x.get("basis") != "replay" or m is None or m in models or m == "larger_batch":
            continue
        models.append(m)
    for group in EXCLUSIVE:
        mine = [m for m in models if m in group]
        if len(mine) > 1:
            best = max(mine, key=lambda m: prices["models"][m]["saves_ns"])
            models = [m for m in models if m not in group or m == best]
    if len(models) < 2:
        return None
    key = tuple(models)
    if "graph" not in prices:   # a saved record: the replay of the same models, if it has it
        r = (saved or {}).get(key)
    else:
        r = replay_models(prices["graph"], prices["facts"], models, before_ns=prices["before_ns"])
        if saved is not None:
            saved[key] = {k: r[k] for k in ("before_ns", "after_ns", "per_sample_x", "saves_ns",
                                           "applied", "gpu_saved_ns")}
    if r is None:
        return None
    if not r["applied"]:
        return None
    per = int(r["saves_ns"])
    proj = projected(ctx, r)
    cap = cap_of(r, ctx)
    cap = None if cap is None else int(step_share(cap, ctx))
    if cap is not None and per > cap:   # idle given back once, GPU work shrunk by the rest
        per = cap
        ref = program_step_ns(ctx)
        proj = max(int(ctx.get("busy_step_mean_ns") or 0), ref - per) if ref else None
    # no steps (the whole trace as one run): a saving over the window, none per step
    return {"saves_ns": window_total(per, ctx), "saves_pct": None,
            "saves_per_step_ns": per if ctx.get("steps") else None,
            "projected_step_ns": proj, "models": r["applied"]}


def projected(ctx: dict, r: dict) -> int | None:
    """The projected step of a replay result, in the measured step's frame; the program
    step's (verdict/units.py), never below the GPU's busy time per step less the GPU work the
    change removed (an 18 ms GPU-bound step is not projected to 0.92 ms by a host lever).

    Priced on the profiled replay: the measured mean x replayed after / replayed before (the
    replay's own error cancels). Priced without the profiler (``unprofiled``): the measured
    step less the saving, as ``scores._gain`` projects it -- the saving is the unprofiled
    program's, and the measured mean x the unprofiled replay's ratio took the profiler's
    cost off a step that still holds it (TraceLens' Falcon h100: 3.8 ms saved of a 7.89 ms
    step, projected 7.89 x 1.27 / 5.07 = 1.97 ms instead of 4.09 ms)."""
    ref = program_step_ns(ctx)
    if not ref or not r["before_ns"]:
        return None
    x = float(r.get("per_sample_x") or 1.0)
    if unprofiled(ctx):   # per sample: the step per sample, the caller scales it by x
        out = int(ref - int(r["saves_ns"]))
    else:
        out = int(round(ref * r["after_ns"] / x / r["before_ns"]))
    floor = int(ctx.get("busy_step_mean_ns") or 0) - int(r.get("gpu_saved_ns") or 0)
    return max(out, floor) if x == 1.0 else max(out, 0)   # per sample: the step itself grows


def unprofiled(ctx: dict) -> bool:
    """The levers were priced on the graph without the profiler's cost
    (passes/replay/whatif.py ``unprofiled_base``: its profiled replay kept beside)."""
    return bool((ctx.get("replay_levers") or {}).get("profiled_before_ns"))


def bound_reasons(ctx: dict, actions: list[dict], replay: dict | None) -> dict:
    """Why each offered lever a model covers kept its bound (lever id -> the reason): the
    window was not replayed, its replay did not settle, or the model refused on this graph
    (nothing for it to change, or its own replay did not settle). A price is never taken
    from a replay that did not settle."""
    out = {}
    prices = ctx.get("replay_levers")
    for x in actions:
        m = MODEL_OF.get(x.get("id"))
        if m is None or x.get("basis") == "replay":
            continue
        if not prices:
            why = (replay or {}).get("reason") or "the window was not replayed"
        else:
            r = prices["models"].get(m) or {}
            why = "; ".join(sorted(set((r.get("refused") or {}).values())))
        if why:
            out[str(x["id"])] = why
    return out
