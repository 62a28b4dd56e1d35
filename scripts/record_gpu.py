"""Record real GPU captures with a planted cause, each next to its fixed twin, plus the truth.

    python3 scripts/record_gpu.py all OUT [--deadline-s 540] [--only a,b] [--no-nsys]
                                  (default: the first seven scenarios; graphs, alloc via --only)
    python3 scripts/record_gpu.py kineto SCENARIO VARIANT OUT     # one torch.profiler run
    python3 scripts/record_gpu.py plain SCENARIO VARIANT OUT      # one run, NVTX steps (under nsys)
    python3 scripts/record_gpu.py big OUT [--layers 24] [--steps 100]

Every scenario has a ``bad`` variant (the planted cause) and a ``fixed`` one (the lever pulled).
Each variant runs in a fresh process, once under torch.profiler (``schedule(wait=1, warmup=2,
active=3)``, ``<scenario>.<variant>.json.gz``) and, for ``all``, once more under Nsight Systems
as a whole-program capture with ``step_<i>`` NVTX ranges (``<scenario>.<variant>.sqlite``): CUPTI
takes one subscriber, so the two cannot watch the same process.

The truth is measured by the loop itself with ``time.perf_counter_ns`` and written beside each
trace as ``<scenario>.<variant>.<mode>.truth.json``: the wall time of every step and the time of
the planted thing (waiting on the DataLoader, inside ``.item()``, inside the pageable copy, in
Python, kernel launches per step, recompiles). The saving a lever really brings is the step time
of ``fixed`` minus that of ``bad``, measured, never taken from traceread.

``big`` records a long bf16 GPT-style training run (the issue-14 benchmark trace).
Made for the lent H100 (torch 2.11 CUDA 13, Nsight Systems 2025.3); see ../shared/gpu-recording.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

NSYS_DIR = Path("/opt/nvidia/nsight-compute/2025.3.1/host")
NSYS = NSYS_DIR / "target-linux-x64/nsys"
IMPORTER = NSYS_DIR / "linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
STEPS_PLAIN = 12          # whole-program runs: start-up + warm-up + steady steps
LOOP_FROM = 2             # the loop's time per step is timed from this step to the final sync
SCHEDULE = dict(wait=1, warmup=2, active=3)


def now() -> int:
    return time.perf_counter_ns()


# --------------------------------------------------------------------------- scenarios
# Each builder returns (step, truth): step(i) runs one training/inference step and adds the
# planted quantities of that step to truth["planted"][i].

def _mlp(torch, width: int, depth: int, dtype):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, dtype=dtype), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def sc_data(torch, variant: str, truth: dict):
    """DataLoader bound: 16 samples x 1 ms of Python per batch; fixed = 8 workers."""
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            time.sleep(0.001)
            return torch.full((4096,), float(i % 7))

    workers = 0 if variant == "bad" else 8
    loader = torch.utils.data.DataLoader(Slow(), batch_size=16, num_workers=workers,
                                         persistent_workers=workers > 0, pin_memory=True)
    it = iter(loader)
    model = _mlp(torch, 4096, 8, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x_pad = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)

    def step(i):
        t = now()
        batch = next(it)
        wait = now() - t
        xb = batch.cuda(non_blocking=True).to(torch.bfloat16)
        x = x_pad + xb.mean()
        for _ in range(4):
            loss = model(x).float().pow(2).mean()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        truth["planted"][i] = {"dataloader_wait_ns": wait}
    truth["what"] = f"DataLoader num_workers={workers}, 16 x 1 ms samples per batch"
    return step


def sc_sync(torch, variant: str, truth: dict):
    """A NaN check with .item() after every layer; fixed = one check per step."""
    model = _mlp(torch, 2048, 24, torch.bfloat16)
    x0 = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)

    def step(i):
        n, spent = 0, 0
        h = x0
        for layer in model:
            h = layer(h)
            if variant == "bad" and isinstance(layer, torch.nn.Linear):
                t = now()
                bad = torch.isnan(h).any().item()
                spent += now() - t
                n += 1
                if bad:
                    raise RuntimeError("nan")
        t = now()
        h.float().sum().item()
        spent += now() - t
        n += 1
        truth["planted"][i] = {"item_calls": n, "item_ns": spent}
    truth["what"] = ".item() after each of 24 Linear layers" if variant == "bad" \
        else "one .item() per step"
    return step


def sc_copy(torch, variant: str, truth: dict):
    """A 64 MiB host batch copied each step, pageable and blocking; fixed = pinned, prefetched
    on a side stream one step ahead (double buffered) so the copy overlaps the GEMMs."""
    nbytes = 64 << 20
    host = torch.randn(nbytes // 4)
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    bufs = [torch.empty(nbytes // 4, device="cuda") for _ in range(2)]
    ready = [None, None]
    if variant == "fixed":
        host = host.pin_memory()

    def prefetch(j):
        with torch.cuda.stream(side):
            bufs[j % 2].copy_(host, non_blocking=True)
            ready[j % 2] = torch.cuda.Event()
            ready[j % 2].record(side)

    def step(i):
        t = now()
        if variant == "bad":
            dev = host.to("cuda")
        else:
            if i == 0:
                prefetch(0)
            prefetch(i + 1)    # buffer (i+1)%2 was last read by step i-1, synced below
            torch.cuda.current_stream().wait_event(ready[i % 2])
            dev = bufs[i % 2]
        issued = now() - t
        a = dev[: 8192 * 2048].view(2048, 8192).to(torch.bfloat16)
        for _ in range(6):
            a = (a @ w).clamp_(-1, 1)
        a.sum().item()     # one sync per step in both variants
        truth["planted"][i] = {"copy_bytes": nbytes, "copy_call_ns": issued}
    truth["what"] = ("64 MiB pageable blocking HtoD copy per step" if variant == "bad"
                     else "64 MiB pinned HtoD copy prefetched on a side stream")
    return step


def sc_launch(torch, variant: str, truth: dict):
    """600 tiny elementwise kernels per step; fixed = the same ops replayed as one CUDA graph."""
    x = torch.randn(4096, device="cuda")
    ops = 600

    def body():
        y = x
        for _ in range(ops // 2):
            y = y * 1.0001
            y = y + 0.0001
        return y

    graph = None
    if variant == "fixed":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body()

    def step(i):
        if graph is None:
            out_ = body()
        else:
            graph.replay()
            out_ = out
        out_.sum().item()
        truth["planted"][i] = {"kernels_per_step": ops + 2,
                               "graph_replays": 0 if graph is None else 1}
    truth["what"] = f"{ops} tiny kernels per step" + (" in one CUDA graph" if graph else "")
    return step


def sc_host(torch, variant: str, truth: dict):
    """15 ms of Python bookkeeping per step after the GPU work is queued; fixed = none."""
    model = _mlp(torch, 4096, 6, torch.bfloat16)
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)

    def step(i):
        y = model(x)
        y.float().sum().item()
        t = now()
        if variant == "bad":
            _busy_python(15.0)
        truth["planted"][i] = {"python_ns": now() - t if variant == "bad" else 0}
    truth["what"] = "15 ms of Python after each step's sync" if variant == "bad" \
        else "no Python bookkeeping"
    return step


def sc_compile(torch, variant: str, truth: dict):
    """torch.compile fed a new batch size every step; fixed = dynamic=True."""
    import torch._dynamo
    torch._dynamo.config.cache_size_limit = 64
    model = _mlp(torch, 1024, 4, torch.float32)
    fn = torch.compile(model, dynamic=(variant == "fixed"))

    def step(i):
        from torch._dynamo.utils import counters
        before = counters["stats"]["unique_graphs"]
        x = torch.randn(64 + 8 * i, 1024, device="cuda")
        fn(x).sum().item()
        truth["planted"][i] = {"new_graphs": counters["stats"]["unique_graphs"] - before,
                               "batch": 64 + 8 * i}
    truth["what"] = "torch.compile, batch size changes every step" + \
        (" (dynamic=True)" if variant == "fixed" else " (dynamic=False)")
    return step


def sc_gpu(torch, variant: str, truth: dict):
    """GPU bound: large bf16 GEMMs (no lever; bad and fixed are the same)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step(i):
        c = a
        for _ in range(10):
            c = (c @ b).clamp_(-1, 1)
        c.sum().item()
        truth["planted"][i] = {"gemm_flop": 10 * 2 * 8192 ** 3}
    truth["what"] = "10 bf16 8192^3 GEMMs per step"
    return step


