"""The lever matrix: for each lever, a program where its facts must offer it and one where they
must not (issue 29). The context is what the passes build from the trace (trace_context, the
whole-trace facts), never written by hand; a lever is offered when all its predicates hold
(verdict/levers.py ``rows``). End-to-end checks on analyze() close the file."""
from __future__ import annotations

from pathlib import Path

import pytest

import factscenes as F
from traceread import load
from traceread.analysis import analyze
from traceread.passes.newfacts import trace_facts
from traceread.verdict import levers as L
from traceread.passes.context import trace_context
from traceread.passes.facts import layout_figures

from conftest import analysed

# one worker builds this file's module fixture (`--dist loadgroup`), not both
pytestmark = pytest.mark.xdist_group("lever_matrix")

FIX = Path(__file__).parent / "fixtures"


def ctx_of(trace, **extra) -> dict:
    c = trace_context(trace.events, trace.meta)
    tf = trace_facts(trace.events)
    tf.pop("facts_evidence", None)
    c.update(tf)
    c.update(extra)
    return c


def offered(lever_id: str, ctx: dict) -> bool:
    lv = L.BY_ID[lever_id]
    return lv in L.rows(lv.cause, ctx, L.LEVERS + L.DIAGNOSTICS)


def _real(name: str):
    return load(FIX / name)


GPU = {"bound": "gpu"}
# (lever, the program that must get it, the program that must not)
MATRIX = [
    ("cuda_graphs", F.tail_item, F.moe_nonzero),                  # a sync mid-step
    ("graphs_host", F.tail_item, F.moe_nonzero),
    ("cuda_graphs", F.tail_item, lambda: F.compiled(graphs=True)),  # already replays graphs
    ("compile_fuse", F.tail_item, F.compiled),                    # already compiled
    ("no_dynamic_shapes", F.moe_nonzero, F.tail_item),
    ("side_stream_copy", lambda: F.copies("input"), F.checkpoint),
    ("side_stream_copy", lambda: F.copies("input"), lambda: F.copies("resent")),
    ("keep_on_gpu", lambda: F.copies("resent"), F.checkpoint),
    ("keep_on_gpu", lambda: F.copies("resent"), lambda: F.copies("input")),
    ("keep_on_gpu", lambda: F.copies("resent"), lambda: F.copies("fresh")),
    ("optimizer_on_gpu", F.offload, lambda: F.copies("input")),
    ("side_stream_copy", lambda: F.copies("input"), F.offload),   # gradients, not a batch
    ("checkpoint_off_path", F.checkpoint, lambda: F.copies("input")),
    ("channels_last", lambda: F.convolution(nchw=True), F.attention_only),  # SDPA: no conv
    # NHWC kernels and no layout conversion: the program already runs channels_last
    ("channels_last", lambda: F.convolution(nchw=True), F.convolution),
    ("queued_other_process", F.two_processes, lambda: F.gemms(F.BF16_GEMM)),
    ("queued_untraced", lambda: F.gemms(F.BF16_GEMM), F.two_processes),
    ("queued_untraced", lambda: F.gemms(F.BF16_GEMM), lambda: F.compiled(graphs=True)),
    ("queued_in_graphs", lambda: F.compiled(graphs=True), lambda: F.gemms(F.BF16_GEMM)),
    ("bf16_autocast", lambda: F.gemms(F.F32_GEMM), lambda: F.gemms(F.FP16_GEMM)),
    ("cpu_dynamic_shapes", lambda: _real("facts/moe.json.gz"),
     lambda: _real("facts/sdpa.json.gz")),
    ("cpu_checkpoint", lambda: _real("facts/ckpt.json.gz"), lambda: _real("facts/sdpa.json.gz")),
    ("cpu_compile", lambda: _real("cpu/compile.first.json.gz"),
     lambda: _real("cpu/batch16.json.gz")),
    ("cpu_dataloader", lambda: _real("cpu/batch16.json.gz"), lambda: _real("facts/moe.json.gz")),
    # the loss read back through pageable memory (the call waits for the queue) vs pinned
    ("pin_read", lambda: _real("h200/pageable.bad.json.gz"),
     lambda: _real("h200/pageable.fixed.json.gz")),
    # an .item() (pinned copy + synchronize) keeps late_read; the pageable read-back is pin_read's
    ("late_read", lambda: _real("gpu/sync.bad.json.gz"), lambda: _real("h200/pageable.bad.json.gz")),
]
MATRIX_GPU = [   # generic GPU-bound advice (no busy-time evidence)
    ("channels_last_generic", lambda: F.convolution(nchw=True), F.attention_only),
    ("channels_last_generic", lambda: F.convolution(nchw=True), F.convolution),
    ("autocast_generic", lambda: F.gemms(F.F32_GEMM), lambda: F.gemms(F.FP16_GEMM)),
    ("compile_generic", lambda: F.gemms(F.BF16_GEMM), F.compiled),
]


