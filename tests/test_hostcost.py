"""The host cost per op (passes/replay/hostcost.py): fitted exactly on planted graphs, and
used by the what-if models so removed ops take their host time with them."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import traceread
from traceread.passes.replay import hostcost as H
from traceread.passes.replay import whatif as W
from traceread.passes.replay.graph import NEG, StepGraph

from conftest import FIXTURES

US = 1_000


def host_graph(steps: list[list[tuple]]) -> StepGraph:
    """One host lane, one step per list of (kind, name, ns, cat) nodes between the markers."""
    rows, step_rows = [], []
    for s, nodes in enumerate(steps):
        begin = len(rows)
        rows.append((s, "step", "step begin", 0, "step"))
        rows += [(s, *n) for n in nodes]
        rows.append((s, "step", "step end", 0, "step"))
        step_rows.append((s, begin, len(rows) - 1))
    ts = np.cumsum([0] + [r[3] for r in rows])[:-1]
    nodes = pd.DataFrame({
        "id": range(len(rows)), "step": [r[0] for r in rows], "lane": 0, "seq": range(len(rows)),
        "kind": [r[1] for r in rows], "name": [r[2] for r in rows], "cat": [r[4] for r in rows],
        "ts_ns": ts, "dur_ns": [r[3] for r in rows], "corr": -1,
        "cost_ns": [r[3] for r in rows], "gap_ns": 0, "release_ns": NEG})
    nodes.loc[0, "release_ns"] = 0
    edges = pd.DataFrame(columns=["src", "dst", "kind", "lag_ns"]).astype(
        {"src": np.int64, "dst": np.int64, "lag_ns": np.int64})
    lanes = pd.DataFrame({"lane": [0], "what": ["host"], "pid": 1, "tid": [1], "device": [-1],
                          "stream": [-1], "label": ["thread 1"]})
    st = pd.DataFrame({"index": [s for s, _, _ in step_rows], "step": [s + 1 for s, _, _ in step_rows],
                       "pid": 1, "start_ns": [int(ts[b]) for _, b, _ in step_rows],
                       "end_ns": [int(ts[e]) for _, _, e in step_rows], "dur_ns": 0,
                       "begin": [b for _, b, _ in step_rows], "end": [e for _, _, e in step_rows]})
    return StepGraph(nodes=nodes, edges=edges, lanes=lanes, steps=st, origin_ns=0)


def py(ns):
    return ("host", "untraced", ns, "untraced")


def op(name, ns):
    return ("host", name, ns, "cpu_op")


# planted per step: the Python before aten::add is 3 us, before aten::mul 7 us (one call 9),
# aten::linear has none (it follows the step marker directly)
PLANTED = [[op("aten::linear", 50 * US), py(3 * US), op("aten::add", 4 * US), py(7 * US),
            op("aten::mul", 5 * US)],
           [op("aten::linear", 52 * US), py(3 * US), op("aten::add", 4 * US), py(9 * US),
            op("aten::mul", 5 * US)],
           [op("aten::linear", 51 * US), py(3 * US), op("aten::add", 6 * US), py(7 * US),
            op("aten::mul", 5 * US)]]


def test_fit_recovers_the_planted_lags_and_costs():
    t = H.fit(host_graph(PLANTED)).set_index("name")
    assert t.loc["aten::add", "lag_ns"] == 3 * US and t.loc["aten::add", "lag_spread_ns"] == 0
    assert t.loc["aten::mul", "lag_ns"] == 7 * US      # median of 7, 9, 7
    assert t.loc["aten::mul", "lag_spread_ns"] == 1 * US
    assert t.loc["aten::linear", "lag_ns"] == 0 and t.loc["aten::linear", "lag_seen"] == 0
    assert t.loc["aten::add", "own_ns"] == 4 * US and t.loc["aten::linear", "own_ns"] == 51 * US
    assert (t["n"] == 3).all() and t.loc["aten::mul", "lag_seen"] == 3


def test_a_removed_op_takes_its_fitted_lag_and_no_more():
    g = host_graph(PLANTED)
    gone = (g.nodes["name"] == "aten::mul").to_numpy()
    cost = H.removed_lags(g, gone, H.fitted_lag(g))
    before = g.nodes["cost_ns"].to_numpy()
    unt = (g.nodes["cat"] == "untraced").to_numpy()
    # the stretches before aten::mul lose 7 us each: 7 -> 0, 9 -> 2 (the excess stays);
    # the stretches before aten::add (kept) are untouched
    assert sorted((cost[unt]).tolist()) == sorted([3 * US, 0, 3 * US, 2 * US, 3 * US, 0])
    assert int((before - cost).sum()) == 21 * US


def test_cpu_fusion_removes_the_python_between_the_fused_ops():
    g = host_graph(PLANTED)
    r = W.replay_models(g, W.Facts(), ["fuse_pointwise"])
    # each step's add + mul run becomes one op of max(longest, half their time); the mul's
    # Python (its fitted 7 us) goes with it: 7 + 9 + 7 less what stays (2 us)
    steps = [50 + 3 + 4 + 7 + 5, 52 + 3 + 4 + 9 + 5, 51 + 3 + 6 + 7 + 5]
    fused = [50 + 3 + 5, 52 + 3 + 5 + 2, 51 + 3 + 6]
    assert r["before_ns"] == round(US * sum(steps) / 3)
    assert r["after_ns"] == round(US * sum(fused) / 3)


def _cut_call(kept_launch: bool) -> StepGraph:
    """A Kineto-like step: aten::add cut at the launch it makes (stretch, launch, stretch),
    after 6 us of Python; with ``kept_launch`` the op launches a second kernel too."""
    nodes = [py(6 * US), op("aten::add", 3 * US), ("launch", "cudaLaunchKernel", 5 * US, "launch"),
             op("aten::add", 2 * US)]
    if kept_launch:
        nodes += [("launch", "cudaLaunchKernel", 5 * US, "launch"), op("aten::add", 1 * US)]
    nodes += [py(4 * US), op("aten::linear", 20 * US)]
    return host_graph([nodes, nodes])


def test_a_call_goes_whole_only_when_all_its_launches_go():
    g = _cut_call(False)
    first = np.flatnonzero((g.nodes["kind"] == "launch").to_numpy())[:1]
    mask = np.zeros(len(g.nodes), bool)
    mask[first] = True
    grown = H.whole_calls(g, mask)
    names = g.nodes["name"].to_numpy()[grown].tolist()
    assert names == ["aten::add", "cudaLaunchKernel", "aten::add"]
    g2 = _cut_call(True)
    first = np.flatnonzero((g2.nodes["kind"] == "launch").to_numpy())[:1]
    mask = np.zeros(len(g2.nodes), bool)
    mask[first] = True
    # the op keeps a launch: its stretches stay, only the launch removed goes
    assert H.whole_calls(g2, mask).sum() == 1


def test_batch_work_fits_the_fixed_part_exactly():
    # aten::mm at two sizes with own = 2000 + 0.01 x (m*n*k); relu at one size takes the
    # dispatch floor (the median own time of the leaf ops without the batch: 300 ns);
    # aten::add_ on a parameter carries no batch and is fixed whole
    rows = []
    t = 0
    for m, n_, k_ in [(8, 128, 128), (8, 10, 128)] * 3:
        rows.append(("aten::mm", [[m, k_], [k_, n_]], 2000 + m * n_ * k_ // 100))
    rows += [("aten::relu", [[8, 128]], 900)] * 2 + [("aten::add_", [[128, 128], [128, 128]], 300)] * 3
    ts, dur, names, dims = [], [], [], []
    for name, d, ns in rows:
        ts.append(t)
        dur.append(ns)
        names.append(name)
        dims.append(json.dumps(d))
        t += ns + 100
    ops = pd.DataFrame({"tid": 1, "ts": ts, "dur": dur, "name": names, "input_dims": dims})
    bw = H.batch_work(ops, 8)
    fit = bw.attrs["fit"].set_index("name")
    assert fit.loc["aten::mm", "fixed_ns"] == 2000 and fit.loc["aten::mm", "sizes"] == 2
    assert fit.loc["aten::relu", "fixed_ns"] == 300 and fit.loc["aten::relu", "how"] == "dispatch floor"
    add = (ops["name"] == "aten::add_").to_numpy()
    assert not bw["carries"].to_numpy()[add].any()
    assert (bw["fixed_ns"].to_numpy()[add] == 300).all()
    assert H.batch_work(ops.assign(input_dims=None), 8) is None


# -- a real pair: the removed syncs take their Python with them ---------------------------

def test_real_sync_pair_removed_syncs_take_their_lags(monkeypatch):
    a = traceread.analyze(str(FIXTURES / "gpu" / "sync.bad.json.gz"))
    g, why = W.graph_of(a)
    assert g is not None, why
    f = W.facts_from_analysis(a)
    with_lags = W.replay_models(g, f, ["drop_syncs"])
    # the same change with the removed calls zeroed alone (the stretches before them kept)
    monkeypatch.setattr(W, "_remove_ops", lambda g, m, p=None: W._zero(g, m))
    without = W.replay_models(g, f, ["drop_syncs"])
    assert with_lags["applied"] == without["applied"] == ["drop_syncs"]
    lag = H.fit(g).set_index("name")
    assert lag.loc["cudaMemcpyAsync", "lag_ns"] > 0     # the .item()'s Python before its copy
    assert with_lags["after_ns"] < without["after_ns"]


def test_gpu_ops_launched_from_parameter_ops_do_not_grow_with_the_batch():
    # two kernels of 1 ms: one launched inside aten::mm on a [8, 64] input (the batch), one
    # inside the optimizer's aten::add_ on a [64, 64] parameter; the stream's shortest op
    # is a 10 us kernel launched with no op around it (taken to carry the batch)
    rows = [op("aten::mm", 10 * US), ("launch", "cudaLaunchKernel", 5 * US, "launch"),
            op("aten::add_", 10 * US), ("launch", "cudaLaunchKernel", 5 * US, "launch"),
            ("launch", "cudaLaunchKernel", 5 * US, "launch"),
            ("sync_wait", "cudaDeviceSynchronize", 0, "sync")]
    g = host_graph([rows])
    n = g.nodes
    launches = n.index[n["kind"] == "launch"].tolist()
    k = len(n)
    gpu = pd.DataFrame({"id": [k, k + 1, k + 2], "step": 0, "lane": 1, "seq": [0, 1, 2],
                        "kind": "gpu_kernel", "name": ["gemm", "adam", "tiny"], "cat": "",
                        "ts_ns": 0, "dur_ns": [1000 * US, 1000 * US, 10 * US], "corr": -1,
                        "cost_ns": [1000 * US, 1000 * US, 10 * US], "gap_ns": 0, "release_ns": NEG})
    gpu.loc[0, "release_ns"] = 0
    g.nodes = pd.concat([n, gpu], ignore_index=True)
    g.edges = pd.DataFrame({"src": [int(n["id"][i]) for i in launches] + [k + 2],
                            "dst": [k, k + 1, k + 2, int(n["id"][n["kind"] == "sync_wait"].iloc[0])],
                            "kind": ["launch"] * 3 + ["drain"], "lag_ns": 0})
    g.lanes = pd.concat([g.lanes, pd.DataFrame({"lane": [1], "what": ["gpu"], "pid": 1,
                                                "tid": [-1], "device": [0], "stream": [7],
                                                "label": ["GPU 0 stream 7"]})], ignore_index=True)
    ts = n["ts_ns"].to_numpy()
    # the ops span their stretch and the launch after it (the launch is made inside them)
    ops = pd.DataFrame({"tid": 1, "ts": [int(ts[launches[0] - 1]), int(ts[launches[1] - 1])],
                        "dur": [15 * US, 15 * US], "name": ["aten::mm", "aten::add_"],
                        "input_dims": [json.dumps([[8, 64], [64, 64]]),
                                       json.dumps([[64, 64], [64, 64]])]})
    carries = H.gpu_carries(g, ops, 8)
    assert carries[[k, k + 1, k + 2]].tolist() == [True, False, True]
    f = W.Facts(ops=ops)
    r = W.replay_models(g, f, ["larger_batch"], {"larger_batch": {"x": 2, "batch": 8}})
    # the gemm grows above the 10 us floor: 10 + 2 x 990; the optimizer's kernel stays
    gpu_after = (10 + 2 * 990) * US + 1000 * US + 10 * US
    assert r["params"]["larger_batch"]["fixed_gpu_ops"] == 1
    plain = W.replay_models(g, W.Facts(), ["larger_batch"], {"larger_batch": {"x": 2}})
    assert r["after_ns"] < plain["after_ns"]
    assert r["after_ns"] >= gpu_after


def test_removal_reports_the_lags_it_took_and_their_fits():
    g = host_graph(PLANTED)
    r = W.replay_models(g, W.Facts(), ["fuse_pointwise"])
    p = r["params"]["fuse_pointwise"]
    assert p["host_lags_removed_ns"] == 7 * US            # 21 us over 3 steps
    assert p["lag_fits"] == [{"name": "aten::mul", "n": 3, "lag_ns": 7 * US,
                              "lag_spread_ns": 1 * US, "lag_seen": 3}]


def _call(name, ns, kind="launch"):
    return (kind, name, ns, "sync" if kind == "sync_wait" else "launch")


def test_nsys_sync_removal_keeps_the_next_calls_python():
    # an nsys-like lane (calls and untraced stretches only): the Python before a launch is
    # 6 us; the stretch after the blocking sync holds its wake-up and the next launch's
    # Python (30 us). Dropping the sync takes the .item()'s line (the 6 us before its
    # copy), the copy and the wait, and of the 30 us all but the next launch's fitted 6 us
    step = [py(6 * US), _call("cudaLaunchKernel", 5 * US), py(6 * US),
            _call("cudaLaunchKernel", 5 * US), py(6 * US), _call("cudaMemcpyAsync", 4 * US),
            _call("cudaStreamSynchronize", 20 * US, "sync_wait"), py(30 * US),
            _call("cudaLaunchKernel", 5 * US)]
    g = host_graph([step, step, step])
    assert H.fit(g).set_index("name").loc["cudaLaunchKernel", "lag_ns"] == 6 * US
    r = W.replay_models(g, W.Facts(), ["drop_syncs"])
    assert r["before_ns"] == 87 * US
    assert r["after_ns"] == (6 + 5 + 6 + 5 + 6 + 5) * US


def _with_gpu(g: StepGraph, launchers: list[int], ns: int = 10 * US) -> StepGraph:
    """``g`` with a GPU lane: one kernel of ``ns`` per node index in ``launchers``."""
    n = g.nodes
    k = len(n)
    m = len(launchers)
    gpu = pd.DataFrame({"id": range(k, k + m), "step": n["step"].to_numpy()[launchers],
                        "lane": 1, "seq": range(m), "kind": "gpu_kernel",
                        "name": [f"k{i}" for i in range(m)], "cat": "", "ts_ns": 0,
                        "dur_ns": ns, "corr": -1, "cost_ns": ns, "gap_ns": 0, "release_ns": NEG})
    gpu.loc[0, "release_ns"] = 0
    g.nodes = pd.concat([n, gpu], ignore_index=True)
    g.edges = pd.DataFrame({"src": [int(n["id"][i]) for i in launchers],
                            "dst": list(range(k, k + m)), "kind": "launch", "lag_ns": 0})
    g.lanes = pd.concat([g.lanes, pd.DataFrame({"lane": [1], "what": ["gpu"], "pid": 1,
                                                "tid": [-1], "device": [0], "stream": [7],
                                                "label": ["GPU 0 stream 7"]})], ignore_index=True)
    return g


def _mark(g, names_or_mask, cat="compile"):
    """``g`` with the nodes named (or masked) labelled ``cat``: the facts' compile mark."""
    n = g.nodes
    m = n["name"].isin(names_or_mask).to_numpy() if isinstance(names_or_mask, (set, list)) \
        else np.asarray(names_or_mask, bool)
    g.nodes = n.assign(cat=np.where(m, cat, n["cat"].to_numpy(object)))
    return g


