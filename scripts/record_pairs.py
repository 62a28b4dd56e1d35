"""Record the CPU before/after pairs that prove the what-if levers (tests/fixtures/pairs).

Each pair differs in ONE change, the change a lever asks for:

* ``workers``:  DataLoader(num_workers=0) -> num_workers=2, a __getitem__ that waits 0.5 ms
  (I/O-like: sleeps, no CPU) for each of 16 samples, an MLP step behind it;
* ``compile``:  an eager MLP whose layers end in chains of pointwise ops -> torch.compile;
* ``fused_opt``: Adam(foreach=False) over 48 small parameters -> Adam(fused=True);
* ``batch``:    the same MLP training step at batch 8 -> batch 64 (compared per sample);
* ``item``:     loss.item() every step -> none (on CPU there is no device queue to drain:
  the pair shows that a sync lever promises nothing here, and nothing is realised);
* ``persist``:  DataLoader(num_workers=2, persistent_workers=False) over short epochs (4
  batches) -> persistent_workers=True: without it every epoch's first ``iter(loader)`` forks
  two fresh workers (and the last batch joins the old ones); recorded with_stack (the fork is
  Python code outside any op) over 8 steps, two epoch starts among them.

The step-anatomy pairs (recorded with_stack, as a user who wants module names does; the
models are scripts/record_anatomy.py's):

* ``ckpt``:     3 causal-attention blocks, 2 under torch.utils.checkpoint -> none checkpointed;
* ``accum``:    4 accumulation micro-batches of 16 (loss.item() after each) per optimizer step
  -> one batch of 64 (loss.item() once): the same samples per optimizer step;
* ``valid``:    a validation pass (eval(), no_grad, 2 forward batches of 256, .item() each)
  after every training step -> after every 4th;
* ``log``:      every step logs its metrics (the gradient norm, the batch accuracy, the loss:
  three .item()s, a formatted log record) -> every 4th step;
* ``zero``:     optimizer.zero_grad(set_to_none=False) (every gradient zeroed in place, then
  accumulated into by backward) -> set_to_none=True (the default);
* ``save``:     torch.save of model + optimizer state (a 2M-float buffer beside the MLP) to a
  file after every step -> after every 4th.

Each side is profiled (CPU activities, ProfilerStep#N marks, 4 active steps) and then timed
UNPROFILED: ``ROUNDS`` rounds, before and after interleaved so the shared machine's load hits
both alike, each round the mean of ``STEPS`` back-to-back steps (one clock read at each end).
The truth (truth.json) keeps every round; its ``step_ns`` is the median of the round means
(``ROUNDS_OF``: a pair's own number of rounds).

    python scripts/record_pairs.py tests/fixtures/pairs [PAIR ...]
"""
from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

ROUNDS = 5
STEPS = 20
WARM = 5


class SlowSet(Dataset):
    """Samples that take ``wait_s`` each to "read" (a sleep: I/O, not CPU)."""

    def __init__(self, n: int = 100_000, wait_s: float = 0.0005):
        self.n, self.wait_s = n, wait_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.wait_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(128, generator=g), i % 10


