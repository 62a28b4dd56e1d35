"""``python -m traceread.cli``: the same as the ``traceread`` script."""
from . import run

run()
