"""``host_work_kind`` (passes/hostwork.py): is the host time between launches the model's own
forward (module calls, ops that launch kernels) or host work beside it (data preparation)?
The first cannot move to DataLoader workers: ``off_step_path`` is offered only for the
second, ``compile_model_host`` for the first (issue 29)."""
from __future__ import annotations


import pytest

from traceread.analysis import analyze
from conftest import CORPUS
from traceread.synth.scenarios import MS, T0, US, TraceBuilder

CALL = "torch/nn/modules/module.py(1743): _call_impl"
BERT = CORPUS / "AMD-AGI__TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
EVENT_SYNC = CORPUS / ("facebookresearch__HolisticTraceAnalysis/tests/data/critical_path/"
                       "cuda_event_sync/event_sync_trace.json.gz")


def _ops(b: TraceBuilder, t: int, n: int, *, python_ns: int) -> int:
    """n module calls, each ``python_ns`` of forward Python around one small op + kernel."""
    for _ in range(n):
        b.cpu(CALL, t, python_ns + 40 * US, kind="python")
        b.cpu("model.py(12): forward", t + 1 * US, python_ns + 38 * US, kind="python")
        op = t + python_ns
        b.op_with_kernel("aten::linear", op, 30 * US, 10 * US, 10 * US, op + 25 * US, 5 * US,
                         name="void gemv_kernel<float>(float*)")
        t += python_ns + 40 * US
    return t


def model_python(steps: int = 4):
    """The gaps are the model's own forward Python between tiny kernels."""
    b = TraceBuilder(path="model_python.json")
    t = T0
    for k in range(steps):
        start = t
        b.cpu("nn.Module: Net_0", t, 30 * 240 * US, kind="python")
        t = _ops(b, t, 30, python_ns=200 * US)
        b.step(k, start, t - start)
    return b.build()


def data_prep(steps: int = 4):
    """The gaps are a CPU data preparation step (no kernel launched) between short forwards."""
    b = TraceBuilder(path="data_prep.json")
    t = T0
    for k in range(steps):
        start = t
        b.cpu("train.py(30): prepare_batch", t, 3 * MS, kind="python")
        b.cpu("aten::randn", t + 100 * US, 2 * MS)
        t += 3 * MS
        b.cpu("nn.Module: Net_0", t, 10 * 45 * US, kind="python")
        t = _ops(b, t, 10, python_ns=5 * US)
        b.step(k, start, t - start)
    return b.build()


def _run(trace):
    a = analyze(trace, steps="all")
    return a.facts.figures["host_work_kind"], [x["id"] for x in a.verdict["actions"]]


def test_model_forward_python_is_not_moved_off_the_step():
    hw, ids = _run(model_python())
    assert hw["kind"] == "model" and hw["model_share"] > 0.9
    assert hw["top_model"] in (CALL, "nn.Module: Net_0", "model.py(12): forward")
    assert "off_step_path" not in ids
    assert "compile_model_host" in ids


def test_data_preparation_is_moved_off_the_step():
    hw, ids = _run(data_prep())
    assert hw["kind"] == "off_path" and hw["model_share"] < 0.2
    assert hw["top_other"] in ("aten::randn", "train.py(30): prepare_batch")
    assert "off_step_path" in ids
    assert "compile_model_host" not in ids


def test_because_cites_the_fact():
    a = analyze(model_python(), steps="all")
    # the py-spy diagnostic asked for torch.profiler(with_stack=True) on traces recorded with it
    # (TraceLens mi300 bert-small; perf_model normalization, which has no steps)
    assert a.context["stacks_traced"] is True
    assert any("py-spy" in d for d in a.verdict["diagnostics"])
    assert not any("with_stack" in d for d in a.verdict["diagnostics"])
    x = next(x for x in a.verdict["actions"] if x["id"] == "compile_model_host")
    fact = next(b for b in x["because"] if b["fact"] == "host_work_kind")
    assert fact["evidence"] and "host time in the gaps" in fact["evidence"][0]["detail"]


@pytest.mark.skipif(not BERT.exists(), reason="needs ../shared/corpus")
def test_bert_small_h100_forward_is_the_model():
    from traceread import load
    a = analyze(load(BERT))
    hw = a.facts.figures["host_work_kind"]
    assert hw["kind"] == "model" and hw["model_share"] > 0.8
    assert "off_step_path" not in [x["id"] for x in a.verdict["actions"]]


