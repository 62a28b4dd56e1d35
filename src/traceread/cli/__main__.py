"""``python -m traceread.cli``: the same as the ``traceread`` script."""
from . import main

main(prog_name="traceread")
