"""Helpers every pass needs: accept a Trace or its events, map a function over names."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..table import Trace


def events_of(trace_or_events) -> pd.DataFrame:
    """Passes take either a ``Trace`` or its events DataFrame."""
    return trace_or_events.events if isinstance(trace_or_events, Trace) else trace_or_events


def kind_in(ev: pd.DataFrame, kinds) -> np.ndarray:
    """``ev["kind"].isin(kinds).to_numpy()``: one lookup per category code (about twice
    as fast on a categorical column; passes test it ~30 times per analysis)."""
    col = ev["kind"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.isin(kinds).to_numpy()
    kinds = list(kinds)
    want = np.flatnonzero(col.cat.categories.isin(kinds)).tolist()
    if any(pd.isna(k) for k in kinds):
        want.append(-1)   # code -1: a null kind
    codes = col.cat.codes.to_numpy()
    # a few compares of the int8 codes: ~10x faster than a lookup table indexed by them
    out = np.zeros(len(codes), bool)
    for c in want:
        out |= codes == c
    return out


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
