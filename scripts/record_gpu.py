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

    def bookkeeping(ms: float) -> int:
        end = time.perf_counter() + ms / 1000
        n = 0
        while time.perf_counter() < end:
            n += len(json.dumps({"k": n, "v": [n] * 8}))
        return n

    def step(i):
        y = model(x)
        y.float().sum().item()
        t = now()
        if variant == "bad":
            bookkeeping(15.0)
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


SCENARIOS = {"data": sc_data, "sync": sc_sync, "copy": sc_copy, "launch": sc_launch,
             "host": sc_host, "compile": sc_compile, "gpu": sc_gpu, "graphs": sc_graphs,
             "alloc": sc_alloc}
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
    truth["planted"] = {str(k): v for k, v in truth["planted"].items()}
    Path(f"{stem}.{mode}.truth.json").write_text(json.dumps(truth, indent=1))


def _timed(step, truth, i):
    t = now()
    step(i)
    truth["step_ns"][str(i)] = now() - t


def _run_plain(torch, step, truth):
    nvtx = not os.environ.get("RECORD_NO_NVTX")     # a bare `nsys profile python train.py`
    truth["nvtx_steps"] = nvtx
    for i in range(STEPS_PLAIN):
        if nvtx:
            torch.cuda.nvtx.range_push(f"step_{i}")
        _timed(step, truth, i)
        if nvtx:
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def _run_kineto(torch, step, truth, stem):
    from torch.profiler import ProfilerActivity, profile, schedule
    n = sum(SCHEDULE.values())
    path = f"{stem}.json.gz"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(**SCHEDULE),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for i in range(n):
            _timed(step, truth, i)
            prof.step()
    torch.cuda.synchronize()
    truth["profiled_steps"] = list(range(SCHEDULE["wait"] + SCHEDULE["warmup"], n))


# --------------------------------------------------------------------------- big trace

def run_big(out: Path, layers: int, steps: int) -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    d, heads, seq, batch, vocab = 1024, 16, 1024, 8, 32000

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).view(batch, seq, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(batch, seq, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    emb = torch.nn.Embedding(vocab, d)
    model = torch.nn.Sequential(*[Block() for _ in range(layers)], torch.nn.LayerNorm(d),
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


def run_all(out: Path, deadline_s: float, only: list[str], nsys: bool, kineto: bool = True) -> None:
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    libdw = Path(".dev/deb/usr/lib/x86_64-linux-gnu").resolve()
    env["LD_LIBRARY_PATH"] = f"{libdw}:{env.get('LD_LIBRARY_PATH', '')}"
    log = []
    names = only or list(DEFAULT)
    jobs = [("kineto", s, v) for s in names for v in ("bad", "fixed")] if kineto else []
    if nsys:    # the planted variants first: the fixed ones only if time is left
        jobs += [("nsys", s, v) for v in ("bad", "fixed") for s in names]
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
    ap.add_argument("--no-nvtx", action="store_true",
                    help="nsys runs only, without step ranges (<s>.<v>.nonvtx.sqlite)")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args(argv)
    if a.what == "all":
        if a.no_nvtx:
            os.environ["RECORD_NO_NVTX"] = "1"
        run_all(Path(a.args[0]), a.deadline_s, [s for s in a.only.split(",") if s], not a.no_nsys,
                kineto=not a.no_nvtx)
    elif a.what == "big":
        run_big(Path(a.args[0]), a.layers, a.steps)
    else:
        scenario, variant, out = a.args
        run_one(a.what, scenario, variant, Path(out))


if __name__ == "__main__":
    main()
