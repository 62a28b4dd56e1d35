"""Host copy staging (``copy_staging``): a copy call that moves pageable host memory copies it
through a pinned bounce buffer inside the call. That time, while the GPU idles, is the copy's
own host cost -- the ``copy`` cause's, priced by the pinned-copy lever -- not launch overhead.
Before, the Kineto resnet50 sample's first ``cudaMemcpyAsync`` (18 MiB pageable, ~43 ms in the
call, the GPU idle) was the launch cause's culprit and the larger-micro-batch lever cited it."""
from __future__ import annotations

import pytest

from traceread import analyze, load
from traceread.synth.scenarios import MS, T0, US, TraceBuilder

STEPS, KERNELS, KERNEL_NS = 4, 20, 500 * US
STAGE, COPY, PY = 8 * MS, 2 * MS, 1 * MS
BIG = 16 << 20


def staged_copy(mem: str | None = "Pageable", waits: bool = False, nbytes: int = BIG,
                api: str = "cudaMemcpyAsync", around: str | None = None, synced: bool = False,
                pinned_too: bool = False, copy_sync: bool = False):
    """Per step: the batch copied to the GPU (``nbytes``, HtoD) by a cudaMemcpyAsync that
    holds the host ``STAGE`` before its copy (``COPY``) starts and returns 50 us before the
    copy ends (as the real sample's calls do), then 20 launches of 500 us kernels and 1 ms of
    Python. ``waits``: the call starts while the step's first 10 kernels are still queued
    (the driver waits for them, then stages); else the GPU is idle when it starts. ``mem``:
    the host memory kind in the copy's name (None: not named). ``api="cudaMemcpy"``: a
    synchronous copy, returning 5 us after its copy ends. ``around``: an annotation around
    the copy (``Optimizer.step#SGD.step``: the optimizer's parameters sent back). ``synced``:
    the step ends in a cudaStreamSynchronize that returns 5 us after the last kernel.
    ``pinned_too``: a 4 KiB pinned HtoD copy (10 us call, 5 us copy) before the batch's.
    ``copy_sync``: the copy's own cudaStreamSynchronize right after its call (PyTorch's
    copy from pageable memory), returning 5 us after the copy ends."""
    b = TraceBuilder(path="staged_copy.json")
    t, gpu = T0, T0
    name = "Memcpy HtoD" + (f" ({mem} -> Device)" if mem else "")
    for k in range(STEPS):
        s = t
        first = KERNELS // 2 if waits else 0
        for _ in range(first):
            gpu = max(gpu, t + 15 * US)
            b.launch(t, 10 * US, gpu, KERNEL_NS, name="sm90_xmma_gemm_bf16")
            gpu += KERNEL_NS
            t += 10 * US
        if pinned_too:
            gpu = max(gpu, t + 15 * US)
            b.launch(t, 10 * US, gpu, 5 * US, name="Memcpy HtoD (Pinned -> Device)",
                     api="cudaMemcpyAsync", kind="memcpy", copy_kind="HtoD", bytes=4096)
            gpu += 5 * US
            t += 10 * US
        copy_at = max(t, gpu) + STAGE
        call = copy_at + COPY + (5 * US if api == "cudaMemcpy" else -50 * US) - t
        if around:
            b.cpu(around, t, call, kind="annotation")
        b.cpu("aten::copy_", t, call)
        b.launch(t, call, copy_at, COPY, name=name, api=api, kind="memcpy",
                 copy_kind="HtoD", bytes=nbytes)
        t += call
        gpu = copy_at + COPY
        if copy_sync:
            b.runtime("cudaStreamSynchronize", t, gpu + 5 * US - t)
            t = gpu + 5 * US
        for _ in range(KERNELS - first):
            gpu = max(gpu, t + 15 * US)
            b.launch(t, 10 * US, gpu, KERNEL_NS, name="sm90_xmma_gemm_bf16")
            gpu += KERNEL_NS
            t += 10 * US
        b.cpu("train.py(40): bookkeeping", t, PY, kind="python")
        t += PY
        if synced:
            b.runtime("cudaStreamSynchronize", t, max(gpu, t) + 5 * US - t)
            t = max(gpu, t) + 5 * US
        t = max(t, gpu)
        b.step(k, s, t - s)
    return b.build()


