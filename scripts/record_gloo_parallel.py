"""Record real gloo jobs of other parallel layouts (CPU torch), plus the loop's own truth.

    python scripts/record_gloo_parallel.py {fsdp2,pp,a2a,sweep,tp,subgroups,fr} OUT_DIR [--steps 3] [--warmup 1]

- ``fsdp2``: 2 ranks, FSDP2 ``fully_shard`` on each Linear of a small MLP and on the root.
  Rank ``--slow-stage`` may be planted slow before each step's forward: ``--sleep-ms``
  (``time.sleep``: untraced) or ``--extra-ms`` (``torch.mm`` calls until that long has passed:
  traced CPU operators only that rank runs); truth per step: ``planted_ns`` (measured).
- ``pp``: ``--world`` ranks (2), ``torch.distributed.pipelining`` ``--schedule`` (GPipe, 1F1B, or
  interleaved 1F1B with ``--virtual`` stages per rank, placed looped: rank r holds stages r,
  r + world, ...), ``--microbatches`` (4); rank ``--slow-stage`` (-1: none, a balanced pipeline)
  has ``--slow-factor`` times the layers in each of its stages.
  ``--sleep-ms``: the slow rank also sleeps that long (untraced) inside each microbatch's
  forward. Truth per rank and step: time inside the stage's own forward/backward (module hooks,
  ``perf_counter_ns``; a planted sleep included), the step time, ``span_ns`` (barrier and step:
  what the trace's ProfilerStep covers), ``p2p_ns`` (time inside the schedule's
  P2P calls: issue ``_batch_p2p`` + blocking wait ``_wait_batch_p2p``) and ``barrier_ns`` (the
  loop's own barrier before the step); ``p2p_ns / span_ns`` is the loop's bubble.
- ``sweep``: ``--world`` ranks (2), blocking ``all_reduce`` of float32 buffers of 2**k elements,
  k = ``--min-exp`` (10), + ``--exp-step``, .. ``--max-exp`` (default 10..20 by 2: 4 KiB .. 4 MiB),
  ``--repeats`` times each per step; truth: each call's bytes and time (``perf_counter_ns``
  around the call).
- ``tp``: 2 ranks, DTensor tensor parallel inference (``torch.no_grad``): ``--tp-layers``
  MLP blocks Linear(w, 4w) -> GELU -> Linear(4w, w), ``parallelize_module`` with
  ColwiseParallel on the first Linear and RowwiseParallel on the second (its output is
  all_reduced over the TP group). Truth per step and layer: ``layer_ns`` (block pre-forward
  hook to the all_reduce's end) and ``comm_ns`` (from a forward hook that runs before
  RowwiseParallel's output hook -- which issues the all_reduce -- to one after it that waits
  on the result).
- ``a2a``: 4 ranks, ``all_to_all_single`` with uneven splits: every rank sends ``--hot-factor``
  times more to rank ``--hot-rank``. Truth: bytes each rank sends and receives per step.

- ``subgroups``: 3 ranks, process groups [0, 1] and [1, 2]: each step rank ``--slow-stage``
  (0) sleeps ``--sleep-ms`` (20), then ranks 0, 1 all_reduce 4096 floats in [0, 1] and ranks
  1, 2 in [1, 2] -- rank 1 passes rank 0's delay on to rank 2. Truth per step: each rank's
  entry time into each group's all_reduce (``perf_counter_ns``).
- ``fr``: ``--world`` ranks (2), no profiler: the Flight Recorder (``TORCH_FR_BUFFER_SIZE``;
  gloo records one in torch 2.13) dumped per rank as ``fr-rank-<r>.json``
  (``torch._C._distributed_c10d._dump_fr_trace_json``). Each step: ``--repeats`` blocking
  ``all_reduce`` of 1024 floats; rank ``--slow-stage`` sleeps ``--sleep-ms`` before each.
  Truth: each call's wall-clock (``time.time_ns``) entry time per rank.

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
    m = torch.randn(192, 192)

    def plant():
        t0 = time.perf_counter_ns()
        if rank == a.slow_stage and a.sleep_ms:
            time.sleep(a.sleep_ms / 1e3)
        if rank == a.slow_stage and a.extra_ms:
            while time.perf_counter_ns() - t0 < a.extra_ms * 1e6:
                torch.mm(m, m)
        return time.perf_counter_ns() - t0

    def step():
        planted = plant()
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        return {"planted_ns": planted}
    return step


def _subgroups(rank, world, a, timer):
    import torch
    import torch.distributed as dist

    first, second = dist.new_group([0, 1]), dist.new_group([1, 2])
    x = torch.ones(4096)

    def step():
        if rank == a.slow_stage and a.sleep_ms:
            time.sleep(a.sleep_ms / 1e3)
        row = {}
        if rank in (0, 1):
            row["first_entry_ns"] = time.perf_counter_ns()
            dist.all_reduce(x, group=first)
        if rank in (1, 2):
            row["second_entry_ns"] = time.perf_counter_ns()
            dist.all_reduce(x, group=second)
        return row
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

    def pre(mod, args):
        busy.append(-time.perf_counter_ns())
        if rank == a.slow_stage and a.sleep_ms:
            time.sleep(a.sleep_ms / 1e3)   # untraced work: no operator records it

    p2p = [0]
    from torch.distributed.pipelining import schedules as sch

    def timed(fn):
        def wrapper(*args, **kw):
            t = time.perf_counter_ns()
            try:
                return fn(*args, **kw)
            finally:
                p2p[0] += time.perf_counter_ns() - t
        return wrapper
    if not getattr(sch, "_traceread_timed", False):   # the schedule's P2P: issue and wait
        sch._batch_p2p, sch._wait_batch_p2p = timed(sch._batch_p2p), timed(sch._wait_batch_p2p)
        sch._traceread_timed = True

    stages = []
    for j in range(v):    # looped placement: rank r holds stages r, r + world, ...
        sid = rank + j * world
        # the planted slow rank does --slow-factor times the layers: real compute the trace records
        depth = 2 * (a.slow_factor if rank == a.slow_stage else 1)
        sub = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
        sub.register_forward_pre_hook(pre)
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
        p2p[0] = 0
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        return {"busy_ns": sum(busy), "calls": len(busy), "p2p_ns": p2p[0]}
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

    sizes = [2 ** k for k in range(a.min_exp, a.max_exp + 1, a.exp_step)]    # float32 elements
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


def _tp(rank, world, a, timer):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    width = a.tp_width
    blocks = [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                  torch.nn.Linear(4 * width, width)) for _ in range(a.tp_layers)]
    mesh = init_device_mesh("cpu", (world,))
    marks = []   # (layer, what, perf_counter_ns)

    def mark(i, what):
        def hook(mod, args, out=None):
            if what == "comm_end" and hasattr(out, "wait"):
                out = out.wait()    # the all_reduce's result, waited here: comm ends now
            marks.append((i, what, time.perf_counter_ns()))
            return out if what == "comm_end" else None
        return hook

    for i, b in enumerate(blocks):
        b.register_forward_pre_hook(mark(i, "start"))
        # registered before parallelize_module: runs before RowwiseParallel's output hook,
        # which issues the all_reduce; the one registered after runs once it is done
        b[2].register_forward_hook(mark(i, "comm_start"))
        parallelize_module(b, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        b[2].register_forward_hook(mark(i, "comm_end"))
    net = torch.nn.Sequential(*blocks)
    x = torch.randn(a.tp_tokens, width)

    def step():
        marks.clear()
        with torch.no_grad():
            y = net(x)
        float(y.sum())
        at = {(i, w): t for i, w, t in marks}
        layers = [{"layer": i, "layer_ns": at[i, "comm_end"] - at[i, "start"],
                   "comm_ns": at[i, "comm_end"] - at[i, "comm_start"]} for i in range(len(blocks))]
        return {"layers": layers}
    return step


def _flight(rank, world, out, a):
    """The ``fr`` job: blocking all_reduces, one rank late; the Flight Recorder dumped."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace_json

    x = torch.ones(1024)
    rows = []
    for i in range(a.warmup + a.steps):
        took = []
        for _ in range(a.repeats):
            if rank == a.slow_stage and a.sleep_ms:
                time.sleep(a.sleep_ms / 1e3)
            took.append(time.time_ns())
            dist.all_reduce(x)
        if i >= a.warmup:
            rows.append({"step": i, "all_reduce_entry_ns": took})
    dist.barrier()
    (Path(out) / f"fr-rank-{rank}.json").write_bytes(_dump_fr_trace_json())
    dist.destroy_process_group()
    (Path(out) / f"truth-rank-{rank}.json").write_text(json.dumps(rows))


