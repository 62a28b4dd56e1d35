"""The program context (passes/program.py): one test per key and detector on planted events,
then the real traces the rules were written against (issue 20, items 3 and 4)."""
from __future__ import annotations

import pandas as pd
import pytest

from traceread.passes.context import trace_context
from traceread.synth.scenarios import MS, T0, US, TraceBuilder
from traceread.table import TraceMeta

KERNEL_BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"


def ctx_of(b: TraceBuilder, meta: TraceMeta | None = None, **cols) -> dict:
    tr = b.build()
    ev = tr.events
    for k, v in cols.items():   # columns the builder writes only as integers
        ev = ev.copy()
        ev[k] = pd.Categorical(v)
    return trace_context(ev, meta if meta is not None else tr.meta)


def steps(b: TraceBuilder, n: int = 3, period: int = 10 * MS) -> list[int]:
    """``n`` ProfilerStep spans; returns their start times."""
    starts = [T0 + i * period for i in range(n)]
    for i, t in enumerate(starts):
        b.step(i, t, period - MS)
    return starts


# ------------------------------------------------------------------ framework

@pytest.mark.parametrize("name,kind,fw", [
    ("DistributedDataParallel.forward", "annotation", "ddp"),
    ("torch.distributed.ddp.reducer::copy_bucket_to_grad", "cpu_op", "ddp"),
    ("FullyShardedDataParallel._pre_forward", "annotation", "fsdp1"),
    ("FSDP::pre_forward (layers.0)", "annotation", "fsdp2"),
    ("fsdp::all_gather_copy_in", "cpu_op", "fsdp2"),
    ("deepspeed/runtime/engine.py(1899): forward", "python", "deepspeed"),
    ("megatron/core/pipeline_parallel/schedules.py(312): forward_step", "python", "megatron"),
    ("torchrec/distributed/embeddingbag.py(812): compute", "python", "torchrec"),
    ("vllm::unified_attention_with_output", "cpu_op", "vllm"),
    ("sglang_profiler::rmsnorm_rmsnorm2d_fwd_109", "cpu_op", "sglang"),
    ("torch/distributed/tensor/_api.py(400): redistribute", "python", "dtensor"),
    ("PP:0F1", "annotation", "pipelining"),
    ("NEGOTIATE_ALLREDUCE", "other", "horovod"),
])
def test_framework_from_its_own_names(name, kind, fw):
    b = TraceBuilder()
    b.cpu(name, T0, MS, kind=kind)
    c = ctx_of(b)
    assert c["framework"] == [fw]
    assert c["framework_evidence"] == {fw: name}


@pytest.mark.parametrize("name,kind", [
    ("transformers/pipelines/base.py(1266): forward", "python"),   # not pipeline parallelism
    ("void cudnn::ops::scalePackedTensor_kernel<float, float>(long, float*, float)", "kernel"),
    ("aten::scaled_dot_product_attention", "cpu_op"),
])
def test_framework_not_from_look_alike_names(name, kind):
    b = TraceBuilder()
    if kind == "kernel":
        b.gpu(name, T0, MS)
    else:
        b.cpu(name, T0, MS, kind=kind)
    assert ctx_of(b)["framework"] == []


def test_torchrec_from_fbgemm_tbe_only_with_all_to_all():
    tbe = "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"
    b = TraceBuilder()
    b.cpu(tbe, T0, MS)
    assert ctx_of(b)["framework"] == []
    b.cpu("record_param_comms", T0 + 2 * MS, MS, collective="all_to_all")
    c = ctx_of(b)
    assert c["framework"] == ["torchrec"] and c["framework_evidence"]["torchrec"] == tbe


def test_vllm_kernels_under_sglang_do_not_make_it_vllm():
    b = TraceBuilder()
    b.cpu("sglang::store_cache", T0, MS)
    b.gpu("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*)", T0, MS)
    assert ctx_of(b)["framework"] == ["sglang"]
    k = TraceBuilder()   # no host rows at all (nsys without NVTX): the kernels name it
    k.gpu("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*)", T0, MS)
    assert ctx_of(k)["framework"] == ["vllm"]


# ------------------------------------------------------------------ collectives, backend

