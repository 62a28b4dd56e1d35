"""The benchmark harness (benchmarks/): every subcommand parses, and the smallest one runs
end to end on the bundled example, with a baseline side, one repeat."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.__main__ import COMMANDS  # noqa: E402


def _bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help(name):
    r = _bench(name, "--help")
    assert r.returncode == 0, r.stderr
    assert f"python -m benchmarks {name}" in r.stdout


def test_trace_read_example_against_a_baseline_dir():
    """`trace --steps read` of the bundled example, this checkout against its own src given
    as a baseline directory: one table row per figure with both sides and their ratio."""
    example = ROOT / "src" / "traceread" / "examples" / "h200_pageable_copy.json.gz"
    r = _bench("trace", str(example), "--steps", "read", "--repeat", "1",
               "--baseline-src", str(ROOT / "src"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    name = ROOT.name  # a baseline src/ folder is named after its checkout
    assert f"| step | this | {name} | {name} / this |" in lines
    row = next(x for x in lines if x.startswith("| read: seconds |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith(("ms", " s")) and cells[2].endswith(("ms", " s"))
    assert cells[3].endswith("×")
    assert any(x.startswith("| read: peak RSS |") and x.count(" MB") == 2 for x in lines)
