"""Levers the program rules out, found reading the corpus (issue 42 session's new-user pass):
each refusal names what rules it out. Skips without the corpus."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip

DDP_R18 = "AMD-AGI__TraceLens/tests/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"
LINEAR = "facebookresearch__param/et_replay/tests/inputs/linear_kineto.json.gz"


def _corpus(rel: str):
    p = corpus_or_skip() / rel
    if not p.is_file():
        pytest.skip(f"{rel} not in the corpus")
    return p


def test_no_shape_advice_for_an_allocator_that_caches_nothing():
    # MI300 DDP resnet18 with the caching allocator off (hipFree inside the ops, 2.97 s of
    # the 3.31 s window): stable shapes let a cache reuse blocks -- there is none to reuse
    v = analysed(_corpus(DDP_R18)).verdict
    ids = [x["id"] for x in v["actions"]]
    assert ids[0] == "allocator_on" and "shapes_stable" not in ids
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert gone["shapes_stable"]["precondition"] == "allocator_cached"


def test_waits_a_replay_does_not_repeat_do_not_stop_a_capture():
    # param's linear_kineto: a cudaMalloc and a lazily loading occupancy query waited on the
    # GPU mid-step; a captured graph allocates from its own pool and loads nothing: the
    # capture is replayed (it was refused: "the step syncs between its launches")
    from traceread.passes.replay.whatif import NOT_A_STOP_RX

    for name in ("cudaStreamSynchronize", "cudaDeviceSynchronize_ptsz", "hipEventSynchronize",
                 "cudaMemcpy", "cudaMemcpyAsync", "cuMemcpyDtoH_v2", "synchronizeStream",
                 "cudaLaunchKernel"):
        assert not NOT_A_STOP_RX.match(name), name
    for name in ("cudaMalloc", "hipMalloc", "cuMemAlloc_v2", "cudaHostAlloc",
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuModuleLoadData",
                 "cudaFuncGetAttributes"):
        assert NOT_A_STOP_RX.match(name), name
    v = analysed(_corpus(LINEAR)).verdict
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert "cuda_graphs" not in gone
    x = next(x for x in v["actions"] if x["id"] == "cuda_graphs")
    assert x["basis"] == "replay"


MI250 = "facebookresearch__HolisticTraceAnalysis/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def test_a_last_step_the_trace_cut_short_is_left_out():
    # HTA's MI250 toy: step #2 is 49 us long and launches nothing -- the profiler stopped in
    # it; with it the mean step was 4.67 ms (cv 0.99 for two steps of 9.29 ms and 49 us)
    a = analysed(_corpus(MI250))
    assert a.window.steps["step"].tolist() == [1]
    cut = [x for x in a.window.excluded if x["what"] == "step #2"]
    assert cut and cut[0]["reason"].startswith("cut short")
    after = [x for x in a.window.excluded if x["what"] == "after the last analysed step"]
    # the trailing edge starts after the cut step: no time is excluded twice
    assert all(x["start_ns"] >= cut[0]["start_ns"] + cut[0]["ns"] for x in after)


def test_a_short_last_step_that_launches_work_stays():
    from traceread.passes.window import _drop_cut_last
    import pandas as pd

    kept = pd.DataFrame({"index": [0, 1, 2], "step": [1, 2, 3], "pid": [1, 1, 1],
                         "start": [0, 100, 200], "end": [100, 200, 210], "dur": [100, 100, 10]})
    ops = pd.DataFrame({"launch_ts": [50, 150, 205], "launch_pid": [1, 1, 1],
                        "ts": [60, 160, 206], "pid": [1, 1, 1], "end": [90, 190, 208]})
    assert len(_drop_cut_last(kept, ops)[0]) == 3          # it launched work: a real step
    got, cut = _drop_cut_last(kept, ops.iloc[:2])
    assert len(got) == 2 and cut[0]["step"] == 3            # it launched none: cut short


def test_a_capture_refusal_names_the_sync():
    # TraceLens' timesformer on H100: a cudaStreamSynchronize mid-step with launches after it
    v = analysed(_corpus("AMD-AGI__TraceLens/tests/traces/h100/"
                         "facebook_timesformer-base-finetuned-k400__1016002.json.gz")).verdict
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert gone["graphs_host"]["reason"].startswith(
        "the step syncs between its launches (seen: cudaStreamSynchronize)")


def test_mtias_own_sync_still_stops_a_capture():
    v = analysed(_corpus("facebookresearch__HolisticTraceAnalysis/tests/data/"
                         "mtia_inference_trace/mtia_inference_rank_0.json.gz")).verdict
    assert "cuda_graphs" not in [x["id"] for x in v["actions"]]


def test_mtias_synchronize_calls_drain_the_queue():
    """MTIA's runtime names its syncs bare (``synchronize``, ``synchronizeStream``: each
    returns ~30 us after the device's copy it waited on ends). Read as launches, the gap they
    drained was "host simply late" and the sync attribution was empty."""
    a = analysed(_corpus("facebookresearch__HolisticTraceAnalysis/tests/data/"
                         "mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    assert a.attribution["by_sync_op"]["synchronizeStream"]["ns"] > 5_000_000
    assert a.attribution["by_drain"]["sync"] > 5_000_000


def test_a_gpu_whose_ops_wait_queued_is_not_paced_by_a_just_in_time_host():
    """HTA's MTIA inference trace: 94.5% busy, and its graph's critical path (an untraced
    host stretch, syncs it could not link) read "yet the host paces it: 0% GPU work -- each
    kernel launched just in time". The ops say otherwise: 89% of the GPU's time is in ops
    that waited 0.5 ms or more after their launch (median 9 ms)."""
    a = analysed(_corpus("facebookresearch__HolisticTraceAnalysis/tests/data/"
                         "mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    assert a.facts.figures["queued_busy_share"] > 0.5
    assert "host paces it" not in a.verdict["summary"]


def test_queued_busy_share_weighs_the_ops_that_waited_after_their_launch():
    import pandas as pd
    from traceread.passes.steps import QUEUED_NS, queued_busy_share

    ops = pd.DataFrame({"ts": [100, 1_000_000, 5_000_000], "dur": [10, 30, 60],
                        "launch_ts": [90, 1_000_000 - QUEUED_NS, -1]})
    assert queued_busy_share(ops) == 30 / 40   # the unlaunched op is not weighed
    assert queued_busy_share(ops.assign(launch_ts=-1)) is None


def test_a_host_paced_busy_gpu_names_no_kernel_lever_in_its_headline():
    """nsys-ai's healthy_1pct: 1 ms kernels launched every 1.01 ms (each gap "starved"), so
    the host paces a GPU 99% busy and no busy lever is offered; the headline still read "top
    lever tf32 (~43% of busy time)"."""
    v = analysed(_corpus("GindaChen__nsys-ai/tests/fixtures/healthy_1pct.sqlite")).verdict
    assert "host paces it" in v["summary"] and not v["actions"]
    assert "top lever" not in v["summary"]


