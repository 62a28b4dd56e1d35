"""Audit of 2026-11-30 (route15): wrong answers found in the morning's audit."""
from pathlib import Path

import pytest

from traceread import load
from traceread.analysis import analyze

from conftest import analysed

FIX = Path(__file__).parent / "fixtures"


# -- H: a sampled CPU-only trace is not replayed -----------------------------------------

@pytest.fixture(scope="module")
def cut_sampled(tmp_path_factory):
    """hta_sampled_rank-1 cut at 30,000 bytes: the cut .json.gz keeps CPU events only; its
    External id gaps say ~99% of the events were dropped (sampled)."""
    p = tmp_path_factory.mktemp("cut") / "cut.json.gz"
    p.write_bytes((FIX / "kineto" / "hta_sampled_rank-1.json.gz").read_bytes()[:30_000])
    return analyze(load(p))


def test_a_sampled_cpu_only_window_prices_no_lever_by_replay(cut_sampled):
    a = cut_sampled
    assert not len(a.devices)
    assert a.replay["reason"].startswith("events were dropped (sampled trace)")
    assert a.facts.graph is None
    acts = a.to_dict()["verdict"]["actions"]
    assert not [x["id"] for x in acts if x.get("basis") == "replay"]


def test_a_host_only_window_without_sampling_is_still_replayed():
    a = analyze(load(FIX / "anatomy" / "accum.json.gz"))
    assert a.replay["reason"] == "no GPU work in the window"
    acts = {x["id"]: x.get("basis") for x in a.to_dict()["verdict"]["actions"]}
    assert acts.get("larger_batch") == "replay"


def test_the_diffs_graph_of_a_sampled_cpu_only_window_is_refused(cut_sampled):
    from traceread.passes.replay.whatif import graph_of

    g, why = graph_of(cut_sampled)
    assert g is None and why.startswith("events were dropped (sampled trace)")


# -- D: one layout-conversion pattern, MIOpen's batched_transpose included ---------------

def test_every_layout_reader_holds_the_one_pattern_with_miopens_transposes():
    from traceread.diffs import proof
    from traceread.passes import precision
    from traceread.passes.replay import whatif

    assert proof.LAYOUT_RX is whatif.LAYOUT_RX is precision.LAYOUT_RX
    for name in ("batched_transpose_256x4_half", "nchwToNhwcKernel", "nhwcToNchwKernel"):
        assert proof.LAYOUT_RX.search(name), name
    assert not proof.LAYOUT_RX.search("at_transpose_batched_copy")


def test_falcon_h100_to_mi300_is_not_called_channels_last(corpus_dir):
    """AFTER (MI300) runs batched_transpose_256x4_half around its convolution: the layout
    is still converted, no channels_last change is read from the pair."""
    from traceread.diffs.paths import diff_paths
    from traceread.diffs.proof import changed, signature

    base = corpus_dir / "AMD-AGI__TraceLens" / "tests" / "traces"
    name = "Falconsai_nsfw_image_detection__1016002.json.gz"
    b, a = (analysed(base / gpu / name) for gpu in ("h100", "mi300"))
    assert signature(a)["layout_kernels_per_step"] > 0
    assert "channels_last" not in [m for m, _, _ in changed(signature(b), signature(a))]
    d = diff_paths(str(base / "h100" / name), str(base / "mi300" / name))
    assert "channels_last" not in str(d.proof)


# -- B: the projected step and the saving in one frame ------------------------------------

def _ctx(profiled_before):
    return {"program_step_mean_ns": 7_890_000, "busy_step_mean_ns": 1_230_000,
            "replay_levers": {"before_ns": 5_070_000, "profiled_before_ns": profiled_before}}