@pytest.mark.parametrize("lever,yes,no", MATRIX, ids=[m[0] for m in MATRIX])
def test_lever_offered_only_where_its_facts_hold(lever, yes, no):
    assert offered(lever, ctx_of(yes())), f"{lever} not offered where its facts hold"
    assert not offered(lever, ctx_of(no())), f"{lever} offered against its facts"


@pytest.mark.parametrize("lever,yes,no", MATRIX_GPU, ids=[m[0] for m in MATRIX_GPU])
def test_generic_gpu_levers_fit_the_program(lever, yes, no):
    assert offered(lever, ctx_of(yes(), **GPU))
    assert not offered(lever, ctx_of(no(), **GPU))


def test_every_new_lever_is_in_the_matrix():
    new = {"optimizer_on_gpu", "checkpoint_off_path", "queued_other_process", "queued_in_graphs",
           "cpu_dynamic_shapes", "cpu_checkpoint", "cpu_compile", "cpu_dataloader"}
    covered = {m[0] for m in MATRIX + MATRIX_GPU}
    assert new <= covered and new <= set(L.BY_ID)


def test_cut_trace_says_so_not_record_with_cuda(tmp_path):
    import gzip

    text = gzip.open(FIX / "gpu" / "sync.bad.json.gz", "rt").read()
    first_gpu = text.find('"cat": "kernel"')
    cut = tmp_path / "cut.json"
    cut.write_text(text[:text.rfind("{", 0, first_gpu)])
    c = ctx_of(load(cut))
    assert c["cpu_only"]["cut_before_gpu"]
    assert offered("cpu_cut", c) and not offered("record_gpu", c)
    v = analyze(load(cut)).verdict
    assert "cut before" in v["title"] and v["actions"][0]["id"] == "cpu_cut"
    # a CPU-only program is told to record with CUDA while nothing says it is CPU by design
    # (this context holds no layout figures: cpu_design unknown); its devices recorded empty
    # withdraw it (tests/test_cpu_comms.py)
    c = ctx_of(_real("facts/sdpa.json.gz"))
    assert offered("record_gpu", c)
    assert not offered("record_gpu", dict(c, cpu_design={"by_design": True}))


# ------------------------------------------------------------------ end to end

def _ids(trace) -> list[str]:
    return [a["id"] for a in analyze(trace).verdict["actions"]]


def test_analyze_moe_syncs_get_no_cuda_graphs():
    ids = _ids(F.moe_nonzero())
    assert "cuda_graphs" not in ids and "graphs_host" not in ids


def test_analyze_tail_sync_launch_bound_gets_cuda_graphs():
    ids = _ids(F.tail_item())
    assert "cuda_graphs" in ids or "graphs_host" in ids


def test_analyze_offload_runs_the_optimizer_on_the_gpu_first():
    a = analyze(F.offload())
    ids = [x["id"] for x in a.verdict["actions"]]
    assert "optimizer_on_gpu" in ids and "side_stream_copy" not in ids \
        and "keep_on_gpu" not in ids
    item = next(x for x in a.verdict["actions"] if x["id"] == "optimizer_on_gpu")
    assert "4 gradients" in item["lever"] and item["saves_ns"] > 0


def test_analyze_checkpoint_priced_per_period():
    a = analyze(F.checkpoint(), steps="all")
    item = next(x for x in a.verdict["actions"] if x["id"] == "checkpoint_off_path")
    st = a.context["periodic_stall"]
    assert st["period"] == 3 and st["stalled_steps"] == [2, 5] and st["what"] == "checkpoint"
    assert "every 3 steps" in item["lever"] and "train.py:50 save_checkpoint" in item["lever"]
    # replayed: the save's write_record piece moved off the step, the host stretch it labels
    # (60.8 ms, to the step's end) a little longer than the planted 60 ms excess
    assert item["basis"] == "replay"
    assert abs(item["saves_ns"] - st["excess_ns_per_stall"] * 2) <= 0.02 * st["excess_ns_per_stall"] * 2
    ids = [x["id"] for x in a.verdict["actions"]]
    assert "keep_on_gpu" not in ids and "side_stream_copy" not in ids


def test_implicit_syncs_get_the_dynamic_shape_lever_not_remove_item():
    moe = ctx_of(F.moe_nonzero())
    assert offered("no_dynamic_shapes", moe) and not offered("remove_syncs", moe)
    assert offered("remove_syncs", ctx_of(F.tail_item()))


