"""`traceread --help` / `--version` start without pandas, numpy or pyarrow; the
lazily loaded command list matches the real commands."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import traceread.cli as cli

HEAVY = ("pandas", "numpy", "pyarrow")


def _imported(args: list[str], env: dict | None = None) -> set[str]:
    """Top-level modules `python -X importtime -m traceread ARGS` imported."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "traceread", *args],
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr[-2000:]
    names = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    return {n.split(".")[0] for n in names}


def test_help_imports_no_pandas_numpy_pyarrow():
    mods = _imported(["--help"])
    assert "traceread" in mods and "click" in mods  # the probe sees imports at all
    assert not mods & set(HEAVY), mods & set(HEAVY)


def test_version_with_the_python_decoder_imports_no_pandas():
    mods = _imported(["--version"], env={"TRACEREAD_DECODER": "python"})
    assert not mods & set(HEAVY), mods & set(HEAVY)


def test_version_with_the_native_decoder_built_imports_no_pandas():
    # A stand-in for the built extension, so the test holds whether or not this
    # checkout compiled _cscan.c: --version must name it without the stale check.
    code = ("import sys, types; sys.modules['traceread.readers._cscan'] = types.ModuleType('_cscan'); "
            "from click.testing import CliRunner; from traceread.cli import main; "
            "r = CliRunner().invoke(main, ['--version']); assert r.exit_code == 0, r.output; "
            "print(r.output.splitlines()[-1]); "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "TRACEREAD_DECODER"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    decoder, heavy = p.stdout.strip().splitlines()
    assert decoder.startswith("JSON chunk decoder: native"), decoder
    assert heavy == "[]"


def test_sys_modules_after_in_process_help():
    code = ("import sys; from click.testing import CliRunner; from traceread.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_stored_command_help_matches_the_commands():
    for module in {m for m, _ in cli._COMMANDS.values()}:
        importlib.import_module(f"traceread.cli.{module}")
    assert set(cli.main.commands) == set(cli._COMMANDS)
    for name, (module, text) in cli._COMMANDS.items():
        cmd = cli.main.commands[name]
        assert cmd.callback.__module__ == f"traceread.cli.{module}", name
        first = " ".join(cmd.help.split("\n\n")[0].split())
        assert text == first, f"update traceread.cli._COMMANDS[{name!r}]"


@pytest.mark.parametrize("name", sorted(cli._COMMANDS))
def test_each_command_loads_and_shows_its_help(name):
    r = CliRunner().invoke(cli.main, [name, "--help"])
    assert r.exit_code == 0, r.output
    assert f"Usage: main {name}" in r.output or f"Usage: traceread {name}" in r.output


def test_unknown_command_is_a_usage_error():
    r = CliRunner().invoke(cli.main, ["frobnicate"])
    assert r.exit_code == 2 and "No such command" in r.output


def test_version_is_the_packages_version():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    import traceread

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert traceread.__version__ == meta["project"]["version"]
    r = CliRunner().invoke(cli.main, ["--version"])
    assert r.output.startswith(f"traceread, version {traceread.__version__}\n")


# What a single small trace's `analyze` does not need (issue 24: small traces are most
# traces): Parquet (cache/export only), the cross-rank job analysis and its renderer.
# pandas itself imports pyarrow and pyarrow.compute, so those cannot be on this list.
NOT_ON_SMALL_ANALYZE = ("pyarrow.parquet", "pyarrow.fs", "traceread.jobs.multirank.job",
                        "traceread.jobs.multirank.inputs", "traceread.jobs.multirank.grouping",
                        "traceread.jobs.multirank.verdicts", "traceread.render.cross_rank",
                        "traceread.jobs.batch")


def test_analyze_of_a_small_trace_loads_no_parquet_nor_cross_rank_modules():
    from traceread.examples import path as example_path

    code = ("import sys, io, contextlib; from traceread.cli import main\n"
            "out = io.StringIO()\n"
            "try:\n"
            "    with contextlib.redirect_stdout(out): main(sys.argv[1:], prog_name='traceread')\n"
            "except SystemExit as e: assert not e.code, e.code\n"
            "assert 'VERDICT' in out.getvalue(), out.getvalue()[-2000:]\n"
            f"print(sorted(m for m in {NOT_ON_SMALL_ANALYZE!r} if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code, "analyze", "--no-cache",
                        str(example_path("h200_pageable_copy.json.gz"))],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_multirank_names_load_on_first_use():
    code = ("import sys; import traceread.jobs.multirank as mr; "
            "before = 'traceread.jobs.multirank.job' in sys.modules; f = mr.analyze_traces; "
            "print(before, 'traceread.jobs.multirank.job' in sys.modules, f.__module__, "
            "sorted(set(mr.__all__) - set(dir(mr)) - set(mr._LAZY)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["False", "True", "traceread.jobs.multirank.job", "[]"]


def test_info_loads_no_verdict():
    """`info` reads and summarises; it judges nothing. render/text briefly imported the lever
    table for one constant, and with it the verdict and its passes: +0.26 CPU-s on `info` of
    247 MB (`benchmarks trace --steps info`)."""
    from traceread.examples import path as example_path

    code = ("import sys, io, contextlib; from traceread.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(sys.argv[1:], prog_name='traceread')\n"
            "    except SystemExit as e: assert not e.code, e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith('traceread.verdict')))")
    p = subprocess.run([sys.executable, "-c", code, "info",
                        str(example_path("h200_pageable_copy.json.gz"))],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[]"
