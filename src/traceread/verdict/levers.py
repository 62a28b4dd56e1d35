"""The lever table: every lever the verdict can offer, the evidence it needs, what it saves.

One row per lever (``Lever``): the cause whose score it saves, its text, its cost
(``free``: a setting or argument, ``code``: a code change, ``infra``: hardware, storage,
cluster), its saving model (``SAVINGS``) and its applicability predicates over the
trace context (context.py plus the figures of figures.py). A lever is offered
only when all its predicates hold. A key missing from the context means "unknown": each
predicate says what it does then -- it falls back to offering the lever (what the fixed
per-cause lists did) unless the unknown could contradict it.

Diagnostics (``DIAGNOSTICS``: "find it with py-spy", ``TORCH_LOGS=recompiles``,
``NCCL_DEBUG=INFO``) save nothing by themselves: they go to the verdict's unranked "to find
out more" list, never into the ranked to-do list.

``offered`` turns the table into the ranked to-do list (``verdict.actions``): one item per
offered lever with its saving in ns, largest first; on a tie the lever the trace itself
points at, then the cheaper one. The rules are documented in docs/analysis.md ("What each
lever would save").
"""
from __future__ import annotations

import re
import sys
from enum import Enum
from typing import Callable

from .leverkit import (COST_ORDER, Ctx, Lever, LeverDoc, Pred, SavingModel, Withdrawn,
                       first_line, register_ids)
from .units import per_sample_step, program_step_ns, step_share, window_total


# -- predicates over the trace context ---------------------------------------------------
# Each reads documented context keys; a missing key is "unknown".

def pytorch(c: Ctx) -> bool:
    """A PyTorch program (unknown: yes)."""
    return c.get("pytorch", True) is not False


def native(c: Ctx) -> bool:
    """Not PyTorch (CUDA/HIP C++, other frameworks): levers name CUDA calls."""
    return not pytorch(c)


def training(c: Ctx) -> bool:
    """Backward or optimizer work runs (unknown: yes -- today's levers assumed training)."""
    return c.get("training", True) is not False


def inference(c: Ctx) -> bool:
    """Known to be inference: no backward, no optimizer."""
    return c.get("training", True) is False


def uses_graphs(c: Ctx) -> bool:
    """The program launches or records CUDA graphs (torch.compile reduce-overhead counts)."""
    return bool(c.get("uses_cuda_graphs") or c.get("compile_mode_graphs"))


def no_graphs(c: Ctx) -> bool:
    """No CUDA graphs anywhere: capturing the step is new advice."""
    return not uses_graphs(c)


def graphs_not_replayed(c: Ctx) -> bool:
    """Graphs are set up but none was replayed in the analysed steps (a new shape each step)."""
    return bool(c.get("graphs_not_replayed"))


def graphs_replayed(c: Ctx) -> bool:
    """CUDA graphs are set up and replayed: graph launches are seen in the window, not only
    a recording's own first run of the graph it just made (``graph_replays`` > 0; unknown:
    yes)."""
    if not (uses_graphs(c) and not graphs_not_replayed(c) and graphs_launched(c)):
        return False
    n = c.get("graph_replays")   # read last: the fact that decides a refusal here
    return n is None or int(n) > 0


def workers(c: Ctx) -> bool:
    """The DataLoader already uses worker processes."""
    return bool(c.get("dataloader_workers"))


def worker_restarts(c: Ctx) -> bool:
    """The DataLoader's workers are started again at an epoch's start inside the window
    (passes/dataloader.py: a new iterator between two DataLoader calls)."""
    return bool((c.get("dataloader_restarts") or {}).get("restarts"))


def _persistent_text(c: Ctx) -> str:
    r = c.get("dataloader_restarts") or {}
    n = int(r.get("restarts") or 0)
    each = (r.get("restart_ns") or 0) / max(1, n) / 1e6
    start = (r.get("startup_ns") or 0) / max(1, n) / 1e6
    when = (f"every {r['period']} steps, an epoch" if r.get("period")
            else f"{n} time{'s' * (n != 1)} in the window")
    up = f", then {start:.3g} ms of their start-up in the first batch's wait" if start else ""
    return (f"persistent_workers=True: the DataLoader's workers are shut down and started again "
            f"at each epoch's start ({when}; {each:.3g} ms each on the training thread{up})")


def no_workers(c: Ctx) -> bool:
    """The DataLoader runs in the training process (no worker processes seen)."""
    return not workers(c)


def not_compiled(c: Ctx) -> bool:
    """Not compiled with torch.compile (unknown: not compiled). Triton kernels filling half
    of the busy time are torch.compile's output too."""
    return not (c.get("compiled") or c.get("compile_mode_graphs")
                or c.get("triton_share", 0) >= 0.5)


def _opt_impl(c: Ctx) -> str | None:
    opt = c.get("optimizer")
    return opt.get("impl") if isinstance(opt, dict) else None


def optimizer_unfused(c: Ctx) -> bool:
    """Training whose optimizer is neither fused nor foreach (unknown optimizer: offered when
    training, unless fused optimizer kernels were seen). ``optimizer`` None = no optimizer."""
    if not training(c) or c.get("fused_optimizer"):
        return False
    if "optimizer" in c and c["optimizer"] is None:
        return False
    return _opt_impl(c) not in ("fused", "foreach")


def optimizer_foreach(c: Ctx) -> bool:
    """The optimizer already runs the foreach (multi-tensor) path: only fused=True is left."""
    return training(c) and _opt_impl(c) == "foreach" and not c.get("fused_optimizer")


def _torch_version(c: Ctx) -> tuple[int, int] | None:
    """The newest torch the trace can have run: exact ``2.1.0+cu121`` -> (2, 1), an era
    ``1.8-1.9`` -> (1, 9), ``<2.0`` -> (1, 99) (below 2.0); ``>=2.4`` or unknown: None."""
    v = str(c.get("torch_version") or "")
    m = re.match(r"<(\d+)\.(\d+)$", v)
    if m:
        major, minor = int(m.group(1)), int(m.group(2))
        return (major, minor - 1) if minor else (major - 1, 99)
    m = re.match(r"(\d+)\.(\d+)(?:-(\d+)\.(\d+))?", v)
    if not m:
        return None
    return (int(m.group(3)), int(m.group(4))) if m.group(3) else (int(m.group(1)), int(m.group(2)))


def fused_available(c: Ctx) -> bool:
    """torch >= 2.0, where Adam/AdamW/SGD take fused=True (unknown version: yes)."""
    v = _torch_version(c)
    return v is None or v >= (2, 0)


def old_torch(c: Ctx) -> bool:
    """A known torch < 2.0: no fused=True optimizers yet."""
    return not fused_available(c)


def may_recompile(c: Ctx) -> bool:
    """Recompiles seen, or their count unknown (0 recompiles: no recompile advice)."""
    r = c.get("recompiles")
    return r is None or r > 0


def host_dispatch(c: Ctx) -> bool:
    """The host time is PyTorch's own per-op dispatch: aten ops are the innermost host
    work in the starved gaps (context ``host_dispatch``)."""
    return bool(c.get("host_dispatch"))


def not_host_dispatch(c: Ctx) -> bool:
    """The host time is not PyTorch's own per-op dispatch."""
    return not host_dispatch(c)


def host_in_model(c: Ctx) -> bool:
    """The host time between launches is the model's own forward: most of it is inside
    module calls (``nn.Module.__call__`` / ``forward`` frames) or ops that launch kernels
    (``host_work_kind``, passes/hostwork.py). Work that is the model cannot move to
    DataLoader workers; fewer, larger ops (compile, graphs, a larger batch) shorten it."""
    hw = c.get("host_work_kind")
    return isinstance(hw, dict) and hw.get("kind") == "model"


def host_off_model(c: Ctx) -> bool:
    """The host time is not the model's own forward (module calls, launching ops)."""
    return not host_in_model(c)


def model_host(c: Ctx) -> bool:
    """Per-op dispatch or the model's forward Python: the host work is the model's."""
    return host_dispatch(c) or host_in_model(c)


def per_param_syncs(c: Ctx) -> bool:
    """A sync per parameter per step (``.item()`` in a loop over parameters)."""
    return bool(c.get("per_param_syncs"))


def _framework(c: Ctx) -> list | None:
    fw = c.get("framework")
    return list(fw) if fw else None       # unknown or nothing recognised: judge by collectives


def _collectives(c: Ctx) -> list | None:
    co = c.get("collectives")
    return list(co) if co is not None else None


def ddp(c: Ctx) -> bool:
    """DDP's gradient all-reduce: DDP named (and not TorchRec, whose dense part DDP wraps
    but whose exposed time is the embedding all_to_all); framework unknown: an all_reduce
    runs (collectives unknown too: yes)."""
    fw, co = _framework(c), _collectives(c)
    if fw is not None:
        return "ddp" in fw and "torchrec" not in fw
    return co is None or "all_reduce" in co


def fsdp(c: Ctx) -> bool:
    """FSDP1/FSDP2 named; framework unknown: all_gather or reduce_scatter run (collectives
    unknown too: yes). A DDP job gets no FSDP advice."""
    fw, co = _framework(c), _collectives(c)
    if fw is not None:
        return "fsdp1" in fw or "fsdp2" in fw
    return co is None or "all_gather" in co or "reduce_scatter" in co


def fsdp_comms_run(c: Ctx) -> bool:
    """FSDP's own collectives (all_gather, reduce_scatter) run in the window: not another
    one's alone (Ulysses' all_to_all beside an FSDP2 that gathers nothing). Unknown: yes."""
    co = _collectives(c)
    return co is None or "all_gather" in co or "reduce_scatter" in co


FSDP_HIDDEN_PCT = 10.0   # all_gathers at most this exposed: prefetch already hides them


def fsdp_gathers_exposed(c: Ctx) -> bool:
    """FSDP's all_gathers are not already hidden: ``fsdp_all_gather_exposed_pct``
    (passes/parallelism.py: all_gather time no compute covers) above ``FSDP_HIDDEN_PCT``;
    not measured (no steps, no data-moving spans): yes."""
    pct = c.get("fsdp_all_gather_exposed_pct")
    return pct is None or pct > FSDP_HIDDEN_PCT


PP_BUBBLE_PCT = 20.0     # a pipeline stage idle at least this share of its steps ...
PP_MIN_GAIN_PCT = 2.0    # ... and doubling m would cut the schedule's bubble by >= 2 points
PP_SLOW_X = 1.25         # the slowest stage computes >= 1.25x the other stages' median
EP_IMBALANCE_X = 1.25    # max / mean all_to_all bytes


def pp_theory_pct(p: int, m: int, v: int = 1) -> float:
    """The bubble of balanced stages: 100 (p-1)/(v m+p-1) (GPipe / 1F1B: v = 1; interleaved:
    v stages per rank)."""
    return 100.0 * (p - 1) / (v * m + p - 1)


def pp_bubble_dominates(c: Ctx) -> bool:
    """A pipeline stage's measured bubble (``pp_bubble_pct``: the least over the stages a job
    shows) is >= PP_BUBBLE_PCT of its steps and 2m microbatches would cut the schedule's
    bubble by >= PP_MIN_GAIN_PCT points. Stages or m unknown: no (nothing to project)."""
    b, p, m = c.get("pp_bubble_pct"), c.get("pp_stages"), c.get("pp_microbatches")
    if b is None or not p or p < 2 or not m:
        return False
    v = int(c.get("pp_virtual") or 1)
    return b >= PP_BUBBLE_PCT and \
        pp_theory_pct(p, m, v) - pp_theory_pct(p, 2 * m, v) >= PP_MIN_GAIN_PCT


def pp_stage_slow(c: Ctx) -> bool:
    """A job's slowest stage computes >= PP_SLOW_X the other stages' median (per step, as the
    job's straggler reads it) and more than the stages' mean (``pp_excess_busy_ns``); one
    rank alone: unknown, no."""
    x, s = c.get("pp_slowest_x"), c.get("pp_slowest_stage")
    return s is not None and x is not None and x >= PP_SLOW_X \
        and int(c.get("pp_excess_busy_ns") or 0) > 0


TP_EXPOSED_PCT = 20.0    # TP all_reduce time no compute covers, % of the steps


def tp_comm_exposed(c: Ctx) -> bool:
    """The TP group's all_reduces are on the critical path: their exposed time is >=
    TP_EXPOSED_PCT of the steps (``tp_exposed_pct``, passes/parallelism.tp_layers)."""
    x = c.get("tp_exposed_pct")
    return x is not None and x >= TP_EXPOSED_PCT


def _tp_overlap_text(c: Ctx) -> str:
    return (f"overlap the tensor-parallel all_reduce with compute: it is exposed for "
            f"{c['tp_exposed_pct']:.0f}% of the steps (layer {c['tp_worst_layer']}: "
            f"{c['tp_worst_layer_pct']:.0f}% of its time); async TP (collective matmul: "
            "torch._inductor.config._micro_pipeline_tp, with sequence parallel's reduce_scatter "
            "/ all_gather in place of the all_reduce), or a smaller TP degree inside a faster "
            "link domain")


def ep_imbalanced(c: Ctx) -> bool:
    """all_to_all bytes max / mean >= EP_IMBALANCE_X (a job: received per rank; one rank:
    what it sends each peer)."""
    x = c.get("ep_imbalance")
    return x is not None and c.get("ep_hot_rank") is not None and x >= EP_IMBALANCE_X


def _pp_microbatch_text(c: Ctx) -> str:
    p, m, v = int(c["pp_stages"]), int(c["pp_microbatches"]), int(c.get("pp_virtual") or 1)
    sched = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": f"interleaved 1F1B (v={v})"}.get(
        c.get("pp_schedule") or "", "the schedule")
    form = "(p-1)/(v m+p-1)" if v > 1 else "(p-1)/(m+p-1)"
    return (f"more microbatches per step: the pipeline bubble is {c['pp_bubble_pct']:.0f}% of "
            f"the steps; {sched} over {p} stages idles {form} = "
            f"{pp_theory_pct(p, m, v):.0f}% at m={m}, {pp_theory_pct(p, 2 * m, v):.0f}% at "
            f"m={2 * m} (smaller microbatches, same batch)"
            + ("" if v > 1 else "; or an interleaved schedule "
               "(ScheduleInterleaved1F1B, v stages per rank: (p-1)/(v m+p-1))")
            + ("; 1F1B for the same bubble with less activation memory"
               if c.get("pp_schedule") == "gpipe" else ""))


def _pp_rebalance_text(c: Ctx) -> str:
    return (f"rebalance the layers across the pipeline stages: stage {c['pp_slowest_stage']} "
            f"computes {c['pp_slowest_x']:.2f}x the other stages' median, "
            f"{int(c['pp_excess_busy_ns']) / 1e6:.1f} ms above the stages' mean in the analysed "
            "steps, and every other stage waits on it: move layers off it (the split points)")


def _ep_balance_text(c: Ctx) -> str:
    return (f"balance the all_to_all: rank {c['ep_hot_rank']} gets {c['ep_imbalance']:.2f}x the "
            f"mean bytes ({c.get('ep_imbalance_of', 'received')}); for MoE routing: a capacity "
            "factor that caps each expert's tokens, a load-balancing auxiliary loss on the "
            "router, or re-place / replicate the hot experts")


def deepspeed(c: Ctx) -> bool:
    """DeepSpeed is named."""
    return "deepspeed" in (_framework(c) or [])


def megatron(c: Ctx) -> bool:
    """Megatron is named."""
    return "megatron" in (_framework(c) or [])


def torchrec(c: Ctx) -> bool:
    """TorchRec named, or (framework unknown) an all_to_all runs: embedding sharding."""
    fw, co = _framework(c), _collectives(c)
    if fw is not None:
        return "torchrec" in fw
    return co is not None and "all_to_all" in co


def other_comms(c: Ctx) -> bool:
    """Collectives no framework lever fits (vLLM/sglang tensor parallel, hand-written)."""
    return not any(p(c) for p in (ddp, fsdp, deepspeed, megatron, torchrec))


def gloo(c: Ctx) -> bool:
    """Collectives run on gloo (CPU transport)."""
    return c.get("comm_backend") == "gloo"


def gpu_transport(c: Ctx) -> bool:
    """NCCL/RCCL or unknown backend: interconnect advice applies (not gloo, not MPI)."""
    return c.get("comm_backend") not in ("gloo", "mpi")


def slow_collective(c: Ctx) -> bool:
    """The most exposed GPU collective moves its data far below any interconnect's bandwidth
    (``slow_collective`` from analysis: < 10 GB/s bus bandwidth on >= 1 MiB messages)."""
    return bool(c.get("slow_collective")) and gpu_transport(c)


