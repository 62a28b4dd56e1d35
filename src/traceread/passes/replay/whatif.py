"""What-if models: changes to the program as transformations of the replayable step graph.

Each model changes the step graph (``StepGraph``) the way a change to the program would
(drop the syncs, capture a CUDA graph, add DataLoader workers, ...) and the changed graph
is replayed; the verdict (verdict/whatif.py) prices the levers that ask for each change:

    saving = replay(before) - replay(after)        (per step, mean over the replayed steps)

The unmodified replay reproduces the measured step (the replay's ``error_pct``); each model
edits only durations, lags and edges -- a node a lever removes keeps its place with zero
duration, so the graph's structure (lanes, launches, waits) stays what the trace proved.
Several changes are applied to one copy and replayed together, never summed.

A model's preconditions are read from the trace's facts (``Facts``: the verdict context,
the device, the regions the annotations mark); a model that does not apply answers
``refused`` with the reason (a CUDA graph cannot capture a step that syncs).

Each model's assumptions are documented in docs/analysis.md ("Levers as transformations").
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ...table import scan_name as scan
from ..attribution import API_TAIL as _API_TAIL, SYNC_COPY_CALL as _SYNC_COPY_CALL
from ..attribution import WAIT_OSRT_RX as _WAIT_OSRT_RX
from ..common import CHECKPOINT_RX as STALL_SAVE_RX, launched_inside
from ..graphs import graph_runs
from ..busy import gemm_precision
from ..kernel_classes import classify_kernels
from ..peaks import device_peaks
# the layout conversion kernels (cuDNN's, MIOpen's batched_transpose): one pattern for all
from ... import namerx
from ..busy import LAYOUT_PATTERN
LAYOUT_RX = namerx.compile(LAYOUT_PATTERN)   # the very object precision.py compiles
from . import hostcost
from .graph import NEG, factorize, filled, on_gpu_lane, same_memory, str_values

HOST_NODES = ("host", "launch", "sync_wait", "dataloader")
GPU_NODES = ("gpu_kernel", "gpu_copy", "gpu_memset", "collective")

# -- constants of the models (docs/analysis.md, "Levers as transformations") ------------
GRAPH_LAUNCH_NS = 8_000       # one cudaGraphLaunch on the host (H100, CUDA 12: 5-10 us)
GRAPH_KERNEL_GAP_NS = 256     # GPU-side gap between a graph's kernels (H100: graphs.fixed, median)
FETCH_NS = 150_000            # the training thread's cost to take a batch from a worker
MAX_WORKERS = 8               # the default num_workers never exceeds this
FUSED_TRAFFIC = 0.5           # a fused pointwise chain / optimizer moves half the bytes
HOST_LAG_FLOOR_NS = 50_000    # untraced host time above this between ops is movable work
DEFAULT_BATCH_X = 2           # "larger batch": twice the samples per step
# the host categories a host-only trace's larger batch grows (its operators and its data
# loading); the rest of its host time (untraced stretches, waits in collectives) is held
# fixed per step -- a wait for a slower rank held so is that rank's time it amortises
# (jobs/multirank/verdicts.py takes it out of a waiting rank's promise)
BATCH_GROWN_HOST = ("cpu_op", "dataloader")
PINNED_GBPS_DEFAULT = 24.0    # when the trace has no pinned copy to measure

POINTWISE_OPS = re.compile(
    r"^aten::(?:add|sub|mul|div|neg|exp|log|tanh|sigmoid|relu|gelu|silu|clamp|clamp_min|"
    r"clamp_max|where|pow|sqrt|rsqrt|abs|mean|sum|softmax|_softmax|dropout|native_dropout|"
    r"layer_norm|native_layer_norm|threshold|leaky_relu|hardtanh|erf|maximum|minimum|"
    r"lerp|addcmul|addcdiv|fill|zero|copy|mul_|add_|sub_|div_|addcmul_|addcdiv_|lerp_|"
    r"sqrt_|clamp_|exp_|zero_|fill_|copy_|relu_|sigmoid_|tanh_|gelu_)$")
OPTIMIZER_RX = re.compile(r"^Optimizer\.step#|optimizer\.step|Optimizer\.zero_grad#")
# the save's pieces: what passes/stalls.py names a checkpoint stall by (its write_record, the
# state_dict, torch.save's own frame) and the calls that reach it
CHECKPOINT_RX = re.compile(r"(?i)torch\.save|checkpoint|save_state_dict|dcp\.save|"
                           r"_save\b|serializ|" + f"(?-i:{STALL_SAVE_RX.rx.pattern})")
EMPTY_CACHE_RX = re.compile(r"(?i)empty_cache|emptyCache")
PAGEABLE_RX = re.compile(r"(?i)pageable")
DATA_DEPENDENT = re.compile(r"^aten::(?:nonzero|masked_select|unique|_unique2|repeat_interleave)")


@dataclass
class Facts:
    """What the models read besides the graph (from the facts record / the verdict's
    context): ``ctx`` (context keys, levers.py), the device caps, marked regions
    (name -> [(start_ns, end_ns)]), the copies summary, the batch size when known."""
    ctx: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    regions: dict = field(default_factory=dict)
    copies: dict = field(default_factory=dict)
    batch: int | None = None
    region_ops: dict = field(default_factory=dict)   # region start ns -> (ops' ns, longest)
    ops: pd.DataFrame | None = None   # the window's cpu ops (tid, ts, dur, name, input_dims)


@dataclass(frozen=True)
class Model:
    id: str
    apply: Callable          # (graph, facts, params) -> the changed graph, or a refusal
    assumes: str


# -- graph access: every edit goes through these --------------------------------------

def _str_names(g) -> np.ndarray:
    """``g.nodes["name"].astype(str)`` as an object array, once per distinct name."""
    return _per_name(g, "str", lambda xs: [str(x) for x in xs])


def _kind(g, *kinds) -> np.ndarray:
    return _on_base(g, "kind", ("isin",) + kinds, lambda: _isin(g, "kind", kinds))


def _cat(g, *cats) -> np.ndarray:
    return _on_base(g, "cat", ("isin",) + cats, lambda: _isin(g, "cat", cats))


def _isin(g, col: str, values: tuple) -> np.ndarray:
    """``g.nodes[col].isin(values)``; on the base graph's column by its distinct values
    (factorized once: an isin of the 110 k objects cost ~5 ms, each of ~20 kind sets)."""
    if not _is_base(g, col):
        return g.nodes[col].isin(values).to_numpy()
    codes, uniq = _on_base(g, col, ("isin_codes",),
                           lambda: pd.factorize(g.nodes[col].to_numpy(object), sort=False))
    lut = np.append(pd.Series(uniq, dtype=object).isin(values).to_numpy(bool), False)
    return lut[codes]   # code -1 (a null) reads the last slot: never one of the values


_MEMO: dict = {}
_MEMO_MAX = 200_000


_LAST: dict = {}


def _as_last(key: str, arrays: tuple, fn):
    """``fn()``, or its result for the last call under ``key`` when ``arrays`` are equal to
    that call's (each model works on a copy of the same graph: most ask the same questions
    of the same columns; comparing them costs far less than the sort or hash it saves).
    The result is shared: callers only read it."""
    hit = _LAST.get(key)
    if hit is not None and len(hit[0]) == len(arrays) and all(
            a.shape == b.shape and a.dtype == b.dtype and bool((a == b).all())
            for a, b in zip(hit[0], arrays)):
        return hit[1]
    out = fn()
    _LAST[key] = (tuple(a.copy() for a in arrays), out)
    return out


# The graph ``price_models`` prices, while it prices: what the models ask of its kind, cat
# and name columns (an isin, a name pattern's matches) is computed once for every model's
# copy whose column is still that graph's own memory. Copy-on-write makes it safe: a model
# that edits a column writes to a copy of it (a new buffer; pandas 2's deep copies never
# share one), and nothing edits the base graph while the models are priced. Each
# ``_kind`` on the 110 k-node graph of the 247 MB trace was ~1.5 ms (an object isin).
_BASE: dict = {"cols": None, "memo": {}}


def _on_base(g, col: str, key: tuple, fn):
    """``fn()``, computed once per ``key`` while ``g``'s column ``col`` is the base graph's
    own memory; a shared array comes back as a copy (callers may edit their masks)."""
    if not _is_base(g, col):
        return fn()
    memo = _BASE["memo"]
    if (col, key) not in memo:
        memo[col, key] = fn()
    out = memo[col, key]
    return out.copy() if isinstance(out, np.ndarray) else out


def _is_base(g, col: str) -> bool:
    """Whether ``g``'s column ``col`` is the base graph's own memory (``_base_graph``)."""
    base = _BASE["cols"]
    if base is None or col not in base:
        return False
    return same_memory(g.nodes[col].to_numpy(), base[col])


# The last priced graph's answers, past ``price_models``: the verdict replays the levers it
# offers together on the same graph next (verdict/whatif.py ``together``: ~30 ms of the same
# isins and name patterns again at 110 k nodes). ``forget`` lets them go.
_KEPT: dict = {}


@contextlib.contextmanager
def _base_graph(graph):
    """Answers about ``graph``'s kind / cat / name / lane columns kept for its copies
    (``_on_base``) inside the block; the columns are held, so no other array can take their
    addresses.
    Inside a block already open (the models replayed by ``price_models``) it adds nothing;
    a block on the graph priced last starts from that pricing's answers (``_KEPT``)."""
    if _BASE["cols"] is not None:
        yield
        return
    cols = {c: graph.nodes[c].to_numpy() for c in ("kind", "cat", "name", "lane")
            if c in graph.nodes}
    kept, seen = _KEPT.get("cols"), _KEPT.get("seen")
    # the same memory holding the same values (nothing wrote into it since: ~1 ms a column)
    same = kept is not None and kept.keys() == cols.keys() and all(
        same_memory(cols[c], kept[c]) and bool((cols[c] == seen[c]).all()) for c in cols)
    _BASE["cols"], _BASE["memo"] = cols, (_KEPT["memo"] if same else {})
    try:
        yield
    finally:
        _KEPT.update(cols=cols, seen={c: v.copy() for c, v in cols.items()} if not same
                     else seen, memo=_BASE["memo"])
        _BASE["cols"], _BASE["memo"] = None, {}


def _name_codes(g) -> tuple:
    """(codes, distinct names) of the nodes' names (``graph.factorize``)."""
    def codes():
        names = g.nodes["name"].to_numpy(object)
        return _as_last("names", (names,), lambda: factorize(names))
    return _on_base(g, "name", ("codes",), codes)


def _per_name(g, key, fn) -> np.ndarray:
    """``fn(names)`` (a list -> a list) for every node, computed once per distinct name and
    remembered across the models that ask again: the names repeat, the copies share them."""
    return _on_base(g, "name", ("per_name", key), lambda: _per_name_of(g, key, fn))


def _per_name_of(g, key, fn, dtype=object) -> np.ndarray:
    """``_per_name`` computed; ``dtype``: of the result (bool: no object array between)."""
    codes, uniq = _name_codes(g)
    if sum(len(v) for v in _MEMO.values()) > _MEMO_MAX:
        _MEMO.clear()
    memo = _MEMO.setdefault(key, {})
    names = uniq.tolist()
    missing = [u for u in names if u not in memo]
    if missing:
        memo.update(zip(missing, fn(missing)))
    null = None if dtype is object else dtype(0)
    out = np.array([memo[u] for u in names] + [null], dtype=dtype)[:-1]
    return out[codes] if len(codes) else np.empty(0, dtype)


def _match(g, rx: re.Pattern) -> np.ndarray:
    # a pattern reads a name's first SCAN_CHARS, as every name pattern does (namerx.py)
    return _on_base(g, "name", ("match", rx.pattern), lambda: _per_name_of(
        g, rx.pattern, lambda xs: [bool(rx.search(scan(x))) for x in xs], bool))


def _ids(g, mask) -> np.ndarray:
    return g.nodes["id"].to_numpy()[np.asarray(mask, bool)]


def _set_cost(g, mask, value) -> None:
    """The masked nodes take ``value`` ns (scalar or array) on their lane."""
    m = np.asarray(mask, bool)
    for c in ("cost_ns", "dur_ns"):
        v = g.nodes[c].to_numpy(np.int64).copy()
        v[m] = np.rint(np.broadcast_to(value, v.shape)[m] if np.ndim(value) else value)
        g.nodes[c] = v


def _zero(g, mask) -> int:
    """The masked nodes take no time and keep no lane gap before them; they stay in the
    graph (their place in lane order kept), and so do their cross-lane edges, except the
    drain edges into them: a node that takes no time waits for nothing."""
    m = np.asarray(mask, bool)
    _set_cost(g, m, 0)
    gap = g.nodes["gap_ns"].to_numpy(np.int64).copy()
    gap[m] = 0
    g.nodes["gap_ns"] = gap
    _drop_drains_into(g, m)
    return int(m.sum())


def _remove_ops(g, mask, p: dict | None = None) -> int:
    """``_zero`` for a change that removes ops: each removed op's call goes whole (its
    stretches around the launches it made, when all of them go: ``hostcost.whole_calls``),
    and where the trace names its ops, the untraced stretch right before each removed call
    loses the op's fitted lag (its Python line and dispatch: ``hostcost.fitted_lag``,
    fitted on this graph, never more than the stretch holds). Where no op is named (nsys)
    ``_own_lags`` does that part."""
    gone = hostcost.whole_calls(g, mask)
    lanes = _traced_lanes(g)
    if len(lanes):
        table = hostcost.fit(g)
        cost = hostcost.removed_lags(g, gone, hostcost.fitted_lag(g, table), lanes)
        was = g.nodes["cost_ns"].to_numpy(np.int64)
        if p is not None:   # the evidence: what went per step, and the fits it came from
            p["host_lags_removed_ns"] = per_step(g, was - cost)
            names = set(str_values(g.nodes["name"])[gone].tolist())   # no string a row
            used = table[table["name"].isin(names) & (table["lag_ns"] > 0)]
            p["lag_fits"] = [{"name": str(r.name), "n": int(r.n), "lag_ns": int(r.lag_ns),
                              "lag_spread_ns": int(r.lag_spread_ns), "lag_seen": int(r.lag_seen)}
                             for r in used.itertuples(index=False)]
        _set_cost(g, np.ones(len(cost), bool), cost)
    return _zero(g, gone)


def _traced_lanes(g, but=None) -> np.ndarray:
    """The host lanes whose ops the trace names (Kineto: cpu_op / python stretches around
    most launches). A sync stretch or a few named ranges do not make a lane traced: an nsys
    capture has sync stretches and may name an op or two (gpu/launch: 2 cpu_op stretches
    beside 9,624 launch calls), and its untraced stretches still hold the dispatch. ``but``:
    nodes not counted (the compiler's own: an autotuner's 2,100 calls a step)."""
    lanes = g.nodes["lane"].to_numpy()
    keep = np.ones(len(lanes), bool) if but is None else ~np.asarray(but, bool)
    named = lanes[_kind(g, "host") & _cat(g, "cpu_op", "python") & keep]
    calls = lanes[_kind(g, "launch") & keep]
    out = [x for x in np.unique(named).tolist()
           if TRACED_SHARE * int((calls == x).sum()) <= int((named == x).sum())]
    return np.asarray(out, dtype=lanes.dtype)