def sc_graphs(torch, variant: str, truth: dict):
    """torch.compile(mode="reduce-overhead", dynamic=True) fed a new batch size every step: the
    CUDA graph trees record a new graph each step; fixed = padded to one size, replayed."""
    import torch._dynamo
    torch._dynamo.config.cache_size_limit = 64
    model = _mlp(torch, 1024, 4, torch.float32)
    fn = torch.compile(model, mode="reduce-overhead", dynamic=True)

    def step(i):
        n = 64 + 8 * i if variant == "bad" else 256
        x = torch.randn(n, 1024, device="cuda")
        torch.compiler.cudagraph_mark_step_begin()
        fn(x).sum().item()
        truth["planted"][i] = {"batch": n}
    truth["what"] = ("reduce-overhead, batch size changes every step" if variant == "bad"
                     else "reduce-overhead, one padded batch size")
    return step


def sc_alloc(torch, variant: str, truth: dict):
    """torch.cuda.empty_cache() every step with 24 activations of 64 MiB: cudaFree and
    cudaMalloc every step; fixed = the caching allocator keeps its blocks."""
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def step(i):
        xs = [torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(24)]
        acc = xs[0][:, :4096] @ w
        for x in xs[1:]:
            acc = acc + x[:, :4096] @ w
        acc.float().sum().item()
        del xs, acc
        t = now()
        if variant == "bad":
            torch.cuda.empty_cache()
        truth["planted"][i] = {"empty_cache_ns": now() - t if variant == "bad" else 0}
    truth["what"] = ("torch.cuda.empty_cache() every step" if variant == "bad"
                     else "no empty_cache")
    return step


