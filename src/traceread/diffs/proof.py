"""Promised vs realised: did the lever save what the before-trace's replay said it would?

``traceread diff BEFORE AFTER`` finds the lever(s) that changed between the two programs
from the traces' own evidence (``changed``: DataLoader workers appeared, the syncs per step
fell, CUDA graphs are replayed, the optimizer became fused, empty_cache() went, ...),
prices exactly that change on BEFORE's replayed step graph (passes/replay/whatif.py: the
models, combined when several levers changed, with the change's own parameters -- the
batch factor, the workers) and sets it beside the measured step difference:

    promised = replay(BEFORE) - replay(BEFORE with the change)     (per step)
    realised = BEFORE's program step - AFTER's                      (per step; per sample
                                                                     of BEFORE's batch when
                                                                     the batch changed)

The program step (passes/steps.program_step) is, per step, the later of the host's span and
the GPU's work for it: on a GPU-bound pair whose host runs ahead the host's span barely
moves while the GPU's step falls. ``error_pct`` sets the promise and the realised saving on
the same step (``error_pct``).

Where BEFORE cannot be replayed the promise is the before-verdict's own saving for that
lever (levers.saving), labelled ``bound``.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..passes import attribution as attr
from ..passes.attribution import ALLOC_API_RX
# the layout conversion kernels: cuDNN's nchwToNhwc and kin, MIOpen's batched_transpose_ (one
# pattern, passes/busy.py LAYOUT_PATTERN, for the busy split, precision, the replay and here)
from .. import namerx
from ..passes.busy import LAYOUT_PATTERN
LAYOUT_RX = namerx.compile(LAYOUT_PATTERN)   # the very object precision.py compiles
from ..table import GPU_OP_KINDS

EMPTY_CACHE_RX = re.compile(r"(?i)empty_cache|emptyCache")
# the host's untraced work is a continuous figure: a fall under 5% of the step is run-to-run
# noise, not a lever pulled (gpu/gpu.{bad,fixed}.sqlite: one program run twice, 0.18 -> 0.07 ms of a 14.4 ms step)
HOST_FALL_SHARE = 0.05
TRITON_RX = re.compile(r"^triton_|^cpp_fused|^kernel_cpp|Torch-Compiled Region|CompiledFunction")
# a CPU op this many times the median of its own kind (name and shapes: the same work), and
# STALL_MIN_NS longer, was taken off the CPU mid-run: the capture's machine was busy
STALL_X = 20
STALL_MIN_NS = 1_000_000
# a saving is not judged where either side's stalls per step reach this share of it
STALL_SHARE = 0.25
STALL_OP_RX = re.compile(r"^aten::|Backward\d*$")   # compute ops: none waits on a peer or device


def signature(a) -> dict:
    """What a program does, per analysed step, as the levers read it (evidence only)."""
    c = a.context or {}
    steps = max(1, len(a.steps)) if a.step_source != "whole_trace" else 1
    ev = _window_events(a)
    names = ev["name"].astype(str) if ev is not None else None

    def count(rx, kinds=None) -> float:
        if names is None:
            return 0.0
        m = names.map(lambda s: bool(rx.search(s))).to_numpy(bool).copy()
        if kinds:
            m &= ev["kind"].isin(kinds).to_numpy()
        return float(m.sum()) / steps

    opt = c.get("optimizer") or {}
    dt = c.get("dtypes") or {}
    by_cpu = (a.attribution or {}).get("by_cpu") or {}
    return {
        "workers": bool(c.get("dataloader_workers")),
        "loads_on_thread": bool(c.get("dataloader_single")),
        "worker_restarts": int((c.get("dataloader_restarts") or {}).get("restarts") or 0),
        "syncs_per_step": max(float(c.get("syncs_per_step") or 0), _syncs(ev) / steps),
        "own_syncs_per_step": {k: v / steps for k, v in _own_syncs(ev).items()},
        "compiled": bool(c.get("compiled")) or count(TRITON_RX) > 0,
        "graphs_replayed": int((a.graphs or {}).get("replays") or 0) > 0,
        # how much of the step the graphs hold: their launches a step, their share of the
        # GPU's busy time (a step captured in part replays a few graphs between its syncs)
        "graph_launches_per_step": int((a.graphs or {}).get("replays") or 0) / steps,
        "graph_replay_share_pct": float((a.graphs or {}).get("replay_share_pct") or 0),
        "graphs_not_replayed": bool(c.get("graphs_not_replayed")),
        "fused_optimizer": bool(c.get("fused_optimizer")) or opt.get("impl") == "fused",
        "empty_cache_per_step": count(EMPTY_CACHE_RX),
        "driver_allocs_per_step": count(ALLOC_API_RX, ("runtime", "driver")),
        "pageable_ns": int((a.copies or {}).get("pageable_ns") or 0),
        "exposed_copy_ns": int((a.copies or {}).get("exposed_ns") or 0),
        # recompiles the host named (dynamo ranges), or the gaps an nsys capture shows ending
        # in freshly built code (passes/compile.py untraced_compile)
        "recompiles": int((a.compile or {}).get("recompiles") or 0)
        or int(c.get("untraced_compile_gaps") or 0),
        "lowp": bool(dt.get("bf16") or dt.get("fp16")),
        "tf32": bool(dt.get("tf32")),
        "layout_kernels_per_step": count(LAYOUT_RX, ("kernel",)),
        "host_untraced_ns": int(by_cpu.get("untraced", 0) + by_cpu.get("python", 0)) // steps,
        "step_ns": _step_ns(a),
    }


def _step_ns(a) -> int:
    """The program's step (the diff's), else the host's mean step; 0 without steps."""
    from ..passes.steps import program_step_of

    if a.step_source == "whole_trace" or not len(a.steps):
        return 0
    prog = program_step_of(a) or {}
    return int(prog.get("mean_ns") or (a.step_stats or {}).get("mean_ns") or 0)