def test_an_unprofiled_price_projects_the_measured_step_less_the_saving():
    """Falcon h100's figures: the profiler's cost is material, the levers are priced on the
    unprofiled replay (5.07 -> 1.27 ms): the 7.89 ms measured step less the 3.8 ms saving,
    not 7.89 x 1.27 / 5.07 (1.97 ms, a step no frame holds beside the 3.8 ms)."""
    from traceread.verdict.whatif import projected

    r = {"before_ns": 5_070_000, "after_ns": 1_270_000, "saves_ns": 3_800_000,
         "gpu_saved_ns": 0}
    assert projected(_ctx(7_890_000), r) == 7_890_000 - 3_800_000
    # priced on the profiled replay: the ratio, the replay's own error cancelling
    assert projected(_ctx(None), r) == round(7_890_000 * 1_270_000 / 5_070_000)


def test_falcon_h100_line_reads_in_one_frame(corpus_dir):
    a = analysed(corpus_dir / "AMD-AGI__TraceLens" / "tests" / "traces" / "h100"
                 / "Falconsai_nsfw_image_detection__1016002.json.gz")
    v = a.to_dict()["verdict"]
    step = a.facts.figures["program_step_mean_ns"]
    acts = [x for x in v["actions"] if x.get("basis") == "replay"]
    assert acts and acts[0]["id"] == "cuda_graphs"
    for x in acts:
        assert abs(x["projected_step_ns"] + x["saves_per_step_ns"] - step) <= 1, x["id"]
    both = v["what_if"]["levers_together"]
    assert abs(both["projected_step_ns"] + both["saves_per_step_ns"] - step) <= 1


# -- C: one graph launch inside the recording call is no replay ---------------------------

def _recording(launch_inside: bool, record_after: bool = False):
    from test_whatif import US, G

    g = G()
    g.h("host", "torch/_inductor/cudagraph_trees.py(2205): record_function", 50 * US,
        cat="graph_capture")
    if not launch_inside:   # the recording call returns; the program replays later
        g.h("host", "aten::add", 5 * US, cat="cpu_op")
    a = g.h("launch", "hipGraphLaunch", 5 * US)
    g.k("g", 2 * US, a)
    g.h("host", "torch/_inductor/cudagraph_trees.py(2205): record_function"
        if launch_inside else "aten::add", 5 * US, cat="graph_capture" if launch_inside
        else "cpu_op")
    if record_after:
        g.h("host", "torch/_inductor/cudagraph_trees.py(2205): record_function", 40 * US,
            cat="graph_capture")
    return g.build()


def test_the_recordings_own_first_run_is_not_a_replay():
    """xDiT Flux's capture: 1 recording, its 1 hipGraphLaunch made inside record_function
    (the host stretches on both sides are graph capture work): no graph is replayed, the
    capture levers keep their bounds."""
    from traceread.passes.replay import whatif as W
    from traceread.verdict.whatif import withdrawn
    from test_whatif import saves

    ctx = {"uses_cuda_graphs": True, "graphs_not_replayed": False}
    g = _recording(launch_inside=True)
    rec = W.graph_recordings(g)
    assert (rec["launches"], rec["first_runs"], rec["replays"]) == (1, 1, 0)
    r = saves(g, ["replay_graphs"], W.Facts(ctx=ctx))
    assert r["refused"]["replay_graphs"].startswith("the graphs are only recorded")
    assert not withdrawn(r)
    # a launch after the recording call returned is a replay; no recording after it
    r = saves(_recording(launch_inside=False), ["replay_graphs"], W.Facts(ctx=ctx))
    assert withdrawn(r)
    # recording again after a replay: not "replayed already"
    g = _recording(launch_inside=False, record_after=True)
    assert W.graph_recordings(g)["capture_after_ns"] == 40_000
    r = saves(g, ["replay_graphs"], W.Facts(ctx=ctx))
    assert not withdrawn(r)


def test_xdit_flux_capture_offers_the_capture_levers(corpus_dir):
    a = analysed(corpus_dir / "AMD-AGI__TraceLens" / "tests" / "traces" / "inference"
                 / "xdit_flux_aiter" / "capture_traces" / "capture_rank_0.json.gz")
    v = a.verdict
    assert v["bound"] == "graph_capture"
    ids = [x["id"] for x in v["actions"]]
    assert "capture_in_warmup" in ids and "fixed_shapes_capture" in ids
    assert ids[0] == "capture_in_warmup"


