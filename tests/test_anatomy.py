"""The step's anatomy (passes/anatomy.py) and its levers (verdict/anatomy.py), checked on
real CPU recordings (tests/fixtures/anatomy, scripts/record_anatomy.py) against each loop's
own truth (truth.json: the planted counts, unprofiled step times)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

import traceread
from traceread.passes.anatomy import step_anatomy
from traceread.passes.flops import causal_fraction, flops_of, mfu_summary
from traceread.verdict.anatomy import ANATOMY_LEVERS, anatomy_saving
from traceread.verdict.levers import BY_ID, LEVERS

from conftest import analysed

HERE = Path(__file__).parent / "fixtures" / "anatomy"
TRUTH = json.loads((HERE / "truth.json").read_text())
NAMES = ("valid", "valid_nostack", "valid_never", "accum", "accum_one", "ckpt", "save", "log", "decode",
         "infer1", "infer64")


@lru_cache(maxsize=None)
def analysis(name: str):
    return analysed(HERE / f"{name}.json.gz")


def anatomy(name: str) -> dict:
    return analysis(name).context["anatomy"]


def offered(name: str) -> set[str]:
    return {a["id"] for a in analysis(name).verdict["actions"]}


def ctx(name: str) -> dict:
    a = analysis(name)
    return {**a.facts.program, **a.facts.figures}


def test_phases_add_up_to_the_step_and_name_backward_and_optimizer():
    for name in ("valid", "accum", "ckpt", "save"):
        an = anatomy(name)
        for row in an["per_step"]:
            assert sum(row["host_ns"].values()) == row["dur_ns"]
        ph = an["phases"]
        assert ph["forward"]["host_ns"] > 0 and ph["backward"]["host_ns"] > 0
        assert ph["optimizer"]["host_ns"] > 0
        assert ph["data"]["host_ns"] == 0          # no DataLoader in these loops
        assert ph["forward"]["gpu_ns"] is None     # CPU only: no GPU time to split
        assert an["training"] is True
    for name in ("infer1", "infer64"):
        an = anatomy(name)
        assert an["training"] is False
        assert an["phases"]["backward"]["host_ns"] == 0
        assert an["phases"]["optimizer"]["host_ns"] == 0


def test_micro_batches_per_optimizer_step():
    t = TRUTH["accum"]
    mb = anatomy("accum")["micro_batches"]
    assert mb["per_optimizer_step"] == t["micro_batches"]
    assert mb["syncs_per_micro_batch"] == t["item_calls_per_step"] / t["micro_batches"]
    for name in ("valid", "ckpt", "save"):          # one forward/backward per optimizer step
        assert anatomy(name)["micro_batches"]["per_optimizer_step"] == 1


def test_fewer_micro_batches_offered_and_priced_against_the_one_batch_loop():
    assert "fewer_micro_batches_cpu" in offered("accum")
    for name in ("valid", "ckpt", "save", "infer1"):
        assert "fewer_micro_batches_cpu" not in offered(name)
    t = TRUTH["accum"]
    c = ctx("accum")
    per_step = anatomy_saving(BY_ID["fewer_micro_batches_cpu"], c) / c["steps"]
    # the truth: unprofiled, one batch of 4x the size against 4 micro-batches
    share = per_step / anatomy("accum")["step_ns"]
    true_share = 1 - t["one_batch_step_ns"] / t["step_ns"]
    assert 0.1 < share < 1.0
    assert true_share / 3 < share < true_share * 1.5


def test_recomputation_names_the_checkpointed_modules():
    t = TRUTH["ckpt"]
    rc = anatomy("ckpt")["recompute"]
    assert rc["layers"] == t["checkpointed_layers"]
    # nn.Module frames name a module ClassName_<instance>: blocks.i is Block_i
    assert rc["modules"] == [f"Block_{m.split('.')[1]}" for m in t["checkpointed_modules"]]
    assert 0 < rc["host_ns_per_step"] <= rc["checkpoint_ns_per_step"]
    for name in ("valid", "accum", "save", "infer1"):
        assert anatomy(name)["recompute"] is None


def test_checkpoint_fewer_priced_against_the_loop_without_checkpointing():
    t = TRUTH["ckpt"]
    assert "checkpoint_fewer_cpu" in offered("ckpt")
    for name in ("valid", "accum", "save", "infer1"):
        assert "checkpoint_fewer_cpu" not in offered(name)
    c = ctx("ckpt")
    share = anatomy_saving(BY_ID["checkpoint_fewer_cpu"], c) / c["steps"] / \
        anatomy("ckpt")["step_ns"]
    true_share = 1 - t["no_checkpoint_step_ns"] / t["step_ns"]
    assert true_share / 3 < share < true_share * 2


def test_hfu_counts_the_recomputed_forward_and_mfu_does_not():
    t = TRUTH["ckpt"]
    m = mfu_summary(traceread.load(str(HERE / "ckpt.json.gz")), peak_tflops=1.0)
    # one Block's forward FLOPs (x of 8 x 64 x 128; causal attention over 64 keys)
    rows, d = 8 * 64, 128
    linear = 2 * rows * d * (3 * d + d + 4 * d) + 2 * rows * 4 * d * d
    attn = int(2 * 2 * 8 * 4 * 64 * 64 * 32 * causal_fraction(64, 64))
    steps = anatomy("ckpt")["steps_seen"]
    assert m["recomputed_flops"] == (linear + attn) * t["checkpointed_layers"] * steps
    assert m["hfu"] > m["mfu"]


def test_causal_sdpa_flops_from_is_causal():
    dims = json.dumps([[2, 4, 128, 64]] * 3 + [[]] * 4)
    full = flops_of("aten::_scaled_dot_product_flash_attention", dims,
                    json.dumps(["", "", "", "0.", "False", "False", ""]))
    causal = flops_of("aten::_scaled_dot_product_flash_attention", dims,
                      json.dumps(["", "", "", "0.", "True", "False", ""]))
    assert full == 4 * 2 * 4 * 128 * 128 * 64
    assert causal == int(full * (128 * 129 / 2) / (128 * 128))
    assert causal_fraction(4, 8) == (1 + 2 + 3 + 4) / 32     # fewer queries than keys
    assert causal_fraction(8, 4) == (1 + 2 + 3 + 4 + 4 * 4) / 32


def test_validation_step_is_the_odd_step_out_with_its_period():
    t = TRUTH["valid"]
    odd = anatomy("valid")["odd_steps"]
    assert len(odd) == 1
    g = odd[0]
    assert g["period"] == t["every"]
    # ProfilerStep#N is loop iteration N (prof.step() once per iteration from the start)
    assert g["steps"] == t["validation_loop_steps"]
    holds = {h["what"]: h for h in g["holds"]}
    assert holds["forward_only_passes"]["count"] == t["val_batches"]
    assert holds["forward_only_passes"]["no_grad"] is True
    assert holds["host_syncs"]["count"] == t["item_calls_per_validation"]
    assert "save" not in holds


def test_validate_less_priced_against_the_loop_without_validation():
    t = TRUTH["valid"]
    assert "validate_less_cpu" in offered("valid")
    for name in ("accum", "ckpt", "save", "infer1"):
        assert "validate_less_cpu" not in offered(name)
    c = ctx("valid")
    an = anatomy("valid")
    share = anatomy_saving(BY_ID["validate_less_cpu"], c) / c["steps"] / an["mean_step_ns"]
    true_share = 1 - t["no_validation_step_ns"] / t["mean_step_ns"]
    assert true_share / 2 < share < min(1.0, true_share * 1.5)


def test_periodic_save_is_the_odd_step_out():
    t = TRUTH["save"]
    odd = anatomy("save")["odd_steps"]
    assert len(odd) == 1
    g = odd[0]
    assert g["period"] == t["every"]
    assert g["steps"] == t["save_loop_steps"]
    assert [h["what"] for h in g["holds"]] == ["save"]
    assert 0 < g["holds"][0]["host_ns"] <= g["excess_ns"] * 1.2
    # the save's advice once: the replayed checkpoint lever (a group with save_async_cpu)
    assert "checkpoint_off_path" in offered("save") and "save_async_cpu" not in offered("save")
    for name in ("valid", "accum", "ckpt", "infer1"):
        assert "save_async_cpu" not in offered(name)
    c = ctx("save")
    share = anatomy_saving(BY_ID["save_async_cpu"], c) / c["steps"] / anatomy("save")["mean_step_ns"]
    true_share = 1 - t["no_save_step_ns"] / t["mean_step_ns"]
    assert true_share / 2 < share < min(1.0, true_share * 1.5)


def test_no_odd_step_in_even_loops():
    for name in ("accum", "ckpt", "infer1", "infer64"):
        assert anatomy(name)["odd_steps"] == []


def test_inference_batch_from_shapes_and_the_batch_lever():
    for name in ("infer1", "infer64"):
        inf = anatomy(name)["inference"]
        assert inf["batch"] == TRUTH[name]["batch"]
    assert "batch_requests_cpu" in offered("infer1")
    assert "batch_requests_cpu" not in offered("infer64")   # already batched
    for name in ("valid", "accum", "ckpt", "save"):         # training: not inference requests
        assert "batch_requests_cpu" not in offered(name)
        assert anatomy(name)["inference"] is None
    # the estimate is a lower one: batch 64 really gives back more per request than it says
    c = ctx("infer1")
    per_request = anatomy_saving(BY_ID["batch_requests_cpu"], c) / c["steps"]
    r1, r64 = TRUTH["infer1"]["request_ns"], TRUTH["infer64"]["request_ns"]
    true_saving = r1 - r64 / 64
    assert 0 < per_request / anatomy("infer1")["inference"]["request_ns"] < true_saving / r1


def test_anatomy_levers_are_in_the_table_once():
    ids = [lv.id for lv in LEVERS]
    for lv in ANATOMY_LEVERS:
        assert ids.count(lv.id) == 1


def test_evidence_is_located():
    ev = analysis("valid").facts.evidence
    assert ev["anatomy.odd_steps"][0]["step"] == TRUTH["valid"]["validation_loop_steps"][0]
    names = {e["name"] for e in ev["anatomy.odd_steps"]}
    assert "aten::item" in names
    rc = analysis("ckpt").facts.evidence["anatomy.recompute"]
    assert all(e["name"].startswith("nn.Module: Block_") and e["ts_ns"] for e in rc)


def test_no_steps_no_anatomy():
    t = traceread.load(str(HERE / "infer1.json.gz"))
    ev = t.events
    keep = ~ev["name"].astype(str).str.startswith("ProfilerStep#")
    assert step_anatomy(ev[keep].reset_index(drop=True)) is None


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_small(name):
    assert (HERE / f"{name}.json.gz").stat().st_size < 300_000


def test_steps_text_shows_phases_and_the_odd_step():
    from traceread.render.report import render_steps

    out = render_steps(analysis("valid"))
    # no data phase on either side: not printed
    assert "Phases, ordinary step: forward " in out and "data 0 ns" not in out
    assert "odd steps #3, #7 (every 4)" in out
    assert "6 forward only passes" in out
    assert "4 micro-batches per optimizer step" in render_steps(analysis("accum"))


def test_no_phases_line_when_nothing_was_recognised():
    """The bundled H200 example records no modules, backward or optimizer: every phase but
    'other' is zero, and a line of zeros says nothing."""
    import traceread
    from traceread.examples import path as example_path
    from traceread.render.report import render_steps

    out = render_steps(traceread.analyze(example_path("h200_pageable_copy.json.gz")))
    assert "Phases" not in out and "Steps: 3" in out


def test_gpu_recording_phases_and_micro_batches():
    """A real H100 recording (tests/fixtures/gpu, scripts/record_gpu.py ``data``): 4 forward/
    backward passes per optimizer step, a DataLoader with no workers in each step."""
    p = Path(__file__).parent / "fixtures" / "gpu"
    truth = json.loads((p / "data.bad.kineto.truth.json").read_text())
    an = step_anatomy(traceread.load(str(p / "data.bad.json.gz")).events)
    assert an["micro_batches"]["per_optimizer_step"] == 4
    assert an["gpu_traced"] and an["phases"]["backward"]["gpu_ns"] > 0
    assert an["phases"]["data"]["gpu_ns"] == 0
    waits = [truth["planted"][str(i)]["dataloader_wait_ns"] for i in truth["profiled_steps"]]
    got = [r["host_ns"]["data"] for r in an["per_step"]]
    assert all(0.8 < g / w < 1.25 for g, w in zip(got, waits))


def test_diff_names_the_anatomy_change_not_drop_syncs():
    """The validation pass held the .item() syncs: the pair's change is validating less,
    promised by the before-program's own model, not a drop_syncs."""
    d = traceread.diff(str(HERE / "valid.json.gz"), str(HERE / "valid_never.json.gz"))
    p = d.proof
    assert p["levers"] == ["validate_less"]
    assert "drop_syncs" not in p["levers"]
    assert p["promised_ns"] > 0 and p["realised_ns"] > 0
    # priced by the phases' own model, which is no bound, and said so (not "not replayable")
    from traceread.render.diff_text import promise_text
    assert p["basis"] == "anatomy" and "step phases (their own model" in promise_text(d)
    d = traceread.diff(str(HERE / "accum.json.gz"), str(HERE / "accum_one.json.gz"))
    assert [x["lever"] for x in d.proof["anatomy"]] == ["fewer_micro_batches"]
    assert "drop_syncs" not in d.proof["levers"]


