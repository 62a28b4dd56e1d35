"""Planted-truth multi-rank jobs: one Kineto trace per rank, one rank made slow.

Every step on every rank: a ``ProfilerStep#N`` range, a compute kernel, then an
all_reduce (record_param_comms on the host, an NCCL kernel on the comm stream). The
slow rank sleeps ``delay_ns`` on the host before each all_reduce, so its NCCL kernel
starts that much later; every rank's all_reduce ends together, ``transfer_ns`` after
the last arrival. Truth, per all_reduce instance:

* transfer = ``transfer_ns``; rank r waits ``arrival_max - arrival_r``;
* the slow rank is last every time and holds the next-latest rank back by
  ``delay_ns + jitter[slow] - max(jitter[others])`` (``delay_ns`` when no jitter);
* step N on rank r lasts ``step_ns + r * step_skew_ns``.

``make_job`` returns the ``Trace`` objects; ``write_job`` writes them with the
Kineto writer (``synth.kineto.write_kineto``) as ``rank-<r>.json.gz``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..table import Trace, TraceMeta, build_table

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GATHER_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE_KERNEL = "ampere_sgemm_128x64_tn"
BASE_TS = 1_700_000_000_000_000_000  # epoch ns
US = 1_000


@dataclass
class JobSpec:
    ranks: int = 4
    steps: int = 5
    slow_rank: int = 2
    delay_ns: int = 3_000 * US        # host sleep before each all_reduce on the slow rank
    transfer_ns: int = 800 * US       # all_reduce time once everybody has arrived
    compute_ns: int = 5_000 * US
    step_ns: int = 20_000 * US        # ProfilerStep length on rank 0
    step_skew_ns: int = 0             # rank r's steps are r * step_skew_ns longer
    jitter_ns: list[int] = field(default_factory=list)  # extra arrival delay per rank
    msg_bytes: int = 4 * 1024 * 1024
    with_seq: bool = True             # record process group + sequence numbers
    drop: dict[int, list[int]] = field(default_factory=dict)  # rank -> steps whose NCCL kernel is missing
    clock_offset_ns: list[int] = field(default_factory=list)  # per-rank clock error (host clocks disagree)
    cause: str = "untraced"           # what the slow rank does while late (see module doc)
    extra: dict[int, list[int]] = field(default_factory=dict)  # rank -> steps with an extra all_gather
    pid_base: int = 1000
    kernel: str = NCCL_KERNEL         # the all_reduce kernel's name (RCCL: "rccl..."/"ncclDevKernel...")
    host_info: bool = True            # False: older traces, no record_param_comms and no kernel args

    def jitter(self, r: int) -> int:
        return int(self.jitter_ns[r]) if self.jitter_ns else 0

    def offset(self, r: int) -> int:
        return int(self.clock_offset_ns[r]) if self.clock_offset_ns else 0

    def arrival(self, r: int) -> int:
        """NCCL kernel start relative to the step start (true clock)."""
        return 50 * US + self.compute_ns + 100 * US + self.jitter(r) + (self.delay_ns if r == self.slow_rank else 0)

    def truth(self) -> dict:
        arr = {r: self.arrival(r) for r in range(self.ranks)}
        last = max(arr.values())
        others = [a for r, a in arr.items() if r != self.slow_rank]
        return {
            "transfer_ns": self.transfer_ns,
            "wait_ns": {r: last - a for r, a in arr.items()},
            "dur_ns": {r: last - a + self.transfer_ns for r, a in arr.items()},
            "straggler": self.slow_rank,
            "delay_ns": arr[self.slow_rank] - max(others),
            "step_ns": {r: self.step_ns + r * self.step_skew_ns for r in range(self.ranks)},
        }


def make_job(spec: JobSpec | None = None) -> list[Trace]:
    spec = spec or JobSpec()
    return [_rank_trace(spec, r) for r in range(spec.ranks)]


CAUSES = ("untraced", "dataloader", "cpu_op", "gpu_compute")
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _rank_trace(spec: JobSpec, r: int) -> Trace:
    if spec.cause not in CAUSES:
        raise ValueError(f"cause must be one of {CAUSES}")
    pid, tid = spec.pid_base + r, spec.pid_base + r
    period = spec.step_ns + (spec.ranks - 1) * spec.step_skew_ns + 10_000 * US
    last_arrival = max(spec.arrival(q) for q in range(spec.ranks))
    rows: dict[str, list] = {c: [] for c in ("ts", "dur", "kind", "name", "cat", "pid", "tid", "device",
                                              "stream", "correlation", "external_id", "collective",
                                              "msg_bytes", "msg_nelems", "dtype", "group_size",
                                              "process_group", "seq")}

    def add(**kw):
        for c in rows:
            rows[c].append(kw.get(c, None if c in ("collective", "dtype", "process_group", "cat") else -1))

    corr = 1
    for s in range(spec.steps):
        t0 = BASE_TS + s * period + spec.offset(r)
        step = s + 1
        add(ts=t0, dur=spec.step_ns + r * spec.step_skew_ns, kind="annotation", name=f"ProfilerStep#{step}",
            cat="user_annotation", pid=pid, tid=tid)
        # compute: aten::mm -> cudaLaunchKernel -> gemm kernel
        add(ts=t0 + 10 * US, dur=30 * US, kind="cpu_op", name="aten::mm", cat="cpu_op", pid=pid, tid=tid,
            external_id=corr)
        add(ts=t0 + 20 * US, dur=10 * US, kind="runtime", name="cudaLaunchKernel", cat="cuda_runtime",
            pid=pid, tid=tid, correlation=corr, external_id=corr)
        slow = r == spec.slow_rank
        longer = spec.delay_ns if slow and spec.cause == "gpu_compute" else 0
        add(ts=t0 + 50 * US, dur=spec.compute_ns + longer, kind="kernel", name=COMPUTE_KERNEL, cat="kernel",
            pid=pid, device=r, stream=7, correlation=corr, external_id=corr)
        corr += 1
        arrive = t0 + spec.arrival(r)
        if slow and spec.cause in ("dataloader", "cpu_op"):
            name, kind = (DATALOADER, "annotation") if spec.cause == "dataloader" else ("aten::nonzero", "cpu_op")
            add(ts=arrive - 40 * US - spec.delay_ns, dur=spec.delay_ns, kind=kind, name=name,
                cat="user_annotation" if kind == "annotation" else "cpu_op", pid=pid, tid=tid)
        if slow and spec.cause == "gpu_compute":  # the host waits for its GPU
            add(ts=t0 + 60 * US, dur=arrive - 60 * US - 45 * US - t0, kind="runtime", name="cudaStreamSynchronize",
                cat="cuda_runtime", pid=pid, tid=tid)
        if step in spec.extra.get(r, []):  # a small all_gather only this rank issues, before the all_reduce
            g0 = t0 + 50 * US + 20 * US
            info = dict(collective="all_gather", msg_bytes=64, msg_nelems=16, dtype="Float",
                        group_size=spec.ranks)
            add(ts=g0 - 30 * US, dur=10 * US, kind="runtime", name="cudaLaunchKernel", cat="cuda_runtime",
                pid=pid, tid=tid, correlation=corr, external_id=corr)
            add(ts=g0, dur=30 * US, kind="kernel", name=GATHER_KERNEL, cat="kernel", pid=pid, device=r,
                stream=20, correlation=corr, external_id=corr, **info)
            corr += 1
        if step in spec.drop.get(r, []):
            continue
        # all_reduce: record_param_comms -> cudaLaunchKernel -> NCCL kernel (launched just in time)
        end = t0 + last_arrival + spec.transfer_ns
        coll = dict(collective="all_reduce", msg_bytes=spec.msg_bytes, msg_nelems=spec.msg_bytes // 4,
                    dtype="Float", group_size=spec.ranks,
                    process_group="0" if spec.with_seq else None, seq=s if spec.with_seq else -1)
        if spec.host_info:
            add(ts=arrive - 40 * US, dur=35 * US, kind="cpu_op", name="record_param_comms", cat="cpu_op",
                pid=pid, tid=tid, external_id=corr, **coll)
        launch = "hipLaunchKernel" if spec.kernel.startswith("rccl") else "cudaLaunchKernel"
        add(ts=arrive - 30 * US, dur=10 * US, kind="runtime", name=launch, cat="cuda_runtime",
            pid=pid, tid=tid, correlation=corr, external_id=corr)
        add(ts=arrive, dur=end - arrive, kind="kernel", name=spec.kernel, cat="kernel", pid=pid, device=r,
            stream=20, correlation=corr, external_id=corr, **(coll if spec.host_info else {}))
        corr += 1
    n = len(rows["ts"])
    cols = {c: (np.asarray(v, dtype=np.int64) if c not in ("kind", "name", "cat", "collective", "dtype",
                                                         "process_group") else v)
            for c, v in rows.items()}
    table = build_table(cols, n)
    meta = TraceMeta(path=f"rank-{r}.json.gz", format="kineto", format_version="1.0.1",
                     producer="traceread.synth.multirank", clock="epoch_ns", rank=r, world_size=spec.ranks,
                     rank_source="distributedInfo",
                     distributed={"backend": "nccl", "rank": r, "world_size": spec.ranks},
                     devices=[{"device": r, "name": "Synthetic GPU"}],
                     processes={pid: f"rank{r}"}, threads={tid: "main"})
    return Trace(table, meta)


def write_job(out_dir: str | Path, spec: JobSpec | None = None, name: str = "rank-{rank}.json.gz") -> list[Path]:
    """Write one Kineto trace per rank into ``out_dir``; returns the paths."""
    from .kineto import write_kineto

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in make_job(spec):
        p = out / name.format(rank=t.meta.rank)
        t.meta.path = str(p)
        write_kineto(t, p)
        paths.append(p)
    return paths


def write_nsys_job(path: str | Path, spec: JobSpec | None = None) -> Path:
    """The whole job as ONE nsys SQLite export (``nsys profile torchrun``): one process
    per rank (pid ``pid_base + r``, GPU ``r``), one session clock (``clock_offset_ns``
    is ignored). Host ranges become NVTX ranges, so no collective sizes."""
    from .nsys import NsysWriter

    spec = spec or JobSpec()
    shift = BASE_TS - 1_000 * US
    w = NsysWriter(path)
    w.session_start(BASE_TS)
    for t in make_job(JobSpec(**{**spec.__dict__, "clock_offset_ns": []})):
        r = t.meta.rank
        pid = tid = spec.pid_base + r
        w.process(pid, "python3")
        w.thread(pid, tid, "python3")
        w.gpu(r, "Synthetic GPU")
        ev = t.events
        for row in ev.itertuples(index=False):
            a, b = int(row.ts) - shift, int(row.ts + row.dur) - shift
            if row.kind == "kernel":
                w.kernel(a, b, str(row.name), pid, int(row.device), int(row.stream), corr=int(row.correlation))
            elif row.kind == "runtime":
                w.runtime(a, b, f"{row.name}_v7000", pid, tid, corr=int(row.correlation))
            elif row.kind in ("annotation", "cpu_op"):
                w.nvtx_range(a, b, str(row.name), pid, tid)
    return w.close()


def write_nsys_gloo_job(path: str | Path, ranks: int = 2, steps: int = 5, slow_rank: int = 1,
                        delay_ns: int = 30_000 * US, transfer_ns: int = 2_000 * US, markers: bool = True,
                        osrt: bool = True) -> tuple[Path, dict]:
    """A gloo DDP job on GPUs as ONE nsys export, as ``nsys profile --trace=cuda,nvtx,osrt
    torchrun`` records it: no communication kernel and no collective range (gloo runs the
    all-reduce on its own CPU threads), so nothing can be matched across ranks.

    Per rank (pid ``5000 + r``, main thread tid == pid, autograd thread pid + 1, GPU r),
    per step: an NVTX ``step_N`` range on the main thread (``markers``); the slow rank's
    main thread sleeps ``delay_ns`` (OSRT ``clock_nanosleep``) before its forward; the main
    thread launches 5 forward kernels, then parks in ``pthread_cond_wait`` while the
    autograd thread launches 5 backward kernels (6 ms) and itself waits in
    ``pthread_cond_wait`` for gloo's all-reduce, which ends ``transfer_ns`` after the last
    rank's backward ends; the autograd thread also parks between backwards (engine queue).
    Truth: the slow rank is late by ``delay_ns`` every step; the main thread of every other
    rank waits ``delay_ns`` longer per step than the slow rank's.
    """
    from .nsys import NsysWriter

    w = NsysWriter(path)
    w.session_start(BASE_TS)
    fwd, bwd = 1_000 * US, 6_000 * US
    arrive = {r: 200 * US + (delay_ns if r == slow_rank else 0) + 5 * fwd // 5 + 500 * US + bwd
              for r in range(ranks)}
    done = max(arrive.values()) + transfer_ns
    step_len = done + 1_000 * US
    period = step_len + 1_000 * US
    for r in range(ranks):
        pid = tid = 5000 + r * 10
        ag = pid + 1
        w.process(pid, "python3")
        w.thread(pid, tid, "python3")
        w.thread(pid, ag, "pt_autograd_0")
        w.gpu(r, "NVIDIA H100 80GB HBM3")
        corr = 1
        for k in range(steps):
            t0 = 1_000 * US + k * period
            if markers:
                w.nvtx_range(t0, t0 + step_len, f"step_{k}", pid, tid)
            t = t0 + 100 * US
            if r == slow_rank:
                w.osrt(t, t + delay_ns, "clock_nanosleep", pid, tid)
                t += delay_ns
            t += 100 * US
            gpu_t = t + 20 * US
            for i in range(5):   # forward
                w.runtime(t + i * 20 * US, t + i * 20 * US + 8 * US, "cudaLaunchKernel_v7000", pid, tid, corr=corr)
                w.kernel(gpu_t + i * fwd // 5, gpu_t + (i + 1) * fwd // 5, "ampere_sgemm_128x64_tn", pid, r, 7,
                         corr=corr)
                corr += 1
            b0 = t + 500 * US + fwd
            w.osrt(t0 + 10 * US, b0 - 10 * US, "pthread_cond_wait", pid, ag)     # engine queue
            w.osrt(b0 - 200 * US, t0 + done + 50 * US, "pthread_cond_wait", pid, tid)  # main: backward()
            for i in range(5):   # backward on the autograd thread
                a = b0 + i * bwd // 5
                w.runtime(a, a + 8 * US, "cudaLaunchKernel_v7000", pid, ag, corr=corr)
                w.kernel(a + 10 * US, a + bwd // 5, "ampere_sgemm_128x64_nn", pid, r, 7, corr=corr)
                corr += 1
            w.osrt(t0 + arrive[r], t0 + done, "pthread_cond_wait", pid, ag)     # gloo all-reduce
            o = t0 + done + 100 * US
            w.runtime(o, o + 8 * US, "cudaLaunchKernel_v7000", pid, tid, corr=corr)
            w.kernel(o + 20 * US, o + 220 * US, "multi_tensor_apply_kernel", pid, r, 7, corr=corr)
            corr += 1
    if osrt is False:
        w.con.execute("DELETE FROM OSRT_API")
    truth = {"straggler": slow_rank, "late_by_ns": delay_ns, "steps": steps,
             "wait_excess_ns": delay_ns, "transfer_ns": transfer_ns}
    return w.close(), truth


__all__ = ["JobSpec", "make_job", "write_job", "write_nsys_job", "write_nsys_gloo_job"]
