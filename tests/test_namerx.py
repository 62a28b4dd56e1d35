"""namerx: a pattern's literal prefilter never changes an answer of ``re`` (issue 23)."""
from __future__ import annotations

import gc
import random
import re

import pytest

import traceread.analysis  # noqa: F401 - loads every pass and its patterns
from conftest import FIXTURES
from traceread import TraceError, namerx
from traceread.readers import read


def _patterns() -> list:
    return [o for o in gc.get_objects() if isinstance(o, namerx.NameRx)]


def _names() -> list[str]:
    names: set = set()
    for p in sorted((FIXTURES / "kineto").glob("*.json*"))[:8]:
        try:
            col = read(p).table.column("name")
        except TraceError:      # the refusal fixtures
            continue
        names.update(str(n) for n in col.unique().to_pylist() if n)
    rnd = random.Random(5)
    out = sorted(names)
    for n in list(out)[:400]:   # case changes, non-ASCII, cut and spliced variants
        out += [n.upper(), n.swapcase(), n + "\u017f", n[: len(n) // 2], n[::-1]]
    for rx in _patterns():      # every required literal, alone and inside noise
        for lit in rx.need or ():
            out += [lit, lit.upper(), "x" * rnd.randint(0, 50) + lit + "_" * rnd.randint(0, 5)]
    return out


def test_prefilter_gives_the_answers_of_re():
    pats, names = _patterns(), _names()
    assert len(pats) > 50 and len(names) > 1000
    for rx in pats:
        plain = re.compile(rx.pattern, rx.flags)
        for n in names:
            for fn in ("search", "match", "fullmatch"):
                got, want = getattr(rx, fn)(n), getattr(plain, fn)(n)
                assert (got is None) == (want is None), (rx.pattern, n, fn)


@pytest.mark.parametrize("pattern, need", [
    (r"(?i)flash_?(?:fwd|bwd)|xmha", ("flash", "xmha")),
    (r"flash|fmha", ("lash", "mha")),   # re factors out the common "f"
    (r"^CUDAGraph|cudagraph", ("cudagraph",)),
    (r"x(?:yz)?w|a", None),          # an alternative with no literal of 2+ chars: no filter
    (r"(?:abc)+d", ("abc",)),
    (r"(?:abc)*d", None),
])
def test_required_literals(pattern, need):
    assert namerx.compile(pattern).need == need
