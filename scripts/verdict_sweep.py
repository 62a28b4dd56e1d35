"""Print the verdict of every trace in the corpus (one line each), for eyeballing changes.

    python scripts/verdict_sweep.py [CORPUS_DIR] [--max-bytes N]

Each line: bound, lost %, window (mode, steps analysed/total, excluded time), top
two causes with their share, the first lever, and the path. Run it from two
checkouts (PYTHONPATH=src) and diff the outputs to see what a change did.
"""
from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

from traceread import TraceError, load
from traceread.analysis import analyze

KINDS = ("kineto-json", "kineto-json-gz", "nsys-sqlite")


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv and not argv[0].startswith("--") else \
        Path(__file__).resolve().parents[2] / "shared" / "corpus"
    max_bytes = int(argv[argv.index("--max-bytes") + 1]) if "--max-bytes" in argv else 60_000_000
    with open(corpus / "MANIFEST.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] in KINDS
                and int(r["bytes"]) <= max_bytes]
    for r in sorted(rows, key=lambda r: r["local_path"]):
        t = time.perf_counter()
        try:
            a = analyze(load(corpus / r["local_path"]))
        except TraceError as e:
            print(f"refused  {r['local_path']}: {e}")
            continue
        print(_line(a, time.perf_counter() - t, r["local_path"]), flush=True)
    return 0


def _line(a, secs: float, path: str) -> str:
    v = a.verdict
    ev = v["evidence"]
    share = ev.get("share_pct", {})
    top = sorted(share.items(), key=lambda kv: -kv[1])[:2]
    causes = " ".join(f"{k}={p:.0f}%" for k, p in top if p)
    w = getattr(a, "window", None)
    win = ""
    if w is not None:
        d = w.to_dict()
        ex = sum(x["ns"] for x in d["excluded"])
        win = f"{d['mode']} {d['steps_analysed']}/{d['steps_total']} ex={ex / 1e6:.0f}ms"
    lever = (v["levers"][0][:40] if v["levers"] else "")
    return (f"{v['bound']:<13} lost={ev.get('lost_pct', 0):5.1f}% {win:<28} {causes:<26} "
            f"| {lever:<40} | {secs:4.1f}s {path}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
