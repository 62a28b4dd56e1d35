"""Culprits (passes/culprits.py, docs/analysis.md §4 "Culprits"): only the launching
threads' own frames, clipped to the gaps they explain, never another cause's frame, the
innermost op that does the work; a sync's caller is the frame around the call that drained.

Planted truth in Kineto and nsys form, plus the real traces the rules came from."""
from __future__ import annotations

import re

import pytest

from conftest import analysed, corpus_or_skip, materialise
from traceread.analysis import analyze
from traceread.passes import culprits as C
from traceread.synth.scenarios import DATALOADER_OP, MS, US, TraceBuilder

FORMS = ("kineto-2.4", "nsys")
MAIN, HELPER = 1, 3
SPAN_RX = re.compile(r"^(.*) spans ([\d.]+) ms of idle GPU time$")


def _host(a) -> tuple[str, float]:
    # the host culprit as a host action names it, else as the facts hold it (xDiT flux capture:
    # its one host lever is withdrawn, diffusers' hooks being the framework's own work)
    text = next((x["culprit"] for x in a.verdict["actions"] if x["cause"] == "host"),
                a.facts.figures["culprits"]["host"])
    m = SPAN_RX.match(re.split(r" \(inside |; largest op inside", text)[0])
    assert m, text
    return m.group(1), float(m.group(2))


def _gapped(b: TraceBuilder, gaps: int = 3, gap: int = 10 * MS) -> list[int]:
    """Kernels of 100 us, ``gap`` apart, each launched by the main thread the instant it
    runs (a zero-length call: the host was late, so the gap is the host's, not ``queued``);
    the gap starts."""
    starts = []
    for k in range(gaps + 1):
        t = k * (gap + 100 * US)
        b.launch(t, 0, t, 100 * US, tid=MAIN)
        starts.append(k * (gap + 100 * US) + 100 * US)
    return starts[:-1]


def helper_thread():
    """Each 10 ms gap: the main (launch) thread runs ``slow_op`` for 6 ms; a helper thread
    that never launches sits in a 12 s ``read()`` and runs ``helper_work`` 1 ms at a time
    through every gap (more time, shorter rows: the old pick)."""
    b = TraceBuilder()
    starts = _gapped(b)
    for s in starts:
        b.cpu("slow_op", s + 1 * MS, 6 * MS, tid=MAIN)
        for i in range(10):
            b.cpu("helper_work", s + i * MS, 1 * MS, tid=HELPER)
    b.cpu("read", 0, 12_000 * MS, kind="osrt", tid=HELPER)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_culprit_comes_from_the_launching_thread(how, tmp_path):
    name, ms = _host(analyze(materialise(helper_thread(), how, tmp_path, "helper"), steps="all"))
    assert (name, ms) == ("slow_op", 18.0)


def recursion():
    """``outer.py(1): f`` recurses (a frame inside a frame of the same name) through each
    10 ms gap on the launch thread: its span is the 30 ms of gaps it covers, not the sum of
    its nested rows' overlaps (90 ms)."""
    b = TraceBuilder()
    starts = _gapped(b)
    for s in starts:
        for depth in range(3):
            b.cpu("outer.py(1): f", s - depth * US, 10 * MS + 2 * depth * US, kind="python",
                  tid=MAIN)
    return b.build()


def test_span_is_a_union_clipped_to_the_gaps():
    name, ms = _host(analyze(recursion(), steps="all"))
    assert (name, ms) == ("outer.py(1): f", 30.0)


def other_causes(how: str):
    """Each 10 ms gap on the launch thread: the DataLoader fetch for 5 ms with the dataset's
    ``load_sample`` inside it, a ``gloo:all_reduce`` for 2 ms, a wait for 1 ms, then
    ``augment`` for 2 ms of host work of its own."""
    b = TraceBuilder()
    starts = _gapped(b)
    for s in starts:
        b.cpu(DATALOADER_OP, s, 5 * MS, tid=MAIN)
        b.cpu("load_sample", s + 100 * US, 4800 * US, tid=MAIN)
        b.cpu("gloo:all_reduce", s + 5 * MS, 2 * MS, tid=MAIN)
        b.cpu("sync_block", s + 7 * MS, 1 * MS, tid=MAIN)
        if how.startswith("kineto"):
            b.cpu("threading.py(359): wait", s + 7 * MS, 1 * MS, kind="python", tid=MAIN)
        else:
            b.cpu("pthread_cond_wait", s + 7 * MS, 1 * MS, kind="osrt", tid=MAIN)
        b.cpu("augment", s + 8 * MS, 2 * MS, tid=MAIN)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_culprit_is_never_a_frame_of_another_cause(how, tmp_path):
    a = analyze(materialise(other_causes(how), how, tmp_path, "other"), steps="all")
    ops = a.trace.events
    got = C.innermost_in_gaps(ops, a.gaps, _ops(a), ("cpu_op", "annotation", "osrt"))
    # not load_sample (inside the DataLoader's fetch), not the collective, not the wait, nor
    # sync_block (it only encloses the wait)
    assert got == ("augment", 6 * MS, "", 0)


