"""The lever table (passes/levers.py): one test per predicate over hand-built trace contexts,
the levers the evidence rules out, and the one ranked to-do list."""
from __future__ import annotations

from traceread.verdict import levers as L
from traceread.verdict.scores import score


def ids(cause: str, **ctx) -> list[str]:
    return [lv.id for lv in L.rows(cause, ctx)]


# -- predicates ----------------------------------------------------------------------------

def test_pytorch_and_native():
    assert L.pytorch({}) and L.pytorch({"pytorch": True}) and not L.pytorch({"pytorch": False})
    assert L.native({"pytorch": False}) and not L.native({})


def test_training_and_inference_unknown_is_training():
    assert L.training({}) and not L.inference({})
    assert L.inference({"training": False}) and not L.training({"training": False})


def test_graph_predicates():
    assert L.no_graphs({}) and not L.uses_graphs({})
    assert L.uses_graphs({"uses_cuda_graphs": True})
    assert L.uses_graphs({"compile_mode_graphs": True})      # reduce-overhead users
    assert L.graphs_not_replayed({"uses_cuda_graphs": True, "graphs_not_replayed": True})
    assert not L.graphs_replayed({"uses_cuda_graphs": True, "graphs_not_replayed": True})
    assert L.graphs_replayed({"uses_cuda_graphs": True})


def test_dataloader_workers():
    assert L.workers({"dataloader_workers": True}) and L.no_workers({})


def test_not_compiled():
    assert L.not_compiled({})
    assert not L.not_compiled({"compiled": True})
    assert not L.not_compiled({"compile_mode_graphs": True})
    assert not L.not_compiled({"triton_share": 0.6})         # torch.compile's own kernels


def test_optimizer_predicates():
    assert L.optimizer_unfused({})                            # unknown: today's advice
    assert not L.optimizer_unfused({"training": False})       # inference: no optimizer
    assert not L.optimizer_unfused({"optimizer": None})       # known: none in the trace
    assert not L.optimizer_unfused({"fused_optimizer": True})
    assert not L.optimizer_unfused({"optimizer": {"name": "AdamW", "impl": "foreach"}})
    assert L.optimizer_unfused({"optimizer": {"name": "SGD", "impl": "for_loop"}})
    assert L.optimizer_foreach({"optimizer": {"name": "AdamW", "impl": "foreach"}})
    assert not L.optimizer_foreach({"optimizer": {"name": "AdamW", "impl": "fused"}})


def test_torch_version():
    assert L.fused_available({}) and L.fused_available({"torch_version": "2.1.0+cu121"})
    assert L.old_torch({"torch_version": "1.9.0"}) and not L.fused_available({"torch_version": "1.9"})
    # an era or an upper bound is read as the newest torch it can be
    assert L._torch_version({"torch_version": "1.8-1.9"}) == (1, 9)
    assert L._torch_version({"torch_version": "<2.0"}) == (1, 99)
    assert L._torch_version({"torch_version": ">=2.4"}) is None
    assert not L.compile_available({"torch_version": "<2.0"})
    assert L.graphs_api_available({"torch_version": "<2.0"})      # 1.10-1.13 had them


def test_triton_device():
    assert L.triton_device({}) and L.triton_device({"device": {"vendor": "nvidia", "cc": "7.0"}})
    assert not L.triton_device({"device": {"vendor": "nvidia", "cc": "6.1"}})
    assert L.triton_device({"device": {"vendor": "amd", "cc": "9.0"}})   # gfx90a: no NVIDIA cc


def test_may_recompile():
    assert L.may_recompile({}) and L.may_recompile({"recompiles": 3})
    assert not L.may_recompile({"recompiles": 0})


def test_host_dispatch_and_per_param_syncs():
    assert L.host_dispatch({"host_dispatch": True}) and L.not_host_dispatch({})
    assert L.per_param_syncs({"per_param_syncs": True}) and not L.per_param_syncs({})


