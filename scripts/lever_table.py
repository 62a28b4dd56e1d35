"""Regenerate docs/analysis.md's lever table from the lever rows (verdict/levers.py).

    PYTHONPATH=src python scripts/lever_table.py --doc [docs/analysis.md]   # rewrite it
    PYTHONPATH=src python scripts/lever_table.py --print                    # print it

tests/test_lever_doc.py fails while the table in the doc differs from the rows.
"""
from __future__ import annotations

import sys

from traceread.verdict.levers import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