def test_no_recompile_reads_the_facts_compile_marks_alone():
    # nsys-like: no op named, a module load among long untraced stretches. Unmarked (the
    # facts found no build) nothing is compilation; marked (passes/compile.py mark_compile),
    # the marked stretches are, and nothing else is
    step = [_call("cudaLaunchKernel", 5 * US), py(50_000 * US),
            _call("cudaStreamIsCapturing", 1 * US), py(145_000 * US), _call("cuModuleLoad", 900 * US),
            py(3_000 * US), _call("cudaMemsetAsync", 5 * US), py(500 * US)]
    g = host_graph([step, step])
    launchers = [i for i, nm in enumerate(g.nodes["name"]) if nm in ("cudaLaunchKernel", "cudaMemsetAsync")]
    g = _with_gpu(g, launchers)
    r = W.replay_models(g, W.Facts(), ["no_recompile"])
    assert r["applied"] == [] and "no compilation" in r["refused"]["no_recompile"]
    c = g.nodes["cost_ns"].to_numpy()
    marked = _mark(g.copy(), np.isin(c, [50_000 * US, 145_000 * US]) & (g.nodes["kind"] == "host").to_numpy())
    r = W.replay_models(marked, W.Facts(), ["no_recompile"])
    # the two marked stretches and the 1 us query made between them (inside the build)
    assert r["params"]["no_recompile"]["compile_ns"] == 195_001 * US


