"""The overlay loads in Perfetto / chrome://tracing: every added event (and, for nsys input,
every event of the document we write) obeys the importer rules of tests/chrome_rules.py,
on the real corpus, the real H100 captures and planted overlaps. The checker itself is
shown to catch each kind of break."""
from __future__ import annotations

import csv
import glob
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.render.overlay import LANE_TID, lanes_of, write_overlay
from traceread.synth import scenarios as sc
from traceread.synth.kineto import write_kineto

from chrome_rules import event_problems, nesting_problems, overlay_problems
from conftest import CORPUS, FIXTURES, analysed

SMALL_BYTES = 600_000
KINDS = ("kineto-json", "kineto-json-gz", "nsys-sqlite")


def _overlay_doc(src, tmp_path, name="o.json.gz") -> dict:
    out = tmp_path / name
    # a committed or corpus trace: its analysis is shared with the other test files
    a = traceread.analyze(str(src)) if tmp_path in Path(src).parents else analysed(src)
    write_overlay(a, str(out))
    with gzip.open(out, "rb") as f:
        return json.loads(f.read())  # strict JSON: no raw control characters (T3)


def _all_problems(doc: dict, whole: bool) -> list[str]:
    out = overlay_problems(doc)
    if whole:  # nsys input: the whole document is ours
        ev = doc["traceEvents"]
        out += [f"{p}: {str(e)[:200]}" for e in ev for p in event_problems(e)] + nesting_problems(ev)
    return out


