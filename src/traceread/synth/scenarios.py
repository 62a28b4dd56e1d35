"""Planted-truth training traces: each scenario knows exactly why its GPU starves.

``TraceBuilder`` is the shared helper for writing such scenarios: it appends
host events (operators, python frames, annotations, runtime calls) and GPU
operations with consistent correlation / external ids, and builds a ``Trace``
through ``traceread.table.build_table``. All times are integer ns.

The scenario functions return ``(trace, truth)``; ``truth`` holds the figures
the analysis must reproduce exactly, derived from the scenario's own
parameters (never from running the analysis).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..table import Trace, TraceMeta, build_table

MS = 1_000_000
US = 1_000
DATALOADER_OP = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass
class TraceBuilder:
    """Accumulates events row by row; ``build()`` returns the Trace.

    ``pid``/``tid``/``device``/``stream`` are defaults for the calls below.
    """

    pid: int = 4242
    tid: int = 4242
    device: int = 0
    stream: int = 7
    path: str = "synthetic.json"
    rows: list = field(default_factory=list)
    _corr: int = 1
    _ext: int = 1

    def add(self, kind: str, name: str, ts: int, dur: int, **cols) -> dict:
        """Append one raw event; missing columns take table defaults."""
        row = {"kind": kind, "name": name, "ts": int(ts), "dur": int(dur)}
        row.update(cols)
        self.rows.append(row)
        return row

    def cpu(self, name: str, ts: int, dur: int, *, kind: str = "cpu_op", tid: int | None = None,
            pid: int | None = None, **cols) -> dict:
        """A host event (cpu_op, python, annotation, osrt) on a thread."""
        cols.setdefault("cat", {"cpu_op": "cpu_op", "python": "python_function",
                                "annotation": "user_annotation"}.get(kind, kind))
        return self.add(kind, name, ts, dur, pid=self.pid if pid is None else pid,
                        tid=self.tid if tid is None else tid, **cols)

    def step(self, n: int, ts: int, dur: int, **kw) -> dict:
        """A ``ProfilerStep#n`` user annotation."""
        return self.cpu(f"ProfilerStep#{n}", ts, dur, kind="annotation", **kw)

    def runtime(self, name: str, ts: int, dur: int, *, tid: int | None = None,
                pid: int | None = None, correlation: int = -1, kind: str = "runtime") -> dict:
        return self.add(kind, name, ts, dur, cat="cuda_runtime",
                        pid=self.pid if pid is None else pid, tid=self.tid if tid is None else tid,
                        correlation=correlation)

    def gpu(self, name: str, ts: int, dur: int, *, kind: str = "kernel", device: int | None = None,
            stream: int | None = None, correlation: int = -1, pid: int | None = None,
            **cols) -> dict:
        """A GPU operation (kernel, memcpy, memset) with no launch record."""
        return self.add(kind, name, ts, dur, cat=kind, pid=self.pid if pid is None else pid,
                        tid=-1, device=self.device if device is None else device,
                        stream=self.stream if stream is None else stream,
                        correlation=correlation, **cols)

    def launch(self, api_ts: int, api_dur: int, gpu_ts: int, gpu_dur: int, *,
               name: str = "void gemm_kernel<float>(float*)", api: str = "cudaLaunchKernel",
               kind: str = "kernel", tid: int | None = None, pid: int | None = None,
               device: int | None = None, stream: int | None = None, **gpu_cols) -> int:
        """A runtime launch call and the GPU op it enqueued, sharing a correlation id."""
        corr = self._corr
        self._corr += 1
        self.runtime(api, api_ts, api_dur, tid=tid, pid=pid, correlation=corr)
        self.gpu(name, gpu_ts, gpu_dur, kind=kind, device=device, stream=stream,
                 correlation=corr, pid=pid, **gpu_cols)
        return corr

    def op_with_kernel(self, op: str, ts: int, dur: int, api_off: int, api_dur: int,
                       gpu_ts: int, gpu_dur: int, **kw) -> int:
        """An operator whose body makes one launch call at ``ts + api_off``."""
        self.cpu(op, ts, dur, tid=kw.get("tid"), pid=kw.get("pid"))
        return self.launch(ts + api_off, api_dur, gpu_ts, gpu_dur, **kw)

    def build(self, **meta) -> Trace:
        n = len(self.rows)
        keys = sorted({k for r in self.rows for k in r})
        cols = {}
        for k in keys:
            vals = [r.get(k) for r in self.rows]
            if k in ("kind", "name", "cat", "copy_kind", "collective", "dtype", "process_group",
                     "domain", "short_name", "raw_name", "input_dims", "input_type",
                     "concrete_inputs", "launch"):
                cols[k] = vals
            else:
                cols[k] = np.array([-1 if v is None else v for v in vals], dtype=np.int64)
        meta.setdefault("path", self.path)
        meta.setdefault("format", "kineto")
        meta.setdefault("clock", "epoch_ns")
        return Trace(build_table(cols, n), TraceMeta(**meta))


