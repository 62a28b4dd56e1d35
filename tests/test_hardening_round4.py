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
