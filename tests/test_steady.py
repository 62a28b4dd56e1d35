"""Steady state (passes/steady.py): cold start, JIT compilation and sampled traces say so;
the default window keeps a dominant blocking wait; inference step markers are steps."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip, materialise
from traceread.analysis import analyze
from traceread.passes import steady as SD
from traceread.passes import steps as S
from traceread.render.report import render_report
from traceread.synth.scenarios import MS, US, TraceBuilder
from traceread.verdict import steady as VS

FORMS = ("table", "kineto-2.4", "nsys")
T0 = 1_700_000_000_000_000_000


def _loop(b: TraceBuilder, t: int, n: int, names=("fwd", "bwd", "opt"), gap: int = 20 * US,
          kdur: int = 200 * US) -> int:
    """``n`` iterations of short launches (5 us) of ``names``; returns the time after them."""
    for _ in range(n):
        for name in names:
            b.launch(t, 5 * US, t + 10 * US, kdur, name=name)
            t += 10 * US + kdur + gap
    return t


def _cold(slow_launch_new_kernel: bool = True) -> TraceBuilder:
    """Two iterations, then a 3 ms launch call: of a kernel never launched before (lazy
    module loading), or of one launched before."""
    b = TraceBuilder()
    t = _loop(b, T0, 2)
    name = "vector_dot" if slow_launch_new_kernel else "fwd"
    b.launch(t, 3 * MS, t + 3 * MS + 10 * US, kdur := 200 * US, name=name)
    t += 3 * MS + 10 * US + kdur + 20 * US
    _loop(b, t, 1)
    return b


@pytest.mark.parametrize("how", FORMS)
def test_first_launch_of_a_kernel_that_takes_ms_is_a_cold_start(how, tmp_path):
    a = analyze(materialise(_cold().build(), how, tmp_path, "cold"))
    st = a.steady_state
    assert st["state"] == "cold_start"
    top = st["evidence"][0]
    assert top["what"] == "lazy module load (first launch)" and top["name"] == "cudaLaunchKernel"
    # the 3 ms call lies wholly inside the gap before vector_dot runs
    assert top["idle_ns"] == 3 * MS and st["ns"] == 3 * MS
    v = a.verdict
    assert v["bound"] == "cold_start" and v["title"].startswith("cold start: warm up")
    assert v["levers"][0] == VS.STATE_TEXT["cold_start"][1]
    assert [a["id"] for a in v["actions"][1:]] in ([], ["mark_steps"])
    assert not any("CUDA graphs" in x for x in v["levers"])
    assert v["evidence"]["bound_if_steady"] == "launch"
    assert "not steady state: cold start" in render_report(a)


@pytest.mark.parametrize("how", ("table", "nsys"))
def test_slow_launch_of_a_kernel_seen_before_is_not_cold(how, tmp_path):
    a = analyze(materialise(_cold(slow_launch_new_kernel=False).build(), how, tmp_path, "warm"))
    assert a.steady_state["state"] == "steady"
    assert a.verdict["bound"] != "cold_start"


def _first_call(wait: int = 0) -> TraceBuilder:
    """aten::cudnn_convolution: a 100 ms first call (its launch at the end), then 3 x 1 ms;
    with ``wait``, the first call spends that long in a cudaStreamSynchronize."""
    b = TraceBuilder()
    t = T0
    b.launch(t, 5 * US, t + 10 * US, 100 * US, name="warm")
    t += 200 * US
    for k, dur in enumerate((100 * MS, 1 * MS, 1 * MS, 1 * MS)):
        b.cpu("aten::cudnn_convolution", t, dur)
        if k == 0 and wait:
            b.runtime("cudaStreamSynchronize", t + 1 * MS, wait)
        b.launch(t + dur - 20 * US, 5 * US, t + dur, 100 * US, name="conv")
        t += dur + 100 * US
    return b


def test_slow_first_call_of_an_op_is_a_cold_start():
    a = analyze(_first_call().build())
    st = a.steady_state
    assert st["state"] == "cold_start"
    assert st["evidence"][0]["what"] == "first call"
    assert st["evidence"][0]["name"] == "aten::cudnn_convolution"
    assert st["evidence"][0]["median_ns"] == 1 * MS


def test_a_first_call_filled_by_a_blocking_wait_is_not_cold():
    st = analyze(_first_call(wait=90 * MS).build()).steady_state
    assert not any(x["what"] == "first call" for x in st["evidence"])
    assert st["state"] == "steady"


def test_slow_first_kernel_run_counts_its_excess():
    b = TraceBuilder()
    t = T0
    for dur in (20 * MS, 500 * US, 500 * US, 500 * US):
        b.launch(t, 5 * US, t + 10 * US, dur, name="conv")
        t += 10 * US + dur + 1 * MS      # 1 ms idle after each kernel
    st = analyze(b.build()).steady_state
    assert st["cold_start_ns"] == 20 * MS - 500 * US
    assert st["state"] == "cold_start"
    assert st["evidence"][0]["what"] == "first kernel run"


@pytest.mark.parametrize("how", FORMS)
@pytest.mark.parametrize("name", ("FusionKernelRuntime::compileFusionParallel",
                                  "Nvrtc::CompileProgram"))
def test_jit_compilation_in_the_gaps_is_named(how, name, tmp_path):
    b = TraceBuilder()
    t = _loop(b, T0, 2)
    b.cpu(name, t, 8 * MS, kind="annotation")
    _loop(b, t + 8 * MS + 10 * US, 2)
    a = analyze(materialise(b.build(), how, tmp_path, "jit"))
    assert a.steady_state["state"] == "jit"
    assert a.steady_state["ns"] == 8 * MS
    assert a.steady_state["evidence"][0]["name"] == name
    v = a.verdict
    assert v["bound"] == "jit" and v["levers"][0] == VS.STATE_TEXT["jit"][1]
    assert "untraced" not in v["summary"]


def _launches(jump: int, n: int = 150, ext: bool = True) -> TraceBuilder:
    """``n`` ops launching one kernel each; ids advance by ``jump`` (a sampled trace drops
    the events in between)."""
    b = TraceBuilder()
    t = T0
    for k in range(n):
        b._corr = 1 + k * jump
        if ext:
            b.cpu("aten::add", t, 20 * US, external_id=1 + k * jump)
        b.launch(t + 5 * US, 5 * US, t + 15 * US, 50 * US, name="add_kernel")
        t += 200 * US
    return b


@pytest.mark.parametrize("how", ("table", "kineto-2.4"))
def test_external_id_gaps_mark_a_sampled_trace(how, tmp_path):
    a = analyze(materialise(_launches(36).build(), how, tmp_path, "sampled"))
    st = a.steady_state
    assert st["state"] == "sampled"
    assert st["sampled"]["ids"] == "External" and st["sampled"]["median_jump"] == 36
    # 150 ids over a span of 149 * 36 + 1
    assert st["sampled"]["dropped_pct"] == round(100 * (1 - 150 / (149 * 36 + 1)), 1)
    v = a.verdict
    assert v["bound"] == "unknown" and "sampled" in v["title"]
    assert "idle_pct" not in v["evidence"] and "lost_pct" not in v["evidence"]
    assert v["levers"] == [VS.STATE_TEXT["sampled"][1]]
    assert [a["id"] for a in v["actions"]] == ["steady_sampled"]
    assert len(a.kernels) and (a.kernels["avg_ns"] == 50 * US).all()   # kernel times stay


def test_correlation_gaps_mark_a_sampled_nsys_trace(tmp_path):
    a = analyze(materialise(_launches(36, ext=False).build(), "nsys", tmp_path, "sampled"))
    assert a.steady_state["state"] == "sampled"
    assert a.steady_state["sampled"]["ids"] == "correlation"


@pytest.mark.parametrize("how", ("table", "nsys"))
def test_complete_trace_is_not_sampled(how, tmp_path):
    a = analyze(materialise(_launches(1).build(), how, tmp_path, "full"))
    assert a.steady_state["state"] == "steady" and a.steady_state["sampled"] is None
    # CUPTI counts API calls Kineto does not keep: complete CUDA traces jump by up to ~10
    assert SD.sampled_ids(_launches(8, ext=False).build().events) is None


@pytest.mark.parametrize("build", (_cold, lambda: _launches(36)))
def test_steady_state_validates_against_the_schema(build):
    import json

    from traceread import schema

    d = json.loads(json.dumps(schema.versioned(analyze(build().build()).to_dict())))
    schema.check("analyze", d)
    assert d["steady_state"]["state"] in ("cold_start", "sampled")


# --- the window ----------------------------------------------------------------------------

def _stalled_program(stall: int) -> TraceBuilder:
    """One init kernel, a blocking copy of ``stall`` ns, then a loop of 12 iterations."""
    b = TraceBuilder()
    b.launch(T0, 5 * US, T0 + 10 * US, 100 * US, name="init_kernel")
    b.runtime("cudaMemcpy", T0 + 200 * US, stall)
    _loop(b, T0 + 200 * US + stall + 10 * US, 12)
    return b


def test_default_window_keeps_a_dominant_blocking_wait():
    a = analyze(_stalled_program(400 * MS).build())
    assert a.window.mode == "whole_trace"
    assert "cudaMemcpy" in a.window.note
    assert a.verdict["evidence"]["idle_ns"] >= 400 * MS


def test_a_short_wait_before_the_loop_is_still_excluded():
    # 100 us of a 0.2 ms leading part: not half of the window's 10% -- warm-up as before
    a = analyze(_stalled_program(100 * US).build())
    assert a.window.mode == "steady"


def test_a_step_is_not_dropped_for_start_up_work_smaller_than_its_wait():
    b = TraceBuilder()
    t = T0
    for k in range(2):
        b.step(k, t, 410 * MS if k == 0 else 10 * MS)
        if k == 0:
            b.runtime("cuModuleLoadData", t + 10 * US, 5 * MS, kind="driver")
            b.runtime("cudaStreamSynchronize", t + 6 * MS, 400 * MS)
            t0 = t + 407 * MS
        else:
            t0 = t + 10 * US
        _loop(b, t0, 1, kdur=100 * US, gap=10 * US)
        t += 410 * MS if k == 0 else 10 * MS
    a = analyze(b.build())
    assert a.window.to_dict()["steps_analysed"] == 2
    # with the wait shorter than the start-up work the step is warm-up, as before
    b2 = TraceBuilder()
    t = T0
    for k in range(2):
        b2.step(k, t, 20 * MS if k == 0 else 10 * MS)
        if k == 0:
            b2.runtime("cuModuleLoadData", t + 10 * US, 5 * MS, kind="driver")
        _loop(b2, t + 6 * MS, 1, kdur=100 * US, gap=10 * US)
        t += 20 * MS if k == 0 else 10 * MS
    assert analyze(b2.build()).window.to_dict()["steps_analysed"] == 1


# --- inference step markers -----------------------------------------------------------------

def test_inference_step_markers_are_steps():
    b = TraceBuilder()
    b.cpu("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785)", 0, 10 * MS,
          kind="annotation")
    b.cpu("step[DECODE bs=32]", 1 * MS, 8 * MS, kind="annotation")
    st, pat = S.find_steps(b.build().events)
    assert pat == S.INFERENCE_STEP_PATTERN
    # nested ranges are one step, numbered in time order (32 is a batch size, not a step)
    assert st["step"].tolist() == [0] and st["dur"].tolist() == [10 * MS]

    b = TraceBuilder()
    for k in range(3):
        b.cpu("vllm/v1/worker/gpu_model_runner.py(3380): execute_model", k * 5 * MS, 4 * MS,
              kind="python")
        b.cpu("step[EXTEND bs=15 toks=15360]", k * 5 * MS + 1 * MS, 2 * MS, kind="annotation")
    st, _ = S.find_steps(b.build().events)
    assert st["step"].tolist() == [0, 1, 2] and st["dur"].tolist() == [4 * MS] * 3


def test_profiler_steps_win_over_inference_markers():
    b = TraceBuilder()
    for k in range(2):
        b.step(k, k * 10 * MS, 10 * MS)
        b.cpu("step[DECODE bs=8]", k * 10 * MS + 1 * MS, 5 * MS, kind="annotation")
    st, pat = S.find_steps(b.build().events)
    assert pat == S.DEFAULT_STEP_PATTERN and st["step"].tolist() == [0, 1]


# --- real traces ----------------------------------------------------------------------------

TL = "AMD-AGI__TraceLens/tests/traces/inference/"


@pytest.mark.corpus
def test_sglang_decode_answers_the_blocking_copy():
    c = corpus_or_skip()
    p = c / TL / "sglang_decode/sglang_Qwen3-8B_decode.json.gz"
    a = analysed(p)
    assert a.window.mode == "steps" and a.window.total_steps == 1
    # the stall stays in the window; the raw events say what held it: the host blocked in the
    # copy while the 4 kernels ahead of it on stream 3 sat queued behind a hipStreamWaitEvent
    # (launched at +0.1-0.3 ms, run at +463 ms) -- the GPU waited on that event, not on the host
    assert a.verdict["bound"] == "queued"
    assert a.verdict["evidence"]["top_sync_op"] == "hipMemcpyWithStream"
    assert a.verdict["actions"][0]["id"] == "stream_waits"
    # without step markers the leading part is kept: the 463 ms copy is no warm-up
    b = analysed(p, step_pattern=r"^no such step$")
    assert b.window.mode == "whole_trace" and "hipMemcpyWithStream" in b.window.note
    assert b.verdict["bound"] == "queued"


@pytest.mark.corpus
@pytest.mark.parametrize("path", ("sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
                                  "vllm_decode_full/graph_execution.json.gz",
                                  "vllm_prefilldecode_piecewise/graph_execution.json.gz"))
def test_inference_traces_have_their_step(path):
    c = corpus_or_skip()
    st, pat = S.find_steps(analysed(c / TL / path).trace.events)
    assert pat == S.INFERENCE_STEP_PATTERN and len(st) == 1
    assert st["name"].iloc[0].startswith("execute_")


@pytest.mark.corpus
@pytest.mark.parametrize("path", ("timeline_analysis/sampled_rank-0.json.gz",
                                  "trace_filter/sampled_rank-1.json.gz"))
def test_hta_sampled_traces_say_sampled(path):
    c = corpus_or_skip()
    a = analysed(c / "facebookresearch__HolisticTraceAnalysis/tests/data" / path)
    assert a.steady_state["state"] == "sampled"
    assert a.steady_state["sampled"]["median_jump"] >= SD.SAMPLED_EXT_JUMP
    assert a.verdict["bound"] == "unknown" and "idle_pct" not in a.verdict["evidence"]
    assert "idle 55.5%" not in a.verdict["summary"]


@pytest.mark.corpus
def test_extrap_lazy_module_load_is_a_cold_start():
    c = corpus_or_skip()
    a = analysed(c / "extra-p__extrap/ex-gpu.s10.sqlite")
    st = a.steady_state
    assert st["state"] == "cold_start"
    top = st["evidence"][0]
    assert top["name"] == "cudaLaunchKernel" and 2.9 * MS < top["ns"] < 3.0 * MS
    assert a.verdict["bound"] == "cold_start"


@pytest.mark.parametrize("how", ("table", "nsys"))
def test_every_launch_a_first_one_each_loading_its_module_is_a_cold_start(how, tmp_path):
    """Two kernels, each launched once by a 17 ms call (no repeat launch to compare with):
    the median of the API's calls is the lazy loads themselves and hid them."""
    b = TraceBuilder()
    t = T0
    for name in ("fill", "reduce"):
        b.launch(t, 17 * MS, t + 17 * MS + 10 * US, 3 * US, name=name)
        t += 17 * MS + 100 * US
    a = analyze(materialise(b.build(), how, tmp_path, "firsts"))
    st = a.steady_state
    assert st["state"] == "cold_start"
    assert [x["what"] for x in st["evidence"]] == [SD.LAZY_LAUNCH]
    assert a.verdict["bound"] == "cold_start"


