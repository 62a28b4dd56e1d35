"""CUDA graphs: nsys GRAPH_TRACE replays as GPU busy time, Kineto graph kernels linked to
their cudaGraphLaunch, the graphs pass, and graph recording kept apart from compilation."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import traceread
from traceread.analysis import analyze
from traceread.passes import intervals
from traceread.passes import steps as steps_mod
from traceread.passes.attribution import attribute, summarize
from traceread.passes.compile import compile_summary
from traceread.passes.gaps import gpu_busy, gpu_gaps
from traceread.passes.graphs import graph_summary, is_graph_launch, is_graph_recording
from traceread.passes.kernel_classes import time_by_class
from traceread.passes.kernels import kernel_summary
from traceread.passes.nccl import comm_overlap
from traceread.synth.graphs import EAGER_KERNEL, graph_replay, write_nsys_graphs
from traceread.synth.kineto import write_kineto
from traceread.synth.nsys import NsysWriter, gpid
from traceread.synth.scenarios import gpu_bound

from conftest import analysed, corpus_or_skip


@pytest.fixture(scope="module")
def planted():
    return graph_replay()


def _busy(t) -> int:
    return sum(intervals.total(iv) for iv in gpu_busy(t.events).values())


def _nsys(planted, tmp_path, mode):
    trace, truth = planted
    return traceread.load(write_nsys_graphs(trace, tmp_path / f"{mode}.sqlite", mode=mode)), truth


# ------------------------------------------------------------------ nsys reader

def test_nsys_graph_trace_rows_are_replays(planted, tmp_path):
    t, truth = _nsys(planted, tmp_path, "graph")
    ev = t.events
    g = ev[ev["kind"] == "graph"]
    assert len(g) == truth["replays"]
    assert (g["graph_id"] == 1).all() and (g["name"] == "[CUDA graph 1]").all()
    assert (g["dur"] == truth["replay_span_ns"]).all()
    assert (g["tid"] == -1).all() and (g["device"] == 0).all() and (g["pid"] == 4242).all()
    # each replay joins its cudaGraphLaunch call on (pid, correlation)
    ops = steps_mod.gpu_ops(ev)
    launched = ops[ops["kind"] == "graph"]
    assert (launched["launch_tid"] == 4242).all()
    assert (ev["kind"] == "kernel").sum() == 1   # only the eager warm-up kernel


def test_nsys_graph_replays_are_busy_not_idle(planted, tmp_path):
    t, truth = _nsys(planted, tmp_path, "graph")
    assert _busy(t) == truth["busy_graph_ns"]
    lo, hi = truth["window"]
    idle = int(gpu_gaps(t)["duration"].sum())
    assert idle == (hi - lo) - truth["busy_graph_ns"]
    assert idle < 0.9 * (hi - lo)


def test_nsys_graph_rows_are_not_kernels(planted, tmp_path):
    t, truth = _nsys(planted, tmp_path, "graph")
    ks = kernel_summary(t.events)
    assert ks["name"].tolist() == [EAGER_KERNEL]   # cuda_gpu_kern_sum: kernels only
    cls = time_by_class(t).set_index("class")
    assert cls.loc["graph", "total_ns"] == truth["replays"] * truth["replay_span_ns"]
    assert cls.loc["graph", "instances"] == truth["replays"]
    # a replay row hides its kernels: NCCL overlap counts it as compute
    ov = comm_overlap(t)
    assert int(ov["compute_ns"].sum()) == truth["busy_graph_ns"]


def test_nsys_node_mode_kernels_carry_graph_id(planted, tmp_path):
    t, truth = _nsys(planted, tmp_path, "node")
    ev = t.events
    assert (ev["kind"] == "graph").sum() == 0
    k = ev[ev["kind"] == "kernel"]
    in_graph = k["graph_id"].to_numpy() == 1
    assert in_graph.sum() == truth["replays"] * truth["kernels_per_replay"]
    assert (k.loc[~in_graph, "graph_id"] == -1).all()   # CUPTI's 0 = no graph
    assert _busy(t) == truth["busy_node_ns"]


def test_nsys_replay_with_node_rows_is_not_counted_twice(planted, tmp_path):
    trace, truth = planted
    path = write_nsys_graphs(trace, tmp_path / "both.sqlite", mode="node")
    ev = traceread.load(path).events
    launches = ev[ev["name"] == "cudaGraphLaunch"].sort_values("ts")
    ev_gpid = gpid(4242)
    rows = [(int(g["ts"].min()), int((g["ts"] + g["dur"]).max()), int(corr), ev_gpid, 1)
            for corr, g in ev[ev["graph_id"] == 1].groupby("correlation")]
    rows.append((10**9, 10**9 + 5000, 999, ev_gpid, 2))   # a replay with no node rows
    con = sqlite3.connect(path)   # the same replays also as GRAPH_TRACE rows
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, "
                "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
                "graphId INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 7, ?, ?, ?)",
                    rows)
    con.commit()
    con.close()
    t = traceread.load(path)
    g = t.events[t.events["kind"] == "graph"]
    assert g["correlation"].tolist() == [999]
    assert any("4 graph replay rows dropped" in n for n in t.meta.extra["notes"])
    assert _busy(t) == truth["busy_node_ns"] + 5000
    assert len(launches) == truth["replays"]


def test_nsys_graph_trace_minimal_columns(tmp_path):
    """An export whose GRAPH_TRACE lacks globalPid/graphId: pid from the launch call."""
    w = NsysWriter(tmp_path / "old.sqlite")
    w.runtime(100, 200, "cudaGraphLaunch_v10000", 7, 8, corr=5)
    w.con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, "
                  "deviceId INTEGER, streamId INTEGER, correlationId INTEGER)")
    w.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (300, 1300, 0, 7, 5)")
    t = traceread.load(w.close())
    g = t.events[t.events["kind"] == "graph"].iloc[0]
    assert (g["pid"], g["graph_id"], g["dur"], g["name"]) == (7, -1, 1000, "[CUDA graph]")
    assert graph_summary(t)["replays"] == 1


def test_no_graph_table_no_graph_rows(tmp_path):
    from traceread.synth.nsys import write_planted

    t = traceread.load(write_planted(tmp_path / "p.sqlite"))
    assert (t.events["kind"] == "graph").sum() == 0
    assert (t.events["graph_id"] == -1).all()
    s = graph_summary(t)
    assert (s["uses_cuda_graphs"], s["replays"], s["mode"]) == (False, 0, None)


# ------------------------------------------------------------------ Kineto linkage

@pytest.mark.parametrize("era", ["table", "2.4", "1.8"])
def test_kineto_graph_kernels_belong_to_their_launch_step(planted, tmp_path, era):
    trace, truth = planted
    t = trace if era == "table" else traceread.load(
        write_kineto(trace, tmp_path / f"g{era}.json", era=era))
    ev = t.events
    steps, _ = steps_mod.find_steps(ev)
    ops = steps_mod.gpu_ops(ev)
    tab = steps_mod.step_table(steps, ops, steps_mod.step_of_gpu_ops(steps, ops))
    k = truth["kernels_per_replay"]
    assert tab["gpu_ops"].tolist() == [k] * truth["steps"]
    assert tab["busy_ns"].tolist() == [truth["replay_node_ns"]] * truth["steps"]
    launch = ev[ev["name"] == "cudaGraphLaunch"]["ts"].sort_values().to_numpy()
    graph_ops = ops[ops["name"].astype(str).str.startswith("graph_node")]
    assert sorted(np.unique(graph_ops["launch_ts"]).tolist()) == launch.tolist()
    assert _busy(t) == truth["busy_node_ns"]


# ------------------------------------------------------------------ the graphs pass

@pytest.mark.parametrize("mode", ["kineto", "graph", "node"])
def test_graph_summary_planted(planted, tmp_path, mode):
    trace, truth = planted
    t = trace if mode == "kineto" else _nsys(planted, tmp_path, mode)[0]
    s = graph_summary(t)
    per = truth["replay_span_ns"] if mode == "graph" else truth["replay_node_ns"]
    assert s["uses_cuda_graphs"] and s["launches"] == s["replays"] == truth["replays"]
    assert s["mode"] == ("graph" if mode == "graph" else "node")
    assert s["replay_gpu_ns"] == truth["replays"] * per
    assert s["gpu_busy_ns"] == s["replay_gpu_ns"] + truth["eager_ns"]
    [g] = s["graphs"]
    assert g["graph_id"] == (-1 if mode == "kineto" else 1)
    assert (g["launch"], g["replays"], g["gpu_ns"], g["mean_ns"]) == (
        "cudaGraphLaunch", truth["replays"], truth["replays"] * per, per)
    assert g["nodes_per_replay"] == (0 if mode == "graph" else truth["kernels_per_replay"])
    rec = s["recording"]
    assert rec["ns"] == truth["record_ns"] and rec["captures"] == 1
    assert rec["top"][0]["name"] == "CUDAGraphNode.record (dynamo_timed)"


def test_graph_summary_without_graphs():
    t, _ = gpu_bound(steps=2, kernels=3)
    s = graph_summary(t)
    assert s["uses_cuda_graphs"] is False and s["replays"] == 0 and s["graphs"] == []
    assert s["recording"]["ns"] == 0 and s["gpu_busy_ns"] > 0


def test_recording_names():
    yes = ["CUDAGraphNode.record (dynamo_timed)", "cudaStreamBeginCapture", "hipStreamEndCapture",
           "cudaGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags", "cuGraphInstantiate",
           "torch/cuda/graphs.py(98): capture_begin", "torch/cuda/graphs.py(119): capture_end",
           "CUDAGraphTreeManager.record_function",
           "<built-in method capture_end of pybind11_detail_function_record object at 0x7f>"]
    no = ["cudaGraphLaunch", "hipGraphLaunch", "torch/cuda/graphs.py(139): replay",
          "entire_frame_compile (dynamo_timed)", "cudaStreamIsCapturing", "aten::mm",
          "hipStreamGetCaptureInfo"]
    assert all(is_graph_recording(n) for n in yes)
    assert not any(is_graph_recording(n) for n in no)
    assert is_graph_launch("cudaGraphLaunch") and is_graph_launch("hipGraphLaunch")
    assert is_graph_launch("cuGraphLaunch") and not is_graph_launch("cudaGraphInstantiate")


def test_graph_recording_is_not_compile(planted):
    """The idle GPU time under CUDAGraphNode.record goes to graph_capture, never compile."""
    trace, truth = planted
    ev = trace.events
    gaps = gpu_gaps(trace)
    att = summarize(attribute(ev, gaps, steps_mod.gpu_ops(ev))["gaps"])
    assert att["by_cpu"]["compile"] == 0
    assert att["by_cpu"]["graph_capture"] == truth["record_ns"]
    assert compile_summary(ev, gaps=gaps)["compiles"] == 0


def test_analyze_exposes_graphs(planted, tmp_path):
    trace, truth = planted
    a = analyze(traceread.load(write_nsys_graphs(trace, tmp_path / "a.sqlite")))
    assert a.graphs["uses_cuda_graphs"] and a.graphs["replays"] == truth["replays"]
    d = a.to_dict()
    assert d["graphs"]["replay_gpu_ns"] == truth["replays"] * truth["replay_span_ns"]
    # the window starts at step 0: the eager warm-up and the recording are start-up
    assert int(a.devices["busy_ns"].sum()) == truth["replays"] * truth["replay_span_ns"]
    assert a.graphs["recording"]["ns"] == 0
    assert a.graphs["recording_whole_trace"]["ns"] == truth["record_ns"]
    assert a.context["uses_cuda_graphs"]
    assert a.verdict["bound"] not in ("compile", "launch")
    assert not any("CUDA graphs" in lv for lv in a.verdict["levers"])


# ------------------------------------------------------------------ real traces

_TL = "AMD-AGI__TraceLens/tests/traces/inference/"


@pytest.mark.parametrize("rel, launches, nodes", [
    ("vllm_decode_full/graph_execution.json.gz", 1, 421),
    ("vllm_prefilldecode_piecewise/graph_execution.json.gz", 25, 361),
    ("sglang_decode/sglang_Qwen3-8B_decode.json.gz", 1, 544),
])
def test_corpus_rocm_graph_replays(rel, launches, nodes):
    path = corpus_or_skip() / _TL / rel
    t = traceread.load(path)
    s = graph_summary(t)
    assert s["uses_cuda_graphs"] and s["launches"] == launches and s["mode"] == "node"
    assert sum(g["nodes"] for g in s["graphs"]) == nodes
    assert 0 < s["replay_gpu_ns"] <= s["gpu_busy_ns"]
    ops = steps_mod.gpu_ops(t.events)
    assert (ops["launch_ts"] >= 0).all()   # every replayed kernel finds its hipGraphLaunch


def test_corpus_cuda_graph_launches_hta():
    path = corpus_or_skip() / ("facebookresearch__HolisticTraceAnalysis/tests/data/"
                               "negative_queue_length_values_check/rank0.json.gz")
    s = graph_summary(traceread.load(path))
    assert s["launches"] == 70 and s["uses_cuda_graphs"]
    assert sum(g["nodes"] for g in s["graphs"]) == 345


def test_corpus_capture_trace_records_not_compiles():
    path = corpus_or_skip() / _TL / "xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz"
    a = analysed(path)
    by = a.attribution["by_cpu"]
    assert by["graph_capture"] > 200_000_000          # CUDAGraphNode.record: 243 ms
    assert by["compile"] < by["graph_capture"] / 4
    assert a.compile["compiles"] == 0
    assert a.verdict["bound"] != "compile"
    assert a.graphs["recording"]["ns"] >= 243_000_000


def test_stream_capture_region_is_graph_capture():
    """torch.cuda.graph capture (no cudagraph-trees span): the launches between
    BeginCapture and EndCapture are recorded, not run; that idle time is graph_capture."""
    from traceread.synth.scenarios import MS, T0, US, TraceBuilder

    b = TraceBuilder()
    b.launch(T0, 5 * US, T0 + 10 * US, 1 * MS)                     # eager warm-up
    b.runtime("cudaStreamBeginCapture", T0 + 2 * MS, 10 * US)
    for j in range(50):                                            # captured: no GPU rows
        b.cpu("aten::mm", T0 + 2 * MS + 20 * US + j * 100 * US, 80 * US)
        b.runtime("cudaLaunchKernel", T0 + 2 * MS + 50 * US + j * 100 * US, 20 * US)
    b.runtime("cudaStreamEndCapture", T0 + 7 * MS, 10 * US)
    b.runtime("cudaGraphInstantiate", T0 + 7 * MS + 20 * US, 980 * US)
    b.launch(T0 + 8 * MS, 20 * US, T0 + 8 * MS + 50 * US, 1 * MS, api="cudaGraphLaunch")
    t = b.build()
    gaps = gpu_gaps(t)
    assert gaps["duration"].tolist() == [8 * MS + 40 * US - 1 * MS]
    att = summarize(attribute(t.events, gaps, steps_mod.gpu_ops(t.events))["gaps"])
    by = att["by_cpu"]
    # capture [2ms, 7.01ms) plus instantiate [7.02ms, 8ms)
    assert by["graph_capture"] == (5 * MS + 10 * US) + 980 * US
    assert by["launch"] == 20 * US          # the cudaGraphLaunch call, before its replay
    assert by["cpu_op"] == 0
    s = graph_summary(t)
    assert s["recording"]["captures"] == 1 and s["uses_cuda_graphs"]
    assert s["recording"]["ns"] == (5 * MS + 10 * US) + 980 * US


def test_corpus_vllm_capture_trace_is_graph_recording():
    path = corpus_or_skip() / _TL / ("vllm_decode_full/capture_traces/"
                                     "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
    a = analysed(path)
    by = a.attribution["by_cpu"]
    assert by["graph_capture"] > 0.9 * sum(by.values())
    assert a.graphs["uses_cuda_graphs"] and a.graphs["replays"] == 0
    assert a.graphs["recording"]["captures"] == 1
    assert a.verdict["bound"] not in ("launch", "compile")


@pytest.mark.parametrize("rel", [
    _TL + "sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    _TL + "xdit_flux.1/split_traces/profile_trace_rank_0_annotation_iteration_0_execute_"
          "diffusion_1_256x256.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/negative_queue_length_values_check/"
    "rank0.json.gz",
])
def test_corpus_graph_replays_get_no_capture_advice(rel):
    a = analysed(corpus_or_skip() / rel)
    assert a.graphs["uses_cuda_graphs"] and a.context["uses_cuda_graphs"]
    levers = [lv if isinstance(lv, str) else str(lv) for lv in a.verdict["levers"]]
    assert not any("capture the step with CUDA graphs" in lv for lv in levers)


def test_corpus_steady_replays_are_not_graph_capture():
    """cudagraph-tree frames that run on every replay (in_recording, exceed_rerecord_limit,
    deferred_cudagraphify) are not recording."""
    path = corpus_or_skip() / _TL / ("xdit_flux.1/split_traces/profile_trace_rank_0_annotation_"
                                     "iteration_0_execute_diffusion_1_256x256.json.gz")
    a = analysed(path)
    assert a.graphs["replays"] == 4 and a.graphs["recording"]["ns"] == 0
    assert a.attribution["by_cpu"]["graph_capture"] == 0
