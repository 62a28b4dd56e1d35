"""Helpers every pass needs: accept a Trace or its events, map a function over names."""
from __future__ import annotations


import weakref

import numpy as np
import pandas as pd

from .. import namerx
from ..table import Trace

# a CUDA/HIP graph replay launch (runtime or driver API)
GRAPH_LAUNCH_RX = namerx.compile(r"^(?:cuda|hip|cu)GraphLaunch")
# GPU code loaded into the driver (a module or library: the driver, runtime or HIP API, each
# load variant, a versioned entry point): new kernel code appearing (lazy loading, a JIT
# build). One pattern for the facts' count, the compile pass and the replay's models.
MODULE_LOAD_RX = namerx.compile(
    r"^(?:cu|cuda|hip)(?:Module|Library)Load(?:Data(?:Ex)?|FatBinary|FromFile)?(?:_v\d+)?$")
# a checkpoint save's frames and calls: torch.save's own frame, the state_dict, the zip
# writer's write_record, torch.distributed.checkpoint. One pattern for the periodic-stall
# pass that names a stall a checkpoint and the replay model that moves it off the step.
CHECKPOINT_RX = namerx.compile(r"torch/serialization\.py\(\d+\): _?save\b|\bstate_dict\b"
                               r"|torch/distributed/checkpoint/|write_record|(?i:checkpoint|"
                               r"\bsave\b)")


def events_of(trace_or_events) -> pd.DataFrame:
    """Passes take either a ``Trace`` or its events DataFrame."""
    return trace_or_events.events if isinstance(trace_or_events, Trace) else trace_or_events


