"""Why a lever is offered (``verdict.actions[].because``): the facts its predicates read --
each with its value and the events that prove it (the facts record's ``evidence``) -- and
the figure that priced it.

The predicates (levers.py) read the lever context with ``c.get(key)`` / ``c[key]`` /
``key in c``; a context that remembers those reads names exactly the facts a predicate
looked at, so the list cannot drift from the rules. A key the context lacks was unknown to
the predicate (``known`` false): the lever was offered on the unknown's default.
"""
from __future__ import annotations

from typing import Any

from .leverkit import Reading
from .steady import _ms

VALUE_ITEMS = 8      # a list or dict value keeps its first few items
VALUE_CHARS = 160    # a string value is cut here


def facts_read(lv, ctx: dict) -> list[str]:
    """The context keys ``lv``'s predicates read (all of them run, in table order)."""
    r = Reading(ctx)
    for p in lv.when:
        p(r)
    return r.read


def because(lv, ctx: dict, evidence: dict, priced: tuple[str, Any] | None = None) -> list[dict]:
    """``[{fact, value, known, evidence}]`` for an offered lever: the figure that priced it
    (``priced``: key and value), then each fact its predicates read. ``evidence``: the
    record's (fact -> proofs, ``<fact>.<sub>`` for dict-valued facts); None where the record
    names no event for a fact that holds."""
    out = []
    if priced is not None:
        out.append({"fact": priced[0], "value": brief(priced[1]), "known": True,
                    "evidence": None})
    return out + [fact_item(key, ctx, evidence) for key in facts_read(lv, ctx)]


def fact_item(key: str, ctx: dict, evidence: dict) -> dict:
    """One fact as a ``because`` item: its value (cut), whether the context knew it, and the
    record's proofs of it."""
    return {"fact": key, "value": brief(ctx.get(key)), "known": key in ctx,
            "evidence": proofs(key, evidence)}


def proofs(key: str, evidence: dict) -> list[dict] | None:
    """The record's proofs of ``key`` (and of its ``key.sub`` parts); None: none recorded."""
    own = evidence.get(key)
    subs = [p for k, v in evidence.items() if k.startswith(f"{key}.") for p in v]
    if own is None and not subs:
        return None
    return list(own or []) + subs


def brief(v: Any) -> Any:
    """A JSON-sized copy of a fact's value: long lists / dicts / strings cut."""
    if isinstance(v, str):
        return v if len(v) <= VALUE_CHARS else v[:VALUE_CHARS] + "..."
    if isinstance(v, dict):
        return {str(k): brief(x) for k, x in list(v.items())[:VALUE_ITEMS]}
    if isinstance(v, (list, tuple)):
        return [brief(x) for x in list(v)[:VALUE_ITEMS]]
    return v


def because_text(items: list[dict], limit: int = 4) -> str:
    """One short line: ``launch time 12.3 ms; compiled=False (none seen); dtypes={bf16}
    (ampere_bf16_s16816gemm...)``: the first proof of each fact in parentheses, "none seen"
    for a fact read from absence; ``pytorch`` (read by every torch lever) only when it is
    false or unknown."""
    bits = []
    for x in items:
        if x["fact"] == "pytorch" and x["known"] and x["value"] is True:
            continue
        bits.append(_fact_text(x))
    more = len(bits) - limit
    return "; ".join(bits[:limit]) + (f"; +{more} more" if more > 0 else "")


def _dict_text(v: dict, limit: int = 3) -> str:
    """A dict fact as its set parts: flags by name, other values as k=v, nested dicts by
    their keys -- never a bare "{...}" that tells the reader nothing."""
    if all(isinstance(b, bool) for b in v.values()):
        return "{" + ", ".join(f"{k}" for k, b in v.items() if b) + "}"
    parts = []
    for k, b in v.items():
        if isinstance(b, dict):
            if b:
                parts.append(f"{k}={{{', '.join(str(i) for i in list(b)[:3])}}}")
        elif isinstance(b, list):
            if b:
                parts.append(f"{k}=[{', '.join(str(i) for i in b[:2])}{', ...' if len(b) > 2 else ''}]")
        elif b not in (None, 0, False, ""):
            parts.append(f"{k}={b}")
    more = ", ..." if len(parts) > limit else ""
    return "{" + ", ".join(parts[:limit]) + more + "}"


def _fact_text(x: dict) -> str:
    if not x["known"]:
        return f"{x['fact']} unknown"
    v, fact = x["value"], x["fact"]
    if v is None or (isinstance(v, (dict, list, tuple)) and not v):
        return f"no {fact}"   # known and empty (no stall, no offload): not "=None" / "={}"
    if fact.startswith("cause_ns.") and isinstance(v, int):
        return f"{fact[len('cause_ns.'):]} time {_ms(v)}"
    if fact.startswith("replay_levers."):   # the lever's own replay: the figure it stands on
        if isinstance(v, int) and not isinstance(v, bool):
            return f"replayed saving {_ms(v)}"
        return "replayed (the step re-simulated with the change)"
    if fact.startswith("anatomy.") and isinstance(v, int) and not isinstance(v, bool):
        return f"anatomy bound {_ms(v)} a step"
    if fact.startswith("busy_levers.") and isinstance(v, str):
        return v if len(v) <= 60 else v[:57] + "..."
    if isinstance(v, int) and not isinstance(v, bool) and any(
            p.endswith("_ns") for p in fact.split(".")):
        shown = _ms(v)
    elif isinstance(v, dict):
        shown = _dict_text(v)
        if shown == "{}":   # every part empty or zero: nothing set
            return f"no {fact}"
    elif isinstance(v, list):
        shown = "[" + ", ".join(str(i) for i in v[:3]) + (", ..." if len(v) > 3 else "") + "]"
    elif isinstance(v, str):
        shown = v if len(v) <= 40 else v[:37] + "..."
    else:
        shown = str(v)
    proof = (x.get("evidence") or [None])[0]
    name = proof["name"] if proof else ""
    tail = f" ({name[:40]}{'...' if len(name) > 40 else ''})" if name else \
        " (none seen)" if x.get("evidence") == [] and not v else ""
    return f"{x['fact']}={shown}{tail}"