def _acts(a) -> dict:
    return {x["id"]: x for x in a.verdict["actions"]}


@pytest.mark.parametrize("waits", [False, True])
def test_a_pageable_copy_call_stages_its_copy_on_the_host(waits):
    # planted: each step's call holds the host STAGE (8 ms) with the GPU idle before its copy
    # -- from its start, or from the queue's draining when it first waits for 10 queued
    # kernels (the GPU busy then: no gap, no cause)
    a = analyze(staged_copy(waits=waits))
    parts = a.facts.figures["cause_ns"]
    assert parts["copy_staging"] == STEPS * STAGE
    assert a.attribution["by_cpu"]["copy_staging"] == STEPS * STAGE
    assert parts["launch"] < STEPS * MS          # the launches' own 10 us calls, no staging
    acts = _acts(a)
    assert "cudaMemcpyAsync staging pageable host memory 32.0 ms inside gaps (×4)" in \
        acts["pin_copy"]["culprit"]
    assert "cudaMemcpyAsync" not in a.facts.figures["culprits"].get("launch", "")


def test_a_synchronous_copy_stages_before_its_copy_and_drains_after_it():
    # cudaMemcpy from pageable memory: the part of the call before its copy starts is the
    # staging (8 ms a step, the GPU idle); it still returns once its copy is done, so the gap
    # after the copy is drained by it (sync), as before. Before, all of it was sync.
    a = analyze(staged_copy(api="cudaMemcpy"))
    assert a.facts.figures["cause_ns"]["copy_staging"] == STEPS * STAGE
    assert a.attribution["by_cpu"]["sync"] < STEPS * 100 * US
    assert a.attribution["by_sync_op"]["cudaMemcpy (HtoD pageable)"]["gaps"] == STEPS


def test_a_pinned_copy_call_is_no_staging():
    # the same timing, the copy named pinned: no evidence of staging, the call stays a launch
    a = analyze(staged_copy(mem="Pinned"))
    assert a.facts.figures["cause_ns"]["copy_staging"] == 0
    assert a.attribution["by_cpu"]["launch"] >= STEPS * STAGE


def test_unmarked_memory_needs_a_big_copy_held_through_its_call():
    # no memory kind in the name (an older Kineto, an nsys export without srcKind): a 16 MiB
    # copy whose call held the host through it is staged; a 4 KiB one proves nothing
    big = analyze(staged_copy(mem=None)).facts.figures["cause_ns"]
    assert big["copy_staging"] == STEPS * STAGE
    small = analyze(staged_copy(mem=None, nbytes=4096)).facts.figures["cause_ns"]
    assert small["copy_staging"] == 0


def test_a_small_pageable_copy_call_is_a_launch():
    # a 4 KiB pageable copy: its copy into the bounce buffer takes under a microsecond, the
    # call's time is the call's own (a launch's); the planted 8 ms hold is no staging then
    small = analyze(staged_copy(nbytes=4096)).facts.figures["cause_ns"]
    assert small["copy_staging"] == 0


KINETO = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4"


@pytest.mark.parametrize("trace,first_ms,calls", [
    ("worker0.1623212756351.pt.trace.json.gz", 36.4, 6),
    ("worker0.1623213129365.pt.trace.json.gz", 42.9, 2)])
def test_real_kineto_pageable_batch_copy_is_staging_not_launch(trace, first_ms, calls):
    """The window's first cudaMemcpyAsync (18 MiB, Pageable -> Device) holds the host ~40 ms
    with nothing queued before its copy starts; the five later ones first wait for the queue
    (the GPU busy: no gap), then stage with the GPU idle until their copy starts -- 0.15-0.3 ms
    each in ...351; in ...365 four of them start their copy within ~5 us of the queue's
    draining -- and return ~58 us before their copy ends (no sync by behaviour). All of it
    was `launch` and the launch culprit before."""
    from conftest import corpus_or_skip

    p = corpus_or_skip() / KINETO / trace
    if not p.exists():
        pytest.skip(f"{trace} not in the corpus")
    a = analyze(load(p))
    g = a.gaps
    staged = g.loc[g["cpu_copy_staging"] >= 100 * US, "cpu_copy_staging"].to_numpy()
    assert len(staged) == calls
    assert abs(staged.max() / 1e6 - first_ms) < 0.1
    parts = a.facts.figures["cause_ns"]
    # the cause leaves out the queued part of gaps (the micro gaps between queued kernels)
    assert 35 * MS < parts["copy_staging"] <= a.attribution["by_cpu"]["copy_staging"]
    assert not a.facts.figures["culprits"]["launch"].startswith("cudaMemcpyAsync")
    copy = a.facts.figures["culprits"]["copy"]
    assert copy.startswith("cudaMemcpyAsync staging pageable host memory")
    acts = _acts(a)
    assert "cudaMemcpyAsync" not in acts["larger_batch"]["culprit"]
    assert acts["pin_copy"]["basis"] == "replay"


