"""Batch analysis of a directory of traces: one row per trace, per-trace tables, and the
cross-rank summary of every multi-rank job found.

``analyze_file`` is the unit of work: it never raises and returns plain picklable data
(a summary row, per-trace DataFrames, the small per-rank input of cross-rank analysis),
so it runs unchanged in-process, in a local process pool or on a Dask cluster. Dask is
imported only when a scheduler address is given.

Inputs may be local paths or fsspec URLs (``s3://bucket/run/``); fsspec is imported
only for URLs. Which files are traces: ``discover.py``; what is written: ``output.py``.

The batch parent of local workers stays small while they run: this module imports no
pandas, numpy or pyarrow at its top, and each worker leaves its result in a file of
its own and sends back only its summary row (``_child``); the parent reads the files
back once every worker is done (``run_local``). So the job's peak is its workers', not
theirs plus the parent's imports and results (docs/performance.md, "Jobs, round 3").
"""
from __future__ import annotations

import ast
import os
import pickle
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import TraceError, display_path, out_of_memory
from .discover import discover, is_url
from .output import SUMMARY_COLUMNS, TABLES, PartialSummary, check_out_dir, write

def _size(path: str) -> int:
    try:
        return os.path.getsize(path) if not is_url(path) else 0
    except OSError:
        return 0


# ----------------------------------------------------------------------------- the worker

def analyze_file(path: str, step_pattern: str | None = None) -> dict[str, Any]:
    """Analyse one file. Never raises: failures become the row's ``error``.

    Returns ``{"row": dict, "tables": {name: DataFrame}, "rank_input": RankInput|None}``.
    An nsys export of several GPU processes (``nsys profile torchrun``) is analysed per
    process, as ``analyze`` and ``traceread.job`` do: the first process's result, with
    the others' under ``"more"`` (one summary row and one job rank each, every rank on
    its own steps -- the merged export's window gave the job other steps than analyze's).
    """
    t0 = time.perf_counter()
    row = _row(display_path(path))
    try:
        with _local_copy(path) as local:
            from ..readers import read

            trace = read(local)
            trace.meta.path = row["file"]
        from ..readers.nsys_split import split_processes

        parts = split_processes(trace)
    except Exception as e:  # noqa: BLE001 - one bad file must not stop the batch
        row["error"] = _error_text(e, path)
        return _result(row, {}, None, None, None, path, t0)
    if not parts:
        return _analyze_trace(trace, row, path, step_pattern, t0)
    del trace   # one part alive at a time, as analyze splits it
    # the read's time is the first process's
    done = [_analyze_trace(parts.pop(0), _row(""), path, step_pattern,
                           t0 if i == 0 else time.perf_counter()) for i in range(len(parts))]
    return dict(done[0], more=done[1:])


def _row(file: str) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in SUMMARY_COLUMNS}
    # the row names the file as text any output takes (a name's non-UTF-8 bytes as \xNN);
    # the result keeps its bytes (``file_bytes``) for whoever must open it again
    row.update(file=file, rank=-1, world_size=-1)
    return row


def _error_text(e: BaseException, path: str) -> str:
    if isinstance(e, TraceError):
        return e.reason
    if isinstance(e, MemoryError):
        return out_of_memory(path)
    return f"internal error: {type(e).__name__}: {' '.join(str(e).split())}"


def _result(row: dict, tables: dict, rank_input, member, verdict, path: str, t0: float) -> dict:
    row["seconds"] = round(time.perf_counter() - t0, 3)
    ok = row["error"] is None
    return {"row": row, "tables": tables if ok else {}, "file_bytes": path_bytes(path),
            "rank_input": rank_input if ok else None, "member": member if ok else None,
            "verdict": verdict if ok else None}


