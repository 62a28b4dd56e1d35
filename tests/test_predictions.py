"""Predictions that hold (issue 37b): the profiler's cost set apart, no price from a replay
that did not settle, host time that belongs to the removed ops, and the replay tested on
steps it did not see."""
from __future__ import annotations

import json
import lzma
import statistics

import pandas as pd
import pytest

import traceread
from traceread.analysis import analyze
from traceread.passes import overhead as O
from traceread.passes.replay import holdout as H
from traceread.passes.replay import whatif as W
from traceread.synth.scenarios import US, TraceBuilder
from traceread.verdict.whatif import bound_reasons

from conftest import FIXTURES, analysed
from test_replay import sync_loop

GPU = FIXTURES / "gpu"


def _host_loop(steps: int = 4, ops: int = 200, shapes: bool = False):
    """Host-only steps of 1 ms, each ``ops`` back-to-back 3 us ops 1 us apart."""
    b = TraceBuilder()
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        for i in range(ops):
            cols = {"input_dims": "[[4], [4]]"} if shapes else {}
            b.cpu("aten::add", t + 10 * US + i * 4 * US, 3 * US, **cols)
    return b.build()


def test_host_only_step_loses_the_cost_of_its_ops():
    plain = analyze(_host_loop(), steps="all").facts.figures["profiler_overhead"]
    assert plain["basis"] == "host ops" and plain["busiest_thread_ops_per_step"] == 200
    assert plain["profiled_step_ns"] - plain["unprofiled_step_ns"] == 200 * O.PER_OP_NS
    shaped = analyze(_host_loop(shapes=True), steps="all").facts.figures["profiler_overhead"]
    assert shaped["record_shapes"] and not shaped["with_stack"]
    assert shaped["overhead_step_ns"] == 200 * (O.PER_OP_NS + O.SHAPES_NS)
    assert shaped["floor_spacing_ns"] == 1 * US


def _plain_step(name: str) -> float:
    st = json.loads((GPU / f"{name}.plain.truth.json").read_text())["step_ns"]
    return statistics.median(v for k, v in st.items() if int(k) >= 2)


@pytest.mark.parametrize("name", ["launch.bad", "sync.bad", "launch.fixed"])
def test_unprofiled_estimate_is_nearer_the_unprofiled_run(name):
    """H100 recordings with unprofiled timings: the estimate lies nearer the plain run's
    step than the profiled step does (launch.fixed: a CUDA graph of 600 kernels, whose
    launch CUPTI slows by ~1.2 us a kernel)."""
    o = analysed(GPU / f"{name}.json.gz").facts.figures["profiler_overhead"]
    truth = _plain_step(name)
    assert o["basis"] == "replay" and o["material"]
    assert abs(o["unprofiled_step_ns"] - truth) < abs(o["profiled_step_ns"] - truth)
    assert abs(o["unprofiled_step_ns"] - truth) / truth < 0.10


def test_gpu_bound_step_keeps_its_length():
    """The GPU sets the pace: the host's shorter ops give nothing back."""
    a = analysed(GPU / "gpu.bad.json.gz")
    o = a.facts.figures["profiler_overhead"]
    assert o["profiler_host_ns_per_step"] > 0
    assert o["overhead_pct"] < 1.0 and not o["material"]
    assert a.replay["profiler_overhead"] == o


def test_levers_are_priced_without_the_profiler_where_it_is_material():
    a = analysed(GPU / "launch.bad.json.gz")
    p = W.price_models(a.facts.graph, dict(a.context), a.copies)
    assert p["profiled_before_ns"] is not None and p["before_ns"] < p["profiled_before_ns"]
    assert "Profiler: profiled" in a.report("text")


def _cycle(graph):
    """The graph with two host nodes waiting on each other, 1 us apart: no schedule."""
    g = graph.copy()
    n = g.nodes
    host = n.index[(n["kind"] == "host").to_numpy()][:2]
    a_, b_ = n.loc[host, "id"].tolist()
    g.edges = pd.concat([g.edges, pd.DataFrame({"src": [a_, b_], "dst": [b_, a_],
                                                "kind": "event_wait", "lag_ns": 1_000})],
                        ignore_index=True)
    return g


