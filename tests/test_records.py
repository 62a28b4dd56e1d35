"""A facts record leaves the process (issue 39): ``WindowFacts.to_json`` / ``from_json`` round
trip, ``decide`` judges a saved record to the same verdict (the replay's per-lever prices are
in it), and ``scripts/verdict_sweep.py --records`` re-judges a folder of saved records."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from traceread.passes.facts import WindowFacts
from traceread.verdict import decide

from conftest import analysed

FIX = Path(__file__).parent / "fixtures"


def _plain(v) -> dict:
    return json.loads(json.dumps(v, default=str))


@pytest.mark.parametrize("name", ["gpu/alloc.bad.json.gz", "gpu/graphs.fixed.json.gz"])
def test_a_saved_record_is_judged_to_the_same_verdict(name):
    a = analysed(FIX / name)
    text = a.facts.to_json()
    saved = WindowFacts.from_json(text)
    assert saved.graph is None and not saved.frames      # judged without the step graph
    assert saved.prices and saved.prices["models"]       # ... from the replay's prices
    assert _plain(decide(saved)) == _plain(a.verdict)
    assert saved.to_json() == WindowFacts.from_json(saved.to_json()).to_json()


def test_a_rule_change_rejudges_a_saved_record():
    a = analysed(FIX / "gpu" / "alloc.bad.json.gz")
    saved = WindowFacts.from_json(a.facts.to_json())
    saved.program["uses_cuda_graphs"] = True
    saved.program["graph_launches"] = saved.program["graph_replays"] = 6
    ids = [x["id"] for x in decide(saved)["actions"]]
    assert "cuda_graphs" not in ids and "graph_coverage_inference" in ids


@pytest.mark.parametrize("text", ["", "[]", '{"record": 99}', "not json"])
def test_not_a_record_is_one_clear_error(text):
    with pytest.raises(ValueError):
        WindowFacts.from_json(text)


def test_the_sweep_rejudges_saved_records(capsys):
    spec = importlib.util.spec_from_file_location(
        "verdict_sweep", Path(__file__).parents[1] / "scripts" / "verdict_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--records", str(FIX / "records"), "--ids"]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == len(list((FIX / "records").glob("*.facts.json.gz")))
    line = next(x for x in lines if x.endswith("| compiled_once"))
    assert "compiled_call_once" in line and "-compiled_call" in line
    assert "records judged in" in out.err
