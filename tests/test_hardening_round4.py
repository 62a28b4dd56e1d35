"""Hardening round 4 (issue 40): the new surfaces under hostile input -- two-member gzip at
every size, names escaped per output format, batch discovery that loses nothing, Flight
Recorder dumps read within bounds, flame / HTML linear in nesting depth, the nsys clip.
Every input is generated here, at test time; each case failed on the tree before issue 40."""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_hardening import SRC, run_cli


def _clean(r) -> None:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-2000:]


# ------------------------------------------------------------------ gzip members

def _trace_doc(n: int) -> bytes:
    ev = [{"ph": "X", "cat": "kernel", "name": f"k{i % 50}", "pid": 0, "tid": 7, "ts": i * 10.0,
           "dur": 5.0, "args": {"correlation": i, "stream": 7, "device": 0}} for i in range(n)]
    return json.dumps({"traceEvents": ev}).encode()


def _two_members(doc: bytes, level: int) -> bytes:
    h = len(doc) // 2
    return gzip.compress(doc[:h], level, mtime=0) + gzip.compress(doc[h:], level, mtime=0)


@pytest.mark.parametrize("level", [1, 6, 9])
@pytest.mark.parametrize("block,n", [(4096, 12345), (65536, 65536), (1 << 20, 1 << 16)])
def test_inflater_reads_two_members_at_every_block_and_read_size(level, block, n):
    # zlib leaves the bytes after a member in unused_data AND (when that input was an
    # earlier call's unconsumed_tail) in unconsumed_tail: read both, and the next member is
    # fed its own bytes twice ("invalid block type", "incorrect data check")
    from traceread.readers._json_edges import Inflater

    doc = _trace_doc(20_000)
    inf = Inflater(io.BytesIO(_two_members(doc, level)), block)
    out = []
    while (b := inf.read(n)):
        out.append(b)
    assert b"".join(out) == doc


def test_small_reader_reads_two_members_like_gzip(tmp_path):
    from traceread.readers.kineto import _gunzip

    doc = _trace_doc(20_000)
    raw = _two_members(doc, 1) + b"\0" * 100      # a zero-padded tail is the end
    assert _gunzip(tmp_path / "t.json.gz", raw, lambda *a: None) == (doc, False)


@pytest.mark.slow
def test_two_member_level1_trace_reads_on_both_paths(tmp_path):
    # 38 MB of JSON split at its midpoint into two `gzip -1` members (1.8 MB): the streaming
    # path failed with "corrupt gzip: ... invalid block type" (gzip.decompress reads it)
    import traceread.readers as R

    doc = _trace_doc(250_000)
    p = tmp_path / "two.json.gz"
    p.write_bytes(_two_members(doc, 1))
    for stream in (True, False):
        t = R.read(p, stream=stream)
        assert (t.events["kind"] == "kernel").sum() == 250_000, stream


# ------------------------------------------------------------------ names in every output

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# a newline to forge a line, OSC to retitle the terminal, bidi overrides and isolates, the
# XML non-character U+FFFE, a C0 control, CDATA's end and markup
EVIL = "\u202e\nFORGED\x1b]0;t\x07\u2066]]><x>&\ufffe\x01;"


def _bad_chars(s: str) -> list[str]:
    import re
    import unicodedata

    ctl = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff\u2028\u2029]")
    return [c for c in s if ctl.match(c) or unicodedata.category(c) == "Cf"]