def _analyze_trace(trace, row: dict, path: str, step_pattern: str | None, t0: float) -> dict:
    """One trace's (or one process's) result: ``analyze_file``'s shape."""
    import pandas as pd

    from .figures import figures_table

    row["file"] = row["file"] or str(trace.meta.path)
    tables: dict[str, pd.DataFrame] = {}
    rank_input = verdict = member = None
    try:
        row.update(format=trace.meta.format, rank=int(trace.meta.rank),
                   world_size=int(trace.meta.world_size), events=len(trace))
        cut = trace.meta.extra.get("truncated")  # a file cut short: analysed up to the cut
        if cut:
            row["truncated_at_byte"] = int(cut["truncated_at_byte"])
        from ..analysis import analyze

        a = analyze(trace, step_pattern=step_pattern)
        row.update(summary_fields(a))
        verdict = a.verdict  # the job may adjust it (multirank.adjust_rank_verdicts)
        from . import multirank
        from ..passes.nccl import collective_instances

        coll = collective_instances(trace.events)
        win = multirank.analysis_window(a)
        rank_input = multirank.rank_input(trace, collectives=coll, window=win,
                                          program=a.steps)   # the analysis' program steps
        # what the job model keeps of it (multirank.prepare): input, window, layout
        member = {"path": str(trace.meta.path), "input": rank_input, "split": [],
                  "window": win, "parallelism": a.parallelism}
        if row["rank"] < 0:
            row["rank"] = rank_input.rank
        if not row.get("comm_ms") and len(rank_input.collectives):
            # no communication kernel (gloo): the time in its collectives' ranges, as the
            # job's ranks table counts it -- gloo ddp2 read comm_ms 0.0 beside 202 ms there
            from ..passes import intervals

            c = rank_input.collectives
            ts = c["ts"].to_numpy("int64")
            row["comm_ms"] = intervals.total(intervals.union(ts, ts + c["dur"].to_numpy("int64"))) / 1e6
        for name in TABLES:
            df = coll if name == "collectives" else (
                figures_table(a) if name == "figures" else getattr(a, name, None))
            if isinstance(df, pd.DataFrame):
                tables[name] = df
    except Exception as e:  # noqa: BLE001 - one bad file must not stop the batch
        row["error"] = _error_text(e, path)
    return _result(row, tables, rank_input, member, verdict, path, t0)


def flat(results: list[dict]) -> list[dict]:
    """Each file's results with an nsys export's processes (``"more"``) in line after it."""
    out = []
    for r in results:
        more = r.get("more") or []
        out.append({k: v for k, v in r.items() if k != "more"} if more else r)
        out += more
    return out


