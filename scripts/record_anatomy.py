"""Record the small real CPU programs the step-anatomy facts are tested on (tests/fixtures/anatomy).

valid:   an MLP training loop with a validation pass (model.eval(), torch.no_grad(), VAL_BATCHES
         forward passes, loss.item() after each) inside every VALID_EVERY-th step;
accum:   MICRO accumulation micro-batches per optimizer step, loss.item() after each;
ckpt:    a stack of transformer-ish blocks (causal SDPA + MLP); CKPT_LAYERS of them wrapped in
         torch.utils.checkpoint.checkpoint(use_reentrant=False);
save:    an MLP training loop that torch.save()s model + optimizer state to a file every
         SAVE_EVERY-th step;
valid_nostack: the validation loop recorded without with_stack (no module frames);
valid_never / accum_one: the fixed programs of diff pairs (no validation; one batch of
         MICRO x MICRO_BATCH rows);
decode:  generation, batch 2: a PROMPT-token prefill step then DECODE one-token steps;
log:     every LOG_EVERY-th step the metrics all-gathered (gloo, world size 1) and logged;
infer1 / infer64: the same MLP served under torch.inference_mode(), one request per
         ProfilerStep, batch 1 and batch 64.

Each is profiled with record_shapes and with_stack (module frames), ProfilerStep#N markers,
and gzip'd. truth.json holds each loop's own truth: the planted counts and the unprofiled
step times (perf_counter_ns of back-to-back steps, after the profiled ones), including the
times of the changed programs the levers propose (no validation, one micro-batch of MICRO x
the size, no checkpointing, no save, batch 64) so each lever's price can be checked.

    python scripts/record_anatomy.py tests/fixtures/anatomy
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint

VALID_EVERY, VAL_BATCHES, VALID_ACTIVE = 4, 6, 8
MICRO, MICRO_BATCH, ACCUM_ACTIVE = 4, 16, 4
LAYERS, CKPT_LAYERS, CKPT_ACTIVE = 3, 2, 3
SAVE_EVERY, SAVE_ACTIVE, SAVE_FLOATS = 3, 6, 2_000_000
INFER_ACTIVE = 6
LOG_EVERY, LOG_ACTIVE = 3, 6
PROMPT, DECODE, DECODE_ACTIVE = 32, 4, 10
TIMED = 24          # unprofiled steps timed after the profiled ones


def _gz(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def _profile(active: int, stack: bool = True):
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=stack,
                   schedule=schedule(wait=1, warmup=1, active=active))


def _export(prof, out: str) -> None:
    raw = out + ".tmp.json"
    prof.export_chrome_trace(raw)
    _gz(raw, out)


class MLP(torch.nn.Module):
    def __init__(self, width: int = 256, depth: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(64, width)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, 10)

    def forward(self, x):
        x = F.relu(self.inp(x))
        for h in self.hidden:
            x = F.relu(h(x))
        return self.out(x)


class Block(torch.nn.Module):
    def __init__(self, d: int = 128, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ff1 = torch.nn.Linear(d, 4 * d)
        self.ff2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.ff2(F.gelu(self.ff1(x)))


class Stack(torch.nn.Module):
    def __init__(self, checkpointed: int):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.checkpointed = checkpointed
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        for i, blk in enumerate(self.blocks):
            if i < self.checkpointed:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.head(x.mean(1))


def _timed(step, n: int = TIMED) -> list[int]:
    out = []
    for i in range(n):
        t = time.perf_counter_ns()
        step(i)
        out.append(time.perf_counter_ns() - t)
    return out


def _mean(xs) -> int:
    return int(statistics.fmean(xs))


def _train_step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def validate(model, batches):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for xv, yv in batches:
            total += F.cross_entropy(model(xv), yv).item()
    model.train()
    return total


def record_valid(out: str, with_validation: bool = True, stack: bool = True) -> dict:
    model = MLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    val = [(torch.randn(256, 64), torch.randint(0, 10, (256,))) for _ in range(VAL_BATCHES)]
    valid_at = []

    def step(i, with_val=True):
        _train_step(model, opt, x, y)
        if with_val and i % VALID_EVERY == VALID_EVERY - 1:
            validate(model, val)
            return True
        return False

    with _profile(VALID_ACTIVE, stack) as prof:
        for i in range(VALID_ACTIVE + 2):
            if step(i, with_validation):
                valid_at.append(i)
            prof.step()
    _export(prof, out)
    if not with_validation:      # the fixed program of a diff pair
        return {"every": None, "validation_loop_steps": [],
                "step_ns": _mean(_timed(lambda i: step(i, False)))}
    times = _timed(step)
    plain = [t for i, t in enumerate(times) if i % VALID_EVERY != VALID_EVERY - 1]
    with_v = [t for i, t in enumerate(times) if i % VALID_EVERY == VALID_EVERY - 1]
    never = _timed(lambda i: step(i, False))
    return {"every": VALID_EVERY, "val_batches": VAL_BATCHES, "item_calls_per_validation":
            VAL_BATCHES, "validation_loop_steps": valid_at, "profiled_from": 2,
            "step_ns": _mean(plain), "validation_step_ns": _mean(with_v),
            "mean_step_ns": _mean(times), "no_validation_step_ns": _mean(never)}


def record_accum(out: str, micro: int = MICRO) -> dict:
    model = MLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xs = [torch.randn(MICRO_BATCH, 64) for _ in range(MICRO)]
    ys = [torch.randint(0, 10, (MICRO_BATCH,)) for _ in range(MICRO)]
    xb, yb = torch.cat(xs), torch.cat(ys)

    def step(_i):
        total = 0.0
        for xm, ym in zip(xs, ys):
            loss = F.cross_entropy(model(xm), ym) / MICRO
            loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()

    def one(_i):
        _train_step(model, opt, xb, yb)

    with _profile(ACCUM_ACTIVE) as prof:
        for i in range(ACCUM_ACTIVE + 2):
            step(i) if micro > 1 else one(i)
            prof.step()
    _export(prof, out)
    if micro == 1:               # the fixed program of a diff pair: one batch of MICRO x
        return {"micro_batches": 1, "micro_batch": MICRO * MICRO_BATCH,
                "step_ns": _mean(_timed(one))}
    return {"micro_batches": MICRO, "micro_batch": MICRO_BATCH, "item_calls_per_step": MICRO,
            "step_ns": _mean(_timed(step)), "one_batch_step_ns": _mean(_timed(one))}


def record_ckpt(out: str) -> dict:
    x, y = torch.randn(8, 64, 128), torch.randint(0, 10, (8,))

    def loop(model):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        return lambda _i: _train_step(model, opt, x, y)

    step = loop(Stack(CKPT_LAYERS))
    with _profile(CKPT_ACTIVE) as prof:
        for i in range(CKPT_ACTIVE + 2):
            step(i)
            prof.step()
    _export(prof, out)
    return {"layers": LAYERS, "checkpointed_layers": CKPT_LAYERS,
            "checkpointed_modules": [f"blocks.{i}" for i in range(CKPT_LAYERS)],
            "use_reentrant": False, "is_causal": True,
            "step_ns": _mean(_timed(step, 12)),
            "no_checkpoint_step_ns": _mean(_timed(loop(Stack(0)), 12))}


def record_save(out: str) -> dict:
    model = MLP()
    model.register_buffer("table", torch.randn(SAVE_FLOATS))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "ckpt.pt")
    saved = []

    def step(i, with_save=True):
        _train_step(model, opt, x, y)
        if with_save and i % SAVE_EVERY == SAVE_EVERY - 1:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
            return True
        return False

    try:
        with _profile(SAVE_ACTIVE) as prof:
            for i in range(SAVE_ACTIVE + 2):
                if step(i):
                    saved.append(i)
                prof.step()
        _export(prof, out)
        times = _timed(step)
        never = _timed(lambda i: step(i, False))
    finally:
        shutil.rmtree(tmp)
    plain = [t for i, t in enumerate(times) if i % SAVE_EVERY != SAVE_EVERY - 1]
    saving = [t for i, t in enumerate(times) if i % SAVE_EVERY == SAVE_EVERY - 1]
    return {"every": SAVE_EVERY, "save_loop_steps": saved, "profiled_from": 2,
            "step_ns": _mean(plain), "save_step_ns": _mean(saving), "mean_step_ns": _mean(times),
            "no_save_step_ns": _mean(never)}


def record_log(out: str) -> dict:
    """Every LOG_EVERY-th step: the metrics all-gathered (gloo, one process) and logged with
    .item() -- the logging step of a real loop."""
    import logging

    import torch.distributed as dist

    log = logging.getLogger("train")
    log.addHandler(logging.NullHandler())
    log.setLevel(logging.INFO)
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29517", rank=0,
                                world_size=1)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    logged = []

    def step(i):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % LOG_EVERY == LOG_EVERY - 1:
            metrics = torch.stack([loss.detach(), loss.detach() * 2])
            gathered = [torch.zeros_like(metrics) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, metrics)
            log.info("step %d loss %.4f", i, torch.stack(gathered).mean().item())
            return True
        return False

    try:
        with _profile(LOG_ACTIVE) as prof:
            for i in range(LOG_ACTIVE + 2):
                if step(i):
                    logged.append(i)
                prof.step()
        _export(prof, out)
    finally:
        if own:
            dist.destroy_process_group()
    return {"every": LOG_EVERY, "log_loop_steps": logged, "all_gathers_per_log": 1,
            "item_calls_per_log": 1}


def record_decode(out: str) -> dict:
    """Generation: each request one prefill step (PROMPT tokens) then DECODE one-token steps,
    one ProfilerStep each, batch 2."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)).eval()
    prompt = torch.randn(2, PROMPT, 64)
    kinds = []

    def step(i):
        with torch.inference_mode():
            if i % (DECODE + 1) == 0:
                model(prompt)
                return "prefill"
            model(prompt[:, -1:, :])
            return "decode"

    with _profile(DECODE_ACTIVE) as prof:
        for i in range(DECODE_ACTIVE + 2):
            kinds.append(step(i))
            prof.step()
    _export(prof, out)
    return {"batch": 2, "prompt": PROMPT, "decode_per_request": DECODE,
            "profiled_kinds": kinds[2:]}


