"""The CPU call stacks an Nsight Systems export sampled (``nsys profile --sample=cpu``).

Each sample is a row of COMPOSITE_EVENTS (``start`` on the export's clock -- the event
table's, ``globalTid``); its stack is the rows of SAMPLING_CALLCHAINS with the sample's
``id``, one per frame, ``stackDepth`` 0 the innermost. A frame is its symbol (StringIds);
an unresolved one (an address) is its module's file name in brackets, and a run of them
in one module is one frame. Read only when asked for (``traceread flame``, the HTML
report's flame graph of an nsys export): the event table does not carry stacks.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ._nsys_db import bounded, connect, text

MAX_SAMPLES = 2_000_000   # more are cut to the first ones in time (and said so: ``cut``)


def _tables(con) -> set[str]:
    return {text(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def cpu_samples(path, start: int | None = None, end: int | None = None) -> pd.DataFrame | None:
    """``ts, pid, tid, frames`` (a tuple, outermost frame first) of the samples in
    [start, end), or None when the export holds no sampled stacks. ``df.attrs["cut"]``:
    True when more than MAX_SAMPLES fell in the range (the earliest are kept)."""
    con = connect(Path(path))
    try:
        if not {"COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS", "StringIds"} <= _tables(con):
            return None
        where, args = _range(start, end)
        ev = con.execute(f"SELECT id, start, globalTid FROM COMPOSITE_EVENTS {where} "
                         f"ORDER BY start LIMIT {MAX_SAMPLES + 1}", args).fetchall()
        if not ev:
            return None
        cut = len(ev) > MAX_SAMPLES
        ev = ev[:MAX_SAMPLES]
        lo, hi = min(r[0] for r in ev), max(r[0] for r in ev)
        frames = con.execute(
            "SELECT c.id, c.stackDepth, c.symbol, c.module, c.unresolved FROM SAMPLING_CALLCHAINS c "
            "WHERE c.id BETWEEN ? AND ? ORDER BY c.id, c.stackDepth DESC", (lo, hi)).fetchall()
        names = _strings(con, {r[2] for r in frames} | {r[3] for r in frames})
    finally:
        con.close()
    stacks = _stacks([(sid, d, names.get(sym), names.get(mod), u)
                      for sid, d, sym, mod, u in frames])
    ids = np.fromiter((r[0] for r in ev), np.int64, len(ev))
    g = np.fromiter((r[2] for r in ev), np.int64, len(ev))
    df = pd.DataFrame({"ts": np.fromiter((r[1] for r in ev), np.int64, len(ev)),
                       "pid": (g >> 24) & 0xFFFFFF, "tid": g & 0xFFFFFF,
                       "frames": [stacks.get(int(i), ()) for i in ids]})
    df = df[df["frames"].map(len) > 0].reset_index(drop=True)
    df.attrs["cut"] = cut
    return df


def _strings(con, ids) -> dict:
    """{StringIds id: its value cut like every nsys string (``bounded``)}, each read once
    however many frames name it (a 16 MB symbol in every frame ran out of memory)."""
    ids = sorted(int(i) for i in ids if isinstance(i, int))
    out = {}
    for k in range(0, len(ids), 500):
        part = ids[k:k + 500]
        rows = con.execute(f"SELECT id, {bounded('value')} FROM StringIds WHERE id IN "
                           f"({','.join('?' * len(part))})", part).fetchall()
        out.update({int(i): v for i, v in rows})
    return out


def _range(start, end) -> tuple[str, tuple]:
    conds, args = [], []
    if start is not None:
        conds.append("start >= ?")
        args.append(int(start))
    if end is not None:
        conds.append("start < ?")
        args.append(int(end))
    return ("WHERE " + " AND ".join(conds) if conds else ""), tuple(args)


def _stacks(frames) -> dict[int, tuple[str, ...]]:
    """Frame rows (id, depth descending) -> {id: stack, outermost first}."""
    out: dict[int, list[str]] = {}
    for sid, _depth, symbol, module, unresolved in frames:
        name = frame_of(text(symbol) or "", text(module) or "", bool(unresolved))
        stack = out.setdefault(int(sid), [])
        if not (stack and stack[-1] == name and name.startswith("[")):
            stack.append(name)
    return {k: tuple(v) for k, v in out.items()}


def frame_of(symbol: str, module: str, unresolved: bool) -> str:
    """A frame's name: its symbol, or for an address ``[module file]``."""
    if unresolved or not symbol or symbol.startswith("0x"):
        return f"[{os.path.basename(module) or 'unknown'}]"
    return symbol
