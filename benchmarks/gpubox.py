"""``gpubox``: issue 34's tables on a many-core GPU machine, in one command, within a time budget.

    python -m benchmarks gpubox                       # 550MB,1GB tiled; 64-rank job; <= 8 min
    python -m benchmarks gpubox --real /data/h100.json.gz --budget 480

1. **Trace table**: each trace (HTA's ``df_index_resolver`` tiled by
   ``scripts/make_big_trace.py`` to every ``--sizes``, kept under ``--workdir`` and reused
   by the next run; plus each ``--real`` trace) is read (``traceread.load``) and analysed
   (``traceread analyze --no-cache --format json``) with 1, 2, 4 ... workers
   (``TRACEREAD_WORKERS``), each figure a fresh process: wall, the speed-up over one
   worker, and peak PSS / raw JSON at one worker and at the most workers.
2. **Job table**: a planted job of ``--ranks`` ranks (``synth.multirank``: rank N/2 late by
   3 ms, host filler ops to reach ``--rank-size`` of raw JSON per rank) analysed by
   ``batch`` (``jobs.batch.run_local`` + ``assemble``: every file, then the cross-rank
   pass) with 1, 2, 4 ... batch workers, ``TRACEREAD_WORKERS=1`` inside each so the
   cores go to the files: wall, speed-up over one worker, peak PSS of the whole process
   tree, the parent's own peak RSS, and the straggler found (it must be the same at every
   worker count).

**Budget** (``--budget`` seconds, default 480, for the whole command including making
the inputs): cells run smallest first; before each, its wall is predicted from the
cells already measured (the same trace and step at fewer workers, else a smaller trace
scaled by size) and a cell that would not fit what is left is dropped -- so the largest
cells go first -- and every dropped cell is listed under the tables, with why. A cell
that runs past what is left is killed and listed too. The trace table gets
``--trace-share`` of the budget (what it leaves goes to the job table).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from . import harness as h
from .steps import Case, measure as measure_step

STEPS = ("read", "analyze")


def add_args(ap) -> None:
    ap.add_argument("--sizes", default="550MB,1GB",
                    help="raw sizes to tile --src to (comma-separated; '' for none)")
    ap.add_argument("--src", type=Path, default=h.HTA_TRACE, help="real Kineto trace to tile")
    ap.add_argument("--real", type=Path, action="append", default=[],
                    help="a real trace to add to the trace table (repeatable)")
    ap.add_argument("--workers", help="worker counts, e.g. 1,2,4,8,16 "
                                      "(default: powers of two up to the core count)")
    ap.add_argument("--ranks", type=int, default=64, help="ranks of the job table's job (0: none)")
    ap.add_argument("--rank-size", default="32MB", help="raw JSON per rank of the job")
    ap.add_argument("--rank-steps", type=int, default=40, help="profiled steps per rank")
    ap.add_argument("--budget", type=float, default=480, help="seconds for the whole command")
    ap.add_argument("--trace-share", type=float, default=0.6,
                    help="share of the budget the trace table may use")
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / "traceread-gpubox",
                    help="where the tiled traces and the job live (reused by later runs)")
    ap.add_argument("--json-out", type=Path, help="also write every raw figure here")


class Budget:
    """Wall-clock seconds left of the command's budget, and the cells it dropped."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.dropped: list[str] = []

    def left(self, cap: float | None = None) -> float:
        left = self.end - time.monotonic()
        return left if cap is None else min(left, cap - time.monotonic())

    def fits(self, what: str, predicted: float | None, cap: float) -> bool:
        left = self.left(cap)
        if left < 1 or (predicted is not None and predicted > left):
            guess = f"predicted {predicted:.1f} s" if predicted is not None else "no time"
            self.dropped.append(f"{what}: {guess}, {max(left, 0):.0f} s left")
            return False
        return True


def main(args) -> int:
    budget = Budget(args.budget)
    workers = h.ints(args.workers or "") or h.powers_of_two(os.cpu_count() or 1)
    side = h.this_side()
    print(h.machine([side]))
    print(f"budget {args.budget:.0f} s; workers {','.join(map(str, workers))}\n")
    traces = tiled(args, budget) + [p for p in args.real if _exists(p)]
    trace_cap = time.monotonic() + args.budget * args.trace_share
    raw = {str(t): h.raw_size(t) for t in traces}
    cells = trace_cells(traces, workers, raw, side, budget, trace_cap)
    print(trace_table(traces, workers, raw, cells) + "\n")
    jobs: dict = {}
    if args.ranks > 0:
        folder = make_job(args, budget)
        if folder is not None:
            jobs = job_cells(folder, workers, side, budget)
            print(job_table(args.ranks, folder, workers, jobs) + "\n")
    if budget.dropped:
        print(f"dropped to stay within {args.budget:.0f} s (largest first):")
        for d in budget.dropped:
            print(f"* {d}")
    print(f"\nload average after: {h.load()}")
    h.write_json(args.json_out, {"traces": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in cells.items()},
                                 "job": {str(k): v for k, v in jobs.items()},
                                 "dropped": budget.dropped, "raw": raw})
    return 0


