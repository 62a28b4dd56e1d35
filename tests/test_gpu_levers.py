"""GPU-bound levers follow the busy time: no precision advice without GEMMs, no torch.compile
advice for code already made of Triton kernels, and one dominant kernel is the first lever."""
from __future__ import annotations

from traceread.analysis import analyze
from traceread.verdict import levers as L
from traceread.verdict.levers import kernel_base_name as _kernel_base_name
from traceread.synth.scenarios import TraceBuilder

MS = 1_000_000
US = 1_000
PRECISION = ("autocast", "TF32", "tensor-core precision")


def _dense(names: list[str], steps: int = 4) -> TraceBuilder:
    """Kernels back to back (2 us bubbles), launched far ahead; one sync per step."""
    b = TraceBuilder()
    s, g = 0, 100 * US
    for k in range(steps):
        n = 30
        b.step(k, s, g + n * (2 * MS + 2 * US) - s)
        for i in range(n):
            b.op_with_kernel("aten::op", s + i * 20 * US, 20 * US, 5 * US, 10 * US,
                             g + i * (2 * MS + 2 * US), 2 * MS, name=names[i % len(names)])
        b.runtime("cudaDeviceSynchronize", s + n * 20 * US + 10 * US,
                  g + n * (2 * MS + 2 * US) - (s + n * 20 * US + 10 * US))
        s = g + n * (2 * MS + 2 * US)
        g = s + 50 * US
    return b


def test_one_custom_kernel_is_the_lever_and_no_precision_advice():
    a = analyze(_dense(["void ns::stencil<float, 4>(float const*, float*, int)"]).build())
    assert a.verdict["bound"] == "gpu"
    levers = a.verdict["levers"]
    assert levers[0].startswith("tune the kernel that takes 100% of GPU time, stencil")
    assert "ncu --kernel-name stencil --set full" in levers[0]
    assert not any(p in lv for lv in levers for p in PRECISION), levers


def test_triton_code_is_not_told_to_compile():
    names = [f"triton_poi_fused_add_mul_{i}" for i in range(4)]
    a = analyze(_dense(names).build())
    assert a.verdict["bound"] == "gpu"
    text = " ".join(a.verdict["levers"])
    assert "torch.compile for kernel fusion" not in text
    assert "tune the kernel" not in text  # none of the four fills most of the time
    assert not any(p in text for p in PRECISION)


def test_gemm_heavy_keeps_precision_advice():
    a = analyze(_dense(["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>()"])
                .build())
    assert a.verdict["bound"] == "gpu"
    assert any("TF32" in lv or "autocast" in lv for lv in a.verdict["levers"]), a.verdict["levers"]


def test_kernel_base_name_is_what_ncu_matches():
    assert _kernel_base_name("void ns::k<float, cutlass::X<2>>(float*, int)") == "k"
    assert _kernel_base_name("test2(double *, unsigned long long)") == "test2"
    assert _kernel_base_name("triton_poi_fused_0") == "triton_poi_fused_0"
    assert _kernel_base_name("void at::native::(anonymous namespace)::f<4>()") == "f"


def _dominant_kernel(names: list[str], pcts: list[float], device: str) -> str | None:
    """The tune-the-kernel lever the table offers a GPU-bound trace, or None."""
    ctx = {"bound": "gpu", "device_name": device,
           "top_kernel": {"name": names[0], "pct": pcts[0], "names": names}}
    return next((lv.words(ctx) for lv in L.rows("gpu", ctx) if lv.id == "tune_kernel"), None)


def test_the_kernel_profiler_follows_the_vendor():
    k = (["void ns::k<float>(float*)", "other"], [70.0, 30.0])
    assert "ncu --kernel-name k " in _dominant_kernel(*k, "NVIDIA H100 80GB HBM3")
    assert "rocprof-compute profile -k k" in _dominant_kernel(*k, "AMD Instinct MI300X")
    both = _dominant_kernel(*k, "")
    assert "ncu" in both and "rocprof-compute" in both
    assert "rocprof-compute" in _dominant_kernel(["gemm_x", "Cijk_Alik_Bljk_BBS"], [60.0, 40.0], "")
    assert _dominant_kernel(k[0], [49.0, 51.0], "") is None
