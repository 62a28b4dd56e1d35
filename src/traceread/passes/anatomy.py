"""The step's anatomy: its phases, its micro-batches, recomputation, and the odd step out
(docs/analysis.md, "The step's anatomy").

Read over every ``ProfilerStep#N`` of the main process (the odd steps are what the steady
window leaves out), from evidence in the trace, not from names a user chose:

* **phases** -- data (``enumerate(DataLoader)#...`` spans), forward (the outermost
  ``nn.Module:`` frames; without python frames the host ops outside the other phases),
  backward (``autograd::engine::evaluate_function:`` nodes, on whichever thread autograd
  runs them), optimizer (``Optimizer.step#`` / ``Optimizer.zero_grad#`` spans), NVTX ranges
  named forward/backward/optimizer/data in nsys; other: the rest of the step. Host time is
  the step's wall time in each (a moment in two phases counts in the first of data,
  optimizer, backward, forward); GPU time is the time of the GPU ops launched in each.
* **passes** -- a backward pass is a run of backward nodes that no host op of the step's
  thread interrupts; a forward pass is a call of the model's root module (the outermost
  module whose calls take the most time). Micro-batches per optimizer step: the backward
  passes between two ``Optimizer.step`` spans. Forward passes beyond the backward passes run
  without one: an evaluation under ``no_grad``/``eval()``.
* **recomputation** -- module frames (else forward-only operators such as ``aten::linear``)
  running *inside* a backward node: a checkpointed segment's forward run again (non-
  reentrant ``torch.utils.checkpoint``; the reentrant one's ``CheckpointFunctionBackward``).
* **the odd step out** -- steps whose contents differ from the ordinary steps' (the most
  common contents): forward-only passes, a save (``torch/serialization.py: save``,
  ``aten::_save``, distributed checkpoint, file writes), host syncs (``.item()``), metric
  all-gathers, logging -- or, with the same contents, a step ``SLOW_X`` x the median. Each
  with its steps, its period (the common difference of their numbers; one step: none), its
  excess over the ordinary step and that excess per step of the period.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import namerx
from . import intervals as iv
from .attribution import SYNC_CALL, SYNC_OPS
from .common import lookup_at, lut_at, rows_of
from .dataloader import epoch_ends
from .factkit import item, launcher

PHASES = ("data", "forward", "backward", "optimizer", "other")
PRIORITY = ("data", "optimizer", "backward", "forward")   # a moment in two counts in the first
BACKWARD_RX = namerx.compile(r"^autograd::engine::evaluate_function: |^CheckpointFunctionBackward")
OPTIMIZER_RX = namerx.compile(r"^Optimizer\.(?:step|zero_grad)#")
OPTIMIZER_STEP_RX = namerx.compile(r"^Optimizer\.step#")
# the DataLoader's batches, and (with_stack) its iterator's creation at each epoch's start:
# the worker processes it starts, the seed it draws with an .item() (pairs/persist)
DATA_RX = namerx.compile(r"^enumerate\(DataLoader\)#"
                         r"|torch/utils/data/dataloader\.py\(\d+\): __iter__$")
MODULE_RX = namerx.compile(r"^nn\.Module: ")
# NVTX / record_function ranges a program names after its phases (nsys, torch)
RANGE_RX = {"forward": namerx.compile(r"(?i)^(?:model[_ .])?forward(?:[_ ]pass)?$"),
            "backward": namerx.compile(r"(?i)^(?:model[_ .])?backward(?:[_ ]pass)?$"),
            "optimizer": namerx.compile(r"(?i)^optimi[sz]er(?:[_ .]step)?$"),
            "data": namerx.compile(r"(?i)^(?:data(?:[_ ]?load(?:ing)?)?|get[_ ]batch|next[_ ]batch)$")}
# the sync ops and explicit sync calls the attribution names (not its blocking copies)
SYNC_RX = namerx.compile(r"^(?:" + "|".join(re.escape(o) for o in SYNC_OPS) + r")$|^" + SYNC_CALL)
SAVE_RX = namerx.compile(r"torch/serialization\.py\(\d+\): _?save$|^aten::_save$"
                         r"|torch/distributed/checkpoint/\S*\(\d+\): (?:async_)?save"
                         r"|safetensors\S*\(\d+\): save")
FILE_WRITE_RX = namerx.compile(r"^(?:p?write(?:v|64)?|fsync|fdatasync)$")
# the state a save writes, built right before it (``torch.save({"model": m.state_dict(),
# "opt": opt.state_dict()}, path)``): saving less often builds it less often too (pairs/save:
# the state_dict() frames run only in the steps that save, before and after the change)
STATE_DICT_RX = namerx.compile(r"\.py\(\d+\): state_dict$")
STATE_GAP_NS = 50_000   # at most this between one state_dict() call and the next / the save
EVAL_MODE_RX = namerx.compile(r"torch/nn/modules/module\.py\(\d+\): eval$"
                              r"|autograd/grad_mode\.py\(\d+\): __enter__$|inference_mode")
ALL_GATHER_RX = namerx.compile(r"(?i)all_?gather")
# a logging call (the logging module's entry points, print, experiment trackers)
LOG_RX = namerx.compile(r"logging/__init__\.py\(\d+\): (?:debug|info|warning|warn|error|exception"
                        r"|critical|log)$|<built-in function print>|wandb\S*\(\d+\): log$"
                        r"|tensorboard\S*\(\d+\): add_\w+$")
# an in-place operator: run outermost, it writes a tensor the program keeps (gradient
# clipping's _foreach_mul_); inside another op (mean's div_) it writes that op's own result
INPLACE_RX = namerx.compile(r"^aten::\w+_$")
CHECKPOINT_FRAME_RX = namerx.compile(r"torch/utils/checkpoint\.py\(\d+\): ")
# forward operators a backward formula never calls (it calls mm, not linear): run inside a
# backward node they recompute a forward
# forward ops whose first input is a lookup table, not the batch (CLIP's [49408, 768] vocabulary)
TABLE_OPS = frozenset({"aten::embedding", "aten::embedding_bag"})
# ops whose first input is the model's activations ([batch, (seq,) features], [batch,
# channels, ...]): not attention's bmm / matmul ([batch x heads, ...]) nor a rotary
# embedding's outer product (HF Qwen2: [1, 32, 1] @ [1, 1, 559] before its [16, 559, 1024]
# linears); the largest of them is the step's batch
ACTIVATION_OPS = frozenset({"aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d"})
ACTIVATION_ROWS = 512   # the first forward holds the model's shapes: no need to read more
FORWARD_OPS = frozenset({
    "aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::layer_norm",
    "aten::group_norm", "aten::batch_norm", "aten::rms_norm", "aten::embedding",
    "aten::scaled_dot_product_attention", "aten::dropout", "aten::gelu", "aten::silu",
    "aten::softmax", "aten::matmul"})
SAVE_MIN_NS = 1_000_000   # file writes under this a step: a log line, not a save
PER_STEP_ROWS = 128       # the JSON's per-step rows: the first ones (steps_seen counts all)
SLOW_X = 3.0           # same contents, this many times the median step: odd all the same
MIN_ODD_SHARE = 0.1    # an odd step's excess under this share of the median: noise
HOST_KINDS = ("cpu_op", "python", "annotation")
GPU_KINDS = ("kernel", "memcpy", "memset")


def step_anatomy(ev: pd.DataFrame, found: pd.DataFrame | None = None,
                 warmup: frozenset = frozenset()) -> dict | None:
    """The anatomy of the main process's profiler steps (module doc); None without steps.
    ``found``: ``steps.find_steps(ev)``'s steps when the caller has them (the analysis
    finds them first: ~12 ms at 247 MB not spent twice); ``warmup``: leading steps the
    window found to be warm-up (start-up work, a first run): one-time, so neither odd nor
    ordinary (graphs.bad nsys: the 1.83 s warm-up and a 70 ms recompile read as "every 9")."""
    steps = _steps(ev, found)
    if len(steps) == 0:
        return None
    pid = int(steps["pid"].iat[0])
    host = _host(ev, pid)
    gpu = _gpu(ev, pid)
    root = _root_module(host)
    per = [_one_step(host, gpu, root, s) for s in steps.itertuples(index=False)]
    tab = pd.DataFrame(per)
    later = tab[~tab["step"].isin(warmup)] if 0 < len(warmup) < len(tab) else tab
    odd = _odd_steps(later.reset_index(drop=True))
    oddn = {n for g in odd for n in g["steps"]}
    # the ordinary steps' phases: an odd step's validation or save is its own fact
    ordinary = later[~later["step"].isin(oddn)] if len(oddn) < len(later) else later
    out = {"steps_seen": int(len(tab)), "ordinary_steps": int(len(ordinary)),
           "root_module": root, "phase_source": "module frames" if root else "operators",
           "gpu_traced": bool(len(gpu["ts"])), "training": _training(tab, host),
           "phases": _phase_means(ordinary), "step_ns": int(ordinary["dur"].mean()),
           "mean_step_ns": int(tab["dur"].mean()), "per_step": _per_step_rows(tab.head(PER_STEP_ROWS)),
           "profiler_step_ns": _prof_mean(ordinary, "step"),
           "mean_profiler_step_ns": _prof_mean(tab, "step")}
    out["passes"] = _passes(ordinary)
    out["micro_batches"] = _micro_batches(host, steps, ordinary)
    if out["micro_batches"] and not out["gpu_traced"]:
        out["micro_batches"]["flop_fixed_ns_each"] = _flop_fixed_each(ev, pid, ordinary,
                                                                      out["micro_batches"])
    out["recompute"] = _recompute(ordinary)
    out["odd_steps"] = odd
    out["every_step"] = _every_step(tab)
    out["inference"] = _inference(tab) if out["training"] is False else None
    out["evidence"] = _evidence(tab, ev, out)
    return out


def without_profiler(an: dict) -> dict:
    """The anatomy as the program would run unprofiled: each figure a saving model reads
    (the steps, the odd / every-step groups' cost, a micro-batch's time, its period and its
    compute, the recomputation and the checkpoint's cost) less the profiler's cost of the
    recorded ops and frames inside it (passes/overhead.py's per-op and per-frame costs), as
    the replay prices its levers without the profiler. A group whose work is untimed keeps
    its cost."""
    import copy

    out = copy.deepcopy(an)
    less = lambda x, p: max(0, int(x) - int(p or 0))  # noqa: E731
    out["step_ns"] = less(an["step_ns"], an.get("profiler_step_ns"))
    out["mean_step_ns"] = less(an["mean_step_ns"], an.get("mean_profiler_step_ns"))
    for key in ("odd_steps", "every_step"):
        for g in out.get(key) or []:
            g["per_step_ns"] = less(g["per_step_ns"], g.get("profiler_ns"))
            for h in g["holds"]:
                if h.get("host_ns") is not None:
                    h["host_ns"] = less(h["host_ns"], h.get("profiler_ns"))
    mb, p = out.get("micro_batches"), (out.get("micro_batches") or {}).get("profiler_ns_each")
    if mb and p:
        mb["host_ns_each"] = less(mb["host_ns_each"], p["host"])
        mb["flop_host_ns_each"] = less(mb["flop_host_ns_each"], p["flop"])
        if mb.get("flop_fixed_ns_each") is not None:   # the ops' record cost is per op
            mb["flop_fixed_ns_each"] = less(mb["flop_fixed_ns_each"], p["flop"])
        if mb.get("period_ns_each") is not None:
            mb["period_ns_each"] = less(mb["period_ns_each"], p["period"])
    rc = out.get("recompute")
    if rc:
        rc["host_ns_per_step"] = less(rc["host_ns_per_step"], rc.get("profiler_ns_per_step"))
        rc["checkpoint_ns_per_step"] = less(rc["checkpoint_ns_per_step"],
                                            rc.get("checkpoint_profiler_ns_per_step"))
    return out


# -- the inputs ------------------------------------------------------------------------------

def _steps(ev: pd.DataFrame, found: pd.DataFrame | None = None) -> pd.DataFrame:
    """The main process's steps (passes/steps.py: ProfilerStep#N, else step-like ranges such
    as nsys NVTX ``step_N``): pid, tid, start, end, number. ``found``: ``find_steps(ev)``'s."""
    from .steps import find_steps

    st = find_steps(ev)[0] if found is None else found
    if not len(st):
        return pd.DataFrame(columns=["pid", "tid", "start", "end", "number", "label"])
    df = pd.DataFrame({"pid": st["pid"].to_numpy(), "tid": st["tid"].to_numpy(),
                       "start": st["start"].to_numpy(np.int64),
                       "end": st["end"].to_numpy(np.int64),
                       "number": st["step"].to_numpy(np.int64),
                       "label": st["name"].astype(str).to_numpy(object)})
    main = df["pid"].value_counts().index[0]      # a rank traces its own process
    df = df[df["pid"] == main].sort_values("start")
    return df.drop_duplicates("number").reset_index(drop=True)


def _classify(name: str) -> str:
    if BACKWARD_RX.search(name):
        return "backward"
    if OPTIMIZER_RX.search(name):
        return "optimizer_step" if OPTIMIZER_STEP_RX.search(name) else "optimizer"
    if DATA_RX.search(name):
        return "data"
    if MODULE_RX.search(name):
        return "module"
    if SYNC_RX.search(name):
        return "sync"
    if SAVE_RX.search(name):
        return "save"
    if STATE_DICT_RX.search(name):
        return "state_dict"
    if FILE_WRITE_RX.search(name):
        return "write"
    if EVAL_MODE_RX.search(name):
        return "no_grad"
    if name in FORWARD_OPS:
        return "forward_op"
    if CHECKPOINT_FRAME_RX.search(name):
        return "ckpt"
    for phase, rx in RANGE_RX.items():
        if rx.search(name):
            return "range_" + phase
    if ALL_GATHER_RX.search(name):
        return "all_gather"
    if LOG_RX.search(name):
        return "log"
    if INPLACE_RX.search(name):
        return "inplace"
    return ""


def _host_classes(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``rows`` its class (``_classify``: an object array of shared strings) and
    that class's code (what ``_cls`` compares)."""
    lut, codes = lut_at(ev["name"], rows, _classify, "", object)
    cls = lut.take(codes)
    cls_i = _class_codes(lut).take(codes)
    # a new DataLoader iterator's seed draw (its .item() on a CPU tensor) is the data phase,
    # no host sync (passes/dataloader.py: workers_restart's epoch starts read "1 host sync")
    seed = np.isin(rows, np.concatenate([r for _, _, r in epoch_ends(ev)] or [rows[:0]]))
    if seed.any():
        cls = cls.copy()
        cls[seed] = "data"
        cls_i = cls_i.copy()
        cls_i[seed] = _class_codes(np.array(["data"], object))[0]
    return cls, cls_i


def _host(ev: pd.DataFrame, pid: int) -> dict:
    """The main process's host rows with their class code (``_host_classes``), sorted by
    start. The class names are not kept: every reader compares the codes (``_cls``)."""
    rows = rows_of(ev, HOST_KINDS + ("osrt",))
    rows = rows[ev["pid"].to_numpy()[rows] == pid]
    cls_i = _host_classes(ev, rows)[1]
    ts = ev["ts"].to_numpy(np.int64)[rows]
    if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():   # the event table's rows come sorted
        order = np.argsort(ts, kind="stable")
        rows, cls_i, ts = rows[order], cls_i[order], ts[order]
        del order
    kind = _labels(ev["kind"], rows)
    dims, has_dims = _dims(ev, rows)
    end = ts + ev["dur"].to_numpy(np.int64)[rows]
    tid = ev["tid"].to_numpy()[rows]
    # object arrays of shared strings (8 B a row): fixed-width str arrays were 48-56 B a
    # row for each of kind and cls, the analysis's peak at 1 GB (~170 MB)
    return {"rows": rows, "cls_i": cls_i, "ts": ts, "end": end, "tid": tid,
            "kind": kind, "name": _names(ev, rows, {"cls_i": cls_i}),
            "prof": _profiler_cost(ev, rows, kind),
            "outer": _outermost(ts, end, tid, kind == "cpu_op"),
            "flop_ns": _flop_op_ns(ev, rows), "dims": dims,
            "has_dims": has_dims,
            "batch_op": lookup_at(ev["name"], rows, lambda n: n not in TABLE_OPS, False, bool),
            "act_op": lookup_at(ev["name"], rows, lambda n: n in ACTIVATION_OPS, False, bool),
            "emb_op": lookup_at(ev["name"], rows, lambda n: n == "aten::embedding", False, bool)}


def _profiler_cost(ev: pd.DataFrame, rows: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """The profiler's cost of each host row (passes/overhead.py's per recorded op, more with
    its shapes, per Python frame): what the anatomy's figures lose without the profiler."""
    from .overhead import FRAME_NS, PER_OP_NS, SHAPES_NS, _shaped

    # int32 (4 B a host row): its readers only sum it, and numpy sums int32 in int64
    out = np.where(kind == "python", FRAME_NS, 0).astype(np.int32)
    op = np.flatnonzero(kind == "cpu_op")
    if len(op):
        shaped = _shaped(ev.iloc[rows[op], [ev.columns.get_loc("input_dims")]]) \
            if "input_dims" in ev else np.zeros(len(op), bool)
        out[op] = np.where(shaped, PER_OP_NS + SHAPES_NS, PER_OP_NS)
    return out


def _prof(h, u, on=None) -> int:
    """The profiler's cost (``_profiler_cost``) of the rows starting inside the intervals
    ``u`` (of the rows ``on``)."""
    m = _inside(u, h["ts"])
    if on is not None:
        m &= on
    return int(h["prof"][m].sum())


_CLASS_CODE: dict[str, int] = {}   # a class (``_classify``) -> its small-int code


def _class_codes(lut: np.ndarray) -> np.ndarray:
    """The codes (``_CLASS_CODE``) of an object array of classes, per distinct class."""
    at, uniq = pd.factorize(lut)
    codes = np.array([_CLASS_CODE.setdefault(str(u), len(_CLASS_CODE)) for u in uniq] + [-1],
                     np.int16)
    return codes[at]


def _cls(h: dict, *names: str) -> np.ndarray:
    """Rows of ``h`` (the host rows or a step's slice) whose class is one of ``names``:
    small-int compares (an object compare per row and name was ~1/4 of the steps' loop)."""
    ci = h["cls_i"]
    out = np.zeros(len(ci), bool)
    for n in names:
        c = _CLASS_CODE.get(n)
        if c is not None:
            out |= ci == c
    return out


def _labels(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col``'s values at ``rows`` as str, in an object array (one object per distinct
    value, not per row; a null reads "nan", as ``astype(str)`` reads it)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.to_numpy()[rows].astype(str).astype(object)
    cats = np.asarray(col.cat.categories.astype(str), object)
    return np.r_[cats, np.array(["nan"], object)][col.cat.codes.to_numpy()[rows]]


def _names(ev: pd.DataFrame, rows: np.ndarray, h: dict) -> np.ndarray:
    """The names the passes compare (module frames, syncs); "" elsewhere (all host names
    as strings would cost more than the whole pass)."""
    out = np.full(len(rows), "", object)
    sel = np.flatnonzero(_cls(h, "module", "sync", "forward_op"))
    if len(sel):
        out[sel] = ev["name"].take(rows[sel]).astype(str).to_numpy()
    return out


def _outermost(ts, end, tid, is_op) -> np.ndarray:
    """Cpu ops that no other cpu op of their thread encloses."""
    out = np.zeros(len(ts), bool)
    for t in np.unique(tid[is_op]):
        m = np.flatnonzero(is_op & (tid == t))
        prev = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[m][:-1]]))
        out[m] = ts[m] >= prev
    return out