# --------------------------------------------------------------------------- scenarios

T0 = 1_700_000_000_000_000_000  # an epoch-ns origin, like a real Kineto trace


def dataloader_bound(steps: int = 5, period: int = 50 * MS, fetch: int = 30 * MS,
                     kernels: int = 10, kernel_dur: int = 1500 * US,
                     with_side_thread: bool = True) -> tuple[Trace, dict]:
    """Every step fetches its batch on the launch thread (num_workers=0), then launches.

    Step k starts at s = T0 + k*period:
      [s, s+fetch)        DataLoader __next__ (cpu_op) on the main thread
      op i, i < kernels:  aten::mm [s+fetch+i*200us, +200us) with cudaLaunchKernel
                          at +50us for 20us; its kernel runs back to back from
                          s+fetch+100us, ``kernel_dur`` each.
    Between the last kernel of step k and the first kernel of step k+1 the GPU
    idles for period - kernels*kernel_dur: the tail of step k (host untraced),
    the fetch of step k+1, then 100us of aten::mm (of which 20us launch).
    A side thread (pin-memory-like, no launches) is busy throughout and must
    not be counted.
    """
    b = TraceBuilder(path="dataloader_bound.json")
    busy_per_step = kernels * kernel_dur
    for k in range(steps):
        s = T0 + k * period
        b.step(k, s, period)
        b.cpu(DATALOADER_OP, s, fetch)
        k0 = s + fetch + 100 * US
        for i in range(kernels):
            b.op_with_kernel("aten::mm", s + fetch + i * 200 * US, 200 * US, 50 * US, 20 * US,
                             k0 + i * kernel_dur, kernel_dur)
    if with_side_thread:
        b.cpu("aten::pin_memory", T0, steps * period, tid=9999)
    gap = period - busy_per_step
    tail = period - (fetch + 100 * US + busy_per_step)  # host untraced after launching
    n_gaps = steps - 1
    # The window is the steps' span: every step contributes the same idle time --
    # the first fetch (a leading edge gap) and the last tail (a trailing one) included.
    truth = {
        "steps": steps,
        "step_dur": period,
        "window_ns": steps * period,
        "busy_ns": steps * busy_per_step,
        "idle_ns": steps * gap,
        "gap_count": n_gaps + 2,
        "gap_ns": gap,
        "by_cpu": {"dataloader": steps * fetch, "untraced": steps * tail,
                   "cpu_op": steps * 80 * US, "launch": steps * 20 * US},
        # the first kernel of a step starts 30us after its launch call returned: a queued
        # tail (host_late_queued_ns) of a host-late gap, which counts whole by its label
        "by_drain": {"starved": steps * gap, "sync": 0, "queued": 0},
        "bound": "data",
    }
    return b.build(), truth