def test_gpu_levers_offered_where_the_recording_holds_their_facts():
    """The GPU rows on real H100 recordings: fewer micro-batches where 4 passes share an
    optimizer step, and not on the sync/host programs (one pass, or no backward)."""
    p = Path(__file__).parent / "fixtures" / "gpu"

    def ids(name):
        return {a["id"] for a in traceread.analyze(str(p / name)).verdict["actions"]}
    assert "fewer_micro_batches" in ids("data.bad.json.gz")
    for name in ("sync.bad.json.gz", "host.bad.json.gz"):
        got = ids(name)
        assert not got & {lv.id for lv in ANATOMY_LEVERS}


def test_roofline_of_the_top_matmul_kernels_on_h200():
    """A real H200 transformer recording with shapes: each top kernel's bytes are its
    operands and output (bf16), its rate below the HBM's, its FLOPs per byte vs the ridge."""
    from traceread.passes.roofline import mm_bytes

    p = Path(__file__).parent / "fixtures" / "h200" / "xformer.bad.json.gz"
    t = traceread.load(str(p))
    m = mfu_summary(t)
    r = m["roofline"]
    assert r["device"] == "NVIDIA H200" and r["hbm_tbps"] == 4.8
    for k in r["kernels"]:
        assert 0 < k["bw_share"] < 1
        assert k["intensity"] == pytest.approx(k["flops"] / k["bytes"])
        assert k["ridge"] == pytest.approx(989.4 / 4.8)
        assert k["bound"] == ("memory" if k["intensity"] < k["ridge"] else "compute")
    # a batch-1 GEMV reads the whole weight for 2*K*N FLOPs: ~1 FLOP per byte in bf16
    b = mm_bytes("aten::mm", json.dumps([[1, 4096], [4096, 4096]]), "bf16")
    assert b == (4096 + 4096 * 4096 + 4096) * 2
    assert 2 * 4096 * 4096 / b == pytest.approx(1.0, rel=0.01)
    # phases on the GPU: the kernels each phase launched, backward about twice forward
    an = step_anatomy(t.events)
    ph = an["phases"]
    assert 1.5 < ph["backward"]["gpu_ns"] / ph["forward"]["gpu_ns"] < 2.5


