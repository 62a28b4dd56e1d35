"""What the host time between launches is (``host_work_kind``): the model's own forward
Python and operator dispatch, or host work that does not feed the GPU.

Measured over the same host-owned instants the host culprit is named from
(``culprits._work_rows``: the launch threads' part of the long gaps the host explains, no
container of another cause over it, the thread not waiting). An instant is the *model's*
when a launch-thread row covering it is

* a module call frame: ``nn.Module: X`` (record_shapes/with_modules), ``torch/nn/modules/
  module.py(N): _call_impl`` / ``_wrapped_call_impl``, or a ``forward`` frame
  (with_stack=True), or
* an operator that launches GPU work itself (a kernel launch API call nested in it on the
  same thread): that op's dispatch is on the step's own path.

Everything else (data preparation on CPU tensors, logging, file I/O, a ``time.sleep``, the
untraced rest) is host work that does not feed the GPU: it can move to DataLoader workers
or a background thread; the model's forward cannot.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import attribution as attr
from . import intervals
from .common import kind_in, name_codes, name_lut, rows_of, unique_sorted
from .culprits import _Spans, _work_rows
from .factkit import _Ends, item

MODULE_FRAME_RX = re.compile(r"^nn\.Module: "
                             r"|torch/nn/modules/module\.py\(\d+\): _(?:wrapped_)?call_impl$"
                             r"|\(\d+\): forward$")
LAUNCH_RX = re.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch\w*$"
                       r"|^(?:cuda|cu|hip)GraphLaunch\w*$")
MODEL_SHARE = 0.5   # the model's share of the host time above which the host work is the model's


# the gaps' columns ``host_work_kind`` reads (the analysis hands a side worker only these)
HOSTWORK_GAP_COLUMNS = ("pid", "device", "start", "end", "duration", "drain")


def host_work_kind(ev: pd.DataFrame, gaps: pd.DataFrame, ops: pd.DataFrame) -> dict | None:
    """{"kind": "model" | "off_path" | "unknown", "model_share", "host_ns", "model_ns", "top_model",
    "top_other", "top_other_ns", "top_other_encloses_model", "evidence"}; None when the gaps
    hold no host-owned time."""
    if not len(gaps) or not len(ev):
        return None
    long_ = gaps["duration"].to_numpy(np.int64) > attr.SHORT_GAP_NS
    if "drain" in gaps:
        long_ &= (gaps["drain"] != "queued").to_numpy(bool)
    threads, names = _work_rows(ev, gaps[long_], ops, ("python", "cpu_op"))
    if not threads:
        return None
    host_iv = intervals.union(np.concatenate([r[0][0] for r in threads]),
                              np.concatenate([r[0][1] for r in threads]))
    host_ns = intervals.total(host_iv)
    if host_ns <= 0:
        return None
    mask = _model_rows(ev, np.concatenate([r for _, r, _ in threads]))
    model_ns = _model_ns(ev, threads, mask)
    share = model_ns / host_ns
    top_model, top_other = _top(ev, threads, names, mask)
    # no traced frame or op in the host time at all: what it is, the trace cannot say
    kind = "unknown" if top_model is None and top_other is None \
        else "model" if share >= MODEL_SHARE else "off_path"
    ts = ev["ts"].to_numpy(np.int64)
    lead = top_model if kind == "model" else top_other
    detail = (f"{share:.0%} of {host_ns / 1e6:.2f} ms host time in the gaps is inside the "
              f"model's module calls / kernel-launching ops")
    ev_rows = [item(lead[0], ts[lead[2]], None, detail)] if lead else [item("host", None, None,
                                                                           detail)]
    return {"kind": kind, "model_share": round(share, 3),
            "top_model": top_model[0] if top_model else None,
            "top_other": top_other[0] if top_other else None,
            "top_other_ns": int(top_other[1]) if top_other else 0,
            "top_other_encloses_model": bool(top_other[3]) if top_other else False,
            "host_ns": int(host_ns), "model_ns": int(model_ns), "evidence": ev_rows}


def _model_ns(ev: pd.DataFrame, threads, mask: np.ndarray) -> int:
    """Host-owned ns inside the model's rows, less the instants inside an operator that
    launches nothing and runs outside every module frame: an ``aten::empty`` waiting on the
    first allocation inside ``aten::ones`` is not the model's dispatch because ``fill_``
    beside it launches a kernel."""
    ts = ev["ts"].to_numpy(np.int64)
    te = _Ends(ts, ev["dur"].to_numpy(np.int64))   # at the rows asked only
    is_op = kind_in(ev, ("cpu_op",))
    rows = unique_sorted(np.concatenate([r for _, r, _ in threads]))
    frame = np.zeros(len(ev), bool)
    frame[rows] = name_lut(ev["name"], MODULE_FRAME_RX).take(name_codes(ev["name"]).take(rows))
    s, e = [], []
    for region, r, _ in threads:
        m, o, f = r[mask[r]], r[is_op[r] & ~mask[r]], r[frame[r]]
        if not len(m):
            continue
        mine = intervals.intersect(region, intervals.union(ts[m], te[m]))
        idle_op = intervals.subtract(intervals.union(ts[o], te[o]), intervals.union(ts[f], te[f]))
        mine = intervals.subtract(mine, idle_op)
        s.append(mine[0])
        e.append(mine[1])
    return intervals.total(intervals.union(np.concatenate(s), np.concatenate(e))) if s else 0


def _model_rows(ev: pd.DataFrame, cand: np.ndarray) -> np.ndarray:
    """A mask over ``ev`` of the candidate rows that are the model's: module call frames,
    and ops with a kernel launch nested in them on their own thread (a mask, not a set of
    Python ints: ~10^5 rows at 247 MB)."""
    cand = unique_sorted(cand)
    codes = name_codes(ev["name"])
    frame = name_lut(ev["name"], MODULE_FRAME_RX).take(codes.take(cand))
    out = np.zeros(len(ev), bool)
    out[cand[frame]] = True
    api = rows_of(ev, ("runtime", "driver"))
    if not len(api):
        return out
    launch = api[name_lut(ev["name"], LAUNCH_RX, "match").take(codes.take(api))]
    if not len(launch):
        return out
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    te = _Ends(ts, ev["dur"].to_numpy(np.int64))   # at the rows asked only
    ops = cand[~frame & kind_in(ev, ("cpu_op",))[cand]]
    # thread keys of these rows only (a whole-window key was 8 B a row, 24 while made)
    key_ops = attr.thread_key(pid[ops], tid[ops])
    key_launch = attr.thread_key(pid[launch], tid[launch])
    for k in np.unique(key_ops).tolist():
        lt = np.sort(ts[launch[key_launch == k]])
        mine = ops[key_ops == k]
        hit = np.searchsorted(lt, te[mine], "left") > np.searchsorted(lt, ts[mine], "left")
        out[mine[hit]] = True
    return out


def _top(ev: pd.DataFrame, threads, names: dict, mask: np.ndarray):
    """(name, ns, first row) of the model name covering the most host time, and of the
    other name covering the most host time outside the model's rows (a frame enclosing
    the whole loop -- the script's body, ``spawn_main`` -- covers the model's time too, and
    is not what runs beside it)."""
    ts = ev["ts"].to_numpy(np.int64)
    te = _Ends(ts, ev["dur"].to_numpy(np.int64))   # at the rows asked only
    out = []
    for want in (True, False):
        parts = []
        for region, r, base in threads:
            if not want:   # the time outside the model's rows only
                m = r[mask[r]]
                region = intervals.subtract(region, intervals.union(ts[m], te[m]))
            keep = mask[r] == want
            parts.append((region, r[keep], base[keep]))
        sp = _Spans(ev, parts)
        first: dict[int, int] = {}
        for _, r, base in parts:   # each name's first row (its evidence), per distinct name
            ids, at = np.unique(base, return_index=True)
            for b, row in zip(ids.tolist(), r[at].tolist()):
                if b >= 0:
                    first.setdefault(b, row)
        tot = {b: ns for b, ns in sp.every(list(first)).items()
               if ns > 0 and not names[b].startswith("ProfilerStep")}
        if not tot:
            out.append(None)
            continue
        b = max(tot, key=tot.get)
        if not want:   # the frame that holds the time, not the script's body around it
            b = _holder(ev, parts, names, b, tot)
            out.append((names[b], tot[b], first[b], _encloses_model(ev, threads, mask, b)))
            continue
        out.append((names[b], tot[b], first[b]))
    return out[0], out[1]


def _encloses_model(ev: pd.DataFrame, threads, mask: np.ndarray, b: int) -> bool:
    """Whether a row of the model (a module call, a launching op) runs inside a row of name
    ``b`` on its thread: ``b`` is then the loop around the model (the harness's
    ``run_torch_profiler``, the script's ``main``), its own time the loop's glue, not work
    that runs beside the model. An operator is never the loop: a launching op inside one
    is its own work (``aten::to``'s copy kernel)."""
    is_op = kind_in(ev, ("cpu_op",))
    if any(is_op[r[base == b]].any() for _, r, base in threads):
        return False
    inside = _Spans(ev, threads).inside(b)
    return any(bool((inside(r, base) & mask[r]).any()) for _, r, base in threads)


HOLDER_SHARE = 0.5   # of the outermost name's time a nested name must cover to stand for it


def _holder(ev: pd.DataFrame, parts, names: dict, top: int, tot: dict) -> int:
    """The deepest name nested in ``top`` (same thread, inside one of its rows) that still
    covers HOLDER_SHARE of ``top``'s host time: from the script's body (``<module>``,
    ``_run_module_as_main``) down to the function whose calls hold the time (the pipeline's
    ``preprocess``, a loader's ``__next__``). A frame whose time is spread over many
    children, or is its own, is where the descent stops; so is an operator: the op the
    program called (``aten::to``) names the work, its own callees (``aten::copy_``) do not.
    ``tot``: each name's time over all of it (an upper bound of its time inside ``top``)."""
    need = HOLDER_SHARE * tot[top]
    # only names covering that much anywhere can cover it inside top
    cand = np.array(sorted(b for b, ns in tot.items() if ns >= need and b != top
                           and not names[b].startswith("ProfilerStep")), dtype=np.int64)
    is_op = kind_in(ev, ("cpu_op",))
    while len(cand):
        if any(is_op[r[base == top]].any() for _, r, base in parts):
            return top
        inside = _Spans(ev, parts).inside(top)
        sub, named = [], []
        for region, r, base in parts:
            m = inside(r, base)
            sub.append((region, r[m], base[m]))
            k = m & np.isin(base, cand)
            named.append((region, r[k], base[k]))
        cov = {b: ns for b, ns in _Spans(ev, named).every(cand.tolist()).items() if ns >= need}
        if not cov:
            return top
        top = max(cov, key=cov.get)
        cand = cand[cand != top]
        parts = sub   # what is nested in the next one is nested in this one
    return top
