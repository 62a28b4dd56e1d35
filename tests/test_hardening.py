"""Hardening suite (issue 13): hostile, malformed and unusual inputs through the CLI.

Every generated case (``hardening_cases.CASES``) runs ``analyze`` (text and
JSON) and ``info`` in a subprocess under a timeout and checks: the exit
status, exactly one clean ``traceread: error:`` line (or a correct partial
analysis with one warning line), no traceback, no "internal error", the input
byte-identical afterwards and nothing created beside it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hardening_cases as H

SRC = Path(__file__).resolve().parents[1] / "src"
TIMEOUT = 60


# The CLI in a child that reports its own peak RSS (kB) into $RSS_OUT at exit.
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent
# (pytest, often 700 MB) across exec, while VmHWM belongs to the new image.
_DRIVER = ("import atexit, os, re, resource\n"
           "def peak():\n"
           "    try:\n"
           "        return re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
           "    except (OSError, AttributeError):\n"
           "        return str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
           "atexit.register(lambda: open(os.environ['RSS_OUT'], 'w').write(peak()))\n"
           "from traceread.cli import main\n"
           "main(prog_name='traceread')\n")
RSS_BASE_MB = 400      # interpreter + numpy/pandas/pyarrow (~115 MB) + a small analysis
RSS_PER_INPUT = 12     # and at most this multiple of the input on top


def run_cli(*args, cwd=None, timeout=TIMEOUT, env=None):
    cwd = Path(cwd or ".")
    e = dict(os.environ, PYTHONPATH=str(SRC), TRACEREAD_CACHE_DIR=str(cwd / ".cache"),
             RSS_OUT=str(cwd / ".rss"))
    e.pop("TRACEREAD_DEBUG", None)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", _DRIVER, *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
    try:
        r.peak_mb = int((cwd / ".rss").read_text()) / 1024
    except (OSError, ValueError):
        r.peak_mb = None
    return r


def snapshot(d: Path) -> dict:
    """name -> bytes of every entry directly in ``d`` (special files by type only)."""
    out = {}
    for p in sorted(d.iterdir()):
        if p.is_file():
            try:
                out[p.name] = p.read_bytes()
            except PermissionError:  # the unreadable case (not root): its stat then
                st = p.stat()
                out[p.name] = ("unreadable", st.st_size, st.st_mtime_ns, st.st_mode)
        else:
            out[p.name] = "dir" if p.is_dir() else "special"
    return out


def check_run(r, case: H.Case, json_out: bool = False) -> None:
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "internal error" not in r.stderr, r.stderr
    assert "RuntimeWarning" not in r.stderr, r.stderr
    if case.expect == "error":
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert len(err) == 1 and err[0].startswith("traceread: error: "), err
        assert case.phrase.lower() in err[0].lower(), err
        assert r.stdout == ""
    else:
        assert r.returncode == 0, (r.returncode, r.stderr)
        if case.expect == "partial":
            assert len(err) == 1 and err[0].startswith("traceread: warning: "), err
            assert case.phrase in err[0]
        else:
            assert err == [], err
        if json_out:
            json.loads(r.stdout)


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_inprocess(*args, cwd: Path):
    """The CLI in this process (fast); only for cases that cannot hang."""
    from click.testing import CliRunner

    from traceread.cli import main

    env = {"TRACEREAD_CACHE_DIR": str(cwd / ".cache"), "TRACEREAD_DEBUG": None}
    try:
        r = CliRunner(mix_stderr=False).invoke(main, [str(a) for a in args], env=env)
    except TypeError:  # click >= 8.2: stderr is always separate
        r = CliRunner().invoke(main, [str(a) for a in args], env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return _Result(r.exit_code, r.stdout, r.stderr)


def _params():
    for c in H.CASES:
        marks = [pytest.mark.slow] if c.slow else []
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_case(case: H.Case, tmp_path: Path):
    if case.name == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a chmod 000 file")
    work = tmp_path / "in"
    work.mkdir()
    path = case.build(work)
    before = snapshot(work) if path.parent == work else None
    runs = ([["analyze", "--format", "json"]] if case.hang else
            [["analyze"], ["analyze", "--format", "json"], ["info"]])
    for args in runs:
        if case.hang or case.slow:
            r = run_cli(*args, path, cwd=tmp_path)
            size_mb = path.stat().st_size / 2**20 if path.is_file() else 0
            assert r.peak_mb is not None
            assert r.peak_mb < RSS_BASE_MB + RSS_PER_INPUT * size_mb, (r.peak_mb, size_mb)
        else:
            r = run_inprocess(*args, path, cwd=tmp_path)
        check_run(r, case, json_out="--format" in args)
        if before is not None:
            assert snapshot(work) == before, f"{args}: input dir changed"


# ------------------------------------------------------------------ streaming reader

STREAM_CASES = [c for c in H.CASES if not c.slow and not c.name.startswith("nsys")
                and c.name not in ("fifo", "unreadable")]


@pytest.mark.parametrize("case", STREAM_CASES, ids=[c.name for c in STREAM_CASES])
def test_stream_reader_agrees(case: H.Case, tmp_path: Path):
    """The streaming reader (small chunks) gives the small path's outcome on every case."""
    from traceread.errors import TraceError
    from traceread.readers.kineto import read_kineto
    from traceread.readers.stream import read_stream

    path = case.build(tmp_path)
    outcomes = []
    for read in (read_kineto, lambda p: read_stream(p, workers=1, chunk_bytes=4096)):
        try:
            t = read(path)
            outcomes.append(("ok", len(t), bool(t.meta.extra.get("truncated"))))
        except TraceError as e:
            assert "internal error" not in e.reason
            outcomes.append(("error", case.phrase.lower() in e.reason.lower()))
    small, streamed = outcomes
    assert small == streamed or (small[0] == streamed[0] == "ok" and case.expect == "partial"
                                 and "gz" in case.name), outcomes
    assert small[0] == ("error" if case.expect == "error" else "ok")
    if case.expect == "error":
        assert small[1], f"phrase {case.phrase!r} missing"


