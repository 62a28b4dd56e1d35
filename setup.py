"""Builds the optional native chunk decoder (src/traceread/readers/_cscan.c), the
replay's loop (src/traceread/passes/replay/_csim.c) and the interval algebra
(src/traceread/passes/_civ.c).

Everything else is in pyproject.toml. The extension is optional: without a C
compiler the build goes on and traceread uses its pure-Python (msgspec)
decoder -- same tables, slower ingest -- the replay's numpy loop (same schedules)
and intervals.py's numpy code (same intervals).
"""
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing compiler means no extension."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any toolchain failure
            self._skip(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._skip(e)

    @staticmethod
    def _skip(e):
        print(f"traceread: a native extension not built ({e}); using its Python path",
              file=sys.stderr)


setup(
    ext_modules=[Extension("traceread.readers._cscan", ["src/traceread/readers/_cscan.c"],
                           depends=[f"src/traceread/readers/_cscan_{h}.h"
                                    for h in ("intern", "json", "values")],
                           extra_compile_args=["-std=c99", "-fno-strict-aliasing"],
                           optional=True),
                 Extension("traceread.passes.replay._csim",
                           ["src/traceread/passes/replay/_csim.c"],
                           # -fwrapv: int64 arithmetic wraps as numpy's does
                           extra_compile_args=["-std=c99", "-fno-strict-aliasing", "-fwrapv"],
                           optional=True),
                 # the interval algebra (passes/intervals.py); -fwrapv as above
                 Extension("traceread.passes._civ", ["src/traceread/passes/_civ.c"],
                           extra_compile_args=["-std=c99", "-fno-strict-aliasing", "-fwrapv"],
                           optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