class _local_copy:
    """Context manager yielding a local path for a local path or an fsspec URL."""

    def __init__(self, path: str):
        self.path = str(path)
        self.tmp: str | None = None

    def __enter__(self) -> str:
        if not is_url(self.path):
            return self.path
        import fsspec

        suffix = "".join(Path(self.path.split("?")[0]).suffixes[-2:])
        fd, self.tmp = tempfile.mkstemp(prefix="traceread-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as out, fsspec.open(self.path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
        except FileNotFoundError:
            raise TraceError(self.path, "no such file") from None
        except OSError as e:
            raise TraceError(self.path, f"cannot read: {e}") from None
        return self.tmp

    def __exit__(self, *exc) -> None:
        if self.tmp:
            os.unlink(self.tmp)


def summary_fields(a) -> dict[str, Any]:
    """The summary-row fields of one ``Analysis``."""
    ev = a.verdict.get("evidence", {}) if isinstance(a.verdict, dict) else {}
    by_drain = {k: v for k, v in (a.attribution.get("by_drain") or {}).items() if v}
    by_cpu = {k: v for k, v in (a.attribution.get("by_cpu") or {}).items() if v}
    idle = ev.get("idle_ns") or 0
    top_drain = max(by_drain.items(), key=lambda kv: kv[1]) if by_drain else (None, 0)
    top_cpu = max(by_cpu.items(), key=lambda kv: kv[1]) if by_cpu else (None, 0)
    stats = a.step_stats or {}
    from ..passes.steps import program_step_of

    # the program step (passes/steps.program_columns), as analyze, diff and the job report it;
    # the host spans' mean only where no program step is known
    prog = program_step_of(a) if a.steps is not None else None
    mean = prog["mean_ns"] if prog else stats.get("mean_ns")
    comm = int(a.nccl["comm_ns"].sum()) if len(a.nccl) and "comm_ns" in a.nccl else 0
    return {
        "steps": int(stats.get("count", 0)),
        "step_mean_ms": mean / 1e6 if mean is not None else None,
        "idle_pct": ev.get("idle_pct"),
        "top_drain": top_drain[0],
        "top_drain_pct": round(100.0 * top_drain[1] / idle, 2) if idle and top_drain[0] else None,
        "top_cpu": top_cpu[0],
        "top_cpu_pct": round(100.0 * top_cpu[1] / idle, 2) if idle and top_cpu[0] else None,
        "comm_ms": comm / 1e6,
        "exposed_comm_pct": ev.get("exposed_comm_pct"),
        "recompiles": int((a.compile or {}).get("recompiles", 0) or 0),
        "verdict": a.verdict.get("bound") if isinstance(a.verdict, dict) else None,
    }


# ----------------------------------------------------------------------------- running

ProgressFn = Callable[[dict], None]


# Per-file limits of a local batch worker: the time scales with the input size.
TIME_BASE_S = 300
TIME_PER_MB_S = 3
MEMORY_MIN = 4 << 30        # a worker may always use this much
MEMORY_PER_INPUT = 40       # or this multiple of the file's (uncompressed) size if larger
_POLL_S = 0.5


def time_limit(path: str) -> float:
    """Seconds one file may take in a local worker: 300 s + 3 s per MB."""
    return TIME_BASE_S + TIME_PER_MB_S * _raw_size(path) / 2**20


def memory_limit(path: str) -> int:
    """Bytes of RSS one file's worker may reach: max(4 GiB, 40x its size), within RAM."""
    limit = max(MEMORY_MIN, MEMORY_PER_INPUT * _raw_size(path))
    total = _total_memory()
    return min(limit, int(total * 0.9)) if total else limit


def _raw_size(path: str) -> int:
    try:
        from ..readers.detect import estimated_raw_size   # no pandas in the batch parent

        return estimated_raw_size(path) if not is_url(path) else 0
    except (OSError, TraceError):
        return _size(path)


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _rss(pid: int) -> int:
    """Resident bytes of a process (Linux /proc); 0 when unknown."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_local(paths: list[str], jobs: int = 1, step_pattern: str | None = None,
              on_result: ProgressFn | None = None) -> list[dict]:
    """Run ``analyze_file`` over ``paths``, each file in its own worker process.

    Results come back in the order of ``paths``; the biggest files start first.
    A worker that dies (killed, out of memory), runs past ``time_limit`` or
    grows past ``memory_limit`` costs only its own file an error row: the
    other files' results are never lost.

    ``on_result`` sees each file as it finishes: its ``row`` (and ``file_bytes``)
    always; from worker processes not yet its tables and rank input, which stay in
    the worker's result file until every worker is done (the returned results have
    them), so this process holds no DataFrame while the workers run.
    """
    results: dict[int, dict] = {}
    order = sorted(range(len(paths)), key=lambda i: -_size(paths[i]))
    where = unguarded_main_call()
    if where:
        import warnings

        warnings.warn(f"traceread: analyze_dir / batch called at the top level of {where} without "
                      "an `if __name__ == \"__main__\":` guard; each worker process would run the "
                      "script again and fail, so the files are analysed in this process, one at a "
                      "time (no per-file time or memory limit). Put the call under the guard for "
                      "parallel, isolated workers.", RuntimeWarning, stacklevel=2)
        for i in order:
            results[i] = kept(analyze_file(paths[i], step_pattern))
            if on_result:
                on_result(results[i])
        return [results[i] for i in range(len(paths))]
    import multiprocessing as mp

    # forkserver: no fork of a threaded parent (progress bar, notebooks); the preload
    # makes each worker start with pandas/pyarrow/traceread already imported.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    spool = _spool_folder()
    try:
        pool = _Workers(ctx, max(1, jobs), step_pattern, spool)
        for i, res in pool.run([(i, paths[i]) for i in order]):
            results[i] = res if _SPOOL in res else kept(res)
            if on_result:
                on_result(res)
        # every worker is done: now the results' DataFrames may come in (one at a time,
        # each rank's interval arrays spilled again as it arrives)
        for i in order:
            results[i] = kept(_unspool(results[i], paths[i]))
    finally:
        if spool:
            shutil.rmtree(spool, ignore_errors=True)
    return [results[i] for i in range(len(paths))]


# What a worker imports, loaded once in the forkserver: a module a worker imported itself
# would be private to each worker (its code objects, its tables), not shared.
# (tests/test_batch_parent.py checks that analysing a trace imports nothing more). Last,
# ``_frozen``: what those imports made is frozen out of the workers' collections.
WORKER_PRELOAD = ("traceread.jobs.batch", "traceread.analysis", "traceread.readers.kineto",
                  "traceread.readers.stream", "traceread.readers.validate", "pyarrow.pandas_compat",
                  "traceread.passes.nccl", "traceread.passes.iterations", "traceread.jobs.figures",
                  "traceread.jobs.multirank", "traceread.jobs.multirank.inputs",
                  "traceread.jobs.multirank.waits", "traceread.readers.nsys_split",
                  "traceread.jobs._frozen")

_SPOOL = "spool"   # a worker's message: the path of the file holding its whole result


def _spool_folder() -> str | None:
    """A private temporary folder for the workers' result files; None when none can be
    made (then each result comes whole through its pipe)."""
    try:
        return tempfile.mkdtemp(prefix="traceread-batch-")
    except OSError:
        return None


def _unspool(res: dict, path: str) -> dict:
    """A worker's whole result from its file (the message itself when it came whole
    through the pipe); a file that cannot be read back is that file's error row only."""
    spool = res.get(_SPOOL)
    if spool is None:
        return res
    try:
        with open(spool, "rb") as f:
            return pickle.load(f)
    except Exception as e:  # noqa: BLE001 - unreadable or not unpicklable here
        return _crashed(path, e)
    finally:
        try:
            os.unlink(spool)
        except OSError:
            pass