def record_infer(out: str, batch: int) -> dict:
    model = MLP(width=1024, depth=4).eval()
    x = torch.randn(batch, 64)

    def step(_i):
        with torch.inference_mode():
            model(x).argmax(-1)

    with _profile(INFER_ACTIVE) as prof:
        for i in range(INFER_ACTIVE + 2):
            step(i)
            prof.step()
    _export(prof, out)
    return {"batch": batch, "request_ns": _mean(_timed(step, 48))}


def main(argv) -> int:
    out = argv[1] if len(argv) > 1 else "tests/fixtures/anatomy"
    only = set(argv[2:])
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    truth_path = os.path.join(out, "truth.json")
    truth = json.load(open(truth_path)) if os.path.exists(truth_path) else {}
    truth["torch"] = torch.__version__
    jobs = {"valid": lambda p: record_valid(p), "accum": lambda p: record_accum(p),
            "valid_never": lambda p: record_valid(p, False),
            "valid_nostack": lambda p: record_valid(p, stack=False),
            "accum_one": lambda p: record_accum(p, 1),
            "ckpt": lambda p: record_ckpt(p), "save": lambda p: record_save(p),
            "log": lambda p: record_log(p),
            "decode": lambda p: record_decode(p),
            "infer1": lambda p: record_infer(p, 1), "infer64": lambda p: record_infer(p, 64)}
    for name, fn in jobs.items():
        if only and name not in only:
            continue
        truth[name] = fn(os.path.join(out, f"{name}.json.gz"))
        print(name, truth[name], flush=True)
    with open(truth_path, "w") as f:
        json.dump(truth, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
