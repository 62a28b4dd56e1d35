"""analyze() on real traces from ../shared/corpus (skipped when the corpus is absent)."""
from __future__ import annotations

import csv
import json
from functools import lru_cache

import pytest

from traceread import TraceError, load
from traceread.passes.attribution import CPU_CATEGORIES
from traceread.verdict.bounds import VERDICTS
from traceread.render.report import render_report

from conftest import analysed, corpus_or_skip

pytestmark = pytest.mark.corpus
KINDS = ("kineto-json", "kineto-json-gz", "nsys-sqlite")
SAMPLES = "pytorch__kineto/tb_plugin/samples"
# The default run analyses every real trace up to this size (seconds in total);
# the full sweep is marked slow.
SMALL_BYTES = 600_000


@lru_cache(maxsize=None)
def _manifest():
    c = corpus_or_skip()
    with open(c / "MANIFEST.tsv", newline="") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] in KINDS]


def _analysis(rel: str):
    return analysed(corpus_or_skip() / rel)


def _check(a):
    d = a.to_dict()
    json.dumps(d)
    lines = render_report(a).splitlines()
    # rows and prose too; the header's path prints whole so that it can be copied
    wide = [x for x in lines[1:] if len(x) > 100]
    assert lines[0] == a.meta.path and wide == [], f"{len(wide)} report lines over 100 columns"
    assert lines[2].startswith("  analysed: ")
    assert any(x.startswith("VERDICT") for x in lines[3:12])
    assert d["verdict"]["bound"] in VERDICTS
    for dev in d["attribution"]["devices"]:   # the split is exact on real data too
        assert sum(dev["by_cpu"].values()) == dev["idle_ns"]
        assert sum(dev["by_drain"].values()) == dev["idle_ns"]
    for dev in d["devices"]:
        assert dev["busy_ns"] + dev["idle_ns"] == dev["window_ns"] and dev["idle_ns"] >= 0
    assert sum(s["idle_ns"] for s in d["steps"]["items"]) <= d["gaps"]["total_idle_ns"]
    assert d["gaps"]["total_idle_ns"] == sum(dev["idle_ns"] for dev in d["devices"])


def _files(small: bool):
    try:
        rows = _manifest()
    except pytest.skip.Exception:
        return []
    return [r["local_path"] for r in rows if (int(r["bytes"]) <= SMALL_BYTES) == small]


def _analyse_or_refuse(rel):
    try:
        load(corpus_or_skip() / rel)
    except TraceError:
        return None  # readers refuse non-trace files cleanly; their own tests cover that
    a = analysed(corpus_or_skip() / rel)   # shared with the other corpus tests
    _check(a)
    return a


@pytest.mark.parametrize("rel", _files(small=True))
def test_small_real_traces_analyse(rel):
    _analyse_or_refuse(rel)


@pytest.mark.slow
@pytest.mark.parametrize("rel", _files(small=False))
def test_large_real_traces_analyse(rel):
    _analyse_or_refuse(rel)


@pytest.mark.parametrize("name", ["worker0.1623143089861.pt.trace.json.gz",
                                  "worker0.1623143566756.pt.trace.json.gz"])
def test_resnet50_num_workers_0_is_data_bound(name):
    a = _analysis(f"{SAMPLES}/resnet50_num_workers_0/{name}")
    _check(a)
    v = a.verdict
    assert v["bound"] == "data"
    assert v["evidence"]["share_pct"]["data"] > 50
    assert a.step_source == "ProfilerStep" and len(a.steps) == 6
    # every fetch after the first step shows up as a dataloader gap in its own step
    per_step = a.steps.set_index("step")["idle_dataloader"]
    assert (per_step.iloc[1:] > 10_000_000).all()


def test_resnet50_num_workers_4_is_not_data_bound():
    a = _analysis(f"{SAMPLES}/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz")
    b = _analysis(f"{SAMPLES}/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert a.verdict["bound"] != "data"
    assert a.attribution["by_cpu"]["dataloader"] * 10 < b.attribution["by_cpu"]["dataloader"]
    assert set(a.attribution["by_cpu"]) == set(CPU_CATEGORIES)