def test_offloaded_optimizer_is_not_generic_host_work():
    assert not offered("off_step_path", ctx_of(F.offload()))
    assert offered("off_step_path", ctx_of(F.tail_item()))


def test_launches_without_kernels_in_a_whole_file_are_not_a_cut():
    from traceread.synth.scenarios import MS, T0, TraceBuilder

    b = TraceBuilder()
    for k in range(3):
        b.step(k, T0 + k * MS, MS)
        b.cpu("aten::mm", T0 + k * MS, 500_000)
        b.runtime("cudaLaunchKernel", T0 + k * MS + 100_000, 10_000)
    c = ctx_of(b.build())
    assert not c["cpu_only"]["cut_before_gpu"] and c["cpu_only"]["launches"] == 3
    assert offered("record_gpu_launches", c) and not offered("cpu_cut", c)
    assert not offered("record_gpu", c)


def test_host_time_of_a_checkpoint_gets_no_graphs_nor_generic_host_lever():
    a = analyze(F.checkpoint(), steps="all")
    ids = [x["id"] for x in a.verdict["actions"]]
    assert ids[0] == "checkpoint_off_path"
    assert "graphs_host" not in ids and "off_step_path" not in ids
    assert a.context["periodic_stall"]["stalls_in_window"] == 2


def test_a_tensor_valued_condition_gets_the_dynamic_shape_lever():
    c = ctx_of(F.tail_item())
    c["blocking"] = dict(c["blocking"], by_kind={"condition": {"per_step": 1.0}})
    assert offered("no_dynamic_shapes", c)


def test_copies_of_unknown_payload_still_get_a_lever():
    fresh = ctx_of(F.copies("fresh"))
    assert offered("copy_unknown", fresh)
    assert not offered("keep_on_gpu", fresh) and not offered("side_stream_copy", fresh)
    assert not offered("copy_unknown", ctx_of(F.copies("input")))


def test_compiled_call_overhead_is_not_sent_to_dataloader_workers():
    from traceread.passes.newfacts import compiled_call_host

    assert compiled_call_host("## Call CompiledFxGraph f7s2 ## spans 249 us of idle GPU time")
    assert not compiled_call_host("aten::addmm spans 268 us of idle GPU time (inside "
                                  "CompiledFunction, 682 us)")
    c = ctx_of(F.tail_item(), host_in_compiled_call=True)
    assert offered("compiled_call", c) and not offered("off_step_path", c)
    assert offered("off_step_path", ctx_of(F.tail_item(), host_in_compiled_call=False))
    # the real reduce-overhead capture (H100 graphs.fixed): host time in the compiled call
    a = analyze(_real("gpu/graphs.fixed.json.gz"))
    ids = [x["id"] for x in a.verdict["actions"]]
    assert a.facts.figures["host_in_compiled_call"]
    assert "off_step_path" not in ids
    # the whole step is one compiled graph called once per step (3 calls in 3 steps): "call
    # it fewer times" cannot apply; the once-per-step lever says what is left (issue 39)
    assert a.facts.program["compiled_calls_per_step"]["max"] == 1.0
    assert "compiled_call_once" in ids and "compiled_call" not in ids
    w = {x["id"]: x for x in a.verdict["withdrawn"]}
    assert w["compiled_call"]["precondition"] == "compiled_called_often"