def test_repeat_launches_are_the_reference_not_the_first_ones():
    # three kernels loaded lazily (5 ms each) and one steady launch (5 us) of one of them:
    # the API's median (5 ms) hid all three; the repeat launch's 5 us shows them (the
    # first lies before the GPU's first op: b's and c's are the idle time)
    b = TraceBuilder()
    t = T0
    for name in ("a", "b", "c", "a"):
        d = 5 * US if name == "a" and t > T0 else 5 * MS
        b.launch(t, d, t + d + 10 * US, 20 * US, name=name)
        t += d + 100 * US
    a = analyze(b.build())
    lazy = [x for x in a.steady_state["evidence"] if x["what"] == SD.LAZY_LAUNCH]
    assert len(lazy) == 1 and lazy[0]["idle_ns"] == 10 * MS and lazy[0]["median_ns"] == 5 * US


@pytest.mark.corpus
def test_a_single_graph_launch_is_not_a_lazy_module_load():
    """sglang decode: one hipGraphLaunch of 1.6 ms replays ~550 kernels -- its time grows
    with the graph's nodes; with no repeat launch to compare with it is not a module load."""
    c = corpus_or_skip()
    a = analysed(c / "AMD-AGI__TraceLens/tests/traces/inference/sglang_decode/"
                     "sglang_Qwen3-8B_decode.json.gz")
    assert a.steady_state["one_time_launch_ns"] == 0
    assert "kept apart" not in a.verdict["summary"]