FINISH: list = []   # callbacks run after the loop and its final synchronize


def _busy_python(ms: float) -> int:
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += len(json.dumps({"k": n, "v": [n] * 8}))
    return n


def _gpt(torch, d: int, layers: int, heads: int):
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    return torch.nn.Sequential(*[Block() for _ in range(layers)]).cuda()


def sc_xformer(torch, variant: str, truth: dict):
    """GPU bound bf16 transformer training, no sync in the step (the host runs ahead of the
    GPU). Truth: the GEMM FLOPs of a step counted by hand, and the GPU time of each step
    between CUDA events (so MFU = FLOPs / GPU time / peak can be checked)."""
    d, layers, heads, b, s = 2048, 8, 16, 8, 2048
    model = _gpt(torch, d, layers, heads)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(b, s, d, device="cuda")
    tok = b * s
    # Linear GEMMs: qkv 3d^2, proj d^2, up 4d^2, down 4d^2 = 12 d^2 per token per layer;
    # forward 2 FLOP per MAC, backward twice the forward
    gemm = 3 * 2 * tok * 12 * d * d * layers
    # attention QK^T and PV, causal: flash kernels compute about half of the s x s square
    attn_full = 3 * 2 * 2 * b * s * s * d * layers
    ev = []

    def step(i):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        e1.record()
        ev.append((i, e0, e1))
        truth["planted"][i] = {"gemm_flop": gemm, "attention_flop_full_square": attn_full}

    def finish():   # after the loop's final synchronize: no sync inside the steps
        for j, a, z in ev:
            truth["planted"][j]["gpu_ms"] = a.elapsed_time(z)
    FINISH.append(finish)
    truth["what"] = (f"bf16 GPT block x{layers}, d={d}, batch {b}x{s}, fused AdamW; "
                     "no sync inside the step")
    return step