TRACED_SHARE = 0.1   # named stretches per launch call on a lane whose ops are traced


def _drop_drains_into(g, mask) -> None:
    e = g.edges
    bad = (e["kind"] == "drain").to_numpy() & np.isin(e["dst"].to_numpy(), _ids(g, mask))
    g.edges = e[~bad].reset_index(drop=True)


def _launched_by(g, mask) -> np.ndarray:
    """Mask of the GPU ops launched by the masked host nodes."""
    e = g.edges
    src = _ids(g, mask)
    dst = e.loc[(e["kind"] == "launch").to_numpy() & np.isin(e["src"].to_numpy(), src), "dst"]
    return np.isin(g.nodes["id"].to_numpy(), dst.to_numpy())


def _launches_of(g, mask) -> np.ndarray:
    """Mask of the host calls that launched the masked GPU ops."""
    e = g.edges
    dst = _ids(g, mask)
    src = e.loc[(e["kind"] == "launch").to_numpy() & np.isin(e["dst"].to_numpy(), dst), "src"]
    return np.isin(g.nodes["id"].to_numpy(), src.to_numpy())


def _lane_order(g) -> np.ndarray:
    n = g.nodes
    seq, lane = n["seq"].to_numpy(), n["lane"].to_numpy()
    return _as_last("lane_order", (seq, lane), lambda: np.lexsort((seq, lane)))


def _in_regions(g, spans) -> np.ndarray:
    ts = g.nodes["ts_ns"].to_numpy(np.int64)
    m = np.zeros(len(ts), bool)
    for lo, hi in spans:
        m |= (ts >= lo) & (ts < hi)
    return m


def _kernel_class(g) -> np.ndarray:
    k = g.nodes["kind"].to_numpy() == "gpu_kernel"
    if not k.any():
        return np.full(len(k), "", object)
    cls = _per_name(g, "class", lambda xs: classify_kernels(pd.Series(xs)).astype(str).tolist())
    return np.where(k, cls, "")


def _gpu_work(g) -> np.ndarray:
    """The GPU's ops: ``GPU_NODES`` on a GPU stream's lane -- a host thread's wait in a
    collective (gloo's, a comm_wait stretch) is a "collective" node too, and no GPU work."""
    return _kind(g, *GPU_NODES) & _gpu_lane_nodes(g)


def _gpu_lane_nodes(g) -> np.ndarray:
    """``on_gpu_lane`` of the nodes, asked once per lanes table while the lane column is the
    base graph's (every priced model's ``gpu_saved`` asks it twice: ~1 ms each at 110 k)."""
    lanes = g.lanes
    key = ("gpu_lane", lanes["lane"].to_numpy(np.int64).tobytes(),
           tuple(lanes["what"].to_numpy(object).tolist()))
    return _on_base(g, "lane", key,
                    lambda: on_gpu_lane(lanes, g.nodes["lane"].to_numpy(np.int64)))


def _has_gpu(g) -> bool:
    return bool(_gpu_work(g).any())


# -- the models: each takes a copy of the graph and returns the changed graph, or a refusal
# (a string: why the lever does not apply to this program)

def _sync_nodes(g) -> np.ndarray:
    """Host nodes that block on the GPU because the program asked: explicit syncs and
    .item() (category ``sync``), not allocator frees or blocking copies (other levers'),
    nor the data-dependent shapes whose sync is inherent."""
    return _cat(g, "sync") & _kind(g, *HOST_NODES) & ~_match(g, DATA_DEPENDENT)


def drop_syncs(g, f: Facts, p: dict):
    """Remove the step's blocking syncs (.item(), .cpu(), synchronize): the sync ops go
    whole -- their host stretches, the device-to-host copy a .item() reads through and its
    call, the blocking wait -- and their drain edges with them, so the host's work after
    them overlaps the GPU's. The work that computed the synced value stays."""
    m = _sync_nodes(g)
    if p.get("keep"):   # the change kept some (a diff: AFTER's syncs per step)
        m &= ~_last_syncs(g, m, int(p["keep"]))
    if not (m & ((g.nodes["cost_ns"].to_numpy() > 0) | _blocking(g))).any():
        return "no blocking sync in the replayed steps"
    # the .item()'s own copy: a memcpy call right before the sync op's stretch or wait
    memcpy = _kind(g, "launch", "sync_wait") & _match(g, re.compile(r"(?i)memcpy"))
    calls = memcpy & (_before(g, m, np.ones(len(m), bool)) | _after(g, m))
    gone = m | calls
    gone |= _feeders(g, gone)
    gone |= _untraced_feeders(g, gone)
    wake = _own_lags(g, gone, after_blocking=True)
    before = _own_lags(g, gone)
    _keep_next_lag(g, wake & ~before)
    gone |= before
    _remove_ops(g, gone | _launched_by(g, gone), p)
    _free_drains(g)
    return g


def drop_reads(g, f: Facts, p: dict):
    """Read the results a step later: the waits of the sync ops whose run holds a call that
    queued a device->host copy (an .item()'s copy, a .cpu()'s blocking copy) go -- the copy
    still runs, queued where it was, and so does the work that computed it; a synchronize
    that waits for no such copy, a blocking host->device copy and a tensor condition keep
    their wait. What
    reading a result a step later changes, no more (``drop_syncs`` drops every sync)."""
    d = f.ctx.get("sync_copy_directions")
    if isinstance(d, dict) and not d.get("DtoH"):   # the facts saw no read waited for: no replay
        return "no blocking device->host read in the replayed steps"
    m = _sync_nodes(g) & _read_runs(g)
    if not (m & ((g.nodes["cost_ns"].to_numpy() > 0) | _blocking(g))).any():
        return "no blocking device->host read in the replayed steps"
    wake = _own_lags(g, m, after_blocking=True)
    before = _own_lags(g, m)
    _keep_next_lag(g, wake & ~before)
    _remove_ops(g, m | before, p)   # zeroed in place: their launch edges (the copies) stay
    _free_drains(g)
    return g


def _read_runs(g) -> np.ndarray:
    """The sync nodes that wait for a device->host copy: each run of sync nodes (lane order,
    one step, only calls between them, as ``_last_syncs`` reads them) that holds the call
    of such a copy (an .item(): its op, the copy call, the stream sync), and each blocking
    wait whose stretch since the lane's previous wait queued one (native code: cudaMemcpyAsync
    to the host, kernels, then cudaStreamSynchronize)."""
    n = g.nodes
    copies = _kind(g, "gpu_copy")
    dirs = _per_name(g, "direction", lambda xs: [_direction(x) for x in xs])
    o = _lane_order(g)
    readers = _launches_of(g, copies & (dirs.astype(str) == "DtoH"))[o]
    sync = _cat(g, "sync")[o]
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    new_lane = np.r_[True, (lane[1:] != lane[:-1]) | (step[1:] != step[:-1])]
    part = sync | _kind(g, "launch", "sync_wait")[o]
    run = np.cumsum(~part | new_lane)
    out = part & np.isin(run, np.unique(run[readers & part]))
    wait = _kind(g, "sync_wait")[o] & sync
    # stretches ending at a wait: a wait closes its stretch (the next one starts after it)
    stretch = np.cumsum(new_lane | np.r_[False, wait[:-1]])
    out |= wait & np.isin(stretch, np.unique(stretch[readers]))
    res = np.zeros(len(o), bool)
    res[o] = out
    return res


def _last_syncs(g, sync: np.ndarray, keep: int) -> np.ndarray:
    """The nodes of the last ``keep`` sync ops of each step on each lane: a sync op is a run
    of sync nodes in lane order with only calls between them (``.item()``: its op, the
    copy call, ``_local_scalar_dense``, the stream sync). The step-end read is the one a
    program that syncs less keeps (one check per step, the loss read at the step's end)."""
    n = g.nodes
    o = _lane_order(g)
    s = np.asarray(sync, bool)[o] & (n["step"].to_numpy()[o] >= 0)
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    part = s | _kind(g, "launch", "sync_wait")[o]   # what a sync op's run may hold
    brk = ~part | np.r_[True, (lane[1:] != lane[:-1]) | (step[1:] != step[:-1])]
    run = np.cumsum(brk)
    idx = np.flatnonzero(s)
    out = np.zeros(len(o), bool)
    if not len(idx) or keep <= 0:
        return out
    d = pd.DataFrame({"lane": lane[idx], "step": step[idx], "run": run[idx]})
    last = d.drop_duplicates("run").groupby(["lane", "step"])["run"].nth(slice(-keep, None))
    out[idx[np.isin(run[idx], last.to_numpy())]] = True
    res = np.zeros(len(o), bool)
    res[o] = out
    return res


def _untraced_feeders(g, sync: np.ndarray) -> np.ndarray:
    """``_feeders`` where the trace names no op (nsys without op ranges): walking back on
    the lane from each removed run, the copy it reads through and the launches of the
    reduction that computes the read value -- reduction kernels, memsets, and the pointwise
    kernels right before them -- with the stretches and attribute queries between, stopping
    at any other kernel (a matmul, attention, a collective) or the step's start; taken only
    where the walk met a reduction (a pointwise kernel alone is the model's own work)."""
    n = g.nodes
    out = np.zeros(len(n), bool)
    lanes = n["lane"].to_numpy()
    traced = np.unique(lanes[_kind(g, "host") & _cat(g, "cpu_op", "sync", "python")])
    s = np.asarray(sync, bool) & _kind(g, "launch", "sync_wait") & ~np.isin(lanes, traced)
    if not s.any():
        return out
    o = _lane_order(g)
    lane, kind, cat = lanes[o], n["kind"].to_numpy()[o], n["cat"].to_numpy()[o]
    so = s[o]
    e = g.edges
    lau = e[e["kind"] == "launch"]
    pos = pd.Index(n["id"].to_numpy())
    dst = pos.get_indexer(lau["dst"].to_numpy())
    cls = _kernel_class(g)
    kern = filled(len(n), "none")   # per launching node: what it queued
    src = pos.get_indexer(lau["src"].to_numpy())
    ok = (src >= 0) & (dst >= 0)
    what = np.where(_kind(g, "gpu_memset")[np.maximum(dst, 0)], "memset",
                    np.where(_kind(g, "gpu_copy")[np.maximum(dst, 0)], "copy",
                             cls[np.maximum(dst, 0)]))
    kern[src[ok]] = what[ok]
    kern = kern[o]
    for i in np.flatnonzero(so & ~np.r_[False, so[:-1]]).tolist():
        j, took, red = i - 1, [], False
        while j >= 0 and lane[j] == lane[i] and kind[j] != "step" and not so[j]:
            if kind[j] == "host" and cat[j] == "untraced":
                took.append(j)
            elif kind[j] == "launch" and kern[j] == "none":   # an attribute query
                took.append(j)
            elif kind[j] == "launch" and kern[j] == "copy" and not red and \
                    not any(kern[t] != "none" for t in took if kind[t] == "launch"):
                took.append(j)   # the copy the sync reads through (.item()'s DtoH)
            elif kind[j] == "launch" and kern[j] in ("reduction", "memset"):
                took.append(j)
                red = True
            elif kind[j] == "launch" and kern[j] == "elementwise" and red:
                took.append(j)
            else:
                break
            j -= 1
        # the stretch and queries before the first launch taken are the next-back op's
        while took and not (kind[took[-1]] == "launch" and kern[took[-1]] != "none"):
            took.pop()
        if red and took:
            out[o[np.asarray(took)]] = True
    return out


def _own_lags(g, gone, after_blocking: bool = False) -> np.ndarray:
    """The host time that belongs to the removed calls where the trace names no op (an
    nsys capture without op ranges: the host between two calls is one untraced stretch):
    the untraced stretch right before each removed run of calls on its lane (the removed
    op's Python line and dispatch) and, with ``after_blocking``, the one right after a
    removed blocking call (its wake-up and return path). Where ops are traced their own
    stretches (cat cpu_op / sync) hold that time already and nothing more goes."""
    m = np.asarray(gone, bool) & _kind(g, "launch", "sync_wait")
    if not m.any():
        return np.zeros(len(m), bool)
    lanes = g.nodes["lane"].to_numpy()
    traced_ops = np.unique(lanes[_kind(g, "host") & _cat(g, "cpu_op", "sync", "python")])
    m &= ~np.isin(lanes, traced_ops)
    untraced = _kind(g, "host") & _cat(g, "untraced") & ~np.asarray(gone, bool)
    run_start = m & ~_after(g, m | (np.asarray(gone, bool) & ~untraced))
    out = _before(g, run_start, untraced)
    if after_blocking:
        blocking = m & (_kind(g, "sync_wait") | _blocking(g))
        out |= _after(g, blocking) & untraced
    return out


def _keep_next_lag(g, stretches) -> None:
    """The untraced stretch after a removed blocking call holds the call's wake-up and the
    Python leading to the next call, which stays: it keeps the next node's fitted lag
    (``hostcost.fitted_lag``, never more than it holds), the rest goes."""
    m = np.asarray(stretches, bool)
    if not m.any():
        return
    nxt = _after(g, m)
    lag = hostcost.fitted_lag(g)
    o = _lane_order(g)
    pos = np.empty(len(o), np.int64)
    pos[o] = np.arange(len(o))
    idx = np.flatnonzero(m)
    follow = np.full(len(idx), -1)
    ok = pos[idx] + 1 < len(o)
    cand = o[np.minimum(pos[idx] + 1, len(o) - 1)]
    same = g.nodes["lane"].to_numpy()[cand] == g.nodes["lane"].to_numpy()[idx]
    follow[ok & same & nxt[cand]] = cand[ok & same & nxt[cand]]
    cost = g.nodes["cost_ns"].to_numpy(np.int64).copy()
    keep = np.where(follow >= 0, lag[np.maximum(follow, 0)], 0)
    cost[idx] = np.minimum(cost[idx], keep)
    _set_cost(g, m, cost)


FREE_RX = re.compile(r"^(?:cudaFree|cuMemFree|cuMemUnmap|cuMemRelease|hipFree|cudaFreeHost)"
                     r"(?:_v\d+)?$")
# A call that waited on the GPU stops a capture (a synchronize, a copy or memset that
# returned when done -- a pageable copy's Async call too -- any runtime's), but for the
# calls that wait for the driver's own reasons and that a replay does not repeat: an
# allocation while the caching allocator grows (a captured graph takes its memory from its
# own pool once, at capture), a module loaded lazily under an occupancy or attribute query.
NOT_A_STOP_RX = re.compile(
    r"^(?:(?:cuda|hip)(?:Malloc|HostAlloc|MallocHost)\w*"
    r"|cuMem(?:Alloc|Create|Map|AddressReserve)\w*"
    r"|(?:cuda|hip|cu)Occupancy\w*|(?:cuda|hip)FuncGetAttributes\w*|cuFuncGetAttribute\w*"
    r"|(?:cuda|hip)(?:GetDevice|DeviceGetAttribute|GetDeviceProperties|PointerGetAttributes)\w*"
    r"|cu(?:Module|Library)(?:Load|GetFunction|GetKernel|GetModule)\w*"
    r"|hipModule(?:Load|GetFunction)\w*)")


