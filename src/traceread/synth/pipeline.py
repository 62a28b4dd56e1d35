"""Planted-truth pipeline x data-parallel jobs (CPU, gloo-like): one Trace per rank.

``PPxDP(stages, dp, ...)``: ``dp`` pipelines of ``stages`` stages; global rank
``stage * dp + d`` is stage ``stage`` of pipeline ``d`` (pipelines ``[d, dp + d, ...]``,
stage k = ranks ``k*dp .. k*dp + dp-1``). Each step runs GPipe: all ``m`` forwards, then
the backwards in reverse stage order; then each stage's data-parallel group (its ``dp``
ranks, process group ``mesh_dp_<k>``) all-reduces its gradients. Stage ``slow_stage``
computes ``slow_x`` times as long. The host is the compute resource (``aten::mm``
operators on the main thread), as on a CPU job; send/recv are ``c10d::send`` /
``c10d::recv_`` with the peer in ``Concrete Inputs``; a recv blocks until its message
arrives; rank ``dp_late_rank`` reaches its DP all_reduce ``dp_late_ns`` late (untraced host
work). Truth (``truth()``): each stage's own work per step (the step less its comm waits), the slow stage's excess
over the other stages' median, and the schedule's bubble for balanced stages.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..table import Trace, TraceMeta, build_table

US = 1_000
BASE_TS = 1_700_000_000_000_000_000


@dataclass
class PPxDP:
    stages: int = 2
    dp: int = 2
    microbatches: int = 4
    steps: int = 4
    fwd_ns: int = 1_000 * US        # one microbatch's forward on a normal stage (backward: 2x)
    slow_stage: int | None = 1
    slow_x: float = 2.0
    op_ns: int = 20 * US            # a send / recv / all_reduce issue op
    allreduce_ns: int = 500 * US    # the DP all_reduce once all its ranks arrived
    dp_late_rank: int | None = None  # this rank reaches its DP all_reduce dp_late_ns late
    dp_late_ns: int = 3_000 * US

    def f(self, k: int) -> int:
        return int(self.fwd_ns * (self.slow_x if k == self.slow_stage else 1))

    def truth(self) -> dict:
        """Each stage's own work per step (its ranks' mean): its forwards and backwards and a
        late rank's untraced work before its all_reduce -- the step less its comm waits (the
        50 us around each step follow a synchronous all_reduce with nothing traced until the
        next step's first operator: they read as that all_reduce's wait)."""
        late = [self.dp_late_ns / self.dp if self.dp_late_rank is not None
                and self.dp_late_rank // self.dp == k else 0 for k in range(self.stages)]
        busy = [int(3 * self.f(k) * self.microbatches + late[k])
                for k in range(self.stages)]
        slow = int(np.argmax(busy))
        others = float(np.median([b for i, b in enumerate(busy) if i != slow]))
        p, m = self.stages, self.microbatches
        return {"busy_ns_by_stage": busy, "slow_stage": self.slow_stage,
                "excess_ns": int(busy[slow] - others) if self.slow_stage is not None else 0,
                "theoretical_bubble_pct": round(100.0 * (p - 1) / (m + p - 1), 1)}


def make_pp_dp_job(spec: PPxDP | None = None) -> list[Trace]:
    spec = spec or PPxDP()
    n = spec.stages * spec.dp
    rows = {r: {c: [] for c in ("ts", "dur", "kind", "name", "cat", "pid", "tid",
                                "concrete_inputs", "process_group")} for r in range(n)}

    def add(r, ts, dur, name, kind="cpu_op", ci=None, pg=None):
        x = rows[r]
        for c, v in (("ts", ts), ("dur", dur), ("kind", kind), ("name", name),
                     ("cat", "cpu_op" if kind == "cpu_op" else "user_annotation"),
                     ("pid", 100 + r), ("tid", 100 + r), ("concrete_inputs", ci),
                     ("process_group", pg)):
            x[c].append(v)

    def peer(to: int) -> str:
        return f'["", "", "{to}", "0"]'

    t = BASE_TS
    for step in range(spec.steps):
        start = t
        free = {r: t + 50 * US for r in range(n)}    # when each rank's thread is free
        for d in range(spec.dp):
            pipe = [k * spec.dp + d for k in range(spec.stages)]
            _gpipe(spec, pipe, free, add, peer)
        # each stage's DP all_reduce: all of its ranks arrive, then it runs allreduce_ns
        for k in range(spec.stages):
            grp = [k * spec.dp + d for d in range(spec.dp)]
            for r in grp:
                if r == spec.dp_late_rank:    # untraced host work before its all_reduce
                    free[r] += spec.dp_late_ns
            done = max(free[r] for r in grp) + spec.allreduce_ns
            for r in grp:
                add(r, free[r], done - free[r], "c10d::allreduce_", pg=f"mesh_dp_{k}")
                free[r] = done
        for r in range(n):    # each rank's step ends when its own loop does
            add(r, start, free[r] + 50 * US - start, f"ProfilerStep#{step + 1}", kind="annotation")
        t = max(free.values()) + 150 * US
    out = []
    for r, cols in rows.items():
        k = len(cols["ts"])
        cols = {c: (np.asarray(v, np.int64) if c in ("ts", "dur", "pid", "tid") else v)
                for c, v in cols.items()}
        meta = TraceMeta(path=f"rank-{r}.json.gz", format="kineto", format_version="1.0.1",
                         producer="traceread.synth.pipeline", clock="epoch_ns", rank=r,
                         world_size=n, rank_source="distributedInfo",
                         distributed={"backend": "gloo", "rank": r, "world_size": n},
                         processes={100 + r: f"rank{r}"}, threads={100 + r: "main"},
                         extra={"host_name": "synth-host"})
        out.append(Trace(build_table(cols, k), meta))
    return out


def _gpipe(spec: PPxDP, pipe: list[int], free: dict, add, peer) -> None:
    """One pipeline's GPipe step: forwards stage by stage, then backwards in reverse."""
    m, op = spec.microbatches, spec.op_ns
    arrive: dict = {}
    for k, r in enumerate(pipe):                 # forwards
        for i in range(m):
            if k:
                ready = free[r]
                got = max(ready, arrive[(k, i)]) + op
                add(r, ready, got - ready, "c10d::recv_", ci=peer(pipe[k - 1]))
                free[r] = got
            a, b = free[r], free[r] + spec.f(k)
            add(r, a, b - a, f"Forward {i}", kind="annotation")
            add(r, a, b - a, "aten::mm")
            free[r] = b
            if k < len(pipe) - 1:
                add(r, b, op, "c10d::send", ci=peer(pipe[k + 1]))
                arrive[(k + 1, i)] = b + op
                free[r] = b + op
    back: dict = {}
    for k in range(len(pipe) - 1, -1, -1):       # backwards
        r = pipe[k]
        for i in range(m):
            if k < len(pipe) - 1:
                ready = free[r]
                got = max(ready, back[(k, i)]) + op
                add(r, ready, got - ready, "c10d::recv_", ci=peer(pipe[k + 1]))
                free[r] = got
            a, b = free[r], free[r] + 2 * spec.f(k)
            add(r, a, b - a, f"Backward {i}", kind="annotation")
            add(r, a, b - a, "aten::mm")
            free[r] = b
            if k:
                add(r, b, op, "c10d::send", ci=peer(pipe[k - 1]))
                back[(k - 1, i)] = b + op
                free[r] = b + op


__all__ = ["PPxDP", "make_pp_dp_job"]
