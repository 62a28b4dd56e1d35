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


def test_trace_analyze_over_info_and_serial_against_a_baseline_dir():
    """`trace --steps info,analyze` prints analyze / info CPU per side; `serial` with a
    baseline prints each side's stage table and this checkout against the baseline
    (issue 42)."""
    example = ROOT / "src" / "traceread" / "examples" / "h200_pageable_copy.json.gz"
    r = _bench("trace", str(example), "--steps", "info,analyze", "--workers", "1",
               "--repeat", "1", "--baseline-src", str(ROOT / "src"), timeout=120)
    assert r.returncode == 0, r.stderr
    name = ROOT.name
    line = next(x for x in r.stdout.splitlines() if "analyze / info (CPU)" in x)
    assert "this " in line and f"{name} " in line and "—" not in line, line
    assert any(x.startswith("| info (1 worker): CPU |") for x in r.stdout.splitlines())
    r = _bench("serial", str(example), "--repeat", "1", "--baseline-src", str(ROOT / "src"),
               timeout=180)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sum(x.startswith("* serial fraction, bound") for x in lines) == 2   # one per side
    assert sum(x.startswith("* serial fraction, measured") for x in lines) == 2
    rows = _table(lines, "| figure | this |")
    assert rows[0][0].startswith("CPU at 1 worker") and rows[0][3].endswith("×")
    assert any(x[0].startswith("**serial fraction, measured**") and x[1].endswith("%")
               for x in rows)


def test_serial_counts_cpu_run_alone_by_the_others_shares():
    """The measured serial part (benchmarks/serial.py ``_intervals``): CPU a process used
    while no other was running or runnable; a share of an interval counts as a chance."""
    from benchmarks.serial import _intervals

    ms = 1_000_000
    rows = [(0.000, [(1, 0, 0), (2, 0, 0)]),
            (0.010, [(1, 10 * ms, 0), (2, 0, 0)]),          # 1 alone: 10 ms serial
            (0.020, [(1, 20 * ms, 0), (2, 8 * ms, 2 * ms)]),  # both busy: none serial
            (0.030, [(1, 25 * ms, 0), (2, 8 * ms, 2 * ms)]),  # 1 half the time, 2 asleep
            (0.040, [(1, 30 * ms, 0), (2, 13 * ms, 2 * ms), (3, 0, 0)])]  # 1, 2 half each
    got = [(round(cpu, 4), round(sole, 4)) for _, cpu, sole in _intervals(rows)]
    assert got == [(0.01, 0.01), (0.018, 0.0), (0.005, 0.005), (0.01, 0.005)]


def test_trace_with_bytecode_cached_labels_its_rows():
    """`trace --bytecode cached`: each side's bytecode written once to a temporary prefix
    (as an installed package has it); the rows and the analyze / info line say so."""
    example = ROOT / "src" / "traceread" / "examples" / "h200_pageable_copy.json.gz"
    r = _bench("trace", str(example), "--steps", "info,analyze", "--workers", "1",
               "--repeat", "1", "--bytecode", "cached", "--baseline-src", str(ROOT / "src"),
               timeout=180)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(x.startswith("| info (1 worker, bytecode cached): CPU |") for x in lines)
    line = next(x for x in lines if "analyze / info (CPU)" in x)
    assert "bytecode cached" in line and "—" not in line, line