def sc_queue(torch, variant: str, truth: dict):
    """A deep queue of mid-size bf16 GEMMs, then torch.cuda.synchronize() every step (bad):
    the sync waits while the GPU works through a full queue, so removing it saves ~nothing;
    fixed = no per-step sync."""
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def step(i):
        c = a
        for _ in range(400):
            c = (c @ w).clamp_(-1, 1)
        t = now()
        if variant == "bad":
            torch.cuda.synchronize()
        truth["planted"][i] = {"sync_ns": now() - t if variant == "bad" else 0,
                               "gemms": 400}
    truth["what"] = ("400 queued 2048^3 bf16 GEMMs, torch.cuda.synchronize() per step"
                     if variant == "bad" else "400 queued GEMMs, no per-step sync")
    return step


def sc_pageable(torch, variant: str, truth: dict):
    """The loss copied to a *pageable* host tensor with non_blocking=True every step: CUDA
    makes a DtoH copy into pageable memory synchronous, so the 4-byte cudaMemcpyAsync blocks
    until the queued step drains; fixed = a pinned buffer, read one step later."""
    model = _mlp(torch, 4096, 8, torch.bfloat16)
    x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    host = torch.empty((), dtype=torch.float32, pin_memory=(variant == "fixed"))
    done = [None]

    def step(i):
        for _ in range(3):
            loss = model(x).float().pow(2).mean()
        t = now()
        if variant == "fixed" and done[0] is not None:
            done[0].synchronize()           # last step's copy, long finished
        host.copy_(loss, non_blocking=True)
        if variant == "fixed":
            done[0] = torch.cuda.Event()
            done[0].record()
        spent = now() - t
        _busy_python(2.0)                   # host work the queued GPU step could hide
        truth["planted"][i] = {"copy_call_ns": spent, "copy_bytes": 4,
                               "pinned": variant == "fixed", "python_ms": 2.0}
    truth["what"] = ("loss.copy_ to a pageable host tensor, non_blocking=True" if variant == "bad"
                     else "loss copied to a pinned host tensor, read a step later")
    return step


def sc_cold(torch, variant: str, truth: dict):
    """First inference calls of a fresh process (lazy module loading, cuDNN/cuBLAS init) under
    the profiler; fixed = three warm-up calls first. Truth: the wall time of each call."""
    import torch.nn.functional as F
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(64, 128, 3, 2, 1), torch.nn.ReLU()).cuda().eval()
    head = _gpt(torch, 512, 2, 8).eval()
    img = torch.randn(8, 3, 224, 224, device="cuda")
    warm = 3 if variant == "fixed" else 0

    def infer():
        with torch.no_grad():
            f = conv(img).flatten(2).transpose(1, 2)          # (8, 3136, 128)
            f = F.pad(f, (0, 512 - 128))
            return head(f).float().mean().item()

    for _ in range(warm):
        infer()
    truth["warmup_calls"] = warm

    def step(i):
        t = now()
        infer()
        truth["planted"][i] = {"call_ns": now() - t}
    truth["what"] = ("first inference calls of a fresh process, no warm-up" if warm == 0
                     else "inference after 3 warm-up calls")
    return step


SCENARIOS = {"data": sc_data, "sync": sc_sync, "copy": sc_copy, "launch": sc_launch,
             "host": sc_host, "compile": sc_compile, "gpu": sc_gpu, "graphs": sc_graphs,
             "alloc": sc_alloc, "xformer": sc_xformer, "queue": sc_queue,
             "pageable": sc_pageable, "cold": sc_cold}
