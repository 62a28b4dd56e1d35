"""Memory layout of the event table and the window slice: same values, fewer copies."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceread.passes.window import slice_events
from traceread.table import COLUMNS, KINDS, Trace, TraceMeta, build_table


def _reference_slice(ev: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """The plain definition: take every kept row of every column, then clip."""
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    m = (ts < end) & ((te > start) | ((ev["dur"].to_numpy() == 0) & (ts >= start)))
    out = ev.iloc[np.flatnonzero(m)].reset_index(drop=True)
    s = np.maximum(out["ts"].to_numpy(np.int64), start)
    e = np.minimum(out["ts"].to_numpy(np.int64) + out["dur"].to_numpy(np.int64), end)
    out["ts"] = s
    out["dur"] = np.maximum(e - s, 0)
    return out


def _random_trace(rng: np.random.Generator, n: int) -> Trace:
    ts = np.sort(rng.integers(0, 1_000, n)) * 1_000
    dur = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 400_000, n))
    dur[0] = 2_000_000  # a trace-span row reaching over everything
    names = np.array([f"op{i}" for i in range(7)], dtype=object)
    cols = {
        "ts": ts, "dur": dur,
        "kind": [KINDS[k] for k in rng.integers(0, len(KINDS), n)],
        "name": list(names[rng.integers(0, len(names), n)]),
        "pid": rng.integers(0, 3, n),
        "tid": np.where(rng.random(n) < 0.5, -1, rng.integers(0, 4, n)),
        "correlation": np.where(rng.random(n) < 0.7, -1, rng.integers(0, 99, n)),
        "copy_kind": [None if rng.random() < 0.9 else "HtoD" for _ in range(n)],
    }
    return Trace(build_table(cols, n), TraceMeta())


@pytest.mark.parametrize("seed", range(40))
def test_slice_events_equals_taking_every_kept_row(seed):
    rng = np.random.default_rng(seed)
    ev = _random_trace(rng, int(rng.integers(1, 300))).events
    lo, hi = sorted(rng.integers(-50_000, 1_100_000, 2).tolist())
    got = slice_events(ev, lo, hi)
    want = _reference_slice(ev, lo, hi)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert type(got.index) is pd.RangeIndex


def test_slice_events_keeps_matching_columns_as_views():
    rng = np.random.default_rng(7)
    ev = _random_trace(rng, 400).events
    ts = ev["ts"].to_numpy()
    # a window starting after row 0 drops instants and short rows at its head
    got = slice_events(ev, int(ts[20]) + 1, int(ts[-5]))
    pd.testing.assert_frame_equal(got, _reference_slice(ev, int(ts[20]) + 1, int(ts[-5])),
                                  check_exact=True)
    # columns at their default on every row are the same on the head rows: never copied
    for col in ("seq", "msg_bytes", "domain"):
        a = got[col].array.codes if col == "domain" else got[col].to_numpy()
        b = ev[col].array.codes if col == "domain" else ev[col].to_numpy()
        assert np.shares_memory(a, b), col


def test_all_default_columns_share_one_array_and_events_round_trip():
    n = 1000
    cols = {"ts": np.arange(n)[::-1].copy(), "dur": np.ones(n, np.int64),
            "kind": ["kernel"] * n, "name": ["k"] * n, "flops": np.full(n, -1)}
    tr = Trace(build_table(cols, n), TraceMeta())
    table = tr.table
    ints = [name for name, typ, _ in COLUMNS if name not in ("ts", "dur") and
            str(typ) == "int64"]
    addr = {table.column(c).chunk(0).buffers()[1].address for c in ints}
    assert len(addr) == 1  # pid, tid, stream, ..., flops: one shared -1 buffer
    ref = table.to_pandas(split_blocks=True, ignore_metadata=True)
    ev = tr.events
    pd.testing.assert_frame_equal(ev, ref, check_exact=True)
    assert (ev["ts"].to_numpy() == np.arange(n)).all()  # sorted by ts
    assert tr.table.equals(table)  # rebuilt from the frame: the same table
    assert len(tr) == n


def _far_by_argsort(ts, end, dur):
    """validate._far_from_trace as it was (argsort of every time, weights carried along)."""
    from traceread.readers.validate import GAP_NS
    t = np.concatenate([ts, end])
    w = np.concatenate([dur > 0, dur > 0]).astype(np.int64)
    order = np.argsort(t, kind="stable")
    t, w = t[order], w[order]
    cut = np.flatnonzero(np.diff(t) > GAP_NS)
    if not len(cut):
        return np.zeros(len(ts), bool)
    lo = np.concatenate([[0], cut + 1])
    hi = np.concatenate([cut, [len(t) - 1]])
    cw = np.concatenate([[0], np.cumsum(w)])
    size = (cw[hi + 1] - cw[lo]) * (len(t) + 1) + (hi - lo + 1)
    best = int(np.argmax(size))
    a, b = t[lo[best]], t[hi[best]]
    return (ts < a) | (ts > b) | (end < a) | (end > b)


@pytest.mark.parametrize("seed", range(60))
def test_far_from_trace_without_argsort_flags_the_same_rows(seed):
    from traceread.readers.validate import GAP_NS, _far_from_trace
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    # a few clusters of times far apart (some tied), instants and intervals mixed
    base = rng.choice([0, 3, 7, 11], n) * GAP_NS * int(rng.integers(1, 3))
    ts = (base + rng.integers(0, 50, n) * int(rng.choice([1, GAP_NS // 10]))).astype(np.int64)
    dur = np.where(rng.random(n) < rng.random(), 0, rng.integers(0, 40, n)).astype(np.int64)
    if seed % 5 == 0:
        dur[rng.random(n) < 0.1] = GAP_NS * 2   # an interval that bridges two clusters
    end = ts + np.maximum(dur, 0)
    np.testing.assert_array_equal(_far_from_trace(ts, end, dur), _far_by_argsort(ts, end, dur))


def _apart_by_argsort(table, ts, end, keep, json_trace):
    """validate._processes_apart as it was (copies of the kept rows, an argsort always)."""
    from traceread.readers.validate import APART_NS, _int
    ts, end = ts[keep], end[keep]
    if len(ts) < 2:
        return None
    order = np.argsort(ts, kind="stable")
    reach = np.maximum.accumulate(end[order])
    gaps = ts[order][1:] - reach[:-1]
    k = int(np.argmax(gaps))
    gap = int(gaps[k])
    if gap <= APART_NS:
        return None
    first, then = order[:k + 1], order[k + 1:]
    spans = [int(reach[k] - ts[first].min()), int(end[then].max() - ts[then].min())]
    if gap <= max(spans):
        return None
    pid, dev = _int(table, "pid")[keep], _int(table, "device")[keep]
    on_gpu = dev >= 0
    busy = end - ts
    sides = []
    for rows, span in zip((first, then), spans):
        host, dv = rows[~on_gpu[rows]], rows[on_gpu[rows]]
        sides.append({"pids": sorted({int(x) for x in pid[host]}),
                      "devices": sorted({int(x) for x in dev[dv] if x >= 0}), "span_ns": span,
                      "gpu_ns": int(busy[dv].sum())})
    if not json_trace and set(sides[0]["pids"]) & set(sides[1]["pids"]):
        return None
    pick = "after" if (sides[1]["gpu_ns"], len(then)) > (sides[0]["gpu_ns"], len(first)) \
        else "before"
    return {"gap_ns": gap, "before": sides[0], "after": sides[1], "analysed": pick,
            "before_end_ns": int(reach[k]), "after_start_ns": int(ts[then].min())}


@pytest.mark.parametrize("seed", range(40))
def test_processes_apart_without_argsort_or_copies_says_the_same(seed):
    """validate._processes_apart takes the rows in their own order when ts ascends and the
    arrays themselves when every row is kept (the load's peak at 1 GB was its copies and
    argsort); the same result as the old code, sorted or not, all rows kept or not."""
    import pyarrow as pa
    from traceread.readers.validate import APART_NS, _processes_apart
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    two = rng.random(n) < 0.5
    ts = (rng.integers(0, 10**9, n) + np.where(two, 3 * APART_NS, 0)).astype(np.int64)
    if seed % 2 == 0:
        ts.sort()
    end = ts + rng.integers(0, 10**8, n) * (seed % 3 != 0)
    pid = np.where(two, rng.integers(1, 3, n), rng.integers(3, 5, n)).astype(np.int64)
    dev = np.where(rng.random(n) < 0.3, rng.integers(0, 2, n), -1).astype(np.int32)
    table = pa.table({"pid": pid, "device": dev})
    keep = rng.random(n) < 0.8 if seed % 4 == 1 else np.ones(n, bool)
    for json_trace in (True, False):
        assert _processes_apart(table, ts, end, keep, json_trace) == \
            _apart_by_argsort(table, ts, end, keep, json_trace)


def test_string_codes_without_a_copy_read_like_the_padded_ones():
    """validate._dict reads a single-chunk column without nulls as Arrow's own indices (no
    int64 copy); with nulls or several chunks -1 marks a null as before."""
    import pyarrow as pa
    from traceread.readers.validate import _dict
    plain = pa.chunked_array([pa.array(["a", "b", "a", "c"]).dictionary_encode()])
    codes, cats = _dict(pa.table({"k": plain}), "k")
    assert [cats[c] for c in codes] == ["a", "b", "a", "c"]
    nulls = pa.chunked_array([pa.array(["a", None]).dictionary_encode(),
                              pa.array([None, "b"]).dictionary_encode()])
    codes, cats = _dict(pa.table({"k": nulls}), "k")
    assert [cats[c] if c >= 0 else None for c in codes] == ["a", None, None, "b"]


@pytest.mark.parametrize("seed", range(20))
def test_first_of_pairs_is_the_frames_duplicated(seed):
    """steady._first_of_pairs (one int64 key, a small hash table) marks the rows the
    two-column ``duplicated`` marks; common.factorize_few gives pandas' codes and uniques."""
    from traceread.passes.common import factorize_few, first_seen
    from traceread.passes.steady import _first_of_pairs
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 500))
    pid = rng.choice([7, 123456, 2**31 - 1, -1], n).astype(np.int64)
    c = rng.integers(-1, int(rng.integers(1, 60)), n).astype(np.int16 if seed % 2 else np.int32)
    want = ~pd.DataFrame({"p": pid, "c": c}).duplicated().to_numpy()
    np.testing.assert_array_equal(_first_of_pairs(pid, c), want)
    codes, uniq = factorize_few(pid, 2)
    ref_codes, ref_uniq = pd.factorize(pid)
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_array_equal(uniq, ref_uniq)
    np.testing.assert_array_equal(first_seen(codes), ~pd.Series(pid).duplicated().to_numpy())