def _syncs(ev) -> float:
    """Blocking sync calls and .item() ops in the window (attribution.sync_calls), the
    .item() counted once (not again for the stream sync it makes), none inside a compile
    frame (gpu/compile.bad's recompiles autotune: 'syncs per step 2 -> 1' named drop_syncs
    beside the change, no_recompile)."""
    if ev is None or not len(ev):
        return 0.0
    rows = attr.sync_calls(ev)
    rows = np.flatnonzero(rows) if rows.dtype == bool else rows
    rows = rows[~attr.inside_compile(ev, rows)]   # the compiler's autotuning syncs
    names = ev["name"].astype(str).to_numpy(object)[rows]
    items = sum(1 for x in names if x.startswith("aten::item"))
    api = sum(1 for x in names if not x.startswith("aten::"))
    return float(items if items else api)


# blocking syncs an op makes itself, not the program: a compiled graph's call (CUDA graph
# trees warming up a new shape: torch.cuda.synchronize() inside it) and a pageable
# host-to-device copy (staged through a bounce buffer, then the stream synced)
COMPILED_CALL_RX = re.compile(r"^## Call CompiledFxGraph|^Torch-Compiled Region|^CompiledFunction$")
COPY_OP_RX = re.compile(r"^aten::(?:copy_|to|_to_copy)$")
ITEM_RX = re.compile(r"^aten::(?:item|_local_scalar_dense)$")
# the change that takes each kind's syncs with it
OWN_SYNCS_OF = {"compiled_call": ("replay_graphs", "no_recompile", "cuda_graphs"),
                "copy": ("pin_copies", "overlap_copies")}
OWN_SYNCS_TEXT = {"compiled_call": "made by the compiled code's own machinery (CUDA graph "
                                   "trees warming up a new shape, the autotuner timing "
                                   "its kernels)",
                  "copy": "made by the pageable copy itself, staged through the host"}