# ------------------------------------------------------------------ truncated traces

def _cut_file(tmp_path: Path, frac: float, gz: bool = False) -> tuple[Path, int]:
    evs = H.events(300)
    data = H.doc_bytes(evs)
    cut = int(len(data) * frac)
    # complete events before the cut: count the ones whose text ends before it
    complete = sum(1 for line in data[:cut].split(b"\n") if line.rstrip(b",").endswith(b"}}"))
    if gz:
        import gzip

        data = gzip.compress(data)
        cut = int(len(data) * frac)
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    p.write_bytes(data[:cut])
    return p, complete


@pytest.mark.parametrize("frac", [0.1, 0.37, 0.5, 0.93, 0.999])
@pytest.mark.parametrize("stream", [False, True])
def test_truncated_recovers_every_complete_event(tmp_path, frac, stream):
    from traceread.readers import read

    p, complete = _cut_file(tmp_path, frac)
    t = read(p, stream=stream)
    cut = t.meta.extra["truncated"]
    assert len(t) == cut["events_recovered"] == complete
    assert cut["truncated_at_byte"] == p.stat().st_size
    assert 0 < cut["share_of_file"] <= 1


def test_truncated_strict_refuses(tmp_path):
    p, _ = _cut_file(tmp_path, 0.5)
    r = run_inprocess("analyze", "--strict", p, cwd=tmp_path)
    assert r.returncode == 1 and "truncated JSON" in r.stderr and "file cut short" in r.stderr