def test_collectives_from_column_and_call_names():
    b = TraceBuilder()
    b.cpu("record_param_comms", T0, MS, collective="all_reduce")
    b.cpu("gloo:all_gather", T0 + MS, MS, kind="annotation")
    b.cpu("c10d::barrier", T0 + 2 * MS, MS)
    b.cpu("c10d::send", T0 + 3 * MS, MS)
    b.cpu("aten::gather", T0 + 4 * MS, MS)        # an indexing op, not a collective
    c = ctx_of(b)
    assert c["collectives"] == ["all_gather", "all_reduce", "barrier", "send_recv"]
    assert c["collectives_evidence"]["all_reduce"] == "record_param_comms"
    assert c["collectives_evidence"]["all_gather"] == "gloo:all_gather"


def test_sendrecv_kernel_beside_all_to_all_is_that_all_to_all():
    b = TraceBuilder()
    b.cpu("nccl:all_to_all", T0, MS, kind="annotation")
    b.gpu("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", T0, MS)
    assert ctx_of(b)["collectives"] == ["all_to_all"]
    p2p = TraceBuilder()
    p2p.gpu("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", T0, MS)
    assert ctx_of(p2p)["collectives"] == ["send_recv"]


def test_comm_backend_nccl_rccl_gloo_and_none():
    nccl = TraceBuilder()
    nccl.launch(T0, US, T0 + US, MS, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    c = ctx_of(nccl)
    assert (c["comm_backend"], c["collectives"]) == ("nccl", ["all_reduce"])
    amd = TraceBuilder()
    amd.launch(T0, US, T0 + US, MS, name="ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
               api="hipExtLaunchKernel")
    amd.cpu("record_param_comms", T0, MS, collective="all_reduce")
    assert ctx_of(amd)["comm_backend"] == "rccl"
    gloo = TraceBuilder()
    gloo.cpu("gloo:all_reduce", T0, MS, kind="annotation")
    c = ctx_of(gloo)
    assert (c["comm_backend"], c["comm_backend_evidence"]) == ("gloo", "gloo:all_reduce")
    # the process group's backend when no call names it; nothing without collectives
    pg = TraceBuilder()
    pg.cpu("record_param_comms", T0, MS, collective="broadcast")
    meta = TraceMeta(format="kineto", distributed={"backend": "nccl"})
    assert ctx_of(pg, meta)["comm_backend"] == "nccl"
    none = TraceBuilder()
    none.cpu("aten::mm", T0, MS)
    assert ctx_of(none, meta)["comm_backend"] is None


# ------------------------------------------------------------------ optimizer, training

def _step_with(ops: list[str], name="Optimizer.step#Adam.step") -> TraceBuilder:
    b = TraceBuilder()
    b.cpu(name, T0, 10 * MS, kind="annotation")
    for i, op in enumerate(ops):
        b.cpu(op, T0 + (i + 1) * US * 10, US)
    return b


@pytest.mark.parametrize("ops,impl,evidence", [
    (["aten::_foreach_mul_", "aten::_foreach_add_"], "foreach", "aten::_foreach_mul_"),
    (["aten::_fused_adam_"], "fused", "aten::_fused_adam_"),
    (["aten::add_", "aten::mul_", "aten::addcdiv_"] * 4, "for_loop", "aten::add_"),
    ([], "unknown", "Optimizer.step#Adam.step"),
])
def test_optimizer_impl_from_the_ops_inside_its_step(ops, impl, evidence):
    o = ctx_of(_step_with(ops))["optimizer"]
    assert o == {"name": "Adam", "impl": impl, "evidence": evidence}


def test_optimizer_from_torch_optim_frames_and_fused_class():
    b = TraceBuilder()
    b.cpu("torch/optim/adamw.py(480): _multi_tensor_adamw", T0, MS, kind="python")
    assert ctx_of(b)["optimizer"] == {"name": "AdamW", "impl": "foreach",
                                      "evidence": "torch/optim/adamw.py(480): _multi_tensor_adamw"}
    c = ctx_of(_step_with(["aten::add_"], name="Optimizer.step#FusedAdam.step"))
    assert c["optimizer"]["impl"] == "fused" and c["fused_optimizer"] is True


def test_foreach_ops_outside_an_optimizer_step_are_not_an_optimizer():
    b = TraceBuilder()   # SGLang copies its CUDA-graph inputs with _foreach_copy_
    b.cpu("aten::_foreach_copy_", T0, MS)
    b.cpu("aten::_foreach_add_", T0 + 2 * MS, MS)
    c = ctx_of(b)
    assert c["optimizer"] is None and c["training"] is False and c["fused_optimizer"] is False


def test_foreach_op_on_another_thread_is_not_inside_the_step():
    b = _step_with([])
    b.cpu("aten::_foreach_add_", T0 + MS, US, tid=99)
    assert ctx_of(b)["optimizer"]["impl"] == "unknown"


@pytest.mark.parametrize("name,kind,train", [
    ("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", True),
    ("MulBackward0", "cpu_op", True),
    ("aten::convolution_backward", "cpu_op", True),
    ("Optimizer.zero_grad#SGD.zero_grad", "annotation", True),
    ("RegisterPostBackwardFunction, seq = 45395, op_id = 990642", "annotation", True),
    ("## optimizer ##", "annotation", False),   # a user label, not an optimizer
    ("vllm::unified_attention_with_output", "cpu_op", False),
])
def test_training_needs_backward_or_an_optimizer(name, kind, train):
    b = TraceBuilder()
    b.cpu(name, T0, MS, kind=kind)
    c = ctx_of(b)
    assert c["training"] is train
    assert (c["training_evidence"] == name) if train else c["training_evidence"] is None


def test_training_from_backward_kernels_alone():
    b = TraceBuilder()
    b.gpu("void flash::flash_bwd_dq_dk_dv_loop_kernel<Flash_bwd_kernel_traits>()", T0, MS)
    assert ctx_of(b)["training"] is True


# ------------------------------------------------------------------ torch.compile

@pytest.mark.parametrize("name,kind,compiled", [
    ("Torch-Compiled Region: 0/0", "cpu_op", True),
    ("CompiledFunction", "cpu_op", True),
    ("triton_poi_fused_add_mul_0", "kernel", True),
    ("torch/_inductor/output_code.py(460): __call__", "python", True),
    # checkpointing and optimizer.step run through dynamo's disable wrapper, uncompiled
    ("torch/_dynamo/eval_frame.py(738): _fn", "python", False),
    ("_fwd_kernel_stage1", "kernel", False),   # a hand-written Triton kernel
])
def test_compiled(name, kind, compiled):
    b = TraceBuilder()
    if kind == "kernel":
        b.gpu(name, T0, MS)
    else:
        b.cpu(name, T0, MS, kind=kind)
    c = ctx_of(b)
    assert c["compiled"] is compiled
    assert c["compiled_evidence"] == (name if compiled else None)


def test_compile_mode_graphs_from_graph_launch_inside_compiled_region():
    b = TraceBuilder()
    b.cpu("Torch-Compiled Region: 0/0", T0, MS)
    b.runtime("cudaGraphLaunch", T0 + 100 * US, 10 * US)
    c = ctx_of(b)
    assert c["compile_mode_graphs"] is True
    assert c["compile_mode_graphs_evidence"] == "cudaGraphLaunch inside a compiled region"
    out = TraceBuilder()   # a serving engine replays its own graph around compiled code
    out.cpu("Torch-Compiled Region: 0/0", T0, MS)
    out.runtime("cudaGraphLaunch", T0 + 2 * MS, 10 * US)
    assert ctx_of(out)["compile_mode_graphs"] is False
    trees = TraceBuilder()
    trees.cpu("CompiledFunction", T0, MS)
    trees.cpu("CUDAGraphNode.record (dynamo_timed)", T0 + 2 * MS, MS)
    assert ctx_of(trees)["compile_mode_graphs"] is True


# ------------------------------------------------------------------ dtypes

def _dtypes(*kernels: str) -> tuple[dict, dict]:
    b = TraceBuilder()
    for i, k in enumerate(kernels):
        b.gpu(k, T0 + i * MS, MS)
    c = ctx_of(b)
    return c["dtypes"], c["dtypes_evidence"]


def test_dtypes_from_gemm_and_attention_kernels():
    d, e = _dtypes(KERNEL_BF16, "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausal",
                   "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_sm100f")
    assert d == {"bf16": True, "fp16": False, "fp8": True, "fp4": True, "fp32_gemm": False,
                 "tf32": False}
    assert e["bf16"] == KERNEL_BF16


def test_ffma_gemm_is_fp32_not_tf32():
    k = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4"
    d, _ = _dtypes(k)
    assert d["fp32_gemm"] is True and d["tf32"] is False
    d, _ = _dtypes("ampere_tf32_s1688gemm_tf32_128x128_32x3_nn")
    assert d["tf32"] is True and d["fp32_gemm"] is False


def test_fp16_gemv_is_fp16_not_fp32():
    d, _ = _dtypes("void gemv2T_kernel_val<int, int, __half, __half, float, float, 128, 16>()")
    assert d["fp16"] is True and d["fp32_gemm"] is False and d["bf16"] is False


def test_dtypes_ignore_non_matrix_kernels_and_type_names():
    # an embedding kernel whose arguments mention fbgemm_gpu, a KV-cache write whose template
    # names vLLM's Fp8KVCacheDataType (0: auto), an elementwise fp16 kernel
    d, _ = _dtypes(
        "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, float>"
        "(at::GenericPackedTensorAccessor<int, 1ul>, fbgemm_gpu::FixedDivisor)",
        "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0>(__hip_bfloat16 const*)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>()",
        "void fbgemm_gpu::(anonymous namespace)::_get_FP8_qparam_cuda_kernel<float>(float const*)")
    assert not any(d.values())


def test_dtypes_from_matmul_input_types():
    b = TraceBuilder()
    b.cpu("aten::mm", T0, MS)
    b.cpu("aten::relu", T0 + MS, MS)
    c = ctx_of(b, input_type=['["c10::BFloat16","c10::BFloat16"]', '["float"]'])
    assert c["dtypes"]["bf16"] is True and c["dtypes_evidence"]["bf16"] == "aten::mm"
    assert c["dtypes"]["fp32_gemm"] is False       # relu's float input is not a GEMM
    f = TraceBuilder()
    f.cpu("aten::addmm", T0, MS)
    c = ctx_of(f, input_type=['["float","float","float"]'])
    assert c["dtypes"]["fp32_gemm"] is True


# ------------------------------------------------------------------ attention, convolutions

@pytest.mark.parametrize("name,kind,hit", [
    ("aten::_scaled_dot_product_flash_attention", "cpu_op", True),
    ("aten::_scaled_dot_product_attention_math", "cpu_op", False),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>()", "kernel", True),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "kernel", True),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>()", "kernel", False),
    ("create_flashinfer_kv_indices_triton", "kernel", False),
])
def test_fused_attention(name, kind, hit):
    b = TraceBuilder()
    b.gpu(name, T0, MS) if kind == "kernel" else b.cpu(name, T0, MS)
    assert ctx_of(b)["fused_attention"] is hit


