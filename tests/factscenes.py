"""Synthetic programs with planted facts for tests/test_newfacts.py and the lever matrix.

Each builder returns a ``Trace`` whose facts are known by construction: how many blocking
calls a step makes and where, what each host<->device copy carries, the GEMM precision,
convolution or attention operators, a periodic checkpoint stall.
"""
from __future__ import annotations

from traceread.synth.scenarios import MS, T0, US, TraceBuilder

FP16_GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
F32_GEMM = "ampere_sgemm_128x64_tn"
CUDNN_SDPA = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1"
CONV_KERNEL = "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc"
NCHW_TO_NHWC = ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, "
                "true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t"
                "<float>, float const*, float*)")
STEP = 10 * MS


def _kernels(b: TraceBuilder, t: int, n: int, name: str = BF16_GEMM, op: str = "aten::mm",
             kdur: int = 300 * US) -> int:
    """``n`` ops of 100 us each from ``t``, each launching one kernel that runs right after;
    returns the host time after them."""
    for i in range(n):
        o = t + i * 100 * US
        b.op_with_kernel(op, o, 100 * US, 20 * US, 10 * US, o + 40 * US, kdur, name=name)
    return t + n * 100 * US


def _copy(b: TraceBuilder, op: str, t: int, direction: str, nbytes: int, sync: bool = False,
          pageable: bool = False) -> None:
    """``op`` at ``t`` (1 ms) making one cudaMemcpyAsync of ``nbytes`` (and a stream sync)."""
    b.cpu(op, t, MS)
    mem = "Pageable" if pageable else "Pinned"
    name = f"Memcpy {direction} ({'Device -> ' + mem if direction == 'DtoH' else mem + ' -> Device'})"
    b.launch(t + 50 * US, 20 * US, t + 80 * US, 200 * US, name=name, api="cudaMemcpyAsync",
             kind="memcpy", copy_kind=direction, bytes=nbytes)
    if sync:
        b.runtime("cudaStreamSynchronize", t + 100 * US, 300 * US)


