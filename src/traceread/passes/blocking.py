"""Every call that blocks the host on the GPU, per step and by kind, and whether the step
could be captured in a CUDA graph (docs/analysis.md, "Blocking calls and capturability").

A blocking call is found two ways, and both are evidence:

* by the operation: explicit syncs the user wrote (``.item()`` / ``bool(t)`` /
  ``float(t)`` -> ``aten::_local_scalar_dense``; ``.tolist()``, ``.cpu()``, ``.numpy()``;
  ``torch.cuda.synchronize()``) and implicit ones -- ops whose output size depends on the
  data, so the host must read it back: ``nonzero``, ``masked_select``, boolean-mask
  indexing (``aten::index`` with a ``bool`` index), ``unique``, ``repeat_interleave``,
  tensor-valued conditions (``aten::is_nonzero``);
* by behaviour: a runtime call that returns only after the GPU drained
  (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, a synchronous ``cudaMemcpy``)
  inside the op -- whatever the op's name (``.to("cpu")``, a custom op) -- and pageable
  copies, which the host stages synchronously.

When the runtime API is traced, an op counts as blocking only when it made such a call
(an ``.item()`` or ``nonzero()`` on a CPU tensor waits for nothing); without API rows a
named op counts by its name when the trace has GPU work (an implicit op) or always (an
explicit one: the count the earlier ``syncs_per_step`` gave; on a trace with no GPU work
this is what would block if the tensors lived on one, and it does not decide
capturability). Nested calls count once: the
outermost call names the kind (``x[mask]`` is one boolean-mask index, not also a nonzero).

A step is **capturable** when nothing in it rules a CUDA graph out: no blocking call
between two of the step's launches (a sync before the first -- a blocking input copy --
or after the last -- the usual ``loss.item()`` -- leaves the GPU work one capturable
region), no
data-dependent shape, no fresh host data copied to the device after the step's first
kernel (a graph replays the same addresses: only an input copied in before the replay is
allowed). Each reason keeps the event that proves it.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .. import namerx
from ..table import scan_name
from .attribution import SYNC_API_RX, _op_base, inside_compile
from .common import kind_in, lookup_at, name_codes, name_hits, name_table, rows_of
from .factkit import (MAX_EVIDENCE, Stacks, Steps, has_gpu, item, launcher, name_at,
                      rows_named, thread_key)

# (kind, explicit, regex over the op's base name, kinds of rows it is read from)
KINDS = tuple((k, e, namerx.compile(p), rk) for k, e, p, rk in (
    ("item", True, r"^aten::(?:item|_local_scalar_dense)$", ("cpu_op",)),
    ("tolist", True, r"^<built-in method tolist of Tensor", ("python",)),
    ("cpu", True, r"^<built-in method (?:cpu|numpy) of Tensor", ("python",)),
    ("synchronize", True, r"torch/cuda/__init__\.py\(\d+\): synchronize$"
                          r"|^torch\.cuda\.synchronize$", ("python", "annotation", "cpu_op")),
    ("condition", False, r"^aten::is_nonzero$", ("cpu_op",)),
    ("nonzero", False, r"^aten::(?:nonzero|argwhere)$", ("cpu_op",)),
    ("masked_select", False, r"^aten::masked_select$", ("cpu_op",)),
    ("unique", False, r"^aten::(?:_unique2?|unique_dim|unique_consecutive"
                      r"|unique_dim_consecutive)$", ("cpu_op",)),
    ("repeat_interleave", False, r"^aten::repeat_interleave$", ("cpu_op",)),
    ("bool_mask_index", False, r"^aten::(?:index|index_put_|_index_put_impl_)$", ("cpu_op",)),
))
EXPLICIT = {k for k, e, _, _ in KINDS if e}
# ops whose output shape depends on the data (a graph cannot hold them)
DYNAMIC = ("nonzero", "masked_select", "unique", "repeat_interleave", "bool_mask_index")
COPY_OP_RX = namerx.compile(r"^aten::(?:to|_to_copy|copy_|contiguous|clone)$")
PAGEABLE_RX = namerx.compile(r"(?i)pageable")
SYNC_FRAME_RX = namerx.compile(r"synchronize")   # torch.cuda.synchronize's python frame
INDEX_OP_RX = namerx.compile(r"^aten::(?:index|index_put_|_index_put_impl_)$")
_KIND_ROWS = ("cpu_op", "python", "annotation")


def _kind_of(name: str, kind: str) -> str | None:
    base = _op_base(scan_name(name))
    for k, _, rx, rk in KINDS:
        if kind in rk and rx.search(base):
            return k
    return None


def _kind_lut(table, kind: str, codes: np.ndarray) -> np.ndarray:
    """Index into KINDS of ``_kind_of(name, kind)`` per name of ``table`` (-1: none; the
    last slot, null, -1): the table's classes for names that are their own base op name,
    ``_kind_of`` itself for the others used by ``codes``."""
    rules = [(i, rx) for i, (_, _, rx, rk) in enumerate(KINDS) if kind in rk]
    lut = np.full(len(table) + 1, -1, np.int64)
    if rules:
        lut = np.select([table.hits(rx) for _, rx in rules], [i for i, _ in rules], -1)
        lut[-1] = -1
    odd = ~table.bare() & np.logical_or.reduce([table.may(rx) for _, rx in rules] + [
        np.zeros(len(lut), bool)])   # a base name holding no rule's literal matches none
    used = np.zeros(len(lut), bool)
    used[codes] = True
    order = [k for k, _, _, _ in KINDS]
    for i in np.flatnonzero(odd & used).tolist():
        k = _kind_of(table.names[i], kind)
        lut[i] = order.index(k) if k else -1
    return lut


def _candidates(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Rows named like a blocking call, and their kind index into KINDS."""
    rows = rows_of(ev, _KIND_ROWS)
    if not len(rows):
        return rows, rows
    # each row's kind as a code into the kinds present (no np.unique over row strings)
    kcol = ev["kind"] if isinstance(ev["kind"].dtype, pd.CategoricalDtype) \
        else ev["kind"].astype("category")
    kcodes = kcol.array.codes.take(rows)
    kind_names = [str(k) for k in kcol.cat.categories]
    out = np.full(len(rows), -1, np.int64)
    order = [k for k, _, _, _ in KINDS]
    table = name_table(ev["name"])
    codes = name_codes(ev["name"]).take(rows)
    for kc in np.flatnonzero(np.bincount(kcodes, minlength=len(kind_names))).tolist():
        m = np.flatnonzero(kcodes == kc)
        out[m] = _kind_lut(table, kind_names[kc], codes[m]).take(codes[m])
    keep = out >= 0
    rows, out = rows[keep], out[keep]
    # boolean-mask indexing only when an index is recorded as bool
    bm = order.index("bool_mask_index")
    sel = np.flatnonzero(out == bm)
    if len(sel):
        types = ev["input_type"].take(rows[sel]).astype(object).tolist() \
            if "input_type" in ev else [None] * len(sel)
        ok = np.array([_bool_index(t) for t in types], bool)
        drop = sel[~ok]
        keep = np.ones(len(rows), bool)
        keep[drop] = False
        rows, out = rows[keep], out[keep]
    return rows, out