@pytest.mark.parametrize("name,kind,hit", [
    ("aten::conv2d", "cpu_op", True),
    ("aten::cudnn_convolution", "cpu_op", True),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false>()", "kernel", True),
    ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "kernel", True),
    ("vllm::_typeConvert<c10::BFloat16>", "kernel", False),
    ("aten::linear", "cpu_op", False),
])
def test_convolutions(name, kind, hit):
    b = TraceBuilder()
    b.gpu(name, T0, MS) if kind == "kernel" else b.cpu(name, T0, MS)
    assert ctx_of(b)["convolutions"] is hit


# ------------------------------------------------------------------ torch version

def test_torch_version_from_the_format_era():
    b = TraceBuilder()
    b.cpu("aten::mm", T0, MS)
    assert ctx_of(b)["torch_version"] is None
    meta = TraceMeta(format="kineto", extra={"baseTimeNanoseconds": 1_700_000_000_000_000_000})
    c = ctx_of(b, meta)
    assert (c["torch_version"], c["torch_version_evidence"]) == (">=2.4", "baseTimeNanoseconds")
    old = TraceBuilder()
    old.cpu("aten::mm", T0, MS, cat="Operator")
    assert ctx_of(old)["torch_version"] == "1.8-1.9"
    exact = TraceMeta(format="kineto", extra={"pytorch_version": "2.5.1"})
    assert ctx_of(b, exact)["torch_version"] == "2.5.1"