def _own_syncs(ev) -> dict[str, int]:
    """Blocking sync calls in the window that an op made itself (``OWN_SYNCS_OF`` kinds):
    inside a compiled graph's call on their thread (not under an .item(): a compiled read of
    a value is the program's), or inside a copy op that copies host to device. gpu/graphs.bad
    (a new batch size each step): 'syncs per step 2 -> 1' named drop_syncs beside
    replay_graphs, where the one gone was the cudaDeviceSynchronize inside '## Call
    CompiledFxGraph ##' -- the program's own .item() stayed."""
    out = {k: 0 for k in OWN_SYNCS_OF}
    if ev is None or not len(ev):
        return out
    rows = attr.sync_calls(ev)
    rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, np.int64)
    names = ev["name"].astype(str).to_numpy(object)
    rows = rows[[not x.startswith("aten::") for x in names[rows]]]   # the API calls
    if not len(rows):
        return out
    host = np.flatnonzero(ev["kind"].isin(("cpu_op", "annotation", "user_annotation",
                                            "python")).to_numpy())
    codes, uniq = pd.factorize(names[host])   # each distinct name matched once

    def named(rx) -> np.ndarray:
        return host[np.array([bool(rx.match(str(x))) for x in uniq], bool)[codes]] \
            if len(uniq) else host[:0]
    item, comp, copies = named(ITEM_RX), named(COMPILED_CALL_RX), named(COPY_OP_RX)
    mine = _inside(ev, rows, comp) & ~_inside(ev, rows, item)
    # no op traced around the call (nsys: NVTX step ranges at most)
    ops = np.flatnonzero(ev["kind"].isin(("cpu_op", "python")).to_numpy())
    bare = ~_inside(ev, rows, ops)
    mine |= bare & _warms_up_graphs(ev, rows)
    out["compiled_call"] = int(mine.sum())
    out["copy"] = int((_inside(ev, rows, _htod(ev, copies)) & ~mine).sum()) + \
        _bare_copy_syncs(ev, rows[bare & ~mine], ops)
    return out


DEVICE_SYNC_RX = re.compile(r"^(?:cuda|hip)DeviceSynchronize|^cuCtxSynchronize")
# the calls around a device-wide sync in a run the runtime's user makes for itself: graph
# trees moving to their side stream (an event waited on), an autotuner timing its
# candidates (events recorded around their launches, their times read back after) and
# loading the next one's code (a module or library loaded)
OWN_RUN_RX = re.compile(r"^(?:cuda|hip|cu)(?:StreamWaitEvent|EventRecord|EventQuery"
                        r"|EventElapsedTime|(?:Module|Library)Load)")


def _next_calls(ev, rows: np.ndarray):
    """(the API rows in time order, each of ``rows``' position among them, their threads):
    for walking from a call to the calls after it on its thread."""
    api = np.flatnonzero(ev["kind"].isin(("runtime", "driver")).to_numpy())
    api = api[np.argsort(ev["ts"].to_numpy(np.int64)[api], kind="stable")]
    key = attr.thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    at = pd.Index(api).get_indexer(rows)
    return api, at, key


def _warms_up_graphs(ev, rows: np.ndarray) -> np.ndarray:
    """Of the sync calls ``rows``, the device-wide syncs whose thread then waits on an event
    or records one (``OWN_RUN_RX``) among its next calls: CUDA graph trees warming up a new
    shape -- ``torch.cuda.synchronize()``, then the eager run on their side stream (nsys
    gpu/graphs.bad: one a step, the Kineto capture of the same run shows it inside ``## Call
    CompiledFxGraph``; AFTER replays the graphs and makes none) -- and an autotuner timing
    its candidate kernels (a sync, events recorded around their launches, a sync; a sync,
    one launch, a sync, the next candidate's code loaded: nsys gpu/compile.bad's
    recompiling steps, 4.4 of their 5.4 syncs a step; Kineto shows them inside
    ``CachingAutotuner.benchmark_all_configs``)."""
    names = ev["name"].astype(str).to_numpy(object)
    out = np.zeros(len(rows), bool)
    dev = np.array([bool(DEVICE_SYNC_RX.match(names[r])) for r in rows], bool)
    if not dev.any():
        return out
    api, at, key = _next_calls(ev, rows)
    for i in np.flatnonzero(dev & (at >= 0)).tolist():
        near = [j for j in api[max(at[i] - 8, 0):at[i] + 9].tolist()   # the calls around it
                if key[j] == key[rows[i]] and j != rows[i]]
        out[i] = any(OWN_RUN_RX.match(names[j]) for j in near)
    return out


