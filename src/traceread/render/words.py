"""The words a user knows, for what the JSON keeps as ids: the facts behind a lever
(``verdict.actions[].because``: ``host_work_kind={kind=off_path, model_share=0.023}`` reads
"98% of the host time in the gaps runs outside the model's calls"), the what-if models a
lever was replayed with (``fuse_pointwise``: "torch.compile fusion"), and a busy-time
lever's place in the to-do list (``verdict.busy_placement``).

Text and HTML both read these; the JSON keeps the ids (``fact``, ``models``)."""
from __future__ import annotations

import re

from typing import Any, Callable

from .text import fmt_ns

CAUSE_WORDS = {"data": "waiting for the DataLoader", "copy": "host-device copies",
               "sync": "host syncs", "launch": "kernel launches", "host": "other host work",
               "comms": "communication", "compile": "compiling", "queued": "queued work",
               "graph_capture": "recording CUDA graphs", "gpu": "the GPU's own work"}

# what-if models (passes/replay/whatif.py) -> the change they replay
MODEL_WORDS = {"drop_syncs": "no per-step syncs", "drop_reads": "results read a step later",
               "cuda_graphs": "CUDA graphs",
               "fuse_pointwise": "torch.compile fusion", "tf32": "TF32 matmuls",
               "bf16": "bf16 autocast", "fp16": "fp16 autocast", "pin_copies": "pinned copies",
               "pin_reads": "pinned read-backs", "pin_batch": "a pinned input batch",
               "overlap_copies": "copies on a side stream", "workers": "DataLoader workers",
               "fused_optimizer": "a fused optimizer", "no_empty_cache": "no allocator calls",
               "replay_graphs": "graphs replayed, not re-recorded",
               "no_recompile": "no recompiles", "host_off_path": "host work off the step path",
               "checkpoint_off_path": "checkpoints off the step path",
               "larger_batch": "a larger batch", "channels_last": "channels_last"}


def _pct(x) -> str:
    return f"{100 * float(x):.0f}%"


def _host_work(v: dict) -> str | None:
    share, kind = v.get("model_share"), v.get("kind")
    if share is None:
        return None
    if kind == "model":
        top = f" (mostly {v['top_model']})" if v.get("top_model") else ""
        return f"{_pct(share)} of the host time in the gaps is the model's own calls{top}"
    top = f" (mostly {v['top_other']})" if v.get("top_other") else ""
    outside = int(v.get("host_ns") or 0) - int(v.get("model_ns") or 0)
    named = int(v.get("top_other_ns") or 0) / outside if outside > 0 else None
    if v.get("top_other") and named is not None and named < 0.5:   # not "mostly" it
        # (a Python frame as often as an op: host_work_kind descends frames to an op)
        top = (f" (largely untraced; the largest named frame or op, {v['top_other']}: "
               f"{_pct(named)})")
    elif v.get("top_other") and v.get("top_other_encloses_model"):   # the loop's own glue
        top = f" (in {v['top_other']}, the loop around the model's calls)"
    elif v.get("top_other") and v.get("other_kind") == "unknown":   # a script's outer frame
        top = f" (under the script's outer frame {v['top_other']})"
    what = OTHER_KIND_WORDS.get(v.get("other_kind"), "")
    return (f"{_pct(1 - float(share))} of the host time in the gaps runs outside the "
            f"model's calls{top}" + (f": {what}" if what else ""))


# host_work_kind.other_kind: what the work outside the model is (what decides if it moves)
OTHER_KIND_WORDS = {"framework": "the framework's own loop, which cannot move off the thread",
                    "compute": "the job's own arithmetic on the host, which cannot move off "
                               "the thread"}


def _blocking(v: dict) -> str | None:
    n = v.get("blocking_per_step")
    kinds = ", ".join(str(k).replace("_", " ") for k in (v.get("by_kind") or {}))
    if n is None:
        return None
    return f"{float(n):g} blocking call(s) per step" + (f" ({kinds})" if kinds else "")


def _slow_collective(v: dict) -> str | None:
    if not v.get("collective"):
        return None
    bw = f" at {float(v['busbw_gbps']):.1f} GB/s bus bandwidth" if v.get("busbw_gbps") else ""
    size = f" on {int(v['avg_msg_bytes']) / 2**20:.1f} MiB messages" \
        if v.get("avg_msg_bytes") else ""
    return f"{v['collective']}{bw}{size}"