@pytest.mark.parametrize("seed", range(10))
def test_reaching_by_blocks_is_the_whole_search(seed, monkeypatch):
    """intervals.reaching searches a block of queries at a time: the same indices."""
    from traceread.passes import intervals
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 10**6, 50))
    iv = intervals.union(s, s + rng.integers(0, 5000, 50))
    qs = np.sort(rng.integers(0, 10**6, 3000))
    qe = qs + rng.integers(0, 3000, 3000)
    whole = intervals.reaching(iv, qs, qe)
    monkeypatch.setattr(intervals, "_QUERY_BLOCK", int(rng.integers(1, 700)))
    np.testing.assert_array_equal(intervals.reaching(iv, qs, qe), whole)
    assert whole.dtype == np.int64 and len(whole)


@pytest.mark.parametrize("seed", range(10))
def test_argmax_by_columns_is_numpys(seed):
    """attribution._argmax_columns: the column of each gap's largest category, the first of
    equal ones, as ``argmax(axis=1)`` (which copies a column-major table whole)."""
    from traceread.passes.attribution import _argmax_columns
    rng = np.random.default_rng(seed)
    split = np.asfortranarray(rng.integers(0, 4, (int(rng.integers(0, 300)), 11)))
    np.testing.assert_array_equal(_argmax_columns(split), split.argmax(axis=1))


