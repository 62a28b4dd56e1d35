"""What Perfetto's JSON importer (trace_processor) and chrome://tracing need of an event,
written as checks (tests/test_overlay_rules.py applies them to every event an overlay adds).

From Perfetto's src/trace_processor/importers/json/ (json_trace_tokenizer.cc,
json_trace_parser_impl.cc, json_utils.cc) and importers/common/slice_tracker.cc:

T1  every event but 'M' needs a numeric "ts" (µs), else it is dropped (json_tokenizer_failure);
T2  no event may hold an array as a top-level value: the tokenizer's key scan stops with
    "unsupported JSON dictionary with array" and the whole import fails;
T3  strings without raw control characters (a fatal tokenizer error); the document is
    complete, strict JSON;
P1  "ph", "name" and "cat" are strings ("name"/"cat" are read with asCString);
P2  "pid" / "tid" are integers in [0, 2^32): anything else becomes pid 0 / tid = pid and
    the event lands on another track (a string is interned: brittle, avoided);
P3  'X' needs "dur" (no dur: dropped); dur >= 0 (a negative one is a parser error);
    ts >= 0 (the sorter drops negative timestamps);
P4  'i'/'I' scope "s" is "g", "p" or "t" (another value: dropped); thread-scoped instants
    are 0-length slices of the thread track and nest like slices;
P5  'M': only process_name / thread_name with a non-empty string args.name are read
    (process_sort_index / thread_sort_index are chrome://tracing's; Perfetto ignores them);
S1  per (pid, tid) track, slices nest or are disjoint, intervals closed-left open-right:
    one that starts inside an open slice and ends after it is dropped
    (slice_drop_overlapping_complete_event); events reach the tracker sorted by ts, the
    longer first at equal ts;
O1  (ours) added events use pids of their own, never an original event's (so they cannot
    break the nesting of original tracks), every added track is named, and every added
    slice lies inside the original events' time span.
"""
from __future__ import annotations

from collections import defaultdict

U32 = 1 << 32
PHASES = {"X", "i", "I", "M"}
META = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def event_problems(e) -> list[str]:
    """Rules T1, T2, P1-P5 for one event."""
    if not isinstance(e, dict):
        return ["not an object"]
    out = []
    ph = e.get("ph")
    if not isinstance(ph, str) or ph not in PHASES:
        return [f"phase {ph!r} (expected one of {sorted(PHASES)})"]
    for k in ("name", "cat") if ph != "M" else ("name",):
        if not isinstance(e.get(k), str) or not e.get(k):
            out.append(f"{k} is not a non-empty string: {e.get(k)!r}")
    out += [f"top-level array value {k!r} (T2)" for k, v in e.items() if isinstance(v, list)]
    for k in ("pid", "tid"):
        v = e.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < U32:
            out.append(f"{k} {v!r} is not an integer in [0, 2^32) (P2)")
    if ph == "M":
        return out + _meta_problems(e)
    ts = e.get("ts")
    if not _number(ts) or ts < 0:
        out.append(f"ts {ts!r} is not a number >= 0 (T1/P3)")
    if ph == "X":
        dur = e.get("dur")
        if not _number(dur) or dur < 0:
            out.append(f"dur {dur!r} is not a number >= 0 (P3)")
    elif e.get("s", "t") not in ("g", "p", "t"):
        out.append(f"instant scope {e.get('s')!r} (P4)")
    if "args" in e and not isinstance(e["args"], dict):
        out.append("args is not an object")
    return out


def _meta_problems(e: dict) -> list[str]:
    name, args = e.get("name"), e.get("args")
    if name not in META or not isinstance(args, dict):
        return [f"metadata {name!r} with args {args!r} (P5)"]
    if name.endswith("_name") and (not isinstance(args.get("name"), str) or not args["name"]):
        return [f"{name} without a string args.name (P5)"]
    if name.endswith("_sort_index") and not isinstance(args.get("sort_index"), int):
        return [f"{name} without an integer sort_index"]
    return []


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def nesting_problems(events: list[dict]) -> list[str]:
    """Rule S1 over the 'X' events and thread-scoped instants, per (pid, tid)."""
    tracks = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" or (e.get("ph") in ("i", "I") and e.get("s", "t") == "t"):
            tracks[(e["pid"], e["tid"])].append(
                (float(e["ts"]), float(e.get("dur", 0) or 0), e.get("name")))
    out = []
    for key, slices in tracks.items():
        slices.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple] = []
        for ts, dur, name in slices:
            end = ts + dur
            while stack and (stack[-1][1] < ts or (stack[-1][1] == ts and not (dur == 0 == stack[-1][2]))):
                stack.pop()  # ended before (or exactly at) this one's start
            if stack and end > stack[-1][1]:
                out.append(f"track {key}: {name!r} [{ts}, {end}] starts inside {stack[-1][3]!r} "
                           f"(ends {stack[-1][1]}) and ends after it: Perfetto drops it (S1)")
                continue
            stack.append((ts, end, dur, name))
    return out


def overlay_problems(doc, added_cat: str = "traceread") -> list[str]:
    """Every rule above for the events an overlay added (``cat`` == added_cat, plus the
    metadata of their pids), checked against the document's original events (O1)."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ours = {e.get("pid") for e in events if isinstance(e, dict) and e.get("cat") == added_cat}
    added = [e for e in events if isinstance(e, dict) and (e.get("cat") == added_cat or
                                                            (e.get("ph") == "M" and e.get("pid") in ours))]
    original = [e for e in events if isinstance(e, dict) and e.get("pid") not in ours]
    out = [f"{p}: {e}"[:300] for e in added for p in event_problems(e)]
    out += nesting_problems(added)
    out += _o1(added, original, ours)
    return out


def _o1(added: list[dict], original: list[dict], ours: set) -> list[str]:
    out = []
    clash = ours & {e.get("pid") for e in original}
    if clash:
        out.append(f"added pids also used by original events: {sorted(clash)[:5]} (O1)")
    named_p = {e["pid"] for e in added if e.get("ph") == "M" and e.get("name") == "process_name"}
    named_t = {(e["pid"], e["tid"]) for e in added if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for e in added:
        if e.get("ph") == "X" and (e["pid"] not in named_p or (e["pid"], e["tid"]) not in named_t):
            out.append(f"unnamed added track {(e['pid'], e['tid'])} (O1)")
            break
    timed = [e for e in original if e.get("ph") in ("X", "i", "I", "B", "E") and _number(e.get("ts"))]
    if timed:
        lo = min(float(e["ts"]) for e in timed)
        hi = max(float(e["ts"]) + float(e.get("dur", 0) or 0) for e in timed if _number(e.get("dur", 0)))
        for e in added:
            if e.get("ph") == "X" and (e["ts"] < lo - 1 or e["ts"] + e["dur"] > hi + 1):
                out.append(f"added slice {e['name']!r} [{e['ts']}, +{e['dur']}] outside the "
                           f"original events' span [{lo}, {hi}] µs (O1)")
                break
    return out