def mlp(width: int = 128, depth: int = 3, pointwise: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers.append(torch.nn.Linear(width, width))
        layers.append(PointwiseChain() if pointwise else torch.nn.ReLU())
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


class PointwiseChain(torch.nn.Module):
    """Eight elementwise ops in a row: eager runs eight kernels, compile fuses them."""

    def forward(self, x):
        x = torch.nn.functional.gelu(x)
        x = x * 1.01 + 0.1
        x = torch.tanh(x)
        x = x - x.mean(dim=-1, keepdim=True)
        x = torch.sigmoid(x) * x
        return x.clamp(-3, 3)


class Loop:
    """One side of a pair: ``step()`` runs one training/inference step."""

    def __init__(self, step, batches=None):
        self._step, self.batches = step, batches

    def step(self):
        self._step(next(self.batches) if self.batches is not None else None)


def _train_step(model, opt, batch_size, width=128, item=False):
    x = torch.randn(batch_size, width)
    y = torch.randint(0, 10, (batch_size,))

    def run(batch):
        xb, yb = batch if batch is not None else (x, y)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if item:
            loss.item()
    return run


def epochs(loader):
    """Batches over endless epochs: each pass calls iter(loader) anew, as a training loop's
    ``for epoch ...: for batch in loader`` does."""
    while True:
        yield from loader


class Counted:
    """A step that takes its own index (a loop's ``i``): ``Loop`` calls it with no batch."""

    def __init__(self, fn):
        self.fn, self.i = fn, 0

    def __call__(self, _batch):
        self.fn(self.i)
        self.i += 1


def anatomy_side(pair: str, variant: str) -> Loop:
    """The step-anatomy pairs (scripts/record_anatomy.py's models)."""
    import logging

    import torch.nn.functional as F
    from record_anatomy import MLP, Stack, validate

    before = variant == "before"
    if pair == "ckpt":
        model = Stack(2 if before else 0)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(4, 32, 128), torch.randint(0, 10, (4,))
        return Loop(Counted(lambda i: _anatomy_train(model, opt, x, y)))
    if pair == "accum":
        model = MLP()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        xs = [torch.randn(16, 64) for _ in range(4)]
        ys = [torch.randint(0, 10, (16,)) for _ in range(4)]
        parts = list(zip(xs, ys)) if before else [(torch.cat(xs), torch.cat(ys))]

        def accum(_i):
            total = 0.0
            for xm, ym in parts:
                loss = F.cross_entropy(model(xm), ym) / len(parts)
                loss.backward()
                total += loss.item()
            opt.step()
            opt.zero_grad()
        return Loop(Counted(accum))
    if pair == "valid":
        model = MLP()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        val = [(torch.randn(256, 64), torch.randint(0, 10, (256,))) for _ in range(2)]
        every = 1 if before else EVERY

        def valid(i):
            _anatomy_train(model, opt, x, y)
            if i % every == every - 1:
                validate(model, val)
        return Loop(Counted(valid))
    if pair == "log":
        log = logging.getLogger("train")
        log.addHandler(logging.NullHandler())
        log.setLevel(logging.INFO)
        log.propagate = False
        model = MLP()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        every = 1 if before else EVERY

        def logged(i):
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            if i % every == every - 1:
                norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in model.parameters() if p.grad is not None])
                acc = (out.argmax(-1) == y).float().mean()
                log.info("step %d loss %.4f acc %.3f grad norm %.3f", i, loss.item(),
                         acc.item(), norm.item())
            opt.step()
        return Loop(Counted(logged))
    if pair == "save":
        model = MLP()
        model.register_buffer("table", torch.randn(2_000_000))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        tmp = tempfile.mkdtemp()
        atexit.register(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "ckpt.pt")
        every = 1 if before else EVERY

        def saved(i):
            _anatomy_train(model, opt, x, y)
            if i % every == every - 1:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
        return Loop(Counted(saved))
    if pair == "zero":
        model = MLP(depth=6)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

        def zero(_i):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=not before)
            loss.backward()
            opt.step()
        return Loop(Counted(zero))
    raise SystemExit(f"unknown pair {pair}")


def _anatomy_train(model, opt, x, y):
    import torch.nn.functional as F

    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def side(pair: str, variant: str) -> Loop:
    if pair in ANATOMY:
        return anatomy_side(pair, variant)
    if pair == "workers":
        model = mlp(depth=6)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(SlowSet(), batch_size=16, shuffle=False,
                            num_workers=0 if variant == "before" else 2,
                            persistent_workers=variant == "after")
        return Loop(_train_step(model, opt, 16), iter(loader))
    if pair == "compile":
        model = mlp(width=256, depth=4, pointwise=True).eval()
        if variant == "after":
            model = torch.compile(model)
        x = torch.randn(64, 256)

        def infer(_):
            with torch.no_grad():
                model(x)
        return Loop(infer)
    if pair == "fused_opt":
        model = mlp(width=32, depth=23)           # 48 parameters
        kw = {"foreach": False} if variant == "before" else {"fused": True}
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, **kw)
        return Loop(_train_step(model, opt, 8, width=32))
    if pair == "batch":
        model = mlp(depth=6)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return Loop(_train_step(model, opt, 8 if variant == "before" else 64))
    if pair == "item":
        model = mlp(depth=6)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return Loop(_train_step(model, opt, 16, item=variant == "before"))
    if pair == "persist":
        model = mlp(depth=6)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(SlowSet(n=EPOCH_BATCHES * 16), batch_size=16, shuffle=False,
                            num_workers=2, persistent_workers=variant == "after")
        return Loop(_train_step(model, opt, 16), epochs(loader))
    raise SystemExit(f"unknown pair {pair}")


ANATOMY = ("ckpt", "accum", "valid", "log", "zero", "save")
# the pairs recorded while 3 other agents shared the 2 cores: their rounds swung 2x, so
# more of them (truth.json keeps every round; the median is the step)
ROUNDS_OF = dict.fromkeys(ANATOMY, 15)
PAIRS = ("workers", "compile", "fused_opt", "batch", "item", "persist") + ANATOMY
EVERY = 4           # valid, log: AFTER does it every 4th step (BEFORE every step)
EPOCH_BATCHES = 4   # persist: an epoch of 4 batches; STEPS (20) covers whole epochs
# how each pair is profiled: (warm-up steps, active steps, with_stack); persist starts its
# window 2 steps into an epoch so both epoch starts fall inside it (steps 2 and 6)
PROFILE = {"persist": (7, 8, True), "ckpt": (WARM, 3, True), "accum": (WARM, 4, True),
           "valid": (WARM, 8, True), "log": (WARM, 8, True), "zero": (WARM, 4, True),
           "save": (WARM, 8, True)}
