"""Every bound the verdict can name, in one place: its title and what it means.

The levers themselves -- text, cost, saving model and the evidence each needs -- are one
table in verdict/levers.py.
"""
from __future__ import annotations

# The causes that explain lost GPU time, in tie-break order (the passes measure each one's
# share of the idle time: passes/causes.py, a figure of the facts record).
from ..passes.facts import CAUSES
# Every verdict: a cause above, or one of these (cold_start / jit: passes/steady.py).
VERDICTS = CAUSES + ("gpu", "mixed", "unknown", "cpu_only", "cold_start", "jit")
COST_ORDER = {"free": 0, "code": 1, "infra": 2}

TITLE = {
    "data": "input-bound: the GPU waits for the DataLoader",
    "copy": "copy-bound: host<->device copies take the GPU's time",
    "sync": "sync-bound: blocking host syncs drain the GPU queue",
    "launch": "launch-bound: kernels are too small for the cost of launching them",
    "host": "host-bound: the launching thread is busy with other work",
    "comms": "communication-bound: collectives are exposed or the host waits on them",
    "compile": "compile-bound: the host compiles (dynamo/inductor) while the GPU idles",
    "graph_capture": "graph-capture-bound: the host records CUDA graphs while the GPU idles",
    "queued": "queued: the GPU had work queued and waited on a dependency or its front-end",
    "gpu": "GPU-bound: the GPU is densely busy; make the kernels cheaper",
    "mixed": "mixed: no single cause dominates the lost GPU time",
    "unknown": "unknown: the GPU idles while the host is not traced",
    "cpu_only": "CPU-only trace: no GPU activity recorded",
    "cold_start": "cold start: warm up, then profile",
    "jit": "JIT compilation in the window",
}

WHAT = {
    "data": "waiting for the DataLoader",
    "copy": "in host<->device copies: the GPU copying with no compute beside it, or the host "
            "staging pageable memory",
    "sync": "refilling the queue after blocking host syncs",
    "launch": "launch overhead between short kernels",
    "host": "the launching thread busy with non-launch work",
    "comms": "in exposed or blocking communication",
    "compile": "while the host compiled (dynamo/inductor)",
    "graph_capture": "while the host recorded CUDA graphs",
    "queued": "with the next operation already queued (not the host's doing)",
}

# The lever lists by cause (and the variants the old fixed lists had), as the lever table
# (levers.py) offers them when the context is unknown or the variant's flag is set.
# The verdict itself asks the table with the trace's context; these serve readers of the
# per-cause lists (multirank's straggler levers, tests).
def _lists() -> dict[str, list[tuple[str, str]]]:
    from . import levers as L

    def of(cause, keep=lambda lv: True, **ctx):
        return [(lv.words(ctx), lv.cost) for lv in L.rows(cause, ctx) if keep(lv)]
    out = {c: of(c) for c in CAUSES + ("cpu_only", "unknown")}
    out["gpu"] = of("gpu", lambda lv: lv.saves == "none", bound="gpu")
    out["data_workers"] = of("data", dataloader_workers=True)
    out["launch_graphs"] = of("launch", uses_cuda_graphs=True)
    out["host"] = of("host", lambda lv: lv.saves != "alloc")
    out["alloc"] = of("host", lambda lv: lv.saves == "alloc")
    out["alloc_uncached"] = of("host", lambda lv: lv.saves == "alloc", allocator_uncached=True)
    return out


LEVERS: dict[str, list[tuple[str, str]]] = _lists()


def lever_texts(key: str) -> list[str]:
    return [t for t, _ in LEVERS[key]]