def _free_drains(g) -> None:
    """A device free synchronizes the device (cudaFree waits for all queued work): with
    the program's own sync gone, a free not already waiting on a GPU op (a drain edge)
    now waits for the last op launched before it on its thread -- the wait moves there."""
    n = g.nodes
    free = _kind(g, *HOST_NODES) & _match(g, FREE_RX) & ~_blocking(g)
    if not free.any():
        return
    e = g.edges
    lau = e[e["kind"] == "launch"]
    if not len(lau):
        return
    pos = pd.Index(n["id"].to_numpy())
    src = pos.get_indexer(lau["src"].to_numpy())
    ok = src >= 0
    l_lane, l_seq = n["lane"].to_numpy()[src[ok]], n["seq"].to_numpy()[src[ok]]
    l_dst = lau["dst"].to_numpy()[ok]
    add = []
    for i in np.flatnonzero(free).tolist():
        lane, seq = n["lane"].iat[i], n["seq"].iat[i]
        mine = (l_lane == lane) & (l_seq < seq)
        if mine.any():
            add.append((int(l_dst[mine][np.argmax(l_seq[mine])]), int(n["id"].iat[i])))
    if add:
        g.edges = pd.concat([e, pd.DataFrame({"src": [a for a, _ in add],
                                              "dst": [b for _, b in add],
                                              "kind": "drain", "lag_ns": 0})],
                            ignore_index=True)


CHECK_OPS = re.compile(r"^aten::(?:isnan|isinf|isfinite|any|all|ne|eq|lt|gt|le|ge|"
                       r"logical_\w+|amax|amin|norm|linalg_vector_norm|abs|_local_scalar_dense|"
                       r"item)$")
_STOP_CLASSES = ("gemm", "attention", "nccl")


def _feeders(g, sync: np.ndarray) -> np.ndarray:
    """The ops that compute only the value a sync reads: walking back on the lane from each
    sync op, the check ops (isnan, any, comparisons, norms: ``CHECK_OPS``), the untraced
    stretches and launches between them -- stopping at any other op, a launch of a matmul
    / attention / collective kernel, or the step's start. Logging every N steps drops them
    with the sync; a check kept on the GPU would keep them (the model assumes the former)."""
    n = g.nodes
    o = _lane_order(g)
    lane = n["lane"].to_numpy()[o]
    kind = n["kind"].to_numpy()[o]
    cat = n["cat"].to_numpy()[o]
    name = _str_names(g)[o]
    s = np.asarray(sync, bool)[o]
    cls = _kernel_class(g)
    e = g.edges
    lau = e[e["kind"] == "launch"]
    stop_ids = set(lau.loc[np.isin(lau["dst"].to_numpy(),
                                   n["id"].to_numpy()[np.isin(cls, _STOP_CLASSES)]),
                           "src"].tolist())
    ids = n["id"].to_numpy()[o]
    out = np.zeros(len(o), bool)
    for i in np.flatnonzero(s & ~np.r_[False, s[:-1]]).tolist():   # each sync chain's start
        j = i - 1
        while j >= 0 and lane[j] == lane[i] and not s[j]:
            if kind[j] == "step" or ids[j] in stop_ids:
                break
            if kind[j] in ("launch",) or cat[j] == "untraced" or CHECK_OPS.match(name[j]):
                out[j] = True
                j -= 1
                continue
            break
        # trailing untraced/launch nodes the walk took before meeting a non-check op are
        # the op's own dispatch, not the check's: keep only runs that hold a check op
        k = j + 1
        if not any(CHECK_OPS.match(name[x]) for x in range(k, i)):
            out[k:i] = False
    res = np.zeros(len(o), bool)
    res[o] = out
    return res


def _after(g, mask) -> np.ndarray:
    """The node right after each masked node on its lane."""
    o = _lane_order(g)
    lane = g.nodes["lane"].to_numpy()[o]
    m = np.asarray(mask, bool)[o]
    nxt = np.zeros(len(o), bool)
    nxt[1:] = m[:-1] & (lane[1:] == lane[:-1])
    out = np.zeros(len(o), bool)
    out[o] = nxt
    return out


def _blocking(g) -> np.ndarray:
    """Blocking calls still waiting for the GPU (a drain edge into them)."""
    e = g.edges
    return np.isin(g.nodes["id"].to_numpy(), e.loc[e["kind"] == "drain", "dst"].to_numpy())


GRAPH_LAUNCH_RX = re.compile(r"^(?:cuda|hip|cu)GraphLaunch")
# where the program's own CUDA graph replay begins: its compiled region (not dynamo's cache
# lookup before it: the guards are checked on every call, replayed or recorded)
COMPILED_RX = re.compile(r"Torch-Compiled Region|CompiledFunction|CompiledFxGraph|cudagraph")


def graph_recordings(g) -> dict:
    """What the window's CUDA graphs did, from the graph's nodes: ``launches`` (graph launch
    calls), ``first_runs`` (those made inside a recording call -- the host stretch before
    the launch on its thread is graph capture work: cudagraph trees run a graph once right
    after recording it, inside ``record_function``), ``replays`` (the others: a recorded
    graph run again), ``capture_ns`` (the graph capture host time) and ``capture_after_ns``
    (the part of it after a replay on its thread: recording that recurs once graphs
    replay)."""
    n = g.nodes
    launch = _match(g, GRAPH_LAUNCH_RX) & _kind(g, "launch", "sync_wait")
    cap = _kind(g, "host") & _cat(g, "graph_capture")
    o = _lane_order(g)
    first, replay, after = (np.zeros(len(o), bool) for _ in range(3))
    first[o], replay[o], after[o] = graph_runs(n["lane"].to_numpy()[o], launch[o], cap[o])
    dur = n["dur_ns"].to_numpy(np.int64)
    return {"launches": int(launch.sum()), "first_runs": int(first.sum()),
            "replays": int(replay.sum()), "capture_ns": int(dur[cap].sum()),
            "capture_after_ns": int(dur[cap & after].sum())}


def _replayed_already(g) -> str | None:
    """Why the program's own graphs cannot be made to replay (None: they can -- recording
    recurs after graphs replay). One launch is no proof the recording is done: xDiT's
    Flux capture (TraceLens) records its one graph for 236 ms and launches it once inside
    the same ``record_function`` call, its first run, and replays nothing."""
    r = graph_recordings(g)
    if not r["launches"]:
        # recorded, never replayed here: a start-up capture (a whole trace of it), not a
        # program whose graphs already replay -- the capture levers keep their bounds
        return "the graphs are only recorded in this window, never replayed: nothing to " \
            "replay in its place"
    if not r["replays"]:
        return (f"the graphs are only recorded in this window: its {r['first_runs']} graph "
                "launch(es) run inside the recording call (the capture's own first run), "
                "none replays a recorded graph: nothing to replay in its place")
    if not r["capture_after_ns"]:
        return (f"the program's CUDA graphs are replayed already ({r['replays']} replays; "
                "no recording after the first)")
    return None


def capture_graphs(g, f: Facts, p: dict):
    """Capture each step's launches in one CUDA graph: on each launching thread the run
    from the step's first launch to the last one before its first blocking sync becomes
    one cudaGraphLaunch (GRAPH_LAUNCH_NS on the thread with most launches, none on the
    others) that also holds the run's host work beyond dispatch (``_movable_host``: a graph
    does not run the program's other Python for it); the GPU runs the captured ops back to
    back, GRAPH_KERNEL_GAP_NS apart.
    Refused where the step cannot be captured: kernels launched after a blocking sync
    (a graph cannot hold the sync), data loading or compilation between the launches,
    or (unless ``p['existing']``: the program's own graphs made to replay) graphs in use.
    With ``existing`` the run is the compiled region (its first to its last host op), or
    where no region is named, the step's launches but its last read (``_step_end_read``)."""
    ctx = f.ctx
    existing = bool(p.get("existing"))
    if not existing and (ctx.get("uses_cuda_graphs") or ctx.get("compile_mode_graphs")):
        return "the program already uses CUDA graphs"
    if existing and not ctx.get("graphs_not_replayed"):
        why = _replayed_already(g)
        if why:
            return why
    launch = _kind(g, "launch", "sync_wait") & _cat(g, "launch")
    if not launch.any():
        return "no kernel launches in the replayed steps"
    region = _kind(g, "host") & _match(g, COMPILED_RX)
    start = launch | region if existing else launch
    if existing:   # where no region is named (nsys): the step's last read stays outside
        launch = launch & ~_step_end_read(g)
    runs = _launch_runs(g, launch, start, through_syncs=existing,
                        within=region if existing else None)
    if isinstance(runs, str):
        return runs
    n = g.nodes
    main = int(pd.Series(n["lane"].to_numpy()[launch]).mode().iat[0])
    loading = _kind(g, "dataloader") | _cat(g, "dataloader")
    compiling = _cat(g, "compile", "graph_capture") if not existing else None
    for lane, first, last, inside in runs:
        if (inside & loading).any():
            return "data loading runs between the step's launches: capture cannot hold it"
        if compiling is not None and (inside & compiling).any():
            return "the step compiles: its shapes change and a graph would not be replayed"
    if not runs:
        return "no launches in the replayed steps before their first blocking sync"
    # the runs are disjoint: what they launch, and the drains into them, taken at once
    any_run = np.logical_or.reduce([inside for _, _, _, inside in runs])
    gpu_ids = _ids(g, _launched_by(g, any_run))
    # nothing inside a run waits in a replay: the syncs were the re-recording's (existing),
    # or waits a replay does not repeat (an allocation, a lazy module load: CAPTURE_STOP_RX)
    _drop_drains_into(g, any_run)
    # a graph replays the kernels and the dispatch that issued them, not the program's own
    # work between them (host_off_path's): that stays on the thread, before the launch.
    # The program's own graphs replace their compiled region whole.
    own = _movable_host(g) if not existing else np.zeros(len(g.nodes), bool)
    # nor does it sleep or wait on the OS for it: a window with no steps makes one run of
    # several iterations, and nsys' nonvtx data.bad lost its DataLoader's 189 ms of
    # clock_nanosleep to the graph (CUDA graphs "saved" 321 ms of a 401 ms window)
    own = own | (_kind(g, "host") & _match(g, HOST_WAIT_RX))
    # nor does it stage a pageable copy for it: the host still copies the bytes to a bounce
    # buffer (before, a staging call inside the run went into the 8 us graph launch)
    own = own | _cat(g, "copy_staging")
    cost = g.nodes["cost_ns"].to_numpy(np.int64)
    kept = [int(cost[own & inside].sum()) for _, _, _, inside in runs]
    g = g.replace_runs([(first, last, (GRAPH_LAUNCH_NS if lane == main else 0) + stays)
                        for (lane, first, last, _), stays in zip(runs, kept)],
                       name="cudaGraphLaunch")
    captured = np.isin(g.nodes["id"].to_numpy(), gpu_ids)
    gap = g.nodes["gap_ns"].to_numpy(np.int64).copy()
    gap[captured] = GRAPH_KERNEL_GAP_NS
    g.nodes["gap_ns"] = gap
    e = g.edges
    lau = (e["kind"] == "launch").to_numpy() & np.isin(e["dst"].to_numpy(), _ids(g, captured))
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    lag[lau] = np.minimum(np.maximum(lag[lau], 0), GRAPH_KERNEL_GAP_NS)
    e["lag_ns"] = lag
    return g


def _step_end_read(g) -> np.ndarray:
    """Each step's last sync op and what computes the value it reads -- the reduction's
    launches and the copy it reads through (``_feeders`` / ``_untraced_feeders``), and the
    launches after it: the loss read at the step's end, which a CUDA graph cannot hold
    (it ends in a blocking sync)."""
    last = _last_syncs(g, _sync_nodes(g), 1)
    if not last.any():
        return last
    memcpy = _kind(g, "launch", "sync_wait") & _match(g, re.compile(r"(?i)memcpy"))
    out = last | (memcpy & (_before(g, last, np.ones(len(last), bool)) | _after(g, last)))
    out |= _feeders(g, out) | _untraced_feeders(g, out)
    n = g.nodes
    o = _lane_order(g)
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    oo = out[o]
    # everything after the read's first node on its lane in the step goes with it
    first = np.zeros(len(o), bool)
    key = lane.astype(np.int64) * (int(step.max()) + 2) + (step + 1)
    seen = pd.Series(oo).groupby(key).cummax().to_numpy()
    first[:] = seen
    res = np.zeros(len(o), bool)
    res[o] = first
    return res & (n["step"].to_numpy() >= 0)


def _launch_runs(g, launch, start, through_syncs: bool = False, within=None):
    """(lane, first id, last id, mask of the run) per (step, launching lane): the lane's
    nodes from the step's first ``start`` node to its last launch before the first
    blocking sync (``through_syncs``: to its last launch); a refusal when kernels are
    launched after that sync. ``within``: where the (step, lane) has such nodes, the run
    is from its first to its last of them (the program's compiled region: its CUDA graph
    replaces the region's host work and launches, not the input made before it or the loss
    read after it).
    Each (step, lane) reads its own nodes (grouped once), not masks of the whole graph:
    the same runs as ``_launch_runs_loop``, ~10 x faster on 110 k nodes."""
    n = g.nodes
    steps, lanes = n["step"].to_numpy(), n["lane"].to_numpy()
    seq, ids = n["seq"].to_numpy(), n["id"].to_numpy()
    launch, start = np.asarray(launch, bool), np.asarray(start, bool)
    host = _kind(g, *HOST_NODES)
    frees = host & _match(g, FREE_RX)
    blocking = ((_blocking(g) & ~(host & _match(g, NOT_A_STOP_RX))) | frees) \
        & (n["cost_ns"].to_numpy() >= 0)
    # the joint replay asks again of the nodes the pricing grouped: the last grouping kept
    groups = _as_last("step_lane_groups", (steps, lanes, launch),
                      lambda: _step_lane_groups(steps, lanes, launch))
    if groups is None:   # lanes or steps outside the dense key: the masks' way
        return _launch_runs_loop(g, launch, start, through_syncs, within)
    kernel_launch = _launches_kind(g, "gpu_kernel")
    out = []
    for (s, lane), idx in groups:
        q = seq[idx]
        lm = launch[idx]
        sync_at = q[blocking[idx]]
        cut = sync_at.min() if len(sync_at) and not through_syncs else np.iinfo(np.int64).max
        if (lm & (q > cut) & kernel_launch[idx]).any():
            seen = n["name"].to_numpy()[idx[blocking[idx] & (q == cut)]]
            name = f" (seen: {str(seen[0])[:60]})" if len(seen) else ""
            return (f"the step syncs between its launches{name}: a CUDA graph cannot "
                    "capture a blocking sync (remove the syncs first)")
        lm &= q < cut
        w = q[within[idx]] if within is not None else q[:0]
        if len(w):
            lm &= (q >= w.min()) & (q <= w.max())
        if not lm.any():
            continue
        lo = w.min() if len(w) else q[start[idx] & (q < cut)].min()
        hi = w.max() if len(w) else q[lm].max()
        inside = np.zeros(len(n), bool)
        inside[idx[(q >= lo) & (q <= hi)]] = True
        first = ids[idx[q == lo]][0]
        last = ids[idx[q == hi]][0]
        out.append((lane, int(first), int(last), inside))
    return out


