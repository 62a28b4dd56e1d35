"""Print the verdict of every trace in the corpus (one line each), for eyeballing changes.

    python scripts/verdict_sweep.py [CORPUS_DIR] [--max-bytes N]            # analyse each
    python scripts/verdict_sweep.py [CORPUS_DIR] --save RECORDS_DIR          # ... and save
                                                                            # its facts record
    python scripts/verdict_sweep.py --records RECORDS_DIR [--ids]           # re-judge the
                                                                            # saved records

Each line: bound, lost %, window (mode, steps analysed/total, excluded time), top
two causes with their share, the first lever, and the path. Run it from two
checkouts (PYTHONPATH=src) and diff the outputs to see what a change did.

A rule change in verdict/ needs no new analysis: ``--save`` writes each trace's facts record
(``WindowFacts.to_json``: figures, program facts, evidence, the replay's per-lever prices)
once; ``--records`` judges every saved record again with ``verdict.decide`` in seconds
(``--ids``: the offered and withdrawn lever ids instead of the first lever's text).
"""
from __future__ import annotations

import csv
import gzip
import re
import sys
import time
from pathlib import Path

from traceread import TraceError, load
from traceread.analysis import analyze

KINDS = ("kineto-json", "kineto-json-gz", "nsys-sqlite")


def main(argv: list[str]) -> int:
    if "--records" in argv:
        return rejudge(Path(_arg(argv, "--records")), "--ids" in argv)
    corpus = Path(argv[0]) if argv and not argv[0].startswith("--") else \
        Path(__file__).resolve().parents[2] / "shared" / "corpus"
    max_bytes = int(_arg(argv, "--max-bytes") or 60_000_000)
    save = Path(_arg(argv, "--save")) if "--save" in argv else None
    if not (corpus / "MANIFEST.tsv").is_file():
        print(f"no MANIFEST.tsv in {corpus}", file=sys.stderr)
        return 2
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
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
        if save is not None and a.facts is not None:
            (save / record_name(r["local_path"])).write_text(a.facts.to_json())
        print(_line(a.verdict, a.window, time.perf_counter() - t, r["local_path"]), flush=True)
    return 0


def rejudge(records: Path, ids: bool) -> int:
    """Judge every saved record of ``records`` again (the current verdict/ rules)."""
    from traceread.passes.facts import WindowFacts
    from traceread.verdict import decide

    files = sorted(list(records.glob("*.facts.json")) + list(records.glob("*.facts.json.gz")))
    if not files:
        print(f"no saved facts records (*.facts.json[.gz]) in {records}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    for p in files:
        t = time.perf_counter()
        try:
            text = gzip.open(p, "rt").read() if p.name.endswith(".gz") else p.read_text()
            v = decide(WindowFacts.from_json(text))
        except (OSError, ValueError, KeyError) as e:
            print(f"unreadable  {p.name}: {e}")
            continue
        name = p.name.split(".facts.json")[0]
        print(_ids_line(v, name) if ids else _line(v, None, time.perf_counter() - t, name),
              flush=True)
    print(f"# {len(files)} records judged in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


def record_name(path: str) -> str:
    """A file name for a corpus path's record (one flat folder)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", path) + ".facts.json"


def _arg(argv: list[str], flag: str) -> str | None:
    if flag not in argv:
        return None
    i = argv.index(flag)
    if i + 1 >= len(argv):
        raise SystemExit(f"{flag} needs a value")
    return argv[i + 1]


def _ids_line(v: dict, path: str) -> str:
    offered = " ".join(a["id"] for a in v.get("actions") or [])
    gone = " ".join(f"-{w['id']}" for w in v.get("withdrawn") or [])
    return f"{v['bound']:<13} {offered} | {gone} | {path}"


def _line(v: dict, w, secs: float, path: str) -> str:
    ev = v["evidence"]
    share = ev.get("share_pct", {})
    top = sorted(share.items(), key=lambda kv: -kv[1])[:2]
    causes = " ".join(f"{k}={p:.0f}%" for k, p in top if p)
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