def test_logging_step_with_a_metric_all_gather():
    t = TRUTH["log"]
    odd = anatomy("log")["odd_steps"]
    assert len(odd) == 1
    g = odd[0]
    assert g["period"] == t["every"] and g["steps"] == t["log_loop_steps"]
    holds = {h["what"]: h for h in g["holds"]}
    assert holds["metric_all_gather"]["count"] == t["all_gathers_per_log"]
    assert holds["host_syncs"]["count"] == t["item_calls_per_log"]
    assert holds["logging"]["count"] == 1
    assert g["cost_ns"] == g["held_ns"] == sum(h["host_ns"] for h in g["holds"])
    assert "log_less_cpu" in offered("log")
    for name in ("valid", "accum", "ckpt", "save", "infer1"):
        assert "log_less_cpu" not in offered(name)
    # the validation and the save are no logging steps
    assert "validate_less_cpu" not in offered("log") and "save_async_cpu" not in offered("log")


def test_html_report_has_the_phase_bars():
    from traceread.render.anatomy_html import anatomy_section

    html = anatomy_section(analysis("valid").to_dict())
    assert "<h2>Step anatomy</h2>" in html
    assert html.count("#3 *") == 1 and html.count("#7 *") == 1   # the odd steps marked
    assert "odd steps #3, #7 (every 4)" in html