def test_all_default_int_columns_hold_no_buffer_in_the_frame():
    """An int column at -1 on every row is a read-only stride-0 array in the frame (the
    table's shared default buffer goes with the table): same dtype and values as the Arrow
    column, the table rebuilt from the frame is the same, and a write copies."""
    rng = np.random.default_rng(3)
    tr = _random_trace(rng, 500)
    table = tr.table
    ref = table.to_pandas(split_blocks=True, ignore_metadata=True)
    ev = tr.events
    pd.testing.assert_frame_equal(ev, ref, check_exact=True)
    flat = [c for c in ev.columns if not isinstance(ev[c].dtype, pd.CategoricalDtype)
            and ev[c].to_numpy().strides == (0,)]
    assert {"seq", "msg_bytes", "flops", "group_size"} <= set(flat)
    assert "pid" not in flat and "correlation" not in flat   # real values: Arrow views
    for c in flat:
        assert ev[c].dtype == ref[c].dtype and (ev[c].to_numpy() == -1).all()
    tr2 = Trace(table, TraceMeta())
    tr2.events   # built, and the table let go
    assert tr2.table.equals(table)
    ev2 = ev.copy(deep=False)
    ev2.loc[0, "seq"] = 5
    assert ev2["seq"].iat[0] == 5 and ev["seq"].iat[0] == -1


def test_the_frames_integer_columns_are_read_only_and_a_copy_edits():
    """docs/event-table.md says so: the zero-copy columns cannot be written in place (it said
    "a write copies it", and pandas raised), a whole-column assignment works, a copy edits."""
    from pathlib import Path

    import traceread

    ev = traceread.load(Path(__file__).parent / "fixtures" / "h200" / "pageable.bad.json.gz").events
    with pytest.raises(ValueError, match="read-only"):
        ev.loc[ev.index[0], "ts"] = 0
    ev["t"] = ev["ts"] - ev["ts"].min()
    mine = ev.copy()
    mine.loc[mine.index[0], "seq"] = 5
    assert mine["seq"].iat[0] == 5 and (ev["seq"] == -1).all() and np.all(ev["t"] >= 0)
