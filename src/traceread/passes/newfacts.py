"""The program facts the levers need beyond ``verdict/program.py``'s, each with its
evidence (``facts_evidence``: fact key -> [{"name", "ts_ns", "step", "detail"}]):

* ``blocking`` / ``syncs_per_step`` / ``capturable`` (passes/blocking.py);
* ``copy_payloads`` / ``optimizer_offload`` (passes/payload.py);
* ``gemm_precision_ns`` / ``autocast`` / ``convolution_ops`` / ``sdpa`` / ``channels_last``
  (passes/precision.py);
* ``periodic_stall`` (passes/stalls.py, over every step of the trace: the steady window
  leaves the stalled steps out);
* ``other_process``: GPU work of another process on the same device in the trace.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .blocking import blocking_calls
from .common import rows_of
from .factkit import Steps, item
from .payload import copy_payloads
from .precision import precision_facts
from .stalls import periodic_stalls


def window_facts(ev: pd.DataFrame) -> dict:
    """The facts of the analysed window (module doc), as context keys."""
    steps = Steps(ev)
    evidence: dict[str, list] = {}
    b = blocking_calls(ev, steps)
    evidence.update(b.pop("evidence"))
    p = copy_payloads(ev, steps)
    evidence.update(p.pop("evidence"))
    pr = precision_facts(ev, steps)
    evidence.update(pr.pop("evidence"))
    other = other_process(ev)
    if other:
        evidence["other_process"] = other.pop("evidence")
    out = {
        "blocking": b,
        "syncs_per_step": b["blocking_per_step"],
        "capturable": b["capturable"],
        "dynamic_shapes_per_step": b["dynamic_shapes_per_step"],
        "copy_payloads": p["copies"], "payloads": p["payloads"],
        "optimizer_offload": p["optimizer_offload"],
        "other_process": other,
        **pr,
    }
    if pr.get("convolution_ops") is not None:   # operators decide, not kernel names
        out["convolutions"] = pr["convolution_ops"]
        out["convolutions_evidence"] = (evidence.get("convolutions") or [{}])[0].get("name")
    if pr.get("sdpa") and pr["sdpa"]["backend"] != "math":
        out["fused_attention"] = True
        out["fused_attention_evidence"] = evidence["sdpa"][0]["name"]
    lowp = {k for k, v in (pr.get("gemm_precision_ns") or {}).items() if v}
    if "fp16" in lowp or pr.get("autocast") == "fp16":
        out["fp16_runs"] = True
    out["facts_evidence"] = {k: v for k, v in evidence.items() if v}
    return out


def trace_facts(all_ev: pd.DataFrame) -> dict:
    """The facts read over the whole trace (every step), not the window."""
    st = periodic_stalls(all_ev)
    out = {"periodic_stall": st}
    if st:
        out["facts_evidence"] = {"periodic_stall": st.pop("evidence")}
    return out


def other_process(ev: pd.DataFrame) -> dict | None:
    """GPU ops on one device from more than one process: another context shares it."""
    rows = rows_of(ev, ("kernel", "memcpy", "memset"))
    if not len(rows):
        return None
    dev = ev["device"].to_numpy()[rows]
    pid = ev["pid"].to_numpy()[rows]
    for d in np.unique(dev).tolist():
        pids = np.unique(pid[dev == d])
        if len(pids) > 1:
            r = rows[(dev == d) & (pid == pids[1])][0]
            return {"device": int(d), "processes": [int(x) for x in pids],
                    "evidence": [item(ev["name"].iat[r], ev["ts"].iat[r], None,
                                      f"GPU work of process {int(pids[1])} on device {d}, "
                                      f"beside process {int(pids[0])}")]}
    return None