def _slow_collective_text(c: Ctx) -> str:
    s = c["slow_collective"]
    return (f"{s['collective']} reaches {s['busbw_gbps']:g} GB/s bus bandwidth on "
            f"{s['avg_msg_bytes'] / 2**20:.1f} MiB messages over {s['group_size']} ranks -- far "
            "below any GPU interconnect: its time is waiting for the other ranks to arrive (or a "
            "slow transport). Analyse every rank's trace together (traceread analyze "
            "rank*.json) to find the late rank; NCCL_DEBUG=INFO shows the transport")


def buffer_broadcast(c: Ctx) -> bool:
    """DDP broadcasts its buffers every forward (``ddp_buffer_broadcast_ns`` > 0)."""
    return int(c.get("ddp_buffer_broadcast_ns") or 0) > 0


def _device(c: Ctx) -> dict:
    d = c.get("device")
    return d if isinstance(d, dict) else {}


def bf16_device(c: Ctx) -> bool:
    """The device has fast bf16 (unknown: yes)."""
    return _device(c).get("bf16") is not False


def no_bf16_device(c: Ctx) -> bool:
    """Known not to have fast bf16 (Turing, Volta): fp16 autocast + GradScaler instead."""
    return _device(c).get("bf16") is False


def tf32_device(c: Ctx) -> bool:
    """The device has TF32 tensor cores (unknown: yes)."""
    return _device(c).get("tf32") is not False


def not_lowp(c: Ctx) -> bool:
    """bf16/fp16 not already in use (dtype mix unknown: not in use)."""
    dt = c.get("dtypes") or {}
    return not (dt.get("bf16") or dt.get("fp16"))


def convolutions(c: Ctx) -> bool:
    """Convolutions run (unknown: yes)."""
    return c.get("convolutions", True) is not False


def not_channels_last(c: Ctx) -> bool:
    """The convolutions do not already run channels_last (``channels_last``: NHWC kernels
    and no layout conversion kernel); unknown: yes."""
    return c.get("channels_last") is not True


def attention_unfused(c: Ctx) -> bool:
    """No fused attention kernel (SDPA/flash) runs."""
    return not c.get("fused_attention") and not c.get("attention_ns", 0)


def softmax_runs(c: Ctx) -> bool:
    """Softmax kernels run (unknown: yes): without them there is no attention to fuse."""
    return c.get("softmax_kernels", True) is not False


def gemm_fp32(c: Ctx) -> bool:
    """The GEMMs are not on tensor cores: FP32 SIMT GEMM time exceeds tensor-core GEMM
    time (busy classes unknown: yes; no GEMM at all: no)."""
    b = c.get("busy_classes")
    if not b:
        return True
    tensor, simt = b.get("gemm_tensor", 0), b.get("gemm_simt", 0)
    return simt > tensor


def dominant_kernel(c: Ctx) -> bool:
    """One kernel takes >= DOMINANT_KERNEL_PCT of GPU time: tuning it is the lever."""
    k = c.get("top_kernel") or {}
    return float(k.get("pct", 0)) >= DOMINANT_KERNEL_PCT


def gpu_bound(c: Ctx) -> bool:
    """The verdict is GPU-bound: generic kernel advice (no saving estimate) applies."""
    return c.get("bound") == "gpu"


def no_busy_evidence(c: Ctx) -> bool:
    """passes/busy.py found no busy-time lever with a saving: the generic list applies."""
    return not c.get("busy_levers")


COLD_START_SHARE = 0.3


def cold_start(c: Ctx) -> bool:
    """A window without steps whose lost time is >= COLD_START_SHARE one-time start-up calls
    (context creation, module loading: ``startup`` from window.one_time_calls)."""
    ns = int((c.get("startup") or {}).get("ns") or 0)
    return ns > 0 and ns >= COLD_START_SHARE * int(c.get("lost_ns") or 0)


def startup_alloc(c: Ctx) -> bool:
    """The start-up's largest call is an allocator call: churn advice would be about it."""
    return cold_start(c) and bool((c.get("startup") or {}).get("alloc"))


def no_startup_alloc(c: Ctx) -> bool:
    """The start-up's largest call is not an allocator call."""
    return not startup_alloc(c)


def allocator_uncached(c: Ctx) -> bool:
    """PyTorch's caching allocator is off: frees inside ops (context ``allocator_uncached``)."""
    return bool(c.get("allocator_uncached"))


def _frees(c: Ctx) -> int | None:
    """Device-memory frees while the window's GPU works (``device_frees``), else those among
    the gaps' top host ops (``alloc_frees``); None: unknown."""
    n = c.get("device_frees")
    if n is None:
        n = c.get("alloc_frees")
    return None if n is None else int(n)


def device_frees(c: Ctx) -> bool:
    """Device memory is released in the window (``device_frees``; unknown: assume so)."""
    n = _frees(c)
    return n is None or n > 0


def allocator_growing(c: Ctx) -> bool:
    """Allocations and no release while the window's GPU works (``device_frees``): the
    caching allocator is still growing. A free there -- an empty_cache() -- is churn, even
    outside the gaps' largest host ops."""
    return _frees(c) == 0


def shapes_may_vary(c: Ctx) -> bool:
    """The ops' input shapes change between steps (``step_shapes``: record_shapes' input dims
    compared step by step); the same in every step: stable already, no; unknown: yes."""
    s = c.get("step_shapes")
    return not (isinstance(s, dict) and s.get("vary") is False)


def shapes_seen_varying(c: Ctx) -> bool:
    """The trace shows the ops' input shapes changing between steps (``step_shapes`` vary);
    no shapes recorded (record_shapes off) or under two steps: nothing shows it, no."""
    s = c.get("step_shapes")
    return isinstance(s, dict) and s.get("vary") is True


def allocator_cached(c: Ctx) -> bool:
    """PyTorch's caching allocator is on."""
    return not allocator_uncached(c)


def ddp_or_fsdp(c: Ctx) -> bool:
    """Gradient communication every micro-batch (DDP, or FSDP whose collectives run):
    no_sync() applies."""
    return ddp(c) or (fsdp(c) and fsdp_comms_run(c))


# -- program facts (passes/newfacts.py): each reads one fact; a missing key is "unknown" --

def capturable(c: Ctx) -> bool:
    """Nothing in the step rules a CUDA graph out (``capturable``: no sync followed by more
    GPU work, no data-dependent shape, no fresh host data mid-step); unknown: yes."""
    return c.get("capturable") is not False


def input_batch_copies(c: Ctx) -> bool:
    """Host-to-device copies of the step's input batch (``payloads``); unknown: yes."""
    p = c.get("payloads")
    return p is None or "input_batch" in p


def resent_copies(c: Ctx) -> bool:
    """The same host tensor is sent again every step (``payloads``: resent); unknown: yes."""
    p = c.get("payloads")
    return p is None or "resent" in p


def unknown_copies(c: Ctx) -> bool:
    """Copies whose payload the trace cannot tell (``payloads``: unknown)."""
    return "unknown" in (c.get("payloads") or [])


def dynamic_shapes(c: Ctx) -> bool:
    """Ops with data-dependent output shapes run (``dynamic_shapes_per_step``), or
    tensor-valued conditions block (``blocking.by_kind.condition``); unknown: yes."""
    n = c.get("dynamic_shapes_per_step")
    kinds = (c.get("blocking") or {}).get("by_kind") or {}
    return n is None or n > 0 or "condition" in kinds


REMOVE_SYNCS = ("remove per-step host syncs: .item(), .cpu(), .tolist(), print(tensor), "
                "torch.cuda.synchronize() -- log every N steps, or accumulate metrics on the GPU")
# the blocking kinds (passes/blocking.py) a reader looks for in the code, in words
SYNC_KIND_WORDS = {"item": ".item()", "tolist": ".tolist()", "cpu": ".cpu() / .numpy()",
                   "synchronize": "synchronize()", "condition": ("tensor condition (if t:)",
                                                                 "tensor conditions (if t:)"),
                   "nonzero": "nonzero()", "masked_select": "masked_select()",
                   "unique": "unique()", "repeat_interleave": "repeat_interleave()",
                   "bool_mask_index": ("boolean-mask index", "boolean-mask indexes"),
                   "runtime_sync": ("runtime sync (cuda*Synchronize)",
                                    "runtime syncs (cuda*Synchronize)"),
                   "blocking_copy": ("blocking copy", "blocking copies"),
                   "pageable_copy": ("pageable copy", "pageable copies"),
                   "other": ("other blocking call", "other blocking calls")}


def _syncs_text(c: Ctx) -> str:
    """REMOVE_SYNCS, with the blocking calls the trace shows a step; a blocking copy (a
    ``.to(device)`` whose call waited for the queue) is made asynchronous, not removed."""
    kinds = (c.get("blocking") or {}).get("by_kind") if isinstance(c.get("blocking"), dict) \
        else None
    if not kinds:
        return REMOVE_SYNCS
    seen = [_counted(v.get("per_step"), SYNC_KIND_WORDS.get(k, k.replace("_", " ")))
            for k, v in sorted(kinds.items(), key=lambda kv: -(kv[1].get("per_step") or 0))]
    out = f"{REMOVE_SYNCS} (a step here: {', '.join(seen)})"
    if "blocking_copy" in kinds or "pageable_copy" in kinds:
        out += ("; a blocking copy (.to() / .copy_()): non_blocking=True with pinned host "
                "memory, so its call does not wait for the queue")
    return out


def _counted(x, words) -> str:
    """"2 synchronize()", "1 blocking copy", "0.5 blocking copies": ``words`` is one form
    (a call's name) or (one, many)."""
    x = float(x or 0)
    n = f"{x:.0f}" if x == int(x) else f"{x:.1f}"
    one, many = words if isinstance(words, tuple) else (words, words)
    return f"{n} {one if x == 1 else many}"


def explicit_syncs(c: Ctx) -> bool:
    """Syncs the user wrote (.item(), .cpu(), synchronize, a blocking copy) run
    (``blocking.by_kind``); only data-dependent ops: no. Unknown: yes."""
    b = c.get("blocking")
    if not isinstance(b, dict):
        return True
    kinds = b.get("by_kind") or {}
    return not kinds or any(v.get("explicit") or k in ("blocking_copy", "pageable_copy", "other")
                            for k, v in kinds.items())


# the blocking kinds (passes/blocking.py) that read a value the program could take a step
# later: not a tensor condition (``if t:`` decides this step's control flow), not a bare
# synchronize (it reads nothing), not a data-dependent shape (the next op needs its size)
DEFERRABLE_READS = ("item", "tolist", "cpu", "blocking_copy", "pageable_copy", "other")


def deferrable_reads(c: Ctx) -> bool:
    """A read-back the program could take a step later runs (``blocking.by_kind``: .item(),
    .tolist(), .cpu(), a blocking copy); only tensor conditions (``if t:`` needs its value
    now) and synchronize(): no. Unknown: yes."""
    b = c.get("blocking")
    if not isinstance(b, dict) or not b.get("by_kind"):
        return True
    return any(k in DEFERRABLE_READS for k in b["by_kind"])


def compiled_call(c: Ctx) -> bool:
    """The host-bound time is torch.compile's own per-call work (``host_in_compiled_call``:
    the host culprit is the compiled graph's call / wrapper / guards)."""
    return bool(c.get("host_in_compiled_call"))


def not_compiled_call(c: Ctx) -> bool:
    """The host time is not torch.compile's own per-call work."""
    return not compiled_call(c)


def not_offloaded(c: Ctx) -> bool:
    """The optimizer is not offloaded to the host."""
    return not optimizer_offloaded(c)


def optimizer_offloaded(c: Ctx) -> bool:
    """Gradients copied out, an optimizer step on CPU tensors, parameters copied back."""
    return bool(c.get("optimizer_offload"))


def checkpoint_stall(c: Ctx) -> bool:
    """Steps stalled at a fixed period by a checkpoint (``periodic_stall``)."""
    st = c.get("periodic_stall") or {}
    return st.get("what") == "checkpoint" and bool(st.get("period")) \
        and int(st.get("excess_ns_per_stall") or 0) > 0


def periodic_other_stall(c: Ctx) -> bool:
    """Steps stalled at a fixed period by something else (an eval, a flush)."""
    st = c.get("periodic_stall") or {}
    return bool(st.get("period")) and st.get("what") not in (None, "checkpoint") \
        and int(st.get("excess_ns_per_stall") or 0) > 0


STALL_HOST_SHARE = 0.5


def host_not_stall(c: Ctx) -> bool:
    """The host time is not mostly a periodic stall's (a checkpoint, an eval): the stalls in
    the window (excess over the median step each) are < STALL_HOST_SHARE of the host cause.
    CUDA graphs or generic "move host work" cannot shorten a torch.save."""
    st = c.get("periodic_stall") or {}
    host = int((c.get("cause_ns") or {}).get("host") or 0)
    stall = int(st.get("excess_ns_per_stall") or 0) * int(st.get("stalls_in_window") or 0)
    return not (host and stall >= STALL_HOST_SHARE * host)


def other_process(c: Ctx) -> bool:
    """The trace shows another process's GPU work on the same device."""
    return bool(c.get("other_process"))


def no_other_process(c: Ctx) -> bool:
    """No other process's GPU work shows on the device."""
    return not other_process(c)


# the queued time of two kinds of ``queued_on`` evidence, as the lever context carries them
# (decision.lever_context: ms in the reasons, not a dict of raw ns)
QUEUED_KIND_KEYS = {"untraced": "queued_nothing_traced_ns", "graph": "queued_in_graph_replays_ns"}


def queued_kind_figures(queued_on: dict | None) -> dict:
    """``{queued_nothing_traced_ns, queued_in_graph_replays_ns}`` of ``queued_on`` ({} when
    it has no breakdown)."""
    by = queued_by_kind(queued_on)
    return {key: int(by[kind]) for kind, key in QUEUED_KIND_KEYS.items()} if by else {}


def _queued_kind_ns(c: Ctx, kind: str) -> int | None:
    ns = c.get(QUEUED_KIND_KEYS[kind])
    if ns is None:   # a context built without the figures: from the breakdown itself
        by = queued_by_kind(c.get("queued_on"))
        ns = by[kind] if by else None
    return None if ns is None else int(ns)


def queued_outside_graphs(c: Ctx) -> bool:
    """No CUDA graphs, or queued time that nothing traced explains outside their replays
    (``queued_on``: "nothing traced", not "inside a CUDA graph replay"): HTA's torchrec
    rank0 (negative_queue_length) replays graphs, yet 72% of its queued time lies between
    ops of no graph launch -- told "inside the program's own CUDA graph replays"."""
    if no_graphs(c):
        return True
    return bool(_queued_kind_ns(c, "untraced"))


def queued_in_replays(c: Ctx) -> bool:
    """Queued time inside a CUDA graph replay (``queued_on``; unknown: yes)."""
    ns = _queued_kind_ns(c, "graph")
    return ns is None or ns > 0


def no_fp16(c: Ctx) -> bool:
    """fp16 does not already run (fp16 GEMM kernels, fp16 autocast): bf16 advice would be a
    lateral move there."""
    return not c.get("fp16_runs") and not (c.get("dtypes") or {}).get("fp16")


def autocast_off(c: Ctx) -> bool:
    """torch.autocast is not already on (``autocast``: its casts to bf16 / fp16 inside the
    matmul ops); on: the matmuls left in fp32 are ones it keeps in fp32 or runs outside its
    region -- turning it on is done. Unknown: yes."""
    return not c.get("autocast")


def _stall_text(c: Ctx) -> str:
    st = c["periodic_stall"]
    return (f"move the checkpoint off the step path: every {st['period']} steps "
            f"{st.get('op') or 'torch.save'} stalls the step by "
            f"{int(st['excess_ns_per_stall']) / 1e6:.1f} ms ({st['stalled_steps']} of "
            f"{st['steps_seen']} steps traced) -- save asynchronously "
            "(torch.distributed.checkpoint.async_save, or copy the state_dict to pinned host "
            "memory and write it from a background thread), or save less often")


def _other_stall_text(c: Ctx) -> str:
    st = c["periodic_stall"]
    return (f"every {st['period']} steps {st.get('op') or 'an operation'} ({st['what']}) "
            f"stalls the step by {int(st['excess_ns_per_stall']) / 1e6:.1f} ms: run it less "
            "often, asynchronously, or off the training process")


def _offload_text(c: Ctx) -> str:
    o = c["optimizer_offload"]
    return (f"run the optimizer on the GPU: each step copies {o['grads_per_step']:g} gradients "
            f"to the host, steps {o['optimizer']} on CPU tensors and copies "
            f"{o['params_per_step']:g} parameters back ({int(o['ns_per_step']) / 1e6:.1f} ms a "
            "step); keep the optimizer state on the GPU (fused=True) if it fits, or shard it "
            "(ZeRO / FSDP) instead of offloading")


