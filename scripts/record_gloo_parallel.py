"""Record real gloo jobs of other parallel layouts (CPU torch), plus the loop's own truth.

    python scripts/record_gloo_parallel.py {fsdp2,pp,a2a} OUT_DIR [--steps 3] [--warmup 1]

- ``fsdp2``: 2 ranks, FSDP2 ``fully_shard`` on each Linear of a small MLP and on the root.
- ``pp``: ``--world`` ranks (2), ``torch.distributed.pipelining`` ``--schedule`` (GPipe, 1F1B, or
  interleaved 1F1B with ``--virtual`` stages per rank, placed looped: rank r holds stages r,
  r + world, ...), ``--microbatches`` (4); rank ``--slow-stage`` (-1: none, a balanced pipeline)
  has ``--slow-factor`` times the layers in each of its stages.
  Truth per rank and step: time inside the stage's own forward/backward (module hooks,
  ``perf_counter_ns``) and the step time; ``1 - busy/step`` is the loop's bubble.
- ``sweep``: 2 ranks, blocking ``all_reduce`` of 4 KiB .. 4 MiB, ``--repeats`` times each per
  step; truth: each call's bytes and time (``perf_counter_ns`` around the call).
- ``a2a``: 4 ranks, ``all_to_all_single`` with uneven splits: every rank sends ``--hot-factor``
  times more to rank ``--hot-rank``. Truth: bytes each rank sends and receives per step.

torch.profiler (``record_shapes=True``: sizes and peers) records ``--steps`` steps after ``--warmup`` and writes ``rank-<r>.json.gz``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fsdp2(rank, world, a, timer):
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
    for m in net:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m)
    fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(32, 128)

    def step():
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        return {}
    return step


def _pp(rank, world, a, timer):
    import torch
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    torch.manual_seed(rank)
    width = 512
    v = a.virtual if a.schedule == "interleaved" else 1
    n_stages = world * v
    busy = []

    def post(mod, args, out):
        busy[-1] += time.perf_counter_ns()
        # backward of this microbatch: from its output's gradient to the first layer's weight
        # gradient (a module backward hook misses it when the input needs no grad: stage 0)
        out.register_hook(lambda g: busy.append(-time.perf_counter_ns()))

    def grad_done(p):
        busy[-1] += time.perf_counter_ns()

    stages = []
    for j in range(v):    # looped placement: rank r holds stages r, r + world, ...
        sid = rank + j * world
        # the planted slow rank does --slow-factor times the layers: real compute the trace records
        depth = 2 * (a.slow_factor if rank == a.slow_stage else 1)
        sub = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
        sub.register_forward_pre_hook(lambda m, args: busy.append(-time.perf_counter_ns()))
        sub.register_forward_hook(post)
        sub[0].weight.register_post_accumulate_grad_hook(grad_done)
        stages.append(PipelineStage(sub, sid, n_stages, torch.device("cpu")))
    loss_fn = lambda out, y: (out - y).square().mean()
    if a.schedule == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
    else:
        cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
        sched = cls(stages[0], n_microbatches=a.microbatches, loss_fn=loss_fn)
    x = torch.randn(64 * a.microbatches, width)
    y = torch.randn(64 * a.microbatches, width)

    def step():
        busy.clear()
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        return {"busy_ns": sum(busy), "calls": len(busy)}
    return step


def _a2a(rank, world, a, timer):
    import torch
    import torch.distributed as dist

    unit = 4096    # float32 elements per share
    send_splits = [unit * (a.hot_factor if dst == a.hot_rank else 1) for dst in range(world)]
    recv_splits = [unit * (a.hot_factor if rank == a.hot_rank else 1) for _ in range(world)]
    inp = torch.randn(sum(send_splits))
    out = torch.empty(sum(recv_splits))

    def step():
        t = torch.randn(64, 64)
        for _ in range(3):
            t = t @ t / 64
        dist.all_to_all_single(out, inp, recv_splits, send_splits)
        return {"sent_bytes": 4 * sum(send_splits), "recv_bytes": 4 * sum(recv_splits)}
    return step


def _sweep(rank, world, a, timer):
    import torch
    import torch.distributed as dist

    sizes = [2 ** k for k in range(10, 21, 2)]    # float32 elements: 4 KiB .. 4 MiB
    bufs = [torch.ones(n) for n in sizes]

    def step():
        took = []
        for b in bufs:
            for _ in range(a.repeats):
                t0 = time.perf_counter_ns()
                dist.all_reduce(b)
                took.append([4 * b.numel(), time.perf_counter_ns() - t0])
        return {"all_reduce_bytes_ns": took}
    return step


def _worker(rank, world, port, out, a):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    step = {"fsdp2": _fsdp2, "pp": _pp, "a2a": _a2a, "sweep": _sweep}[a.what](rank, world, a, None)
    tmp = Path(out) / f".tmp-rank-{rank}"

    def on_ready(prof):
        tmp.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(tmp / "trace.json"))

    rows = []
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=a.warmup, active=a.steps), record_shapes=True,
                 on_trace_ready=on_ready) as prof:
        for i in range(a.warmup + a.steps):
            dist.barrier()
            t0 = time.perf_counter_ns()
            row = step()
            t1 = time.perf_counter_ns()
            prof.step()
            if i >= a.warmup:
                rows.append(dict(row, step=i, start_ns=t0, step_ns=t1 - t0))
    dist.destroy_process_group()
    with open(tmp / "trace.json", "rb") as f, gzip.open(Path(out) / f"rank-{rank}.json.gz", "wb",
                                                        compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    shutil.rmtree(tmp)
    (Path(out) / f"truth-rank-{rank}.json").write_text(json.dumps(rows))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["fsdp2", "pp", "a2a", "sweep"])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], default="gpipe")
    p.add_argument("--virtual", type=int, default=2, help="interleaved: stages per rank")
    p.add_argument("--world", type=int, default=None, help="ranks (default: a2a 4, else 2)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--slow-stage", type=int, default=1, help="pp: the slow rank; -1: none (balanced)")
    p.add_argument("--slow-factor", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hot-rank", type=int, default=2)
    p.add_argument("--hot-factor", type=int, default=4)
    a = p.parse_args(argv)
    import torch.multiprocessing as mp

    world = a.world or (4 if a.what == "a2a" else 2)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, _free_port(), str(out), a), nprocs=world, join=True)
    per_rank = {}
    for r in range(world):
        f = out / f"truth-rank-{r}.json"
        per_rank[str(r)] = json.loads(f.read_text())
        f.unlink()
    truth = {"what": a.what, "world_size": world, "backend": "gloo", "args": vars(a), "per_rank": per_rank,
             "note": "measured by the loop with time.perf_counter_ns(); pp: busy_ns = time inside the stage "
                     "module's forward (hooks) and backward (from the output's gradient hook to the first layer's weight-gradient hook); a2a: bytes from the "
                     "split sizes (float32)"}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    for r, rows in per_rank.items():
        print(r, [{k: v for k, v in x.items() if k != "start_ns"} for x in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
