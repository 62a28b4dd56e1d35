"""Record the small real CPU programs the program facts are tested on (tests/fixtures/facts).

ckpt:    an MLP training loop that writes a checkpoint (torch.save of the model's and the
         optimizer's state_dict) every CKPT_EVERY steps;
offload: an optimizer "offloaded" the way DeepSpeed/ZeRO-Offload does it: the gradients are
         copied into host buffers, AdamW steps host copies of the parameters, the parameters
         are copied back (on this CPU-only build both sides are host tensors: the structure,
         not the transport, is what is recorded);
moe:     a mixture-of-experts layer that routes each expert's tokens with nonzero()
         (EXPERTS experts x LAYERS layers = 32 data-dependent shapes a step);
sdpa:    a small transformer block whose attention is F.scaled_dot_product_attention with an
         explicit boolean mask; no convolution anywhere.

Each is profiled with record_shapes and with_stack (python frames), ProfilerStep#N markers,
and gzip'd; truth.json holds each loop's own perf_counter_ns times and its planted counts.

    python scripts/record_facts.py tests/fixtures/facts
"""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

CKPT_EVERY = 3
CKPT_ACTIVE = 6
CKPT_FLOATS = 8_000_000
EXPERTS, LAYERS = 8, 4
ACTIVE = 7


def _gz(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def _mlp(width: int = 512):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10))


def _profile(steps: int):
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                   schedule=schedule(wait=1, warmup=1, active=steps))


def _export(prof, out: str) -> None:
    raw = out + ".tmp.json"
    prof.export_chrome_trace(raw)
    _gz(raw, out)


def save_checkpoint(model, opt, sink):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, sink)


def record_ckpt(out: str) -> dict:
    model = _mlp(256)
    # the state a checkpoint writes is far larger than a step's work (as in real training)
    model.register_buffer("table", torch.randn(CKPT_FLOATS))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    times, saved = [], []
    with _profile(CKPT_ACTIVE) as prof:
        for i in range(CKPT_ACTIVE + 2):
            t = time.perf_counter_ns()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % CKPT_EVERY == CKPT_EVERY - 1:
                save_checkpoint(model, opt, io.BytesIO())
                saved.append(i)
            times.append(time.perf_counter_ns() - t)
            prof.step()
    _export(prof, out)
    # profiled steps: the schedule skips 1 (wait) and 1 (warmup)
    return {"step_ns": times, "checkpoint_steps": saved, "every": CKPT_EVERY,
            "profiled_from": 2}


class OffloadedAdamW:
    """Gradients to host buffers, AdamW on host copies, parameters copied back."""

    def __init__(self, params):
        self.params = list(params)
        self.host = [p.detach().clone() for p in self.params]
        self.grads = [torch.zeros_like(p) for p in self.params]
        for h in self.host:
            h.grad = torch.zeros_like(h)
        self.inner = torch.optim.AdamW(self.host, lr=1e-3, foreach=False)

    def step(self):
        for p, g, h in zip(self.params, self.grads, self.host):
            g.copy_(p.grad)              # device -> host on a GPU
            h.grad.copy_(g)
        self.inner.step()
        with torch.no_grad():
            for p, h in zip(self.params, self.host):
                p.copy_(h)               # host -> device on a GPU


def record_offload(out: str) -> dict:
    model = _mlp(256)
    opt = OffloadedAdamW(model.parameters())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    times = []
    with _profile(ACTIVE) as prof:
        for _ in range(ACTIVE + 2):
            t = time.perf_counter_ns()
            loss = F.cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter_ns() - t)
            prof.step()
    _export(prof, out)
    return {"step_ns": times, "params": len(opt.params),
            "copies_per_step": {"grads_out": len(opt.params), "params_back": len(opt.params)}}


class MoE(torch.nn.Module):
    def __init__(self, dim: int = 64, experts: int = EXPERTS):
        super().__init__()
        self.router = torch.nn.Linear(dim, experts)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx = (choice == e).nonzero().squeeze(-1)     # data-dependent shape: a sync on GPU
            out[idx] = expert(x[idx])
        return out


def record_moe(out: str) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[MoE() for _ in range(LAYERS)])
    x = torch.randn(128, 64)
    times = []
    with torch.no_grad(), _profile(ACTIVE) as prof:
        for _ in range(ACTIVE + 2):
            t = time.perf_counter_ns()
            model(x)
            times.append(time.perf_counter_ns() - t)
            prof.step()
    _export(prof, out)
    return {"step_ns": times, "nonzero_per_step": EXPERTS * LAYERS}


class Block(torch.nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + self.proj(a.transpose(1, 2).reshape(b, t, d))


def record_sdpa(out: str) -> dict:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(Block() for _ in range(2))
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-3, fused=False, foreach=True)
    x = torch.randn(4, 32, 64)
    mask = torch.ones(32, 32, dtype=torch.bool).tril()
    times = []
    with _profile(ACTIVE) as prof:
        for _ in range(ACTIVE + 2):
            t = time.perf_counter_ns()
            h = x
            for blk in blocks:
                h = blk(h, mask)
            loss = h.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter_ns() - t)
            prof.step()
    _export(prof, out)
    return {"step_ns": times, "sdpa_per_step": 2, "explicit_mask": True, "convolutions": 0}


def main(argv: list[str]) -> int:
    out = argv[0] if argv else "tests/fixtures/facts"
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    truth = {"torch": torch.__version__}
    for name, fn in (("ckpt", record_ckpt), ("offload", record_offload), ("moe", record_moe),
                     ("sdpa", record_sdpa)):
        truth[name] = fn(os.path.join(out, f"{name}.json.gz"))
        print(name, os.path.getsize(os.path.join(out, f"{name}.json.gz")), flush=True)
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
