"""torch.compile pass: planted recompile storm (exact), Kineto round trip, real corpus traces."""
from __future__ import annotations


import pandas as pd
import pytest

import traceread
from traceread.passes.compile import compile_events, compile_summary, parse_compile_id
from traceread.passes.gaps import gpu_gaps
from traceread.synth.scenarios import MS, T0
from traceread.synth.scenarios_comm import STORM, nsys_recompile_storm, recompile_storm

from conftest import CORPUS  # TRACEREAD_CORPUS where set (a worktree): else skipped silently


def _check(trace, truth, gaps=None, id_source="marker"):
    s = compile_summary(trace, gaps=gaps)
    for key in ("compiles", "recompiles", "compile_ns", "cache_lookup_ns", "cache_lookups",
                "idle_overlap_ns"):
        assert s[key] == truth[key], key
    got = [{k: f[k] for k in ("frame", "compiles", "recompiles", "compile_ns", "steps")}
           for f in s["frames"]]
    assert got == truth["frames"]
    ce = compile_events(trace)
    assert [(r.compile_id, r.step, r.ts, r.dur) for r in ce.itertuples()] == truth["episodes"]
    assert set(ce["id_source"]) == {id_source}
    return s


def test_planted_storm_exact():
    trace, truth = recompile_storm()
    # The layout's own numbers, spelled out once: 6 compiles (4 recompiles), 21 ms compiling,
    # of which 0.88 ms hid behind the queued GPU work of steps 0, 2, 3, 5.
    assert (truth["compiles"], truth["recompiles"], truth["compile_ns"]) == (6, 4, 21 * MS)
    assert truth["idle_overlap_ns"] == 21 * MS - 4 * 880_000
    s = _check(trace, truth)
    assert s["gpu_ops"] is True and s["compiled_region_calls"] == 12
    f0, f1 = s["frames"]
    assert f0["compile_ids"] == ["0/0", "0/1", "0/2", "0/3"] and f1["compile_ids"] == ["1/0", "1/1"]


def test_idle_overlap_with_gpu_gaps_agrees():
    trace, truth = recompile_storm()
    _check(trace, truth, gaps=gpu_gaps(trace))


def test_storm_without_markers_uses_regions():
    trace, truth = recompile_storm(markers=False)
    _check(trace, truth, id_source="region")


def test_explicit_steps_table():
    trace, truth = recompile_storm()
    # Steps shifted by 10 ms: every compile now falls in step "100 + k".
    steps = pd.DataFrame({"step": [100 + k for k in range(6)],
                          "start": [T0 + k * 20 * MS - 10 * MS for k in range(6)],
                          "end": [T0 + k * 20 * MS + 10 * MS for k in range(6)]})
    ce = compile_events(trace, steps=steps)
    assert list(ce["step"]) == [100 + ep[1] for ep in truth["episodes"]]


def test_single_compile_no_recompile():
    trace, truth = recompile_storm(steps=2, compiles={(0, 0): (1, 2 * MS)})
    s = _check(trace, truth)
    assert s["compiles"] == 1 and s["recompiles"] == 0 and s["frames"][0]["steps"] == [1]


def test_storm_kineto_roundtrip(tmp_path):
    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    for markers in (True, False):
        trace, truth = recompile_storm(markers=markers)
        path = write_kineto(trace, tmp_path / f"storm-{markers}.json", era="2.4")
        back = traceread.load(str(path))
        _check(back, truth, id_source="marker" if markers else "region")


def test_parse_compile_id():
    assert parse_compile_id("0/1") == ("0", 1, False)
    assert parse_compile_id("12/0") == ("12", 0, False)
    assert parse_compile_id("!2/0/3") == ("!2/0", 3, True)
    assert parse_compile_id("!4") == ("!4", 0, True)
    assert parse_compile_id(None) == (None, -1, False)


def test_storm_truth_matches_schedule():
    _, truth = recompile_storm()
    assert len(truth["episodes"]) == len(STORM)


@pytest.mark.corpus
@pytest.mark.parametrize("rel, regions", [
    ("facebookresearch__HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz",
     ["0/0"]),
    ("AMD-AGI__TraceLens/tests/traces/torch_compile_triton/trace.json.gz", ["0/0"]),
    # recompiled before the trace window: the region id shows it, no compile inside the trace
    ("AMD-AGI__TraceLens/tests/traces/b200/eager_trace.json.gz", ["0/1"]),
])
def test_real_compiled_runs_without_compiles(rel, regions):
    path = CORPUS / rel
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    s = compile_summary(trace)
    assert s["compiles"] == 0 and s["compile_ns"] == 0 and s["idle_overlap_ns"] == 0
    assert [f["regions_seen"] for f in s["frames"]] == [regions]
    assert s["cache_lookups"] >= 1 and s["cache_lookup_ns"] > 0