def _step_lane_groups(steps: np.ndarray, lanes: np.ndarray, launch: np.ndarray):
    """[((step, lane), the indices of its nodes in node order)] for each (step >= 0, lane)
    with a ``launch`` node, in (step, lane) order; None where steps below -1 or lanes below
    0 would break the dense key (the caller masks instead)."""
    if not len(steps):
        return []
    st, ln = steps.astype(np.int64), lanes.astype(np.int64)
    if int(st.min()) < -1 or int(ln.min()) < 0:
        return None
    width = int(ln.max()) + 1
    key = (st + 1) * width + ln
    pairs = np.unique(key[launch & (st >= 0)])
    if not len(pairs):
        return []
    at = np.searchsorted(pairs, key)
    mine = pairs[np.minimum(at, len(pairs) - 1)] == key
    at = np.where(mine, at, len(pairs))
    order = np.argsort(at, kind="stable")
    bounds = np.searchsorted(at[order], np.arange(len(pairs) + 1))
    return [((int(k // width) - 1, int(k % width)), order[bounds[i]:bounds[i + 1]])
            for i, k in enumerate(pairs.tolist())]


def _launches_kind(g, *kinds) -> np.ndarray:
    """Mask of the nodes with a launch edge into a node of ``kinds``."""
    e = g.edges
    lau = (e["kind"] == "launch").to_numpy()
    into = _ids(g, _kind(g, *kinds))
    src = e["src"].to_numpy()[lau & np.isin(e["dst"].to_numpy(), into)]
    return np.isin(g.nodes["id"].to_numpy(), src)


def _launch_runs_loop(g, launch, start, through_syncs: bool = False, within=None):
    """``_launch_runs`` by full-graph masks per (step, lane): the tests' reference.
    (lane, first id, last id, mask of the run) per (step, launching lane): the lane's
    nodes from the step's first ``start`` node to its last launch before the first
    blocking sync (``through_syncs``: to its last launch); a refusal when kernels are
    launched after that sync. ``within``: where the (step, lane) has such nodes, the run
    is from its first to its last of them (the program's compiled region: its CUDA graph
    replaces the region's host work and launches, not the input made before it or the loss
    read after it)."""
    n = g.nodes
    steps, lanes = n["step"].to_numpy(), n["lane"].to_numpy()
    seq, ids = n["seq"].to_numpy(), n["id"].to_numpy()
    # a device free synchronizes the device by its API, waited or not (and cannot be
    # captured): empty_cache()'s cudaFree between launches ends the capturable run
    host = _kind(g, *HOST_NODES)
    frees = host & _match(g, FREE_RX)
    blocking = ((_blocking(g) & ~(host & _match(g, NOT_A_STOP_RX))) | frees) \
        & (n["cost_ns"].to_numpy() >= 0)
    out = []
    for s, lane in sorted(set(zip(steps[launch].tolist(), lanes[launch].tolist()))):
        if s < 0:
            continue
        here = (steps == s) & (lanes == lane)
        lm = launch & here
        sync_at = seq[blocking & here]
        cut = sync_at.min() if len(sync_at) and not through_syncs else np.iinfo(np.int64).max
        after = lm & (seq > cut)
        if _launched_by(g, after).any() and \
                _kind(g, "gpu_kernel")[_launched_by(g, after)].any():
            seen = n["name"].to_numpy()[blocking & here & (seq == cut)]
            name = f" (seen: {str(seen[0])[:60]})" if len(seen) else ""
            return (f"the step syncs between its launches{name}: a CUDA graph cannot "
                    "capture a blocking sync (remove the syncs first)")
        lm &= seq < cut
        w = seq[within & here] if within is not None else seq[:0]
        if len(w):
            lm &= (seq >= w.min()) & (seq <= w.max())
        if not lm.any():
            continue
        lo = w.min() if len(w) else seq[(start & here & (seq < cut))].min()
        hi = w.max() if len(w) else seq[lm].max()
        inside = here & (seq >= lo) & (seq <= hi)
        first = ids[here & (seq == lo)][0]
        last = ids[here & (seq == hi)][0]
        out.append((lane, int(first), int(last), inside))
    return out


def fuse_pointwise(g, f: Facts, p: dict):
    """torch.compile's fusion: each run of >= 2 back-to-back elementwise/reduction kernels
    on one stream becomes one kernel moving FUSED_TRAFFIC of their bytes (never shorter than
    the run's longest member), launched once -- the other members' launch calls and the
    host op stretch before each take no time. A host-only (CPU) step: the same for runs of
    pointwise aten ops (their dispatch goes with them)."""
    ctx = f.ctx
    if ctx.get("compiled") or ctx.get("compile_mode_graphs"):
        return "the program is already compiled"
    n = g.nodes
    if _has_gpu(g):
        member = _kind(g, "gpu_kernel") & np.isin(_kernel_class(g), ("elementwise", "reduction"))
        skip = np.zeros(len(n), bool)
    else:
        member = _kind(g, "host") & _match(g, POINTWISE_OPS)
        skip = _kind(g, "host") & _cat(g, "untraced")   # the Python between two ops
    idx, starts = _run_bounds(g, member, skip)
    if not len(starts):
        return "no chain of two or more pointwise kernels in a row"
    dur = n["cost_ns"].to_numpy(np.int64).copy()
    gone = np.zeros(len(n), bool)
    d = dur[idx]
    # each run: its first kernel takes the run's fused time, the others go
    fused = (FUSED_TRAFFIC * np.add.reduceat(d, starts)).astype(np.int64)
    dur[idx[starts]] = np.maximum(np.maximum.reduceat(d, starts), fused)
    gone[idx] = True
    gone[idx[starts]] = False
    _set_cost(g, np.ones(len(n), bool), dur)
    if _has_gpu(g):   # the fused members' launches, and the op dispatch before each: the
        # op's stretch; where no op is named (nsys) the untraced stretch before the launch
        # (where ops are named, that stretch loses the op's fitted lag: ``_remove_ops``)
        calls = _launches_of(g, gone)
        untraced = _cat(g, "untraced") & ~np.isin(g.nodes["lane"].to_numpy(), _traced_lanes(g))
        host = _kind(g, "host") & (_cat(g, "cpu_op") | untraced)
        lead = _before(g, calls, host)
        # where a driver call that launches nothing sits between the dispatch and its launch
        # (nsys: cuKernelGetName, a short stretch, then cudaLaunchKernel), the dispatch is
        # the stretch before that call: it goes with the launch, as on a Kineto capture
        helper = _before(g, lead, _kind(g, "launch") & ~_launches_any(g))
        gone |= calls | lead | helper | _before(g, helper, host)
    _remove_ops(g, gone, p)
    return g


def _launches_any(g) -> np.ndarray:
    """Mask of the host nodes that launched some GPU op."""
    e = g.edges
    src = e.loc[(e["kind"] == "launch").to_numpy(), "src"]
    return np.isin(g.nodes["id"].to_numpy(), src.to_numpy())


def _before(g, mask, allowed) -> np.ndarray:
    """The node right before each masked node on its lane, when ``allowed``."""
    o = _lane_order(g)
    lane = g.nodes["lane"].to_numpy()[o]
    m = np.asarray(mask, bool)[o]
    prev = np.zeros(len(o), bool)
    prev[:-1] = m[1:] & (lane[1:] == lane[:-1])
    out = np.zeros(len(o), bool)
    out[o] = prev
    return out & allowed


def _runs(g, member: np.ndarray, skip: np.ndarray) -> list[np.ndarray]:
    """Index arrays of runs (>= 2 members) of member nodes next to each other in lane order
    within a step (``skip`` nodes between them do not break a run)."""
    idx, starts = _run_bounds(g, member, skip)
    return np.split(idx, starts[1:]) if len(starts) else []


def _run_bounds(g, member: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the runs' node indices, one run after another; where each run starts in them)."""
    n = g.nodes
    o = _lane_order(g)
    mem = np.asarray(member, bool)[o]
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    pos = np.arange(len(o))
    last = np.maximum.accumulate(np.where(mem, pos, -1)) if len(o) else pos
    lm = np.maximum(last, 0)
    # a skip node is passed over only within the (lane, step) of the member before it;
    # any other node ends a run
    through = np.asarray(skip, bool)[o] & ~mem & (last >= 0) & (lane[lm] == lane) & \
        (step[lm] == step)
    kept = ~through
    o, mem, lane, step = o[kept], mem[kept], lane[kept], step[kept]
    cont = np.r_[False, mem[1:] & mem[:-1] & (lane[1:] == lane[:-1]) & (step[1:] == step[:-1])]
    first = mem & ~cont
    rid = np.cumsum(first)[mem] - 1
    size = np.bincount(rid) if len(rid) else np.zeros(0, np.int64)
    ok = size[rid] >= 2
    idx, rid = o[mem][ok], rid[ok]
    starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]]) if len(rid) else \
        np.zeros(0, np.int64)
    return idx, starts


def _peaks(f: Facts) -> dict | None:
    name = str(f.device.get("name") or "")
    return device_peaks(name, f.device) if name else None


def precision(target: str):
    """TF32 / bf16 / fp16: each matmul kernel whose math is slower than ``target`` is
    scaled by the device's dense peak ratio for its math class (passes/peaks.py):
    fp32 SIMT -> fp32/target peak, TF32 tensor-core -> tf32/target peak."""
    def apply(g, f: Facts, p: dict):
        peaks = _peaks(f)
        if not peaks or not peaks.get(target):
            return f"the device's {target} peak is unknown (no known device name in the trace)"
        if target in ("bf16", "fp16"):
            dt = f.ctx.get("dtypes") or {}
            if dt.get("bf16") or dt.get("fp16"):
                return "the program already runs bf16/fp16"
        gemm = _kind(g, "gpu_kernel") & (_kernel_class(g) == "gemm")
        if not gemm.any():
            return "no matmul kernels in the replayed steps"
        prec = np.where(gemm, _per_name(g, "precision",
                                        lambda xs: [gemm_precision(x) for x in xs]), "")
        ratio = np.ones(len(gemm))
        ratio[prec == "fp32"] = peaks.get("fp32", peaks[target]) / peaks[target]
        if target != "tf32" and peaks.get("tf32"):
            ratio[prec == "tf32"] = peaks["tf32"] / peaks[target]
        ratio = np.minimum(ratio, 1.0)
        if (ratio >= 1).all():
            return f"no matmul runs slower math than {target}"
        p["ratios"] = sorted({round(float(r), 3) for r in ratio[ratio < 1]})
        _set_cost(g, ratio < 1, g.nodes["cost_ns"].to_numpy(float) * ratio)
        return g
    return apply


def pin_copies(g, f: Facts, p: dict):
    """Pinned memory + non_blocking for the pageable copies: each pageable copy runs at
    the pinned bandwidth (the trace's best pinned copy, else PINNED_GBPS_DEFAULT) --
    its time x its direction's measured bandwidth / pinned -- and its call returns once
    queued (a launch's time), instead of staging the copy through a bounce buffer."""
    m = _pageable(g, f)
    if p.get("direction") and m.any():   # pin_reads: only the results read back
        dirs = _per_name(g, "direction", lambda xs: [_direction(x) for x in xs])
        at = np.flatnonzero(m)   # (the pageable copies' directions: not every node's)
        m[at] = dirs[at].astype(str) == p["direction"]
    if p.get("batch_only") and m.any():   # pin_batch: the input batch's copies alone
        m &= _batch_copies(g, m)
        if not m.any():
            return "no pageable host->device copy right after a DataLoader fetch"
    if not m.any():
        return "no pageable copy in the replayed steps" if not p.get("direction") else \
            f"no pageable {p['direction']} copy in the replayed steps"
    names = _str_names(g)
    pinned = float(f.copies.get("pinned_gbps") or PINNED_GBPS_DEFAULT)
    by = {d["direction"]: d.get("gbps") for d in f.copies.get("by_direction") or []}
    ratio = np.ones(len(m))
    for i in np.flatnonzero(m).tolist():
        d = _direction(names[i])
        gb = by.get(d) if d else None
        ratio[i] = min(1.0, float(gb) / pinned) if gb else 1.0
    _set_cost(g, m, g.nodes["cost_ns"].to_numpy(float) * ratio)
    calls = _launches_of(g, m)
    typical = _typical_launch(g, calls)
    own = _copy_syncs(g, m, calls)
    p["copy_syncs_removed"] = per_step(g, np.ones(len(own), np.int64), own)
    _set_cost(g, calls, np.minimum(g.nodes["cost_ns"].to_numpy(np.int64), typical))
    _drop_drains_into(g, calls)
    # where no op is named, the stretch after the removed sync is its wake-up and the next
    # call's Python: it keeps that call's fitted lag, as drop_syncs' removed syncs do
    _keep_next_lag(g, _own_lags(g, own, after_blocking=True) & _after(g, own))
    _zero(g, own)
    return g


def _batch_copies(g, copies: np.ndarray) -> np.ndarray:
    """Of ``copies``, those whose call follows a DataLoader fetch on its lane with no kernel
    launched between (passes/payload.py's ``input_batch``): what DataLoader(pin_memory=True)
    and .to(device, non_blocking=True) change. A pageable copy made inside the model keeps
    its copy and its sync -- owlv2 (TraceLens h100): a 4 us host->device copy 45 ms into
    each forward, its stream sync waiting 68-72 ms for the queued forward."""
    n = g.nodes
    o = _lane_order(g)
    lane = n["lane"].to_numpy()[o]
    fetch = (_kind(g, "dataloader") | (_kind(g, "host") & _cat(g, "dataloader")))[o]
    kernel_call = _launches_kind(g, "gpu_kernel")[o]
    copy_call = _launches_of(g, copies)[o]
    # in lane order, the last fetch or kernel launch at or before each node, in its lane
    mark = np.where(fetch, 1, np.where(kernel_call, -1, 0))
    pos = np.arange(len(o))
    last = np.maximum.accumulate(np.where(mark != 0, pos, -1))
    first = np.maximum.accumulate(np.where(np.r_[True, lane[1:] != lane[:-1]], pos, 0))
    ok = copy_call & (last >= first) & (mark[np.maximum(last, 0)] == 1)
    calls = np.zeros(len(n), bool)
    calls[o[ok]] = True
    return copies & _launched_by(g, calls)


def _copy_syncs(g, copies: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """The blocking sync a pageable host->device copy made itself: the next call on its
    call's lane, waiting for that copy (its drain edge comes from it). PyTorch syncs the
    stream after a copy from pageable memory; a non_blocking copy from pinned memory does
    not. gpu/copy.bad (nsys): a 64 MiB pageable cudaMemcpyAsync, then cudaStreamSynchronize;
    AFTER's pinned copy is followed by neither (Kineto: the sync inside its aten::copy_). A
    copy read back (device->host) keeps its sync: the program reads what it waits for."""
    n = g.nodes
    names = _str_names(g)
    htod = copies & np.array([_direction(x) == "HtoD" for x in names], bool)
    out = np.zeros(len(n), bool)
    if not htod.any():
        return out
    e = g.edges
    pos = pd.Index(n["id"].to_numpy())
    dr = (e["kind"] == "drain").to_numpy()
    src, dst = pos.get_indexer(e["src"].to_numpy()[dr]), pos.get_indexer(e["dst"].to_numpy()[dr])
    waited = {int(d): int(s) for s, d in zip(src, dst) if s >= 0 and d >= 0 and htod[s]}
    if not waited:
        return out
    o = _lane_order(g)
    lane = n["lane"].to_numpy()[o]
    call = _kind(g, "launch", "sync_wait")[o]
    rank = np.empty(len(o), np.int64)
    rank[o] = np.arange(len(o))
    la = (e["kind"] == "launch").to_numpy()
    src, dst = pos.get_indexer(e["src"].to_numpy()[la]), pos.get_indexer(e["dst"].to_numpy()[la])
    by_call = {int(c): int(d) for c, d in zip(src, dst) if c >= 0 and d >= 0 and htod[d]}
    for c, cp in by_call.items():
        r = rank[c] + 1
        while r < len(o) and lane[r] == lane[rank[c]] and not call[r]:
            r += 1
        if r < len(o) and lane[r] == lane[rank[c]] and waited.get(int(o[r])) == cp:
            out[o[r]] = True
    return out


MEM_KIND_RX = re.compile(r"(?i)pageable|pinned|->")


def _direction(name: str) -> str | None:
    """HtoD / DtoH from a copy's name (Kineto's ``Memcpy HtoD (...)``, nsys's
    ``[CUDA memcpy Host-to-Device]``)."""
    if "HtoD" in name or "Host-to-Device" in name:
        return "HtoD"
    if "DtoH" in name or "Device-to-Host" in name:
        return "DtoH"
    return None


def _pageable(g, f: Facts) -> np.ndarray:
    """The pageable copies: named so (Kineto), or -- where the copy's name carries no memory
    kind (an nsys export keeps it apart, in the copy pass's ``raw_name``) -- every copy of a
    direction the copies facts found pageable throughout (``by_direction``: pageable =
    count; the copy pass reads the memory kinds, or infers them from the bandwidth)."""
    copy = _kind(g, "gpu_copy")
    m = copy & _match(g, PAGEABLE_RX)
    # and the copies a staging call stages (the attribution's rule: an unmarked >= 1 MiB
    # copy whose call held the host through it is pageable too): pinned, no staging left
    m |= copy & _launched_by(g, _cat(g, "copy_staging"))
    unnamed = copy & ~_match(g, MEM_KIND_RX)
    if not unnamed.any():
        return m
    all_pageable = {d["direction"] for d in f.copies.get("by_direction") or []
                    if d.get("count") and int(d.get("pageable") or 0) >= int(d["count"])}
    if all_pageable:
        dirs = _per_name(g, "direction", lambda xs: [_direction(x) for x in xs])
        m |= unnamed & np.isin(dirs.astype(str), list(all_pageable))
    return m


def _typical_launch(g, but=None) -> int:
    """The median launch call's time (the calls in ``but`` left out)."""
    m = _kind(g, "launch") & _cat(g, "launch")
    if but is not None:
        m &= ~np.asarray(but, bool)
    c = g.nodes.loc[m, "cost_ns"]
    return int(c.median()) if len(c) else 5_000


def overlap_copies(g, f: Facts, p: dict):
    """Copies issued early on a side stream (non_blocking, prefetch): each host<->device
    copy moves to a stream of its own, so it no longer waits for the kernels queued before
    it (the op after it on its old stream waits for it instead: an event), and the host
    does not wait for it (its call's drain edges go)."""
    m = _kind(g, "gpu_copy") & (g.nodes["cost_ns"].to_numpy() > 50_000)
    if not m.any():
        return "no host<->device copy worth overlapping in the replayed steps"
    n = g.nodes
    o = _lane_order(g)
    lane_o = n["lane"].to_numpy()[o]
    nxt = np.full(len(n), -1, np.int64)
    same = np.r_[lane_o[1:] == lane_o[:-1], False]
    nxt[o[np.flatnonzero(same)]] = n["id"].to_numpy()[o[np.flatnonzero(same) + 1]]
    new_lane = int(g.lanes["lane"].max()) + 1
    side = []
    for k, i in enumerate(np.flatnonzero(m).tolist()):
        if nxt[i] >= 0:
            side.append((int(n["id"].iat[i]), int(nxt[i])))
    lanes = n["lane"].to_numpy().copy()
    lanes[m] = new_lane
    seq = n["seq"].to_numpy().copy()
    seq[m] = np.arange(int(m.sum()))
    gap = n["gap_ns"].to_numpy().copy()
    gap[m] = 0
    n["lane"], n["seq"], n["gap_ns"] = lanes, seq, gap
    row = g.lanes.iloc[[0]].copy()
    row["lane"], row["what"], row["label"] = new_lane, "gpu", "copy side stream"
    g.lanes = pd.concat([g.lanes, row], ignore_index=True)
    if side:
        g.edges = pd.concat([g.edges, pd.DataFrame(
            {"src": [a for a, _ in side], "dst": [b for _, b in side],
             "kind": "event_wait", "lag_ns": 0})], ignore_index=True)
    _drop_drains_into(g, _launches_of(g, m))
    return g


def dataloader_workers(g, f: Facts, p: dict):
    """DataLoader(num_workers=N): N processes load batches ahead, the training thread only
    takes a ready batch (FETCH_NS) -- and waits when N workers load slower than a step
    runs: its wait is max(0, load/N - the rest of the step). N: ``p['workers']``, else the
    fewest that hide the load (+1), at most MAX_WORKERS."""
    if f.ctx.get("dataloader_workers"):
        return "workers load the batches already (num_workers > 0): raise their number"
    m = _kind(g, "dataloader") | (_kind(g, "host") & _cat(g, "dataloader"))
    if not m.any():
        return "no data loading on the training thread in the replayed steps"
    from .sim import simulate

    load = g.nodes["cost_ns"].to_numpy(float)[m]
    fetch = np.minimum(load, FETCH_NS)
    _set_cost(g, m, _spread(m, fetch))
    # per step of the window: a weighted sample's steps count as the steps they stand for
    rest = max(1.0, step_mean(simulate(g), g) - per_step(g, _spread(m, fetch), m))
    each = max(per_step(g, _spread(m, load), m), 1)
    workers = int(p.get("workers") or min(MAX_WORKERS, math.ceil(each / rest) + 1))
    wait = np.maximum(0.0, load / workers - rest * (load / each))
    _set_cost(g, m, _spread(m, fetch + wait))
    p.setdefault("workers", workers)
    return g


def persistent_workers(g, f: Facts, p: dict):
    """persistent_workers=True: the workers are not shut down and started again at each
    epoch's start -- the training thread's time from the epoch's last DataLoader call to
    the next epoch's first (``passes/dataloader.py``: the shutdown, the new iterator) takes
    no time, nor the new workers' start-up inside that first call where the stack shows it;
    the first call's wait for one batch's load stays (persistent workers wait for it too)."""
    r = f.ctx.get("dataloader_restarts") or {}
    host = _kind(g, *HOST_NODES)
    inside = _overlap(g, _restart_spans(r)) * host
    if not inside.any():
        return "no DataLoader workers started again inside the replayed steps"
    p["restarts"] = int(r["restarts"])
    # the part of each node inside a restart goes (a stretch the split cut there may begin
    # before it: the training loop's frame around the epoch's last call)
    cost = g.nodes["cost_ns"].to_numpy(np.int64)
    dur = np.maximum(g.nodes["dur_ns"].to_numpy(np.int64), 1)
    left = np.maximum(0, cost - np.rint(inside * np.minimum(1.0, cost / dur))).astype(np.int64)
    _set_cost(g, inside > 0, left)
    _zero(g, (inside > 0) & (left == 0))
    return g


def _overlap(g, spans) -> np.ndarray:
    """Per node, the ns of its own span inside the spans (disjoint)."""
    ts = g.nodes["ts_ns"].to_numpy(np.int64)
    end = ts + np.maximum(g.nodes["dur_ns"].to_numpy(np.int64), 0)
    out = np.zeros(len(ts), np.int64)
    for lo, hi in spans:
        out += np.maximum(0, np.minimum(end, hi) - np.maximum(ts, lo))
    return out


def _spread(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(mask))
    out[mask] = values
    return out


def fused_optimizer(g, f: Facts, p: dict):
    """fused=True: the optimizer step (its Optimizer.step# region) runs one kernel for all
    parameters: its kernels become one moving FUSED_TRAFFIC of their bytes (at least the
    longest), its launch calls and host op stretches but the first take no time. A
    host-only step: the region's ops become one op of FUSED_TRAFFIC of their time."""
    if f.ctx.get("fused_optimizer") or (f.ctx.get("optimizer") or {}).get("impl") == "fused":
        return "the optimizer is already fused"
    spans = [s for k, v in f.regions.items() if OPTIMIZER_RX.search(k) and "zero_grad" not in k
             for s in v]
    if not spans:
        return "no optimizer step marked in the trace (Optimizer.step#...)"
    n = g.nodes
    region = _in_regions(g, spans) & (n["step"].to_numpy() >= 0)
    host = region & _kind(g, "host", "launch") & ~_cat(g, "step")
    gpu = _launched_by(g, host & _kind(g, "launch"))
    target = gpu if gpu.any() else host
    if target.sum() < 2 and not (f.region_ops and not gpu.any()):
        return "the optimizer step runs fewer than two ops"
    steps = n["step"].to_numpy()
    ts = n["ts_ns"].to_numpy()
    dur = n["cost_ns"].to_numpy(np.int64).copy()
    gone = np.zeros(len(n), bool)
    for s in np.unique(steps[target]).tolist():
        idx = np.flatnonzero(target & (steps == s))
        idx = idx[np.argsort(ts[idx])]
        if gpu.any():
            d = dur[idx]
            dur[idx[0]] = max(int(d.max()), int(FUSED_TRAFFIC * d.sum()))
            gone[idx[1:]] = True
            h = np.flatnonzero(host & (steps == s))
            gone[h[np.argsort(ts[h])][1:]] = True
        else:   # host-only: the region's ops (their own time, from the facts) fused
            work = sum(f.region_ops.get(int(ts[i]), (0, 0))[0] for i in idx)
            longest = max((f.region_ops.get(int(ts[i]), (0, 0))[1] for i in idx), default=0)
            d = dur[idx]
            new = max(longest, int(FUSED_TRAFFIC * work)) if work else int(FUSED_TRAFFIC * d.sum())
            dur[idx[0]] = min(int(d.sum()), new)
            gone[idx[1:]] = True
    _set_cost(g, np.ones(len(n), bool), dur)
    _zero(g, gone)
    return g


def drop_empty_cache(g, f: Facts, p: dict):
    """Drop torch.cuda.empty_cache() from the loop (or turn the caching allocator back on):
    the allocator's driver calls (the frees and the mallocs that map the memory back, each
    synchronizing the device) and the empty_cache op take no time; their drain edges go."""
    m = (_cat(g, "alloc") | _match(g, EMPTY_CACHE_RX)) & _kind(g, *HOST_NODES)
    if f.ctx.get("window_mode") == "whole_trace":
        m &= ~_context_creation(g)
    if not m.any():
        return "no empty_cache / device frees or mallocs in the replayed steps"
    _remove_ops(g, m, p)
    return g


RUNTIME_CALL_RX = re.compile(r"^(?:cuda|hip)[A-Z]")


def _context_creation(g) -> np.ndarray:
    """Each process's first CUDA/HIP runtime call in a window that starts with the trace:
    the runtime creates its context inside it, whatever the call (extra-p's
    concurrent_profile16: a 172 ms cudaStreamCreate), and no reuse of buffers removes that."""
    n = g.nodes
    out = np.zeros(len(n), bool)
    call = _kind(g, *HOST_NODES) & n["name"].astype(str).str.match(RUNTIME_CALL_RX).to_numpy()
    if not call.any():
        return out
    pid = g.lanes.set_index("lane")["pid"].reindex(n["lane"].to_numpy()).to_numpy()
    rows = np.flatnonzero(call)
    ts = n["ts_ns"].to_numpy(np.int64)[rows]
    first = pd.DataFrame({"pid": pid[rows], "ts": ts, "row": rows}).sort_values(
        ["pid", "ts"], kind="stable").drop_duplicates("pid")["row"].to_numpy()
    out[first] = True
    return out


def drop_compile(g, f: Facts, p: dict):
    """Stop the recompiles (mark_dynamic / bucketing / warm-up before profiling): the
    compilation and graph recording inside the steps take no time, with the calls made
    inside them and the GPU work those queued (the autotuner's benchmark runs, a recording's
    warm-up). What is compilation is the facts' mark: a ``compile`` / ``graph_capture``
    node -- named so (Kineto), or marked where the trace names no op (nsys:
    ``passes/compile.py`` ``mark_compile``)."""
    m = _kind(g, *HOST_NODES) & _cat(g, "compile", "graph_capture")
    if not m.any():
        return "no compilation inside the replayed steps"
    m |= _calls_inside(g, m)
    gpu = _launched_by(g, m)
    m |= _compile_borders(g, m)
    cost = g.nodes["cost_ns"].to_numpy(np.int64)
    p["compile_ns"] = per_step(g, cost, m)
    p["compile_gpu_ops"] = per_step(g, np.ones(len(gpu), np.int64), gpu)
    _zero(g, m | gpu)
    warm = _first_runs_warm(g, m)
    p["first_run_ns"] = per_step(g, g.nodes["cost_ns"].to_numpy(np.int64) - warm)
    _set_cost(g, np.ones(len(warm), bool), warm)
    return g


def _compile_borders(g, compiled) -> np.ndarray:
    """The stretches with no op in them (``untraced``, on a lane whose ops are traced) right
    before or right after a compile stretch on its lane, no call between: the recompile's
    own ends. gpu/compile.bad (Kineto): the 1.2 ms between the failed guards' ``TorchDynamo
    Cache Lookup`` and ``entire_frame_compile`` holds dynamo's ``dynamo_data:
    compile_id=0/4`` (the recompile under way), and 0.14 ms follow the build before its
    region runs; AFTER runs its region 1.7 us after the cache lookup."""
    o = _lane_order(g)
    n = g.nodes
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    c = np.asarray(compiled, bool)[o]
    host = (_kind(g, "host") & _cat(g, "untraced"))[o] & ~c
    host &= np.isin(lane, _traced_lanes(g, compiled))   # no op named: untraced is all
    same = np.r_[False, (lane[1:] == lane[:-1]) & (step[1:] == step[:-1])]
    after = same & np.r_[False, c[:-1]]          # the previous node on the lane compiled
    before = np.r_[same[1:] & c[1:], False]      # the next one does
    out = np.zeros(len(o), bool)
    out[o] = host & (after | before)
    return out


FIRST_RUN_PEERS = 2   # later runs of the same place that show a code path's warm cost


def _first_runs_warm(g, compiled) -> np.ndarray:
    """Each node's cost, the first run of a place in freshly compiled code priced at its warm
    runs. In a step that compiled, after its last compile node on the lane, a place is the
    host time between two calls the change keeps that queue GPU work or wait for it (not an
    event destroyed, a kernel's name asked), named by those two calls; its first run costs
    at most the largest of its later runs in the step, where at least ``FIRST_RUN_PEERS``
    show it (scaled down alike). A code path's first run pays its lazy set-up, later runs
    of the same code in the same call do not. gpu/compile.bad: Kineto, the first layer's
    ``PythonDispatchMode`` before its addmm's ``cudaMemsetAsync`` 208 us, layers 2-4's 62
    and 49 us (AFTER's addmm 47-56 us); the region's 0.79 ms between the autotuner and the
    tuned kernel's launch, 29-58 us in layers 2-4; nsys, 546 us and 183 us at the same
    places, 22-52 us in the later layers. The region's wrapper (pieces named by
    ``COMPILED_RX``: the generated code between the kernels it calls) runs the same Python
    at each call it makes, its exit too: after the build's first launch a piece of it that
    no later run shows warm costs at most its largest warm piece (Kineto: the 2.86 ms after
    the last kernel's launch, inside ``CompiledFunction`` once ``## Call CompiledFxGraph``
    returned, -> 58 us: layers 2-4's 58, 30, 29 us; AFTER's exit, from the graph's return
    to the region's, 67-85 us). A place is named by its two calls and its costliest
    stretch's name."""
    n = g.nodes
    cost = n["cost_ns"].to_numpy(np.int64)
    o = _lane_order(g)
    lane, step = n["lane"].to_numpy()[o], n["step"].to_numpy()[o]
    c = np.asarray(compiled, bool)[o]
    k = n["kind"].to_numpy()[o]
    co = cost[o]
    call = (_launches_of(g, _gpu_work(g)) | _kind(g, "sync_wait"))[o] & ~c   # kept calls
    pos = np.arange(len(o))
    grp = np.r_[0, np.cumsum((lane[1:] != lane[:-1]) | (step[1:] != step[:-1]))]
    last_c = pd.Series(np.where(c, pos, -1)).groupby(grp).transform("max").to_numpy()
    cand = (k == "host") & (co > 0) & (last_c >= 0) & (pos > last_c) & (step >= 0)
    if not cand.any():
        return cost.copy()
    names = _str_names(g)[o]
    prev = np.maximum.accumulate(np.where(call, pos, -1))
    nxt = np.minimum.accumulate(np.where(call, pos, len(o))[::-1])[::-1]
    ok = (prev >= 0) & (nxt < len(o))
    ok &= (grp[np.maximum(prev, 0)] == grp) & (grp[np.minimum(nxt, len(o) - 1)] == grp)
    rows = np.flatnonzero(cand & ok)
    f = pd.DataFrame({"g": grp[rows], "pc": names[prev[rows]], "nc": names[nxt[rows]],
                      "seg": prev[rows], "cost": co[rows], "name": names[rows]})
    by = f.groupby(["g", "pc", "nc", "seg"], sort=True)
    seg = by["cost"].sum().reset_index()
    # and by what runs there: the name of its costliest stretch
    seg["top"] = f.loc[by["cost"].idxmax().to_numpy(), "name"].to_numpy()
    key = ["g", "pc", "nc", "top"]
    seg["first"] = seg.groupby(key)["seg"].transform("min") == seg["seg"]
    later = seg[~seg["first"]].groupby(key)["cost"].agg(["max", "size"])
    firsts = seg[seg["first"]].join(later, on=key)
    shown = firsts["size"] >= FIRST_RUN_PEERS
    firsts = firsts[shown & (firsts["cost"] > firsts["max"])]
    out = cost.copy()
    if len(firsts):
        scale = pd.Series((firsts["max"] / firsts["cost"]).to_numpy(),
                          index=firsts["seg"].to_numpy())
        hit = f["seg"].isin(scale.index).to_numpy()
        idx = o[rows[hit]]
        out[idx] = np.rint(cost[idx] * scale.reindex(f["seg"].to_numpy()[hit]).to_numpy())
    # the compiled region's wrapper (its own Python between the kernels it calls) after the
    # build's first launch: a piece no later run shows warm (its exit) costs at most its
    # largest warm piece
    warm = seg[~seg["first"]].join(later["size"], on=key)
    warm = f["seg"].isin(warm.loc[warm["size"] >= FIRST_RUN_PEERS, "seg"]).to_numpy()
    wrap = _match(g, COMPILED_RX)[o][rows]
    if not (warm & wrap).any():
        return out
    pieces = pd.Series(co[rows[warm & wrap]]).groupby(f["g"].to_numpy()[warm & wrap])
    cap = pieces.max()[pieces.size() >= FIRST_RUN_PEERS]
    after = wrap & ~warm & (prev[rows] > last_c[rows])
    lim = cap.reindex(f["g"].to_numpy()[after]).to_numpy()
    idx = o[rows[after]]
    out[idx] = np.where(np.isnan(lim), out[idx], np.minimum(out[idx], np.nan_to_num(lim)))
    return out


def _calls_inside(g, stretches) -> np.ndarray:
    """The calls (launches, syncs) made inside the masked host stretches: on their lane,
    runs of calls with a masked stretch right before and right after (an op the graph cut
    at the calls it made: ``CachingAutotuner.benchmark_all_configs`` around its kernel
    launches and event queries)."""
    n = g.nodes
    o = _lane_order(g)
    lane = n["lane"].to_numpy()[o]
    call = _kind(g, "launch", "sync_wait")[o]
    s = np.asarray(stretches, bool)[o] & ~call
    pos = np.arange(len(o))
    # the nearest non-call node before / after each node on its lane
    prev = np.maximum.accumulate(np.where(~call, pos, -1))
    nxt = np.minimum.accumulate(np.where(~call, pos, len(o))[::-1])[::-1]
    pb, nb = np.r_[-1, prev[:-1]], np.r_[nxt[1:], len(o)]
    ok = call & (pb >= 0) & (nb < len(o))
    pb, nb = np.maximum(pb, 0), np.minimum(nb, len(o) - 1)
    ok &= s[pb] & s[nb] & (lane[pb] == lane) & (lane[nb] == lane)
    out = np.zeros(len(o), bool)
    out[o] = ok
    return out


def host_off_path(g, f: Facts, p: dict):
    """Move the host's own work off the step path (precompute, cache, a background thread):
    the launching threads' untraced stretches and Python frames above HOST_LAG_FLOOR_NS
    take no time; PyTorch's dispatch (operator stretches) and the launches stay. A
    host-only (CPU) step: its traced Python frames only -- there the untraced time between
    ops may be the compute itself, which no thread can take off the step."""
    m = _movable_host(g)
    # the DataLoader's workers shut down and started again (passes/dataloader.py): the
    # loader's own machinery, which persistent_workers removes -- no thread can take it
    restarts = _restart_spans(f.ctx.get("dataloader_restarts") or {})
    if restarts:
        m &= _overlap(g, restarts) == 0
    m &= ~_setup_work(g)
    if not m.any():
        return "no host work between the launches beyond dispatch"
    _unseen_warm_dispatch(g, m, p)
    _zero(g, m)
    return g


def _unseen_warm_dispatch(g, moved, p: dict) -> None:
    """What the model keeps unpriced: the dispatch (ops, launches) of the launching lanes
    keeps its measured time. Where every replayed step of a lane holds moved work, no op of
    it ran without that work before it, and the trace shows no other speed for it
    (gpu/host.bad: every step follows 15 ms of ``json.dumps``; its ``aten::linear`` takes
    70-301 us, its launches 10-49 us, in every layer; AFTER's 24-40 us and 4-8 us). Said in
    the params (``dispatch_kept``), never priced."""
    n = g.nodes
    lane, step = n["lane"].to_numpy(), n["step"].to_numpy()
    lanes = np.unique(lane[moved])
    on = np.isin(lane, lanes) & (step >= 0)
    every = all(set(np.unique(step[on & (lane == x)]).tolist())
                <= set(np.unique(step[moved & (lane == x)]).tolist()) for x in lanes)
    disp = on & ~moved & (_kind(g, "launch") | (_kind(g, "host") & _cat(g, "cpu_op")))
    p["dispatch_kept"] = {
        "ns_per_step": per_step(g, n["cost_ns"].to_numpy(np.int64), disp),
        "warm_seen": not every,
        "why": ("every step holds the moved work: no op ran without it before, so the trace "
                "shows no faster dispatch; the ops keep their measured time")
        if every else "steps without the moved work show the ops' time without it"}


def _restart_spans(r: dict) -> list[tuple]:
    """The DataLoader restarts' spans and their workers' start-up (passes/dataloader.py)."""
    return [tuple(s) for s in (r.get("spans") or []) + (r.get("startup_spans") or [])]


def _movable_host(g) -> np.ndarray:
    """The launching threads' own work in the steps beyond dispatch: untraced stretches (with
    a GPU in the trace) and Python frames above HOST_LAG_FLOOR_NS, less the time another
    thread's launches show to be a wait (``_others_busy``)."""
    untraced = ("untraced",) if _has_gpu(g) else ()
    python = _cat(g, *untraced, "python") | _match(g, PY_FRAME_RX)   # NVTX-named frames too
    m = _kind(g, "host") & python & ~_match(g, PROFILER_FRAME_RX) & \
        (g.nodes["cost_ns"].to_numpy() > HOST_LAG_FLOOR_NS) & (g.nodes["step"].to_numpy() >= 0)
    # a compile or a graph recording runs where it is called: no_recompile's and the capture
    # levers' time, not work a thread could take (TraceLens' xdit flux.1 capture trace:
    # 243 ms of CUDAGraphNode.record frames were promised back as "host work off the path")
    m &= ~_cat(g, "compile", "graph_capture")
    return m & ~_others_busy(g, m)


# set-up calls: a library or the allocator preparing for new work (cuBLASLt's occupancy
# queries for a new shape's kernels, a stream made and destroyed, a device allocation, a
# module loaded, a graph instantiated) -- made where the work is first needed
SETUP_CALL_RX = re.compile(
    r"^(?:cuda|hip|cu)(?:Occupancy\w*|(?:Stream|Event)(?:Create|Destroy)\w*|Malloc\w*|Free"
    r"|Mem(?:Alloc|Free)\w*|Module(?:Load|Unload)\w*|Library(?:Load|Unload)\w*"
    r"|Graph(?:Exec)?Instantiate\w*|FuncSetAttribute|FuncGetAttributes)(?:_v\d+)?$")


def _setup_work(g) -> np.ndarray:
    """Untraced stretches next to a set-up call (``SETUP_CALL_RX``) on their lane, in a step
    that makes more set-up calls than the median step: the set-up's own work (nsys gpu/
    graphs.bad step #9: 17 occupancy queries, a stream made and destroyed, then 55.6 ms with
    nothing traced before the new shape's first launch), which runs where its call is made
    and which no thread can take off the step."""
    n = g.nodes
    out = np.zeros(len(n), bool)
    step = n["step"].to_numpy()
    setup = _match(g, SETUP_CALL_RX) & ~_kind(g, "gpu_kernel", "gpu_copy", "gpu_memset")
    steps = np.unique(step[step >= 0])
    if not setup.any() or len(steps) < 3:
        return out
    count = pd.Series(step[setup & (step >= 0)]).value_counts().reindex(steps, fill_value=0)
    busy = count.index[count.to_numpy() > np.median(count.to_numpy())].to_numpy()
    if not len(busy):
        return out
    o = _lane_order(g)
    lane, st = n["lane"].to_numpy()[o], step[o]
    gap = (_cat(g, "untraced") & _kind(g, "host"))[o]
    near = setup[o]
    same_prev = np.r_[False, lane[1:] == lane[:-1]]
    same_next = np.r_[lane[:-1] == lane[1:], False]
    after = same_prev & np.r_[False, near[:-1]]
    before = same_next & np.r_[near[1:], False]
    out[o] = gap & (after | before) & np.isin(st, busy)
    return out


PY_FRAME_RX = re.compile(r"\.py\(\d+\): ")
# the OS calls a thread sleeps or waits in (nsys' OS-runtime trace): the program's own time,
# which no capture of its launches removes
SLEEP_CALL_RX = re.compile(r"^(?:clock_nanosleep|nanosleep|usleep|sleep)(?:@\S*)?$")
HOST_WAIT_RX = re.compile(SLEEP_CALL_RX.pattern + "|" + _WAIT_OSRT_RX.pattern)
# the profiler's own Python (prof.step(), record_function's enter / exit): its cost, which the
# unprofiled program does not pay (passes/overhead.py), not host work a thread could take
# (TraceLens-style CPU inference capture: prof.step() 2.5 ms a request, promised back)
PROFILER_FRAME_RX = re.compile(r"torch/profiler/\w+\.py\(\d+\): |torch/autograd/profiler\.py\(\d+\): ")


def _others_busy(g, mask) -> np.ndarray:
    """Masked stretches during which another host thread launched GPU work: the thread was
    most likely waiting for it (the main thread in backward() while autograd's thread
    launches, or autograd's thread idle while the main thread runs the forward) -- the
    graph has no edge between host threads, so such time is a wait, not movable work
    (``common.launched_inside``, the culprits' rule too)."""
    n = g.nodes
    launch = _kind(g, "launch", "sync_wait")
    lanes = n["lane"].to_numpy()
    ts = n["ts_ns"].to_numpy(np.int64)
    end = ts + n["dur_ns"].to_numpy(np.int64)
    out = np.zeros(len(n), bool)
    for lane in np.unique(lanes[mask]).tolist():
        idx = np.flatnonzero(mask & (lanes == lane))
        out[idx] = launched_inside(ts[idx], end[idx], np.sort(ts[launch & (lanes != lane)]))
    return out


def checkpoint_off_path(g, f: Facts, p: dict):
    """Save checkpoints from a background thread / asynchronously (torch.distributed.
    checkpoint.async_save): the save's host work on the training thread takes no time."""
    m = _kind(g, *HOST_NODES) & _match(g, CHECKPOINT_RX)
    if not m.any():
        return "no checkpoint save inside the replayed steps"
    _zero(g, m)
    return g


def larger_batch(g, f: Facts, p: dict):
    """k times the samples per step (``p['x']``, default DEFAULT_BATCH_X); data loading
    and the threads' OS sleeps and waits grow k times; launch calls and sync waits do not. Compared per sample: the saving is
    the old step less the new step / k.
    A host-only trace that recorded shapes, the batch known (``p['batch']`` or
    ``facts.batch``): only the ops with an input that carries the batch grow, each by
    (k - 1) x its own time above its fixed part (``hostcost.batch_work``: fitted per op
    name over the sizes the trace shows; the dispatch floor where it shows one size);
    the Python between ops and the ops on parameters (optimizer, gradient accumulation)
    stay. Otherwise every op's time above its lane's floor (the lane's shortest op:
    latency, not work) grows k times -- on a GPU trace the kernels, the host's operator
    stretches being dispatch (with shapes and the batch known, only the GPU ops launched
    from inside an op that carries the batch: not the optimizer's, nor any op's on the
    parameters alone); on a host-only trace the ops."""
    k = float(p.get("x") or DEFAULT_BATCH_X)
    if _has_gpu(g):
        work = _kind(g, "gpu_kernel", "gpu_copy", "gpu_memset")
    else:
        work = _kind(g, "host") & _cat(g, "cpu_op")
    data = _kind(g, "dataloader")
    if not work.any():
        return "no work to scale"
    n = g.nodes
    dur = n["cost_ns"].to_numpy(float)
    new = dur.copy()
    grown = None if _has_gpu(g) else _shaped_growth(g, f, p, k)
    loader = _loader_growth(f, p, g, k)
    if grown is not None:
        new[work] = dur[work] + grown[work]
    else:
        carries = _gpu_carries(g, f, p) if _has_gpu(g) else None
        if carries is not None:   # GPU ops launched from ops on parameters do not grow
            work = work & carries
        elif _has_gpu(g):   # nor copies of what the batch does not size (payload.py)
            work = work & ~_fixed_copies(g, f)
        lanes = n["lane"].to_numpy()
        for lane in np.unique(lanes[work]).tolist():
            m = work & (lanes == lane) & (dur > 0)
            if m.any():
                floor = dur[m].min()
                new[m] = floor + k * (dur[m] - floor)
        p.setdefault("basis", "floor")
    new[data] = dur[data] * k if loader is None else dur[data] + loader[data]
    staged = _staging_growth(g, dur, new) if _has_gpu(g) else np.zeros(len(dur), bool)
    # a thread's OS sleeps and waits grow with the batch too: nothing proves them fixed per
    # step (nsys' nonvtx data.bad: its DataLoader is a clock_nanosleep the trace cannot name)
    waits = _kind(g, "host") & _match(g, HOST_WAIT_RX) & ~data & ~work
    if not _has_gpu(g) and int(f.ctx.get("pp_stages") or 0) >= 2:
        # a host-only pipeline stage's untraced time is its blocking waits at send/recv (the
        # gloo work's wait is no op): the other stages' work, which grows with the batch as
        # its own does (pp_gpipe3_slow1 rank 2 idles 76% there; kept fixed, 2x the batch
        # 'saved' 37.6% per sample)
        waits = waits | (_kind(g, "host") & _cat(g, "untraced") & ~data & ~work)
    new[waits] = dur[waits] * k
    _set_cost(g, work | data | waits | staged, new)
    p["per_sample_x"] = k
    return g


# a synchronous copy call (``cudaMemcpy``: a sync by name, its node labelled ``sync``)
SYNC_COPY_RX = re.compile(r"^(?:" + _SYNC_COPY_CALL + ")" + _API_TAIL)


def _staging_growth(g, was: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The staging calls (``copy_staging``: a pageable copy's call stages it through a
    bounce buffer; a synchronous copy's call, ``SYNC_COPY_RX``, which also holds the host
    through its copy) grow as their copy does: the bytes staged are the bytes copied. Each
    call's staged time -- from the later of its start and the end of the op before its copy
    on that copy's stream (a wait for the queue is no staging), to its end; a blocking
    call's cost, its time after the op it waited for -- takes the copy's ratio ``new /
    was``, and so does the part of the call after its copy began (the launch edge's negative
    lag), so the copy starts as far into the longer staging as it did. A copy that does not
    grow (it carries no batch) keeps its staging. Writes ``new``; returns the calls'
    mask."""
    n = g.nodes
    calls = _kind(g, "launch", "sync_wait") & (_cat(g, "copy_staging") | _match(g, SYNC_COPY_RX))
    if not calls.any():
        return calls
    e = g.edges
    pos = pd.Index(n["id"].to_numpy())
    lau = np.flatnonzero((e["kind"] == "launch").to_numpy())
    src = pos.get_indexer(e["src"].to_numpy()[lau])
    dst = pos.get_indexer(e["dst"].to_numpy()[lau])
    ok = (src >= 0) & (dst >= 0)
    lau, src, dst = lau[ok], src[ok], dst[ok]
    ok = calls[src] & _kind(g, "gpu_copy")[dst] & (was[dst] > 0)
    lau, src, dst = lau[ok], src[ok], dst[ok]
    if not len(src):
        return np.zeros(len(n), bool)
    ratio = new[dst] / was[dst]
    ts = n["ts_ns"].to_numpy(np.int64)
    end = ts + n["dur_ns"].to_numpy(np.int64)
    o = _lane_order(g)
    lane_o = n["lane"].to_numpy()[o]
    prev_end = np.full(len(n), NEG, np.int64)
    same = np.flatnonzero(lane_o[1:] == lane_o[:-1])
    prev_end[o[same + 1]] = end[o[same]]
    blocking = _kind(g, "sync_wait")[src]
    held = np.where(blocking, was[src],
                    end[src] - np.maximum(ts[src], prev_end[dst])).clip(0, was[src])
    grow = held * (ratio - 1.0)
    # one copy a call (the attribution's rule takes its first): the largest growth
    first = np.lexsort((-grow, src))
    keep = first[np.r_[True, src[first][1:] != src[first][:-1]]]
    out = np.zeros(len(n), bool)
    out[src[keep]] = True
    new[src[keep]] = was[src[keep]] + grow[keep]
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    inside = lag[lau[keep]] < 0
    li = lau[keep][inside]
    lag[li] = np.maximum(np.rint(lag[li] * ratio[keep][inside]), -new[src[keep]][inside])
    # a blocking call's return is bounded by its drain edge too: it moves by the same growth
    d = np.flatnonzero((e["kind"] == "drain").to_numpy())
    at = pd.Series(grow[keep], index=n["id"].to_numpy()[src[keep]])
    more = at.reindex(e["dst"].to_numpy()[d]).to_numpy()
    hit = ~np.isnan(more)
    lag[d[hit]] += np.rint(more[hit]).astype(np.int64)
    e["lag_ns"] = lag
    return out


# what a copy carries (passes/payload.py) that a larger batch leaves the same size
FIXED_PAYLOADS = ("checkpoint", "shape_readback", "condition", "metrics", "gradients",
                  "parameters")


def _fixed_copies(g, f: Facts) -> np.ndarray:
    """The copies of a direction whose every copy the payload pass judged to carry no
    batch (parameters, gradients, a checkpoint, a metric...): they keep their bytes, and
    their staging, at any batch. Where one direction mixes such copies with the input
    batch or copies it cannot tell, none is held fixed (the model's default: work grows)."""
    out = np.zeros(len(g.nodes), bool)
    seen: dict[str, set] = {}
    for c in f.ctx.get("copy_payloads") or []:
        seen.setdefault(str(c.get("direction")), set()).add(c.get("payload"))
    fixed = [d for d, kinds in seen.items() if kinds <= set(FIXED_PAYLOADS)]
    if not fixed:
        return out
    copy = _kind(g, "gpu_copy")
    dirs = _per_name(g, "direction", lambda xs: [_direction(x) for x in xs])
    at = np.flatnonzero(copy)
    out[at] = np.isin(dirs[at].astype(str), fixed)
    return out


def _gpu_carries(g, f: Facts, p: dict) -> np.ndarray | None:
    """Per node: the GPU op's launching op carries the batch (``hostcost.gpu_carries``);
    None where shapes or the batch are unknown."""
    batch = p.get("batch") or f.batch
    if not batch or int(batch) < 2 or f.ops is None:   # a dimension of 1 says nothing
        return None
    out = hostcost.gpu_carries(g, f.ops, int(batch))
    if out is not None:
        gpu = _kind(g, "gpu_kernel", "gpu_copy", "gpu_memset")
        p["basis"] = "floor, ops that carry the batch"
        p["fixed_gpu_ops"] = int((gpu & ~out).sum())
    return out


def _loader_growth(f: Facts, p: dict, g, k: float) -> np.ndarray | None:
    batch = p.get("batch") or f.batch
    if not batch or int(batch) < 2 or f.ops is None:   # a dimension of 1 says nothing
        return None
    out = hostcost.loader_growth(g, f.ops, int(batch), k)
    p["loader"] = "per-sample ops" if out is not None else "whole"
    return out


def _shaped_growth(g, f: Facts, p: dict, k: float) -> np.ndarray | None:
    """Per node: the host time it gains with k times the batch, from the recorded shapes
    (``hostcost.node_growth``); None where shapes or the batch are unknown."""
    batch = p.get("batch") or f.batch
    if not batch or int(batch) < 2 or f.ops is None:   # a dimension of 1 says nothing
        return None
    bw = hostcost.batch_work(f.ops, int(batch))
    if bw is None or not bw["carries"].any():
        return None
    fit = bw.attrs["fit"]
    p["basis"] = "shapes"
    p["dispatch_floor_ns"] = int(bw.attrs["floor_ns"])
    p["fitted_ops"] = int((fit["how"] != "dispatch floor").sum()) if len(fit) else 0
    p["batch_ops"] = int(len(fit))
    return hostcost.node_growth(g, f.ops, bw, k)


def channels_last(g, f: Facts, p: dict):
    """channels_last: cuDNN's NCHW<->NHWC conversion kernels around the convolutions go
    (and their launch calls); the convolutions keep their measured time."""
    if f.ctx.get("convolutions") is False:
        return "no convolutions run"
    m = _kind(g, "gpu_kernel") & _match(g, LAYOUT_RX)
    if not m.any():
        return "no layout conversion kernels in the replayed steps"
    _remove_ops(g, m | _launches_of(g, m), p)
    return g


MODELS: tuple[Model, ...] = (
    Model("drop_syncs", drop_syncs,
          "the synced value is not needed inside the step (logged every N steps, read a step "
          "later); data-dependent shapes (nonzero, masked_select) keep their sync"),
    Model("drop_reads", drop_reads,
          "the read-backs' waits go (the sync ops that queued a device->host copy): the copy "
          "and the work that computed it still run; a bare synchronize, a blocking "
          "host->device copy and a tensor condition keep their wait"),
    Model("cuda_graphs", capture_graphs,
          f"one cudaGraphLaunch of {GRAPH_LAUNCH_NS / 1e3:g} us per step replaces the launches "
          "and the host ops between them; kernels keep their measured time with a "
          f"{GRAPH_KERNEL_GAP_NS / 1e3:g} us GPU-side gap; refused where the step syncs, "
          "loads data between launches or compiles"),
    Model("fuse_pointwise", fuse_pointwise,
          f"a fused chain moves {FUSED_TRAFFIC:g} of the chain's bytes (at least its longest "
          "member's time), one launch; GEMMs and other kernels unchanged"),
    Model("tf32", precision("tf32"),
          "each fp32 SIMT matmul runs at the same fraction of the TF32 peak as of the FP32 "
          "peak (time x fp32/tf32 dense peak)"),
    Model("bf16", precision("bf16"),
          "each fp32 / TF32 matmul at the same fraction of the bf16 peak (time x fp32/bf16 "
          "or tf32/bf16 dense peak); pointwise kernels unchanged (autocast keeps many fp32)"),
    Model("fp16", precision("fp16"),
          "as bf16, with the fp16 peak"),
    Model("pin_copies", pin_copies,
          "pageable copies at the pinned bandwidth the trace's best pinned copy reached"),
    Model("pin_batch", lambda g, f, p: pin_copies(g, f, dict(p, direction="HtoD",
                                                            batch_only=True)),
          "pin_copies for the input batch alone: the host->device copies right after a "
          "DataLoader fetch (no kernel launched between)"),
    Model("pin_reads", lambda g, f, p: pin_copies(g, f, dict(p, direction="DtoH")),
          "pin_copies for the device->host copies alone: the results read back"),
    Model("overlap_copies", overlap_copies,
          "copies issued early on a side stream: the host does not wait for them and they run "
          "beside the kernels queued before them"),
    Model("workers", dataloader_workers,
          f"workers load in parallel; the training thread takes a ready batch in "
          f"{FETCH_NS / 1e6:g} ms and waits max(0, load/N - rest of step)"),
    Model("persistent_workers", persistent_workers,
          "the epoch's worker shutdown and start on the training thread take no time; the "
          "first batch's wait stays"),
    Model("fused_optimizer", fused_optimizer,
          f"the optimizer's kernels become one per step moving {FUSED_TRAFFIC:g} of their "
          "bytes, its host ops one"),
    Model("no_empty_cache", drop_empty_cache,
          "empty_cache(), the frees and the re-mallocs it causes, and their device syncs go"),
    Model("replay_graphs", lambda g, f, p: capture_graphs(g, f, dict(p, existing=True)),
          "fixed shapes let the program's own CUDA graphs replay: the compiled region's host "
          "work and launches become one graph launch, as for cuda_graphs"),
    Model("no_recompile", drop_compile,
          "compilation and graph recording inside the steps go, with the calls made inside "
          "them and the GPU work those queued (autotuning runs); the compiled code's run "
          "time is the measured one"),
    Model("host_off_path", host_off_path,
          f"untraced host gaps above {HOST_LAG_FLOOR_NS / 1e3:g} us and Python frames outside "
          "ops move off the launching thread"),
    Model("checkpoint_off_path", checkpoint_off_path,
          "checkpoint saves run in the background"),
    Model("larger_batch", larger_batch,
          "with recorded shapes (host-only): the ops that carry the batch grow above their "
          "fitted fixed part, per-sample loading grows; else time above each lane's shortest "
          "op scales with the batch, and the threads' OS sleeps and waits; launches and "
          "sync waits do not"),
    Model("channels_last", channels_last,
          "the layout conversions go, convolutions keep their time"),
)
BY_ID = {m.id: m for m in MODELS}


# A refusal that says the change does not fit the program (the lever is withdrawn), as
# opposed to one that says the graph shows nothing for the model to change (the lever then
# keeps its bound: the attribution may see what the graph's names do not).
UNFIT = ("the program already", "the program's CUDA graphs are replayed already",
         "data loading runs between", "the step compiles", "the step syncs between",
         "the program is already compiled", "workers load the batches already",
         "the optimizer is already fused", "no convolutions run", "no matmul runs slower")


def unfit(reason: str) -> bool:
    """The refusal says the change does not fit this program (``UNFIT``)."""
    return str(reason).startswith(UNFIT)


# -- replaying -------------------------------------------------------------------------

def step_mean(sched, graph=None) -> float:
    """The schedule's mean replayed program step (ns; ``critical.program_spans``: the later
    of the host's span and the GPU's window, the step the measured figures and the replay's
    check use), in steady state: a step is never shorter
    than the work any one lane must do in it (its nodes' time and gaps) -- where a lever
    lets the host run ahead of the GPU (no sync left), the three replayed steps' markers
    would pass long before the GPU finishes, but step after step the GPU's own work sets
    the pace. Only GPU lanes count: a host thread's stretches include its idle waits (the
    autograd thread between backward passes).

    The floor is the steps' mean load, not each step's: once the host runs ahead, the early
    steps' spans end before their GPU work does and the last step's span carries the
    backlog -- floored step by step, the backlog counted twice (h200/pageable with its Python
    off the step path and its copy pinned replayed 2.76 ms a step for 2.55 ms of GPU work)."""
    st = sched.steps
    if not len(st):
        return float(sched.total_ns)
    r = st["replayed_ns"].to_numpy(np.int64)
    steps = getattr(graph, "steps", None)   # a bare graph of lanes: the replayed spans
    if steps is not None and len(steps) == len(st):
        # the step the program waits on (critical.program_spans), as the replay's own check
        # and the measured step are: the host markers' span alone missed a lagging GPU's
        # work (TraceLens' vLLM graph execution: priced on 157 ms for a 305 ms step)
        from .critical import program_spans

        r = program_spans(graph, sched.start_ns, sched.end_ns)
    r = r.astype(float)
    keep = r >= 0
    if not keep.any():
        return float(sched.total_ns)
    # a sample weighted to stand for the window (split.sample_steps): its weighted mean
    w = step_weights(graph, len(st))
    if w is not None and not w[keep].sum() > 0:
        w = None
    mean = float(r[keep].mean()) if w is None else float(np.average(r[keep], weights=w[keep]))
    if graph is not None:
        load = lane_load(graph)
        idx = st["index"].to_numpy()[keep]
        loads = [load.get(int(i), 0) for i in idx]
        mean = max(mean, float(np.mean(loads)) if w is None else
                   float(np.average(loads, weights=w[keep])))
    return mean


def step_weights(graph, n: int | None = None) -> np.ndarray | None:
    """The graph's steps' weights (``split.sample_steps``: how many of the window's steps
    each sampled step stands for), in ``graph.steps``' order; None: each counts once (or
    ``n`` given and the steps are not ``n``)."""
    steps = getattr(graph, "steps", None)
    if steps is None or "weight" not in steps or (n is not None and len(steps) != n):
        return None
    return steps["weight"].to_numpy(float)


def per_step(g, values: np.ndarray, mask: np.ndarray | None = None) -> int:
    """The nodes' ``values`` (where ``mask``) per step: their sum over the graph's steps. On
    a weighted sample (``step_weights``) each node counts its step's weight over the mean
    weight (a node of no step: once), so the figure is the window's mean step's."""
    v = np.asarray(values, np.int64)
    w = step_weights(g)
    if w is None:
        return int(v[mask].sum() if mask is not None else v.sum()) // max(1, len(g.steps))
    idx = pd.Index(g.steps["index"].to_numpy()).get_indexer(g.nodes["step"].to_numpy())
    mean_w = float(w.mean()) or 1.0
    nw = np.where(idx >= 0, w[np.maximum(idx, 0)] / mean_w, 1.0)
    if mask is not None:
        v, nw = v[mask], nw[mask]
    return int(float((v * nw).sum()) // max(1, len(g.steps)))


def gpu_lane_costs(graph) -> tuple | None:
    """(step, lane, cost + gap) of the steps' nodes on GPU lanes; None: there are none."""
    n = graph.nodes
    gpu_lanes = graph.lanes.loc[graph.lanes["what"] == "gpu", "lane"].to_numpy()
    step, lane = n["step"].to_numpy(), n["lane"].to_numpy()
    # the models' copies keep the nodes' steps and lanes: the mask of the last graph asked
    m = _as_last("gpu_lane_nodes", (step, lane, gpu_lanes),
                 lambda: np.flatnonzero((step >= 0) & np.isin(lane, gpu_lanes)))
    if not len(m):
        return None
    step, lane = step.astype(np.int64, copy=False)[m], lane.astype(np.int64, copy=False)[m]
    ns = (n["cost_ns"].to_numpy(np.int64) + np.maximum(n["gap_ns"].to_numpy(np.int64), 0))[m]
    return step, lane, ns


def lane_load(graph) -> dict:
    """Step index -> the largest time one GPU lane spends on that step's nodes (cost +
    gap)."""
    got = gpu_lane_costs(graph)
    if got is None:
        return {}
    step, lane, ns = got
    width = int(lane.max()) + 1
    flat = step * width + lane
    if int(flat.min()) >= 0 and int(flat.max()) < 4 * len(flat) + 4096:   # dense: no sort
        tot = np.bincount(flat, weights=ns)
        key = np.flatnonzero(np.bincount(flat))
        tot = tot[key]
    else:
        key, inv = np.unique(flat, return_inverse=True)
        tot = np.bincount(inv, weights=ns)
    st = key // width
    out: dict = {}
    for s_, v in zip(st.tolist(), tot.tolist()):
        out[s_] = max(out.get(s_, 0), int(v))
    return out


ORDER = ("drop_syncs", "drop_reads", "no_empty_cache", "no_recompile", "replay_graphs", "workers",
         "persistent_workers", "host_off_path",
         "checkpoint_off_path", "pin_copies", "pin_reads", "overlap_copies", "fused_optimizer",
         "fuse_pointwise", "tf32", "bf16", "fp16", "channels_last", "cuda_graphs",
         "larger_batch")


def replay_models(graph, facts: Facts, ids: list[str], params: dict | None = None,
                  before_ns: float | None = None) -> dict:
    """Apply the models ``ids`` (MODELS ids) to one copy of ``graph`` and replay it.

    {"before_ns", "after_ns", "saves_ns" (per step; per sample x the old batch for a
    larger batch), "applied", "refused": {id: why}, "params"}. Models run in ``ORDER``
    (the syncs go before a graph is captured)."""
    with _base_graph(graph):   # the models' questions of the graph's columns, asked once
        return _replay_models(graph, facts, ids, params, before_ns)


def _replay_models(graph, facts: Facts, ids: list[str], params: dict | None,
                   before_ns: float | None) -> dict:
    from .sim import WHATIF_FAST_SWEEPS, simulate

    before = before_ns if before_ns is not None else step_mean(simulate(graph), graph)
    g = graph.copy()
    params = {k: dict(v) for k, v in (params or {}).items()}
    applied, refused = [], {}
    for mid in sorted(ids, key=lambda x: ORDER.index(x) if x in ORDER else 99):
        p = params.setdefault(mid, {})
        try:
            out = BY_ID[mid].apply(g, facts, p)
        except (ValueError, IndexError, KeyError) as e:   # a graph shape no model foresaw:
            out = f"not modelled on this trace ({type(e).__name__}: {e})"   # never fail analyze
        if isinstance(out, str):
            refused[mid] = out
        else:
            g = out
            applied.append(mid)
    after = before
    if applied:
        sched = simulate(g, fast_sweeps=WHATIF_FAST_SWEEPS)
        if not sched.converged:   # no price without a settled replay: the levers keep bounds
            why = (f"the replay with the change did not settle after {sched.sweeps} sweeps "
                   "(a dependency cycle): priced by its bound")
            refused.update(dict.fromkeys(applied, why))
            applied = []
        else:
            after = step_mean(sched, g)
    x = float(params.get("larger_batch", {}).get("per_sample_x") or 1.0)
    return {"before_ns": int(before), "after_ns": int(after), "per_sample_x": x,
            "saves_ns": int(round(before - after / x)), "applied": applied,
            "refused": refused, "params": params,
            "gpu_saved_ns": gpu_saved(graph, g) if applied else 0}


def gpu_saved(before, after) -> int:
    """The GPU's own work (its ops' time) a change removed, per step: with the window's
    idle time, the most the change can give back (verdict/whatif.py caps a saving by it)."""
    if step_weights(before) is not None:   # a weighted sample: its steps' weighted mean
        return max(0, per_step(before, before.nodes["cost_ns"].to_numpy(np.int64).clip(0),
                               _gpu_work(before))
                   - per_step(after, after.nodes["cost_ns"].to_numpy(np.int64).clip(0),
                              _gpu_work(after)))

    def work(g) -> int:
        return int(g.nodes["cost_ns"].to_numpy(np.int64)[_gpu_work(g)].clip(0).sum())
    return max(0, work(before) - work(after)) // max(1, len(before.steps))


def graph_of(a) -> tuple:
    """(the levers' graph of an analysis -- its first PRICE_STEPS replayed steps, host
    stretches cut at their ops -- or None; why not). A host-only window (CPU trace) is
    built here from its steps: the replay pass leaves it out, the host levers price it."""
    from .. import steps as steps_mod
    from .graph import build_graph, host_only
    from .sim import simulate
    from .split import priced_graph

    facts = getattr(a, "facts", None)
    if facts is not None and facts.graph is not None:
        return facts.graph, None
    if a.trace is None:
        return None, "the analysis keeps no events"
    ev = _window_events(a)
    ops = steps_mod.gpu_ops(ev, positive_ts=a.meta.format == "nsys")
    rep = a.replay or {}
    if not rep.get("replayable", False) and (len(ops) or not host_only(rep)):
        return None, rep.get("reason") or "not replayed"
    if not len(ops) and (a.step_source == "whole_trace" or not len(a.steps)):
        return None, "no GPU work and no steps: a host-only window is replayed per step"
    g = priced_graph(build_graph(ev, ops, a.steps, step_pattern=a.step_pattern or None), ev,
                    a.step_pattern or None)
    if not simulate(g).converged:
        return None, "the replay did not settle"
    return g, None


def _window_events(a):
    from .. import window as window_mod

    w = a.window
    return a.trace.events if w is None or w.mode == "whole_trace" else \
        window_mod.slice_events(a.trace.events, w.start, w.end)


def facts_from_analysis(a) -> Facts:
    """The facts the models read, from an analysis (its context, copies, optimizer
    regions)."""
    from .split import optimizer_regions

    ctx = dict(a.context or {})
    facts = getattr(a, "facts", None)
    frame = facts.frames.get("optimizer_regions") if facts is not None else None
    if frame is None and a.trace is not None:
        frame = optimizer_regions(_window_events(a))
    return Facts(ctx=ctx, device=ctx.get("device") or {}, copies=dict(a.copies or {}),
                 ops=_cpu_ops(a), **regions_of(frame))


def _cpu_ops(a) -> pd.DataFrame | None:
    """The window's cpu ops with their shapes (what ``larger_batch`` reads), or None where
    no shape was recorded (nothing then reads them: the batch is read from shapes too)."""
    if a.trace is None:
        return None
    ev = _window_events(a)
    if "input_dims" not in ev:
        return None
    ops = (ev["kind"] == "cpu_op").to_numpy()
    if not (ops & ev["input_dims"].notna().to_numpy()).any():
        return None
    return ev.loc[ops, ["tid", "ts", "dur", "name", "input_dims"]]


# -- in the verdict --------------------------------------------------------------------

def _replay_one(graph, facts: Facts, before: float, mid: str) -> dict:
    return replay_models(graph, facts, [mid], before_ns=before)


# How ``price_models`` runs its independent replays: ``MAP[-1](fn, ids)`` is ``[fn(x) for x in
# ids]``; analysis.py pushes its worker processes for the verdict (passes/side.py
# ``map_forked``: the same results, the models shared across cores).
MAP: list = [lambda fn, items: [fn(x) for x in items]]


def price_models(graph, ctx: dict, copies: dict, regions: pd.DataFrame | None = None) -> dict:
    """Every model replayed alone on the levers' graph (``split.priced_graph``: the first
    PRICE_STEPS replayed steps, host stretches cut at their ops): {"before_ns", "models":
    {model id: replay_models result}, "graph", "facts", "steps_priced"} -- what the
    verdict prices its levers with.
    ``regions``: the optimizer-step regions (``split.optimizer_regions``; None: unknown, the
    fused-optimizer model refuses)."""
    from .sim import simulate

    facts = Facts(ctx=ctx, device=ctx.get("device") or {}, copies=dict(copies or {}),
                  **regions_of(regions))
    graph, sched, profiled = unprofiled_base(graph)
    before = step_mean(sched, graph)
    if not sched.converged:   # nothing is priced from a replay that did not settle
        why = (f"the unmodified replay did not settle after {sched.sweeps} sweeps: "
               "priced by its bound")
        models = {m.id: {"before_ns": int(before), "after_ns": int(before), "per_sample_x": 1.0,
                         "saves_ns": 0, "applied": [], "refused": {m.id: why}, "params": {},
                         "gpu_saved_ns": 0} for m in MODELS}
    else:
        ids = [m.id for m in MODELS]
        with _base_graph(graph):
            models = dict(zip(ids, MAP[-1](functools.partial(_replay_one, graph, facts,
                                                             before), ids)))
    priced = next((x.split(": ", 1)[1] for x in graph.notes if x.startswith("levers: ")),
                  f"{len(graph.steps)} of {len(graph.steps)} steps")
    return {"before_ns": int(before), "models": models, "graph": graph, "facts": facts,
            "steps_priced": priced, "profiled_before_ns": profiled}


_BARE: list = []   # the last graph asked about, and its replays with and without the profiler


def _with_and_without(graph) -> tuple:
    """(the graph without the profiler's cost, its schedule, the graph's schedule) for a
    marked graph (passes/overhead.py ``mark``); the analysis asks for the ratio, the
    pricing for the base: the replays are made once."""
    from ..overhead import without
    from .sim import simulate

    if _BARE and _BARE[0][0] is graph:
        return _BARE[0][1]
    bare = without(graph)
    out = (bare, simulate(bare), simulate(graph))
    _BARE[:] = [(graph, out, {})]
    return out


def _means_with_and_without(graph) -> tuple[float, float]:
    """(the replayed step mean with the profiler's cost, without it) of ``_with_and_without``'s
    replays: the ratio and the pricing's base both read them (made once)."""
    bare, s1, s0 = _with_and_without(graph)
    kept = _BARE[0][2]
    if "means" not in kept:
        kept["means"] = (step_mean(s0, graph), step_mean(s1, bare))
    return kept["means"]


def forget() -> None:
    """Let go of the last graph's replays (``_with_and_without``: kept for the pricing
    that follows the ratio, not past the analysis that asked; a graph, its unprofiled
    copy and two schedules) and of the models' caches (``_LAST``, ``_MEMO``): pure
    caches, so the next analysis computes the same figures; and the host-cost fit's (a copy
    of seven node columns: 45 MB at 1.7 M nodes, kept into the next rank's analysis)."""
    from . import critical, sim

    _BARE.clear()
    critical.forget()   # the last graph's shape the program steps read
    _LAST.clear()
    _MEMO.clear()
    _KEPT.clear()
    sim.forget()   # the last replay's lane layout
    hostcost.forget()


def profiler_ratio(graph) -> float | None:
    """The marked graph's (passes/overhead.py ``mark``) replayed step without the
    profiler's cost over the step with it; None: no mark, or a replay did not settle."""
    if graph is None or "profiler_ns" not in graph.nodes or not len(graph.steps):
        return None
    bare, s1, s0 = _with_and_without(graph)
    if not (s0.converged and s1.converged):
        return None
    b0, b1 = _means_with_and_without(graph)
    return b1 / b0 if b0 > 0 else None


def unprofiled_base(graph) -> tuple:
    """(the graph the levers are priced on, its schedule, the profiled replay's step or
    None): the graph without the profiler's estimated cost (passes/overhead.py marks it)
    where that cost shortens the replayed step by at least ``MATERIAL_SHARE`` -- a saving
    is what the program would gain unprofiled -- else the graph as measured."""
    from ..overhead import MATERIAL_SHARE
    from .sim import simulate

    if "profiler_ns" not in graph.nodes or not graph.nodes["profiler_ns"].any():
        return graph, simulate(graph), None
    bare, s1, s0 = _with_and_without(graph)
    if not (s0.converged and s1.converged):
        return graph, s0, None
    b0, b1 = _means_with_and_without(graph)
    if b0 - b1 < MATERIAL_SHARE * b0:
        return graph, s0, None
    return bare, s1, int(b0)


def regions_of(frame: pd.DataFrame | None) -> dict:
    """Facts' ``regions`` / ``region_ops`` from an optimizer-regions frame."""
    regions, region_ops = {}, {}
    if frame is None or not len(frame):
        return {"regions": regions, "region_ops": region_ops}
    for name, a, b, ops, longest in frame[["name", "start_ns", "end_ns", "ops_ns",
                                           "longest_ns"]].itertuples(index=False):
        regions.setdefault(str(name), []).append((int(a), int(b)))
        region_ops[int(a)] = (int(ops), int(longest))
    return {"regions": regions, "region_ops": region_ops}
