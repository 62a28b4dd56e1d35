"""``traceread.capture()`` with torch CPU: a real recording, read back and analysed."""
from __future__ import annotations

import gzip
import io
import json

import pytest

import traceread


def _train(cap, steps: int):
    import torch

    x = torch.randn(64, 64)
    for _ in range(steps):
        for _ in range(3):
            x = torch.tanh(x @ x)
        cap.step()


def test_capture_records_active_steps_with_rank_info(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    said = io.StringIO()
    with traceread.capture(tmp_path, wait=1, warmup=1, active=3, stream=said) as cap:
        _train(cap, 6)
    assert cap.path == tmp_path / "rank2.pt.trace.json.gz"
    with gzip.open(cap.path, "rt") as f:
        doc = json.load(f)
    assert doc["distributedInfo"] == {"rank": 2, "world_size": 4}
    t = traceread.load(str(cap.path))
    assert (t.meta.rank, t.meta.world_size) == (2, 4)
    names = set(t.events["name"].astype(str))
    steps = {n for n in names if n.startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}  # wait + warmup skipped
    a = cap.analysis
    assert a.step_source == "ProfilerStep" and 1 <= len(a.steps) <= 3
    assert a.verdict["bound"] == "cpu_only"  # torch CPU: no GPU activity
    assert said.getvalue().startswith(f"traceread: {cap.path}: CPU_ONLY")


def test_too_few_steps_writes_nothing_and_says_so(tmp_path):
    pytest.importorskip("torch")
    said = io.StringIO()
    with traceread.capture(tmp_path, wait=2, warmup=1, active=3, stream=said) as cap:
        _train(cap, 2)
    assert cap.path is None and cap.analysis is None
    assert "2 steps ran, the schedule needs 6" in said.getvalue()
    assert not list(tmp_path.glob("*.gz"))


def test_bad_schedule_is_refused():
    with pytest.raises(ValueError):
        traceread.capture(active=0)
