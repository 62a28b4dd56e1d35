"""Independent passes on forked worker processes, while the caller runs its own.

The passes are pure functions of the event frame, so a forked child computes
exactly what this process would. Big inputs (the event frames, the trace) are
``shared``: set before the fork, the children read them through it
(copy-on-write, nothing pickled on the way in); a job names them with
``ref(name)``. Other arguments are pickled, and only the result (a small frame
or dict) comes back. Without ``fork``, with one worker, or when the pool
cannot start or a child dies, a job runs here, when its result is asked for.

A caller that asks for a job a worker is still running does not sit idle: it runs the
jobs no worker has taken yet itself -- one submitted ``here`` first, then the earliest --
until the one it waits for is done (not when it asks from inside another pass,
``inside``: that pass's temporaries are still live). Before, at 2 workers on a 247 MB
trace, ~1.3-1.7 of the passes' ~2.6 CPU-s ran in one process while the other waited
(``python -m benchmarks serial``, round 9).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import pickle
from typing import Any, Callable

from ..table import release_heap_grown

_SHARED: dict[str, Any] = {}   # set before the fork: the children inherit it
_TASK: list = []   # (fn, items) of the running ``map_forked``: its children inherit it


class Ref:
    """An argument the child takes from the shared objects instead of a pickle."""

    def __init__(self, name: str):
        self.name = name


def _resolve(args: tuple, kw: dict, shared: dict) -> tuple[tuple, dict]:
    def get(v):
        return shared[v.name] if isinstance(v, Ref) else v
    return tuple(get(a) for a in args), {k: get(v) for k, v in kw.items()}


def _run(blob: bytes) -> Any:
    fn, args, kw = pickle.loads(blob)
    args, kw = _resolve(args, kw, _SHARED)
    return fn(*args, **kw)


class SidePasses:
    """Jobs on up to ``workers - 1`` (at most ``max_jobs``) forked processes; ``get(key)``
    waits for one. Three are enough to hide the side passes behind the attribution, and
    every fork of the big parent costs (16-core box, 713 MB trace: analyze 6.5 s with 3
    side workers, 6.9 s with 7, 7.4 s with 8)."""

    def __init__(self, workers: int, shared: dict[str, Any], max_jobs: int = 3):
        self.shared = shared
        self.workers = workers
        self.jobs: dict[str, tuple[Callable, tuple, dict]] = {}
        self.futs: dict[str, cf.Future] = {}
        self.ran: dict[str, tuple[bool, Any]] = {}   # jobs run here while waiting: (ok, value)
        self.here: list[str] = []   # jobs better run here (``submit``), not yet asked for
        self.pool = None
        n = min(workers - 1, max_jobs)
        if n < 1 or "fork" not in mp.get_all_start_methods():
            return
        _SHARED.clear()
        _SHARED.update(shared)
        try:
            self.pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"))
        except Exception:  # noqa: BLE001 - no pool (e.g. inside a daemonic worker): run here
            self.pool = None

    @staticmethod
    def ref(name: str) -> Ref:
        return Ref(name)

    def submit(self, key: str, fn: Callable, *args, here: bool = False, **kw) -> None:
        """``here``: a job better run in this process (its result is big: the pickle back
        costs), the first it takes while waiting for another; a worker that reaches it in
        the queue first (this process is the busier) still runs it."""
        self.jobs[key] = (fn, args, kw)
        if here:
            self.here.append(key)
        if self.pool is None:
            return
        try:  # pickled here: a job that cannot be (a lambda) runs in this process instead
            blob = pickle.dumps((fn, args, kw), pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - whatever pickling raises
            return
        try:
            self.futs[key] = self.pool.submit(_run, blob)
        except Exception:  # noqa: BLE001 - the pool broke or cannot fork: run here
            self.close()

    def runs_here(self, key: str) -> bool:
        """True when the job will run (or ran) in this process when asked for: no worker has
        it, or this process ran it while waiting for another."""
        return key in self.jobs and (key in self.ran or key not in self.futs)

    def get(self, key: str, release: bool = True, inside: bool = False) -> Any:
        """The job's result: from its worker, or computed here when no worker started it
        yet (this process would only wait); ``release``: hand its freed pages back after
        (False for a pass of small temporaries, asked for in the middle of another);
        ``inside``: asked from inside another pass, whose temporaries are live: wait for a
        running job rather than run others meanwhile."""
        fn, args, kw = self.jobs.pop(key)
        if key in self.here:
            self.here.remove(key)
        if key in self.ran:   # run here while waiting for another
            ok, value = self.ran.pop(key)
            if ok:
                return value
            raise value
        fut = self.futs.pop(key, None)
        if fut is not None and not fut.cancel():   # a worker has it (a queued one runs here)
            while not inside and not fut.done() and self._run_one_queued():
                pass
            try:
                return fut.result()
            except cf.process.BrokenProcessPool:  # a child was killed (OOM): do it here
                pass
        return self._run_here(fn, args, kw, release)

    def _run_here(self, fn: Callable, args: tuple, kw: dict, release: bool) -> Any:
        args, kw = _resolve(args, kw, self.shared)
        out = fn(*args, **kw)
        # its temporaries are freed: hand their pages back before the next pass climbs on them
        # (run here, one side pass after another kept ~110 MB of freed heap at 1 GB)
        if release:
            release_heap_grown()
        return out

    def _run_one_queued(self) -> bool:
        """Run here a job no worker has taken (its result kept for its ``get``): one marked
        ``here`` first, then the earliest submitted (the next a worker would take: the last
        ones keep a worker busy later); False when there is none."""
        for key in self.here + list(self.futs):
            if key in self.ran or key not in self.jobs:
                continue
            fut = self.futs.get(key)
            if fut is None or fut.cancel():
                self.futs.pop(key, None)
                return self._run_ahead(key)
        return False

    def _run_ahead(self, key: str) -> bool:
        fn, args, kw = self.jobs[key]
        try:
            self.ran[key] = (True, self._run_here(fn, args, kw, True))
        except Exception as e:  # noqa: BLE001 - raised again where the job is asked for
            self.ran[key] = (False, e)
        return True

    def close(self, abandon: bool = False) -> None:
        """Shut the pool down; ``abandon``: stop its workers first (the caller failed
        and will not ask for the results)."""
        for fut in self.futs.values():
            fut.cancel()
        self.futs = {}
        self.ran = {}
        self.here = []
        if self.pool is not None:
            if abandon:
                for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
                    proc.terminate()
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        _SHARED.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(abandon=exc_type is not None)


def _item(i: int) -> Any:
    fn, items = _TASK[0]
    return fn(items[i])


def map_forked(fn: Callable, items, workers: int, first: int = 1) -> list:
    """``[fn(x) for x in items]`` with the items after the first ``first`` shared with up to
    ``workers - 1`` children forked now, so they inherit ``fn``'s data as it stands (a graph
    built a moment ago: nothing pickled on the way in, only each result on the way back).
    ``fn`` must be pure: any process computes the same result. The first items run here
    before the fork (they fill the caches the rest share); then this process takes the items
    no child has started yet, from the end, while the children take them from the front.
    With one worker, without ``fork``, or when a child dies, the items run here."""
    items = list(items)
    n = min(workers - 1, len(items) - first - 1)
    if n < 1 or "fork" not in mp.get_all_start_methods():
        return [fn(x) for x in items]
    out = [fn(x) for x in items[:first]]
    _TASK[:] = [(fn, items)]
    try:
        pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"))
    except Exception:  # noqa: BLE001 - no pool (e.g. inside a daemonic worker): run here
        _TASK.clear()
        return out + [fn(x) for x in items[first:]]
    done: dict[int, Any] = {}
    try:
        futs = {}
        for i in range(first, len(items)):
            try:
                futs[i] = pool.submit(_item, i)
            except Exception:  # noqa: BLE001 - the pool broke or cannot fork: run here
                break
        for i in reversed(range(first, len(items))):
            if i not in futs or futs[i].cancel():   # no child took it: this process does
                done[i] = fn(items[i])
        for i, fut in futs.items():
            if i not in done:
                try:
                    done[i] = fut.result()
                except cf.process.BrokenProcessPool:   # a child was killed (OOM): do it here
                    done[i] = fn(items[i])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _TASK.clear()
    return out + [done[i] for i in range(first, len(items))]
