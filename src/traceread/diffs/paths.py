"""What ``traceread diff BEFORE AFTER`` compares, chosen from what the user named: two
traces, two directories of traces (matched file by file, ``trace.pair_up``, with the
multi-rank jobs each side forms) or two ``traceread batch`` output folders (``batch.py``).
"""
from __future__ import annotations

import os

from ..errors import TraceError
from .batch import diff_batches, is_batch_output, job_changes, traces_jobs
from .trace import Matched, TraceDiff, aggregate, diff_analyses, pair_up


def diff_paths(before: str, after: str, *, step_pattern: str | None = None, load=None,
               batch: tuple | None = None) -> TraceDiff:
    """Diff two traces, two directories of traces (matched by ``pair_up``) or two
    ``traceread batch`` output folders (``diffs.batch.diff_batches``)."""
    from ..analysis import analyze

    kinds = [is_batch_output(p) for p in (before, after)]
    if any(kinds):
        if not all(kinds):
            odd, other = (after, before) if kinds[0] else (before, after)
            raise TraceError(odd, f"not a `traceread batch` output folder, but {other} is: "
                                  "diff two batch outputs, or two traces / trace folders")
        return diff_batches(before, after, batch=batch)
    load = load or (lambda p: p)
    run = lambda p: analyze(load(p), step_pattern=step_pattern)  # noqa: E731
    if os.path.isdir(before) and os.path.isdir(after):
        return _diff_folders(match_dirs(before, after), run, batch)
    return _diff_files(before, after, load, step_pattern, batch)


def _diff_files(before: str, after: str, load, step_pattern, batch) -> TraceDiff:
    """Two trace files. An nsys export holding several GPU processes (``nsys profile
    torchrun ...``) is one rank per process: the ranks are diffed rank by rank (paired by
    rank) and as a job (straggler, job verdict) -- never as one sum over the GPUs."""
    from ..analysis import analyze
    from ..readers.nsys_split import split_processes

    from ..table import Trace

    traces = [load(before), load(after)]
    if not all(isinstance(t, Trace) for t in traces):
        traces = [t if isinstance(t, Trace) else _read(t) for t in traces]
    parts = [split_processes(t) for t in traces]
    if not any(parts):
        return diff_analyses(analyze(traces[0], step_pattern=step_pattern),
                             analyze(traces[1], step_pattern=step_pattern), batch=batch)
    found, sides = {}, []
    for name, t, ps in zip(("before", "after"), traces, parts):
        items = []
        for q in ps or [t]:
            key = f"{name}:{q.meta.path}"
            found[key] = q
            rank = int(q.meta.rank) if q.meta.rank is not None and q.meta.rank >= 0 else None
            items.append({"rel": f"rank {rank}" if rank is not None else q.meta.path,
                          "path": q.meta.path, "rank": rank, "item": key})
        sides.append(items)
    matched = pair_up(sides[0], sides[1], before, after)
    if matched.by == "path":
        matched.by = "rank"      # the items are named by their rank
    d = _diff_folders(matched, lambda key: analyze(found[key], step_pattern=step_pattern), batch)
    d.source = "processes"
    return d


def _both(run, x, y, matched: Matched):
    """Both analyses of a pair, or None with each side listed as not compared: a file that
    is no trace (a truth.json beside the ranks) or cannot be read leaves the other pairs
    diffed, as a failed trace does in a batch diff."""
    out = []
    for side, key in (("before", x), ("after", y)):
        try:
            out.append(run(key))
        except TraceError as e:
            matched.unmatched += [{"side": s, "path": str(k), "reason": f"not analysed: {e.reason}"
                                   if s == side else f"its {side} partner was not analysed"}
                                  for s, k in (("before", x), ("after", y))]
            return None
    return out


def _read(path):
    from ..readers import read

    return read(path)


def _diff_folders(matched: Matched, run, batch: tuple | None = None) -> TraceDiff:
    """Every matched pair, and the multi-rank jobs each side's traces form. Each analysis
    is dropped once diffed: only its small cross-rank input (``multirank.prepare``) stays."""
    from ..jobs.multirank import prepare

    pairs, prep, alias = [], ([], []), ({}, {})
    kept = []
    for label, x, y in matched.pairs:
        got = _both(run, x, y, matched)
        if got is None:
            continue
        ax, ay = got
        kept.append((label, x, y))
        pairs.append(diff_analyses(ax, ay, label=label, batch=batch))
        for i, (an, key) in enumerate(((ax, x), (ay, y))):
            prep[i].append(prepare(an))
            alias[i][str(an.meta.path)] = key  # jobs name traces by their meta path
    if not pairs:
        u = matched.unmatched[0]
        raise TraceError(u["path"], f"no matched pair could be analysed: {u['reason']}")
    matched.pairs = kept
    # each trace's step as the diff reads it: the program's (the later of host and GPU)
    key = [p.time_key() if p.unit == "step" else "step_mean_ns" for p in pairs]
    steps = ({x: p.before[k] for (_, x, _), p, k in zip(matched.pairs, pairs, key)},
             {y: p.after[k] for (_, _, y), p, k in zip(matched.pairs, pairs, key)})
    views = [traces_jobs(pr, st, al) for pr, st, al in zip(prep, steps, alias)]
    jobs = job_changes(views[0], views[1], matched) if len(views[0].jobs) or len(views[1].jobs) \
        else None
    return aggregate(pairs, matched, source="directories", jobs=jobs)


def match_dirs(before: str, after: str) -> Matched:
    """Pairs of trace files of two directories (``pair_up``)."""
    from ..jobs.discover import discover
    from ..readers.kineto import rank_from_filename

    sides = []
    for d in (before, after):
        found = discover(d)[0]
        if not found:
            raise TraceError(d, "no trace files found")
        sides.append([{"rel": os.path.relpath(p, d), "path": p, "item": p,
                       "rank": rank_from_filename(os.path.basename(p))} for p in found])
    return pair_up(sides[0], sides[1], before, after)
