"""Why a busy-time lever the GPU-use section prices is not in the to-do list.

The GPU-use section (``utilization.busy.levers``, its headline's "top lever") prices each
busy-time change on the GPU's own time; the to-do list (``verdict.actions``) ranks what
shortens the step. Where the two differ the report must say so, or a reader finds a
headline lever that the ranked list never mentions (a V100 fp32 ResNet-50 whose
DataLoader starves the GPU: fp16 autocast halves the matmuls, and the replayed step does
not get shorter). ``busy_placement`` gives each such lever its reason, from the same context
the list was ranked on (``verdict.busy_placement``: busy lever id, the table's lever id,
reason).
"""
from __future__ import annotations

from . import levers as L
from .units import window_total
from .whatif import lever_price, unfit

NO_GAIN = ("replayed with the change, the step does not get shorter: the step waits on its "
           "idle causes, not on the GPU's own work; it pays once those are fixed")
TOO_SMALL = "saves less than 1% of the window once replayed"


def busy_placement(ctx: dict, actions: list[dict], min_ns: float) -> list[dict]:
    """``[{busy, id, reason, in_list}]`` for each busy-time lever of ``ctx["busy_levers"]``
    with a saving: ``in_list`` the 1-based to-do position of the item that carries its
    change (the same lever, or one of its group), else ``reason`` why none does."""
    offered = [x.get("id") for x in actions if isinstance(x, dict)]
    out = []
    for busy_id, b in (ctx.get("busy_levers") or {}).items():
        if not b.get("saving_ns"):
            continue
        rows = [lv for lv in L.LEVERS if lv.saves == "busy" and lv.busy == busy_id]
        if not rows:
            continue
        at = _position(rows, offered)
        if at:
            out.append({"busy": busy_id, "id": L.BY_ID[offered[at - 1]].id, "in_list": at,
                        "reason": None})
            continue
        lv = _applying(rows, ctx) or rows[0]
        out.append({"busy": busy_id, "id": lv.id, "in_list": None,
                    "reason": _reason(lv, ctx, min_ns)})
    return out


def _position(rows: list, offered: list) -> int | None:
    """The to-do position of a row of ``rows``, or of a lever of the same group."""
    groups = {lv.group for lv in rows if lv.group}
    for i, lid in enumerate(offered, 1):
        lv = L.BY_ID.get(lid)
        if lv is None:
            continue
        if lv in rows or (lv.group and lv.group in groups):
            return i
    return None


def _applying(rows: list, ctx: dict):
    """The first row whose preconditions hold (the one the list would have offered)."""
    for lv in rows:
        if all(p(ctx) for p in lv.when):
            return lv
    return None


def _reason(lv, ctx: dict, min_ns: float) -> str:
    w = lv.refusal(ctx)   # the failed precondition in its own words (verdict/leverkit.py)
    if w is not None:
        return f"withdrawn, its precondition does not hold here: {w.reason}"
    r = lever_price(ctx, lv.id)
    if r is not None and not r["applied"]:
        why = [w for w in (r.get("refused") or {}).values() if unfit(w)]
        if why:
            return f"the change does not fit this program: {why[0]}"
    if r is not None and r["applied"]:
        ns = int(r.get("saves_ns") or 0)
        return NO_GAIN if ns <= 0 else TOO_SMALL if window_total(ns, ctx) < min_ns else NO_GAIN
    return TOO_SMALL
