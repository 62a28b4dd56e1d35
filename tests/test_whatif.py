"""Levers as transformations of the replayed step (passes/replay/whatif.py, verdict/whatif.py),
and their proof.

Synthetic graphs: each model's arithmetic on a graph whose replay is worked out by hand
(exact savings, refusals). Real pairs: each before/after pair differs in one change; the
lever that changed is found from the traces, priced on BEFORE's replay, and the promise
must land within 25% of what the change realised (GPU pairs: tests/fixtures/gpu and h200,
H100/H200 traces whose steps match the loop's own clock; CPU pairs: tests/fixtures/pairs,
compared in shares of the step against the unprofiled truth, because the profiler's own
per-op cost inflates a CPU trace's steps several-fold).
"""
from __future__ import annotations

import json
from functools import lru_cache
from statistics import median

import numpy as np
import pandas as pd
import pytest

import traceread
from traceread.diffs.proof import proof
from traceread.diffs.trace import diff_analyses
from traceread.passes.replay import simulate
from traceread.passes.replay.graph import NEG, StepGraph
from traceread.passes.replay import whatif as W

from conftest import FIXTURES, analysed

H100 = {"name": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", "cc": "9.0", "bf16": True,
        "tf32": True, "fp8": True}


# -- a hand-made graph ------------------------------------------------------------------

class G:
    """One step: host nodes on lane 0 in order, GPU ops on lane 1 (in order), launch edges
    host -> GPU op, drain edges GPU op -> host node (the node returns when the op ends)."""

    def __init__(self):
        self.host, self.gpu, self.launch, self.drain = [], [], [], []

    def h(self, kind, name, ns, cat=None) -> int:
        self.host.append((kind, name, ns, cat or {"launch": "launch", "sync_wait": "sync",
                                                 "dataloader": "dataloader"}.get(kind, "cpu_op")))
        return len(self.host) - 1

    def k(self, name, ns, launched_by=None, kind="gpu_kernel") -> int:
        self.gpu.append((kind, name, ns))
        if launched_by is not None:
            self.launch.append((launched_by, len(self.gpu) - 1))
        return len(self.gpu) - 1

    def build(self) -> StepGraph:
        rows = [("step", "step begin", 0, "step")] + self.host + [("step", "step end", 0, "step")]
        nh = len(rows)
        ids = list(range(nh + len(self.gpu)))
        nodes = pd.DataFrame({
            "id": ids, "step": 0, "lane": [0] * nh + [1] * len(self.gpu),
            "seq": list(range(nh)) + list(range(len(self.gpu))),
            "kind": [r[0] for r in rows] + [g[0] for g in self.gpu],
            "name": [r[1] for r in rows] + [g[1] for g in self.gpu],
            "cat": [r[3] for r in rows] + [""] * len(self.gpu),
            "ts_ns": 0, "dur_ns": [r[2] for r in rows] + [g[2] for g in self.gpu],
            "corr": -1, "cost_ns": [r[2] for r in rows] + [g[2] for g in self.gpu],
            "gap_ns": 0, "release_ns": NEG})
        nodes.loc[[0] + ([nh] if self.gpu else []), "release_ns"] = 0
        edges = [(1 + h, nh + k, "launch", 0) for h, k in self.launch] + \
                [(nh + k, 1 + h, "drain", 0) for k, h in self.drain]
        edges = pd.DataFrame(edges or [(0, 0, "launch", 0)][:0],
                             columns=["src", "dst", "kind", "lag_ns"]).astype(
            {"src": np.int64, "dst": np.int64, "lag_ns": np.int64})
        lanes = pd.DataFrame({"lane": [0, 1], "what": ["host", "gpu"], "pid": 1, "tid": [1, -1],
                              "device": [-1, 0], "stream": [-1, 7],
                              "label": ["thread 1", "GPU 0 stream 7"]})
        steps = pd.DataFrame({"index": [0], "step": [1], "pid": [1], "start_ns": [0],
                              "end_ns": [0], "dur_ns": [0], "begin": [0], "end": [nh - 1]})
        return StepGraph(nodes=nodes, edges=edges, lanes=lanes, steps=steps, origin_ns=0)


def replay(g: StepGraph) -> float:
    return W.step_mean(simulate(g), g)


def saves(g, ids, facts=None, params=None) -> dict:
    return W.replay_models(g, facts or W.Facts(), ids, params)


US = 1_000


def test_unmodified_hand_graph_replays_as_worked_out():
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k", 1000 * US, a)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((0, s))
    g.h("host", "aten::add", 50 * US)
    assert replay(g.build()) == 1060 * US     # 10 launch + 1000 kernel, then 50 after the sync