def _exists(p: Path) -> bool:
    if not p.is_file():
        h.say(f"{p}: not a file, left out")
    return p.is_file()


# --- the trace table ---------------------------------------------------------------------

def tiled(args, budget: Budget) -> list[Path]:
    """The tiled traces, made under ``--workdir`` where missing (reused otherwise)."""
    sizes = sorted((s for s in args.sizes.split(",") if s), key=h.parse_size)
    out = []
    for size in sizes:
        path = args.workdir / f"tiled-{size}.json"
        if not path.exists():
            if not args.src.is_file():
                h.say(f"source trace {args.src} not found: no tiled traces (pass --src)")
                return out
            if budget.left() < 60 + h.parse_size(size) / 20e6:  # ~20 MB/s to write
                budget.dropped.append(f"tiling {size}: not enough time to make it")
                continue
            sys.path.insert(0, str(h.REPO / "scripts"))
            from make_big_trace import make

            h.say(f"making {path}")
            args.workdir.mkdir(parents=True, exist_ok=True)
            part = path.with_suffix(".part.json")
            make(args.src, h.parse_size(size), part, quiet=True)
            part.rename(path)
        out.append(path)
    return out


def trace_cells(traces: list[Path], workers: list[int], raw: dict, side, budget: Budget,
                cap: float) -> dict:
    """{(trace, step, workers): {"wall", "cpu", "peak", "pss"}}; smallest trace first."""
    cells: dict = {}
    for t in sorted(traces, key=lambda p: raw[str(p)]):
        for step in STEPS:
            for w in workers:
                what = f"{step} of {t.name} at {w} worker{'s' * (w > 1)}"
                guess = predict(cells, str(t), step, w, raw)
                if not budget.fits(what, guess, cap):
                    continue
                h.say(what)
                r = measure_step(Case(step, str(t), w), side) if budget.left(cap) > 0 else None
                r = _bounded(r)
                if r is None:
                    budget.dropped.append(f"{what}: failed or cut at the budget")
                    continue
                cells[(str(t), step, w)] = {"wall": r.wall, "cpu": r.cpu, "peak": r.peak,
                                            "pss": r.pss}
    return cells


def _bounded(r):
    return r if r is not None and r.ok else None


def predict(cells: dict, t: str, step: str, w: int, raw: dict) -> float | None:
    """A cell's wall from those measured: the same trace and step at the most workers below
    ``w`` (more workers rarely cost more), else the largest smaller trace's one-worker
    time scaled by size; None for the first cell of all."""
    fewer = [k for k in cells if k[0] == t and k[1] == step and k[2] < w]
    if fewer:
        return cells[max(fewer, key=lambda k: k[2])]["wall"]
    smaller = [k for k in cells if k[1] == step and raw[k[0]] <= raw[t]]
    if smaller:
        k = max(smaller, key=lambda k: (raw[k[0]], -k[2]))
        return cells[k]["wall"] * raw[t] / max(raw[k[0]], 1)
    return None