def test_calls_made_inside_a_compile_op_go_with_it_and_their_kernels():
    # Kineto-like: the autotuner (a compile op cut at the launches it made) benchmarks a
    # kernel twice, then the compiled code runs it once. No recompile: the benchmark's
    # launches and kernels go with the compile, the real run stays
    tune = "CachingAutotuner.benchmark_all_configs (dynamo_timed)"
    step = [(("host", tune, 2_000 * US, "compile")), _call("cudaLaunchKernel", 5 * US),
            ("host", tune, 10 * US, "compile"), _call("cudaLaunchKernel", 5 * US),
            ("host", tune, 10 * US, "compile"), op("Torch-Compiled Region: 0/1", 20 * US),
            _call("cudaLaunchKernel", 5 * US), op("Torch-Compiled Region: 0/1", 3 * US)]
    g = host_graph([step])
    launchers = [i for i, nm in enumerate(g.nodes["name"]) if nm == "cudaLaunchKernel"]
    g = _with_gpu(g, launchers, ns=100 * US)
    inside = W._calls_inside(g, W._cat(g, "compile"))
    assert inside.sum() == 2 and set(g.nodes["seq"].to_numpy()[inside].tolist()) == {2, 4}
    p = {}
    out = W.drop_compile(g.copy(), W.Facts(), p)
    kern = out.nodes[out.nodes["kind"] == "gpu_kernel"]["cost_ns"].tolist()
    assert kern == [0, 0, 100 * US] and p["compile_gpu_ops"] == 2
    assert p["compile_ns"] == 2_020 * US + 10 * US   # the compile stretches and the 2 calls


