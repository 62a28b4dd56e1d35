"""One Nsight Systems export holding several ranks (``nsys profile torchrun --nproc-per-node N``):
split it by process into one trace per rank and analyse them as one job.

A process is a rank when it ran GPU work. nsys records no rank number, so ranks
are numbered by the GPU each process used (``LOCAL_RANK`` selects ``cuda:LOCAL_RANK``
under torchrun), then by pid. All parts share the export's session clock
(``extra["clock_domain"]``): clock offsets are never applied between them.
"""
from __future__ import annotations

import copy

import pyarrow as pa
import pyarrow.compute as pc

from ..table import GPU_OP_KINDS, Trace, filter_rows


def gpu_processes(trace: Trace) -> list[tuple[int, int]]:
    """(pid, first device) of every process with GPU operations, in rank order."""
    if trace.has_frame:
        ev = trace.events
        gpu = ev[ev["kind"].isin(GPU_OP_KINDS).to_numpy() & (ev["pid"] >= 0).to_numpy()]
        if gpu.empty:
            return []
        first = gpu.groupby("pid", observed=True)["device"].min()
        pairs = first.items()
    else:   # from the table: a whole export's frame would be built only to be split
        t = trace.table
        gpu = t.filter(pc.and_(pc.is_in(t.column("kind"), value_set=pa.array(GPU_OP_KINDS)),
                               pc.greater_equal(t.column("pid"), 0)))
        first = gpu.group_by("pid").aggregate([("device", "min")])
        pairs = zip(first.column("pid").to_pylist(), first.column("device_min").to_pylist())
    return sorted(((int(p), int(d)) for p, d in pairs), key=lambda pd_: (pd_[1], pd_[0]))


def split_processes(trace: Trace) -> list[Trace]:
    """One Trace per GPU process when the trace holds >= 2 of them (nsys); else [].

    Read from the table as loaded: the whole export's DataFrame is never built (it and
    the table rebuilt from it stayed beside the parts: ~2x the export's table more). Each
    part is filtered a column once (``filter_rows``): its all-default columns share one
    array, as the export's do. Every part but the first is held packed (``Trace.pack``)
    until its table or frame is asked for."""
    if trace.meta.format != "nsys":
        return []
    procs = gpu_processes(trace)
    if len(procs) < 2:
        return []
    table = trace.table
    pid_col = table.column("pid")
    parts = []
    for rank, (pid, _dev) in enumerate(procs):
        meta = copy.deepcopy(trace.meta)
        meta.path = f"{trace.meta.path}#pid{pid}"
        meta.rank, meta.world_size, meta.rank_source = rank, len(procs), "nsys process (GPU order)"
        meta.processes = {pid: trace.meta.processes.get(pid, "")}
        meta.extra = dict(meta.extra or {}, clock_domain=f"nsys:{trace.meta.path}", split_from=trace.meta.path,
                          pid=pid)
        backend = _comm_backend(table, pid)
        meta.distributed = dict(meta.distributed or {}, rank=rank, world_size=len(procs),
                                **({"backend": backend} if backend else {}))
        parts.append(Trace(filter_rows(table, pc.equal(pid_col, pid)), meta))
        if rank:   # analysed later: packed while the first ranks are (~7x smaller)
            parts[-1].pack()
    return parts


def _comm_backend(table, pid: int) -> str:
    """The communication library of the process's comm kernels (``collectives.COMM_KERNELS``
    family; NCCL first), "" when it ran none."""
    from ..collectives import comm_kernel

    k = table.filter(pc.and_(pc.equal(table.column("kind"), "kernel"),
                             pc.equal(table.column("pid"), pid)))
    # each distinct name once; a null name read as the frame's str() of it did ("nan")
    names = {"nan" if n is None else n for n in k.column("name").unique().to_pylist()}
    fams = {hit[0] for n in names if (hit := comm_kernel(n))}
    return "nccl" if "nccl" in fams else (sorted(fams)[0] if fams else "")


__all__ = ["gpu_processes", "split_processes"]
