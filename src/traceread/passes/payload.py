"""What each host<->device copy carries, judged from where and when it runs, not its name
(docs/analysis.md, "What a copy carries").

Each copy (a ``memcpy`` HtoD/DtoH GPU op, joined to its launch call and the host frames
around that call) gets one payload, first rule that holds:

* ``checkpoint``: ``torch.save`` / ``state_dict`` / ``torch.distributed.checkpoint`` /
  the serializer's ``write_record`` around it;
* ``shape_readback`` / ``metrics``: a DtoH copy of at most ``METRIC_BYTES`` -- inside a
  data-dependent op (``nonzero``, a boolean-mask index...) the output size it must read
  back, inside ``aten::is_nonzero`` a tensor-valued condition, else a metric (a loss, an
  accuracy, a flag);
* ``gradients`` / ``parameters``: with an optimizer step, DtoH copies after the step's
  backward began and before the optimizer step ended, HtoD copies after it began -- the
  shape of an optimizer offloaded to the CPU (``optimizer_offload`` when the optimizer
  step also launches no GPU work: it runs on CPU tensors);
* ``input_batch``: an HtoD copy after a DataLoader fetch in that step with no kernel
  launched between the fetch and the copy (steps inferred from the optimizer begin with the
  previous iteration's tail: resnet_kineto's ``aten::add_`` before its fetch);
* ``resent``: an HtoD copy before the step's first kernel, of the same size from the same
  call site every step, with no host op before it in the step that computes new data (no
  DataLoader, no op that launched nothing and is not a view or a copy): the same host
  tensor is sent again;
* ``unknown`` ("cannot tell") otherwise.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from .. import namerx
from ..table import scan_name
from .common import name_hits, rows_of
from .factkit import (MAX_EVIDENCE, Stacks, Steps, item, launcher, rows_named, thread_key)
from .userframe import readable, user_frame_at

METRIC_BYTES = 1024
CHECKPOINT_RX = namerx.compile(
    r"torch/serialization\.py\(\d+\): _?save\b|\bstate_dict\b|write_record|torch\.save"
    r"|torch/distributed/checkpoint/|(?i:checkpoint)\b.*\bsave|^save_checkpoint")
OPT_STEP_RX = namerx.compile(r"^Optimizer\.step#\w+\.step$")
BACKWARD_RX = namerx.compile(r"^autograd::engine::evaluate_function|Backward\d*$"
                             r"|^aten::\w+_backward\b")
DATALOADER_RX = namerx.compile(r"^enumerate\(DataLoader\)|DataLoaderIter\w*\.__next__"
                               r"|dataloader\.py\(\d+\): __next__")
# host ops that compute nothing new: views, copies, allocation, dispatch wrappers
INERT_OP_RX = namerx.compile(
    r"^aten::(?:to|_to_copy|copy_|empty|empty_strided|empty_like|view|reshape|_reshape_alias"
    r"|as_strided|t|transpose|permute|expand|slice|select|unsqueeze|squeeze|detach|detach_"
    r"|alias|contiguous|clone|resolve_conj|resolve_neg|lift_fresh|_unsafe_view|pin_memory"
    r"|_pin_memory|is_pinned|record_stream|set_|zeros|zero_|fill_|ones)$")
LAUNCH_RX = namerx.compile(r"Launch")
DYNAMIC_OP_RX = namerx.compile(r"^aten::(?:nonzero|argwhere|masked_select|_unique2?|unique_dim"
                               r"|unique_consecutive|repeat_interleave|index|index_put_)$")
CONDITION_RX = namerx.compile(r"^aten::is_nonzero$")
PAYLOADS = ("checkpoint", "shape_readback", "condition", "metrics", "gradients", "parameters", "input_batch", "resent",
            "unknown")
TEXT = {"checkpoint": "checkpoint state (torch.save / state_dict)",
        "shape_readback": "an output size read back by a data-dependent op (nonzero, ...)",
        "condition": "a tensor-valued Python condition read back (if tensor: ...)",
        "metrics": "metrics (a few bytes read back)",
        "gradients": "gradients copied out to the optimizer",
        "parameters": "parameters copied back from the optimizer",
        "input_batch": "the step's input batch",
        "resent": "the same host tensor sent again every step",
        "unknown": "cannot tell"}


def copy_payloads(ev: pd.DataFrame, steps: Steps | None = None,
                  stacks: Stacks | None = None) -> dict:
    """{"copies": [{payload, direction, count, per_step, bytes_per_step, copy_ns, site}],
    "payloads": [...], "optimizer_offload": {...} | None, "evidence": {...}}."""
    steps = steps or Steps(ev)
    out = {"copies": [], "payloads": [], "optimizer_offload": None,
           "evidence": {"copy_payloads": [], "optimizer_offload": []}}
    cp = rows_of(ev, ("memcpy",))
    if len(cp):
        kinds = ev["copy_kind"].take(cp).astype(object).to_numpy()
        cp = cp[np.isin(kinds, ("HtoD", "DtoH"))]
    if not len(cp):
        if not len(rows_of(ev, ("kernel", "memcpy", "memset"))):
            off = _host_offload(ev, steps)
            if off:
                out["evidence"]["optimizer_offload"] = off.pop("evidence")
                out["optimizer_offload"] = off
        return out
    stacks = stacks or Stacks(ev)
    lr = launcher(ev, cp)
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy()
    direction = ev["copy_kind"].take(cp).astype(str).to_numpy()
    nbytes = ev["bytes"].to_numpy(np.int64)[cp]
    host_t = np.where(lr >= 0, ts[np.maximum(lr, 0)], ts[cp])
    sidx = steps.index_of(pid[cp], host_t)
    marks = _step_marks(ev, steps)
    threads = thread_key(ev, np.maximum(lr, 0))
    payload = np.array(["unknown"] * len(cp), dtype=object)
    site = np.array([""] * len(cp), dtype=object)
    for i in range(len(cp)):
        if lr[i] < 0:
            continue
        r = int(lr[i])
        around = stacks.around(threads[i], int(ts[r]), int(end[r]))
        names = [scan_name(n) for n in stacks.names(around)]
        site[i] = user_frame_at(stacks, threads[i], int(ts[r]), int(end[r])) or \
            next((readable(n) for n in names if n.startswith("aten::")), "")
        payload[i] = _payload_of(names, direction[i], int(nbytes[i]), int(sidx[i]),
                                 int(ts[r]), marks)
    _mark_resent(ev, payload, direction, nbytes, site, sidx, host_t, marks, stacks, threads, lr)
    offload = _offload(ev, payload, direction, sidx, cp, marks, steps)
    n_steps = steps.count()
    dur = ev["dur"].to_numpy(np.int64)[cp]
    for (p, d), idx in pd.DataFrame({"p": payload, "d": direction}).groupby(
            ["p", "d"], sort=False).indices.items():
        sites = pd.Series(site[idx]).value_counts()
        out["copies"].append({
            "payload": p, "what": TEXT[p], "direction": d, "count": int(len(idx)),
            "per_step": round(len(idx) / n_steps, 1),
            "bytes_per_step": int(np.maximum(nbytes[idx], 0).sum() // n_steps),
            "copy_ns": int(dur[idx].sum()),
            "site": str(sites.index[0]) if len(sites) and sites.index[0] else None})
        for j in idx[:2].tolist():
            if len(out["evidence"]["copy_payloads"]) < 2 * MAX_EVIDENCE:
                out["evidence"]["copy_payloads"].append(item(
                    ev["name"].iat[cp[j]], ts[cp[j]],
                    int(steps.number[sidx[j]]) if sidx[j] >= 0 else None,
                    f"{p}: {int(nbytes[j])} B {d}" + (f" from {site[j]}" if site[j] else "")))
    out["copies"].sort(key=lambda c: -c["copy_ns"])
    out["payloads"] = sorted(set(payload.tolist()), key=PAYLOADS.index)
    out["optimizer_offload"] = offload
    if offload:
        out["evidence"]["optimizer_offload"] = offload.pop("evidence")
    return out


def _step_marks(ev: pd.DataFrame, steps: Steps) -> dict:
    """Per step index: first kernel launch, every kernel launch (sorted), first backward
    row, optimizer step spans, DataLoader fetches (host ts)."""
    pid = ev["pid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    marks: dict = {"launch": {}, "backward": {}, "opt": {}, "data": {}}
    kern = rows_of(ev, ("kernel",))
    kl = launcher(ev, kern)
    kl = kl[kl >= 0]
    for key, rows in (("launch", kl),
                      ("backward", rows_named(ev, BACKWARD_RX, ("cpu_op",))),
                      ("data", rows_named(ev, DATALOADER_RX, ("cpu_op", "python",
                                                               "annotation")))):
        si = steps.index_of(pid[rows], ts[rows])
        for s, t in zip(si.tolist(), ts[rows].tolist()):
            if s >= 0:
                marks[key].setdefault(s, []).append(t)
    opt = rows_named(ev, OPT_STEP_RX, ("annotation", "cpu_op"))
    si = steps.index_of(pid[opt], ts[opt])
    for s, r in zip(si.tolist(), opt.tolist()):
        if s >= 0:
            marks["opt"].setdefault(s, []).append((int(ts[r]), int(end[r]), r))
    marks["launches"] = {s: np.sort(np.array(v, np.int64)) for s, v in marks["launch"].items()}
    for key in ("launch", "backward"):
        marks[key] = {s: min(v) for s, v in marks[key].items()}
    return marks


@lru_cache(maxsize=1 << 16)
def _name_flags(name: str) -> tuple[bool, bool, bool]:
    """(checkpoint, data-dependent op, condition) for one frame/op name, matched once."""
    base = name.split(",", 1)[0]
    return (bool(CHECKPOINT_RX.search(name)), bool(DYNAMIC_OP_RX.search(base)),
            bool(CONDITION_RX.search(base)))


def _payload_of(names: list[str], direction: str, nbytes: int, s: int, t: int,
                marks: dict) -> str:
    flags = [_name_flags(n) for n in names]
    if any(f[0] for f in flags):
        return "checkpoint"
    if direction == "DtoH" and 0 <= nbytes <= METRIC_BYTES:
        if any(f[1] for f in flags):
            return "shape_readback"
        if any(f[2] for f in flags):
            return "condition"
        return "metrics"
    if s >= 0 and s in marks["opt"] and nbytes > METRIC_BYTES:
        o0 = min(a for a, _, _ in marks["opt"][s])
        o1 = max(b for _, b, _ in marks["opt"][s])
        bw = marks["backward"].get(s)
        if direction == "DtoH" and bw is not None and bw <= t <= o1:
            return "gradients"
        if direction == "HtoD" and t >= o0:
            return "parameters"
    if direction == "HtoD" and s >= 0:
        fetched = [d for d in marks["data"].get(s, []) if d <= t]
        if fetched and not _launched_between(marks["launches"].get(s), max(fetched), t):
            return "input_batch"
    return "unknown"


def _launched_between(launches: np.ndarray | None, a: int, b: int) -> bool:
    """A kernel launch at a <= ts < b (``launches`` sorted)."""
    if launches is None:
        return False
    return bool(np.searchsorted(launches, b) > np.searchsorted(launches, a))


def _mark_resent(ev, payload, direction, nbytes, site, sidx, host_t, marks, stacks, threads,
                 lr) -> None:
    """``unknown`` HtoD copies before the step's first kernel that repeat (same site, same
    size) in every step and follow no host op computing new data: ``resent``."""
    cand = np.flatnonzero((payload == "unknown") & (direction == "HtoD") & (sidx >= 0)
                          & (lr >= 0))
    if not len(cand):
        return
    n_steps = len(set(sidx[sidx >= 0].tolist()))
    groups = pd.DataFrame({"site": site[cand], "b": nbytes[cand]}).groupby(
        ["site", "b"], sort=False).indices
    for (_, _), idx in groups.items():
        rows = cand[idx]
        if len(set(sidx[rows].tolist())) < max(2, n_steps):
            continue
        if all(_early(marks, int(sidx[i]), int(host_t[i])) and
               not _fresh_before(ev, stacks, threads[i], int(sidx[i]), int(host_t[i]))
               for i in rows.tolist()):
            payload[rows] = "resent"


def _early(marks: dict, s: int, t: int) -> bool:
    first = marks["launch"].get(s)
    return first is None or t < first


def _fresh_before(ev, stacks: Stacks, thread, s: int, t: int) -> bool:
    """A host op on ``thread`` between the step's start and ``t`` that computes data: not a
    view/copy/allocation, and launching nothing (host work producing a tensor)."""
    rows = stacks.by_thread.get(thread)
    if rows is None:
        return True
    from .factkit import STEP_RX

    # the step's start: the latest step annotation on this thread's process at or before t
    ts = stacks.ts[rows]
    k = int(np.searchsorted(ts, t, side="right"))
    names = ev["name"].take(rows[:k]).astype(str).tolist()
    kinds = ev["kind"].take(rows[:k]).astype(str).tolist()
    start = max((i for i, n in enumerate(names) if STEP_RX.match(n)), default=0)
    for i in range(start + 1, k):
        n = names[i]
        if kinds[i] != "cpu_op" or INERT_OP_RX.search(n.split(",", 1)[0]):
            continue
        if DATALOADER_RX.search(n):
            return True
        r = rows[i]
        if stacks.end[r] > t:        # encloses the copy: the copy's own op
            continue
        return True
    return False


def _offload(ev, payload, direction, sidx, cp, marks, steps: Steps) -> dict | None:
    """Gradients out, parameters back, and an optimizer step that launches no GPU work:
    the optimizer runs on CPU tensors. {"steps", "grads_per_step", "params_per_step",
    "ns_per_step" (first gradient copy to last parameter copy), "optimizer", "evidence"}."""
    g = np.flatnonzero(payload == "gradients")
    p = np.flatnonzero(payload == "parameters")
    if not len(g) or not len(p):
        return None
    launches = _launch_rows(ev)
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    spans, ev_items = [], []
    for s in sorted(set(sidx[g].tolist()) & set(sidx[p].tolist())):
        opts = marks["opt"].get(s, [])
        if not opts:
            continue
        o0, o1, orow = opts[0]
        inside = launches[(ts[launches] >= o0) & (ts[launches] <= o1)]
        if len(inside):
            return None        # the optimizer launches GPU work: it is not on the CPU
        gs = cp[g[sidx[g] == s]]
        ps = cp[p[sidx[p] == s]]
        spans.append(int(end[ps].max() - ts[gs].min()))
        if not ev_items:
            n = steps.number[s]
            ev_items = [item(ev["name"].iat[gs[0]], ts[gs[0]], n,
                             f"{len(gs)} gradient copies device->host before the optimizer"),
                        item(ev["name"].iat[orow], ts[orow], n,
                             "the optimizer step launches no GPU work: it runs on CPU tensors"),
                        item(ev["name"].iat[ps[0]], ts[ps[0]], n,
                             f"{len(ps)} parameter copies host->device after it")]
    if not spans:
        return None
    name = str(ev["name"].iat[marks["opt"][sorted(marks["opt"])[0]][0][2]])
    return {"steps": len(spans), "grads_per_step": round(len(g) / len(spans), 1),
            "params_per_step": round(len(p) / len(spans), 1),
            "ns_per_step": int(np.median(spans)), "optimizer": name, "transport": "device",
            "evidence": ev_items}


COPY_OP_RX = namerx.compile(r"^aten::copy_$")


def _host_offload(ev: pd.DataFrame, steps: Steps) -> dict | None:
    """A trace with no GPU work: the offloaded optimizer's shape from the host ops alone --
    per step, tensor copies (``aten::copy_`` not inside another op) after the backward began
    and before the optimizer step, and as many after it began, the optimizer step between
    them (``transport`` "host": nothing moved between devices in this trace)."""
    marks = _step_marks(ev, steps)
    if not marks["opt"]:
        return None
    stacks = Stacks(ev, ("cpu_op",))
    copies = rows_named(ev, COPY_OP_RX, ("cpu_op",))
    copies = np.array([r for r in copies.tolist() if not len(stacks.around_row(r))], np.int64)
    if not len(copies):
        return None
    pid = ev["pid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    si = steps.index_of(pid[copies], ts[copies])
    spans, counts, first = [], [], None
    for s, opts in sorted(marks["opt"].items()):
        o0, o1, orow = opts[0]
        bw = marks["backward"].get(s)
        mine = copies[si == s]
        before = mine[(ts[mine] < o0) & (ts[mine] >= (bw if bw is not None else o0))]
        after = mine[ts[mine] > o0]
        if len(before) < 2 or len(after) < 2:
            continue
        spans.append(int(end[after].max() - ts[before].min()))
        counts.append((len(before), len(after)))
        if first is None:
            first = (before[0], orow, after[0], int(steps.number[s]), len(before), len(after))
    if not spans:
        return None
    g0, orow, p0, n, nb, na = first
    grads = float(np.mean([c[0] for c in counts]))
    params = float(np.mean([c[1] for c in counts]))
    return {"steps": len(spans), "grads_per_step": round(grads, 1),
            "params_per_step": round(params, 1),
            "ns_per_step": int(np.median(spans)), "optimizer": str(ev["name"].iat[orow]),
            "transport": "host",
            "evidence": [item(ev["name"].iat[g0], ts[g0], n,
                              f"{nb} tensor copies after the backward, before the optimizer"),
                         item(ev["name"].iat[orow], ts[orow], n,
                              "the optimizer step between them (no GPU in this trace)"),
                         item(ev["name"].iat[p0], ts[p0], n,
                              f"{na} tensor copies after it began")]}


def _launch_rows(ev: pd.DataFrame) -> np.ndarray:
    api = rows_of(ev, ("runtime", "driver"))
    if not len(api):
        return api
    return api[name_hits(ev["name"], LAUNCH_RX, "search")[api]]
