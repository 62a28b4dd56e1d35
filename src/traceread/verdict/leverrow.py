"""One lever row (``Lever``): its own module so that the lever tables (levers.py and
anatomy.py, which levers.py appends) build rows without an import circle."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Ctx = dict
Pred = Callable[[Ctx], bool]


@dataclass(frozen=True)
class Lever:
    id: str
    cause: str            # the score it saves ("gpu": GPU busy time)
    text: str | Callable[[Ctx], str]
    cost: str             # free / code / infra
    saves: str = "cause"  # the saving model: a key of SAVINGS
    when: tuple = ()      # predicates over the context; all must hold
    first: bool = False   # the trace itself points at it: before generic ones of equal saving
    after: tuple = ()     # ids that must rank before it when both are offered
    group: str = ""       # levers of other causes that are the same advice (one kept)
    busy: str = ""        # the passes/busy.py lever id whose saving it takes
    waits: str = ""       # queued levers: the kind of waited_on evidence it answers

    def words(self, c: Ctx) -> str:
        return self.text(c) if callable(self.text) else self.text
