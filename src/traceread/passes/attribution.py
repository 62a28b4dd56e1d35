"""Why was the GPU idle? Label every idle gap on two axes.

``drain`` -- why the GPU queue ran empty:
  * ``sync``: a blocking host synchronisation was waiting when the GPU drained
    and returned right after (see ``is_sync_drained``); the name of the call is
    kept (``aten::item`` is preferred over the runtime call inside it);
  * ``starved``: the host simply had not launched the next operation yet;
  * ``queued``: the GPU op that ends the gap had been launched before the gap
    began (its launch call, linked by correlation id, returned by gap start +
    ``SKEW_NS``): the host was not late, the GPU waited on something else. The
    ``waited_on`` column says what, where the trace shows it (see ``queued``).
    A gap whose closing op's launch returned mid-gap is split: the part before
    the return is the host's (the gap keeps its ``sync``/``starved`` label), the
    rest is ``queued_ns`` -- counted as queued, never as a host cause.

A blocking call is found by behaviour as well as by name: a runtime call whose
GPU copy moves to or from *pageable* host memory (``Memcpy DtoH (Device ->
Pageable)``; nsys srcKind/dstKind give the same names) and that returned once that
copy was done waited for its stream to drain up to it, so it is a sync call like
``cudaMemcpy`` (DtoH into pageable memory always does, by CUDA's rules; a small
pageable HtoD copy is only staged and returns at once: ``copy_staging``, below). It
drains a gap only when its return lines up with the gap's start, like every sync.

A copy call that moves *pageable* host memory (or memory the trace does not name, for a
copy of >= 1 MiB whose call held the host through half of it) stages the data through a
pinned bounce buffer inside the call: its time is ``copy_staging``, the copy's own host
cost (pinned memory removes it), not a launch. A sync call (it waited for the queue and
returned once its copy was done) keeps its row and its drain; of a host->device one only
the head, from its start to its copy's, is staging (the wait ran while the GPU was busy).

``cpu`` -- what the launching host threads were doing during the gap. Each
nanosecond of a gap goes to exactly one category, the first in ``CPU_CATEGORIES``
(priority order) that has an event on a launch thread covering it; what no event
covers is ``untraced``. Categories are interval unions carved out of the gaps
one after another, so the per-category times of a device sum exactly to its
idle time. A launch thread parked in a wait is not working: its waits are carved out
of its own operator/python rows, and an instant where every launch thread waits is
``wait`` (see ``_waiting``).

Launch threads of a (pid, device): the host threads whose runtime/driver calls
launched that device's GPU operations (correlation linkage); without linkage,
the threads of the process that made any runtime/driver call, then any thread
of the trace that did; without runtime calls at all, every host thread of the
process (then of the trace).
"""
from __future__ import annotations


import re

import numpy as np
import pandas as pd

from .. import namerx
from . import intervals
from .compile import compile_name_lut, is_compile_name
from .steps import DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN, pair_keys
from .common import GRAPH_LAUNCH_RX, kind_in, lookup_at, name_codes, name_table, table_of
from ..table import SHARE_COLUMNS, release_heap_grown
from .frames import code_in, str_column

# Priority order: a container (compile, data loading, collective wait) explains
# everything that happens inside it; launch beats the operator that issues it.
CPU_CATEGORIES = ("compile", "graph_capture", "dataloader", "comm_wait", "copy_staging", "sync",
                  "alloc", "launch", "wait", "cpu_op", "python", "untraced")
DRAINS = ("sync", "starved", "queued")

# A sync call "ended at the gap's start" when it was already running when the GPU
# went idle (start <= gap start + SKEW) and returned within [gap start - SKEW,
# gap start + SYNC_TOLERANCE_NS] and before the gap ended (+ SKEW). The host needs
# a few us to notice the drained queue; Kineto's CPU/GPU clock alignment adds a few more.
SYNC_TOLERANCE_NS = 50_000
SKEW_NS = 5_000

# an explicit sync call: the host waits for a stream, the device (context) or an event;
# MTIA's runtime names its two bare (HTA's MTIA inference trace: each returns ~30 us after
# the device's copy it waited on ends)
SYNC_CALL = r"(?:(?:cuda|cu|hip)(?:Stream|Device|Ctx|Event)Synchronize|synchronize(?:Stream)?)"
# a synchronous copy call: returns when its copy is done (the Async ones do not)
SYNC_COPY_CALL = (r"(?:cuda|hip)Memcpy(?:2D|3D|Peer|FromSymbol|ToSymbol|DtoH|HtoD|DtoD|WithStream)?"
                  r"|cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D|Peer|AtoH|HtoA)?")
API_TAIL = r"(?:_v\d+)?(?:_ptsz|_ptds)?$"
SYNC_API_RX = namerx.compile(r"^(?:" + SYNC_CALL + "|" + SYNC_COPY_CALL + ")" + API_TAIL)
# Device-memory allocation and release: not launches. cudaFree/hipFree block until the
# device is idle and can take ms each (allocator churn, torch.cuda.empty_cache()).
ALLOC_API_RX = namerx.compile(
    r"^(?:(?:cuda|hip)(?:Malloc|Free)(?:Async|Host|Managed|Pitch|Array|3D|3DArray)?"
    r"|(?:cuda|hip)(?:HostAlloc|HostFree|FreeHost|MallocHost)"
    r"|cuMem(?:Alloc|Free)(?:Async|Host|Managed|Pitch)?(?:_v\d+)?"
    r"|cuMem(?:Create|Release|Map|Unmap|AddressReserve|AddressFree)"
    r"|hipExtMallocWithFlags)(?:_v\d+)?$")
# Stream / event creation: set-up of the resources launches use, not launches (extra-p's
# Windows runs spend 10 ms in each cudaStreamCreate: "launch overhead between short kernels"
# beside 250 ms kernels). Counted with the allocator: the same remedy, make them once outside
# the loop and reuse them. (cudaHostRegister is left a launch for now: as a program's first
# CUDA call it carries the context's creation -- pipit's saxpy, 305 ms -- which the
# allocator levers' replay would then promise to remove.)
RESOURCE_API_RX = namerx.compile(
    r"^(?:(?:cuda|hip|cu)(?:Stream|Event)(?:Create|Destroy)\w*)(?:_v\d+)?$")
# The closing op's stream waited on an event: the call (host side) or CUPTI's record of
# the wait (Kineto cuda_sync "Stream Wait Event", nsys SYNCHRONIZATION "Stream wait sync").
WAIT_API_RX = namerx.compile(r"^(?:cuda|hip|cu)StreamWaitEvent(?:_v\d+)?(?:_ptsz|_ptds)?$")
WAIT_RECORD_RX = namerx.compile(r"(?i)stream ?wait")
# An event wait names the other stream's op that ended the gap's start only when the gap is
# no longer than an event's signalling latency; a longer wait was on work not in the trace.
EVENT_LATENCY_NS = SYNC_TOLERANCE_NS
GPU_SIDE = "GPU-side"
# A longer queued gap with no wait seen and nothing traced on the device: another process or
# context on the GPU, an untraced stream, or GPU work the profiler did not record.
NOT_TRACED = "nothing traced"
PAGEABLE_RX = namerx.compile(r"(?i)pageable")
PINNED_RX = namerx.compile(r"(?i)pinned")
# Host copy staging: a copy call that moves pageable host memory copies it through a pinned
# bounce buffer inside the call (the host's own time, not a launch's). Unmarked memory
# counts only for a copy of at least STAGED_MIN_BYTES whose call held the host through at
# least half of it: a pinned copy's call returns once queued.
STAGED_DIRECTIONS = ("HtoD", "DtoH")
STAGED_MIN_BYTES = 1 << 20
# A pageable copy stages from this size on: below it the copy into the bounce buffer takes
# less than the call's own few microseconds (~10 GB/s host memcpy), which are a launch's
# (HTA step_based_trace's 4-8 B pageable HtoD calls: no pinned memory would save them).
PAGEABLE_STAGED_MIN_BYTES = 64 << 10
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")
# Preference when several sync calls drained the same gap: the framework op the user wrote.
SYNC_NAME_RANK = {"aten::item": 0, "aten::_local_scalar_dense": 1}


_NVTX_SUFFIX = r", (?:seq|op_id|sizes|input_op_ids|stream) = .*$"
_NVTX_SUFFIX_RX = namerx.compile(_NVTX_SUFFIX)


def _memo(memo: dict, fn, key: str) -> int:
    v = memo.get(key)
    if v is None:
        v = memo[key] = fn(key)
    return v


def _op_base(name: str) -> str:
    """``aten::item, seq = 12, op_id = 3`` (nsys emit_nvtx) -> ``aten::item``."""
    return name.split(",", 1)[0].strip()

COMPILE_RX = namerx.compile(
    r"\(dynamo_timed\)|entire_frame_compile|compile_inner|_compile\.compile|compile_fx(?!\.py)"
    r"|fx_codegen_and_compile|inductor_compile|call_user_compiler|backend_compile"
    r"|create_aot_dispatcher_function|aot_compile|async_compile|PT2 Compile|CompilationMetrics"
    r"|autotune_select_algorithm|benchmark_all_configs"
    r"|torch/_dynamo/(?:convert_frame|symbolic_convert|output_graph)\.py"
    r"|torch/_inductor/(?:graph|scheduler|codecache|select_algorithm)\.py"
    # compile_fx.py also holds the compiled graph's run-time wrappers (run, static_input)
    r"|torch/_inductor/compile_fx\.py\(\d+\): \w*(?:compile|codegen)")
# CUDA-graph recording: one-time work like compilation, but not a dynamo/inductor compile
# (``CUDAGraphNode.record (dynamo_timed)`` must not read as a compile).
GRAPH_RECORD_RX = namerx.compile(
    # cudagraph trees: the record frames only -- in_recording, exceed_rerecord_limit and
    # deferred_cudagraphify run on every replay (xdit_flux.1 steady-state profile traces)
    r"CUDAGraphNode\.record|CUDAGraph\.capture"
    r"|CUDAGraphTreeManager\.(?:record|_record|record_function)"
    r"|cudagraph_trees\.py\(\d+\): (?:record_function|_record|record)$"
    r"|capture_begin|capture_end|(?<!deferred_)cudagraphify"
    r"|^(?:cuda|hip|cu)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphUpload)\w*")