def _queued_other_text(c: Ctx) -> str:
    o = c["other_process"]
    return (f"the GPU idles with work queued while process {o['processes'][1]} also runs on "
            f"device {o['device']}: another process shares the GPU -- give each process its own "
            "GPU (or MPS / MIG partitions)")


CPU_SHARE = 0.3   # a CPU-only trace's compile / DataLoader share worth a lever of its own


def _cpu(c: Ctx) -> dict:
    return c.get("cpu_only") or {}


def cut_before_gpu(c: Ctx) -> bool:
    """Kernel launches recorded and no GPU event: the trace was cut before its GPU events."""
    return bool(_cpu(c).get("cut_before_gpu"))


def window_without_gpu(c: Ctx) -> bool:
    """The analysed window holds no GPU event while the trace has some."""
    return bool(_cpu(c).get("window_without_gpu"))


def launches_untraced(c: Ctx) -> bool:
    """Kernel launches recorded in a whole file with no GPU event: GPU activities were off."""
    return int(_cpu(c).get("launches") or 0) > 0


def no_launches(c: Ctx) -> bool:
    """No kernel launch is recorded in a trace with no GPU event."""
    return not launches_untraced(c)


def not_cut(c: Ctx) -> bool:
    """The trace is whole and its window holds GPU work when the trace has some."""
    return not cut_before_gpu(c) and not window_without_gpu(c)


def cpu_compile_heavy(c: Ctx) -> bool:
    """torch.compile takes at least CPU_SHARE of a CPU-only trace."""
    return float(_cpu(c).get("compile_share") or 0) >= CPU_SHARE


def cpu_data_heavy(c: Ctx) -> bool:
    """The DataLoader takes at least CPU_SHARE of a CPU-only trace's steps."""
    return float(_cpu(c).get("dataloader_share") or 0) >= CPU_SHARE


# -- a CPU program's exposed communication (passes/parallelism.host_comm: ``cpu_comm``;
# passes/cpudesign.py: ``cpu_design``) --

CPU_COMM_SHARE = 0.5   # a CPU step at least this much waiting on collectives is comms-bound
CPU_HOP_NS = 100_000   # a ring step over TCP: generous for one host or one cluster network
CPU_LINK_GBPS = 1.0    # bus bandwidth a slow network still reaches (under 10 GbE's 1.25 GB/s)
PEERS_SHARE = 0.25     # waits beyond the transfer this share of the exposed time: late peers
ACCUM_N = 2            # micro-batches per all_reduce the accumulation lever is priced at
# ring steps and bus bytes per call of each collective, in multiples of (n - 1) and (n - 1) / n
RING = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "broadcast": 1}


def _cc(c: Ctx) -> dict:
    return c.get("cpu_comm") or {}


def _top_comm(c: Ctx) -> dict:
    return (_cc(c).get("collectives") or [{}])[0]


def cpu_design_known(c: Ctx) -> dict:
    return c.get("cpu_design") or {}


def cpu_comm_bound(c: Ctx) -> bool:
    """A CPU program's steps wait on collectives at least half their time (``cpu_comm``
    share_pct), and no evidence says it is a GPU program profiled without its GPU side."""
    return float(_cc(c).get("share_pct") or 0) >= 100 * CPU_COMM_SHARE \
        and cpu_design_known(c).get("by_design") is not False


def not_cpu_by_design(c: Ctx) -> bool:
    """The program is not CPU-only by design (``cpu_design``: the devices recorded empty and
    nothing for a GPU program say it is), so its GPU side may be missing."""
    return cpu_design_known(c).get("by_design") is not True


def cpu_allreduce_exposed(c: Ctx) -> bool:
    """The collective exposed longest is an all_reduce (DDP's gradients)."""
    return _top_comm(c).get("collective") == "all_reduce"


def cpu_one_bucket(c: Ctx) -> bool:
    """One all_reduce call a step: the gradients go in one bucket, after the backward."""
    return float(_top_comm(c).get("calls_per_step") or 0) <= 1


def cpu_many_buckets(c: Ctx) -> bool:
    """Two or more all_reduce calls a step: more buckets than one."""
    return float(_top_comm(c).get("calls_per_step") or 0) >= 2


def backward_measured(c: Ctx) -> bool:
    """The backward's host time per step is measured (the step anatomy's phases)."""
    return _backward_ns(c) > 0


def _backward_ns(c: Ctx) -> int:
    ph = ((c.get("anatomy") or {}).get("phases") or {}).get("backward") or {}
    return int(ph.get("host_ns") or 0)


def transfer_floor_ns(c: Ctx) -> tuple[int, str] | None:
    """(ns, how) the top collective's transfer takes a step at most: the least of its
    fastest step's exposed time (the same calls every step: a longer step waited on
    something else) and, where sizes are recorded, a slow network's cost (CPU_HOP_NS a ring
    step, CPU_LINK_GBPS of bus bandwidth). None without per-step figures."""
    t = _top_comm(c)
    by = [int(x) for x in t.get("exposed_by_step") or []]
    if not by:
        return None
    best = (min(by), "its fastest step's wait") if _same_calls(t) else (None, "")
    n, b, k = t.get("group_size"), t.get("bytes_per_step"), RING.get(t.get("collective"))
    if n and n > 1 and b and k:
        calls = max(1.0, float(t.get("calls_per_step") or 1))
        net = int(calls * k * (n - 1) * CPU_HOP_NS + k * (n - 1) / n * b / CPU_LINK_GBPS)
        if best[0] is None or net < best[0]:
            best = (net, f"{calls:g} call(s), {_bytes_text(b)} a step over {n} ranks at "
                         f"{CPU_HOP_NS // 1000} us a ring step and {CPU_LINK_GBPS:g} GB/s")
    return best if best[0] is not None else None


def _same_calls(t: dict) -> bool:
    """Every step makes the same calls (count, and bytes where recorded): then its fastest
    step's wait bounds what the transfer takes in the others (a size sweep's steps differ)."""
    calls, b = t.get("calls_by_step") or [], t.get("bytes_by_step")
    return len(set(calls)) == 1 and (not b or len(set(b)) == 1)


def ddp_named(c: Ctx) -> bool:
    """DDP is named in the trace (DistributedDataParallel.forward, its reducer's ops): its
    buckets and no_sync() exist to be changed."""
    return "ddp" in (c.get("framework") or [])


def cpu_wait_beyond_ns(c: Ctx) -> int:
    """The top collective's exposed time beyond its transfer floor, over the steps."""
    t, fl = _top_comm(c), transfer_floor_ns(c)
    if fl is None:
        return 0
    return int(sum(max(0, int(x) - fl[0]) for x in t.get("exposed_by_step") or []))


def cpu_peers_late(c: Ctx) -> bool:
    """At least PEERS_SHARE of the exposed collective's time is waiting beyond its transfer
    (``transfer_floor_ns``): other ranks arrive late."""
    ex = int(_top_comm(c).get("exposed_ns") or 0)
    return ex > 0 and cpu_wait_beyond_ns(c) >= PEERS_SHARE * ex


def _bytes_text(b: float) -> str:
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def _ms_text(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} us"


def _cpu_comm_what(c: Ctx) -> str:
    t = _top_comm(c)
    sizes = t.get("sizes")
    what = f"{t.get('name')} ({t.get('calls_per_step', 0):g} a step"
    if sizes:
        what += ", " + " + ".join(_bytes_text(x) for x in sizes)
    if t.get("group_size"):
        what += f", {t['group_size']} ranks"
    return what + ")"


def _cpu_peers_text(c: Ctx) -> str:
    t, fl = _top_comm(c), transfer_floor_ns(c)
    by = t.get("exposed_by_step") or [0]
    return (f"{_cpu_comm_what(c)} waits {_ms_text(min(by))}-{_ms_text(max(by))} a step; its "
            f"transfer needs at most {_ms_text(fl[0])} a step ({fl[1]}), so "
            f"{_ms_text(cpu_wait_beyond_ns(c))} of its {_ms_text(t['exposed_ns'])} is waiting "
            "beyond the transfer -- other ranks arriving late (or a contended transport): "
            "analyse every rank's trace together (traceread analyze rank*.json) to find the "
            "late rank")


def _cpu_no_sync_text(c: Ctx) -> str:
    return (f"gradient accumulation with DDP's no_sync(): all_reduce once every N micro-batches "
            f"instead of every step -- {_cpu_comm_what(c)} holds the host "
            f"{_top_comm(c).get('share_pct', 0):g}% of each step (priced at N={ACCUM_N})")


def _cpu_overlap_text(c: Ctx) -> str:
    return (f"one all_reduce bucket a step starts only after the whole backward: a smaller DDP "
            f"bucket_cap_mb starts the first buckets during the backward "
            f"({_ms_text(_backward_ns(c))} a step to hide behind)")


def _cpu_buckets_text(c: Ctx) -> str:
    t = _top_comm(c)
    return (f"{_cpu_comm_what(c)}: the host waits on the later buckets "
            f"{_ms_text(int(t.get('exposed_after_first_ns') or 0))} after the longest one -- a "
            "larger DDP bucket_cap_mb sends them in fewer calls")


def has_dynamic_shapes(c: Ctx) -> bool:
    """Data-dependent shapes are known to run (``dynamic_shapes_per_step`` > 0)."""
    return float(c.get("dynamic_shapes_per_step") or 0) > 0


def _cpu_dynamic_text(c: Ctx) -> str:
    d = (c.get("blocking") or {}).get("dynamic_shapes") or {}
    what = ", ".join(f"{k} x{v:g}" for k, v in d.items()) or "data-dependent shapes"
    return (f"{what} a step: on a GPU each one is a host sync and rules out CUDA graphs -- "
            "use fixed-size routing (sort or one-hot by expert with a capacity, "
            "torch.nonzero_static, index_add / scatter with static sizes)")


def _cpu_cut_text(c: Ctx) -> str:
    n = _cpu(c).get("launches", 0)
    what = "the file is cut short and its header names a GPU" + \
        (f"; {n} kernel launches are recorded and no kernel" if n else "")
    return (f"the trace was cut before its GPU events: {what} -- record it again complete (a shorter active window: torch.profiler "
            "schedule(active=N), or a larger trace buffer) before judging the GPU side")


def _cpu_compile_text(c: Ctx) -> str:
    x = _cpu(c)
    return (f"torch.compile takes {x['compile_ns'] / 1e9:.2f} s, {100 * x['compile_share']:.0f}% "
            "of this trace: it is one-time work -- profile after warm-up; cache it across runs "
            "(TORCHINDUCTOR_FX_GRAPH_CACHE=1, torch.compiler.save_cache_artifacts) and mark the "
            "varying dimensions dynamic so it does not recompile")


def _cpu_data_text(c: Ctx) -> str:
    x = _cpu(c)
    how = ("raise num_workers / prefetch_factor, or make each sample cheaper to load"
           if workers(c) else "DataLoader(num_workers=N, persistent_workers=True) moves it "
           "to worker processes")
    return (f"the DataLoader takes {100 * x['dataloader_share']:.0f}% of the steps on the "
            f"training thread: {how}")


# -- preconditions of issue 39 (passes/preconditions.py): each reads one fact ------------

GEMV_SHARE = 0.5   # GEMV-shaped kernels' share of the FP32 GEMM time above which TF32 does not pay


def not_gemv(c: Ctx) -> bool:
    """The FP32 GEMMs are not mostly GEMV-shaped (gemmSN / gemv kernels of a tiny batch are
    memory-bound: tensor cores do not speed them); unknown: yes."""
    return float(c.get("fp32_gemv_share") or 0) < GEMV_SHARE


def compile_available(c: Ctx) -> bool:
    """torch.compile exists: torch >= 2.0 (unknown version: yes)."""
    v = _torch_version(c)
    return v is None or v >= (2, 0)


TRITON_MIN_CC = (7, 0)   # torch.compile's GPU backend (Triton) refuses older NVIDIA GPUs


def triton_device(c: Ctx) -> bool:
    """torch.compile's Triton kernels run on this GPU: NVIDIA compute capability >= 7.0
    (a Pascal or older GPU is "too old to be supported by the triton GPU compiler");
    unknown device: yes."""
    d = _device(c)
    m = re.match(r"(\d+)\.(\d+)", str(d.get("cc") or ""))
    if d.get("vendor") != "nvidia" or not m:
        return True
    return (int(m.group(1)), int(m.group(2))) >= TRITON_MIN_CC


def graphs_api_available(c: Ctx) -> bool:
    """CUDA graphs are in torch (torch.cuda.graphs, torch >= 1.10; unknown version: yes)."""
    v = _torch_version(c)
    return v is None or v >= (1, 10)


def h2d_pageable(c: Ctx) -> bool:
    """Some host->device copies come from pageable (or unmarked) memory; all pinned: pinning
    is done. Unknown: yes."""
    h = c.get("h2d_source")
    return not isinstance(h, dict) or int(h.get("pageable") or 0) + int(h.get("unknown") or 0) > 0


def dtoh_waits(c: Ctx) -> bool:
    """The host waits for device->host copies (a result read back); only HtoD copies waited
    for: a read-back remedy does not apply. Unknown: yes."""
    d = c.get("sync_copy_directions")
    return not isinstance(d, dict) or set(d) != {"HtoD"}


def pageable_read_waits(c: Ctx) -> bool:
    """The host waited in a device->host copy into pageable memory (``pageable_reads``: its
    call returned as the copy ended); unknown: no -- the fact names the copy that proves it."""
    p = c.get("pageable_reads")
    return isinstance(p, dict) and int(p.get("waited") or 0) > 0


def reads_not_all_pageable(c: Ctx) -> bool:
    """Some device->host copy the host waited for is not a pageable read-back that waited by
    itself (an .item()'s copy and its synchronize): those are the pinned-read lever's.
    Unknown: yes."""
    d, p = c.get("sync_copy_directions"), c.get("pageable_reads")
    if not isinstance(d, dict) or not isinstance(p, dict):
        return True
    return int(d.get("DtoH") or 0) > int(p.get("waited") or 0)


def graphs_launched(c: Ctx) -> bool:
    """CUDA graph launches are seen in the window (``graph_launches`` > 0; unknown: yes)."""
    n = c.get("graph_launches")
    return n is None or int(n) > 0


def steady_window(c: Ctx) -> bool:
    """The window is not an engine's start-up (``startup_phase``: vLLM / SGLang model-runner
    set-up frames), whose graph captures and allocations happen once."""
    return not c.get("startup_phase")


def engine_startup(c: Ctx) -> bool:
    """The window is an engine's start-up: model-runner set-up and graph-capture frames."""
    return not steady_window(c)


def compiled_called_often(c: Ctx) -> bool:
    """A compiled graph is called more than once per step (``compiled_calls_per_step``), per
    forward pass of the model where the step runs several (``anatomy.passes``: a diffusion
    request's denoising steps, a decode loop's tokens each call the compiled model once); once
    per forward: calling it fewer times is not possible. Unknown: yes."""
    cc = c.get("compiled_calls_per_step")
    if not isinstance(cc, dict):
        return True
    calls = float(cc.get("max") or 0)
    if calls <= 1.0:   # (the anatomy read only where it decides: the refusal cites what did)
        return False
    forwards = float(((c.get("anatomy") or {}).get("passes") or {}).get("forward_per_step") or 0)
    return calls > max(1.0, forwards)


def compiled_called_once(c: Ctx) -> bool:
    """Every compiled graph is called at most once per step (per forward pass of the model)."""
    return not compiled_called_often(c)


def host_movable(c: Ctx) -> bool:
    """The host work outside the model is neither the framework's own (optimizer step,
    module-call wrappers, autograd engine, a serving engine's loop) nor the job's own
    arithmetic on the host: those cannot move to a worker. Unknown: yes."""
    hw = c.get("host_work_kind")
    return not (isinstance(hw, dict) and hw.get("other_kind") in ("framework", "compute"))


def step_head_waits(c: Ctx) -> bool:
    """Each step's launching thread spends a share of the step in OS calls before its first
    launch while the GPU idles (``step_head_wait``: nsys OS-runtime calls)."""
    return bool(c.get("step_head_wait"))


def no_dataloader_names(c: Ctx) -> bool:
    """The trace names no DataLoader iterator: its wait is not already the data cause's."""
    return not c.get("dataloader_single") and not c.get("dataloader_workers")


