"""Which ``nsys stats`` version the report commands imitate, and what differs.

Checked byte for byte against two versions (``docs/nsys.md``):

* ``2023.4`` (2023.4.4): ``round(x, 1)`` of the SQLite it bundles (3.40-era)
  computes ``floor(x * 10 + 0.5) / 10``, so an average of 2486.95 -- stored as
  the double 2486.94999... -- prints as 2487.0; ranges of the default NVTX
  domain are shown bare (``step_0``).
* ``2025.3`` (2025.3.2): newer SQLite (3.43+) rounds the exact value of the
  double, halves away from zero, so the same average prints as 2486.9; ranges of
  the default NVTX domain get an empty domain prefix (``:step_0``).

Only the *stats* version matters (the same export gives either output), but
nsys exports and reports with one installation, so ``auto`` takes the version
that wrote the export; traces without one (Kineto, old exports) get ``2023.4``.
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from ..table import Trace

STATS_VERSIONS = ("2023.4", "2025.3")
DEFAULT_VERSION = "2023.4"
AUTO = "auto"
# First release taken to behave as 2025.3 (only 2025.3.2 is checked). Not 2025.1: its nvtx_sum
# printed an nvFuser export's default-domain ranges bare, as 2023.4 does (issue 22).
_NEWER_FROM = (2025, 3)
_YEAR_MINOR = re.compile(r"(\d{4})\.(\d+)")


def stats_version(trace=None, requested: str | None = AUTO) -> str:
    """The version to imitate: ``requested`` unless it is ``auto``/None, else the
    export's (``meta.extra["nsys_version"]``) mapped to a checked one."""
    if requested and requested != AUTO:
        if requested not in STATS_VERSIONS:
            raise ValueError(f"nsys stats version must be one of {', '.join(STATS_VERSIONS)}")
        return requested
    extra = trace.meta.extra if isinstance(trace, Trace) else {}
    m = _YEAR_MINOR.match(str(extra.get("nsys_version") or ""))
    if m and (int(m.group(1)), int(m.group(2))) >= _NEWER_FROM:
        return "2025.3"
    return DEFAULT_VERSION


def round1(x, version: str = DEFAULT_VERSION) -> np.ndarray:
    """SQLite's ``round(x, 1)`` as the given nsys version's SQLite computes it."""
    a = np.asarray(x, dtype=np.float64)
    fast = np.sign(a) * np.floor(np.abs(a) * 10.0 + 0.5) / 10.0
    if version == "2023.4":
        return fast
    # The float formula is the exact rounding except where |a|*10 lies (within its
    # rounding error) on a half, or is too large for it: those go through Decimal.
    a10 = np.abs(a) * 10.0
    with np.errstate(invalid="ignore"):
        near = np.abs(a10 - np.floor(a10) - 0.5) <= 1e-9 * np.maximum(1.0, a10)
        near |= a10 >= 2.0 ** 50
    near &= np.isfinite(a)
    out = np.array(fast, dtype=np.float64)
    out[near] = [_round_exact(v) for v in a[near].tolist()]
    return out


_TENTH = Decimal("0.1")


def _round_exact(v: float) -> float:
    """Round the double's exact decimal value to 0.1, halves away from zero."""
    if abs(v) >= 2.0 ** 52:  # no fraction left to round (SQLite checks the same)
        return v
    return float(Decimal(v).quantize(_TENTH, rounding=ROUND_HALF_UP))


def nvtx_default_prefix(version: str) -> str:
    """What precedes a default-domain range name in ``nvtx_sum``."""
    return "" if version == "2023.4" else ":"