def test_no_fp16_lever_on_a_device_with_fast_bf16(corpus_dir):
    # A100 (bf16: yes) with FP32 GEMMs: the fp16 + GradScaler lever ("this GPU has no fast
    # bf16") was offered once the replay priced it, past the busy pass that rules it out
    import traceread

    a = traceread.analyze(str(corpus_dir / "facebookresearch__HolisticTraceAnalysis/tests/data/"
                              "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    ids = [x["id"] for x in a.verdict["actions"]]
    assert a.context["device"]["bf16"] is True and "bf16_autocast" in ids
    assert "fp16_autocast" not in ids and "fp16_for_bf16" not in ids


# ------------------------------------------------------------------ every lever (issue 39)
#
# Every lever of the table, offered where its facts hold and withdrawn -- a ``Withdrawn``
# value naming the failed precondition and its reason -- where they do not. The contexts are
# the facts of real traces (saved records of the corpus, our recordings, the planted
# scenes); a fact no trace of ours shows (a DeepSpeed job, a cut file) is one change to a
# real context, named in VARIANTS.

RECORDS = FIX / "records"


def _record_ctx(name: str) -> dict:
    import gzip

    from traceread.passes.facts import WindowFacts
    from traceread.verdict import decide
    from traceread.verdict.decision import lever_context

    f = WindowFacts.from_json(gzip.open(RECORDS / f"{name}.facts.json.gz", "rt").read())
    v = decide(f)
    return dict(lever_context(f), bound=v["bound"], lost_ns=v["evidence"].get("lost_ns"))


# one change to a real context each: (name, base, the facts changed)
VARIANTS = [
    ("graphs_set_up_not_replayed", "pinned_batch", {"uses_cuda_graphs": True,
                                                    "graphs_not_replayed": True}),
    ("graphs_replayed_training", "pinned_batch", {"uses_cuda_graphs": True,
                                                  "graph_launches": 24}),
    ("compiled_called_thrice", "compiled_once", {
        "compiled_calls_per_step": {"graphs": {"CompiledFunction": 3.0}, "max": 3.0,
                                    "steps": 5}}),
    ("eval_every_4_steps", "pinned_batch", {"periodic_stall": {
        "what": "eval", "period": 4, "op": "evaluate", "excess_ns_per_stall": 5_000_000,
        "stalled_steps": [4, 8], "steps_seen": 9, "stalls_in_window": 0}}),
    ("caching_allocator_off", "pinned_batch", {"allocator_uncached": True}),
    # an explicit mask tensor keeps SDPA off the flash kernels (precision.py's sdpa fact)
    ("sdpa_math_with_mask", "pinned_batch", {"sdpa": {"backend": "math", "explicit_mask": True,
                                                      "calls_per_step": 4.0}}),
    ("deepspeed_job", "ddp_unflatten", {"framework": ["deepspeed"]}),
    ("megatron_job", "ddp_unflatten", {"framework": ["megatron"]}),
    ("torchrec_job", "ddp_unflatten", {"framework": ["ddp", "torchrec"],
                                       "collectives": ["all_reduce", "all_to_all"]}),
    ("slow_stage", "ddp_unflatten", {"pp_slowest_stage": 1, "pp_slowest_x": 1.6,
                                     "pp_excess_busy_ns": 9_000_000}),
    ("cut_file", "gemv_v100", {"cpu_only": {"cut_before_gpu": True, "launches": 12}}),
    ("window_without_gpu", "gemv_v100", {"cpu_only": {"window_without_gpu": True}}),
    ("cpu_eval_stall", "gemv_v100", {"cpu_only": {}, "periodic_stall": {
        "what": "eval", "period": 4, "excess_ns_per_stall": 5_000_000, "stalled_steps": [4]}}),
    ("launches_no_gpu", "gemv_v100", {"cpu_only": {"launches": 120}}),
    ("cold_start", "sglang_capture", {"startup": {"ns": 40_000_000, "calls": [], "alloc": False},
                                      "lost_ns": 50_000_000}),
]


@pytest.fixture(scope="module")
def pool() -> dict:
    out = {}
    names = sorted(p.name.split(".")[0] for p in RECORDS.glob("*.facts.json.gz"))
    for n in names:
        out[f"record {n}"] = _record_ctx(n)
        out[f"record {n}, GPU-bound, nothing priced"] = dict(out[f"record {n}"], bound="gpu",
                                                             busy_levers={})
    for name, base, change in VARIANTS:
        out[f"{name} ({base})"] = {**out[f"record {base}"], **change}
    scenes = {"moe_nonzero": F.moe_nonzero, "tail_item": F.tail_item,
              "checkpoint": F.checkpoint, "offload": F.offload,
              "attention_only": F.attention_only, "convolution": F.convolution,
              "two_processes": F.two_processes, "compiled_graphs": lambda: F.compiled(True),
              "copies_input": lambda: F.copies("input"),
              "copies_resent": lambda: F.copies("resent")}
    for n, build in scenes.items():
        out[f"scene {n}"] = ctx_of(build())
    for g in (F.F32_GEMM, F.BF16_GEMM):
        out[f"scene gemms {g[:12]}"] = ctx_of(F.gemms(g), bound="gpu")
    for p in ("cpu/compile.first.json.gz", "cpu/batch16.json.gz", "cpu/workers_restart.json.gz",
              "facts/moe.json.gz",
              "facts/ckpt.json.gz", "gpu/data.fixed.json.gz", "gloo/ddp2/rank-0.json.gz",
              "h200/pageable.bad.json.gz"):
        out[f"fixture {p}"] = ctx_of(load(FIX / p))
    # the step anatomy's CPU recordings (tests/fixtures/anatomy: a validation pass, micro-batches,
    # checkpointing, a save, logging, batch-1 inference), as recorded and as if on a GPU
    for p in sorted((FIX / "anatomy").glob("*.json.gz")):
        c = ctx_of(load(p))
        out[f"anatomy {p.name} (CPU)"] = c
        out[f"anatomy {p.name} (as on a GPU)"] = {k: v for k, v in c.items() if k != "cpu_only"}
    native = ctx_of(load(FIX / "nsys" / "ex-gpu.s10.sqlite"))   # a CUDA C++ program
    assert native["pytorch"] is False
    out["native CUDA"] = native
    out["native CUDA, GPU-bound"] = dict(native, bound="gpu", busy_levers={})
    out["native CUDA, graphs launched"] = dict(native, uses_cuda_graphs=True, graph_launches=8)
    # the same program reading a result back through pageable memory (its call waited)
    out["native CUDA, pageable read-back"] = dict(
        native, pageable_reads={"copies": 10, "waited": 10, "waited_ns": 4_000_000},
        sync_copy_directions={"DtoH": 10})
    # the same program without its cudaDeviceSynchronize between launches, re-sending data
    out["native CUDA, no mid-step sync, re-sent copies"] = dict(
        native, capturable=True, payloads=["resent", "unknown"])
    import traceread
    from traceread.jobs import multirank as mr
    from traceread.jobs.multirank.verdicts import job_verdict, lever_cause

    # a job's verdict: the straggler and why it is late (our gloo recordings; tp2's waits
    # return after its own collectives ended)
    for j in ("ddp2", "pp_gpipe3_slow1", "tp2"):
        res = mr.analyze_traces([load(p) for p in sorted((FIX / "gloo" / j).glob("rank-*.json.gz"))])[0]
        jv = job_verdict(res)
        out[f"job {j}"] = {"straggler_rank": jv["straggler_rank"], "straggler_cause": lever_cause(jv)}
    for cause in ("stage_untraced", "untraced", "comm_wait", "comm_own", "cpu_slower", "sleep", "gpu_compute"):
        out[f"job ddp2, late because {cause}"] = dict(out["job ddp2"], straggler_cause=cause)
    # the GPU-use section: allocator calls after the first step (our H100 recording)
    alloc = analysed(FIX / "gpu" / "alloc.bad.json.gz")
    out["memory alloc.bad"] = {"memory": alloc.facts.figures["memory"]}
    mem = alloc.facts.figures["memory"]
    out["memory alloc.bad, no frees"] = {"memory": {**mem, "after_first_step": {
        **mem["after_first_step"], "frees": 0}}}
    for j in ("pp_gpipe3_slow1", "tp2", "a2a4"):
        out[f"layout {j}"] = layout_figures(
            analysed(FIX / "gloo" / j / "rank-1.json.gz").parallelism)
    # CPU programs waiting on gloo collectives (the cpu_* comms levers): ddp2 rank 0 (one
    # bucket a step), fsdp2_sleep1 rank 0 (waits on a late peer), and ddp2 as if its
    # gradients went in two buckets
    for j, r in (("ddp2", 0), ("ddp2", 1), ("fsdp2_sleep1", 0)):
        p = FIX / "gloo" / j / f"rank-{r}.json.gz"
        out[f"cpu comm {j} rank {r}"] = {**ctx_of(load(p)),
                                         **layout_figures(analysed(p).parallelism)}
    c = out["cpu comm ddp2 rank 0"]
    top = dict(c["cpu_comm"]["collectives"][0], calls_per_step=2.0,
               exposed_after_first_ns=5_000_000)
    out["cpu comm ddp2 rank 0, two buckets"] = dict(
        c, cpu_comm={**c["cpu_comm"], "collectives": [top]})
    return out


ALWAYS = {"storage", "warm_up", "stream_waits", "front_end", "record_host", "find_the_wait"}


@pytest.mark.parametrize("lever_id", [str(lv.id) for lv in L.LEVERS + L.DIAGNOSTICS + L.APART])
def test_every_lever_offered_where_its_facts_hold_withdrawn_where_not(lever_id, pool):
    lv = L.BY_ID[lever_id]
    holds = [k for k, c in pool.items() if lv.refusal(c) is None]
    assert holds, f"{lever_id}: no trace's facts offer it"
    if not lv.when:   # no precondition: offered with its cause, wherever
        assert lever_id in ALWAYS and len(holds) == len(pool)
        return
    refused = {k: lv.refusal(c) for k, c in pool.items() if lv.refusal(c) is not None}
    assert refused, f"{lever_id}: no trace's facts withdraw it"
    for w in refused.values():   # a value, with the precondition's own reason
        assert w.id == lever_id and w.precondition in {p.__name__ for p in lv.when}
        assert w.reason and w.reason != w.precondition
