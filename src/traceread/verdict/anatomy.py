"""The step anatomy's levers (passes/anatomy.py's facts, context key ``anatomy``): checkpoint
fewer layers, fewer and larger micro-batches, validate / save / log less often or off the
step, batch inference requests, is_causal for a masked SDPA. levers.py appends
``ANATOMY_LEVERS`` to its table, ``ANATOMY_SAVINGS`` to its saving models, and prices
their rows with ``anatomy_saving``.

Every saving is a bound read from the facts (docs/analysis.md, "The step's anatomy"): the
work the change removes, per step, times the window's steps (units.window_total). The
levers with a ``_cpu`` twin (cause ``cpu_only``) are the same advice on a CPU-only trace,
whose verdict prices nothing: their text carries the figure instead.
"""
from __future__ import annotations

from .leverkit import Ctx, Lever
from .units import step_share, window_total

BATCH_TO = 8            # the batch the request-batching lever prices (small, any server has it)
SMALL_BATCH = 8         # a batch at most this is worth batching further


def _an(c: Ctx) -> dict:
    return c.get("anatomy") or {}


def _ms(ns) -> str:
    return f"{int(ns or 0) / 1e6:.1f} ms"


# -- predicates -------------------------------------------------------------------------------

def recomputes(c: Ctx) -> bool:
    """Forward ops run again inside backward nodes (activation checkpointing)."""
    return bool((_an(c).get("recompute") or {}).get("host_ns_per_step"))


def micro_batched(c: Ctx) -> bool:
    """Two or more forward/backward passes per optimizer step (gradient accumulation), on a
    rank that is no pipeline stage (``pp_stages``): a stage's passes are its schedule's
    microbatches, and fewer of them widen the bubble (gloo pp3/gpipe_p2_m8: each rank read
    'fewer, larger micro-batches' beside the job's 'more microbatches per step')."""
    return int((_an(c).get("micro_batches") or {}).get("per_optimizer_step") or 0) >= 2 \
        and not c.get("pp_stages")


def _odd(c: Ctx, what: str) -> dict | None:
    # the odd steps first, then what every step holds (passes/anatomy.py every_step)
    for g in (_an(c).get("odd_steps") or []) + (_an(c).get("every_step") or []):
        if any(h["what"] == what for h in g.get("holds") or []) and g.get("per_step_ns", 0) > 0:
            return g
    return None


def odd_validation(c: Ctx) -> bool:
    """Some steps run forward passes with no backward (an evaluation in the training loop)."""
    return _odd(c, "forward_only_passes") is not None


def odd_save(c: Ctx) -> bool:
    """Some steps save (torch.save, a distributed checkpoint, file writes)."""
    return _odd(c, "save") is not None


def odd_log(c: Ctx) -> bool:
    """Some steps log, all-gather metrics or sync, and hold neither an evaluation nor a save."""
    return _log_group(c) is not None


def _log_group(c: Ctx) -> dict | None:
    for what in ("logging", "metric_all_gather", "host_syncs"):
        g = _odd(c, what)
        if g and not any(h["what"] in ("forward_only_passes", "save") for h in g["holds"]):
            return g
    return None


def small_inference_batch(c: Ctx) -> bool:
    """Inference (no backward, no optimizer) at a batch of SMALL_BATCH or fewer rows."""
    inf = _an(c).get("inference") or {}
    return _an(c).get("training") is False and 0 < int(inf.get("batch") or 0) <= SMALL_BATCH


def masked_sdpa(c: Ctx) -> bool:
    """SDPA with an explicit mask tensor off the flash path (a causal mask would not need it)."""
    s = c.get("sdpa") or {}
    return bool(s.get("explicit_mask")) and s.get("backend") != "flash"


def gpu_trace(c: Ctx) -> bool:
    """the trace holds GPU work (a CPU-only trace gets the _cpu twin)"""
    return not c.get("cpu_only")


def cpu_trace(c: Ctx) -> bool:
    """the trace is CPU-only (a GPU trace gets the priced lever)"""
    return bool(c.get("cpu_only"))


# -- saving models ----------------------------------------------------------------------------

def checkpoint_saving(c: Ctx) -> int | None:
    """Per step: the GPU time of the recomputed forward (GPU trace), else the host time
    checkpointing adds (recompute + hooks); x steps."""
    r = _an(c).get("recompute") or {}
    per = r.get("gpu_ns_per_step") if _an(c).get("gpu_traced") else r.get("checkpoint_ns_per_step")
    return None if per is None else window_total(int(per), c, traced=True)