def _compiled_step(first_us: int, later_us: int = 30, exit_us: int = 30, layers: int = 3):
    """A Kineto-like step that recompiles: the program's Python, the failed guards' cache
    lookup, 1 ms with no op (dynamo starting the recompile), the build, 0.1 ms with no op,
    then the region's first call: ``layers`` x (addmm and its launch, the region's piece,
    the fused kernel's launch), the first layer's piece ``first_us`` (its lazy first run),
    the later ones ``later_us``; the region's exit ``exit_us``; the loss' sum."""
    tune = "compile_fx_inner (dynamo_timed)"
    body = []
    for i in range(layers):
        body += [op("aten::addmm", 10 * US), _call("cudaLaunchKernel", 5 * US),
                 op("Torch-Compiled Region: 0/1", (first_us if i == 0 else later_us) * US),
                 _call("cuLaunchKernel", 5 * US)]
    return [py(40 * US), _call("cudaLaunchKernel", 5 * US), py(60 * US),
            op("TorchDynamo Cache Lookup", 40 * US), py(1_000 * US), ("host", tune, 50_000 * US, "compile"),
            py(100 * US), *body, op("Torch-Compiled Region: 0/1", exit_us * US),
            op("aten::sum", 20 * US), _call("cudaLaunchKernel", 5 * US)]