DATALOADER_RX = namerx.compile(
    r"(?i)enumerate\(DataLoader\)|DataLoader|data_loader|data loading|_next_data"
    r"|torch/utils/data/")
COMM_RX = namerx.compile(
    r"^(?:c10d::|c10d_|_c10d_functional::|nccl:|record_param_comms|ProcessGroup|gloo:|mpi:|aten::wait"
    r"|torch\.distributed)|ProcessGroupNCCL::wait|Work(?:NCCL)?::wait|torch/distributed/")
HOST_KINDS = ("cpu_op", "python", "annotation", "runtime", "driver", "osrt")
# A thread parked in one of these waits for another thread, process or peer; it is not
# working. OS-runtime calls (nsys OSRT): condition/futex/semaphore/lock waits, polls,
# joins, a child process, socket receives. Never plain ``read`` (a file read is work)
# nor sleeps (a sleep on the step path is the program's own delay).
WAIT_OSRT_RX = namerx.compile(r"^(?:poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|"
                          r"pthread_cond_(?:timed|clock)?wait|futex|sem_(?:timed|clock)?wait|"
                          r"pthread_join|waitpid|waitid|wait4|pthread_mutex_lock|"
                          r"pthread_rwlock_\w*lock|recv|recvfrom|recvmsg|accept4?)(?:64)?$")
# The same waits as Python frames (with_stack): Condition/Event/Thread waits, a queue get.
WAIT_PY_RX = namerx.compile(r"(?:^|/)(?:threading\.py\(\d+\): (?:wait|join|_wait_for_tstate_lock)"
                        r"|queue\.py\(\d+\): get|selectors\.py\(\d+\): select)$"
                        r"|^<built-in method acquire of _thread\.(?:lock|RLock) object")
# Socket sends (OS-runtime calls). On a helper thread that launches GPU work they are a
# collective's own transfer: ProcessGroupGloo's worker (pt_gloo_runloop) copies a CUDA
# tensor to the host and writev's it to the peer. Plain ``write`` is left out (file I/O).
SOCKET_SEND_RX = namerx.compile(r"^(?:writev|sendmsg|sendmmsg|sendto|send)(?:64)?$")
_SLICE = 1 << 18   # host rows per slice of the top-ops overlap
_DENSE_KEYS = 1 << 22   # (name, category) keys counted in a dense table up to this many