def test_framework_predicates():
    assert L.ddp({}) and L.fsdp({}) and not L.torchrec({})   # nothing known: today's levers
    ddp = {"framework": ["ddp"], "collectives": ["all_reduce", "broadcast"]}
    assert L.ddp(ddp) and not L.fsdp(ddp) and not L.torchrec(ddp)
    fsdp = {"framework": ["fsdp2"]}
    assert L.fsdp(fsdp) and not L.ddp(fsdp)
    rec = {"framework": ["ddp", "torchrec"], "collectives": ["all_to_all", "all_reduce"]}
    assert L.torchrec(rec) and not L.ddp(rec) and not L.fsdp(rec)
    # framework not recognised: judged by the collectives
    assert L.ddp({"framework": [], "collectives": ["all_reduce"]})
    assert not L.fsdp({"collectives": ["all_reduce"]})
    assert L.fsdp({"collectives": ["all_gather", "reduce_scatter"]})
    assert L.torchrec({"collectives": ["all_to_all"]})
    assert L.deepspeed({"framework": ["deepspeed"]}) and not L.deepspeed({})
    assert L.megatron({"framework": ["megatron"]}) and not L.megatron({})
    assert L.other_comms({"framework": ["vllm"]}) and not L.other_comms({})
    assert L.ddp_or_fsdp(ddp) and L.ddp_or_fsdp(fsdp) and not L.ddp_or_fsdp(rec)


def test_backend_predicates():
    assert L.gloo({"comm_backend": "gloo"}) and not L.gloo({})
    assert L.gpu_transport({}) and L.gpu_transport({"comm_backend": "rccl"})
    assert not L.gpu_transport({"comm_backend": "gloo"})
    assert not L.gpu_transport({"comm_backend": "mpi"})


def test_buffer_broadcast():
    assert L.buffer_broadcast({"ddp_buffer_broadcast_ns": 23_000_000})
    assert not L.buffer_broadcast({}) and not L.buffer_broadcast({"ddp_buffer_broadcast_ns": 0})


def test_device_predicates():
    turing = {"device": {"name": "GeForce RTX 2080 Ti", "cc": "7.5", "bf16": False, "tf32": False}}
    assert L.no_bf16_device(turing) and not L.bf16_device(turing) and not L.tf32_device(turing)
    assert L.bf16_device({}) and L.tf32_device({}) and not L.no_bf16_device({})
    assert L.bf16_device({"device": {"bf16": None}})          # None = unknown


def test_dtype_conv_attention_gemm_predicates():
    assert L.not_lowp({}) and not L.not_lowp({"dtypes": {"bf16": True}})
    assert L.convolutions({}) and not L.convolutions({"convolutions": False})
    assert L.attention_unfused({})
    assert not L.attention_unfused({"fused_attention": True})
    assert not L.attention_unfused({"attention_ns": 5})
    assert L.softmax_runs({}) and not L.softmax_runs({"softmax_kernels": False})
    assert L.gemm_fp32({})
    assert L.gemm_fp32({"busy_classes": {"gemm_simt": 9, "gemm_tensor": 1}})
    assert not L.gemm_fp32({"busy_classes": {"gemm_simt": 1, "gemm_tensor": 9}})
    assert not L.gemm_fp32({"busy_classes": {"elementwise": 9}})   # no GEMM at all


def test_gpu_bound_dominant_kernel_and_busy_evidence():
    assert L.gpu_bound({"bound": "gpu"}) and not L.gpu_bound({"bound": "host"})
    assert L.dominant_kernel({"top_kernel": {"name": "k", "pct": 50.0}})
    assert not L.dominant_kernel({"top_kernel": {"name": "k", "pct": 49.9}})
    assert L.no_busy_evidence({}) and not L.no_busy_evidence({"busy_levers": {"tf32": {}}})


def test_cold_start_and_allocator():
    c = {"startup": {"ns": 40, "calls": [("cudaMalloc", 40)], "alloc": True}, "lost_ns": 100}
    assert L.cold_start(c) and L.startup_alloc(c) and not L.no_startup_alloc(c)
    assert not L.cold_start(dict(c, lost_ns=200))             # under 30% of the lost time
    assert L.allocator_uncached({"allocator_uncached": True}) and L.allocator_cached({})


# -- the levers the evidence rules out (issue 20) -----------------------------------------

def test_ddp_job_gets_no_fsdp_advice():
    got = ids("comms", framework=["ddp"], collectives=["all_reduce"], comm_backend="nccl")
    assert "ddp_buckets" in got and "no_sync" in got and "fsdp_prefetch" not in got


def test_torchrec_all_to_all_gets_its_own_levers():
    got = ids("comms", framework=["ddp", "torchrec"], collectives=["all_to_all", "all_reduce"])
    assert {"torchrec_pipeline", "torchrec_sharding"} <= set(got)
    assert not {"ddp_buckets", "no_sync", "fsdp_prefetch"} & set(got)