def test_truncated_json_output_says_so(tmp_path):
    p, complete = _cut_file(tmp_path, 0.5)
    r = run_inprocess("analyze", "--format", "json", p, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    cut = doc["trace"]["truncated"]
    assert cut["events_recovered"] == complete and cut["truncated_at_byte"] == p.stat().st_size
    assert r.stderr.startswith("traceread: warning:") and "truncated at byte" in r.stderr


def test_truncated_gzip_both_paths_recover(tmp_path):
    from traceread.readers import read

    p, _ = _cut_file(tmp_path, 0.6, gz=True)
    small, streamed = read(p, stream=False), read(p, stream=True)
    assert small.meta.extra["truncated"]["gzip_stream_cut"]
    assert len(small) > 100 and len(streamed) == len(small)


def test_valid_trace_with_huge_last_event_streams(tmp_path):
    """A last event of ~2 MB (big args) was refused as 'never closed' by the streaming reader."""
    from traceread.readers import read

    for gz in (False, True):
        data = H.big_last_event(tmp_path).read_bytes()
        p = tmp_path / ("big.json.gz" if gz else "big.json")
        if gz:
            import gzip

            data = gzip.compress(data)
        p.write_bytes(data)
        t = read(p, stream=True)
        assert "truncated" not in t.meta.extra and len(t) == len(read(p, stream=False))


# ------------------------------------------------------------------ output paths

def test_output_onto_input_refused(tmp_path):
    p = H.valid(tmp_path)
    before = p.read_bytes()
    r = run_inprocess("analyze", p, "-o", p, cwd=tmp_path)
    assert r.returncode == 1 and "is an input" in r.stderr
    assert p.read_bytes() == before


def test_output_missing_dir_and_full_disk(tmp_path):
    p = H.valid(tmp_path)
    r = run_inprocess("analyze", p, "-o", tmp_path / "nope" / "out.txt", cwd=tmp_path)
    assert r.returncode == 1 and "does not exist" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    if os.path.exists("/dev/full"):
        r = run_inprocess("analyze", p, "-o", "/dev/full", cwd=tmp_path)
        assert r.returncode == 1 and "disk full" in r.stderr, r.stderr


def test_failed_export_keeps_existing_target(tmp_path):
    bad = H.name_is_object(tmp_path)
    target = tmp_path / "out.parquet"
    target.write_bytes(b"precious")
    r = run_inprocess("export", bad, "-o", target, cwd=tmp_path)
    assert r.returncode == 1 and target.read_bytes() == b"precious"
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".")] in ([], [".cache"])


def test_multi_file_keeps_good_output_on_unexpected_error(tmp_path, monkeypatch):
    """One file failing with a non-TraceError loses nothing of the others."""
    import traceread.cli._common as C

    good, other = H.valid(tmp_path), H.nsys_valid(tmp_path)
    real = C._load

    def flaky(path, **kw):
        if str(path) == str(other):
            raise ValueError("boom")
        return real(path, **kw)

    monkeypatch.setattr(C, "_load", flaky)
    r = run_inprocess("info", "--format", "json", good, other, cwd=tmp_path)
    assert r.returncode == 1
    # two inputs: the envelope even though one failed, so a script sees the same shape
    assert [d["path"] for d in json.loads(r.stdout)["traces"]] == [str(good)]
    assert r.stderr.count("traceread: error:") == 1


def test_nsys_budget_stops_runaway_query(tmp_path):
    from traceread.readers import _nsys_db as D

    con = D.connect(H.nsys_valid(tmp_path))
    D._set_budget(con, 1_000_000)
    with pytest.raises(Exception):
        con.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                    "SELECT count(*) FROM c").fetchone()
    assert D.budget_spent(con)


# ------------------------------------------------------------------ batch

def _batch_dir(tmp_path: Path, n: int = 4) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    for i in range(n):
        (d / f"t{i}.json").write_bytes(H.doc_bytes(H.events(20 + i)))
    return d


