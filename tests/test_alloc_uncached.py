"""Device frees inside ops that release tensors mean the caching allocator is off; frees from
empty_cache() (no op around them, or the empty_cache frame) keep the empty_cache lever."""
from __future__ import annotations

from conftest import corpus_or_skip

from traceread import load
from traceread.analysis import analyze
from traceread.passes.context import allocator_uncached
from traceread.synth.scenarios import TraceBuilder

MS = 1_000_000
US = 1_000
UNCACHED = "turn PyTorch's caching allocator back on"
EMPTY_CACHE = "remove torch.cuda.empty_cache() from the loop"


def _churn(frees_inside: str | None, steps: int = 30) -> TraceBuilder:
    """A kernel per step, then 3 ms of cudaMalloc + cudaFree before the next launch; each free
    inside the op ``frees_inside`` (None: at top level, as empty_cache() leaves it)."""
    b = TraceBuilder()
    t = 0
    for k in range(steps):
        b.step(k, t, 4 * MS)
        b.op_with_kernel("aten::mm", t, 30 * US, 5 * US, 10 * US, t + 20 * US, 500 * US,
                         name="ampere_sgemm_128x64_nn")
        b.cpu("aten::empty", t + 100 * US, 1600 * US)
        b.runtime("cudaMalloc", t + 120 * US, 1500 * US)
        if frees_inside:
            b.cpu(frees_inside, t + 1800 * US, 1600 * US)
        b.runtime("cudaFree", t + 1820 * US, 1500 * US)
        t += 4 * MS
    return b


def test_frees_inside_backward_ops_mean_caching_is_off():
    a = analyze(_churn("autograd::engine::evaluate_function: ReluBackward0").build())
    assert a.context["allocator_uncached"] is True
    assert a.verdict["levers"][0].startswith(UNCACHED)
    assert not any(EMPTY_CACHE in lv for lv in a.verdict["levers"])


def test_frees_from_empty_cache_keep_the_empty_cache_lever():
    for inside in (None, "torch/cuda/memory.py(222): empty_cache"):
        a = analyze(_churn(inside).build())
        assert a.context["allocator_uncached"] is False
        assert EMPTY_CACHE in a.verdict["levers"][0]


def test_frees_inside_an_allocation_are_retries_not_uncached():
    assert allocator_uncached(_churn("aten::empty_strided").build().events) is False


def test_real_rocm_capture_without_the_allocator_pool():
    # TraceLens' MI300X DDP resnet18 "no_pool" run: hipMalloc inside aten::empty, hipFree as
    # backward functions end and in zero_grad -- 1,360 frees, none from empty_cache
    f = corpus_or_skip() / "AMD-AGI__TraceLens/tests/traces/mi300/ddp_resnet18_no_pool/" \
        "train_resnet18.json.gz"
    a = analyze(load(f))
    assert a.verdict["bound"] == "host"
    assert a.context["allocator_uncached"] is True
    assert a.verdict["levers"][0].startswith(UNCACHED)


def test_real_h100_empty_cache_capture_is_not_uncached(fixtures_dir):
    a = analyze(load(fixtures_dir / "gpu" / "alloc.bad.json.gz"))
    assert a.context["allocator_uncached"] is False
    assert EMPTY_CACHE in a.verdict["levers"][0]
