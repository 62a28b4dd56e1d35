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

import numpy as np
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


# ------------------------------------------------------------------ names classified once
# A pass that asks "which of this trace's names match pattern P" per name costs one Python
# call per distinct name and pattern: a trace of 800,000 distinct names met ~60 patterns
# (57 s; issues 40, 42). A NameTable answers per pattern for all names at once: one
# vectorised scan (RE2 in Arrow, linear in the text whatever the number of literals) marks
# the names that hold a literal of *any* known pattern or are not ASCII ("live"); a
# pattern's answer is then its own literals over the live names (vectorised again) and
# the real ``re`` pattern only on the few names left. Answers are exactly NameRx's: the
# literal test is a necessary condition and every candidate meets the real pattern.

def _re2_alternation(literals) -> str:
    """An RE2 pattern (case-insensitive) matching any of ``literals`` (ASCII) as text."""
    esc = ("".join(c if c.isalnum() else f"\\x{{{ord(c):x}}}" for c in lit)
           for lit in sorted(literals))
    return "(?i)" + "|".join(esc)


def _holding(arr, literals: list) -> np.ndarray:
    """Per string of ``arr``: it holds one of ``literals`` (ASCII case-insensitively). One
    RE2 scan; a set too big for one RE2 program is split in two."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        got = pc.match_substring_regex(arr, _re2_alternation(literals))
        return got.to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        if len(literals) < 2:
            raise
        half = len(literals) // 2
        return _holding(arr, literals[:half]) | _holding(arr, literals[half:])


class NameTable:
    """Which patterns each of a trace's distinct names matches; one instance per set of
    names (a categorical column's categories), shared by every pass.

    ``hits(rx, how)`` is a bool array with one slot per name and a last slot (False) for
    a missing name (categorical code -1): ``hits(rx)[codes]`` is the row mask. ``how`` is
    ``"search"``, ``"match"`` or ``"fullmatch"`` with NameRx's meaning (search and match
    read the first SCAN_CHARS characters). Each (pattern, how) is computed once."""

    def __init__(self, names):
        self._arr = self._arrow(names)
        if isinstance(names, list):
            self.names = names
        elif self._arr is not None:
            self.names = self._arr.to_pylist()
        else:
            self.names = [str(n) for n in names]
        self._hits: dict[tuple, np.ndarray] = {}
        self._lits: frozenset = frozenset()
        self._live = None           # indices of live names (see above)
        self._other = None          # indices of names Arrow cannot prefilter (not ASCII)

    def __len__(self) -> int:
        return len(self.names)

    @staticmethod
    def _arrow(names):
        import pyarrow as pa

        try:
            arr = names if isinstance(names, pa.Array) else pa.array(names, pa.large_string())
        except (pa.ArrowException, UnicodeError, TypeError):
            return None      # a lone surrogate (not UTF-8): every name goes to ``re``
        return arr

    def _non_ascii(self) -> np.ndarray:
        import pyarrow.compute as pc

        if self._other is None:
            ok = pc.string_is_ascii(self._arr).to_numpy(zero_copy_only=False)
            self._other = np.flatnonzero(~ok)
        return self._other

    def _with(self, literals, idx=None) -> np.ndarray:
        """Indices (of ``idx``, default all names) holding one of ``literals``, plus every
        non-ASCII one among them."""
        import pyarrow.compute as pc

        arr = self._arr if idx is None else self._arr.take(idx)
        found = np.flatnonzero(_holding(arr, sorted(literals)))
        found = found if idx is None else idx[found]
        if not len(self._non_ascii()):
            return found
        # a mask, not np.union1d: numpy 2.4's hashed np.unique takes ~3 us per distinct value
        m = np.zeros(len(self.names), bool)
        m[found] = True
        m[self._non_ascii()] = True
        return np.flatnonzero(m)

    def _candidates(self, rx: NameRx) -> np.ndarray | None:
        """Indices of the names ``rx`` may match; None: every name."""
        if rx.need is None or self._arr is None:
            return None
        if self._live is None:
            # one scan for the literals of every pattern made so far (and this one)
            self._lits = frozenset(l for r in COMPILED if r.need for l in r.need) | set(rx.need)
            self._live = self._with(self._lits)
        new = [n for n in rx.need if not self._covered(n)]
        if new:   # a pattern made later (a step's own name): its new literals only
            self._lits |= set(new)
            m = np.zeros(len(self.names), bool)
            m[self._live] = True
            m[self._with(new)] = True
            self._live = np.flatnonzero(m)
        return self._with(rx.need, self._live) if len(self._live) else self._live

    def _covered(self, lit: str) -> bool:
        """Every name holding ``lit`` is live: it holds a known literal (one inside ``lit``)."""
        return lit in self._lits or any(k in lit for k in self._lits)

    def objects(self) -> np.ndarray:
        """The names as a numpy object array (built once): gathers of many names."""
        def make():
            out = np.empty(len(self.names), dtype=object)
            out[:] = self.names
            return out
        return self.derived("objects", make)

    def contains(self, text: str) -> np.ndarray:
        """Names holding ``text`` (case-sensitive), with the null slot (False)."""
        def make():
            if self._arr is None:
                return np.array([text in n for n in self.names] + [False], bool)
            import pyarrow.compute as pc

            got = pc.match_substring(self._arr, text).to_numpy(zero_copy_only=False)
            return np.append(got, False)
        return self.derived(("contains", text), make)

    def equals(self, values) -> np.ndarray:
        """Names equal to one of ``values``, with the null slot (False)."""
        values = frozenset(values)

        def make():
            if not values:
                return np.zeros(len(self.names) + 1, bool)
            if self._arr is None:
                return np.array([n in values for n in self.names] + [False], bool)
            import pyarrow as pa
            import pyarrow.compute as pc

            vs = pa.array(sorted(values), self._arr.type)
            got = pc.is_in(self._arr, value_set=vs).to_numpy(zero_copy_only=False)
            return np.append(got, False)
        return self.derived(("equals", values), make)

    def bare(self) -> np.ndarray:
        """Names that are their own base op name (``name.split(",")[0].strip()`` of their
        first SCAN_CHARS is the name): ASCII, no longer than SCAN_CHARS, no comma, no
        white space at either end. Null slot False."""
        def make():
            if self._arr is None:
                return np.array([n.isascii() and len(n) <= SCAN_CHARS
                                 and n.split(",", 1)[0].strip() == n for n in self.names]
                                + [False], bool)
            import pyarrow.compute as pc

            ok = pc.string_is_ascii(self._arr).to_numpy(zero_copy_only=False)
            ok &= pc.binary_length(self._arr).to_numpy(zero_copy_only=False) <= SCAN_CHARS
            ok &= ~pc.match_substring(self._arr, ",").to_numpy(zero_copy_only=False)
            ws = r"[\x{9}-\x{d}\x{1c}-\x{20}]"   # str.isspace() in ASCII
            edge = pc.match_substring_regex(self._arr, f"^{ws}|{ws}$")
            ok &= ~edge.to_numpy(zero_copy_only=False)
            return np.append(ok, False)
        return self.derived("bare", make)

    def derived(self, key, make):
        """A class of names computed once per table by ``make()`` (a pass's own class built
        from patterns and literals: e.g. compile phases); cached under ``key``."""
        out = self._hits.get(key)
        if out is None:
            out = self._hits[key] = make()
        return out

    def may(self, rx) -> np.ndarray:
        """Names ``rx`` may match anywhere in them (any part of a name, e.g. its base op
        name, included): a superset of every answer of ``hits``; null slot False."""
        rx = compile(rx)

        def make():
            out = np.zeros(len(self.names) + 1, bool)
            cand = self._candidates(rx)
            out[slice(None, -1) if cand is None else cand] = True
            return out
        return self.derived(("may", rx.rx.pattern, rx.rx.flags), make)

    def hits(self, rx, how: str = "search") -> np.ndarray:
        # a plain re.Pattern reads whole names, a NameRx the first SCAN_CHARS (search, match)
        cut = isinstance(rx, NameRx) and how != "fullmatch"
        rx = compile(rx)
        key = (rx.rx.pattern, rx.rx.flags, how, cut)
        out = self._hits.get(key)
        if out is None:
            out = np.zeros(len(self.names) + 1, bool)
            cand = self._candidates(rx)
            idx = range(len(self.names)) if cand is None else cand.tolist()
            test = getattr(rx.rx, how)
            names = self.names
            hit = [i for i in idx if test(_scanned(names[i]) if cut else names[i])]
            out[hit] = True
            self._hits[key] = out
        return out


class NameList(list):
    """Distinct names (a plain list of str) that know their slots in a NameTable, so the
    helpers below read the table instead of testing each name."""

    def __init__(self, table: NameTable, idx):
        self.idx = np.asarray(idx, np.int64)
        self.table = table
        super().__init__(table.objects()[self.idx].tolist())

    def mask(self, rx, how: str = "search") -> np.ndarray:
        return self.table.hits(rx, how)[self.idx]


def where(rx, names, how: str = "search") -> list[str]:
    """The names (in order) that ``rx`` matches (``how``: search / match / fullmatch; a
    plain ``re`` pattern as its NameRx: the first SCAN_CHARS of a name)."""
    rx = compile(rx)
    if isinstance(names, NameList):
        return [names[i] for i in np.flatnonzero(names.mask(rx, how)).tolist()]
    test = getattr(compile(rx), how)
    return [n for n in names if test(n)]


def first(rx, names, how: str = "search") -> str | None:
    """The first of ``names`` that ``rx`` matches; None when none does (see ``where``)."""
    rx = compile(rx)
    if isinstance(names, NameList):
        hit = np.flatnonzero(names.mask(rx, how))
        return names[int(hit[0])] if len(hit) else None
    test = getattr(compile(rx), how)
    return next((n for n in names if test(n)), None)


def any_of(rx, names, how: str = "search") -> bool:
    return first(rx, names, how) is not None
