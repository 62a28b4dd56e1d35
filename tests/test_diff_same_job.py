"""A diff whose two captures ran on different jobs or GPUs says so, and does not judge the
change's promise against a saving the hardware or the job's shape made (HTA's trace_diff
pair: 8 ranks on A100 BEFORE, 2 ranks on V100 AFTER, read as "cuda_graphs: promise off by
+100%")."""
from __future__ import annotations

from types import SimpleNamespace

from conftest import CORPUS, analysed, corpus_or_skip
from traceread.diffs.trace import not_the_same_job

A100 = [{"name": "NVIDIA A100-SXM4-80GB"}]


def _fig(world, devices):
    from traceread.passes.peaks import device_name

    return {"world_size": world, "device_name": device_name(SimpleNamespace(devices=devices))}


def test_world_size_and_gpu_differences_are_named():
    assert not_the_same_job(_fig(8, A100), _fig(8, A100)) == []
    assert not_the_same_job(_fig(-1, A100), _fig(2, [])) == []   # unknown: not claimed
    w = not_the_same_job(_fig(8, A100), _fig(2, [{"name": "Tesla V100-SXM2-16GB"}]))
    assert w[0].startswith("the jobs differ: 8 ranks BEFORE, 2 AFTER")
    assert w[1] == "the GPUs differ: NVIDIA A100-SXM4-80GB BEFORE, Tesla V100-SXM2-16GB AFTER"


def test_a_promise_across_different_gpus_is_not_judged():
    # the recorded H100 sync pair, AFTER's meta saying another GPU: warned, and the change's
    # promise is not set against the realised saving
    import copy
    import dataclasses

    from conftest import FIXTURES
    from traceread.diffs.trace import diff_analyses

    before = analysed(FIXTURES / "gpu" / "sync.bad.json.gz")
    after = copy.copy(analysed(FIXTURES / "gpu" / "sync.fixed.json.gz"))
    same = diff_analyses(before, after)
    assert same.proof and same.proof["error_pct"] is not None and not same.proof.get("not_judged")
    after.meta = dataclasses.replace(after.meta, devices=[{"name": "Tesla V100-SXM2-16GB"}])
    d = diff_analyses(before, after)
    assert any(w.startswith("the GPUs differ: ") for w in d.warnings)
    assert d.proof["error_pct"] is None and d.proof["not_judged"].startswith("the GPUs differ")


def test_hta_trace_diff_pair_is_not_judged():
    corpus_or_skip()
    import traceread
    from traceread.render.diff_text import render_diff

    root = CORPUS / "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff"
    d = traceread.diff(str(root / "control/control.json.gz"), str(root / "test/test.json.gz"))
    assert any(w.startswith("the jobs differ: 8 ranks BEFORE, 2 AFTER") for w in d.warnings)
    assert any("Tesla V100" in w for w in d.warnings)
    p = d.proof
    assert p["error_pct"] is None and p["not_judged"].startswith("the jobs differ")
    assert "promise off by" not in render_diff(d)
    # its only lever (cuda_graphs) was refused by BEFORE's replay: nothing priced, where it
    # read "promised 0 ns per step (0.0% of the step)"
    assert p["levers"] == ["cuda_graphs"] and "cuda_graphs" in p["refused"]
    assert p["promised_ns"] is None
    text = " ".join(render_diff(d).split())
    # the change AFTER shows, and why BEFORE's replay could not make it, in one sentence:
    # not "the change: cuda_graphs" then "cuda_graphs not applied" (route15)
    assert "the change: cuda_graphs (CUDA graphs replayed in AFTER: 2 graph launches a step" \
        in text
    assert "promised: not priced -- BEFORE's replay could not make the change: the step " \
        "syncs between its launches" in text
    assert "not applied" not in text


def test_batch_outputs_of_different_jobs_warn_too(tmp_path):
    # the batch stores each trace's world size and GPU in its figures table: a diff of two
    # batch outputs names the difference as the traces' diff does
    corpus_or_skip()
    import subprocess
    import sys

    import traceread

    root = CORPUS / "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff"
    outs = []
    for side in ("control", "test"):
        out = tmp_path / side
        p = subprocess.run([sys.executable, "-m", "traceread", "batch", str(root / side), "-o",
                            str(out)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        outs.append(out)
    d = traceread.diff(str(outs[0]), str(outs[1]))
    assert any("the jobs differ: 8 ranks BEFORE, 2 AFTER" in w for w in d.warnings), d.warnings


def test_a_cpu_run_against_a_gpu_run_is_named():
    # gloo/ddp2 (CPU, gloo) against gpu/ddp2 (the same DDP script on an H100): the diff read
    # a plain "+354%, no saving: 131 ms slower" with no word that the device changed
    from conftest import FIXTURES
    from traceread.jobs.figures import figures

    cpu = figures(analysed(FIXTURES / "gloo" / "ddp2" / "rank-0.json.gz"))
    gpu = figures(analysed(FIXTURES / "gpu" / "ddp2" / "rank-0.json.gz"))
    assert not_the_same_job(cpu, gpu) == [
        "the devices differ: BEFORE runs no GPU work, AFTER runs on NVIDIA H100 80GB HBM3"]
    assert not_the_same_job(gpu, cpu)[0].startswith("the devices differ: AFTER runs no GPU")
    assert not_the_same_job(cpu, cpu) == []


def test_a_job_without_steps_says_so_not_dashes():
    """nsys-ai's mfu_2gpu pair has no steps on either side: the job's line read
    "step time    - -> - (slowest rank's mean)"."""
    from traceread.render.diff_text import _job_lines

    job = {"job_before": "job0", "job_after": "job0", "ranks": 2,
           "before": {"step_mean_ns": None, "status": "straggler"},
           "after": {"step_mean_ns": None, "status": "none"}}
    text = "\n".join(_job_lines([job]))
    assert "- -> -" not in text and "no steps on either side" in text
    job["before"]["step_mean_ns"], job["after"]["step_mean_ns"] = 10_000_000, 9_000_000
    assert "10 ms -> 9 ms" in "\n".join(_job_lines([job]))


def test_the_left_out_steps_warning_stays_one_line_of_a_few():
    """A 3-step BEFORE against a 39-step AFTER listed all 36 left-out steps in one warning."""
    from traceread.diffs.trace import steps_warning

    rows = [{"step": s, "before_ns": None, "before_reason": "not in the trace",
             "after_ns": 25_000_000, "after_reason": ""} for s in range(4, 40)]
    text = steps_warning({"first": 1, "last": 3, "left_out": rows})
    assert text.count(" AFTER") == 4 and "and 32 more (steps_compared in the JSON)" in text
    assert "#4 - BEFORE, 25 ms AFTER" in text