def kind_in(ev: pd.DataFrame, kinds) -> np.ndarray:
    """``ev["kind"].isin(kinds).to_numpy()``: one lookup per category code (about twice
    as fast on a categorical column; passes test it ~120 times per analysis)."""
    col = ev["kind"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.isin(kinds).to_numpy()
    lut, hit, miss = _kind_lut(col.dtype, tuple(kinds))
    codes = col.array.codes   # (the Categorical's own array: no Series built around it)
    if min(len(hit), len(miss)) <= MAX_COMPARES:
        # a few compares of the int8 codes beat a gather (which widens every code to
        # intp first): ~0.03 ms a compare against ~0.5 ms at 600 k rows
        if len(hit) <= len(miss):
            return _any_equal(codes, hit)
        return ~_any_equal(codes, miss)
    return lut.take(codes)   # code -1 (null) reads the last slot


# the most codes compared one by one before a lookup table is cheaper
MAX_COMPARES = 8


def _any_equal(codes: np.ndarray, values: list) -> np.ndarray:
    """``np.isin(codes, values)`` by compares; ``values`` are Python ints (a numpy int64
    would widen the int8 codes to int64 for every compare: ~20x slower)."""
    if not values:
        return np.zeros(len(codes), bool)
    out = codes == values[0]
    for c in values[1:]:
        out |= codes == c
    return out


# (id of a kind dtype, kinds) -> (dtype, lut, hit, miss): the same few kind sets are asked
# of the same dtype ~50 times per analysis, and Index.isin costs ~0.1 ms per call (a third
# of a small trace's kind_in time). The dtype is held, so its id cannot be reused meanwhile.
_KIND_LUTS: dict[tuple[int, tuple], tuple] = {}


def _kind_lut(dtype: pd.CategoricalDtype, kinds: tuple) -> tuple[np.ndarray, list, list]:
    """(lut: a hit per code with the null's last, the codes that hit, the codes that do
    not; both lists include -1, the null's code, on their side)."""
    got = _KIND_LUTS.get((id(dtype), kinds))
    if got is not None and got[0] is dtype:
        return got[1], got[2], got[3]
    lut = np.append(dtype.categories.isin(list(kinds)), any(pd.isna(k) for k in kinds))
    codes = list(range(len(lut) - 1)) + [-1]
    hit = [c for c, h in zip(codes, lut.tolist()) if h]
    miss = [c for c, h in zip(codes, lut.tolist()) if not h]
    if len(_KIND_LUTS) >= 256:
        _KIND_LUTS.clear()
    _KIND_LUTS[(id(dtype), kinds)] = (dtype, lut, hit, miss)
    return lut, hit, miss


def rows_of(ev: pd.DataFrame, kinds) -> np.ndarray:
    """Positions of the rows whose kind is one of ``kinds``."""
    return np.flatnonzero(kind_in(ev, kinds))


def take(ev: pd.DataFrame, rows: np.ndarray, cols) -> pd.DataFrame:
    """``ev.iloc[rows][cols]`` with a fresh RangeIndex, one numpy gather per column: never
    a copy of the other columns (``ev.iloc[rows]`` first takes all 33)."""
    data = {}
    for c in cols:
        s = ev[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            data[c] = pd.Categorical.from_codes(s.cat.codes.to_numpy().take(rows),
                                                dtype=s.dtype, validate=False)
        else:
            data[c] = s.to_numpy().take(rows)
    return pd.DataFrame(data, columns=list(cols), copy=False)


# categories Index id -> (a weak reference to the Index, its NameTable): every pass of every
# window of a trace shares one table (a window's columns keep the trace's categories). An
# entry goes when its Index does (the trace is dropped), so a session holds no old table.
_NAME_TABLES: dict[int, tuple] = {}


def name_table(col: pd.Series) -> namerx.NameTable:
    """The shared ``namerx.NameTable`` of a categorical name column's categories (a column
    that is not categorical gets a table of its own distinct values, not shared)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return table_of(col.cat.categories)


def table_of(cats: pd.Index) -> namerx.NameTable:
    """The shared NameTable of a categories Index (``name_table``)."""
    got = _NAME_TABLES.get(id(cats))
    if got is not None and got[0]() is cats:
        return got[1]
    table = namerx.NameTable(_category_arrow(cats))
    try:
        ref = weakref.ref(cats, lambda _r, k=id(cats): _drop_table(k, _r))
    except TypeError:      # not weakly referable: not shared
        return table
    _NAME_TABLES[id(cats)] = (ref, table)
    return table


def _drop_table(key: int, ref) -> None:
    got = _NAME_TABLES.get(key)
    if got is not None and got[0] is ref:
        del _NAME_TABLES[key]


def _category_arrow(cats: pd.Index):
    """The categories as an Arrow string array when they are strings (zero-copy for
    pandas' Arrow-backed ``str``), else their ``str`` values as a list."""
    import pyarrow as pa

    try:
        arr = pa.array(cats)
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            return arr
    except (pa.ArrowException, TypeError, ValueError):
        pass
    return [str(n) for n in cats]


def name_hits(col: pd.Series, rx, how: str = "search") -> np.ndarray:
    """Per row of ``col``: its name matches ``rx`` (a missing name: False); each distinct
    name is tested once per trace and pattern (``name_table``)."""
    return name_lut(col, rx, how).take(name_codes(col))


def name_lut(col: pd.Series, rx, how: str = "search") -> np.ndarray:
    """``rx`` over ``col``'s categories: one slot per category and a last (False) for null."""
    return name_table(col).hits(rx, how)


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` by a sort: numpy 2.4's np.unique hashes, ~3 us per distinct value
    (2.7 s for 800,000 row numbers; the sort takes 60 ms)."""
    a = np.sort(np.asarray(a), kind="stable")
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


def name_codes(col: pd.Series) -> np.ndarray:
    """The category codes of a (name) column, -1 for null; made categorical if it is not."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return col.array.codes


def lookup_at(col: pd.Series, rows: np.ndarray | None, fn, null, dtype=object,
              cand=None) -> np.ndarray:
    """``fn(str(value))`` for the values of ``col`` at ``rows`` (every row when None), called
    once per distinct value present there -- not once per category of the whole trace, which
    holds every host op name -- and ``null`` for missing values. ``cand(table)``: the
    names (a lut of the shared NameTable) outside which ``fn`` gives ``null`` for sure."""
    lut, codes = lut_at(col, rows, fn, null, dtype, cand)
    return lut.take(codes)


def lut_at(col: pd.Series, rows: np.ndarray | None, fn, null, dtype=object, cand=None):
    """(lut, codes): ``lookup_at`` is ``lut.take(codes)``; decide on the lut (one slot per
    category, the last for nulls), gather values only for the rows that need them (and,
    with ``cand``, only for the names it marks: see ``lookup_at``)."""
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    codes = cat.cat.codes.to_numpy()
    if rows is not None:
        codes = codes.take(rows)
    cats = cat.cat.categories
    seen = np.zeros(len(cats) + 1, bool)
    seen[codes] = True                      # code -1 (null) marks the last slot
    if cand is not None:
        table = table_of(cats)
        seen &= cand(table)
        used = np.flatnonzero(seen[:-1])
        names = [table.names[i] for i in used.tolist()]
    else:
        used = np.flatnonzero(seen[:-1])
        names = [str(n) for n in cats.take(used)] if len(used) else []
    lut = np.full(len(cats) + 1, null, dtype=dtype)
    if len(used):
        vals = [fn(n) for n in names]
        if dtype is object:  # element-wise: a list of tuples must stay one object per slot
            for i, v in zip(used.tolist(), vals):
                lut[i] = v
        else:
            lut[used] = vals
    return lut, codes


def rowwise(col: pd.Series, f) -> np.ndarray:
    """``f(col.astype(str))`` as a numpy array, for an elementwise ``f`` (``.str.match``,
    ``== "kernel"``, ``.to_numpy()``): computed on a categorical column's categories and
    broadcast by code (a 200k-row ``astype(str)`` costs ~70 ms, its categories ~nothing);
    a column with nulls or not categorical gets ``f`` on its rows, as before."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        if not len(codes) or codes.min() >= 0:
            return np.asarray(f(pd.Series(col.cat.categories).astype(str)))[codes]
    return np.asarray(f(col.astype(str)))


def map_names(names: pd.Series, fn) -> np.ndarray:
    """Apply ``fn`` once per distinct name (names are categorical), not once per event."""
    cat = names.astype("category") if names.dtype != "category" else names
    lut = np.array([fn(str(n)) for n in cat.cat.categories] + [fn("")], dtype=object)
    codes = cat.cat.codes.to_numpy()
    return lut[np.where(codes < 0, len(lut) - 1, codes)]


def map_names_at(names: pd.Series, rows: np.ndarray, fn) -> np.ndarray:
    """``map_names(names.iloc[rows], fn)`` without copying the column or the other rows."""
    cat = names.astype("category") if names.dtype != "category" else names
    lut = np.array([fn(str(n)) for n in cat.cat.categories] + [fn("")], dtype=object)
    return lut[cat.cat.codes.to_numpy()[rows]]   # code -1 (null) reads the last slot


def fmt_ms(ns: int) -> str:
    """A duration in the words of verdicts and window notes: 2.40 s, 30.6 ms, 173 us."""
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} us"


def factorize_few(values, few: int = 1 << 12):
    """``pd.factorize(values)`` of values with few distinct ones (pids, devices, (pid, name)
    pairs): the same codes and uniques, with the hash table sized for ``few`` and grown when
    more come, not for every row (pandas' default: ~40 B a row, 34 MB at 900 k rows)."""
    return pd.factorize(values, size_hint=max(1, min(len(values), few)))


def first_seen(codes: np.ndarray) -> np.ndarray:
    """Per row: True where its code (numbered by first appearance, as ``pd.factorize``
    gives them) appears for the first time: ``~duplicated(keep="first")``."""
    if not len(codes):
        return np.zeros(0, bool)
    top = np.maximum.accumulate(codes)
    return np.r_[True, top[1:] > top[:-1]]


def device_groups(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """(group of each row, number of groups): rows of one (pid, device) share a group."""
    pid, _ = factorize_few(ev["pid"].to_numpy().take(rows))
    dev, devs = factorize_few(ev["device"].to_numpy().take(rows))
    ndev = max(len(devs), 1)
    return pid.astype(np.int64) * ndev + dev, (int(pid.max()) + 1) * ndev if len(rows) else 0


def union_total(ev: pd.DataFrame, rows: np.ndarray) -> int:
    """Sum over (pid, device) of the union of the rows' [ts, ts + dur): the busy ns."""
    if not len(rows):
        return 0
    s = ev["ts"].to_numpy(np.int64).take(rows)
    e = s + ev["dur"].to_numpy(np.int64).take(rows)
    group, n = device_groups(ev, rows)
    if n > 1 or not (s[1:] >= s[:-1]).all():   # the table is in ts order: no sort then
        order = np.lexsort((s, group))
        group, s, e = group[order], s[order], e[order]
    keep = e > s
    group, s, e = group[keep], s[keep], e[keep]
    if not len(s):
        return 0
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    total = 0
    for a, b in zip(first.tolist(), first[1:].tolist() + [len(s)]):
        total += _sorted_union_len(s[a:b], e[a:b])
    return total


def _sorted_union_len(s: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of [s, e) for s ascending and e > s (``intervals.union``'s rule)."""
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return int((reach[last] - s[first]).sum())


def stable_by(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """``np.lexsort((minor, major))`` by one stable sort of a combined int64 key when it
    fits (lexsort's two passes cost several times more; rows that come in runs of a major
    key in minor order are a few merges, not a full sort)."""
    if not len(major):
        return np.zeros(0, np.intp)
    a0, b0 = int(major.min()), int(minor.min())
    width = int(minor.max()) - b0 + 1
    if (int(major.max()) - a0 + 1) * width >= 2**62:
        return np.lexsort((minor, major))
    if major.dtype != np.int64 or minor.dtype != np.int64:
        return np.argsort((major - a0) * width + (minor - b0), kind="stable")
    key = major - a0   # one temporary, not three (the same key)
    key *= width
    key += minor
    key -= b0
    return np.argsort(key, kind="stable")


def launched_inside(s: np.ndarray, e: np.ndarray, other: np.ndarray,
                    own: np.ndarray | None = None) -> np.ndarray:
    """Rows [s, e) of one thread inside which other threads launched GPU work (more often
    than the thread itself did, given ``own``): the thread waited for them -- the main thread
    in ``backward()`` while autograd's thread launches the backward -- a wait, not work of
    its own. ``other`` and ``own``: sorted launch start times. One rule for the culprits'
    frames (with ``own``) and the replay's movable host work (without)."""
    if not len(other):
        return np.zeros(len(s), bool)

    def inside(x):
        return np.searchsorted(x, e, side="left") - np.searchsorted(x, s, side="left")
    return inside(other) > (inside(own) if own is not None else 0)
