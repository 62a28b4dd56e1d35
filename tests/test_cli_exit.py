"""The console script leaves through os._exit after flushing: output complete, codes kept."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceread.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_output_is_complete_and_code_zero():
    trace = next(p for p in sorted(FIXTURES.rglob("*.json.gz")) if "gpu" in p.parts)
    r = _cli("analyze", "--no-cache", "--format", "json", str(trace))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["bound"]


def test_error_keeps_its_code_and_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    r = _cli("analyze", str(bad))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("traceread: error:")


def test_leave_falls_back_while_a_thread_runs(monkeypatch):
    import threading

    from traceread import cli

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert cli._nothing_running() is False
    finally:
        stop.set()
        t.join()
    assert cli._nothing_running() is True
    try:
        cli._leave("a message")   # not an int: the normal SystemExit path
    except SystemExit as e:
        assert e.code == "a message"
