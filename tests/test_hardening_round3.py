"""Hardening round 3 (issue 32): odd file names, valid-but-unusual containers, hostile exports,
library arguments, not-a-trace inputs, batches that lose nothing, two slow shapes. Every input
is generated here, at test time; each case failed on the tree before issue 32."""
from __future__ import annotations

import copy
import csv
import gzip
import json
import math
import os
import resource
import sqlite3
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

import hardening_cases as H
from test_hardening import SRC, run_cli, run_inprocess

BAD = b"bad\xff\xfe.json"                 # not UTF-8: os.fsdecode gives lone surrogates
ODD = [BAD, b"new\nline.json", "caf\u00e9_\u0444.json".encode()]
SHOWN = {BAD: "bad\\xff\\xfe.json", ODD[1]: "new\nline.json", ODD[2]: "caf\u00e9_\u0444.json"}


def _odd_dir(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    for name in ODD + [b"ok.json"]:
        with open(os.path.join(os.fsencode(d), name), "wb") as f:
            f.write(H.doc_bytes(H.events(30)))
    return d


def _p(d: Path, name: bytes) -> str:
    return os.fsdecode(os.path.join(os.fsencode(d), name))


def _clean(r) -> None:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-2000:]


# ------------------------------------------------------------------ names (bytes-safe paths)