def test_gloo_job_gets_no_interconnect_advice():
    got = ids("comms", framework=["ddp"], comm_backend="gloo")
    assert got[0:1] != [] and "nccl_backend" in got and "interconnect" not in got
    assert "nccl_debug" not in [lv.id for lv in L.rows("comms", {"comm_backend": "gloo"},
                                                         L.DIAGNOSTICS)]


def test_ddp_buffer_broadcast_is_priced():
    ctx = {"framework": ["ddp"], "ddp_buffer_broadcast_ns": 30, "lost_ns": 100}
    items = L.offered({"host": 60}, {}, {}, ctx, 1, ("host", "comms"))
    bb = [x for x in items if x["id"] == "broadcast_buffers"]
    assert bb and bb[0]["saves_ns"] == 30                     # even with no comms score


def test_compiled_programs_get_no_compile_advice():
    for ctx in ({"compiled": True}, {"compile_mode_graphs": True}):
        assert "compile_fuse" not in ids("launch", **ctx)
        assert "compile_dispatch" not in ids("host", host_dispatch=True, **ctx)
    assert "compile_fuse" in ids("launch")


def test_optimizer_levers_follow_the_optimizer():
    assert not {"fused_optimizer", "larger_batch"} & set(ids("launch", training=False))
    foreach = ids("launch", optimizer={"name": "AdamW", "impl": "foreach"})
    assert "foreach_to_fused" in foreach and "fused_optimizer" not in foreach
    old = ids("launch", torch_version="1.9.0")
    assert "fused_optimizer" not in old and "foreach_optimizer" in old


def test_graph_coverage_names_no_optimizer_on_inference():
    infer = L.rows("launch", {"uses_cuda_graphs": True, "training": False})
    assert [lv.id for lv in infer if lv.id.startswith("graph_coverage")] == \
        ["graph_coverage_inference"]
    assert all("optimizer" not in lv.text for lv in infer if isinstance(lv.text, str))


def test_no_channels_last_without_convolutions():
    ctx = {"bound": "gpu", "convolutions": False, "training": False}
    assert "channels_last_generic" not in ids("gpu", **ctx)
    assert "channels_last" not in ids("gpu", **dict(ctx, busy_levers={"channels_last": {}}))


def test_pytorch_dispatch_is_not_sent_to_dataloader_workers():
    got = ids("host", host_dispatch=True)
    assert "off_step_path" not in got and {"fewer_ops", "compile_dispatch", "graphs_host"} <= set(got)
    assert "off_step_path" in ids("host")


def test_no_recompile_advice_without_recompiles():
    assert ids("compile", recompiles=0) == ["warm_up"]
    assert "mark_dynamic" in ids("compile", recompiles=2)
    assert not L.rows("compile", {"recompiles": 0}, L.DIAGNOSTICS)


def test_per_parameter_syncs_rank_before_cuda_graphs():
    ctx = {"per_param_syncs": True}
    items = L.offered({"launch": 90, "sync": 40}, {}, {}, ctx, 1, ("sync", "launch"))
    order = [x["id"] for x in items]
    assert order.index("per_param_item") < order.index("cuda_graphs")
    # without the per-parameter syncs, the larger saving leads
    plain = [x["id"] for x in L.offered({"launch": 90, "sync": 40}, {}, {}, {}, 1,
                                        ("sync", "launch"))]
    assert plain.index("cuda_graphs") < plain.index("remove_syncs")


def test_precision_levers_follow_the_device():
    turing = {"device": {"bf16": False, "tf32": False}, "pytorch": True}
    busy = {"bf16_autocast": {"saving_ns": 50, "why": "fp32 matmuls"},
            "tf32": {"saving_ns": 40, "why": "SIMT"}}
    got = [x["id"] for x in L.offered({}, {}, {}, dict(turing, busy_levers=busy), 1, ())]
    assert got == ["fp16_for_bf16"]
    got = [x["id"] for x in L.offered({}, {}, {}, {"busy_levers": busy}, 1, ())]
    assert got == ["bf16_autocast", "tf32"]


def test_native_program_gets_cuda_words():
    got = ids("sync", pytorch=False)
    assert got == ["remove_syncs_native", "late_read_native"]


