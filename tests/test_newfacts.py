"""The program facts of passes/newfacts.py, each with its evidence: planted in synthetic
programs (tests/factscenes.py) and read from real traces -- the CPU recordings of
scripts/record_facts.py (tests/fixtures/facts, truth.json beside them) and the H100/H200
captures of scripts/record_gpu.py (tests/fixtures/gpu, h200)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import factscenes as F
from traceread import load
from traceread.analysis import analyze
from traceread.passes.blocking import blocking_calls
from traceread.passes.busy import is_tf32_kernel
from traceread.passes.payload import copy_payloads
from traceread.passes.precision import gemm_kernel_precision, precision_facts
from traceread.passes.stalls import periodic_stalls
from traceread.passes.userframe import is_user_frame, readable
from traceread.passes.context import trace_context

FIX = Path(__file__).parent / "fixtures"
TRUTH = json.loads((FIX / "facts" / "truth.json").read_text())


def _real(name: str):
    return load(FIX / name)


# ------------------------------------------------------------------ blocking calls

def test_nonzero_per_expert_counts_as_blocking_and_rules_out_graphs():
    t = F.moe_nonzero(steps=3, experts=4)
    b = blocking_calls(t.events)
    assert b["blocking_per_step"] == 4.0 and b["mid_step_per_step"] == 4.0
    assert b["by_kind"]["nonzero"]["explicit"] is False
    assert b["dynamic_shapes"] == {"nonzero": 4.0}
    assert b["capturable"] is False
    why = b["not_capturable_because"][0]
    assert why["name"] == "aten::nonzero" and why["step"] == 0 and "cudaStreamSynchronize" \
        in why["detail"]
    assert trace_context(t.events)["syncs_per_step"] == 4.0   # was 0: no _local_scalar_dense


def test_a_sync_after_the_last_launch_leaves_the_step_capturable():
    b = blocking_calls(F.tail_item().events)
    assert b["by_kind"]["item"]["per_step"] == 1.0 and b["mid_step_per_step"] == 0.0
    assert b["capturable"] is True and b["not_capturable_because"] == []


def test_fresh_host_data_mid_step_is_not_capturable():
    t = F.offload()   # parameters copied host->device after the step's kernels
    b = blocking_calls(t.events)
    assert b["capturable"] is False
    assert any("host_copy" in e["detail"] for e in b["not_capturable_because"])


def test_real_moe_cpu_recording_dynamic_shapes():
    b = blocking_calls(_real("facts/moe.json.gz").events)
    assert b["dynamic_shapes"] == {"nonzero": float(TRUTH["moe"]["nonzero_per_step"])}
    assert b["capturable"] is False
    assert b["blocking_per_step"] == 0       # no GPU in the trace: nothing waited for one


def test_real_h100_syncs_mid_step_and_at_the_tail():
    s = blocking_calls(_real("gpu/sync.bad.json.gz").events)
    assert s["by_kind"]["item"]["per_step"] == 25.0          # truth: 25 .item() a step
    assert s["by_kind"]["item"]["mid_step_per_step"] == 24.0  # the last one ends the step
    assert s["capturable"] is False
    # launch.bad: 600 tiny kernels then out.sum().item(); launch.fixed captures exactly that
    la = blocking_calls(_real("gpu/launch.bad.json.gz").events)
    assert la["capturable"] is True and la["by_kind"]["item"]["mid_step_per_step"] == 0.0


def test_real_h100_pageable_copy_blocks():
    b = blocking_calls(_real("h200/pageable.bad.json.gz").events)
    assert b["by_kind"]["pageable_copy"]["per_step"] == 1.0


# ------------------------------------------------------------------ copy payloads

@pytest.mark.parametrize("kind,payload", [("input", "input_batch"), ("resent", "resent"),
                                          ("fresh", "unknown")])
def test_copy_payload_at_the_step_start(kind, payload):
    p = copy_payloads(F.copies(kind).events)
    assert p["payloads"] == [payload]
    c = p["copies"][0]
    assert c["direction"] == "HtoD" and c["per_step"] == 1.0 and c["bytes_per_step"] == 64 << 20


def test_input_batch_after_a_launch_before_the_fetch():
    # the copy follows the fetch with nothing launched between: the batch, though a kernel
    # of the iteration's tail ran earlier in the step (the old rule wanted none in the step)
    p = copy_payloads(F.copies("input", tail=True).events)
    assert p["payloads"] == ["input_batch"]
    assert copy_payloads(F.copies("fresh", tail=True).events)["payloads"] == ["unknown"]


def test_facts_count_per_step_over_the_optimizer_iterations(corpus_dir):
    # no ProfilerStep: the steps pass finds 29 iterations (Optimizer.step#SGD.step ends);
    # the facts passes counted the whole window as one step (58 syncs "a step", 2.2 GB of
    # copies whose payload "cannot tell") -- each iteration copies the DataLoader's batch
    # (77 MB) and its labels, each a pageable copy that syncs
    ctx = analyze(load(corpus_dir / "facebookresearch__param/et_replay/tests/inputs/"
                                    "resnet_kineto.json.gz")).context
    assert ctx["syncs_per_step"] == 2.0
    assert ctx["payloads"] == ["input_batch"]
    c = ctx["copy_payloads"][0]
    assert (c["per_step"], c["bytes_per_step"]) == (2.0, 77_071_360)


def test_checkpoint_copies_and_metrics():
    p = copy_payloads(F.checkpoint().events)
    assert p["payloads"] == ["checkpoint"]
    assert p["copies"][0]["site"] == "train.py:50 save_checkpoint"   # not spawn_main, not pybind
    m = copy_payloads(F.moe_nonzero().events)
    assert m["payloads"] == ["shape_readback"]


def test_offloaded_optimizer():
    p = copy_payloads(F.offload(params=4).events)
    assert p["payloads"] == ["gradients", "parameters"]
    o = p["optimizer_offload"]
    assert (o["grads_per_step"], o["params_per_step"], o["transport"]) == (4.0, 4.0, "device")
    assert o["optimizer"] == "Optimizer.step#AdamW.step"
    assert [e["detail"].split()[0] for e in p["evidence"]["optimizer_offload"]] == \
        ["4", "the", "4"]


def test_real_offload_cpu_recording():
    truth = TRUTH["offload"]
    o = copy_payloads(_real("facts/offload.json.gz").events)["optimizer_offload"]
    # each gradient is copied twice before the step (out, then into the host copy's .grad)
    assert o["transport"] == "host" and o["grads_per_step"] == 2 * truth["params"]
    assert o["params_per_step"] == truth["copies_per_step"]["params_back"]
    assert copy_payloads(_real("facts/sdpa.json.gz").events)["optimizer_offload"] is None


def test_real_h100_copy_payloads():
    # copy.bad / copy.fixed send the same 64 MiB host tensor every step (scripts/record_gpu.py)
    for name in ("gpu/copy.bad.json.gz", "gpu/copy.fixed.json.gz"):
        p = copy_payloads(_real(name).events)
        resent = [c for c in p["copies"] if c["payload"] == "resent"]
        assert resent and resent[0]["bytes_per_step"] == 64 << 20
    d = copy_payloads(_real("gpu/data.bad.json.gz").events)   # batches from a DataLoader
    assert "input_batch" in d["payloads"] and "resent" not in d["payloads"]
    s = copy_payloads(_real("gpu/sync.bad.json.gz").events)   # .item() reads a loss back
    assert s["payloads"] == ["metrics"]


# ------------------------------------------------------------------ precision

def test_fp16_gemm_is_not_tf32():
    assert gemm_kernel_precision(F.FP16_GEMM) == "fp16" and not is_tf32_kernel(F.FP16_GEMM)
    assert gemm_kernel_precision(F.BF16_GEMM) == "bf16"
    assert gemm_kernel_precision(F.F32_GEMM) == "fp32"
    c = trace_context(F.gemms(F.FP16_GEMM).events)
    assert c["fp16_runs"] and set(c["gemm_precision_ns"]) == {"fp16"}


def test_cudnn_attention_is_not_a_convolution():
    c = trace_context(F.attention_only().events)
    assert c["convolutions"] is False and c["fused_attention"]
    assert c["sdpa"] == {"backend": "cudnn", "explicit_mask": False, "calls_per_step": 4.0}
    v = trace_context(F.convolution().events)
    assert v["convolutions"] is True and v["convolution_ops_per_step"] == 4.0
    assert v["channels_last"] is True      # NHWC conv kernels, no layout conversion


def test_miopen_transposes_around_nhwc_convolutions_are_not_channels_last(corpus_dir):
    # TraceLens mi210 gpu_only_trace: MIOpen's NHWC solvers (igemm_fwd_gtcx2_nhwc_*) run
    # between batched_transpose_* kernels -- the model's tensors are NCHW. It read
    # channels_last True (NHWC in the conv kernels' names, no cuDNN nchwToNhwc)
    ev = load(corpus_dir / "AMD-AGI__TraceLens/tests/traces/mi210/gpu_only_trace/"
              "gpu_only_trace.json.gz").events
    p = precision_facts(ev)
    assert p["convolution_ops"] is True and p["channels_last"] is False
    assert p["evidence"]["channels_last"][0]["name"].startswith("batched_transpose_")


def test_channels_last_evidence_names_the_nhwc_kernel():
    p = precision_facts(F.convolution().events)
    assert p["channels_last"] is True and p["evidence"]["channels_last"][0]["name"] == F.CONV_KERNEL
    p = precision_facts(F.convolution(nchw=True).events)
    assert p["channels_last"] is False and "nchwToNhwc" in p["evidence"]["channels_last"][0]["name"]


def test_step_shapes_from_record_shapes():
    # our H200 xformer.bad (fixed batch): every step runs the same op shapes -- the allocator
    # levers' "keep shapes stable" has nothing to stabilise; anatomy/valid (validation steps
    # of another batch) and anatomy/decode (a growing KV cache) change them
    from traceread.passes.factkit import Steps
    from traceread.passes.preconditions import step_shapes
    from traceread.verdict import levers as L

    ev = _real("h200/xformer.bad.json.gz").events
    fact, proof = step_shapes(ev, Steps(ev))
    assert fact["vary"] is False and fact["steps"] >= 2
    assert "same op input shapes" in proof[0]["detail"]
    w = L.BY_ID["shapes_stable"].refusal({"step_shapes": fact})
    assert w is not None and w.precondition == "shapes_may_vary"
    for name in ("anatomy/valid.json.gz", "anatomy/decode.json.gz"):
        ev = _real(name).events
        fact, proof = step_shapes(ev, Steps(ev))
        assert fact["vary"] is True and "input dims" in proof[0]["detail"], name
        assert L.shapes_may_vary({"step_shapes": fact})


def test_keep_shapes_stable_needs_shapes_seen_varying():
    # our H200 pageable.bad (no record_shapes): no shapes, so nothing shows them changing --
    # "keep shapes stable" was offered there on the allocator calls' time all the same
    from conftest import analysed
    from traceread.verdict import levers as L

    a = analysed(Path(__file__).parent / "fixtures" / "h200" / "pageable.bad.json.gz")
    assert a.facts.program["step_shapes"] is None
    assert "shapes_stable" not in {x["id"] for x in a.verdict["actions"]}
    lever = L.BY_ID["shapes_stable"]
    assert lever.refusal({"pytorch": True, "step_shapes": None}).precondition == \
        "shapes_seen_varying"
    assert lever.refusal({"pytorch": True, "step_shapes": {"vary": True, "steps": 3}}) is None


def test_real_sdpa_cpu_recording():
    p = precision_facts(_real("facts/sdpa.json.gz").events)
    assert p["sdpa"]["backend"] == "flash"
    assert p["sdpa"]["explicit_mask"] is TRUTH["sdpa"]["explicit_mask"]
    assert p["sdpa"]["calls_per_step"] == TRUTH["sdpa"]["sdpa_per_step"]
    assert p["convolution_ops"] is False


def test_real_h200_xformer_cudnn_sdpa_and_autocast():
    c = trace_context(_real("h200/xformer.bad.json.gz").events)
    assert c["sdpa"]["backend"] == "cudnn" and c["convolutions"] is False
    assert c["autocast"] == "bf16"


# ------------------------------------------------------------------ stalls

def test_periodic_checkpoint_stall():
    st = periodic_stalls(F.checkpoint(steps=6, every=3).events)
    assert st["period"] == 3 and st["stalled_steps"] == [2, 5] and st["what"] == "checkpoint"
    assert st["op"] == "train.py:50 save_checkpoint"
    assert st["excess_ns_per_stall"] == 60_000_000


def test_real_ckpt_cpu_recording():
    truth = TRUTH["ckpt"]
    st = periodic_stalls(_real("facts/ckpt.json.gz").events)
    profiled = [i for i in truth["checkpoint_steps"] if i >= truth["profiled_from"]]
    assert st["stalled_steps"] == profiled and st["period"] == truth["every"]
    assert st["what"] == "checkpoint" and "save_checkpoint" in st["op"]
    for name in ("facts/moe.json.gz", "facts/offload.json.gz", "facts/sdpa.json.gz"):
        assert periodic_stalls(_real(name).events) is None   # slow steps, no work of their own


# ------------------------------------------------------------------ frames, edges

def test_user_frames_and_readable_names():
    assert is_user_frame("train.py(50): save_checkpoint")
    assert not is_user_frame("torch/serialization.py(944): save")
    assert not is_user_frame("multiprocessing/spawn.py(122): spawn_main")
    assert readable("<built-in method write_record of pybind11_builtins.pybind11_detail_"
                    "function_record_v1 object at 0x7f8a889fad30>") == \
        "<built-in method write_record>"
    assert readable('{"name": "forward", "op": "aten::addmm", "module": "encoder.fc1"}') == \
        "encoder.fc1.aten::addmm"


def test_host_culprit_names_the_users_frame():
    a = analyze(F.checkpoint(), steps="all")
    host = next(x["culprit"] for x in a.verdict["actions"] if x["cause"] == "host")
    assert "0x7f" not in host and "spawn_main" not in host
    assert "train.py:50 save_checkpoint" in host


def test_window_outside_the_trace_is_an_error():
    from traceread import TraceError

    with pytest.raises(TraceError, match="outside the trace"):
        analyze(F.tail_item(), window=(10**12, 2 * 10**12))


def test_one_lazy_load_does_not_hide_a_launch_bound_steady_state():
    from traceread.synth.scenarios import MS

    plain = analyze(F.launch_steps(), steps="all").verdict
    # the first launch loads its module lazily for longer than all the steady idle time
    lazy = analyze(F.launch_steps(lazy_ns=30 * MS), steps="all")
    assert lazy.steady_state["cold_start_ns"] >= 30 * MS   # the one-time call is seen
    v = lazy.verdict
    assert plain["bound"] == "launch"
    assert v["bound"] == "launch"                     # not "cold start": the rest is idle-bound
    assert v["evidence"]["one_time_ns"] >= 30 * MS    # reported apart
    assert "one-time" in v["summary"]
    assert "cuda_graphs" in [a["id"] for a in v["actions"]]


def test_a_sampled_straggler_stays_unknown_inside_a_job():
    from traceread.jobs import multirank as mr
    from traceread.synth.multirank import JobSpec, make_job

    res = mr.analyze_traces(make_job(JobSpec(ranks=3, slow_rank=2, with_seq=False,
                                             cause="dataloader")))[0]
    sampled = {"bound": "unknown", "summary": "sampled trace", "evidence":
               {"steady_state": "sampled"}, "levers": [], "actions": []}
    plain = {"bound": "unknown", "summary": "host not traced", "evidence": {}, "levers": [],
             "actions": []}
    out = mr.adjust_rank_verdicts({0: dict(plain), 2: dict(sampled)}, res)
    assert out[2]["bound"] == "unknown" and out[2]["actions"] == []
    assert out[2]["job"]["role"] == "straggler" and "sampled" in out[2]["summary"]
    # not sampled: the job names the straggler's cause
    out = mr.adjust_rank_verdicts({2: dict(plain)}, res)
    assert out[2]["bound"] == "data"


def test_a_device_free_between_two_launches_rules_out_capture():
    # cudaFree/hipFree waits for the device and is refused inside a stream capture; a sync
    # call returning the instant the next launch starts still lies between the two launches
    from traceread import analyze
    from traceread.synth.scenarios import US, TraceBuilder

    for api, dur in (("hipFree", 2000 * US), ("hipMemcpyWithStream", 500 * US)):
        b = TraceBuilder()
        b.launch(0, 10 * US, 0, 100 * US)
        b.runtime(api, 100 * US, dur)
        b.launch(100 * US + dur, 10 * US, 110 * US + dur, 100 * US)
        a = analyze(b.build())
        blocking = a.facts.program["blocking"]
        assert blocking["capturable"] is False, api
        assert any(api in e["name"] for e in blocking["not_capturable_because"]), blocking
        assert not any(x["id"].startswith("cuda_graphs") for x in a.verdict["actions"])
