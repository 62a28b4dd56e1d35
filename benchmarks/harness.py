"""What every benchmark shares: the sides, one measured process, repeats, one table.

* A *side* is a tree of traceread sources: this checkout's ``src`` and, with
  ``--baseline``, other ones (a git ref, a worktree, a directory). Every side runs
  in the same invocation, so a ratio is only ever taken between figures of one run.
* :func:`run` times one command as a whole process: wall, user + system CPU of the
  process and the children it waited for, and the peak RSS sum and PSS of its
  process tree (sampled every 20 ms from /proc; PSS counts a page that forked
  workers share once).
* A *probe* is a function of a benchmark module run in a fresh process with one
  side's sources first on ``PYTHONPATH``; what it returns (a dict of figures)
  comes back as ``Run.result``.
* :func:`interleave` runs every (case, side) ``repeat`` times in rounds, so load on
  a shared machine hits every side alike; :func:`best` keeps the lowest figure.
* :class:`Table` prints markdown rows ready for docs/performance.md, with the ratio
  of each baseline to this checkout (``2.00×``: the baseline takes twice as long).

This module imports only the standard library: probes import it in their child.
"""
from __future__ import annotations

import gzip
import importlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
CORPUS = REPO.parent / "shared" / "corpus"
HTA_TRACE = (CORPUS / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
             / "df_index_resolver" / "df_index_resolver.json.gz")
EXAMPLE = SRC / "traceread" / "examples" / "h200_pageable_copy.json.gz"
# The CLI sets this itself before numpy loads; library processes get the same.
BASE_ENV = {"NUMPY_MADVISE_HUGEPAGE": "0", "TRACEREAD_NO_CACHE": "1"}
RESULT = "RESULT "


# --- sides -------------------------------------------------------------------------

@dataclass
class Side:
    """One tree of traceread sources (the directory that holds ``traceread/``)."""
    name: str
    src: Path

    def env(self, extra: dict | None = None) -> dict:
        path = os.pathsep.join([str(self.src), str(REPO)])  # REPO: the probes' package
        return {**os.environ, **BASE_ENV, "PYTHONPATH": path, **(extra or {})}


def this_side() -> Side:
    return Side("this", SRC)


def add_side_args(ap) -> None:
    ap.add_argument("--baseline", action="append", default=[], metavar="REF|DIR",
                    help="measure these sources too, in the same run: a git ref (a worktree "
                         "that has it checked out is used as it is, else `git archive REF src`), "
                         "or a checkout / src directory; repeat or comma-separate for several")
    ap.add_argument("--baseline-src", action="append", default=[], metavar="DIR",
                    help="a src/ directory of other traceread sources (same as --baseline DIR)")


def sides(args, tmp: Path) -> list[Side]:
    """This checkout first, then each baseline in the order given."""
    out = [this_side()]
    specs = [s for b in args.baseline for s in b.split(",") if s] + list(args.baseline_src)
    for spec in specs:
        out.append(Side(_side_name(spec, out), resolve(spec, tmp)))
    return out


def _side_name(spec: str, taken: list[Side]) -> str:
    name = Path(spec).name if os.sep in spec else spec
    if name == "src":
        name = Path(spec).resolve().parent.name
    return name if name not in {s.name for s in taken} else f"{name}#{len(taken)}"


def resolve(spec: str, tmp: Path) -> Path:
    """The ``src`` directory of a baseline spec (see ``--baseline``)."""
    p = Path(spec)
    if p.is_dir():
        for cand in (p / "src", p):
            if (cand / "traceread" / "__init__.py").exists():
                return cand.resolve()
        raise SystemExit(f"{spec}: no traceread sources (src/traceread) there")
    wt = _worktree_of(spec)
    if wt is not None:
        return wt / "src"
    return export(spec, tmp / f"base-{spec.replace('/', '_')}")


def _worktree_of(ref: str) -> Path | None:
    """The worktree that has branch ``ref`` checked out (its uncommitted edits included)."""
    out = subprocess.run(["git", "-C", str(REPO), "worktree", "list", "--porcelain"],
                         capture_output=True, text=True).stdout
    path = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = Path(line[9:])
        elif line == f"branch refs/heads/{ref}" and path and path.resolve() != REPO:
            return path
    return None