def test_diagnostics_are_not_levers():
    lever_text = {lv.words({}) for lv in L.LEVERS if not callable(lv.text)}
    for d in L.DIAGNOSTICS:
        assert d.words({}) not in lever_text
    assert not any("py-spy" in t or "NCCL_DEBUG" in t or "TORCH_LOGS" in t for t in lever_text)


def test_every_row_is_well_formed():
    every = L.LEVERS + L.DIAGNOSTICS + L.APART   # the job and memory rows too (issue 39)
    assert len(L.BY_ID) == len(every)   # ids are unique
    for lv in every:
        assert lv.cost in L.COST_ORDER and lv.saves in L.SAVINGS
        assert all(callable(p) for p in lv.when)
        assert not lv.busy or lv.saves == "busy"


# -- the one ranked to-do list -------------------------------------------------------------

def _parts(**kw):
    out = {c: 0 for c in ("data", "copy", "sync", "launch", "host", "comms", "compile",
                          "graph_capture", "alloc", "unexplained")}
    out.update(kw)
    return out


def test_busy_levers_rank_with_the_causes_in_every_bound():
    # TF32 worth 8.3 ms/step ranks above a 1.06 ms/step host cause in a host-bound verdict
    ctx = {"steps": 10, "step_mean_ns": 20_000_000,
           "busy_levers": {"tf32": {"saving_ns": 83_000_000, "why": "FP32 SIMT GEMMs"}}}
    v = score(has_gpu=True, window_ns=200_000_000, idle_ns=12_000_000,
               parts=_parts(host=10_600_000), ctx=ctx)
    assert v["bound"] == "gpu" or v["bound"] == "host"
    assert v["actions"][0]["id"] == "tf32" and v["actions"][0]["saves_per_step_ns"] == 8_300_000
    assert v["levers"] == [a["lever"] for a in v["actions"]]
    v = score(has_gpu=True, window_ns=100_000_000, idle_ns=40_000_000,
               parts=_parts(host=40_000_000), ctx=ctx)
    assert v["bound"] == "host" and v["actions"][0]["id"] == "tf32"


def test_no_silent_cut_and_diagnostics_apart():
    # workers started again each epoch, syncs: more levers than a list of 8 holds
    ctx = {"dataloader_workers": True, "dataloader_restarts": {"restarts": 2, "restart_ns": 200},
           "syncs_per_step": 3}
    v = score(has_gpu=True, window_ns=1000, idle_ns=900,
               parts=_parts(data=300, host=300, launch=300, sync=50), ctx=ctx)
    assert len(v["actions"]) > 8 and len(v["levers"]) == len(v["actions"])
    assert v["diagnostics"] and not any("py-spy" in t for t in v["levers"])


def test_projected_step_starts_from_the_gpu_step_when_it_is_longer():
    # host steps 10 ms, the GPU's 30 ms (it lags the host), 12 ms of GPU busy per step
    ctx = {"steps": 2, "step_mean_ns": 10_000_000, "gpu_step_mean_ns": 30_000_000,
           "busy_step_mean_ns": 12_000_000}
    v = score(has_gpu=True, window_ns=60_000_000, idle_ns=36_000_000,
               parts=_parts(host=36_000_000), ctx=ctx)
    a = v["actions"][0]
    assert a["saves_per_step_ns"] == 18_000_000 and a["projected_step_ns"] == 12_000_000
    # never below the GPU's own busy time per step (never "0 ns")
    ctx["gpu_step_mean_ns"] = 15_000_000
    a = score(has_gpu=True, window_ns=60_000_000, idle_ns=36_000_000,
               parts=_parts(host=36_000_000), ctx=ctx)["actions"][0]
    assert a["projected_step_ns"] == 12_000_000


def test_host_dispatch_needs_many_short_aten_ops_over_most_of_the_host_time():
    import pandas as pd

    from traceread.passes.figures import host_dispatch as _host_dispatch
    gaps = pd.DataFrame({"duration": [5_000_000], "cpu_cpu_op": [4_000_000], "cpu_python": [0],
                         "cpu_alloc": [0], "cpu_untraced": [1_000_000]})
    many = pd.DataFrame({"name": ["aten::add", "aten::mul"], "category": ["cpu_op", "cpu_op"],
                         "ns": [2_000_000, 2_000_000], "count": [200, 200]})
    assert _host_dispatch(gaps, many, "aten::add spans 2 ms of idle GPU time")
    one = pd.DataFrame({"name": ["aten::empty"], "category": ["cpu_op"], "ns": [4_000_000],
                        "count": [1]})                       # one slow lazy-init call
    assert not _host_dispatch(gaps, one, "aten::empty spans 4 ms of idle GPU time")
    python = gaps.assign(cpu_cpu_op=[1_000_000], cpu_untraced=[4_000_000])
    assert not _host_dispatch(python, many, "aten::add spans 1 ms of idle GPU time")
    assert not _host_dispatch(gaps, many, "train.py(12): step spans 4 ms of idle GPU time")