def kept(res: dict) -> dict:
    """A worker's result as the parent keeps it until the cross-rank pass: the rank's
    interval arrays (host timeline, GPU compute, waits) moved to a file of their own
    (``multirank.spill``), so the parent grows by ranks × a small record, not ranks × the
    arrays. The result's ``member`` holds the same ``RankInput`` object."""
    for r in (res, *(res.get("more") or ())):
        ri = r.get("rank_input")
        if ri is not None:
            from .multirank.spill import spill

            spill(ri)
    return res


def unguarded_main_call() -> str | None:
    """``"script.py:LINE"`` when this call comes from a script's top-level code outside an
    ``if __name__ == "__main__":`` block, else None.

    A worker process (forkserver, as spawn) starts by running the parent's main script
    again; an unguarded call there starts workers of its own during that start-up, which
    multiprocessing refuses, and every worker exits with status 1. A notebook or ``python
    -c`` has no script to run again.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            return None
    return f"{path}:{line}"


def _is_main_guard(test) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [x.id for x in sides if isinstance(x, ast.Name)]
    consts = [x.value for x in sides if isinstance(x, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]


def _child(conn, path: str, step_pattern: str | None, spool: str | None = None) -> None:
    """Worker process body: one file. Its whole result is written to ``spool`` and only
    its summary row sent through ``conn``, so the parent unpickles no DataFrame (and
    imports no pandas) while workers run; with no room for the file, the whole result
    goes through ``conn`` as it always could."""
    try:
        res = analyze_file(path, step_pattern)
        conn.send(_message(res, spool) if spool and _write_spool(res, spool) else res)
    finally:
        conn.close()


def _write_spool(res: dict, spool: str) -> bool:
    """``res`` pickled to ``spool``; False (and no file left) when it cannot be written."""
    try:
        with open(spool, "wb") as f:
            pickle.dump(res, f, protocol=pickle.HIGHEST_PROTOCOL)
        return True
    except OSError:
        try:
            os.unlink(spool)
        except OSError:
            pass
        return False


def _message(res: dict, spool: str) -> dict:
    """What the parent receives while workers run: the row in plain Python values (a
    numpy scalar would make the parent import numpy), the path's bytes, the file."""
    def plain(r: dict) -> dict:
        return {k: v.item() if type(v).__module__ == "numpy" and hasattr(v, "item") else v
                for k, v in r["row"].items()}

    out = {"row": plain(res), "file_bytes": res.get("file_bytes"), _SPOOL: spool}
    if res.get("more"):
        out["more"] = [{"row": plain(r)} for r in res["more"]]
    return out