def trace_table(traces: list[Path], workers: list[int], raw: dict, cells: dict) -> str:
    head = ["trace", "raw", "step", *map(str, workers), "most / 1 worker",
            "peak PSS / raw (1; most)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in sorted(traces, key=lambda p: raw[str(p)]):
        for step in STEPS:
            got = {w: cells.get((str(t), step, w)) for w in workers}
            done = [w for w in workers if got[w]]
            speed = (f"{got[1]['wall'] / got[done[-1]]['wall']:.2f}× ({done[-1]})"
                     if got.get(1) and len(done) > 1 else "—")
            mem = "; ".join(f"{got[w]['pss'] / raw[str(t)]:.2f}×" for w in dict.fromkeys(
                [done[0], done[-1]])) if done and raw[str(t)] else "—"
            lines.append("| " + " | ".join([t.name, h.fmt_mb(raw[str(t)]), step,
                                            *(h.fmt_s(got[w]["wall"]) if got[w] else "—"
                                              for w in workers), speed, mem]) + " |")
    return "Read and analyze by workers (wall; fresh process each, --no-cache):\n\n" + \
        "\n".join(lines)


# --- the job table -------------------------------------------------------------------------

def make_job(args, budget: Budget) -> Path | None:
    """The planted job under ``--workdir`` (reused when its spec matches)."""
    folder = args.workdir / f"job-{args.ranks}x{args.rank_size}-{args.rank_steps}steps"
    done = folder / "DONE"
    if done.exists():
        return folder
    if budget.left() < 30:
        budget.dropped.append("the job table: no time left to make its traces")
        return None
    h.say(f"making {folder} ({args.ranks} ranks × {args.rank_size})")
    folder.mkdir(parents=True, exist_ok=True)
    target = h.parse_size(args.rank_size)
    filler = _filler_for(target, args.rank_steps, args.ranks)
    import multiprocessing as mp

    work = [(str(folder), args.ranks, r, args.rank_steps, filler) for r in range(args.ranks)]
    with mp.get_context("spawn").Pool(min(len(work), os.cpu_count() or 1)) as pool:
        pool.starmap(_write_rank, work)
    done.write_text(f"filler {filler}\n")
    return folder


def _spec(ranks: int, steps: int):
    sys.path.insert(0, str(h.SRC))
    from traceread.synth.multirank import JobSpec

    return JobSpec(ranks=ranks, slow_rank=ranks // 2, steps=steps, with_seq=False,
                   clock_offset_ns=[((r * 37) % 9 - 4) * 3_000_000 for r in range(ranks)])


def _filler_for(target: int, steps: int, ranks: int) -> int:
    """Host ops per step that bring one rank's raw JSON to ``target`` bytes (measured on a
    rank-0 trace with and without filler)."""
    with tempfile.TemporaryDirectory() as tmp:
        a = _write_rank(tmp, ranks, 0, steps, 0, "a.json")
        b = _write_rank(tmp, ranks, 0, steps, 100, "b.json")
    per_op = max((b - a) / (100 * steps), 1)
    return max(0, int((target - a) / (per_op * steps)))


def _write_rank(folder: str, ranks: int, rank: int, steps: int, filler: int,
                name: str | None = None) -> int:
    """One rank's trace (plain JSON: the mmap path) under ``folder``; returns its bytes.

    The synth rank is written alone, then its filler ops are merged in as text, a step
    at a time: the same bytes as writing the filled table (``multirank._fill``), without
    a dict per filler event (~45 s a rank at 250 MB before)."""
    sys.path.insert(0, str(h.SRC))
    from traceread.synth.kineto import write_kineto
    from traceread.synth.multirank import _rank_trace

    t = _rank_trace(_spec(ranks, steps), rank)
    p = Path(folder) / (name or f"rank-{rank}.json")
    t.meta.path = str(p)
    write_kineto(t, p)
    if filler:
        _merge_filler(p, t, filler)
    return p.stat().st_size


FILL_AT, FILL_EVERY, FILL_DUR = 200_000, 1_000, 500   # ns, as ``multirank._fill``


def _merge_filler(p: Path, t, n: int) -> None:
    """Rewrite ``p`` with ``n`` host ops per step merged in ts order (ties: the synth's
    rows first, as the stable sort of ``_fill``)."""
    import msgspec
    import numpy as np

    data = p.read_bytes()
    head_end = data.index(b'"traceEvents":[') + len(b'"traceEvents":[')
    tail_at = data.rindex(b'],"displayTimeUnit"')
    raws = msgspec.json.decode(b"[" + data[head_end:tail_at] + b"]", type=list[msgspec.Raw])
    base = msgspec.json.decode(data)["baseTimeNanoseconds"]
    meta, groups = _groups(raws, base)
    ev = t.events
    steps = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
    pid, tid = int(steps["pid"].iloc[0]), int(steps["tid"].iloc[0])
    ts = (steps["ts"].to_numpy()[:, None] + FILL_AT + np.arange(n)[None, :] * FILL_EVERY).ravel()
    if (np.diff(ts) < 0).any():
        raise ValueError(f"{n} filler ops a step run into the next step; use more steps")
    order = sorted(range(len(groups)), key=lambda i: groups[i][0])   # stable, as _fill's sort
    gts = np.array([groups[i][0] for i in order], dtype=np.int64)
    before = np.searchsorted(ts, gts, side="left")   # fillers that precede each synth row
    pre = (b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":%d,"tid":%d,"ts":' % (pid, tid))
    post = b',"dur":%s,"args":{"Collective name":null,"dtype":null}}' % _us(FILL_DUR)
    if not meta:
        raise ValueError(f"{p}: no metadata events to lead the merged events")
    with open(p, "wb") as f:
        f.write(data[:head_end])
        f.write(b",".join(meta))
        done = 0
        for k, i in enumerate(order):
            done = _write_fill(f, ts, done, int(before[k]), base, pre, post)
            f.write(b"," + groups[i][1])
        _write_fill(f, ts, done, len(ts), base, pre, post)
        f.write(data[tail_at:])


def _groups(raws: list, base: int) -> tuple[list, list]:
    """The metadata events, and each row's event with its flow event: (ts ns, bytes)."""
    import msgspec

    meta, groups = [], []
    for r in raws:
        e = msgspec.json.decode(r)
        if e["ph"] == "M":
            meta.append(bytes(r))
        elif e["ph"] in ("s", "f"):
            groups[-1] = (groups[-1][0], groups[-1][1] + b"," + bytes(r))
        else:
            groups.append((base + round(e["ts"] * 1000), bytes(r)))
    return meta, groups


def _write_fill(f, ts, a: int, b: int, base: int, pre: bytes, post: bytes) -> int:
    for lo in range(a, b, 65_536):
        f.write(b"".join(b"," + pre + _us(int(x) - base) + post
                         for x in ts[lo:min(b, lo + 65_536)]))
    return max(a, b)


def _us(ns: int) -> bytes:
    """As ``synth.kineto._us_text``: exact decimal µs."""
    sign = b"-" if ns < 0 else b""
    a = abs(ns)
    return b"%s%d.%03d" % (sign, a // 1000, a % 1000)


def job_cells(folder: Path, workers: list[int], side, budget: Budget) -> dict:
    cells: dict = {}
    for w in workers:
        what = f"the job at {w} batch worker{'s' * (w > 1)}"
        fewer = [k for k in cells if k < w]
        guess = cells[max(fewer)]["wall"] if fewer else None
        if not budget.fits(what, guess, budget.end):
            continue
        h.say(what)
        r = _bounded(h.probe(side, batch_job, str(folder), w, env={"TRACEREAD_WORKERS": "1"},
                             timeout=max(budget.left(), 1)))
        if r is None:
            budget.dropped.append(f"{what}: failed or cut at the budget")
            continue
        cells[w] = {"wall": r.wall, "cpu": r.cpu, "peak": r.peak, "pss": r.pss, **r.result}
    return cells


def job_table(ranks: int, folder: Path, workers: list[int], cells: dict) -> str:
    raw = sum(p.stat().st_size for p in folder.glob("rank-*.json"))
    head = ["batch workers", "wall", "vs 1 worker", "busy", "peak PSS (tree)",
            "parent peak RSS", "cross-rank pass", "straggler"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    one = cells.get(1)
    for w in workers:
        c = cells.get(w)
        if not c:
            lines.append("| " + " | ".join([str(w)] + ["—"] * (len(head) - 1)) + " |")
            continue
        lines.append("| " + " | ".join([
            str(w), h.fmt_s(c["wall"]), h.fmt_ratio(one["wall"], c["wall"]) if one else "—",
            _busy(c, w), h.fmt_mb(c["pss"]), h.fmt_mb(c["parent_rss"]),
            h.fmt_s(c["cross_rank_s"]),
            f"rank {c['straggler']} +{c['delay_ns'] / 1e6:.2f} ms ({c['failed']} failed)"]) + " |")
    found = {(c["straggler"], c["delay_ns"]) for c in cells.values()}
    same = "the same at every worker count" if len(found) <= 1 else f"DIFFERS: {sorted(found)}"
    return (f"The job: {ranks} ranks, {h.fmt_mb(raw)} of raw JSON ({h.fmt_mb(raw / ranks)} per "
            f"rank), batch + cross-rank pass (TRACEREAD_WORKERS=1 per file); straggler "
            f"{same}. *busy*: the files' own seconds / (batch wall × workers); *parent*: "
            f"the batch process alone, which keeps only the per-rank records:\n\n" + "\n".join(lines))


def batch_job(folder: str, jobs: int) -> dict:
    """Probe: ``run_local`` over the job's files with ``jobs`` workers, then ``assemble``
    (the cross-rank pass)."""
    batch = h.first_module("traceread.jobs.batch", "traceread.batch")
    t0 = time.perf_counter()
    paths = batch.discover(folder)[0]
    results = batch.run_local(paths, jobs=jobs)
    t1 = time.perf_counter()
    res = batch.assemble(results)
    t2 = time.perf_counter()
    jv = res.jobs[0].verdict() if res.jobs else {}
    return {"seconds": t2 - t0, "cross_rank_s": t2 - t1, "failed": int(res.failed),
            "parent_rss": h.own_peak_rss(), "files_s": float(res.summary["seconds"].sum()),
            "straggler": int(jv.get("straggler_rank", -1)), "delay_ns": int(jv.get("late_by_ns") or 0)}


def _busy(c: dict, w: int) -> str:
    """How full the workers were: the files' own seconds over (batch wall x workers)."""
    wall = c["seconds"] - c["cross_rank_s"]
    return f"{c['files_s'] / (wall * w):.0%}" if wall > 0 else "—"
