"""The step as a graph and its replay (issue 30, passes/replay): planted structure with exact
replay times, the graph's transformations, and the unmodified replay of real traces."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

import numpy as np
import pytest

from traceread.analysis import analyze
from traceread.passes.replay import gap_labels, simulate, sim as sim_mod
from traceread.synth.scenarios import TraceBuilder, US

from conftest import CORPUS, analysed, corpus_or_skip

FIX = Path(__file__).parent / "fixtures"
STEPS = 4


def sync_loop(steps: int = STEPS):
    """Each 1000 us step: launch A (kernel 300 us, starts 5 us after its launch returns),
    launch B (kernel 400 us, queued behind A), cudaStreamSynchronize returning 5 us after B
    ends, then 275 us of untraced Python."""
    b = TraceBuilder()
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 20 * US, 300 * US, name="kernel_A")
        b.launch(t + 30 * US, 5 * US, t + 320 * US, 400 * US, name="kernel_B")
        b.runtime("cudaStreamSynchronize", t + 40 * US, 685 * US)
    return b.build()


def two_streams(steps: int = STEPS):
    """Kernel X on stream 7 (200 us); kernel Y on stream 9, launched early, starts 2 us after
    X ends (an event wait the trace does not name); the host syncs 5 us after Y ends."""
    b = TraceBuilder()
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 20 * US, 200 * US, name="kernel_X")
        b.launch(t + 30 * US, 5 * US, t + 222 * US, 100 * US, name="kernel_Y", stream=9)
        b.runtime("cudaDeviceSynchronize", t + 40 * US, 287 * US)
    return b.build()


def _steps(r: dict) -> list[int]:
    return [s["replayed_ns"] for s in r["steps"]]


def test_unmodified_replay_reproduces_the_planted_steps():
    a = analyze(sync_loop(), steps="all")
    r = a.replay
    assert r["replayable"] and r["steps_replayed"] == STEPS
    assert _steps(r) == [1000 * US] * STEPS
    assert r["error_pct"] == 0.0
    assert r["edges_by_kind"] == {"launch": 2 * STEPS, "drain": STEPS}


def test_scaled_kernels_replay_exactly():
    """Kernels at half time: A 150 us, B right behind it (it was queued), the sync returns
    5 us after B, then the same 275 us of Python: 10 + 5 + 15 + 5 + 5 ... -> 650 us a step."""
    a = analyze(sync_loop(), steps="all")
    g = a.replay_graph
    fast = g.scale(g.select(kind="gpu_kernel"), 0.5)
    s = simulate(fast)
    assert s.converged
    assert s.steps["replayed_ns"].tolist() == [650 * US] * STEPS
    assert simulate(g).steps["replayed_ns"].tolist() == [1000 * US] * STEPS   # untouched


def test_removed_sync_lets_the_host_run_ahead():
    a = analyze(sync_loop(), steps="all")
    g = a.replay_graph
    no_sync = g.remove(g.select(kind="sync_wait"))
    s = simulate(no_sync)
    # the host's own time: 10 + 5 + 15 + 5 us of calls and Python, then 5 + 275 us of Python
    assert s.steps["replayed_ns"].tolist() == [315 * US] * STEPS


def test_event_wait_found_by_behaviour_and_replayed():
    a = analyze(two_streams(), steps="all")
    r = a.replay
    assert r["edges_by_kind"].get("event_wait") == STEPS
    assert _steps(r) == [1000 * US] * STEPS
    g = a.replay_graph
    s = simulate(g.scale(g.select(name="kernel_X"), 0.5))
    n = g.nodes
    y = np.flatnonzero(n["name"].to_numpy() == "kernel_Y")
    x = np.flatnonzero(n["name"].to_numpy() == "kernel_X")
    # Y still waits for X, 2 us after it: X now ends 100 us earlier, so does Y, and the sync
    assert (s.start_ns[y] - s.end_ns[x]).tolist() == [2 * US] * STEPS
    assert s.steps["replayed_ns"].tolist() == [900 * US] * STEPS


def test_topological_pass_equals_the_sweeps(monkeypatch):
    """A transformed graph settles by sweeps or by one topological pass: the same schedule."""
    a = analyze(sync_loop(8), steps="all")
    g = a.replay_graph
    fast = g.scale(g.select(kind="gpu_kernel"), 0.3)
    by_sweeps = simulate(fast)
    monkeypatch.setattr(sim_mod, "FAST_SWEEPS", 0)
    by_order = simulate(fast)
    assert by_order.converged and by_sweeps.converged
    assert by_order.end_ns.tolist() == by_sweeps.end_ns.tolist()


def test_critical_path_names_what_held_the_step():
    """The sync loop's step: 10 us of Python, launch A (a 5 us call, then 5 us until its
    kernel starts: queued after launch), kernel A, kernel B queued behind it, the sync's 5 us
    wake-up, 275 us of Python. Launch B and the Python around it ran while A did: not on the
    path. The host syncs, so the step ends at its marker."""
    r = analyze(sync_loop(), steps="all").replay["critical_path"]
    per = r["steps"][1]["by_label"]
    assert sum(per.values()) == 1000 * US
    assert per == {"kernel": 700 * US, "host op": 285 * US, "launch": 5 * US,
                   "queued after launch": 5 * US, "sync wait": 5 * US}
    assert r["steps"][1]["ends_at"] == "host"
    assert r["top"][0]["name"] == "kernel_B"


def test_replace_run_merges_launches():
    a = analyze(sync_loop(), steps="all")
    g = a.replay_graph
    n = g.nodes
    calls = n[(n["kind"] == "launch") & (n["step"] == 1)]["id"].tolist()
    merged = g.replace_run(calls[0], calls[-1], name="cudaGraphLaunch", dur_ns=3 * US)
    assert len(merged.nodes) == len(n) - 2   # two launches and the Python between: one node
    assert (merged.edges["src"] == calls[0]).sum() == 2   # both kernels hang off it
    assert simulate(merged).converged


def test_gpu_only_trace_is_not_replayable():
    b = TraceBuilder()
    b.gpu("k", 1000, 100 * US)
    b.gpu("k", 1000 + 200 * US, 100 * US)
    r = analyze(b.build()).replay
    assert r["replayable"] is False and "GPU-only" in r["reason"] and r["savings"] == "bounds"


# ------------------------------------------------------------------ real traces

# Real captures recorded on an H100 / H200 with steps (tests/fixtures): the unmodified replay
# must reproduce every step within 10%, the median within 3%.
FIXTURE_TRACES = sorted((FIX / "gpu").glob("*.json.gz")) + sorted((FIX / "h200").glob("*.json.gz"))


def _check(r: dict) -> list[float]:
    assert r["replayable"], r["reason"]
    errs = [abs(s["error_pct"]) for s in r["steps"]]
    assert errs and max(errs) <= 10.0, r["steps"]
    return errs


@pytest.mark.parametrize("path", FIXTURE_TRACES, ids=lambda p: p.name)
def test_real_capture_replays_its_steps(path):
    errs = _check(analysed(path).replay)
    assert statistics.median(errs) <= 3.0


# The default run replays every corpus trace up to this size (test_analyze_corpus analyses
# them too: conftest.analysed shares the analysis) and the bigger ones other default tests
# analyse (SHARED); the other bigger ones (1-4 MB, ~1.5 s of one core each, 27 s in all) are
# the slow sweep. The 25 committed H100 / H200 captures above run in both.
SMALL_BYTES = 600_000
SHARED = ("resnet50_num_workers_0/", "resnet50_num_workers_4/worker0.1623212756351",
          "ns_resolution_trace/rank-0", "negative_queue_length_values_check/rank0")


def _corpus_traces(small: bool) -> list[str]:
    if not (CORPUS / "MANIFEST.tsv").is_file():
        return []
    out = []
    for r in csv.DictReader(open(CORPUS / "MANIFEST.tsv"), delimiter="\t"):
        if (r.get("has_gpu_kernels") or "0") not in ("", "0") and \
                "ProfilerSteps=" in (r.get("notes") or "") and "__blob" not in r["local_path"] \
                and _default(r) == small:
            out.append(r["local_path"])
    return out


def _default(row: dict) -> bool:
    return int(row["bytes"]) <= SMALL_BYTES or any(k in row["local_path"] for k in SHARED)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", _corpus_traces(small=True) or ["(no corpus)"])
def test_corpus_trace_replays_its_steps(rel):
    _replays_its_steps(rel)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("rel", _corpus_traces(small=False) or ["(no corpus)"])
def test_large_corpus_trace_replays_its_steps(rel):
    _replays_its_steps(rel)


def _replays_its_steps(rel: str):
    root = corpus_or_skip()
    r = analysed(root / rel).replay
    if not r["replayable"]:   # sampled traces say so; nothing else may refuse
        assert "sampled" in r["reason"], r["reason"]
        return
    errs = _check(r)
    assert statistics.median(errs) <= 3.0


@pytest.mark.corpus
def test_a_helper_threads_idle_is_a_wait_on_the_critical_path():
    """tb_plugin's resnet50 (num_workers=0): autograd's backward thread idles between its
    bursts while the main thread loads the next batch; the critical path read that idle as
    "host op, untraced" (534 ms of 1,049) and hid the DataLoader. Each burst now follows the
    hand-off from the step thread: the critical path reaches the data loading behind it."""
    root = corpus_or_skip()
    r = analysed(root / "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/"
                 "worker0.1623143089861.pt.trace.json.gz").replay
    cp = r["critical_path"]["by_label"]
    total = sum(cp.values())
    assert cp.get("data load", 0) > 0.2 * total   # the DataLoader's __next__, each step
    assert cp.get("host op", 0) < 0.3 * total
    assert max(_check(r)) <= 0.5   # the replay still reproduces every step


@pytest.mark.parametrize("path", [FIX / "h200" / "queue.fixed.json.gz",
                                  FIX / "gpu" / "host.fixed.json.gz",
                                  FIX / "gpu" / "sync.bad.json.gz"], ids=lambda p: p.name)
def test_gap_labels_from_the_replay_agree_with_the_attribution(path):
    """Issue 30: the replay's launch edges read the same labels as the attribution (host-late
    = sync / starved, else queued) for every gap whose closing op the graph holds."""
    a = analysed(path)
    got = gap_labels(a.replay_graph, a.gaps)
    want = np.where(a.gaps["drain"].to_numpy() == "queued", "queued", "host_late")
    inside = got != ""
    assert inside.sum() >= 0.9 * len(got)
    assert (got[inside] == want[inside]).all()


def handoff(steps: int = STEPS):
    """Main thread: launches A (2 ms kernel) and C, then waits 6 ms in one stretch while a
    helper thread (an autograd thread) launches D (3 ms, queued behind A and C) and syncs on
    it; the main thread resumes 1 ms after the helper's sync returns, launches E, then 3.8 ms
    of Python end the 10 ms step."""
    b = TraceBuilder()
    for k in range(steps):
        t = 1_000_000 + k * 10_000 * US
        b.step(k, t, 10_000 * US)
        b.launch(t + 100 * US, 10 * US, t + 120 * US, 2000 * US, name="kernel_A")
        b.launch(t + 200 * US, 10 * US, t + 2120 * US, 100 * US, name="kernel_C")
        b.launch(t + 300 * US, 10 * US, t + 2220 * US, 3000 * US, name="kernel_D", tid=2)
        b.runtime("cudaStreamSynchronize", t + 320 * US, 4905 * US, tid=2)
        b.launch(t + 6225 * US, 10 * US, t + 6245 * US, 100 * US, name="kernel_E")
    return b.build()


def test_thread_handoff_found_by_behaviour_and_replayed():
    """The helper's burst is started by the main thread's launch of C and joined 1 ms after
    its sync: at half D the main thread resumes 1.5 ms earlier. The first step's burst has
    no idle before it on its thread (nothing hands it over): it keeps its measured times."""
    a = analyze(handoff(), steps="all")
    r = a.replay
    assert r["edges_by_kind"].get("thread") == STEPS - 1 == r["edges_by_kind"].get("join")
    assert _steps(r) == [10_000 * US] * STEPS
    g = a.replay_graph
    s = simulate(g.scale(g.select(name="kernel_D"), 0.5))
    assert s.steps["replayed_ns"].tolist() == [10_000 * US] + [8_500 * US] * (STEPS - 1)


def test_full_launch_queue_waits_for_a_slot():
    """A launch that blocks 200 us and returns 3 us after a kernel ends waited for a slot:
    a drain edge, so a faster GPU frees the slot (and the host) sooner."""
    b = TraceBuilder()
    for k in range(STEPS):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 20 * US, 600 * US, name="kernel_A")
        b.launch(t + 423 * US, 200 * US, t + 620 * US, 300 * US, name="kernel_B")
    a = analyze(b.build(), steps="all")
    assert a.replay["edges_by_kind"].get("drain") == STEPS
    g = a.replay_graph
    s = simulate(g.scale(g.select(name="kernel_A"), 0.5))
    # A now ends before the launch begins: it does not block, it costs its 3 us after the
    # slot freed -- the host saves 623 - 426 = 197 us a step
    assert s.steps["replayed_ns"].tolist() == [803 * US] * STEPS


def _mutual_waits(steps: int):
    """Each step: two zero-length kernels on two streams that start together, each made to
    wait for the other (an event-wait edge both ways), then a sync: their binding
    predecessors form a cycle."""
    import pandas as pd

    b = TraceBuilder()
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        b.launch(t + 10 * US, 5 * US, t + 100 * US, 0, name="kernel_X")
        b.launch(t + 30 * US, 5 * US, t + 100 * US, 0, name="kernel_Y", stream=9)
        b.runtime("cudaDeviceSynchronize", t + 40 * US, 70 * US)
    g = analyze(b.build(), steps="all").replay_graph.copy()
    ew = g.edges[g.edges["kind"] == "event_wait"]
    assert len(ew) == steps
    g.edges = pd.concat([g.edges, ew.rename(columns={"src": "dst", "dst": "src"})],
                        ignore_index=True)
    return g


def test_critical_path_walk_is_linear_when_waits_loop(monkeypatch):
    """Issue 40: two zero-length kernels waiting on each other made every step's walk go
    round their cycle until it had taken as many links as the graph has nodes (2,000
    steps: O(steps x nodes)). Each node is taken once per step, and the links still add up
    to each step's replayed time."""
    from traceread.passes.replay import critical as C

    g = _mutual_waits(60)
    s = simulate(g)
    assert s.converged
    walked = []
    real = C._walk

    def counting(*a):
        out = real(*a)
        walked.append(len(out[0]))
        return out

    monkeypatch.setattr(C, "_walk", counting)
    r = C.critical_path(g, s)
    assert sum(walked) <= len(g.nodes)
    rep = dict(zip(s.steps["step"].tolist(), s.steps["replayed_ns"].tolist()))
    for st in r["steps"]:
        assert sum(st["by_label"].values()) == rep[st["step"]] == 1000 * US


