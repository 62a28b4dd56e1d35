"""The step the program waits on (passes/steps.program_columns / program_step): per step the
later of the host's span and the GPU's work for it, used by diff, the projected step, MFU and
the savings' unit (verdict/units.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceread
from traceread.diffs.trace import diff_analyses
from traceread.synth.scenarios import MS, T0, US, TraceBuilder
from traceread.verdict.units import StepSaving, per_step

from conftest import analysed

FIX = Path(__file__).parent / "fixtures"
XFORMER = FIX / "h200" / "xformer.bad.json.gz"


def _host_ahead(kernel_ns: int, steps: int = 6, kernels: int = 20, host_ns: int = 5 * MS):
    """A loop whose host launches ``kernels`` kernels in ``host_ns`` per step and never
    syncs: the GPU runs them back to back, far behind the host (GPU-bound)."""
    b = TraceBuilder(path="ahead.json")
    g = T0 + 100 * US
    for k in range(steps):
        s = T0 + k * host_ns
        b.step(k, s, host_ns)
        for i in range(kernels):
            t = s + i * (host_ns // kernels)
            g = max(g, t + 20 * US)
            b.op_with_kernel("aten::mm", t, 40 * US, 5 * US, 10 * US, g, kernel_ns,
                             name="ampere_sgemm_128x64_nn")
            g += kernel_ns + 2 * US
    return b.build()


def test_real_gpu_bound_steps_are_the_gpus_not_the_hosts():
    """H200 bf16 transformer, no sync in the step (the host runs ahead): each step's program
    step is its GPU time measured by CUDA events in the loop (truth ``gpu_ms``) within 1%;
    the host's span of the first profiled step is 6% short of it."""
    truth = json.loads((FIX / "h200" / "xformer.bad.kineto.truth.json").read_text())
    a = analysed(XFORMER)
    st = a.steps
    assert list(st["bound_by"]) == ["gpu"] * len(st)
    for r in st.to_dict(orient="records"):
        gpu_ns = truth["planted"][str(r["step"])]["gpu_ms"] * 1e6
        assert abs(r["program_ns"] - gpu_ns) <= 0.01 * gpu_ns, r
    first = st.iloc[0]
    want = truth["planted"][str(int(first["step"]))]["gpu_ms"] * 1e6
    assert first["dur"] < 0.95 * want          # the host's span is not the step
    p = a.facts.figures["program_step"]
    assert p["bound_by"] == "gpu" and p["gpu_bound_steps"] == len(st)
    assert p["mean_ns"] > p["host_mean_ns"] and p["host_ahead_ns"] > 0
    assert a.facts.figures["program_step_mean_ns"] == p["mean_ns"]


def test_real_gpu_bound_projection_stops_at_the_gpus_busy_time():
    """No projected step of the GPU-bound trace drops below its GPU busy time per step."""
    a = analysed(XFORMER)
    busy = a.facts.figures["busy_step_mean_ns"]
    step = a.facts.figures["program_step_mean_ns"]
    for x in a.verdict["actions"]:
        if x.get("saves_per_step_ns") is not None:
            assert x["saves_per_step_ns"] <= step
        if x.get("projected_step_ns") is not None and x["cause"] != "gpu":
            assert x["projected_step_ns"] >= busy, x


def test_steps_text_and_json_show_the_program_step():
    from traceread.render.report import render_steps

    a = analysed(XFORMER)
    text = render_steps(a)
    assert "program step" in text and "GPU-bound: the host runs ahead by" in text
    from traceread.render.json import _steps
    doc = _steps(a)
    assert doc["program"]["bound_by"] == "gpu"
    assert all(i["bound_by"] == "gpu" for i in doc["items"])
    # the loop's own CUDA-event GPU time of each step, within 0.05%; step #4's host span
    # (87.18 ms) began while the GPU still ran #3, which the program step leaves out (it
    # read 87.18 ms, the host's span, for the GPU's 86.80)
    truth = json.loads((FIX / "h200" / "xformer.bad.kineto.truth.json").read_text())
    for i in doc["items"]:
        gpu_ns = truth["planted"][str(i["step"])]["gpu_ms"] * 1e6
        assert abs(i["program_ns"] - gpu_ns) <= 0.0005 * gpu_ns, i
    assert doc["items"][1]["program_ns"] < doc["items"][1]["dur_ns"]


