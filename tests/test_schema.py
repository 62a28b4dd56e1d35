"""Every command's JSON validates against the published schema (docs/schema/), generated from code."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from traceread import schema
from traceread.cli import main
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import MS, dataloader_bound, item_sync_bound

from conftest import FIXTURES

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "docs" / "schema"
TRACES = [FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz",           # NCCL, real
          FIXTURES / "kineto" / "tracelens_torch_compile_triton.json.gz",  # torch.compile, real
          FIXTURES / "nsys" / "mock.sqlite"]                             # nsys, no steps
COMMANDS = {
    "analyze": ["analyze", "--format", "json"], "steps": ["steps", "--format", "json"],
    "idle": ["idle", "--format", "json", "--min-gap", "10us"], "nccl": ["nccl", "--format", "json"],
    "compile": ["compile", "--events", "--format", "json"], "info": ["info", "--format", "json"],
    "kernels": ["kernels", "--format", "json"], "api": ["api", "--format", "json"],
    "gaps": ["gaps", "--format", "json", "--min-gap", "0"],
    "memcpy": ["memcpy", "--format", "json"], "nvtx": ["nvtx", "--format", "json"],
    "osrt": ["osrt", "--format", "json"], "util": ["util", "--format", "json"],
}
NSYS_ROWS = [FIXTURES / "nsys" / "concurrent_profile1.sqlite",  # memcpy, nvtx, util rows
             FIXTURES / "nsys" / "ex-gpu.s10.sqlite"]           # osrt rows


def _validator(command: str) -> jsonschema.Draft202012Validator:
    doc = json.loads((SCHEMA_DIR / f"{command}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc)


def _run(*args) -> object:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("command", sorted(schema.DOCUMENTS))
def test_published_schema_is_generated_from_the_code(command):
    on_disk = json.loads((SCHEMA_DIR / f"{command}.schema.json").read_text())
    assert on_disk == json.loads(json.dumps(schema.json_schema(command))), \
        "docs/schema is stale: run `python -m traceread.schema docs/schema`"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_output_validates(command):
    v = _validator(command)
    rows = 0
    for trace in TRACES + NSYS_ROWS:
        doc = _run(*COMMANDS[command], trace)
        v.validate(doc)
        schema.check(command, doc)
        if command in schema.PER_TRACE:
            assert doc["schema_version"] == schema.SCHEMA_VERSION
        else:  # nsys's list of rows, kept; every row versioned
            assert isinstance(doc, list)
            assert all(next(iter(r)) == "schema_version" and r["schema_version"] ==
                       schema.SCHEMA_VERSION for r in doc)
            rows += len(doc)
    assert command in schema.PER_TRACE or rows


@pytest.mark.parametrize("command", sorted(schema.PER_TRACE))
def test_one_shape_per_number_of_inputs(command, tmp_path):
    """One TRACE argument: the object. Several: {schema_version, traces} (analyze: with
    cross_rank, null for unrelated traces) -- also when only one of them loaded."""
    one = _run(*COMMANDS[command], TRACES[1])
    assert isinstance(one, dict) and "traces" not in one
    two = _run(*COMMANDS[command], TRACES[1], TRACES[2])
    keys = ["schema_version"] + (["cross_rank"] if command == "analyze" else []) + ["traces"]
    assert list(two) == keys and two["schema_version"] == schema.SCHEMA_VERSION
    assert len(two["traces"]) == 2 and two.get("cross_rank") is None
    missing = tmp_path / "missing.json"
    r = CliRunner().invoke(main, [*COMMANDS[command], str(TRACES[1]), str(missing)])
    assert r.exit_code == 1
    partial = json.loads(r.stdout)
    assert list(partial) == keys and len(partial["traces"]) == 1
    for doc in (one, two, partial):
        _validator(command).validate(doc)
        schema.check(command, doc)


def test_ranks_of_a_job_validate():
    from traceread.examples import path as example

    doc = _run(*COMMANDS["analyze"], example(), TRACES[0])  # ranks 0 and 1 of one job
    assert doc["schema_version"] == schema.SCHEMA_VERSION and doc["cross_rank"]
    assert len(doc["traces"]) == 2
    _validator("analyze").validate(doc)
    schema.check("analyze", doc)


def test_planted_scenarios_validate(tmp_path):
    v = _validator("analyze")
    for make in (dataloader_bound, item_sync_bound):
        trace, _ = make()
        p = tmp_path / "t.json"
        write_kineto(trace, p)
        v.validate(_run(*COMMANDS["analyze"], p))


def test_diff_validates(tmp_path):
    paths = []
    for name, period in (("before", 50 * MS), ("after", 40 * MS)):
        trace, _ = dataloader_bound(period=period, fetch=20 * MS)
        d = tmp_path / name
        d.mkdir()
        write_kineto(trace, d / "rank-0.json")
        paths.append(d)
    v = _validator("diff")
    single = _run("diff", paths[0] / "rank-0.json", paths[1] / "rank-0.json", "--format", "json")
    v.validate(single)
    assert single["schema_version"] == schema.SCHEMA_VERSION
    v.validate(_run("diff", *paths, "--format", "json"))  # directories: with pairs
    v.validate(_run("diff", TRACES[0], TRACES[2], "--format", "json"))  # steps vs no steps


def test_every_command_has_a_schema():
    from traceread.cli import main as cli

    json_commands = {name for name, cmd in cli.commands.items()
                     if any(o.name == "fmt" and "json" in getattr(o.type, "choices", ())
                            for o in cmd.params)}
    assert json_commands <= set(schema.DOCUMENTS) and json_commands <= set(COMMANDS) | {"diff"}


def test_the_schema_rejects_drift():
    doc = _run(*COMMANDS["idle"], TRACES[0])
    doc["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        _validator("idle").validate(doc)
    doc.pop("surprise")
    doc["gaps"][0]["duration_ns"] = "12 ms"
    with pytest.raises(jsonschema.ValidationError):
        _validator("idle").validate(doc)


def test_kernels_command_and_analyze_agree():
    """Same figures under nsys's column names (kernels) and snake_case (analyze)."""
    rows = _run(*COMMANDS["kernels"], TRACES[0])
    top = _run(*COMMANDS["analyze"], TRACES[0])["kernels"]
    assert len(top) == min(20, len(rows))
    for k, r in zip(top, rows):
        assert (k["name"], k["total_ns"], k["instances"], k["min_ns"], k["max_ns"]) == \
            (r["Name"], r["Total Time (ns)"], r["Instances"], r["Min (ns)"], r["Max (ns)"])


def test_nccl_command_and_analyze_agree():
    n = _run(*COMMANDS["nccl"], TRACES[0])
    a = _run(*COMMANDS["analyze"], TRACES[0])["nccl"]
    assert (n["comm_ns"], n["exposed_ns"]) == (a["comm_ns"], a["exposed_ns"])
    assert n["devices"] == a["devices"] and n["collectives"] == a["by_collective"]


@pytest.mark.slow
def test_every_corpus_trace_validates(corpus_dir):
    """analyze --format json of every trace in the corpus matches the published schema."""
    import csv

    import traceread
    from traceread.errors import TraceError

    v = _validator("analyze")
    rows = list(csv.DictReader((corpus_dir / "MANIFEST.tsv").open(), delimiter="\t"))
    checked = 0
    for r in rows:
        if not r["kind"].startswith(("kineto", "nsys")) or int(r["bytes"] or 0) > 200 << 20:
            continue
        try:
            a = traceread.analyze(str(corpus_dir / r["local_path"]))
        except TraceError:
            continue  # unreadable inputs are the readers' tests' business
        v.validate(json.loads(json.dumps(schema.versioned(a.to_dict()))))
        checked += 1
    assert checked > 20
