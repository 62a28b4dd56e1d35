"""Names a rank's trace is read by: its step ranges, and a regex over names evaluated once per
distinct name (shared by ``inputs`` and ``waits``)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# Step ranges by other names (NVTX ``step_3``, ``train_step 3``, ``iteration 3``): used only
# when a trace has no ProfilerStep#N.
STEP_FALLBACK_RE = re.compile(r"^(?:train[_ ]?)?(?:step|iteration|iter)[_ #:=]?\s*(\d+)$", re.IGNORECASE)


def name_matches(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """``rx.search`` per row, evaluated once per distinct name (names are categorical)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    hit = np.array([bool(rx.search(str(c))) for c in names.cat.categories] + [False])
    return hit[names.cat.codes.to_numpy()]


def step_rows(events: pd.DataFrame) -> pd.Series:
    """True on the step ranges: ``ProfilerStep#N`` annotations, else (none in the trace)
    annotations named like ``step_N`` / ``iteration N``."""
    ann = (events["kind"] == "annotation").to_numpy()
    for rx in (STEP_RE, STEP_FALLBACK_RE):
        hit = ann & name_matches(events["name"], rx)
        if hit.any():
            return pd.Series(hit, index=events.index)
    return pd.Series(np.zeros(len(events), bool), index=events.index)