def test_no_price_from_a_replay_that_did_not_settle():
    """Issue 37: a replay that did not converge still priced CUDA graphs (78-92% of the
    step, ranked first). Every model now refuses, and the verdict says why the levers
    kept their bounds."""
    a = analyze(sync_loop(), steps="all")
    bad = _cycle(a.replay_graph)
    from traceread.passes.replay import simulate

    assert not simulate(bad).converged
    p = W.price_models(bad, dict(a.context), a.copies)
    for r in p["models"].values():
        assert not r["applied"] and r["saves_ns"] == 0
        assert all("did not settle" in why for why in r["refused"].values())
    ctx = {"replay_levers": p}
    why = bound_reasons(ctx, [{"id": "cuda_graphs", "basis": "bound"},
                              {"id": "remove_syncs", "basis": "replay"}], a.replay)
    assert list(why) == ["cuda_graphs"] and "did not settle" in why["cuda_graphs"]


def test_unsettled_window_replay_gives_no_graph(monkeypatch):
    from traceread.passes import replay as R

    real = R.simulate

    def unsettled(g, **kw):
        s = real(g, **kw)
        s.converged = False
        return s

    monkeypatch.setattr(R, "simulate", unsettled)
    a = analyze(sync_loop(), steps="all")
    assert a.replay["replayable"] is False and "did not settle" in a.replay["reason"]
    assert a.replay_graph is None and a.facts.graph is None
    priced = [x for x in a.verdict["actions"] if x.get("basis") == "replay"]
    assert not priced


def test_held_out_identical_steps_are_predicted_exactly():
    a = analyze(sync_loop(6), steps="all")
    rows = H.leave_one_out(a.replay_graph)
    assert len(rows) == 6
    assert all(r["predicted_ns"] == r["measured_ns"] == 1000 * US for r in rows)


def test_held_out_lag_belongs_to_its_edge():
    """A pageable copy's call returns after its copy began (launch lag -8 ms), a kernel's
    5 us after: the held-out step's lags are learnt per edge, not per kind (the median
    launch lag doubled the copy step: 19 ms for 10.9 ms)."""
    a = analysed(GPU / "copy.bad.json.gz")
    sc = H.score(H.leave_one_out(a.replay_graph))
    assert sc["replay_error_pct"] < 2.0


def _nsys_like_item(steps: int = 4):
    """Runtime calls only (no op ranges, as an nsys capture): per step a matmul, then the
    value an .item() reads -- abs (elementwise), a memset and a sum (reduction) -- its DtoH
    copy and the sync, then 30 us of Python and the next matmul."""
    b = TraceBuilder()
    red = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(float*)"
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor>(float*)"
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 20 * US, 300 * US, name="ampere_sgemm_128x64_nn")
        b.launch(t + 30 * US, 5 * US, t + 320 * US, 10 * US, name=ew)
        b.launch(t + 45 * US, 5 * US, t + 330 * US, 2 * US, name="[CUDA memset]",
                 api="cudaMemsetAsync", kind="memset")
        b.launch(t + 60 * US, 5 * US, t + 335 * US, 10 * US, name=red)
        b.launch(t + 75 * US, 5 * US, t + 345 * US, 2 * US,
                 name="Memcpy DtoH (Device -> Pinned)", api="cudaMemcpyAsync", kind="memcpy",
                 copy_kind="DtoH", bytes=4)
        b.runtime("cudaStreamSynchronize", t + 85 * US, 270 * US)
        b.launch(t + 385 * US, 5 * US, t + 395 * US, 300 * US, name="ampere_sgemm_128x64_nn")
        b.runtime("cudaDeviceSynchronize", t + 395 * US, 305 * US)
    return b.build()


def test_removed_sync_takes_the_reduction_it_read_where_no_op_is_named():
    """Issue 37: on the nsys capture of the per-layer .item() pair the sync lever promised
    21% where the change realised 52%: the reduction computing the value and the host time
    around the calls stayed. Its launches, the copy, the sync and the Python before the
    copy now go; the matmuls stay."""
    a = analyze(_nsys_like_item(), steps="all")
    g = a.replay_graph
    out = W.drop_syncs(g.copy(), W.Facts(), {})
    n = out.nodes
    name = n["name"].astype(str)
    gpu_cost = lambda rx: n.loc[name.str.contains(rx).to_numpy() & (n["kind"] != "launch")
                                .to_numpy() & n["kind"].str.startswith("gpu").to_numpy(),
                                "cost_ns"]
    assert (gpu_cost("reduce_kernel") == 0).all() and (gpu_cost("Abs") == 0).all()
    assert (gpu_cost("sgemm") == 300 * US).all()
    calls = n[(n["kind"] != "host") & name.str.startswith("cuda").to_numpy()]
    gone = set(calls.loc[calls["cost_ns"] == 0, "name"])
    assert {"cudaMemcpyAsync", "cudaStreamSynchronize", "cudaMemsetAsync"} <= gone