# -- the replay: staging calls are the copy's host cost, and it grows with the copy's bytes --

def _models(a, ids=None):
    from traceread.passes.replay import whatif as W

    r = W.price_models(a.facts.graph, dict(a.context), a.copies,
                       a.facts.frames.get("optimizer_regions"))
    return r["models"]


def test_the_replay_graph_knows_the_staging_call():
    g = analyze(staged_copy()).facts.graph
    calls = g.nodes[(g.nodes["name"] == "cudaMemcpyAsync").to_numpy()]
    assert len(calls) == STEPS and (calls["cat"] == "copy_staging").all()
    small = analyze(staged_copy(nbytes=4096)).facts.graph
    calls = small.nodes[(small.nodes["name"] == "cudaMemcpyAsync").to_numpy()]
    assert (calls["cat"] == "launch").all()


def test_a_larger_batch_stages_its_bigger_copy_longer():
    # planted per step: the call holds the host 9.95 ms (8 ms before its 2 ms copy, returning
    # 50 us before the copy ends), the GPU idle when it starts; then 20 kernels of 500 us.
    # At 2x the batch the copy grows as the model grows GPU work -- above its stream's
    # shortest op (500 us): 500 + 2 x 1500 = 3.5 ms, x1.75 -- and so does the staging: the
    # call 9.95 x 1.75 = 17.41 ms, its copy starting 1.95 x 1.75 ms before it returns
    # (14.0 ms), ending at 17.5 ms; the kernels (the floor: they do not grow) 10 ms more:
    # a 27.5 ms step for 2x the samples. Before, the call kept its 9.95 ms: 20 ms a step.
    m = _models(analyze(staged_copy()))["larger_batch"]
    assert m["applied"] == ["larger_batch"]
    assert abs(m["after_ns"] - 27_500 * US) <= 100 * US
    assert abs(m["saves_ns"] - (20 * MS - m["after_ns"] / 2)) <= 1


def test_a_larger_batch_stages_a_synchronous_copy_longer_too():
    # cudaMemcpy (a sync by name: its node stays `sync`) holds the host 10.005 ms: 8 ms of
    # staging, its 2 ms copy, 5 us. At 2x the batch it grows as its copy does (x1.75):
    # 17.51 ms, then the 10 ms of kernels -- 27.52 ms for 2x the samples, as the Async
    # call's 27.5. Before, the call kept its 10.005 ms and the step its 20.02 ms: half the
    # step "saved" per sample
    a = analyze(staged_copy(api="cudaMemcpy"))
    g = a.facts.graph
    calls = g.nodes[(g.nodes["name"] == "cudaMemcpy").to_numpy()]
    assert len(calls) == STEPS and (calls["cat"] == "sync").all()
    m = _models(a)["larger_batch"]
    assert abs(m["after_ns"] - (27_500 + 20) * US) <= 100 * US
    assert abs(m["saves_ns"] - (m["before_ns"] - m["after_ns"] / 2)) <= 1


def test_pinning_a_copy_takes_the_sync_it_made_itself():
    # the pageable copy's call returns 50 us before its copy ends and the stream is synced
    # right after it (55 us: PyTorch's copy from pageable memory); pinned and non_blocking,
    # neither waits: the sync goes with the staging, the step's later sync-free launches run
    # ahead. A sync after a copy that waited for something else stays (none here)
    from traceread.passes.replay import whatif as W

    a = analyze(staged_copy(copy_sync=True))
    g = a.facts.graph
    sync = (g.nodes["name"] == "cudaStreamSynchronize").to_numpy()
    assert sync.sum() == STEPS and (g.nodes["cost_ns"].to_numpy()[sync] > 0).all()   # its wake-up
    p = {}
    out = W.pin_copies(g.copy(), W.facts_from_analysis(a), p)
    assert (out.nodes["cost_ns"].to_numpy()[sync] == 0).all() and p["copy_syncs_removed"] == 1
    # the step is the GPU's (its kernels) either way: the same replayed step as without it
    m = _models(a)["pin_copies"]
    plain = _models(analyze(staged_copy()))["pin_copies"]
    assert abs(m["after_ns"] - plain["after_ns"]) <= 20 * US