@pytest.mark.corpus
def test_real_cudagraph_record_is_not_a_compile():
    path = CORPUS / ("AMD-AGI__TraceLens/tests/traces/inference/xdit_flux.1/capture_traces/"
                     "capture_trace_rank_0.json.gz")
    if not path.exists():
        pytest.skip("corpus absent")
    trace = traceread.load(str(path))
    s = compile_summary(trace)
    ev = trace.events
    rec = ev[ev["name"] == "CUDAGraphNode.record (dynamo_timed)"]
    assert len(rec) == 2  # the second, 10.9 µs, is nested inside the 243 ms recording
    assert s["compiles"] == 0 and s["compile_ns"] == 0
    assert s["cudagraph_record_ns"] == int(rec["dur"].max()) == 243_303_732


def test_cli_compile(tmp_path):
    import json

    from click.testing import CliRunner

    from traceread.cli import main

    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    trace, truth = recompile_storm()
    path = write_kineto(trace, tmp_path / "storm.json")
    r = CliRunner().invoke(main, ["compile", str(path), "--format", "json", "--events"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert (doc["compiles"], doc["recompiles"], doc["compile_ns"]) == (6, 4, truth["compile_ns"])
    assert [e["compile_id"] for e in doc["events"]] == [ep[0] for ep in truth["episodes"]]
    r = CliRunner().invoke(main, ["compile", str(path)])
    assert r.exit_code == 0 and "compiles 6 (recompiles 4)" in r.output
    assert "frame 0: compiles 4, recompiles 3" in r.output and "steps 0,2,3,5" in r.output


def _check_breaks(s, truth):
    assert (s["graph_breaks"], s["graph_break_calls"]) == (truth["graph_breaks"], truth["graph_break_calls"])
    assert s["breaks"] == [{"frame": "0", "resumes": "1", "calls": truth["graph_break_calls"]}]


def test_planted_graph_break_all_forms(tmp_path):
    """Frame 1 runs inside frame 0's compiled region (its resume function): one graph break,
    run once per step where both frames are compiled -- table, Kineto JSON and nsys NVTX."""
    trace, truth = recompile_storm(graph_break=True)
    assert (truth["graph_breaks"], truth["graph_break_calls"]) == (1, 6)
    _check_breaks(_check(trace, truth), truth)
    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    back = traceread.load(str(write_kineto(trace, tmp_path / "gb.json", era="2.4")))
    _check_breaks(compile_summary(back), truth)
    path, truth = nsys_recompile_storm(tmp_path / "gb.sqlite", graph_break=True)
    s = compile_summary(traceread.load(str(path)))
    assert (s["compiles"], s["recompiles"], s["compile_ns"]) == (6, 4, truth["compile_ns"])
    _check_breaks(s, truth)
    # side by side regions of two frames are two compiled functions, not a break
    s = compile_summary(recompile_storm()[0])
    assert s["graph_breaks"] == 0 and s["breaks"] == []


def test_analyze_labels_window_and_whole_trace_counts(tmp_path):
    """analyze: the window's counts and the whole trace's, labelled, in the JSON, the verdict
    evidence, the text and the compile culprit."""
    import json

    from click.testing import CliRunner

    from traceread.cli import main

    write_kineto = pytest.importorskip("traceread.synth.kineto").write_kineto
    trace, truth = recompile_storm(graph_break=True)
    path = write_kineto(trace, tmp_path / "gb.json")
    # steps 3-5 only: the window holds 3 compiles (0/2, 1/1, 0/3: all recompiles); the trace 6 (4)
    r = CliRunner().invoke(main, ["analyze", str(path), "--steps", "3:6", "--format", "json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["compile"]
    assert c["scope"] == "window" and (c["compiles"], c["recompiles"], c["graph_breaks"]) == (3, 3, 1)
    assert c["whole_trace"] == {"compiles": 6, "recompiles": 4, "graph_breaks": 1}
    ev = json.loads(r.output)["verdict"]["evidence"]
    assert ev["graph_breaks"] == 1 and ev["compile_whole_trace"]["compiles"] == 6
    r = CliRunner().invoke(main, ["analyze", str(path), "--steps", "3:6"])
    assert "torch.compile in the analysed window: 3 compiles (3 recompiles), 1 graph break" in r.output
    assert "whole trace: 6 compiles (4 recompiles), 1 graph break" in r.output
    assert "graph break: frame 0 resumes in frame 1" in r.output
    assert "1 graph break (3x eager code between compiled regions)" in " ".join(r.output.split())


def test_one_module_load_pattern_for_every_reader():
    """passes/common.py MODULE_LOAD_RX: the driver's, the runtime's and HIP's code loads, each
    variant and versioned entry point; not the calls that look kernels up or unload."""
    from traceread.passes.common import MODULE_LOAD_RX
    from traceread.passes.facts import module_loads

    loads = ["cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
             "cuLibraryLoadData", "cuLibraryLoadFromFile", "cudaLibraryLoadData",
             "hipModuleLoad", "hipModuleLoadData", "cuModuleLoadData_v2"]
    others = ["cuModuleGetFunction", "cuModuleUnload", "cuLibraryGetKernel", "cuLaunchKernel",
              "cudaLaunchKernel"]
    assert all(MODULE_LOAD_RX.search(x) for x in loads)
    assert not any(MODULE_LOAD_RX.search(x) for x in others)
    ev = pd.DataFrame({"kind": ["driver"] * len(loads + others) + ["cpu_op"],
                       "name": loads + others + ["cuModuleLoad"]})
    assert module_loads(ev) == len(loads)   # a cpu_op of that name is no load


def _bench_graph(with_timing: bool):
    """One host lane (nsys-like: calls and untraced stretches): a build stretch, the
    autotuner's timed runs (device syncs around event-recorded launches, the events read
    back) when ``with_timing``, then the step's own launch and its .item() sync."""
    import numpy as np

    from traceread.passes.replay.graph import NEG, StepGraph

    rows = [("step", "step begin", "step"), ("host", "untraced", "untraced"),
            ("host", "untraced", "untraced")]   # the second: the build (marked)
    if with_timing:
        rows += [("sync_wait", "cudaDeviceSynchronize", "sync"),
                 ("launch", "cudaEventRecordWithFlags", "launch"), ("launch", "cuLaunchKernel", "launch"),
                 ("launch", "cudaEventRecordWithFlags", "launch"),
                 ("sync_wait", "cudaDeviceSynchronize", "sync"), ("host", "untraced", "untraced"),
                 ("launch", "cudaEventQuery", "launch"), ("launch", "cudaEventDestroy", "launch")]
    rows += [("host", "untraced", "untraced"), ("launch", "cudaLaunchKernel", "launch"),
             ("launch", "cudaMemcpyAsync", "launch"), ("sync_wait", "cudaStreamSynchronize", "sync"),
             ("step", "step end", "step")]
    k = len(rows)
    nodes = pd.DataFrame({"id": range(k), "step": 0, "lane": 0, "seq": range(k),
                          "kind": [r[0] for r in rows], "name": [r[1] for r in rows],
                          "cat": [r[2] for r in rows], "ts_ns": range(0, 1000 * k, 1000),
                          "dur_ns": 1000, "corr": -1, "cost_ns": 1000, "gap_ns": 0,
                          "release_ns": NEG})
    g = StepGraph(nodes=nodes, edges=pd.DataFrame(columns=["src", "dst", "kind", "lag_ns"]),
                  lanes=pd.DataFrame({"lane": [0], "what": ["host"], "pid": 1, "tid": [1],
                                      "device": [-1], "stream": [-1], "label": ["t"]}),
                  steps=pd.DataFrame({"index": [0], "step": [1], "pid": 1, "start_ns": 0,
                                      "end_ns": 1000 * k, "dur_ns": 1000 * k, "begin": 0,
                                      "end": k - 1}), origin_ns=0)
    built = np.zeros(k, bool)
    built[2] = True
    return g, built


def test_the_autotuners_timed_runs_after_a_build_are_compile_time():
    """mark_compile's ``_timed_runs``: after the marked build, the runs closed by a device-wide
    sync that record CUDA events (the autotuner timing its candidates) and the event reads
    right after are the build's; the step's own launch, copy and stream sync are not. A
    build with no timed run marks nothing more."""
    from traceread.passes.compile import _timed_runs

    g, built = _bench_graph(True)
    got = g.nodes["name"][_timed_runs(g, built)].tolist()
    assert got == ["cudaDeviceSynchronize", "cudaEventRecordWithFlags", "cuLaunchKernel",
                   "cudaEventRecordWithFlags", "cudaDeviceSynchronize", "untraced",
                   "cudaEventQuery", "cudaEventDestroy"]
    g, built = _bench_graph(False)
    assert not _timed_runs(g, built).any()