def host_ahead_loop(steps: int = STEPS):
    """The host runs ahead of a busy GPU: each 1000 us host step launches one 3000 us kernel
    and never waits, so each kernel queues behind the previous step's (the program's step
    is the GPU's 3000 us; the host's span is 1000 us of Python and one launch)."""
    b = TraceBuilder()
    gpu_free = 0
    for k in range(steps):
        t = 1_000_000 + k * 1000 * US
        b.step(k, t, 1000 * US)
        start = max(t + 20 * US, gpu_free)
        b.launch(t + 10 * US, 5 * US, start, 3000 * US, name="big_gemm")
        gpu_free = start + 3000 * US
    return b.build()


def test_critical_path_of_a_gpu_bound_step_ends_with_its_last_kernel():
    """Issue 37: walking back from the host's marker gave a host-ahead GPU-bound step a path
    of host time alone. The walk starts where the program waits -- the step's last kernel
    ended after the host's marker -- and covers the program step: the GPU's 3000 us window,
    all kernel."""
    a = analyze(host_ahead_loop(), steps="all")
    cp = a.replay["critical_path"]
    for st in cp["steps"][1:]:
        assert st["ends_at"] == "gpu"
        assert st["by_label"] == {"kernel": 3000 * US}
    # the first step: its kernel started 20 us after the host's step began (10 us of
    # Python, the 5 us call, 5 us queued), then ran 3000 us; the window ends there
    first = cp["steps"][0]["by_label"]
    assert sum(first.values()) == 3000 * US and first["kernel"] > 2990 * US
    assert a.steps["bound_by"].tolist()[1:] == ["gpu"] * (STEPS - 1)