# torch.profiler options per scenario: shapes for FLOPs; the cold start is profiled from the
# first call (no wait/warm-up in the schedule)
KINETO_OPTS = {"xformer": {"record_shapes": True}}
KINETO_SCHEDULE: dict = {}
# profiled from the very first call, without a schedule (a schedule with no warm-up records
# nothing on torch 2.11)
KINETO_NO_SCHEDULE = {"cold": 3}
# recorded by ``all`` unless --only names them (the first seven are the committed set)
DEFAULT = ("data", "sync", "copy", "launch", "host", "compile", "gpu")


# --------------------------------------------------------------------------- one run

def run_one(mode: str, scenario: str, variant: str, out: Path) -> None:
    import torch
    torch.manual_seed(0)
    truth = {"scenario": scenario, "variant": variant, "mode": mode, "torch": torch.__version__,
             "device": torch.cuda.get_device_name(), "planted": {}, "step_ns": {}}
    step = SCENARIOS[scenario](torch, variant, truth)
    stem = out / f"{scenario}.{variant}"
    if mode == "kineto":
        _run_kineto(torch, step, truth, stem)
    else:
        _run_plain(torch, step, truth)
    for fn in FINISH:
        fn()
    truth["planted"] = {str(k): v for k, v in truth["planted"].items()}
    Path(f"{stem}.{mode}.truth.json").write_text(json.dumps(truth, indent=1))


def _timed(step, truth, i):
    t = now()
    step(i)
    truth["step_ns"][str(i)] = now() - t


def _run_plain(torch, step, truth):
    nvtx = not os.environ.get("RECORD_NO_NVTX")     # a bare `nsys profile python train.py`
    truth["nvtx_steps"] = nvtx
    t0 = None
    for i in range(STEPS_PLAIN):
        if i == LOOP_FROM:
            t0 = now()
        if nvtx:
            torch.cuda.nvtx.range_push(f"step_{i}")
        _timed(step, truth, i)
        if nvtx:
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    # the program's step: back-to-back steps with one sync at the end (step_ns is the host's
    # time in each step; a host that runs ahead of the GPU -- h200/queue.fixed, 10.69 ms a
    # step timed, 11.57 ms the GPU's -- finishes its steps before the GPU does)
    truth["loop_ns_per_step"] = (now() - t0) / (STEPS_PLAIN - LOOP_FROM)


def _run_kineto(torch, step, truth, stem):
    from torch.profiler import ProfilerActivity, profile, schedule
    scenario = truth["scenario"]
    if scenario in KINETO_NO_SCHEDULE:
        n = KINETO_NO_SCHEDULE[scenario]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     **KINETO_OPTS.get(scenario, {})) as prof:
            for i in range(n):
                with torch.profiler.record_function(f"ProfilerStep#{i}"):
                    _timed(step, truth, i)
        torch.cuda.synchronize()
        prof.export_chrome_trace(f"{stem}.json.gz")
        truth["profiled_steps"] = list(range(n))
        return
    sched = KINETO_SCHEDULE.get(scenario, SCHEDULE)
    n = sum(sched.values())
    path = f"{stem}.json.gz"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(**sched), **KINETO_OPTS.get(scenario, {}),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for i in range(n):
            _timed(step, truth, i)
            prof.step()
    torch.cuda.synchronize()
    truth["profiled_steps"] = list(range(sched["wait"] + sched["warmup"], n))


# --------------------------------------------------------------------------- big trace

