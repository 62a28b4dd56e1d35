"""``python -m benchmarks SUBCOMMAND ...`` from the repository root (see README.md here)."""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand: (module, its add-arguments function, its main function, one line)
COMMANDS = {
    "trace": ("trace", "add_trace_args", "trace_main",
              "steps of reading / analysing traces (read, analyze, passes, decode, stages) vs baselines"),
    "big": ("trace", "add_big_args", "big_main",
            "one big trace: orjson, HTA, both decoders, stages, the worker curve"),
    "side": ("side", "add_args", "main", "CPU of each side pass, and analyze end to end"),
    "startup": ("startup", "add_args", "main", "--help / --version and analyze of small traces"),
    "ingest": ("ingest", "add_args", "main", "Kineto ingest vs orjson.loads of the same bytes"),
    "inflate": ("inflate", "add_args", "main", "gzip inflaters vs the stdlib's"),
    "render": ("render", "add_args", "main", "HTML report and Perfetto overlay vs the analysis"),
    "kernels": ("kernels", "add_args", "main", "kernel_summary vs a pandas groupby"),
    "nsys": ("nsys", "add_args", "main",
             "nsys reader on a big synthetic export: time, peak RSS, vs pandas read_sql"),
    "batch": ("batch", "add_args", "main", "batch analysis of a corpus, 1 worker vs N"),
    "jobs": ("jobs", "add_args", "main",
             "a multi-rank job through batch: tree memory vs workers × one trace, results vs baselines"),
    "multirank": ("multirank", "add_args", "main", "multi-rank job time and memory vs rank count"),
    "gpubox": ("gpubox", "add_args", "main",
               "issue 34's tables on a many-core box: read / analyze and a batch job by workers, time-boxed"),
    "cache-hash": ("cache_hash", "add_args", "main", "a full content hash vs a cache hit"),
    "whatif": ("whatif", "add_args", "main",
               "levers' promised vs realised saving per before/after pair; replay + levers "
               "vs analyze time"),
    "names": ("names", "add_args", "main",
              "a trace of 800,000 distinct op names: info / analyze vs the old per-name path"),
    "serial": ("serial", "add_args", "main",
               "CPU by stage and the serial (Amdahl) fraction from 1 and 2 workers, big trace"),
    "cuts": ("cuts", "add_args", "main",
             "CPU of the passes the speed rounds cut (kind_in, validate, what-if pricing, "
             "marks, ...), in process, vs baselines"),
    "passmem": ("passmem", "add_args", "main",
                "analyze's memory pass by pass (RSS at entry and peak, tracemalloc peak) "
                "vs baselines"),
    "hta-compare": ("hta_compare", "add_args", "main",
                    "figures of HTA vs traceread on HTA's own test traces (no timing)"),
}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (module, add, fn, line) in COMMANDS.items():
        mod = importlib.import_module(f"benchmarks.{module}")
        p = sub.add_parser(name, help=line, description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        getattr(mod, add)(p)
        p.set_defaults(_main=(module, fn))
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    module, fn = args._main
    return getattr(importlib.import_module(f"benchmarks.{module}"), fn)(args)


if __name__ == "__main__":
    sys.exit(main())
