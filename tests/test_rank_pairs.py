"""Issue 37: the lever that fixes a recorded pair is ranked by its price, on either tracer.

* A CPU trace's to-do list ranks the levers the replay of its host steps prices -- the
  DataLoader's workers, compile fusion, the fused optimizer, a larger batch -- before the
  advice to record the GPU, which saves no step time (tests/fixtures/pairs: each BEFORE
  trace and the change its AFTER twin made).
* An nsys capture's program facts read its NVTX step ranges: the ``.item()`` that ends each
  step of gpu/launch does not split the step, so CUDA graphs stay offered as on Kineto.
* Compile fusion removes the dispatch before each fused launch on both tracers (on nsys a
  driver helper call sits between the dispatch and the launch).
"""
from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

from conftest import analysed

FIX = Path(__file__).parent / "fixtures"


def _analysis(path: Path):
    return analysed(path)


def _sqlite(tmp_path_factory, name: str, folder: str = "gpu") -> Path:
    out = tmp_path_factory.mktemp("rank_nsys") / f"{name}.sqlite"
    with lzma.open(FIX / folder / f"{name}.sqlite.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def launch_nsys(tmp_path_factory) -> Path:
    return _sqlite(tmp_path_factory, "launch.bad")


@pytest.fixture(scope="module")
def compile_nsys(tmp_path_factory) -> Path:
    return _sqlite(tmp_path_factory, "compile.bad")


@pytest.mark.parametrize("name,first", [
    ("workers", "num_workers"),          # DataLoader on the training thread
    ("compile", "compile_fuse"),         # chains of pointwise ops
    ("fused_opt", "fused_optimizer"),    # a per-parameter optimizer loop
    ("batch", "larger_batch"),           # a tiny batch
])
def test_cpu_pair_ranks_its_fix_first(name, first):
    v = _analysis(FIX / "pairs" / f"{name}.before.json.gz").verdict
    assert v["bound"] == "cpu_only"
    top = v["actions"][0]
    assert top["id"] == first
    assert top["basis"] == "replay" and top["saves_per_step_ns"] > 0
    assert any(b["fact"].startswith("replay_levers.") for b in top["because"])
    # the record-the-GPU advice has no price: it comes after every priced lever
    ids = [a["id"] for a in v["actions"]]
    priced = [i for i, a in enumerate(v["actions"]) if a["saves_ns"] is not None]
    if "record_gpu" in ids:
        assert ids.index("record_gpu") > max(priced)


def test_cpu_dataloader_advice_is_one_item_with_the_priced_workers():
    """num_workers (priced) and the CPU DataLoader advice ask for the same change: one is
    kept, the priced one."""
    ids = [a["id"] for a in _analysis(FIX / "pairs" / "workers.before.json.gz").verdict["actions"]]
    assert ids[0] == "num_workers" and "cpu_dataloader" not in ids


def test_cpu_trace_with_untraced_launches_gets_no_host_price():
    """A GPU program's host side alone (launches recorded, no GPU activity) is not priced:
    what its GPU would wait on is not in the trace."""
    from traceread.verdict.levers import offered_host

    ctx = {"cpu_only": {"launches": 120}, "replay_levers": {"models": {}}}
    assert offered_host(ctx, 0) == []


def test_nsys_steps_keep_the_step_end_sync_capturable(launch_nsys):
    """gpu/launch on nsys: 600 tiny kernels then ``.item()`` per NVTX ``step_N``; the sync
    ends the step, so the step is capturable and CUDA graphs are offered and priced."""
    a = _analysis(launch_nsys)
    assert a.facts.program["capturable"] is True
    ids = {x["id"]: x for x in a.verdict["actions"]}
    assert "cuda_graphs" in ids and ids["cuda_graphs"]["basis"] == "replay"
    assert "cuda_graphs" not in {w["id"] for w in a.verdict["withdrawn"]}


def test_fusion_priced_alike_on_both_tracers(launch_nsys):
    """The same 600 pointwise kernels fused: within 5 points of the step on Kineto and
    nsys (the nsys dispatch stretch sits before cuKernelGetName, not the launch). Points of
    the step the saving is priced on: without the profiler where its cost is material (the
    Kineto capture: 8.26 ms profiled, ~7.36 ms without), as the levers are priced."""
    def share(a):
        # in the frame it was priced in: the replayed step without the profiler on Kineto
        # (7.36 ms, where the profiled step is 8.26 ms), the replayed step on nsys. Against
        # the profiled step the two agreed only while the nsys replay counted a step it had
        # not replayed (its 8th, cut at the window's end) at its GPU load
        m = a.facts.prices["models"]["fuse_pointwise"]
        return 100.0 * m["saves_ns"] / m["before_ns"]

    k = share(_analysis(FIX / "gpu" / "launch.bad.json.gz"))
    n = share(_analysis(launch_nsys))
    assert k > 80 and n > 80 and abs(k - n) < 5


def test_pageable_read_back_is_a_waited_dtoh_copy():
    """h200/pageable: ``loss`` copied non_blocking into a pageable host tensor. CUDA stages
    it, so the host waits: the read-back lever stands on that copy, not on "no sync copy
    directions"."""
    from traceread.verdict.because import because_text

    a = _analysis(FIX / "h200" / "pageable.bad.json.gz")
    assert a.facts.program["sync_copy_directions"] == {"DtoH": 3}
    proof = a.facts.evidence["sync_copy_directions"][0]
    assert "Pageable" in proof["name"] and "staged through pageable" in proof["detail"]
    # the read-back lever is the pinned read (pin_read), standing on the copy call that
    # waited for its copy into pageable memory; late_read (priced by drop_syncs, which leaves
    # blocking copies to the copy models) is not offered beside it
    late = next(x for x in a.verdict["actions"] if x["id"] == "pin_read")
    assert "pageable_reads={copies=3, waited=3" in because_text(late["because"])
    assert "(cudaMemcpyAsync)" in because_text(late["because"])
    assert "late_read" not in {x["id"] for x in a.verdict["actions"]}


def _promise(a, ids) -> float:
    """The promise of the models ``ids`` in points of the replayed step, priced as the
    verdict prices (without the profiler where material)."""
    from traceread.passes.replay import whatif as W

    g, _ = W.graph_of(a)
    base, _, _ = W.unprofiled_base(g)
    r = W.replay_models(base, W.facts_from_analysis(a), ids)
    return 100.0 * r["saves_ns"] / r["before_ns"]


def test_nsys_recompile_is_compile_time_with_its_module_loads(compile_nsys):
    """gpu/compile on nsys (no dynamo frames): every analysed step ends a 0.2-0.9 s GPU-idle
    gap by loading freshly built code (cuModuleLoad, ~0.2 ms); that host time is compile
    time, the verdict is the compile bound with warm-up first, and the no-recompile promise
    matches the Kineto capture of the same run."""
    a = _analysis(compile_nsys)
    assert a.facts.program["untraced_compile_gaps"] >= 10
    proof = a.facts.evidence["untraced_compile_gaps"]
    assert proof and all(p["name"].startswith("cuModuleLoad") for p in proof)
    assert "built at run time" in proof[0]["detail"]
    v = a.verdict
    assert v["bound"] == "compile" and v["actions"][0]["id"] == "warm_up"
    ids = ["drop_syncs", "no_recompile"]
    kineto = _promise(_analysis(FIX / "gpu" / "compile.bad.json.gz"), ids)
    assert abs(_promise(a, ids) - kineto) < 5


def test_module_loads_outside_the_steps_are_not_compile(launch_nsys):
    """gpu/launch on nsys loads its kernels at start-up only: no compile fact."""
    a = _analysis(launch_nsys)
    assert "untraced_compile_gaps" not in a.facts.program
    assert a.verdict["evidence"]["scores_ns"]["compile"] == 0


def _gaps(host_ns, steps):
    import pandas as pd

    n = len(host_ns)
    start = [i * 10_000_000_000 for i in range(n)]
    return pd.DataFrame({"start": start, "end": [s + h + 1000 for s, h in zip(start, host_ns)],
                         "step_index": steps, "cpu_untraced": host_ns,
                         "cpu_compile": [0] * n, "cpu": ["untraced"] * n})


def _loads(gaps, dur_ns):
    import pandas as pd

    ts = (gaps["start"] + 500).tolist()
    return pd.DataFrame({"kind": ["driver"] * len(ts), "name": ["cuModuleLoadData"] * len(ts),
                         "ts": ts, "dur": [dur_ns] * len(ts)})


def test_untraced_compile_needs_long_host_work_in_two_steps():
    """A load after host work many times its length, in two steps: both gaps are compile
    time. A lazy load (the gap little more than the load), or a build in one step only, is
    not."""
    from traceread.passes.compile import charge_compile, untraced_compile

    g = _gaps([200_000_000, 150_000_000], [0, 1])
    idx, proof = untraced_compile(_loads(g, 200_000), g)
    assert idx.tolist() == [0, 1] and len(proof) == 2
    moved = charge_compile(g, idx)
    assert moved["cpu_compile"].tolist() == [200_000_000, 150_000_000]
    assert moved["cpu_untraced"].sum() == 0 and set(moved["cpu"]) == {"compile"}
    lazy = _gaps([3_000_000, 3_000_000], [0, 1])
    assert len(untraced_compile(_loads(lazy, 2_500_000), lazy)[0]) == 0
    once = _gaps([200_000_000, 150_000_000], [0, -1])   # the second outside the steps
    assert len(untraced_compile(_loads(once, 200_000), once)[0]) == 0


def _item(id_, saves):
    return {"id": id_, "saves_ns": saves}


def test_unpriced_gpu_lever_leads_only_on_evidence_it_is_larger():
    """A GPU-bound verdict puts kernel advice before idle levers only where the kernels it
    acts on take at least the best priced saving: channels_last has no such evidence (no
    class holds the convolutions), TF32 on 400 ms of FP32 GEMMs has."""
    from traceread.verdict.levers import rank

    ctx = {"busy_classes": {"gemm_simt": 400_000_000, "elementwise": 5_000_000}}
    items = [_item("channels_last_generic", None), _item("remove_syncs", 20_000_000)]
    assert [x["id"] for x in rank(list(items), True, ctx)][0] == "remove_syncs"
    items = [_item("tf32_generic", None), _item("remove_syncs", 20_000_000)]
    assert [x["id"] for x in rank(list(items), True, ctx)][0] == "tf32_generic"
    items = [_item("compile_generic", None), _item("remove_syncs", 20_000_000)]
    assert [x["id"] for x in rank(list(items), True, ctx)][0] == "remove_syncs"
    # nothing priced: the kernel advice leads as before
    assert rank([_item("channels_last_generic", None)], True, ctx)[0]["id"] == \
        "channels_last_generic"


def test_flux_channels_last_does_not_outrank_priced_levers():
    """TraceLens xDiT Flux (MI300X): 35 conv2d ops a step, no convolution kernel class --
    'channels_last for convolutions' (no estimate) follows the priced levers."""
    from conftest import corpus_or_skip

    p = corpus_or_skip() / "AMD-AGI__TraceLens/tests/traces/inference/xdit_flux_aiter/" \
        "profile_trace_rank_0.json.gz"
    if not p.exists():
        pytest.skip(f"{p} not in this corpus")
    acts = _analysis(p).verdict["actions"]
    ids = [a["id"] for a in acts]
    assert "channels_last_generic" in ids
    first_priced = next(i for i, a in enumerate(acts) if a["saves_ns"] is not None)
    assert ids.index("channels_last_generic") > first_priced


def test_diff_sees_the_nsys_recompiles_go(compile_nsys, tmp_path_factory):
    """The nsys pair of gpu/compile: the detected change is no_recompile (before, only the
    per-step syncs were seen) -- the lever ranked first on BEFORE (warm_up) prices it."""
    from traceread.diffs.proof import changed, signature
    from traceread.verdict.whatif import MODEL_OF

    before = _analysis(compile_nsys)
    after = _analysis(_sqlite(tmp_path_factory, "compile.fixed"))
    ids = [m for m, _, _ in changed(signature(before), signature(after))]
    assert "no_recompile" in ids
    assert MODEL_OF[before.verdict["actions"][0]["id"]] in ids


def test_diff_sees_one_sync_a_step_go_on_nsys(tmp_path_factory):
    """h200/queue on nsys: torch.cuda.synchronize() once a step (1.0 a step over the NVTX
    steps), none in the fixed run but the one after its loop (1/11): one whole sync a step
    went, the drop_syncs change."""
    from traceread.diffs.proof import changed, signature

    b = _analysis(_sqlite(tmp_path_factory, "queue.bad", "h200"))
    a = _analysis(_sqlite(tmp_path_factory, "queue.fixed", "h200"))
    sb, sa = signature(b), signature(a)
    assert sb["syncs_per_step"] == 1.0 and sa["syncs_per_step"] < 0.1
    assert "drop_syncs" in [m for m, _, _ in changed(sb, sa)]


def test_levers_priced_on_a_sample_that_stands_for_the_window(compile_nsys):
    """gpu/compile on nsys: steps #1-#5 take ~235 ms, #6-#11 0.6-0.9 s (mean 516 ms). The
    levers were priced on the first eight replayed steps, whose mean is 391 ms: "saves 389 ms
    a step" stood beside "step -> 2.46 ms" for a 516 ms step. The sample is now a run that
    covers the window's step times, each step weighted by the window's steps it stands for:
    the saving and the projected step add up to the measured step."""
    a = _analysis(compile_nsys)
    step = float(a.steps["program_ns"].mean())
    top = a.verdict["actions"][0]
    assert top["id"] == "warm_up" and top["basis"] == "replay"
    assert abs(top["saves_per_step_ns"] + top["projected_step_ns"] - step) < 0.02 * step
    assert "weighted" in a.verdict["evidence"]["levers_replayed_on"]


def test_the_sampled_run_keeps_its_last_steps_end(compile_nsys):
    """Each sampled step keeps both its markers: the last one's end marker lies at the run's
    end, which the sample left out, so that step had no span and every 11-step nsys window
    was priced on seven steps ("8 of 11 steps")."""
    from traceread.passes.replay.critical import program_spans
    from traceread.passes.replay.split import sample_steps

    g, note = sample_steps(_analysis(compile_nsys).replay_graph)
    assert note.startswith("8 of 11 steps")
    ts = g.nodes["ts_ns"].to_numpy()
    assert (program_spans(g, ts, ts + g.nodes["dur_ns"].to_numpy()) > 0).all()