# ------------------------------------------------------------------ syncs

def test_syncs_per_step_counts_local_scalar_dense():
    b = TraceBuilder()
    for t in steps(b, 3):
        for j in range(5):
            b.cpu("aten::item", t + j * MS, 100 * US)
            b.cpu("aten::_local_scalar_dense", t + j * MS + US, 90 * US)
    c = ctx_of(b)
    assert c["steps_seen"] == 3 and c["syncs_per_step"] == 5.0
    assert c["per_param_syncs"] is False          # no optimizer, no parameters seen


def test_per_param_syncs_inside_the_optimizer_step():
    b = TraceBuilder()
    for t in steps(b, 2):
        b.cpu("Optimizer.step#Adagrad.step", t + MS, 5 * MS, kind="annotation")
        for j in range(8):
            b.cpu("aten::_local_scalar_dense", t + MS + (j + 1) * 100 * US, 10 * US)
    c = ctx_of(b)
    assert c["syncs_per_step"] == 8.0 and c["per_param_syncs"] is True
    assert "Optimizer.step#Adagrad.step" in c["per_param_syncs_evidence"]


def test_per_param_syncs_from_the_parameter_count():
    def trace(syncs: int) -> dict:
        b = TraceBuilder()
        for t in steps(b, 2):
            for j in range(10):   # 10 parameters get a gradient each step
                b.cpu("torch::autograd::AccumulateGrad", t + j * 100 * US, 10 * US)
            for j in range(syncs):
                b.cpu("aten::_local_scalar_dense", t + 2 * MS + j * 100 * US, 10 * US)
        return ctx_of(b)
    assert trace(10)["per_param_syncs"] is True
    assert trace(4)["per_param_syncs"] is False    # 4 syncs for 10 parameters: not one each