def test_drop_syncs_lets_the_host_work_overlap():
    g = G()
    g.h("host", "aten::linear", 100 * US)
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k1", 1000 * US, a)
    s1 = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((0, s1))
    g.h("host", "python bookkeeping", 800 * US, cat="untraced")
    b = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k2", 100 * US, b)
    s2 = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((1, s2))
    graph = g.build()
    # with the syncs: 110, wait to 1110, 800 of host work, launch, wait for k2: 2020
    r = saves(graph, ["drop_syncs"])
    assert r["before_ns"] == 2020 * US
    # without: the host is done at 920, the GPU's 1100 us of kernels set the step
    assert r["after_ns"] == 1100 * US and r["saves_ns"] == 920 * US


def test_drop_syncs_takes_the_check_that_feeds_the_item():
    g = G()
    a = g.h("launch", "cuLaunchKernelEx", 5 * US)
    g.k("nvjet_gemm_bf16", 500 * US, a)
    g.h("host", "aten::isnan", 30 * US)
    b = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("void at::native::vectorized_elementwise_kernel<4, CompareEqFunctor>", 50 * US, b)
    g.h("host", "aten::any", 30 * US)
    c = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("void at::native::reduce_kernel<512, or_kernel>", 50 * US, c)
    g.h("host", "aten::item", 10 * US, cat="sync")
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((2, s))
    graph = g.build()
    r = saves(graph, ["drop_syncs"])
    assert r["before_ns"] == 605 * US          # the launch, then 500 + 50 + 50 of kernels
    # the isnan/any check, its kernels and the sync go; the GEMM stays and sets the step
    assert r["after_ns"] == 500 * US


def test_drop_reads_drops_the_read_backs_wait_alone():
    # late_read's change: an .item() read a step later -- its copy and its check still run,
    # the host no longer waits for them; the bare synchronize after the second kernel stays
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k1", 1000 * US, a)
    g.h("host", "aten::item", 10 * US, cat="sync")
    c = g.h("launch", "cudaMemcpyAsync", 5 * US)
    g.k("Memcpy DtoH (Device -> Pinned)", 5 * US, c, kind="gpu_copy")
    s1 = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((1, s1))
    g.h("host", "python bookkeeping", 800 * US, cat="untraced")
    b = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k2", 100 * US, b)
    s2 = g.h("sync_wait", "cudaDeviceSynchronize", 0)
    g.drain.append((2, s2))
    graph = g.build()
    r = saves(graph, ["drop_reads"])
    assert r["applied"] == ["drop_reads"]
    # before: the wait to the copy's end (1015), 800 of host, k2 launched at 1825: 1925;
    # after: the host's 825 us overlap k1 and the copy, k2 runs after them (1015-1115) and
    # the synchronize still waits for it
    assert r["before_ns"] == 1925 * US
    assert r["after_ns"] == 1115 * US
    assert r["saves_ns"] < saves(graph, ["drop_syncs"])["saves_ns"] + 1
    # a bare synchronize and a blocking host->device copy are no read-back
    h = G()
    a = h.h("launch", "cudaLaunchKernel", 10 * US)
    h.k("k1", 1000 * US, a)
    c = h.h("sync_wait", "cudaMemcpy", 5 * US)
    h.k("Memcpy HtoD (Pageable -> Device)", 5 * US, c, kind="gpu_copy")
    h.drain.append((1, c))
    s = h.h("sync_wait", "cudaDeviceSynchronize", 0)
    h.drain.append((1, s))
    r = saves(h.build(), ["drop_reads"])
    assert r["refused"] == {"drop_reads": "no blocking device->host read in the replayed steps"}
    assert saves(h.build(), ["drop_syncs"])["applied"] == ["drop_syncs"]


def test_drop_reads_finds_a_native_read_before_its_stream_sync():
    # native code (extra-p's nsys exports): cudaMemcpyAsync to the host, then untraced host
    # time and a cudaStreamSynchronize that waits for the copy -- no op names the read
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k1", 1000 * US, a)
    c = g.h("launch", "cudaMemcpyAsync", 5 * US)
    g.k("[CUDA memcpy Device-to-Host]", 5 * US, c, kind="gpu_copy")
    g.h("host", "untraced", 20 * US, cat="untraced")
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((1, s))
    g.h("host", "untraced", 800 * US, cat="untraced")
    r = saves(g.build(), ["drop_reads"])
    assert r["applied"] == ["drop_reads"] and r["after_ns"] < r["before_ns"]