def test_one_odd_step_in_an_nsys_export(tmp_path):
    """nsys marks steps with NVTX step_N and traces no framework op: training is unknown,
    and the one slow step (the first: start-up) is odd on its own, with no period and
    nothing of its own to remove."""
    import lzma
    import shutil

    src = Path(__file__).parent / "fixtures" / "gpu" / "data.bad.sqlite.xz"
    out = tmp_path / "data.bad.sqlite"
    with lzma.open(src) as f, open(out, "wb") as g:
        shutil.copyfileobj(f, g)
    an = step_anatomy(traceread.load(str(out)).events)
    assert an["training"] is None and an["inference"] is None
    assert len(an["odd_steps"]) == 1
    g = an["odd_steps"][0]
    assert g["steps"] == [0] and g["period"] is None and g["holds"] == []
    assert g["excess_ns"] >= 2 * g["ordinary_step_ns"]      # SLOW_X x the median


def test_prefill_and_decode_steps_from_shapes():
    t = TRUTH["decode"]
    inf = anatomy("decode")["inference"]
    assert inf["batch"] == t["batch"]
    assert inf["prefill_steps"] == t["profiled_kinds"].count("prefill")
    assert inf["decode_steps"] == t["profiled_kinds"].count("decode")
    assert inf["tokens_per_row"] == 1.0          # most steps decode one token a row
    # one-request inference has no prefill/decode split
    assert anatomy("infer1")["inference"]["prefill_steps"] is None