# -- G: the change AFTER shows and why BEFORE's replay could not make it ------------------

def test_a_change_the_replay_could_not_make_reads_as_one_sentence():
    """HTA trace_diff: AFTER replays 2 graphs a step (37% of its GPU busy time), BEFORE
    none; the cuda_graphs model refused on BEFORE's step (a blocking copy between its
    launches). Not "the change: cuda_graphs" then "cuda_graphs not applied"."""
    from traceread.diffs.proof import changed
    from traceread.render.diff_text import proof_sentences

    sig = {"loads_on_thread": False, "workers": False, "empty_cache_per_step": 0,
           "driver_allocs_per_step": 0, "graphs_not_replayed": False, "recompiles": 0,
           "graphs_replayed": False, "compiled": False, "fused_optimizer": False,
           "pageable_ns": 0, "exposed_copy_ns": 0, "lowp": False, "tf32": False,
           "layout_kernels_per_step": 0, "host_untraced_ns": 0, "syncs_per_step": 0,
           "own_syncs_per_step": {}, "step_ns": 0}
    after = dict(sig, graphs_replayed=True, graph_launches_per_step=2.0,
                 graph_replay_share_pct=37.19)
    (m, evidence, _), = changed(sig, after)
    assert m == "cuda_graphs"
    assert evidence == ("CUDA graphs replayed in AFTER: 2 graph launches a step, 37% of its "
                        "GPU busy time; none in BEFORE")
    why = "the step syncs between its launches (seen: cudaMemcpyAsync)"
    p = {"levers": ["cuda_graphs"], "evidence": [evidence], "promised_ns": None,
         "realised_ns": None, "refused": {"cuda_graphs": why}}
    text = [t for _, t in proof_sentences(p)]
    assert text[1] == f"promised: not priced -- BEFORE's replay could not make the change: {why}"
    assert not any("not applied" in t for t in text)


# -- host_off_path's dispatch_kept, worded for the lever --------------------------------

def test_host_off_path_says_its_dispatch_was_kept_where_no_step_ran_warm():
    from traceread.passes.replay import whatif as W
    from traceread.verdict.whatif import kept_note

    a = analyze(load(FIX / "gpu" / "host.bad.json.gz"))
    g, _ = W.graph_of(a)
    r = W.replay_models(g, W.facts_from_analysis(a), ["host_off_path"])
    ctx = {"replay_levers": {"models": {"host_off_path": r}}}
    note = kept_note(ctx, "off_step_path")
    kept = r["params"]["host_off_path"]["dispatch_kept"]
    assert note.startswith("not priced: the launching threads' dispatch, ")
    assert note.endswith(kept["why"]) and "every step holds the moved work" in note
    warm = {**r, "params": {"host_off_path": {"dispatch_kept": {**kept, "warm_seen": True}}}}
    assert kept_note({"replay_levers": {"models": {"host_off_path": warm}}},
                     "off_step_path") is None


# -- pin_batch prices the input batch's copies, not a pageable copy made in the model ------

def test_pin_batch_leaves_a_copy_made_inside_the_forward(corpus_dir):
    """owlv2 (TraceLens h100): each forward makes a 4 us pageable host->device copy 45 ms in,
    and its stream sync waits 68-72 ms for the queued forward. DataLoader(pin_memory=True)
    does not touch that copy: pin_batch was priced at 376 ms a step by removing its syncs
    (was 16.9 ms before the syncs went with the copies); the generic pin lever keeps it."""
    a = analysed(corpus_dir / "AMD-AGI__TraceLens" / "tests" / "traces" / "h100"
                 / "google_owlv2-large-patch14-ensemble__1016001.json.gz")
    saves = {x["id"]: int(x.get("saves_ns") or 0) for x in a.to_dict()["verdict"]["actions"]}
    assert saves.get("pin_copy", 0) > 300_000_000
    assert saves.get("pin_batch", 0) < 50_000_000