def test_a_free_after_the_dropped_sync_waits_in_its_place():
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k", 1000 * US, a)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((0, s))
    g.h("host", "cudaFree", 20 * US, cat="alloc")     # cudaFree synchronizes the device
    g.h("host", "aten::add", 50 * US)
    r = saves(g.build(), ["drop_syncs"])
    # the wait moves to the free: only the free's own 20 us, now overlapping the wait, is
    # saved (without the moved wait the host would run 1000 us ahead)
    assert r["before_ns"] == 1080 * US and r["saves_ns"] == 20 * US
    assert saves(g.build(), ["no_empty_cache"])["saves_ns"] == 20 * US


def test_capture_replaces_the_launches_and_is_refused_across_a_sync():
    g = G()
    for i in range(20):
        a = g.h("launch", "cudaLaunchKernel", 5 * US)
        g.k(f"k{i}", 2 * US, a)
        if i < 19:
            g.h("host", "aten::mul", 20 * US)
    graph = g.build()
    r = saves(graph, ["cuda_graphs"])
    assert r["before_ns"] == (20 * 5 + 19 * 20) * US
    # one graph launch; the 20 kernels back to back, GRAPH_KERNEL_GAP_NS apart: the GPU sets it
    assert r["after_ns"] == 20 * (2 * US + W.GRAPH_KERNEL_GAP_NS)
    # a sync between the launches: refused, unless the syncs go first (replayed together)
    g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((19, len(g.host) - 1))
    b = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("after", 2 * US, b)
    graph = g.build()
    alone = saves(graph, ["cuda_graphs"])
    assert "sync" in alone["refused"]["cuda_graphs"] and alone["saves_ns"] == 0
    both = saves(graph, ["drop_syncs", "cuda_graphs"])
    assert both["applied"] == ["drop_syncs", "cuda_graphs"]
    assert both["saves_ns"] > saves(graph, ["drop_syncs"])["saves_ns"]


def test_capture_keeps_the_programs_own_host_work_between_the_launches():
    # 10 launches with dispatch between them, and 5 ms of untraced Python halfway (HTA's
    # trace_compare: 108 ms of it a step was "saved" by CUDA graphs): a graph replays the
    # kernels and their dispatch, not that work -- host_off_path is the lever that moves it
    g = G()
    for i in range(10):
        a = g.h("launch", "cudaLaunchKernel", 5 * US)
        g.k(f"k{i}", 2 * US, a)
        if i == 4:
            g.h("host", "untraced", 5_000 * US, cat="untraced")
        elif i < 9:
            g.h("host", "aten::mul", 20 * US)
    graph = g.build()
    r = saves(graph, ["cuda_graphs"])
    assert r["before_ns"] == (10 * 5 + 8 * 20 + 5_000) * US
    # the graph launch holds the Python: the step is the host's 5 ms + one launch (the
    # kernels run back to back after it, 22.6 us of GPU load)
    assert r["after_ns"] == 5_000 * US + W.GRAPH_LAUNCH_NS
    assert saves(graph, ["host_off_path"])["saves_ns"] == 5_000 * US


def test_capture_refused_where_graphs_are_in_use():
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("k", 2 * US, a)
    r = saves(g.build(), ["cuda_graphs"], W.Facts(ctx={"uses_cuda_graphs": True}))
    assert r["refused"] == {"cuda_graphs": "the program already uses CUDA graphs"}


