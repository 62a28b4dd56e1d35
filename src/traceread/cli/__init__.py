"""The ``traceread`` command line: a thin shell over the Python API.

Each subcommand lives in its own module and registers itself on ``main``. The
modules are imported only when their command runs (or shows its own help), so
``traceread --help`` and ``--version`` start without pandas / pyarrow / numpy.
"""
from __future__ import annotations

import gc
import os
import sys
from importlib import import_module

import click

from ..errors import TraceError

# numpy asks the kernel for transparent huge pages on every array >= 4 MB; where THP
# defrag is "madvise" (the kernel's default) such a fault may compact memory on the
# spot: ~0.85 s of system time in a 550 MB analyze (docs/performance.md). numpy reads
# this at import, which the subcommands do later; a value the user set wins.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
# numpy's OpenBLAS starts a thread per core at import and each spins ~0.1 s of CPU
# before it sleeps; traceread makes no BLAS call (measured: 0.07-0.1 CPU-s per run
# on 2 cores, more on big boxes). A value the user set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Arrow's default pool (mimalloc) keeps the pages of the buffers it frees: at the peak of
# `analyze` of a 252 k-kernel nsys export it held ~150 MB more than it had allocated
# (1,166 vs 1,015 MB with the system allocator), 13 MB at a 1 GB Kineto trace; same CPU.
# pyarrow reads this when it first allocates, after this. A value the user set wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


# Command -> (module in this package, the help's first paragraph for the command
# list). tests/test_cli_startup.py checks the text against the real commands.
_COMMANDS = {
    "info": ("info", "Format, version, rank, devices, event counts by kind and time span."),
    "export": ("export",
        "Write the event table of TRACE to a Parquet or CSV file (by OUT's suffix)."),
    "analyze": ("analyze",
        "Why is the GPU underfed? Verdict, levers and evidence for each TRACE."),
    "steps": ("analyze", "Per-step host time, GPU busy/idle and idle causes for each TRACE."),
    "idle": ("analyze",
        "Every GPU idle gap of each TRACE with its step, drain cause and host activity."),
    "kernels": ("nsys_stats", "GPU kernel summary of TRACE (nsys stats cuda_gpu_kern_sum)."),
    "api": ("nsys_stats", "CUDA API summary of TRACE (nsys stats cuda_api_sum)."),
    "gaps": ("nsys_stats", "GPU idle gaps of TRACE per process and device (nsys stats gpu_gaps)."),
    "nvtx": ("nsys_stats",
        "NVTX range summary of TRACE (nsys stats nvtx_sum; Kineto: user annotations)."),
    "memcpy": ("nsys_stats",
        "GPU memcpy/memset summary of TRACE by operation (nsys stats cuda_gpu_mem_*_sum)."),
    "osrt": ("nsys_stats",
        "OS runtime call summary of TRACE (nsys stats osrt_sum; nsys exports only)."),
    "util": ("nsys_stats",
        "Low GPU time-utilisation regions of TRACE (nsys stats gpu_time_util)."),
    "batch": ("batch", "Analyse every trace under DIRECTORY (recursively, found by content)."),
    "nccl": ("comm",
        "Communication vs compute overlap and per-collective bandwidth for each TRACE."),
    "compile": ("comm", (
        "torch.compile: compiles, recompiles per frame and step, compile time, GPU idle while "
        "compiling.")),
    "overlay": ("overlay", (
        "TRACE plus tracks for ui.perfetto.dev: idle gaps by cause, steps, exposed comm, "
        "compiles.")),
    "diff": ("diff", "Compare two traces (or two directories of traces): did the fix work?"),
    "flame": ("flame", "Flame graph of the host time inside GPU-idle gaps of TRACE (collapsed "
              "stacks)."),
}


def _import_frozen(module: str) -> None:
    """Import ``module`` (pandas, numpy, pyarrow and the passes behind it) with the cyclic
    GC off, then freeze what exists: those objects live until exit, and scanning them again
    and again cost ~35-45 ms of a 0.44 CPU-s analyze of the bundled example (158 young and
    14 middle collections and one full; docs/performance.md, "CLI start-up")."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        import_module(module)
    finally:
        if was_on:
            gc.freeze()
            gc.enable()


class _Group(click.Group):
    """Loads subcommands on demand; turns every failure into one
    ``traceread: error:`` line and exit 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_COMMANDS))

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in _COMMANDS:
            _import_frozen(f"{__name__}.{_COMMANDS[name][0]}")  # registers its commands
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter) -> None:
        # The listing uses the stored help: loading every module would import pandas.
        rows = [(n, self.commands.get(n) or click.Command(n, help=_COMMANDS[n][1]))
                for n in self.list_commands(ctx)]
        rows = [(n, c) for n, c in rows if not c.hidden]
        if rows:
            limit = formatter.width - 6 - max(len(n) for n, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(n, c.get_short_help_str(limit)) for n, c in rows])

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceError as e:
            _die(str(e))
        except click.ClickException as e:  # click's own message may quote a hostile file name
            from ..render.safe import text

            e.message = text(e.message)
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _die("interrupted", code=130)
        except BrokenPipeError:
            sys.stderr.close()  # e.g. `traceread kernels x | head`
            sys.exit(0)
        except MemoryError:   # its own clear line, with the size that caused it
            from ..errors import out_of_memory
            from ._common import LOADING

            path = LOADING["path"]
            _die(f"{path}: {out_of_memory(path)}" if path else out_of_memory(None))
        except Exception as e:  # never a traceback for the user
            if os.environ.get("TRACEREAD_DEBUG"):
                raise
            _die(f"internal error: {type(e).__name__}: {' '.join(str(e).split())} "
                 "(set TRACEREAD_DEBUG=1 for a traceback)")


def run(prog_name: str = "traceread") -> None:
    """The ``traceread`` program: ``main()``, then leave without tearing the interpreter down.

    Freeing a big analysis' arrays and modules one by one at exit took ~0.2 s of a 3 s
    analyze (557 MB). The output is flushed first; with a thread or a child process still
    alive (a pool, a cache write) the normal exit runs instead, so nothing is cut short.
    ``main`` stays the importable entry for tests and notebooks (CliRunner).
    """
    try:
        main(prog_name=prog_name)
        code = 0
    except SystemExit as e:
        code = e.code
    _leave(code)


def _leave(code) -> None:
    if code is None:
        code = 0
    if not isinstance(code, int) or not _nothing_running():
        raise SystemExit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # closed, or a reader that went away (| head)
            pass
    os._exit(code)


def _nothing_running() -> bool:
    import threading

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon
           for t in threading.enumerate()):
        return False
    mp = sys.modules.get("multiprocessing")
    return not (mp and mp.active_children())


def _die(message: str, code: int = 1) -> None:
    from ..render.safe import name  # a file or kernel name in the message: one inert line

    click.echo(f"traceread: error: {name(str(message).strip())}", err=True)
    sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _p, v: _version(ctx) if v else None,
              help="Show the version and the JSON decoder in use, then exit.")
def main() -> None:
    """Why is the GPU underfed? Analyse torch.profiler (Kineto) and Nsight Systems traces."""


def _version(ctx: click.Context) -> None:
    # traceread.__version__, not importlib.metadata: no scan of the installed
    # distributions (~35 ms), and the running source's version, not an install's
    from ..version import __version__
    from ..readers import decoder_name

    click.echo(f"traceread, version {__version__}\nJSON chunk decoder: {decoder_name(verify=False)}")
    ctx.exit()

