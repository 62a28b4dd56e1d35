"""CLI shell: info, export (Parquet round trip), and one clean error line on bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from traceread import load, read_parquet
from traceread.cli import main

FIX = Path(__file__).resolve().parent / "fixtures" / "kineto"
TRACE = FIX / "hta_sampled_rank-1.json.gz"


def test_info_text_and_json():
    r = CliRunner().invoke(main, ["info", str(TRACE)])
    assert r.exit_code == 0, r.output
    assert "kineto" in r.stdout and "1 of 128" in r.stdout and "kernel" in r.stdout
    r = CliRunner().invoke(main, ["info", "--format", "json", str(TRACE)])
    info = json.loads(r.stdout)
    assert info["rank"] == 1 and info["world_size"] == 128 and info["events"] == 4676
    assert info["by_kind"]["kernel"] == 1104


def test_export_parquet_round_trips_with_same_dtypes(tmp_path):
    out = tmp_path / "events.parquet"
    r = CliRunner().invoke(main, ["export", str(TRACE), "-o", str(out)])
    assert r.exit_code == 0, r.output
    want = load(TRACE).events
    got = pd.read_parquet(out)
    assert list(got.columns) == list(want.columns)
    assert dict(got.dtypes.astype(str)) == dict(want.dtypes.astype(str))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    back = read_parquet(out)
    assert back.meta.rank == 1 and back.meta.format == "kineto"


@pytest.mark.parametrize("content,reason", [
    (b"", "empty file"),
    (b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated JSON at byte 36"),
    (b'{"nodes": []}', "execution trace"),
])
def test_bad_input_is_one_error_line(tmp_path, content, reason):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    r = CliRunner().invoke(main, ["info", str(bad)])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceread: error: ") and reason in lines[0]
    assert "Traceback" not in r.output


def test_bad_input_subprocess_has_no_traceback(tmp_path):
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(TRACE.read_bytes()[:5000])
    exe = Path(sys.executable).with_name("traceread")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c",
                                            "from traceread.cli import main; main()"]
    p = subprocess.run(cmd + ["info", "--strict", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("traceread: error: ")
    assert "truncated gzip" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("command", ["analyze", "info", "steps", "idle", "nccl", "compile"])
def test_one_bad_file_does_not_lose_the_others(tmp_path, command):
    bad = tmp_path / "notes.json"
    bad.write_text("hello")
    r = CliRunner().invoke(main, [command, str(bad), str(TRACE)])
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [f"traceread: error: {bad}: unknown format (not JSON, gzip or SQLite)"]
    assert str(TRACE) in r.stdout  # the good trace's report is still printed


@pytest.mark.parametrize("name", ["run.nsys-rep", "old.qdrep", "raw.QDSTRM"])
def test_nsys_report_gets_the_export_hint(tmp_path, name):
    rep = tmp_path / name
    rep.write_bytes(b"\x00\x01QDSTRM-like binary payload")  # not SQLite, JSON or gzip
    r = CliRunner().invoke(main, ["analyze", str(rep)])
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"traceread: error: {rep}: an Nsight Systems report, not its SQLite export: "
        f"run `nsys export --type sqlite {rep}` and pass the .sqlite"]


def test_nsys_report_hint_only_on_refusal(tmp_path):
    # Detection is by content: a JSON trace that happens to be named .nsys-rep still loads.
    named = tmp_path / "mislabelled.nsys-rep"
    named.write_bytes(TRACE.read_bytes())
    assert CliRunner().invoke(main, ["info", str(named)]).exit_code == 0


def test_export_csv_has_every_event_and_column(tmp_path):
    out = tmp_path / "events.csv"
    r = CliRunner().invoke(main, ["export", str(TRACE), "-o", str(out)])
    assert r.exit_code == 0, r.output
    want = load(TRACE).events
    got = pd.read_csv(out)
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    assert got["ts"].tolist() == want["ts"].tolist()
    assert got["name"].fillna("").tolist() == want["name"].fillna("").tolist()


def test_export_refuses_a_suffix_it_cannot_write(tmp_path):
    out = tmp_path / "events.xlsx"
    r = CliRunner().invoke(main, ["export", str(TRACE), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert r.stderr.splitlines() == [
        f"traceread: error: {out}: cannot write .xlsx files: name the output .parquet or .csv"]
