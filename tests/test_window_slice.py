"""passes.window.slice_events: the window's rows, clipped, whichever way it builds them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceread.passes.window import slice_events


def _reference(ev, start, end):
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    m = (ts < end) & ((te > start) | ((ev["dur"].to_numpy() == 0) & (ts >= start)))
    out = ev.loc[m].copy()
    s = np.maximum(out["ts"].to_numpy(np.int64), start)
    e = np.minimum(out["ts"].to_numpy(np.int64) + out["dur"].to_numpy(np.int64), end)
    out["ts"] = s
    out["dur"] = np.maximum(e - s, 0)
    return out.reset_index(drop=True)


def _events(spanning_head: bool):
    ts = np.arange(0, 1000, 10, dtype=np.int64)
    dur = np.full(len(ts), 5, np.int64)
    dur[::7] = 0   # instants
    if spanning_head:
        dur[0] = 2000   # a span over the whole trace: kept, while the rows after it are not
    return pd.DataFrame({
        "ts": ts, "dur": dur, "kind": pd.Categorical(np.where(dur == 0, "instant", "kernel")),
        "pid": np.arange(len(ts), dtype=np.int64) % 3,
        "name": pd.Categorical([f"op{i % 5}" if i % 9 else None for i in range(len(ts))]),
    })


@pytest.mark.parametrize("spanning_head", [False, True], ids=["one-run", "scattered"])
@pytest.mark.parametrize("window", [(95, 905), (100, 900), (0, 10_000), (333, 334)])
def test_slice_equals_the_row_mask_definition(spanning_head, window):
    ev = _events(spanning_head)
    got = slice_events(ev, *window)
    pd.testing.assert_frame_equal(got, _reference(ev, *window))
    assert ev["ts"].iloc[0] == 0  # the input is untouched


def test_one_run_shares_the_other_columns():
    ev = _events(False)
    got = slice_events(ev, 95, 905)
    assert np.shares_memory(got["pid"].to_numpy(), ev["pid"].to_numpy())
    got2 = slice_events(_events(True), 95, 905)
    assert len(got2) == len(_reference(_events(True), 95, 905))