def test_batch_with_fifo_finishes_and_reports_it(tmp_path):
    d = _batch_dir(tmp_path, 2)
    os.mkfifo(d / "pipe.json")
    os.mkfifo(d / "other")
    r = run_cli("batch", d, "-o", tmp_path / "out", "-j", "2", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    import pandas as pd

    s = pd.read_parquet(tmp_path / "out" / "summary.parquet").set_index("file")
    assert s["error"].isna().sum() == 2
    assert "FIFO" in s.loc[str(d / "pipe.json"), "error"]
    assert not (tmp_path / "out" / "summary.partial.csv").exists()


def test_batch_killed_worker_costs_one_row(tmp_path, monkeypatch):
    """A worker killed from outside (the OOM killer) is that file's error row only."""
    import signal

    from traceread.jobs import batch

    d = _batch_dir(tmp_path, 5)
    victim = str(d / "t2.json")
    real_init = batch._Worker.__init__

    def init(self, ctx, i, path, *rest):
        real_init(self, ctx, i, path, *rest)
        if path == victim:
            os.kill(self.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(batch._Worker, "__init__", init)
    res = batch.run(d, jobs=2)
    s = res.summary.set_index("file")
    assert s["error"].notna().sum() == 1
    assert "SIGKILL" in s.loc[victim, "error"]
    assert s.drop(victim)["verdict"].notna().all()


def test_batch_limits_make_error_rows(tmp_path, monkeypatch):
    from traceread.jobs import batch

    # a cache hit (the same bytes analysed by an earlier run) would answer without a worker,
    # and a worker faster than one poll would answer before its (past) deadline is checked
    monkeypatch.setenv("TRACEREAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(batch, "_POLL_S", 0.001)
    d = _batch_dir(tmp_path, 3)
    slow, fat = str(d / "t0.json"), str(d / "t1.json")
    for p in (slow, fat):  # big enough that the worker is still running at the first check
        Path(p).write_bytes(H.doc_bytes(H.events(30_000)))
    monkeypatch.setattr(batch, "time_limit", lambda p: -1 if p == slow else 600)
    monkeypatch.setattr(batch, "memory_limit", lambda p: 1 if p == fat else 1 << 40)
    s = batch.run(d, jobs=2).summary.set_index("file")
    assert "timed out" in s.loc[slow, "error"]
    assert "out of memory" in s.loc[fat, "error"]
    assert s.loc[str(d / "t2.json"), "error"] is None or pd_isna(s.loc[str(d / "t2.json"), "error"])


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def test_batch_out_dir_never_deletes_inputs(tmp_path):
    d = tmp_path / "run"
    (d / "tables").mkdir(parents=True)
    keep = d / "tables" / "rank0.json"
    keep.write_bytes(H.doc_bytes(H.events(10)))
    before = keep.read_bytes()
    r = run_inprocess("batch", d, "-o", d, cwd=tmp_path)
    assert r.returncode == 1 and "would be overwritten or deleted" in r.stderr
    assert keep.read_bytes() == before
    # a foreign tables/ directory is not replaced either
    other = tmp_path / "other"
    (other / "tables").mkdir(parents=True)
    (other / "tables" / "mine.parquet").write_bytes(b"PAR1")
    r = run_inprocess("batch", _batch_dir(tmp_path, 1), "-o", other, cwd=tmp_path)
    assert r.returncode == 1 and "not written by traceread batch" in r.stderr
    assert (other / "tables" / "mine.parquet").read_bytes() == b"PAR1"


def test_batch_rerun_into_same_out_dir(tmp_path):
    d = _batch_dir(tmp_path, 2)
    for i in range(3):
        r = run_inprocess("batch", d, "-o", tmp_path / "out", "-j", "1", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        marker = tmp_path / "out" / "tables" / ".traceread-batch"
        assert marker.exists()
        if i == 0:
            marker.unlink()  # as written by a version without the marker: still ours


def test_batch_partial_summary_grows_per_file(tmp_path):
    import csv

    from traceread.jobs import batch, output

    d = _batch_dir(tmp_path, 3)
    out = tmp_path / "out"
    partial = output.PartialSummary(out)
    seen = []

    def add(res):
        partial.add(res)
        with open(out / output.PARTIAL_SUMMARY) as f:
            seen.append(len(list(csv.reader(f))) - 1)

    batch.run(d, jobs=1, on_result=add)
    partial.close()
    assert seen == [1, 2, 3]


# ------------------------------------------------------------------ cache

@pytest.fixture
def cached_trace(tmp_path, monkeypatch):
    from traceread.readers import cache

    monkeypatch.setenv("TRACEREAD_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "in" / "t.json"
    p.parent.mkdir()
    p.write_bytes(H.doc_bytes(H.events(200)))
    return p, cache


def _edit_same_size_same_mtime(p: Path) -> None:
    st = p.stat()
    data = bytearray(p.read_bytes())
    i = data.index(b"aten::op1")
    data[i:i + 9] = b"aten::opX"
    with open(p, "r+b") as f:  # in place: same inode, same size
        f.write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns


def test_cache_in_place_edit_same_size_same_mtime_misses(cached_trace):
    from traceread.readers import read

    p, cache = cached_trace
    first = read(p, cache=True)
    assert cache.load(p) is not None
    _edit_same_size_same_mtime(p)
    assert cache.load(p) is None
    again = read(p, cache=True)
    assert "aten::opX" in set(again.events["name"].astype(str))
    assert "aten::opX" not in set(first.events["name"].astype(str))


def test_cache_coarse_timestamps_checked_by_content(cached_trace, monkeypatch):
    """Where ctime does not move (coarse clocks), a racy entry is checked by content."""
    p, cache = cached_trace
    from traceread.readers import read

    monkeypatch.setattr(cache, "_identity", lambda st: [st.st_size, st.st_mtime_ns])
    read(p, cache=True)  # just written: racy, so the entry records a content hash
    assert cache.load(p) is not None
    _edit_same_size_same_mtime(p)
    assert cache.load(p) is None


def test_cache_dir_private_and_prunes_only_its_own(cached_trace):
    from traceread.readers import read

    p, cache = cached_trace
    d = cache.cache_dir()
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    mine = [d / f"user{i}.parquet" for i in range(cache.MAX_ENTRIES + 5)]
    for f in mine:
        f.write_bytes(b"PAR1 not ours")
    read(p, cache=True)
    assert (d.stat().st_mode & 0o777) == 0o700
    assert all(f.exists() for f in mine)
    assert len(cache._entries(d)) == 1
    assert cache.clear() == 1 and all(f.exists() for f in mine)


def test_cache_corrupt_or_foreign_entry_is_rebuilt_never_served(cached_trace):
    from traceread.readers import read

    p, cache = cached_trace
    fresh = read(p, cache=True)
    entry = cache.entry_path(p)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert cache.load(p) is None
    # a planted entry: a valid Parquet table of another trace under this key's name
    other = read(H.valid(p.parent))
    planted = entry.with_name(f"{cache.cache_key(p)}.{'0' * 32}.parquet")
    other.to_parquet(planted)
    assert cache.load(p) is None
    again = read(p, cache=True)
    assert again.table.equals(fresh.table) and cache.load(p).table.equals(fresh.table)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")
def test_cache_of_another_user_is_not_used(cached_trace):
    from traceread.readers import read

    p, cache = cached_trace
    read(p, cache=True)
    d = cache.cache_dir()
    os.chown(d, 65534, 65534)
    assert cache.load(p) is None
    assert cache.store(p, read(p)) is None
    os.chown(d, 0, 0)
    entry = cache.entry_path(p)
    os.chown(entry, 65534, 65534)
    assert cache.load(p) is None


def test_cache_concurrent_runs_on_one_new_file(cached_trace, tmp_path):
    p, cache = cached_trace
    code = ("import sys; from traceread.readers import read; "
            "t = read(sys.argv[1], cache=True); print(len(t))")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [pr.communicate(timeout=120) for pr in procs]
    assert all(pr.returncode == 0 for pr in procs), outs
    assert len({o for o, _ in outs}) == 1
    assert cache.load(p) is not None and len(cache._entries(cache.cache_dir())) == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="thread count from /proc")
def test_a_cache_hit_starts_no_native_thread(cached_trace):
    # a parquet reader thread alive at interpreter exit aborts the process (exit 134,
    # "terminate called without an active exception"): a hit must leave none behind
    p, cache = cached_trace
    code = ("import sys; from traceread.readers import read; read(sys.argv[1], cache=True); "
            "n = lambda: open('/proc/self/status').read().split('Threads:')[1].split()[0]; "
            "before = n(); read(sys.argv[1], cache=True); print(before, n())")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-c", code, str(p)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split()
    assert after == before


def test_unreadable_file_is_one_line_exit_1(tmp_path, monkeypatch):
    """Permission denied: exit 1 with one error line (not click's usage text, exit 2)."""
    import traceread.readers.detect as D

    p = H.valid(tmp_path)
    real_open = os.open

    def deny(path, *a, **kw):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(D.os, "open", deny)
    r = run_inprocess("analyze", p, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.strip() == f"traceread: error: {p}: permission denied"


def test_batch_row_says_truncated(tmp_path):
    from traceread.jobs import batch

    d = _batch_dir(tmp_path, 2)
    data = (d / "t0.json").read_bytes()
    (d / "t0.json").write_bytes(data[: len(data) // 2])
    s = batch.run(d, jobs=1).summary.set_index("file")
    row = s.loc[str(d / "t0.json")]
    assert pd_isna(row["error"]) and row["truncated_at_byte"] == len(data) // 2
    assert pd_isna(s.loc[str(d / "t1.json"), "truncated_at_byte"])