def _optimizer(v: dict) -> str | None:
    if not v.get("name"):
        return None
    impl = f" ({str(v['impl']).replace('_', ' ')})" if v.get("impl") else ""
    return f"optimizer {v['name']}{impl}"


def _flag(yes: str, no: str) -> Callable[[Any], str | None]:
    return lambda v: yes if v else no


def _listed(what: str) -> Callable[[Any], str | None]:
    return lambda v: f"{what}: {', '.join(str(i) for i in v[:4])}" if v else f"no {what}"


def _cpu_comm(v: dict) -> str | None:
    """passes/parallelism.host_comm's figure: the share of each step the host waits on
    collectives, and the longest-exposed one."""
    if v.get("share_pct") is None:
        return None
    top = (v.get("collectives") or [{}])[0]
    lead = f", the longest {top['name']} {top.get('share_pct', 0):g}%" if top.get("name") else ""
    return (f"the host waits on collectives {v['share_pct']:g}% of each step "
            f"({v.get('share_min_pct', 0):g}-{v.get('share_max_pct', 0):g}%){lead}")


def _cpu_design(v: dict) -> str | None:
    """passes/cpudesign.py: whether a trace with no GPU op is a CPU program, and the first
    evidence each way."""
    by, why = v.get("by_design"), (v.get("for") or []) + (v.get("against") or [])
    if by is None:
        return "whether it is a CPU program: unknown"
    first = (v.get("for") if by else v.get("against")) or why or [""]
    head = "a CPU program by design" if by else "a GPU program profiled without its GPU side"
    return f"{head} ({first[0]})" if first[0] else head


# fact id -> its value in words (None: fall back to the generic form)
FACT_WORDS: dict[str, Callable[[Any], str | None]] = {
    "pytorch": _flag("", "not a PyTorch program"),
    "training": _flag("a training step", "inference (no optimizer step)"),
    "cpu_only": _flag("a CPU-only trace", "the trace records GPU work"),
    # the busy class "attention": fused attention kernels (an unfused one is GEMMs + softmax)
    "attention_ns": lambda v: None if not isinstance(v, (int, float)) else
    f"fused attention kernels {fmt_ns(v)}" if v else "no fused attention kernel runs",
    "dataloader_workers": _flag("the DataLoader already uses worker processes",
                                "the DataLoader loads on the training thread (no workers)"),
    "dataloader_restarts": lambda v: f"the workers started again {v['restarts']} time"
    f"{'s' * (v['restarts'] != 1)} ({fmt_ns(v['restart_ns'] / max(1, v['restarts']))} each)"
    if isinstance(v, dict) and v.get("restarts") else "no worker restart",
    "compiled": _flag("already torch.compile'd", "not torch.compile'd"),
    "compile_mode_graphs": _flag("torch.compile already captures CUDA graphs",
                                 "no torch.compile CUDA-graph mode"),
    "uses_cuda_graphs": _flag("CUDA graphs in use", "no CUDA graphs in use"),
    "capturable": _flag("nothing in the step stops a CUDA-graph capture",
                        "the step cannot be captured as a CUDA graph"),
    "host_dispatch": _flag("the host time is op dispatch", "the host time is not op dispatch"),
    "fused_optimizer": _flag("a fused optimizer already runs", "the optimizer is not fused"),
    "host_in_compiled_call": _flag("the host time is inside compiled code",
                                   "the host time is outside compiled code"),
    "host_work_kind": lambda v: _host_work(v) if isinstance(v, dict) else None,
    "blocking": lambda v: _blocking(v) if isinstance(v, dict) else None,
    "slow_collective": lambda v: _slow_collective(v) if isinstance(v, dict) else None,
    "optimizer": lambda v: _optimizer(v) if isinstance(v, dict) else None,
    "torch_version": lambda v: f"PyTorch {v}" if v else None,
    "comm_backend": lambda v: f"collectives over {v}" if v else None,
    "framework": _listed("framework"),
    "collectives": _listed("collectives"),
    "ddp_buffer_broadcast_ns": lambda v: f"DDP broadcasts its buffers for {fmt_ns(v)} per step"
    if v else None,
    "triton_share": lambda v: f"Triton kernels {_pct(v)} of GPU time" if v is not None else None,
    "optimizer_offload": _flag("the optimizer step runs on the CPU", "no optimizer offload"),
    "periodic_stall": _flag("a periodic stall", "no periodic stall"),
    "allocator_uncached": _flag("the caching allocator is off", "the caching allocator is on"),
    "alloc_frees": lambda v: None if v is None else "no device frees in the analysed steps"
    if not v else f"{v:,} device frees in the analysed steps",
    "device_frees": lambda v: None if not isinstance(v, int) else
    f"{v:,} device frees while the GPU works" if v else "no device frees while the GPU works",
    "graph_launches": lambda v: None if not isinstance(v, int) else
    f"{v:,} CUDA graph launches in the window" if v else "no CUDA graph launch in the window",
    "graph_replays": lambda v: None if not isinstance(v, int) else
    f"{v:,} CUDA graph replays in the window" if v else "no CUDA graph replayed in the window "
    "(a launch right after its recording is the graph's first run)",
    "startup_phase": lambda v: f"the window is the engine's start-up ({fmt_ns(v['ns'])} in "
    f"{str((v.get('frames') or ['its set-up'])[0])[:60]}): its captures and allocations "
    "happen once" if isinstance(v, dict) and v.get("ns") else None,
    "startup": lambda v: None if v is None else _flag("one-time start-up work in the window",
                                                      "no one-time start-up work")(v),
    "job.late_by_ns": lambda v: f"the straggler arrives {fmt_ns(v)} late" if v else None,
    "cpu_comm": lambda v: _cpu_comm(v) if isinstance(v, dict) else None,
    "cpu_design": lambda v: _cpu_design(v) if isinstance(v, dict) else None,
    "pageable_reads": lambda v: None if not isinstance(v, dict) else
    f"{v.get('waited', 0)} of {v.get('copies', 0)} device->host copies into pageable memory "
    f"held their call until done ({fmt_ns(int(v.get('waited_ns') or 0))} in those calls)",
}