class _Worker:
    def __init__(self, ctx, i: int, path: str, step_pattern: str | None, spool: str | None = None):
        self.i, self.path = i, path
        self.recv, send = ctx.Pipe(duplex=False)
        target = os.path.join(spool, f"{i}.pickle") if spool else None
        self.proc = ctx.Process(target=_child, args=(send, path, step_pattern, target), daemon=True)
        self.proc.start()
        send.close()
        self.t0 = time.monotonic()
        self.deadline = self.t0 + time_limit(path)
        self.max_rss = memory_limit(path)

    def over_limit(self) -> str | None:
        if time.monotonic() > self.deadline:
            return f"timed out after {time.monotonic() - self.t0:.0f} s (limit for its size)"
        rss = _rss(self.proc.pid)
        if rss > self.max_rss:
            return f"out of memory: worker reached {rss / 2**30:.1f} GiB (limit {self.max_rss / 2**30:.1f} GiB)"
        return None

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.recv.close()


class _Workers:
    """At most ``jobs`` worker processes, one file each; yields (index, result)."""

    def __init__(self, ctx, jobs: int, step_pattern: str | None, spool: str | None = None):
        self.ctx, self.jobs, self.step_pattern, self.spool = ctx, jobs, step_pattern, spool

    def run(self, items: list[tuple[int, str]]):
        from multiprocessing.connection import wait

        todo = list(reversed(items))
        running: list[_Worker] = []
        try:
            while todo or running:
                while todo and len(running) < self.jobs:
                    i, path = todo.pop()
                    running.append(_Worker(self.ctx, i, path, self.step_pattern, self.spool))
                ready = wait([w.recv for w in running] + [w.proc.sentinel for w in running],
                             timeout=_POLL_S)
                for w in list(running):
                    res = self._finished(w, ready)
                    if res is not None:
                        running.remove(w)
                        w.stop()
                        yield w.i, res
        finally:
            for w in running:
                w.stop()

    def _finished(self, w: _Worker, ready: list) -> dict | None:
        """The worker's result if it is done (or failed), else None."""
        if w.recv in ready:
            try:
                return w.recv.recv()
            except (EOFError, OSError):
                pass  # died before sending: reported below
            except Exception as e:  # noqa: BLE001 - an unpicklable result
                return _crashed(w.path, e)
        elif w.proc.sentinel not in ready:
            reason = w.over_limit()
            return None if reason is None else _failed(w.path, reason, w.t0)
        w.proc.join(5)
        code = w.proc.exitcode
        return _failed(w.path, _death_reason(code), w.t0)


def _death_reason(code: int | None) -> str:
    if code is not None and code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory? the OOM killer sends SIGKILL)" if -code == 9 else ""
        return f"worker killed by {name}{hint}"
    return f"worker exited with status {code} before returning a result"


def _failed(path: str, reason: str, t0: float) -> dict:
    row = {c: None for c in SUMMARY_COLUMNS}
    row.update(file=str(path), rank=-1, world_size=-1, error=reason,
               seconds=round(time.monotonic() - t0, 3))
    return {"row": row, "tables": {}, "rank_input": None}