@pytest.mark.skipif(not (FIX / "h200" / "xformer.bad.json.gz").exists(), reason="no fixture")
def test_critical_path_of_the_h200_transformer_is_gpu_work():
    """The H200 transformer capture runs its GPU ~99% busy with the host ~1.8 ms ahead: its
    path is kernels (and copies), and each step's links add up to its program step."""
    a = analysed(FIX / "h200" / "xformer.bad.json.gz")
    cp = a.replay["critical_path"]
    gpu = sum(v for k, v in cp["by_label"].items() if k in ("kernel", "copy"))
    assert gpu >= 0.95 * cp["total_ns"], cp["by_label"]
    prog = dict(zip(a.steps["step"].tolist(), a.steps["program_ns"].tolist()))
    for st in cp["steps"]:
        assert abs(sum(st["by_label"].values()) - prog[st["step"]]) <= 0.001 * prog[st["step"]]
    assert any(st["ends_at"] == "gpu" for st in cp["steps"])


def _woken_thread_loop(steps: int = 3):
    """Each 20 ms step: the main thread launches a 1 ms kernel, then a second thread (as
    autograd's backward thread, which the main thread wakes: no traced edge) runs from 5 ms
    and launches the step's last kernel, which ends after the host's end marker."""
    b = TraceBuilder(path="woken.json")
    for k in range(steps):
        t = k * 20_000 * US
        b.step(k, t, 10_000 * US)
        b.op_with_kernel("aten::mm", t + 100 * US, 200 * US, 50 * US, 10 * US, t + 1_000 * US,
                         1_000 * US, name="gemm_a")
        b.op_with_kernel("aten::mm", t + 5_000 * US, 4_900 * US, 4_800 * US, 10 * US,
                         t + 9_850 * US, 3_000 * US, name="gemm_b", tid=2)
    return b.build()


