"""Dump, per trace, the full analysis and a digest of every table column, to compare two checkouts.

    PYTHONPATH=src python scripts/equal_check.py OUT_DIR [TRACE_DIR ...] [--max-bytes N]
    python scripts/equal_check.py --compare DIR_A DIR_B

Speed work must not change a single figure: run it on main and on a branch, then
`--compare` the two folders. Traces: the corpus (MANIFEST.tsv kinds) and every trace
under tests/fixtures by default. The analysis is the JSON dict of `analyze(load(f))`
(it holds no timing of traceread itself); the table digest covers values,
nulls and categorical dictionaries (order included).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.xz", ".pt.trace.json", ".pt.trace.json.gz")


def _traces(dirs: list[Path], max_bytes: int) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        manifest = d / "MANIFEST.tsv"
        if manifest.exists():
            with open(manifest, newline="") as f:
                out += [d / r["local_path"] for r in csv.DictReader(f, delimiter="\t")
                        if r["kind"] in ("kineto-json", "kineto-json-gz", "nsys-sqlite")
                        and int(r["bytes"]) <= max_bytes]
        else:
            out += [p for p in sorted(d.rglob("*")) if p.is_file() and p.name.endswith(SUFFIXES)
                    and "truth" not in p.name and "stats" not in p.parts]
    return sorted(set(out))


def _digest(df) -> dict[str, str]:
    import pandas as pd
    res = {}
    for c in df.columns:
        s = df[c]
        h = hashlib.blake2b(digest_size=10)
        if isinstance(s.dtype, pd.CategoricalDtype):
            h.update(s.cat.codes.to_numpy().tobytes())
            h.update(repr(list(s.cat.categories)).encode())
        else:
            h.update(str(s.dtype).encode())
            h.update(s.isna().to_numpy().tobytes())
            h.update(s.fillna(0).to_numpy().tobytes() if s.dtype != object else repr(list(s)).encode())
        res[c] = h.hexdigest()
    return res


def dump(out: Path, dirs: list[Path], max_bytes: int) -> int:
    from traceread import TraceError, load
    from traceread.analysis import analyze
    out.mkdir(parents=True, exist_ok=True)
    for p in _traces(dirs, max_bytes):
        # keyed by the path below its trace folder, so two checkouts' fixtures pair up
        rel = next(f"{d.name}/{p.relative_to(d)}" for d in dirs if p.is_relative_to(d))
        key = hashlib.blake2b(rel.encode(), digest_size=8).hexdigest()
        rec: dict = {"path": rel}
        try:
            tr = load(p)
            rec["table"] = _digest(tr.events)
            rec["analysis"] = analyze(tr).to_dict()
        except TraceError as e:
            rec["error"] = str(e)
        (out / f"{key}.json").write_text(json.dumps(rec, sort_keys=True, default=str, indent=0))
        print(p, flush=True)
    return 0


def _drop(rec, path: list[str]) -> None:
    """Remove the key at ``path`` (``[]`` steps into every item of a list) in place."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        items = rec.get(head[:-2]) if isinstance(rec, dict) else None
        for x in items if isinstance(items, list) else []:
            _drop(x, rest)
    elif isinstance(rec, dict):
        if rest:
            _drop(rec.get(head), rest)
        else:
            rec.pop(head, None)


def compare(a: Path, b: Path, ignore: list[str] = ()) -> int:
    bad = 0
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    for n in names:
        if not (a / n).exists() or not (b / n).exists():
            print("missing on one side:", n)
            bad += 1
            continue
        ra, rb = (json.loads((d / n).read_text()) for d in (a, b))
        for path in ignore:   # keys one side added on purpose
            for r in (ra, rb):
                _drop(r, path.split("."))
        if ra != rb:
            bad += 1
            diff = [k for k in ("table", "analysis", "error") if ra.get(k) != rb.get(k)]
            print(f"DIFFERS ({', '.join(diff)}): {ra['path']}")
    print(f"{len(names)} traces, {bad} differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", type=Path, metavar="OUT_DIR",
                    help="folder to write one JSON record per trace into")
    ap.add_argument("trace_dirs", nargs="*", type=Path, metavar="TRACE_DIR",
                    help="folders of traces (default: the corpus and tests/fixtures)")
    ap.add_argument("--max-bytes", type=int, default=60_000_000,
                    help="skip corpus traces above this size (default 60000000)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"),
                    help="compare two dumps instead; exit 1 if any trace differs")
    ap.add_argument("--ignore", action="append", default=[], metavar="KEY.PATH",
                    help="with --compare: leave out this key of every record, dotted, "
                         "`[]` for every item of a list (analysis.facts, "
                         "analysis.verdict.actions[].because); repeatable")
    args = ap.parse_args(argv)
    if args.compare:
        if args.out_dir:
            ap.error("--compare takes no OUT_DIR")
        return compare(*args.compare, args.ignore)
    if args.out_dir is None:
        ap.error("OUT_DIR is required (or --compare DIR_A DIR_B)")
    corpus = next((c / "shared" / "corpus" for c in ROOT.parents
                   if (c / "shared" / "corpus" / "MANIFEST.tsv").exists()), ROOT)
    dirs = [d.resolve() for d in args.trace_dirs] or [corpus, ROOT / "tests" / "fixtures"]
    return dump(args.out_dir, [d for d in dirs if d.exists()], args.max_bytes)


if __name__ == "__main__":
    sys.exit(main())
