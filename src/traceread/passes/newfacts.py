"""The program facts the levers need beyond ``verdict/program.py``'s, each with its
evidence (``facts_evidence``: fact key -> [{"name", "ts_ns", "step", "detail"}]):

* ``blocking`` / ``syncs_per_step`` / ``capturable`` (passes/blocking.py);
* ``copy_payloads`` / ``optimizer_offload`` (passes/payload.py);
* ``gemm_precision_ns`` / ``autocast`` / ``convolution_ops`` / ``sdpa`` / ``channels_last``
  (passes/precision.py);
* ``periodic_stall`` (passes/stalls.py, over every step of the trace: the steady window
  leaves the stalled steps out);
* ``anatomy`` (passes/anatomy.py, over every step too): phases, micro-batches,
  recomputation, the odd steps out, the inference batch;
* ``dataloader_restarts`` (passes/dataloader.py): the DataLoader's workers started again at
  an epoch's start (persistent_workers=False), with the training thread's time it took;
* ``other_process``: GPU work of another process on the same device in the trace;
* ``cpu_only``: for a trace with no GPU work, what it holds -- compile time, the
  DataLoader's share of the steps, the heaviest host ops -- and whether it was cut before
  its first GPU event (``cut_before_gpu``: a truncated file whose header names a GPU;
  ``launches`` with no kernel in a whole file: the GPU side was not traced).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import namerx
from . import intervals
from .attribution import COMPILE_RX, DATALOADER_RX
from .blocking import blocking_calls
from .dataloader import worker_restarts
from .common import kind_in, name_codes, name_lut, name_table, rows_of
from .compile import compile_name_lut
from .cpudesign import device_backends
from .factkit import Steps, has_gpu, item, stacks_of
from .payload import copy_payloads
from .precision import precision_facts
from .anatomy import step_anatomy
from .stalls import periodic_stalls


def window_facts(ev: pd.DataFrame, meta=None, steps: Steps | None = None) -> dict:
    """The facts of the analysed window (module doc), as context keys; ``steps``: the
    analysis's steps (default: the window's ProfilerStep ranges)."""
    steps = steps if steps is not None else Steps(ev)
    stacks = stacks_of(ev)   # one nesting walk for the detectors (and the culprits')
    evidence: dict[str, list] = {}
    b = blocking_calls(ev, steps, stacks)
    evidence.update(b.pop("evidence"))
    p = copy_payloads(ev, steps, stacks)
    evidence.update(p.pop("evidence"))
    pr = precision_facts(ev, steps, stacks)
    evidence.update(pr.pop("evidence"))
    other = other_process(ev)
    if other:
        evidence["other_process"] = other.pop("evidence")
    out = {
        "cpu_only": None,
        "blocking": b,
        "syncs_per_step": b["blocking_per_step"],
        "capturable": b["capturable"],
        "dynamic_shapes_per_step": b["dynamic_shapes_per_step"],
        "copy_payloads": p["copies"], "payloads": p["payloads"],
        "optimizer_offload": p["optimizer_offload"],
        "other_process": other,
        **pr,
    }
    if pr.get("convolution_ops") is not None:   # operators decide, not kernel names
        out["convolutions"] = pr["convolution_ops"]
        out["convolutions_evidence"] = (evidence.get("convolutions") or [{}])[0].get("name")
    if pr.get("sdpa") and pr["sdpa"]["backend"] != "math":
        out["fused_attention"] = True
        out["fused_attention_evidence"] = evidence["sdpa"][0]["name"]
    lowp = {k for k, v in (pr.get("gemm_precision_ns") or {}).items() if v}
    if "fp16" in lowp or pr.get("autocast") == "fp16":
        out["fp16_runs"] = True
    restarts = worker_restarts(ev, steps)
    if restarts:
        evidence["dataloader_restarts"] = restarts.pop("evidence")
    out["dataloader_restarts"] = restarts
    if not has_gpu(ev):
        cpu = cpu_only(ev, steps, meta)
        evidence["cpu_only"] = cpu.pop("evidence")
        out["cpu_only"] = cpu
    # evidence under the fact keys the lever predicates read (verdict/because.py)
    for old, new in (("blocking_calls", "syncs_per_step"), ("copy_payloads", "payloads"),
                     ("dynamic_shapes", "dynamic_shapes_per_step"),
                     ("gemm_precision", "gemm_precision_ns")):
        if old in evidence:
            evidence[new] = evidence.pop(old)
    if out.get("fp16_runs"):
        evidence["fp16_runs"] = [e for e in evidence.get("gemm_precision_ns", [])
                                 if e["detail"].startswith("fp16")] or evidence.get("autocast", [])
    out["facts_evidence"] = {k: v for k, v in evidence.items() if v}
    return out


# torch.compile's own per-call work: the compiled graph's call, its wrappers and guards
COMPILED_CALL_RX = namerx.compile(r"^## Call CompiledFxGraph|^Torch-Compiled Region|^CompiledFunction"
                                  r"|^TorchDynamo Cache Lookup|cudagraph_trees\.py|torch/_dynamo/"
                                  r"eval_frame\.py|torch/_inductor/(?:output_code|utils|"
                                  r"compile_fx)\.py")


def compiled_call_host(host_culprit: str) -> bool:
    """The host culprit (passes/culprits.py: the frame that spans the host-bound time) is
    torch.compile's own per-call work, not the user's code: ``## Call CompiledFxGraph ##``,
    ``Torch-Compiled Region``, ``CompiledFunction``, dynamo's guard lookup, the CUDA graph
    trees' wrapper (when the named frame is the compiled call itself, not an op inside it)."""
    head = str(host_culprit or "").split(" spans ", 1)[0]
    return bool(head) and bool(COMPILED_CALL_RX.search(head))