# ------------------------------------------------------------------ DDP buffer broadcast

def test_ddp_buffer_broadcast_inside_ddp_forward_per_step():
    b = TraceBuilder()
    for t in steps(b, 2):
        b.cpu("DistributedDataParallel.forward", t, 5 * MS, kind="annotation")
        b.cpu("aten::flatten_dense_tensors", t + 100 * US, 200 * US)
        b.cpu("c10d::broadcast_", t + 300 * US, 100 * US)
        b.cpu("aten::unflatten_dense_tensors", t + 400 * US, 600 * US)
        b.cpu("aten::unflatten_dense_tensors", t + 6 * MS, MS)    # after the forward
    c = ctx_of(b)
    assert c["framework"] == ["ddp"]
    assert c["ddp_buffer_broadcast_ns"] == 900 * US
    plain = TraceBuilder()
    plain.cpu("aten::unflatten_dense_tensors", T0, MS)
    assert ctx_of(plain)["ddp_buffer_broadcast_ns"] == 0


def test_context_of_an_empty_window():
    b = TraceBuilder()
    b.cpu("aten::mm", T0, MS)
    tr = b.build()
    c = trace_context(tr.events.iloc[:0], tr.meta)
    assert c["framework"] == [] and c["optimizer"] is None and c["syncs_per_step"] == 0


def test_analyze_json_carries_the_context_and_validates():
    import json

    import msgspec

    from traceread import analyze, schema
    from traceread.render.json import analysis_to_dict

    b = TraceBuilder()
    for t in steps(b, 3):
        b.cpu("Optimizer.step#SGD.step", t + MS, 2 * MS, kind="annotation")
        b.cpu("aten::_foreach_add_", t + MS + 100 * US, 100 * US)
        b.op_with_kernel("aten::mm", t + 4 * MS, MS, 10 * US, 5 * US, t + 4 * MS + 50 * US, 2 * MS,
                         name=KERNEL_BF16)
    doc = json.loads(json.dumps(analysis_to_dict(analyze(b.build()))))
    c = msgspec.convert(doc["context"], schema.Context)
    assert c.optimizer.impl == "foreach" and c.dtypes.bf16 and c.training


# ------------------------------------------------------------------ real traces

def _real(path) -> dict:
    from traceread.readers import read

    t = read(path)
    return trace_context(t.events, t.meta)


TL = "AMD-AGI__TraceLens/tests/traces/"
HTA = "facebookresearch__HolisticTraceAnalysis/tests/data/"


