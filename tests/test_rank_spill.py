"""A rank's interval arrays spilled to a file (jobs/multirank/spill.py): the cross-rank
pass gives the same job with the arrays on disk as in memory, the batch parent keeps
only a small record per rank, and the files go with their last reader."""
from __future__ import annotations

import gc
import os
import pickle

import numpy as np

import traceread
import traceread.jobs.multirank as mr
from traceread.jobs.multirank.job import analyze_job
from traceread.jobs.multirank.spill import SpilledMap, SpilledPair, spill
from traceread.readers.nsys_split import split_processes
from traceread.synth.multirank import JobSpec, make_job, write_nsys_gloo_job

MS = 1_000_000


def _inputs(traces):
    return [mr.rank_input(t) for t in traces]


def _same_job(a, b):
    """Every figure of two JobResults (frames, straggler with its why, inferred, verdict)."""
    assert a.matches.equals(b.matches) and a.per_rank.equals(b.per_rank)
    assert a.steps.equals(b.steps)
    assert repr(a.straggler) == repr(b.straggler)
    assert repr(a.inferred) == repr(b.inferred)
    assert repr(a.verdict()) == repr(b.verdict())
    assert repr(a.groups) == repr(b.groups) and repr(a.seed) == repr(b.seed)


def test_spilled_job_equals_in_memory_matched_straggler():
    spec = JobSpec(ranks=4, slow_rank=2, with_seq=False, cause="dataloader", delay_ns=4 * MS,
                   clock_offset_ns=[0, 20 * MS, -15 * MS, 7 * MS])
    traces = make_job(spec)
    mem = analyze_job(_inputs(traces))
    spilled = _inputs(traces)
    assert all(spill(i, min_bytes=0) for i in spilled)
    assert all(isinstance(i.activity, SpilledMap) and isinstance(i.gpu_compute, SpilledPair)
               for i in spilled)
    res = analyze_job(spilled)
    assert res.straggler["why"]["cause"] == "dataloader"
    _same_job(mem, res)


def test_spilled_job_equals_in_memory_inferred_from_waits(tmp_path):
    path, truth = write_nsys_gloo_job(tmp_path / "gloo.sqlite")
    traces = split_processes(traceread.load(str(path)))
    mem = analyze_job(_inputs(traces))
    spilled = _inputs(traces)
    for i in spilled:
        assert spill(i, min_bytes=0)
    res = analyze_job(spilled)
    assert res.inferred["rank"] == truth["straggler"] and res.inferred["cause"] == "sleep"
    _same_job(mem, res)


def test_spilled_arrays_are_the_arrays_and_pickle_back_to_memory():
    traces = make_job(JobSpec(ranks=2, slow_rank=1, with_seq=False, steps=3))
    ri = mr.rank_input(traces[0])
    act = {k: (s.copy(), e.copy()) for k, (s, e) in ri.activity.items()}
    comp = tuple(x.copy() for x in ri.gpu_compute)
    waits = dict(ri.waits)
    assert spill(ri, min_bytes=0) and not spill(ri, min_bytes=0)   # once
    assert list(ri.activity) == list(act)
    for k, (s, e) in act.items():
        got = ri.activity[k]
        assert got[0].dtype == s.dtype and np.array_equal(got[0], s) and np.array_equal(got[1], e)
    assert ri.activity.get("no such category", 7) == 7
    assert all(np.array_equal(a, b) for a, b in zip(ri.gpu_compute, comp))
    assert ri.waits["wait_names"] == waits["wait_names"] and list(ri.waits) == list(waits)
    back = pickle.loads(pickle.dumps(ri))
    assert type(back.activity) is dict and type(back.gpu_compute) is tuple
    assert type(back.waits) is dict
    assert all(np.array_equal(back.activity[k][0], act[k][0]) for k in act)


def test_small_records_stay_in_memory_and_files_go_with_their_readers():
    traces = make_job(JobSpec(ranks=2, slow_rank=1, with_seq=False, steps=3))
    ri = mr.rank_input(traces[0])
    assert not spill(ri)                     # a few KB: not worth a file
    assert type(ri.activity) is dict
    assert spill(ri, min_bytes=0)
    path = ri.activity._file.path
    folder = os.path.dirname(path)
    assert os.path.isfile(path)
    del ri
    gc.collect()
    assert not os.path.exists(path) and not os.path.exists(folder)


def test_batch_parent_keeps_spilled_records(tmp_path, monkeypatch):
    from traceread.jobs import batch
    from traceread.jobs.multirank import spill as spill_mod

    traces = make_job(JobSpec(ranks=3, slow_rank=1, with_seq=False, steps=4))
    from traceread.synth.kineto import write_kineto

    for t in traces:
        write_kineto(t, tmp_path / f"rank-{t.meta.rank}.json")
    paths = sorted(str(p) for p in tmp_path.glob("rank-*.json"))
    plain = batch.assemble([batch.analyze_file(p) for p in paths])
    monkeypatch.setattr(spill_mod, "SPILL_MIN_BYTES", 0)
    results = [batch.kept(batch.analyze_file(p)) for p in paths]
    assert all(isinstance(r["rank_input"].activity, SpilledMap) for r in results)
    assert all(r["member"]["input"] is r["rank_input"] for r in results)
    res = batch.assemble(results)
    assert res.ranks.equals(plain.ranks) and res.matches.equals(plain.matches)
    assert repr(res.jobs[0].verdict()) == repr(plain.jobs[0].verdict())


def test_a_full_disk_keeps_the_rank_in_memory_and_leaves_no_file(tmp_path, monkeypatch):
    """A spill that cannot be written (no room, no temporary folder) keeps the rank's arrays
    in memory: the batch goes on with every rank's result, and no half-written file stays."""
    import traceread.jobs.multirank.spill as S

    traces = make_job(JobSpec(ranks=2, slow_rank=1, with_seq=False, steps=3))
    ri = mr.rank_input(traces[0])
    act = {k: (s.copy(), e.copy()) for k, (s, e) in ri.activity.items()}
    monkeypatch.setattr(S.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(S, "_folder_ref", None)

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(S.np, "savez", full)
    assert not spill(ri, min_bytes=0)
    assert type(ri.activity) is dict and type(ri.gpu_compute) is tuple
    assert all(np.array_equal(ri.activity[k][0], act[k][0]) for k in act)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