def test_diff_text_names_the_anatomy_change_beside_the_replayed_one():
    from traceread.render.diff_text import _proof_lines

    d = traceread.diff(str(HERE / "accum.json.gz"), str(HERE / "accum_one.json.gz"))
    text = "\n".join(_proof_lines(d.proof))
    # 4 x 16 -> 1 x 64: the same 64 samples a step (passes/batchsize.micro_batches), so
    # no larger_batch -- the micro-batches gone are the change itself
    assert "the change: fewer_micro_batches (micro-batches per optimizer step 4 -> 1)" in text
    assert "larger_batch" not in text


def test_validation_found_without_module_frames():
    """Recorded without with_stack: the forward operators after the step's last backward
    pass are the evaluation; its passes counted by its first layer's calls -- the syncs are
    the validation's, not a sync lever of their own."""
    t = TRUTH["valid_nostack"]
    an = anatomy("valid_nostack")
    assert an["phase_source"] == "operators"
    g = an["odd_steps"][0]
    assert g["steps"] == t["validation_loop_steps"] and g["period"] == t["every"]
    holds = {h["what"]: h for h in g["holds"]}
    assert holds["forward_only_passes"]["count"] == t["val_batches"]
    assert holds["host_syncs"]["count"] == t["item_calls_per_validation"]
    assert "validate_less_cpu" in offered("valid_nostack")
    c = ctx("valid_nostack")
    share = anatomy_saving(BY_ID["validate_less_cpu"], c) / c["steps"] / an["mean_step_ns"]
    true_share = 1 - t["no_validation_step_ns"] / t["mean_step_ns"]
    assert true_share / 2 < share < min(1.0, true_share * 2)


