"""The replay is checked on the step the program waits on (critical.program_spans, as
steps.program_columns reads it), not the host markers' span: a step whose first kernel sat
queued on an idle GPU for most of it (TraceLens' vLLM graph replay on MI300: 26.4 ms of host
span, 305 ms of step) is measured, replayed and walked as its program step."""
from __future__ import annotations

import pytest

from traceread.analysis import analyze
from traceread.synth.scenarios import TraceBuilder, US

from conftest import analysed, corpus_or_skip

STEPS = 4
VLLM = "AMD-AGI__TraceLens/tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"


def queued_loop():
    """Each 10 ms step: 1 ms of host span; its one kernel is launched at +10 us (the call
    returns at +15 us), waits queued on the idle GPU until +5 ms, then runs 1 ms."""
    b = TraceBuilder()
    for k in range(STEPS):
        t = 1_000_000 + k * 10_000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 5000 * US, 1000 * US, name="kernel_A")
    return b.build()


def _checks(a):
    prog = dict(zip(a.steps["step"].tolist(), a.steps["program_ns"].tolist()))
    r = a.replay
    for st in r["steps"]:
        assert st["measured_ns"] == prog[st["step"]], (st, prog)
        assert abs(st["replayed_ns"] - st["measured_ns"]) <= 0.001 * st["measured_ns"]
    for st in r["critical_path"]["steps"]:
        assert abs(sum(st["by_label"].values()) - prog[st["step"]]) <= 0.001 * prog[st["step"]]
    return prog


def test_a_queued_step_is_replayed_as_its_program_step():
    a = analyze(queued_loop(), steps="all")
    prog = _checks(a)
    # queued from the launch's return (+15 us) to the kernel's end (+6 ms)
    assert set(prog.values()) == {5985 * US}
    assert a.replay["measured_ns"] == 4 * 5985 * US
    cp = a.replay["critical_path"]["by_label"]
    assert cp.get("queued after launch", 0) >= 4 * 4900 * US


def test_vllm_graph_replay_is_measured_as_its_program_step():
    a = analyze(str(corpus_or_skip() / VLLM))
    prog = _checks(a)
    assert a.replay["measured_ns"] == sum(prog.values()) > 250_000_000


def test_a_step_paced_by_two_streams_starts_where_the_gpu_paced_the_last_one_ended():
    # HTA's trace_diff test trace (8 ranks' job, rank 0): step 1010's device is busy over 90%
    # of it only counting both its streams, so it is GPU-paced, and step 1011 (166 ms of
    # host span) starts where 1010's GPU work ended: 114.8 ms, not 166.4
    a = analyze(str(corpus_or_skip()
                    / "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz"))
    prog = _checks(a)
    assert prog[1011] == 114_802_000


@pytest.mark.corpus
def test_levers_are_priced_on_the_program_step(corpus_dir):
    """The levers' replays measured a step as its host markers' span (floored by the busiest
    GPU lane's load), while the replay's own check and the measured step are the program
    step: TraceLens' vLLM piecewise graph execution on MI300 was priced on a 157 ms step for
    a 305 ms program step (its GPU held the queued graph long after the host's range). The
    pricing's unmodified step is now the program step."""
    a = analysed(corpus_dir / "AMD-AGI__TraceLens/tests/traces/inference/"
                 "vllm_prefilldecode_piecewise/graph_execution.json.gz")
    prog = a.facts.figures["program_step_mean_ns"]
    assert abs(a.facts.prices["before_ns"] - prog) <= 0.01 * prog
