"""Helpers every pass needs: accept a Trace or its events, map a function over names."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..table import Trace


def events_of(trace_or_events) -> pd.DataFrame:
    """Passes take either a ``Trace`` or its events DataFrame."""
    return trace_or_events.events if isinstance(trace_or_events, Trace) else trace_or_events


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