def _bool_index(types) -> bool:
    if not isinstance(types, str):
        return False
    try:
        t = json.loads(types)
    except ValueError:
        return "bool" in types.lower()
    # aten::index(self, indices): the index list's element types; index_put_ likewise
    return any("bool" in str(x).lower() for x in (t[1:] if isinstance(t, list) else [t]))


def blocking_calls(ev: pd.DataFrame, steps: Steps | None = None,
                   stacks: Stacks | None = None) -> dict:
    """{"blocking_per_step", "mid_step_per_step", "by_kind": {kind: {"per_step",
    "mid_step_per_step", "explicit", "name"}}, "dynamic_shapes_per_step", "dynamic_shapes":
    {kind: per_step}, "capturable", "not_capturable_because", "evidence": {...}} (module
    doc)."""
    steps = steps or Steps(ev)
    n_steps = steps.count()
    gpu = has_gpu(ev)
    api = rows_of(ev, ("runtime", "driver"))
    api_traced = bool(len(api))
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    stacks = stacks or Stacks(ev, ("cpu_op", "python", "annotation"))
    name_of = name_at(ev)
    is_op = kind_in(ev, ("cpu_op",))
    sync_frames = set(rows_named(ev, SYNC_FRAME_RX, ("python",)).tolist())
    cand, kidx = _candidates(ev)
    # outermost candidates: drop one nested in another on its thread
    cand_set = set(cand.tolist())
    outer = np.ones(len(cand), bool)
    for i, r in enumerate(cand.tolist()):
        if any(int(a) in cand_set for a in stacks.around_row(r)):
            outer[i] = False
    kind_names = [k for k, _, _, _ in KINDS]

    roots: dict[int, str] = {}   # root row -> kind
    how: dict[int, str] = {}
    # by behaviour: a runtime call that waits for the GPU, under its outermost op
    sync_api = _sync_api_rows(ev, api)
    # the compiler's own syncs (autotuning's benchmarks): the compile's time, no program sync
    sync_api = sync_api[~inside_compile(ev, sync_api)]
    api_thread = thread_key(ev, sync_api) if len(sync_api) else np.empty(0, np.int64)
    cand_kind = dict(zip(cand.tolist(), kidx.tolist()))
    for r, t in zip(sync_api.tolist(), api_thread.tolist()):
        around = stacks.around(t, int(ts[r]), int(end[r]))
        named = [a for a in around.tolist() if a in cand_kind]
        if named:
            root, kind = named[0], kind_names[cand_kind[named[0]]]
        else:
            ops = [a for a in around.tolist() if is_op[a] or a in sync_frames]
            root = ops[0] if ops else r
            kind = _behaviour_kind(ev, root, r)
        roots.setdefault(root, kind)
        how.setdefault(root, f"{name_of(r)} inside")
    # pageable copies: staged synchronously by the host
    for root, r in _pageable_roots(ev, stacks):
        if root not in roots:
            roots[root] = "pageable_copy"
            how[root] = f"{name_of(r)} (pageable)"
    # by name: where the API is not traced (explicit always, implicit with GPU work)
    if not api_traced:
        for r, k, o in zip(cand.tolist(), kidx.tolist(), outer.tolist()):
            kind = kind_names[k]
            if o and (kind in EXPLICIT or gpu) and r not in roots:
                roots[r] = kind
                how[r] = "by name (runtime API not traced)"
    # drop roots nested in other roots
    root_set = set(roots)
    for r in list(roots):
        if r < len(ev) and any(int(a) in root_set for a in stacks.around_row(r)):
            del roots[r]
    pid = ev["pid"].to_numpy()
    rr = np.array(sorted(roots), np.int64)
    step_no = steps.of(pid[rr], ts[rr]) if len(rr) else rr
    if len(steps):   # per step: the calls of the steps (not the profiler's own, between them)
        rr, step_no = rr[step_no >= 0], step_no[step_no >= 0]
    mid = _mid_step(ev, steps, rr)
    by_kind: dict[str, dict] = {}
    evidence, mid_ev = [], []
    for r, s, m in zip(rr.tolist(), step_no.tolist(), mid.tolist()):
        kind = roots[r]
        d = by_kind.setdefault(kind, {"count": 0, "explicit": kind in EXPLICIT or
                                      kind == "runtime_sync",
                                      "name": _op_base(str(name_of(r))), "mid": 0})
        d["count"] += 1
        d["mid"] += int(m)
        e = item(_op_base(str(name_of(r))), ts[r], s,
                 f"{kind}: {how.get(r, '')}".rstrip(": ")
                 + ("; between two of the step's launches: it splits the step" if m else
                    "; before the step's first launch or after its last"))
        if sum(1 for x in evidence if x["detail"].startswith(kind)) < 2 and \
                len(evidence) < 2 * MAX_EVIDENCE:
            evidence.append(e)
        if m and len(mid_ev) < MAX_EVIDENCE:
            mid_ev.append(e)
    for d in by_kind.values():
        d["per_step"] = round(d.pop("count") / n_steps, 1)
        d["mid_step_per_step"] = round(d.pop("mid") / n_steps, 1)
    # data-dependent shapes, blocking or not
    dyn_rows = [(r, kind_names[k]) for r, k, o in zip(cand.tolist(), kidx.tolist(),
                                                      outer.tolist())
                if kind_names[k] in DYNAMIC and (o or kind_names[k] == "nonzero")]
    seen = {r for r, _ in dyn_rows}
    dyn_rows += [(r, k) for r, k in roots.items() if k in DYNAMIC and r not in seen]
    dyn_rows = _outermost_dynamic(dyn_rows, stacks)
    dyn: dict[str, float] = {}
    dyn_ev = []
    for r, k in dyn_rows:
        if len(steps) and steps.of(pid[[r]], ts[[r]])[0] < 0:
            continue
        dyn[k] = dyn.get(k, 0) + 1
        if len(dyn_ev) < MAX_EVIDENCE:
            s = steps.of(pid[[r]], ts[[r]])[0]
            dyn_ev.append(item(_op_base(str(name_of(r))), ts[r], s,
                               f"{k}: output size depends on the data"))
    dyn = {k: round(v / n_steps, 1) for k, v in dyn.items()}
    fresh = _fresh_copies(ev, steps, stacks) + _mid_step_frees(ev, steps, api)
    # with no GPU in the trace nothing waited for one: the named calls are what would block
    capturable, why = _capturable(gpu, mid_ev if gpu else [], dyn_ev, fresh)
    total = sum(d["per_step"] for d in by_kind.values())
    return {"blocking_per_step": round(total, 1),
            "mid_step_per_step": round(sum(d["mid_step_per_step"] for d in by_kind.values()), 1),
            "by_kind": by_kind,
            "dynamic_shapes_per_step": round(sum(dyn.values()), 1), "dynamic_shapes": dyn,
            "capturable": capturable, "not_capturable_because": why,
            "evidence": {"blocking_calls": evidence, "dynamic_shapes": dyn_ev,
                         "capturable": why}}


