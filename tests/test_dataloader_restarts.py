"""DataLoader workers started again at each epoch (passes/dataloader.py) and the levers that
follow from the loader's evidence: persistent_workers only where a restart is seen, no worker
option for a loader without workers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import analysed, corpus_or_skip

import traceread
from traceread.passes.dataloader import worker_restarts

CPU = Path(__file__).parent / "fixtures" / "cpu"
RESTART = CPU / "workers_restart.json.gz"        # persistent_workers=False, 4 steps an epoch
PERSISTENT = CPU / "workers_persistent.json.gz"  # the same loop, persistent_workers=True


def _epoch_ends(ev):
    """From the trace itself: each DataLoader call followed by another with no operator
    between them but the new iterator's seed draw -- start of the first, start of the second."""
    calls = ev[ev["name"].astype(str).str.startswith("enumerate(DataLoader)#")].sort_values("ts")
    ops = ev[ev["kind"] == "cpu_op"]
    out = []
    for a, b in zip(calls.itertuples(), calls.iloc[1:].itertuples()):
        between = ops[(ops["ts"] >= a.ts + a.dur) & (ops["ts"] < b.ts)]["name"].astype(str)
        if "aten::random_" in set(between):
            out.append((a.ts, b.ts))
    return out


def test_restarts_are_the_epoch_ends_of_a_non_persistent_loader():
    ev = traceread.load(str(RESTART)).events
    r = worker_restarts(ev)
    expect = _epoch_ends(ev)
    assert len(expect) == 2
    assert r["restarts"] == 2 and r["spans"] == [[int(a), int(b)] for a, b in expect]
    assert r["restart_ns"] == sum(int(b - a) for a, b in expect)
    assert r["steps"] == [4, 8] and r["period"] == 4   # 64 samples, batch 16: 4 steps an epoch


def test_a_persistent_loader_shows_no_restart():
    # its epoch's last call and the next epoch's first have nothing between them (a reset)
    assert worker_restarts(traceread.load(str(PERSISTENT)).events) is None


def _actions(a) -> list[str]:
    return [x["id"] for x in a.verdict["actions"]]


def test_persistent_workers_offered_only_where_the_restart_is_seen():
    a = analysed(RESTART)
    assert "persistent_workers" in _actions(a)
    act = next(x for x in a.verdict["actions"] if x["id"] == "persistent_workers")
    assert "every 4 steps" in act["lever"]
    assert "persistent_workers" not in _actions(analysed(PERSISTENT))
    assert "prefetch_factor" not in _actions(a)


def test_the_model_removes_the_restarts_time_from_the_training_thread():
    from traceread.passes.replay import whatif as W

    a = analysed(RESTART)
    g, f = a.facts.graph, W.facts_from_analysis(a)
    r = W.replay_models(g, f, ["persistent_workers"])
    assert r["applied"] == ["persistent_workers"] and r["params"]["persistent_workers"]["restarts"] == 2
    spans = f.ctx["dataloader_restarts"]["spans"]
    n = g.nodes
    ts = n["ts_ns"].to_numpy(np.int64)
    inside = np.zeros(len(n), bool)
    for lo, hi in spans:
        inside |= (ts >= lo) & (ts < hi)
    # the nodes inside the restarts hold their whole time: the model takes exactly that
    assert abs(int(n["cost_ns"].to_numpy(np.int64)[inside].sum()) - sum(b - a for a, b in spans)) \
        < 0.01 * sum(b - a for a, b in spans)


def test_no_worker_options_for_a_loader_without_workers():
    # kineto's tb_plugin test trace: _SingleProcessDataLoaderIter (num_workers=0); torch
    # raises ValueError for persistent_workers=True or a prefetch_factor with num_workers=0
    path = corpus_or_skip() / "pytorch__kineto/tb_plugin/test/gpu_metrics_input.json"
    a = analysed(path)
    assert a.context["dataloader_single"] and not a.context["dataloader_workers"]
    ids = _actions(a) + [w["id"] for w in a.verdict.get("withdrawn") or []]
    assert "num_workers" in _actions(a)
    assert "persistent_workers" not in _actions(a) and "prefetch_factor" not in ids