def test_a_warm_up_window_is_start_up_and_its_recording_is_not_movable_host_work():
    """TraceLens' xdit flux.1 capture trace: 423 of its 561 ms inside the program's own
    _run_compile_warmup, 243 ms of it CUDAGraphNode.record. "move the host work off the step
    path" promised those 261 ms back; a recording runs where it is called. The window is the
    program's warm-up, and says so."""
    v = analysed(_corpus("AMD-AGI__TraceLens/tests/traces/inference/xdit_flux.1/"
                         "capture_traces/capture_trace_rank_0.json.gz")).verdict
    # the rest of its host time is diffusers' hooks walking the modules (_set_context), the
    # framework's own: off_step_path is withdrawn now (it was offered at < 30 ms)
    off = next((x for x in v["actions"] if x["id"] == "off_step_path"), None)
    assert off is None or off["saves_ns"] < 30_000_000
    start = next(x for x in v["actions"] if x["id"] == "startup_capture")
    assert "the program's warm-up" in start["lever"] and "vLLM" not in start["lever"]


def test_a_warm_up_window_offers_no_per_step_sync_or_graph_coverage_lever():
    """The same capture trace: every GPU op (13.6-409.7 ms) and every sync lies inside
    _run_compile_warmup (0.2-422.8 ms) -- its eager launches are cudagraph_trees' warm-up
    runs, its hipDeviceSynchronize the warm-up's. "bring the parts still launched eagerly
    into the graph" (17.8 ms) and "remove per-step host syncs" (15.1 ms) were offered on
    them; the window is start-up, as for vLLM / SGLang's capture windows."""
    v = analysed(_corpus("AMD-AGI__TraceLens/tests/traces/inference/xdit_flux.1/"
                         "capture_traces/capture_trace_rank_0.json.gz")).verdict
    ids = [x["id"] for x in v["actions"]]
    assert ids == ["startup_capture"]
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert gone["remove_syncs"]["precondition"] == "steady_window"
    # its one graph launch is the recording's own first run (passes/graphs.graph_runs): no
    # graph is replayed, which refuses graph coverage before the start-up window does
    assert gone["graph_coverage_inference"]["precondition"] == "graphs_replayed"


