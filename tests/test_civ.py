"""The interval algebra in C (passes/_civ.c) against its numpy reference (passes/intervals.py
``*_py``): the same integers, dtypes and lengths, on crafted edge cases, on random sets
(overlapping, touching, empty and inverted pieces, unsorted) and on every call the analysis
makes of real traces (issue 42, round 11)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from traceread.analysis import analyze
from traceread.passes import intervals as iv

from conftest import corpus_or_skip

FIX = Path(__file__).parent / "fixtures"
civ = pytest.mark.skipif(iv._civ is None, reason="the C interval algebra is not built "
                         "(python setup.py build_ext --inplace)")
I64 = np.iinfo(np.int64)


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _pairs(a, b):
    """Each C-backed function and its reference on sets a (raw) and b (raw): their results."""
    s, e = a
    qs, qe = b
    U, Q = iv.union_py(s, e), iv.union_py(qs, qe)
    lab = (np.arange(len(U[0])) * 7 - 3, np.arange(len(U[0])).astype(np.int32))
    out = [("union", iv.union(s, e), iv.union_py(s, e))]
    for mode in (0, 1):
        out.append((f"sweep{mode}", iv._sweep(a, b, mode), iv._sweep_py(a, b, iv._WANT[mode])))
    out.append(("intersect", iv.intersect(a, b), iv._sweep_py(a, b, iv._WANT[0])))
    out.append(("subtract", iv.subtract(a, b), iv._sweep_py(a, b, iv._WANT[1])))
    for B in (Q, (qs, qe)):
        out.append(("intersect_sorted", iv.intersect_sorted(U + lab, B),
                    iv.intersect_sorted_py(U + lab, B)))
        out.append(("reaching", iv.reaching(U, *B), iv.reaching_py(U, *B)))
        out.append(("overlap_hits", iv.overlap_hits(U, *B), iv.overlap_hits_py(U, *B)))
    return out


def _check(a, b):
    for name, got, want in _pairs(a, b):
        assert _same(got, want), (name, a, b, got, want)


def _arr(*x):
    return np.array(x, np.int64)


EDGE = [
    ((_arr(), _arr()), (_arr(), _arr())),                          # nothing
    ((_arr(5), _arr(5)), (_arr(1), _arr(9))),                      # an empty piece
    ((_arr(9), _arr(1)), (_arr(0), _arr(20))),                     # an inverted piece
    ((_arr(0, 10), _arr(10, 20)), (_arr(10), _arr(11))),           # touching pieces
    ((_arr(0, 0, 0), _arr(5, 3, 9)), (_arr(3, 3), _arr(3, 4))),    # equal starts
    ((_arr(0, 10, 5), _arr(4, 12, 7)), (_arr(7, 2), _arr(9, 6))),  # unsorted
    ((_arr(0, 2), _arr(10, 4)), (_arr(1, 5), _arr(3, 8))),         # nested (ends unsorted)
    ((_arr(I64.min + 1, 0), _arr(-5, I64.max)), (_arr(I64.min + 2, 7), _arr(3, I64.max - 1))),
    ((_arr(-2 ** 62, 2 ** 62), _arr(2 ** 62, 2 ** 62 + 5)), (_arr(0), _arr(1))),
    ((_arr(3, 1, 2), _arr(3, 1, 2)), (_arr(1, 2, 3), _arr(1, 2, 3))),  # all empty
]


@civ
@pytest.mark.parametrize("case", range(len(EDGE)))
def test_edge_cases(case):
    a, b = EDGE[case]
    _check(a, b)
    _check(b, a)


@civ
@pytest.mark.parametrize("seed", range(8))
def test_random_sets(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        span = int(rng.choice([4, 40, 1000, 10 ** 9]))
        sets = []
        for _side in range(2):
            n = int(rng.integers(0, 50))
            s = rng.integers(0, span, n)
            e = s + rng.integers(-3, span // 3 + 2, n)
            if rng.random() < 0.6:   # the usual input: in start order
                o = np.argsort(s, kind="stable")
                s, e = s[o], e[o]
            sets.append((s.astype(np.int64), e.astype(np.int64)))
        _check(*sets)


@civ
def test_other_inputs_take_the_numpy_rules():
    """A non-int64 array, a strided view or a list: the same answer either way (the C code
    reads contiguous int64 only; other inputs are converted, or answered by numpy)."""
    s = np.arange(0, 40, 2, dtype=np.int64)
    e = s + 3
    strided = (np.repeat(s, 2)[::2], np.repeat(e, 2)[::2])
    assert _same(iv.union(*strided), iv.union_py(s, e))
    assert _same(iv.union(list(s), list(e)), iv.union_py(s, e))
    U = iv.union_py(s, e)
    q32 = (s.astype(np.int32)[::3], (s + 1).astype(np.int32)[::3])
    assert _same(iv.reaching(U, *q32), iv.reaching_py(U, *q32))
    U32 = (U[0].astype(np.int32), U[1].astype(np.int32))
    assert _same(iv.intersect_sorted(U32, (s, e)), iv.intersect_sorted_py(U32, (s, e)))
    assert _same(iv.overlap_hits(U32, s, e), iv.overlap_hits_py(U32, s, e))


@civ
def test_forced_numpy_path(monkeypatch):
    """TRACEREAD_INTERVALS=python: the numpy code even where the C code is built."""
    calls = []
    monkeypatch.setattr(iv, "_civ", type("Spy", (), {"__getattr__": lambda self, n:
                                                     calls.append(n) or getattr(CIV, n)})())
    iv.union(_arr(0, 5), _arr(3, 9))
    assert calls == ["union"]
    monkeypatch.setenv(iv.IV_ENV, "python")
    iv.union(_arr(0, 5), _arr(3, 9))
    iv.intersect((_arr(0), _arr(5)), (_arr(1), _arr(3)))
    assert calls == ["union"]


CIV = iv._civ


def _recorded_calls(path: Path) -> list:
    """(function name, args) of every call analyze() makes of the C-backed functions."""
    calls = []
    names = ("union", "_sweep", "intersect_sorted", "reaching", "overlap_hits")
    saved = {n: getattr(iv, n) for n in names}

    def spy(name):
        def f(*args):
            calls.append((name, args))
            return saved[name](*args)
        return f
    try:
        for n in names:
            setattr(iv, n, spy(n))
        analyze(path)
    finally:
        for n, f in saved.items():
            setattr(iv, n, f)
    return calls


REFERENCE = {"union": iv.union_py, "intersect_sorted": iv.intersect_sorted_py,
             "reaching": iv.reaching_py, "overlap_hits": iv.overlap_hits_py,
             "_sweep": lambda a, b, mode: iv._sweep_py(a, b, iv._WANT[mode])}


def _replayed(path: Path) -> int:
    calls = _recorded_calls(path)
    for name, args in calls:
        got, want = getattr(iv, name)(*args), REFERENCE[name](*args)
        assert _same(got, want), (path.name, name)
    return len(calls)


@civ
@pytest.mark.parametrize("path", [FIX / "h200" / "xformer.bad.json.gz",
                                  FIX / "gpu" / "sync.bad.json.gz",
                                  FIX / "gpu" / "copy.bad.json.gz"], ids=lambda p: p.name)
def test_every_call_of_an_analysis(path):
    assert _replayed(path) > 50


def _corpus_gpu_traces(lo: int, hi: int) -> list[Path]:
    corpus = corpus_or_skip()
    rows = [line.split("\t") for line in (corpus / "MANIFEST.tsv").read_text().splitlines()[1:]]
    return [corpus / r[0] for r in rows if len(r) > 8 and r[6].startswith("kineto")
            and r[8] not in ("", "0") and lo < int(r[5]) <= hi and (corpus / r[0]).is_file()]


@civ
@pytest.mark.corpus
def test_every_call_of_small_corpus_analyses():
    """The six largest of the corpus's GPU traces up to 60 KB (compressed): every interval
    call of their analysis (~2 s)."""
    picked = sorted(_corpus_gpu_traces(0, 60_000), key=lambda p: -p.stat().st_size)[:6]
    assert len(picked) == 6
    assert sum(_replayed(p) for p in picked) > 300


@civ
@pytest.mark.corpus
@pytest.mark.slow
def test_every_call_of_corpus_analyses():
    """Every GPU trace of the corpus up to 4 MB (~90 s)."""
    picked = _corpus_gpu_traces(0, 4_000_000)
    assert len(picked) >= 5
    assert sum(_replayed(p) for p in picked) > 1000


@civ
@pytest.mark.parametrize("path", [FIX / "h200" / "xformer.bad.json.gz",
                                  FIX / "gpu" / "data.bad.json.gz"], ids=lambda p: p.name)
def test_analysis_equal_either_way(path, monkeypatch):
    c = analyze(path).to_dict()
    monkeypatch.setenv(iv.IV_ENV, "python")
    assert analyze(path).to_dict() == c
    assert os.environ[iv.IV_ENV] == "python"