def test_text_json_and_html_show_the_same_list_in_the_same_order():
    import html
    import re

    from traceread.analysis import analyze
    from traceread.render.html import analysis_body
    from traceread.render.report import render_report
    from traceread.synth import scenarios as sc

    a = analyze(sc.SCENARIOS["sync"]()[0])
    acts = a.verdict["actions"]
    assert acts and a.verdict["levers"] == [x["lever"] for x in acts]
    text = " ".join(render_report(a).split())
    page = html.unescape(analysis_body(a))
    shown = acts[:8]
    at = [text.index(" ".join(x["lever"].split())) for x in shown]
    assert at == sorted(at)
    # each item's because is its tooltip: escaped in the page, so no quote or > ends it early
    items = [html.unescape(x) for x in re.findall(r"<li(?: title='[^']*')?>(.*?) <span class='meta'>\[",
                                                   analysis_body(a))]
    assert items[:len(acts)] == [x["lever"] for x in acts]
    assert "title='because: " in analysis_body(a)
    if len(acts) > 8:
        assert f"and {len(acts) - 8} more" in text and f"and {len(acts) - 8} more" in page


def test_slow_collective_reads_as_waiting_on_peers():
    """A collective far below any interconnect's bandwidth is waiting, not transfer: the lever
    says so and ranks first among the comms levers (TraceLens mi300/resnet_act_checkpoint)."""
    slow = {"collective": "all_reduce", "busbw_gbps": 2.6, "avg_msg_bytes": 11 << 20,
            "group_size": 8}
    assert L.slow_collective({"slow_collective": slow, "comm_backend": "rccl"})
    assert not L.slow_collective({"slow_collective": slow, "comm_backend": "gloo"})
    assert not L.slow_collective({"slow_collective": None})
    ctx = {"slow_collective": slow, "comm_backend": "rccl", "framework": ["ddp"],
           "lost_ns": 100}
    items = L.offered({"comms": 100}, {}, {}, ctx, 1, ("comms",))
    assert items[0]["id"] == "peers_late" and "2.6 GB/s" in items[0]["lever"]


def test_slow_collective_needs_big_messages_and_several_ranks():
    import pandas as pd

    from traceread.passes.figures import slow_collective as _slow_collective

    def row(**kw):
        base = {"collective": "all_reduce", "exposed_ns": 10, "busbw_gbps": 2.6,
                "avg_msg_bytes": 11 << 20, "group_size": 8}
        return pd.DataFrame([{**base, **kw}])
    assert _slow_collective(row())["busbw_gbps"] == 2.6
    assert _slow_collective(row(busbw_gbps=150.0)) is None     # a healthy all_reduce
    assert _slow_collective(row(avg_msg_bytes=4096)) is None   # small: latency-bound anyway
    assert _slow_collective(row(group_size=1)) is None
    assert _slow_collective(row(avg_msg_bytes=float("nan"))) is None


def test_empty_cache_advice_needs_device_frees():
    """Only cudaMalloc in the gaps (a caching allocator still growing, H200 pageable capture):
    no "remove empty_cache()" -- the program calls none; the growth lever instead."""
    base = {"pytorch": True, "lost_ns": 100, "alloc_gap_ns": 50}
    grow = L.offered({"host": 100}, {"alloc": 50}, {}, {**base, "alloc_frees": 0}, 1, ("host",))
    ids = [x["id"] for x in grow]
    assert "allocator_growth" in ids and "no_empty_cache" not in ids
    churn = L.offered({"host": 100}, {"alloc": 50}, {}, {**base, "alloc_frees": 12}, 1, ("host",))
    ids = [x["id"] for x in churn]
    assert "no_empty_cache" in ids and "allocator_growth" not in ids


