"""analyze(): planted scenarios through every input path, the JSON contract and the CLI."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import traceread
from traceread import load
from traceread.analysis import Analysis, analyze
from traceread.cli import main
from traceread.passes.attribution import CPU_CATEGORIES
from traceread.synth import scenarios as sc
from traceread.synth.kineto import write_kineto

from conftest import materialise

PATHS = ("table", "kineto-2.4", "kineto-1.8", "nsys")


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("name", sorted(sc.SCENARIOS))
def test_planted_truth_through_every_reader(name, how, tmp_path):
    trace, truth = sc.SCENARIOS[name]()
    a = analyze(materialise(trace, how, tmp_path, name))
    assert a.verdict["bound"] == truth["bound"]
    d = a.to_dict()
    assert d["devices"][0]["idle_ns"] == truth["idle_ns"]
    assert d["devices"][0]["busy_ns"] == truth["busy_ns"]
    assert d["devices"][0]["window_ns"] == truth["window_ns"]
    assert d["gaps"]["total_idle_ns"] == truth["idle_ns"]
    assert d["gaps"]["count"] == truth["gap_count"]
    want = dict(truth["by_cpu"])
    if how == "nsys":  # python frames become NVTX ranges: operator time
        want["cpu_op"] = want.get("cpu_op", 0) + want.pop("python", 0)
    assert {k: v for k, v in d["attribution"]["by_cpu"].items() if v} == want
    assert d["attribution"]["by_drain"] == truth["by_drain"]
    assert d["steps"]["source"] == "ProfilerStep"
    assert d["steps"]["count"] == truth["steps"]
    if "step_dur" in truth:
        assert d["steps"]["stats"]["median_ns"] == truth["step_dur"]
        assert d["steps"]["stats"]["bursty"] is False
    # per-step idle adds up to the total, per category too
    items = d["steps"]["items"]
    assert sum(s["idle_ns"] for s in items) == truth["idle_ns"]
    for c in CPU_CATEGORIES:
        assert sum(s["idle_by_cpu"][c] for s in items) == d["attribution"]["by_cpu"][c]


def test_dataloader_gaps_belong_to_the_step_that_waited():
    trace, truth = sc.dataloader_bound()
    a = analyze(trace)
    # the gap before step k's kernels is caused by step k's fetch (step 0's is the window's
    # leading edge); the last step's tail after its kernels is its own trailing edge
    n = truth["steps"]
    assert a.gaps["step"].tolist() == list(range(n)) + [n - 1]
    assert a.steps["idle_dataloader"].tolist() == [30 * sc.MS] * n


def test_json_contract_keys_and_types():
    trace, _ = sc.item_sync_bound()
    d = analyze(trace).to_dict()
    for key in ("trace", "steps", "devices", "gaps", "attribution", "nccl", "compile", "kernels",
                "verdict"):
        assert key in d
    assert {"device", "window_ns", "busy_ns", "idle_ns"} <= set(d["devices"][0])
    assert {"total_idle_ns", "count", "largest"} <= set(d["gaps"])
    assert {"by_cpu", "by_drain", "devices"} <= set(d["attribution"])
    assert {"comm_ns", "exposed_ns", "overlap_pct", "by_collective"} <= set(d["nccl"])
    assert {"compiles", "recompiles", "compile_ns", "cache_lookup_ns", "frames"} <= set(d["compile"])
    assert {"name", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
            "pct"} <= set(d["kernels"][0])
    assert {"bound", "evidence", "levers"} <= set(d["verdict"])
    assert all(isinstance(k[f], int) for k in d["kernels"] for f in ("total_ns", "avg_ns", "med_ns"))
    g = d["gaps"]["largest"][0]
    assert g["drain"] == "sync" and g["drain_op"] == "aten::item"
    assert sum(g["by_cpu"].values()) == g["duration_ns"]
    json.dumps(d)  # plain JSON types only


def test_min_gap_filters_the_listing_not_the_totals():
    trace, truth = sc.gpu_bound()
    a = analyze(trace, min_gap_ns=10 * sc.US)
    d = a.to_dict()
    assert d["gaps"]["total_idle_ns"] == truth["idle_ns"]
    assert d["gaps"]["count"] == truth["gap_count"]
    assert d["gaps"]["listed"] == truth["steps"]   # the 60us relaunch gaps + the leading edge
    assert all(g["duration_ns"] > 10 * sc.US for g in d["gaps"]["largest"])
    assert sum(d["attribution"]["by_cpu"].values()) == truth["idle_ns"]


def test_public_api_and_path_input(tmp_path):
    trace, truth = sc.launch_bound()
    p = tmp_path / "t.json.gz"
    write_kineto(trace, p, gz=True)
    a = traceread.analyze(str(p))
    assert isinstance(a, Analysis) and a.verdict["bound"] == "launch"


def test_no_steps_whole_trace_window():
    b = sc.TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("aten::mm", 100, 900)
    d = analyze(b.build()).to_dict()
    assert d["steps"]["source"] == "whole_trace" and d["steps"]["count"] == 0
    assert d["steps"]["stats"] is None
    assert d["steps"]["items"][0]["idle_ns"] == 900


def test_custom_step_pattern():
    b = sc.TraceBuilder()
    for k in range(3):
        b.cpu(f"my_iter_{k}", k * 1000, 1000, kind="annotation")
        b.launch(k * 1000 + 10, 10, k * 1000 + 100, 500)
    d = analyze(b.build(), step_pattern=r"^my_iter_\d+$").to_dict()
    assert d["steps"]["source"] == "pattern" and d["steps"]["count"] == 3
    # the window is the steps' span: step 0 waits 100 before its kernel, step 2 idles 400 after
    assert [s["idle_ns"] for s in d["steps"]["items"]] == [100, 500, 900]


# --------------------------------------------------------------------------- CLI

def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def files(tmp_path):
    out = {}
    for name in ("data", "sync"):
        trace, truth = sc.SCENARIOS[name]()
        p = tmp_path / f"{name}.json"
        write_kineto(trace, p)
        out[name] = (p, truth)
    return out


def test_cli_text_report(files):
    r = _run("analyze", files["data"][0])
    assert r.exit_code == 0, r.output
    first = [line for line in r.output.splitlines() if line.strip()]
    assert first[2].startswith("  analysed: steps #0–#4 (5 of 5)")   # what the verdict covers
    assert first[3].startswith("VERDICT  DATA")
    assert "num_workers" in r.output and "dataloader" in r.output


def test_cli_json_single_and_many(files, tmp_path):
    r = _run("analyze", files["sync"][0], "--format", "json")
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert d["verdict"]["bound"] == "sync"
    out = tmp_path / "o.json"
    r = _run("analyze", files["data"][0], files["sync"][0], "--format", "json", "-o", out,
             "--min-gap", "1ms")
    assert r.exit_code == 0
    doc = json.loads(out.read_text())  # several inputs: {schema_version, cross_rank, traces}
    assert doc["cross_rank"] is None
    docs = doc["traces"]
    assert [x["verdict"]["bound"] for x in docs] == ["data", "sync"]
    assert docs[1]["gaps"]["min_gap_ns"] == 1_000_000


def test_cli_steps_and_idle(files):
    p, truth = files["data"]
    r = _run("steps", p, "--format", "json")
    assert r.exit_code == 0 and json.loads(r.output)["count"] == truth["steps"]
    r = _run("idle", p, "--format", "json", "--min-gap", "10ms")
    gaps = json.loads(r.output)["gaps"]
    # one fetch gap per step (the last step's 4.9 ms tail is under 10 ms)
    assert len(gaps) == truth["steps"] and all(g["cpu"] == "dataloader" for g in gaps)
    r = _run("idle", p, "--min-gap", "1h")
    assert r.exit_code != 0 and "not a duration" in r.output
    assert _run("steps", p).exit_code == 0 and _run("idle", p).exit_code == 0


def test_cli_bad_file_is_one_line_error(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    r = CliRunner().invoke(main, ["analyze", str(p)])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and "traceread: error:" in r.output


def test_cli_bad_step_pattern(files):
    r = _run("analyze", files["data"][0], "--step-pattern", "ProfilerStep#(")
    assert r.exit_code == 2 and "not a regular expression" in r.output


def test_report_fit_wraps_prose_keeps_rows_and_paths():
    from traceread.render.fmt import fit

    prose = "  GPU idle 99.5% of the analysed window; " + "the launching thread is busy " * 4
    lever = "    1. stop device-memory churn: " + "remove torch.cuda.empty_cache() " * 4
    row = "  " + "  ".join(["+904 ms", "10 s", "0", "-", "starved"]) + "  " + "x" * 95
    path = "/" + "p" * 130
    out = fit([prose, lever, row, path])
    assert row in out and path in out  # a table row and a path stay whole
    wrapped = [x for x in out if x not in (row, path)]
    assert all(len(x) <= 100 for x in wrapped) and len(wrapped) >= 4
    assert " ".join(" ".join(x.split()) for x in wrapped) == " ".join((prose + lever).split())
    assert wrapped[1].startswith("    GPU") is False and wrapped[1].startswith("    ")
    assert any(x.startswith("       remove") or x.startswith("       torch") for x in wrapped)


def test_report_lines_fit_100_columns_on_a_real_trace(corpus_dir):
    # alexnet: long levers, a long "analysed:" note and long kernel names
    from traceread.render.report import render_report

    path = (corpus_dir / "facebookresearch__HolisticTraceAnalysis/tests/data/critical_path/"
            "alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    lines = render_report(analyze(load(path))).splitlines()[1:]  # line 0 is the path
    prose = [x for x in lines if len(x) > 100 and "  " not in x.strip()]
    kernels = lines[lines.index(next(x for x in lines if x.startswith("Top kernels"))):]
    assert prose == [] and all(len(x) <= 100 for x in kernels[:10])