@pytest.mark.slow
def test_nsys_and_kineto_captures_promise_the_same_sync_saving(tmp_path):
    """One run, two tracers (gpu/sync): the sync lever's promise on each capture of BAD
    within 5 points (was 55% on Kineto, 21% on nsys)."""
    db = tmp_path / "sync.bad.sqlite"
    db.write_bytes(lzma.open(GPU / "sync.bad.sqlite.xz").read())
    pts = []
    for path in (GPU / "sync.bad.json.gz", db):
        a = traceread.analyze(str(path))
        g, _ = W.graph_of(a)
        base, _, _ = W.unprofiled_base(g)
        r = W.replay_models(base, W.facts_from_analysis(a), ["drop_syncs"])
        pts.append(100 * r["saves_ns"] / r["before_ns"])
    assert abs(pts[0] - pts[1]) <= 5, pts


def test_validation_tables_print_every_row_and_the_goals():
    """The benchmark's tables (benchmarks whatif --validate) show every pair, refused or
    not, and the summary lines against the issue's goals."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.whatif import validation_tables

    r = {"pairs": [
        {"pair": "gpu/sync", "format": "kineto", "levers": "drop_syncs", "promise_pts": 55.0,
         "realised_pts": 52.0, "truth": "unprofiled", "error_pts": 3.0, "after_pred_ms": 1.7,
         "after_ms": 1.71, "after_err_pct": -0.6, "after_u_pred_ms": 1.49, "after_u_ms": 1.59,
         "after_u_err_pct": -6.3, "first": "remove_syncs", "first_fixes": True},
        {"pair": "gpu/data", "format": "nsys", "note": "no change found in the traces"}],
        "loso": [{"trace": "a.json.gz", "steps": 3, "replay_error_pct": 1.0,
                  "baseline_error_pct": 2.0, "beats_baseline": True},
                 {"trace": "b.json.gz", "note": "no graph"}],
        "nsys_kineto": [{"pair": "gpu/sync", "levers": "drop_syncs", "kineto_pts": 55.0,
                         "nsys_pts": 58.2, "nsys_refused": {}}],
        "overhead": [{"trace": "gpu/sync.bad", "truth_ns": 3.3e6, "profiled_ns": 3.6e6,
                      "estimate_ns": 3.45e6, "basis": "replay"}]}
    out = validation_tables(r)
    assert "| gpu/data | nsys | — |" in out and "no change found" in out
    assert "median 3.0 points, worst 3.0 points over 1 pairs" in out
    assert "beats the baseline on 1 of 1 traces" in out
    assert "within 5 points on 1 of 1" in out
    assert "| gpu/sync.bad | 3.600 ms | 3.450 ms | 3.300 ms | +4.5% | +9.1% |" in out


def test_capture_whose_replay_does_not_settle_keeps_its_bound_and_says_why():
    """gpu/data.fixed: capturing the step in a CUDA graph makes a dependency cycle; the
    lever was priced from that unsettled replay before, now it keeps its bound and the
    verdict says why."""
    a = analysed(GPU / "data.fixed.json.gz")
    acts = {x["id"]: x for x in a.verdict["actions"]}
    assert acts["cuda_graphs"]["basis"] == "bound"
    assert "did not settle" in a.verdict["evidence"]["levers_on_bounds"]["cuda_graphs"]


def test_pageable_copy_read_from_the_copy_facts_where_its_name_has_no_memory_kind():
    """nsys names a copy ``[CUDA memcpy Host-to-Device]`` and keeps pageable vs pinned
    apart (the copy pass reads it): pin_copies refused every nsys capture ("no pageable
    copy") where the Kineto capture of the same run promised 81%. A direction the copy
    facts found pageable throughout is priced; one with a pinned copy is not."""
    def graph(call_us: int):
        b = TraceBuilder()
        for k in range(3):
            t = 1_000_000 + k * 1000 * US
            b.step(k, t, 1000 * US)
            b.launch(t + 10 * US, call_us * US, t + 15 * US, 400 * US,
                     name="[CUDA memcpy Host-to-Device]", api="cudaMemcpyAsync", kind="memcpy",
                     copy_kind="HtoD", bytes=2_000_000)
            b.launch(t + 420 * US, 5 * US, t + 430 * US, 300 * US, name="ampere_sgemm_128x64_nn")
            b.runtime("cudaDeviceSynchronize", t + 430 * US, 305 * US)
        return analyze(b.build(), steps="all").replay_graph

    g = graph(5)   # each call returns at once: nothing in the events says what memory
    copies = {"pinned_gbps": 20.0, "by_direction": [
        {"direction": "HtoD", "count": 3, "pageable": 3, "gbps": 5.0}]}
    out = W.pin_copies(g.copy(), W.Facts(copies=copies), {})
    assert not isinstance(out, str)
    n = out.nodes
    cp = n[(n["kind"] == "gpu_copy").to_numpy()]
    assert (cp["cost_ns"] == 100 * US).all()   # 400 us x 5 / 20 GB/s
    mixed = {**copies, "by_direction": [{"direction": "HtoD", "count": 3, "pageable": 2,
                                         "gbps": 5.0}]}
    assert W.pin_copies(g.copy(), W.Facts(copies=mixed), {}) == \
        "no pageable copy in the replayed steps"
    # each call held the host through its 2 MB copy: it staged it (copy_staging), the
    # events' own proof of pageable memory, whatever the direction's counts say
    assert not isinstance(W.pin_copies(graph(405).copy(), W.Facts(copies=mixed), {}), str)


def _bench_whatif():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.whatif as B
    return B


def test_plain_run_step_is_the_later_of_host_and_gpu(tmp_path):
    """h200/queue.fixed's host queues a step in ~10.7 ms and runs ahead; its GPU finishes one
    every ~11.57 ms (the nsys capture of the same plain run). The program's step is the
    GPU's; a host-bound run (gpu/sync.bad) keeps its host step."""
    B = _bench_whatif()
    cache = {}

    def analysis(p):
        return cache.setdefault(p, traceread.analyze(str(p)))

    def nsys(folder, name, variant):
        return lambda: B._nsys_of(folder, name, variant, tmp_path, analysis)

    host_only = B._unprofiled("h200", "queue", "fixed")
    step = B._unprofiled("h200", "queue", "fixed", nsys("h200", "queue", "fixed"))
    assert 10.5e6 < host_only < 10.9e6
    assert 11.5e6 < step < 11.65e6
    sync = B._unprofiled("gpu", "sync", "bad", nsys("gpu", "sync", "bad"))
    assert sync == B._unprofiled("gpu", "sync", "bad")


def test_first_lever_not_counted_where_the_change_realised_nothing():
    B = _bench_whatif()
    row = {"format": "kineto", "levers": "drop_syncs", "promise_pts": 0.2, "truth": "unprofiled",
           "error_pts": 0.2, "first_fixes": False, "fix_rank": None, "fix": None}
    r = {"pairs": [dict(row, pair="pairs/item", realised_pts=0.0, first="larger_batch"),
                   dict(row, pair="gpu/sync", realised_pts=52.0, promise_pts=55.0,
                        first="remove_syncs", first_fixes=True)],
         "loso": [], "nsys_kineto": [], "overhead": [], "tables": "a"}
    out = B.validation_tables(r)
    assert "larger_batch (n/a: the change realised under 1 point)" in out
    assert "the change's lever first on 1 of 1" in out


def test_a_pair_whose_only_change_is_the_anatomys_gets_its_promise():
    """pairs/valid (a validation after every step -> after every 4th): the validation table
    said "no change found in the traces"; it prices the anatomy change with BEFORE's own
    saving model (3/4 of the every-step validation) and takes the realised saving from the
    unprofiled truth."""
    import traceread
    from traceread.diffs.proof import changed, signature
    from traceread.diffs.trace import diff_analyses
    from traceread.passes.replay import whatif as W
    from traceread.verdict.anatomy import anatomy_changes

    B = _bench_whatif()
    p = B.FIX / "pairs"
    before = traceread.analyze(str(p / "valid.before.json.gz"))
    after = traceread.analyze(str(p / "valid.after.json.gz"))
    row = B._pair_row(before, after, "pairs", "valid", "before", "after", "kineto", W, changed,
                      signature, diff_analyses)
    assert row["levers"] == "validate_less" and row["basis"] == "anatomy"
    # priced without the profiler, as the replay rows are
    from traceread.passes.anatomy import without_profiler
    cb, ca = ({**x.context, "anatomy": without_profiler(x.context["anatomy"])}
              for x in (before, after))
    (ch,) = anatomy_changes(cb, ca)
    assert row["promise_pts"] == round(100.0 * ch["promised_per_step_ns"] /
                                       cb["anatomy"]["mean_step_ns"], 1)
    assert row["unprofiled_base"] is True
    t = json.loads((p / "truth.json").read_text())["valid"]["step_ns"]
    assert row["realised_pts"] == round(100.0 * (t["before"] - t["after"]) / t["before"], 1)
    assert row["truth"] == "unprofiled"
    # the change's lever is the CPU twin's on this CPU-only trace: it counts as the change's
    assert row["fix"] == "validate_less_cpu" and row["fix_rank"] is not None
