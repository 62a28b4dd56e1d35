"""The facts passes' fast paths give what the slow ones gave (issue 42): ``Stacks.names``
against pandas' take + astype(str), on real traces and on a name column with a missing
name."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceread import load
from traceread.passes import factkit

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("path", [FIX / "h200" / "xformer.bad.json.gz",
                                  FIX / "gpu" / "sync.bad.json.gz"], ids=lambda p: p.name)
def test_stack_names_equal_pandas_take(path):
    ev = load(path).events
    st = factkit.Stacks(ev)
    rng = np.random.default_rng(0)
    for k in (0, 1, 7, 200):
        rows = rng.integers(0, len(ev), k)
        assert st.names(rows) == (ev["name"].take(rows).astype(str).tolist() if k else [])
    assert st._name_codes is not False   # the codes path was the one compared


@pytest.mark.parametrize("col", [
    pd.Categorical(["a", None, "b", "a"]),
    pd.Series(["a", None, "b", "a"], dtype=object),
    pd.Categorical([1, 2, None, 1])], ids=["categorical", "object", "int categories"])
def test_stack_names_with_a_missing_name(col):
    ev = pd.DataFrame({"name": col, "ts": [0, 1, 2, 3], "dur": [1, 1, 1, 1],
                       "kind": pd.Categorical(["cpu_op"] * 4), "pid": [1] * 4, "tid": [1] * 4})
    st = factkit.Stacks(ev)
    rows = np.array([1, 0, 2, 3, 1])
    assert st.names(rows) == ev["name"].take(rows).astype(str).tolist()


@pytest.mark.parametrize("col", [
    pd.Categorical(["a", None, "b", "a"]),
    pd.Series(["a", None, "b", "a"], dtype=object)], ids=["categorical", "object"])
def test_name_at_is_iat(col):
    ev = pd.DataFrame({"name": col})
    at = factkit.name_at(ev)
    for r in range(4):
        x, y = at(r), ev["name"].iat[r]
        assert x is y or x == y
        assert str(x) == str(y)


def test_name_at_on_a_real_trace():
    ev = load(FIX / "gpu" / "sync.bad.json.gz").events
    at = factkit.name_at(ev)
    assert all(at(r) == ev["name"].iat[r] for r in range(0, len(ev), 97))
