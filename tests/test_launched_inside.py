"""``common.launched_inside``: one rule for 'a frame inside which other threads launch is a
wait' -- the culprits' frames (others launch more than the thread itself) and the replay's
movable host work (any other thread's launch)."""
import numpy as np

from traceread.passes import culprits
from traceread.passes.common import launched_inside


def test_without_own_any_other_launch_inside_is_a_wait():
    s, e = np.array([0, 10, 20]), np.array([10, 20, 30])
    other = np.array([5, 30])          # 30 is the end of the last row: outside [20, 30)
    assert launched_inside(s, e, other).tolist() == [True, False, False]
    assert launched_inside(s, e, np.zeros(0, np.int64)).tolist() == [False] * 3


def test_with_own_the_others_must_launch_more():
    s, e = np.array([0, 100]), np.array([100, 200])
    other = np.array([10, 20, 150])
    own = np.array([30, 110, 120])
    # row 0: 2 other launches to 1 own -> a wait; row 1: 1 to 2 -> its own work
    assert launched_inside(s, e, other, own).tolist() == [True, False]


def test_matches_the_culprits_rule():
    """culprits._while_others_launch (not switched yet: another helper owns culprits.py)
    reads the same as launched_inside with the thread's own launches."""
    rng = np.random.default_rng(7)
    key = rng.integers(0, 3, 400)
    lts = np.sort(rng.integers(0, 10_000, 400))
    s = rng.integers(0, 10_000, 200)
    e = s + rng.integers(0, 800, 200)
    for t in range(3):
        want = culprits._while_others_launch((key, lts), t, s, e)
        got = launched_inside(s, e, lts[key != t], lts[key == t])
        assert (want == got).all()