def test_two_savings_of_one_cause_this_close_read_as_one_piece_of_time():
    from traceread.render.text import action_gain

    prev = {"cause": "sync", "saves_ns": 766_000, "saves_per_step_ns": 383_000}
    x = {"cause": "sync", "saves_ns": 754_000, "saves_per_step_ns": 377_000}
    assert action_gain(x, prev) == ("~377 us per step: about the same sync time as the lever "
                                    "above (not in addition to it)")
    far = dict(x, saves_ns=500_000, saves_per_step_ns=250_000)
    assert "the lever above" not in action_gain(far, prev)
    assert action_gain(dict(prev), prev).startswith("the same sync time")


def test_a_rank_led_by_the_jobs_lever_says_so_in_its_title():
    """h200/ddp2 rank 0: the straggler's 30.3 ms leads its own NCCL lever's 96.2 ms, under a
    title that said "largest saving first"."""
    from traceread.render.text import TODO_TITLE, todo_title

    job = {"id": "straggler", "saves_ns": 182}
    nccl = {"id": "nccl_backend", "saves_ns": 577}
    assert "the job's lever first, then the largest saving" in todo_title({"actions": [job, nccl]})
    assert todo_title({"actions": [dict(job, saves_ns=600), nccl]}) == TODO_TITLE
    assert todo_title({"actions": [nccl, job]}) == TODO_TITLE


def test_the_todo_title_says_the_order_a_gpu_bound_or_prerequisite_list_follows():
    """extra-p con_kernel (GPU-bound): the unpriced kernel lever leads a 5.7 ms copy lever
    under "largest saving first"; a lever ranked after the one it needs (CUDA graphs after
    per-parameter reads) would have too."""
    from traceread.render.text import TODO_TITLE, todo_title

    tune = {"id": "tune_kernel", "saves_ns": None}
    copy = {"id": "copy_unknown_native", "saves_ns": 5_701_587}
    assert "the GPU's own work first" in todo_title({"actions": [tune, copy]})
    assert todo_title({"actions": [copy, tune]}) == TODO_TITLE
    item = {"id": "per_param_item", "saves_ns": 10}
    graphs = {"id": "cuda_graphs", "saves_ns": 40}
    assert "each after any lever it needs done first" in todo_title({"actions": [item, graphs]})
    assert todo_title({"actions": [graphs, item]}) == TODO_TITLE


@pytest.mark.parametrize("blob", ["0935c73d", "36347a15"])
def test_one_gpu_op_is_judged_on_its_run_not_its_own_window(blob):
    """HTA's triton_example without its step mark: one 2.24 us kernel in a 172 us run (the
    launch, 122 us of the compiled region's host work, a sync) read "GPU-bound: densely
    busy, 100% of the analysed window" -- the window of one op is all busy. Judged on the
    run (its critical path), it is the host's, as the same program with its step mark reads."""
    a = analysed(_corpus("facebookresearch__HolisticTraceAnalysis/tests/data/triton_example/"
                         f"triton_example__blob{blob}.json.gz"))
    v = a.verdict
    assert v["bound"] == "host" and v["evidence"]["judged_on_run_ns"] == a.replay["measured_ns"]
    assert v["evidence"]["idle_pct"] > 95 and "one GPU op in the trace" in v["summary"]


def test_of_two_levers_for_one_piece_of_time_the_one_the_trace_points_at_leads():
    """cpupairs' save pair: "move the host work off the step path" (9.69 ms replayed) led
    "save asynchronously" (the save phase's 9.59 ms): the same time, and the trace names the
    save. Within 5% of each other, the pointed-at lever leads; further apart, the larger."""
    from traceread.render.text import TODO_TITLE, todo_title
    from traceread.verdict.levers import rank

    def items(generic_ns):
        return [{"id": "off_step_path", "cause": "host", "saves_ns": generic_ns},
                {"id": "save_async_cpu", "cause": "host", "saves_ns": 9_590_000}]
    got = rank(items(9_690_000))
    assert [x["id"] for x in got] == ["save_async_cpu", "off_step_path"]
    assert todo_title({"actions": got}) == TODO_TITLE
    assert [x["id"] for x in rank(items(11_000_000))] == ["off_step_path", "save_async_cpu"]


