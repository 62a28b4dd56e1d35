"""Record real gloo DDP captures (CPU torch) with one rank made slow, plus the truth.

    python scripts/record_gloo_ddp.py OUT_DIR [--world 2] [--slow-rank 1] [--delay-ms 30]
                                              [--steps 6] [--warmup 2]

Spawns ``--world`` processes on localhost (torch.distributed, backend gloo). Each
trains a small MLP under DistributedDataParallel (``--device cuda``: on GPU 0, all ranks); the slow rank sleeps
``--delay-ms`` before every forward. torch.profiler records ``--steps`` steps after
``--warmup`` unprofiled ones and writes ``rank-<r>.json.gz`` per rank.

The truth is measured by the loop itself with ``time.perf_counter``:
``truth.json`` holds, per rank and step, the measured sleep and the time spent
inside ``loss.backward()`` (where DDP's gradient all_reduce waits for the late
rank), and the step time. It never comes from traceread.

The committed fixtures under ``tests/fixtures/gloo/`` were made with
``--world 2`` and ``--world 4`` (see tests/fixtures/NOTICE.md).
"""
from __future__ import annotations

import argparse
import contextlib
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


class _NoProfiler:
    def step(self):
        pass


def _worker(rank: int, world: int, port: int, out: str, slow: int, delay_s: float,
            steps: int, warmup: int, device: str = "cpu", nvtx: bool = False) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    width = 256 if device == "cpu" else 4096    # on a GPU: enough work to see kernels
    net = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.ReLU(),
                              torch.nn.Linear(2 * width, width)).to(device)
    model = DDP(net, device_ids=[0] if device == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64 if device == "cpu" else 2048, width, device=device)
    rows = []
    issued: list[int] = []    # perf_counter_ns when DDP hands the gradient bucket to all_reduce
    done: list[int] = []      # ... and when that all_reduce completes

    def timed_allreduce(state, bucket):
        issued.append(time.perf_counter_ns())
        fut = allreduce_hook(None, bucket)
        return fut.then(lambda f: (done.append(time.perf_counter_ns()), f.value())[1])

    model.register_comm_hook(None, timed_allreduce)
    tmp = Path(out) / f".tmp-rank-{rank}"
    sched = schedule(wait=0, warmup=warmup, active=steps, repeat=1)

    def on_ready(prof):
        tmp.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(tmp / "trace.json"))

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    # --nvtx: no torch.profiler (nsys watches the job instead: CUPTI takes one subscriber)
    prof_cm = contextlib.nullcontext(_NoProfiler()) if nvtx else \
        profile(activities=acts, schedule=sched, on_trace_ready=on_ready)
    with prof_cm as prof:
        for i in range(warmup + steps):
            if nvtx:
                torch.cuda.nvtx.range_push(f"step_{i}")
            t0 = time.perf_counter_ns()
            slept = 0
            if rank == slow:
                time.sleep(delay_s)
                slept = time.perf_counter_ns() - t0
            loss = model(x).square().mean()
            b0 = time.perf_counter_ns()
            loss.backward()
            b1 = time.perf_counter_ns()
            opt.step()
            opt.zero_grad()
            # a small metrics all_gather every step: a second collective type to match
            parts = [torch.zeros(1, device=device) for _ in range(world)]
            g0 = time.perf_counter_ns()
            dist.all_gather(parts, loss.detach().reshape(1))
            g1 = time.perf_counter_ns()
            if device == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter_ns()
            if nvtx:
                torch.cuda.nvtx.range_pop()
            prof.step()
            if i >= warmup:  # profiled steps are ProfilerStep#warmup .. warmup+steps-1
                rows.append({"step": i, "start_ns": t0, "sleep_ns": slept, "backward_ns": b1 - b0,
                             "allreduce_issue_ns": issued[-1], "allreduce_done_ns": done[-1],
                             "all_gather_ns": [g0, g1], "step_ns": t1 - t0})
    dist.destroy_process_group()
    if nvtx:
        (Path(out) / f"truth-rank-{rank}.json").write_text(json.dumps(rows))
        return
    with open(tmp / "trace.json", "rb") as f, gzip.open(Path(out) / f"rank-{rank}.json.gz", "wb",
                                                        compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    shutil.rmtree(tmp)
    (Path(out) / f"truth-rank-{rank}.json").write_text(json.dumps(rows))


def record(out: str | Path, world: int = 2, slow: int = 1, delay_ms: float = 30.0, steps: int = 6,
           warmup: int = 2, device: str = "cpu", nvtx: bool = False) -> dict:
    """Record one job into ``out``; returns (and writes) the truth."""
    import torch.multiprocessing as mp

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, _free_port(), str(out), slow, delay_ms / 1e3, steps, warmup,
                            device, nvtx),
             nprocs=world, join=True)
    per_rank = {}
    for r in range(world):
        f = out / f"truth-rank-{r}.json"
        per_rank[str(r)] = json.loads(f.read_text())
        f.unlink()
    truth = {"world_size": world, "backend": "gloo", "device": device, "slow_rank": slow, "planted_delay_ns": int(delay_ms * 1e6),
             "steps": [warmup + k for k in range(steps)], "per_rank": per_rank,
             "note": "measured by the training loop with time.perf_counter_ns() (CLOCK_MONOTONIC: one clock "
                     "for every process of the host, not the trace's epoch clock). sleep_ns: the slow rank's "
                     "sleep before forward; backward_ns: time in loss.backward(); allreduce_issue_ns / "
                     "allreduce_done_ns: when the DDP comm hook handed the gradient bucket to all_reduce "
                     "and when it completed; all_gather_ns: [start, end] of the metrics all_gather; "
                     "step_ns: the whole iteration"}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def arrival_lateness(truth: dict) -> list[tuple[int, int]]:
    """Per profiled step: (rank that issued its all_reduce last, how long after the next-latest)."""
    out = []
    for k in range(len(truth["steps"])):
        t = sorted((rows[k]["allreduce_issue_ns"], int(r)) for r, rows in truth["per_rank"].items())
        out.append((t[-1][1], t[-1][0] - t[-2][0]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--delay-ms", type=float, default=30.0)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: every rank on GPU 0 (gloo moves CUDA tensors through the host)")
    p.add_argument("--nvtx", action="store_true",
                   help="no torch.profiler: NVTX step_<i> ranges, for a whole-job nsys capture")
    a = p.parse_args(argv)
    truth = record(a.out, a.world, a.slow_rank, a.delay_ms, a.steps, a.warmup, a.device, a.nvtx)
    for r, rows in truth["per_rank"].items():
        print(f"rank {r}: sleep {[round(x['sleep_ns'] / 1e6, 2) for x in rows]} ms, "
              f"backward {[round(x['backward_ns'] / 1e6, 2) for x in rows]} ms")
    for k, late in enumerate(arrival_lateness(truth)):
        print(f"step {truth['steps'][k]}: all_reduce last arrival rank {late[0]}, {late[1] / 1e6:.2f} ms "
              f"after the next-latest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
