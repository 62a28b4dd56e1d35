"""The batch size of two traces of one program, read from the shapes the ops ran on.

A shape alone does not say which dimension is the batch; two traces of the same model
do: the op names common to both are matched (the first call of each name in the first
analysed step, or the window), and their first input's shape compared. The batch
changed from B to A when the **first** op (in BEFORE's order) whose first input of two
or more dimensions differs, differs only in its leading dimension (B -> A), and at
least ``MIN_AGREEING`` matched ops in all show the same B -> A change. One-dimensional
inputs are not read: a flat buffer (the DataLoader's collate writes its batch into
a ``[B * 64]`` view) changes by a product, not by the batch. Anything else (another sequence length, another
model, shapes not recorded: ``record_shapes=False``) finds nothing: the user's
``--batch BEFORE:AFTER`` says it then.
"""
from __future__ import annotations

import json

MIN_AGREEING = 2


def batch_sizes(before, after) -> dict | None:
    """{"before", "after", "source": "input_dims", "evidence"} of two analyses, or None."""
    sb, sa = _first_shapes(before), _first_shapes(after)
    if not sb or not sa:
        return None
    common = [n for n in sb if n in sa]
    lead = next((n for n in common if sb[n] != sa[n] and min(len(sb[n]), len(sa[n])) >= 2),
                None)
    if lead is None:
        return None
    x, y = sb[lead], sa[lead]
    if len(x) != len(y) or x[1:] != y[1:]:
        return None
    agree = [n for n in common if len(sb[n]) == len(sa[n]) and sb[n][1:] == sa[n][1:]
             and (sb[n][0], sa[n][0]) == (x[0], y[0])]
    if len(agree) < MIN_AGREEING or x[0] <= 0 or y[0] <= 0:
        return None
    mb, ma = micro_batches(before), micro_batches(after)
    each = f" x {mb} -> {ma} micro-batches a step" if (mb, ma) != (1, 1) else ""
    return {"before": int(x[0]) * mb, "after": int(y[0]) * ma, "source": "input_dims",
            "evidence": f"{lead}'s first input {list(x)} -> {list(y)}{each}; "
                        f"{len(agree)} ops show the same change"}


def micro_batches(a) -> int:
    """Micro-batches per step (the step anatomy's accumulation: forward and backward passes
    per optimizer step), 1 without: a step of 4 micro-batches of 16 trains 64 samples, and
    the shape read above is one micro-batch's (anatomy/accum: 4 x 16 read as a batch of 16
    set its 22.1 ms step against accum_one's 19.1 ms step of 64 as 1.38 ms vs 298 us a
    sample)."""
    mb = (((a.context or {}).get("anatomy") or {}).get("micro_batches") or {})
    n = mb.get("per_optimizer_step")
    return int(n) if isinstance(n, (int, float)) and n >= 1 else 1


def _first_shapes(a) -> dict[str, tuple]:
    """Op name -> the first input's shape at its first call in the first analysed step
    (or the window), in time order; only ops whose first input is one tensor."""
    if a.trace is None or a.window is None or "input_dims" not in a.trace.events:
        return {}
    w = a.window
    lo, hi = int(w.start), int(w.end)
    if len(w.steps):
        lo, hi = int(w.steps["start"].iloc[0]), int(w.steps["end"].iloc[0])
    ev = a.trace.events
    rows = ev[((ev["kind"] == "cpu_op") & ev["input_dims"].notna() & (ev["ts"] >= lo)
               & (ev["ts"] < hi)).to_numpy()].sort_values("ts", kind="stable")
    out: dict[str, tuple] = {}
    for name, dims in zip(rows["name"].astype(str), rows["input_dims"].astype(str)):
        if name in out:
            continue
        shape = _first_tensor(dims)
        if shape is not None:
            out[name] = shape
    return out


def _first_tensor(dims: str) -> tuple | None:
    try:
        d = json.loads(dims)
    except ValueError:
        return None
    if not isinstance(d, list) or not d or not isinstance(d[0], list) or not d[0]:
        return None
    first = d[0]
    return tuple(first) if all(isinstance(v, int) for v in first) else None