def slow_launch(how: str):
    """Each 10 ms gap on the launch thread: ``first_call`` for 8 ms, 7.5 ms of it a launch
    call (a cold-start module load), then ``augment`` for 2 ms of host work of its own."""
    b = TraceBuilder()
    for s in _gapped(b):
        b.cpu("first_call", s, 8 * MS, tid=MAIN)
        b.runtime("cudaLaunchKernel", s + 200 * US, 7500 * US, tid=MAIN)
        b.cpu("augment", s + 8 * MS, 2 * MS, tid=MAIN)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_launch_calls_are_the_launch_causes_not_the_host_culprits(how, tmp_path):
    """The host culprit counted the launch calls inside an op as its own host time, which
    the causes count as launch time (HTA's MI250 minitoy: "aten::add_ spans 6.6 ms" for a
    cold-start hipLaunchKernel, the host cause 2.0 ms)."""
    a = analyze(materialise(slow_launch(how), how, tmp_path, "launch"), steps="all")
    got = C.innermost_in_gaps(a.trace.events, a.gaps, _ops(a), ("cpu_op", "annotation", "osrt"))
    assert got == ("augment", 6 * MS, "", 0)


AUTOGRAD = 5


def backward_wait(how: str):
    """The main thread launches the first kernel, then sits in ``backward`` across each
    10 ms gap while autograd's thread does ``MulBackward0`` for 4 ms and launches the
    kernel that ends the gap."""
    b = TraceBuilder()
    gap = 10 * MS
    for k in range(4):
        t = k * (gap + 100 * US)
        b.launch(t, 0, t, 100 * US, tid=MAIN if k == 0 else AUTOGRAD)
    for k in range(3):
        s = k * (gap + 100 * US) + 100 * US
        b.cpu("backward", s, gap + 50 * US, tid=MAIN)
        b.cpu("MulBackward0", s + 1 * MS, 4 * MS, tid=AUTOGRAD)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_a_thread_waiting_while_another_launches_is_not_the_culprit(how, tmp_path):
    """The main thread's ``backward()`` frame spans the backward's gaps while autograd's
    thread does the work and the launching (HTA's trace_diff control: "## backward ## spans
    14.5 ms"; TraceLens mi300 resnet18's host work "outside the model" was run_backward's,
    2.1x that time): the frame is a wait, the work is autograd's."""
    a = analyze(materialise(backward_wait(how), how, tmp_path, "bwd"), steps="all")
    got = C.innermost_in_gaps(a.trace.events, a.gaps, _ops(a), ("cpu_op", "annotation", "osrt"))
    assert got == ("MulBackward0", 12 * MS, "", 0)


def _ops(a):
    from traceread.passes import steps

    return steps.gpu_ops(a.trace.events)


def module_range():
    """Each 10 ms gap: an ``nn.Module: Net`` range over the whole gap, inside it
    ``aten::conv2d`` doing 7 ms of work: the op is named, not the module."""
    b = TraceBuilder()
    for s in _gapped(b):
        b.cpu("nn.Module: Net", s, 10 * MS, kind="annotation", tid=MAIN)
        b.cpu("aten::conv2d", s + 1 * MS, 7 * MS, tid=MAIN)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_innermost_op_over_the_enclosing_module(how, tmp_path):
    name, ms = _host(analyze(materialise(module_range(), how, tmp_path, "mod"), steps="all"))
    assert (name, ms) == ("aten::conv2d", 21.0)


def ddp_forward():
    """Each 10 ms gap: ``DistributedDataParallel.forward`` over the whole gap; inside it four
    ops do 3 + 2 + 2 + 1 ms of work -- none half of the range, together 80% of it. The op
    doing the most work is named first, the range around it for context."""
    b = TraceBuilder()
    for s in _gapped(b):
        b.cpu("DistributedDataParallel.forward", s, 10 * MS, kind="annotation", tid=MAIN)
        t = s + 500 * US
        for name, dur in (("op_a", 3 * MS), ("op_b", 2 * MS), ("op_c", 2 * MS), ("op_d", 1 * MS)):
            b.cpu(name, t, dur, tid=MAIN)
            t += dur
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_enclosing_range_gives_way_to_the_op_doing_the_work(how, tmp_path):
    a = analyze(materialise(ddp_forward(), how, tmp_path, "ddp"), steps="all")
    text = next(x["culprit"] for x in a.verdict["actions"] if x["cause"] == "host")
    assert text == ("op_a spans 9.0 ms of idle GPU time "
                    "(inside DistributedDataParallel.forward, 30.0 ms)")


