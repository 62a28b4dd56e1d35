"""A real CPU trace recorded by torch.profiler in this run loads exactly."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from decimal import Decimal

import numpy as np
import pytest

from traceread.readers.kineto import read_kineto

# the recording imports torch in its own process; collecting this file (every xdist worker)
# need not import it: ~1 s of CPU each
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")

RECORD = textwrap.dedent("""
    import sys, time, torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    out = sys.argv[1]
    a = torch.randn(64, 64)
    t0 = time.time_ns()
    # active > steps: the trace is collected when the profiler exits
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=0, active=4)) as prof:
        for _ in range(3):
            with record_function("my_block"):
                torch.mm(a, a)
            prof.step()
    t1 = time.time_ns()
    prof.export_chrome_trace(out)
    print(t0, t1)
""")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch") / "cpu_trace.json"
    p = subprocess.run([sys.executable, "-c", RECORD, str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    t0, t1 = map(int, p.stdout.split()[-2:])
    return out, t0, t1


def test_real_cpu_trace(recorded):
    path, t0, t1 = recorded
    t = read_kineto(path)
    e = t.events
    assert t.meta.format == "kineto" and t.meta.clock == "epoch_ns"
    assert (e["kind"].astype(str) == "cpu_op").sum() > 0
    assert (e["name"].astype(str) == "aten::mm").sum() == 3
    ann = e[e["kind"] == "annotation"]["name"].astype(str)
    assert (ann == "my_block").sum() == 3
    assert {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= set(ann)
    assert (e["device"] == -1).all()
    # Absolute epoch ns: every op ran between the two wall-clock reads around profiling.
    mm = e[e["name"].astype(str) == "aten::mm"]
    assert ((mm["ts"] >= t0) & (mm["ts"] + mm["dur"] <= t1)).all()


def test_real_trace_timestamps_exact(recorded):
    path, _, _ = recorded
    doc = json.loads(path.read_text(), parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    want = sorted(base + int(Decimal(ev["ts"]) * 1000) for ev in doc["traceEvents"]
                  if ev.get("ph") == "X")
    e = read_kineto(path).events
    got = np.sort(e["ts"].to_numpy()[e["kind"].astype(str) != "instant"])
    assert got.tolist() == want
