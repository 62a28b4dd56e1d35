#!/usr/bin/env python3
"""Scale a real Kineto trace to any size by tiling its profiled steps.

    python scripts/make_big_trace.py SRC --size 1GB -o OUT.json[.gz]

The whole profiled window of SRC (every event with a numeric pid: host ops,
runtime calls, GPU kernels/copies, flow arrows, memory instants) is repeated
back to back. Copy k is shifted by k * period in time (period = window length
+ 1 ms gap) and by k * id_span in every id namespace (External id,
correlation, flow id, Ev Idx, ...), and ``ProfilerStep#N`` becomes
``ProfilerStep#(N + k * n_steps)``, so launches still pair with their kernels
and steps stay unique. Metadata events (ph "M"), the trace-span event and the
global markers appear once; the span and "Record Window End" are stretched to
cover all copies. Header keys (deviceProperties, distributedInfo, ...) are
kept as they are, in their original order.

Sizes are of the uncompressed JSON. The default layout is Kineto's own (one
key per line, indented); ``--compact`` writes one compact event per line
(~40% denser, the hardest case for bytes-relative memory figures). Fractional timestamps are
shifted exactly (decimals are carried as text, never through binary floats).
Never commit the outputs: generate them under /tmp at benchmark time.
"""
from __future__ import annotations

import argparse
import decimal
import gzip
import math
import re
import sys
import time
from pathlib import Path

import msgspec

