"""A real torch.compile trace (torch 2.13, CPU): the recompile is found, in the right step.

The trace is recorded in a subprocess (keeps dynamo/inductor state and threads
out of the test process): a tiny module under ``torch.compile(dynamic=False)``,
four profiler steps, the input shape changes in step 2 -> recompile 0/1.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import traceread
from traceread.passes.compile import compile_events, compile_summary

# the recordings import torch in their own process; collecting this file (every xdist worker)
# need not import it: ~1 s of CPU each
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")

RECORD = textwrap.dedent("""
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    backend, out = sys.argv[1], sys.argv[2]
    lin = torch.nn.Linear(8, 8)
    def f(x):
        return torch.relu(lin(x)).sum(1)
    cf = torch.compile(f, backend=backend, dynamic=False)
    shapes = [4, 4, 6, 6]
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU],
                                  schedule=schedule(wait=0, warmup=0, active=len(shapes) + 1)) as prof:
        for n in shapes:
            cf(torch.randn(n, 8))
            prof.step()
    prof.export_chrome_trace(out)
""")


def _record(tmp_path, backend):
    out = tmp_path / f"{backend}.json"
    # A fresh Inductor cache: a warm one turns compiles into cache loads (other events).
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"))
    proc = subprocess.run([sys.executable, "-c", RECORD, backend, str(out)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return traceread.load(str(out))


def _check(trace):
    ce = compile_events(trace)
    assert list(ce["compile_id"]) == ["0/0", "0/1"]
    assert list(ce["step"]) == [0, 2]          # first compile in step 0, recompile in step 2
    assert list(ce["recompile"]) == [False, True]
    assert set(ce["id_source"]) == {"marker"}
    s = compile_summary(trace)
    assert s["compiles"] == 2 and s["recompiles"] == 1
    (frame,) = s["frames"]
    assert frame["frame"] == "0" and frame["steps"] == [0, 2]
    assert frame["regions_seen"] == ["0/0", "0/1"]
    assert s["compiled_region_calls"] == 4
    # The union of nested spans: no more than the outer episodes, no less than any one span.
    assert s["compile_ns"] == int(ce["compile_ns"].sum()) > 0
    ev = trace.events
    assert s["compile_ns"] >= int(ev.loc[ev["name"] == "entire_frame_compile", "dur"].sum())
    # Guards evaluated on calls 2..4 (an empty cache is not looked up).
    assert s["cache_lookups"] >= 2 and s["cache_lookup_ns"] > 0
    # CPU-only trace: no GPU, nothing to starve.
    assert s["gpu_ops"] is False and s["idle_overlap_ns"] == 0
    return ce, s


def test_aot_eager_recompile_found_in_step(tmp_path):
    _check(_record(tmp_path, "aot_eager"))


@pytest.mark.slow  # ~30 s on a quiet 2-core machine (two C++ compiles with gcc)
def test_inductor_recompile_found_in_step(tmp_path):
    trace = _record(tmp_path, "inductor")
    ce, s = _check(trace)
    names = set(trace.events["name"].astype(str))
    # Inductor's own phases are inside the compile episodes.
    assert {"dynamo", "entire_frame_compile", "backend_compile", "inductor_compile",
            "compile_file"} <= names
    # Every inductor_compile span lies inside one of the two compile episodes.
    ev = trace.events
    ind = ev[ev["name"] == "inductor_compile"]
    assert len(ind) == 2
    for ts, end in zip(ind["ts"], ind["ts"] + ind["dur"]):
        assert ((ce["ts"] <= ts) & (end <= ce["end"])).sum() == 1



TRAIN = textwrap.dedent("""
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    out = sys.argv[1]
    lin = torch.nn.Linear(8, 8)
    def f(x):
        y = torch.relu(lin(x))
        print("graph break")  # frame 0 stops here; its resume function is frame 1
        return (y * 2).sum()
    cf = torch.compile(f, backend="aot_eager", dynamic=False)
    shapes = [4, 4, 6, 6]
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=0, active=len(shapes) + 1)) as prof:
        for n in shapes:
            cf(torch.randn(n, 8)).backward()
            prof.step()
    prof.export_chrome_trace(out)
""")


def test_training_graph_break_and_lazy_backward_compile(tmp_path):
    """Two frames (graph break), each recompiled in step 2; backward graphs compile lazily,
    at the first backward call, under the forward's compile id (entire_backward_compile)."""
    out = tmp_path / "train.json"
    proc = subprocess.run([sys.executable, "-c", TRAIN, str(out)], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = traceread.load(str(out))
    ce = compile_events(trace)
    fwd = ce[ce["name"] == "dynamo"]
    bwd = ce[ce["name"] == "entire_backward_compile"]
    assert list(fwd["compile_id"]) == ["0/0", "1/0", "0/1", "1/1"]
    assert list(fwd["step"]) == [0, 0, 2, 2]
    assert sorted(bwd["compile_id"]) == ["0/0", "0/1", "1/0", "1/1"]
    assert sorted(bwd["step"]) == [0, 0, 2, 2]
    assert len(ce) == 8 and set(ce["id_source"]) == {"marker"}
    s = compile_summary(trace)
    assert s["compiles"] == 4 and s["recompiles"] == 2
    assert [(f["frame"], f["compiles"], f["recompiles"], f["steps"]) for f in s["frames"]] == [
        ("0", 2, 1, [0, 2]), ("1", 2, 1, [0, 2])]
    assert sum(f["compile_ns"] for f in s["frames"]) == int(ce["compile_ns"].sum())
    # the graph break: frame 1 (the resume function) runs inside frame 0's region, every call
    assert s["graph_breaks"] == 1 and s["breaks"] == [{"frame": "0", "resumes": "1", "calls": 4}]