def _dims(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each counted op's input dims (parsed once per distinct text), None elsewhere; where
    they are not None): the mask set here, not by a test of every host row after."""
    from .flops import FLOP_OPS

    out = np.full(len(rows), None, object)
    has = np.zeros(len(rows), bool)
    if "input_dims" not in ev:
        return out, has
    hit = lookup_at(ev["name"], rows, lambda n: n in FLOP_OPS or n in FORWARD_OPS, False, bool)
    cache: dict = {}
    for i, text in zip(np.flatnonzero(hit).tolist(),
                       ev["input_dims"].take(rows[hit]).tolist()):
        if text not in cache:
            cache[text] = _parse(text)
        out[i] = cache[text]
        has[i] = cache[text] is not None
    return out, has


def _parse(text):
    import json

    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _flop_op_ns(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Host ns of each row that is a counted matmul/conv/attention op (its compute on a CPU)."""
    from .flops import FLOP_OPS

    hit = lookup_at(ev["name"], rows, lambda n: n in FLOP_OPS, False, bool)
    return np.where(hit, ev["dur"].to_numpy(np.int64)[rows], 0)


def _gpu(ev: pd.DataFrame, pid: int) -> dict:
    """GPU ops of the process with the start of the call that launched each (-1: none)."""
    rows = rows_of(ev, GPU_KINDS)
    rows = rows[ev["pid"].to_numpy()[rows] == pid] if len(rows) else rows
    lr = launcher(ev, rows)
    ts = ev["ts"].to_numpy(np.int64)
    return {"ts": ts[rows], "dur": ev["dur"].to_numpy(np.int64)[rows],
            "launch": np.where(lr >= 0, ts[np.maximum(lr, 0)], -1),
            "launch_tid": np.where(lr >= 0, ev["tid"].to_numpy()[np.maximum(lr, 0)], -1)}