def _lane0(g):
    return g.nodes[g.nodes["lane"] == 0].set_index("seq")["cost_ns"]


def test_no_recompile_takes_the_stretches_at_the_builds_ends_and_warms_the_first_run():
    # the 1 ms before the build and the 0.1 ms after it go with it (no op ran there: the
    # recompile's own ends); the first layer's 400 us piece costs what layers 2 and 3 show
    # (at most 35 us), the region's 2 ms exit its largest warm piece too; the program's
    # Python, the cache lookup, the ops, the launches and the later layers stay
    g = host_graph([_compiled_step(400, exit_us=2_000)])
    g.nodes.loc[g.nodes["seq"] == 18, "cost_ns"] = 35 * US       # layer 3's piece
    launchers = [i for i, nm in enumerate(g.nodes["name"]) if "LaunchKernel" in nm]
    g = _with_gpu(g, launchers, ns=1 * US)
    p = {}
    out = W.drop_compile(g.copy(), W.Facts(), p)
    cost, was = _lane0(out), _lane0(g)
    assert cost[5] == 0 and cost[6] == 0 and cost[7] == 0          # 1 ms, build, 0.1 ms
    assert cost[10] == 35 * US and cost[20] == 35 * US             # first piece, exit
    keep = [s for s in was.index if s not in (5, 6, 7, 10, 20)]
    assert (cost[keep] == was[keep]).all()
    assert p["compile_ns"] == 51_100 * US and p["first_run_ns"] == (365 + 1_965) * US