def micro_batch_saving(c: Ctx) -> int | None:
    """m micro-batches -> one of m x the size: the per-micro-batch work that does not grow
    with the batch (forward + backward time less its compute: GPU busy on a GPU trace, the
    host time inside matmul/conv/attention ops on a CPU one, less their part that does not
    grow with the batch where the shapes show it: ``flop_fixed_ns_each``) is paid once
    instead of m times; the rest of the compute is taken to scale linearly (no gain from
    larger GEMMs beyond that fixed part counted)."""
    mb = _an(c).get("micro_batches") or {}
    m = int(mb.get("per_optimizer_step") or 0)
    if m < 2:
        return None
    compute = mb.get("gpu_ns_each") if _an(c).get("gpu_traced") else \
        max(0, int(mb.get("flop_host_ns_each") or 0) - int(mb.get("flop_fixed_ns_each") or 0))
    # a micro-batch's whole loop iteration where seen (its loss, scaling and .item() are
    # paid per micro-batch too: pairs/accum's 0.35 ms beside 1.09 ms of forward + backward)
    each = mb.get("period_ns_each") or mb.get("host_ns_each")
    fixed = max(0, int(each or 0) - int(compute or 0))
    return window_total(int(fixed * (m - 1)), c, traced=True)


def _odd_saving(g: dict | None, c: Ctx) -> int | None:
    return None if g is None else window_total(int(g["per_step_ns"]), c, traced=True)


def batch_saving(c: Ctx) -> int | None:
    """BATCH_TO requests in one forward: the per-request time less its compute and its
    input's loading is paid once for BATCH_TO requests; the compute and the loading (the
    data phase: DataLoader batches, each sample preprocessed) are taken to grow with the
    batch (a memory-bound GEMV does not: the saving is then larger -- a lower estimate)."""
    inf = _an(c).get("inference") or {}
    k = batch_factor(c)
    if k is None:
        return None
    fixed = max(0, int(inf.get("request_ns") or 0) - _compute_ns(inf)
                - int(inf.get("data_host_ns") or 0) - _prep_ns(c))
    return window_total(int(fixed * (1 - 1 / k)), c, traced=True)


def _prep_ns(c: Ctx) -> int:
    """Per step, the host time in the GPU's gaps that runs off the model's path and launches
    nothing (``host_work_kind`` "movable": data preparation on CPU tensors, file I/O) -- each
    request's own input work outside a DataLoader, which grows with the batch as the data
    phase does (TraceLens timesformer: 268 ms of transformers' video preprocessing a request
    read as per-forward overhead, 'saves 237 ms' at 8 requests)."""
    hw = c.get("host_work_kind")
    if not isinstance(hw, dict) or hw.get("other_kind") != "movable":
        return 0
    off = max(0, int(hw.get("host_ns") or 0) - int(hw.get("model_ns") or 0))
    return off // max(1, int(c.get("steps") or 1))