def _root_module(host: dict) -> str | None:
    """The model: the outermost module frame outside backward with the most time."""
    m = _cls(host, "module")
    if not m.any():
        return None
    ts, end, tid = host["ts"][m], host["end"][m], host["tid"][m]
    names = host["name"][m]
    outer = np.zeros(len(ts), bool)
    for t in np.unique(tid):
        k = np.flatnonzero(tid == t)
        prev = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[k][:-1]]))
        outer[k] = ts[k] >= prev
    bw = _union(host, _cls(host, "backward"))
    outside = ~_inside(bw, ts)
    sel = outer & outside
    if not sel.any():
        return None
    tot = pd.Series(end[sel] - ts[sel]).groupby(names[sel]).sum()
    return str(tot.idxmax())


# -- interval helpers --------------------------------------------------------------------------

def _union(host: dict, mask: np.ndarray, lo: int | None = None, hi: int | None = None):
    s, e = host["ts"][mask], host["end"][mask]
    if lo is not None:
        s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
    return iv.union(s, e)


def _inside(u, ts: np.ndarray) -> np.ndarray:
    """Whether each time lies inside the interval set ``u``."""
    s, e = u
    if not len(s) or not len(ts):
        return np.zeros(len(ts), bool)
    k = np.searchsorted(s, ts, side="right") - 1
    return (k >= 0) & (ts < e[np.maximum(k, 0)])


# -- one step ----------------------------------------------------------------------------------