def _gpubox(tmp_path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    example = ROOT / "src" / "traceread" / "examples" / "h200_pageable_copy.json.gz"
    return _bench("gpubox", "--sizes", "", "--real", str(example), "--workers", "1,2",
                  "--workdir", str(tmp_path), *extra, timeout=timeout)


def _table(lines: list[str], head: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``head``."""
    i = next(k for k, x in enumerate(lines) if x.startswith(head))
    rows = []
    for x in lines[i + 2:]:
        if not x.startswith("|"):
            break
        rows.append([c.strip() for c in x.strip("|").split("|")])
    return rows


def test_gpubox_tables_at_tiny_sizes(tmp_path):
    """issue 34's GPU-box benchmark, shrunk: the trace table has a read and an analyze row
    per trace with a wall per worker count, the job table a row per batch worker count,
    and the planted straggler is found at every worker count."""
    r = _gpubox(tmp_path, "--ranks", "4", "--rank-size", "300KB", "--rank-steps", "6",
                "--budget", "200")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = _table(lines, "| trace | raw | step | 1 | 2 |")
    assert [x[2] for x in rows] == ["read", "analyze"]
    for x in rows:
        assert x[0] == "h200_pageable_copy.json.gz"
        assert x[3].endswith(("ms", " s")) and x[4].endswith(("ms", " s")), x
        assert x[5].endswith("× (2)") and x[6].count("×") == 2, x
    job = _table(lines, "| batch workers | wall |")
    assert [x[0] for x in job] == ["1", "2"]
    assert all(x[-1] == "rank 2 +3.00 ms (0 failed)" for x in job), job
    assert "straggler the same at every worker count" in r.stdout
    assert "dropped" not in r.stdout


def test_gpubox_drops_what_the_budget_cannot_hold(tmp_path):
    """With no time at all every cell is dropped and each one is named; still exit 0."""
    r = _gpubox(tmp_path, "--ranks", "4", "--rank-size", "300KB", "--budget", "0.5", timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = _table(lines, "| trace | raw | step | 1 | 2 |")
    assert all(x[3:5] == ["—", "—"] for x in rows)
    assert "dropped to stay within 0 s (largest first):" in r.stdout or \
        "dropped to stay within 1 s (largest first):" in r.stdout
    dropped = [x for x in lines if x.startswith("* ")]
    assert len(dropped) == 5, dropped   # 2 steps x 2 worker counts, and the job
    assert any("the job table" in x for x in dropped)


def test_gpubox_predicts_from_fewer_workers_then_smaller_traces():
    from benchmarks.gpubox import Budget, predict

    raw = {"a": 100, "b": 400}
    cells = {("a", "read", 1): {"wall": 2.0}, ("a", "read", 2): {"wall": 1.5}}
    assert predict(cells, "a", "read", 4, raw) == 1.5       # the most workers below
    assert predict(cells, "b", "read", 1, raw) == 8.0       # 1-worker time x size ratio
    assert predict(cells, "a", "analyze", 1, raw) is None  # nothing to go by
    b = Budget(10)
    assert b.fits("x", 5.0, b.end) and not b.fits("y", 50.0, b.end)
    assert b.dropped and b.dropped[0].startswith("y: predicted 50.0 s")


@pytest.mark.parametrize("ranks,rank,steps,filler", [(4, 2, 3, 5), (16, 8, 6, 300), (4, 0, 2, 0)])
def test_gpubox_rank_is_the_filled_table_written_whole(tmp_path, ranks, rank, steps, filler):
    """The job's ranks are merged as text (fast at 250 MB); the bytes must be those of the
    filled synth table through the Kineto writer -- slow rank, clock offsets and all."""
    from benchmarks.gpubox import _spec, _write_rank
    from benchmarks.multirank import _fill
    from traceread.synth.kineto import write_kineto
    from traceread.synth.multirank import _rank_trace

    _write_rank(str(tmp_path), ranks, rank, steps, filler, "fast.json")
    t = _rank_trace(_spec(ranks, steps), rank)
    if filler:
        t = _fill(t, filler)
    write_kineto(t, tmp_path / "whole.json")
    assert (tmp_path / "fast.json").read_bytes() == (tmp_path / "whole.json").read_bytes()


def test_gpubox_rank_refuses_filler_past_its_step(tmp_path):
    from benchmarks.gpubox import _write_rank

    with pytest.raises(ValueError, match="more steps"):
        _write_rank(str(tmp_path), 4, 0, 3, 40_000, "over.json")


def test_cuts_on_the_example_against_a_baseline_dir():
    """`cuts` of the bundled example against this checkout's own src: every row has both
    sides and a ratio, and both sides' results are the same."""
    example = ROOT / "src" / "traceread" / "examples" / "h200_pageable_copy.json.gz"
    r = _bench("cuts", str(example), "--repeat", "1", "--inner", "1",
               "--baseline-src", str(ROOT / "src"), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    row = next(x for x in lines if x.startswith("| analyze (in process, trace loaded): CPU |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith(("ms", " s")) and cells[3].endswith("×")
    assert any("same results as this checkout" in x and "False" not in x for x in lines)