def scattered():
    """As ``ddp_forward`` but the range's work is spread over eight ops of 1 ms: none does
    a quarter of it, so the range leads and the largest op inside follows."""
    b = TraceBuilder()
    for s in _gapped(b):
        b.cpu("DistributedDataParallel.forward", s, 10 * MS, kind="annotation", tid=MAIN)
        for i in range(8):
            b.cpu(f"op_{i}", s + 500 * US + i * MS, 1 * MS, tid=MAIN)
    return b.build()


def test_scattered_work_keeps_the_range_first():
    a = analyze(scattered(), steps="all")
    text = next(x["culprit"] for x in a.verdict["actions"] if x["cause"] == "host")
    assert text == ("DistributedDataParallel.forward spans 30.0 ms of idle GPU time; "
                    "largest op inside: op_0 3.0 ms")


def item_callers():
    """Every step: ``metrics`` calls ``.item()`` on CPU tensors five times (no CUDA call
    inside: they wait for nothing) while the GPU works; ``loss_log`` calls the one
    ``.item()`` that blocks in cudaStreamSynchronize until the GPU drains."""
    b = TraceBuilder()
    for k in range(3):
        t = k * 20 * MS
        b.launch(t, 10 * US, t + 20 * US, 5 * MS, tid=MAIN)          # GPU busy [t, t+5ms)
        b.cpu("metrics", t + 100 * US, 1 * MS, tid=MAIN)
        for i in range(5):
            b.cpu("aten::item", t + 200 * US + i * 100 * US, 50 * US, tid=MAIN)
        b.cpu("loss_log", t + 2 * MS, 3100 * US, tid=MAIN)
        b.cpu("aten::item", t + 2100 * US, 2940 * US, tid=MAIN)
        b.runtime("cudaStreamSynchronize", t + 2200 * US, 2830 * US, tid=MAIN)
        b.cpu("work", t + 6 * MS, 10 * MS, tid=MAIN)
    b.launch(3 * 20 * MS, 10 * US, 3 * 20 * MS + 10 * US, 1 * MS, tid=MAIN)
    return b.build()


@pytest.mark.parametrize("how", FORMS)
def test_sync_caller_is_the_frame_around_the_blocking_call(how, tmp_path):
    a = analyze(materialise(item_callers(), how, tmp_path, "item"), steps="all")
    text = next(x["culprit"] for x in a.verdict["actions"] if x["cause"] == "sync")
    assert text.endswith("called from loss_log"), text


# ---------------------------------------------------------------- real traces

XDIT = "AMD-AGI__TraceLens/tests/traces/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz"


@pytest.mark.corpus
def test_xdit_flux_capture_culprit_fits_in_its_gaps():
    """Before: "threading.py(359): wait spans 904.8 ms of idle GPU time" in a 561 ms trace
    (a waiting thread's frame, its nested rows summed)."""
    import numpy as np
    from traceread.passes import attribution as A

    a = analysed(str(corpus_or_skip() / XDIT))
    name, ms = _host(a)
    g = a.gaps
    long_ = ~A.is_sync_drained(g) & (g["duration"].to_numpy(np.int64) > A.SHORT_GAP_NS)
    host_ns = sum(int(g[f"cpu_{c}"][long_].sum()) for c in ("cpu_op", "python"))
    assert "wait" not in name
    assert 0 < ms * 1e6 <= host_ns + 0.05e6
    assert ms * 1e6 <= a.span_ns


@pytest.mark.corpus
def test_nsys_culprits_are_launch_thread_frames():
    """nsys-ai mfu_2gpu: the host culprit is an operator of the launching thread, its
    emit_nvtx per-call suffix pooled ("aten::addmm", not "…, seq = 47729, op_id = …")."""
    a = analysed(str(corpus_or_skip() / "GindaChen__nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite"))
    name, ms = _host(a)
    assert "seq =" not in name and name.startswith("aten::")


def test_reaching_rows_filters_a_block_at_a_time_as_one_pass_would():
    """``culprits._reaching_rows``: the masked rows whose [ts, te) reach the intervals, the
    same as one ``intervals.reaching`` over all of them, across block edges."""
    import numpy as np
    from traceread.passes import attribution as attr
    from traceread.passes import culprits as C
    from traceread.passes import intervals
    rng = np.random.default_rng(3)
    n = attr.THREAD_BLOCK + 5000
    ts = np.sort(rng.integers(0, 10**9, n))
    dur = rng.integers(0, 10**5, n)
    mask = rng.random(n) < 0.6
    iv = intervals.union(np.array([10**6, 5 * 10**8]), np.array([3 * 10**6, 5 * 10**8 + 10**7]))
    rows = np.flatnonzero(mask)
    want = rows[intervals.reaching(iv, ts[rows], ts[rows] + dur[rows])]
    got = C._reaching_rows(mask, iv, ts, lambda r: ts[r] + dur[r])
    assert got.dtype == want.dtype and (got == want).all() and len(want)
    assert not len(C._reaching_rows(np.zeros(n, bool), iv, ts, lambda r: ts[r] + dur[r]))