def _one_step(host: dict, gpu: dict, root: str | None, s) -> dict:
    a, b = int(s.start), int(s.end)
    lo = np.searchsorted(host["ts"], a, side="left")
    hi = np.searchsorted(host["ts"], b, side="left")
    h = {k: v[lo:hi] for k, v in host.items()}
    main = h["tid"] == s.tid
    bw = _union(h, _cls(h, "backward"), a, b)
    sets = {"data": iv.union(*_both(_union(h, _cls(h, "data"), a, b),
                                    _union(h, _cls(h, "range_data"), a, b))),
            "optimizer": _union(h, _cls(h, *("optimizer", "optimizer_step",
                                                 "range_optimizer")), a, b),
            "backward": iv.union(*_both(bw, _union(h, _cls(h, "range_backward"), a, b)))}
    fwd = _forward_set(h, main, root, sets, a, b)
    sets["forward"] = fwd
    host_ns, taken = {}, (np.empty(0, np.int64), np.empty(0, np.int64))
    for p in PRIORITY:
        own = iv.subtract(sets[p], taken)
        host_ns[p] = iv.total(own)
        taken = iv.union(*_both(taken, sets[p]))
    host_ns["other"] = max(0, (b - a) - iv.total(iv.intersect(taken, iv.union([a], [b]))))
    gpu_ns = _gpu_by_phase(gpu, sets, a, b)
    passes = _backward_passes(h, main, bw)
    periods = _pass_periods(h, passes)
    fw = _forward_calls(h, root, bw)
    if root:
        fo_ns, fo_u = _forward_only_ns(h, root, bw, passes, b)
        fo = max(0, fw - len(passes))
    else:
        fo_ns, fo, fo_u = _forward_only_ops(h, main, sets, passes)
    rc = _recompute_rows(h, bw, root)
    ck_cost, ck_prof = _checkpoint_cost(h, bw, rc["set"], a, b)
    outside_opt = ~_inside(sets["optimizer"], h["ts"])
    # the optimizer's and the DataLoader's own .item()s are not the step's syncs
    syncs = (_cls(h, "sync")) & outside_opt & ~_inside(sets["data"], h["ts"]) & \
        ~_nested_sync(h)
    save = _union(h, _cls(h, "save", "write"), a, b)
    save = iv.union(*_both(save, _state_for_save(h, main, a, b)))
    ag = (_cls(h, "all_gather")) & h["outer"] & ~_inside(bw, h["ts"]) & outside_opt
    fb = iv.union(*_both(fwd, bw))
    log_u = _log_work(h, sets, a)
    rows_u = lambda m: iv.union(h["ts"][m], h["end"][m])  # noqa: E731
    return {"step": int(s.number), "label": str(s.label), "start": a, "dur": b - a,
            "span_ns": _span(gpu, a, b), "host_ns": host_ns,
            "gpu_ns": gpu_ns, "backward_passes": len(passes), "pass_spans": passes,
            "forward_calls": fw, "optimizer_steps": int(((_cls(h, "optimizer_step"))).sum()),
            "pass_periods": [e - s for s, e in periods],
            "forward_only": fo,
            "no_grad": bool((_cls(h, "no_grad")).any()),
            "syncs": int(syncs.sum()), "sync_rows": h["rows"][syncs][:3].tolist(),
            "sync_ns": int((h["end"][syncs] - h["ts"][syncs]).sum()),
            "save_ns": iv.total(save), "save_rows": h["rows"][_cls(h, "save", "write")][:2].tolist(),
            "all_gathers": int(ag.sum()), "all_gather_ns": _ns(h, ag),
            "log": int((_cls(h, "log")).sum()), "log_ns": iv.total(log_u),
            "forward_only_ns": fo_ns,
            "recompute_ns": iv.total(rc["set"]), "recompute_gpu_ns": _gpu_in(gpu, rc["set"]),
            "recompute_modules": rc["modules"], "recompute_rows": rc["rows"],
            "checkpoint_ns": ck_cost, "batch": _batch(h),
            "flop_ns_fb": int(h["flop_ns"][_inside(fb, h["ts"])].sum()),
            # the rows of those ops (CPU traces only: what ``_flop_fixed_each`` reads)
            "flop_rows_fb": h["rows"][(h["flop_ns"] > 0) & _inside(fb, h["ts"])]
            if not len(gpu["ts"]) else h["rows"][:0],
            "eval_rows": h["rows"][_cls(h, "no_grad")][:2].tolist(),
            # the profiler's cost (passes/overhead.py) inside each figure above the
            # savings read: ``without_profiler`` takes it out
            "prof": {"step": int(h["prof"][main].sum()), "forward_only": _prof(h, fo_u, main),
                     "log": _prof(h, log_u, main),
                     "save": _prof(h, save, main), "syncs": int(h["prof"][syncs].sum()),
                     "all_gathers": _prof(h, rows_u(ag), main), "checkpoint": ck_prof,
                     "recompute": _prof(h, rc["set"]), "fb": _prof(h, fb),
                     "flop_fb": int(h["prof"][(h["flop_ns"] > 0) & _inside(fb, h["ts"])].sum()),
                     "periods": [_prof(h, iv.union([s], [e])) for s, e in periods]}}


def _state_for_save(h, main, a: int, b: int) -> tuple:
    """The state_dict() calls on the training thread that feed each save: from the first of
    a chain of them, each ending at most STATE_GAP_NS before the next one (or the save)
    starts, to the save's start (intervals, clipped to the step [a, b])."""
    lo, hi = [], []
    sd = _cls(h, "state_dict") & main
    if sd.any():
        ts, end = h["ts"][sd], h["end"][sd]
        top = ts >= np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, end[:-1]])
        ts, end = ts[top], end[top]   # not nested in another one: sorted, disjoint
        for t0 in _union(h, _cls(h, "save") & main, a, b)[0].tolist():
            k, nxt = int(np.searchsorted(end, t0, side="right")), t0
            while k > 0 and nxt - end[k - 1] <= STATE_GAP_NS:
                k -= 1
                nxt = int(ts[k])
            if nxt < t0:
                lo.append(max(nxt, a))
                hi.append(t0)
    return np.array(lo, np.int64), np.array(hi, np.int64)


def _both(x, y):
    return np.concatenate([x[0], y[0]]), np.concatenate([x[1], y[1]])


def _forward_set(h, main, root, sets, a, b):
    """Forward: the outermost module frames (every module, the loss's too) and the forward
    ranges; without frames, the step thread's outermost ops outside the other phases."""
    if root:
        f = _union(h, _cls(h, "module"), a, b)
    else:
        other = iv.union(*_both(_both(sets["data"], sets["optimizer"]), sets["backward"]))
        ops = h["outer"] & main & ~_inside(other, h["ts"])
        f = _union(h, ops, a, b) if sets["backward"][0].size else iv.union([], [])
    return iv.union(*_both(f, _union(h, _cls(h, "range_forward"), a, b)))


def _gpu_by_phase(gpu: dict, sets: dict, a: int, b: int) -> dict:
    """GPU ns of the ops each phase launched (by the launching call's start)."""
    if not len(gpu["ts"]):
        return {p: None for p in PHASES}
    m = (gpu["launch"] >= a) & (gpu["launch"] < b)
    lt, dur = gpu["launch"][m], gpu["dur"][m]
    left = np.ones(len(lt), bool)
    out = {}
    for p in PRIORITY:
        hit = left & _inside(sets[p], lt)
        out[p] = int(dur[hit].sum())
        left &= ~hit
    out["other"] = int(dur[left].sum())
    return out


def _span(gpu: dict, a: int, b: int) -> int:
    """The step as the program runs it: from its start to the later of its host span's end
    and the end of the GPU work it launched (vLLM piecewise prefill: the host's 26.4 ms
    launch 305 ms of GPU work and waits)."""
    m = (gpu["launch"] >= a) & (gpu["launch"] < b)
    end = int((gpu["ts"][m] + gpu["dur"][m]).max()) if m.any() else b
    return max(b, end) - a


def _gpu_in(gpu: dict, u) -> int | None:
    if not len(gpu["ts"]):
        return None
    if not len(u[0]):   # no recompute in the step (most): no mask of every GPU op per step
        return 0
    return int(gpu["dur"][_inside(u, gpu["launch"])].sum())


# work the log call's lead-in never walks past: another job's (its own hold) or a phase's
LOG_LEAD_MAX = 32
LOG_STOP = ("log", "save", "write", "all_gather", "ckpt", "module", "data",
            "backward", "optimizer", "optimizer_step")


