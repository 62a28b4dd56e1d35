"""The replay once a lever lets the host run ahead of the GPU (issue 37): the steady step is
the GPU's load, its backlog counted once (``whatif.step_mean``), and every queued kernel
keeps the GPU's own gap after its stream's previous one (``graph._front_end_gaps``)."""
from __future__ import annotations

from pathlib import Path

from traceread import analyze, load
from traceread.synth.scenarios import T0, US, TraceBuilder

FIX = Path(__file__).parent / "fixtures"


def test_a_host_running_ahead_counts_its_gpu_backlog_once():
    # three replayed steps once the host no longer waits: the first two end before their GPU
    # work does (2.11, 2.08 ms), the last carries the backlog (3.18 ms); each step's GPU lane
    # holds 2.55 ms of work. The steady step is the GPU's 2.55 ms -- floored step by step it
    # was (2.55 + 2.55 + 3.18) / 3 = 2.76 ms, the backlog counted twice.
    from types import SimpleNamespace

    import pandas as pd

    from traceread.passes.replay import whatif as W

    graph = SimpleNamespace(
        nodes=pd.DataFrame({"step": [0, 1, 2, 0, 1, 2], "lane": [1, 1, 1, 0, 0, 0],
                            "cost_ns": [2_500_000, 2_500_000, 2_500_000, 9, 9, 9],
                            "gap_ns": [50_000, 50_000, 50_000, 0, 0, 0]}),
        lanes=pd.DataFrame({"lane": [0, 1], "what": ["host", "gpu"]}))
    sched = SimpleNamespace(steps=pd.DataFrame({"index": [0, 1, 2],
                                                "replayed_ns": [2_110_000, 2_080_000, 3_177_000]}),
                            total_ns=7_367_000)
    assert W.step_mean(sched, graph) == 2_550_000
    # steps that wait for their GPU work (a sync each) are their own spans
    sched.steps["replayed_ns"] = [2_600_000, 2_700_000, 2_650_000]
    assert W.step_mean(sched, graph) == 2_650_000


def test_pinning_the_copy_never_slows_the_python_off_the_step_path():
    # h200/pageable: with the Python off the step path the host still waits for each copy;
    # pinned too, it no longer waits and the GPU's ~2.55 ms a step sets the pace. Before, the
    # two together replayed 2.76 ms, slower than the Python moved alone (2.70 ms).
    from traceread.passes.replay import whatif as W

    a = analyze(load(FIX / "h200" / "pageable.bad.json.gz"))
    g, _ = W.graph_of(a)
    base, _, _ = W.unprofiled_base(g)
    f = W.facts_from_analysis(a)
    alone = W.replay_models(base, f, ["host_off_path"])
    both = W.replay_models(base, f, ["host_off_path", "pin_copies"])
    busy = a.facts.figures["busy_step_mean_ns"]
    assert both["after_ns"] < alone["after_ns"]
    assert busy <= both["after_ns"] <= 1.05 * busy


def test_a_step_the_replay_did_not_place_is_not_counted_at_its_gpu_load():
    # a step cut at the window's end is not replayed (-1): it used to count at its GPU load
    # (0.65 ms among 7.6 ms steps on gpu/launch's nsys capture), pulling the mean down
    from types import SimpleNamespace

    import pandas as pd

    from traceread.passes.replay import whatif as W

    graph = SimpleNamespace(
        nodes=pd.DataFrame({"step": [0, 1, 2], "lane": [1, 1, 1],
                            "cost_ns": [600_000] * 3, "gap_ns": [0] * 3}),
        lanes=pd.DataFrame({"lane": [1], "what": ["gpu"]}))
    sched = SimpleNamespace(steps=pd.DataFrame({"index": [0, 1, 2],
                                                "replayed_ns": [7_600_000, 7_600_000, -1]}),
                            total_ns=15_200_000)
    assert W.step_mean(sched, graph) == 7_600_000


def gpu_gaps(steps: int = 3):
    """Per step: kernels k0-k2 (200 us each) launched together run back to back, 1 us apart
    on the GPU (queued); k3 is launched 300 us after k2 ends (the GPU idles for it)."""
    b = TraceBuilder(path="gaps.json")
    t = T0
    for k in range(steps):
        s = t
        gpu = s + 20 * US
        for i in range(3):
            b.launch(t, 5 * US, gpu, 200 * US, name=f"k{i}")
            gpu += 201 * US
            t += 5 * US
        late = gpu + 300 * US
        b.cpu("train.py(9): work", t, late - 10 * US - t, kind="python")
        b.launch(late - 10 * US, 5 * US, late, 200 * US, name="k3")
        t = late + 200 * US + 10 * US
        b.runtime("cudaDeviceSynchronize", late, t - late)
        b.step(k, s, t + 5 * US - s)
        t += 5 * US
    return b.build()


def test_a_kernel_its_launch_released_keeps_the_gpus_own_gap_after_its_stream():
    # k3 waited for its launch: its lane gap was 0, so once a lever let the host run ahead it
    # ran with no gap at all after k2 -- where every queued kernel pays the GPU's ~1 us
    from traceread.passes.replay import whatif as W

    a = analyze(gpu_gaps())
    assert a.replay["max_error_pct"] == 0.0          # the unmodified replay is unchanged
    g, _ = W.graph_of(a)
    n = g.nodes
    k3 = n[n["name"].astype(str) == "k3"]
    k1 = n[n["name"].astype(str) == "k1"]
    assert (k1["gap_ns"] == 1 * US).all() and (k3["gap_ns"] == 1 * US).all()


def test_front_end_gap_is_learnt_only_from_gpu_side_queued_gaps():
    """HTA's trace_compare: the ops its stream released started 0.1-108 ms after their
    predecessor (waits nothing traced shows), one at 6 us. A kernel its launch released
    with 3 ms of idle before it gets the 6 us GPU-side gap, not the 2.6 ms median."""
    import numpy as np

    from traceread.passes.replay.graph import _front_end_gaps

    gaps = [450_000, 10_632_000, 25_401_000, 2_594_000, 128_000, 6_000]
    n = len(gaps) + 1
    lane = np.zeros(n, np.int64)
    bind = np.r_[np.zeros(len(gaps), np.int64), 1]       # the last: released by its launch
    prev = np.arange(-1, n - 1, dtype=np.int64)
    prev[0] = 0
    lane_gap = np.r_[np.array(gaps, np.int64), 0]
    idle = np.r_[np.array(gaps, np.int64), 3_000_000]
    out = _front_end_gaps(lane, bind, prev, idle, lane_gap)
    assert out[-1] == 6_000 and not out[:-1].any()
