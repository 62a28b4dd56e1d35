"""The ``traceread`` command line: a thin shell over the Python API.

Each subcommand lives in its own module and registers itself on ``main``.
"""
from __future__ import annotations

import os
import sys

import click

from ..errors import TraceError


class _Group(click.Group):
    """Turns every failure into one ``traceread: error:`` line and exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceError as e:
            _die(str(e))
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            _die("interrupted", code=130)
        except BrokenPipeError:
            sys.stderr.close()  # e.g. `traceread kernels x | head`
            sys.exit(0)
        except Exception as e:  # never a traceback for the user
            if os.environ.get("TRACEREAD_DEBUG"):
                raise
            _die(f"internal error: {type(e).__name__}: {e} (set TRACEREAD_DEBUG=1 for a traceback)")


def _die(message: str, code: int = 1) -> None:
    click.echo(f"traceread: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _p, v: _version(ctx) if v else None,
              help="Show the version and the JSON decoder in use, then exit.")
def main() -> None:
    """Why is the GPU underfed? Analyse torch.profiler (Kineto) and Nsight Systems traces."""


def _version(ctx: click.Context) -> None:
    from importlib.metadata import PackageNotFoundError, version

    from ..readers import decoder_name

    try:
        v = version("traceread")
    except PackageNotFoundError:
        v = "unknown"
    click.echo(f"traceread, version {v}\nJSON chunk decoder: {decoder_name()}")
    ctx.exit()


def _register() -> None:
    # Imported for their side effect: each module adds its commands to `main`.
    from . import info, export, analyze  # noqa: F401
    for optional in ("nsys_stats", "batch", "comm", "overlay", "diff"):
        try:
            __import__(f"{__name__}.{optional}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{optional}":
                raise


_register()