def _log_work(h, sets: dict, a: int):
    """The logging's host intervals: each log call with the metric work that computes what
    it logs -- the calls of its frame run back to back before it (pairs/log: the gradient
    norm, the batch accuracy; Python evaluates a call's arguments just before it), back to
    the first that is a phase's (forward, backward, optimizer, data), another job's or one
    that writes a tensor in place (clip_grad_norm_: the training's, not the log's). The
    ``.item()`` syncs among them are left out: the step's syncs are their own hold."""
    logs = np.flatnonzero(_cls(h, "log"))
    if not len(logs):
        return iv.union([], [])
    phases = iv.union(*_both(_both(sets["data"], sets["optimizer"]),
                             _both(sets["backward"], sets["forward"])))
    # and training work: a call that writes a kept tensor (clip_grad_norm_ scales the grads)
    stop = _cls(h, *LOG_STOP) | (_cls(h, "inplace") & h["outer"])
    s, e = [], []
    for n, i in enumerate(logs.tolist()):
        # each lead-in scans the step's rows: past LOG_LEAD_MAX calls (a print() in a loop)
        # a call counts alone
        j = _log_lead_in(h, i, phases, stop, a) if n < LOG_LEAD_MAX else i
        s.append(int(h["ts"][j]))
        e.append(int(h["end"][i]))
    syncs = _union(h, _cls(h, "sync"))
    return iv.subtract(iv.union(s, e), syncs)


def _log_lead_in(h, i: int, phases, stop: np.ndarray, a: int) -> int:
    """The first row of log call ``i``'s lead-in (``_log_work``): ``i`` itself where the
    call before it in its frame is a phase's or another job's."""
    ts, end, tid = h["ts"], h["end"], h["tid"]
    same = np.flatnonzero(tid[:i] == tid[i])   # the rows before ``i`` on its thread
    encl = same[(end[same] >= end[i])]
    lo = int(ts[encl[-1]]) if len(encl) else a     # the enclosing frame's start
    sib = same[(ts[same] > lo) & (end[same] <= ts[i])] if len(encl) else \
        same[(ts[same] >= lo) & (end[same] <= ts[i])]
    if not len(sib):
        return i
    # the frame's own calls: those no earlier call before ``i`` encloses
    reach = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[sib][:-1]]))
    top = sib[ts[sib] >= reach]
    first = i
    ps, pe = phases
    for j in top[::-1].tolist():
        hi = int(np.searchsorted(ts, end[j], side="left"))
        k = np.searchsorted(pe, ts[j], side="right")
        in_phase = k < len(ps) and ps[k] < end[j]
        if in_phase or (stop[j:hi] & (tid[j:hi] == tid[i])).any():
            break
        first = j
    return first


def _nested_sync(h) -> np.ndarray:
    """A ``_local_scalar_dense`` inside an ``aten::item``: one sync, counted once."""
    dense = h["name"] == "aten::_local_scalar_dense"
    if not dense.any():
        return dense
    items = h["name"] == "aten::item"
    return dense & _inside(iv.union(h["ts"][items], h["end"][items]), h["ts"])


def _backward_passes(h, main, bw) -> list[list[int]]:
    """[start, end] of each backward pass: backward nodes no host op of the step's own thread
    interrupts (the next micro-batch's forward, its loss, its .item())."""
    nodes = _cls(h, "backward")
    if not nodes.any():
        return []
    s, e = bw
    ops = main & (h["kind"] == "cpu_op") & ~nodes & ~_inside(bw, h["ts"])
    cuts = np.sort(h["ts"][ops])
    # a new pass where a host op of the step's thread starts between two backward stretches
    k = np.searchsorted(cuts, e[:-1], side="left")
    new = (k < len(cuts)) & (cuts[np.minimum(k, max(0, len(cuts) - 1))] < s[1:]) \
        if len(cuts) else np.zeros(len(s) - 1, bool)
    first = np.flatnonzero(np.concatenate([[True], new]))
    last = np.append(first[1:] - 1, len(s) - 1)
    return [[int(s[a]), int(e[b])] for a, b in zip(first.tolist(), last.tolist())]


def _pass_periods(h, passes: list) -> list[tuple[int, int]]:
    """(start, end) from one backward pass's end to the next's, where no optimizer step runs
    between them: one accumulation micro-batch's whole loop iteration (its forward, its loss
    and scaling, its backward, the .item() after it), not its forward + backward alone."""
    if len(passes) < 2:
        return []
    ends = np.array([p[1] for p in passes], np.int64)
    opt = np.sort(h["ts"][_cls(h, "optimizer_step")])
    k = np.searchsorted(opt, ends)
    same = np.flatnonzero(k[1:] == k[:-1])   # no optimizer step started between the two ends
    return [(int(ends[i]), int(ends[i + 1])) for i in same.tolist()]


def _checkpoint_cost(h, bw, rc, a: int, b: int) -> tuple[int, int]:
    """(host time, the profiler's cost in it) checkpointing adds: its frames (the pack hooks
    in forward, the unpack hooks that recompute in backward) and the recomputation, less the
    forward inside them (which runs without checkpointing too)."""
    ck = _union(h, _cls(h, "ckpt"), a, b)
    if not len(ck[0]) and not len(rc[0]):
        return 0, 0
    allc = iv.union(*_both(ck, rc))
    fwd = (_cls(h, "module")) & ~_inside(bw, h["ts"])
    inner = iv.intersect(_union(h, fwd, a, b), ck)
    return max(0, iv.total(allc) - iv.total(inner)), max(0, _prof(h, allc) - _prof(h, inner))


def _batch(h) -> list[int] | None:
    """[batch, tokens] of the step's largest activation input (``ACTIVATION_OPS``: a
    linear's or a convolution's first input), else of its first counted matmul/conv's: its
    leading dimension and the product of all but its last (None without shapes). An
    embedding's first input is its table, not the batch."""
    dims = h.get("dims")
    if dims is not None and h.get("act_op") is not None:
        best, size = None, 0
        for i in np.flatnonzero(h["has_dims"] & h["act_op"])[:ACTIVATION_ROWS].tolist():
            x = next((d for d in dims[i] if isinstance(d, list) and len(d) >= 2), None)
            n = int(np.prod(x)) if x and all(isinstance(v, int) for v in x) else 0
            if n > size:
                best, size = x, n
        if best and _flat_tokens(h, dims, int(best[0])) and len(best) == 2:
            return None   # its rows are the step's tokens: how many requests is not shown
        if best:
            return [int(best[0]), int(best[0] * best[1]) if len(best) == 3 else int(best[0])]
    k = np.flatnonzero(h["has_dims"] & h["batch_op"]) if dims is not None else []
    for i in k[:1]:
        x = next((d for d in dims[i] if isinstance(d, list) and len(d) >= 2), None)
        if x:
            return [int(x[0]), int(x[0] * x[1]) if len(x) == 3 else int(x[0])]
    return None


def _flat_tokens(h, dims, rows: int) -> bool:
    """The step's aten::embedding looks up ``rows`` ids as one flat [rows] vector: a serving
    engine's flattened batch (SGLang prefill: ids [15360], linears [15360, 4096] -- 15
    requests' tokens, read as 'inference batch 15360'), not [batch, seq] (HF's [16, 559])."""
    emb = h.get("emb_op")
    if emb is None:
        return False
    for i in np.flatnonzero(h["has_dims"] & emb)[:4].tolist():
        ids = dims[i][1] if len(dims[i]) > 1 else None
        if isinstance(ids, list) and ids == [rows]:
            return True
    return False


def _ns(h, mask) -> int:
    return iv.total(iv.union(h["ts"][mask], h["end"][mask]))


