"""What a capture cannot show, said in the program's own terms: PyTorch's recording options
only for a PyTorch program (pipit's CloverLeaf, a Fortran/CUDA code under nsys, was told to
record with --pytorch=autograd-nvtx)."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip
from traceread.verdict.decision import missing

CLOVER = "hpcgroup__pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"


def test_pytorch_programs_are_told_pytorchs_options():
    said = missing({"nsys_no_framework_ranges": True}, pytorch=True)
    assert len(said) == 1 and "--pytorch=autograd-nvtx" in said[0]
    said = missing({"nsys_host_untraced": True}, pytorch=True)
    assert "torch.profiler" in said[0]


def test_other_programs_are_told_to_mark_their_phases():
    for flag in ("nsys_no_framework_ranges", "nsys_host_untraced"):
        said = missing({flag: True}, pytorch=False)
        assert len(said) == 1 and "nvtxRangePush" in said[0] and "pytorch" not in said[0].lower()
    assert missing({}, pytorch=False) == []


def test_cloverleaf_is_not_told_about_pytorch():
    p = corpus_or_skip() / CLOVER
    if not p.is_file():
        pytest.skip("CloverLeaf export not in the corpus")
    v = analysed(p).verdict
    assert v["missing"] and all("pytorch" not in m.lower() for m in v["missing"])


def test_attention_figure_is_said_as_fused_kernels():
    # TraceLens' timesformer (unfused attention: GEMMs + softmax) read "attention 0 ns" beside
    # a 68.8 ms fused-attention saving
    from traceread.render.words import fact_words

    assert fact_words({"fact": "attention_ns", "value": 0}) == "no fused attention kernel runs"
    assert fact_words({"fact": "attention_ns", "value": 2_500_000}) == \
        "fused attention kernels 2.5 ms"


def test_a_step_paced_by_a_waiting_queue_is_not_called_gpu_bound():
    # sglang decode on MI300: the GPU busy 9.8 ms of a 474 ms step, its queued kernels held by
    # a hipStreamWaitEvent -- the step is the GPU's timeline, but not busy kernels
    from traceread.render.report import program_step_line

    p = corpus_or_skip() / ("AMD-AGI__TraceLens/tests/traces/inference/sglang_decode/"
                            "sglang_Qwen3-8B_decode.json.gz")
    if not p.is_file():
        pytest.skip("sglang decode trace not in the corpus")
    line = " ".join(program_step_line(analysed(p)).split())
    assert "paced by the GPU's queue, busy only 2% of it" in line and "GPU-bound" not in line


def test_the_busy_share_in_the_verdict_is_the_device_tables():
    # MTIA inference: 94.5% busy in the device table; the verdict said "GPU busy 92.1%",
    # the share without its exposed copies, under the same words
    import re

    from conftest import analysed, corpus_or_skip

    a = analysed(corpus_or_skip() / "facebookresearch__HolisticTraceAnalysis/tests/data/"
                 "mtia_inference_trace/mtia_inference_rank_0.json.gz")
    d = a.devices.iloc[0]
    said = float(re.search(r"GPU busy ([\d.]+)%", a.verdict["summary"]).group(1))
    assert abs(said - 100 * d["busy_ns"] / d["window_ns"]) < 0.06
    assert "without the exposed copies" in a.verdict["summary"]


def test_a_device_neither_nvidia_nor_amd_gets_no_ncu_or_rocprof():
    from traceread.verdict.levers import _tune_kernel_text

    c = {"top_kernel": {"name": "merge", "pct": 84.5}, "device_name": "ARTEMIS"}
    words = _tune_kernel_text(c)
    assert "ncu" not in words and "rocprof" not in words and "ARTEMIS" in words
    both = _tune_kernel_text({"top_kernel": {"name": "merge", "pct": 84.5}})
    assert "ncu" in both and "rocprof-compute" in both
    assert "rocprof" not in _tune_kernel_text({**c, "device_name": "NVIDIA H100"})


def test_a_busy_gpu_the_host_paces_gets_no_kernel_saving_it_cannot_give():
    # nsys-ai's "healthy" export: 1 ms kernels launched every 1.01 ms, each just in time
    # (397 of 397 gaps starved, the critical path 99.5% host): 99% busy, yet faster kernels
    # leave the loop at the host's pace -- the compile lever's bound promised 99 ms (24.7%)
    from conftest import analysed, corpus_or_skip

    a = analysed(corpus_or_skip() / "GindaChen__nsys-ai/tests/fixtures/healthy_1pct.sqlite")
    assert "the host paces it" in a.verdict["summary"]
    assert not [x for x in a.verdict["actions"] if x.get("saves_ns")]
    # where the replay prices a kernel lever, the bounds of the others keep to its scale
    j = analysed(corpus_or_skip() / "GindaChen__nsys-ai/tests/fixtures/healthy_judged_1pct.sqlite")
    acts = {x["id"]: x for x in j.verdict["actions"]}
    assert acts["compile_pointwise"]["saves_ns"] <= acts["tf32"]["saves_ns"]


def test_the_host_pace_is_not_claimed_from_a_profiled_host():
    # h200/queue.fixed: the profiler's own cost makes the host pace the profiled run (33% of
    # the path GPU work); the plain run is GPU-paced (11.58 ms a step for ~11.1 ms of GPU work)
    from conftest import FIXTURES, analysed

    a = analysed(FIXTURES / "h200" / "queue.fixed.json.gz")
    assert "the host paces it" not in a.verdict["summary"]


def test_a_templated_kernel_proof_names_its_functor():
    """The training evidence of a GPU-only MI210 trace is a backward kernel; cut at 40
    characters it read "void at::native::elementwise_kernel_manu...", hiding what proves
    a backward. It names the functor the kernel runs."""
    from traceread.render.words import _proof

    k = ("void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_"
         "nocast<at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::"
         "{lambda()#1}::operator()() const::{lambda(float, float, float)#1}>(at::TensorIterator"
         "&, at::native::mse_backward_cuda_kernel const&)::{lambda(int)#1}>(int, int)")
    said = _proof({"evidence": [{"name": k}]}, True)
    assert said == " (seen: mse_backward_cuda_kernel in elementwise_kernel_manual_unroll)"
    assert _proof({"evidence": [{"name": "aten::mse_loss_backward"}]}, True) == \
        " (seen: aten::mse_loss_backward)"