def item_sync_bound(steps: int = 6, kernels: int = 20, kernel_dur: int = 250 * US,
                    host_after: int = 2 * MS) -> tuple[Trace, dict]:
    """Every step ends with ``loss.item()``: the queue drains, then the host works alone.

    Step k starts at s:
      op i: aten::add [s + i*100us, +100us), launch at +40us for 20us; kernels run
            back to back from s+100us, ``kernel_dur`` each, until s+100us+K.
      aten::item [s+2ms, E+20us) > aten::_local_scalar_dense > cudaMemcpyAsync
            [s+2.05ms, +10us) (D2H memcpy of 10us on the GPU right after the
            last kernel, ending at E = s+100us+K+10us) and cudaStreamSynchronize
            [s+2.07ms, E+5us).
      host after the sync: python ``print`` [E+20us, E+20us+host_after/2),
            aten::zero_ (no launch) for the other half.
    Next step starts at E+20us+host_after; its first kernel 100us later.
    Each gap (between steps) = 20us + host_after + 100us, drained by aten::item.
    """
    b = TraceBuilder(path="item_sync_bound.json")
    K = kernels * kernel_dur
    s = T0
    gap = 20 * US + host_after + 100 * US
    for k in range(steps):
        E = s + 100 * US + K + 10 * US
        end = E + 20 * US + host_after
        b.step(k, s, end - s)
        for i in range(kernels):
            b.op_with_kernel("aten::add", s + i * 100 * US, 100 * US, 40 * US, 20 * US,
                             s + 100 * US + i * kernel_dur, kernel_dur)
        b.cpu("aten::item", s + 2 * MS, E + 20 * US - (s + 2 * MS))
        b.cpu("aten::_local_scalar_dense", s + 2 * MS + 10 * US, E + 15 * US - (s + 2 * MS + 10 * US))
        b.launch(s + 2 * MS + 50 * US, 10 * US, E - 10 * US, 10 * US, name="Memcpy DtoH (Device -> Pageable)",
                 api="cudaMemcpyAsync", kind="memcpy", copy_kind="DtoH", bytes=4)
        b.runtime("cudaStreamSynchronize", s + 2 * MS + 70 * US, E + 5 * US - (s + 2 * MS + 70 * US))
        half = host_after // 2
        b.cpu("builtins.print", E + 20 * US, half, kind="python")
        b.cpu("aten::zero_", E + 20 * US + half, host_after - half)
        s = end
    n_gaps = steps - 1
    step_dur = 100 * US + K + 10 * US + 20 * US + host_after
    # Window = the steps' span: a leading edge gap (the first step's 100us of ops,
    # starved) and a trailing one (after the last drain: 20us + host_after, sync).
    truth = {
        "steps": steps,
        "step_dur": step_dur,
        "busy_ns": steps * (K + 10 * US),
        "idle_ns": n_gaps * gap + 100 * US + 20 * US + host_after,
        "gap_count": n_gaps + 2,
        "window_ns": steps * step_dur,
        # per step: 20us inside aten::item after the GPU drained (sync),
        # host_after/2 python, host_after/2 + 80us cpu_op, 20us launch.
        "by_cpu": {"sync": steps * 20 * US,
                   "python": steps * (host_after // 2),
                   "cpu_op": steps * (host_after - host_after // 2 + 80 * US),
                   "launch": steps * 20 * US},
        # the first kernel of a step starts 40us after its launch returned: a queued tail
        # of its host-late gap (sync-drained; the first step's starved), counted whole by
        # its label; the trailing edge gap has no closing op
        "by_drain": {"sync": steps * (20 * US + host_after) + n_gaps * 60 * US
                     + (steps - 1) * 40 * US, "starved": 60 * US + 40 * US, "queued": 0},
        "drain_op": "aten::item",
        "bound": "sync",
    }
    return b.build(), truth


def launch_bound(steps: int = 3, ops_per_step: int = 100, op_dur: int = 40 * US,
                 api_off: int = 20 * US, api_dur: int = 15 * US,
                 kernel_dur: int = 5 * US) -> tuple[Trace, dict]:
    """Tiny kernels: the host needs ``op_dur`` per op, the GPU only ``kernel_dur``.

    Ops are back to back on the main thread (steps contiguous); op j at o_j runs
    cudaLaunchKernel [o_j+api_off, +api_dur) and its kernel starts 5us after the
    launch call returns. Every gap is op_dur - kernel_dur long: api_off+5us-
    kernel_dur... of operator time and ``api_dur`` of launch time.
    """
    b = TraceBuilder(path="launch_bound.json")
    lat = 5 * US
    t = T0
    for k in range(steps):
        b.step(k, t, ops_per_step * op_dur)
        for _ in range(ops_per_step):
            b.op_with_kernel("aten::add", t, op_dur, api_off, api_dur,
                             t + api_off + api_dur + lat, kernel_dur,
                             name="void elementwise_kernel<128, 2>(int)")
            t += op_dur
    n = steps * ops_per_step
    n_gaps = n - 1
    gap = op_dur - kernel_dur
    lead = api_off + api_dur + lat   # the first op's host time before its kernel (edge gap)
    truth = {
        "steps": steps,
        "step_dur": ops_per_step * op_dur,
        "busy_ns": n * kernel_dur,
        "idle_ns": n_gaps * gap + lead,
        "gap_count": n_gaps + 1,
        "window_ns": n_gaps * op_dur + lead + kernel_dur,
        "by_cpu": {"launch": (n_gaps + 1) * api_dur,
                   "cpu_op": n_gaps * (gap - api_dur) + lead - api_dur},
        # kernels start 5us after their launch returns: within SKEW_NS, not queued
        "by_drain": {"starved": n_gaps * gap + lead, "sync": 0, "queued": 0},
        "bound": "launch",
    }
    return b.build(), truth


def gpu_bound(steps: int = 4, kernels: int = 50, kernel_dur: int = 2 * MS, bubble: int = 2 * US,
              relaunch: int = 60 * US) -> tuple[Trace, dict]:
    """Dense GPU work: the host runs far ahead, kernels are separated by tiny bubbles.

    Step k: 50 ops of 20us launched from s; kernel i of the step runs at
    g0 + i*(kernel_dur+bubble). A memset on a second stream covers the first
    bubble of every step (so it is not idle: union over streams). At the end of
    the step the host calls cudaDeviceSynchronize, which returns 3us after the
    last kernel; the next step starts then and its first kernel starts
    ``relaunch`` after the previous one ended.
    """
    b = TraceBuilder(path="gpu_bound.json")
    s = T0
    g0 = s + relaunch
    per_step_kernels = kernels * kernel_dur + (kernels - 1) * bubble
    for k in range(steps):
        g_end = g0 + per_step_kernels
        b.step(k, s, g_end + 3 * US - s)
        for i in range(kernels):
            b.op_with_kernel("aten::mm", s + i * 20 * US, 20 * US, 5 * US, 10 * US,
                             g0 + i * (kernel_dur + bubble), kernel_dur,
                             name="ampere_sgemm_128x64_nn")
        # memset on stream 8 exactly filling the first bubble of the step
        b.launch(s + kernels * 20 * US, 5 * US, g0 + kernel_dur, bubble, api="cudaMemsetAsync",
                 kind="memset", name="Memset (Device)", stream=8, bytes=1024)
        b.runtime("cudaDeviceSynchronize", s + kernels * 20 * US + 10 * US,
                  g_end + 3 * US - (s + kernels * 20 * US + 10 * US))
        s = g_end + 3 * US
        g0 = g_end + relaunch
    n_gaps_bubbles = steps * (kernels - 2)
    # Window = the steps' span: a leading edge gap (the first ``relaunch`` of ops,
    # starved) and a trailing one (3us until cudaDeviceSynchronize returns, sync).
    truth = {
        "steps": steps,
        "busy_ns": steps * (kernels * kernel_dur + bubble),
        "idle_ns": n_gaps_bubbles * bubble + steps * relaunch + 3 * US,
        "gap_count": n_gaps_bubbles + steps + 1,
        "window_ns": steps * (per_step_kernels + relaunch) + 3 * US,
        # bubbles: the next kernel was launched long before (queued, GPU-side); a step's
        # first kernel starts relaunch - 18us after its launch returned (first step: - 15us)
        # (that tail is host_late_queued_ns: the gaps count whole by their label)
        "by_drain": {"sync": (steps - 1) * relaunch + 3 * US, "starved": relaunch,
                     "queued": n_gaps_bubbles * bubble},
        "by_cpu": _gpu_bound_cpu(steps, n_gaps_bubbles * bubble, relaunch),
        "drain_op": "cudaDeviceSynchronize",
        "bound": "gpu",
    }
    return b.build(), truth


def _gpu_bound_cpu(steps: int, bubbles_ns: int, relaunch: int) -> dict:
    # Bubbles fall inside cudaDeviceSynchronize; each step-boundary gap is 3us of
    # the sync tail, then ops of 20us (5us operator, 10us launch, 5us operator).
    # The leading edge is ``relaunch`` of such ops; the trailing one 3us of sync.
    def ops_split(r):
        launch = (r // (20 * US)) * 10 * US + min(max(r % (20 * US) - 5 * US, 0), 10 * US)
        return launch, r - launch

    n = steps - 1
    mid_launch, mid_op = ops_split(relaunch - 3 * US)
    lead_launch, lead_op = ops_split(relaunch)
    return {"sync": bubbles_ns + n * 3 * US + 3 * US, "launch": n * mid_launch + lead_launch,
            "cpu_op": n * mid_op + lead_op}


SCENARIOS = {
    "data": dataloader_bound,
    "sync": item_sync_bound,
    "launch": launch_bound,
    "gpu": gpu_bound,
}


def write_nsys(trace: Trace, path, schema: str = "3.x", start_ns: int = 1 * MS):
    """Write a builder-made trace as an Nsight Systems SQLite export.

    GPU ops and runtime calls map to the CUPTI tables, OS-runtime calls to OSRT_API;
    every host range (operator, python frame, annotation) becomes an NVTX push/pop range, the
    way ``torch.autograd.profiler.emit_nvtx`` shows operators. Times are
    shifted so the first event starts at ``start_ns`` (session-relative).
    """
    from .nsys import NsysWriter

    ev = trace.events
    shift = int(ev["ts"].min()) - start_ns if len(ev) else 0
    w = NsysWriter(path, schema)
    w.session_start(shift)
    pids = sorted(int(p) for p in ev["pid"].unique() if p >= 0)
    for p in pids:
        w.process(p, "python")
    names = {int(x.get("device", -1)): str(x.get("name", "")) for x in trace.meta.devices
             if isinstance(x, dict)}
    for d in sorted(int(d) for d in ev["device"].unique() if d >= 0):
        w.gpu(d, names.get(d) or "NVIDIA H100")
    copy = {"HtoD": 1, "DtoH": 2, "DtoD": 8}
    for r in ev.itertuples(index=False):
        s, e = int(r.ts) - shift, int(r.ts + r.dur) - shift
        corr = max(int(r.correlation), 0)
        kind, name = str(r.kind), str(r.name)
        if kind == "kernel":
            w.kernel(s, e, name, int(r.pid), int(r.device), int(r.stream), corr=corr)
        elif kind == "memcpy":
            w.memcpy(s, e, max(int(r.bytes), 0), copy.get(str(r.copy_kind), 8), int(r.pid),
                     int(r.device), int(r.stream), corr=corr, pageable="Pageable" in name)
        elif kind == "memset":
            w.memset(s, e, max(int(r.bytes), 0), int(r.pid), int(r.device), int(r.stream),
                     corr=corr)
        elif kind in ("runtime", "driver"):
            w.runtime(s, e, name, int(r.pid), int(r.tid), corr=corr)
        elif kind in ("cpu_op", "python", "annotation"):
            w.nvtx_range(s, e, name, int(r.pid), int(r.tid))
        elif kind == "osrt":
            w.osrt(s, e, name, int(r.pid), int(r.tid))
    return w.close()