def _worker(rank, world, port, out, a):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if a.what == "fr":
        os.environ["TORCH_FR_BUFFER_SIZE"] = "20000"
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        return _flight(rank, world, out, a)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    step = {"fsdp2": _fsdp2, "pp": _pp, "a2a": _a2a, "sweep": _sweep, "tp": _tp,
            "subgroups": _subgroups}[a.what](rank, world, a, None)
    tmp = Path(out) / f".tmp-rank-{rank}"

    def on_ready(prof):
        tmp.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(tmp / "trace.json"))

    rows = []
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=a.warmup, active=a.steps), record_shapes=True,
                 on_trace_ready=on_ready) as prof:
        for i in range(a.warmup + a.steps):
            tb = time.perf_counter_ns()
            dist.barrier()
            t0 = time.perf_counter_ns()
            row = step()
            t1 = time.perf_counter_ns()
            prof.step()
            if i >= a.warmup:
                # span: what the trace's ProfilerStep covers (barrier and step; the last
                # prof.step() also writes the trace, which no step holds)
                rows.append(dict(row, step=i, start_ns=t0, step_ns=t1 - t0, barrier_ns=t0 - tb,
                                 span_ns=t1 - tb))
    dist.destroy_process_group()
    with open(tmp / "trace.json", "rb") as f, gzip.open(Path(out) / f"rank-{rank}.json.gz", "wb",
                                                        compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    shutil.rmtree(tmp)
    (Path(out) / f"truth-rank-{rank}.json").write_text(json.dumps(rows))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["fsdp2", "pp", "a2a", "sweep", "tp", "fr", "subgroups"])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], default="gpipe")
    p.add_argument("--virtual", type=int, default=2, help="interleaved: stages per rank")
    p.add_argument("--world", type=int, default=None, help="ranks (default: a2a 4, else 2)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--slow-stage", type=int, default=1, help="pp: the slow rank; -1: none (balanced)")
    p.add_argument("--slow-factor", type=int, default=3)
    p.add_argument("--sleep-ms", type=float, default=0.0, help="pp: the slow rank's untraced sleep per forward")
    p.add_argument("--extra-ms", type=float, default=0.0,
                   help="fsdp2: the slow rank's traced extra CPU work (torch.mm) per step")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hot-rank", type=int, default=2)
    p.add_argument("--hot-factor", type=int, default=4)
    p.add_argument("--min-exp", type=int, default=10)
    p.add_argument("--max-exp", type=int, default=20)
    p.add_argument("--exp-step", type=int, default=2)
    p.add_argument("--tp-layers", type=int, default=4)
    p.add_argument("--tp-width", type=int, default=256)
    p.add_argument("--tp-tokens", type=int, default=64)
    a = p.parse_args(argv)
    import torch.multiprocessing as mp

    world = a.world or {"a2a": 4, "subgroups": 3}.get(a.what, 2)
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