def _forward_only_ns(h, root, bw, passes, b: int) -> tuple:
    """(host time, intervals) of the root module's calls that no backward pass follows
    before the next call (or the step's end): the forward-only passes -- or of the
    evaluation's frame that holds them (``_eval_frame``) where it is longer."""
    if not root:
        return 0, iv.union([], [])
    m = np.flatnonzero((h["name"] == root) & ~_inside(bw, h["ts"]))
    starts = np.array([p[0] for p in passes], np.int64)
    total, fo, trained = 0, [], []
    for i, r in enumerate(m.tolist()):
        nxt = h["ts"][m[i + 1]] if i + 1 < len(m) else b
        if not ((starts >= h["end"][r]) & (starts < nxt)).any():
            total += int(h["end"][r] - h["ts"][r])
            fo.append(r)
        else:
            trained.append(r)
    frame = _eval_frame(h, fo, trained, starts)
    if frame is not None and frame[1] - frame[0] > total:
        return frame[1] - frame[0], iv.union([frame[0]], [frame[1]])
    return total, iv.union(h["ts"][fo], h["end"][fo])


def _eval_frame(h, fo: list, trained: list, starts: np.ndarray) -> tuple | None:
    """(start, end) of the innermost Python frame that holds every forward-only pass of
    the step and nothing of its training (no training forward, backward pass or optimizer
    row): the evaluation's own function (pairs/valid's validate(): its eval() / train()
    toggles, losses and .item()s besides the passes, 3.36 ms where the passes are 2.99 ms);
    None where no frame holds them alone (no with_stack, or the passes are inline)."""
    if not fo:
        return None
    lo, hi = int(h["ts"][fo].min()), int(h["end"][fo].max())
    tid = h["tid"][fo[0]]
    cand = np.flatnonzero((h["kind"] == "python") & (h["tid"] == tid) & (h["ts"] <= lo)
                          & (h["end"] >= hi))
    if not len(cand):
        return None
    ts, end = h["ts"][cand], h["end"][cand]
    bad = np.r_[starts, h["ts"][trained],
                h["ts"][_cls(h, "optimizer", "optimizer_step") & (h["tid"] == tid)]]
    clean = ~((bad[None, :] >= ts[:, None]) & (bad[None, :] < end[:, None])).any(axis=1)
    if not clean.any():
        return None
    k = np.flatnonzero(clean)[np.argmin((end - ts)[clean])]
    return int(ts[k]), int(end[k])


def _forward_only_ops(h, main, sets, passes) -> tuple:
    """Without module frames: forward operators (``aten::linear``, ...) on the step's thread
    after its last backward pass, outside the other phases -- a forward no backward follows.
    (host ns of their stretch, passes: the calls of its first operator with its shapes, as
    each pass starts with the same first layer, the stretch)."""
    none = iv.union([], [])
    if not passes:
        return 0, 0, none
    other = iv.union(*_both(_both(sets["data"], sets["optimizer"]), sets["backward"]))
    f = np.flatnonzero(main & h["outer"] & (_cls(h, "forward_op"))
                       & (h["ts"] >= passes[-1][1]) & ~_inside(other, h["ts"]))
    if not len(f):
        return 0, 0, none
    span = iv.subtract(iv.union([h["ts"][f[0]]], [h["end"][f].max()]), other)
    first, name = h["dims"][f[0]], h["name"][f[0]]
    n = sum(1 for j in f.tolist() if h["dims"][j] == first and h["name"][j] == name) \
        if first is not None else 1
    return iv.total(span), n, span


def _forward_calls(h, root, bw) -> int:
    if not root:
        return 0
    m = (h["name"] == root) & ~_inside(bw, h["ts"])
    return int(m.sum())


def _recompute_rows(h, bw, root) -> dict:
    """Forward work inside backward nodes: the outermost module frames there (the
    checkpointed modules), else forward-only operators there."""
    ins = _inside(bw, h["ts"])
    mods = ins & (_cls(h, "module"))
    if mods.any():
        ts, end = h["ts"][mods], h["end"][mods]
        prev = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[:-1]]))
        outer = ts >= prev
        names = h["name"][mods][outer]
        u = iv.union(ts[outer], end[outer])
        return {"set": u, "modules": sorted({n[len("nn.Module: "):] for n in names}),
                "rows": h["rows"][mods][outer][:3].tolist()}
    f = ins & (_cls(h, "forward_op")) & h["outer"]
    return {"set": iv.union(h["ts"][f], h["end"][f]), "modules": [],
            "rows": h["rows"][f][:3].tolist()}


# -- over the steps ----------------------------------------------------------------------------

def _phase_means(tab: pd.DataFrame) -> dict:
    out = {}
    for p in PHASES:
        host = [r[p] for r in tab["host_ns"]]
        g = [r[p] for r in tab["gpu_ns"]]
        out[p] = {"host_ns": int(np.mean(host)),
                  "gpu_ns": None if g[0] is None else int(np.mean(g))}
    return out


def _per_step_rows(tab: pd.DataFrame) -> list[dict]:
    return [{"step": int(r.step), "dur_ns": int(r.dur), "host_ns": dict(r.host_ns),
             "gpu_ns": dict(r.gpu_ns), "forward_calls": int(r.forward_calls),
             "backward_passes": int(r.backward_passes), "optimizer_steps": int(r.optimizer_steps),
             "syncs": int(r.syncs), "recompute_ns": int(r.recompute_ns)}
            for r in tab.itertuples(index=False)]


def _passes(tab: pd.DataFrame) -> dict:
    return {"forward_per_step": float(tab["forward_calls"].median()),
            "backward_per_step": float(tab["backward_passes"].median()),
            "optimizer_steps_per_step": float(tab["optimizer_steps"].median())}