def _bare_copy_syncs(ev, rows: np.ndarray, ops: np.ndarray) -> int:
    """Where no op is traced around the calls (nsys): a pageable host-to-device copy's call
    (it blocks while the host stages it: passes/blocking.py counts it) and the sync call
    that is the next call on its thread (PyTorch's copy from pageable memory syncs its
    stream): the copy's own, not the program's. nsys gpu/copy.bad: a 64 MiB pageable
    cudaMemcpyAsync (7 ms) then a cudaStreamSynchronize a step; AFTER's pinned copy makes
    neither ('syncs per step 3 -> 1' named drop_syncs beside pin_copies)."""
    calls = _htod_calls(ev)
    calls = calls[~_inside(ev, calls, ops)]
    if not len(calls):
        return 0
    names = ev["name"].astype(str).to_numpy(object)
    n = int(_pageable_call(ev, calls).sum())
    api, at, key = _next_calls(ev, calls)
    sync = set(np.asarray(rows).tolist())
    for i in np.flatnonzero(at >= 0).tolist():
        nxt = [j for j in api[at[i] + 1:at[i] + 4].tolist() if key[j] == key[calls[i]]
               and not names[j].startswith("cudaStreamIsCapturing")]
        n += bool(nxt) and nxt[0] in sync
    return n


def _htod(ev, ops: np.ndarray) -> np.ndarray:
    """Of the host ops ``ops``, those that made a host-to-device copy (a runtime copy call
    on their thread, within their span, correlated with an HtoD GPU copy)."""
    if not len(ops):
        return ops[:0]
    calls = _htod_calls(ev)
    if not len(calls):
        return ops[:0]
    return ops[_holds(ev, ops, calls)]


def _htod_calls(ev) -> np.ndarray:
    """The runtime / driver calls correlated with a host-to-device GPU copy."""
    if "correlation" not in ev or "copy_kind" not in ev:
        return np.zeros(0, np.int64)
    kind = ev["copy_kind"].astype(str).to_numpy(object)
    corr = ev["correlation"].to_numpy()
    htod = set(corr[(kind == "HtoD") & ev["kind"].isin(GPU_OP_KINDS).to_numpy()].tolist())
    return np.flatnonzero(ev["kind"].isin(("runtime", "driver")).to_numpy()
                          & np.isin(corr, list(htod)))


PAGEABLE_RX = re.compile(r"(?i)pageable")


def _pageable_call(ev, calls: np.ndarray) -> np.ndarray:
    """Per call of ``calls``: its GPU copy reads pageable host memory (the copy's name, or
    nsys' ``raw_name``)."""
    corr = ev["correlation"].to_numpy()
    gpu = np.flatnonzero(ev["kind"].isin(GPU_OP_KINDS).to_numpy())
    text = [str(x) for x in ev["name"].to_numpy(object)[gpu]]
    if "raw_name" in ev:
        text = [t + " " + str(r) for t, r in zip(text, ev["raw_name"].to_numpy(object)[gpu])]
    paged = set(corr[gpu][[bool(PAGEABLE_RX.search(t)) for t in text]].tolist())
    return np.isin(corr[calls], list(paged))


