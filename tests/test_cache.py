"""Event-table cache: same Trace back, keyed by file identity, never beside the input."""
from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from traceread.readers import cache
from traceread.cli import main
from traceread.readers import read
from traceread.readers import kineto as K

SRC = FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"


@pytest.fixture
def trace_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEREAD_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "in"
    d.mkdir()
    p = d / SRC.name
    shutil.copy(SRC, p)
    return p


def test_round_trip_is_identical(trace_copy):
    fresh = read(trace_copy)
    entry = cache.store(trace_copy, fresh)
    assert entry is not None and entry.parent == cache.cache_dir()
    back = cache.load(trace_copy)
    assert back.table.equals(fresh.table)
    assert back.meta == fresh.meta
    assert back.events.equals(fresh.events)


def test_second_read_uses_the_cache(trace_copy, monkeypatch):
    first = read(trace_copy, cache=True)

    def boom(*a, **k):
        raise AssertionError("parsed again despite a cache entry")

    monkeypatch.setattr(K, "read_kineto", boom)
    again = read(trace_copy, cache=True)
    assert again.table.equals(first.table) and again.meta == first.meta
    with pytest.raises(AssertionError, match="parsed again"):
        read(trace_copy, cache=False)


def test_a_hit_reports_this_runs_spelling_of_the_path(trace_copy, monkeypatch):
    read(str(trace_copy), cache=True)  # stored under the absolute spelling
    monkeypatch.chdir(trace_copy.parent)

    def boom(*a, **k):
        raise AssertionError("parsed again despite a cache entry")

    monkeypatch.setattr(K, "read_kineto", boom)
    again = read(trace_copy.name, cache=True)  # a hit, asked by a relative name
    assert again.meta.path == trace_copy.name


def test_changed_file_misses(trace_copy):
    cache.store(trace_copy, read(trace_copy))
    assert cache.load(trace_copy) is not None
    st = trace_copy.stat()
    os.utime(trace_copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cache.load(trace_copy) is None
    k1 = cache.cache_key(trace_copy)
    with open(trace_copy, "ab") as f:
        f.write(b"\0")
    assert cache.cache_key(trace_copy) != k1


def test_never_writes_beside_the_input(trace_copy):
    before = set(trace_copy.parent.iterdir())
    read(trace_copy, cache=True)
    assert set(trace_copy.parent.iterdir()) == before
    assert len(list(cache.cache_dir().glob("*.parquet"))) == 1


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEREAD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "traceread"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == cache.Path.home() / ".cache" / "traceread"


def test_damaged_entry_is_a_miss_and_is_rewritten(trace_copy):
    fresh = read(trace_copy, cache=True)
    entry = cache.entry_path(trace_copy)
    entry.write_bytes(b"not parquet")
    assert cache.load(trace_copy) is None
    again = read(trace_copy, cache=True)
    assert again.table.equals(fresh.table)
    assert cache.load(trace_copy) is not None


def test_unwritable_cache_dir_is_not_an_error(trace_copy, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TRACEREAD_CACHE_DIR", str(blocker / "sub"))
    assert len(read(trace_copy, cache=True)) > 0


def test_cli_no_cache(trace_copy, monkeypatch):
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    r = CliRunner().invoke(main, ["info", "--no-cache", str(trace_copy)])
    assert r.exit_code == 0, r.output
    assert not cache.cache_dir().exists() or not list(cache.cache_dir().glob("*.parquet"))
    r = CliRunner().invoke(main, ["info", str(trace_copy)])
    assert r.exit_code == 0, r.output
    assert len(list(cache.cache_dir().glob("*.parquet"))) == 1
    r2 = CliRunner().invoke(main, ["info", str(trace_copy)])
    assert r2.output == r.output


def test_small_files_are_not_cached_by_the_cli(trace_copy):
    assert not cache.worth_caching(trace_copy)
    r = CliRunner().invoke(main, ["info", str(trace_copy)])
    assert r.exit_code == 0, r.output
    assert not cache.cache_dir().exists()
