"""The batch parent while local workers run: no pandas / numpy / pyarrow, only each file's
summary row; the whole results come back from the workers' files once all are done, the
same as analysing each file here, and one unreadable result file costs only its own row."""
import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from traceread.jobs import batch
from traceread.synth.multirank import JobSpec, write_job

SPEC = JobSpec(ranks=2, slow_rank=1, delay_ns=2_500_000, steps=3, step_skew_ns=100_000)
SRC = str(Path(batch.__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    write_job(root, SPEC)
    return sorted(str(p) for p in root.iterdir())


def _python(code: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_parent_holds_rows_only_while_workers_run_and_a_bad_result_file_costs_its_row(ranks):
    code = """
import json, sys
from pathlib import Path
from traceread.jobs import batch
heavy = ("pandas", "numpy", "pyarrow")
seen, spoiled = [], []
def note(res):
    seen.append({"loaded": [m for m in heavy if m in sys.modules], "keys": sorted(res),
                 "types": sorted({type(v).__name__ for v in res["row"].values()})})
    if not spoiled:   # the first file's result, overwritten before the parent reads it
        Path(res["spool"]).write_bytes(b"not a pickle")
        spoiled.append(res["row"]["file"])
res = batch.run_local(sys.argv[1:], jobs=2, on_result=note)
print(json.dumps({"seen": seen, "spoiled": spoiled[0], "rows": [r["row"] for r in res],
                  "tables": [sorted(r["tables"]) for r in res],
                  "inputs": [r["rank_input"] is not None for r in res]}))
"""
    out = json.loads(_python(code, *ranks).splitlines()[-1])
    assert len(out["seen"]) == len(ranks)
    for s in out["seen"]:
        assert s["loaded"] == [] and s["keys"] == ["file_bytes", "row", "spool"]
        assert set(s["types"]) <= {"str", "int", "float", "NoneType"}
    for row, tables, has_input in zip(out["rows"], out["tables"], out["inputs"]):
        if row["file"] == out["spoiled"]:
            assert row["error"].startswith("worker failed: UnpicklingError")
            assert tables == [] and not has_input
        else:
            assert row["error"] is None and row["verdict"]
            assert "steps" in tables and "collectives" in tables and has_input


def test_results_from_the_workers_files_are_the_files_analysed_here(ranks):
    pooled = batch.run_local(ranks, jobs=2)
    here = [batch.kept(batch.analyze_file(p)) for p in ranks]
    for a, b in zip(pooled, here):
        assert {k: v for k, v in a["row"].items() if k != "seconds"} == \
            {k: v for k, v in b["row"].items() if k != "seconds"}
        assert sorted(a["tables"]) == sorted(b["tables"])
        for name in a["tables"]:
            pd.testing.assert_frame_equal(a["tables"][name], b["tables"][name])
        assert a["file_bytes"] == b["file_bytes"] and a["verdict"] == b["verdict"]
    one, two = batch.assemble(pooled), batch.assemble(here)
    pd.testing.assert_frame_equal(one.ranks, two.ranks)
    pd.testing.assert_frame_equal(one.matches, two.matches)
    assert one.jobs[0].verdict() == two.jobs[0].verdict()
    assert one.jobs[0].straggler == two.jobs[0].straggler


def test_no_room_for_the_result_file_sends_it_whole(ranks, tmp_path):
    recv, send = mp.Pipe(duplex=False)
    batch._child(send, ranks[0], None, str(tmp_path / "missing" / "0.pickle"))
    whole = recv.recv()
    assert "spool" not in whole and "steps" in whole["tables"] and whole["rank_input"] is not None
    recv, send = mp.Pipe(duplex=False)
    spool = tmp_path / "0.pickle"
    batch._child(send, ranks[0], None, str(spool))
    msg = recv.recv()
    assert sorted(msg) == ["file_bytes", "row", "spool"] and spool.is_file()
    back = batch._unspool(msg, ranks[0])
    assert not spool.exists() and sorted(back["tables"]) == sorted(whole["tables"])


def test_the_forkserver_preloads_what_a_worker_imports(ranks):
    """A module a worker imports itself is private to that worker; the preload list
    (``batch.WORKER_PRELOAD``) must name every traceread module that analysing a
    rank's trace loads."""
    code = """
import json, sys
from traceread.jobs.batch import WORKER_PRELOAD, analyze_file
for m in WORKER_PRELOAD[:-1]:
    __import__(m)
before = set(sys.modules)
assert analyze_file(sys.argv[1])["row"]["error"] is None
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("traceread"))))
"""
    assert json.loads(_python(code, ranks[0]).splitlines()[-1]) == []


def test_no_temporary_folder_sends_every_result_whole(ranks, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError("no temporary folder")

    with monkeypatch.context() as m:   # (multiprocessing needs one for its own socket)
        m.setattr(batch.tempfile, "mkdtemp", refuse)
        assert batch._spool_folder() is None
    monkeypatch.setattr(batch, "_spool_folder", lambda: None)
    seen = []
    res = batch.run_local(ranks, jobs=2, on_result=lambda r: seen.append(sorted(r)))
    assert all("spool" not in keys and "tables" in keys for keys in seen)
    assert all(r["row"]["error"] is None and "steps" in r["tables"] for r in res)