def _head_text(c: Ctx) -> str:
    h = c["step_head_wait"]
    names = list(h.get("calls") or [])
    calls = ", ".join(names) or "OS calls"
    head = (f"each step waits {h['per_step_ns'] / 1e6:.1f} ms ({100 * h['share']:.0f}% of the "
            f"step) on the training thread before its first launch, in {calls}, while the GPU "
            "idles")
    from ..passes.replay import SLEEP_CALL_RX   # the replay's sleeps, the same calls

    if names and all(SLEEP_CALL_RX.match(x) for x in names):
        # a sleep is what the thread did, not proof of input loading (gpu/ddp2's planted
        # 30 ms clock_nanosleep read "the step's input is fetched there")
        return (head + ": the thread sleeps -- a delay the program chose (time.sleep, a rate "
                "limit, a polling loop): remove it; if it stands for fetching the input, "
                "DataLoader(num_workers=N, pin_memory=True) fetches it in worker processes "
                "while the GPU runs the previous step")
    return (head + ": the step's input is fetched there (a DataLoader with num_workers=0 runs "
            "on the training thread) -- DataLoader(num_workers=N, pin_memory=True) fetches it "
            "in worker processes while the GPU runs the previous step")


def _startup_text(c: Ctx) -> str:
    st = c.get("startup_phase") or {}
    frame = (st.get("frames") or ["the model runner's set-up"])[0]
    if WARMUP_WORD_RX.search(frame):   # the program's own warm-up function
        return (f"this window is the program's warm-up ({frame}): its CUDA graph captures and "
                "compiles run once per process, not every step -- profile the steps after it "
                "to judge per-step cost; to start faster, capture fewer shapes")
    return (f"this window is the serving engine's start-up ({frame}): its CUDA graph captures "
            "and allocations run once per server start, not every step -- profile the serving "
            "steps (prefill / decode) to judge per-step cost; to start faster, capture fewer "
            "batch sizes (vLLM cudagraph_capture_sizes, SGLang --cuda-graph-max-bs)")


WARMUP_WORD_RX = re.compile(r"warm_?up", re.I)


def _all(*ps: Pred) -> tuple:
    return tuple(ps)


# -- the table ---------------------------------------------------------------------------

# -- the saving models: what a lever saves where no replay prices it -------------------

def _save_cause(lv, cause_ns, parts, copy, ctx):
    return int(cause_ns)


def _host_alloc(lv, parts) -> int:
    return int(parts.get("alloc", 0)) if lv.cause == "host" else 0


def _save_alloc(lv, cause_ns, parts, copy, ctx):
    # allocator calls in short gaps too (charged to launch there): the churn goes whole
    every = max(_host_alloc(lv, parts), int(ctx.get("alloc_gap_ns") or 0))
    return min(every, int(cause_ns) + int(ctx.get("launch_ns") or 0))


def _save_host_rest(lv, cause_ns, parts, copy, ctx):
    return max(0, int(cause_ns) - _host_alloc(lv, parts))


def _save_pin(lv, cause_ns, parts, copy, ctx):
    # the copies' time beyond pinned bandwidth, and their calls' staging time in the gaps:
    # a pinned copy's call returns once queued
    pin = int(copy.get("pin_saves_ns", 0)) if copy.get("pageable_ns") else 0
    return pin + int((parts or {}).get("copy_staging", 0) or 0)


def _save_busy(lv, cause_ns, parts, copy, ctx):
    """busy.py's saving, at most its share of the GPU work on the critical path: kernels
    made faster shorten the step only where the program waits on them (a host that launches
    each just in time keeps pacing the loop)."""
    b = (ctx.get("busy_levers") or {}).get(lv.busy)
    if not b:
        return 0
    ns = int(b.get("saving_ns", 0))
    share, busy = ctx.get("gpu_path_share"), int((ctx.get("busy") or {}).get("busy_ns") or 0)
    window = int(ctx.get("window_ns") or 0)
    if share is None or not busy or not window:
        return ns
    return int(ns * min(1.0, share * window / busy))


def _save_queued(lv, cause_ns, parts, copy, ctx):
    by = queued_by_kind(ctx.get("queued_on"))
    return min(int(cause_ns), by[lv.waits]) if by else int(cause_ns)


def _save_pp_bubble(lv, cause_ns, parts, copy, ctx):
    p, m, b = int(ctx["pp_stages"]), int(ctx["pp_microbatches"]), float(ctx["pp_bubble_pct"])
    v = int(ctx.get("pp_virtual") or 1)
    cut = min(b, pp_theory_pct(p, m, v)) - pp_theory_pct(p, 2 * m, v)
    theory = int(int(ctx.get("pp_step_ns") or 0) * max(0.0, cut) / 100)
    others = ctx.get("pp_others_compute_ns")
    if others is None:   # one rank alone: the other stages' work is unknown
        return theory
    # the slowest stage idles at the fill and drain for the other stages' work over v m;
    # 2m halves it. Balanced stages: the theory's figure; one slow stage: far less
    # (pp_gpipe3_slow1: 21.9 ms a step by the theory, 5 ms by the stages' work)
    return min(theory, int(int(others) / (2 * v * m)))


def _save_fsdp_hide(lv, cause_ns, parts, copy, ctx):
    ex, free = ctx.get("fsdp_all_gather_exposed_ns"), ctx.get("fsdp_free_compute_ns")
    if ex is None or free is None:   # not measured: the comms cause, as before
        return int(cause_ns)
    return min(int(ex), int(free), int(cause_ns))


def _save_tp_hide(lv, cause_ns, parts, copy, ctx):
    return min(int(ctx.get("tp_exposed_ns") or 0), int(ctx.get("tp_compute_ns") or 0),
               int(cause_ns))


def _save_ep_share(lv, cause_ns, parts, copy, ctx):
    x, t = ctx.get("ep_imbalance"), ctx.get("ep_a2a_ns")
    return None if not x or t is None else int(int(t) * (1 - 1 / float(x)))


def _save_pp_excess(lv, cause_ns, parts, copy, ctx):
    return int(ctx.get("pp_excess_busy_ns") or 0)


def _save_offload(lv, cause_ns, parts, copy, ctx):
    o = ctx.get("optimizer_offload") or {}
    n = window_total(int(o.get("ns_per_step") or 0), ctx, traced=True)
    return min(n, int(ctx.get("lost_ns") or n))


def _save_stall(lv, cause_ns, parts, copy, ctx):
    st = ctx.get("periodic_stall") or {}
    return int(st.get("excess_ns_per_stall") or 0) * len(st.get("stalled_steps") or [])


def _save_buffers(lv, cause_ns, parts, copy, ctx):
    per_step = int(ctx.get("ddp_buffer_broadcast_ns") or 0)   # per step (context.steps_seen)
    return min(window_total(per_step, ctx, traced=True), int(ctx.get("lost_ns") or 0))


def _save_step_head(lv, cause_ns, parts, copy, ctx):
    h = ctx.get("step_head_wait") or {}
    n = int(h.get("per_step_ns") or 0) * int(h.get("steps") or 0)   # the steps that show it
    lost = ctx.get("lost_ns")
    return n if lost is None else min(n, int(lost))


def _save_none(lv, cause_ns, parts, copy, ctx):
    return None


def _save_cpu_late(lv, cause_ns, parts, copy, ctx):
    return cpu_wait_beyond_ns(ctx)


def _cpu_transfer_ns(ctx) -> int:
    """The top collective's exposed time less its waits beyond the transfer."""
    return max(0, int(_top_comm(ctx).get("exposed_ns") or 0) - cpu_wait_beyond_ns(ctx))


def _save_cpu_accumulate(lv, cause_ns, parts, copy, ctx):
    return int(_cpu_transfer_ns(ctx) * (1 - 1 / ACCUM_N))


def _save_cpu_overlap(lv, cause_ns, parts, copy, ctx):
    steps = int(_cc(ctx).get("steps") or 0)
    return min(_cpu_transfer_ns(ctx), _backward_ns(ctx) * steps)


def _save_cpu_buckets(lv, cause_ns, parts, copy, ctx):
    return int(_top_comm(ctx).get("exposed_after_first_ns") or 0)


SAVING_MODELS: dict[str, SavingModel] = {m.id: m for m in (
    SavingModel("cause", "the cause's whole score", _save_cause, True,
                "an upper bound: the GPU's own work unchanged"),
    SavingModel("alloc", "the allocator calls' time in every gap (alloc_gap_ns: the host "
                "cause's long gaps and the short ones charged to launch), capped at host + "
                "launch scores", _save_alloc, True, "every allocator call in the steps goes"),
    SavingModel("host_rest", "the host cause's score less its allocator time", _save_host_rest,
                True, "the host work leaves the step path whole"),
    SavingModel("pin", "the pageable copies' time beyond pinned bandwidth "
                "(copies.pin_saves_ns) plus their calls' staging time in the gaps "
                "(cause_ns.copy_staging)", _save_pin, True,
                "pinned copies reach the measured pinned bandwidth"),
    SavingModel("busy", "the busy-time lever's saving_ns from passes/busy.py (its own "
                "documented model), at most its share of the GPU work on the replay's critical "
                "path (gpu_path_share x window / busy; none where the profiler's cost is "
                "material or the GPU's ops mostly waited queued)", _save_busy, False,
                "the kernels keep their fraction of the new precision's peak"),
    SavingModel("buffers", "DDP's buffer broadcast time (ddp_buffer_broadcast_ns per step x "
                "steps_seen), capped at the lost time", _save_buffers, False,
                "the broadcast is exposed"),
    SavingModel("queued", "the queued time whose waited_on evidence is this lever's kind "
                "(queued_on: an event wait or another stream's op, GPU-side front-end "
                "latency, or nothing traced, or inside a graph replay), capped at the queued score",
                _save_queued, True, "the wait goes whole"),
    SavingModel("pp_bubble", "the pipeline step time (pp_step_ns) x (min(measured bubble, "
                "theory at m) - theory at 2m): only the schedule's part of the bubble shrinks; a "
                "job: capped at the other stages' work / (2 v m) (pp_others_compute_ns), the "
                "fill and drain 2m takes off the slowest stage",
                _save_pp_bubble, False, "balanced stages"),
    SavingModel("pp_excess", "the slowest stage's busy time above the stages' mean "
                "(pp_excess_busy_ns)", _save_pp_excess, False, "layers move freely"),
    SavingModel("fsdp_hide", "the exposed all_gather time (fsdp_all_gather_exposed_ns) capped "
                "at the compute no data-moving comm overlaps (fsdp_free_compute_ns) -- "
                "prefetch can hide a gather only behind compute -- and at the comms score; "
                "not measured: the comms score", _save_fsdp_hide, True,
                "a prefetched gather hides wholly behind free compute"),
    SavingModel("tp_hide", "the TP all_reduces' exposed time (tp_exposed_ns) capped at the "
                "layers' compute (tp_compute_ns: what an overlapped all_reduce can hide "
                "behind) and at the comms score", _save_tp_hide, True,
                "an overlapped all_reduce hides wholly"),
    SavingModel("ep_share", "the all_to_all time (ep_a2a_ns) x (1 - 1/imbalance): balanced, "
                "every rank moves the mean bytes instead of the hot rank's max",
                _save_ep_share, False, "an upper bound (all of the time bandwidth-bound)"),
    SavingModel("offload", "the offloaded optimizer's span per step (first gradient copy out "
                "to last parameter copy back: optimizer_offload.ns_per_step) x steps, capped "
                "at the lost time", _save_offload, False,
                "on the GPU the optimizer takes a few ms"),
    SavingModel("stall", "the stall's excess over the median step "
                "(periodic_stall.excess_ns_per_stall) x the stalls traced", _save_stall, False,
                "priced per period: the steady window leaves them out"),
    SavingModel("step_head", "the OS-call time before each step's first launch while the GPU "
                "idles (step_head_wait.per_step_ns, the median) x the steps that show it, "
                "capped at the lost time", _save_step_head, False,
                "workers fetch the input while the GPU runs: the whole wait goes"),
    SavingModel("cpu_late", "a CPU job's exposed collective time beyond its transfer floor "
                "(the fastest step's wait, or a slow network's cost of its recorded bytes: "
                "CPU_HOP_NS a ring step, CPU_LINK_GBPS), over the steps", _save_cpu_late, False,
                "a bound: every rank arrives on time and the transfer runs at its floor"),
    SavingModel("cpu_accumulate", "(1 - 1/ACCUM_N) of a CPU job's exposed all_reduce time "
                "less its late-rank waits (cpu_late): all_reduce once every ACCUM_N "
                "micro-batches", _save_cpu_accumulate, False,
                "a bound: the transfer's cost is per call; a late rank's wait stays"),
    SavingModel("cpu_overlap", "a CPU job's exposed all_reduce time less its late-rank waits, "
                "capped at the backward's host time (what a bucket started during the "
                "backward can hide behind)", _save_cpu_overlap, False,
                "a bound: the buckets hide wholly behind the backward"),
    SavingModel("cpu_buckets", "the exposed time of a CPU job's all_reduce calls a step but the "
                "longest one (exposed_after_first_ns)", _save_cpu_buckets, False,
                "a bound: one larger bucket's call waits no longer than the longest did"),
    SavingModel("none", "no estimate: offered after the levers with one", _save_none, False,
                "advice without a measured saving"),
)}

# the saving-model docs by id (the anatomy helper's models join them: ANATOMY_SAVINGS)
SAVINGS = {k: f"{m.doc} ({m.assumptions})" if m.assumptions else m.doc
           for k, m in SAVING_MODELS.items()}
# saving models priced from a cause's score: such a lever needs its cause worth fixing
CAUSE_PRICED = tuple(k for k, m in SAVING_MODELS.items() if m.cause_priced)

GRAPHS_NOT_REPLAYED = ("keep input shapes fixed (pad or bucket them) so the CUDA graphs are "
                       "replayed: they are set up (reduce-overhead / cudagraphify) but none was "
                       "replayed in the analysed steps")
DATALOADER_PIN = ("DataLoader(pin_memory=True) and .to(device, non_blocking=True) for the batch "
                  "copy")
SHAPES_STABLE = "keep shapes stable (pad or bucket) so the caching allocator can reuse blocks"
TF32_TEXT = ("enable TF32: torch.backends.cuda.matmul.allow_tf32 = True "
             "(torch.set_float32_matmul_precision('high'))")
BF16_TEXT = "bf16/fp16 autocast (torch.autocast) for matmul- and conv-heavy models"
FP16_TEXT = ("fp16 autocast (torch.autocast(dtype=torch.float16)) with a GradScaler: "
             "this GPU has no fast bf16")
SDPA_TEXT = "fused attention: F.scaled_dot_product_attention (flash / memory-efficient kernels)"

PT, NV = pytorch, native


def _front_end_text(c: Ctx) -> str:
    """mostly GPU-side gaps between back-to-back kernels: fewer, larger kernels (torch.compile
    fusion) or CUDA graphs cut the per-kernel front-end latency -- each remedy named only
    where the trace's torch, GPU and program leave it open (worded from the facts)"""
    head = "mostly GPU-side gaps between back-to-back kernels: "
    tail = " cut the per-kernel front-end latency"
    if native(c):
        graphs = "more of the loop inside its CUDA graphs" if uses_graphs(c) else "CUDA graphs"
        return f"{head}fewer, larger kernels (fused by hand) or {graphs}{tail}"
    if not not_compiled(c):
        fuse = "fewer graph breaks, so torch.compile fuses more of the step"
    elif compile_available(c) and triton_device(c):
        fuse = "torch.compile fusion"
    else:   # no torch.compile on this torch / GPU: fused ops by hand, more work per kernel
        fuse = "fused layers, torch._foreach_* ops, a larger batch"
    if uses_graphs(c):
        graphs = "more of the step inside its CUDA graphs"
    elif graphs_api_available(c):
        graphs = "CUDA graphs"
    else:
        return f"{head}fewer, larger kernels ({fuse}){tail}"
    return f"{head}fewer, larger kernels ({fuse}) or {graphs}{tail}"


def _cuda_graphs_text(c: Ctx) -> str:
    """capture the step with CUDA graphs: torch.compile(mode="reduce-overhead") or
    torch.cuda.graphs (torch.cuda.graphs alone where torch.compile cannot run)"""
    how = "torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs" if \
        compile_available(c) and triton_device(c) else \
        "torch.cuda.graphs (torch.cuda.make_graphed_callables)"
    return f"capture the step with CUDA graphs: {how}"


def _graphs_host_text(c: Ctx) -> str:
    """capture the step with CUDA graphs so the GPU runs ahead of the host:
    torch.compile(mode="reduce-overhead") (torch.cuda.graphs where torch.compile cannot run)"""
    how = "torch.compile(mode=\"reduce-overhead\")" if compile_available(c) and \
        triton_device(c) else "torch.cuda.graphs (torch.cuda.make_graphed_callables)"
    return f"capture the step with CUDA graphs so the GPU runs ahead of the host: {how}"


