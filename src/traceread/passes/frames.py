"""Building result frames cheaply: a few columns of some rows, string columns from codes.

pandas gathers every column of a row selection and infers string columns from Python
objects (on pandas 3 that is a pass through pyarrow per column); the parent's passes
touch 10^5-10^6 rows, so both add up.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def take_rows(ev: pd.DataFrame, rows: np.ndarray, cols) -> pd.DataFrame:
    """``ev.iloc[rows][cols]`` with a fresh RangeIndex: only the named columns are gathered
    (categorical ones by code, keeping their dtype)."""
    return pd.DataFrame(take_columns(ev, rows, cols), copy=False)


def take_columns(ev: pd.DataFrame, rows: np.ndarray, cols) -> dict:
    """``take_rows``'s columns as a dict (name -> array or Categorical), to add more
    before the frame is made: a column set on a frame afterwards is copied."""
    out = {}
    for c in cols:
        col = ev[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical.from_codes(col.cat.codes.to_numpy()[rows], dtype=col.dtype)
        else:
            out[c] = col.to_numpy()[rows]
    return out


def code_in(codes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``np.isin(codes, wanted)`` for category codes: a few compares when few are wanted
    (each ~10x cheaper than a lookup table indexed by the codes), else that table."""
    wanted = np.asarray(wanted)
    if len(wanted) <= 8:
        out = np.zeros(len(codes), bool)
        for w in wanted.tolist():
            out |= codes == w
        return out
    lut = np.zeros(int(max(wanted.max(), codes.max(initial=0))) + 2, bool)
    lut[wanted] = True
    return lut[codes]   # code -1 (null) reads the last slot, never wanted


def _inferred_str():
    """The dtype pandas gives a column of Python strings, and its Arrow type if Arrow-backed."""
    dt = pd.Series(np.array(["a"], object)).dtype
    if isinstance(dt, pd.StringDtype) and dt.storage == "pyarrow":
        import pyarrow as pa

        return dt, pa.array(pd.array(["a"], dtype=dt)).type
    return dt, None


_STR = None


def str_column(vocab, codes: np.ndarray):
    """``vocab[codes]`` (Python strings) as the column pandas infers from them -- the same
    dtype and values -- without one Python object per row."""
    global _STR
    if _STR is None:
        _STR = _inferred_str()
    dt, pa_type = _STR
    if pa_type is None or not len(codes):   # pandas infers object for no rows
        return np.asarray(vocab, dtype=object)[codes]
    import pyarrow as pa

    return pd.array(pa.array(list(vocab), pa_type).take(pa.array(np.asarray(codes))), dtype=dt)