LAUNCH_API_RX = namerx.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch\w*$"
                               r"|^(?:cuda|cu|hip)GraphLaunch\w*$")
TOP_HOST = 3
ATEN_RX = namerx.compile(r"aten::")   # (match: the name starts with it)


def cpu_only(ev: pd.DataFrame, steps: Steps, meta=None) -> dict:
    """What a trace with no GPU work holds: {"cut_before_gpu", "launches", "span_ns",
    "compile_ns", "compile_share", "dataloader_ns", "dataloader_share", "step_mean_ns",
    "top_ops": [{"name", "ns", "share"}], "evidence"}. Shares are of the steps' time when
    the trace has steps, else of the trace's span."""
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    span = int(end.max() - ts.min()) if len(ev) else 0
    evidence = []
    api = rows_of(ev, ("runtime", "driver"))
    launches = 0
    if len(api):
        col = ev["name"]
        lr = api[name_lut(col, LAUNCH_API_RX, "match").take(name_codes(col).take(api))]
        launches = int(len(lr))
        if launches:
            evidence.append(item(ev["name"].iat[lr[0]], ts[lr[0]], None,
                                 f"{launches} kernel launches recorded and no GPU event: "
                                 "the GPU side was not traced"))
    extra = getattr(meta, "extra", None) or {}
    truncated = bool(extra.get("truncated"))
    # a cut file that recorded a GPU (its devices, the CUDA/CUPTI versions, a process group on
    # a device backend: cuda:nccl) lost its GPU events -- torch.profiler writes them last
    gpu_recorded = bool(getattr(meta, "devices", None)) or bool(
        extra.get("cupti_version") or extra.get("cuda_runtime_version")) or bool(
        device_backends(getattr(meta, "distributed", None) or {}))
    if truncated and gpu_recorded and not launches:
        evidence.append(item("truncated", None, None,
                             f"the file is cut at byte {extra['truncated'].get('truncated_at_byte')}"
                             " and its header names a GPU: its GPU events were past the cut"
                             if isinstance(extra["truncated"], dict) else
                             "the file is cut and its header names a GPU"))
    if steps.count() > 1 or len(steps):
        base = int((steps.end - steps.start).sum())
        in_steps = True
    else:
        base, in_steps = span, False
    table = name_table(ev["name"])
    comp_ns, comp_ev = _union_of(ev, table.hits(COMPILE_RX) | compile_name_lut(table))
    data_ns, data_ev = _union_of(ev, table.hits(DATALOADER_RX), steps if in_steps else None)
    for r, what in ((comp_ev, "compile"), (data_ev, "DataLoader")):
        if r is not None:
            evidence.append(item(ev["name"].iat[r], ts[r], None, what))
    top = _top_ops(ev, steps if in_steps else None)
    # only a truncated file is "cut": launches with no kernel and the file whole mean the
    # GPU activities were not recorded (CUPTI range profiling, CUDA activities off)
    return {"cut_before_gpu": truncated and gpu_recorded,
            "launches": launches, "truncated": truncated, "span_ns": span,
            "compile_ns": comp_ns, "compile_share": round(comp_ns / span, 3) if span else 0.0,
            "dataloader_ns": data_ns,
            "dataloader_share": round(data_ns / base, 3) if base else 0.0,
            "step_mean_ns": int(base / len(steps)) if in_steps and len(steps) else None,
            "top_ops": [{"name": n, "ns": v, "share": round(v / base, 3) if base else 0.0}
                        for n, v in top],
            "evidence": evidence}