def test_the_first_run_is_warmed_only_where_later_runs_show_it_and_never_raised():
    # a first piece shorter than its later runs keeps its time; with one later run the
    # place is not priced from it (FIRST_RUN_PEERS = 2), nor the exit
    p = {}
    out = W.drop_compile(host_graph([_compiled_step(10)]), W.Facts(), p)
    assert _lane0(out)[10] == 10 * US and p["first_run_ns"] == 0
    p = {}
    W.drop_compile(host_graph([_compiled_step(400, exit_us=2_000, layers=2)]), W.Facts(), p)
    assert p["first_run_ns"] == 0


def test_a_call_that_costs_nothing_still_marks_its_place():
    # without the profiler's cost (passes/overhead.py) a short launch can cost 0 ns
    # (gpu/compile.bad's cuLaunchKernel: 4.5-7 us of its 4.5-18 us): still a call the
    # change keeps, which bounds the places around it (the first layer's piece still warms)
    g = host_graph([_compiled_step(400, exit_us=2_000)])
    n = g.nodes
    n.loc[(n["name"] == "cuLaunchKernel").to_numpy(), ["cost_ns", "dur_ns"]] = 0
    launchers = [i for i, nm in enumerate(n["name"]) if "LaunchKernel" in nm]
    g = _with_gpu(g, launchers, ns=1 * US)
    p = {}
    out = W.drop_compile(g.copy(), W.Facts(), p)
    assert _lane0(out)[10] == 30 * US and _lane0(out)[20] == 30 * US
    assert p["first_run_ns"] == (370 + 1_970) * US


def test_no_recompile_leaves_an_untraced_lanes_neighbours_to_the_mark():
    # nsys-like (no op named): the stretches beside a marked build are everything else the
    # thread did; the facts' mark alone says what is compilation
    step = [py(1_000 * US), ("host", "untraced", 50_000 * US, "compile"), py(100 * US),
            _call("cudaLaunchKernel", 5 * US)]
    p = {}
    W.drop_compile(host_graph([step]).copy(), W.Facts(), p)
    assert p["compile_ns"] == 50_000 * US


