"""The program's step counts the time the GPU held a step's work before its first op started
(queued while the GPU idled: the front-end, or a dependency the trace does not show) as the
GPU's. TraceLens' vLLM graph execution (MI300, ROCm): the host queues the step's graph in
2.4 ms, the GPU starts it 8.4 ms after the step began and is busy 10.7 ms -- 18.6 ms of GPU
time, read as a 10.7 ms step before."""
from __future__ import annotations

from conftest import CORPUS, analysed, corpus_or_skip
from traceread.analysis import analyze
from traceread.synth.scenarios import MS, T0, US, TraceBuilder


def _queued_start(steps: int = 4, hold: int = 3 * MS):
    """Steps of 1 ms on the host, each launching one 2 ms kernel at +10 us; the kernel starts
    ``hold`` after its launch returned (queued, the GPU idle) or after the previous kernel."""
    b = TraceBuilder()
    gpu_free = 0
    for k in range(steps):
        t = T0 + k * 6 * MS
        b.step(k, t, MS)
        start = max(t + 15 * US + hold, gpu_free)
        b.launch(t + 10 * US, 5 * US, start, 2 * MS)
        gpu_free = start + 2 * MS
    return b.build()


def test_a_queued_first_op_is_the_gpus_time():
    a = analyze(_queued_start())
    st = a.steps
    # 3 ms queued + 2 ms of work: the GPU's 5 ms, not the kernel's 2 ms nor the host's 1 ms
    assert (st["gpu_ns"].to_numpy()[1:] == 5 * MS).all()
    assert (st["program_ns"].to_numpy()[1:] == 5 * MS).all()
    assert set(st["bound_by"][1:]) == {"gpu"}


def test_no_queued_lead_no_change():
    a = analyze(_queued_start(hold=0))
    st = a.steps
    # each kernel starts as its launch returns: the GPU's time is the kernel's 2 ms
    assert (st["gpu_ns"].to_numpy() == 2 * MS).all()
    assert (st["program_ns"].to_numpy() == 2 * MS).all()


def test_vllm_graph_execution_step_is_the_gpus():
    corpus_or_skip()
    a = analysed(CORPUS / "AMD-AGI__TraceLens/tests/traces/inference/vllm_decode_full/"
                 "graph_execution.json.gz")
    s = a.to_dict()["steps"]["items"][0]
    assert s["gpu_ns"] > s["busy_ns"] + 7_000_000          # the 7.8 ms queued lead counts
    assert s["program_ns"] == s["gpu_ns"] and s["bound_by"] == "gpu"