def test_fsdp_prefetch_only_when_all_gathers_are_exposed():
    # parallelism.fsdp.all_gather.exposed_pct: measured hidden -> no prefetch advice
    fsdp = dict(framework=["fsdp2"], collectives=["all_gather", "reduce_scatter"])
    assert "fsdp_prefetch" in ids("comms", **fsdp)                                # unknown
    assert "fsdp_prefetch" in ids("comms", **fsdp, fsdp_all_gather_exposed_pct=64.3)
    assert "fsdp_prefetch" not in ids("comms", **fsdp, fsdp_all_gather_exposed_pct=4.0)
    assert "ddp_buckets" not in ids("comms", **fsdp, fsdp_all_gather_exposed_pct=4.0)


def test_fsdp_prefetch_saves_the_exposed_gathers_compute_can_hide():
    """Prefetch hides an all_gather only behind compute: min(exposed, free compute, comms)."""
    ctx = dict(framework_evidence={"fsdp2": "FSDP::pre_forward"}, collectives=["all_gather"],
               fsdp_all_gather_exposed_pct=64.3)

    def saves(**kw):
        got = [x for x in L.offered({"comms": 10_000}, {}, {}, {**ctx, **kw}, 1, ("comms",))
               if x["id"] == "fsdp_prefetch"]
        return got[0]["saves_ns"] if got else "absent"
    assert saves(fsdp_all_gather_exposed_ns=6_000, fsdp_free_compute_ns=4_000) == 4_000
    assert saves(fsdp_all_gather_exposed_ns=3_000, fsdp_free_compute_ns=4_000) == 3_000
    assert saves(fsdp_all_gather_exposed_ns=30_000, fsdp_free_compute_ns=40_000) == 10_000
    assert saves() == 10_000                                  # not measured: the comms score
    assert saves(fsdp_all_gather_exposed_pct=4.0) == "absent"


def test_exposed_tp_all_reduce_gets_overlap_advice_priced_by_the_compute_it_can_hide():
    ctx = dict(framework_evidence={"dtensor": "Redistribute"}, tp_exposed_pct=69.2,
               tp_exposed_ns=75_000, tp_compute_ns=14_000, tp_worst_layer=0,
               tp_worst_layer_pct=87.4)

    def got(scores, **kw):
        return [x for x in L.offered(scores, {}, {}, {**ctx, **kw}, 1, ("comms",))
                if x["id"] == "tp_overlap"]
    (lv,) = got({"comms": 100_000})
    assert lv["saves_ns"] == 14_000 and "69% of the steps" in lv["lever"] and "layer 0" in lv["lever"]
    assert got({"comms": 100_000}, tp_exposed_pct=12.0) == []          # not on the critical path
    assert got({"comms": 9_000})[0]["saves_ns"] == 9_000                 # capped at the comms score
    assert got({}) == []                                                 # no comms cause


def test_tune_lever_names_a_long_kernel_by_a_regex_ncu_can_match():
    """ncu --kernel-name matches a whole name: a name cut to 80 characters would match nothing,
    so a longer one is matched by its head (regex:^...)."""
    long = ("triton_poi_fused__to_copy_arange_cat_clone_copy_embedding_index_index_put_mul_slice"
            "_scatter_stack_unsqueeze_view_12")
    text = L._tune_kernel_text({"top_kernel": {"name": long, "pct": 60.0},
                                "device_name": "NVIDIA H100"})
    assert f"--kernel-name regex:^{long[:80]} " in text
    short = L._tune_kernel_text({"top_kernel": {"name": "void ns::k<float>(float*)", "pct": 60.0},
                                 "device_name": "NVIDIA H100"})
    assert "--kernel-name k --set full" in short


PP = {"pp_stages": 2, "pp_microbatches": 4, "pp_schedule": "gpipe", "pp_bubble_pct": 30.0,
      "pp_step_ns": 1000}


def test_pipeline_bubble_gets_more_microbatches_with_the_projected_saving():
    assert L.pp_theory_pct(2, 4) == 20.0 and L.pp_bubble_dominates(PP)
    assert not L.pp_bubble_dominates({**PP, "pp_bubble_pct": 19.0})      # bubble small
    assert not L.pp_bubble_dominates({**PP, "pp_microbatches": None})    # m unknown
    assert not L.pp_bubble_dominates({**PP, "pp_stages": 2, "pp_microbatches": 64})  # gain < 2 pts
    item = [x for x in L.offered({}, {}, {}, PP, 1, ()) if x["id"] == "pp_microbatches"][0]
    # only the schedule's part shrinks: min(30, 20) - 100/9 points of the 1000 ns of steps
    assert item["saves_ns"] == int(1000 * (20.0 - 100 / 9) / 100)
    assert "m=8" in item["lever"] and "1F1B" in item["lever"]


