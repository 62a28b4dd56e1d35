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


def count_iterations(ev: pd.DataFrame, start: int, end: int) -> Iterations:
    """Iterations in [start, end) of the event table ``ev`` (see module doc)."""
    inside = ev[((ev["ts"] >= start) & (ev["ts"] + ev["dur"] <= end)).to_numpy()]
    host = inside[inside["kind"].isin(HOST_KINDS).to_numpy()]
    if len(host):
        names, where = _outermost_names(host)
        n, block = repeats(names)
        if n > 1:
            return Iterations(n, f"{n} copies of the same {len(block)} outermost host ops "
                                 f"on {where} (first: {block[0]})")
    gpu = inside[(inside["device"] >= 0).to_numpy() & (inside["kind"] == "kernel").to_numpy()]
    if len(gpu):
        names = gpu.sort_values("ts", kind="stable")["name"].astype(str).tolist()
        n, block = repeats(names)
        if n > 1:
            return Iterations(n, f"{n} copies of the same {len(block)} kernels in launch order "
                                 f"(first: {block[0]})")
    return Iterations(1, "")


def _outermost_names(host: pd.DataFrame) -> tuple[list[str], str]:
    """Names of the outermost host ops of the busiest thread, in time order."""
    best, best_ns, best_names = None, -1, []
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
    return best_names, f"thread {best[1]} of process {best[0]}"


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