def _codes(col: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Category codes (-1 = null) and categories of a string column."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return col.cat.codes.to_numpy(), col.cat.categories


def _name_lut(cats: pd.Index, codes: np.ndarray, fn, dtype=np.int64, default=-1,
              vec=None) -> np.ndarray:
    """``fn(name)`` per category used by ``codes``, ``default`` elsewhere.

    One slot more than there are categories: index -1 (a null name) reads the
    last slot, which stays ``default``. ``vec(table, idx)``: the same answers for the
    names ``idx`` of the shared NameTable at once (names without an emit_nvtx suffix).
    """
    lut = np.full(len(cats) + 1, default, dtype)
    used = np.flatnonzero(np.bincount(codes[codes >= 0].astype(np.intp), minlength=len(cats)))
    if vec is not None and len(used):
        table = table_of(cats)
        # a suffix needs " = ": the names without one are their own base name
        odd = table.contains(" = ")[used]
        plain = used[~odd]
        lut[plain] = vec(table, plain)
        used = used[odd]
    # nsys traces carry tens of thousands of distinct NVTX texts: never touch unused ones
    texts = cats.take(used).astype(str).tolist()
    # emit_nvtx makes every call a distinct name ("aten::add, seq = 12, op_id = 7"):
    # classify each base name once
    memo: dict = {}
    lut[used] = [_memo(memo, fn, _NVTX_SUFFIX_RX.sub("", t)) for t in texts]
    return lut


def _kind_index(ev: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """Position of each row's kind in HOST_KINDS (int8), -1 for every other kind."""
    codes, cats = _codes(ev["kind"])
    lut = np.array([HOST_KINDS.index(c) if c in HOST_KINDS else -1
                    for c in cats.astype(str)] + [-1], np.int8)
    return lut[codes if rows is None else codes[rows]]


def _host_rows(ev: pd.DataFrame) -> np.ndarray:
    """Positions of the rows whose kind is in HOST_KINDS."""
    codes, cats = _codes(ev["kind"])
    return np.flatnonzero(code_in(codes, np.flatnonzero(cats.isin(HOST_KINDS))))


_API = (HOST_KINDS.index("runtime"), HOST_KINDS.index("driver"))
_OPS = (HOST_KINDS.index("cpu_op"), HOST_KINDS.index("annotation"))


def _is_api(kind: np.ndarray) -> np.ndarray:
    return (kind == _API[0]) | (kind == _API[1])


# ``_op_base(n) in SYNC_OPS`` as a pattern (fullmatch): strip() and ``\s`` skip the same
# characters
SYNC_BASE_RX = namerx.compile(r"\s*(?:" + "|".join(re.escape(o) for o in SYNC_OPS)
                              + r")\s*(?:,.*)?", re.S)


def _by_name_vec(step_rx, cat):
    """``by_name`` of ``_classify`` over names of the NameTable (see there), vectorised."""
    def vec(t, idx):
        conds = [t.hits(WAIT_OSRT_RX, "match") | t.hits(WAIT_PY_RX),
                 np.logical_or.reduce([t.hits(r) for r in step_rx]),
                 t.hits(GRAPH_RECORD_RX), t.hits(COMPILE_RX) | compile_name_lut(t),
                 t.hits(DATALOADER_RX), t.hits(COMM_RX), t.hits(SYNC_BASE_RX, "fullmatch")]
        vals = [-3, -2, cat["graph_capture"], cat["compile"], cat["dataloader"],
                cat["comm_wait"], cat["sync"]]
        return np.select([c[idx] for c in conds], vals, -1)
    return vec


def _api_vec(cat):
    def vec(t, idx):
        conds = [t.hits(GRAPH_RECORD_RX), t.hits(SYNC_API_RX, "match"),
                 t.hits(ALLOC_API_RX, "match") | t.hits(RESOURCE_API_RX, "match")]
        return np.select([c[idx] for c in conds],
                         [cat["graph_capture"], cat["sync"], cat["alloc"]], cat["launch"])
    return vec


def _rx_vec(rx, how="search"):
    return lambda t, idx: t.hits(rx, how)[idx]


def _classify(kind: np.ndarray, name: np.ndarray, name_cats: pd.Index,
              nccl: np.ndarray | None, step_pattern: str | None) -> np.ndarray:
    """CPU category (int8) of rows given their HOST_KINDS index and name codes."""
    cat = {c: i for i, c in enumerate(CPU_CATEGORIES)}
    step_rx = [namerx.compile(p) for p in ([step_pattern] if step_pattern
                                       else [DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN])]

    def by_name(n: str) -> int:
        if WAIT_OSRT_RX.match(n) or WAIT_PY_RX.search(n):
            return -3   # a wait, when the row is an OS call or a python frame
        if any(r.search(n) for r in step_rx):
            return -2
        if GRAPH_RECORD_RX.search(n):
            return cat["graph_capture"]
        if COMPILE_RX.search(n) or is_compile_name(n):
            return cat["compile"]
        if DATALOADER_RX.search(n):
            return cat["dataloader"]
        if COMM_RX.search(n):
            return cat["comm_wait"]
        if _op_base(n) in SYNC_OPS:
            return cat["sync"]
        return -1

    def api(n: str) -> int:
        if GRAPH_RECORD_RX.search(n):
            return cat["graph_capture"]
        if SYNC_API_RX.match(n):
            return cat["sync"]
        return cat["alloc"] if ALLOC_API_RX.match(n) or RESOURCE_API_RX.match(n) \
            else cat["launch"]

    is_api = _is_api(kind)
    out = np.full(len(kind), -1, np.int8)
    api_lut = _name_lut(name_cats, name[is_api], api, np.int8, vec=_api_vec(cat))
    out[is_api] = api_lut[name[is_api]]
    del is_api
    other = kind >= 0
    other &= ~_is_api(kind)
    named_lut = _name_lut(name_cats, name[other], by_name, np.int8,
                          vec=_by_name_vec(step_rx, cat))
    del other
    for k, default in (("cpu_op", cat["cpu_op"]), ("annotation", cat["cpu_op"]),
                       ("osrt", cat["cpu_op"]), ("python", cat["python"])):
        m = kind == HOST_KINDS.index(k)
        named = named_lut[name[m]]
        wait = cat["wait"] if k in ("osrt", "python") else default
        out[m] = np.where(named >= 0, named, np.where(named == -2, -1,
                                                      np.where(named == -3, wait, default)))
    if nccl is not None:
        out[nccl & (kind == HOST_KINDS.index("annotation"))] = cat["comm_wait"]
    return out


def _helper_sends_are_comm(kind: np.ndarray, name: np.ndarray, name_cats: pd.Index,
                           key: np.ndarray, cats: np.ndarray) -> None:
    """Socket sends off the process's main thread (tid != pid) are communication
    (``comm_wait``), not host work: h200/ddp2's gloo workers' writev read as 'host-bound:
    writev spans 172 ms of idle GPU time' on the rank whose main thread slept. A send on the
    main thread (a logger's socket) stays the program's own work."""
    osrt = kind == HOST_KINDS.index("osrt")
    if not osrt.any():
        return
    lut = _name_lut(name_cats, name[osrt], lambda n: bool(SOCKET_SEND_RX.match(n)), bool, False,
                    vec=_rx_vec(SOCKET_SEND_RX, "match"))
    hit = np.zeros(len(kind), bool)
    hit[osrt] = lut[name[osrt]]
    hit &= (key >> 32) != (key & 0xFFFFFFFF)
    cats[hit] = CPU_CATEGORIES.index("comm_wait")


def _waits_on_helper_sends(kind: np.ndarray, hs: np.ndarray, he: np.ndarray, key: np.ndarray,
                           cats: np.ndarray) -> None:
    """A main thread's OS wait (a condition wait, a poll) inside which a helper thread of its
    process sends on a socket (``_helper_sends_are_comm``) is a wait for that transfer
    (``comm_wait``): ProcessGroupGloo's caller waits on a condition while its worker
    (pt_gloo_runloop) writev's the tensor and polls for the peer's (h200/ddp2 rank 0: 151 ms a
    step in pthread_cond_wait, 30 ms of it for the late rank, read as "waits on something the
    trace does not show")."""
    wait_cat, comm = CPU_CATEGORIES.index("wait"), CPU_CATEGORIES.index("comm_wait")
    main = (key >> 32) == (key & 0xFFFFFFFF)
    sends = np.flatnonzero(~main & (cats == comm) & (kind == HOST_KINDS.index("osrt")))
    waits = np.flatnonzero(main & (cats == wait_cat))
    if not len(sends) or not len(waits):
        return
    pid_s, pid_w = key[sends] >> 32, key[waits] >> 32
    for p in np.intersect1d(pid_s, pid_w).tolist():
        s = sends[pid_s == p]
        starts = np.sort(hs[s])
        w = waits[pid_w == p]
        # a send that starts inside the wait
        first = np.searchsorted(starts, hs[w], side="left")
        last = np.searchsorted(starts, he[w], side="left")
        cats[w[last > first]] = comm


def _nccl_domain(ev: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray | None:
    if "domain" not in ev or not len(ev):
        return None
    codes, cats = _codes(ev["domain"])
    lut = np.array([str(c) == "NCCL" for c in cats] + [False], bool)
    if not lut.any():   # no NCCL domain (every Kineto trace): nothing to mark
        return None
    return lut[codes if rows is None else codes[rows]]


def _sync(kind: np.ndarray, name: np.ndarray, name_cats: pd.Index) -> np.ndarray:
    """Rows that are blocking host syncs, from their HOST_KINDS index and name codes."""
    is_api = _is_api(kind)
    # aten::item as an operator (Kineto) or as an NVTX range (nsys, emit_nvtx)
    is_op = (kind == _OPS[0]) | (kind == _OPS[1])
    api = _name_lut(name_cats, name[is_api], lambda n: bool(SYNC_API_RX.match(n)), bool, False,
                    vec=_rx_vec(SYNC_API_RX, "match"))
    op = _name_lut(name_cats, name[is_op], lambda n: _op_base(n) in SYNC_OPS, bool, False,
                   vec=_rx_vec(SYNC_BASE_RX, "fullmatch"))
    out = np.zeros(len(kind), bool)
    out[is_api] = api[name[is_api]]
    out[is_op] = op[name[is_op]]
    return out


def _drop_host_only_items(kind, hs, he, key, is_sync, cats) -> None:
    """``.item()`` of a CPU tensor (AdamW's step counters: hundreds a step) makes no CUDA
    call and waits for nothing: when runtime calls were traced, an ``aten::item`` /
    ``_local_scalar_dense`` with none inside it on its thread is a plain op (in place)."""
    op = is_sync & ((kind == _OPS[0]) | (kind == _OPS[1]))
    api = _is_api(kind)
    if not op.any() or not api.any():
        return
    idle = np.zeros(len(kind), bool)
    for k in np.unique(key[op]).tolist():
        starts = np.sort(hs[api & (key == k)])
        rows = np.flatnonzero(op & (key == k))
        inside = np.searchsorted(starts, he[rows], "left") > np.searchsorted(starts, hs[rows],
                                                                           "left")
        idle[rows[~inside]] = True
    is_sync &= ~idle
    cats[idle] = CPU_CATEGORIES.index("cpu_op")


def classify_host(ev: pd.DataFrame, step_pattern: str | None = None) -> np.ndarray:
    """CPU category index (into CPU_CATEGORIES) of every row; -1 for rows that never count.

    Never counted: GPU-side rows, instants, generic spans, and the step ranges
    themselves (they cover everything and say nothing).
    """
    name, cats = _codes(ev["name"])
    kind = _kind_index(ev)
    out = _classify(kind, name, cats, _nccl_domain(ev), step_pattern)
    if "pid" in ev and "tid" in ev:   # a caller that took only the name columns: no threads
        _helper_sends_are_comm(kind, name, cats, thread_key(ev["pid"].to_numpy(np.int64, copy=True),
                                                         ev["tid"].to_numpy(np.int64, copy=True)), out)
    return out.astype(np.int64)


def sync_calls(ev: pd.DataFrame) -> np.ndarray:
    """Rows that are blocking host syncs (runtime/driver sync APIs, aten::item)."""
    name, cats = _codes(ev["name"])
    return _sync(_kind_index(ev), name, cats)


def inside_compile(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` run inside a compile frame on their thread (``COMPILE_RX`` or a
    compile phase): the compiler's own calls -- Inductor's autotuning syncs after each
    benchmarked config (``CachingAutotuner.benchmark_all_configs``) -- not the program's."""
    rows = np.asarray(rows, np.int64)
    out = np.zeros(len(rows), bool)
    if not len(rows):
        return out
    table = name_table(ev["name"])
    lut = table.hits(COMPILE_RX) | compile_name_lut(table)
    host = np.flatnonzero(kind_in(ev, HOST_KINDS))
    comp = host[lut.take(name_codes(ev["name"]).take(host))]
    if not len(comp):
        return out
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    key = thread_key(ev["pid"].to_numpy()[comp].copy(), ev["tid"].to_numpy()[comp].copy())
    rkey = thread_key(ev["pid"].to_numpy()[rows].copy(), ev["tid"].to_numpy()[rows].copy())
    for k in np.unique(key).tolist():
        mine = comp[key == k]
        s, e = intervals.union(ts[mine], end[mine])
        at = np.flatnonzero(rkey == k)
        i = np.searchsorted(s, ts[rows[at]], side="right") - 1
        ok = i >= 0
        out[at[ok]] = end[rows[at[ok]]] <= e[i[ok]]
    return out


def _pairs(pid: np.ndarray, tid: np.ndarray) -> set:
    """The distinct (pid, tid) pairs, as Python ints: one int64 key per pair where both fit
    32 bits, hashed (a DataFrame's drop_duplicates was ~4 ms at 100 k ops)."""
    pid, tid = np.asarray(pid), np.asarray(tid)
    if len(pid) and pid.dtype.kind in "iu" and tid.dtype.kind in "iu" and \
            -2**31 <= int(pid.min()) and int(pid.max()) < 2**31 and \
            -2**31 <= int(tid.min()) and int(tid.max()) < 2**31:
        key = pd.unique(pid.astype(np.int64) * (1 << 32) + (tid.astype(np.int64) + 2**31))
        low = key & 0xFFFFFFFF
        return set(zip(((key - low) >> 32).tolist(), (low - 2**31).tolist()))
    d = pd.DataFrame({"pid": pid, "tid": tid}).drop_duplicates()
    return set(zip(d["pid"].tolist(), d["tid"].tolist()))


def launch_threads(ev: pd.DataFrame, ops: pd.DataFrame, pid: int, device: int) -> set:
    """(pid, tid) pairs of the host threads that feed (pid, device); see module doc."""
    mine = (ops["pid"].to_numpy() == pid) & (ops["device"].to_numpy() == device)
    linked = mine & (ops["launch_tid"].to_numpy() >= 0)
    if linked.any():
        return _pairs(ops["launch_pid"].to_numpy()[linked], ops["launch_tid"].to_numpy()[linked])
    epid, etid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    for kinds in (("runtime", "driver"), ("cpu_op", "python", "annotation")):
        host = kind_in(ev, kinds)
        for sel in (host & (epid == pid), host):
            if sel.any():
                return _pairs(epid[sel], etid[sel])
    return set()


def thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """pid * 2**32 + (tid & 0xFFFFFFFF) as int64; consumes both arrays (fresh copies)."""
    key = pid.astype(np.int64, copy=False)
    key *= 1 << 32
    tid = tid.astype(np.int64, copy=False)
    tid &= 0xFFFFFFFF
    key += tid
    return key


THREAD_BLOCK = 1 << 18   # rows a time ``rows_on_threads`` keys: 2 MB of keys


def rows_on_threads(pid: np.ndarray, tid: np.ndarray, threads: set) -> np.ndarray:
    """``_thread_mask(thread_key(pid, tid), threads)`` over every row, the key made a block of
    rows at a time: a whole-window key and its pid / tid copies were 24 B a row at the facts'
    peak (``culprits._work_rows``); the same mask, the key's int64 wrap kept."""
    on = np.zeros(len(pid), bool)
    if not threads:
        return on
    for a in range(0, len(pid), THREAD_BLOCK):
        b = a + THREAD_BLOCK
        on[a:b] = _thread_mask(thread_key(pid[a:b].astype(np.int64), tid[a:b].astype(np.int64)),
                               threads)
    return on


def _thread_mask(key: np.ndarray, threads: set) -> np.ndarray:
    if not threads:
        return np.zeros(len(key), bool)
    want = np.array([p * (1 << 32) + (t & 0xFFFFFFFF) for p, t in threads], np.int64)
    if len(want) > 16:
        return np.isin(key, want)
    on = key == want[0]   # a few threads: compares, not isin's sort of every row
    for w in want[1:]:
        on |= key == w
    return on


def attribute(ev: pd.DataFrame, gaps: pd.DataFrame, ops: pd.DataFrame,
              step_pattern: str | None = None, top: int = 15, queued_of=None) -> dict:
    """Label and split every gap.

    ``gaps``: start, end, duration, pid, device (+ anything else, kept).
    ``ops``: ``steps.gpu_ops(ev)`` (launch linkage decides the launch threads).
    ``queued_of``: a call that returns ``queued(ev, gaps, ops)`` (the analysis runs it as a
    side pass beside this one: it reads only the gaps' bounds); None: computed here.
    Returns {"gaps": gaps + drain, drain_op, cpu (largest category) and one
    ``cpu_<category>`` ns column per category; "top_ops": DataFrame name,
    category, ns (inclusive time inside gaps), count; "sync_blocked": per (pid, device)
    the ns its launch threads spent inside sync calls, busy GPU or not}.
    """
    gaps = gaps.reset_index(drop=True)   # a new frame: the columns added below stay ours
    n = len(gaps)
    # column-major: each category's column is contiguous, so the gap frame's cpu_* / qcpu_*
    # columns are views of it (not a second copy of both tables while the result is built)
    split = np.zeros((n, len(CPU_CATEGORIES)), np.int64, order="F")
    drain_op = np.zeros(n, np.int64)   # 0: no sync drained the gap, else 1 + index in sync_ops
    sync_ops: dict[str, int] = {}
    # Host rows as plain arrays (row indices, codes), never a copied frame or per-row strings.
    rows = _host_rows(ev)
    kind = _kind_index(ev, rows)
    all_names, name_cats = _codes(ev["name"])
    name = all_names[rows]
    cats = _classify(kind, name, name_cats, _nccl_domain(ev, rows), step_pattern)
    is_sync = _sync(kind, name, name_cats)
    hs = ev["ts"].to_numpy(np.int64)[rows]
    he = ev["dur"].to_numpy(np.int64)[rows]
    he += hs
    key = thread_key(ev["pid"].to_numpy()[rows], ev["tid"].to_numpy()[rows])
    _helper_sends_are_comm(kind, name, name_cats, key, cats)
    _waits_on_helper_sends(kind, hs, he, key, cats)
    _drop_host_only_items(kind, hs, he, key, is_sync, cats)
    # blocking by behaviour: pageable copies. Per host row the index of its label (-1:
    # none): an object array of "" per row cost ~15 ms to fill and compare at 500 k rows
    pg_at, pg_text = _pageable_calls(ev, rows, kind)
    sync_label = np.full(len(rows), -1, np.int32)   # an index into pg_text (int32: 4 B a row)
    sync_label[pg_at] = np.arange(len(pg_at))
    blocking = sync_label >= 0
    is_sync |= blocking
    cats[blocking] = CPU_CATEGORIES.index("sync")
    st_at, st_copy, st_htod = _staging_calls(ev, rows, kind)
    # a sync keeps its row: it waited for the queue (GPU busy) and returned once its copy
    # was done; only a host->device one's head, from its start to its copy's, is staging
    # (the data goes to the bounce buffer before the copy; a DtoH copy stages after it)
    cats[st_at[~is_sync[st_at]]] = CPU_CATEGORIES.index("copy_staging")
    head = is_sync[st_at] & st_htod & (st_copy > hs[st_at])
    h_at, h_end = st_at[head], st_copy[head]
    del rows, blocking, st_at, st_copy, st_htod, head
    if len(h_at):   # the heads as rows of their own (the call's name, thread and kind)
        he = np.concatenate([he, np.minimum(he[h_at], h_end)])
        hs = np.concatenate([hs, hs[h_at]])
        key, name, kind = (np.concatenate([x, x[h_at]]) for x in (key, name, kind))
        cats = np.concatenate([cats, np.full(len(h_at), CPU_CATEGORIES.index("copy_staging"),
                                             cats.dtype)])
        is_sync = np.concatenate([is_sync, np.zeros(len(h_at), bool)])
        sync_label = np.concatenate([sync_label, np.full(len(h_at), -1, np.int32)])
    cap = _capture_regions(kind, name, name_cats, hs, he, key)
    if cap is not None:   # stream-capture regions: everything inside records a CUDA graph
        cs, ce, ck, cn, ckind = cap
        hs, he, key = np.concatenate([hs, cs]), np.concatenate([he, ce]), np.concatenate([key, ck])
        name, kind = np.concatenate([name, cn]), np.concatenate([kind, ckind])
        cats = np.concatenate([cats, np.full(len(cs), CPU_CATEGORIES.index("graph_capture"),
                                             cats.dtype)])
        is_sync = np.concatenate([is_sync, np.zeros(len(cs), bool)])
        sync_label = np.concatenate([sync_label, np.full(len(cs), -1, np.int32)])
    top_parts = []
    blocked: dict = {}   # (pid, device) -> ns its launch threads spent inside sync calls
    queued_ns, waited_on = queued(ev, gaps, ops) if queued_of is None else queued_of()
    # the categories of each gap's queued part: zero unless queued_ns > 0, so only those
    # gaps are kept (and carved, for a part) until the host arrays are freed
    q_parts: list = []
    groups = list(gaps.groupby(["pid", "device"], sort=True).indices.items())
    for g, ((pid, dev), idx) in enumerate(groups):
        gs = gaps["start"].to_numpy(np.int64)[idx]
        ge = gaps["end"].to_numpy(np.int64)[idx]
        on = _thread_mask(key, launch_threads(ev, ops, int(pid), int(dev)))
        # only the rows that reach a gap count (most run while the GPU is busy): their
        # positions first, then each array taken once (not a copy of the thread's rows and
        # then of those near a gap)
        gaps_iv = intervals.union(gs, ge)
        if on.all():   # one device fed by every host thread
            near = intervals.reaching(gaps_iv, hs, he)
        else:
            near = np.flatnonzero(on)
            near = near[intervals.reaching(gaps_iv, hs[near], he[near])]
        # the sync calls' rows first (a few): after the last group's, each host array is let
        # go as soon as its rows near a gap are taken, so the host arrays (~40 B a host row)
        # and those rows (~28 B a row near a gap) are never all alive at once (the
        # attribution's peak at 1 GB)
        last = g == len(groups) - 1
        sy = on & is_sync
        del on
        s_hs, s_he = hs[sy], he[sy]
        names = _sync_names(name_cats, name[sy])
        lab = sync_label[sy]
        del sy
        if last:
            del is_sync, sync_label
        t_on = key[near]
        if last:
            del key
        c_on = cats[near]
        if last:
            del cats
        s_on = hs[near]
        if last:
            del hs
        e_on = he[near]
        if last:
            del he
        k_on = kind[near]
        if last:
            del kind
        n_on = name[near]
        if last:
            del name
        del near
        if last:
            # their pages go back now: the carve's and top ops' arrays are new sizes that the
            # freed holes would not hold (RSS 110 MB over the live heap at 1 GB otherwise)
            release_heap_grown()
        bs, be = intervals.union(s_hs, s_he) if len(s_hs) else (s_hs, s_he)
        blocked[(int(pid), int(dev))] = int((be - bs).sum())
        names[lab >= 0] = pg_text[lab[lab >= 0]]
        drain_op[idx] = _drain(gs, ge, names, s_hs, s_he, sync_ops)
        del s_hs, s_he, names, lab, bs, be
        cc, cs, ce = _waiting(gaps_iv, c_on, s_on, e_on, t_on)
        if len(idx) == n:   # one (pid, device): carve straight into the result
            _carve(gs, ge, cc, cs, ce, split)
        else:
            split[idx] = _carve(gs, ge, cc, cs, ce)
        q_parts.append(_carve_queued(idx, gs, ge, queued_ns[idx], cc, cs, ce))
        top_parts.append(_top_ops(k_on, n_on, name_cats, c_on, s_on, e_on, gaps_iv, t_on))
        del c_on, s_on, e_on, k_on, n_on, t_on, cc, cs, ce
    top_cat = _argmax_columns(split)
    q_cols = _queued_columns(split, q_parts)   # a column at a time: not a second table
    del q_parts
    _add_split(gaps, "cpu_", split)
    del split
    gaps["cpu"] = str_column(CPU_CATEGORIES, top_cat)
    _add_columns(gaps, "qcpu_", q_cols)
    del q_cols
    label = (drain_op > 0).astype(np.int8)
    label[(queued_ns > 0) & (queued_ns >= gaps["duration"].to_numpy(np.int64))] = 2
    drain_op[label == 2] = 0   # a sync that returned while the next op sat queued drained nothing
    gaps["drain"] = str_column(("starved", "sync", "queued"), label)
    gaps["drain_op"] = str_column([""] + list(sync_ops), drain_op)
    gaps["queued_ns"] = queued_ns
    gaps["waited_on"] = waited_on
    return {"gaps": gaps, "top_ops": _merge_top(top_parts, top), "sync_blocked": blocked}


def _add_split(gaps: pd.DataFrame, prefix: str, split: np.ndarray) -> None:
    """One column per category of the (gaps, categories) ``split``. Under copy-on-write the
    categories no gap has (most traces use 4-5 of the 11) share one column of zeros and the
    others are copied out of the matrix, which is then let go: 8 B a gap less for each
    unused category, in the gap frame every later pass holds (~36 MB at 1 GB). Without
    copy-on-write the columns stay views of the matrix (a write through one would reach
    the others)."""
    zero = None   # a Series: pandas tracks its views, so a write to one column copies it
    for j, c in enumerate(CPU_CATEGORIES):
        col = split[:, j]
        if SHARE_COLUMNS and not col.any():
            if zero is None:
                zero = pd.Series(np.zeros(len(col), np.int64), index=gaps.index, copy=False)
            gaps[prefix + c] = zero
            continue
        gaps[prefix + c] = pd.Series(col.copy() if SHARE_COLUMNS else col, index=gaps.index,
                                     copy=False)


def _add_columns(gaps: pd.DataFrame, prefix: str, cols: list) -> None:
    """``_add_split`` of a split given as one array per category (None: zero on every gap);
    the zero ones share one column under copy-on-write."""
    zero = None
    for c, col in zip(CPU_CATEGORIES, cols):
        if col is None:
            if zero is None or not SHARE_COLUMNS:
                zero = pd.Series(np.zeros(len(gaps), np.int64), index=gaps.index, copy=False)
            col = zero
        else:
            col = pd.Series(col, index=gaps.index, copy=False)
        gaps[prefix + c] = col


def _carve_queued(idx, gs, ge, qns, cats, hs, he) -> tuple:
    """The queued split (per category, the ns of each gap's queued part: its last ``qns``
    ns) as (gaps queued whole, whose split it is; gaps queued in part, their rows).
    Gaps with ``qns <= 0`` have no queued part: their rows are zero and left out."""
    whole = (qns > 0) & (qns >= ge - gs)
    part = np.flatnonzero((qns > 0) & ~whole)
    return idx[whole], idx[part], _carve(ge[part] - qns[part], ge[part], cats, hs, he)


def _argmax_columns(split: np.ndarray) -> np.ndarray:
    """``split.argmax(axis=1)`` of the column-major (gaps, categories) table a column at a
    time: numpy's argmax along rows copies it whole into row-major order first (31 MB at
    1 GB). The first largest column wins, as argmax's."""
    top = np.zeros(split.shape[0], np.intp)
    if not split.shape[1]:
        return split.argmax(axis=1)   # argmax's own error for no categories
    best = split[:, 0].copy()
    for j in range(1, split.shape[1]):
        col = split[:, j]
        m = col > best
        top[m] = j
        best[m] = col[m]
    return top


def _queued_columns(split: np.ndarray, q_parts: list) -> list:
    """The queued split from ``_carve_queued``'s parts, one array per category (None where
    it is zero on every gap): built a column at a time, never a second (gaps, categories)
    table (its scattered rows touched every page of it: 31 MB at 1 GB)."""
    out = []
    for j in range(split.shape[1]):
        col = np.zeros(split.shape[0], np.int64)
        for whole, part, rows in q_parts:
            col[whole] = split[whole, j]
            col[part] = rows[:, j]
        out.append(col if col.any() else None)
    return out


CAPTURE_BEGIN_RX = namerx.compile(r"capture_begin|^(?:cuda|hip|cu)StreamBeginCapture")
CAPTURE_END_RX = namerx.compile(r"capture_end|^(?:cuda|hip|cu)StreamEndCapture")


def capture_pairs(hs: np.ndarray, he: np.ndarray, key: np.ndarray, begin: np.ndarray,
                  end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stream-capture regions: each begin row paired with the first end row of the same
    thread that ends after it begins. Returns (begin row indices, region end times)."""
    rows, stops = [], []
    for k in np.unique(key[begin]).tolist():
        b = np.flatnonzero(begin & (key == k))
        e = np.flatnonzero(end & (key == k))
        if not len(e):
            continue
        ends = np.sort(he[e])
        j = np.searchsorted(ends, hs[b], side="right")
        ok = j < len(ends)
        rows.append(b[ok])
        stops.append(ends[j[ok]])
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(rows).astype(np.int64), np.concatenate(stops).astype(np.int64)


def _capture_regions(kind, name, name_cats, hs, he, key):
    """[begin, end) of each stream capture per thread: a ``capture_begin`` frame (or a
    StreamBeginCapture call) to the end of the next ``capture_end`` on the same thread.

    During capture, launches are recorded, not run: the GPU idles by design, and the
    operators inside are the graph's recording cost, not host overhead.
    """
    begin = _name_lut(name_cats, name, lambda n: bool(CAPTURE_BEGIN_RX.search(n)), bool, False,
                      vec=_rx_vec(CAPTURE_BEGIN_RX))[name]
    if not begin.any():
        return None
    end = _name_lut(name_cats, name, lambda n: bool(CAPTURE_END_RX.search(n)), bool, False,
                    vec=_rx_vec(CAPTURE_END_RX))[name]
    rows, stops = capture_pairs(hs, he, key, begin, end)
    if not len(rows):
        return None
    return hs[rows], stops, key[rows], name[rows], kind[rows]


_WAIT = CPU_CATEGORIES.index("wait")
_WORK = (CPU_CATEGORIES.index("cpu_op"), CPU_CATEGORIES.index("python"))


def _waiting(gaps_iv, cats, hs, he, key):
    """Launch-thread rows with each thread's waits taken out of its own work.

    A thread parked in a wait (``WAIT_OSRT_RX``, ``WAIT_PY_RX``) is not working: its
    operator, range and python rows (``cpu_op``, ``python``: frames that merely enclose
    the wait) lose the instants it waits, so another launch thread's work -- or its
    untraced time -- explains them. Containers keep them: a wait inside a collective,
    the DataLoader, a sync or a compile is that cause's time. ``wait`` is left only
    where every launch thread seen in that gap waits (a thread with no row in a gap
    neither works nor waits there as far as the trace shows). Returns (cats, starts,
    ends) to carve; the same arrays when no launch thread waits.
    """
    wait = cats == _WAIT
    if not wait.any():
        return cats, hs, he
    g_s, g_e = gaps_iv
    keep = ~wait & ~np.isin(cats, _WORK)   # work rows come back below, less their waits
    cs, ss, es = [cats[keep]], [hs[keep]], [he[keep]]
    all_wait = (g_s, g_e)
    for t in np.unique(key).tolist():
        mine = key == t
        waits = intervals.union(hs[mine & wait], he[mine & wait])
        for c in _WORK:
            m = mine & (cats == c)
            if m.any():
                piece = intervals.subtract(intervals.union(hs[m], he[m]), waits)
                cs.append(np.full(len(piece[0]), c, cats.dtype))
                ss.append(piece[0])
                es.append(piece[1])
        # the gaps this thread shows no row in: there it is neither working nor waiting
        touched = intervals.overlap(intervals.union(hs[mine], he[mine]), g_s, g_e) > 0
        free = intervals.union(np.concatenate([waits[0], g_s[~touched]]),
                               np.concatenate([waits[1], g_e[~touched]]))
        all_wait = intervals.intersect(all_wait, free)
    cs.append(np.full(len(all_wait[0]), _WAIT, cats.dtype))
    ss.append(all_wait[0])
    es.append(all_wait[1])
    s, e, c = np.concatenate(ss), np.concatenate(es), np.concatenate(cs)
    order = np.argsort(s, kind="stable")
    return c[order], s[order], e[order]


def _sync_names(cats: pd.Index, codes: np.ndarray) -> np.ndarray:
    """Base names (``_op_base``) of the given name codes, as an object array."""
    used = np.unique(codes)
    lut = np.array([_op_base(str(cats[c])) if c >= 0 else "" for c in used.tolist()],
                   dtype=object)
    return lut[np.searchsorted(used, codes)] if len(codes) else np.empty(0, object)


def _carve(gs, ge, cats, hs, he, out: np.ndarray | None = None) -> np.ndarray:
    """ns of each gap per category, by priority; the remainder is untraced.

    ``out``: a zeroed (gaps, categories) array to fill, else a new one.
    """
    if out is None:
        out = np.zeros((len(gs), len(CPU_CATEGORIES)), np.int64)
    keep = np.flatnonzero(ge > gs)
    remaining = (gs[keep], ge[keep], keep)
    if len(keep) > 1 and not (remaining[1][:-1] <= remaining[0][1:]).all():
        return _carve_overlapping(gs, ge, cats, hs, he, out)   # overlapping gaps
    # Disjoint sorted gaps: every piece carved from them keeps the index of its gap, so a
    # gap's share of a category is a sum over its pieces (no search per gap). Carved in
    # blocks of _BLOCK gaps, each with only the rows that reach its span, so the covers and
    # pieces (the peak of attribute at 1 M nsys kernels) stay bounded; a gap's pieces
    # depend only on the rows over it, so the sums are the same.
    n = len(keep)
    for lo in range(0, n, _BLOCK):
        block = tuple(x[lo:lo + _BLOCK] for x in remaining)
        if n <= _BLOCK:
            _carve_block(block, cats, hs, he, out)
        else:
            near = (he > block[0][0]) & (hs < block[1][-1])
            _carve_block(block, cats[near], hs[near], he[near], out)
    return out


_BLOCK = 1 << 16


def _carve_block(remaining, cats, hs, he, out: np.ndarray) -> None:
    """``_carve`` of disjoint sorted gaps (start, end, index in ``out``)."""
    for j, _ in enumerate(CPU_CATEGORIES[:-1]):
        m = cats == j
        if not m.any() or not len(remaining[0]):
            continue
        cover = intervals.union(hs[m], he[m])
        piece = intervals.intersect_sorted(remaining, cover)
        _sum_into(out[:, j], piece)
        remaining = intervals.subtract_sorted(remaining, piece)
    _sum_into(out[:, -1], remaining)


def _sum_into(col: np.ndarray, piece) -> None:
    """Add each piece's length to its gap's slot (pieces come in gap order)."""
    s, e, gap = piece
    if not len(s):
        return
    first = np.flatnonzero(np.r_[True, gap[1:] != gap[:-1]])
    col[gap[first]] += np.add.reduceat(e - s, first)


def _carve_overlapping(gs, ge, cats, hs, he, out: np.ndarray) -> np.ndarray:
    """``_carve`` for gaps that overlap one another: pieces of their union, measured per gap."""
    remaining = intervals.union(gs, ge)
    for j, _ in enumerate(CPU_CATEGORIES[:-1]):
        m = cats == j
        if not m.any() or not len(remaining[0]):
            continue
        cover = intervals.union(hs[m], he[m])
        piece = intervals.intersect_sorted(remaining, cover)[:2]
        out[:, j] = intervals.overlap(piece, gs, ge)
        remaining = intervals.subtract_sorted(remaining, piece)[:2]
    out[:, -1] = intervals.overlap(remaining, gs, ge)
    return out


def _drain(gs, ge, names, ss, se, vocab: dict) -> np.ndarray:
    """Per gap: the sync call that drained it, as 1 + its name's index in ``vocab`` (names
    are added in order of first use), or 0 when none did (the gap was starved)."""
    which = np.zeros(len(gs), np.int64)
    if not len(ss) or not len(gs):
        return which
    order = np.argsort(se, kind="stable")
    ss, se, names = ss[order], se[order], names[order]
    lo = np.searchsorted(se, gs - SKEW_NS, side="left")
    hi = np.searchsorted(se, np.minimum(gs + SYNC_TOLERANCE_NS, ge + SKEW_NS), side="right")
    cnt = np.maximum(hi - lo, 0)
    if not cnt.any():
        return which
    gap_i = np.repeat(np.arange(len(gs)), cnt)
    first = np.repeat(lo, cnt)
    within = np.arange(len(gap_i)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    cand = first + within
    ok = ss[cand] <= gs[gap_i] + SKEW_NS
    gap_i, cand = gap_i[ok], cand[ok]
    if not len(gap_i):
        return which
    rank = np.array([SYNC_NAME_RANK.get(n, 9) for n in names[cand]], np.int64)
    dist = np.abs(se[cand] - gs[gap_i])
    pick = np.lexsort((dist, rank, gap_i))
    gap_i, cand = gap_i[pick], cand[pick]
    firsts = np.r_[True, gap_i[1:] != gap_i[:-1]]
    which[gap_i[firsts]] = [1 + vocab.setdefault(n, len(vocab)) for n in names[cand[firsts]]]
    return which


def _outermost_of_name(name, thread, hs, he) -> np.ndarray:
    """Rows not inside an earlier row of the same name on the same thread: an op that calls
    itself (sglang decode's ``aten::copy_`` inside ``aten::copy_``, 463 ms each) is one op's
    time, not twice it ("926 ms" in a 474 ms window)."""
    out = np.ones(len(hs), bool)
    if len(hs) < 2:
        return out
    order = np.lexsort((-he, hs, name, thread))   # of two starting together, the longer holds
    n, t = name[order], thread[order]
    first = np.r_[True, (n[1:] != n[:-1]) | (t[1:] != t[:-1])]
    reach = pd.Series(he[order]).groupby(np.cumsum(first)).cummax().to_numpy(np.int64)
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    out[order[hs[order] < before]] = False
    return out


def _top_ops(kind, name, name_cats, cats, hs, he, gaps_iv, thread) -> pd.DataFrame:
    """Inclusive time each host op/call spends inside the gaps (``gaps_iv``: their union;
    python frames excluded), an op inside another of its name on its thread counted once
    with it (``thread``: each row's thread key)."""
    sel = np.flatnonzero((cats >= 0) & (kind != HOST_KINDS.index("python"))
                         & _outermost_of_name(name, thread, hs, he))
    if not len(sel):
        return pd.DataFrame({"name": [], "category": [], "ns": [], "count": []})
    parts, ovs = [], []
    # in slices: the overlap's temporaries are a few int64 arrays of the rows it is given
    for a in range(0, len(sel), _SLICE):
        r = sel[a:a + _SLICE]
        i, o = intervals.overlap_hits(gaps_iv, hs[r], he[r])
        parts.append(r[i])
        ovs.append(o)
    sel, ov = np.concatenate(parts), np.concatenate(ovs)
    ncat = len(CPU_CATEGORIES)
    # (name, category) key, shifted by ncat so a null name (code -1) stays >= 0
    key = name[sel].astype(np.int64)
    key += 1
    key *= ncat
    key += cats[sel]
    del sel
    size = (len(name_cats) + 1) * ncat
    if size <= _DENSE_KEYS:   # a dense table per key: no sort of the hits
        ns = np.zeros(size, np.int64)
        np.add.at(ns, key, ov)
        count = np.bincount(key, minlength=size)
        uniq = np.flatnonzero(count)
        ns, count = ns[uniq], count[uniq].astype(np.int64)
    else:
        uniq, inv = np.unique(key, return_inverse=True)
        ns = np.zeros(len(uniq), np.int64)
        np.add.at(ns, inv, ov)
        count = np.bincount(inv, minlength=len(uniq)).astype(np.int64)
    uniq -= ncat
    name_codes = uniq // ncat
    text = name_cats.take(np.maximum(name_codes, 0)).astype(str).to_numpy(object) \
        if len(name_cats) else ""
    return pd.DataFrame({
        "name": np.where(name_codes >= 0, text, ""),
        "category": np.array(CPU_CATEGORIES, object)[uniq % ncat],
        "ns": ns, "count": count})


def _merge_top(parts, top: int) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({"name": pd.Series([], dtype=object),
                             "category": pd.Series([], dtype=object),
                             "ns": pd.Series([], dtype=np.int64),
                             "count": pd.Series([], dtype=np.int64)})
    df = pd.concat(parts, ignore_index=True)
    # emit_nvtx ranges carry per-call suffixes ("aten::add, seq = 12, op_id = 7"): pool them
    df["name"] = df["name"].astype(str).str.replace(_NVTX_SUFFIX, "", regex=True)
    df = df.groupby(["name", "category"], as_index=False, sort=False).agg(
        ns=("ns", "sum"), count=("count", "sum"))
    df["ns"] = df["ns"].astype(np.int64)
    df["count"] = df["count"].astype(np.int64)
    return df.sort_values(["ns", "name"], ascending=[False, True], kind="stable").head(
        top).reset_index(drop=True)


def summarize(gaps: pd.DataFrame) -> dict:
    """Totals over a labelled gap table: by_cpu, by_drain, drain x cpu, sync ops."""
    cols = {c: gaps[f"cpu_{c}"].to_numpy(np.int64) for c in CPU_CATEGORIES}
    by_cpu = {c: int(v.sum()) for c, v in cols.items()}
    dur = gaps["duration"].to_numpy(np.int64)
    sync = is_sync_drained(gaps)
    by_drain = drain_times(gaps)
    cross = {}
    for d in DRAINS:
        m = (gaps["drain"] == d).to_numpy(bool)
        cross[d] = {c: int(v[m].sum()) for c, v in cols.items()}
    host = dur - queued_ns(gaps)   # a sync's share: the part of its gaps that was not queued
    ops = pd.DataFrame({"drain_op": gaps["drain_op"][sync], "duration": host[sync]}).groupby(
        "drain_op")["duration"].agg(["sum", "size"])
    by_sync_op = {str(k): {"ns": int(r["sum"]), "gaps": int(r["size"])} for k, r in ops.iterrows()}
    return {"by_cpu": by_cpu, "by_drain": by_drain, "drain_x_cpu": cross, "by_sync_op": by_sync_op,
            "host_late_queued_ns": host_late_queued_ns(gaps)}


def queued_ns(gaps: pd.DataFrame) -> np.ndarray:
    """Per gap, the ns the GPU sat with its closing op already queued (0 without the column)."""
    if "queued_ns" not in gaps:
        return np.zeros(len(gaps), np.int64)
    return gaps["queued_ns"].to_numpy(np.int64)


def drain_times(gaps: pd.DataFrame) -> dict:
    """Idle ns by drain label: the whole duration of the gaps labelled ``sync``, ``starved``
    and ``queued``. Sums to the idle time. A host-late gap (sync / starved) counts whole, its
    queued tail included (``host_late_queued_ns`` says how much of it that is): the label is
    why the queue ran empty, and the host had not launched the next op when it did."""
    dur = gaps["duration"].to_numpy(np.int64)
    sync = is_sync_drained(gaps)
    queued = (gaps["drain"] == "queued").to_numpy(bool) if "drain" in gaps else \
        np.zeros(len(gaps), bool)
    return {"sync": int(dur[sync].sum()), "starved": int(dur[~sync & ~queued].sum()),
            "queued": int(dur[queued].sum())}


def host_late_queued_ns(gaps: pd.DataFrame) -> int:
    """The queued tails of host-late gaps: after the closing op's launch returned, the GPU
    still waited this long with it queued (the verdict never charges it to the host)."""
    if "drain" not in gaps:
        return 0
    late = (gaps["drain"] != "queued").to_numpy(bool)
    return int(queued_ns(gaps)[late].sum())


def waited_by(gaps: pd.DataFrame) -> dict:
    """Queued ns per ``waited_on`` text, largest first."""
    q = queued_ns(gaps)
    if not q.any() or "waited_on" not in gaps:
        return {}
    by = pd.Series(q[q > 0]).groupby(gaps["waited_on"].to_numpy(object)[q > 0]).sum()
    by = by.sort_values(ascending=False, kind="stable")
    return {str(k): int(v) for k, v in by.items()}


def waited_summary(gaps: pd.DataFrame, by: dict | None = None) -> str:
    """What the queued time waited on, largest first: ``GPU-side 80%, cudaStreamWaitEvent 20%``
    (at most three, none under 1%); ``by``: ``waited_by(gaps)`` when the caller has it."""
    by = waited_by(gaps) if by is None else by
    total = sum(by.values())
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in list(by.items())[:3]
                     if v >= 0.01 * total)


def is_sync_drained(gaps: pd.DataFrame) -> np.ndarray:
    """The labelled gaps a sync drained (``drain == "sync"``), as a numpy mask: compared
    in the column's own storage, never as one Python string per row."""
    return (gaps["drain"] == "sync").to_numpy(bool)


def _corr_rows(ev: pd.DataFrame, rows: np.ndarray, want: np.ndarray, pid: np.ndarray,
               corr: np.ndarray) -> np.ndarray:
    """For each (pid, corr) pair, the position in ``rows`` of the first row of ``ev`` among
    ``rows[want]`` with that pid and correlation id; -1 when none (correlation ids are
    unique per process only)."""
    out = np.full(len(pid), -1, np.int64)
    cand = np.flatnonzero(want)
    if not len(cand) or not len(pid):
        return out
    r = rows[cand]
    c_corr = ev["correlation"].to_numpy()[r].astype(np.int64)
    c_pid = ev["pid"].to_numpy()[r].astype(np.int64)
    ok = c_corr >= 0
    cand, c_corr, c_pid = cand[ok], c_corr[ok], c_pid[ok]
    a, b = pair_keys(c_pid, c_corr, np.asarray(pid, np.int64), np.asarray(corr, np.int64))
    first = ~a.duplicated(keep="first")
    k = a[first].get_indexer(b)
    hit = (k >= 0) & (np.asarray(corr) >= 0)
    out[hit] = cand[first][k[hit]]
    return out


def _text_at(ev: pd.DataFrame, col: str, rows: np.ndarray) -> np.ndarray:
    """The strings of ``ev[col]`` at ``rows`` (object array, "" for nulls), without turning
    the whole column into Python strings."""
    codes, cats = _codes(ev[col])
    used, inv = np.unique(codes[rows], return_inverse=True)
    lut = np.array([str(cats[u]) if u >= 0 else "" for u in used.tolist()], dtype=object)
    return lut[inv.reshape(-1)] if len(used) else np.empty(0, object)


def _match_at(ev: pd.DataFrame, rows: np.ndarray, fn) -> np.ndarray:
    """``fn(name)`` (bool) of the names at ``rows``, once per distinct name."""
    codes, cats = _codes(ev["name"])
    c = codes[rows]
    return _name_lut(cats, c, fn, bool, False)[c] if len(c) else np.zeros(0, bool)


def _pageable_calls(ev: pd.DataFrame, rows: np.ndarray, kind: np.ndarray) -> tuple:
    """Of the host rows (``rows``, their HOST_KINDS index ``kind``), the runtime/driver
    calls whose GPU copy (same pid + correlation) moves to or from pageable host memory and
    that returned when that copy was done (within [copy end - SKEW_NS, copy end +
    SYNC_TOLERANCE_NS]), the copy having started before the call returned: (their positions in ``rows``, each one's ``"<call> (<dir>
    pageable)"``), one entry per position (the last copy's, when two copies share a call)."""
    out = (np.empty(0, np.int64), np.empty(0, object))
    if not len(rows) or "copy_kind" not in ev:
        return out
    mc = np.flatnonzero(kind_in(ev, ("memcpy",)))
    if not len(mc):
        return out
    # Kineto names the memory kinds; the nsys reader keeps them (srcKind/dstKind) in raw_name
    said = _match_at(ev, mc, lambda n: bool(PAGEABLE_RX.search(n)))
    if "raw_name" in ev:
        said |= lookup_at(ev["raw_name"], mc, lambda n: bool(PAGEABLE_RX.search(n)), False,
                          bool)   # once per distinct text, not per copy
    pg = mc[said]
    if not len(pg):
        return out
    at = _corr_rows(ev, rows, _is_api(kind), ev["pid"].to_numpy()[pg].astype(np.int64),
                    ev["correlation"].to_numpy()[pg].astype(np.int64))
    # behaviour: the call returned once its copy was done -- it waited for its stream to
    # run up to the copy and through it (a small pageable HtoD copy is only staged and
    # returns at once: not a sync). A copy that had not started when the call returned was
    # not waited for, whatever its end: kineto resnet50's 256 B HtoD copies start 3-4 us
    # after their call returns and end within SKEW_NS of it; a waited DtoH copy starts
    # 7-18 us before (HTA negative_queue rank0, h200/pageable.bad)
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    r = rows[np.maximum(at, 0)]
    ret = ts[r] + dur[r]
    done = ts[pg] + dur[pg]
    hit = (at >= 0) & (ret >= done - SKEW_NS) & (ret <= done + SYNC_TOLERANCE_NS) & \
        (ts[pg] < ret)
    direction = _text_at(ev, "copy_kind", pg)
    call = _text_at(ev, "name", rows[at[hit]])
    text = np.array([f"{_op_base(c)} ({d or 'copy'} pageable)"
                     for c, d in zip(call, direction[hit])], object)
    pos = at[hit]
    _, last = np.unique(pos[::-1], return_index=True)   # a later copy's label wins, as before
    keep = np.sort(len(pos) - 1 - last)
    return pos[keep], text[keep]


def _staging_calls(ev: pd.DataFrame, rows: np.ndarray, kind: np.ndarray) -> tuple:
    """The runtime/driver calls among the host ``rows`` (``kind``: their HOST_KINDS index)
    that stage a host copy: their copy (same pid + correlation) moves HtoD or DtoH, and its
    host memory is pageable (Kineto's name, the nsys reader's ``raw_name`` from
    srcKind/dstKind) with at least ``PAGEABLE_STAGED_MIN_BYTES``, or is not named pinned either and the copy moves at least
    ``STAGED_MIN_BYTES`` with the call returning no earlier than halfway through it (a
    pinned copy's call returns once queued; a staging one holds the host until the last
    chunk is staged). Returns (their positions in ``rows``, their copy's start, whether it
    is HtoD), one entry per call (its first copy's)."""
    out = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool))
    if not len(rows) or "copy_kind" not in ev:
        return out
    mc = np.flatnonzero(kind_in(ev, ("memcpy",)))
    direction = _text_at(ev, "copy_kind", mc) if len(mc) else np.empty(0, object)
    keep = np.isin(direction, STAGED_DIRECTIONS)
    mc, direction = mc[keep], direction[keep]
    if not len(mc):
        return out
    pageable = _match_at(ev, mc, lambda n: bool(PAGEABLE_RX.search(n)))
    pinned = _match_at(ev, mc, lambda n: bool(PINNED_RX.search(n)))
    if "raw_name" in ev:
        pageable |= lookup_at(ev["raw_name"], mc, lambda n: bool(PAGEABLE_RX.search(n)), False,
                              bool)
        pinned |= lookup_at(ev["raw_name"], mc, lambda n: bool(PINNED_RX.search(n)), False,
                            bool)
    at = _corr_rows(ev, rows, _is_api(kind), ev["pid"].to_numpy()[mc].astype(np.int64),
                    ev["correlation"].to_numpy()[mc].astype(np.int64))
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    r = rows[np.maximum(at, 0)]
    nbytes = ev["bytes"].to_numpy()[mc] if "bytes" in ev else np.zeros(len(mc))
    nbytes = np.nan_to_num(np.asarray(nbytes, float), nan=0.0)
    held = ts[r] + dur[r] >= ts[mc] + dur[mc] // 2
    unmarked = ~pageable & ~pinned & (nbytes >= STAGED_MIN_BYTES) & held
    pageable &= nbytes >= PAGEABLE_STAGED_MIN_BYTES
    hit = np.flatnonzero((at >= 0) & (pageable | unmarked))
    order = hit[np.argsort(ts[mc[hit]], kind="stable")]
    pos, first = np.unique(at[order], return_index=True)
    pick = order[first]
    return pos, ts[mc[pick]], direction[pick] == "HtoD"


def _launch_ends(ev: pd.DataFrame, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """End time of each GPU op's launch call (same pid + correlation, as in
    ``steps.gpu_ops``) and that call's row in ``ev``; -1 when the op has no linked call."""
    out, row = np.full(len(ops), -1, np.int64), np.full(len(ops), -1, np.int64)
    if not len(ops):
        return out, row
    rt = np.flatnonzero(kind_in(ev, ("runtime", "driver")))
    at = _corr_rows(ev, rt, np.ones(len(rt), bool), ops["pid"].to_numpy(np.int64),
                    ops["correlation"].to_numpy(np.int64))
    hit = at >= 0
    r = rt[at[hit]]
    out[hit] = ev["ts"].to_numpy(np.int64)[r] + ev["dur"].to_numpy(np.int64)[r]
    row[hit] = r
    return out, row


def queued(ev: pd.DataFrame, gaps: pd.DataFrame, ops: pd.DataFrame) -> tuple:
    """(queued_ns, waited_on) per gap.

    The closing op of a gap is the GPU op of its (pid, device) that starts at the gap's end
    (several: the one whose launch call returned last, so the host is blamed if any was
    late). With L the end of its launch call: L <= gap start + SKEW_NS -> the whole gap is
    queued; L > gap start + SKEW_NS and gap end - L > SKEW_NS -> [L, gap end) is (the usual
    few us between a launch's return and its kernel's start is within the clock-alignment
    noise); else (or no linked call, or no closing op: a window's trailing edge) nothing is.

    ``waited_on`` (queued gaps only): ``stream P: <op>`` when the closing op's stream waited
    on an event (a StreamWaitEvent call on its launch thread, or a stream-wait record on its
    stream, since the previous launch on that stream) and the op that ended at the gap's
    start ran on another stream P with the queued part no longer than EVENT_LATENCY_NS; the
    wait call's name when a wait was seen but its producer is not in the trace;
    ``inside a CUDA graph replay (<launch call>)`` when both ends of the gap are ops of one
    graph launch; ``GPU-side`` (front-end / launch latency) when the queued part is no
    longer than EVENT_LATENCY_NS; else ``nothing traced``: the GPU sat idle with work
    queued and no traced op explains it (another process or context on the GPU, an
    untraced stream, GPU work the profiler did not record).
    """
    n = len(gaps)
    qns = np.zeros(n, np.int64)
    waited = np.full(n, "", object)
    if not n or not len(ops) or "correlation" not in ops:
        return qns, waited
    lend, lrow = _launch_ends(ev, ops)
    o_ts, o_end = ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    o_pid, o_dev = ops["pid"].to_numpy(np.int64), ops["device"].to_numpy(np.int64)
    gs_all, ge_all = gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64)
    close = np.full(n, -1, np.int64)   # index into ops of each gap's closing op
    before = np.full(n, -1, np.int64)  # an op that ended at the gap's start
    for (pid, dev), idx in gaps.groupby(["pid", "device"], sort=False).indices.items():
        m = np.flatnonzero((o_pid == pid) & (o_dev == dev))
        if not len(m):
            continue
        # the op whose launch returned last -- an untraced launch counts as latest: the
        # host may have been late for it, the trace cannot tell it was not
        rank = np.where(lend[m] >= 0, lend[m], np.iinfo(np.int64).max)
        close[idx] = _at_instant(m, o_ts[m], rank, ge_all[idx])
        before[idx] = _at_instant(m, o_end[m], o_ts[m], gs_all[idx])
    has = close >= 0
    L = np.where(has, lend[np.maximum(close, 0)], -1)
    linked = has & (L >= 0)
    # queued only when the launch returned before the gap began, by more than the clock
    # alignment error: a launch that returned within SKEW_NS of the GPU going idle may have
    # been late (the launch-bound case: each kernel launched just in time)
    whole = linked & (L <= gs_all - SKEW_NS)
    part = linked & ~whole & (L > gs_all + SKEW_NS) & (ge_all - L > SKEW_NS)
    qns[whole] = (ge_all - gs_all)[whole]
    qns[part] = (ge_all - L)[part]
    q = np.flatnonzero(qns > 0)
    if len(q):
        waited[q] = _waited_on(ev, ops, close[q], before[q], qns[q], ge_all[q], lrow[close[q]])
    return qns, waited


def _at_instant(m: np.ndarray, t: np.ndarray, rank: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per instant in ``at``: the op of ``m`` with ``t == at`` and the largest ``rank``
    (-1 when none)."""
    o = np.lexsort((rank, t))
    ts = t[o]
    last = np.r_[ts[1:] != ts[:-1], True]
    ut, pick = ts[last], m[o[last]]
    k = np.minimum(np.searchsorted(ut, at), len(ut) - 1)
    return np.where(ut[k] == at, pick[k], -1)


def _waited_on(ev, ops, close, before, dur, ge, launch_row) -> np.ndarray:
    """``waited_on`` text of queued gaps (see ``queued``); ``dur``: their queued ns."""
    stream = ops["stream"].to_numpy(np.int64)
    corr = ops["correlation"].to_numpy(np.int64)
    l_ts = ops["launch_ts"].to_numpy(np.int64)
    prev = _prev_on_stream(ops)
    lo = np.where(prev[close] >= 0, l_ts[np.maximum(prev[close], 0)], np.iinfo(np.int64).min)
    # a wait call counts up to the closing op's own launch; a stream-wait record up to the gap's end
    wait = _wait_seen(ev, ops, close, lo, l_ts[close], ge)
    seen = wait != ""
    # filled in place: np.where over these object arrays made ~40 k str objects per call
    out = np.full(len(dur), NOT_TRACED, object)
    out[dur <= EVENT_LATENCY_NS] = GPU_SIDE
    # both ends of the gap in one graph replay (one launch call's correlation)
    lr = np.maximum(launch_row, 0)
    graph = (before >= 0) & (launch_row >= 0) & (corr[np.maximum(before, 0)] == corr[close]) & \
        _match_at(ev, lr, lambda n: bool(GRAPH_LAUNCH_RX.match(n)))
    out[graph] = [f"inside a CUDA graph replay ({_op_base(c)})"
                  for c in _text_at(ev, "name", lr[graph])]
    out[seen] = wait[seen]
    b = np.maximum(before, 0)
    cross = seen & (before >= 0) & (stream[b] != stream[close]) & \
        (dur <= EVENT_LATENCY_NS)
    cross = np.flatnonzero(cross)
    names = _text_at(ops, "name", b[cross])
    for i, nm in zip(cross.tolist(), names):
        out[i] = f"stream {int(stream[b[i]])}: {nm[:60]}"
    return out


def _prev_on_stream(ops: pd.DataFrame) -> np.ndarray:
    """Per op: the op before it on its (pid, device, stream) by start time; -1 for the first."""
    keys = [ops[c].to_numpy(np.int64) for c in ("ts", "stream", "device", "pid")]
    o = np.lexsort(keys)
    same = np.r_[False, np.all([(k[o][1:] == k[o][:-1]) for k in keys[1:]], axis=0)] \
        if len(o) > 1 else np.zeros(len(o), bool)
    out = np.full(len(o), -1, np.int64)
    out[o[same]] = o[np.flatnonzero(same) - 1]
    return out


def _wait_seen(ev, ops, close, lo, hi_call, hi_rec) -> np.ndarray:
    """Per closing op: the name of an event wait since ``lo`` -- a StreamWaitEvent call on
    its launch thread up to ``hi_call``, or a stream-wait record on its (pid, stream) up to
    ``hi_rec`` -- else ``""``."""
    out = np.full(len(close), "", object)
    host = kind_in(ev, ("runtime", "driver", "sync"))
    if not host.any():
        return out
    rows = np.flatnonzero(host)
    is_call = _match_at(ev, rows, lambda n: bool(WAIT_API_RX.match(n)))
    is_rec = kind_in(ev, ("sync",))[rows] & _match_at(ev, rows,
                                                       lambda n: bool(WAIT_RECORD_RX.search(n)))
    keep = is_call | is_rec
    if not keep.any():
        return out
    rows, is_call = rows[keep], is_call[keep]
    names = _text_at(ev, "name", rows)
    ts = ev["ts"].to_numpy(np.int64)[rows]
    # a call belongs to its thread, a record to its stream
    k1 = ev["pid"].to_numpy(np.int64)[rows]
    k2 = np.where(is_call, ev["tid"].to_numpy(np.int64)[rows], -2 - ev["stream"].to_numpy(np.int64)[rows])
    want_pid = np.r_[ops["launch_pid"].to_numpy(np.int64)[close], ops["pid"].to_numpy(np.int64)[close]]
    want_2 = np.r_[ops["launch_tid"].to_numpy(np.int64)[close],
                   -2 - ops["stream"].to_numpy(np.int64)[close]]
    lo2, hi2 = np.r_[lo, lo], np.r_[hi_call, hi_rec]
    found = np.full(len(want_pid), "", object)
    base: dict[str, str] = {}   # _op_base per distinct name
    for a, b in set(zip(k1.tolist(), k2.tolist())):
        mine = (k1 == a) & (k2 == b)
        o = np.argsort(ts[mine], kind="stable")
        t, nm = ts[mine][o], names[mine][o]
        g = np.flatnonzero((want_pid == a) & (want_2 == b))
        if not len(g):
            continue
        j = np.searchsorted(t, hi2[g], side="right") - 1   # the last wait before hi
        ok = (j >= 0) & (t[np.maximum(j, 0)] >= lo2[g])
        found[g[ok]] = [_memo(base, _op_base, str(x)) for x in nm[j[ok]]]
    n = len(close)
    out[:] = found[n:]
    call = found[:n] != ""
    out[call] = found[:n][call]
    return out


# --- the sync's share of each gap (read by the verdict's scores and the host culprit) ----

# A starved gap up to this long is launch overhead between back-to-back kernels; a longer
# one is host work (verdict.scores.cause_parts splits the host's time on it).
SHORT_GAP_NS = 100_000


def _column(gaps: pd.DataFrame, name: str) -> np.ndarray:
    return gaps[name].to_numpy(np.int64) if name in gaps else np.zeros(len(gaps), np.int64)


def sync_share(gaps: pd.DataFrame, blocked: dict | None = None) -> np.ndarray:
    """Per gap, the share of it that a blocking sync explains (0 for gaps no sync drained).

    That share is min(1, GPU busy time since the previous sync-drained gap on the same
    device / the gap): removing the sync lets the host's later work overlap the GPU work
    queued before it, and no more.

    ``blocked`` (``attribute``'s ``sync_blocked``: per (pid, device) the time its launch
    threads sat inside sync calls) caps the total: removing the syncs gives the host back the
    time it was blocked and no more -- the step cannot get shorter than the host's own work.
    Each device's shares are scaled down so that its sync-drained time plus the sync calls'
    own time in starved gaps stays within its blocked time. A host slower than its GPU between
    syncs needs the cap (real H200 capture ``h200/pageable.bad``: a pageable 4-byte copy
    blocks 0.45 ms a step, then 2 ms of Python; the busy-time share gave the sync 2.1 ms a
    step, pinning the copy saved 0.42).
    """
    n = len(gaps)
    f = np.zeros(n)
    sync = is_sync_drained(gaps)
    if not sync.any():
        return f
    order = np.lexsort((gaps["start"].to_numpy(), gaps["device"].to_numpy(),
                        gaps["pid"].to_numpy()))
    st = gaps["start"].to_numpy(np.int64)[order]
    en = gaps["end"].to_numpy(np.int64)[order]
    grp = gaps["pid"].to_numpy()[order].astype(np.int64) * 1_000_003 \
        + gaps["device"].to_numpy()[order].astype(np.int64)
    sy = sync[order]
    d = np.maximum(en - st - queued_ns(gaps)[order], 1)   # the host's part of each gap
    first = np.r_[True, grp[1:] != grp[:-1]]
    between = np.where(first, 0, np.maximum(0, st - np.r_[en[:1], en[:-1]]))
    cum = np.cumsum(between)                 # GPU busy between neighbouring gaps, running
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    idx = np.flatnonzero(sy)
    same = np.r_[False, grp[idx[1:]] == grp[idx[:-1]]]
    ref = np.where(same, np.r_[0, idx[:-1]], group_start[idx])
    base = cum[idx] - cum[ref]
    # one sync episode can drain the queue twice (the copy, then the wait): what the
    # previous sync gap left of its budget carries over, once
    left = np.where(same, np.maximum(0, np.r_[0, base[:-1] - d[idx[:-1]]]), 0)
    budget = np.zeros(n, np.int64)
    budget[idx] = base + left
    out = np.zeros(n)
    out[order] = np.where(sy, np.minimum(1.0, budget / d), 0.0)
    if blocked is not None:
        _cap_by_blocked(gaps, out, blocked)
    return out


def _cap_by_blocked(gaps: pd.DataFrame, f: np.ndarray, blocked: dict) -> None:
    """Scale each (pid, device)'s shares ``f`` (in place) so that the sync time they give
    (host part of each drained gap x share, plus sync calls inside starved gaps) is at most
    the time the device's launch threads were blocked in sync calls."""
    host = np.maximum(gaps["duration"].to_numpy(np.int64) - queued_ns(gaps), 0)
    in_calls = _column(gaps, "cpu_sync") - _column(gaps, "qcpu_sync")
    drained = is_sync_drained(gaps)
    for (pid, dev), idx in gaps.groupby(["pid", "device"], sort=False).indices.items():
        cap = int(blocked.get((int(pid), int(dev)), 0)) - int(in_calls[idx][~drained[idx]].sum())
        given = float((host[idx] * f[idx]).sum())
        if given > max(cap, 0):
            f[idx] *= max(cap, 0) / given