def test_slow_stage_gets_rebalancing_naming_it():
    ctx = {"pp_slowest_stage": 3, "pp_slowest_x": 1.6, "pp_excess_busy_ns": 5_000_000}
    assert L.pp_stage_slow(ctx)
    assert not L.pp_stage_slow({**ctx, "pp_slowest_x": 1.1})
    assert not L.pp_stage_slow({**ctx, "pp_slowest_stage": None})     # one rank: unknown
    assert not L.pp_stage_slow({**ctx, "pp_excess_busy_ns": 0})
    item = [x for x in L.offered({}, {}, {}, ctx, 1, ()) if x["id"] == "pp_rebalance"][0]
    assert item["saves_ns"] == 5_000_000 and "stage 3" in item["lever"]


def test_all_to_all_imbalance_gets_routing_advice_naming_the_hot_rank():
    ctx = {"ep_hot_rank": 5, "ep_imbalance": 1.8}
    assert L.ep_imbalanced(ctx) and not L.ep_imbalanced({**ctx, "ep_imbalance": 1.1})
    assert not L.ep_imbalanced({"ep_imbalance": 3.0})
    item = [x for x in L.offered({}, {}, {}, ctx, 1, ()) if x["id"] == "ep_balance"][0]
    assert "rank 5" in item["lever"] and "capacity factor" in item["lever"]
    assert item["saves_ns"] is None                           # no all_to_all time known
    item = [x for x in L.offered({}, {}, {}, {**ctx, "ep_a2a_ns": 9_000}, 1, ())
            if x["id"] == "ep_balance"][0]
    assert item["saves_ns"] == int(9_000 * (1 - 1 / 1.8))      # the hot rank at the mean bytes


def test_remove_syncs_names_the_blocking_calls_the_trace_shows():
    # TraceLens' xdit Flux trace: 5 blocking .to() copies of the prompt's tokens, 2
    # synchronize(), 1 .cpu() a step -- the generic ".item()" advice alone sent the reader
    # to look for calls the program does not make
    by_kind = {"synchronize": {"explicit": True, "per_step": 2.0},
               "blocking_copy": {"explicit": False, "per_step": 5.0},
               "cpu": {"explicit": True, "per_step": 1.0}}
    text = L.BY_ID["remove_syncs"].words({"blocking": {"by_kind": by_kind}})
    assert "(a step here: 5 blocking copies, 2 synchronize(), 1 .cpu() / .numpy())" in text
    assert "non_blocking=True with pinned host memory" in text
    only = L.BY_ID["remove_syncs"].words({"blocking": {"by_kind": {"item": {"per_step": 0.5}}}})
    assert "0.5 .item()" in only and "non_blocking" not in only
    assert L.BY_ID["remove_syncs"].words({}) == L.REMOVE_SYNCS
    # every kind passes/blocking.py names has its words (HTA's event-sync trace read
    # "2 runtime sync, 1 condition")
    from traceread.passes.blocking import KINDS

    assert {k for k, *_ in KINDS} | {"runtime_sync", "blocking_copy", "pageable_copy",
                                     "other"} <= set(L.SYNC_KIND_WORDS)


def test_front_end_names_only_the_remedies_the_trace_leaves_open():
    words = L.BY_ID["front_end"].words
    assert "torch.compile fusion" in words({}) and "CUDA graphs" in words({})
    # torch 1.8-1.9 (kineto tb_plugin resnet50): neither torch.compile nor torch.cuda.graphs
    old = words({"torch_version": "1.8-1.9"})
    assert "torch.compile" not in old and "CUDA graphs" not in old and "fused layers" in old
    # already compiled and replaying graphs (HTA trace_diff/test): more of the same, not new
    done = words({"compiled": True, "uses_cuda_graphs": True})
    assert "graph breaks" in done and "inside its CUDA graphs" in done
    assert "torch.compile fusion" not in words({"device": {"vendor": "nvidia", "cc": "6.0"}})
    assert "torch.compile" not in words({"pytorch": False})