def run_big(out: Path, layers: int, steps: int) -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    d, heads, seq, batch, vocab = 1024, 16, 1024, 8, 32000

    emb = torch.nn.Embedding(vocab, d)
    model = torch.nn.Sequential(*_gpt(torch, d, layers, heads), torch.nn.LayerNorm(d),
                                torch.nn.Linear(d, vocab)).cuda()
    emb = emb.cuda()
    params = list(model.parameters()) + list(emb.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
    step_ns = []
    path = str(out / f"big_gpt{layers}l_{steps}s.json.gz")

    def one():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(emb(tokens[:, :-1]))
            loss = F.cross_entropy(logits.view(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        one()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(steps + 1):
            t = now()
            one()
            step_ns.append(now() - t)
            prof.step()
    torch.cuda.synchronize()
    (out / "big.truth.json").write_text(json.dumps({"layers": layers, "steps": steps,
                                                    "step_ns": step_ns,
                                                    "torch": torch.__version__}))


# --------------------------------------------------------------------------- driver

def _nsys(scenario: str, variant: str, out: Path, env: dict) -> str:
    stem = out / (f"{scenario}.{variant}" + (".nonvtx" if env.get("RECORD_NO_NVTX") else ""))
    rep = Path(f"{stem}.nsys-rep")
    cmd = [str(NSYS), "profile", "-t", "cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "-o", str(stem), "-f", "true", sys.executable, __file__, "plain", scenario, variant,
           str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    qd = Path(f"{stem}.qdstrm")
    if not rep.exists() and qd.exists():
        subprocess.run([str(IMPORTER), "-i", str(qd)], capture_output=True, env=env, timeout=300)
    qd.unlink(missing_ok=True)
    if not rep.exists():
        return f"nsys failed: {r.returncode} {r.stderr[-400:]}"
    subprocess.run([str(NSYS), "export", "--type", "sqlite", "-f", "true", "-o",
                    f"{stem}.sqlite", str(rep)], capture_output=True, env=env, timeout=300)
    subprocess.run([str(NSYS), "stats", "-f", "csv", "-o", f"{stem}", "--force-export=false",
                    "-r", "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum",
                    f"{stem}.sqlite"], capture_output=True, env=env, timeout=300)
    rep.unlink(missing_ok=True)
    return "ok"


def run_all(out: Path, deadline_s: float, only: list[str], nsys: bool, kineto: bool = True,
            variants=("bad", "fixed")) -> None:
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    libdw = Path(".dev/deb/usr/lib/x86_64-linux-gnu").resolve()
    env["LD_LIBRARY_PATH"] = f"{libdw}:{env.get('LD_LIBRARY_PATH', '')}"
    log = []
    names = only or list(DEFAULT)
    jobs = [("kineto", s, v) for s in names for v in variants] if kineto else []
    if nsys:    # the planted variants first: the fixed ones only if time is left
        jobs += [("nsys", s, v) for v in variants for s in names]
    for mode, s, v in jobs:
        if time.time() - start > deadline_s:
            log.append(f"{mode} {s} {v}: skipped (deadline)")
            continue
        t = time.time()
        try:
            if mode == "kineto":
                r = subprocess.run([sys.executable, __file__, "kineto", s, v, str(out)],
                                   capture_output=True, text=True, timeout=300)
                msg = "ok" if r.returncode == 0 else f"failed: {r.stderr[-600:]}"
            else:
                msg = _nsys(s, v, out, env)
        except subprocess.TimeoutExpired:
            msg = "timed out"
        log.append(f"{mode} {s} {v}: {msg} ({time.time() - t:.1f} s)")
        print(log[-1], flush=True)
    (out / "record.log").write_text("\n".join(log) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["all", "kineto", "plain", "big"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--variants", default="bad,fixed")
    ap.add_argument("--no-nvtx", action="store_true",
                    help="nsys runs only, without step ranges (<s>.<v>.nonvtx.sqlite)")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args(argv)
    if a.what == "all":
        if a.no_nvtx:
            os.environ["RECORD_NO_NVTX"] = "1"
        run_all(Path(a.args[0]), a.deadline_s, [s for s in a.only.split(",") if s], not a.no_nsys,
                kineto=not a.no_nvtx, variants=tuple(a.variants.split(",")))
    elif a.what == "big":
        run_big(Path(a.args[0]), a.layers, a.steps)
    else:
        scenario, variant, out = a.args
        run_one(a.what, scenario, variant, Path(out))


if __name__ == "__main__":
    main()
