"""The verdict: which bound the GPU is under, which levers to pull, and what each saves.

One place for every rule that judges (docs/analysis.md, "Where a new lever goes"):

* ``bounds.py``   -- the causes and verdicts, their titles and what each means;
* ``scores.py``   -- each cause's score from the labelled gaps, the bound, the what-if model;
* ``levers.py``   -- the lever table: each lever's text, cost, saving model and predicates;
* ``context.py``, ``program.py`` -- what the trace already does (the predicates read it);
* ``figures.py``  -- the other figures the predicates read, from the passes' results;
* ``steady.py``   -- what the verdict says of a window that is not the steady state;
* ``decision.py`` -- ``decide``: all of the above over one analysed window.

The passes (``passes/``) compute facts from the event table and never import this package.
``analysis.py`` runs ``trace_context`` beside the other passes and then calls ``decide``.
"""
from __future__ import annotations

from .context import trace_context
from .decision import decide

__all__ = ["decide", "trace_context"]