@pytest.mark.corpus
def test_nsys_ai_mock_two_first_launches_are_a_cold_start():
    """nsys-ai mock.sqlite: cudaLaunchKernel 17.4 and 17.8 ms, each the first launch of its
    kernel (the GPU idle through both), and the process's only cudaHostAlloc (3.6 ms): a
    program's first run, not launch overhead to fuse or capture."""
    c = corpus_or_skip()
    a = analysed(c / "GindaChen__nsys-ai/tests/fixtures/mock.sqlite")
    st = a.steady_state
    assert st["state"] == "cold_start"
    what = {x["what"]: x for x in st["evidence"]}
    assert what[SD.LAZY_LAUNCH]["name"] == "cudaLaunchKernel"
    assert 17 * MS < what[SD.LAZY_LAUNCH]["idle_ns"] < 18 * MS
    assert "first-call allocator growth" in what
    v = a.verdict
    assert v["bound"] == "cold_start"
    assert not any(x["id"] in ("cuda_graphs", "compile_fuse") for x in v["actions"])


@pytest.mark.parametrize("how", FORMS)
@pytest.mark.parametrize("name", ("cuModuleLoadData", "cudnnCreate", "cublasCreate_v2"))
def test_module_loading_and_library_init_in_the_gaps_are_a_cold_start(how, name, tmp_path):
    b = TraceBuilder()
    t = _loop(b, T0, 2)
    b.runtime(name, t, 5 * MS)
    _loop(b, t + 5 * MS + 10 * US, 2)
    a = analyze(materialise(b.build(), how, tmp_path, "init"))
    st = a.steady_state
    assert st["state"] == "cold_start" and st["ns"] == 5 * MS
    top = st["evidence"][0]
    assert (top["what"], top["ns"], top["idle_ns"], top["calls"]) == \
        ("start-up call", 5 * MS, 5 * MS, 1)
    assert top["name"] == (name if how != "nsys" else name.split("_v")[0])  # nsys drops _v2