def _unknown_directions(c: Ctx) -> set:
    """The directions (HtoD / DtoH) of the copies whose payload is unknown that take at least
    a fifth of those copies' time (``copy_payloads``); none recorded: HtoD, as before."""
    rows = [r for r in c.get("copy_payloads") or [] if isinstance(r, dict)
            and r.get("payload") == "unknown"]
    total = sum(int(r.get("copy_ns") or 0) for r in rows)
    out = {r.get("direction") for r in rows if total and int(r.get("copy_ns") or 0) >= 0.2 * total}
    return (out & {"HtoD", "DtoH"}) or {"HtoD"}


def _copy_unknown_text(c: Ctx) -> str:
    """the trace cannot tell what these copies carry (no input batch, re-sent tensor or
    optimizer state recognised around them): fresh data -- copy it non_blocking from pinned
    memory on a side stream, ahead of use; data that does not change -- keep it on the GPU;
    results read back (device->host) -- into pinned memory, read a step later; record
    with_stack=True to see where they come from (each remedy for the directions the copies
    take)"""
    dirs = _unknown_directions(c)
    parts = []
    if "HtoD" in dirs:
        parts.append("fresh data -- copy it non_blocking from pinned memory on a side stream, "
                     "ahead of use; data that does not change -- keep it on the GPU")
    if "DtoH" in dirs:
        parts.append("results read back (device->host) -- copy them non_blocking into pinned "
                     "memory and read them a step later, or keep them on the GPU")
    return ("the trace cannot tell what these copies carry (no input batch, re-sent tensor or "
            "optimizer state recognised around them): " + "; ".join(parts)
            + "; record with_stack=True to see where they come from")


def _copy_unknown_native_text(c: Ctx) -> str:
    """the trace cannot tell what these copies carry: overlap fresh data with compute (pinned
    memory, cudaMemcpyAsync on a second stream) and keep data that does not change on the
    GPU between iterations; read results back into pinned memory asynchronously (each
    remedy for the directions the copies take). Copies that are async and pinned already
    (``copies_async``) are told the one overlap left: chunks over two streams."""
    dirs = _unknown_directions(c)
    if copies_async(c):
        keep = ("keep data that does not change on the GPU between iterations; "
                if "HtoD" in dirs else "")
        return ("the trace cannot tell what these copies carry, and they run as "
                f"cudaMemcpyAsync with pinned host memory already: {keep}what is fresh each "
                "time overlaps compute only in chunks over two or more streams")
    parts = []
    if "HtoD" in dirs:
        parts.append("overlap fresh data with compute (pinned memory, cudaMemcpyAsync on a "
                     "second stream) and keep data that does not change on the GPU between "
                     "iterations")
    if "DtoH" in dirs:
        parts.append("read results back with cudaMemcpyAsync into pinned memory, waiting on an "
                     "event only where they are used")
    return "the trace cannot tell what these copies carry: " + "; ".join(parts)


def _gpu_tracer(c: Ctx) -> str:
    """How to record the GPU side: torch.profiler's CUDA activities only for a PyTorch
    program (the sagemaker-debugger TensorFlow trace, no aten op or torch frame in it, was
    told "ProfilerActivity.CUDA (torch.profiler)")."""
    if pytorch(c):
        return "ProfilerActivity.CUDA (torch.profiler) or nsys --trace=cuda"
    return "nsys profile --trace=cuda (or your framework's profiler with its GPU activities on)"


def copies_async(c: Ctx) -> bool:
    """Every copy already runs as the async remedy has it: none that the host waited for
    (``sync_copy_directions`` known and empty: no synchronous memcpy call, no synchronize
    right after one, no pageable staging) and every host->device copy from pinned memory
    (``h2d_source``). Unknown: no."""
    h = c.get("h2d_source")
    pinned = isinstance(h, dict) and int(h.get("pageable") or 0) + int(h.get("unknown") or 0) == 0
    return c.get("sync_copy_directions") == {} and pinned


def _async_copy_native_text(c: Ctx) -> str:
    """cudaMemcpyAsync on a second stream -- or, where the copies are async and pinned
    already (extra-p's con_kernel: each 38 MiB copy a cudaMemcpyAsync from cudaHostAlloc
    memory on its kernel's own stream, exposed only because that kernel needs all of it),
    the pipeline that still hides them: chunks over two streams."""
    if copies_async(c):
        return ("the copies already run as cudaMemcpyAsync from pinned memory; what stays "
                "exposed waits for the kernel that needs the data (or produces it): split the "
                "transfer and that kernel into chunks over two or more streams, so one chunk's "
                "copy overlaps the kernel on the chunk before")
    return "cudaMemcpyAsync on a second stream so the copy overlaps compute"


def _vendor(c: Ctx) -> str | None:
    """The GPU's vendor the trace records (``device.vendor``: deviceProperties' name or warp
    size, an nsys export's GPU); None: unknown."""
    v = _device(c).get("vendor")
    return v if v in ("nvidia", "amd") else None


def _storage_text(c: Ctx) -> str:
    """faster storage / decoding: local SSD, pre-decoded or packed datasets, GPU decoding
    (DALI on NVIDIA, rocAL on AMD: named for the trace's GPU)"""
    dec = {"nvidia": "GPU decoding (DALI)", "amd": "GPU decoding (rocAL)"}.get(
        _vendor(c), "GPU decoding (DALI on NVIDIA, rocAL on AMD)")
    return f"faster storage / decoding: local SSD, pre-decoded or packed datasets, {dec}"


def _interconnect_text(c: Ctx) -> str:
    """check the interconnect: topology, NVLink/IB placement of the ranks (xGMI on AMD: named
    for the trace's GPU)"""
    link = {"nvidia": "NVLink/IB", "amd": "xGMI (Infinity Fabric)/IB"}.get(
        _vendor(c), "NVLink or xGMI / IB")
    return f"check the interconnect: topology, {link} placement of the ranks"


def _stream_waits_text(c: Ctx) -> str:
    """check the cross-stream waits (cudaStreamWaitEvent / event records) that hold the
    queued kernels: record the event earlier, or run the waited-on stream's work (copies,
    collectives) earlier (hipStreamWaitEvent on AMD)"""
    call = "hipStreamWaitEvent" if _vendor(c) == "amd" else "cudaStreamWaitEvent"
    text = (f"check the cross-stream waits ({call} / event records) that hold the queued "
            "kernels: record the event earlier, or run the waited-on stream's work (copies, "
            "collectives) earlier")
    if _waited_work_untraced(c.get("queued_on")):
        text += ("; the work they waited on is not in this trace (it started before the "
                 "recording, or ran on a stream or process the profiler did not record): "
                 "record the whole device to see it -- the GPU may have been busy with it, not "
                 "idle")
    return text


def _waited_work_untraced(waited: dict | None) -> bool:
    """Most of the event-held queued time waits on an event whose producer is not in the
    trace (attribution's ``waited_on`` is the bare wait call's name, not ``stream P: op``):
    TraceLens' sglang prefill+decode held its first kernel 493 ms on a hipStreamWaitEvent,
    the device running nothing traced -- the previous batch's forward, launched before the
    recording began, takes as long as the traced one."""
    event = {t: ns for t, ns in (waited or {}).items()
             if t != "GPU-side" and not t.startswith(("nothing", "inside"))}
    bare = sum(ns for t, ns in event.items() if not t.startswith("stream "))
    return bare > 0 and bare >= 0.5 * sum(event.values())


def _node_trace(c: Ctx) -> str:
    """The profiler that records each CUDA graph node: nsys on NVIDIA, rocprofv3's kernel
    trace on AMD (nsys does not run there)."""
    return "rocprofv3 --kernel-trace" if _vendor(c) == "amd" else "nsys --cuda-graph-trace=node"


def _queued_in_graphs_text(c: Ctx) -> str:
    """the GPU idles with work queued inside the program's own CUDA graph replays: trace the
    graphs' nodes (nsys --cuda-graph-trace=node; rocprofv3 --kernel-trace on AMD) to see
    which node waits, and what it waits for"""
    return ("the GPU idles with work queued inside the program's own CUDA graph replays: trace "
            f"the graphs' nodes ({_node_trace(c)}) to see which node waits, and what it waits for")


def _queued_untraced_text(c: Ctx) -> str:
    """the GPU idles with work queued and nothing traced explains it: record the whole device
    (nsys profile without a process filter, --cuda-graph-trace=node; rocprofv3 on AMD) to
    see the GPU work this trace did not record"""
    how = ("rocprofv3 --kernel-trace --memory-copy-trace on every process that uses the GPU"
           if _vendor(c) == "amd" else
           "nsys profile without a process filter, --cuda-graph-trace=node")
    return ("the GPU idles with work queued and nothing traced explains it: record the whole "
            f"device ({how}) to see the GPU work this trace did not record")


def _batch_words(c: Ctx) -> str:
    """larger micro-batch: more work per kernel for the same launch cost (a CPU program's: per
    op for the same dispatch cost)."""
    if c.get("gpu_ops", 1) == 0:   # no kernels to launch: a larger batch spreads each op's dispatch
        return "larger micro-batch: more work per op for the same per-op dispatch cost"
    return "larger micro-batch: more work per kernel for the same launch cost"

