"""analyze() time against the load time of the same trace, measured in the same run.

Default trace: HTA's df_index_resolver (53.7 MB of JSON, 216k events), the
brief's yardstick: analysing must take well under loading. Usage:
python scripts/bench_analyze.py [TRACE ...]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from traceread import load
from traceread.analysis import analyze

DEFAULT = (Path(__file__).resolve().parents[2] / "shared" / "corpus" /
           "facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/"
           "df_index_resolver.json.gz")


def main() -> None:
    paths = sys.argv[1:] or [str(DEFAULT)]
    for p in paths:
        t0 = time.perf_counter()
        trace = load(p)
        _ = trace.events  # the DataFrame conversion is part of loading
        t1 = time.perf_counter()
        a = analyze(trace)
        t2 = time.perf_counter()
        print(f"{p}\n  {len(trace):,} events, verdict {a.verdict['bound']}")
        print(f"  load (baseline): {t1 - t0:.2f} s")
        print(f"  analyze:         {t2 - t1:.2f} s")
        print(f"  ratio analyze / load: {(t2 - t1) / (t1 - t0):.2f}")


if __name__ == "__main__":
    main()
