"""The verdict: which bound the GPU is under, which levers to pull, and what each saves.

One place for every rule that judges (docs/analysis.md, "Where a new lever goes"), and it
judges from one window's facts record (``passes/facts.py``: ``WindowFacts``) alone:

* ``bounds.py``   -- the causes and verdicts, their titles and what each means;
* ``scores.py``   -- each cause's score from the record's cause figures, the bound, the
  what-if model;
* ``levers.py``   -- the lever table: each lever's text, cost, saving model and predicates;
* ``busy.py``     -- the busy-time and allocator levers and the GPU-use headline;
* ``parallel.py`` -- the parallelism rows of a whole job's layout;
* ``steady.py``   -- what the verdict says of a window that is not the steady state;
* ``decision.py`` -- ``decide``: all of the above over one window's facts.

The passes (``passes/``) compute the facts and never import this package; this package
imports nothing from ``passes/`` but the record (``passes.facts``) and the step replay
(``passes.replay``). ``analysis.py`` builds the record, then calls ``decide``.
"""
from __future__ import annotations

from .decision import decide, utilization_levers

__all__ = ["decide", "utilization_levers"]
