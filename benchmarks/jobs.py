"""``jobs``: a multi-rank job through ``batch`` (every file, then the cross-rank pass) on
every side in one run: the memory of the whole process tree against *workers × one
trace*, and the job's results compared between the sides.

    python -m benchmarks jobs /tmp/traceread-gpubox/job-64x25MB-40steps --workers 2 --baseline 3cf17fb
    python -m benchmarks jobs A/rank-0.json.gz B/rank-1.json.gz --spill-all --baseline 3cf17fb

Per side, one fresh process runs ``jobs.batch.run_local`` + ``assemble`` over the files
with ``--workers`` batch workers (``TRACEREAD_WORKERS=1`` inside each, as ``gpubox``):
wall, peak RSS and peak PSS of the process tree (the parent, the forkserver and the
workers; PSS counts a page they share once), the parent's own peak RSS (assembly and
cross-rank pass included) and its largest RSS when a file's result arrives (while the
workers run), the cross-rank pass's seconds. *One trace*: ``traceread analyze --no-cache --format json`` of the
largest file alone (``TRACEREAD_WORKERS=1``), peak RSS and PSS. The goal's figure:
tree peak PSS / (workers × one trace's peak RSS).

The results: every job's verdict, straggler (with its "why"), inferred lateness, per-rank
table and matches, as JSON per side (``--json-dir``: ``SIDE.json``, to diff) and as a
digest; the command fails when the sides differ. ``--spill-all`` spills every rank's
record (``multirank.spill.SPILL_MIN_BYTES = 0`` in the probe) so small real ranks take
the same path as big ones (a side without the module is left as it is).
"""
from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

from . import harness as h


def add_args(ap) -> None:
    ap.add_argument("inputs", nargs="+", help="a folder of one job's traces, or the files")
    ap.add_argument("--workers", type=int, default=2, help="batch workers")
    ap.add_argument("--spill-all", action="store_true",
                    help="spill every rank's record, however small (exercises the spill path)")
    ap.add_argument("--no-single", action="store_true", help="skip the one-trace analyze")
    ap.add_argument("--json-dir", type=Path, help="write each side's job results here")
    h.add_side_args(ap)


def main(args) -> int:
    paths = _paths(args.inputs)
    if len(paths) < 2:
        print("jobs: need at least two trace files (a folder of a job's ranks, or the files)")
        return 2
    with tempfile.TemporaryDirectory(prefix="trbench-") as tmp:
        sides = h.sides(args, Path(tmp))
        print(h.machine(sides) + "\n")
        big = max(paths, key=lambda p: Path(p).stat().st_size)
        runs, single = {}, {}
        for side in sides:
            h.say(f"the job on {side.name}")
            runs[side.name] = h.probe(side, batch_job, paths, args.workers, args.spill_all,
                                      env={"TRACEREAD_WORKERS": "1"})
            if not args.no_single:
                h.say(f"one trace on {side.name}")
                single[side.name] = h.cli(side, "analyze", "--no-cache", "--format", "json", big,
                                          env={"TRACEREAD_WORKERS": "1"})
    raw = sum(h.raw_size(Path(p)) for p in paths)
    print(f"{len(paths)} files, {h.fmt_mb(raw)} raw JSON; {args.workers} batch workers; "
          f"one trace: {Path(big).name}; load average after: {h.load()}\n")
    table = h.Table(sides, first="figure")
    ok = {k: r for k, r in runs.items() if r.ok}
    table.add("job: wall", {k: r.wall for k, r in ok.items()})
    table.add("job: peak PSS of the tree", {k: r.pss for k, r in ok.items()}, h.fmt_mb)
    table.add("job: peak RSS of the tree (shared pages counted per process)",
              {k: r.peak for k, r in ok.items()}, h.fmt_mb)
    table.add("job: the batch parent's peak RSS", {k: r.result["parent_rss"] for k, r in ok.items()},
              h.fmt_mb)
    table.add("job: the batch parent's RSS while workers run (largest at a result)",
              {k: r.result["parent_rss_running"] for k, r in ok.items()
               if "parent_rss_running" in r.result}, h.fmt_mb)
    table.add("job: cross-rank pass", {k: r.result["cross_rank_s"] for k, r in ok.items()})
    one = {k: r for k, r in single.items() if r.ok}
    table.add("one trace: analyze peak RSS", {k: r.peak for k, r in one.items()}, h.fmt_mb)
    table.add("one trace: analyze peak PSS", {k: r.pss for k, r in one.items()}, h.fmt_mb)
    ratio = {k: ok[k].pss / (args.workers * one[k].peak) for k in ok if k in one}
    table.add(f"tree peak PSS / ({args.workers} × one trace's peak RSS)", ratio,
              lambda x: f"{x:.2f}×")
    print(table.markdown() + "\n")
    for k, r in runs.items():
        if not r.ok:
            print(f"{k}: the job failed: {r.err}")
    for k, r in ok.items():
        print(f"{k}: straggler {r.result['straggler']}, {r.result['failed']} failed files, "
              f"results digest {r.result['digest'][:16]}")
        if args.json_dir:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            (args.json_dir / f"{k}.json").write_text(r.result["json"])
    same = len({r.result["digest"] for r in ok.values()}) == 1 and len(ok) == len(runs)
    print(f"job results identical on every side: {same}")
    return 0 if same else 1


def _paths(inputs: list[str]) -> list[str]:
    out: list[str] = []
    for i in inputs:
        p = Path(i)
        if p.is_dir():
            out += sorted(str(x) for x in p.iterdir() if x.name.endswith((".json", ".json.gz")))
        elif p.is_file():
            out.append(str(p))
    return out


def batch_job(paths: list[str], jobs: int, spill_all: bool) -> dict:
    """Probe: ``run_local`` + ``assemble`` over ``paths``; figures and the job's results."""
    batch = h.first_module("traceread.jobs.batch", "traceread.batch")
    if spill_all:
        try:
            from traceread.jobs.multirank import spill

            spill.SPILL_MIN_BYTES = 0
        except ImportError:
            pass
    running = [0]

    def note(res) -> None:   # the parent's RSS now, as each file's result arrives
        running[0] = max(running[0], _rss_now())

    t0 = time.perf_counter()
    results = batch.run_local(paths, jobs=jobs, on_result=note)
    t1 = time.perf_counter()
    res = batch.assemble(results)
    t2 = time.perf_counter()
    text = json.dumps(job_results(res), indent=1, sort_keys=True, default=str)
    jv = res.jobs[0].verdict() if res.jobs else {}
    return {"seconds": t2 - t0, "cross_rank_s": t2 - t1, "failed": int(res.failed),
            "parent_rss": h.own_peak_rss(), "parent_rss_running": running[0], "straggler": int(jv.get("straggler_rank", -1)),
            "digest": hashlib.sha256(text.encode()).hexdigest(), "json": text}


def _rss_now() -> int:
    """Bytes: this process's resident size now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    import os

    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def job_results(res) -> dict:
    """What the job says, without timings or paths of this run."""
    summary = res.summary.drop(columns=["seconds"], errors="ignore")
    return {"summary": json.loads(summary.to_json(orient="records")),
            "ranks": json.loads(res.ranks.to_json(orient="records")),
            "matches": json.loads(res.matches.to_json(orient="records")),
            "jobs": [{"verdict": j.verdict(), "straggler": j.straggler, "inferred": j.inferred,
                      "steps": json.loads(j.steps.to_json(orient="records"))} for j in res.jobs]}