def test_batch_keeps_every_odd_name_in_every_output(tmp_path):
    import pandas as pd

    d = _odd_dir(tmp_path)
    out = tmp_path / "out"
    r = run_cli("batch", d, "-o", out, "-j", "1", cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    s = pd.read_parquet(out / "summary.parquet")
    assert len(s) == 4 and s["error"].isna().all()
    shown = {os.path.basename(f) for f in s["file"]}
    assert shown == set(SHOWN.values()) | {"ok.json"}
    # the exact bytes stay for whoever must open the file again
    raw = {os.path.basename(b) for b in s["file_bytes"]}
    assert raw == set(ODD) | {b"ok.json"}
    with open(out / "summary.csv", encoding="utf-8", newline="") as f:   # strict UTF-8
        rows = list(csv.DictReader(f))
    assert {os.path.basename(r["file"]) for r in rows} == shown
    html = (out / "report.html").read_bytes().decode("utf-8")
    assert "bad\\xff\\xfe.json" in html and "caf\u00e9_\u0444.json" in html
    json.loads((out / "jobs.json").read_text(encoding="utf-8"))
    assert not (out / "summary.partial.csv").exists()
    # the terminal summary escapes the newline: no line of it starts inside a name
    assert "line.json" not in [ln.strip() for ln in r.stdout.splitlines()]


def test_partial_summary_row_with_undecodable_name(tmp_path):
    from traceread.jobs import output

    p = output.PartialSummary(tmp_path / "out")
    row = {c: None for c in output.SUMMARY_COLUMNS}
    row.update(file=os.fsdecode(b"/x/" + BAD), error="x")
    p.add({"row": row})
    p.close()
    text = (tmp_path / "out" / output.PARTIAL_SUMMARY).read_bytes().decode("utf-8")
    assert "bad\\xff\\xfe.json" in text


@pytest.mark.parametrize("cmd", ["analyze", "diff"])
def test_html_output_of_an_undecodable_name(tmp_path, cmd):
    d = _odd_dir(tmp_path)
    out = tmp_path / "r.html"
    args = [_p(d, BAD)] + ([_p(d, b"ok.json")] if cmd == "diff" else [])
    r = run_cli(cmd, *args, "--format", "html", "-o", out, cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    assert "bad\\xff\\xfe.json" in out.read_bytes().decode("utf-8")


def test_overlay_of_an_undecodable_name(tmp_path):
    d = _odd_dir(tmp_path)
    out = tmp_path / "ov"
    r = run_cli("overlay", _p(d, BAD), _p(d, b"ok.json"), "-o", out, cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    assert len(list(out.iterdir())) == 2


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_multi_trace_analyze_of_odd_names(tmp_path, fmt):
    d = _odd_dir(tmp_path)
    r = run_cli("analyze", *[_p(d, n) for n in ODD], _p(d, b"ok.json"), "--format", fmt,
                cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    if fmt == "json":
        doc = json.loads(r.stdout)
        text = json.dumps(doc, ensure_ascii=False)
        text.encode("utf-8")   # no lone surrogate anywhere
        assert "bad\\\\xff\\\\xfe.json" in text and "new\\nline.json" in text
    else:
        assert "bad\\xff\\xfe.json" in r.stdout and "new\\nline.json" in r.stdout


def test_trace_error_names_an_undecodable_file():
    from traceread import TraceError

    e = TraceError(os.fsdecode(b"/t/" + BAD), "bad \udcff thing")
    assert str(e) == "/t/bad\\xff\\xfe.json: bad \\xff thing"
    str(e).encode("utf-8")


# ------------------------------------------------------------------ valid containers

def test_multi_member_gzip_split_anywhere(tmp_path, monkeypatch):
    """``cat a.gz b.gz``: the next member's magic may straddle the inflater's read block."""
    from traceread.readers import _json_edges, kineto, read

    good = H.doc_bytes(H.events(30))
    monkeypatch.setattr(kineto, "_GZ_CHUNK", 7)
    orig = _json_edges.Inflater.__init__
    monkeypatch.setattr(_json_edges.Inflater, "__init__",
                        lambda self, f, block=7: orig(self, f, block))
    p = tmp_path / "m.json.gz"
    for cut in range(1, len(good), 97):
        p.write_bytes(gzip.compress(good[:cut]) + gzip.compress(good[cut:]) + gzip.compress(b""))
        for stream in (False, True):
            t = read(p, stream=stream)
            assert len(t) == 90 and "truncated" not in t.meta.extra, (cut, stream)


def _variants() -> dict:
    good = H.doc_bytes(H.events(30)).decode()
    spaced = good.replace(": ", " :\t").replace(", ", " ,\r\n ")
    return {"bom": b"\xef\xbb\xbf" + good.encode(), "utf16": good.encode("utf-16"),
            "utf16be": good.encode("utf-16-be"), "utf16le": good.encode("utf-16-le"),
            "utf32": good.encode("utf-32"), "utf32be": good.encode("utf-32-be"),
            "crlf": good.replace("\n", "\r\n").encode(), "spaced": spaced.encode(),
            "padded": b" \r\n\t" + good.encode() + b"\r\n \t\n",
            "minified": json.dumps(json.loads(good), separators=(",", ":")).encode()}


@pytest.mark.parametrize("kind", sorted(_variants()))
@pytest.mark.parametrize("gz", [False, True])
def test_every_valid_json_container(tmp_path, kind, gz):
    from traceread.readers import read

    data = _variants()[kind]
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    for stream in (False, True):
        t = read(p, stream=stream)
        assert len(t) == 90 and "truncated" not in t.meta.extra, (kind, stream)


def test_invalid_utf16_is_one_line(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b"\xff\xfe" + '{"traceEvents": ['.encode("utf-16-le") + b"\x00\xdc")
    r = run_inprocess("analyze", p, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("traceread: error:") == 1, r.stderr


# ------------------------------------------------------------------ nsys: bounded strings, ids

def _nsys(tmp_path: Path, name: str, sql: str = "", params=()) -> Path:
    p = H.nsys_db(tmp_path / name)
    con = sqlite3.connect(p)
    if sql:
        con.execute(sql, params)
    con.commit()
    con.close()
    return p


def test_nsys_long_string_is_clipped_like_kineto(tmp_path):
    import traceread
    from traceread.readers._kineto_decode import MAX_NAME_CHARS

    p = _nsys(tmp_path, "long.sqlite", "UPDATE StringIds SET value = ? WHERE id = 1",
              ("K" * (8 << 20),))
    t = traceread.load(p)
    names = [n for n in t.events["name"].dropna().unique() if n.startswith("K")]
    assert names and max(map(len, names)) <= MAX_NAME_CHARS + 40
    assert "more bytes]" in names[0]


def test_kineto_metadata_strings_are_clipped_like_names(tmp_path):
    import traceread
    from traceread.readers._kineto_decode import MAX_NAME_CHARS

    evs = H.events(20) + [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "P" * (2 << 20)}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "T" * (2 << 20)}}]
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G" * (2 << 20)}],
            "distributedInfo": {"backend": "B" * (2 << 20), "rank": 0, "world_size": 1}}
    p = H.write(tmp_path, "meta.json", H.doc_bytes(evs, head=head))
    for stream in (False, True):
        from traceread.readers import read

        m = read(p, stream=stream).meta
        for s in (m.processes[1], m.threads[1], m.devices[0]["name"], m.distributed["backend"]):
            assert len(s) <= MAX_NAME_CHARS + 40 and s.endswith("more chars]")


@pytest.mark.slow
def test_nsys_256_mb_name_bounded_time_and_memory(tmp_path):
    p = _nsys(tmp_path, "huge.sqlite", "UPDATE StringIds SET value = ? WHERE id = 1",
              ("K" * (256 << 20),))
    t0 = time.monotonic()
    r = run_cli("analyze", p, cwd=tmp_path, timeout=120)
    _clean(r)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 60 and r.peak_mb is not None and r.peak_mb < 1500


@pytest.mark.parametrize("ids", [(2 ** 63 - 1, -2 ** 63), (-1, -5), (0, 0), (99, 98)])
def test_nsys_kernel_name_id_pointing_nowhere(tmp_path, ids):
    p = _nsys(tmp_path, "ids.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = "
              f"{ids[0]}, shortName = {ids[1]}")
    r = run_inprocess("analyze", "--format", "json", p, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "unknown kernel" in json.dumps(out["kernels"])


_M, _m = 2 ** 63 - 1, -2 ** 63
_KINETO_IDS = {
    "corr_max": lambda e: "correlation" in e["args"] and e["args"].update(correlation=_M),
    "corr_min": lambda e: "correlation" in e["args"] and e["args"].update(correlation=_m),
    "corr_2_70": lambda e: "correlation" in e["args"] and e["args"].update(correlation=2 ** 70),
    "external_2_64": lambda e: e["args"].update({"External id": 2 ** 64}),
    "pid_2_64": lambda e: e.update(pid=2 ** 64),
    "pid_min": lambda e: e.update(pid=_m),
    "pid_max": lambda e: e.update(pid=_M),
    "pid_str": lambda e: e.update(pid="proc x"),
    "tid_str": lambda e: e.update(tid="thread \u202e7"),
    "device_max": lambda e: "device" in e["args"] and e["args"].update(device=_M),
    "device_str": lambda e: "device" in e["args"] and e["args"].update(device="cuda:0"),
    "stream_min": lambda e: "stream" in e["args"] and e["args"].update(stream=_m),
    "args_list": lambda e: e.update(args=[1, 2]),
    "name_empty": lambda e: e.update(name=""),
    "name_null": lambda e: e.update(name=None),
    "cat_null": lambda e: e.update(cat=None),
}


@pytest.mark.parametrize("case", sorted(_KINETO_IDS))
def test_kineto_ids_pointing_nowhere(tmp_path, case):
    """Ids out of every range, of the wrong type, or naming nothing: an analysis (or one
    clear line), never an internal error (pid -2**63 overflowed the passes' thread keys)."""
    evs = H.events(30)
    for e in evs:
        _KINETO_IDS[case](e)
    p = H.write(tmp_path, "ids.json", H.doc_bytes(evs))
    for fmt in ("text", "json"):
        r = run_inprocess("analyze", "--format", fmt, p, cwd=tmp_path)
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert "internal error" not in r.stderr and len(err) <= 1, r.stderr
        assert r.returncode == 0 or (r.returncode == 1 and err[0].startswith("traceread: error:"))


def test_kineto_kernel_without_name_is_analysed(tmp_path):
    evs = H.events(30)
    for e in evs:
        if e["cat"] == "kernel":
            e.pop("name")
    r = run_inprocess("analyze", H.write(tmp_path, "noname.json", H.doc_bytes(evs)), cwd=tmp_path)
    assert r.returncode in (0, 1) and "internal error" not in r.stderr, r.stderr
    assert r.returncode == 0 or r.stderr.count("traceread: error:") == 1


def _no_memory(*a, **k):
    raise MemoryError


@pytest.mark.parametrize("cmd", [["analyze"], ["info"], ["analyze", "--format", "json"]])
def test_out_of_memory_is_its_own_line_with_the_size(tmp_path, monkeypatch, cmd):
    from traceread import analysis
    from traceread.readers import kineto

    monkeypatch.setattr(analysis, "_analyze_window", _no_memory)
    monkeypatch.setattr(kineto, "build_table", _no_memory)
    p = H.write(tmp_path, "big.json", H.doc_bytes(H.events(50)))
    r = run_inprocess(*cmd, p, "--no-cache", cwd=tmp_path)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(err) == 1, r.stderr
    assert "out of memory" in err[0] and "MB on disk" in err[0] and "big.json" in err[0], err
    assert "internal error" not in err[0]


def test_out_of_memory_batch_row_says_the_size(tmp_path, monkeypatch):
    from traceread import analysis
    from traceread.jobs import batch

    monkeypatch.setattr(analysis, "_analyze_window", _no_memory)
    p = H.write(tmp_path, "big.json", H.doc_bytes(H.events(50)))
    row = batch.analyze_file(str(p))["row"]
    assert "out of memory" in row["error"] and "MB on disk" in row["error"]


# ------------------------------------------------------------------ linear time

def _cpu(*args, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=str(SRC), TRACEREAD_NO_CACHE="1")
    env.pop("TRACEREAD_DEBUG", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "traceread", *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime), r


def _ratio_to_info(p: Path, tmp_path: Path) -> float:
    info, ri = _cpu("info", p, cwd=tmp_path)
    ana, ra = _cpu("analyze", p, cwd=tmp_path)
    for r in (ri, ra):
        _clean(r)
        assert r.returncode == 0, r.stderr
    return ana / info


def test_one_line_trace_full_of_fake_boundaries_is_linear(tmp_path):
    """~50 MB on one line; every name (distinct, ~30 KB) full of "},{" boundaries. It was
    refused as "not closed properly" by the streaming reader, and each name pattern read
    whole names (13.6 s analyse vs 0.7 s info in the issue)."""
    evs = H.events(500)
    for i, e in enumerate(evs):
        e["name"] = f"n{i}" + '},{"name":"x","ph":"X","ts":1' * 1000
    data = json.dumps({"schemaVersion": 1, "traceEvents": evs}, separators=(",", ":")).encode()
    assert b"\n" not in data and len(data) > 40e6
    p = H.write(tmp_path, "fake.json", data)
    # analyze runs every pass (facts, replay, what-if) over the names info only reads once:
    # ~4x here when linear; the quadratic reader and whole-name patterns gave ~19x
    assert _ratio_to_info(p, tmp_path) < 6


@pytest.mark.slow
def test_far_events_are_linear(tmp_path):
    """200,000 events more than an hour from the rest: dropped with a warning, then linear."""
    evs = H.events(100_000)
    far = [{"ph": "X", "cat": "cpu_op", "name": f"far{i % 100}", "pid": 1, "tid": 2,
            "ts": 7_200_000_000 + 10 * i, "dur": 5} for i in range(200_000)]
    p = H.write(tmp_path, "far.json", H.doc_bytes(evs + far))
    assert _ratio_to_info(p, tmp_path) < 4


# ------------------------------------------------------------------ terminal

def test_every_format_character_is_escaped():
    from traceread.render import safe

    cf = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    bidi = "\u200e\u200f\u061c\ufff9\ufffa\ufffb\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    for c in cf + list(bidi) + ["\u2028", "\u2029", "\udcff", "\ud800"]:
        for fn in (safe.name, safe.text):
            out = fn("a" + c + "b")
            assert c not in out and out.startswith("a\\") and out.endswith("b"), (hex(ord(c)), out)
    assert safe.name("x\udcffy") == "x\\xffy"


def test_a_name_cannot_forge_a_report_line(tmp_path):
    evs = H.events(30)
    forged = "\u202e\u200f\u061c\ufff9VERDICT  NONE \u2066ok\u2069\u2028VERDICT"
    for e in evs:
        if e["cat"] == "kernel":
            e["name"] = forged
    r = run_inprocess("analyze", H.write(tmp_path, "f.json", H.doc_bytes(evs)), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for c in "\u202e\u200f\u061c\ufff9\u2066\u2069\u2028":
        assert c not in r.stdout
    assert sum(ln.startswith("VERDICT") for ln in r.stdout.splitlines()) == 1


# ------------------------------------------------------------------ the library: TraceError

def _hostile_parquets(d: Path) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import traceread
    from traceread.table import PARQUET_META_KEY as _META_KEY

    good = d / "good.parquet"
    traceread.load(H.write(d, "t.json", H.doc_bytes(H.events(20)))).to_parquet(good)
    tab = pq.read_table(good)
    out = [H.write(d, "junk.parquet", b"PAR1junkPAR1"), H.write(d, "empty.parquet", b"")]

    def w(name, table):
        pq.write_table(table, d / name)
        out.append(d / name)

    meta = {"deep": b"[" * 100_000 + b"]" * 100_000, "list": b"[1]", "key": b'{"bogus": 1}',
            "type": b'{"rank": "x"}', "utf8": b"{\xff", "str": b'"x"'}
    for k, v in meta.items():
        w(f"meta_{k}.parquet", tab.replace_schema_metadata({_META_KEY: v}))
    w("nocol.parquet", tab.drop_columns(["ts"]))
    i = tab.schema.get_field_index("ts")
    w("strts.parquet", tab.set_column(i, "ts", pa.array(["x"] * len(tab))))
    w("nullts.parquet", tab.set_column(i, "ts", pa.array([None] * len(tab), pa.int64())))
    return out + [d / "missing.parquet", d]


def test_read_parquet_hostile_files_are_trace_errors(tmp_path):
    import traceread

    for p in _hostile_parquets(tmp_path):
        with pytest.raises(traceread.TraceError) as e:
            traceread.read_parquet(p)
        assert "\n" not in str(e.value), p


def test_read_parquet_clips_a_hostile_name(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import traceread

    good = tmp_path / "good.parquet"
    traceread.load(H.write(tmp_path, "t.json", H.doc_bytes(H.events(20)))).to_parquet(good)
    tab = pq.read_table(good)
    names = tab.column("name").to_pylist()
    names[3] = "L" * (4 << 20)
    i = tab.schema.get_field_index("name")
    tab = tab.set_column(i, "name", pa.array(names).dictionary_encode()).replace_schema_metadata(
        tab.schema.metadata)
    pq.write_table(tab, tmp_path / "long.parquet")
    t = traceread.read_parquet(tmp_path / "long.parquet")
    assert max(map(len, t.events["name"].dropna())) <= (1 << 16) + 40
    assert t.table.schema == traceread.SCHEMA
    traceread.analyze(t)


@pytest.mark.parametrize("kw", [
    dict(window=(math.inf, math.nan)), dict(window=(0, 1e300)), dict(window=(5, 1)),
    dict(window="x"), dict(window=(0, math.nan)), dict(step_pattern="("),
    dict(steps="bogus"), dict(steps="5:2"), dict(min_gap_ns=-5), dict(min_gap_ns="x"),
    dict(min_gap_ns=math.inf), dict(peak_tflops=math.nan), dict(peak_tflops=-1),
    dict(peak_tflops="x")], ids=str)
def test_analyze_bad_arguments_are_trace_errors(tmp_path, kw):
    import traceread

    p = H.write(tmp_path, "t.json", H.doc_bytes(H.events(20)))
    with pytest.raises(traceread.TraceError):
        traceread.analyze(p, **kw)


def test_analyze_takes_a_bytes_path_and_renders_it_anywhere(tmp_path):
    import traceread
    from traceread.render.base import get_renderer

    d = _odd_dir(tmp_path)
    a = traceread.analyze(os.path.join(os.fsencode(d), BAD))
    assert a.meta.path.endswith(os.fsdecode(BAD))
    assert len(traceread.load(os.path.join(os.fsencode(d), BAD))) == 90
    with pytest.raises(TypeError, match="takes a path"):
        traceread.load(123)
    for fmt in ("text", "json", "html"):
        out = tmp_path / f"r.{fmt}"
        get_renderer(fmt).write(a, str(out))
        text = out.read_bytes().decode("utf-8")     # strict: no raw byte of the name
        shown = r"bad\xff\xfe.json"
        assert shown in text or json.dumps(shown)[1:-1] in text, fmt


# ------------------------------------------------------------------ not a trace

@pytest.mark.parametrize("doc", [
    b'[{"a": 1}, {"b": 2}]', b'{"traceEvents": []}', b"[]", b'[{"ph": "X"}]',
    b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]}',
    gzip.compress(b'{"traceEvents": []}', mtime=0), b"42", b"null", b'"trace"', b"true",
    b'{"traceEvents": [1, 2]}', b'{"traceEvents": [{}]}', b"{}", b"[[]]"],
    ids=lambda d: d[:24].decode("latin-1"))
def test_not_a_trace_is_one_line_exit_1(tmp_path, doc):
    p = H.write(tmp_path, "x.json", doc)
    for cmd in (["analyze"], ["info"], ["analyze", "--format", "json"]):
        r = run_inprocess(*cmd, p, cwd=tmp_path)
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 1 and len(err) == 1 and "not a trace" in err[0], (cmd, r.stderr)
        assert r.stdout == ""


def test_library_refuses_an_empty_trace(tmp_path):
    import traceread

    with pytest.raises(traceread.TraceError, match="no trace events"):
        traceread.analyze(H.write(tmp_path, "e.json", b'{"traceEvents": []}'))


def test_second_batch_into_its_own_subfolder(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for i in range(2):
        (d / f"t{i}.json").write_bytes(H.doc_bytes(H.events(20 + i)))
    for _ in range(2):
        r = run_inprocess("batch", d, "-o", d / "out", "-j", "1", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("2 files: 2 analysed, 0 failed"), r.stdout
        assert "failed: " not in r.stdout


def test_batch_over_a_folder_holding_an_earlier_output(tmp_path):
    import shutil

    d = tmp_path / "run"
    d.mkdir()
    (d / "t0.json").write_bytes(H.doc_bytes(H.events(20)))
    r = run_inprocess("batch", d, "-o", tmp_path / "first", "-j", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shutil.copytree(tmp_path / "first", d / "old")
    r = run_inprocess("batch", d, "-o", tmp_path / "second", "-j", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1 files: 1 analysed, 0 failed, "), r.stdout
    # issue 40: the earlier output is named, as one folder (its files' bytes as recorded)
    assert "skipped: " + str(d / "old") + os.sep + ": the output of an earlier" in r.stdout


# ------------------------------------------------------------------ processes apart

def _apart_doc(shared_pid: bool) -> bytes:
    a = H.events(50)
    b = copy.deepcopy(a)
    for e in b:
        e["ts"] += 1_000_000_000         # 1000 s later (µs)
        if e["cat"] != "kernel" and not shared_pid:
            e["pid"] = 2
        if e["cat"] == "kernel":
            e["args"]["device"] = 1
    if shared_pid:   # two containers: every rank is pid 1 in its own
        a.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                  "tid": 1, "ts": 1000, "s": "t", "args": {"Bytes": 8}})
    return H.doc_bytes(a + b)


@pytest.mark.parametrize("shared_pid", [False, True])
def test_two_processes_1000_s_apart_warn_and_analyse_one_side(tmp_path, shared_pid):
    p = H.write(tmp_path, "apart.json", _apart_doc(shared_pid))
    r = run_inprocess("analyze", "--format", "json", p, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("traceread: warning:")]
    assert len(warn) == 1 and "1,000 s apart" in warn[0] and "analysed: the part" in warn[0]
    out = json.loads(r.stdout)
    assert out["window"]["dur_ns"] < 1e9          # one side, not a 1000 s window
    assert max(d["idle_pct"] for d in out["devices"]) < 99
