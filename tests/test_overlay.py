"""``traceread overlay``: original events unchanged, added tracks right, reads back through traceread."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.render.overlay import CAT, PID_BASE, write_overlay
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import dataloader_bound, item_sync_bound

from conftest import FIXTURES


def _added(e: dict) -> bool:
    return e.get("cat") == CAT or (e.get("ph") == "M" and isinstance(e.get("pid"), int)
                                   and e["pid"] >= PID_BASE)


def _doc(path) -> dict:
    op = gzip.open if str(path).endswith(".gz") else open
    with op(path, "rb") as f:
        return json.loads(f.read())


def _gpu_ops(trace) -> pd.DataFrame:
    ev = trace.events
    ops = ev[ev["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()]
    cols = ["ts", "dur", "device", "stream", "kind", "name"]
    return (ops[cols].astype({"kind": str, "name": str})
            .sort_values(cols).reset_index(drop=True))


def test_planted_dataloader_gaps_become_named_slices(tmp_path):
    trace, truth = dataloader_bound()
    src = tmp_path / "dl.json"
    write_kineto(trace, src)
    out = tmp_path / "overlay.json.gz"
    r = CliRunner().invoke(main, ["overlay", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = _doc(out)
    gaps = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e["name"].startswith("idle")]
    assert len(gaps) == truth["gap_count"]
    # between steps: the next step's DataLoader fetch; the window's trailing edge: untraced host
    inner = [e for e in gaps if round(e["dur"] * 1000) == truth["gap_ns"]]
    assert len(inner) == truth["steps"] - 1 and {e["name"] for e in inner} == {"idle: dataloader"}
    total = sum(e["args"]["host_ns"].get("dataloader", 0) for e in gaps)
    assert total == truth["by_cpu"]["dataloader"]
    assert sum(round(e["dur"] * 1000) for e in gaps) == truth["idle_ns"]
    steps = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e["name"].startswith("step #")]
    assert len(steps) == truth["steps"]
    names = {e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name" and _added(e)}
    assert "traceread · GPU idle gaps" in names and "traceread · steps" in names
    verdict = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e.get("ph") == "i"]
    assert len(verdict) == 1 and verdict[0]["name"].startswith("verdict: DATA")


def test_sync_drained_gap_is_named_by_the_sync_call(tmp_path):
    trace, truth = item_sync_bound()
    src = tmp_path / "sync.json"
    write_kineto(trace, src)
    a = traceread.analyze(str(src))
    out = tmp_path / "o.json"
    write_overlay(a, str(out))
    names = {e["name"] for e in _doc(out)["traceEvents"] if e.get("cat") == CAT}
    assert "idle: drained by aten::item" in names


def test_real_kineto_overlay_keeps_every_original_event_and_reads_back(tmp_path):
    src = FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"
    out = tmp_path / "ov.json.gz"
    r = CliRunner().invoke(main, ["overlay", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    orig, doc = _doc(src), _doc(out)
    kept = [e for e in doc["traceEvents"] if not _added(e)]
    assert kept == orig["traceEvents"]  # same events, same order, same values
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == \
        {k: v for k, v in orig.items() if k != "traceEvents"}
    a, b = traceread.analyze(str(src)), traceread.analyze(str(out))
    added = [e for e in doc["traceEvents"] if e.get("cat") == CAT]
    assert b.events == a.events + len(added)
    gap_slices = [e for e in added if e["name"].startswith("idle")]
    assert len(gap_slices) == len(a.gaps)
    # the added tracks are inert: the analysis of the overlay is the analysis of the trace
    assert b.verdict == a.verdict
    assert b.attribution["by_cpu"] == a.attribution["by_cpu"]
    pd.testing.assert_frame_equal(b.devices, a.devices)
    pd.testing.assert_frame_equal(_gpu_ops(b.trace), _gpu_ops(a.trace))


def test_overlay_refuses_to_overwrite_its_input(tmp_path):
    trace, _ = dataloader_bound(steps=2)
    src = tmp_path / "dl.json"
    write_kineto(trace, src)
    before = src.read_bytes()
    r = CliRunner().invoke(main, ["overlay", str(src), "-o", str(src)])
    assert r.exit_code == 1 and "traceread: error:" in r.stderr
    assert src.read_bytes() == before


def test_nsys_overlay_is_a_chrome_trace_with_the_same_gpu_ops(tmp_path):
    src = FIXTURES / "nsys" / "healthy_judged_1pct.sqlite"
    out = tmp_path / "nsys.json.gz"
    r = CliRunner().invoke(main, ["overlay", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = _doc(out)
    assert doc["schemaVersion"] == 1 and isinstance(doc["traceEvents"], list)
    a, b = traceread.analyze(str(src)), traceread.analyze(str(out))
    assert b.meta.format == "kineto"
    pd.testing.assert_frame_equal(_gpu_ops(b.trace), _gpu_ops(a.trace))
    added = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e["name"].startswith("idle")]
    assert len(added) == len(a.gaps)
    # every GPU op sits on a device process with a stream thread, as Perfetto expects
    k = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert k and all(isinstance(e["pid"], int) and e["tid"] == e["args"]["stream"] for e in k)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert all(names[(e["pid"], e["tid"])] == f"stream {e['tid']}" for e in k)


def test_real_corpus_nsys_pair_overlays(tmp_path, corpus_dir):
    src = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"
    out = tmp_path / "mfu.json.gz"
    a = traceread.analyze(str(src))
    n = write_overlay(a, str(out))
    b = traceread.load(str(out))
    assert n > len(a.gaps)
    pd.testing.assert_frame_equal(_gpu_ops(b), _gpu_ops(a.trace))
    exposed = [e for e in _doc(out)["traceEvents"] if e.get("name") == "exposed comm"]
    total = sum(round(e["dur"] * 1000) for e in exposed)
    assert total == int(a.nccl["exposed_ns"].sum())


def test_bad_input_and_unwritable_output_are_one_error_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [')
    r = CliRunner().invoke(main, ["overlay", str(bad), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 1 and r.stderr.startswith("traceread: error: ") and "Traceback" not in r.output
    src = FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"
    r = CliRunner().invoke(main, ["overlay", str(src), "-o", str(tmp_path / "no" / "such" / "o.json")])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "cannot write" in r.stderr


def test_ranks_of_a_job_get_their_straggler_waits(tmp_path):
    from traceread.examples import path as example
    from traceread.jobs.multirank import analyze_traces

    paths = [str(example()), str(FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz")]
    out = tmp_path / "ov"
    r = CliRunner().invoke(main, ["overlay", *paths, "-o", str(out)])
    assert r.exit_code == 0, r.output
    (job,) = analyze_traces([traceread.load(p) for p in paths])
    wait = dict(zip(job.per_rank["rank"], job.per_rank["wait_ns"]))
    assert wait[0] > 0  # rank 1 is the straggler: rank 0 waits for it
    for rank in (0, 1):
        doc = _doc(out / f"hta_sampled_rank-{rank}.overlay.json.gz")
        slices = [e for e in doc["traceEvents"] if e.get("cat") == CAT
                  and e["name"].startswith("wait for rank")]
        assert sum(e["args"]["wait_ns"] for e in slices) == wait[rank]
        assert {e["name"] for e in slices} <= {f"wait for rank {1 - rank}"}


@pytest.mark.slow
def test_every_corpus_trace_overlays_and_reads_back(corpus_dir, tmp_path):
    """Kineto overlays of the whole corpus re-analyse to the same verdict and idle time."""
    import csv

    from traceread.errors import TraceError

    rows = list(csv.DictReader((corpus_dir / "MANIFEST.tsv").open(), delimiter="\t"))
    out, checked = tmp_path / "o.json.gz", 0
    for r in rows:
        if not r["kind"].startswith("kineto") or int(r["bytes"] or 0) > 200 << 20:
            continue
        try:
            a = traceread.analyze(str(corpus_dir / r["local_path"]))
        except TraceError:
            continue
        write_overlay(a, str(out))
        b = traceread.analyze(str(out))
        assert b.verdict["bound"] == a.verdict["bound"], r["local_path"]
        assert int(b.devices["idle_ns"].sum()) == int(a.devices["idle_ns"].sum()), r["local_path"]
        checked += 1
    assert checked > 20