def _union_of(ev: pd.DataFrame, lut: np.ndarray, steps: Steps | None = None):
    """ns covered by the host rows whose name is marked in ``lut`` (a NameTable class:
    one slot per category, the last for null) clipped to the steps when given, and the
    first such row."""
    rows = rows_of(ev, ("cpu_op", "python", "annotation"))
    if not len(rows):
        return 0, None
    rows = rows[lut.take(name_codes(ev["name"]).take(rows))]
    if not len(rows):
        return 0, None
    s = ev["ts"].to_numpy(np.int64)[rows]
    e = s + ev["dur"].to_numpy(np.int64)[rows]
    iv = intervals.union(s, e)
    if steps is not None and len(steps):
        st = intervals.union(steps.start, steps.end)
        return int(intervals.total(intervals.intersect(iv, st))), int(rows[0])
    return int(intervals.total(iv)), int(rows[0])


def _top_ops(ev: pd.DataFrame, steps: Steps | None) -> list[tuple[str, int]]:
    """The aten ops with the most time, counting only calls not nested in another aten op
    (what the host spent in operators, by the operator the code called)."""
    m = kind_in(ev, ("cpu_op",))
    rows = np.flatnonzero(m)
    if not len(rows):
        return []
    # the aten rows from the shared name table; strings for those rows only
    table = name_table(ev["name"])
    codes = name_codes(ev["name"]).take(rows)
    aten = table.hits(ATEN_RX, "match").take(codes)
    rows, codes = rows[aten], codes[aten]
    if not len(rows):
        return []
    names = np.array([table.names[c] for c in codes.tolist()], dtype=object)
    ts = ev["ts"].to_numpy(np.int64)[rows]
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    from .factkit import thread_key

    key = thread_key(ev, rows)
    outer = np.ones(len(rows), bool)
    for t in np.unique(key).tolist():
        idx = np.flatnonzero(key == t)
        reach = np.maximum.accumulate(end[idx])
        prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
        outer[idx] = end[idx] > prev      # not inside an earlier op of this thread
    df = pd.DataFrame({"n": names[outer], "d": end[outer] - ts[outer]})
    top = df.groupby("n")["d"].sum().sort_values(ascending=False).head(TOP_HOST)
    return [(str(n), int(v)) for n, v in top.items()]


def trace_facts(all_ev: pd.DataFrame, ev: pd.DataFrame | None = None,
                steps: pd.DataFrame | None = None, warmup: frozenset = frozenset(),
                spans: tuple[Steps, Steps] | None = None) -> dict:
    """The facts read over the whole trace (every step), not the window; ``ev``: the
    analysed window's events (``periodic_stall.stalls_in_window``: its stalled steps);
    ``steps``: ``steps.find_steps(all_ev)``'s steps where the caller found them already;
    ``warmup``: the step numbers the window left out as warm-up; ``spans``: the analysis's
    steps of the whole trace and of the window (default: their ProfilerStep ranges)."""
    st = periodic_stalls(all_ev, spans[0] if spans else None)
    if st:
        inside = set((spans[1] if spans else Steps(ev)).number.tolist()) if ev is not None \
            else set(st["stalled_steps"])
        st["stalls_in_window"] = sum(1 for n in st["stalled_steps"] if n in inside)
    out = {"periodic_stall": st}
    if st:
        out["facts_evidence"] = {"periodic_stall": st.pop("evidence")}
    an = step_anatomy(all_ev, steps, warmup)   # phases, micro-batches, recompute, odd steps
    if an:
        out.setdefault("facts_evidence", {}).update(an.pop("evidence"))
    out["anatomy"] = an
    return out


def other_process(ev: pd.DataFrame) -> dict | None:
    """GPU ops on one device from more than one process: another context shares it."""
    rows = rows_of(ev, ("kernel", "memcpy", "memset"))
    if not len(rows):
        return None
    dev = ev["device"].to_numpy()[rows]
    pid = ev["pid"].to_numpy()[rows]
    for d in np.unique(dev).tolist():
        # the device's main process first (most GPU ops), then the others
        pids = pd.Series(pid[dev == d]).value_counts().index.to_numpy()
        if len(pids) > 1:
            r = rows[(dev == d) & (pid == pids[1])][0]
            return {"device": int(d), "processes": [int(x) for x in pids],
                    "evidence": [item(ev["name"].iat[r], ev["ts"].iat[r], None,
                                      f"GPU work of process {int(pids[1])} on device {d}, "
                                      f"beside process {int(pids[0])}")]}
    return None
