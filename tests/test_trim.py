"""Between passes the heap is trimmed only once the resident set grew ``TRIM_GROWTH`` since the
last trim (table.release_heap_grown, issue 42 round 11): a trim's pages are faulted in again by
the next pass, ~450 MB per analyze of the 247 MB trace when every pass trimmed."""
from __future__ import annotations

from pathlib import Path

import pytest

from traceread import load, table
from traceread.analysis import analyze

FIX = Path(__file__).parent / "fixtures"
MB = 1 << 20


@pytest.fixture
def trims(monkeypatch):
    """The trims made (their count), with the resident set read from ``rss[0]``."""
    made = []
    rss = [100 * MB]
    monkeypatch.setattr(table, "_MALLOC_TRIM", lambda pad: made.append(pad))
    monkeypatch.setattr(table, "_rss", lambda: rss[0])
    monkeypatch.setattr(table, "_TRIMMED", [0])
    monkeypatch.setattr(table, "TRIM_GROWTH", 64 * MB)
    return made, rss


def test_trims_once_grown(trims):
    made, rss = trims
    table.release_heap_grown()        # nothing trimmed yet: 100 MB over none
    assert len(made) == 1 and table._TRIMMED[0] == 100 * MB
    rss[0] = 163 * MB                 # 63 MB grown: kept
    table.release_heap_grown()
    assert len(made) == 1
    rss[0] = 164 * MB                 # 64 MB: trimmed, the new mark is the resident set after
    table.release_heap_grown()
    assert len(made) == 2 and table._TRIMMED[0] == 164 * MB


def test_a_shrunk_resident_set_is_the_new_mark(trims):
    made, rss = trims
    table.release_heap_grown()
    rss[0] = 40 * MB                  # an array's own mapping went back
    table.release_heap_grown()
    assert len(made) == 1 and table._TRIMMED[0] == 40 * MB
    rss[0] = 104 * MB                 # 64 MB over the new mark
    table.release_heap_grown()
    assert len(made) == 2


def test_every_time_where_the_resident_set_is_unknown(trims, monkeypatch):
    made, _ = trims
    monkeypatch.setattr(table, "_rss", lambda: None)
    monkeypatch.setattr(table, "_TRIMMED", [None])
    for _ in range(3):
        table.release_heap_grown()
    assert len(made) == 3


def test_release_heap_always_trims_and_sets_the_mark(trims):
    made, rss = trims
    table.release_heap()
    rss[0] = 101 * MB
    table.release_heap()              # the readers' trims: unconditional, as before
    assert len(made) == 2 and table._TRIMMED[0] == 101 * MB


def test_an_analysis_that_does_not_grow_trims_once(trims):
    """Before: every pass trimmed (~20 trims an analysis); a resident set that stays put
    now gives one (the first), and the same result as trimming after every pass."""
    made, _ = trims
    trace = load(FIX / "gpu" / "sync.bad.json.gz")   # (the reader trims as before)
    made.clear()
    table._TRIMMED[0] = 0
    a = analyze(trace).to_dict()
    assert len(made) == 1
    table.TRIM_GROWTH = 0             # every pass trims (the old behaviour)
    made.clear()
    b = analyze(trace).to_dict()
    assert len(made) > 10
    assert a == b