def test_the_batch_is_not_read_from_an_embedding_table():
    """xDiT Flux (TraceLens corpus): the first op with shapes is CLIP's aten::embedding, whose
    first input is its [49408, 768] vocabulary -- it read as 'inference batch 49408'."""
    import numpy as np

    from traceread.passes import anatomy as A

    h = {"dims": np.array([[[49408, 768], [1, 77]], [[1, 77, 768], [3072, 768]]], dtype=object),
         "has_dims": np.array([True, True]), "batch_op": np.array([False, True])}
    assert A._batch(h) == [1, 77]
    h["batch_op"] = np.array([True, True])   # the table taken as the batch: the old reading
    assert A._batch(h) == [49408, 49408]


def test_sync_names_are_the_attributions():
    """anatomy's SYNC_RX is the attribution's sync ops and explicit sync calls (one list)."""
    from traceread.passes.anatomy import SYNC_RX
    from traceread.passes.attribution import SYNC_API_RX, SYNC_OPS

    assert all(SYNC_RX.search(o) for o in SYNC_OPS)
    for call in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cuCtxSynchronize",
                 "cudaEventSynchronize", "hipCtxSynchronize", "cuStreamSynchronize_v2"):
        assert SYNC_RX.search(call) and SYNC_API_RX.match(call)
    assert not SYNC_RX.search("cudaMemcpyAsync") and SYNC_API_RX.match("cudaMemcpy")


def test_the_replayed_save_moves_the_save_and_only_the_save():
    # the real CPU capture's analysed steps hold one torch.save (its frame 24.2 ms; truth: a
    # save step 24.0 ms vs 3.0 ms unprofiled). The model once matched only frames whose names
    # said "save" -- the recording script's whole loop function among them -- and a stretch
    # the zip writer's write_record labelled: the whole 40.5 ms step went
    a = analysis("save")
    ck = next(x for x in a.verdict["actions"] if x["id"] == "checkpoint_off_path")
    assert ck["basis"] == "replay"
    ev = a.trace.events
    w = a.window
    save = ev[(ev["name"].astype(str) == "torch/serialization.py(944): save")
              & (ev["ts"] >= w.start) & (ev["ts"] < w.end)]
    assert len(save) == 1
    per = int(save["dur"].sum()) / len(a.steps)
    assert abs(ck["saves_per_step_ns"] - per) <= 0.05 * per


def test_a_cpu_backward_is_the_programs_work_not_host_work_to_move():
    # the real CPU logging capture: its backward runs inside one Python frame (run_backward)
    # and its metrics go through gloo's host-side all_gather. The host-work lever promised
    # 8.4 ms of a 16.2 ms step (the backward, and -- the collective taken for GPU work --
    # the untraced time between ops); a larger batch grew the forward only
    import traceread.passes.replay.whatif as W

    a = analysis("log")
    acts = {x["id"]: x for x in a.verdict["actions"]}
    step = a.facts.figures["program_step_mean_ns"]
    assert acts.get("off_step_path", {}).get("saves_per_step_ns", 0) < 0.05 * step
    lb = acts["larger_batch"]
    assert lb["saves_per_step_ns"] < 0.4 * step   # the backward grows with the batch too
    g = W.graph_of(a)[0]
    assert not W._has_gpu(g) and (g.nodes["kind"] == "collective").any()


def test_a_cpu_traces_anatomy_levers_are_priced_by_their_bound_and_ranked_with_the_rest():
    # a CPU step is host time: the anatomy's host time is what the change gives back. Unpriced,
    # these ranked after every replayed lever (pairs/valid: validating every step, 3.3 ms a
    # step, ranked #4 behind a 1.3 ms larger batch)
    for name, lever in (("valid", "validate_less_cpu"), ("accum", "fewer_micro_batches_cpu"),
                        ("ckpt", "checkpoint_fewer_cpu")):
        acts = analysis(name).verdict["actions"]
        first = acts[0]
        # priced by the phases' own model, which is no upper bound (levers.basis_of)
        assert first["id"] == lever and first["basis"] == "anatomy"
        assert first["saves_per_step_ns"] > max(a["saves_per_step_ns"] or 0 for a in acts[1:])
        c = ctx(name)
        assert abs(first["saves_ns"] - anatomy_saving(BY_ID[lever], c)) <= 1