def _steady_with_lazy_launch(lazy: bool = True, steps: int = 10) -> TraceBuilder:
    """``steps`` steps of three short launches (5 us call, 20 us kernel, 30 us gaps: every
    gap launch overhead), and in step 1 one 4 ms launch call: of a kernel never launched
    before (lazy module loading) or, ``lazy=False``, of one launched every step."""
    b = TraceBuilder()
    t = T0
    for k in range(steps):
        s = t
        step = b.step(k, s, 0)
        for name in ("fwd", "bwd", "opt"):
            b.launch(t, 5 * US, t + 10 * US, 20 * US, name=name)
            t += 50 * US
        if k == 1:
            b.launch(t, 4 * MS, t + 4 * MS + 10 * US, 20 * US,
                     name="vector_dot" if lazy else "fwd")
            t += 4 * MS + 50 * US
        step["dur"] = t - s
    return b


def test_lazy_loading_launch_is_not_priced_as_a_steady_launch_saving():
    a = analyze(_steady_with_lazy_launch().build())
    v = a.verdict
    ev = v["evidence"]
    # 30 gaps of launch overhead (29 x 30 us, the 10 us lead, the 20 us tail): 900 us; the
    # 4 ms lazy-loading call (4,030 us gap: its 30 us rest is host) is kept apart
    assert a.steady_state["one_time_launch_ns"] == 4 * MS
    assert a.facts.figures["cause_ns"]["launch"] == 900 * US + 4 * MS
    assert ev["scores_ns"]["launch"] == 900 * US
    assert ev["one_time_apart_ns"] == 4 * MS and ev["lost_ns"] == 930 * US
    assert v["bound"] == "launch" and "kept apart" in v["summary"]
    bound = [x for x in v["actions"] if x.get("basis") == "bound"]
    assert bound and all(x["saves_ns"] <= 900 * US for x in bound)
    fuse = next(x for x in v["actions"] if x["id"] == "compile_fuse")
    assert fuse["basis"] == "bound" and fuse["saves_ns"] == 900 * US
    # no lever, replayed or bound, prices the one-time call as a saving
    assert all((x["saves_ns"] or 0) <= ev["lost_ns"] for x in v["actions"])