def _typical_passes(bp: pd.Series) -> int:
    """Backward passes of an ordinary step: the lower median over the steps that run any -- a
    count some step has (a truncated file's [1, 0] has no step at the median 0.5); 0: none."""
    v = np.sort(bp[bp >= 1].to_numpy())
    return int(v[(len(v) - 1) // 2]) if len(v) else 0


def _micro_batches(host: dict, steps: pd.DataFrame, tab: pd.DataFrame) -> dict | None:
    """Backward passes per optimizer step, and what one forward + backward costs."""
    spans = [p for ps in tab["pass_spans"] for p in ps]
    if not spans:
        return None
    typical = _typical_passes(tab["backward_passes"])
    opt = host["ts"][_cls(host, "optimizer_step")]
    if len(opt):
        # passes ending between consecutive optimizer steps (the first group may be cut)
        k = np.searchsorted(np.sort(opt), [e for _s, e in spans], side="left")
        counts = pd.Series(k).value_counts().sort_index()
        inner = counts[(counts.index > 0) & (counts.index < len(opt))]
        per = inner if len(inner) else counts
        m = int(per.median())
        basis = "optimizer steps"
    else:
        m = typical
        basis = "profiler steps"
    if m < 1 or typical < 1:
        return None
    ordinary = tab[tab["backward_passes"] == typical]
    fb = np.array([r["forward"] + r["backward"] for r in ordinary["host_ns"]], float)
    gfb = [r["forward"] + r["backward"] if r["forward"] is not None else None
           for r in ordinary["gpu_ns"]]
    per_step = typical
    syncs = float(ordinary["syncs"].median())
    periods = [x for ps in ordinary["pass_periods"] for x in ps]
    pprof = [x for r in ordinary["prof"] for x in r["periods"]]
    return {"per_optimizer_step": m, "basis": basis,
            "host_ns_each": int(fb.mean() / per_step),
            # one micro-batch's loop iteration (backward end to backward end) where the steps
            # show two in a row: what a micro-batch costs beyond its forward + backward
            "period_ns_each": int(np.mean(periods)) if m >= 2 and periods else None,
            # the profiler's cost inside the three figures the saving model reads
            "profiler_ns_each": {"host": _prof_mean(ordinary, "fb") // per_step,
                                 "period": int(np.mean(pprof)) if m >= 2 and pprof else 0,
                                 "flop": _prof_mean(ordinary, "flop_fb") // per_step},
            "gpu_ns_each": None if gfb[0] is None else int(np.mean(gfb) / per_step),
            "flop_host_ns_each": int(ordinary["flop_ns_fb"].mean() / per_step),
            "syncs_per_micro_batch": syncs / per_step,
            "sync_ns_per_step": int(ordinary["sync_ns"].median())}


def _flop_fixed_each(ev: pd.DataFrame, pid: int, ordinary: pd.DataFrame,
                     mb: dict) -> int | None:
    """Of a micro-batch's matmul/conv/attention host time (``flop_host_ns_each``), the part
    that does not grow with its batch: each op's time less what grows, as larger_batch
    prices a batch k times the size (replay/hostcost.py ``batch_work``: per op name, own
    time = fixed + b x work over the sizes BEFORE shows; one size: the dispatch floor). m
    micro-batches in one pay it once (pairs/accum: m = 4 of 16 rows). None: not micro-
    batched, or no shapes (the batch is read from them)."""
    from .replay.hostcost import batch_work

    batch = [b[0] for b in ordinary["batch"] if b]
    rows = np.concatenate([np.asarray(r, np.int64) for r in ordinary["flop_rows_fb"]]
                          or [np.zeros(0, np.int64)])
    per_step = max(1, _typical_passes(ordinary["backward_passes"]))
    if int(mb.get("per_optimizer_step") or 0) < 2 or not batch or not len(rows):
        return None
    # the thread's ops in the ordinary steps: the nesting (own time) and the per-name fit
    kind, pids = ev["kind"].to_numpy(), ev["pid"].to_numpy()
    start = ordinary["start"].to_numpy(np.int64)
    inside = _inside(iv.union(start, start + ordinary["dur"].to_numpy(np.int64)),
                     ev["ts"].to_numpy(np.int64))
    at = np.flatnonzero(inside & (kind == "cpu_op") & (pids == pid))
    ops = ev.iloc[at][["tid", "ts", "dur", "name", "input_dims"]] if "input_dims" in ev \
        else None
    w = batch_work(ops, int(pd.Series(batch).mode().iat[0])) if ops is not None else None
    if w is None:
        return None
    grows = np.where(w["carries"].to_numpy(), w["own_ns"].to_numpy(np.int64)
                     - w["fixed_ns"].to_numpy(np.int64), 0)
    mine = np.isin(at, rows)
    fixed = int((ops["dur"].to_numpy(np.int64)[mine] - grows[mine]).clip(0).sum())
    return fixed // (len(ordinary) * per_step)


def _training(tab: pd.DataFrame, host: dict) -> bool | None:
    """Backward or optimizer work in the steps; None when no framework op is traced at all
    (an nsys capture without torch's ranges cannot tell)."""
    if (tab["backward_passes"] > 0).any() or (tab["optimizer_steps"] > 0).any():
        return True
    return False if (host["kind"] == "cpu_op").any() else None


def _inference(tab: pd.DataFrame) -> dict | None:
    """Per-request reading of a program with no backward: the batch and tokens of each step
    from its first matmul's input, prefill (several tokens a row) and decode (one) steps."""
    b = [x for x in tab["batch"] if x]
    if not b:
        return None
    batch = int(np.median([x[0] for x in b]))
    per_row = [x[1] / max(1, x[0]) for x in b]
    decode = [x for x, r in zip(tab.itertuples(index=False), tab["batch"]) if r and r[1] == r[0]]
    prefill = [x for x, r in zip(tab.itertuples(index=False), tab["batch"]) if r and r[1] > r[0]]
    out = {"batch": batch, "tokens_per_row": float(np.median(per_row)),
           # a request lasts until its GPU work ends, not just the host's span
           "request_ns": int(tab["span_ns"].mean()),
           "forward_host_ns": int(np.mean([r["forward"] for r in tab["host_ns"]])),
           # the input's loading and preprocessing: per sample, batching does not share it
           "data_host_ns": int(np.mean([r["data"] for r in tab["host_ns"]])),
           "flop_host_ns": int(tab["flop_ns_fb"].mean()),
           # a GPU request's compute is its GPU work, not the host's time in matmul ops
           "gpu_ns": None if tab["gpu_ns"].iloc[0]["forward"] is None else
           int(np.mean([sum(r.values()) for r in tab["gpu_ns"]])),
           "decode_steps": len(decode) if prefill and decode else None,
           "prefill_steps": len(prefill) if prefill and decode else None}
    if prefill and decode:
        out["prefill_ns"] = int(np.mean([x.span_ns for x in prefill]))
        out["decode_ns"] = int(np.mean([x.span_ns for x in decode]))
    return out


def _recompute(tab: pd.DataFrame) -> dict | None:
    if not (tab["recompute_ns"] > 0).any():
        return None
    mods = sorted({m for ms in tab["recompute_modules"] for m in ms})
    bw = np.array([r["backward"] for r in tab["host_ns"]], float)
    g = tab["recompute_gpu_ns"]
    return {"host_ns_per_step": int(tab["recompute_ns"].mean()),
            "gpu_ns_per_step": None if g.iloc[0] is None else int(g.mean()),
            "modules": mods, "layers": len(mods) or None,
            "checkpoint_ns_per_step": int(tab["checkpoint_ns"].mean()),
            "share_of_backward": float(tab["recompute_ns"].sum() / bw.sum()) if bw.sum() else None,
            "profiler_ns_per_step": _prof_mean(tab, "recompute"),
            "checkpoint_profiler_ns_per_step": _prof_mean(tab, "checkpoint")}


def _prof_mean(tab: pd.DataFrame, key: str) -> int:
    """The steps' mean profiler cost inside one figure (``_one_step``'s ``prof``)."""
    return int(np.mean([r[key] for r in tab["prof"]])) if len(tab) else 0


CONTENTS = ("forward_only", "save", "syncs", "all_gathers", "log", "backward_passes",
            "optimizer_steps")


def _contents(r) -> tuple:
    return (int(r.forward_only), r.save_ns >= SAVE_MIN_NS, int(r.syncs), int(r.all_gathers),
            r.log > 0, int(r.backward_passes), int(r.optimizer_steps))


def _odd_steps(tab: pd.DataFrame) -> list[dict]:
    """Groups of steps whose contents differ from the ordinary steps', or that are SLOW_X x
    the median step with the same contents; each with what it holds the others do not."""
    if len(tab) < 2:
        return []
    sig = [_contents(r) for r in tab.itertuples(index=False)]
    common = pd.Series(sig).value_counts()
    if len(common) > 1 and common.iloc[0] == common.iloc[1]:
        # a tie: the contents with the shortest steps are the ordinary ones
        tied = [c for c in common.index if common[c] == common.iloc[0]]
        base = min(tied, key=lambda c: tab["dur"][[s == c for s in sig]].median())
    else:
        base = common.index[0]
    is_base = np.array([s == base for s in sig])
    med = float(tab["dur"][is_base].median())
    out = []
    for c in [c for c in common.index if c != base]:
        sel = np.array([s == c for s in sig])
        out.append(_odd_group(tab, sel, is_base, med, c, base))
    slow = is_base & (tab["dur"].to_numpy() >= SLOW_X * med)
    if slow.any() and is_base.sum() - slow.sum() >= 1:
        med2 = float(tab["dur"][is_base & ~slow].median())
        out.append(_odd_group(tab, slow, is_base & ~slow, med2, base, base))
    n = len(tab)
    # a group is odd when it costs something, and is the minority or holds work of its own
    return [g for g in out if g["excess_ns"] >= MIN_ODD_SHARE * med
            and (len(g["steps"]) <= n / 2 or g["holds"])]


# what a training step may hold besides its own pass, in every step: no step lacks it to
# measure its excess against, so its own host time is its cost
EVERY_STEP = ("forward_only", "log", "save")
# its cost is measured, not a noisy difference: it need only matter -- at least this share of
# the median step (the verdict's 1%: a print() of 20 us in a 100 ms step is no lever)
EVERY_MIN_SHARE = 0.01


def _group_prof(holds: list, per: float) -> int | None:
    """Of a group's cost per step, the profiler's: its held work's profiler share (None
    where a piece of it is untimed: its cost is then the excess, not the work)."""
    held = [h["host_ns"] for h in holds]
    prof = [h.get("profiler_ns") for h in holds]
    if not holds or None in held or None in prof or not sum(held):
        return None
    return int(per * min(1.0, sum(prof) / sum(held)))


def _every_step(tab: pd.DataFrame) -> list[dict]:
    """Groups (shaped as ``_odd_steps``', period 1) for an evaluation, a log call or a save
    that every training step holds (pairs/valid: 2 forward-only passes after each step's
    backward; the odd steps see nothing, as no step is without them); each costs its own
    host time per step. Not for an inference loop: its forward passes are its work."""
    if len(tab) < 2 or not (tab["backward_passes"] > 0).all():
        return []
    out = []
    for what in EVERY_STEP:
        has = tab["save_ns"] >= SAVE_MIN_NS if what == "save" else tab[what] > 0
        if not has.all():
            continue
        h = _holds(tab, what, True if what == "save" else int(tab[what].min()), False)
        ns = h["host_ns"]
        if not ns or ns < EVERY_MIN_SHARE * float(tab["dur"].median()):
            continue
        out.append({"steps": [int(x) for x in tab["step"]], "period": 1, "excess_ns": ns,
                    "held_ns": ns, "cost_ns": ns, "per_step_ns": ns,
                    "ordinary_step_ns": int(tab["dur"].median()), "holds": [h],
                    "profiler_ns": _group_prof([h], ns), "grew_phase": None, "grew_ns": None})
    return out


def _odd_group(tab, sel, base_sel, med, c, base) -> dict:
    nums = tab["step"][sel].to_numpy()
    d = np.diff(np.sort(nums))
    period = int(d[0]) if len(d) and (d == d[0]).all() and d[0] > 0 else None
    excess = int(tab["dur"][sel].mean() - med)
    holds = []
    names = dict(zip(CONTENTS, zip(c, base)))
    for what, (odd, ordinary) in names.items():
        if odd > ordinary:
            holds.append(_holds(tab[sel], what, odd, ordinary))
    held = [h["host_ns"] for h in holds]
    # what it costs: the work it holds, timed, where every piece of it is (the excess over
    # a median also holds the steps' jitter), capped by the excess
    cost = min(excess, sum(held)) if holds and None not in held else excess
    per = cost / period if period else cost * int(sel.sum()) / len(tab)
    phase, grown = _grown_phase(tab, sel, base_sel)
    named = grown >= GREW_SHARE * excess > 0
    return {"steps": [int(x) for x in nums], "period": period, "excess_ns": excess,
            "held_ns": int(sum(held)) if holds and None not in held else None,
            "cost_ns": int(cost), "per_step_ns": int(per), "ordinary_step_ns": int(med),
            "holds": holds, "profiler_ns": _group_prof(holds, per),
            # the host phase that grew most over the ordinary steps: where a slow step with
            # nothing of its own spent its excess (param's resnet: its DataLoader waits)
            "grew_phase": phase if named else None, "grew_ns": grown if named else None,
            "_rows": _group_rows(tab[sel])}


GREW_SHARE = 0.5   # a phase named as where the excess went holds at least half of it


def _grown_phase(tab: pd.DataFrame, sel: np.ndarray, base_sel: np.ndarray) -> tuple:
    """(phase, ns): the host phase (``PHASES``) whose mean time in the ``sel`` steps exceeds
    the ordinary steps' most, and by how much."""
    if not sel.any() or not base_sel.any():
        return None, 0
    rows = tab["host_ns"].tolist()
    odd = [rows[i] for i in np.flatnonzero(sel)]
    base = [rows[i] for i in np.flatnonzero(base_sel)]
    grown = {p: np.mean([r.get(p, 0) for r in odd]) - np.mean([r.get(p, 0) for r in base])
             for p in PHASES}
    phase = max(grown, key=grown.get)
    return phase, int(grown[phase])


HELD_NS = {"save": "save_ns", "syncs": "sync_ns", "all_gathers": "all_gather_ns",
           "log": "log_ns", "forward_only": "forward_only_ns"}
HELD_PROF = ("save", "syncs", "all_gathers", "log", "forward_only")


def _holds(t: pd.DataFrame, what: str, odd, ordinary) -> dict:
    col = HELD_NS.get(what)
    ns = int(t[col].mean()) if col else None
    out = {"what": {"forward_only": "forward_only_passes", "syncs": "host_syncs",
                    "all_gathers": "metric_all_gather", "log": "logging"}.get(what, what),
           "count": int(odd) - int(ordinary) if not isinstance(odd, bool) else 1,
           "host_ns": ns,
           # of it, the profiler's cost (its recorded ops and frames)
           "profiler_ns": _prof_mean(t, what) if what in HELD_PROF else None}
    if what == "forward_only":
        out["no_grad"] = True if t["no_grad"].any() else None   # None: not seen (no frames)
    return out


def _group_rows(t: pd.DataFrame) -> dict:
    return {"save": [r for rs in t["save_rows"] for r in rs][:2],
            "sync": [r for rs in t["sync_rows"] for r in rs][:2],
            "eval": [r for rs in t["eval_rows"] for r in rs][:2]}


class _Lookup:
    """``x[row]``: one column's value at an event row."""

    def __init__(self, col: pd.Series):
        self.col = col

    def __getitem__(self, row: int):
        v = self.col.iat[int(row)]
        return str(v) if isinstance(v, str) or self.col.dtype == object or \
            isinstance(self.col.dtype, pd.CategoricalDtype) else int(v)


# -- evidence ----------------------------------------------------------------------------------

def _evidence(tab: pd.DataFrame, events: pd.DataFrame, out: dict) -> dict:
    """fact key -> [{name, ts_ns, step, detail}]; the odd groups' row lists are dropped."""
    ev: dict = {}
    first = tab.iloc[0]
    ph = out["phases"]
    ev["anatomy.phases"] = [item(f"ProfilerStep#{int(first.step)}", int(first.start),
                                 int(first.step), ", ".join(
                                     f"{p} {ph[p]['host_ns'] / 1e6:.2f} ms" for p in PHASES))]
    names = _Lookup(events["name"])
    tss = _Lookup(events["ts"])
    mb = out["micro_batches"]
    if mb:
        ev["anatomy.micro_batches"] = [item(f"ProfilerStep#{int(r.step)}", int(r.start),
                                            int(r.step), f"{r.backward_passes} backward passes, "
                                            f"{r.optimizer_steps} optimizer steps")
                                       for r in tab.head(2).itertuples(index=False)]
    rc = out["recompute"]
    if rc:
        rows = [x for rs in tab["recompute_rows"] for x in rs][:3]
        ev["anatomy.recompute"] = [item(names[x], tss[x], int(tab["step"].iloc[0]),
                                        "forward run inside a backward node") for x in rows]
    odd_ev = []
    for g in out["odd_steps"]:
        rows = g.pop("_rows")
        what = ", ".join(h["what"] for h in g["holds"]) or "nothing of its own"
        if g.get("grew_phase"):
            what += f"; its {g['grew_phase']} phase +{g['grew_ns'] / 1e6:.1f} ms"
        # the step's own range (a ProfilerStep#N, an NVTX step, the optimizer step ending it)
        label = tab.loc[tab["step"] == g["steps"][0], "label"].iloc[0]
        odd_ev.append(item(label, None, g["steps"][0],
                           f"{g['excess_ns'] / 1e6:.1f} ms over the ordinary step; holds {what}"))
        for key in ("save", "sync", "eval"):
            for x in rows[key][:1]:
                odd_ev.append(item(names[x], tss[x], None, key))
    if odd_ev:
        ev["anatomy.odd_steps"] = odd_ev[:8]
    return ev