def test_no_recompile_on_gpu_compile_kineto_takes_the_recompiles_ends():
    # gpu/compile.bad (Kineto): each step's failed guards -> dynamo's 1.2 ms before
    # entire_frame_compile (it holds `dynamo_data: compile_id=0/N`) and the 0.14 ms after the
    # build, before the region runs, go with the build; the first layer's
    # PythonDispatchMode before its addmm's cudaMemsetAsync costs what layers 2-4's do
    a = traceread.analyze(str(FIXTURES / "gpu" / "compile.bad.json.gz"))
    g, _ = W.graph_of(a)
    p = {}
    out = W.drop_compile(g.copy(), W.Facts(), p)
    n, o = out.nodes, g.nodes
    lookup = np.flatnonzero((o["name"] == "TorchDynamo Cache Lookup").to_numpy())
    nxt = o.set_index(["lane", "seq"])
    for i in lookup:   # the stretch right after each cache lookup: no op, then the build
        after = (int(o["lane"][i]), int(o["seq"][i]) + 1)
        assert nxt.loc[after, "cat"] == "untraced" and nxt.loc[after, "cost_ns"] > 100 * US
        assert out.nodes.set_index(["lane", "seq"]).loc[after, "cost_ns"] == 0
    pdm = (o["name"] == "PythonDispatchMode").to_numpy() & (o["kind"] == "host").to_numpy()
    for s in np.unique(o["step"][pdm]):
        was = o["cost_ns"].to_numpy()[pdm & (o["step"] == s).to_numpy()]
        now = n["cost_ns"].to_numpy()[pdm & (o["step"] == s).to_numpy()]
        assert was[0] > 2 * was[1:].max() and now[0] <= was[1:].max()
        assert (now[1:] == was[1:]).all()
        # the region's exit (its last piece: 2.9-3.5 ms after its last launch) costs at most
        # the largest of its pieces the change left as they were
        reg = o["name"].astype(str).str.startswith("Torch-Compiled Region").to_numpy() & \
            (o["step"] == s).to_numpy()
        was, now = o["cost_ns"].to_numpy()[reg], n["cost_ns"].to_numpy()[reg]
        assert was[-1] > 1_000 * US and now[-1] <= now[now == was].max()
    assert p["first_run_ns"] > 0


def test_host_off_path_says_when_no_step_shows_the_dispatch_without_the_moved_work():
    # every step ends in 15 ms of Python: the ops after it keep their measured (slow) time
    # and the model says the trace shows no other; one step without it shows the ops' time
    slow = [op("aten::linear", 200 * US), _call("cudaLaunchKernel", 20 * US), py(15_000 * US)]
    def graph(steps):
        g = host_graph(steps)
        return _with_gpu(g, [i for i, nm in enumerate(g.nodes["name"]) if nm == "cudaLaunchKernel"])
    p = {}
    W.host_off_path(graph([slow, slow, slow]), W.Facts(), p)
    assert p["dispatch_kept"]["warm_seen"] is False
    assert p["dispatch_kept"]["ns_per_step"] == 220 * US
    p = {}
    W.host_off_path(graph([slow, slow[:2], slow]), W.Facts(), p)
    assert p["dispatch_kept"]["warm_seen"] is True


def test_host_off_path_on_gpu_host_keeps_the_slow_dispatch_and_says_so():
    # gpu/host.bad: every step follows 15 ms of json.dumps; its dispatch runs 2-7x AFTER's
    # and nothing in BEFORE runs it warm
    a = traceread.analyze(str(FIXTURES / "gpu" / "host.bad.json.gz"))
    g, _ = W.graph_of(a)
    r = W.replay_models(g, W.facts_from_analysis(a), ["host_off_path"])
    kept = r["params"]["host_off_path"]["dispatch_kept"]
    assert r["applied"] == ["host_off_path"] and kept["warm_seen"] is False
    assert 0 < kept["ns_per_step"] < r["after_ns"]