def fact_words(x: dict) -> str:
    """One fact of a lever's ``because`` in words: its value (and the first event that proves
    it, or "none seen" where it was read from absence)."""
    fact, v = str(x.get("fact", "")), x.get("value")
    if not x.get("known", True):
        return f"{_human(fact)}: unknown"
    if fact.startswith("replay_levers."):
        # the figure the saving line above shows, per step or (no steps) over the window
        return f"replayed: saves {fmt_ns(v)}" if _int(v) else \
            "replayed (the step re-simulated with the change)"
    if fact.startswith("busy_levers."):
        return str(v)
    if fact.startswith("cpu_comm.") and _int(v):   # a CPU job's comms model (a bound)
        return f"priced at {fmt_ns(v)} a step (a bound)"
    if fact.startswith("anatomy.") and _int(v):   # a CPU trace's step-anatomy model
        return f"the step's anatomy: {fmt_ns(v)} a step"
    if fact.startswith("cause_ns.") and _int(v):
        cause = fact.split(".", 1)[1]
        return f"{fmt_ns(v)} lost to {CAUSE_WORDS.get(cause, cause)} in the window"
    if fact == "cause_ns" and isinstance(v, dict):
        top = sorted(((c, n) for c, n in v.items() if _int(n) and n > 0), key=lambda t: -t[1])
        return "lost time: " + ", ".join(f"{CAUSE_WORDS.get(c, c)} {fmt_ns(n)}"
                                          for c, n in top[:3]) if top else "no lost time"
    said = FACT_WORDS[fact](v) if fact in FACT_WORDS else None
    if said is not None:   # its own words say "no ..." already: only a seen event is added
        return _with_proof(said, x, v) if said and v else said or ""
    said = _generic(fact, v)
    return _with_proof(said, x, v) if said else ""


def _with_proof(said: str, x: dict, v) -> str:
    proof = _proof(x, v)
    name = proof[len(" (seen: "):-1].rstrip(".") if proof.startswith(" (seen: ") else ""
    return said if name and name in said else said + proof


def because_words(items: list[dict], limit: int = 4) -> str:
    """A lever's ``because`` as one line of plain sentences (the JSON keeps the fact ids)."""
    bits = [w for w in (fact_words(x) for x in items) if w]
    more = len(bits) - limit
    return "; ".join(bits[:limit]) + (f"; and {more} more fact{'s' * (more > 1)} in the JSON"
                                      if more > 0 else "")


RULED_OUT_TITLE = "Not offered: the program rules them out"
RULED_OUT_ROWS = 3