def test_an_event_wait_on_untraced_work_says_the_work_is_not_in_the_trace():
    """TraceLens' sglang prefill+decode: its first kernel waited 493 ms behind a
    hipStreamWaitEvent whose producer is not in the trace (the device ran nothing traced:
    the previous batch's forward, launched before the recording, takes as long as the traced
    one). "record the event earlier" alone read as if the program's own traced work held it."""
    from traceread.verdict.levers import BY_ID, _waited_work_untraced

    assert _waited_work_untraced({"hipStreamWaitEvent": 493, "GPU-side": 1})
    assert not _waited_work_untraced({"stream 9: Memcpy HtoD": 20, "cudaStreamWaitEvent": 10})
    assert not _waited_work_untraced({"GPU-side": 5, "nothing traced": 9})
    text = BY_ID["stream_waits"].text
    assert "not in this trace" in text({"queued_on": {"hipStreamWaitEvent": 493}})
    assert "not in this trace" not in text({"queued_on": {"stream 7: gemm": 493}})


def test_mtias_submission_queue_entries_are_the_devices_not_host_calls():
    """HTA's MTIA inference trace records 113 "synchronize" (cat mtia_runtime) on the
    device's own process (pid 17, threads "Stream 10x Submission Queue"): queue entries, read
    as host runtime calls -- the step's critical path ran 82 ms through them and they
    doubled its blocking calls (218 a step). They are the device's sync records, as its
    event waits are."""
    import traceread

    ev = traceread.load(_corpus("facebookresearch__HolisticTraceAnalysis/tests/data/"
                                "mtia_inference_trace/mtia_inference_rank_0.json.gz")).events
    sync = ev["name"].astype(str).eq("synchronize")
    assert sync.sum() == 113
    assert (ev.loc[sync, "kind"] == "sync").all() and (ev.loc[sync, "device"] == 17).all()
    host = ev[ev["kind"].eq("runtime")]
    assert not host["name"].astype(str).eq("synchronize").any()


def test_the_host_work_outside_the_model_is_not_a_thread_waiting_on_autograd():
    """TraceLens mi300 resnet18: the host work outside the model's calls was named
    run_backward / backward() at 9.4 ms, 2.1x that outside time (4.4 ms): the main thread
    waits there while autograd's thread launches 263 kernels to its own one."""
    a = analysed(_corpus(DDP_R18))
    hw = a.facts.figures["host_work_kind"]
    assert "backward" not in hw["top_other"]
    assert hw["top_other_ns"] <= hw["host_ns"] - hw["model_ns"]


def test_the_renderers_and_the_ranking_read_one_piece_of_time_alike():
    from traceread.render import text
    from traceread.verdict import levers

    assert text.SAME_TIME_SHARE == levers.SAME_TIME_SHARE


def test_a_comms_lever_net_of_the_wait_sinks_below_the_larger_savings():
    """nsys-ai mfu_2gpu_before rank 0: "check the interconnect" (8.73 ms once the wait for
    the straggler is taken out) stayed above "fewer ops" (11.4 ms) under "largest saving
    first"; netted, it moves down, the job's lever first."""
    from traceread.jobs.multirank.verdicts import _net_of_the_wait

    v = {"actions": [{"id": "straggler", "cause": "comms", "saves_ns": 8_340_000},
                     {"id": "compile_fuse", "cause": "launch", "saves_ns": 51_000_000},
                     {"id": "interconnect", "cause": "comms", "saves_ns": 17_070_000},
                     {"id": "fewer_ops", "cause": "host", "saves_ns": 11_400_000},
                     {"id": "tune_kernel", "cause": "gpu", "saves_ns": None},
                     {"id": "front_end", "cause": "queued", "saves_ns": 4_250_000}]}
    _net_of_the_wait(v, 8_340_000)
    assert [a["id"] for a in v["actions"]] == ["straggler", "compile_fuse", "fewer_ops",
                                               "interconnect", "tune_kernel", "front_end"]
    assert v["actions"][3]["saves_ns"] == 8_730_000


def test_the_gpu_headline_gives_the_replayed_figure_of_its_top_lever():
    """h200/xformer.bad: the headline read "top lever torch_compile (~14% of busy time)" over
    the to-do item's replayed 10.3 ms a step, 11.9% of the window: one lever, one figure."""
    from conftest import FIXTURES

    v = analysed(FIXTURES / "h200" / "xformer.bad.json.gz").verdict
    top = v["actions"][0]
    assert top["basis"] == "replay"
    assert f"top lever torch_compile (~{top['saves_pct']:.1f}% of the window, replayed)" \
        in v["summary"]