@pytest.mark.corpus
def test_real_ddp_jobs(corpus_dir):
    c = _real(corpus_dir / HTA / "nccl_parser_config/nccl_data.json.gz")
    assert c["framework"] == ["ddp"] and c["comm_backend"] == "nccl"
    assert c["collectives"] == ["all_reduce", "broadcast"]
    assert c["optimizer"] == {"name": "SGD", "impl": "foreach", "evidence": "aten::_foreach_mul_"}
    # the buffer broadcast the issue measured: unflatten 22.5 ms a step, + flatten, broadcast
    assert 25_000_000 < c["ddp_buffer_broadcast_ns"] < 32_000_000
    assert c["convolutions"] and c["training"] and not c["compiled"]
    m = _real(corpus_dir / TL / "mi300/resnet_act_checkpoint.json.gz")
    assert m["framework"] == ["ddp"] and m["comm_backend"] == "rccl"
    assert m["optimizer"]["impl"] == "foreach" and m["dtypes"]["bf16"]
    assert m["compiled"] is False          # only dynamo's disable wrapper from checkpointing


@pytest.mark.corpus
def test_real_torchrec_all_to_all(corpus_dir):
    c = _real(corpus_dir / HTA / "trace_diff/test/test.json.gz")
    assert c["framework"] == ["ddp", "torchrec"]
    assert c["collectives"] == ["all_reduce", "all_to_all"]
    assert c["optimizer"]["impl"] == "fused"


@pytest.mark.corpus
@pytest.mark.parametrize("path,fw", [
    ("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "sglang"),
    ("inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz", "sglang"),
    ("inference/vllm_decode_full/graph_execution.json.gz", "vllm"),
    ("inference/vllm_prefilldecode_piecewise/graph_execution.json.gz", "vllm"),
])
def test_real_llm_inference(corpus_dir, path, fw):
    c = _real(corpus_dir / TL / path)
    assert c["framework"] == [fw]
    assert c["training"] is False and c["optimizer"] is None
    assert c["convolutions"] is False and c["fused_attention"] is True
    assert c["dtypes"]["bf16"] is True and c["compile_mode_graphs"] is False


@pytest.mark.corpus
def test_real_compiled_traces(corpus_dir):
    c = _real(corpus_dir / TL / "torch_compile_triton/trace.json.gz")
    assert c["compiled"] and c["fused_attention"] and c["dtypes"]["bf16"]
    b200 = _real(corpus_dir / TL / "b200/eager_trace.json.gz")
    assert b200["dtypes"]["fp8"] and b200["dtypes"]["fp4"]
    assert b200["collectives"] == ["all_gather", "all_reduce"]


@pytest.mark.corpus
def test_real_fsdp2_nsys(corpus_dir):
    c = _real(corpus_dir / "GindaChen__nsys-ai/tests/fixtures/h100_2gpu_1s.sqlite")
    assert c["framework"] == ["fsdp2"]
    m = _real(corpus_dir / "GindaChen__nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite")
    assert m["framework"] == ["fsdp2"] and m["training"]   # RegisterPostBackwardFunction
    assert m["comm_backend"] == "nccl"


def test_real_gloo_ddp(fixtures_dir):
    c = _real(fixtures_dir / "gloo" / "ddp2" / "rank-0.json.gz")
    assert c["framework"] == ["ddp"] and c["comm_backend"] == "gloo"
    assert c["collectives"] == ["all_gather", "all_reduce"]
    assert c["optimizer"]["impl"] == "for_loop" and c["training"]


def test_real_h100_captures(fixtures_dir):
    s = _real(fixtures_dir / "gpu" / "sync.bad.json.gz")
    assert s["syncs_per_step"] == 25.0 and s["per_param_syncs"] is False   # truth: 25 a step
    g = _real(fixtures_dir / "gpu" / "graphs.fixed.json.gz")
    assert g["compiled"] and g["compile_mode_graphs"]                       # reduce-overhead
    assert g["dtypes"]["fp32_gemm"] and not g["dtypes"]["tf32"]             # _ffma_ GEMM
    h = _real(fixtures_dir / "gpu" / "gpu.bad.json.gz")
    assert h["dtypes"]["bf16"] and h["framework"] == [] and h["collectives"] == []
