"""DataLoader workers started again at each epoch (``persistent_workers=False``), from the
training thread's own events -- no stack frames needed.

A ``for batch in loader`` loop calls the iterator's ``__next__`` (Kineto's
``enumerate(DataLoader)#...__next__`` range) once per batch, and once more at the epoch's end,
where it raises ``StopIteration``. A new iterator then draws its base seed
(``torch.empty((), dtype=torch.int64).random_().item()`` in ``_BaseDataLoaderIter.__init__``:
``aten::empty``, ``aten::random_``, ``aten::item``) before the next epoch's first call. So an
epoch boundary is two DataLoader calls on one thread with nothing between them but those
seed ops -- and a new iterator is proof that the loader was not persistent: with
``persistent_workers=True`` the old iterator is reset and no seed is drawn (nothing runs
between the two calls). With worker processes, the ending call shuts the workers down
(``_shutdown_workers``: joins them) and the new iterator starts new ones; both sit on the
training thread. The restart is that call plus the time up to the next epoch's first call,
plus, where the stack shows the new workers started (``multiprocessing/process.py: start``
frames in the restart, one a worker), the part of that first call's wait that is their
start-up: the wait less one batch's load, read as the time from that call's end to the
call w calls later (worker 0's second batch, w workers), the median over the restarts.
Persistent workers wait for the first batch's load too, not for the start-up (pairs/persist:
25.6 ms first waits, 9.4 ms loads, 11.3 ms first waits after the change).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import namerx
from .attribution import thread_key
from .common import rows_of
from .factkit import Steps, item, rows_named

ANY_CALL_RX = namerx.compile(r"^enumerate\(DataLoader\)#")
CALL_RX = namerx.compile(r"^enumerate\(DataLoader\)#_MultiProcessingDataLoaderIter\.__next__")
# the new iterator's base seed (torch/utils/data/dataloader.py, _BaseDataLoaderIter.__init__)
SEED_OPS = frozenset({"aten::empty", "aten::random_", "aten::item", "aten::_local_scalar_dense"})
MAX_SEED_OPS = 16   # the seed draw's ops (a few, nested); more between two calls: not a seed
WORKER_START_RX = namerx.compile(r"multiprocessing/process\.py\(\d+\): start$")


def epoch_ends(ev: pd.DataFrame, rx=ANY_CALL_RX) -> list[tuple[int, int, np.ndarray]]:
    """(the epoch's last DataLoader call's row, the next epoch's first call's row, the rows of
    the new iterator's seed draw between them) on each thread, for the calls ``rx`` names
    (module doc): two calls with nothing between them but the seed ops."""
    calls = rows_named(ev, rx, ("annotation", "cpu_op"))
    if len(calls) < 2:
        return []
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    ops = rows_of(ev, ("cpu_op",))
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    call_thread = thread_key(pid[calls], tid[calls])   # only the rows read: not every row's
    op_thread = thread_key(pid[ops], tid[ops])
    out = []
    for t in np.unique(call_thread).tolist():
        mine = calls[call_thread == t]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        on = ops[op_thread == t]
        on = on[np.argsort(ts[on], kind="stable")]
        at = ts[on]
        for a, b in zip(mine[:-1].tolist(), mine[1:].tolist()):
            lo, hi = np.searchsorted(at, end[a], "left"), np.searchsorted(at, ts[b], "left")
            # nothing between: the persistent iterator's reset; many ops: a batch's work
            if not lo < hi <= lo + MAX_SEED_OPS:
                continue
            names = set(ev["name"].take(on[lo:hi]).astype(str).tolist())
            if names <= SEED_OPS and "aten::random_" in names:
                out.append((a, b, on[lo:hi]))
    return out


def worker_restarts(ev: pd.DataFrame, steps: Steps | None = None) -> dict | None:
    """{"restarts", "restart_ns", "shutdown_ns", "spans": [[start_ns, end_ns]], "steps": the
    step each began in, "period": steps between them (None: one restart, or uneven),
    "evidence"} for the multi-process loader's epoch boundaries that made a new iterator
    (module doc); None where none is seen."""
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    spans, pids, shutdown, found = [], [], 0, []
    ends = epoch_ends(ev, CALL_RX)
    for a, b, _ in ends:
        spans.append([int(ts[a]), int(ts[b])])
        pids.append(ev["pid"].iat[a])
        shutdown += int(end[a] - ts[a])
        found.append(item(ev["name"].iat[a], ts[a],
                          detail=f"the epoch's last call took {(end[a] - ts[a]) / 1e6:.3g} ms"
                          f", then a new iterator ({(ts[b] - end[a]) / 1e6:.3g} ms to the "
                          "next epoch's first call)"))
    if not spans:
        return None
    startups = _startups(ev, ends)
    order = np.argsort([a for a, _ in spans], kind="stable")
    spans = [spans[i] for i in order]
    steps = steps if steps is not None else Steps(ev)
    number = steps.of(np.asarray(pids)[order], np.array([a for a, _ in spans], np.int64)) \
        .tolist() if len(steps) else []
    return {"restarts": len(spans), "restart_ns": int(sum(b - a for a, b in spans)),
            "shutdown_ns": shutdown, "spans": spans, "steps": number,
            "period": _period(number), "startup_spans": startups,
            "startup_ns": int(sum(b - a for a, b in startups)), "evidence": found[:2]}


def _startups(ev: pd.DataFrame, ends: list) -> list[list[int]]:
    """[start_ns, end_ns] of the new workers' start-up inside each restart's next first call
    (module doc); [] where the stack shows no worker started, or no epoch runs w calls on."""
    starts = rows_named(ev, WORKER_START_RX, ("python",))
    if not len(starts) or not ends:
        return []
    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    at = np.sort(ts[starts])
    calls = rows_named(ev, CALL_RX, ("annotation", "cpu_op"))
    key = thread_key(ev["pid"].to_numpy()[calls], ev["tid"].to_numpy()[calls])
    waits, loads = [], []
    for a, b, _ in ends:
        w = int(np.searchsorted(at, ts[b]) - np.searchsorted(at, ts[a]))
        if w < 1:
            continue
        mine = calls[key == key[np.flatnonzero(calls == b)[0]]]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        k = int(np.flatnonzero(mine == b)[0])
        if k + w < len(mine):   # worker 0's second batch: one batch's load after the first
            loads.append(int(end[mine[k + w]] - end[b]))
        waits.append((int(ts[b]), int(end[b] - ts[b])))
    if not loads:
        return []
    load = int(np.median(loads))
    return [[t, t + wait - load] for t, wait in waits if wait > load]


def _period(steps: list[int]) -> int | None:
    """The steps between restarts (an epoch's length) when they are evenly spaced."""
    if len(steps) < 2 or min(steps) < 0:
        return None
    d = set(np.diff(steps).tolist())
    return d.pop() if len(d) == 1 and min(d) > 0 else None
