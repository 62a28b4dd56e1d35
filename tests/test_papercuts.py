"""Small things a new user hit (issue 22): units, plurals, paths, scripts."""
from __future__ import annotations

from traceread.render.text import fmt_bytes, fmt_rate


def test_small_sizes_and_rates_keep_their_unit():
    # a 6 kB copy once printed as "6.11e-06 GB at 0.0 GB/s"
    assert fmt_bytes(6110) == "6.11 kB" and fmt_bytes(12) == "12 B"
    assert fmt_bytes(3.2e9) == "3.2 GB" and fmt_bytes(45_600_000) == "45.6 MB"
    assert fmt_rate(0.0004) == "400 kB/s" and fmt_rate(12.34) == "12.3 GB/s"


def test_one_is_singular():
    from traceread.render.report import _counts

    assert _counts({"compiles": 1, "recompiles": 1}) == "1 compile (1 recompile)"
    assert _counts({"compiles": 3, "recompiles": 0}) == "3 compiles (0 recompiles)"