def test_graph_levers_name_torch_compile_only_where_it_runs():
    for lever in ("cuda_graphs", "graphs_host"):
        words = L.BY_ID[lever].words
        assert "reduce-overhead" in words({})
        # a torch before 2.0 (HTA's 2022 traces), a Pascal GPU: torch.cuda.graphs alone
        for ctx in ({"torch_version": "<2.0"}, {"device": {"vendor": "nvidia", "cc": "6.0"}}):
            assert "torch.compile" not in words(ctx) and "torch.cuda" in words(ctx)


def test_unknown_copies_advice_follows_their_direction():
    # TraceLens h100 owlv2: the unknown copies are 12.9 ms device->host (results read back)
    # and 1.3 ms host->device; the advice spoke of fresh input data only
    owl = {"copy_payloads": [
        {"payload": "unknown", "direction": "DtoH", "count": 50, "copy_ns": 12_889_955},
        {"payload": "unknown", "direction": "HtoD", "count": 21, "copy_ns": 1_323_891},
        {"payload": "input_batch", "direction": "HtoD", "count": 4, "copy_ns": 336_220}]}
    words = L.BY_ID["copy_unknown"].words(owl)
    assert "read back" in words and "fresh data" not in words
    assert "fresh data" in L.BY_ID["copy_unknown"].words({})          # unknown: as before
    native = L.BY_ID["copy_unknown_native"].words(owl)
    assert "pinned memory" in native and "fresh data" not in native


def test_no_autocast_advice_where_autocast_is_on():
    # the busy pass prices autocast from the fp32 matmuls left; with torch.autocast already on
    # (h200 xformer.bad: bf16 casts inside aten::linear) those are ones it keeps in fp32
    for lever in ("bf16_autocast", "fp16_autocast"):
        assert L.BY_ID[lever].holds({})
        w = L.BY_ID[lever].refusal({"autocast": "bf16"})
        assert w.precondition == "autocast_off" and "autocast" in w.facts


def test_infra_levers_name_the_vendors_tools():
    # TraceLens mi300 resnet_act_checkpoint (RCCL) was told NVLink; mi300 owlv2 DALI
    amd = {"device": {"vendor": "amd", "name": "AMD Instinct MI300X"}}
    assert "NVLink" not in L.BY_ID["interconnect"].words(amd)
    assert "xGMI" in L.BY_ID["interconnect"].words(amd)
    assert "DALI" not in L.BY_ID["storage"].words(amd)
    nv = {"device": {"vendor": "nvidia"}}
    assert "NVLink" in L.BY_ID["interconnect"].words(nv) and "DALI" in L.BY_ID["storage"].words(nv)
    # TraceLens vLLM graph_execution on MI300X was told nsys --cuda-graph-trace=node, the
    # sglang traces cudaStreamWaitEvent
    for lever in ("queued_in_graphs", "queued_untraced"):
        assert "nsys" not in L.BY_ID[lever].words(amd) and "rocprofv3" in L.BY_ID[lever].words(amd)
        assert "nsys" in L.BY_ID[lever].words(nv) and "nsys" in L.BY_ID[lever].words({})
    assert "hipStreamWaitEvent" in L.BY_ID["stream_waits"].words(amd)
    assert "cudaStreamWaitEvent" in L.BY_ID["stream_waits"].words({})


def test_py_spy_asks_for_with_stack_only_where_the_trace_has_no_python_frames():
    # TraceLens mi300 bert-small was recorded with_stack (1,295 frames a step): the
    # diagnostic still told it to record with torch.profiler(with_stack=True)
    spy = L.BY_ID["py_spy"]
    assert "with_stack" not in spy.words({"profiler_overhead": {"with_stack": True}})
    assert "with_stack=True" in spy.words({"profiler_overhead": {"with_stack": False}})
    assert "with_stack=True" in spy.words({})   # nothing known: said as before
    # TraceLens perf_model normalization: Python frames, no steps (so no overhead estimate)
    assert "with_stack" not in spy.words({"stacks_traced": True, "profiler_overhead": None})


def test_compiled_calls_are_counted_per_forward_pass():
    four = {"compiled_calls_per_step": {"graphs": {"g": 4.0}, "max": 4.0, "steps": 1}}
    assert L.compiled_called_often(four)   # no anatomy: 4 calls a step are 4
    one_each = {**four, "anatomy": {"passes": {"forward_per_step": 4.0}}}
    assert not L.compiled_called_often(one_each) and L.compiled_called_once(one_each)
    twice_each = {**four, "anatomy": {"passes": {"forward_per_step": 2.0}}}
    assert L.compiled_called_often(twice_each)   # a graph called per layer, say
