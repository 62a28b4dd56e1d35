"""Is a trace with no GPU work a CPU program, or a GPU program profiled without its GPU side?

Read from the reader's metadata and the host rows, never from a name alone:

* for a CPU program: ``deviceProperties`` recorded and empty (``meta.extra
  ["devices_recorded"]`` with no device: the profiler looked and saw no GPU -- a CPU build
  of torch, or no GPU on the host); its collectives on gloo;
* for a GPU program: the header names a GPU; CUDA/HIP runtime or driver calls recorded (the
  program drives a GPU); NCCL/RCCL collectives (``nccl:all_reduce``), or a process group or
  ``distributedInfo`` backend that puts a device on a backend other than gloo / MPI
  (``cuda:nccl``, ``mtia:hccl``).

``by_design``: True only with the devices recorded empty and nothing for a GPU program;
False with any evidence of a GPU program; None (unknown) otherwise -- an older trace with no
``deviceProperties`` key and no other evidence.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .common import kind_in
from .factkit import has_gpu

# process-group backends that move host memory (a CPU program's); any other backend in a
# backend_config entry ("cuda:nccl") drives a device
HOST_BACKENDS = ("gloo", "mpi")
DEVICE_COLL_PREFIXES = ("nccl:", "rccl:", "nccl", "ncclDevKernel", "ncclKernel")


def cpu_design(ev: pd.DataFrame, meta, calls: pd.DataFrame | None = None) -> dict | None:
    """``{"by_design", "for", "against"}`` for a window with no GPU op (None where it has
    some): the evidence for a CPU program and for a GPU program, each a list of short texts
    naming the metadata key or event that says so. ``calls``: the comm calls
    (``parallelism.comm_calls``)."""
    if has_gpu(ev):
        return None
    extra = getattr(meta, "extra", None) or {}
    devices = list(getattr(meta, "devices", None) or [])
    pro, con = [], []
    if devices:
        names = sorted({str(d.get("name", "?")) for d in devices if isinstance(d, dict)})
        con.append(f"deviceProperties names {len(devices)} device(s): {', '.join(names)}")
    elif extra.get("devices_recorded"):
        pro.append("deviceProperties recorded and empty: the profiler saw no GPU")
    api = np.flatnonzero(kind_in(ev, ("runtime", "driver")))
    if len(api):
        con.append(f"{len(api)} GPU runtime/driver calls recorded "
                   f"({ev['name'].iat[int(api[0])]})")
    con += device_backends(getattr(meta, "distributed", None) or {})
    if calls is not None and len(calls):
        names = pd.unique(calls["name"].astype(str))
        dev = [n for n in names if n.startswith(DEVICE_COLL_PREFIXES)]
        if dev:
            con.append(f"device collectives run: {dev[0]}")
        gloo = [n for n in names if n.startswith("gloo:")]
        if gloo and not dev:
            pro.append(f"collectives on gloo: {gloo[0]}")
    recorded_empty = bool(extra.get("devices_recorded")) and not devices
    by = False if con else (True if recorded_empty else None)
    return {"by_design": by, "for": pro, "against": con}


def device_backends(dist: dict) -> list[str]:
    """``distributedInfo``'s backend and each process group's ``backend_config`` naming a
    device backend (``cuda:nccl``, ``nccl``, ``mtia:hccl``): the program moves device
    tensors. ``cuda:gloo`` (what ``backend='gloo'`` writes for every device) is not."""
    out = []
    configs = [str(dist.get("backend") or "")]
    configs += [str(g.get("backend_config") or "") for g in dist.get("pg_config") or []
                if isinstance(g, dict)]
    for cfg in configs:
        for part in cfg.split(","):
            dev, _, be = part.strip().rpartition(":")
            be = be.strip().lower()
            if be and be not in HOST_BACKENDS and be != "undefined" and dev != "cpu":
                out.append(f"process group backend {part.strip()}")
                return out
    return out