def run_dask(paths: list[str], scheduler: str, step_pattern: str | None = None,
             on_result: ProgressFn | None = None) -> list[dict]:
    """Same work on an existing Dask distributed cluster at ``scheduler``."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise TraceError(scheduler, "--scheduler needs dask.distributed, which is not "
                                    "installed (pip install 'traceread[dask]')") from None

    results: dict[int, dict] = {}
    with Client(scheduler, set_as_default=False) as client:
        futs = client.map(analyze_file, paths, step_pattern=step_pattern, pure=False)
        index = {f.key: i for i, f in enumerate(futs)}
        for fut in as_completed(futs, loop=client.loop):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except Exception as e:
                results[i] = _crashed(paths[i], e)
            fut.release()
            results[i] = kept(results[i])
            if on_result:
                on_result(results[i])
    return [results[i] for i in range(len(paths))]


def _crashed(path: str, e: BaseException) -> dict:
    row = {c: None for c in SUMMARY_COLUMNS}
    row.update(file=display_path(path), rank=-1, world_size=-1,
               error=f"worker failed: {type(e).__name__}: {' '.join(str(e).split())}")
    return {"row": row, "tables": {}, "rank_input": None, "file_bytes": path_bytes(path)}


def path_bytes(path) -> bytes:
    """A local path's bytes as the OS has them (a URL's UTF-8)."""
    return os.fsencode(path) if not is_url(path) else str(path).encode("utf-8", "surrogateescape")


# ----------------------------------------------------------------------------- assembling

@dataclass
class BatchResult:
    summary: pd.DataFrame                      # one row per file (per process of a split export)
    tables: dict[str, pd.DataFrame]            # name -> rows of every trace, with "trace_id"
    ranks: pd.DataFrame                        # one row per (job, rank)
    matches: pd.DataFrame                      # one row per (job, collective instance, rank)
    jobs: list = field(default_factory=list)   # multirank.JobResult (build_jobs)
    skipped: list = field(default_factory=list)
    file_bytes: list = field(default_factory=list)  # each summary row's path, as bytes
    files: int = -1                            # input files (-1: one per summary row)

    @property
    def failed(self) -> int:
        return int(self.summary["error"].notna().sum())


def assemble(results: list[dict], skipped: Iterable[str] = ()) -> BatchResult:
    import pandas as pd

    from . import multirank

    files = len(results)
    results = flat(results)
    rows = [r["row"] for r in results]
    width = max(5, len(str(max(len(rows) - 1, 0))))
    for i, row in enumerate(rows):
        row["trace_id"] = f"t{i:0{width}d}"
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for c in ("rank", "world_size", "events", "steps", "recompiles", "truncated_at_byte"):
        summary[c] = summary[c].astype("Int64")
    for c in ("rank", "world_size"):   # unknown: null in the Parquet (as job), never -1
        summary[c] = summary[c].mask(summary[c] < 0)
    for c in ("step_mean_ms", "idle_pct", "top_drain_pct", "top_cpu_pct", "comm_ms", "exposed_comm_pct", "seconds"):
        summary[c] = summary[c].astype("float64")
    members = [r.get("member") or {"path": r["row"]["file"], "input": r["rank_input"], "split": []}
               for r in results if r["rank_input"] is not None]
    jobs = multirank.build_jobs(members)   # the one job model (traceread.job)
    job_of = {}
    ranks, matches = [], []
    for job in jobs:
        for rank, path in job.paths.items():
            job_of[path] = job.job
        jv = job.verdict()    # the job's one answer (its basis may be the pipeline's stages)
        pr = job.per_rank.assign(job=job.job, world_size=job.world_size,
                                 straggler=lambda d, jv=jv: d["rank"] == jv["straggler_rank"],
                                 straggler_delay_ns=jv["late_by_ns"],
                                 step_skew_mean_ns=int(job.steps["skew_ns"].mean()) if len(job.steps) else 0)
        ranks.append(pr)
        matches.append(job.matches.assign(job=job.job))
    summary["job"] = [job_of.get(f) for f in summary["file"]]
    _job_verdicts(summary, results, jobs)
    tables: dict[str, list] = {}
    for i, r in enumerate(results):
        for name, df in r["tables"].items():
            if len(df):
                tables.setdefault(name, []).append(df.assign(trace_id=rows[i]["trace_id"]))
    merged = {name: pd.concat(parts, ignore_index=True) for name, parts in tables.items()}
    ranks_df = pd.concat(ranks, ignore_index=True) if ranks else pd.DataFrame(
        columns=["job", "rank", "file", "matched", "comm_ns", "wait_ns", "transfer_ns", "times_last"])
    if len(ranks_df):
        first = ["job", "rank", "file", "world_size", "straggler"]
        ranks_df = ranks_df[first + [c for c in ranks_df.columns if c not in first]]
    matches_df = pd.concat(matches, ignore_index=True) if matches else pd.DataFrame()
    return BatchResult(summary=summary, tables=merged, ranks=ranks_df, matches=matches_df,
                       jobs=jobs, skipped=list(skipped),
                       file_bytes=[r.get("file_bytes") for r in results], files=files)


def _job_verdicts(summary: pd.DataFrame, results: list[dict], jobs: list) -> None:
    """Each job member's ``verdict`` as ``traceread analyze`` gives it for the job
    (the straggler names its own cause; see docs/batch.md)."""
    from .multirank import adjust_rank_verdicts

    row_of = {r["row"]["file"]: i for i, r in enumerate(results) if r.get("verdict")}
    for job in jobs:
        members = {rank: row_of[p] for rank, p in job.paths.items() if p in row_of}
        new = adjust_rank_verdicts({rank: results[i]["verdict"] for rank, i in members.items()}, job)
        for rank, i in members.items():
            summary.loc[i, "verdict"] = new[rank].get("bound")
            _job_figures(results[i], new[rank])


def _job_figures(result: dict, verdict: dict) -> None:
    """A job member's ``figures`` carry its job-adjusted verdict, as its summary row does."""
    import pandas as pd

    from .figures import promised_saving

    fig = result["tables"].get("figures")
    if fig is None or not len(fig):
        return
    fig = fig.copy()
    fig["verdict"] = verdict.get("bound")
    fig["verdict_summary"] = str(verdict.get("summary", ""))
    fig["promised_saving_ns"] = pd.array([promised_saving(verdict)], dtype="Int64")
    result["tables"]["figures"] = fig