@pytest.fixture(scope="module")
def evil_trace(tmp_path_factory) -> Path:
    """A real trace (ROCm, operator shapes: the GPU USE section prints its device) with the
    hostile suffix on every event, process / thread and device name."""
    doc = json.loads(gzip.decompress(
        (FIXTURES / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and isinstance(e.get("args", {}).get("name"), str):
            e["args"]["name"] += EVIL
        elif isinstance(e.get("name"), str):
            e["name"] += EVIL
    for d in doc["deviceProperties"]:
        d["name"] += EVIL
    p = tmp_path_factory.mktemp("evil") / "evil.json"
    p.write_text(json.dumps(doc))
    return p


TEXT_COMMANDS = [["analyze"], ["steps"], ["info"], ["kernels"], ["nvtx"], ["gaps"], ["idle"],
                 ["api"], ["memcpy"], ["compile"], ["nccl"], ["util"], ["flame"]]


@pytest.mark.parametrize("cmd", TEXT_COMMANDS, ids=lambda c: c[0])
def test_no_name_forges_a_line_or_a_control_in_text_output(evil_trace, cmd):
    # the GPU USE section printed "MFU ... on <device name>" raw: a newline in it started a
    # line of its own; `flame` wrote ESC and bidi overrides into the folded stacks
    r = run_cli(*cmd, evil_trace, cwd=evil_trace.parent)
    _clean(r)
    assert r.returncode == 0, r.stderr
    assert not any(line.startswith("FORGED") for line in r.stdout.splitlines()), r.stdout
    assert not _bad_chars(r.stdout)


def test_gpu_use_names_its_device_on_one_line(evil_trace):
    r = run_cli("analyze", evil_trace, cwd=evil_trace.parent)
    line = next(x for x in r.stdout.splitlines() if "MFU" in x and " on " in x)
    assert "Graphics\\u202e\\nFORGED\\x1b]0;t\\x07" in line


def test_folded_stacks_one_line_per_stack_and_no_extra_frame(evil_trace, tmp_path):
    out = tmp_path / "x.folded"
    r = run_cli("flame", evil_trace, "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines and all(x.rsplit(" ", 1)[1].isdigit() for x in lines)
    assert not _bad_chars(out.read_text())
    # the planted ';' would split a frame in two: it is a ','
    assert any("\\x01," in x for x in lines)


def test_flame_svg_is_well_formed_xml(evil_trace, tmp_path):
    import xml.etree.ElementTree as ET

    out = tmp_path / "x.svg"
    r = run_cli("flame", evil_trace, "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()
    texts = " ".join(t for t in root.itertext())
    assert "FORGED" in texts and not _bad_chars(texts)


def test_html_report_has_no_raw_control_and_names_in_bdi(evil_trace, tmp_path):
    from html.parser import HTMLParser

    class Check(HTMLParser):
        def __init__(self):
            super().__init__()
            self.bad, self.bdi_names = [], 0

        def handle_starttag(self, tag, attrs):
            self.bad += [v for _, v in attrs if v and _bad_chars(v)]
            self.bdi_names += tag == "bdi"

        def handle_data(self, data):
            if _bad_chars(data):
                self.bad.append(data)

    out = tmp_path / "r.html"
    r = run_cli("analyze", evil_trace, "--format", "html", "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    c = Check()
    c.feed(out.read_text())
    assert not c.bad, c.bad[:5]
    assert c.bdi_names > 0


def test_json_keeps_every_name_exact(evil_trace):
    r = run_cli("analyze", evil_trace, "--format", "json", cwd=evil_trace.parent)
    assert r.returncode == 0, r.stderr
    found = []

    def walk(v):
        if isinstance(v, str):
            found.append(v.endswith(EVIL))
        elif isinstance(v, dict):
            [walk(x) for x in v.values()]
        elif isinstance(v, list):
            [walk(x) for x in v]
    walk(json.loads(r.stdout))
    assert any(found)


# ------------------------------------------------------------------ flame: linear in depth

def _nested(n: int):
    import pandas as pd

    ts = list(range(0, n * 1000, 1000))                      # each range 1 us inside its parent
    dur = [4 * n * 1000 - 2 * t for t in ts]
    ev = pd.DataFrame({"ts": ts, "dur": dur, "kind": "cpu_op", "name": [f"op{i}" for i in range(n)],
                       "pid": 1, "tid": 1, "correlation": -1})
    gaps = pd.DataFrame({"start": [0], "end": [4 * n * 1000], "pid": [1]})
    return ev, gaps


def test_flame_stacks_bounded_in_depth_and_time_kept():
    # 4,000 nested ranges made 4,000 stacks each as long as its depth (a 52 MB folded file
    # at 4,000, 216 MB at 8,000; quadratic time and memory in the nesting)
    from traceread.passes.flame import DEEPER, MAX_STACK, idle_stacks
    from traceread.render.flame import flame_svg, folded

    ev, gaps = _nested(4000)
    st = idle_stacks(ev, gaps)
    assert max(len(k) for k in st) == MAX_STACK + 1
    assert sum(st.values()) == 4000 * 4000          # every ns of the gap still counted
    deep = [k for k in st if k[-1] == DEEPER]
    assert len(deep) == 1 and len(folded(st)) < 100_000
    assert len(flame_svg(st)) < 200_000


@pytest.mark.slow
def test_flame_linear_in_nesting_depth():
    from traceread.passes.flame import idle_stacks

    def cost(n):
        ev, gaps = _nested(n)
        t0 = time.process_time()
        idle_stacks(ev, gaps)
        return time.process_time() - t0

    small, big = cost(2000), cost(16000)
    assert big < 8 * small * 3 + 0.5, (small, big)


# ------------------------------------------------------------------ batch: nothing lost

def _planted(tmp_path: Path) -> Path:
    import hardening_cases as H

    d = tmp_path / "received"
    (d / "tables").mkdir(parents=True)
    trace = H.doc_bytes(H.events(30))
    for name in ("a.json", "jobs.json", "report.html", "tables/t.json"):
        (d / name).write_bytes(trace)
    (d / "summary.csv").write_text("anything\n")
    (d / "tables" / ".traceread-batch").write_text("planted\n")
    return d


def test_batch_never_drops_a_trace_named_like_its_outputs(tmp_path):
    # a summary.csv of any content made jobs.json and report.html (traces) vanish, and a
    # planted .traceread-batch everything under tables/: not analysed, counted or listed
    import pandas as pd

    d = _planted(tmp_path)
    out = tmp_path / "out"
    r = run_cli("batch", d, "-o", out, "-j", "1", cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    s = pd.read_parquet(out / "summary.parquet")
    got = {os.path.relpath(f, d) for f in s["file"]}
    assert got == {"a.json", "jobs.json", "report.html", os.path.join("tables", "t.json")}
    assert s["error"].isna().all()
    # the two files that are not traces are named, with why
    assert "skipped: " + str(d / "summary.csv") in r.stdout
    assert "skipped: " + str(d / "tables" / ".traceread-batch") in r.stdout


@pytest.mark.slow
def test_batch_rerun_skips_only_the_bytes_it_wrote(tmp_path):
    import pandas as pd

    from traceread.jobs.discover import EARLIER_OUTPUT, discover

    d = _planted(tmp_path)
    out = d / "out"
    for _ in range(2):      # the second run finds the first's output inside its input
        r = run_cli("batch", d, "-o", out, "-j", "1", cwd=tmp_path)
        _clean(r)
        assert r.returncode == 0, r.stderr
        assert len(pd.read_parquet(out / "summary.parquet")) == 4
    found, skipped = discover(d)
    assert not any(p.startswith(str(out)) for p in found)
    assert {skipped.why[p] for p in skipped if p.startswith(str(out))} == {EARLIER_OUTPUT}
    # an output file edited since (or a trace put in its place) is read again
    (out / "jobs.json").write_bytes((d / "a.json").read_bytes())
    found, _ = discover(d)
    assert str(out / "jobs.json") in found


def test_diff_of_folders_pairs_traces_named_like_batch_outputs(tmp_path):
    from traceread.diffs.paths import match_dirs

    a, b = _planted(tmp_path / "a"), _planted(tmp_path / "b")
    m = match_dirs(str(a), str(b))
    labels = {os.path.basename(str(label)) for label, _, _ in m.pairs}
    assert labels == {"a.json", "jobs.json", "report.html", "t.json"} and not m.unmatched


# ------------------------------------------------------------------ Flight Recorder dumps

FR = FIXTURES / "gloo" / "fr2"


def _one_error(r, name: str) -> str:
    _clean(r)
    assert r.returncode == 1, (r.stdout[-500:], r.stderr[-2000:])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("traceread: error: ") and name in lines[0], lines
    assert "Warning" not in r.stderr
    return lines[0]


def _fr_doc() -> dict:
    return json.loads((FR / "fr-rank-0.json").read_text())


def _pickle_ops(*items: bytes) -> bytes:
    """A protocol-2 pickle: {"version": "2.10", "entries": <items>} by hand."""
    def s(t: str) -> bytes:
        return b"X" + len(t).to_bytes(4, "little") + t.encode()
    return (b"\x80\x02}(" + s("version") + s("2.10") + s("entries") + b"".join(items)
            + b"u.")


def _tuple_dag_key(levels: int = 64) -> bytes:
    """By hand (building it in Python would hash 2^64 nodes): t0 = ("x",), t(i+1) = (ti, ti)
    through the pickle memo, t64 a dict key."""
    dag = b"X\x01\x00\x00\x00x\x85q\x00"                       # TUPLE1, BINPUT 0
    for i in range(1, levels + 1):
        dag += b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86q" + bytes([i])
    return _pickle_ops(b"]", dag, b"K\x01")


def _shared_entries(n: int) -> bytes:
    import pickle

    e = _fr_doc()["entries"][0]
    return pickle.dumps({"version": "2.10", "entries": [e] * n}, protocol=2)


HOSTILE_PICKLES = {
    # 905 bytes: a dict key that is a 64-level tuple DAG (2^64 nodes to hash): hung
    "tuple_dag": lambda: _tuple_dag_key(),
    # shared references: one entry a million times from 2 MB (10.5 s, 942 MB before)
    "shared_entries": lambda: _shared_entries(1_000_000),
    # an 8 MB LONG4 integer
    "long4": lambda: _pickle_ops(b"]", b"X\x04\x00\x00\x00junk", b"\x8b" + (8 << 20).to_bytes(4, "little")
                                 + b"\x01" * (8 << 20)),
    # a list nested a million deep: an internal error (RecursionError) before
    "deep_list": lambda: _pickle_ops(b"]" * 1_000_000 + b"a" * 999_999),
    # a million distinct empty entries: more than any recorder buffer
    "many_entries": lambda: _pickle_ops(b"](" + b"}" * 1_000_000 + b"e"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PICKLES))
def test_hostile_pickled_dump_is_refused_fast(tmp_path, case):
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(HOSTILE_PICKLES[case]())
    q = tmp_path / "nccl_trace_rank_1"
    q.write_bytes(__import__("pickle").dumps(_fr_doc(), protocol=2))
    t0 = time.monotonic()
    r = run_cli("analyze", p, q, cwd=tmp_path, timeout=60)
    assert time.monotonic() - t0 < 30
    _one_error(r, "nccl_trace_rank_0")


def _deep_json(depth: int) -> bytes:
    return (b'{"comm_lib_version": "", "entries": [{"time_created_ns": 1, "input_sizes": '
            + b"[" * depth + b"]" * depth + b'}], "version": "2.10"}')


HOSTILE_FIELDS = {
    "time_is_text": {"time_created_ns": "soon"},
    "time_is_huge": {"time_created_ns": 10 ** 30},
    "time_is_bool": {"time_created_ns": True},
    "sizes_is_object": {"input_sizes": {"a": 1}},
    "sizes_overflow": {"input_sizes": [[2 ** 40, 2 ** 40, 2 ** 40]]},
    "dims_negative": {"input_sizes": [[-5]]},
    "dtypes_is_list_of_lists": {"input_dtypes": [[1]]},
    "dtypes_is_object": {"input_dtypes": {"0": "Float"}},
    "group_is_object": {"process_group": {"a": 1}},
    "seq_is_float": {"collective_seq_id": 1.5},
    "name_is_list": {"profiling_name": ["gloo:all_reduce"]},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_hostile_dump_field_is_one_line_with_the_file_name(tmp_path, case):
    doc = _fr_doc()
    doc["entries"][3].update(HOSTILE_FIELDS[case])
    p = tmp_path / "fr-rank-0.json"
    p.write_text(json.dumps(doc))
    shutil_copy(FR / "fr-rank-1.json", tmp_path / "fr-rank-1.json")
    r = run_cli("analyze", p, tmp_path / "fr-rank-1.json", cwd=tmp_path)
    if case == "sizes_overflow":     # valid: the byte count is capped, no overflow warning
        _clean(r)
        assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
        return
    line = _one_error(r, "fr-rank-0.json")
    assert "entry 3" in line


@pytest.mark.parametrize("case", ["deep_json", "pg_config_list", "entries_object", "ranks_deep"])
def test_hostile_dump_document_is_one_line(tmp_path, case):
    doc = _fr_doc()
    p = tmp_path / "fr-rank-0.json"
    if case == "deep_json":
        p.write_bytes(_deep_json(200_000))
    else:
        if case == "pg_config_list":
            doc["pg_config"] = [1, 2]
        elif case == "entries_object":
            doc["entries"] = {"0": doc["entries"][0]}
        else:
            doc["pg_config"] = {"0": {"ranks": "[" * 100_000}}
        p.write_text(json.dumps(doc))
    shutil_copy(FR / "fr-rank-1.json", tmp_path / "fr-rank-1.json")
    r = run_cli("analyze", p, tmp_path / "fr-rank-1.json", cwd=tmp_path)
    if case == "ranks_deep":          # an unreadable ranks list: the group's size is unknown
        _clean(r)
        assert "Warning" not in r.stderr
        return
    _one_error(r, "fr-rank-0.json")


def shutil_copy(a: Path, b: Path) -> None:
    b.write_bytes(a.read_bytes())


def _encoded(data: bytes, how: str) -> bytes:
    text = data.decode()
    return {"utf-8-bom": b"\xef\xbb\xbf" + data, "utf-16": text.encode("utf-16"),
            "utf-16-be": text.encode("utf-16-be"), "utf-32": text.encode("utf-32"),
            "gzip": gzip.compress(data, mtime=0)}[how]


@pytest.mark.parametrize("how", ["utf-8-bom", "utf-16", "utf-16-be", "utf-32", "gzip"])
def test_dump_in_every_encoding_is_the_same_job(tmp_path, how):
    # were "not a trace"
    for r in (0, 1):
        (tmp_path / f"fr-rank-{r}.json").write_bytes(
            _encoded((FR / f"fr-rank-{r}.json").read_bytes(), how))
    r = run_cli("analyze", tmp_path / "fr-rank-0.json", tmp_path / "fr-rank-1.json", cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("JOB job0: ranks 0, 1 of 2 · gloo\n  STRAGGLER  rank 1 arrives 20.1 ms late")


def test_pickled_dump_in_gzip_is_a_job(tmp_path):
    import pickle

    for r in (0, 1):
        doc = json.loads((FR / f"fr-rank-{r}.json").read_text())
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(gzip.compress(pickle.dumps(doc), mtime=0))
    r = run_cli("analyze", tmp_path / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_1",
                cwd=tmp_path)
    _clean(r)
    assert r.returncode == 0 and "STRAGGLER  rank 1" in r.stdout, r.stderr


@pytest.mark.parametrize("case", ["one_rank", "two_rank_0", "rank_5_of_2"])
def test_dumps_that_form_no_job_are_said_so(tmp_path, case):
    # printed an empty line and exited 0 (cross_rank null, traces []); rank 5 was never checked
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tmp_path / "a" / "fr-rank-0.json"
    shutil_copy(FR / "fr-rank-0.json", a)
    paths = {"one_rank": [a], "two_rank_0": [a, tmp_path / "b" / "fr-rank-0.json"],
             "rank_5_of_2": [a, tmp_path / "b" / "fr-rank-5.json"]}[case]
    for p in paths[1:]:
        shutil_copy(FR / "fr-rank-1.json", p)
    r = run_cli("analyze", *paths, cwd=tmp_path)
    line = _one_error(r, {"one_rank": "a/fr-rank-0.json", "two_rank_0": "b/fr-rank-0.json",
                          "rank_5_of_2": "fr-rank-5.json"}[case])
    assert {"one_rank": "forms no job", "two_rank_0": "claims rank 0",
            "rank_5_of_2": "rank 5 in a world of 2"}[case] in line
    assert not r.stdout.strip()
    r = run_cli("analyze", *paths, "--format", "json", cwd=tmp_path)
    assert r.returncode == 1


def test_library_says_a_lone_dump_forms_no_job(tmp_path):
    import traceread
    from traceread.errors import TraceError

    with pytest.raises(TraceError, match="forms no job"):
        traceread.all_jobs([str(FR / "fr-rank-0.json")])


def test_dump_sniff_never_parses_a_trace(tmp_path, monkeypatch):
    # a trace whose first 64 KB hold the dump's key names (in a header field) was parsed
    # whole with the stdlib json (63 MB) before it was found not to be a dump
    import msgspec

    from traceread.jobs.multirank import flight

    head = {"schemaVersion": 1, "distributedInfo": {"entries": [], "profiling_name": "x" * 70_000}}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({**head, "traceEvents": [{"ph": "X", "name": "k"}]}))

    def boom(*a, **k):
        raise AssertionError("parsed")
    monkeypatch.setattr(msgspec.json, "decode", boom)
    monkeypatch.setattr(json, "loads", boom)
    assert flight.read_dump(p) is None


# ------------------------------------------------------------------ nsys strings

def _sampled_export(tmp_path: Path, symbol: str) -> Path:
    import shutil
    import sqlite3

    p = tmp_path / "s.sqlite"
    shutil.copy(FIXTURES / "nsys" / "ex-gpu.s10.sqlite", p)
    con = sqlite3.connect(p)
    (sid,) = con.execute("SELECT symbol FROM SAMPLING_CALLCHAINS WHERE unresolved IS NULL "
                         "AND symbol IS NOT NULL LIMIT 1").fetchone()
    con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (symbol, sid))
    con.commit()
    con.close()
    return p


def test_sampled_stacks_read_symbols_clipped(tmp_path):
    # the sampled-stack reader read StringIds whole (a 16 MB symbol in every frame: out of
    # memory), bypassing the 64 KiB clip of every other nsys string
    from traceread.readers._nsys_db import MAX_TEXT_BYTES
    from traceread.readers.nsys_stacks import cpu_samples

    p = _sampled_export(tmp_path, "S" * (16 << 20))
    s = cpu_samples(p)
    longest = max(len(f) for fr in s["frames"] for f in fr)
    assert len(s) == 611 and MAX_TEXT_BYTES < longest <= MAX_TEXT_BYTES + 40


@pytest.mark.parametrize("char", ["\u00e9", "\u20ac", "\U0001f600"])
def test_nsys_cut_never_splits_a_character(tmp_path, char):
    # the cut counted bytes: a 2-, 3- or 4-byte character across it became U+FFFD
    from traceread.readers._nsys_db import MAX_TEXT_BYTES
    from traceread.readers.nsys_stacks import cpu_samples

    name = "a" + char * MAX_TEXT_BYTES
    s = cpu_samples(_sampled_export(tmp_path, name))
    cut = next(f for fr in s["frames"] for f in fr if f.startswith("a" + char))
    assert "\ufffd" not in cut and cut.startswith(name[:MAX_TEXT_BYTES]) and "more bytes]" in cut


# ------------------------------------------------------------------ options and the library

@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_link_gbps_must_be_finite(value, tmp_path):
    # --link-gbps inf wrote Infinity into the JSON (no JSON reader takes it)
    r = run_cli("analyze", FR / "fr-rank-0.json", FR / "fr-rank-1.json", "--link-gbps", value,
                "--format", "json", cwd=tmp_path)
    _clean(r)
    assert r.returncode == 2 and "Infinity" not in r.stdout and "NaN" not in r.stdout
    assert "--link-gbps" in r.stderr


LIBRARY_CALLS = {
    "link_inf": ({"link_gbps": float("inf")}, ValueError),
    "link_nan": ({"link_gbps": float("nan")}, ValueError),
    "link_negative": ({"link_gbps": -1.0}, ValueError),
    "link_text": ({"link_gbps": "fast"}, TypeError),
    "unknown_keyword": ({"bogus": 1}, TypeError),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_CALLS))
def test_library_job_refuses_bad_arguments(case):
    # accepted on the dumps-only path (never passed to analyze), inf reached the JSON
    import traceread

    kw, err = LIBRARY_CALLS[case]
    with pytest.raises(err):
        traceread.job([str(FR / "fr-rank-0.json"), str(FR / "fr-rank-1.json")], **kw)


def test_library_job_takes_bytes_paths_of_dumps():
    import traceread

    j = traceread.job([os.fsencode(FR / f"fr-rank-{r}.json") for r in (0, 1)])
    assert j.verdict()["straggler_rank"] == 1


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_library_hostile_dump_raises_trace_error(tmp_path, case):
    import traceread
    from traceread.errors import TraceError

    doc = _fr_doc()
    doc["entries"][3].update(HOSTILE_FIELDS[case])
    p = tmp_path / "fr-rank-0.json"
    p.write_text(json.dumps(doc))
    paths = [str(p), str(FR / "fr-rank-1.json")]
    if case == "sizes_overflow":
        traceread.job(paths)
        return
    with pytest.raises(TraceError, match="fr-rank-0.json: Flight Recorder dump: entry 3"):
        traceread.job(paths)