def test_slow_launch_that_recurs_is_kept_in_the_steady_launch_time():
    # the same 4 ms call launching a kernel run every step: no one-time event, nothing apart
    a = analyze(_steady_with_lazy_launch(lazy=False).build())
    ev = a.verdict["evidence"]
    assert a.steady_state["one_time_launch_ns"] == 0
    assert ev["scores_ns"]["launch"] == 900 * US + 4 * MS
    assert "one_time_apart_ns" not in ev


@pytest.mark.corpus
def test_minitoy_foreach_to_fused_excludes_the_lazy_loading_launch():
    c = corpus_or_skip()
    a = analysed(c / "facebookresearch__HolisticTraceAnalysis/tests/data/amd_trace/"
                     "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    v = a.verdict
    ev = v["evidence"]
    lazy = a.steady_state["one_time_launch_ns"]
    assert 6.5 * MS < lazy < 6.6 * MS          # one hipLaunchKernel, lazily loaded
    assert ev["one_time_apart_ns"] == lazy
    assert ev["scores_ns"]["launch"] == a.facts.figures["cause_ns"]["launch"] - lazy
    fused = next(x for x in v["actions"] if x["id"] == "foreach_to_fused")
    assert fused["basis"] == "bound" and fused["saves_ns"] == ev["scores_ns"]["launch"]
    assert fused["saves_ns"] < 0.5 * MS        # was 6.9 ms: the lazy load priced per step
    assert all((x["saves_ns"] or 0) < lazy for x in v["actions"])
    # a larger batch, per sample, gives back no more than the steady lost time and the GPU's
    # work (it was 4.67 ms: half the lazy load counted as a per-sample saving)
    batch = next(x for x in v["actions"] if x["id"] == "larger_batch")
    assert batch["per_sample_x"] == 2.0
    assert batch["saves_ns"] <= ev["lost_ns"] + ev["busy_ns"]
    assert "kept apart" in v["summary"]


def test_first_call_times_are_exact_ns_since_the_epoch():
    """Kineto and nsys ts are ns since the epoch (~1.8e18, past 2**53): a slow first call's
    start and length are the event's own integers, not rounded through float64 (256 ns)."""
    import numpy as np
    import pandas as pd

    from traceread.passes import steady as S

    t0 = 1_795_417_141_613_637_393            # odd: float64 cannot hold it
    first = 50 * S.OUTLIER_MIN_NS + 1
    ts = [t0] + [t0 + 10 ** 9 * (i + 1) + 7 for i in range(S.FIRST_MIN_LATER + 2)]
    dur = [first] + [S.OUTLIER_MIN_NS // 10 + 3] * (S.FIRST_MIN_LATER + 2)
    ev = pd.DataFrame({"ts": np.array(ts, np.int64), "dur": np.array(dur, np.int64),
                       "pid": 1, "name": pd.Categorical(["aten::mm"] * len(ts))})
    codes, cats = S._codes(ev)
    items = S._first_calls(ev, np.ones(len(ev), bool), "first call", codes, cats)
    assert [(x["start_ns"], x["ns"]) for x in items] == [(t0, first)]