LEVERS: tuple[Lever, ...] = (
    # data
    Lever("num_workers", "data", "DataLoader(num_workers=N): load batches in worker processes, "
          "off the training thread", "free", when=_all(PT, no_workers), group="workers"),
    Lever("more_workers", "data", "the DataLoader already uses worker processes and they "
          "cannot keep up: raise num_workers (and prefetch_factor), or make each sample cheaper "
          "to load", "free", when=_all(PT, workers), group="workers"),
    # pinning speeds the batch's copy, not its loading: priced as the pinned copies, and
    # one item with pin_copy (the same change named for the batch)
    Lever("pin_batch", "data", DATALOADER_PIN, "free", saves="pin", when=_all(PT, h2d_pageable),
          group="pin_copy"),
    # raising prefetch_factor is in more_workers' words: the workers' loading is not in the
    # trace, so nothing tells a slow worker pool from a bursty one
    Lever("persistent_workers", "data", _persistent_text, "free",
          when=_all(PT, workers, worker_restarts),
          doc=LeverDoc(what="the DataLoader's worker processes are shut down at each epoch's "
                       "end and started again: DataLoader(persistent_workers=True) keeps them",
                       example="tests/fixtures/cpu/workers_restart.json.gz (CPU torch 2.13, "
                       "2 workers, 4 steps an epoch: 33 ms a restart)")),
    Lever("storage", "data", _storage_text, "infra"),
    Lever("input_on_main_thread", "data", _head_text, "free", saves="step_head",
          when=_all(PT, step_head_waits, no_dataloader_names), first=True,
          doc=LeverDoc(what="the step's input is fetched on the training thread before its "
                       "first launch: DataLoader(num_workers=N) fetches it in workers",
                       example="our H100 nsys recording gpu/data.bad.sqlite (num_workers=0, "
                       "16 x 1 ms samples: 17.1 ms a step, ~20 ms planted)")),
    # copy
    Lever("pin_copy", "copy", "pin the host tensor (tensor.pin_memory() once, or "
          "DataLoader(pin_memory=True)) and copy with .to(device, non_blocking=True)", "free",
          saves="pin", when=_all(PT, h2d_pageable), group="pin_copy"),
    Lever("keep_on_gpu", "copy", "keep the data on the GPU: do not re-send the same tensor "
          "every step", "code", when=_all(PT, resent_copies)),
    Lever("side_stream_copy", "copy", "prefetch the next batch on a side stream so the copy "
          "overlaps compute", "code", when=_all(PT, input_batch_copies)),
    Lever("optimizer_on_gpu", "copy", _offload_text, "code", saves="offload",
          when=_all(PT, optimizer_offloaded), first=True),
    Lever("copy_unknown", "copy", _copy_unknown_text, "code", when=_all(PT, unknown_copies)),
    Lever("pin_copy_native", "copy", "pinned host memory (cudaHostAlloc / cudaHostRegister) for "
          "the host<->device copies", "free", saves="pin", when=_all(NV)),
    Lever("keep_on_gpu_native", "copy", "keep the data on the GPU between iterations", "code",
          when=_all(NV, resent_copies)),
    Lever("async_copy_native", "copy", lambda c: _async_copy_native_text(c), "code",
          when=_all(NV)),
    Lever("copy_unknown_native", "copy", _copy_unknown_native_text, "code",
          when=_all(NV, unknown_copies)),
    # sync
    Lever("per_param_item", "sync", "remove the per-parameter syncs (an .item()/.cpu() for every "
          "parameter each step): compute the norms/checks on the GPU in one op "
          "(torch._foreach_norm, torch.stack) and read one value -- CUDA graphs cannot capture "
          "a sync", "code", when=_all(PT, per_param_syncs), first=True),
    Lever("remove_syncs", "sync", _syncs_text, "code",
          when=_all(PT, explicit_syncs, steady_window),
          doc=LeverDoc(what=REMOVE_SYNCS)),
    Lever("no_dynamic_shapes", "sync", "avoid data-dependent shapes that force a sync "
          "(torch.nonzero, boolean masks, tensor-valued Python conditions)", "code",
          when=_all(PT, dynamic_shapes)),
    Lever("pin_read", "sync", "read results back into pinned memory: a host tensor allocated "
          "once with pin_memory=True, .copy_(x, non_blocking=True), read after an event a step "
          "later -- a copy into pageable memory waits for the GPU's whole queue, non_blocking or "
          "not", "code", when=_all(PT, pageable_read_waits),
          doc=LeverDoc(what="a device->host copy into pageable memory holds its call until the "
                       "queue before it drains (CUDA stages it through a bounce buffer): a "
                       "pinned buffer makes the copy asynchronous",
                       example="our H200 recording h200/pageable.bad (the loss copied to a "
                       "pageable tensor with non_blocking=True every step)")),
    Lever("late_read", "sync", "copy results with .to('cpu', non_blocking=True) into pinned "
          "memory and read them one step later", "code",
          when=_all(PT, dtoh_waits, reads_not_all_pageable, deferrable_reads, steady_window)),
    Lever("remove_syncs_native", "sync", "remove blocking syncs from the loop "
          "(cudaDeviceSynchronize, cudaStreamSynchronize, synchronous cudaMemcpy): wait on an "
          "event only where the result is needed", "code", when=_all(NV)),
    Lever("pin_read_native", "sync", "read results into pinned host memory (cudaMallocHost / "
          "cudaHostRegister): cudaMemcpyAsync then returns at once; wait on an event where the "
          "result is read, one iteration later -- a copy into pageable memory waits for the "
          "whole queue", "code", when=_all(NV, pageable_read_waits)),
    Lever("late_read_native", "sync", "cudaMemcpyAsync into pinned memory and read the result "
          "one iteration later", "code", when=_all(NV, dtoh_waits, reads_not_all_pageable)),
    # launch
    Lever("graphs_not_replayed", "launch", GRAPHS_NOT_REPLAYED, "code",
          when=_all(PT, graphs_not_replayed, steady_window), first=True,
          group="graphs_not_replayed"),
    Lever("cuda_graphs", "launch", _cuda_graphs_text, "code",
          when=_all(PT, no_graphs, capturable, graphs_api_available), after=("per_param_item",),
          group="cuda_graphs"),
    Lever("compile_fuse", "launch", "torch.compile to fuse small elementwise kernels (fewer "
          "launches)", "code", when=_all(PT, no_graphs, not_compiled, compile_available,
                    triton_device),
          group="compile"),
    Lever("larger_batch", "launch", _batch_words, "code", when=_all(PT, training, steady_window)),
    Lever("fused_optimizer", "launch", "fused optimizers (foreach=True / fused=True) and fused "
          "layers", "free", when=_all(PT, optimizer_unfused, fused_available)),
    Lever("foreach_optimizer", "launch", "multi-tensor optimizers (torch.optim._multi_tensor / "
          "foreach=True): fused=True needs torch >= 2.0", "free",
          when=_all(PT, optimizer_unfused, old_torch)),
    Lever("foreach_to_fused", "launch", "the optimizer runs foreach: fused=True launches one "
          "kernel for all parameters", "free", when=_all(PT, optimizer_foreach,
                                                          fused_available)),
    Lever("graph_coverage", "launch", "the step already replays CUDA graphs: bring the parts "
          "still launched eagerly into the graph (graph breaks, optimizer, loss/metrics code)",
          "code", when=_all(PT, uses_graphs, graphs_replayed, training, steady_window),
          first=True,
          group="graph_coverage"),
    Lever("graph_coverage_inference", "launch", "the step already replays CUDA graphs: bring "
          "the parts still launched eagerly into the graph (graph breaks, sampling, pre- and "
          "post-processing)", "code",
          when=_all(PT, uses_graphs, graphs_replayed, inference, steady_window),
          first=True, group="graph_coverage"),
    Lever("compile_fuse_rest", "launch", "torch.compile to fuse the remaining small elementwise "
          "kernels", "code",
          when=_all(PT, uses_graphs, graphs_replayed, not_compiled, compile_available,
                    triton_device),
          group="compile"),
    Lever("cuda_graphs_native", "launch", "CUDA graphs: capture the loop body once "
          "(cudaStreamBeginCapture, cudaGraphLaunch)", "code", when=_all(NV, no_graphs, capturable),
          group="cuda_graphs"),
    Lever("graph_coverage_native", "launch", "the program already launches CUDA graphs: bring "
          "the kernels still launched one by one into them", "code",
          when=_all(NV, uses_graphs, graphs_launched),
          first=True),
    Lever("fuse_native", "launch", "fuse small kernels: more work per launch", "code",
          when=_all(NV), group="fuse_native"),
    # host (less its allocator time, which the alloc levers save)
    Lever("graphs_not_replayed_host", "host", GRAPHS_NOT_REPLAYED, "code", saves="host_rest",
          when=_all(PT, graphs_not_replayed, steady_window), first=True,
          group="graphs_not_replayed"),
    Lever("off_step_path", "host", "move the host work off the step path: precompute, cache, "
          "or do it in DataLoader workers / a background thread", "code", saves="host_rest",
          when=_all(PT, not_host_dispatch, host_off_model, not_offloaded, host_not_stall,
                    not_compiled_call, host_movable)),
    Lever("compiled_call", "host", "the host time is torch.compile's own per-call work (the "
          "compiled graph's call, guards, CUDA graph tree bookkeeping), not your code: call the "
          "compiled function fewer times -- compile the whole step (or a larger module) instead "
          "of many small ones, avoid graph breaks that split it, keep guards stable", "code",
          saves="host_rest", when=_all(PT, compiled_call, compiled_called_often), first=True),
    Lever("compiled_call_once", "host", "the host time is torch.compile's own per-call work and "
          "each compiled graph already runs once per step (or per forward pass): what is left "
          "is its guards, wrapper "
          "and launches -- mode=\"reduce-overhead\" (CUDA graphs) takes the launches off the "
          "host; keep the guards few and stable", "code", saves="host_rest",
          when=_all(PT, compiled_call, compiled_called_once), first=True,
          doc=LeverDoc(example="HTA df_index_resolver: CompiledFunction 5 calls in 5 steps")),
    Lever("fewer_ops", "host", "the host time is PyTorch's own per-op dispatch: issue fewer, "
          "larger ops -- batch small tensors, replace Python loops over tensors with vectorised "
          "ops", "code", saves="host_rest", when=_all(PT, host_dispatch)),
    Lever("compile_dispatch", "host", "torch.compile the step: fused kernels leave fewer ops to "
          "dispatch", "code", saves="host_rest",
          when=_all(PT, host_dispatch, not_compiled, compile_available,
                    triton_device),
          group="compile"),
    Lever("compile_model_host", "host", "the host time is the model's own forward (module "
          "calls and the dispatch of many small ops), which cannot move off the step: "
          "torch.compile the model (fused kernels, less Python per step), capture it with CUDA "
          "graphs where the step allows, or run a larger batch per call", "code",
          saves="host_rest", when=_all(PT, host_in_model, not_host_dispatch, not_compiled,
                                       not_compiled_call, host_not_stall, compile_available,
                                       triton_device),
          first=True,
          group="compile"),
    Lever("graphs_host", "host", _graphs_host_text, "code", saves="host_rest",
          when=_all(PT, no_graphs, capturable, host_not_stall, graphs_api_available),
          after=("per_param_item",),
          group="cuda_graphs"),
    Lever("checkpoint_off_path", "host", _stall_text, "code", saves="stall",
          when=_all(PT, checkpoint_stall), first=True),
    Lever("periodic_stall", "host", _other_stall_text, "code", saves="stall",
          when=_all(periodic_other_stall), first=True),
    Lever("off_thread_native", "host", "move host work off the launching thread, or overlap it "
          "with queued GPU work", "code", saves="host_rest", when=_all(NV)),
    Lever("graphs_host_native", "host", "CUDA graphs so the GPU runs ahead of the host", "code",
          saves="host_rest", when=_all(NV, no_graphs, capturable), group="cuda_graphs"),
    Lever("allocator_on", "host", "turn PyTorch's caching allocator back on: unset "
          "PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING (tensors' frees call "
          "the driver inside the ops)", "free", saves="alloc",
          when=_all(PT, allocator_uncached)),
    Lever("no_empty_cache", "host", "stop device-memory churn: remove torch.cuda.empty_cache() "
          "from the loop; PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF="
          "expandable_segments:True", "free", saves="alloc",
          when=_all(PT, allocator_cached, no_startup_alloc, device_frees, steady_window)),
    Lever("allocator_growth", "host", "the caching allocator is still growing (cudaMalloc "
          "inside the analysed steps, no frees): profile after more warm-up steps, or let it "
          "map memory in larger pieces (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
          "free", saves="alloc", when=_all(PT, allocator_cached, no_startup_alloc,
                                           allocator_growing, steady_window)),
    Lever("shapes_stable", "host", SHAPES_STABLE, "code", saves="alloc",
          when=_all(PT, allocator_cached, no_startup_alloc, steady_window, shapes_may_vary,
                    shapes_seen_varying)),
    # the alloc cause holds stream / event creation too (passes/attribution.py): said so
    Lever("reuse_buffers_native", "host", "allocate buffers and create streams and events once, "
          "outside the loop, and reuse them; or a stream-ordered pool for the buffers "
          "(cudaMallocAsync / cudaMemPool)", "code", saves="alloc",
          when=_all(NV, no_startup_alloc)),
    # comms
    Lever("ddp_buckets", "comms", "overlap communication with compute: DDP bucket_cap_mb, "
          "gradient_as_bucket_view=True", "free", when=_all(PT, ddp)),
    Lever("broadcast_buffers", "comms", "DistributedDataParallel(broadcast_buffers=False): DDP "
          "broadcasts every buffer from rank 0 before each forward; skip it when the buffers "
          "need no syncing (or sync them every N steps)", "free", saves="buffers",
          when=_all(PT, buffer_broadcast), first=True),
    Lever("fsdp_prefetch", "comms", "FSDP: forward/backward prefetch, limit_all_gathers, larger "
          "wrap units", "free", saves="fsdp_hide",
          when=_all(PT, fsdp, fsdp_comms_run, fsdp_gathers_exposed)),
    Lever("deepspeed_overlap", "comms", "DeepSpeed ZeRO: overlap_comm=True, larger "
          "reduce_bucket_size / allgather_bucket_size, contiguous_gradients=True", "free",
          when=_all(PT, deepspeed)),
    Lever("megatron_overlap", "comms", "Megatron: --overlap-grad-reduce, --overlap-param-gather "
          "and --tp-comm-overlap", "free", when=_all(PT, megatron)),
    Lever("no_sync", "comms", "gradient accumulation with no_sync(): communicate once every N "
          "micro-batches", "code", when=_all(PT, training, ddp_or_fsdp)),
    Lever("torchrec_pipeline", "comms", "TorchRec: pipeline the sparse input distribution "
          "(TrainPipelineSparseDist) so batch i+1's all_to_all overlaps batch i's compute",
          "code", when=_all(PT, torchrec)),
    Lever("torchrec_sharding", "comms", "re-plan the embedding sharding (EmbeddingShardingPlanner"
          ": table-/row-/column-wise, balanced across ranks) to cut and balance the all_to_all "
          "volume", "code", when=_all(PT, torchrec)),
    Lever("tp_overlap", "comms", _tp_overlap_text, "code", saves="tp_hide",
          when=_all(PT, tp_comm_exposed)),
    Lever("pp_microbatches", "comms", _pp_microbatch_text, "code", saves="pp_bubble",
          when=_all(pp_bubble_dominates), first=True),
    Lever("pp_rebalance", "comms", _pp_rebalance_text, "code", saves="pp_excess",
          when=_all(pp_stage_slow), first=True),
    Lever("ep_balance", "comms", _ep_balance_text, "code", saves="ep_share",
          when=_all(ep_imbalanced), first=True),
    Lever("comms_overlap", "comms", "overlap communication with compute: issue the collectives "
          "early (async_op=True, or on a side stream) and wait only where the result is needed",
          "code", when=_all(PT, other_comms)),
    Lever("nccl_backend", "comms", "gloo moves GPU tensors through host memory: use "
          "backend='nccl' for GPU tensors (init_process_group('cpu:gloo,cuda:nccl'))", "free",
          when=_all(gloo), first=True),
    Lever("peers_late", "comms", _slow_collective_text, "free", when=_all(slow_collective),
          first=True),
    Lever("interconnect", "comms", _interconnect_text, "infra", when=_all(gpu_transport)),
    # a CPU program's exposed collectives (scores._cpu_comm_actions; never on a GPU trace:
    # cpu_comm_bound reads passes/parallelism.host_comm, which a GPU window has not)
    Lever("cpu_peers_late", "comms", _cpu_peers_text, "free", saves="cpu_late",
          when=_all(cpu_comm_bound, cpu_peers_late), first=True),
    Lever("cpu_no_sync", "comms", _cpu_no_sync_text, "code", saves="cpu_accumulate",
          when=_all(cpu_comm_bound, training, ddp_named, cpu_allreduce_exposed)),
    Lever("cpu_ddp_overlap", "comms", _cpu_overlap_text, "free", saves="cpu_overlap",
          when=_all(cpu_comm_bound, ddp_named, cpu_allreduce_exposed, cpu_one_bucket,
                    backward_measured)),
    Lever("cpu_ddp_buckets", "comms", _cpu_buckets_text, "free", saves="cpu_buckets",
          when=_all(cpu_comm_bound, ddp_named, cpu_allreduce_exposed, cpu_many_buckets)),
    Lever("comms_overlap_native", "comms", "overlap communication with compute: collectives on "
          "their own stream, issued early", "code", when=_all(NV)),
    # compile
    Lever("mark_dynamic", "compile", "torch._dynamo.mark_dynamic / dynamic=True for the "
          "dimensions that vary", "code", when=_all(may_recompile)),
    Lever("bucket_shapes", "compile", "pad inputs to a few fixed shapes (bucketing) to stop "
          "recompiles", "code", when=_all(may_recompile)),
    Lever("warm_up", "compile", "warm up (compile) before profiling; enable the inductor FX "
          "graph cache", "free"),
    # graph_capture
    Lever("startup_capture", "graph_capture", lambda c: _startup_text(c), "free", saves="none",
          when=_all(engine_startup), first=True,
          doc=LeverDoc(what="this window is the serving engine's start-up: its graph captures "
                       "run once per server start -- profile the serving steps; capture fewer "
                       "batch sizes to start faster", example="TraceLens sglang_decode/capture_traces/bs_32_rank0 (SGLang "
                       "cuda_graph_runner __init__), vllm graph_capture_rank_0")),
    Lever("fixed_shapes_capture", "graph_capture", "keep input shapes fixed (pad or bucket) so "
          "recorded CUDA graphs are replayed, not re-recorded", "code", when=_all(steady_window)),
    Lever("capture_in_warmup", "graph_capture", "record the graphs during warm-up, before the "
          "measured steps", "free", when=_all(steady_window)),
    # queued: the GPU waited with its next op already launched (passes/attribution.py)
    Lever("stream_waits", "queued", _stream_waits_text, "code", saves="queued", waits="event"),
    Lever("front_end", "queued", _front_end_text, "code", saves="queued", waits="gpu_side"),
    Lever("queued_other_process", "queued", _queued_other_text, "infra", saves="queued",
          waits="untraced", when=_all(other_process), first=True),
    Lever("queued_in_graphs", "queued", _queued_in_graphs_text, "free", saves="queued",
          waits="graph", when=_all(no_other_process, uses_graphs, queued_in_replays)),
    Lever("queued_untraced", "queued", _queued_untraced_text, "free", saves="queued",
          waits="untraced", when=_all(no_other_process, queued_outside_graphs)),
    # gpu: busy-time levers with a saving (passes/busy.py), for every bound
    Lever("tf32", "gpu", TF32_TEXT, "free", saves="busy", busy="tf32",
          when=_all(PT, tf32_device, not_gemv)),
    Lever("bf16_autocast", "gpu", BF16_TEXT, "code", saves="busy", busy="bf16_autocast",
          when=_all(PT, bf16_device, no_fp16, autocast_off)),
    Lever("fp16_autocast", "gpu", FP16_TEXT, "code", saves="busy", busy="fp16_autocast",
          when=_all(PT, autocast_off)),
    Lever("fp16_for_bf16", "gpu", FP16_TEXT, "code", saves="busy", busy="bf16_autocast",
          when=_all(PT, no_bf16_device, autocast_off)),
    Lever("sdpa", "gpu", SDPA_TEXT, "code", saves="busy", busy="sdpa",
          when=_all(PT, attention_unfused)),
    Lever("channels_last", "gpu", "channels_last memory format for the convolution model and "
          "its inputs", "code", saves="busy", busy="channels_last",
          when=_all(PT, convolutions, not_channels_last)),
    Lever("compile_pointwise", "gpu", "torch.compile to fuse the elementwise/reduction kernels",
          "code", saves="busy", busy="torch_compile",
          when=_all(PT, not_compiled, compile_available,
                    triton_device),
          group="compile"),
    # gpu: generic advice when GPU-bound and busy.py found nothing to price (no saving)
    Lever("tune_kernel", "gpu", lambda c: _tune_kernel_text(c), "code", saves="none",
          when=_all(gpu_bound, no_busy_evidence, dominant_kernel)),
    Lever("autocast_generic", "gpu", BF16_TEXT, "code", saves="none",
          when=_all(PT, gpu_bound, no_busy_evidence, gemm_fp32, bf16_device, not_lowp,
                    no_fp16)),
    Lever("fp16_generic", "gpu", FP16_TEXT, "code", saves="none",
          when=_all(PT, gpu_bound, no_busy_evidence, gemm_fp32, no_bf16_device, not_lowp)),
    Lever("tf32_generic", "gpu", TF32_TEXT, "free", saves="none",
          when=_all(PT, gpu_bound, no_busy_evidence, gemm_fp32, tf32_device, not_gemv)),
    Lever("sdpa_generic", "gpu", SDPA_TEXT, "code", saves="none",
          when=_all(PT, gpu_bound, no_busy_evidence, attention_unfused, softmax_runs)),
    Lever("compile_generic", "gpu", "torch.compile for kernel fusion", "code", saves="none",
          when=_all(PT, gpu_bound, no_busy_evidence, not_compiled, compile_available,
                    triton_device),
          group="compile"),
    Lever("channels_last_generic", "gpu", "channels_last for convolutions", "code",
          saves="none", when=_all(PT, gpu_bound, no_busy_evidence, convolutions,
                                  not_channels_last)),
    Lever("tensor_cores_native", "gpu", "tensor-core precision for GEMM-heavy code (TF32 / BF16 "
          "/ FP16: cuBLAS math mode)", "code", saves="none",
          when=_all(NV, gpu_bound, no_busy_evidence, gemm_fp32)),
    Lever("fuse_generic_native", "gpu", "fuse kernels to cut memory traffic", "code",
          saves="none", when=_all(NV, gpu_bound, no_busy_evidence)),
    # the verdicts with no cause to fix: how to record what is missing
    Lever("cpu_cut", "cpu_only", _cpu_cut_text, "free", saves="none",
          when=_all(cut_before_gpu)),
    Lever("cpu_window", "cpu_only", "the analysed window holds no GPU event, although the "
          "trace has GPU work: widen --window (or --steps) to a stretch where the GPU runs",
          "free", saves="none", when=_all(window_without_gpu)),
    Lever("cpu_compile", "cpu_only", _cpu_compile_text, "free", saves="none",
          when=_all(not_cut, cpu_compile_heavy)),
    Lever("cpu_dataloader", "cpu_only", _cpu_data_text, "free", saves="none",
          when=_all(not_cut, cpu_data_heavy), group="workers"),
    # the same advice as the host levers' (one kept of a group: a CPU trace's replay may
    # offer those, and its anatomy the same odd steps as a save or a validation pass)
    Lever("cpu_checkpoint", "cpu_only", _stall_text, "code", saves="none",
          when=_all(not_cut, checkpoint_stall), group="checkpoint_off_path"),
    Lever("cpu_periodic_stall", "cpu_only", _other_stall_text, "code", saves="none",
          when=_all(not_cut, periodic_other_stall), group="periodic_stall"),
    Lever("cpu_dynamic_shapes", "cpu_only", _cpu_dynamic_text, "code", saves="none",
          when=_all(not_cut, has_dynamic_shapes)),
    Lever("record_gpu_launches", "cpu_only", lambda c: f"{_cpu(c).get('launches', 0)} kernel "
          "launches are recorded but no GPU activity: the profiler did not trace the GPU side "
          "(CUPTI range profiling, or CUDA activities off) -- record with "
          f"{_gpu_tracer(c)}", "free", saves="none",
          when=_all(not_cut, launches_untraced)),
    Lever("record_gpu", "cpu_only", lambda c: "this trace has no GPU activity: profile with "
          f"{_gpu_tracer(c)} to see the GPU side",
          "free", saves="none", when=_all(not_cut, no_launches, not_cpu_by_design)),
    Lever("record_host", "unknown", "host activity was not traced while the GPU idled: record "
          "CPU activities (ProfilerActivity.CPU, with_stack=True) or nsys "
          "--trace=cuda,nvtx,osrt", "free", saves="none"),
    Lever("find_the_wait", "waiting", "the launching threads sat parked in waits (condition "
          "variables, futex, poll) while the GPU idled, on something this trace does not show: "
          "for one rank of a job, analyse every rank's trace together (traceread analyze "
          "rank*.json / one nsys export of the job) to find the rank it waits for; otherwise a "
          "helper thread, lock or process holds it: sample the threads' stacks while it waits",
          "free", saves="none"),
)