def test_untraced_host_time_is_unknown():
    """Gaps with no frame or op in them but the step's own range (a trace without stacks,
    ProfilerStep recorded as an op, as older Kineto does): the kind is not guessed."""
    b = TraceBuilder(path="untraced.json")
    t = T0
    for k in range(4):
        b.cpu(f"ProfilerStep#{k}", t, 3 * MS)
        for j in range(3):
            b.launch(t + j * MS + 900 * US, 10 * US, t + j * MS + 915 * US, 5 * US)
        t += 3 * MS
    hw, ids = _run(b.build())
    assert hw is None or hw["kind"] == "unknown"
    assert "off_step_path" in ids   # no evidence it is the model: the lever stays
    assert "compile_model_host" not in ids


@pytest.mark.skipif(not EVENT_SYNC.exists(), reason="needs ../shared/corpus")
def test_a_first_allocation_inside_a_launching_op_is_not_the_model():
    """HTA's cuda_event_sync: aten::ones spends 2.2 ms in its aten::empty (the first
    allocation) and then launches a fill: the wait is not the model's dispatch."""
    from traceread import load
    a = analyze(load(EVENT_SYNC))
    hw = a.facts.figures["host_work_kind"]
    assert hw["kind"] == "off_path" and hw["model_share"] < 0.1
    assert a.verdict["actions"][0]["id"] == "off_step_path"


def test_one_small_op_does_not_say_what_untraced_host_time_is():
    """our H200 pageable.bad: 2 ms of plain Python a step, untraced; the largest named op in
    it, aten::copy_, covers 1% -- the host work read 'movable' and 'mostly aten::copy_'."""
    from pathlib import Path

    from conftest import analysed
    from traceread.passes.preconditions import host_other_kind
    from traceread.render.words import FACT_WORDS

    a = analysed(Path(__file__).parent / "fixtures" / "h200" / "pageable.bad.json.gz")
    hw = a.facts.figures["host_work_kind"]
    outside = hw["host_ns"] - hw["model_ns"]
    assert hw["top_other"] == "aten::copy_" and hw["top_other_ns"] < 0.05 * outside
    assert hw["other_kind"] == "unknown"
    words = FACT_WORDS["host_work_kind"](hw)
    assert "mostly" not in words and "largely untraced" in words
    assert host_other_kind("aten::copy_", 0.4) == "movable"
    assert host_other_kind("All2All_Pooled_Req", 0.001) == "unknown"   # HTA trace_compare


def test_a_scripts_outer_frame_is_not_what_the_host_work_is():
    # TraceLens h100 timesformer: the host work beside the model (HF's image normalize, the
    # host culprit) sits under the script's <string>(1): <module>, which covers it all: it
    # read "mostly <string>(1): <module>"
    from traceread.render.words import FACT_WORDS

    hw = {"kind": "off_path", "model_share": 0.0, "top_other": "<string>(1): <module>",
          "top_other_ns": 250, "host_ns": 250, "model_ns": 0, "other_kind": "unknown"}
    words = FACT_WORDS["host_work_kind"](hw)
    assert "mostly" not in words and "under the script's outer frame <string>(1)" in words


def data_prep_in_a_script(steps: int = 4, prep: bool = True):
    """data_prep inside the script's frames (``<module>`` -> ``main``, enclosing the whole
    loop, the model too): the preparation's time is spread over several small ops. Without
    ``prep``, the gaps are the loop's own glue in ``main`` between forwards."""
    b = TraceBuilder(path="script.json")
    t = T0
    b.cpu("<string>(1): <module>", t - 10 * US, steps * 4 * MS, kind="python")
    b.cpu("train.py(80): main", t - 5 * US, steps * 4 * MS - 10 * US, kind="python")
    for k in range(steps):
        start = t
        if prep:
            b.cpu("train.py(30): prepare_batch", t, 3 * MS, kind="python")
            for j in range(4):   # no one op holds half of it
                b.cpu("aten::randn" if j % 2 else "aten::cat", t + j * 700 * US + 50 * US, 500 * US)
        t += 3 * MS
        b.cpu("nn.Module: Net_0", t, 10 * 45 * US, kind="python")
        t = _ops(b, t, 10, python_ns=5 * US)
        b.step(k, start, t - start)
    return b.build()