def test_workers_hide_the_load_or_wait_for_it():
    g = G()
    g.h("dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10_000 * US)
    g.h("host", "aten::linear", 2_000 * US)
    graph = g.build()
    r = saves(graph, ["workers"])
    # the fewest workers that hide 10 ms behind 2 ms of compute, +1: 6; only the fetch is left
    assert r["params"]["workers"]["workers"] == 6
    assert r["after_ns"] == 2_000 * US + W.FETCH_NS
    r2 = saves(graph, ["workers"], params={"workers": {"workers": 2}})
    # two workers make a batch each 5 ms: the step waits 5 - 2 ms for it
    assert r2["after_ns"] == 2_000 * US + W.FETCH_NS + 3_000 * US
    refused = saves(graph, ["workers"], W.Facts(ctx={"dataloader_workers": True}))
    assert "already" in refused["refused"]["workers"]


def _gpu_bound(name: str, ns: int) -> StepGraph:
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k(name, ns, a)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((0, s))
    return g.build()


def test_tf32_scales_fp32_matmuls_by_the_devices_peak_ratio():
    graph = _gpu_bound("ampere_sgemm_128x64_nn", 10_000 * US)
    f = W.Facts(device=H100)
    r = saves(graph, ["tf32"], f)
    new = round(10_000 * US * 66.9 / 494.7)         # H100 SXM dense fp32 / tf32 peaks
    assert r["after_ns"] == 5 * US + new
    bf = saves(graph, ["bf16"], f)
    assert bf["after_ns"] == 5 * US + round(10_000 * US * 66.9 / 989.4)
    assert "unknown" in saves(graph, ["tf32"])["refused"]["tf32"]     # no device name
    lowp = saves(graph, ["bf16"], W.Facts(device=H100, ctx={"dtypes": {"bf16": True}}))
    assert "already" in lowp["refused"]["bf16"]


def test_fused_pointwise_chain_moves_half_the_bytes_once():
    g = G()
    for i in range(4):
        a = g.h("launch", "cudaLaunchKernel", 5 * US)
        g.k(f"void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor{i}>",
            100 * US, a)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((3, s))
    r = saves(g.build(), ["fuse_pointwise"])
    assert r["before_ns"] == 405 * US
    assert r["after_ns"] == 5 * US + 200 * US      # max(100, 0.5 x 400) after the one launch
    compiled = saves(g.build(), ["fuse_pointwise"], W.Facts(ctx={"compiled": True}))
    assert compiled["applied"] == []


def test_empty_cache_frees_and_mallocs_go():
    g = G()
    g.h("host", "aten::linear", 100 * US)
    g.h("host", "cudaFree", 1_000 * US, cat="alloc")
    g.h("host", "cudaMalloc", 500 * US, cat="alloc")
    g.h("host", "aten::relu", 100 * US)
    r = saves(g.build(), ["no_empty_cache"])
    assert r["saves_ns"] == 1_500 * US
    g2 = G()
    g2.h("host", "aten::linear", 100 * US)
    assert "no empty_cache" in saves(g2.build(), ["no_empty_cache"])["refused"]["no_empty_cache"]


def test_host_work_off_the_step_path_keeps_dispatch():
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("k", 50 * US, a)
    g.h("host", "aten::linear", 100 * US)
    g.h("host", "untraced", 5_000 * US, cat="untraced")
    g.h("host", "untraced", 20 * US, cat="untraced")      # dispatch-sized: stays
    assert saves(g.build(), ["host_off_path"])["saves_ns"] == 5_000 * US


def test_host_only_step_moves_traced_python_not_untraced_time():
    """A CPU step: the untraced time between ops may be the compute itself (a trimmed trace,
    ops not recorded); only traced Python frames move off the step."""
    g = G()
    g.h("host", "aten::linear", 100 * US)
    g.h("host", "untraced", 5_000 * US, cat="untraced")
    assert "no host work" in saves(g.build(), ["host_off_path"])["refused"]["host_off_path"]
    g.h("host", "train.py(12): log_metrics", 2_000 * US, cat="python")
    assert saves(g.build(), ["host_off_path"])["saves_ns"] == 2_000 * US


def test_pinned_copy_runs_at_pinned_bandwidth_and_its_call_returns():
    g = G()
    a = g.h("launch", "cudaMemcpyAsync", 8_000 * US)   # a pageable copy holds its call
    g.k("Memcpy HtoD (Pageable -> Device)", 8_000 * US, a, kind="gpu_copy")
    b = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("k", 1_000 * US, b)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((1, s))
    copies = {"pinned_gbps": 50.0, "by_direction": [{"direction": "HtoD", "gbps": 8.0}]}
    r = saves(g.build(), ["pin_copies"], W.Facts(copies=copies))
    # the copy at 50 GB/s instead of 8: 1.28 ms; its call a launch's time (5 us here)
    assert r["after_ns"] == 5 * US + 1_280 * US + 1_000 * US
    assert "pageable" in saves(_gpu_bound("k", US), ["pin_copies"])["refused"]["pin_copies"]


def test_larger_batch_scales_work_above_the_floor_per_sample():
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("small", 1_000 * US, a)
    b = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("big", 3_000 * US, b)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((1, s))
    r = saves(g.build(), ["larger_batch"], params={"larger_batch": {"x": 2}})
    assert r["before_ns"] == 4_005 * US
    assert r["after_ns"] == 6_005 * US             # 1000 + (1000 + 2 x 2000), after the launch
    assert r["saves_ns"] == round(4_005 * US - 6_005 * US / 2)


@pytest.mark.parametrize("launch, conversion, conv, sync, ns", [
    ("cudaLaunchKernel", "void cudnn::ops::nchwToNhwcKernel<float>",
     "sm90_xmma_fprop_implicit_gemm_conv", "cudaStreamSynchronize", 300),
    # TraceLens xdit flux on MI300X: MIOpen's NHWC convolutions on NCHW tensors run between
    # batched_transpose kernels; the model refused ("no layout conversion kernels")
    ("hipLaunchKernel", "batched_transpose_32x32_half",
     "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32", "hipStreamSynchronize", 200)])
def test_channels_last_drops_the_layout_conversions(launch, conversion, conv, sync, ns):
    g = G()
    a = g.h("launch", launch, 5 * US)
    g.k(conversion, ns * US, a)
    b = g.h("launch", launch, 5 * US)
    g.k(conv, 1_000 * US, b)
    s = g.h("sync_wait", sync, 0)
    g.drain.append((1, s))
    r = saves(g.build(), ["channels_last"])
    assert r["saves_ns"] == ns * US


def test_levers_together_are_replayed_not_summed():
    g = G()
    g.h("dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5_000 * US)
    g.h("host", "untraced", 5_000 * US, cat="untraced")
    a = g.h("launch", "cudaLaunchKernel", 5 * US)
    g.k("k", 6_000 * US, a)                 # no sync: the GPU's 6 ms is the step's floor
    graph = g.build()
    assert replay(graph) == 10_005 * US
    one = saves(graph, ["workers"])
    two = saves(graph, ["host_off_path"])
    both = saves(graph, ["workers", "host_off_path"])
    # each alone brings the host under the GPU's 6 ms; together they cannot go below it
    assert one["after_ns"] == two["after_ns"] == both["after_ns"] == 6_000 * US
    assert both["saves_ns"] == one["saves_ns"] < one["saves_ns"] + two["saves_ns"]


# -- real pairs: promised vs realised ----------------------------------------------------

GPU_PAIRS = [("gpu", s, "bad", "fixed") for s in
             ("data", "sync", "copy", "launch", "host", "compile", "alloc", "graphs")] + \
            [("h200", "pageable", "bad", "fixed")]
CPU_PAIRS = [("pairs", s, "before", "after") for s in ("workers", "compile", "fused_opt")]
TOLERANCE = 0.25


@lru_cache(maxsize=None)
def _pair(folder: str, name: str, b: str, a: str):
    before = analysed(FIXTURES / folder / f"{name}.{b}.json.gz")
    after = analysed(FIXTURES / folder / f"{name}.{a}.json.gz")
    d = diff_analyses(before, after)
    return before, after, d, proof(before, after, d)


def _truth(name: str) -> dict:
    return json.loads((FIXTURES / "pairs" / "truth.json").read_text())[name]


@pytest.mark.parametrize("folder,name,b,a", GPU_PAIRS, ids=[p[1] for p in GPU_PAIRS])
def test_gpu_pair_promise_within_25_percent(folder, name, b, a):
    _, _, d, p = _pair(folder, name, b, a)
    assert p is not None and p["basis"] == "replay" and not p["refused"], p
    err = abs(p["promised_ns"] - p["realised_ns"]) / p["realised_ns"]
    assert err <= TOLERANCE, p


def _cpu_error(name: str, params: dict | None = None) -> tuple[float, dict]:
    """(promised share of the replayed step - realised share of the unprofiled step) /
    realised share."""
    before, _, _, p = _pair("pairs", name, "before", "after")
    t = _truth(name)
    if params:
        g, _ = W.graph_of(before)
        r = W.replay_models(g, W.facts_from_analysis(before), p["levers"], params)
        promised = r["saves_ns"] / r["before_ns"]
    else:
        promised = p["promised_ns"] / p["replay_before_ns"]
    b, a = t["step_ns"]["before"], t["step_ns"]["after"]
    realised = (b - a) / b
    return (promised - realised) / realised, p


@pytest.mark.parametrize("name", [p[1] for p in CPU_PAIRS])
def test_cpu_pair_promise_within_25_percent_of_the_unprofiled_truth(name):
    t = _truth(name)
    params = {"workers": {"workers": t["num_workers"]["after"]}} if "num_workers" in t else None
    err, p = _cpu_error(name, params)
    assert p["levers"] == [{"workers": "workers", "compile": "fuse_pointwise",
                            "fused_opt": "fused_optimizer"}[name]]
    assert abs(err) <= TOLERANCE, (err, p)


def test_pair_promises_median_within_10_percent():
    errs = [abs(_pair(*x)[3]["error_pct"]) / 100 for x in GPU_PAIRS]
    for name in ("workers", "compile", "fused_opt"):
        t = _truth(name)
        params = {"workers": {"workers": t["num_workers"]["after"]}} if "num_workers" in t \
            else None
        errs.append(abs(_cpu_error(name, params)[0]))
    assert median(errs) <= 0.10, errs


def test_item_pair_on_cpu_promises_and_realises_nothing():
    # no device queue to drain on a CPU: the sync lever is found and priced at ~0, and the
    # unprofiled truth moved by less than the rounds' noise
    _, _, _, p = _pair("pairs", "item", "before", "after")
    assert p["levers"] == ["drop_syncs"] and p["promised_ns"] < 0.01 * p["replay_before_ns"]
    t = _truth("item")
    assert abs(t["step_ns"]["before"] - t["step_ns"]["after"]) < 0.02 * t["step_ns"]["before"]


def test_batch_pair_per_sample():
    # 8x the batch on a CPU MLP: most of the step is per-op cost that does not grow; the
    # shapes BEFORE recorded say which ops carry the batch and how much of each is fixed
    before, _, d, p = _pair("pairs", "batch", "before", "after")
    assert p["levers"] == ["larger_batch"] and p["basis"] == "replay"
    t = _truth("batch")
    k = t["batch"]["after"] / t["batch"]["before"]
    b, a = t["step_ns"]["before"], t["step_ns"]["after"]
    realised = (b - a / k) / b                       # per sample
    promised = p["promised_ns"] / p["replay_before_ns"]
    assert abs(promised - realised) / realised <= TOLERANCE, (promised, realised)


def test_batch_pair_without_the_batch_falls_back_to_the_floor_model():
    # the same pair priced without knowing which dimension is the batch: every op grows
    # above the lane's floor -- the bound the shapes model replaced, far below the truth
    before, _, _, p = _pair("pairs", "batch", "before", "after")
    g, _ = W.graph_of(before)
    f = W.facts_from_analysis(before)
    shaped = W.replay_models(g, f, ["larger_batch"], {"larger_batch": {"x": 8, "batch": 8}})
    floor = W.replay_models(g, f, ["larger_batch"], {"larger_batch": {"x": 8}})
    assert shaped["params"]["larger_batch"]["basis"] == "shapes"
    assert floor["params"]["larger_batch"]["basis"] == "floor"
    assert floor["saves_ns"] < 0.6 * shaped["saves_ns"]


def test_nothing_changed_finds_no_lever():
    _, _, _, p = _pair("gpu", "gpu", "bad", "fixed")
    assert p is None


# -- the ranking: the lever that fixes the pair's main problem comes first ---------------

FIXES = {"data": {"num_workers"}, "sync": {"remove_syncs", "per_param_item"},
         "copy": {"pin_copy", "side_stream_copy"}, "launch": {"cuda_graphs", "compile_fuse"},
         "host": {"off_step_path"}, "compile": {"mark_dynamic", "bucket_shapes", "warm_up"},
         "alloc": {"no_empty_cache"},
         "graphs": {"graphs_not_replayed", "graphs_not_replayed_host", "fixed_shapes_capture"}}


@pytest.mark.parametrize("name", sorted(FIXES))
def test_the_fixing_lever_ranks_first_and_is_replayed(name):
    before = _pair("gpu", name, "bad", "fixed")[0]
    top = before.verdict["actions"][0]
    assert top["id"] in FIXES[name], [x["id"] for x in before.verdict["actions"][:4]]
    assert top["basis"] == "replay"
    # the projected step is the replay's, in the measured frame
    assert 0 < top["projected_step_ns"] < before.step_stats["mean_ns"]


def test_a_trace_that_cannot_be_replayed_keeps_bounds_labelled():
    # a GPU-only trace (no launch calls): the host side cannot be replayed
    a = traceread.analyze(str(FIXTURES / "kineto" / "rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"))
    assert a.replay["replayable"] is False and "launch calls" in a.replay["reason"]
    acts = [x for x in a.verdict["actions"] if x["saves_ns"] is not None]
    assert acts and all(x["basis"] == "bound" for x in acts)
    text = a.report("text")
    assert "[bound]" in text


def test_a_step_the_replay_could_not_time_is_not_counted():
    """step_mean: a step whose replayed time is -1 (its end marker not in the graph: the
    last step of an nsys window) is left out, not replaced by its GPU lane's load (which
    counted a 0.3 ms "step" among 16 ms ones on gpu/host nsys and pulled the mean 12% down)."""
    from types import SimpleNamespace

    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("k", 300 * US, a)
    graph = g.build()
    graph.nodes.loc[graph.nodes["kind"] == "gpu_kernel", "step"] = 1   # the untimed step's work
    steps = pd.DataFrame({"index": [0, 1], "step": [1, 2], "measured_ns": [16_000 * US] * 2,
                          "replayed_ns": [16_000 * US, -1], "error_pct": [0.0, np.nan]})
    sched = SimpleNamespace(steps=steps, total_ns=32_000 * US)
    assert W.step_mean(sched, graph) == 16_000 * US
    assert W.step_mean(sched) == 16_000 * US


def test_drop_syncs_keeps_the_syncs_the_change_kept():
    """A diff whose AFTER still syncs (``keep``: AFTER's syncs per step) keeps each step's
    last ``keep`` sync ops -- the step-end read -- and drops the ones before them: the host
    still waits for the step's GPU work at its end."""
    g = G()
    syncs = []
    for k_ns, py_ns in ((1000, 800), (100, 50), (100, 0)):
        a = g.h("launch", "cudaLaunchKernel", 10 * US)
        k = g.k(f"k{len(syncs)}", k_ns * US, a)
        syncs.append(g.h("sync_wait", "cudaStreamSynchronize", 0))
        g.drain.append((k, syncs[-1]))
        if py_ns:
            g.h("host", "python", py_ns * US, cat="untraced")
    graph = g.build()
    last = W._last_syncs(graph, W._sync_nodes(graph), 1)
    assert graph.nodes["id"][last].tolist() == [1 + syncs[-1]]
    # keep 1: launches at 0, 820, 880 (10 us each); the kernels run 10-1010, 1010-1110,
    # 1110-1210, where the last sync returns
    r = saves(graph, ["drop_syncs"], params={"drop_syncs": {"keep": 1}})
    assert r["after_ns"] == 1210 * US
    # keep 2: the host waits for k1 at the second sync (1110), 50 us of Python, the launch,
    # k2 runs 1170-1270
    r = saves(graph, ["drop_syncs"], params={"drop_syncs": {"keep": 2}})
    assert r["after_ns"] == 1270 * US
    # keeping every sync leaves nothing to drop
    assert saves(graph, ["drop_syncs"], params={"drop_syncs": {"keep": 3}})["applied"] == []


def test_a_diff_keeps_the_syncs_after_still_makes():
    """diffs/proof.changed: 25 syncs a step -> 1 is drop_syncs keeping one a step (the model
    then keeps each step's last); 1 -> 0 keeps none."""
    from traceread.diffs.proof import changed

    sig = dict(loads_on_thread=False, workers=False, syncs_per_step=25.0,
               empty_cache_per_step=0, driver_allocs_per_step=0, graphs_not_replayed=False,
               graphs_replayed=False, recompiles=0, compiled=False, fused_optimizer=False,
               pageable_ns=0, exposed_copy_ns=0, lowp=False, tf32=False,
               layout_kernels_per_step=0, host_untraced_ns=0)
    got = {m: p for m, _, p in changed(sig, dict(sig, syncs_per_step=1.0))}
    assert got == {"drop_syncs": {"keep": 1}}
    got = {m: p for m, _, p in changed(dict(sig, syncs_per_step=1.0), dict(sig, syncs_per_step=0.09))}
    assert got == {"drop_syncs": {}}


def test_replaying_the_programs_graphs_replaces_its_compiled_region_only():
    """replay_graphs: the program's CUDA graph holds its compiled region's launches and host
    work; the input made before the region and the loss read after it stay (they ran
    around the region in the fixed program too)."""
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)          # the input (randn)
    g.k("randn", 5 * US, a)
    g.h("host", "Torch-Compiled Region: 0/0", 400 * US)
    b = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("gemm", 30 * US, b)
    g.h("host", "Torch-Compiled Region: 0/0", 2000 * US)   # recording the graph
    c = g.h("launch", "cudaLaunchKernel", 20 * US)          # the loss read after it
    k = g.k("sum", 5 * US, c)
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((k, s))
    graph = g.build()
    r = saves(graph, ["replay_graphs"], W.Facts(ctx={"graphs_not_replayed": True}))
    assert r["applied"] == ["replay_graphs"]
    # host: 10 (input's launch) + 8 (one graph launch for the region) + 20 (the read's
    # launch); GPU: the gemm from the graph launch's end (18 us) to 48, the read's kernel
    # after it to 53, where the sync returns. Had the graph taken the input and the read
    # too, one 8 us launch would have queued all three (about 49 us)
    assert r["after_ns"] == 10 * US + W.GRAPH_LAUNCH_NS + 30 * US + 5 * US


def test_where_no_region_is_named_the_step_end_read_stays_outside_the_graph():
    """replay_graphs on an nsys-like lane (no region names): the step's last sync op, the
    copy it reads through and the reduction launch that computes the value stay outside the
    replayed graph (a graph cannot hold a blocking read)."""
    g = G()
    a = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("gemm", 30 * US, a)
    g.h("host", "untraced", 400 * US, cat="untraced")
    a2 = g.h("launch", "cudaLaunchKernel", 10 * US)
    g.k("sm90_xmma_gemm_bf16", 1 * US, a2)      # the region's last kernel: a matmul
    b = g.h("launch", "cudaLaunchKernel", 20 * US)
    g.k("reduce_kernel", 5 * US, b)
    c = g.h("launch", "cudaMemcpyAsync", 15 * US)
    k = g.k("Memcpy DtoH", 2 * US, c, kind="gpu_copy")
    s = g.h("sync_wait", "cudaStreamSynchronize", 0)
    g.drain.append((k, s))
    graph = g.build()
    read = W._step_end_read(graph)
    names = set(graph.nodes["name"][read])
    assert {"cudaStreamSynchronize", "cudaMemcpyAsync"} <= names
    assert "gemm" not in names and int(read.sum()) >= 3   # the reduction's launch too
    assert "sm90_xmma_gemm_bf16" not in names
    out = W.capture_graphs(graph.copy(), W.Facts(ctx={"graphs_not_replayed": True}),
                           {"existing": True})
    n = out.nodes[out.nodes["kind"].isin(["host", "launch", "sync_wait"])]
    # the two matmuls' launches and the 400 us between them: one graph launch; the read's
    # calls stay as measured
    assert n["name"].tolist() == ["cudaGraphLaunch", "cudaLaunchKernel", "cudaMemcpyAsync",
                                  "cudaStreamSynchronize"]
    assert n["cost_ns"].tolist()[:3] == [W.GRAPH_LAUNCH_NS, 20 * US, 15 * US]


# -- the pricing's sample (split.sample_steps / representative) ---------------------------

def test_an_even_window_is_priced_on_its_first_steps():
    """Steps within EVEN_SHARE of the window's mean: the first run, each step once (the
    figures of an even window do not move)."""
    import numpy as np

    from traceread.passes.replay.split import representative

    meas = np.array([100, 101, 99, 100, 102, 98, 100, 101, 99, 100, 100, 103], np.int64)
    assert representative(meas, np.zeros(12, np.int64), 8) == (0, None)


def test_an_uneven_window_is_priced_on_a_run_weighted_to_its_step_times():
    """gpu/compile's nsys step times (ms): the first eight average 451 for a 516 ms window;
    the run chosen, weighted by the window's steps nearest each of its steps, averages the
    window's step within 2%. Each window step is counted once; a process's steps stand only
    for its own where the run has some."""
    import numpy as np

    from traceread.passes.replay.split import representative

    meas = np.array([235, 236, 235, 233, 234, 935, 627, 876, 683, 668, 714], np.int64)
    assert abs(meas[:8].mean() - meas.mean()) > 0.1 * meas.mean()
    k, w = representative(meas, np.zeros(11, np.int64), 8)
    run = meas[k:k + 8]
    assert w is not None and w.sum() == 11
    assert abs((run * w).sum() / w.sum() - meas.mean()) < 0.02 * meas.mean()
    # two processes: the second's steps are weighted by its own
    pid = np.r_[np.zeros(6, np.int64), np.ones(6, np.int64)]
    meas2 = np.r_[np.full(6, 100), np.full(6, 400)]
    meas2[0] = 10
    k, w = representative(meas2.astype(np.int64), pid, 8)
    own = pid[k:k + 8]
    assert w[own == 1].sum() == 6 and w[own == 0].sum() == 6


def test_a_step_no_measure_places_counts_once():
    """A step without a measured program step (-1: a marker missing) stands for nothing and
    keeps its own weight of one; the others are weighted as before."""
    import numpy as np

    from traceread.passes.replay.split import representative

    meas = np.array([10, -1, 10, 10, 10, 10, 10, 10, 50, 50, 50, 50], np.int64)
    k, w = representative(meas, np.zeros(12, np.int64), 8)
    assert w is not None
    run = meas[k:k + 8]
    assert (w[run < 0] == 1).all()
    known = run >= 0
    assert abs((run[known] * w[known]).sum() / w[known].sum() - meas[meas >= 0].mean()) < 1.0