def test_diff_realises_the_saving_on_the_gpu_paced_step(tmp_path):
    """A GPU-bound loop whose kernels got twice as fast (TF32-like) while the host's spans
    stayed the same: the realised saving is the GPU step's fall (10 ms a step), not the
    host's (0), and ``slower_pct`` says -50%."""
    from traceread.synth.kineto import write_kineto

    before, after = tmp_path / "before.json", tmp_path / "after.json"
    write_kineto(_host_ahead(1 * MS), before)
    write_kineto(_host_ahead(MS // 2), after)
    a, b = traceread.analyze(before), traceread.analyze(after)
    assert a.step_stats["mean_ns"] == b.step_stats["mean_ns"]      # the host did not move
    d = diff_analyses(a, b)
    realised = d.saving()["realised_ns"]
    assert realised == pytest.approx(10 * MS, rel=0.02)
    assert d.slower_pct() == pytest.approx(-50.0, abs=1.0)
    assert d.before["step_bound_by"] == "gpu"
    doc = d.to_dict()
    assert doc["change"]["program_step_ns"]["delta"] == pytest.approx(-10 * MS, rel=0.02)


def test_host_bound_steps_keep_the_hosts_span():
    """The CPU pairs and the synced GPU fixtures: the program step is the host's span."""
    a = analysed(FIX / "gpu" / "launch.bad.json.gz")
    p = a.facts.figures["program_step"]
    assert p["bound_by"] == "host"
    assert p["mean_ns"] == a.step_stats["mean_ns"]


def test_a_saving_is_per_step_and_never_above_its_step():
    s = StepSaving.of(30 * MS, 20 * MS)
    assert (s.ns, s.clamped, s.pct) == (20 * MS, "step", 100.0)
    s = StepSaving.of(8 * MS, 20 * MS, limit_ns=5 * MS)
    assert (s.ns, s.clamped) == (5 * MS, "limit")
    assert StepSaving.of(-3, 20 * MS).ns == 0
    assert StepSaving.of(4 * MS, 20 * MS).projected(floor_ns=18 * MS) == 18 * MS
    # a whole-window total over 6 steps on 2 devices
    got = per_step(120 * MS, 6, 2, 20 * MS)
    assert got.ns == 10 * MS and got.clamped is None
    assert per_step(10, 0) is None


def test_gloo_job_lever_saves_the_planted_delay_once_per_step():
    """Real 2-rank gloo DDP job on one GPU, rank 1 sleeping 20 ms before every forward:
    the waiting rank's job lever gives back about 20 ms a step (its two gradient buckets
    wait together: summing them promised 41.1 ms a step), never more than its step."""
    paths = sorted(str(p) for p in (FIX / "gpu" / "ddp2").glob("rank-*.json.gz"))
    truth = json.loads((FIX / "gpu" / "ddp2" / "truth.json").read_text())
    from traceread.jobs.multirank import apply_job_verdicts, jobs_of_analyses

    analyses = [traceread.analyze(p) for p in paths]
    jobs = jobs_of_analyses(analyses)
    apply_job_verdicts(analyses, jobs)
    delay = truth["planted_delay_ns"]
    # the group figures count the lateness once too: held back ~20 ms a step (41.3 summed),
    # and of the two ranks only rank 0 waits (~10 ms per step per rank, 20.7 summed)
    g = jobs[0].groups[0]
    assert 0.9 * delay <= g["lateness_ns_per_step"] <= 1.15 * delay, g
    assert 0.45 * delay <= g["wait_ns_per_step"] <= 0.6 * delay, g
    for a in analyses:
        rank, top = a.meta.rank, a.verdict["actions"][0]
        assert top["id"] == "straggler"
        per = top["saves_per_step_ns"]
        assert 0.9 * delay <= per <= 1.15 * delay, (rank, per)
        assert top["saves_pct"] < 100


def test_real_nsys_capture_whose_host_runs_ahead_is_paced_by_the_gpu(tmp_path):
    """The same H200 transformer under nsys (NVTX steps, no profiler throttling the host):
    steps 1 and 2 span 20 and 18 ms on the host while the GPU works 85 and 87.5 ms for them.
    Every program step is the loop's CUDA-event GPU time within 1%; the host's mean is 17%
    short of the program's."""
    import lzma
    import shutil

    truth = json.loads((FIX / "h200" / "xformer.bad.plain.truth.json").read_text())
    db = tmp_path / "xformer.sqlite"
    with lzma.open(FIX / "h200" / "xformer.bad.sqlite.xz") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a = traceread.analyze(db)
    st = a.steps
    assert len(st) >= 10 and set(st["bound_by"]) == {"gpu"}
    for r in st.to_dict(orient="records"):
        gpu_ns = truth["planted"][str(r["step"])]["gpu_ms"] * 1e6
        assert abs(r["program_ns"] - gpu_ns) <= 0.01 * gpu_ns, r
    early = st[st["step"].isin([1, 2])]
    assert (early["dur"] < 0.25 * early["program_ns"]).all()
    p = a.facts.figures["program_step"]
    assert p["host_mean_ns"] < 0.85 * p["mean_ns"]
    want = sum(truth["planted"][str(s)]["gpu_ms"] for s in st["step"]) / len(st) * 1e6
    assert p["mean_ns"] == pytest.approx(want, rel=0.01)
    # the host's spans vary (cv 0.35), the program's pace does not: no "bursty" fact
    assert a.step_stats["bursty"] and not p["bursty"]
    assert not a.facts.figures["window_summary"]["bursty"]


def test_error_pct_sets_promise_and_realised_saving_on_the_same_step():
    """A replay whose step is the host's 10 ms span promises 2 ms (20%); the program's
    GPU-paced 40 ms step fell 8 ms (20%): the promise was right, not 75% short."""
    from traceread.diffs.proof import error_pct

    assert error_pct(2 * MS, 8 * MS, 10 * MS, 40 * MS) == 0.0
    assert error_pct(2 * MS, 8 * MS, None, None) == -75.0
    assert error_pct(2 * MS, 0, 10 * MS, 40 * MS) is None


def test_a_host_lever_does_not_project_a_gpu_bound_step_below_its_gpu_work():
    """An 18 ms GPU-bound step (17.5 ms of GPU busy) whose replay (in the host's frame) says
    a host lever takes the step from 10 ms to 0.5 ms: the projection stops at the GPU's
    busy time, not at 18 x 0.05 = 0.9 ms; a lever that removes 5 ms of GPU work goes
    below it by that much."""
    from traceread.verdict.whatif import projected

    ctx = {"program_step_mean_ns": 18 * MS, "step_mean_ns": 10 * MS,
           "busy_step_mean_ns": 17_500_000}
    r = {"before_ns": 10 * MS, "after_ns": MS // 2, "gpu_saved_ns": 0}
    assert projected(ctx, r) == 17_500_000
    assert projected(ctx, {**r, "gpu_saved_ns": 5 * MS}) == 12_500_000


def test_saving_text_says_when_the_gpu_busy_time_set_the_projection():
    from traceread.render.text import action_gain
    from traceread.verdict.scores import _gain

    ctx = {"steps": 2, "program_step_mean_ns": 30 * MS, "busy_step_mean_ns": 25 * MS,
           "idle_ns": 10 * MS, "program_step": {"bound_by": "gpu"}}
    g = _gain(8 * MS, "idle", ctx, 60 * MS)
    # 4 ms a step asked, 5 ms of idle a step there: the GPU's 25 ms of work stays
    assert g["saves_per_step_ns"] == 4 * MS and g["projected_step_ns"] == 26 * MS
    g = _gain(30 * MS, "idle", ctx, 60 * MS)   # 15 ms a step asked: only 5 ms idle a step
    assert g["saves_per_step_ns"] == 5 * MS and g["saves_ns"] == 10 * MS
    assert g["projected_step_ns"] == 25 * MS and g["projected_floor"] == "gpu_busy"
    text = action_gain({**g, "cause": "host", "culprit": ""})
    assert "step -> 25 ms (the GPU's busy time)" in text


def test_diff_text_names_the_gpu_paced_step(tmp_path):
    from traceread.render.diff_text import render_diff
    from traceread.synth.kineto import write_kineto

    before, after = tmp_path / "before.json", tmp_path / "after.json"
    write_kineto(_host_ahead(1 * MS), before)
    write_kineto(_host_ahead(MS // 2), after)
    text = render_diff(diff_analyses(traceread.analyze(before), traceread.analyze(after)))
    assert "program step (mean)" in text
    assert "saving realised per step: 10 ms (on the program's step: the GPU paces it" in text


def test_report_calls_the_step_markers_host_spans_where_the_gpu_paces(tmp_path):
    """The host launches 20 ms of GPU work in each 5 ms step range and never syncs: the text
    report's "Steps:" line gave the 5 ms spans as the step mean, above the program step of
    ~20 ms, and the HTML overview of several traces showed 5 ms as "step (mean)". The spans
    are now called host spans, the evenness is judged on the program step, and the
    overview shows the program step."""
    from traceread.render.html import job_body
    from traceread.render.report import render_steps
    from traceread.synth.kineto import write_kineto

    path = tmp_path / "ahead.json"
    write_kineto(_host_ahead(1 * MS), path)
    a = traceread.analyze(path)
    text = " ".join(render_steps(a).split())
    assert "host spans: mean 5 ms" in text and "step times)" not in text
    assert "even (GPU-bound" in text
    from traceread.passes.steps import program_step_of
    from traceread.render.text import fmt_ns
    p = program_step_of(a)
    assert p["mean_ns"] > 3 * a.step_stats["mean_ns"]
    from traceread.render.html import analysis_body
    page = " ".join(analysis_body(a).split())
    assert "host spans mean 5 ms" in page and f"program step (the later of the host's span " \
        f"and the GPU's work) {fmt_ns(p['mean_ns'])} mean" in page
    html = job_body([a, a]).split("<hr")[0]   # the overview, before each trace's report
    assert f">{fmt_ns(p['mean_ns'])}<" in html and f">{fmt_ns(a.step_stats['mean_ns'])}<" not in html



def _stall_loop(tmp_path):
    """Steps of 19 GPU-ms launched back to back and synced at the end (GPU-bound), except
    step 2: its first kernel is launched, then the host waits 60 ms on its DataLoader before
    launching the rest, and ends without a sync (its GPU work ends ~18 ms after its host
    span)."""
    from traceread.synth.kineto import write_kineto

    b = TraceBuilder(path="stall.json")
    t = T0
    for k in range(5):
        stall = k == 2
        step = b.step(k, t, 0)   # its span is set at its end
        b.op_with_kernel("aten::zero_", t + 100 * US, 40 * US, 5 * US, 10 * US, t + 150 * US,
                         1 * MS, name="memset_kernel")
        h = t + 300 * US
        if stall:
            b.cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", h, 60 * MS,
                  kind="annotation")
            h += 60 * MS
        g = max(h + 100 * US, t + 1200 * US)
        for i in range(18):
            b.op_with_kernel("aten::mm", h + i * 20 * US, 15 * US, 2 * US, 8 * US, g, 1 * MS,
                             name="ampere_sgemm_128x64_nn")
            g += 1 * MS
        end = h + 18 * 20 * US + 50 * US
        if not stall:
            b.runtime("cudaDeviceSynchronize", end, g - end + 20 * US)
            end = g + 30 * US
        step["dur"] = end - t
        t = end
    return write_kineto(b.build(), tmp_path / "stall.json")


def test_a_host_stall_inside_the_gpus_window_is_the_hosts_step(tmp_path):
    """Step 2's first kernel ran before its 60 ms DataLoader wait, so its GPU window (~78 ms)
    spans the stall and outlasts its host span (~60 ms): it read GPU-bound, and the window
    "paced by the GPU's queue". The GPU sat starved 59 ms of that window: the step is the
    host's. The others stay GPU-bound (busy ~95% of their step)."""
    from traceread.render.report import program_step_line

    a = traceread.analyze(_stall_loop(tmp_path))
    st = a.steps.set_index("step")
    assert st.loc[2, "gpu_ns"] > st.loc[2, "dur"]          # the window outlasts the span
    assert st.loc[2, "bound_by"] == "host"
    assert (st.drop(index=2)["bound_by"] == "gpu").all()
    line = " ".join(program_step_line(a).split())
    assert "GPU-bound" in line and "GPU's queue" not in line


def test_real_dataloader_stalls_are_host_steps(corpus_dir):
    """param's resnet_kineto (steps inferred from its optimizer steps): the steps where the
    DataLoader falls behind (idle > 100 ms, all of it the DataLoader's) are host-bound; the
    others are GPU-bound, the GPU busy over 90% of them."""
    a = analysed(corpus_dir / "facebookresearch__param/et_replay/tests/inputs/resnet_kineto.json.gz")
    st = a.steps
    stalled = st["idle_ns"] > 100 * MS
    assert stalled.sum() >= 10 and (st.loc[stalled, "bound_by"] == "host").all()
    calm = st[~stalled]
    assert (calm["bound_by"] == "gpu").all() and (calm["busy_ns"] > 0.9 * calm["program_ns"]).all()
    # the anatomy's odd steps hold nothing of their own: their data phase grew (it said only
    # "nothing of its own"), and their evidence is the range that ends them (it named a
    # "ProfilerStep#13" the trace does not hold)
    odd = a.facts.program["anatomy"]["odd_steps"][0]
    assert odd["grew_phase"] == "data" and odd["grew_ns"] > 0.5 * odd["excess_ns"] > 200 * MS
    ev = a.facts.evidence["anatomy.odd_steps"][0]
    assert ev["name"] == "Optimizer.step#SGD.step" and "its data phase +" in ev["detail"]


def test_one_step_is_not_called_even():
    """A window of one step (HTA's MTIA trace, HTA's triton example) read "cv 0.00, even":
    one step has nothing to be even with."""
    from traceread.render.report import evenness

    assert evenness(False, 1, 0.0) == "one step: nothing to compare"
    assert evenness(False, 2, 0.1) == "even" and evenness(False, 2, 0.4) == "too few to judge"
    assert evenness(True, 5, 0.4) == "BURSTY"


def test_a_step_that_waits_on_work_queued_before_the_recording_is_the_gpus(corpus_dir):
    """TraceLens' h100 Qwen: the step opens with a 14.1 ms ``cudaDeviceSynchronize`` while
    the GPU runs 13.7 ms of an earlier forward's tail (no launch record: queued before the
    recording). The verdict read "GPU-bound: densely busy" and the steps "host-bound, 0 of 1
    steps GPU-bound": the step's own work (31.9 ms) is under 90% of its 47.2 ms, but the host
    spent the difference waiting on the GPU."""
    from traceread.render.report import program_step_line

    a = analysed(corpus_dir / "AMD-AGI__TraceLens/tests/traces/h100/"
                 "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    st = a.steps.iloc[0]
    assert st["busy_max_ns"] < 0.9 * st["program_ns"] <= st["busy_seen_ns"]
    assert st["bound_by"] == "gpu" and a.verdict["bound"] == "gpu"
    assert "1 of 1 steps GPU-bound" in " ".join(program_step_line(a).split())


def test_work_queued_before_the_recording_counts_only_inside_the_steps_span():
    """``busy_seen``: an op no step launched and no launch record names counts for the step
    it ends in, clipped to the step's span; a launched op outside every step does not."""
    import numpy as np
    import pandas as pd
    from traceread.passes import steps as steps_mod

    tab = pd.DataFrame({"index": [0, 1], "pid": [7, 7], "start": [100, 200], "end": [200, 300],
                        "busy_max_ns": [10, 10]})
    ops = pd.DataFrame({"ts": [50, 150, 180, 250], "end": [160, 170, 190, 290],
                        "pid": [7, 7, 7, 7], "device": [0, 0, 0, 0],
                        "launch_ts": [-1, -1, 100, 240]})
    op_step = np.array([-1, -1, 0, -1])   # the last: launched, but in no step
    assert steps_mod.busy_seen(tab, ops, op_step).tolist() == [80, 10]   # 100-170 and 180-190


def test_the_to_do_list_is_ranked_on_the_savings_it_shows(corpus_dir):
    """TraceLens' h100 Qwen: request batching's bound (19 ms for the window) is clamped to the
    4 ms of idle there is to give back, and so shown; ranked on its raw figure it led the
    replayed 14.2 ms fusion under the title "largest saving first"."""
    v = analysed(corpus_dir / "AMD-AGI__TraceLens/tests/traces/h100/"
                 "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz").verdict
    shown = [x["saves_ns"] for x in v["actions"] if x["saves_ns"] is not None]
    assert shown == sorted(shown, reverse=True)
    assert v["actions"][0]["id"] == "compile_fuse"


def test_a_gpu_lever_stops_at_the_hosts_own_span_when_the_host_ran_a_step_ahead():
    """A lever of GPU work alone (a collective's bound) where the host ran a whole step
    ahead: the step cannot drop below the host's own span, and the saving is cut to it;
    a host lever (idle time) is not."""
    from traceread.render.text import action_gain
    from traceread.verdict.scores import _gain

    ctx = {"steps": 3, "program_step_mean_ns": 19 * MS, "busy_step_mean_ns": 18 * MS,
           "idle_ns": 3 * MS, "host_ahead_span_mean_ns": 16 * MS}
    g = _gain(36 * MS, "work", ctx, 57 * MS, gpu_only=True)     # 12 ms a step asked
    assert g["saves_per_step_ns"] == 3 * MS and g["saves_ns"] == 9 * MS
    assert g["projected_step_ns"] == 16 * MS and g["projected_floor"] == "host"
    assert "step -> 16 ms at best (the host's own span" in action_gain({**g, "cause": "comms"})
    g = _gain(36 * MS, "work", ctx, 57 * MS)                    # not a GPU-only lever
    assert g["saves_per_step_ns"] == 12 * MS and g.get("projected_floor") != "host"
    del ctx["host_ahead_span_mean_ns"]                          # the host waited in its span
    g = _gain(36 * MS, "work", ctx, 57 * MS, gpu_only=True)
    assert g["saves_per_step_ns"] == 12 * MS


def test_host_ahead_span_needs_every_steps_work_after_its_span():
    import pandas as pd

    from traceread.passes.figures import host_ahead_span

    tab = pd.DataFrame({"start": [0, 10], "end": [10, 20], "dur": [10, 10],
                        "gpu_start": [12, 25]})
    assert host_ahead_span(tab) == 10
    tab.loc[1, "gpu_start"] = 15     # step 1's work began inside its span: it may have waited
    assert host_ahead_span(tab) is None