# ----------------------------------------------------------------------------- entry point

def run(path: str | os.PathLike, *, jobs: int | None = None, scheduler: str | None = None,
        step_pattern: str | None = None, on_result: ProgressFn | None = None,
        paths: list[str] | None = None) -> BatchResult:
    """Discover and analyse every trace under ``path`` (or the given ``paths``)."""
    skipped: list[str] = []
    if paths is None:
        paths, skipped = discover(path)
    if scheduler:
        results = run_dask(paths, scheduler, step_pattern, on_result)
    else:
        results = run_local(paths, jobs or os.cpu_count() or 1, step_pattern, on_result)
    return assemble(results, skipped)


def analyze_dir(path: str | os.PathLike, *, jobs: int | None = None, out_dir: str | os.PathLike | None = None,
                scheduler: str | None = None, step_pattern: str | None = None) -> pd.DataFrame:
    """One summary row per trace under ``path``; also writes ``out_dir`` when given.

    The full result (per-trace tables, cross-rank ``ranks``) is ``run(path)``.
    """
    if out_dir is None:
        return run(path, jobs=jobs, scheduler=scheduler, step_pattern=step_pattern).summary
    paths, skipped = discover(path)
    check_out_dir(out_dir, paths)
    partial = PartialSummary(out_dir)
    try:
        res = run(path, jobs=jobs, scheduler=scheduler, step_pattern=step_pattern,
                  on_result=partial.add, paths=paths)
    finally:
        partial.close()
    res.skipped = skipped
    write(res, out_dir)
    return res.summary


__all__ = ["analyze_file", "run_local", "run_dask", "assemble", "run", "analyze_dir", "BatchResult"]
