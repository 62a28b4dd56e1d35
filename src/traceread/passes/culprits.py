"""The concrete thing behind each cause, named for the report (``culprits``).

Rules for the frames a culprit may name (docs/analysis.md §4, "Culprits"):

* only the launching threads' own frames (``attribution.launch_threads`` of the gaps'
  (pid, device)): a helper thread's ``read()`` or gloo's transport-thread ``recv`` never
  fed the GPU;
* only inside the gaps it explains, and its span there is the union of its rows clipped
  to those gaps -- nested calls of one name (recursion) count once, so a span never
  exceeds the idle time it explains;
* never a frame of another cause: only rows the attribution counts as host work
  (``cpu_op``/``python``), measured only where no container of another cause
  (compile, graph capture, DataLoader, collective, sync, copy staging, allocator, launch)
  covers the instant on a launch thread, and never while the row's own thread is parked
  in a wait;
* the innermost frame that does the work: among the names that explain at least
  ``SHARE`` of the largest span, the one with the shortest mean duration; when that name
  still encloses its work (rows nested in it cover ``SHARE`` of it), the name inside it
  with the largest span that does its own work (``_doing_the_work``) is named first when it
  does ``INNER_SHARE`` of the range's time, else after the range ("largest op inside").

A sync's caller is the innermost user frame/op around the sync calls that actually
drained a gap (on a launch thread, returning as the gap began), not around every call of
that name: an ``.item()`` on a CPU tensor waits for nothing.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import attribution as attr
from . import intervals
from .common import fmt_ms as _ms, kind_in, launched_inside
from .factkit import _Ends
from .userframe import culprit_frame, is_user_frame, readable
from .steps import (DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN, INFERENCE_STEP_PATTERN,
                    UNNUMBERED_STEP_PATTERN)

SHARE = 0.5
_DESCEND = 50   # names inside an enclosing range tried, largest first
# the op inside an enclosing range is named first only when it does this share of the
# range's idle time; below it the work is scattered and the range leads
INNER_SHARE = 0.25
_CAT = {c: i for i, c in enumerate(attr.CPU_CATEGORIES)}
_WORK = (_CAT["cpu_op"], _CAT["python"])
# another cause owns the instants these cover on a launch thread (launch calls: the launch
# cause's, in long gaps too, as causes.cause_parts counts them -- HTA's MI250 minitoy read
# "aten::add_ spans 6.6 ms" for the cold-start hipLaunchKernel inside it)
_OTHER = tuple(_CAT[c] for c in ("compile", "graph_capture", "dataloader", "comm_wait", "sync",
                                 "copy_staging", "alloc", "launch"))
_STEP_RX = [re.compile(p) for p in (DEFAULT_STEP_PATTERN, FALLBACK_STEP_PATTERN,
                                    UNNUMBERED_STEP_PATTERN, INFERENCE_STEP_PATTERN)]


def culprits(ev, gaps, ops, summary, top_ops, copies, collectives, comp, kernels, parts,
             ctx) -> dict:
    """{cause: text} for the report."""
    out: dict[str, str] = {}
    if summary["by_sync_op"]:
        op, v = max(summary["by_sync_op"].items(), key=lambda kv: kv[1]["ns"])
        caller = sync_caller(ev, op, gaps, ops)
        out["sync"] = f"{op} in {v['gaps']} gap{'' if v['gaps'] == 1 else 's'}" + (f", called from {caller}" if caller else "")
    big = copies.get("largest")
    if big:
        kind = "pageable" if big["pageable"] else "pinned"
        rate = f" at {big['gbps']:.1f} GB/s" if big.get("gbps") else ""
        out["copy"] = (f"{_bytes(big['bytes'])} {big['direction']} {kind} copy "
                       f"×{big['count']}{rate}")
        if int(copies.get("count") or 0) > big["count"]:
            # the most exposed copy is one of many: said as one, nsys-ai's h100_2gpu read as
            # if one 3.91 GiB copy were the 921 ms of 223 copies
            out["copy"] += (f", the largest of {int(copies['count']):,} copies, "
                            f"{_bytes(int(copies.get('bytes') or 0))} in all")
    staged = staging_culprit(top_ops, int(parts.get("copy_staging") or 0),
                             int(copies.get("exposed_ns") or 0))
    if staged:   # the larger part of the copy cause first
        first = int(parts.get("copy_staging") or 0) >= int(copies.get("exposed_ns") or 0)
        out["copy"] = "; ".join(filter(None, (staged, out.get("copy")) if first
                                       else (out.get("copy"), staged)))
    out["host"] = _in_user_code(ev, host_culprit(ev, gaps, ops, parts, top_ops))
    data = top_ops[top_ops["category"] == "dataloader"] if len(top_ops) else top_ops
    if len(data):
        out["data"] = str(data["name"].iloc[0]) + (
            " (num_workers=0)" if ctx.get("dataloader_single") else "")
    if collectives is not None and len(collectives) and "exposed_ns" in collectives:
        c = collectives.sort_values("exposed_ns", ascending=False).iloc[0]
        out["comms"] = f"{c['collective']} ×{int(c['count'])}, exposed {_ms(int(c['exposed_ns']))}"
    for cause, cat in (("compile", "compile"), ("graph_capture", "graph_capture")):
        top = top_ops[top_ops["category"] == cat] if len(top_ops) else top_ops
        if len(top):
            out[cause] = f"{top['name'].iloc[0]} {_ms(int(top['ns'].iloc[0]))} inside gaps"
    if comp and (comp.get("recompiles") or comp.get("graph_breaks")):
        what = [f"{comp['recompiles']} recompile{'' if comp['recompiles'] == 1 else 's'}"] if comp.get("recompiles") else []
        if comp.get("graph_breaks"):   # each break runs the code between compiled regions eagerly
            n = comp["graph_breaks"]
            what.append(f"{n} graph break{'s' if n > 1 else ''} ({comp['graph_break_calls']}x eager "
                        f"code between compiled regions)")
        out["compile"] = ", ".join(what) + "; " + out.get("compile", "")
    launch = launch_culprit(top_ops, kernels)
    if launch:
        out["launch"] = launch
    return out


def staging_culprit(top_ops, staged_ns: int, exposed_ns: int) -> str:
    """The copy cause's host part: the copy call that staged pageable memory inside the
    gaps, its time there and calls (``copy_staging`` in the top ops)."""
    calls = top_ops[top_ops["category"] == "copy_staging"] if len(top_ops) else top_ops
    if not staged_ns or not len(calls):
        return ""
    return (f"{calls['name'].iloc[0]} staging pageable host memory "
            f"{_ms(int(calls['ns'].iloc[0]))} inside gaps (×{int(calls['count'].iloc[0]):,})")


def launch_culprit(top_ops, kernels) -> str:
    """The launch time's evidence: the launch call inside the gaps (what the saving is made
    of), then the share of short kernels -- only when there are some ("0% of 171 kernels
    under 10 us" beside a launch saving read as a contradiction)."""
    bits = []
    calls = top_ops[top_ops["category"] == "launch"] if len(top_ops) else top_ops
    if len(calls):
        bits.append(f"{calls['name'].iloc[0]} {_ms(int(calls['ns'].iloc[0]))} inside gaps "
                    f"(×{int(calls['count'].iloc[0]):,})")
    n = int(kernels["instances"].sum()) if len(kernels) else 0
    short = kernels[kernels["avg_ns"] < 10_000] if n and "avg_ns" in kernels else None
    few = int(short["instances"].sum()) if short is not None and len(short) else 0
    if few:
        bits.append(f"{100 * few / n:.0f}% of {n:,} kernels average under 10 us")
    elif n and not bits:
        bits.append(f"none of {n:,} kernels averages under 10 us")
    return "; ".join(bits)


_NAMED_RX = re.compile(r"^(.+?) spans ")


def _in_user_code(ev, text: str) -> str:
    """The host culprit as the user reads it: a pybind descriptor or NVTX payload dict made
    readable, and -- when the named frame is not the user's own code -- the user's frame
    that calls it (file:line, passes/userframe.py)."""
    m = _NAMED_RX.match(text)
    if not m:
        return text
    name = m.group(1)
    nice = readable(name)
    out = nice + text[len(name):]
    if not is_user_frame(name):
        where = culprit_frame(ev, name)
        if where:
            out += f", called from {where}"
    return out


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _untraced_guess(ev) -> str:
    """What fills a launching thread's untraced time: in a PyTorch program most likely Python
    (no frames recorded); in a C/C++/Fortran CUDA program (nsys) its own code between the
    traced calls -- "Python?" there sent the reader looking for Python that is not there."""
    from .context import is_pytorch   # context imports the facts' passes; late, no cycle

    return "Python?" if is_pytorch(ev) else "the program's own code between traced calls"


def host_culprit(ev, gaps, ops, parts, top_ops) -> str:
    """The deepest frame or op behind the host-bound time, or the untraced share.

    The host's part of the long gaps, as ``verdict.scores.cause_parts`` counts it: the share of a
    sync-drained gap the sync does not explain (``sync_share``) is the host's too, and a
    gap's queued part is nobody's on the host."""
    share = gaps["sync_share"].to_numpy(float) if "sync_share" in gaps \
        else attr.sync_share(gaps)
    long_ = (share < 1) & (gaps["duration"].to_numpy(np.int64) > attr.SHORT_GAP_NS) \
        & (gaps["drain"] != "queued").to_numpy(bool)

    def host_part(c):
        v = gaps[f"cpu_{c}"].to_numpy(np.int64)
        if f"qcpu_{c}" in gaps:
            v = v - gaps[f"qcpu_{c}"].to_numpy(np.int64)
        return int(np.rint((v * (1.0 - share))[long_].sum()))
    by = {c: host_part(c) for c in ("python", "cpu_op", "alloc", "untraced")}
    top = max(by, key=by.get) if any(by.values()) else ""
    if top == "untraced" and parts.get("host_untraced"):
        return f"untraced time on the launching thread ({_untraced_guess(ev)}): {_ms(by['untraced'])}"
    if top == "alloc":   # the allocator call itself, not whatever API call is innermost
        al = top_ops[top_ops["category"] == "alloc"] if len(top_ops) else top_ops
        return f"{al['name'].iloc[0]}: {_ms(int(al['ns'].iloc[0]))} inside gaps" if len(al) else ""
    kinds = {"python": ("python",), "cpu_op": ("cpu_op", "annotation", "osrt")}.get(top)
    if not kinds:
        return ""
    name, ns, inner, inner_ns = innermost_in_gaps(ev, gaps[long_], ops, kinds)
    if inner and inner_ns >= INNER_SHARE * ns:   # the op doing the work, then its range
        return f"{inner} spans {_ms(inner_ns)} of idle GPU time (inside {name}, {_ms(ns)})"
    if inner:   # the work is scattered: the range, and the largest op inside it
        return (f"{name} spans {_ms(ns)} of idle GPU time; largest op inside: "
                f"{inner} {_ms(inner_ns)}")
    return f"{name} spans {_ms(ns)} of idle GPU time" if name else ""


def _launch_rows(ev, gaps, ops):
    """Per (pid, device) of ``gaps``: (gap starts, gap ends, the mask over ``ev`` of its
    launch threads' rows). No whole-window thread key: a row's key is made where needed."""
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    for (p, dev), idx in gaps.groupby(["pid", "device"], sort=True).indices.items():
        on = attr.rows_on_threads(pid, tid, attr.launch_threads(ev, ops, int(p), int(dev)))
        yield (int(p), int(dev)), gaps["start"].to_numpy(np.int64)[idx], \
            gaps["end"].to_numpy(np.int64)[idx], on


def _launches(ops, group: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(thread keys, launch call starts) of the group's GPU ops, by start."""
    m = (ops["pid"].to_numpy() == group[0]) & (ops["device"].to_numpy() == group[1]) & \
        (ops["launch_tid"].to_numpy() >= 0)
    lts = ops["launch_ts"].to_numpy(np.int64)[m]
    key = attr.thread_key(ops["launch_pid"].to_numpy()[m].copy(),
                          ops["launch_tid"].to_numpy()[m].copy())
    o = np.argsort(lts, kind="stable")
    return key[o], lts[o]


def _while_others_launch(launches: tuple, t: int, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Rows [s, e) of thread ``t`` inside which the other launch threads launched more than
    ``t`` did: the thread waited for them (the main thread in ``backward()`` while autograd's
    thread launches the backward -- 263 launches to its own one, the gradient's fill -- as
    the replay's ``whatif._others_busy`` reads it), work of no frame of its own."""
    key, lts = launches
    return launched_inside(s, e, lts[key != t], lts[key == t])


def _categories(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Attribution category of ``rows`` (``attribution._classify``; -1: never counted)."""
    name, cats = attr._codes(ev["name"])
    kind = attr._kind_index(ev, rows)
    out = attr._classify(kind, name[rows], cats, attr._nccl_domain(ev, rows), None)
    attr._helper_sends_are_comm(kind, name[rows], cats, attr.thread_key(
        ev["pid"].to_numpy()[rows], ev["tid"].to_numpy()[rows]), out)
    return out.astype(np.int64)


def _reaching_rows(mask: np.ndarray, iv, ts: np.ndarray, te) -> np.ndarray:
    """``np.flatnonzero(mask)`` of the rows whose [ts, te) reach ``iv``, a block of rows at a
    time: all of a launch thread's host rows with their starts, ends and searches were
    ~50 B a row at once at the facts' peak, for the few that reach a long gap."""
    out = []
    for a in range(0, len(mask), attr.THREAD_BLOCK):
        r = np.flatnonzero(mask[a:a + attr.THREAD_BLOCK])
        r += a
        out.append(r[intervals.reaching(iv, ts[r], te(r))])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _work_rows(ev, gaps, ops, kinds):
    """Per launch thread: (the host-owned part of its gaps, its candidate rows, their base
    name ids), and the base names ({id: name}). Host-owned: no container of another cause
    on a launch thread (``_OTHER``) and the thread itself not waiting."""
    ts = ev["ts"].to_numpy(np.int64)
    dur = ev["dur"].to_numpy(np.int64)

    def te(r):   # the rows' ends: a whole-window ts + dur was 8 B a row at the passes' peak
        return ts[r] + dur[r]

    host = kind_in(ev, attr.HOST_KINDS)
    want = kind_in(ev, kinds)
    codes, cats = attr._codes(ev["name"])
    bases: dict[str, int] = {}   # emit_nvtx's "aten::add, seq = 12, op_id = 7" -> aten::add
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    out = []
    for group, gs, ge, on in _launch_rows(ev, gaps, ops):
        gaps_iv = intervals.union(gs, ge)
        on &= host
        rows = _reaching_rows(on, gaps_iv, ts, te)
        del on
        if not len(rows):
            continue
        key = attr.thread_key(pid[rows], tid[rows])   # these rows' own (fresh copies)
        cat = _categories(ev, rows)
        other = np.isin(cat, _OTHER)
        free = intervals.subtract(gaps_iv, intervals.union(ts[rows[other]], te(rows[other])))
        cand = want[rows] & np.isin(cat, _WORK)
        launches = _launches(ops, group)
        for t in np.unique(key[cand]).tolist():
            mine = key == t
            wait = rows[mine & (cat == _CAT["wait"])]
            region = intervals.subtract(free, intervals.union(ts[wait], te(wait)))
            r = rows[mine & cand]
            r = r[intervals.overlap_hits(region, ts[r], te(r))[0]]
            r = r[~_while_others_launch(launches, t, ts[r], te(r))]
            base = attr._name_lut(cats, codes[r], lambda n: bases.setdefault(n, len(bases)))
            out.append((region, r, base[codes[r]]))
    return out, {i: n for n, i in bases.items()}


class _Spans:
    """Idle time each base name's rows cover (a union, clipped to the host-owned time)."""

    def __init__(self, ev, threads):
        self.ts = ev["ts"].to_numpy(np.int64)
        self.te = _Ends(self.ts, ev["dur"].to_numpy(np.int64))   # at the rows asked only
        self.threads = threads

    def covered(self, rows_of) -> int:
        """ns of host-owned time covered by ``rows_of(rows, base)`` (a mask) on any thread."""
        s, e = [], []
        for region, r, base in self.threads:
            sel = r[rows_of(r, base)]
            if len(sel):
                iv = intervals.intersect(region, intervals.union(self.ts[sel], self.te[sel]))
                s.append(iv[0])
                e.append(iv[1])
        return intervals.total(intervals.union(np.concatenate(s), np.concatenate(e))) if s else 0

    def of(self, c: int) -> int:
        return self.covered(lambda r, base: base == c)

    def every(self, ids: list[int]) -> dict[int, int]:
        """``of(c)`` for each of ``ids``, all names at once: per thread, each name's rows
        merged apart (``_grouped_union``) and clipped to the thread's region, then each
        name's pieces merged over the threads (one ``of`` per name cost ~1 ms each)."""
        s, e, g = [], [], []
        for region, r, base in self.threads:
            piece = _grouped_union(base, self.ts[r], self.te[r])
            if piece is None:
                return {c: self.of(c) for c in ids}
            piece = _clip_to(region, *piece)
            s.append(piece[0])
            e.append(piece[1])
            g.append(piece[2])
        piece = _grouped_union(np.concatenate(g), np.concatenate(s), np.concatenate(e)) \
            if s else None
        if piece is None:
            return {c: self.of(c) for c in ids}
        ps, pe, pg = piece   # sorted by group
        used, first = np.unique(pg, return_index=True)
        tot = np.add.reduceat(pe - ps, first) if len(pg) else pg
        by = dict(zip(used.tolist(), tot.tolist()))
        return {c: by.get(c, 0) for c in ids}

    def inside(self, c: int):
        """A mask maker: rows of other names nested in a row of ``c`` on the same thread."""
        def mask(r, base):
            mine = r[base == c]
            out = np.zeros(len(r), bool)
            if not len(mine):
                return out
            cs, ce = intervals.union(self.ts[mine], self.te[mine])
            k = np.searchsorted(cs, self.ts[r], side="right") - 1
            out = (k >= 0) & (self.te[r] <= ce[np.maximum(k, 0)]) & (base != c)
            return out
        return mask


def _grouped_union(group: np.ndarray, s: np.ndarray, e: np.ndarray):
    """``intervals.union`` of each group's [s, e) apart, in one pass: each group's times are
    moved to its own stretch of the line (group * span), so pieces never merge across
    groups. Returns (starts, ends, group) of the pieces; None where the stretches would
    not fit in int64."""
    keep = e > s
    s, e, group = s[keep], e[keep], np.asarray(group, np.int64)[keep]
    if not len(s):
        return s, e, group
    lo, g0 = int(s.min()), int(group.min())
    span = int(e.max()) - lo + 1
    if (int(group.max()) - g0 + 1) * span >= 2**62:
        return None
    shift = (group - g0) * span - lo
    us, ue = intervals.union(s + shift, e + shift)
    gid = us // span
    back = gid * span - lo
    return us - back, ue - back, gid + g0


def _clip_to(region: intervals.Intervals, s: np.ndarray, e: np.ndarray, group: np.ndarray):
    """The pieces [s, e) (with their group) cut to a sorted disjoint ``region``."""
    rs, re_ = region
    i0 = np.searchsorted(re_, s, side="right")    # first region piece ending after s
    i1 = np.searchsorted(rs, e, side="left")      # region pieces starting before e
    cnt = np.maximum(i1 - i0, 0)
    at = np.repeat(np.arange(len(s)), cnt)
    ri = i0[at] + (np.arange(len(at)) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    cs, ce = np.maximum(s[at], rs[ri]), np.minimum(e[at], re_[ri])
    ok = ce > cs
    return cs[ok], ce[ok], group[at][ok]


def innermost_in_gaps(ev: pd.DataFrame, gaps: pd.DataFrame, ops: pd.DataFrame,
                      kinds=("python", "cpu_op")) -> tuple[str, int, str, int]:
    """The deepest launch-thread frame/op that still explains most of the host time of
    ``gaps`` (see module doc): (name, ns of idle time its rows cover, and when that name
    is an enclosing range whose own children do the work -- they cover ``SHARE`` of it,
    none alone half -- the heaviest op inside it that does its own work, with its ns;
    else "", 0)."""
    if not len(gaps):
        return "", 0, "", 0
    threads, names = _work_rows(ev, gaps, ops, kinds)
    sp = _Spans(ev, threads)
    ids = np.concatenate([b for _, _, b in threads]) if threads else np.empty(0, np.int64)
    durs = np.concatenate([sp.te[r] - sp.ts[r] for _, r, _ in threads]) if threads else ids
    ok = [c for c in np.unique(ids).tolist()
          if c >= 0 and not any(rx.match(names[c]) for rx in _STEP_RX)]
    tot = sp.every(ok)
    tot = {c: v for c, v in tot.items() if v > 0}
    if not tot:
        return "", 0, "", 0
    mean = {c: float(durs[ids == c].mean()) for c in tot}
    best = max(tot.values())
    j = min((c for c, v in tot.items() if v >= SHARE * best), key=lambda c: (mean[c], -tot[c]))
    inner, inner_ns = _doing_the_work(sp, j, tot)
    return names[j], tot[j], names.get(inner, ""), inner_ns


def _doing_the_work(sp: _Spans, j: int, tot: dict) -> tuple[int, int]:
    """When the rows nested in ``j`` cover ``SHARE`` of its time (``j`` encloses the work:
    a module range, ``DistributedDataParallel.forward``), the name inside it that covers
    the most of it while not itself enclosing its work; (-1, 0) otherwise."""
    if sp.covered(sp.inside(j)) < SHARE * tot[j]:
        return -1, 0
    inside = {}
    for region, r, base in sp.threads:
        m = sp.inside(j)(r, base)
        inside.update(dict.fromkeys(np.unique(base[m]).tolist()))
    for c in sorted(inside, key=lambda c: -tot.get(c, 0))[:_DESCEND]:
        if tot.get(c, 0) and sp.covered(sp.inside(c)) < SHARE * tot[c]:
            return c, tot[c]
    return -1, 0


def _draining_calls(ev, sync_name, gaps, ops) -> np.ndarray:
    """Rows named ``sync_name`` (emit_nvtx suffixes dropped) on a launch thread of a
    sync-drained gap that returned as the gap began (``attribution._drain``'s window)."""
    name, cats = attr._codes(ev["name"])
    is_name = attr._name_lut(cats, name, lambda n: attr._op_base(n) == sync_name, bool, False)
    rows = np.flatnonzero(is_name[name])
    if not len(rows) or gaps is None or not len(gaps):
        return rows
    drained = gaps[attr.is_sync_drained(gaps)]
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    keep = np.zeros(len(rows), bool)
    for _, gs, ge, on in _launch_rows(ev, drained, ops):
        r = on[rows]
        lo = gs - attr.SKEW_NS
        hi = np.minimum(gs + attr.SYNC_TOLERANCE_NS, ge + attr.SKEW_NS)
        order = np.argsort(lo)
        lo, hi, g0 = lo[order], hi[order], gs[order]
        k = np.searchsorted(lo, te[rows], side="right") - 1   # the last window opening by the return
        ok = (k >= 0)
        kk = np.maximum(k, 0)
        ok &= te[rows] <= hi[kk]
        ok &= ts[rows] <= g0[kk] + attr.SKEW_NS
        keep |= r & ok
    return rows[keep]


def sync_caller(ev: pd.DataFrame, sync_name: str, gaps: pd.DataFrame | None = None,
                ops: pd.DataFrame | None = None, limit: int = 200) -> str:
    """The most frequent innermost enclosing frame/op of the ``sync_name`` calls that drained
    a gap ("" if none). A python frame (``file.py(line): fn``) of the user's own code is
    preferred, then a user range, then an operator; step ranges never count."""
    hit = _draining_calls(ev, sync_name, gaps, ops)[:limit]
    if not len(hit):
        return ""
    host = kind_in(ev, ("cpu_op", "annotation", "python"))
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    votes: dict[str, int] = {}
    for (p, t), idx in pd.DataFrame({"p": pid[hit], "t": tid[hit]}).groupby(
            ["p", "t"]).indices.items():
        rows = np.flatnonzero(host & (pid == p) & (tid == t))   # ts-sorted (table order)
        for i in hit[idx].tolist():
            back = intervals.covering(ts, te, rows, i)
            back = back[back != i]
            label = ev["name"].iloc[back].astype(str).to_numpy() if len(back) else []
            cand = [(j, n) for j, n in zip(back.tolist(), label)
                    if attr._op_base(n) != sync_name and not any(rx.match(n) for rx in _STEP_RX)
                    and not n.startswith("aten::_local_scalar")]
            if not cand:
                continue
            kinds = ev["kind"].iloc[[j for j, _ in cand]].astype(str).tolist()
            # the user's own line: not torch internals, not a C builtin
            py = [c for c, k_ in zip(cand, kinds) if k_ == "python" and is_user_frame(c[1])] \
                or [c for c, k_ in zip(cand, kinds) if k_ == "python" and ".py(" in c[1]
                    and "torch/" not in c[1] and not c[1].startswith("<built-in")]
            ann = [c for c, k_ in zip(cand, kinds) if k_ == "annotation"]
            pool = py or ann or cand
            j, n = min(pool, key=lambda c: te[c[0]] - ts[c[0]])
            votes[n] = votes.get(n, 0) + 1
    return max(votes, key=votes.get) if votes else ""