# -- job levers: a whole job's straggler (jobs/multirank/verdicts.py), priced by the lateness
# it imposes; the context is the job verdict: ``straggler_rank``, ``straggler_cause``

def _late_because(cause: str, doc: str) -> Pred:
    """A precondition: the straggler's late windows are explained by ``cause``."""
    def pred(c: Ctx) -> bool:
        return c.get("straggler_cause") == cause
    pred.__name__ = f"late_{cause}"
    pred.__doc__ = doc
    return pred


def _rank_text(template: str) -> Callable[[Ctx], str]:
    def text(c: Ctx) -> str:
        return template.format(r=c.get("straggler_rank"))
    text.__doc__ = template.format(r="R")
    return text


STRAGGLER_ROWS = (
    ("stage_compute", "its pipeline stage computes more than the others",
     "move layers off the pipeline stage of rank {r} (the split points) so the stages compute "
     "alike"),
    ("stage_untraced", "its stage runs host work outside profiled ops",
     "look at what pipeline rank {r} runs outside profiled ops inside its stage's step (a "
     "sleep, logging, checkpointing, I/O or Python only that stage does; profile "
     "with_stack=True): the other stages wait on it"),
    ("untraced", "it runs host work outside profiled ops before its collectives",
     "look at what rank {r} runs outside profiled ops before its collectives: a sleep, "
     "logging, checkpointing, I/O or Python only that rank does (profile with_stack=True)"),
    ("gpu_compute", "its GPU was still busy with compute kernels",
     "rank {r}'s GPU computes longer: uneven inputs (batch or sequence lengths), a slower or "
     "throttled GPU, or other work sharing it"),
    ("comm_wait", "it is itself blocked in another collective",
     "rank {r} is itself blocked in another collective, passing on a delay it did not "
     "cause: look at the rank that arrived last at that collective"),
    ("comm_own", "it comes out of its own collectives after the others, no other rank late at them",
     "rank {r} comes out of its collectives after the other ranks, though no other rank was "
     "late at them: its communication finishes late on it -- give its communication threads "
     "a free core (gloo's workers, NCCL's proxy thread), or check its link or NIC"),
    ("comm_own_resumed_late", "its waits return after its own collectives have ended, no other rank "
     "late at them",
     "rank {r} comes out of its collectives after the other ranks, though no other rank was "
     "late at them and its own had ended: its waits returned late because its threads were not "
     "running, not a late transfer -- give its processes and communication threads cores of "
     "their own (fewer processes per host, taskset / numactl; gloo's workers, NCCL's proxy "
     "thread)"),
    ("cpu_slower", "it runs the same CPU operators as the others, each slower",
     "rank {r} runs the same CPU operators as the other ranks, as often, each slower: its host "
     "is busier or slower -- other processes on its cores, CPU frequency, NUMA placement; give "
     "its processes cores of their own (taskset / numactl) and compare the hosts"),
    ("sleep", "its launching thread sleeps",
     "rank {r}'s launching thread sleeps before it reaches the collective (time.sleep/"
     "clock_nanosleep): remove the sleep, or the polling/rate-limiting loop that calls it"),
)
JOB_LEVERS: tuple[Lever, ...] = tuple(
    Lever(f"straggler_{cause}", "job", _rank_text(text), "code", saves="none",
          when=(_late_because(cause, f"The straggler is late because {why}."),),
          doc=LeverDoc(what=text.format(r="R"), example="gloo ddp2 / pp_gpipe3_slow1 "
                       "recordings (tests/fixtures/gloo)"))
    for cause, why, text in STRAGGLER_ROWS)


def straggler_text(cause: str | None, rank: int) -> str | None:
    """The job lever's words for a straggler late because of ``cause`` (None: no row)."""
    lv = BY_ID.get(f"straggler_{cause}")
    return lv.words({"straggler_rank": rank}) if lv is not None else None


# -- memory levers: the GPU-use section's allocator advice (verdict/busy.py), on the record's
# ``memory`` figures: device allocator calls after the first step, each device's peaks

def late_frees(c: Ctx) -> bool:
    """Device free calls run after the first step: the cache hands memory back every step."""
    late = (c.get("memory") or {}).get("after_first_step") or {}
    return bool(late.get("count")) and bool(late.get("frees"))


def late_allocs_only(c: Ctx) -> bool:
    """Device allocations and no free run after the first step: memory keeps growing."""
    late = (c.get("memory") or {}).get("after_first_step") or {}
    return bool(late.get("count")) and not late.get("frees")


def late_allocator_calls(c: Ctx) -> bool:
    """The allocator still calls the driver after the first step."""
    return bool(((c.get("memory") or {}).get("after_first_step") or {}).get("count"))


MEMORY_LEVERS: tuple[Lever, ...] = (
    Lever("no_empty_cache_in_loop", "memory", "the caching allocator is handing memory back "
          "every step: drop torch.cuda.empty_cache() / gc-triggered frees from the loop; if it "
          "is not called, the cache runs dry (see fragmentation)", "free", saves="none",
          when=(late_frees,)),
    Lever("memory_growth", "memory", "memory keeps growing across steps (varying shapes?): pad "
          "to fixed shapes or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "free",
          saves="none", when=(late_allocs_only,)),
    Lever("expandable_segments", "memory", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
          "free", saves="none", when=(late_allocator_calls,),
          doc=LeverDoc(why="a device's reserved memory is > 25% unused at its peak while the "
                       "allocator still calls the driver (fragmentation)")),
    Lever("near_capacity", "memory", "close to the memory limit: allocator retries (cudaFree + "
          "cudaMalloc) are likely; reduce batch / activation memory (checkpointing)", "free",
          saves="none", when=(late_allocator_calls,),
          doc=LeverDoc(why="a device's reserved peak is > 90% of its capacity while the "
                       "allocator still calls the driver")),
)

def _py_spy_text(c: Ctx) -> str:
    """find the Python that runs between launches: py-spy record --native, or
    torch.profiler(with_stack=True) where the trace has no Python frames."""
    # (a trace recorded with_stack was told to record with it)
    stack = c.get("stacks_traced") or (c.get("profiler_overhead") or {}).get("with_stack")
    return ("find the Python that runs between launches: py-spy record --native"
            + ("" if stack else ", or torch.profiler(with_stack=True)"))


# Unranked "to find out more": tools that show the culprit, offered with their cause.
DIAGNOSTICS: tuple[Lever, ...] = (
    Lever("mark_steps", "startup", "mark the steps (torch.profiler prof.step() or NVTX ranges "
          "step_N) or pass --window START:END: without steps the window holds the one-time "
          "start-up", "free", when=_all(cold_start)),
    Lever("py_spy", "host", _py_spy_text, "free", when=_all(PT)),
    Lever("cpu_sampling_native", "host", "profile the host code between launches: nsys profile "
          "--sample=cpu, or perf", "free", when=_all(NV)),
    Lever("torch_logs", "compile", "TORCH_LOGS=recompiles to see which guard fails; raise "
          "torch._dynamo.config.cache_size_limit only if recompiles are legitimate", "free",
          when=_all(may_recompile)),
    Lever("nccl_debug", "comms", "NCCL_DEBUG=INFO (RCCL too) to see the rings/trees, transport "
          "and topology the collectives use", "free", when=_all(gpu_transport)),
)

# The modules whose lever rows the table appends (the same Lever shape, verdict/leverkit.py):
# each gives LEVERS rows, saving-model docs and a pricing hook for its own models.
# verdict/anatomy.py (issue 38): the step-anatomy levers (they import the shape from
# verdict/leverkit.py, never from here: no import circle)
from .anatomy import ANATOMY_LEVERS, ANATOMY_SAVINGS, anatomy_saving, batch_factor  # noqa: E402

LEVERS = LEVERS + tuple(ANATOMY_LEVERS)
# the rows the ranked to-do list of one window never offers: a job's, the GPU-use section's
APART = JOB_LEVERS + MEMORY_LEVERS
SAVINGS.update(ANATOMY_SAVINGS)


def appended_saving(lv: Lever, ctx: Ctx) -> int | None:
    """The saving of a lever whose model an appended module prices (None: no estimate)."""
    if lv.saves in ANATOMY_SAVINGS:
        return anatomy_saving(lv, ctx)
    return None


# every lever id, one enum (a str Enum: ``LeverId.NUM_WORKERS == "num_workers"``)
LeverId = Enum("LeverId", {str(lv.id).upper(): str(lv.id)
                           for lv in LEVERS + DIAGNOSTICS + APART},
               type=str, module=__name__)
LeverId.__str__ = lambda self: self.value   # f"{id}" is the plain id
register_ids(LeverId)
LEVERS = tuple(Lever(**{**lv.__dict__, "id": LeverId(str(lv.id))}) for lv in LEVERS)
DIAGNOSTICS = tuple(Lever(**{**lv.__dict__, "id": LeverId(str(lv.id))}) for lv in DIAGNOSTICS)
JOB_LEVERS = tuple(Lever(**{**lv.__dict__, "id": LeverId(str(lv.id))}) for lv in JOB_LEVERS)
MEMORY_LEVERS = tuple(Lever(**{**lv.__dict__, "id": LeverId(str(lv.id))})
                      for lv in MEMORY_LEVERS)
APART = JOB_LEVERS + MEMORY_LEVERS
BY_ID = {lv.id: lv for lv in LEVERS + DIAGNOSTICS + APART}


def rows(cause: str, ctx: Ctx, table: tuple = LEVERS) -> list[Lever]:
    """The rows of ``cause`` whose predicates all hold, in table order."""
    return [lv for lv in table if lv.cause == cause and all(p(ctx) for p in lv.when)]


def texts(cause: str, ctx: Ctx | None = None) -> list[str]:
    """The texts of the levers offered for ``cause``."""
    c = ctx or {}
    return [lv.words(c) for lv in rows(cause, c)]


def diagnostics(causes, ctx: Ctx) -> list[str]:
    """The "to find out more" list for the causes worth fixing, in their order (the cold
    start's first: it changes what the analysis sees)."""
    out = []
    for cause in ["startup"] + list(causes):
        out += [lv.words(ctx) for lv in rows(cause, ctx, DIAGNOSTICS) if lv.words(ctx) not in out]
    return out


def saving(lv: Lever, cause_ns: int, parts: dict, copy: dict, ctx: Ctx) -> int | None:
    """The ns ``lv`` would save: replayed (whatif.py) where the window was replayed and a
    model covers the lever, else under its bound model (``SAVINGS``)."""
    r = replayed(lv, ctx)
    if r is not None:
        return r
    model = SAVING_MODELS.get(lv.saves)
    if model is None:   # a saving model of a module the table appends (verdict/anatomy.py)
        return appended_saving(lv, ctx)
    return model.price(lv, cause_ns, parts, copy, ctx)


def replayed(lv: Lever, ctx: Ctx) -> int | None:
    """The replay's saving of ``lv`` over the window (per step x steps x devices, the
    figure ``saves_ns`` holds); 0 where its model refused because the change does not fit
    the program (a graph cannot capture a sync); None: not priced by a replay (no model,
    no replay, or the graph shows nothing for the model to change: the bound stays)."""
    from .whatif import lever_price, withdrawn

    r = lever_price(ctx, lv.id)
    if r is None:
        return None
    if not r["applied"]:   # withdrawn where the change does not fit, else its bound
        return 0 if withdrawn(r) else None
    ns = window_total(max(0, int(r["saves_ns"])), ctx)
    from .whatif import idle_cap

    cap = idle_cap(lv.id, ctx)
    return ns if cap is None else min(ns, cap)




def queued_by_kind(waited: dict | None) -> dict | None:
    """Queued ns per kind of ``waited_on`` evidence (attribution.waited_by: ns per text):
    ``event`` (an event wait or another stream's op), ``gpu_side``, ``untraced`` (nothing
    traced), ``graph`` (inside a CUDA graph replay). None without a breakdown."""
    if not waited:
        return None
    by = {"event": 0, "gpu_side": 0, "untraced": 0, "graph": 0}
    for text, ns in waited.items():
        kind = "gpu_side" if text == "GPU-side" else "untraced" if text.startswith("nothing") \
            else "graph" if text.startswith("inside") else "event"
        by[kind] += int(ns)
    return by


def offered(scores: dict, parts: dict, copy: dict, ctx: Ctx, min_ns: float,
            cause_order: tuple) -> list[dict]:
    """Every offered lever with its saving, ranked (see module doc).

    ``scores``: ns per cause (the verdict's); a cause below ``min_ns`` offers nothing, and
    neither does a lever that saves less. Busy-time levers (cause ``gpu``) are priced by
    passes/busy.py. Items: id, lever, cost, cause, saves_ns (None: no estimate), basis
    ("replay": replayed with the lever applied, whatif.py; "bound": its SAVINGS model),
    and projected_step_ns for a replayed one."""
    items = []
    causes = [c for c in cause_order if scores.get(c, 0) > 0 and scores[c] >= min_ns]
    for lv in LEVERS:
        if lv.cause in ("cpu_only", "unknown", "waiting") or not all(p(ctx) for p in lv.when):
            continue
        rep = replayed(lv, ctx)
        if lv.saves in CAUSE_PRICED and lv.cause not in causes:
            continue
        if lv.saves == "busy" and not (ctx.get("busy_levers") or {}).get(lv.busy):
            # the busy pass decides whether the change applies (fp16 autocast only where the
            # device has no fast bf16, TF32 only with FP32 GEMMs); a replay prices, not decides
            continue
        ns = saving(lv, scores.get(lv.cause, 0), parts, copy, ctx)
        if ns is not None and (ns <= 0 or ns < min_ns):
            continue
        text = lv.words(ctx)
        if lv.saves == "busy":   # the evidence busy.py priced it on
            why = ((ctx.get("busy_levers") or {}).get(lv.busy) or {}).get("why", "")
            text += f" -- {why}" if why else ""
        item = {"id": str(lv.id), "lever": text, "cost": lv.cost, "cause": lv.cause,
                "saves_ns": ns, "basis": None if ns is None else basis_of(lv)}
        if rep is not None:
            _replay_item(item, lv, rep, ctx)
        elif lv.saves == "batch_requests" and batch_factor(ctx):
            # a saving per request: the step itself grows to k requests (scores._actions)
            item["per_sample_x"] = float(batch_factor(ctx))
        items.append(item)
    return rank(_cap_bounds(items), gpu_bound(ctx), ctx)


def _replay_item(item: dict, lv: Lever, rep: int, ctx: Ctx) -> None:
    """Mark ``item`` priced by the replay: its model, the projected step from the replay
    in the measured frame, and ``note``: what the replay left at its measured time
    (``whatif.kept_note``: host_off_path's dispatch where no step ran without the moved
    work)."""
    from .whatif import MODEL_OF, kept_note, lever_price, projected

    r = lever_price(ctx, lv.id)
    capped = rep < window_total(max(0, int(r["saves_ns"])), ctx)
    # capped at the lost time: the replay's own projection is past the GPU's work,
    # the projection is the saving's (scores._gain, floored at the busy time)
    item.update(basis="replay", projected_step_ns=None if capped else projected(ctx, r),
                model=MODEL_OF[lv.id])
    note = kept_note(ctx, lv.id)
    if note:
        item["note"] = note
    k = float(r.get("per_sample_x") or 1.0)
    if k != 1.0:
        # a larger batch saves per sample (capped or not); the step itself grows:
        # project the step at k x the batch, not a per-sample step no run would show
        item["per_sample_x"] = k
        if capped:   # the capped saving per sample, from the step the program waits on
            item["projected_step_ns"] = per_sample_step(
                k, int(step_share(rep, ctx)), program_step_ns(ctx))
        elif item["projected_step_ns"]:
            item["projected_step_ns"] = int(item["projected_step_ns"] * k)