WHAT = {
    "workers": ("DataLoader num_workers=0, 16 x 0.5 ms samples per batch",
                "DataLoader num_workers=2 (persistent), same samples"),
    "compile": ("eager MLP, 4 layers each ending in 8 pointwise ops, inference",
                "the same model under torch.compile (default mode)"),
    "fused_opt": ("Adam(foreach=False), 48 parameters", "Adam(fused=True), same parameters"),
    "batch": ("MLP training step, batch 8", "the same step at batch 64"),
    "item": ("MLP training step with loss.item() every step", "the same step, no .item()"),
    "persist": ("DataLoader num_workers=2, persistent_workers=False, epochs of 4 batches of "
                "16 x 0.5 ms samples", "the same with persistent_workers=True"),
    "ckpt": ("3 causal-attention blocks (batch 4 x 32 x 128), 2 under "
             "torch.utils.checkpoint(use_reentrant=False)", "no block checkpointed"),
    "accum": ("4 accumulation micro-batches of 16 per AdamW step, loss.item() after each",
              "one batch of 64 per AdamW step, loss.item() once"),
    "valid": ("MLP training, a validation pass (eval, no_grad, 2 x 256 rows, .item() each) "
              "after every step", "the validation pass after every 4th step"),
    "log": ("MLP training, every step logs loss, accuracy and gradient norm (3 .item())",
            "the same logging every 4th step"),
    "zero": ("MLP training (8 Linear layers), AdamW, zero_grad(set_to_none=False)",
             "zero_grad(set_to_none=True)"),
    "save": ("MLP training, torch.save of model + optimizer state (with a 2M-float buffer) "
             "after every step", "the same save after every 4th step"),
}
LEVER = {"workers": "num_workers", "compile": "compile_pointwise", "fused_opt":
         "fused_optimizer", "batch": "larger_batch", "item": "remove_syncs",
         "persist": "persistent_workers", "ckpt": "checkpoint_fewer",
         "accum": "fewer_micro_batches", "valid": "validate_less", "log": "log_less",
         "zero": None, "save": "save_async"}


def _gz(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def record(loop: Loop, out: str, active: int = 4, stack: bool = False) -> None:
    raw = out + ".tmp.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=stack,
                 schedule=schedule(wait=1, warmup=2, active=active)) as prof:
        for _ in range(3 + active):
            loop.step()
            prof.step()
    prof.export_chrome_trace(raw)
    _gz(raw, out)


def timed(loop: Loop) -> float:
    """The mean of STEPS back-to-back steps, unprofiled (ns)."""
    t = time.perf_counter_ns()
    for _ in range(STEPS):
        loop.step()
    return (time.perf_counter_ns() - t) / STEPS


def record_pair(folder: str, pair: str) -> dict:
    loops = {v: side(pair, v) for v in ("before", "after")}
    warm, active, stack = PROFILE.get(pair, (WARM, 4, False))
    for v, loop in loops.items():
        for _ in range(warm):
            loop.step()
        record(loop, os.path.join(folder, f"{pair}.{v}.json.gz"), active, stack)
    rounds = {"before": [], "after": []}
    for _ in range(ROUNDS_OF.get(pair, ROUNDS)):
        for v, loop in loops.items():
            rounds[v].append(round(timed(loop)))
    out = {"lever": LEVER[pair], "rounds_ns": rounds,
           "step_ns": {v: round(statistics.median(r)) for v, r in rounds.items()},
           "what": {"before": WHAT[pair][0], "after": WHAT[pair][1]}}
    if pair == "batch":
        out["batch"] = {"before": 8, "after": 64}
    if pair == "workers":
        out["num_workers"] = {"before": 0, "after": 2}
    if pair == "persist":
        out["num_workers"] = {"before": 2, "after": 2}
        out["persistent_workers"] = {"before": False, "after": True}
        out["epoch_batches"] = EPOCH_BATCHES
    if pair in ("valid", "log", "save"):
        out["every"] = {"before": 1, "after": EVERY}
    if pair == "accum":
        out["micro_batches"] = {"before": 4, "after": 1}
        out["samples_per_step"] = 64
    if pair == "ckpt":
        out["checkpointed_layers"] = {"before": 2, "after": 0}
    return out


def main(folder: str, pairs: list[str]) -> None:
    os.makedirs(folder, exist_ok=True)
    torch.set_num_threads(1)   # 2 shared cores: one thread keeps the rounds comparable
    path = os.path.join(folder, "truth.json")
    truth = json.load(open(path)) if os.path.exists(path) else {}
    truth.update({"torch": torch.__version__, "threads": 1, "rounds": ROUNDS,
                  "steps_per_round": STEPS})
    for pair in pairs:
        t = time.time()
        truth[pair] = record_pair(folder, pair)
        print(f"{pair}: {truth[pair]['step_ns']} ({time.time() - t:.0f} s)", flush=True)
        with open(path, "w") as f:
            json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/pairs",
         sys.argv[2:] or list(PAIRS))