def _holds(ev, ops: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per op of ``ops``: some row of ``rows`` starts within its span on its thread."""
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    key = attr.thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    out = np.zeros(len(ops), bool)
    for k in np.unique(key[ops]).tolist():
        at = np.flatnonzero(key[ops] == k)
        starts = np.sort(ts[rows[key[rows] == k]])
        i = np.searchsorted(starts, ts[ops[at]], side="left")
        ok = i < len(starts)
        out[at[ok]] = starts[i[ok]] <= end[ops[at[ok]]]
    return out


def _inside(ev, rows: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """Which of ``rows`` run within one of ``frames`` on their own thread (the frames of a
    thread merged: nested frames are one stretch)."""
    from ..passes import intervals

    out = np.zeros(len(rows), bool)
    if not len(rows) or not len(frames):
        return out
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    key = attr.thread_key(ev["pid"].to_numpy().copy(), ev["tid"].to_numpy().copy())
    for k in np.unique(key[frames]).tolist():
        f = frames[key[frames] == k]
        s, e = intervals.union(ts[f], end[f])
        at = np.flatnonzero(key[rows] == k)
        i = np.searchsorted(s, ts[rows[at]], side="right") - 1
        ok = i >= 0
        out[at[ok]] = end[rows[at[ok]]] <= e[i[ok]]
    return out


def _window_events(a):
    if a.trace is None:
        return None
    ev = a.trace.events
    w = a.window
    if w is None:
        return ev
    ts = ev["ts"].to_numpy(np.int64)
    return ev[(ts >= int(w.start)) & (ts < int(w.end))]


def changed(b: dict, a: dict, batch: dict | None = None) -> list[tuple[str, str, dict]]:
    """(whatif model id, evidence, params) for each lever the two signatures show pulled."""
    out = []
    if b["loads_on_thread"] and not b["workers"] and a["workers"]:
        out.append(("workers", "DataLoader worker processes appeared", {}))
    if b.get("worker_restarts") and a["workers"] and not a.get("worker_restarts"):
        out.append(("persistent_workers", "DataLoader workers no longer started again at each "
                                          f"epoch: {b['worker_restarts']} restarts -> none", {}))
    at = len(out)   # drop_syncs, if the program dropped a sync, is named here
    if b["empty_cache_per_step"] > 0 and a["empty_cache_per_step"] == 0 or \
            b["driver_allocs_per_step"] >= 2 and a["driver_allocs_per_step"] <= \
            0.1 * b["driver_allocs_per_step"]:
        out.append(("no_empty_cache", f"device frees/mallocs per step "
                                      f"{b['driver_allocs_per_step']:g} -> "
                                      f"{a['driver_allocs_per_step']:g}", {}))
    if b["graphs_not_replayed"] and not a["graphs_not_replayed"] and a["graphs_replayed"]:
        out.append(("replay_graphs", "the program's CUDA graphs are replayed now", {}))
    elif b["recompiles"] > 0 and a["recompiles"] == 0:
        out.append(("no_recompile", f"recompiles {b['recompiles']} -> {a['recompiles']}"
                    + (", CUDA graphs replayed" if a["graphs_replayed"] else ""), {}))
    if not b["graphs_replayed"] and not b["graphs_not_replayed"] and a["graphs_replayed"]:
        out.append(("cuda_graphs", _graphs_evidence(a), {}))
    if not b["compiled"] and a["compiled"] and not a["graphs_replayed"]:
        out.append(("fuse_pointwise", "torch.compile'd code runs", {}))
    if not b["fused_optimizer"] and a["fused_optimizer"]:
        out.append(("fused_optimizer", "the optimizer runs fused", {}))
    if b["pageable_ns"] > 0 and a["pageable_ns"] <= 0.05 * b["pageable_ns"]:
        out.append(("pin_copies", "pageable copies became pinned", {}))
    if b["exposed_copy_ns"] > 0 and a["exposed_copy_ns"] < 0.2 * b["exposed_copy_ns"] and \
            b["pageable_ns"] > 0:
        out.append(("overlap_copies", "copies no longer exposed (issued early)", {}))
    if not b["lowp"] and a["lowp"]:
        out.append(("bf16", "bf16/fp16 kernels appeared", {}))
    elif not b["tf32"] and a["tf32"]:
        out.append(("tf32", "TF32 kernels appeared", {}))
    if b["layout_kernels_per_step"] > 0 and a["layout_kernels_per_step"] == 0:
        out.append(("channels_last", "layout conversion kernels gone", {}))
    if batch and batch.get("before") and batch.get("after") and \
            batch["after"] > batch["before"]:
        out.append(("larger_batch", f"batch {batch['before']} -> {batch['after']}",
                    {"x": batch["after"] / batch["before"], "batch": batch["before"]}))
    out[at:at] = _dropped_syncs(b, a, out)
    fell = b["host_untraced_ns"] - a["host_untraced_ns"]
    if not out and b["host_untraced_ns"] > 0 and \
            a["host_untraced_ns"] < 0.5 * b["host_untraced_ns"] and \
            fell >= HOST_FALL_SHARE * b.get("step_ns", 0):
        out.append(("host_off_path", "the host's untraced work between ops fell "
                                     f"{b['host_untraced_ns'] / 1e6:.1f} -> "
                                     f"{a['host_untraced_ns'] / 1e6:.1f} ms per step", {}))
    return out


def _graphs_evidence(a: dict) -> str:
    """What AFTER's graphs hold, BEFORE replaying none (HTA trace_diff: 2 launches a step,
    37% of the GPU's busy time -- parts of the step, not the step in one graph)."""
    n, share = a.get("graph_launches_per_step"), a.get("graph_replay_share_pct")
    if not n:
        return "CUDA graphs replayed in AFTER, none in BEFORE"
    of = f", {share:.0f}% of its GPU busy time" if share else ""
    return f"CUDA graphs replayed in AFTER: {n:g} graph launches a step{of}; none in BEFORE"


def _dropped_syncs(b: dict, a: dict, out: list) -> list[tuple[str, str, dict]]:
    """drop_syncs when the program made one whole sync a step fewer (1 -> 1/11, a last
    sync after the loop, is one) -- not counting the syncs a changed op made itself and
    took with it (``OWN_SYNCS_OF``): those are the change's, said in its evidence (in
    ``out``, in place). gpu/copy.bad -> copy.fixed: the one sync gone was the pageable
    copy's own cudaStreamSynchronize inside aten::copy_, gone with pin_copies; the
    program's .item() stayed."""
    bs, as_ = b["syncs_per_step"], a["syncs_per_step"]
    named = {m for m, _, _ in out}
    for kind, models in OWN_SYNCS_OF.items():
        gone = (b.get("own_syncs_per_step") or {}).get(kind, 0) - \
            (a.get("own_syncs_per_step") or {}).get(kind, 0)
        first = next((i for i, (m, _, _) in enumerate(out) if m in models), None)
        if gone <= 0 or first is None or not named & set(models):
            continue
        bs -= gone
        m, e, p = out[first]
        out[first] = (m, f"{e}; gone with it, {gone:g} sync a step {OWN_SYNCS_TEXT[kind]}", p)
    if bs >= 1 and as_ <= 0.5 * bs and round(bs) - round(as_) >= 1:
        # the syncs AFTER still makes a step stay (the model keeps each step's last ones)
        keep = int(round(as_))
        return [("drop_syncs", f"blocking syncs per step {bs:g} -> {as_:g}",
                 {"keep": keep} if keep else {})]
    return []


def proof(before, after, d) -> dict | None:
    """{"levers": [model ids], "evidence": [...], "promised_ns", "realised_ns", "basis":
    "replay" | "bound", "error_pct", "refused"} for the diff ``d`` of two analyses; None
    when no lever's evidence changed."""
    from ..passes.replay.whatif import facts_from_analysis, graph_of, replay_models

    ch = changed(signature(before), signature(after), d.batch)
    # the step anatomy's changes (verdict/anatomy.py): a validation pass or micro-batches
    # gone take their .item() syncs with them -- not a drop_syncs of its own
    from ..verdict.anatomy import anatomy_changes
    anat = anatomy_changes(before.context or {}, after.context or {})
    if any(x["sync_drop"] for x in anat):
        ch = [x for x in ch if x[0] != "drop_syncs"]
    if not ch and anat:
        return _anatomy_proof(anat, d, step_noise(before, after, d), before, after)
    if not ch:
        return None
    ids = [m for m, _, _ in ch]
    params = {m: p for m, _, p in ch}
    realised = _realised(d)
    out = {"levers": ids, "evidence": [e for _, e, _ in ch], "realised_ns": realised,
           "promised_ns": None, "basis": None, "refused": {}}
    graph, why = graph_of(before)
    if graph is not None:
        r = replay_models(graph, facts_from_analysis(before), ids, params)
        # every lever refused: the replay priced nothing, it did not promise 0 (HTA
        # trace_diff: cuda_graphs "promised 0 ns" where a sync between launches refused it)
        applied = [m for m in ids if m not in r["refused"]]
        out.update(promised_ns=r["saves_ns"] if applied else None, basis="replay",
                   refused=r["refused"],
                   replay_before_ns=r["before_ns"], replay_after_ns=r["after_ns"])
        n = r["params"].get("workers", {}).get("workers")
        if n and not params.get("workers"):   # the count is not in the traces: say it
            out["evidence"] = [e + f" (promise for {n} workers: the fewest that hide the load,"
                               " +1)" if m == "workers" else e
                               for (m, _, _), e in zip(ch, out["evidence"])]
    else:
        out.update(promised_ns=_bound(before, ids), basis="bound", not_replayed=why)
    if anat:
        out["anatomy"] = anat
    p, r = out["promised_ns"], out["realised_ns"]
    ref = out.get("replay_before_ns")
    out["promised_pct"] = round(100.0 * p / ref, 2) if p is not None and ref else None
    mb = d.before.get(d.time_key()) if d.unit == "step" else None
    out["realised_pct"] = round(100.0 * r / mb, 2) if r is not None and mb else None
    out["error_pct"] = error_pct(p, r, ref, mb)
    _without_profiler(out, before, after, d, ref)
    _within_noise(out, step_noise(before, after, d))
    _stalled(out, before, after, d)
    return out


def step_noise(before, after, d) -> int | None:
    """Two standard errors of the difference of the two sides' mean steps (on the diff's
    step; per sample x BEFORE's batch when the batch changed), None under 2 steps a side.
    A realised saving below it is not a measured one: h200/queue's 3 + 3 Kineto steps vary
    by ± 571 us, its 31 us saving (without the profiler) is inside that."""
    if d.unit != "step":
        return None
    col = "program_ns" if d.time_key() == "program_step_ns" else "dur"
    xs = []
    for a in (before, after):
        st = a.steps
        if a.step_source == "whole_trace" or col not in st or len(st) < 2:
            return None
        xs.append(st[col].to_numpy(np.float64))
    bb, ba = (d.batch["before"], d.batch["after"]) if d.per_sample() is not None else (1, 1)
    var = xs[0].var(ddof=1) / len(xs[0]) / bb ** 2 + xs[1].var(ddof=1) / len(xs[1]) / ba ** 2
    return int(round(2 * float(np.sqrt(var)) * bb))


def _within_noise(out: dict, noise: int | None) -> None:
    """No error is measured where the realised saving (the one error_pct is taken on) is
    within the steps' noise: set against a promise it would be a ratio of noise."""
    from ..render.text import fmt_ns

    out["noise_ns"] = noise
    r = out.get("realised_unprofiled_ns")
    r = out["realised_ns"] if r is None else r
    if noise is None or r is None or out.get("error_pct") is None or abs(r) >= noise:
        return
    p = out.get("promised_ns")
    beyond = f"; the promise ({fmt_ns(p)}) lies beyond it" \
        if p is not None and abs(p - r) >= noise else ""
    out.update(error_pct=None,
               not_judged=f"the realised saving ({fmt_ns(r)}) is within the steps' noise "
                          f"(± {fmt_ns(noise)}: two standard errors of the two mean steps)"
                          + beyond)


def _unprofiled(a) -> dict | None:
    """The analysis's profiler-overhead estimate (passes/overhead.py) where it is material."""
    facts = getattr(a, "facts", None)
    o = ((getattr(facts, "figures", None) or {}) if facts is not None else {}).get(
        "profiler_overhead")
    return o if o and o.get("unprofiled_step_ns") else None


def _without_profiler(out: dict, before, after, d, ref) -> None:
    """Judge the promise on the steps without the profiler where either trace pays it
    materially: the replay prices host work without the profiler's per-op cost, and two
    captures can pay very different costs (h200/queue: 3.4 ms of a 15.1 ms step before, 0.7
    ms after) -- the profiled difference (2.76 ms) is then mostly the profiler's, the
    programs' own 58 us (plain runs) what the 57 us promise is to be set against."""
    ob, oa = _unprofiled(before), _unprofiled(after)
    if ob is None or oa is None or not (ob.get("material") or oa.get("material")) \
            or d.unit != "step" or d.per_sample() is not None:
        return
    ub, ua = int(ob["unprofiled_step_ns"]), int(oa["unprofiled_step_ns"])
    out["realised_unprofiled_ns"] = ub - ua
    out["unprofiled_steps_ns"] = [ub, ua]
    out["realised_unprofiled_pct"] = round(100.0 * (ub - ua) / ub, 2) if ub else None
    out["error_pct"] = error_pct(out["promised_ns"], ub - ua, ref, ub)


def error_pct(promised, realised, promised_base, realised_base) -> float | None:
    """(promised - realised) / |realised| in percent, like with like: when both have their
    own step (the replayed step, the program's step) the promise is first put on the
    realised saving's step (promised / its base x the program step), so a replay whose step
    is the host's span is not set against a saving on the GPU-paced step."""
    if promised is None or not realised:
        return None
    if promised_base and realised_base:
        promised = promised / promised_base * realised_base
    return round(100.0 * (promised - realised) / abs(realised), 1)


def _anatomy_proof(anat: list[dict], d, noise: int | None, before, after) -> dict:
    """The proof of a pair whose only changes are the step anatomy's: promised by the
    before-program's own saving models (the phases', no bound: ``basis`` anatomy, as the
    verdict's actions say), realised as measured."""
    got = [x["promised_per_step_ns"] for x in anat if x["promised_per_step_ns"] is not None]
    p, r = (sum(got) if got else None), _realised(d)
    mb = d.before.get(d.time_key()) if d.unit == "step" else None
    out = {"levers": [x["lever"] for x in anat], "evidence": [x["evidence"] for x in anat],
           "realised_ns": r, "promised_ns": p, "basis": "anatomy", "refused": {},
           "anatomy": anat, "error_pct": error_pct(p, r, None, None), "promised_pct": None,
           "realised_pct": round(100.0 * r / mb, 2) if r is not None and mb else None}
    _within_noise(out, noise)
    _stalled(out, before, after, d)
    return out


def stalled_per_step(a) -> int | None:
    """On a CPU-only trace: the time per analysed step inside compute ops (aten ops, autograd
    nodes) that ran STALL_X x the median of their own kind and STALL_MIN_NS longer -- the
    process was descheduled inside them (pairs/compile BEFORE, recorded on a shared 2-core
    machine: aten::add 10.3 ms where its 31 peers take 0.2 ms). None: a GPU trace (its ops
    wait on the device) or no steps."""
    from ..passes import intervals as iv

    t = getattr(a, "trace", None)
    st = a.steps
    if t is None or not len(st) or t.events["kind"].isin(GPU_OP_KINDS).any():
        return None
    ev = t.events
    # the steps' own process: a DataLoader worker's stall does not hold the step
    op = ev[(ev["kind"] == "cpu_op").to_numpy() & ev["pid"].isin(st["pid"].unique()).to_numpy() &
            ev["name"].astype(str).str.contains(STALL_OP_RX).to_numpy()]
    if not len(op):
        return 0
    key = op["name"].astype(str)
    if "input_dims" in op:
        key = key + "|" + op["input_dims"].astype(str)
    key = key.to_numpy()
    dur = op["dur"].to_numpy(np.int64)
    g = pd.Series(dur).groupby(key)
    med, n = g.transform("median").to_numpy(), g.transform("size").to_numpy()
    bad = (n >= 3) & (dur >= STALL_X * med) & (dur - med >= STALL_MIN_NS)
    ts = op["ts"].to_numpy(np.int64)
    stalls = iv.union(ts[bad], ts[bad] + dur[bad])
    steps = iv.union(st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64))
    return int(iv.total(iv.intersect(stalls, steps)) / len(st))