def test_the_truth_beside_the_pair_says_the_restart_costs_what_the_trace_shows():
    # the unprofiled loop: restarting the workers every 4 steps costs ~30 ms an epoch; the
    # trace's restarts are 26 ms each -- the same order (the profiler adds its own)
    truth = json.loads((CPU / "truth.json").read_text())["workers_restart"]["step_ns"]
    per_epoch = (truth["restart"] - truth["persistent"]) * 4
    r = worker_restarts(traceread.load(str(RESTART)).events)
    each = r["restart_ns"] / r["restarts"]
    assert 0.5 * per_epoch < each < 1.5 * per_epoch


def test_diff_names_the_change_when_the_restarts_stop():
    from traceread.diffs.proof import changed

    base = {"loads_on_thread": False, "workers": True, "syncs_per_step": 0,
            "empty_cache_per_step": 0, "driver_allocs_per_step": 0, "graphs_not_replayed": False,
            "graphs_replayed": False, "recompiles": 0, "compiled": False,
            "fused_optimizer": False, "pageable_ns": 0, "exposed_copy_ns": 0, "lowp": False,
            "tf32": False, "layout_kernels_per_step": 0, "host_untraced_ns": 0, "step_ns": 1}
    got = changed(dict(base, worker_restarts=2), dict(base, worker_restarts=0))
    assert [m for m, _, _ in got] == ["persistent_workers"]
    assert changed(dict(base, worker_restarts=2), dict(base, worker_restarts=2)) == []


def test_the_restart_is_no_host_sync_and_no_movable_host_work():
    # the new iterator's seed .item() (a CPU tensor) read as "1 host sync" at each epoch
    # start and offered log_less; the fork and join frames as host work to move off the step
    # (pairs/persist: 4.8 ms a step) -- both are the loader's, which persistent_workers removes
    a = analysed(RESTART)
    odd = a.context["anatomy"]["odd_steps"]
    assert [g["steps"] for g in odd] == [[4, 8]]
    assert not any(h["what"] == "syncs" for h in odd[0]["holds"])
    assert "log_less_cpu" not in _actions(a)
    persist = analysed(Path(__file__).parent / "fixtures" / "pairs" / "persist.before.json.gz")
    assert _actions(persist)[0] == "persistent_workers" and "off_step_path" not in _actions(persist)


PAIRS = Path(__file__).parent / "fixtures" / "pairs"


def test_the_new_workers_start_up_is_part_of_the_restart():
    # pairs/persist BEFORE (2 workers, epochs of 4 batches): each epoch's first call waits
    # ~25.6 ms -- two `multiprocessing/process.py: start` frames in the restart, and worker
    # 0's second batch 9.4 ms after its first: a batch's load. The wait beyond it is the
    # workers' start-up, which persistent workers do not pay (AFTER's first waits: ~11.3 ms)
    ev = traceread.load(PAIRS / "persist.before.json.gz").events
    r = worker_restarts(ev)
    assert r["restarts"] == 2 and len(r["startup_spans"]) == 2
    first = [b for _, b in r["spans"]]
    assert [s for s, _ in r["startup_spans"]] == first   # each starts with the first call
    assert all(10e6 < e - s < 20e6 for s, e in r["startup_spans"])
    assert worker_restarts(traceread.load(PAIRS / "persist.after.json.gz").events) is None


def test_persistent_workers_promise_counts_the_start_up():
    # the unprofiled loop: 17.17 ms a step BEFORE, 5.97 ms AFTER (65.2 points); the restart
    # spans alone promised 48.3 points, with the start-up the replay promises ~67
    truth = json.loads((PAIRS / "truth.json").read_text())["persist"]["step_ns"]
    realised = 100 * (1 - truth["after"] / truth["before"])
    act = next(x for x in analysed(PAIRS / "persist.before.json.gz").verdict["actions"]
               if x["id"] == "persistent_workers")
    assert abs(act["saves_pct"] - realised) < 5
    assert "of their start-up in the first batch's wait" in act["lever"]
