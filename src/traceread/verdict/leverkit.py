"""The one shape of a lever (issue 39): what every lever of the table is, whatever it saves.

A ``Lever`` is one object: its ``id`` (a ``LeverId``, a ``str`` Enum: ``lever.id ==
"num_workers"`` holds), the ``cause`` whose score it saves, its ``text`` (or a function of
the lever context), its ``cost``, its saving model (``saves``: a key of
``levers.SAVING_MODELS``, each a ``SavingModel`` value with its documented assumptions;
where the window was replayed the what-if model of ``verdict/whatif.py`` prices it and the
saving model is the bound it falls back to), its preconditions (``when``: predicates over
the lever context, all must hold) and its ``doc`` (what, why, example, the saving model and
its assumptions). Busy-time, memory, steady-state and job levers are rows of the same
table (verdict/levers.py).

A lever that does not fit is not silently dropped: ``refusal`` returns a ``Withdrawn``
value -- the lever, the precondition that failed, its reason and the facts it read --
never a message whose first words are matched. This module holds no lever: levers.py (and
the modules it appends, verdict/anatomy.py) build the rows; it imports nothing from them,
so a module of rows can import the shape from here without an import circle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

COST_ORDER = {"free": 0, "code": 1, "infra": 2}

Ctx = dict
Pred = Callable[[Ctx], bool]

# The LeverId enum is built by levers.py from every row (its own and those it appends);
# once registered, a Lever built with a plain str id gets the enum member.
_ID_TYPE: list = []


def register_ids(enum_type) -> None:
    """Make ``enum_type`` the id type new ``Lever`` rows are coerced to."""
    _ID_TYPE[:] = [enum_type]


def lever_id(value: str):
    """``value`` as a LeverId member when the enum knows it, else the str itself."""
    if _ID_TYPE:
        try:
            return _ID_TYPE[0](value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class LeverDoc:
    """What a lever asks for, why (its preconditions), a trace where it applies, and what
    its saving model assumes. Empty fields are filled from the row (``Lever.describe``)."""

    what: str = ""
    why: str = ""
    example: str = ""
    saving: str = ""
    assumptions: str = ""


@dataclass(frozen=True)
class Withdrawn:
    """A lever that does not fit this program: which precondition failed, and why."""

    id: str
    cause: str
    reason: str               # the failed precondition's own first doc line
    precondition: str = ""    # its name
    facts: tuple = ()         # the context keys it read

    def to_dict(self) -> dict:
        return {"id": str(self.id), "cause": self.cause, "reason": self.reason,
                "precondition": self.precondition, "facts": list(self.facts)}


@dataclass(frozen=True)
class SavingModel:
    """How a lever's saving is priced when no replay prices it: ``price(lever, cause_ns,
    parts, copy, ctx) -> ns | None``; ``cause_priced``: it is a share of its cause's score,
    so the cause must be worth fixing for the lever to be offered."""

    id: str
    doc: str
    price: Callable[..., Any]
    cause_priced: bool = False
    assumptions: str = ""


@dataclass(frozen=True)
class Lever:
    id: str
    cause: str            # the score it saves ("gpu": GPU busy time)
    text: str | Callable[[Ctx], str]
    cost: str             # free / code / infra
    saves: str = "cause"  # the saving model: a key of levers.SAVING_MODELS
    when: tuple = ()      # predicates over the context; all must hold
    first: bool = False   # the trace itself points at it: before generic ones of equal saving
    after: tuple = ()     # ids that must rank before it when both are offered
    group: str = ""       # levers of other causes that are the same advice (one kept)
    busy: str = ""        # the passes/busy.py lever id whose saving it takes
    waits: str = ""       # queued levers: the kind of waited_on evidence it answers
    doc: LeverDoc = field(default_factory=LeverDoc)

    def __post_init__(self):
        object.__setattr__(self, "id", lever_id(str(self.id)))
        if isinstance(self.doc, str):   # a plain sentence is the doc's "what"
            object.__setattr__(self, "doc", LeverDoc(what=self.doc))

    def words(self, c: Ctx) -> str:
        return self.text(c) if callable(self.text) else self.text

    def refusal(self, c: Ctx) -> Withdrawn | None:
        """The first precondition that does not hold, as a value; None: all hold."""
        for p in self.when:
            r = Reading(c)
            if not p(r):
                return Withdrawn(self.id, self.cause, first_line(p.__doc__) or p.__name__,
                                 p.__name__, tuple(r.read))
        return None

    def holds(self, c: Ctx) -> bool:
        return all(p(c) for p in self.when)


class Reading(dict):
    """The lever context, remembering which keys were read, in order."""

    def __init__(self, base: dict):
        super().__init__(base)
        self.read: list[str] = []

    def _saw(self, key) -> None:
        if key not in self.read:
            self.read.append(key)

    def get(self, key, default=None):
        self._saw(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._saw(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self._saw(key)
        return super().__contains__(key)


def first_line(doc: str | None) -> str:
    """A docstring's first sentence, on one line."""
    text = " ".join((doc or "").split())
    cut = text.find(". ")
    return text if cut < 0 else text[:cut + 1]


__all__ = ["COST_ORDER", "Ctx", "Lever", "LeverDoc", "Pred", "Reading", "SavingModel", "Withdrawn",
           "first_line", "lever_id", "register_ids"]
