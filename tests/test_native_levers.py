"""A program that is not PyTorch gets levers in CUDA's words, not torch's."""
from __future__ import annotations

import pytest

import numpy as np

from traceread.analysis import analyze
from traceread.synth.scenarios import TraceBuilder

MS = 1_000_000
US = 1_000


def _sync_loop(kernel: str) -> TraceBuilder:
    """kernel, then cudaDeviceSynchronize, then 2 ms of host work before the next launch."""
    b = TraceBuilder()
    t = 0
    for _ in range(40):
        b.launch(t, 10 * US, t + 20 * US, 1 * MS, name=kernel)
        b.runtime("cudaDeviceSynchronize", t + 30 * US, 1 * MS)
        t += 1 * MS + 100 * US
        b.runtime("cudaMalloc", t, 300 * US)
        t += 2 * MS
    return b


def test_cuda_program_gets_cuda_levers():
    a = analyze(_sync_loop("stencil_kernel(float*, int)").build())
    assert a.context["pytorch"] is False
    text = " ".join(a.verdict["levers"])
    assert "torch" not in text and "py-spy" not in text
    assert "cudaMallocAsync" in text


def test_pytorch_kernels_keep_pytorch_levers():
    a = analyze(_sync_loop("void at::native::vectorized_elementwise_kernel<4>()").build())
    assert a.context["pytorch"] is True
    # cudaMalloc every step and no free: the caching allocator growing (no empty_cache() to
    # remove), in PyTorch's words
    text = " ".join(a.verdict["levers"])
    assert "PYTORCH_CUDA_ALLOC_CONF" in text and "empty_cache" not in text


def _untraced_loop(kernel: str) -> TraceBuilder:
    """kernel, a short traced OS call (nsys osrt: the host is traced), then ~2 ms of host
    time no traced call covers before the next launch."""
    b = TraceBuilder()
    t = 0
    for _ in range(40):
        b.launch(t, 10 * US, t + 20 * US, 200 * US, name=kernel)
        b.cpu("write", t + 30 * US, 5 * US, kind="osrt")
        t += 2 * MS
    return b


def test_untraced_host_time_guesses_python_only_in_a_pytorch_program():
    """'(Python?)' sent the reader of a C/MPI program (pipit's saxpy, extra-p's ex-gpu) looking
    for Python that is not there; a PyTorch program keeps the guess."""
    native = analyze(_untraced_loop("stencil_kernel(float*, int)").build())
    torch_ = analyze(_untraced_loop("void at::native::vectorized_elementwise_kernel<4>()").build())
    assert "untraced time on the launching thread (the program's own code between traced " \
           "calls)" in native.verdict["summary"] and "Python" not in native.verdict["summary"]
    assert "untraced time on the launching thread (Python?)" in torch_.verdict["summary"]


def test_real_native_nsys_export_names_no_python():
    from pathlib import Path

    import traceread

    p = Path(__file__).parent / "fixtures" / "nsys" / "ex-gpu.s10.sqlite"
    host = analyze(traceread.load(p)).to_dict()["facts"]["figures"]["culprits"]["host"]
    assert host.startswith("untraced time on the launching thread (the program's own code")


def _stream_per_iteration() -> TraceBuilder:
    """Windows extra-p runs: a 10 ms cudaStreamCreate between ms-long kernels."""
    b = TraceBuilder()
    t = 0
    for _ in range(20):
        b.runtime("cudaStreamCreate", t, 10 * MS)
        b.launch(t + 10 * MS, 10 * US, t + 10 * MS + 20 * US, 5 * MS, name="test2(double *)")
        b.runtime("cudaStreamDestroy", t + 10 * MS + 40 * US, 30 * US)
        t += 16 * MS
    return b


def test_stream_creation_is_set_up_not_launch_overhead():
    """It was 'launch-bound: launch overhead between short kernels (cudaStreamCreate ...)' beside
    5 ms kernels, with CUDA graphs and fusion as levers; the time is resource set-up."""
    a = analyze(_stream_per_iteration().build())
    by = a.attribution["by_cpu"]
    assert by["alloc"] > 0.9 * (by["alloc"] + by["launch"])
    assert a.verdict["bound"] != "launch" and "cudaStreamCreate" in a.verdict["summary"]


def test_real_export_stream_and_event_calls_are_not_launches():
    from pathlib import Path

    import traceread
    from traceread.passes import attribution as attr

    ev = traceread.load(Path(__file__).parent / "fixtures" / "nsys" /
                        "concurrent_profile1.sqlite").events
    api = ev[ev["kind"] == "runtime"]
    names, cats = attr._codes(api["name"])
    got = attr._classify(np.full(len(api), attr.HOST_KINDS.index("runtime")), names, cats,
                         None, None)
    cls = dict(zip(api["name"].astype(str), (attr.CPU_CATEGORIES[i] for i in got)))
    assert {cls[n] for n in ("cudaStreamCreate", "cudaStreamDestroy", "cudaEventCreate",
                             "cudaEventDestroy", "cudaHostAlloc")} == {"alloc"}
    assert cls["cudaLaunchKernel"] == cls["cudaMemcpyAsync"] == cls["cudaEventRecord"] == "launch"


def test_the_first_runtime_call_creates_the_context_and_stays(corpus_dir):
    """extra-p's concurrent_profile16 opens with a 172 ms cudaStreamCreate: the CUDA runtime
    creates its context inside its first call, which no reuse of buffers removes. The
    allocator model (``no_empty_cache``) kept it among the calls it removes; in a window that
    starts with the trace it is now kept, and nothing else is."""
    import traceread
    from traceread import load
    from traceread.analysis import _gpu_ops
    from traceread.passes.replay import build_graph
    from traceread.passes.replay.whatif import _context_creation

    path = corpus_dir / "extra-p__extrap/concurrent_profile16.sqlite"
    if not path.is_file():
        pytest.skip("not in the corpus")
    t = load(str(path))
    a = traceread.analyze(t)
    g = build_graph(t.events, _gpu_ops(t.events, True), a.steps)
    kept = g.nodes[_context_creation(g)]
    assert kept["name"].tolist() == ["cudaStreamCreate"]
    assert kept["dur_ns"].iloc[0] > 170_000_000


def test_a_capture_or_a_larger_batch_keeps_the_threads_sleeps(gpu_sqlite):
    """nsys' nonvtx capture of gpu/data.bad: its DataLoader is a clock_nanosleep on the
    launching thread (189 ms of a 401 ms window without steps). The CUDA-graph model made
    one run of the window's launches and dropped the sleeps inside it ("saves 321 ms"), and
    the larger batch kept them fixed per step ("saves 200 ms" a step's worth of samples).
    A graph does not sleep for the program, and nothing proves a sleep fixed per step: the
    graph saves at most the window less its sleeps, a doubled batch at most half that."""
    import traceread
    from conftest import analysed

    path = gpu_sqlite / "data.bad.nonvtx.sqlite"
    a = analysed(path)
    ev = traceread.load(str(path)).events
    w = a.window
    inside = (ev["ts"] >= w.start) & (ev["ts"] < w.end) & (ev["name"] == "clock_nanosleep")
    sleep = int(ev.loc[inside, "dur"].sum())
    window = int(a.devices["window_ns"].sum())
    assert sleep > 0.4 * window
    acts = {x["id"]: x for x in a.verdict["actions"]}
    assert acts["cuda_graphs"]["saves_ns"] <= window - sleep
    assert acts["larger_batch"]["saves_ns"] <= (window - sleep) / 2