def _stalled(out: dict, before, after, d) -> None:
    """No error is measured where either capture's steps were descheduled mid-op for a
    material share of the realised saving: the difference is then the machine's load, not
    the program's change (pairs/compile: BEFORE's stalls 9.9 ms a step, the profiled saving
    16.5 ms, the unprofiled one 0.3 ms -- the 3.6 ms promise was the right one)."""
    from ..render.text import fmt_ns

    r = out.get("realised_unprofiled_ns")
    r = out.get("realised_ns") if r is None else r
    if out.get("error_pct") is None or not r or d.unit != "step" or d.per_sample() is not None:
        return
    sb, sa = stalled_per_step(before), stalled_per_step(after)
    if sb is None or sa is None or max(sb, sa) < STALL_SHARE * abs(r):
        return
    out.update(error_pct=None,
               not_judged=f"the captures were descheduled mid-op (a busy machine): "
                          f"{fmt_ns(sb)} a step BEFORE, {fmt_ns(sa)} AFTER in ops that ran "
                          f"{STALL_X}x or more their own kind's median -- the realised saving "
                          f"({fmt_ns(r)}) is partly the machine's load")


def _realised(d) -> int | None:
    """The measured saving per step (per sample x BEFORE's batch when the batch changed)."""
    ps = d.per_sample()
    if ps is not None and ps["delta"] is not None:
        return int(round(-ps["delta"] * d.batch["before"]))
    return d.saving()["realised_ns"]


def _bound(a, ids: list[str]) -> int | None:
    """The before-verdict's largest per-step saving among the levers these models price."""
    from ..verdict.whatif import levers_of

    levers = {lv for m in ids for lv in levers_of(m)}
    got = [x.get("saves_per_step_ns") for x in (a.verdict or {}).get("actions", [])
           if x["id"] in levers and x.get("saves_per_step_ns") is not None]
    return max(got) if got else None