def test_critical_path_says_the_time_no_traced_cause_explains():
    """The first step's chain runs back from its last kernel to the second thread's first
    node (its launch at 9.8 ms), which nothing in the trace starts; the 9.64 ms from the
    step's start (its GPU window opens at the first launch's return, 160 us) to it were
    dropped, so the step's links covered 3.05 of its 12.69 ms. They are "unexplained" now,
    and every step's links add up to its program step."""
    a = analyze(_woken_thread_loop(), steps="all")
    cp = a.replay["critical_path"]
    prog = dict(zip(a.steps["step"].tolist(), a.steps["program_ns"].tolist()))
    for st in cp["steps"]:
        assert sum(st["by_label"].values()) == prog[st["step"]], st
    first = cp["steps"][0]
    assert first["ends_at"] == "gpu" and first["by_label"]["unexplained"] == 9_640 * US
    assert "unexplained" not in cp["steps"][1]["by_label"]   # its lane's previous op binds it
    from traceread.render.text import replay_lines
    text = " ".join(" ".join(replay_lines(a.replay)).split())
    assert "unexplained 25%" in text and "has no traced cause" in text
    assert "before cudaLaunchKernel" in text


def test_the_replay_graph_reads_a_gloo_workers_socket_sends_as_communication():
    """graph.host_classes hands attribution.classify_host the threads: a socket send off the
    process's main thread (gloo's pt_gloo_runloop writev-ing a gradient) is communication,
    one on the main thread the program's own (h200/ddp2: the replay read it as a host op)."""
    import pandas as pd

    from traceread.passes.attribution import CPU_CATEGORIES
    from traceread.passes.replay.graph import host_classes

    ev = pd.DataFrame({"name": ["writev", "writev"], "kind": ["osrt", "osrt"],
                       "pid": [100, 100], "tid": [101, 100]})
    got = [CPU_CATEGORIES[c] for c in host_classes(ev, np.arange(2), None)]
    assert got[0] == "comm_wait" and got[1] != "comm_wait"
