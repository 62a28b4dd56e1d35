"""Issue 23, "Files destroyed or overwritten" and "Errors that say what went wrong".

Every write path (``-o`` of analyze/export/idle/diff/overlay, ``batch -o``) must compare
files by identity, never write through a symlink, write a temporary beside the target
and rename it, keep the previous output when the write fails, honour the umask and
never create a parent directory. All files, links and limits are made at test time.
"""
from __future__ import annotations

import gzip
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceread.cli import main
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import launch_bound

SRC = Path(__file__).resolve().parents[1] / "src"


def make_trace(path: Path) -> Path:
    return write_kineto(launch_bound(steps=2, ops_per_step=20)[0], path)


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def one_error(err: str, phrase: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("traceread: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    assert phrase in lines[0], lines[0]


def run_sub(*args, cwd: Path, fsize: int | None = None, prefix=()):
    """The CLI in a child process; ``fsize``: RLIMIT_FSIZE in bytes (a write past it fails
    with EFBIG -- Python ignores SIGXFSZ), ``prefix``: a command to run it under."""
    env = dict(os.environ, PYTHONPATH=str(SRC), TRACEREAD_NO_CACHE="1")
    env.pop("TRACEREAD_DEBUG", None)

    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([*prefix, sys.executable, "-m", "traceread", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit)


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


# --------------------------------------------------------------------------- identity

def test_overlay_onto_a_hardlink_of_the_input_is_refused(tmp_path):
    t = make_trace(tmp_path / "t.json.gz")
    before = t.read_bytes()
    os.link(t, tmp_path / "h.json.gz")
    code, _, err = cli("overlay", t, "-o", tmp_path / "h.json.gz")
    assert code == 1
    one_error(err, "is an input")
    assert t.read_bytes() == before


def test_overlay_onto_the_input_through_a_symlink_or_symlinked_dir_is_refused(tmp_path):
    t = make_trace(tmp_path / "t.json.gz")
    before = t.read_bytes()
    (tmp_path / "s.json.gz").symlink_to(t)
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    for out in (tmp_path / "s.json.gz", tmp_path / "link" / "t.json.gz"):
        code, _, err = cli("overlay", t, "-o", out)
        assert code == 1
        one_error(err, "is an input")
        assert t.read_bytes() == before


def test_diff_output_onto_the_before_trace_is_refused(tmp_path):
    a = make_trace(tmp_path / "a.json.gz")
    b = make_trace(tmp_path / "b.json")
    before = a.read_bytes()
    code, _, err = cli("diff", a, b, "-o", a)
    assert code == 1
    one_error(err, "is an input")
    assert a.read_bytes() == before


def test_diff_output_onto_a_trace_inside_an_input_directory_is_refused(tmp_path):
    da, db = tmp_path / "A", tmp_path / "B"
    da.mkdir(), db.mkdir()
    make_trace(da / "r0.json.gz")
    r0 = make_trace(db / "r0.json.gz")
    before = r0.read_bytes()
    code, _, err = cli("diff", db, da, "-o", db / "r0.json.gz")
    assert code == 1
    one_error(err, "inside the input directory")
    assert r0.read_bytes() == before
    code, _, err = cli("diff", db, da, "-o", db / "report.txt")  # a new file there is fine
    assert code == 0, err


# --------------------------------------------------------------------------- symlinks

def test_overlay_never_writes_through_a_symlink(tmp_path):
    t = make_trace(tmp_path / "t.json.gz")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out.json").symlink_to(victim)
    code, _, err = cli("overlay", t, "-o", tmp_path / "out.json")
    assert code == 1
    one_error(err, "symbolic link")
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("name", ["report.html", "summary.csv", "summary.partial.csv",
                                  "jobs.json", "summary.parquet"])
def test_batch_never_writes_through_a_planted_symlink(tmp_path, name):
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / name).symlink_to(victim)
    code, _, err = cli("batch", d, "-o", out, "-j", "1")
    assert code == 1
    one_error(err, "symbolic link")
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("name", ["report.html", "jobs.parquet"])
def test_batch_into_its_input_dir_never_overwrites_an_input_named_like_an_output(tmp_path, name):
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    src = make_trace(d / name)    # a trace (by content) that happens to carry that name
    before = src.read_bytes()
    code, _, err = cli("batch", d, "-o", d, "-j", "1")
    assert code == 1
    one_error(err, "would be overwritten")
    assert src.read_bytes() == before


# --------------------------------------------------------------------------- failed writes

def test_failed_overlay_write_keeps_the_previous_output(tmp_path):
    t = make_trace(tmp_path / "t.json.gz")
    out = tmp_path / "o.json"          # uncompressed: far larger than the limit below
    out.write_bytes(b"previous overlay")
    r = run_sub("overlay", t, "-o", out, cwd=tmp_path, fsize=4096)
    assert r.returncode == 1, r.stderr
    one_error(r.stderr, "file too large")
    assert out.read_bytes() == b"previous overlay"
    assert leftovers(tmp_path) == []


def test_failed_batch_write_keeps_the_previous_run(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(2):
        make_trace(d / f"t{i}.json.gz")
    out = tmp_path / "out"
    r = run_sub("batch", d, "-o", out, "-j", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any(p.parts[0] == "tables" for p in files)
    r = run_sub("batch", d, "-o", out, "-j", "1", cwd=tmp_path, fsize=4096)
    assert r.returncode == 1
    one_error(r.stderr, "file too large")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    after.pop(Path("summary.partial.csv"), None)   # the killed-batch record, by design
    assert after == files                           # summary.parquet and tables/ untouched
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def _device_node(path: Path, minor: int) -> Path:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here: {e}")
    return path


def test_failed_export_onto_a_device_keeps_the_device(tmp_path):
    t = make_trace(tmp_path / "t.json.gz")
    full = _device_node(tmp_path / "full.parquet", 7)   # like /dev/full: every write ENOSPC
    code, _, err = cli("export", t, "-o", full)
    assert code == 1
    one_error(err, "disk full")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    null = _device_node(tmp_path / "null.csv", 3)       # like /dev/null: written in place
    code, _, err = cli("export", t, "-o", null)
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)


# --------------------------------------------------------------------------- modes

@pytest.mark.parametrize("cmd", [["analyze"], ["idle"], ["export"], ["overlay"]])
def test_outputs_honour_the_umask_and_keep_a_replaced_files_mode(tmp_path, cmd):
    t = make_trace(tmp_path / "t.json.gz")
    out = tmp_path / ("o.parquet" if cmd == ["export"] else "o.json")
    old = os.umask(0o022)
    try:
        code, _, err = cli(*cmd, t, "-o", out)
        assert code == 0, err
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        os.chmod(out, 0o664)
        code, _, err = cli(*cmd, t, "-o", out)
        assert code == 0, err
        assert stat.S_IMODE(out.stat().st_mode) == 0o664
    finally:
        os.umask(old)


# --------------------------------------------------------------------------- directories

def test_multi_trace_overlay_never_creates_parent_directories(tmp_path):
    a, b = make_trace(tmp_path / "a.json.gz"), make_trace(tmp_path / "b.json.gz")
    code, _, err = cli("overlay", a, b, "-o", tmp_path / "missing" / "dir")
    assert code == 1
    one_error(err, "does not exist")
    assert not (tmp_path / "missing").exists()
    code, _, err = cli("overlay", a, b, "-o", tmp_path / "new")   # the named one: made
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [
        "a.overlay.json.gz", "b.overlay.json.gz"]
    with gzip.open(tmp_path / "new" / "a.overlay.json.gz") as f:
        assert f.read(1) == b"{"


def test_batch_never_creates_parent_directories(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    code, _, err = cli("batch", d, "-o", tmp_path / "missing" / "out", "-j", "1")
    assert code == 1
    one_error(err, "does not exist")
    assert not (tmp_path / "missing").exists()


# --------------------------------------------------------------------------- errors

def test_overlay_of_several_traces_into_a_file_says_so(tmp_path):
    a, b = make_trace(tmp_path / "a.json.gz"), make_trace(tmp_path / "b.json.gz")
    (tmp_path / "FILE").write_text("x")
    code, _, err = cli("overlay", a, b, "-o", tmp_path / "FILE")
    assert code == 1
    one_error(err, "exists and is not a directory")
    assert (tmp_path / "FILE").read_text() == "x"


def test_batch_into_a_path_below_a_file_says_so(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    (tmp_path / "FILE").write_text("x")
    code, _, err = cli("batch", d, "-o", tmp_path / "FILE" / "sub", "-j", "1")
    assert code == 1
    one_error(err, "not a directory")


def _without_dac() -> list[str]:
    """A prefix that runs a command without root's right to ignore file modes; [] when
    not root. Skips when root and setpriv cannot drop it."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"] if setpriv else []
    probe = Path("/proc/self/status")
    if not setpriv or subprocess.run([*prefix, "test", "-r", str(probe)]).returncode != 0:
        pytest.skip("running as root without setpriv: file modes cannot be tested")
    return prefix


def test_batch_into_an_unwritable_directory_says_so(tmp_path):
    prefix = _without_dac()
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    out = tmp_path / "ro"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        r = run_sub("batch", d, "-o", out, "-j", "1", cwd=tmp_path, prefix=prefix)
    finally:
        os.chmod(out, 0o755)
    assert r.returncode == 1
    one_error(r.stderr, "permission denied")
    assert list(out.iterdir()) == []


def test_unreadable_trace_is_one_permission_denied_line(tmp_path):
    prefix = _without_dac()
    t = make_trace(tmp_path / "t.json.gz")
    os.chmod(t, 0)
    try:
        for cmd in ("analyze", "info", "kernels"):
            r = run_sub(cmd, t, cwd=tmp_path, prefix=prefix)
            assert r.returncode == 1, (cmd, r.stderr)
            assert r.stderr == f"traceread: error: {t}: permission denied\n", r.stderr
    finally:
        os.chmod(t, 0o644)


def test_unreadable_trace_is_left_to_the_reader_not_to_click(tmp_path, monkeypatch):
    """The same path with root's rights: access() says unreadable, open() refuses."""
    t = make_trace(tmp_path / "t.json.gz")
    real_access, real_open = os.access, os.open

    def access(p, mode, *a, **k):
        return False if os.path.abspath(p) == str(t) else real_access(p, mode, *a, **k)

    def os_open(p, *a, **k):
        if os.path.abspath(p) == str(t):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, *a, **k)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setenv("TRACEREAD_NO_CACHE", "1")
    for cmd in ("analyze", "info", "kernels", "steps"):
        code, _, err = cli(cmd, t)
        assert code == 1, (cmd, err)
        assert err == f"traceread: error: {t}: permission denied\n", err


def test_batch_scheduler_without_dask_says_so(tmp_path, monkeypatch):
    d = tmp_path / "in"
    d.mkdir()
    make_trace(d / "t.json.gz")
    monkeypatch.setitem(sys.modules, "dask.distributed", None)   # import fails: not installed
    code, _, err = cli("batch", d, "-o", tmp_path / "out", "--scheduler", "tcp://127.0.0.1:1")
    assert code == 1
    one_error(err, "--scheduler needs dask.distributed")
    assert not (tmp_path / "out").exists()


def test_analyze_of_a_dataframe_is_a_clear_type_error(tmp_path):
    import traceread

    trace = traceread.load(make_trace(tmp_path / "t.json.gz"))
    with pytest.raises(TypeError, match="takes a Trace or a path.*not a DataFrame"):
        traceread.analyze(trace.events)
    assert traceread.analyze(trace).verdict["bound"]      # a Trace and a path still work
    assert traceread.analyze(str(tmp_path / "t.json.gz")).verdict["bound"]


def test_pyarrow_floor_excludes_the_cve_release():
    """CVE-2023-47248 (untrusted Parquet) is fixed in pyarrow 14.0.1."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"pyarrow>=14.0.1"' in text and '"pyarrow>=14"' not in text