def batch_factor(c: Ctx) -> int | None:
    """How many times the batch the request-batching lever prices (BATCH_TO / the batch):
    its saving is per request, at a step that many times the size (None: no batch seen)."""
    b = int((_an(c).get("inference") or {}).get("batch") or 0)
    return max(1, BATCH_TO // b) if b else None


def _compute_ns(inf: dict) -> int:
    """What grows with the batch: the GPU work a request launched on a GPU trace, the host's
    matmul time on a CPU one."""
    g = inf.get("gpu_ns")
    return int(g if g is not None else inf.get("flop_host_ns") or 0)


_MODELS = {"recompute": checkpoint_saving, "micro_batches": micro_batch_saving,
           "validation": lambda c: _odd_saving(_odd(c, "forward_only_passes"), c),
           "save": lambda c: _odd_saving(_odd(c, "save"), c),
           "logging": lambda c: _odd_saving(_log_group(c), c),
           "batch_requests": batch_saving}

ANATOMY_SAVINGS = {
    "recompute": "the recomputed forward's GPU time per step (host time of recompute + "
                 "checkpoint hooks on a CPU trace) x steps: no checkpointing at all; per layer "
                 "this over the checkpointed layers",
    "micro_batches": "(m - 1) x a micro-batch's forward+backward time less its compute (on a "
                     "CPU trace: its matmul ops' time less their part that does not grow with "
                     "the batch, fitted on the shapes), per optimizer step x steps: the fixed "
                     "per-micro-batch cost paid once",
    "validation": "the evaluation steps' excess over the ordinary step, per step of its "
                  "period x steps: validating never (half of it: half as often)",
    "save": "the saving steps' excess over the ordinary step, per step of its period x "
            "steps: an asynchronous save leaves the copy to host",
    "logging": "the logging steps' excess over the ordinary step per step of its period x "
               "steps",
    "batch_requests": f"(1 - 1/k) of a request's time less its compute (the GPU work it "
                      f"launched; on a CPU trace its matmul ops' time) and its input's loading "
                      f"(the data phase) and preparation (host work off the model's path that "
                      f"launches nothing), k = {BATCH_TO} / batch "
                      "requests per forward, x steps (a lower estimate for memory-bound GEMVs)",
}


def anatomy_saving(lever: Lever, ctx: Ctx) -> int | None:
    """The ns ``lever`` saves over the window under its ANATOMY_SAVINGS model; None: unknown."""
    fn = _MODELS.get(lever.saves)
    return fn(ctx) if fn else None


# -- texts ------------------------------------------------------------------------------------

def _checkpoint_text(c: Ctx) -> str:
    r = _an(c)["recompute"]
    mods = ", ".join(r["modules"][:4]) or "forward operators"
    gpu = f", {_ms(r['gpu_ns_per_step'])} GPU" if r.get("gpu_ns_per_step") is not None else ""
    share = f" ({100 * r['share_of_backward']:.0f}% of backward)" \
        if r.get("share_of_backward") else ""
    return (f"checkpoint fewer layers: {r.get('layers') or 'some'} checkpointed modules "
            f"({mods}) run their forward again inside backward, {_ms(r['host_ns_per_step'])} "
            f"host{gpu} a step{share} -- keep activations for the layers memory allows "
            "(selective checkpointing, or checkpoint every other layer)")


def _micro_text(c: Ctx) -> str:
    mb = _an(c)["micro_batches"]
    syncs = mb.get("syncs_per_micro_batch") or 0
    sync = f", each with {syncs:g} host sync(s) (.item())" if syncs else ""
    return (f"fewer, larger micro-batches: {mb['per_optimizer_step']} forward/backward passes "
            f"per optimizer step, {_ms(mb['host_ns_each'])} each{sync} -- raise the micro-batch "
            "and lower the accumulation steps as memory allows; accumulate the loss on the "
            "device and read it once per optimizer step")


def _holds(g: dict, what: str) -> dict:
    return next(h for h in g["holds"] if h["what"] == what)


def _every(g: dict) -> str:
    if g.get("period") == 1:
        return "in every step"
    return f"every {g['period']} steps" if g.get("period") else \
        f"in step {g['steps'][0]}" if len(g["steps"]) == 1 else f"in steps {g['steps']}"


def _validation_text(c: Ctx) -> str:
    g = _odd(c, "forward_only_passes")
    h = _holds(g, "forward_only_passes")
    sync = next((x for x in g["holds"] if x["what"] == "host_syncs"), None)
    mode = " under no_grad/eval()" if h.get("no_grad") else ""
    items = f" and {sync['count']} .item() syncs" if sync else ""
    return (f"validate less often or off the step: {_every(g)} {h['count']} forward-only "
            f"passes{mode}{items} make the step {_ms(g['excess_ns'])} longer "
            f"({_ms(g['per_step_ns'])} a step over its period) -- raise the interval, sum the "
            "metric on the device and call .item() once, or evaluate asynchronously / in "
            "another process")


def _save_text(c: Ctx) -> str:
    g = _odd(c, "save")
    h = _holds(g, "save")
    return (f"save asynchronously or less often: {_every(g)} a save "
            f"({_ms(h['host_ns'])} writing) makes the step {_ms(g['excess_ns'])} longer "
            f"({_ms(g['per_step_ns'])} a step over its period) -- "
            "torch.distributed.checkpoint.async_save, or copy the state_dict to host and write "
            "it from a background thread")


def _log_text(c: Ctx) -> str:
    g = _log_group(c)
    what = ", ".join(h["what"].replace("_", " ") for h in g["holds"])
    return (f"log less often or without a sync: {_every(g)} the step holds {what} and is "
            f"{_ms(g['excess_ns'])} longer ({_ms(g['per_step_ns'])} a step over its period) -- "
            "keep the metrics on the device and reduce / print them every N steps")


def _batch_text(c: Ctx) -> str:
    inf = _an(c)["inference"]
    data = int(inf.get("data_host_ns") or 0)
    prep = _prep_ns(c)
    loading = (f", {_ms(data)} loading its input" if data else "") + \
        (f", {_ms(prep)} preparing it on the host" if prep else "")
    return (f"batch inference requests: each forward serves a batch of {inf['batch']} in "
            f"{_ms(inf['request_ns'])}, {_ms(_compute_ns(inf))} of it "
            f"{'GPU work' if inf.get('gpu_ns') is not None else 'in matmuls'}{loading} -- "
            f"gather up to {BATCH_TO} requests per forward (dynamic batching): more samples "
            "for nearly the same weight traffic and launches")


CAUSAL_TEXT = ("pass is_causal=True to F.scaled_dot_product_attention instead of a causal mask "
               "tensor (when the mask is causal): the flash kernel runs and skips the masked "
               "half of the scores")

ANATOMY_LEVERS: tuple[Lever, ...] = (
    Lever("checkpoint_fewer", "gpu", _checkpoint_text, "code", saves="recompute",
          when=(gpu_trace, recomputes), first=True),
    Lever("fewer_micro_batches", "host", _micro_text, "code", saves="micro_batches",
          when=(gpu_trace, micro_batched), first=True),
    Lever("validate_less", "host", _validation_text, "code", saves="validation",
          when=(gpu_trace, odd_validation), first=True, group="periodic_stall"),
    Lever("save_async", "host", _save_text, "code", saves="save",
          when=(gpu_trace, odd_save), first=True, group="checkpoint_off_path"),
    Lever("log_less", "host", _log_text, "code", saves="logging",
          when=(gpu_trace, odd_log), first=True),
    Lever("batch_requests", "launch", _batch_text, "code", saves="batch_requests",
          when=(gpu_trace, small_inference_batch), first=True),
    Lever("sdpa_is_causal", "gpu", CAUSAL_TEXT, "code", saves="none",
          when=(gpu_trace, masked_sdpa)),
)


def _cpu_twin(lv: Lever) -> Lever:
    """``lv``'s advice on a CPU-only trace (no cause to price: the figure is in the text)."""
    return Lever(f"{lv.id}_cpu", "cpu_only", lv.text, lv.cost, saves=lv.saves,
                 when=(cpu_trace,) + lv.when[1:], first=lv.first, group=lv.group)


# the same advice on a CPU-only trace (the causal-SDPA one has no CPU figure to give)
ANATOMY_LEVERS += tuple(_cpu_twin(lv) for lv in ANATOMY_LEVERS if lv.saves != "none")


# -- diff: which of these changes a pair of programs shows ------------------------------------

def _period(g: dict | None) -> int | None:
    return None if g is None else g.get("period")


def _left(b: dict, a: dict | None) -> float:
    """The share of BEFORE's per-step cost the change leaves: every p_b steps -> every p_a
    keeps p_b / p_a of it (pairs/valid: every step -> every 4th keeps a quarter); none
    after, or a period unknown on either side: none of it (the model's whole saving)."""
    pb, pa = _period(b), _period(a)
    return pb / pa if a is not None and pb and pa else 0.0


def anatomy_changes(before: Ctx, after: Ctx) -> list[dict]:
    """The anatomy levers pulled between two programs' contexts, each {"lever", "evidence",
    "promised_per_step_ns" (before's own saving model; None: unknown), "sync_drop": whether
    the host syncs that went were the pulled pass's}. ``diff`` names these instead of the
    generic sync / host levers."""
    out = []
    b, a = _an(before), _an(after)
    if not b or not a:
        return out

    def add(lever, text, model, syncs=False, left=0.0):
        fn = _MODELS[model]
        ns = fn(before)
        out.append({"lever": lever, "evidence": text, "sync_drop": syncs,
                    "promised_per_step_ns": None if ns is None
                    else int(step_share(ns, before, traced=True) * (1 - left))})
    vb, va = _odd(before, "forward_only_passes"), _odd(after, "forward_only_passes")
    if vb and (va is None or (_period(va) or 0) > (_period(vb) or 0)):
        add("validate_less", f"forward-only passes {_every(vb)} -> "
            + (_every(va) if va else "none"), "validation", syncs=True, left=_left(vb, va))
    sb, sa = _odd(before, "save"), _odd(after, "save")
    if sb and (sa is None or (_period(sa) or 0) > (_period(sb) or 0)):
        add("save_async", f"a save {_every(sb)} -> "
            + (_every(sa) if sa else "none on the step"), "save", left=_left(sb, sa))
    gb, ga = _log_group(before), _log_group(after)
    if gb and (ga is None or (_period(ga) or 0) > (_period(gb) or 0)):
        add("log_less", f"logging {_every(gb)} -> " + (_every(ga) if ga else "none"),
            "logging", syncs=True, left=_left(gb, ga))
    mb = int((b.get("micro_batches") or {}).get("per_optimizer_step") or 0)
    ma = int((a.get("micro_batches") or {}).get("per_optimizer_step") or 0)
    if mb >= 2 and 0 < ma < mb:
        add("fewer_micro_batches", f"micro-batches per optimizer step {mb} -> {ma}",
            "micro_batches", syncs=True)
    lb = int((b.get("recompute") or {}).get("layers") or 0)
    la = int((a.get("recompute") or {}).get("layers") or 0)
    if lb and la < lb:
        add("checkpoint_fewer", f"checkpointed modules {lb} -> {la}", "recompute")
    ib = int((b.get("inference") or {}).get("batch") or 0)
    ia = int((a.get("inference") or {}).get("batch") or 0)
    if ib and ia > ib:
        add("batch_requests", f"inference batch {ib} -> {ia}", "batch_requests")
    return out
