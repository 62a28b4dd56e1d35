"""What the Kineto readers share (``kineto.py`` whole-file, ``stream.py`` chunked,
``_native.py`` the C chunk decoder): the decoded-chunk transport form, the lenient
per-event decode, the one-line JSON error reasons and the progress bar."""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from . import _kineto_decode as dec
from ._json_edges import Inflater  # noqa: F401 - the one gzip inflater, for other rooms too

if TYPE_CHECKING:
    from ..table import Trace

PROGRESS_MIN_BYTES = 32 << 20  # ~1 s of work: show a progress bar above this (uncompressed)


@dataclass
class Chunk:
    """A decoded chunk in transport form: numpy arrays, dictionary-coded strings.

    Per row it costs ~130 bytes (vs ~190 for a ``Batch`` with Python lists);
    the parent keeps these until the end and builds one ``Batch`` from them.
    """

    n: int
    strs_coded: dict      # "ph"/"name"/"cat" -> (int32 codes, uniques list) or a plain list
    sparse: dict          # arg string field -> (int64 rows, values) of the non-None entries
    arrays: dict          # pid, tid, ts_ns, dur_ns and every ARG_INT_FIELDS column
    pid_str: dict
    tid_str: dict
    ts_lossy: bool
    meta_events: list
    utf8_repaired: bool = False


def json_error(e: Exception, size: int) -> str:
    msg = str(e)
    if "truncated" in msg:
        return f"truncated JSON at byte {size} (file cut short?)"
    m = re.search(r"\(byte (\d+)\)", msg)
    if m:
        return f"invalid JSON at byte {m.group(1)}: {msg.split(':', 1)[-1].split('(byte')[0].strip()}"
    return f"invalid JSON: {msg}"


def not_a_trace(buf: bytes) -> str:
    try:
        keys = list(msgspec.json.decode(buf, type=dict[str, msgspec.Raw]))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return "JSON but not a trace (no traceEvents)"
    if "nodes" in keys:
        return "PyTorch execution trace (has 'nodes'), not a profiler timeline: no traceEvents"
    if any(k.startswith("rocprofiler") for k in keys):
        return "rocprofiler results file, not a Chrome/Kineto trace: no traceEvents"
    shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
    return f"JSON object without traceEvents (keys: {shown}): not a trace"


_SCALARS = (int, float, str, dec.Decimal, type(None))


# args the typed decode keeps as raw JSON text (shapes, grid/block)
_RAW_ARG_KEYS = frozenset(("Input Dims", "Input type", "Concrete Inputs", "grid", "block"))
JSON_OUT = msgspec.json.Encoder(decimal_format="number")


def _raw_if_json(key: str, v: Any) -> Any:
    if key in _RAW_ARG_KEYS:
        return msgspec.Raw(JSON_OUT.encode(v))
    return v


def coerce_event(e: Any, etype: type):
    if not isinstance(e, dict):
        return None
    args = e.get("args")
    if isinstance(args, dict) and not _RAW_ARG_KEYS.isdisjoint(args):
        e = {**e, "args": {k: _raw_if_json(k, v) for k, v in args.items()}}
    try:
        return msgspec.convert(e, etype, strict=False)
    except msgspec.ValidationError:
        pass
    clean = {k: v for k, v in e.items() if k != "args" and isinstance(v, _SCALARS)}
    args = e.get("args")
    if isinstance(args, dict):
        clean["args"] = {k: _raw_if_json(k, v) for k, v in args.items()
                         if isinstance(v, _SCALARS) or k in _RAW_ARG_KEYS}
    for key in ("ts", "dur"):
        if isinstance(clean.get(key), str):
            try:
                clean[key] = float(clean[key])
            except ValueError:
                clean.pop(key)
    try:
        return msgspec.convert(clean, etype, strict=False)
    except msgspec.ValidationError:
        return None


@contextmanager
def progress_bar(p: Path, enabled: bool):
    """Yield ``tick(stage, fraction=None)``; draws a rich bar on stderr for big files."""
    size = 0
    if enabled:
        try:
            size = p.stat().st_size
            with open(p, "rb") as f:
                if f.read(2) == b"\x1f\x8b":
                    size *= 10  # typical Kineto gzip ratio
        except OSError:
            size = 0
    if not enabled or size < PROGRESS_MIN_BYTES:
        yield lambda stage, frac=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    stages = {"gunzip": (0, 25), "parse": (25, 60), "columns": (60, 85), "table": (85, 100),
              "done": (100, 100)}
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"loading {p.name}", total=100)

        def tick(stage: str, frac: float | None = None) -> None:
            lo, hi = stages.get(stage, (0, 0))
            bar.update(task, completed=lo + (hi - lo) * (frac or 0.0),
                       description=f"{stage} {p.name}")

        yield tick


def mark_truncated(trace: Trace, info: dict) -> None:
    """Record a recovered cut in the trace's meta (rows of the table = events recovered)."""
    trace.meta.extra["truncated"] = {**info, "events_recovered": len(trace)}