def offered_host(ctx: Ctx, min_ns: float) -> list[dict]:
    """The levers of a host-only window (a CPU trace: no cause scores), each priced by the
    replay of its steps: only a lever whose model changed the graph and saves at least
    ``min_ns`` is offered (the GPU's models -- CUDA graphs, copies, precisions -- find no
    kernel or copy to change and refuse). Unranked; ``rank`` orders them with the
    cpu_only advice, which has no saving and goes after (``rank``). Only a program that
    runs on the CPU: no kernel launch recorded, the trace whole (a GPU program's host side
    alone does not show what its GPU would wait on)."""
    items = []
    if not (no_launches(ctx) and not_cut(ctx)):
        return items
    for lv in LEVERS:
        if lv.cause in ("cpu_only", "unknown", "waiting") or lv.saves == "busy" \
                or not all(p(ctx) for p in lv.when):
            continue
        rep = replayed(lv, ctx)
        if rep is None or rep <= 0 or rep < min_ns:
            continue
        item = {"id": str(lv.id), "lever": lv.words(ctx), "cost": lv.cost, "cause": lv.cause,
                "saves_ns": rep, "basis": "bound"}
        _replay_item(item, lv, rep, ctx)
        items.append(item)
    return items


# the what-if model that removes a cause's time altogether (verdict/whatif.py MODEL_OF)
# (launch: a CUDA graph replaces every launch and the host work between them)
CAUSE_REMOVED_BY = {"data": "workers", "host": "host_off_path", "sync": "drop_syncs",
                    "compile": "no_recompile", "graph_capture": "replay_graphs",
                    "copy": "pin_copies", "launch": "cuda_graphs"}


def _cap_bounds(items: list[dict]) -> list[dict]:
    """On a replayed window a bound cannot outrank the replay of its own cause: a lever
    priced by its bound saves at most what the replayed removal of that cause's time saves
    (``CAUSE_REMOVED_BY``: the DataLoader's time given back by workers, replayed, is the
    most any data lever can give back)."""
    best: dict = {}
    for x in items:
        if x.get("basis") != "replay" or x["saves_ns"] is None:
            continue
        if x.get("model") == CAUSE_REMOVED_BY.get(x["cause"]):
            best[x["cause"]] = max(best.get(x["cause"], 0), x["saves_ns"])
        if x.get("model") == "no_empty_cache":   # every allocator call gone, replayed
            best["alloc"] = max(best.get("alloc", 0), x["saves_ns"])
    for x in items:
        if x.get("basis") not in ("bound", "anatomy") or x["saves_ns"] is None:
            continue
        # a lever priced by the allocator's calls is capped by their replayed removal, not
        # by host_off_path's (which leaves them in place)
        key = "alloc" if BY_ID[x["id"]].saves == "alloc" else x["cause"]
        if key in best:
            x["saves_ns"] = min(x["saves_ns"], best[key])
    return items


# the busy classes (passes/kernel_classes.py) a generic GPU lever with no estimate acts on:
# the most it could change; a lever not listed has no such evidence (channels_last: no
# class holds the convolutions)
GENERIC_REACH = {
    **dict.fromkeys(("autocast_generic", "fp16_generic", "tf32_generic",
                     "tensor_cores_native"), ("gemm_simt",)),
    **dict.fromkeys(("compile_generic", "fuse_generic_native"), ("elementwise", "reduction")),
}


def reach_ns(lv: Lever, ctx: Ctx) -> int | None:
    """The GPU time an unpriced GPU lever acts on, over the window: its kernel classes'
    busy time (GENERIC_REACH), or the dominant kernel's for tune_kernel; None: no evidence."""
    b = ctx.get("busy_classes") or {}
    if str(lv.id) == "tune_kernel":
        pct = float((ctx.get("top_kernel") or {}).get("pct") or 0)
        return int(sum(b.values()) * pct / 100) if b and pct else None
    classes = GENERIC_REACH.get(str(lv.id))
    return None if classes is None or not b else int(sum(b.get(c, 0) for c in classes))


def rank(items: list[dict], kernels_first: bool = False, ctx: Ctx | None = None) -> list[dict]:
    """Largest saving first, then the lever the trace points at, then the cheaper, then
    table order; items with no estimate after those with one -- before them when
    ``kernels_first`` (a GPU-bound verdict: the idle causes together are under 10% of the
    window, the GPU's own work is the rest) and the kernels the lever acts on take at least
    the largest estimated saving (``reach_ns``; an unpriced lever outranks a priced one only
    on that evidence)."""
    order = {lv.id: i for i, lv in enumerate(LEVERS)}
    best = max((x["saves_ns"] for x in items if x["saves_ns"] is not None), default=0)

    def leads(lv) -> bool:
        if not best:
            return True
        r = reach_ns(lv, ctx or {})
        return r is not None and r >= best

    def key(x):
        lv = BY_ID[x["id"]]
        known = x["saves_ns"] is not None
        lead = kernels_first and not known and lv.cause == "gpu" and leads(lv)
        return (not lead, not known, -(x["saves_ns"] or 0), not lv.first, COST_ORDER[lv.cost],
                order[lv.id])
    items.sort(key=key)
    # one item per piece of advice offered under two causes (CUDA graphs for launch and host)
    seen, out = set(), []
    for x in items:
        g = BY_ID[x["id"]].group or x["id"]
        if g not in seen:
            seen.add(g)
            out.append(x)
    _pointed_first(out)
    # a lever that cannot work before another is done ranks after it (graphs after the syncs)
    for x in list(out):
        for pre in BY_ID[x["id"]].after:
            k = next((i for i, y in enumerate(out) if y["id"] == pre), None)
            if k is not None and out.index(x) < k:
                out.remove(x)
                out.insert(k, x)
    return out


# two savings of one cause this close are one piece of time: ranked as a tie here, read
# "about the same X time as the lever above" by the renderers (render/text.action_gain)
SAME_TIME_SHARE = 0.05


def _pointed_first(out: list[dict]) -> None:
    """Of two neighbours saving about the same time of one cause (alternatives for one piece
    of lost time), the lever the trace points at (``Lever.first``) leads the generic one:
    cpupairs' save pair listed "move the host work off the step path" (9.69 ms replayed)
    above "save asynchronously" (the save phase's 9.59 ms, the same time)."""
    for i in range(len(out) - 1):
        a, b = out[i], out[i + 1]
        if a.get("cause") != b.get("cause") or a.get("saves_ns") is None \
                or b.get("saves_ns") is None or BY_ID[a["id"]].first or not BY_ID[b["id"]].first:
            continue
        x, y = int(a["saves_ns"]), int(b["saves_ns"])
        if abs(x - y) <= SAME_TIME_SHARE * max(x, y):
            out[i], out[i + 1] = b, a


def basis_of(lv: Lever) -> str:
    """How an unreplayed lever's saving is priced: ``bound`` (at most its cause's lost time,
    the rest of the step unchanged) or ``anatomy`` (the step's phases' own model,
    verdict/anatomy.py: no upper bound -- the micro-batch and request models leave out what
    larger GEMMs gain, the logging model the metrics it logs; the recorded pairs realised
    more than it promised on 5 of 6)."""
    return "anatomy" if lv.saves in ANATOMY_SAVINGS else "bound"


# -- the dominant-kernel lever's words ---------------------------------------------------

DOMINANT_KERNEL_PCT = 50.0
AMD_DEVICE_RX = re.compile(r"(?i)\bAMD\b|Instinct|Radeon|\bMI\d{3}")
AMD_KERNEL_RX = re.compile(r"^Cijk_|ck_tile|\bck::|_gtcx|miopen|hipblaslt", re.I)
NVIDIA_DEVICE_RX = re.compile(r"(?i)NVIDIA|Tesla|GeForce|Quadro|\b[ABHLTV]\d{2,3}\b|\bGB?\d{3}\b")


def _tune_kernel_text(c: Ctx) -> str:
    k = c.get("top_kernel") or {}
    name, pct = str(k.get("name", "")), float(k.get("pct", 0))
    device = str(c.get("device_name") or "")
    full = kernel_base_name(name, limit=None)
    base = full[:KERNEL_NAME_CHARS]
    # a name cut short matches no kernel: ncu matches its head as a regex instead (rocprof-
    # compute's -k matches a substring already)
    arg = base if len(full) <= KERNEL_NAME_CHARS else f"regex:^{re.escape(base)}"
    ncu = f"Nsight Compute (ncu --kernel-name {arg} --set full)"
    rocm = f"rocprof-compute (rocprof-compute profile -k {base})"
    amd = AMD_DEVICE_RX.search(device) or (not device and any(
        AMD_KERNEL_RX.search(str(n)) for n in k.get("names", [name])))
    tool = rocm if amd else ncu if NVIDIA_DEVICE_RX.search(device) \
        else f"the vendor's kernel profiler: {ncu} or {rocm}" if not device \
        else f"its vendor's kernel profiler ({safe_device(device)} is neither an NVIDIA nor an AMD device)"
    how = "autotune its block sizes / num_warps" if base.startswith("triton_") else \
        "compare its achieved memory throughput and FLOP rate with the GPU's peaks"
    return f"tune the kernel that takes {pct:.0f}% of GPU time, {base}: profile it with {tool} " \
           f"and {how}"


KERNEL_NAME_CHARS = 80


def safe_device(device: str) -> str:
    """A device name as the trace gives it, one line, at most 40 characters."""
    d = " ".join(device.split())
    return d if len(d) <= 40 else d[:39] + "…"


def kernel_base_name(name: str, limit: int | None = KERNEL_NAME_CHARS) -> str:
    """What ncu's --kernel-name matches by default: no return type, arguments, templates or
    namespaces (`void ns::k<float>(float*)` -> `k`); cut to ``limit`` characters."""
    s = re.sub(r"^\s*void\s+", "", name.replace("(anonymous namespace)::", "")).split("(", 1)[0]
    while "<" in s:  # innermost template arguments first
        t = re.sub(r"<[^<>]*>", "", s)
        if t == s:
            break
        s = t
    return (s.rsplit("::", 1)[-1].strip() or name)[:limit]


def fitting_busy(blev: list[dict], ctx: Ctx) -> list[dict]:
    """The busy pass's priced levers that some row of the table offers here (its
    preconditions hold: no TF32 lever on volta_ kernels): what the GPU-use section and its
    headline may name."""
    rows: dict[str, list[Lever]] = {}
    for lv in LEVERS:
        if lv.saves == "busy":
            rows.setdefault(lv.busy, []).append(lv)
    return [b for b in blev if any(lv.holds(ctx) for lv in rows.get(b["lever"], ()))]


# -- withdrawn levers: refusals as values -------------------------------------------------

# the preconditions whose failure says the lever does not fit this program (what it already
# does, its hardware, its torch, its phase): a refusal worth reporting. The others say the
# trace does not point at the lever (no stall, no recompile, another framework): it was
# never a candidate, and is not listed.
REFUSING = frozenset({
    "not_gemv", "tf32_device", "bf16_device", "no_fp16", "not_lowp", "compile_available",
    "triton_device",
    "graphs_api_available", "fused_available", "h2d_pageable", "dtoh_waits", "graphs_replayed",
    "graphs_launched", "steady_window", "compiled_called_often", "host_movable",
    "fsdp_comms_run", "capturable", "no_graphs", "not_compiled", "not_compiled_call",
    "host_off_model", "not_host_dispatch", "not_offloaded", "host_not_stall",
    "allocator_cached", "no_startup_alloc", "convolutions", "not_channels_last",
    "deferrable_reads", "autocast_off", "shapes_may_vary",
    "attention_unfused",
    "no_dataloader_names",
    "gpu_transport", "no_other_process", "fsdp_gathers_exposed", "optimizer_unfused",
    "not_cpu_by_design", "cpu_peers_late", "backward_measured", "ddp_named"})


def cpu_comm_rows(ctx: Ctx) -> list[Lever]:
    """The CPU program's communication levers whose predicates all hold (their first
    precondition is ``cpu_comm_bound``)."""
    return [lv for lv in LEVERS if lv.when[:1] == (cpu_comm_bound,) and lv.holds(ctx)]


def withdrawn_cpu(ctx: Ctx) -> list[Withdrawn]:
    """A CPU program's refusals worth reporting: its communication levers and the cpu_only
    advice whose precondition (in REFUSING) fails."""
    out = []
    for lv in LEVERS:
        if lv.when[:1] != (cpu_comm_bound,) and lv.cause != "cpu_only":
            continue
        w = lv.refusal(ctx)
        if w is not None and w.precondition in REFUSING:
            out.append(w)
    return out


def withdrawn(scores: dict, ctx: Ctx, min_ns: float, cause_order: tuple) -> list[Withdrawn]:
    """The levers of the causes worth fixing that do not fit this program, each with the
    precondition that failed and its reason; a lever whose replay refused the change
    (``whatif.withdrawn``: a graph cannot capture a sync) with the replay's reason."""
    from .whatif import lever_price, withdrawn as replay_unfit

    causes = {c for c in cause_order if scores.get(c, 0) > 0 and scores[c] >= min_ns}
    priced = ctx.get("busy_levers") or {}   # busy-time levers the busy pass priced
    out = []
    for lv in LEVERS:
        if lv.cause not in causes and not (lv.saves == "busy" and lv.busy in priced):
            continue
        w = lv.refusal(ctx)
        if w is not None:
            if w.precondition in REFUSING:
                out.append(w)
            continue
        r = lever_price(ctx, lv.id)
        if r is not None and replay_unfit(r):
            why = "; ".join(str(v) for v in r["refused"].values())
            out.append(Withdrawn(lv.id, lv.cause, why, "replay", ("replay_levers",)))
    return out


# -- the lever table as documentation (docs/analysis.md) ----------------------------------

DOC_BEGIN = "<!-- lever-table:begin (python scripts/lever_table.py) -->"
DOC_END = "<!-- lever-table:end -->"


def describe(lv: Lever) -> LeverDoc:
    """The lever's doc, each empty field filled from the row: what (its text; a worded one
    by its function's doc), why (its preconditions' first doc lines), the saving model and
    its assumptions (``SAVING_MODELS``; the replay's what-if model where one prices it)."""
    from .whatif import MODEL_OF

    d = lv.doc
    what = d.what or (lv.text if isinstance(lv.text, str) else
                      first_line(getattr(lv.text, "__doc__", "")) or "(worded from the facts)")
    why = d.why or "; ".join(first_line(p.__doc__) or p.__name__ for p in lv.when
                             if p.__name__ not in ("pytorch",)) or "always, with its cause"
    model = SAVING_MODELS.get(lv.saves)
    saving = d.saving or (model.doc if model else SAVINGS.get(lv.saves, lv.saves))
    if MODEL_OF.get(str(lv.id)):
        saving = f"replay `{MODEL_OF[str(lv.id)]}`; bound: {saving}"
    return LeverDoc(what=what, why=why, example=d.example, saving=saving,
                    assumptions=d.assumptions or (model.assumptions if model else ""))


def doc_table() -> str:
    """docs/analysis.md's lever table: one row per lever of the table, in table order."""
    rows = ["| lever | cause | cost | what | offered when | saves (model; assumptions) "
            "| example |", "|---|---|---|---|---|---|---|"]
    for lv in LEVERS + DIAGNOSTICS + APART:
        d = describe(lv)
        kind = " (diagnostic)" if lv in DIAGNOSTICS else ""
        saves = d.saving + (f"; {d.assumptions}" if d.assumptions else "")
        cells = [f"`{lv.id}`{kind}", lv.cause, lv.cost, d.what, d.why, saves, d.example or ""]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return str(text).replace("``", "`").replace("|", "\\|").replace("\n", " ")


def write_doc(path: str) -> bool:
    """Put ``doc_table`` between the markers of ``path``; True when the file changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    a, b = text.index(DOC_BEGIN) + len(DOC_BEGIN), text.index(DOC_END)
    new = text[:a] + "\n" + doc_table() + "\n" + text[b:]
    if new == text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


def main(argv: list[str]) -> int:
    """``python scripts/lever_table.py --doc [docs/analysis.md]``: regenerate the table;
    ``--print``: print it."""
    if "--print" in argv:
        print(doc_table())
        return 0
    if "--doc" in argv:
        rest = [a for a in argv if not a.startswith("--")]
        path = rest[0] if rest else "docs/analysis.md"
        try:
            changed = write_doc(path)
        except (OSError, ValueError) as e:
            print(f"cannot update {path}: {e}", file=sys.stderr)
            return 2
        print(f"{path}: {'updated' if changed else 'current'}")
        return 0
    print("usage: python scripts/lever_table.py --doc [PATH] | --print", file=sys.stderr)
    return 2