def test_batching_requests_does_not_share_the_inputs_loading():
    # TraceLens h100 owlv2 (batch 1, one request a step): 1211 ms a request, 567 ms of it GPU
    # work and 619 ms the DataLoader preprocessing each image (num_workers=0). The lever
    # priced the loading as per-forward overhead batching shares (564 ms, beside
    # num_workers' own 620 ms); each sample's loading grows with the batch: ~22 ms
    from traceread.verdict.anatomy import batch_saving

    inf = {"batch": 1, "request_ns": 1_211_182_252, "gpu_ns": 566_759_477,
           "data_host_ns": 619_197_328, "flop_host_ns": 55_333_523}
    c = {"steps": 1, "anatomy": {"training": False, "inference": inf}}
    fixed = 1_211_182_252 - 566_759_477 - 619_197_328
    assert batch_saving(c) == int(fixed * (1 - 1 / 8))
    # no data phase (a server's requests, the anatomy fixtures): the request less its compute
    c["anatomy"]["inference"] = {**inf, "data_host_ns": 0}
    assert batch_saving(c) == int((1_211_182_252 - 566_759_477) * (1 - 1 / 8))


def test_odd_steps_without_a_period_are_not_called_once():
    # param's resnet_kineto: steps 13, 17, 21, 25, 26 and 29 wait on the DataLoader (no common
    # difference): the line read "odd steps #13, #17, #21, #25 (once)"
    from types import SimpleNamespace

    from traceread.render.anatomy_text import anatomy_lines

    ph = {p: {"host_ns": 0, "gpu_ns": None} for p in ("data", "forward", "backward",
                                                      "optimizer", "other")}
    odd = {"steps": [13, 17, 21, 25, 26, 29], "period": None, "excess_ns": 558_000_000,
           "holds": []}
    a = SimpleNamespace(context={"anatomy": {"phases": ph, "odd_steps": [odd]}})
    text = "\n".join(anatomy_lines(a))
    assert "(once)" not in text and "6 steps, no common period" in text
    assert "#13, #17, #21, #25, ... (6 steps" in text   # four shown, more there
    odd.update(steps=[5])
    assert "#5 (once)" in "\n".join(anatomy_lines(a))


@pytest.mark.corpus
def test_a_request_lasts_until_its_gpu_work_ends():
    """TraceLens vLLM piecewise prefill: the step's host span is 26.4 ms, the GPU work it
    launched (156 ms, with 149 ms queued inside the graph replays) ends 305 ms after the step
    began -- 'inference batch 46, 26.4 ms a request' read the host's span as the request's
    time, less than the request's own GPU work. A host-bound request keeps its host span."""
    from conftest import corpus_or_skip

    c = corpus_or_skip() / "AMD-AGI__TraceLens/tests/traces"
    a = analysed(c / "inference/vllm_prefilldecode_piecewise/graph_execution.json.gz")
    inf = a.context["anatomy"]["inference"]
    assert inf["request_ns"] >= inf["gpu_ns"] > 150e6
    assert 300e6 < inf["request_ns"] < 310e6          # the step table's program step: 305 ms
    host = analysed(c / "inference/xdit_sd_3.5/profile_trace_rank_0.json.gz")
    inf = host.context["anatomy"]["inference"]
    assert 1.19e9 < inf["request_ns"] < 1.2e9          # its host span: 1.195 s


def test_the_batch_is_the_largest_activation_not_a_rotary_outer_product():
    """HF Qwen2 (TraceLens mi300): the step's first matmul is the rotary embedding's
    [1, 32, 1] @ [1, 1, 559] -- it read as 'a batch of 1' beside [16, 559, 1024] linears."""
    import numpy as np

    from traceread.passes import anatomy as A

    h = {"dims": np.array([[[1, 32, 1], [1, 1, 559]], [[16, 559, 1024], [1024, 1024], [1024]],
                           [[16, 559, 1024], [4864, 1024]]], dtype=object),
         "has_dims": np.array([True, True, True]), "batch_op": np.array([True, True, True]),
         "act_op": np.array([False, True, True])}
    assert A._batch(h) == [16, 16 * 559]


