"""namerx: a pattern's literal prefilter never changes an answer of ``re`` (issue 23)."""
from __future__ import annotations

import random
import re

import pytest

import traceread
import traceread.analysis  # noqa: F401 - loads every pass and its patterns
from conftest import FIXTURES
from traceread import TraceError, namerx
from traceread.readers import read


def _patterns() -> list:
    # not gc.get_objects(): the CLI freezes what it imported (gc.freeze), which hides it there
    return list(namerx.COMPILED)


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


class _Counting:
    """A compiled pattern that counts the characters it is asked to scan."""

    def __init__(self, rx, seen):
        self._rx, self._seen = rx, seen

    def _scan(self, fn, text, *a):
        self._seen[0] += len(text)
        return getattr(self._rx, fn)(text, *a)

    def search(self, text, *a):
        return self._scan("search", text, *a)

    def match(self, text, *a):
        return self._scan("match", text, *a)

    def fullmatch(self, text, *a):
        return self._scan("fullmatch", text, *a)

    def __getattr__(self, attr):
        return getattr(self._rx, attr)


def test_unique_long_names_are_not_scanned_by_every_pattern(tmp_path, monkeypatch):
    """20k events with unique 1 KB names took 26 s (control: 1-2 s): ~50 patterns each
    scanned every name whole. Names holding none of a pattern's literals are skipped now:
    the patterns read under 2 KB per name in all, not ~50 KB."""
    import hardening_cases as H
    import traceread

    rnd = random.Random(7)
    n = 2000
    evs = [H.event(i, name=f"op_{i}_" + "".join(rnd.choice("0123456789_") for _ in range(1000)))
           for i in range(n)] + H.events(10)
    p = H.write(tmp_path, "uniq.json", H.doc_bytes(evs))
    seen = [0]
    for rx in _patterns():
        monkeypatch.setattr(rx, "rx", _Counting(rx.rx, seen))
    traceread.analyze(p)
    assert seen[0] < 2 * 1024 * n, seen[0] / n


def test_a_pattern_made_again_is_the_same_one():
    """verdict/program builds a pattern from each trace's step name: made anew per analysis,
    COMPILED grew without end (~2 per analysis) and the check above, run late in the suite,
    went through thousands of copies (131 s). One NameRx per (pattern, flags) now."""
    from traceread.examples import path as example

    p = example("h200_pageable_copy.json.gz")
    traceread.analysis.analyze(traceread.load(p))
    before = len(namerx.COMPILED)
    for _ in range(2):
        traceread.analysis.analyze(traceread.load(p))
    assert len(namerx.COMPILED) == before
    a, b = namerx.compile(r"^step_\d+$"), namerx.compile(r"^step_\d+$")
    assert a is b and namerx.compile(r"^step_\d+$", re.I) is not a
    assert len({(rx.pattern, rx.flags) for rx in namerx.COMPILED}) == len(namerx.COMPILED)