# a device free (not the stream-ordered Async kind) waits for the device and is refused
# inside a stream capture: one between two launches splits the step like a sync
FREE_API_RX = namerx.compile(r"^(?:(?:cuda|hip)Free(?:Array)?|cuMemFree)(?:_v\d+)?$")


def _mid_step_frees(ev: pd.DataFrame, steps: Steps, api: np.ndarray) -> list[dict]:
    """Evidence items for the device frees that lie between two of their step's launches."""
    if not len(api):
        return []
    frees = api[name_hits(ev["name"], FREE_API_RX, "match")[api]]
    if not len(frees):
        return []
    mid = _mid_step(ev, steps, frees)
    out = []
    ts = ev["ts"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy()
    for r in frees[mid][:MAX_EVIDENCE].tolist():
        s = steps.of(pid[[r]], ts[[r]])[0] if len(steps) else None
        out.append(item(str(ev["name"].iat[r]), ts[r], s,
                        "device free between two of the step's launches: it waits for the "
                        "device and cannot be captured"))
    return out


def _mid_step(ev: pd.DataFrame, steps: Steps, roots: np.ndarray) -> np.ndarray:
    """Per blocking call: whether its step launches GPU work both before it and after it
    returns (the sync splits the step; one before the step's first launch -- a blocking
    input copy -- or after its last -- ``loss.item()`` -- leaves the step's GPU work one
    capturable region). Without steps the window is one step."""
    out = np.zeros(len(roots), bool)
    if not len(roots):
        return out
    kern = rows_of(ev, ("kernel",))
    kl = launcher(ev, kern)
    kl = np.unique(kl[kl >= 0])
    if not len(kl):
        return out
    pid = ev["pid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    if len(steps):
        ks = steps.index_of(pid[kl], ts[kl])
        g = pd.Series(ts[kl]).groupby(ks)
        first, last = g.min().to_dict(), g.max().to_dict()
        rs = steps.index_of(pid[roots], ts[roots])
        for i, (s, b, e) in enumerate(zip(rs.tolist(), ts[roots].tolist(),
                                          end[roots].tolist())):
            out[i] = s in last and first[s] < b and last[s] >= e
        return out
    # a launch that starts the instant the call returned comes after it
    return (ts[kl].min() < ts[roots]) & (end[roots] <= ts[kl].max())


def _outermost_dynamic(rows, stacks: Stacks):
    """One per call: a nonzero inside a boolean-mask index or masked_select is that call."""
    keep = []
    ids = {r for r, _ in rows}
    for r, k in rows:
        if any(int(a) in ids for a in stacks.around_row(r)):
            continue
        keep.append((r, k))
    return keep


def _behaviour_kind(ev: pd.DataFrame, root: int, api_row: int) -> str:
    name = _op_base(str(ev["name"].iat[root]))
    if root == api_row:
        return "runtime_sync"
    if "synchronize" in name:
        return "synchronize"
    if COPY_OP_RX.search(name):
        return "blocking_copy"
    if INDEX_OP_RX.search(name):   # an index op that waited read a boolean mask's count
        return "bool_mask_index"
    return "other"


def _sync_api_rows(ev: pd.DataFrame, api: np.ndarray) -> np.ndarray:
    if not len(api):
        return api
    return api[name_hits(ev["name"], SYNC_API_RX, "match")[api]]


def _pageable_roots(ev: pd.DataFrame, stacks: Stacks):
    """(outermost op, memcpy row) of each pageable host<->device copy with a launch record."""
    is_op = kind_in(ev, ("cpu_op",))
    cp = rows_of(ev, ("memcpy",))
    if not len(cp):
        return []
    said = name_hits(ev["name"], PAGEABLE_RX, "search")[cp]
    if "raw_name" in ev:   # nsys names a copy by direction; its memory kinds are in raw_name
        said |= lookup_at(ev["raw_name"], cp, lambda n: bool(PAGEABLE_RX.search(n)), False, bool)
    cp = cp[said]
    if not len(cp):
        return []
    lr = launcher(ev, cp)
    out = []
    for c, r in zip(cp.tolist(), lr.tolist()):
        if r < 0:
            continue
        t = thread_key(ev, np.array([r]))[0]
        ops = [a for a in stacks.around(t, int(stacks.ts[r]), int(stacks.end[r])).tolist()
               if is_op[a]]
        out.append((ops[0] if ops else r, c))
    return out


def _fresh_copies(ev: pd.DataFrame, steps: Steps, stacks: Stacks) -> list[dict]:
    """HtoD copies launched after the step's first kernel launch: fresh host data fed to the
    GPU mid-step (a graph replays fixed addresses; only an input copied in before the replay
    fits)."""
    cp = rows_of(ev, ("memcpy",))
    if not len(cp) or not len(steps):
        return []
    kinds = ev["copy_kind"].take(cp).astype(object).to_numpy()
    cp = cp[kinds == "HtoD"]
    if not len(cp):
        return []
    lr = launcher(ev, cp)
    ok = lr >= 0
    cp, lr = cp[ok], lr[ok]
    kern = rows_of(ev, ("kernel",))
    kl = launcher(ev, kern)
    kl = kl[kl >= 0]
    if not len(cp) or not len(kl):
        return []
    pid, ts = ev["pid"].to_numpy(), ev["ts"].to_numpy(np.int64)
    k_step = steps.index_of(pid[kl], ts[kl])
    first = {}
    for s, t in zip(k_step.tolist(), ts[kl].tolist()):
        if s >= 0 and (s not in first or t < first[s]):
            first[s] = t
    c_step = steps.index_of(pid[lr], ts[lr])
    out = []
    for c, r, s in zip(cp.tolist(), lr.tolist(), c_step.tolist()):
        if s >= 0 and s in first and ts[r] > first[s] and len(out) < MAX_EVIDENCE:
            out.append(item(ev["name"].iat[c], ts[c], int(steps.number[s]),
                            f"host_copy: {_size(int(ev['bytes'].iat[c]))} host->device after "
                            "the step's first kernel"))
    return out


def _size(n: int) -> str:
    return f"{n} B" if n >= 0 else "a copy (size not recorded)"


def _capturable(gpu: bool, blocking: list, dynamic: list, fresh: list):
    why = [dict(e, detail="sync: " + e["detail"]) for e in blocking[:MAX_EVIDENCE]] + \
        [dict(e, detail="dynamic shape: " + e["detail"]) for e in dynamic[:MAX_EVIDENCE]] + \
        fresh
    if why:
        return False, why
    return (True if gpu else None), []