@pytest.mark.corpus
def test_hf_qwen_serves_a_batch_of_16_and_is_not_told_to_batch_requests():
    """TraceLens mi300 Qwen1.5-0.5B-Chat: aten::embedding's indices [16, 559] and every
    linear's [16, 559, 1024] input: 16 sequences a forward -- 'each forward serves a batch
    of 1 ... gather up to 8 requests per forward' was read off the rotary matmul."""
    from conftest import corpus_or_skip

    a = analysed(corpus_or_skip() / "AMD-AGI__TraceLens/tests/traces/mi300/"
                 "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert a.context["anatomy"]["inference"]["batch"] == 16
    assert "batch_requests" not in {x["id"] for x in a.verdict["actions"]}


def test_batching_requests_does_not_share_the_inputs_preparation_on_the_host():
    # host work in the gaps off the model's path that launches nothing (host_work_kind
    # "movable": a video's preprocessing outside any DataLoader) grows with the batch too
    from traceread.verdict.anatomy import batch_saving

    inf = {"batch": 1, "request_ns": 390 * 10**6, "gpu_ns": 120 * 10**6, "data_host_ns": 0,
           "flop_host_ns": 0}
    hw = {"kind": "off_path", "other_kind": "movable", "host_ns": 270 * 10**6,
          "model_ns": 2 * 10**6}
    c = {"steps": 1, "anatomy": {"training": False, "inference": inf}, "host_work_kind": hw}
    assert batch_saving(c) == int((390 - 120 - 268) * 10**6 * (1 - 1 / 8))
    c["host_work_kind"] = {**hw, "other_kind": "framework"}   # a serving loop's own: shared
    assert batch_saving(c) == int((390 - 120) * 10**6 * (1 - 1 / 8))


@pytest.mark.corpus
@pytest.mark.parametrize("gpu", ("mi300", "h100"))
def test_timesformer_is_not_told_batching_shares_its_video_preprocessing(gpu):
    """TraceLens timesformer: one video a request (linears [1, 1569, 768]), 268 ms of
    transformers' _preprocess_image on the host, no DataLoader: batching 8 videos does not
    share that -- 'saves ~237 ms per step's worth of samples' (mi300) once the batch read 1."""
    from conftest import corpus_or_skip

    a = analysed(corpus_or_skip() / f"AMD-AGI__TraceLens/tests/traces/{gpu}/"
                 "facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    assert a.context["anatomy"]["inference"]["batch"] == 1
    x = next((x for x in a.verdict["actions"] if x["id"] == "batch_requests"), None)
    assert x is None or x["saves_per_step_ns"] < 0.1 * a.facts.figures["program_step_mean_ns"]


def test_a_flattened_token_batch_is_not_read_as_requests():
    """SGLang prefill (TraceLens): aten::embedding looks up [15360] ids and the linears take
    [15360, 4096]: 15 requests' tokens flattened -- it read 'inference batch 15360'."""
    import numpy as np

    from traceread.passes import anatomy as A

    h = {"dims": np.array([[[151936, 4096], [15360], [], [], []],
                           [[15360, 4096], [6144, 4096], []]], dtype=object),
         "has_dims": np.array([True, True]), "batch_op": np.array([False, True]),
         "act_op": np.array([False, True]), "emb_op": np.array([True, False])}
    assert A._batch(h) is None
    h["dims"][0] = [[151936, 4096], [16, 960], [], [], []]   # HF: [batch, seq] ids
    h["dims"][1] = [[16, 960, 4096], [6144, 4096], []]
    assert A._batch(h) == [16, 16 * 960]


@pytest.mark.corpus
def test_sglang_prefill_has_no_request_batch_read_off_its_tokens():
    from conftest import corpus_or_skip

    a = analysed(corpus_or_skip() / "AMD-AGI__TraceLens/tests/traces/inference/"
                 "sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
    assert a.context["anatomy"]["inference"] is None