def test_a_cuda_graph_does_not_take_the_staging_with_the_launches():
    # no sync in the step: the launches are captured, and the 8 ms the host spends staging
    # the pageable batch stays on the thread (before, it went into the 8 us graph launch:
    # "saves 8.0 ms"); what goes is the 20 launches' 10 us less the graph launch
    m = _models(analyze(staged_copy()))["cuda_graphs"]
    assert m["applied"] == ["cuda_graphs"]
    assert 0 < m["saves_ns"] <= KERNELS * 10 * US


KINETO_LB = {"worker0.1623212756351.pt.trace.json.gz": 35.0,
             "worker0.1623213129365.pt.trace.json.gz": 39.2}


@pytest.mark.parametrize("trace", sorted(KINETO_LB))
def test_real_kineto_larger_batch_stages_the_doubled_input(trace):
    """The window's first cudaMemcpyAsync stages 18 MiB of images for 40.0 / 45.7 ms; at
    2x the batch its copy (3.6 ms) doubles, and so does its staging. Before, the call was a
    fixed launch and larger_batch promised 35.9 / 39.3 ms a step per sample."""
    from conftest import corpus_or_skip
    from traceread.passes.replay import whatif as W

    p = corpus_or_skip() / KINETO / trace
    if not p.exists():
        pytest.skip(f"{trace} not in the corpus")
    a = analyze(load(p))
    g = a.facts.graph
    st = (g.nodes["cat"] == "copy_staging").to_numpy()
    assert st.sum() == 6 and (g.nodes.loc[st, "name"] == "cudaMemcpyAsync").all()
    first = g.nodes[st].sort_values("ts_ns").iloc[0]
    grown = W.larger_batch(g.copy(), W.facts_from_analysis(a), {})
    after = grown.nodes.set_index("id").loc[first["id"], "cost_ns"]
    assert 1.9 * first["cost_ns"] <= after <= 2.05 * first["cost_ns"]
    x = _acts(a)["larger_batch"]
    assert x["basis"] == "replay" and x["saves_per_step_ns"] < KINETO_LB[trace] * MS


def test_a_copy_the_batch_does_not_size_keeps_its_bytes_and_its_staging():
    # the same pageable 16 MiB copy sent from inside the optimizer's step: the payload pass
    # reads it as parameters, which a larger batch does not grow -- nor their copy, nor its
    # staging. The step ends in a sync, so a grown copy would show: before, the copy grew
    # to 3.5 ms (20 -> 21.5 ms a step at 2x); outside the optimizer it is the input batch,
    # and the copy and its staging grow (27.5 ms)
    a = analyze(staged_copy(around="Optimizer.step#SGD.step", synced=True))
    assert [c["payload"] for c in a.context["copy_payloads"]] == ["parameters"]
    step = a.step_stats["mean_ns"]
    m = _models(a)["larger_batch"]
    assert abs(m["after_ns"] - step) <= 10 * US
    b = analyze(staged_copy(synced=True))
    assert abs(_models(b)["larger_batch"]["after_ns"] - (step + 7_500 * US)) <= 100 * US


def test_pinning_takes_the_staging_of_an_unmarked_copy():
    # the batch's copy names no memory kind, a small pinned copy beside it does: the copies
    # facts cannot call the direction pageable throughout, but the call that held the host
    # through its 16 MiB copy stages it (the attribution's rule), so pinning it removes the
    # 8 ms of staging a step (before: "no pageable copy in the replayed steps")
    a = analyze(staged_copy(mem=None, pinned_too=True))
    assert abs(a.facts.figures["cause_ns"]["copy_staging"] - STEPS * STAGE) <= STEPS * 20 * US
    m = _models(a)["pin_copies"]
    assert m["applied"] == ["pin_copies"]
    assert m["saves_ns"] >= STAGE