def _corpus(small: bool) -> list[str]:
    if not (CORPUS / "MANIFEST.tsv").is_file():
        return []
    with open(CORPUS / "MANIFEST.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] in KINDS]
    return [r["local_path"] for r in rows if (int(r["bytes"]) <= SMALL_BYTES) == small]


def _check_corpus(rel: str, corpus_dir, tmp_path):
    try:
        traceread.load(corpus_dir / rel)
    except traceread.TraceError:
        pytest.skip("not a trace (refused cleanly; the reader tests cover it)")
    doc = _overlay_doc(corpus_dir / rel, tmp_path)
    assert _all_problems(doc, rel.endswith(".sqlite")) == []


@pytest.mark.parametrize("rel", _corpus(small=True))
def test_small_corpus_overlays_obey_the_importer_rules(rel, corpus_dir, tmp_path):
    _check_corpus(rel, corpus_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("rel", _corpus(small=False))
def test_large_corpus_overlays_obey_the_importer_rules(rel, corpus_dir, tmp_path):
    _check_corpus(rel, corpus_dir, tmp_path)


GPU = sorted(Path(p).name for p in glob.glob(str(FIXTURES / "gpu" / "*.json.gz")))
GPU_NSYS = sorted(Path(p).name for p in glob.glob(str(FIXTURES / "gpu" / "*.sqlite.xz")))


@pytest.mark.parametrize("name", GPU)
def test_real_h100_kineto_overlays_obey_the_rules(name, tmp_path):
    doc = _overlay_doc(FIXTURES / "gpu" / name, tmp_path)
    assert _all_problems(doc, whole=False) == []
    assert any(e.get("name", "").startswith("idle: ") for e in doc["traceEvents"])


# launch.fixed has CUDA-graph rows and rows without a thread id; the rest run with -m slow
QUICK_NSYS = ("launch.fixed.sqlite.xz", "data.bad.sqlite.xz")


@pytest.mark.parametrize("name", [n if n in QUICK_NSYS else pytest.param(n, marks=pytest.mark.slow)
                                  for n in GPU_NSYS])
def test_real_h100_nsys_overlays_obey_the_rules(name, tmp_path, gpu_sqlite):
    src = gpu_sqlite / name[:-3]
    assert _all_problems(_overlay_doc(src, tmp_path), whole=True) == []


def test_straggler_waits_of_real_ranks_obey_the_rules(tmp_path):
    ranks = sorted(glob.glob(str(FIXTURES / "gloo" / "ddp4" / "rank-*.json.gz")))
    r = CliRunner().invoke(main, ["overlay", *ranks, "-o", str(tmp_path / "job")])
    assert r.exit_code == 0, r.output
    waits = 0
    for p in sorted((tmp_path / "job").iterdir()):
        with gzip.open(p, "rb") as f:
            doc = json.loads(f.read())
        assert overlay_problems(doc) == []
        waits += sum(1 for e in doc["traceEvents"] if str(e.get("name", "")).startswith("wait for"))
    assert waits > 0


def test_overlapping_steps_go_to_a_second_lane(tmp_path):
    """Two processes in one trace, each with its ProfilerStep ranges, 4 ms apart."""
    b = sc.TraceBuilder()
    for k in range(3):
        b.step(k, k * 10_000_000, 10_000_000, pid=1, tid=1)
        b.step(k, k * 10_000_000 + 4_000_000, 10_000_000, pid=2, tid=2)
        b.launch(k * 10_000_000 + 100_000, 10_000, k * 10_000_000 + 200_000, 1_000_000, pid=1, tid=1)
    src = tmp_path / "two_threads.json"
    write_kineto(b.build(), src)
    doc = _overlay_doc(src, tmp_path)
    assert overlay_problems(doc) == []
    lanes = {e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {"steps (host span)", "steps (host span) (2)"} <= lanes


def test_overlapping_gpu_ops_of_an_nsys_stream_get_a_lane_and_read_back(tmp_path):
    b = sc.TraceBuilder()
    b.launch(0, 10_000, 100_000, 500_000)
    b.launch(20_000, 10_000, 400_000, 500_000)   # starts inside the first, ends after it
    b.launch(40_000, 10_000, 2_000_000, 100_000)
    src = tmp_path / "overlap.sqlite"
    sc.write_nsys(b.build(), src)
    doc = _overlay_doc(src, tmp_path)
    ev = doc["traceEvents"]
    assert nesting_problems(ev) == [] and _all_problems(doc, whole=True) == []
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert sorted(e["tid"] for e in kernels) == [7, 7, 7 + LANE_TID]
    a, back = traceread.load(str(src)), traceread.load(str(tmp_path / "o.json.gz"))
    cols = ["ts", "dur", "device", "stream"]
    k0 = a.events[a.events["kind"] == "kernel"][cols].sort_values(cols).reset_index(drop=True)
    k1 = back.events[back.events["kind"] == "kernel"][cols].sort_values(cols).reset_index(drop=True)
    assert k0.equals(k1)  # the lane changes the track, not the stream


def test_lanes_nest_or_split():
    assert lanes_of([0, 10, 5, 20, 25], [100, 20, 50, 30, 40]) == [0, 0, 0, 0, 1]
    assert lanes_of([0, 5], [10, 15]) == [0, 1]
    assert lanes_of([0, 10], [10, 20]) == [0, 0]      # touching: closed-left, open-right
    assert lanes_of([0, 0], [5, 10]) == [0, 0]        # same start: the longer one holds the other


def test_the_checker_catches_each_break():
    ok = {"ph": "X", "cat": "traceread", "name": "idle: launch", "pid": 1, "tid": 1, "ts": 5, "dur": 2}
    assert event_problems(ok) == []
    assert event_problems({**ok, "ts": -1})              # the sorter drops negative ts
    assert event_problems({**ok, "dur": -3})             # negative duration
    assert event_problems({**ok, "pid": "GPU"})           # string pid: an interned id
    assert event_problems({**ok, "tid": 2 ** 32})        # out of uint32: lands on tid = pid
    assert event_problems({**ok, "stack": [1, 2]})       # top-level array: import fails
    assert event_problems({**ok, "ph": "b"})             # async without an id
    assert event_problems({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {}})
    assert nesting_problems([ok, {**ok, "ts": 6, "dur": 5}])      # partial overlap
    assert nesting_problems([ok, {**ok, "ts": 6, "dur": 1}]) == []  # nested
    assert nesting_problems([ok, {**ok, "ts": 7, "dur": 5}]) == []  # touching
    doc = {"traceEvents": [ok, {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 9,
                                "ts": 0, "dur": 100}]}
    assert any("(O1)" in p for p in overlay_problems(doc))  # our pid is an original one