def test_nsys_pinning_takes_the_copys_own_sync_and_its_wake_up():
    # nsys-like (no op named): a pageable HtoD copy's call holds the host 7 ms, then the
    # stream sync PyTorch makes after it waits for the copy (a drain edge from it), then
    # 230 us of untraced time before the next launch, whose Python takes 6 us elsewhere.
    # Pinned and non_blocking: the sync goes, and of the 230 us the next launch's 6 us stay
    step = [py(6 * US), _call("cudaMemcpyAsync", 7_000 * US),
            _call("cudaStreamSynchronize", 20 * US, "sync_wait"), py(230 * US),
            _call("cudaLaunchKernel", 5 * US), py(6 * US), _call("cudaLaunchKernel", 5 * US),
            py(6 * US), _call("cudaLaunchKernel", 5 * US)]
    g = host_graph([step, step])
    n = g.nodes
    launchers = [i for i, nm in enumerate(n["name"]) if nm in ("cudaMemcpyAsync", "cudaLaunchKernel")]
    g = _with_gpu(g, launchers, ns=100 * US)
    n = g.nodes
    k0 = int(np.flatnonzero((n["lane"] == 1).to_numpy())[0])   # GPU op k: launchers[k]'s
    copies = [k0 + k for k, i in enumerate(launchers) if n["name"][i] == "cudaMemcpyAsync"]
    kind, name = n["kind"].to_numpy(object).copy(), n["name"].to_numpy(object).copy()
    kind[copies], name[copies] = "gpu_copy", "Memcpy HtoD (Pageable -> Device)"
    g.nodes = n.assign(kind=kind, name=name)
    syncs = np.flatnonzero((n["name"] == "cudaStreamSynchronize").to_numpy())
    g.edges = pd.concat([g.edges, pd.DataFrame({
        "src": n["id"].to_numpy()[copies], "dst": n["id"].to_numpy()[syncs],
        "kind": "drain", "lag_ns": 0})], ignore_index=True)
    p = {}
    out = W.pin_copies(g.copy(), W.Facts(), p)
    cost = out.nodes["cost_ns"].to_numpy()
    assert p["copy_syncs_removed"] == 1 and (cost[syncs] == 0).all()
    wake = [i + 1 for i in syncs]
    assert (cost[wake] == 6 * US).all()


def test_fit_is_reused_only_where_its_inputs_are_equal():
    g = host_graph(PLANTED)
    t = H.fit(g)
    assert H.fit(g.copy()) is t            # a copy of the same graph: the same fit
    h = g.copy()
    c = h.nodes["cost_ns"].to_numpy().copy()
    c[h.nodes["name"].to_numpy() == "untraced"] += 1 * US   # every lag 1 us longer
    h.nodes["cost_ns"] = c
    t2 = H.fit(h)
    assert t2 is not t
    assert t2.set_index("name").loc["aten::add", "lag_ns"] == 4 * US
    assert H.fit(g).set_index("name").loc["aten::add", "lag_ns"] == 3 * US


def test_gpu_fusion_takes_each_removed_ops_whole_call_and_python():
    # Kineto-like: 4 x (6 us of Python, aten::mul cut at its launch: 3 us, launch 5 us,
    # 2 us), 1 us kernels, a sync at the end. Fused: one call and one 2 us kernel remain;
    # the other three calls go whole with the Python before each (its fitted 6 us)
    ops = []
    for _ in range(4):
        ops += [py(6 * US), op("aten::mul", 3 * US), _call("cudaLaunchKernel", 5 * US),
                op("aten::mul", 2 * US)]
    g = host_graph([ops + [_call("cudaStreamSynchronize", 0, "sync_wait")]])
    launchers = [i for i, nm in enumerate(g.nodes["name"]) if nm == "cudaLaunchKernel"]
    g = _with_gpu(g, launchers, ns=1 * US)
    g.nodes.loc[g.nodes["kind"] == "gpu_kernel", "name"] = \
        "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor>"
    sync = int(g.nodes.index[g.nodes["kind"] == "sync_wait"][0])
    last = int(g.nodes["id"][g.nodes["kind"] == "gpu_kernel"].max())
    g.edges = pd.concat([g.edges, pd.DataFrame({"src": [last], "dst": [int(g.nodes["id"][sync])],
                                                "kind": ["drain"], "lag_ns": [0]})], ignore_index=True)
    r = W.replay_models(g, W.Facts(), ["fuse_pointwise"])
    assert r["before_ns"] == 64 * US
    assert r["after_ns"] == 16 * US
    assert r["params"]["fuse_pointwise"]["host_lags_removed_ns"] == 18 * US