def test_the_frame_holding_the_time_is_named_not_the_scripts_body():
    """The time outside the model is prepare_batch's: it was named after the script's
    outermost frame (``<string>(1): <module>``), which holds every step (other_kind unknown,
    'under the script's outer frame'): now the deepest frame holding most of it."""
    hw, ids = _run(data_prep_in_a_script())
    assert hw["top_other"] == "train.py(30): prepare_batch"
    assert hw["top_other_encloses_model"] is False and hw["other_kind"] == "movable"
    assert "off_step_path" in ids
    # the loop's own glue: main holds it and encloses the model -- no work of its own
    hw, _ = _run(data_prep_in_a_script(prep=False))
    assert hw["top_other"] == "train.py(80): main" and hw["top_other_encloses_model"]
    assert hw["other_kind"] == "unknown"


def test_the_descent_stops_at_the_op_the_program_called():
    """An op's own callees are its implementation: aten::to is named, not its aten::copy_."""
    from traceread.passes.preconditions import host_other_kind

    b = TraceBuilder(path="to.json")
    t = T0
    for k in range(4):
        start = t
        b.cpu("train.py(30): prepare_batch", t, 3 * MS, kind="python")
        b.cpu("aten::to", t + 10 * US, 2900 * US)
        b.cpu("aten::copy_", t + 20 * US, 2800 * US)
        t += 3 * MS
        b.cpu("nn.Module: Net_0", t, 10 * 45 * US, kind="python")
        t = _ops(b, t, 10, python_ns=5 * US)
        b.step(k, start, t - start)
    hw, _ = _run(b.build())
    assert hw["top_other"] == "aten::to"
    # the autograd engine's entry (the main thread in backward), a torch.cuda.synchronize
    # and diffusers' hooks are the framework's, not work a worker could take
    for name in ("<built-in method run_backward of torch._C._EngineBase object at 0x7f>",
                 "torch/cuda/__init__.py(1030): synchronize",
                 "diffusers/hooks/hooks.py(268): _set_context"):
        assert host_other_kind(name, 0.9) == "framework", name


TIMESFORMER = CORPUS / ("AMD-AGI__TraceLens/tests/traces/h100/"
                        "facebook_timesformer-base-finetuned-k400__1016002.json.gz")


@pytest.mark.skipif(not TIMESFORMER.exists(), reason="needs ../shared/corpus")
def test_timesformer_h100_names_the_video_preprocessing():
    """TraceLens h100 timesformer: 222 ms of the 223 ms host time in the gaps is outside the
    model; it read 'under the script's outer frame <string>(1): <module>'. The time is
    VideoMAE's image preprocessing: 164 ms in _preprocess_image, work a worker can take."""
    from conftest import analysed

    hw = analysed(TIMESFORMER).facts.figures["host_work_kind"]
    assert hw["kind"] == "off_path"
    assert hw["top_other"].endswith("image_processing_videomae.py(178): _preprocess_image")
    assert hw["top_other_ns"] > 0.5 * (hw["host_ns"] - hw["model_ns"])
    assert hw["other_kind"] == "movable" and not hw["top_other_encloses_model"]


def test_the_words_say_a_loop_around_the_model_and_a_frame_or_op():
    """The frame holding the time outside the model may enclose the model's calls (the
    loop's own glue) or be a Python frame, not an op: the words read so."""
    from traceread.render.words import FACT_WORDS

    hw = {"kind": "off_path", "model_share": 0.2, "top_other": "train.py(80): main",
          "top_other_ns": 800, "host_ns": 1000, "model_ns": 200, "other_kind": "unknown",
          "top_other_encloses_model": True}
    words = FACT_WORDS["host_work_kind"](hw)
    assert "(in train.py(80): main, the loop around the model's calls)" in words
    words = FACT_WORDS["host_work_kind"](dict(hw, top_other_ns=10, top_other_encloses_model=False))
    assert "the largest named frame or op, train.py(80): main: 1%" in words
