"""Every bound and the analysis window on planted traces, through the table, Kineto JSON
and an nsys export: the verdict, the window, the savings and the levers, exactly."""
from __future__ import annotations

import pytest

from traceread.analysis import analyze
from traceread.synth import scenarios as sc
from traceread.synth import scenarios_bounds as sb

from conftest import materialise

PATHS = ("table", "kineto-2.4", "nsys")


@pytest.mark.parametrize("how", PATHS)
def test_host_bound_names_the_python_frame(how, tmp_path):
    trace, truth = sb.host_bound()
    a = analyze(materialise(trace, how, tmp_path, "host"))
    v, d = a.verdict, a.devices.iloc[0]
    assert v["bound"] == "host"
    assert (int(d["window_ns"]), int(d["busy_ns"]), int(d["idle_ns"])) == \
        (truth["window_ns"], truth["busy_ns"], truth["idle_ns"])
    assert v["evidence"]["scores_ns"]["host"] == truth["scores"]["host"]
    assert v["evidence"]["scores_ns"]["launch"] == truth["scores"]["launch"]
    assert truth["culprit"] in v["summary"]
    act = v["actions"][0]
    assert act["cause"] == "host"
    host = truth["scores"]["host"]
    if act["basis"] == "bound":
        assert act["saves_ns"] == host
        assert act["saves_per_step_ns"] == host // truth["steps"]
        assert act["projected_step_ns"] == truth["step_dur"] - host // truth["steps"]
    else:   # replayed (whatif.py): the planted Python and the untraced host time around it
        assert abs(act["saves_ns"] - host) <= 0.01 * host
        assert abs(act["projected_step_ns"] - (truth["step_dur"] - host // truth["steps"])) \
            <= 0.01 * truth["step_dur"]
    assert not any("CUDA graphs: torch.compile(mode" in lv and "capture the step" in lv
                   for lv in v["levers"][:1])


@pytest.mark.parametrize("how", PATHS)
def test_close_call_is_mixed_and_lists_num_workers(how, tmp_path):
    trace, truth = sb.mixed_data_host()
    a = analyze(materialise(trace, how, tmp_path, "mixed"))
    v = a.verdict
    assert v["bound"] == "mixed" and v["evidence"]["runner_up"] == "data"
    # the flat to-do list: each cause's levers in turn, the larger cause's first
    assert list(dict.fromkeys(x["cause"] for x in v["actions"]))[:2] == ["host", "data"]
    assert v["evidence"]["scores_ns"]["data"] == truth["scores"]["data"]
    if how != "nsys":   # the iterator's class name says num_workers=0
        assert any(lv.startswith("DataLoader(num_workers=N)") for lv in v["levers"])


@pytest.mark.parametrize("how", PATHS)
def test_pageable_copies_are_copy_bound_not_gpu_bound(how, tmp_path):
    trace, truth = sb.copy_bound()
    a = analyze(materialise(trace, how, tmp_path, "copy"))
    v = a.verdict
    d = a.devices.iloc[0]
    assert int(d["busy_ns"]) == truth["busy_ns"] and int(d["idle_ns"]) == truth["idle_ns"]
    assert v["bound"] == "copy"
    assert a.copies["exposed_ns"] == truth["exposed_copy_ns"]
    assert a.copies["pageable_ns"] == truth["exposed_copy_ns"]
    assert a.copies["pin_saves_ns"] == truth["pin_saves_ns"]
    assert a.copies["largest"]["gbps"] == truth["gbps"]
    assert "2.00 GiB HtoD pageable" in v["summary"]
    pin = [x for x in v["actions"] if x["lever"].startswith("pin the host")]
    assert pin
    if pin[0]["basis"] == "bound":
        assert pin[0]["saves_ns"] == truth["pin_saves_ns"]
    else:   # replayed: the copies at pinned bandwidth, and non_blocking: the host waits less
        assert truth["pin_saves_ns"] <= pin[0]["saves_ns"] <= 1.05 * truth["pin_saves_ns"]


@pytest.mark.parametrize("how", PATHS)
def test_whole_program_window_excludes_startup_and_warmup(how, tmp_path):
    trace, truth = sb.whole_program()
    t = materialise(trace, how, tmp_path, "whole")
    a = analyze(t)
    w = a.window.to_dict()
    assert a.verdict["bound"] == "gpu"
    assert (w["steps_analysed"], w["first_step"], w["dur_ns"]) == \
        (truth["steps_analysed"], truth["first_step"], truth["window_ns"])
    d = a.devices.iloc[0]
    assert (int(d["busy_ns"]), int(d["idle_ns"])) == (truth["busy_ns"], truth["idle_ns"])
    before, step0 = w["excluded"][0], w["excluded"][1]
    assert before["ns"] == truth["before_ns"] and before["reason"] == "start-up"
    for name in truth["startup_detail"]:
        assert name in before["detail"]
    assert step0["step"] == 0 and step0["ns"] == truth["step0_ns"]
    assert step0["reason"].startswith("warm-up: compiles")
    # every step, warm-up included: the compile dominates
    assert analyze(t, steps="all").verdict["bound"] == truth["all_steps_bound"]
    # an explicit selection and an explicit window
    assert analyze(t, steps="2:3").window.to_dict()["steps_analysed"] == 2
    off = w["offset_ns"]
    ex = analyze(t, window=(off, off + 200_000_000))
    assert ex.window.mode == "explicit" and ex.window.dur == 200_000_000
    assert ex.verdict["bound"] == "gpu"


def test_steps_selection_that_names_no_step_is_an_error():
    trace, _ = sb.whole_program()
    with pytest.raises(ValueError, match="no step numbered"):
        analyze(trace, steps="40:50")


@pytest.mark.parametrize("how", ("table", "kineto-2.4"))
def test_graph_replay_is_never_told_to_use_cuda_graphs(how, tmp_path):
    trace, truth = sb.graph_replay()
    a = analyze(materialise(trace, how, tmp_path, "graphs"))
    assert a.context["uses_cuda_graphs"] is True
    assert a.verdict["bound"] == "launch"
    assert a.verdict["levers"][0].startswith("the step already replays CUDA graphs")
    assert not any(lv.startswith("capture the step with CUDA graphs") for lv in a.verdict["levers"])


@pytest.mark.parametrize("how", PATHS)
def test_graph_recording_is_not_a_compile(how, tmp_path):
    trace, truth = sb.graph_recording()
    a = analyze(materialise(trace, how, tmp_path, "record"))
    assert a.verdict["bound"] == "graph_capture"
    assert a.compile.get("compiles", 0) == 0
    assert a.attribution["by_cpu"]["graph_capture"] == truth["record_ns"]
    assert a.attribution["by_cpu"]["compile"] == 0


@pytest.mark.parametrize("how", ("table", "nsys"))
def test_unnumbered_nvtx_step_ranges_are_steps(how, tmp_path):
    # `with nvtx.range("train_step"):` every iteration, no index: still steps, in time order
    b = sc.TraceBuilder()
    for k in range(4):
        s = k * 10 * sc.MS
        b.cpu("train_step", s, 10 * sc.MS, kind="annotation")
        b.launch(s + 10 * sc.US, 10 * sc.US, s + 50 * sc.US, 9 * sc.MS)
    a = analyze(materialise(b.build(), how, tmp_path, "nvtx"))
    assert a.step_source == "pattern" and list(a.steps["step"]) == [0, 1, 2, 3]
    # a lone unnumbered range is not a step loop
    one = sc.TraceBuilder()
    one.cpu("train_step", 0, 10 * sc.MS, kind="annotation")
    one.launch(10 * sc.US, 10 * sc.US, 50 * sc.US, 9 * sc.MS)
    assert analyze(one.build()).step_source == "whole_trace"


def test_gpu_bound_levers_come_from_what_the_busy_time_runs():
    # the planted GPU-bound steps run FP32 SIMT GEMMs (ampere_sgemm): TF32 is the lever,
    # with the share it rests on; no generic advice the kernels do not call for
    trace, _ = sc.gpu_bound()
    v = analyze(trace).verdict
    assert v["bound"] == "gpu"
    assert v["levers"][0].startswith("enable TF32") and "FP32 SIMT" in v["levers"][0]
    assert v["actions"][0]["cause"] == "gpu" and v["actions"][0]["saves_ns"] > 0


def test_warmup_is_not_dropped_for_a_cut_short_last_step():
    # HTA's mi250 trace shape: a 9 ms step with all the GPU work, then a 49 us last step.
    # Dropping the first as an "outlier" left a window with no GPU op: a false CPU_ONLY.
    b = sc.TraceBuilder()
    b.step(1, 0, 9 * sc.MS)
    for i in range(10):
        b.launch(i * 800 * sc.US, 20 * sc.US, i * 800 * sc.US + 50 * sc.US, 5 * sc.US)
    b.step(2, 9 * sc.MS, 49 * sc.US)
    a = analyze(b.build())
    # the step with the work stays; the cut-short last one is left out (window._drop_cut_last)
    assert a.window.steps["step"].tolist() == [1] and a.verdict["bound"] != "cpu_only"
    assert any(x["what"] == "step #2" and x["reason"].startswith("cut short")
               for x in a.window.excluded)


def test_the_largest_copy_is_said_as_one_of_many(tmp_path):
    """One step's copy is 4 GiB, the other three steps' 2 GiB: the culprit named the 4 GiB
    copy "×1" as if it were the copy time (nsys-ai's h100_2gpu: one 3.91 GiB copy for 921 ms
    of 227 copies); it says it is the largest of 4, and their bytes."""
    from traceread.synth.kineto import write_kineto

    trace, _ = sb.copy_bound()
    ev = trace.events.copy(deep=True)
    first = (ev["kind"] == "memcpy").to_numpy().nonzero()[0][0]
    ev.loc[first, "bytes"] = 4 << 30
    a = analyze(str(write_kineto(ev, tmp_path / "copies.json", meta=trace.meta)))
    text = a.verdict["summary"]
    assert "4.00 GiB HtoD pageable copy ×1" in text
    assert "the largest of 4 copies, 10.00 GiB in all" in " ".join(text.split())