def ruled_out(withdrawn: list[dict]) -> list[tuple[str, str]]:
    """``verdict.withdrawn`` as (the levers, why) rows, one per reason: a precondition stops
    at the read that decides it, so its last fact (with the event that proves it) is the
    reason; a replay's refusal gives its own."""
    by_reason: dict[str, list[str]] = {}
    for w in withdrawn:
        if not isinstance(w, dict):
            continue
        why = refusal_words((w.get("because") or [])[-1:]) or str(w.get("reason") or "")
        if why:
            by_reason.setdefault(why, []).append(str(w.get("id", "")).replace("_", " "))
    return [(", ".join(ids), why) for why, ids in by_reason.items()]


def refusal_words(items: list[dict]) -> str:
    """A withdrawn lever's ``because`` in words. Unlike an offered lever's, a false fact here
    is the refusal, and its events (the sync that splits the step) are what proves it."""
    bits = []
    for x in items:
        said = fact_words(x)
        v = x.get("value")
        if said and not v and x.get("evidence") and "(seen: " not in said:
            said += _proof(x, True)
        if said:
            bits.append(said)
    return "; ".join(bits)


def _proof(x: dict, v) -> str:
    proof = (x.get("evidence") or [None])[0]
    if proof and proof.get("name") and v:
        full = " ".join(str(proof["name"]).split())
        name = proof_name(full)
        w = 40 if name == full else 64
        return f" (seen: {name[:w]}{'...' if len(name) > w else ''})"
    if x.get("evidence") == [] and not v:
        return " (none seen)"
    return ""


_FUNC_RX = re.compile(r"([A-Za-z_]\w*)\(")


def proof_name(name: str, w: int = 40) -> str:
    """A long templated kernel name as its kernel and the functor it runs: cut at 40
    characters, "void at::native::elementwise_kernel_manu..." hid the
    ``mse_backward_cuda_kernel`` that proves a backward; it reads
    "mse_backward_cuda_kernel in elementwise_kernel_manual_unroll"."""
    if len(name) <= w or "<" not in name:
        return name
    outer = name.split("<", 1)[0].split()[-1].rsplit("::", 1)[-1]
    inner = next((m for m in _FUNC_RX.findall(name.split("<", 1)[1])
                  if m not in ("lambda", "operator")), None)
    return f"{inner} in {outer}" if outer and inner else name


def _int(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _human(fact: str) -> str:
    return fact.split(".")[-1].replace("_ns", "").replace("_", " ")


def _generic(fact: str, v) -> str:
    """A fact with no words of its own: its name in words and its value."""
    name = _human(fact)
    if isinstance(v, bool):
        return name if v else f"no {name}"
    if v is None or (isinstance(v, (dict, list, tuple)) and not v):
        return f"no {name}"
    if _int(v) and fact.endswith("_ns"):
        return f"{name} {fmt_ns(v)}"
    if isinstance(v, dict):
        parts = [f"{str(k).replace('_', ' ')} {b}" for k, b in v.items()
                 if b not in (None, False, "", 0) and not isinstance(b, (dict, list))]
        return f"{name}: {', '.join(parts[:3])}" if parts else f"no {name}"
    if isinstance(v, (list, tuple)):
        return f"{name}: {', '.join(str(i) for i in v[:3])}"
    return f"{name} {v}"


def together_words(both: dict, actions: list[dict]) -> str:
    """Which to-do items the replay pulled at once: their numbers and the changes in words
    (the models' ids stay in the JSON's ``what_if.levers_together.models``)."""
    from ..verdict.whatif import MODEL_OF

    parts = []
    for m in both.get("models") or []:
        at = next((i for i, x in enumerate(actions, 1)
                   if MODEL_OF.get(x.get("id")) == m and x.get("basis") == "replay"), None)
        what = MODEL_WORDS.get(m, m.replace("_", " "))
        parts.append((at or 10**6, f"{at}. {what}" if at else what))
    return ", ".join(p for _, p in sorted(parts, key=lambda t: t[0]))


def busy_note(busy_id: str, withdrawn: list[dict] | None) -> str:
    """Where a busy-time lever of the GPU-use section stands in the to-do list: the item
    that carries its change, or why none does ('' when the verdict does not say)."""
    for w in withdrawn or []:
        if w.get("busy") != busy_id:
            continue
        if w.get("in_list"):
            return f"to-do item {w['in_list']}"
        if w.get("reason"):
            return f"not in the to-do list: {w['reason']}"
    return ""