def export(ref: str, dest: Path) -> Path:
    """``git archive REF src`` unpacked under ``dest``, with a C decoder; returns its src."""
    dest.mkdir(parents=True, exist_ok=True)
    arch = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
    readers = dest / "src" / "traceread" / "readers"
    here = SRC / "traceread" / "readers"
    c = readers / "_cscan.c"
    if c.exists() and c.read_bytes() == (here / "_cscan.c").read_bytes():
        for so in here.glob("_cscan*.so"):
            shutil.copy2(so, readers)
    elif c.exists():
        _build_cscan(c)
    passes = dest / "src" / "traceread" / "passes"
    # the replay's C loop and the interval algebra (a baseline without them runs numpy)
    for c in (passes / "replay" / "_csim.c", passes / "_civ.c"):
        if c.exists():
            _build_cscan(c, ["-fwrapv"])
    return dest / "src"


def _build_cscan(c: Path, extra: list[str] = ()) -> None:
    """Compile a baseline's own C extension (``_cscan``: its module falls back to msgspec
    if this fails; ``_csim``, ``_civ``: to their numpy code)."""
    out = c.with_name(c.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run(cc + ["-O3", "-fPIC", "-shared", "-DNDEBUG", "-std=c99",
                         "-fno-strict-aliasing", *extra, f"-I{sysconfig.get_paths()['include']}",
                         str(c), "-o", str(out)], capture_output=True)


def decoder_of(side: Side) -> str:
    r = subprocess.run([sys.executable, "-c", "from traceread.readers import decoder_name; "
                        "print(decoder_name())"], env=side.env(), capture_output=True, text=True)
    return (r.stdout.strip() or "unknown").split(" (")[0]


# --- one measured process -------------------------------------------------------------

@dataclass
class Run:
    ok: bool
    wall: float
    cpu: float
    peak: int       # bytes, RSS summed over the process tree
    pss: int        # bytes, PSS of the tree (0 where smaps_rollup is missing)
    result: dict = field(default_factory=dict)
    out: bytes = b""
    err: str = ""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _mem(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of one process; PSS is 0 where smaps_rollup is missing."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return rss, pss


def tree_mem(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of pid and all its descendants (Linux /proc; zeros elsewhere)."""
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        r, s = _mem(p)
        rss, pss = rss + r, pss + s
        todo += _children(p)
    return rss, pss


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> Run:
    """Run ``cmd`` to its end: wall, CPU (user + sys, children included), peak memory of
    its tree, and the figures of its last ``RESULT {json}`` line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:  # no pipe to fill
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        peak = peak_pss = 0
        while proc.poll() is None:
            rss, pss = tree_mem(proc.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read().decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if not peak:  # no /proc: the largest single process instead of the tree
        peak = int(after.ru_maxrss * 1024)
    result: dict = {}
    for line in out.decode(errors="replace").splitlines():
        if line.startswith(RESULT):
            result = json.loads(line[len(RESULT):])
    ok = proc.returncode == 0 and "skip" not in result
    why = result.get("skip") or (err.strip().splitlines() or ["killed"])[-1]
    return Run(ok, wall, cpu, peak, peak_pss, result, out, "" if ok else why)


def probe(side: Side, fn, *args, env: dict | None = None, timeout: float = 3600) -> Run:
    """``fn(*args)`` (a function of a benchmarks module) in a fresh process on ``side``."""
    code = "from benchmarks.harness import child; child()"
    cmd = [sys.executable, "-c", code, fn.__module__, fn.__name__, json.dumps(args)]
    return run(cmd, side.env(env), timeout)


def child() -> None:
    """The probe process: call the function named on the command line, print its figures."""
    module, name, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = getattr(importlib.import_module(module), name)(*args)
    print(RESULT + json.dumps(out), flush=True)


def cli(side: Side, *args: str, env: dict | None = None, timeout: float = 3600) -> Run:
    """``traceread ARGS`` (``python -m traceread``) as a whole process on ``side``."""
    return run([sys.executable, "-m", "traceread", *args], side.env(env), timeout)


# --- repeats -----------------------------------------------------------------------------

def interleave(cases: list, sides_: list[Side], repeat: int, measure) -> dict:
    """``measure(case, side)`` ``repeat`` times per pair, in rounds over every case and
    side: ``{(case, side.name): [Run, ...]}`` (``measure`` returns None for a pair it
    does not measure, e.g. a yardstick that is the same on every side)."""
    runs: dict = {}
    for i in range(repeat):
        for case in cases:
            for side in sides_:
                say(f"round {i + 1}/{repeat}: {case} on {side.name}")
                runs.setdefault((case, side.name), []).append(measure(case, side))
    return runs


def best(runs: list[Run]) -> Run | None:
    """The lowest of each figure over the runs that worked (None if none did)."""
    good = [r for r in runs if r is not None and r.ok]
    if not good:
        return None
    keys = set.intersection(*(set(k for k, v in r.result.items() if _num(v)) for r in good))
    res = {**good[0].result, **{k: min(r.result[k] for r in good) for k in keys}}
    return Run(True, min(r.wall for r in good), min(r.cpu for r in good),
               min(r.peak for r in good), min(r.pss for r in good), res, good[0].out)


def failure(runs: list[Run]) -> str:
    return next((r.err for r in runs if r is not None and not r.ok), "")


def _cell(v, fmt) -> str:
    return "—" if v is None else fmt(v) if _num(v) else str(v)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --- the table ------------------------------------------------------------------------------

def fmt_s(x) -> str:
    if x is None:
        return "—"
    return f"{x * 1e3:.1f} ms" if x < 0.1 else f"{x:.2f} s" if x < 100 else f"{x:.0f} s"


def fmt_mb(b) -> str:
    if not b:
        return "—"
    if b < 1e6:
        return f"{b / 1e3:,.0f} KB"
    return f"{b / 1e6:,.1f} MB" if b < 10e6 else f"{b / 1e6:,.0f} MB"


def fmt_ratio(a, b) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


FIGURES = {"wall": ("wall", fmt_s), "cpu": ("CPU", fmt_s), "peak": ("peak RSS", fmt_mb),
           "pss": ("peak PSS", fmt_mb)}


class Table:
    """Markdown: one row per (case, figure), a column per side, then baseline / this."""

    def __init__(self, sides_: list[Side], first: str = "step"):
        self.sides = [s.name for s in sides_]
        self.first = first
        self.rows: list[list[str]] = []

    def add(self, label: str, values: dict, fmt=fmt_s) -> None:
        """``values``: side name -> number (None: failed / not measured)."""
        this = values.get("this")
        cells = [_cell(values.get(s), fmt) for s in self.sides]
        ratios = [fmt_ratio(values.get(s), this) if _num(values.get(s)) and _num(this) else "—"
                  for s in self.sides[1:]]
        self.rows.append([label, *cells, *ratios])

    def add_runs(self, label: str, runs: dict, figures=("wall", "cpu", "peak", "pss")) -> None:
        """Rows for the process figures of the best run per side (``runs``: name -> Run)."""
        for fig in figures:
            name, fmt = FIGURES[fig]
            self.add(f"{label}: {name}", {s: getattr(r, fig) if r else None
                                         for s, r in runs.items()}, fmt)

    def markdown(self) -> str:
        head = [self.first, *self.sides, *(f"{s} / this" for s in self.sides[1:])]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines)


# --- small shared things ----------------------------------------------------------------------

def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine(sides_: list[Side]) -> str:
    """One line on where the figures came from (read before the run)."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0
    dec = ", ".join(f"{s.name} {s.src} ({decoder_of(s)})" for s in sides_)
    return (f"machine: {os.cpu_count()} cores, {mem:.0f} GiB, Python "
            f"{platform.python_version()}; load average {load()}; sides: {dec}")


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def raw_size(path: Path) -> int:
    """Bytes of the uncompressed JSON."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    with gzip.open(path, "rb") as g:
        return sum(len(b) for b in iter(lambda: g.read(1 << 24), b""))


def parse_size(text: str) -> int:
    sys.path.insert(0, str(REPO / "scripts"))
    from make_big_trace import parse_size as ps

    return ps(text)


def powers_of_two(n: int) -> list[int]:
    """Worker counts 1, 2, 4, ... below ``n``, then ``n`` itself."""
    out, w = [], 1
    while w < n:
        out.append(w)
        w *= 2
    return out + [n]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def first_module(*names: str):
    """The first of ``names`` that imports: a side may be older or newer than a module's
    move (e.g. ``traceread.batch`` -> ``traceread.jobs.batch``)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if not name.startswith(str(e.name)):
                raise
    raise ModuleNotFoundError(f"none of {names}")


def own_peak_rss() -> int:
    """Bytes: this process's own peak RSS (``VmHWM``). ``ru_maxrss`` would not do in a probe:
    Linux carries it over from the parent through fork + exec, so a probe started by a big
    benchmark process reports the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_json(path: Path | None, data) -> None:
    if path:
        path.write_text(json.dumps(data, indent=1, default=_plain))


def _plain(o):
    if isinstance(o, Run):
        return {k: v for k, v in o.__dict__.items() if k != "out"}
    return str(o)
