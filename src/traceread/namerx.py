"""Name patterns with a literal prefilter: the same answers as ``re``, far less time on long names.

Python's ``re`` tries an unanchored alternation (``(?i)flash_?attn|fmha|...``) at every
position of the text: 0.1-1 ms per pattern on a 1 KB name, and a trace of 20k unique 1 KB
names met ~50 such searches per name (26 s; issue 23). Every pattern here is parsed once
for the literal text any match must contain (one of a set, e.g. ``{"flash", "fmha"}``);
a name holding none of them cannot match and is answered without running the pattern.
The check is a substring test on the lower-cased name, so it is a necessary condition for
case-sensitive and ``re.I`` patterns alike. Only ASCII names are prefiltered (Unicode case
folding, e.g. U+017F matching ``s`` under ``re.I``, is left to ``re``).
"""
from __future__ import annotations

import functools
import re
import re._constants as C   # noqa: N812
import re._parser as P      # noqa: N812

# one name meets ~50 patterns in a row: lower-case it once (a few names kept: a long name
# is up to 64 Ki characters)
_lower = functools.lru_cache(maxsize=256)(str.lower)   # names come pattern after pattern
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT))


def _best(cands: list) -> frozenset | None:
    """The most selective of several required sets (longest shortest literal)."""
    cands = [c for c in cands if c]
    if not cands:
        return None
    return max(cands, key=lambda s: (min(map(len, s)), -len(s)))


def _required(seq) -> frozenset | None:
    """Literals (lower case) one of which every match of ``seq`` contains; None: unknown."""
    cands, run = [], []
    for op, av in seq:
        if op is C.LITERAL and av < 128:
            run.append(chr(av).lower())
            continue
        if run:
            cands.append(frozenset(["".join(run)]))
            run = []
        if op is C.SUBPATTERN:
            cands.append(_required(av[-1]))
        elif op is getattr(C, "ATOMIC_GROUP", None):
            cands.append(_required(av))
        elif op in _REPEATS and av[0] >= 1:
            cands.append(_required(av[2]))
        elif op is C.BRANCH:
            alts = [_required(a) for a in av[1]]
            cands.append(None if any(a is None for a in alts) else frozenset().union(*alts))
    if run:
        cands.append(frozenset(["".join(run)]))
    return _best(cands)


# A name pattern reads a name's first SCAN_CHARS characters (= table.NAME_SCAN_CHARS; real
# markers sit in the first few hundred): search / match on a longer name read that prefix,
# whoever calls them. 1,800 distinct 60 KB names cost 256 us per prefilter and pattern (the
# whole name lower-cased and scanned for each literal): analyze 32 s where info took 5 s.
SCAN_CHARS = 2048


def _scanned(text):
    return text[:SCAN_CHARS] if isinstance(text, str) and len(text) > SCAN_CHARS else text


class NameRx:
    """A compiled pattern whose ``search`` / ``match`` / ``fullmatch`` skip names that lack
    every literal the pattern requires; everything else is the ``re.Pattern``'s."""

    __slots__ = ("rx", "need")

    def __init__(self, rx: re.Pattern):
        self.rx = rx
        need = _required(P.parse(rx.pattern, rx.flags))
        # a literal of one character prunes little and costs a scan
        self.need = tuple(sorted(need)) if need and min(map(len, need)) >= 2 else None

    def _cannot(self, text) -> bool:
        if self.need is None or not isinstance(text, str) or not text.isascii():
            return False
        low = _lower(text)
        for s in self.need:
            if s in low:
                return False
        return True

    def search(self, text, *a):
        if not a:
            text = _scanned(text)
        return None if not a and self._cannot(text) else self.rx.search(text, *a)

    def match(self, text, *a):
        if not a:
            text = _scanned(text)
        return None if not a and self._cannot(text) else self.rx.match(text, *a)

    def fullmatch(self, text, *a):
        return None if not a and self._cannot(text) else self.rx.fullmatch(text, *a)

    def __getattr__(self, attr):
        return getattr(self.rx, attr)

    def __repr__(self) -> str:
        return f"NameRx({self.rx!r})"


COMPILED: list[NameRx] = []     # every pattern made here (the tests hold each against ``re``)
_MADE: dict[tuple, NameRx] = {}


def compile(pattern, flags: int = 0) -> NameRx:  # noqa: A001 - mirrors re.compile
    """One NameRx per (pattern, flags): passes that build a pattern per call (a step's name)
    reuse it, so COMPILED -- and a long session's memory -- holds each pattern once."""
    rx = pattern.rx if isinstance(pattern, NameRx) else re.compile(pattern, flags)
    key = (rx.pattern, rx.flags)
    made = _MADE.get(key)
    if made is None:
        made = _MADE[key] = NameRx(rx)
        COMPILED.append(made)
    return made
