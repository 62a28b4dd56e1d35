"""Replay accuracy and cost (issue 30): ``python -m benchmarks.replay [TRACE...]``.

For every trace (default: the corpus traces with steps and the GPU fixtures) it runs
``traceread.analyze`` (which replays the analysed steps) and, on the same window, the replay
alone, and prints one Markdown row: steps replayed, measured and replayed time of those
steps, the overall and worst per-step error, and the replay's time as a share of analyze's
(both measured in this run, this process). Traces that cannot be replayed say why.
"""
from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
FIXTURES = ROOT / "tests" / "fixtures"


def default_traces() -> list[Path]:
    out = []
    if (CORPUS / "MANIFEST.tsv").is_file():
        for r in csv.DictReader(open(CORPUS / "MANIFEST.tsv"), delimiter="\t"):
            kernels = (r.get("has_gpu_kernels") or "0").strip()
            steps = "ProfilerSteps=" in (r.get("notes") or "") or \
                r["local_path"].endswith(".sqlite")
            if kernels not in ("", "0") and steps and "__blob" not in r["local_path"] \
                    and "overlaid_critical_path" not in r["local_path"]:
                out.append(CORPUS / r["local_path"])
    out += sorted((FIXTURES / "gpu").glob("*.json.gz")) + sorted((FIXTURES / "h200").glob("*.json.gz"))
    return out


def row(path: Path) -> dict:
    import traceread
    from traceread.passes import replay as rp
    from traceread.passes import steps as steps_mod
    from traceread.passes import window as window_mod

    t = time.perf_counter()
    a = traceread.analyze(str(path))
    t_an = time.perf_counter() - t
    ev_all = a.trace.events
    w = a.window
    ev = window_mod.slice_events(ev_all, w.start, w.end) if w.mode != "whole_trace" else ev_all
    ops = steps_mod.gpu_ops(ev, positive_ts=a.meta.format == "nsys")
    cols = ["index", "step", "name", "pid", "tid", "start", "end", "dur"]
    t = time.perf_counter()
    rp.run(ev, ops, a.steps[cols], step_pattern=a.step_pattern)
    t_rep = time.perf_counter() - t
    r = a.replay or {}
    return {"trace": f"{path.parent.name}/{path.name}", "replayable": r.get("replayable"), "reason": r.get("reason"),
            "steps": r.get("steps_replayed"), "measured_ns": r.get("measured_ns"),
            "replayed_ns": r.get("replayed_ns"), "error_pct": r.get("error_pct"),
            "worst": max((abs(s["error_pct"]) for s in r.get("steps", []) if s["error_pct"]
                          is not None), default=None),
            "analyze_s": t_an, "replay_s": t_rep, "sampled": r.get("sampled")}


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or default_traces()
    print("| trace | steps | measured | replayed | error | worst step | replay / analyze |")
    print("|---|---|---|---|---|---|---|")
    errs = []
    for p in paths:
        try:
            r = row(p)
        except Exception as e:   # a bad file: one line, the table goes on
            print(f"| {p.name} | error: {str(e)[:60]} | | | | | |")
            continue
        share = f"{100 * r['replay_s'] / r['analyze_s']:.0f}% ({r['replay_s']:.2f} / " \
                f"{r['analyze_s']:.2f} s)"
        if not r["replayable"]:
            print(f"| {r['trace']} | not replayable: {r['reason']} | | | | | {share} |")
            continue
        errs.append(abs(r["error_pct"] or 0.0))
        print(f"| {r['trace']} | {r['steps']}{' (sampled)' if r['sampled'] else ''} | "
              f"{r['measured_ns'] / 1e6:.2f} ms | {r['replayed_ns'] / 1e6:.2f} ms | "
              f"{r['error_pct']:+.3f}% | {r['worst']:.3f}% | {share} |", flush=True)
    if errs:
        print(f"\n{len(errs)} replayed: median |error| {statistics.median(errs):.3f}%, "
              f"worst {max(errs):.3f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
