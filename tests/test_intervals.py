"""Interval algebra against a brute-force bitmap on random small sets."""
import numpy as np
import pytest

from traceread.passes import intervals as iv


def _bitmap(starts, ends, n=200):
    m = np.zeros(n, dtype=bool)
    for s, e in zip(starts, ends):
        m[s:e] = True
    return m


def _as_set(m):
    """Bitmap -> sorted disjoint (starts, ends)."""
    d = np.diff(np.concatenate([[0], m.astype(int), [0]]))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def _random(rng, k):
    s = rng.integers(0, 180, k)
    return s, s + rng.integers(0, 25, k)


@pytest.mark.parametrize("seed", range(40))
def test_set_ops_match_bitmap(seed):
    rng = np.random.default_rng(seed)
    a, b = _random(rng, rng.integers(0, 12)), _random(rng, rng.integers(0, 12))
    ma, mb = _bitmap(*a), _bitmap(*b)
    for got, want in [
        (iv.union(*a), ma),
        (iv.intersect(a, b), ma & mb),
        (iv.subtract(a, b), ma & ~mb),
        (iv.complement(iv.union(*a), 10, 150), ~ma & (np.arange(200) >= 10) & (np.arange(200) < 150)),
    ]:
        ws, we = _as_set(want)
        np.testing.assert_array_equal(got[0], ws)
        np.testing.assert_array_equal(got[1], we)
        assert iv.total(got) == int(want.sum())


@pytest.mark.parametrize("seed", range(20))
def test_overlap_matches_bitmap(seed):
    rng = np.random.default_rng(100 + seed)
    u = iv.union(*_random(rng, 10))
    m = _bitmap(*u)
    qs = rng.integers(0, 200, 30)
    qe = np.minimum(qs + rng.integers(0, 60, 30), 200)
    want = [int(m[s:e].sum()) for s, e in zip(qs, qe)]
    assert iv.overlap(u, qs, qe).tolist() == want


def test_touching_pieces_merge_and_empty_inputs():
    s, e = iv.union([0, 5, 10], [5, 10, 10])
    assert s.tolist() == [0] and e.tolist() == [10]
    assert iv.total(iv.union([], [])) == 0
    assert iv.total(iv.intersect(([], []), ([0], [5]))) == 0
    assert iv.overlap(iv.union([], []), [0], [9]).tolist() == [0]


@pytest.mark.parametrize("seed", range(10))
def test_union_of_sorted_starts_matches_the_sorted_path(seed):
    """Sorted starts skip the sort: the same set as from the shuffled intervals, in new
    arrays (the caller's are never handed back or changed)."""
    rng = np.random.default_rng(300 + seed)
    s = np.sort(rng.integers(0, 10_000, 2_000))
    e = s + rng.integers(0, 40, len(s))            # some empty, some overlapping
    perm = rng.permutation(len(s))
    s0, e0 = s.copy(), e.copy()
    got, want = iv.union(s, e), iv.union(s[perm], e[perm])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    got[0][:] = -1
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(e, e0)


def test_union_sees_a_descent_at_the_sortedness_check_s_block_edge():
    n = (1 << 20) + 3
    s = np.arange(n, dtype=np.int64) * 10
    s[1 << 20], s[(1 << 20) - 1] = s[(1 << 20) - 1], s[1 << 20]   # one swap across the edge
    e = s + 5
    got = iv.union(s, e)
    np.testing.assert_array_equal(got[0], np.sort(s))
    np.testing.assert_array_equal(got[1], np.sort(s) + 5)
