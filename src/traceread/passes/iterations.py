"""Without step markers: how many times the analysed window repeats one iteration.

``traceread diff`` divides a trace's totals by its iterations so that one call is
compared with one call (a first call against two steady calls is otherwise "two
times slower"). The evidence is the sequence of *outermost* host ops (``cpu_op`` and
``user_annotation`` rows not inside another one) on the thread that spends the most
time in them: the window holds ``n`` iterations when that sequence is ``n`` copies
of one block of names, the largest such ``n``. When the host shows no repetition
(one block, or no host ops), the GPU ops' names in launch order are tried the same
way. Nothing repeats exactly: one iteration (the whole window).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

HOST_KINDS = ("cpu_op", "annotation")
MAX_ITERATIONS = 100_000   # a bound, not a finding: more copies are reported as this many


@dataclass
class Iterations:
    count: int          # >= 1
    evidence: str       # which events repeat ("" when count == 1 and nothing repeats)
    # one iteration's period: the first copy's start to the last copy's start, / (count - 1)
    # (None for one iteration). The window's length / count is not it: a whole-trace window
    # runs to the profiler's last instant (cpu/compile.steady: 2 calls 166 us apart in a
    # 4.55 ms window that ends 4.2 ms after them, at "Record Window End")
    period_ns: int | None = None


def count_iterations(ev: pd.DataFrame, start: int, end: int) -> Iterations:
    """Iterations in [start, end) of the event table ``ev`` (see module doc)."""
    inside = ev[((ev["ts"] >= start) & (ev["ts"] + ev["dur"] <= end)).to_numpy()]
    host = inside[inside["kind"].isin(HOST_KINDS).to_numpy()]
    if len(host):
        names, starts, where = _outermost_names(host)
        n, block = repeats(names)
        if n > 1:
            return Iterations(n, f"{n} copies of the same {len(block)} outermost host ops "
                                 f"on {where} (first: {block[0]})", _period(starts, n))
    gpu = inside[(inside["device"] >= 0).to_numpy() & (inside["kind"] == "kernel").to_numpy()]
    if len(gpu):
        gpu = gpu.sort_values("ts", kind="stable")
        n, block = repeats(gpu["name"].astype(str).tolist())
        if n > 1:
            return Iterations(n, f"{n} copies of the same {len(block)} kernels in launch order "
                                 f"(first: {block[0]})", _period(gpu["ts"].to_numpy(np.int64), n))
    return Iterations(1, "")


def _period(starts, n: int) -> int:
    """The copies' period: ``starts`` holds n equal blocks' events in time order."""
    size = len(starts) // n
    return int((int(starts[(n - 1) * size]) - int(starts[0])) // (n - 1))


def _outermost_names(host: pd.DataFrame) -> tuple[list[str], np.ndarray, str]:
    """Names and starts of the outermost host ops of the busiest thread, in time order."""
    best, best_ns, best_names, best_ts = None, -1, [], np.zeros(0, np.int64)
    for (pid, tid), rows in host.groupby(["pid", "tid"], sort=True):
        rows = rows.sort_values(["ts", "dur"], ascending=[True, False], kind="stable")
        ts, end = rows["ts"].to_numpy(np.int64), (rows["ts"] + rows["dur"]).to_numpy(np.int64)
        # outermost: starts at or after the end of every earlier op (running max)
        reach = np.maximum.accumulate(end)
        top = np.ones(len(rows), bool)
        top[1:] = ts[1:] >= reach[:-1]
        ns = int((end[top] - ts[top]).sum())
        if ns > best_ns:
            best, best_ns = (pid, tid), ns
            best_names = rows["name"].astype(str).to_numpy()[top].tolist()
            best_ts = ts[top]
    return best_names, best_ts, f"thread {best[1]} of process {best[0]}"


def repeats(seq: list[str]) -> tuple[int, list[str]]:
    """(n, block): the largest n for which ``seq`` is n copies of ``block``."""
    size = len(seq)
    if size < 2:
        return 1, list(seq)
    codes = pd.factorize(pd.Series(seq, dtype=object), sort=False)[0]
    # n must divide the count of every name: their gcd bounds it (few divisors to try)
    g = int(np.gcd.reduce(np.bincount(codes)))
    for n in range(min(g, MAX_ITERATIONS), 1, -1):
        if g % n:
            continue
        step = size // n
        if (codes.reshape(n, step) == codes[:step]).all():
            return n, list(seq[:step])
    return 1, list(seq)