def moe_nonzero(steps: int = 3, experts: int = 4):
    """Per step, ``experts`` x (an expert GEMM, then ``aten::nonzero``: a 8-byte DtoH copy and
    cudaStreamSynchronize inside); GPU work follows each nonzero: every one splits the step."""
    b = TraceBuilder(path="moe_nonzero.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        for e in range(experts):
            t = s + e * 2 * MS
            _kernels(b, t, 2)
            _copy(b, "aten::nonzero", t + 500 * US, "DtoH", 8, sync=True)
        _kernels(b, s + experts * 2 * MS, 2)   # the experts' outputs combined
    return b.build()


def tail_item(steps: int = 3, ops: int = 40):
    """Launch-bound steps of tiny kernels ending with ``loss.item()`` after the last launch:
    the work before it is one capturable region."""
    b = TraceBuilder(path="tail_item.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        t = _kernels(b, s, ops, name="void elementwise_kernel<128, 2>(int)", op="aten::add",
                     kdur=5 * US)
        b.cpu("aten::item", t + 100 * US, 2 * MS)
        _copy(b, "aten::_local_scalar_dense", t + 200 * US, "DtoH", 4, sync=True)
    return b.build()


def copies(kind: str, steps: int = 3, tail: bool = False):
    """One 64 MiB HtoD copy at each step's start, then GEMMs. ``kind``: "input" (after a
    DataLoader fetch), "resent" (the same tensor: nothing computed before it), "fresh"
    (aten::randn on the host first: new data each step). ``tail``: a kernel launched at the
    step's start, before the fetch (the previous iteration's last op, as where the steps
    are inferred from the optimizer)."""
    b = TraceBuilder(path=f"copy_{kind}.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        if tail:
            _kernels(b, s + 10 * US, 1)
        t = s + (200 if tail else 100) * US
        if kind == "input":
            b.cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, MS)
            t += MS
        elif kind == "fresh":
            b.cpu("aten::randn", t, MS)
            t += MS
        _copy(b, "aten::to", t + 100 * US, "HtoD", 64 << 20)
        _kernels(b, t + 2 * MS, 10)
    return b.build()


def checkpoint(steps: int = 6, every: int = 3):
    """Steps of GEMMs; every ``every``-th step (2, 5) also saves a checkpoint: a user frame
    ``train.py(50): save_checkpoint`` > ``torch/serialization.py(944): save`` > the pybind
    ``write_record`` descriptor, with 4 DtoH copies of 16 MiB and 60 ms of writing."""
    b = TraceBuilder(path="checkpoint.json")
    t = T0
    for k in range(steps):
        dur = STEP + (60 * MS if k % every == every - 1 else 0)
        b.step(k, t, dur)
        _kernels(b, t + 100 * US, 20)
        if k % every == every - 1:
            c = t + 5 * MS
            b.cpu("multiprocessing/spawn.py(122): spawn_main", t, dur, kind="python")
            b.cpu("train.py(50): save_checkpoint", c, 62 * MS, kind="python")
            b.cpu("torch/serialization.py(944): save", c + 100 * US, 61 * MS, kind="python")
            for i in range(4):
                _copy(b, "aten::copy_", c + 200 * US + i * 1200 * US, "DtoH", 16 << 20, sync=True)
            b.cpu("<built-in method write_record of pybind11_builtins.pybind11_detail_function_"
                  "record_v1 object at 0x7f8a889fad30>", c + 6 * MS, 54 * MS, kind="python")
        t += dur
    return b.build()


def offload(steps: int = 3, params: int = 4):
    """Forward GEMMs, a backward op with a kernel, ``params`` DtoH gradient copies (4 MiB),
    ``Optimizer.step#AdamW.step`` doing aten::add_ on CPU tensors (no launch, 20 ms), then
    ``params`` HtoD parameter copies."""
    b = TraceBuilder(path="offload.json")
    step = 40 * MS
    for k in range(steps):
        s = T0 + k * step
        b.step(k, s, step)
        t = _kernels(b, s + 100 * US, 5)
        b.op_with_kernel("autograd::engine::evaluate_function: AddmmBackward0", t, 200 * US,
                         20 * US, 10 * US, t + 40 * US, 300 * US, name=BF16_GEMM)
        t += 300 * US
        for i in range(params):
            _copy(b, "aten::copy_", t + i * 1100 * US, "DtoH", 4 << 20, sync=True)
        t += params * 1100 * US + 100 * US
        b.cpu("Optimizer.step#AdamW.step", t, 20 * MS, kind="annotation")
        for i in range(2 * params):
            b.cpu("aten::add_", t + 100 * US + i * 2 * MS, MS)
        t += 20 * MS + 100 * US
        for i in range(params):
            _copy(b, "aten::copy_", t + i * 1100 * US, "HtoD", 4 << 20)
    return b.build()


def gemms(name: str, steps: int = 3):
    """Steps of GEMMs of one kernel name (precision by name)."""
    b = TraceBuilder(path="gemms.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        _kernels(b, s + 100 * US, 20, name=name, kdur=400 * US)
    return b.build()


def attention_only(steps: int = 3):
    """SDPA ops running cuDNN's fused attention kernels (names with 'fprop'): no convolution
    operator anywhere."""
    b = TraceBuilder(path="attention.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        for i in range(4):
            o = s + 100 * US + i * 500 * US
            b.cpu("aten::scaled_dot_product_attention", o, 400 * US,
                  input_dims="[[8, 16, 512, 64], [8, 16, 512, 64], [8, 16, 512, 64], [], [], [], [], []]")
            b.op_with_kernel("aten::_scaled_dot_product_cudnn_attention", o + 50 * US, 300 * US,
                             20 * US, 10 * US, o + 100 * US, 400 * US, name=CUDNN_SDPA)
        _kernels(b, s + 3 * MS, 5)
    return b.build()


def convolution(steps: int = 3, nchw: bool = False):
    """aten::convolution > aten::cudnn_convolution launching an NHWC implicit-GEMM kernel;
    ``nchw``: on NCHW tensors, cuDNN's layout conversion kernel before it."""
    b = TraceBuilder(path="conv.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        for i in range(4):
            o = s + 100 * US + i * 500 * US
            b.cpu("aten::convolution", o, 400 * US)
            if nchw:
                b.op_with_kernel("aten::cudnn_convolution", o + 20 * US, 20 * US, 5 * US, 5 * US,
                                 o + 60 * US, 30 * US, name=NCHW_TO_NHWC)
            b.op_with_kernel("aten::cudnn_convolution", o + 50 * US, 300 * US, 20 * US, 10 * US,
                             o + 100 * US, 400 * US, name=CONV_KERNEL)
    return b.build()


def two_processes(steps: int = 3):
    """Kernels of a second process on the same device."""
    b = TraceBuilder(path="two_procs.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        _kernels(b, s + 100 * US, 5)
        b.launch(s + 3 * MS, 10 * US, s + 3 * MS + 20 * US, 2 * MS, pid=777, tid=777,
                 name=BF16_GEMM)
    return b.build()


def compiled(graphs: bool = False, steps: int = 3):
    """A torch.compile'd step (its region annotation, Triton kernels); ``graphs``: mode=
    "reduce-overhead" -- the CUDA graph trees frame and a cudaGraphLaunch each step."""
    b = TraceBuilder(path="compiled.json")
    for k in range(steps):
        s = T0 + k * STEP
        b.step(k, s, STEP)
        b.cpu("Torch-Compiled Region: 0/0", s + 50 * US, 5 * MS, kind="annotation")
        if graphs:
            b.cpu("torch/_inductor/cudagraph_trees.py(1000): run", s + 60 * US, 4 * MS,
                  kind="python")
            b.launch(s + 100 * US, 20 * US, s + 150 * US, 3 * MS, api="cudaGraphLaunch",
                     name="triton_poi_fused_add_0")
        else:
            _kernels(b, s + 100 * US, 30, name="triton_poi_fused_add_mul_0", kdur=20 * US)
    return b.build()


def launch_steps(steps: int = 3, ops: int = 200, lazy_ns: int = 0):
    """Back-to-back ops of 40 us launching 5 us kernels (launch-bound); ``lazy_ns``: the very
    first launch also loads the module lazily (cuModuleLoadData inside it) and takes that long."""
    b = TraceBuilder(path="launch_steps.json")
    t = T0 + 100 * US
    for k in range(steps):
        b.step(k, t, ops * 40 * US + (lazy_ns if k == 0 else 0))
        for i in range(ops):
            extra = lazy_ns if (k == 0 and i == 0) else 0
            b.cpu("aten::add", t, 40 * US + extra)
            if extra:
                b.add("driver", "cuModuleLoadData", t + 20 * US, extra, cat="cuda_driver",
                      pid=b.pid, tid=b.tid)
            b.launch(t + 20 * US, 15 * US + extra, t + 40 * US + extra, 5 * US,
                     name="void elementwise_kernel<128, 2>(int)")
            t += 40 * US + extra
    return b.build()