# Arg keys that number something within one trace; each is shifted per copy.
ID_ARGS = (
    "External id", "correlation", "Ev Idx", "Profiler Event Index", "Record function id",
    "Sequence number", "Python id", "Python parent id",
)
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
GAP_US = 1000


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgGtT]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 500MB, 2GB, 10GiB)")
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()]
    if m.group(3) and m.group(3).lower().startswith("i"):
        mult = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def load_source(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    # float_hook=Decimal keeps "123.456" exact through the shift and re-encode.
    doc = msgspec.json.Decoder(float_hook=decimal.Decimal).decode(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        sys.exit(f"{path}: not a Kineto/Chrome trace (no traceEvents array)")
    return doc


def _is_num(v) -> bool:
    return isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool)


class Tiler:
    """Precomputes, for the source events, every slot that changes per copy."""

    def __init__(self, events: list[dict]):
        self.once = []      # events written only with copy 0
        self.tiled = []     # events repeated in every copy
        for e in events:
            if not isinstance(e, dict):
                continue
            if e.get("ph") == "M" or not _is_num(e.get("pid")) or e.get("cat") == "Trace":
                self.once.append(e)
            else:
                self.tiled.append(e)
        ts = [e["ts"] for e in self.tiled if _is_num(e.get("ts"))]
        ends = [e["ts"] + (e["dur"] if _is_num(e.get("dur")) else 0)
                for e in self.tiled if _is_num(e.get("ts"))]
        if not ts:
            sys.exit("source has no timed events to tile")
        self.t0, self.t1 = min(ts), max(ends)
        self.period = int(math.ceil(self.t1 - self.t0)) + GAP_US
        ids = [0]
        steps = []
        self.ts_slots, self.id_slots, self.step_slots = [], [], []
        for e in self.tiled:
            if _is_num(e.get("ts")):
                self.ts_slots.append((e, e["ts"]))
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
                self.id_slots.append((e, "id", e["id"]))
                ids.append(e["id"])
            args = e.get("args")
            if isinstance(args, dict):
                for k in ID_ARGS:
                    v = args.get(k)
                    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                        self.id_slots.append((args, k, v))
                        ids.append(v)
            m = STEP_RE.match(str(e.get("name", "")))
            if m:
                self.step_slots.append((e, int(m.group(1))))
                steps.append(int(m.group(1)))
        self.id_span = max(ids) + 1
        self.n_steps = (max(steps) - min(steps) + 1) if steps else 0

    def copy(self, k: int) -> list[dict]:
        """Mutate the tiled events in place into copy k and return them."""
        dt, di, ds = k * self.period, k * self.id_span, k * self.n_steps
        for e, v in self.ts_slots:
            e["ts"] = v + dt
        for obj, key, v in self.id_slots:
            obj[key] = v + di
        for e, n in self.step_slots:
            e["name"] = f"ProfilerStep#{n + ds}"
        return self.tiled

    def once_events(self, n_copies: int) -> list[dict]:
        """The copy-0-only events, stretched to cover ``n_copies`` copies."""
        extra = (n_copies - 1) * self.period
        out = []
        for e in self.once:
            e = dict(e)
            if e.get("cat") == "Trace" and _is_num(e.get("dur")):
                e["dur"] = e["dur"] + extra
            elif e.get("name") == "Record Window End" and _is_num(e.get("ts")):
                e["ts"] = e["ts"] + extra
            out.append(e)
        return out


def open_out(path: Path, level: int):
    if path.suffix == ".gz":
        try:
            from isal import igzip
            return igzip.open(path, "wb", compresslevel=min(level, 3))
        except ImportError:
            return gzip.open(path, "wb", compresslevel=level)
    return open(path, "wb", buffering=1 << 22)


def make(src: Path, size: int, out: Path, level: int = 1, quiet: bool = False,
         compact: bool = False) -> dict:
    doc = load_source(src)
    tiler = Tiler(doc["traceEvents"])
    enc = msgspec.json.Encoder(decimal_format="number")

    def events_text(events: list) -> bytes:
        if compact:
            return b",\n".join(map(enc.encode, events))
        # Kineto's own layout: one key per line, indented (as torch.profiler writes it)
        text = msgspec.json.format(enc.encode(events), indent=2)
        return text[2:-2]  # drop "[\n" and "\n]"

    copy0 = events_text(tiler.copy(0))
    n_copies = max(1, round(size / max(1, len(copy0))))
    t = time.perf_counter()
    written = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open_out(out, level) as f:
        def w(b: bytes) -> None:
            nonlocal written
            f.write(b)
            written += len(b)
        w(b"{")
        first = True
        for key, val in doc.items():
            w(b"" if first else b",\n")
            first = False
            w(enc.encode(key) + b": ")
            if key != "traceEvents":
                w(enc.encode(val))
                continue
            w(b"[\n")
            once = tiler.once_events(n_copies)
            if once:
                w(events_text(once) + b",\n")
            w(copy0)
            for k in range(1, n_copies):
                w(b",\n")
                w(events_text(tiler.copy(k)))
                if not quiet and k % 20 == 0:
                    print(f"  copy {k}/{n_copies} ({written / 1e6:.0f} MB)", file=sys.stderr)
            w(b"\n]")
        w(b"}\n")
    info = {"copies": n_copies, "events": len(tiler.once) + n_copies * len(tiler.tiled),
            "raw_bytes": written, "period_us": tiler.period, "id_span": tiler.id_span,
            "steps_per_copy": tiler.n_steps, "seconds": round(time.perf_counter() - t, 1)}
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a real Kineto trace (.json or .json.gz)")
    ap.add_argument("--size", type=parse_size, required=True,
                    help="target uncompressed size, e.g. 500MB, 2GB, 10GiB")
    ap.add_argument("-o", "--output", type=Path, required=True,
                    help="output path; .gz suffix writes gzip")
    ap.add_argument("--level", type=int, default=1, help="gzip level (default 1: fast)")
    ap.add_argument("--compact", action="store_true",
                    help="one compact event per line (denser than Kineto's indented layout)")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if not a.src.is_file():
        sys.exit(f"{a.src}: not a trace file (give a Kineto .json or .json.gz)")
    if a.output.resolve() == a.src.resolve():
        sys.exit("refusing to overwrite the source trace")
    info = make(a.src, a.size, a.output, a.level, a.quiet, a.compact)
    if not a.quiet:
        print(" ".join(f"{k}={v}" for k, v in info.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
