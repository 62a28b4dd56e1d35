"""Hardening suite (issue 13): hostile, malformed and unusual inputs through the CLI.

Every generated case (``hardening_cases.CASES``) runs ``analyze`` (text and
JSON) and ``info`` in a subprocess under a timeout and checks: the exit
status, exactly one clean ``traceread: error:`` line (or a correct partial
analysis with one warning line), no traceback, no "internal error", the input
byte-identical afterwards and nothing created beside it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hardening_cases as H

SRC = Path(__file__).resolve().parents[1] / "src"
TIMEOUT = 60


def run_cli(*args, cwd=None, timeout=TIMEOUT, env=None):
    e = dict(os.environ, PYTHONPATH=str(SRC), TRACEREAD_CACHE_DIR=str(Path(cwd or ".") / ".cache"))
    e.pop("TRACEREAD_DEBUG", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "traceread.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)


def snapshot(d: Path) -> dict:
    """name -> bytes of every entry directly in ``d`` (special files by type only)."""
    out = {}
    for p in sorted(d.iterdir()):
        out[p.name] = p.read_bytes() if p.is_file() else ("dir" if p.is_dir() else "special")
    return out


def check_run(r, case: H.Case, json_out: bool = False) -> None:
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "internal error" not in r.stderr, r.stderr
    assert "RuntimeWarning" not in r.stderr, r.stderr
    if case.expect == "error":
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert len(err) == 1 and err[0].startswith("traceread: error: "), err
        assert case.phrase.lower() in err[0].lower(), err
        assert r.stdout == ""
    else:
        assert r.returncode == 0, (r.returncode, r.stderr)
        if case.expect == "partial":
            assert len(err) == 1 and err[0].startswith("traceread: warning: "), err
            assert case.phrase in err[0]
        else:
            assert err == [], err
        if json_out:
            json.loads(r.stdout)


def _params():
    for c in H.CASES:
        marks = [pytest.mark.slow] if c.slow else []
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_case(case: H.Case, tmp_path: Path):
    if case.name == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a chmod 000 file")
    work = tmp_path / "in"
    work.mkdir()
    path = case.build(work)
    before = snapshot(work) if path.parent == work else None
    for args in (["analyze"], ["analyze", "--format", "json"], ["info"]):
        r = run_cli(*args, path, cwd=tmp_path)
        check_run(r, case, json_out="--format" in args)
        if before is not None:
            assert snapshot(work) == before, f"{args}: input dir changed"
