"""Gap attribution: exact planted splits, priority carving, drain tolerance, thread choice."""
from __future__ import annotations

import pytest

from traceread.analysis import analyze
from traceread.passes import attribution as A
from traceread.synth import scenarios as sc
from traceread.synth.scenarios import US, TraceBuilder


@pytest.mark.parametrize("name", sorted(sc.SCENARIOS))
def test_planted_idle_and_split_exact(name):
    trace, truth = sc.SCENARIOS[name]()
    a = analyze(trace)
    d = a.devices.iloc[0]
    assert int(d["window_ns"]) == truth["window_ns"]
    assert int(d["busy_ns"]) == truth["busy_ns"]
    assert int(d["idle_ns"]) == truth["idle_ns"]
    assert len(a.gaps) == truth["gap_count"]
    by_cpu = {k: v for k, v in a.attribution["by_cpu"].items() if v}
    assert by_cpu == truth["by_cpu"]
    assert a.attribution["by_drain"] == truth["by_drain"]
    # every gap is split exactly
    cols = [f"cpu_{c}" for c in A.CPU_CATEGORIES]
    assert (a.gaps[cols].sum(axis=1) == a.gaps["duration"]).all()
    if "drain_op" in truth:
        assert set(a.attribution["by_sync_op"]) == {truth["drain_op"]}


def test_priority_carving_on_overlapping_activity():
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)                       # GPU busy [0, 100)
    b.launch(20, 10, 1000, 100)                   # GPU busy [1000, 1100): gap [100, 1000)
    b.cpu("aten::add", 100, 900)                  # cpu_op over the whole gap
    b.cpu(sc.DATALOADER_OP, 200, 300)             # dataloader [200, 500) beats cpu_op
    b.runtime("cudaLaunchKernel", 450, 100)       # launch [450, 550): dataloader wins to 500
    b.cpu("torch/_dynamo/convert_frame.py(1): _compile", 700, 50, kind="python")  # compile
    b.cpu("foo.py(3): bar", 600, 300, kind="python")  # python below cpu_op: gets nothing
    a = analyze(b.build())
    g = a.gaps.iloc[0]
    assert (int(g["start"]), int(g["end"])) == (100, 1000)
    got = {c: int(g[f"cpu_{c}"]) for c in A.CPU_CATEGORIES if g[f"cpu_{c}"]}
    assert got == {"dataloader": 300, "launch": 50, "compile": 50, "cpu_op": 500}
    assert g["cpu"] == "cpu_op"


def test_an_op_inside_another_of_its_name_counts_once_in_the_top_ops():
    # aten::copy_ calling aten::copy_ (sglang decode: 463 ms each, "926 ms" in a 474 ms
    # window): one op's time in the gaps, and one call
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)                   # gap [100, 1000)
    b.cpu("aten::copy_", 100, 900)
    b.cpu("aten::copy_", 150, 800)                # the inner call, same thread
    b.cpu("aten::copy_", 2000, 50)                # a later one: not in a gap
    top = analyze(b.build()).top_ops
    row = top[top["name"] == "aten::copy_"].iloc[0]
    assert (int(row["ns"]), int(row["count"])) == (900, 1)
    # two starting together: the longer holds the shorter (listed first or not)
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("aten::copy_", 100, 10)
    b.cpu("aten::copy_", 100, 900)
    top = analyze(b.build()).top_ops
    assert int(top[top["name"] == "aten::copy_"]["ns"].iloc[0]) == 900


def test_untraced_and_python_fill_the_rest():
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("train.py(10): loop", 400, 200, kind="python")
    a = analyze(b.build())
    g = a.gaps.iloc[0]
    assert int(g["cpu_python"]) == 200 and int(g["cpu_untraced"]) == 700


def _sync_gap(sync_start, sync_end, name="cudaStreamSynchronize", kind="runtime", cuda_item=True):
    b = TraceBuilder()
    gs = 1000 + 100 * US
    b.launch(0, 10, 1000, 100 * US)               # GPU busy until 1000 + 100us
    # next op (gap of 300us), launched once the host is free: a next op launched before the
    # gap began would make it a queued gap, whatever the sync did
    b.launch(gs + max(sync_end, 0) + 10 * US, 10, 1000 + 400 * US, 100 * US)
    if kind == "runtime":
        b.runtime(name, gs + sync_start, sync_end - sync_start)
    else:
        b.cpu(name, gs + sync_start, sync_end - sync_start)
        if cuda_item:   # .item() of a CUDA tensor copies it back: a runtime call inside
            b.runtime("cudaMemcpyAsync", gs + sync_start + 1 * US, 1 * US)
    return analyze(b.build()).gaps.iloc[0]


@pytest.mark.parametrize("start,end,drained", [
    (-50 * US, 3 * US, True),                  # returned 3us after the GPU drained
    (-50 * US, A.SYNC_TOLERANCE_NS, True),     # at the tolerance limit
    (-50 * US, A.SYNC_TOLERANCE_NS + 1, False),  # too late: it was waiting for something else
    (-50 * US, -A.SKEW_NS, True),              # clock skew: returns just before
    (-50 * US, -A.SKEW_NS - 1, False),         # returned well before the GPU drained
    (A.SKEW_NS + 1, 20 * US, False),           # began after the drain: did not cause it
])
def test_sync_drain_tolerance(start, end, drained):
    g = _sync_gap(start, end)
    assert (g["drain"] == "sync") is drained
    assert g["drain_op"] == ("cudaStreamSynchronize" if drained else "")


def test_sync_names_prefer_aten_item_and_accept_sync_memcpy():
    assert _sync_gap(-50 * US, 2 * US, "cudaMemcpy")["drain_op"] == "cudaMemcpy"
    assert _sync_gap(-50 * US, 2 * US, "cudaMemcpyAsync")["drain"] == "starved"
    assert _sync_gap(-50 * US, 2 * US, "hipDeviceSynchronize")["drain"] == "sync"
    assert _sync_gap(-50 * US, 2 * US, "aten::item", kind="cpu_op")["drain_op"] == "aten::item"


def test_item_of_a_cpu_tensor_is_not_a_sync():
    """AdamW calls .item() on CPU step counters hundreds of times a step (seen on a real H100
    GPT trace: 58,600 aten::item, none with a CUDA call inside): they wait for nothing."""
    g = _sync_gap(-50 * US, 2 * US, "aten::item", kind="cpu_op", cuda_item=False)
    assert g["drain"] == "starved" and int(g["cpu_sync"]) == 0


def test_only_launch_threads_count_and_fallbacks():
    # side thread activity must be ignored when the launching thread is known
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("aten::mm", 0, 2000, tid=99)
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_untraced"]) == 900
    # no correlation at all: the threads that made runtime calls are used
    b = TraceBuilder()
    b.gpu("k", 0, 100)
    b.gpu("k", 1000, 100)
    b.runtime("cudaLaunchKernel", 100, 900)
    b.cpu("aten::mm", 0, 2000, tid=99)
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_launch"]) == 900
    # no runtime calls either: every host thread of the process
    b = TraceBuilder()
    b.gpu("k", 0, 100)
    b.gpu("k", 1000, 100)
    b.cpu("aten::mm", 0, 2000, tid=99)
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_cpu_op"]) == 900


def test_step_ranges_and_generic_spans_never_count():
    b = TraceBuilder()
    b.step(0, 0, 5000)
    b.add("other", "PyTorch Profiler (0)", 0, 5000, pid=b.pid, tid=b.tid)
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_untraced"]) == 900


def test_comm_wait_category_and_nccl_nvtx_domain():
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("c10d::allreduce_", 100, 300)
    b.cpu("ncclAllReduce", 400, 300, kind="annotation", domain="NCCL")
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_comm_wait"]) == 600 and int(g["cpu_untraced"]) == 300


def test_two_devices_are_attributed_separately():
    b = TraceBuilder()
    b.launch(0, 10, 0, 100, device=0)
    b.launch(20, 10, 1000, 100, device=0)
    b.launch(30, 10, 0, 500, device=1, tid=2)
    b.launch(40, 10, 700, 100, device=1, tid=2)
    b.cpu(sc.DATALOADER_OP, 100, 900)                 # main thread feeds device 0
    b.cpu("aten::mm", 500, 200, tid=2)                # thread 2 feeds device 1
    a = analyze(b.build())
    g = a.gaps.set_index("device")
    assert int(g.loc[0, "cpu_dataloader"]) == 900
    assert int(g.loc[1, "cpu_cpu_op"]) == 200
    devs = {d["device"]: d for d in a.to_dict()["attribution"]["devices"]}
    assert devs[0]["by_cpu"]["dataloader"] == 900 and devs[1]["idle_ns"] == 200


def test_top_ops_inclusive_time_inside_gaps():
    trace, truth = sc.dataloader_bound()
    top = analyze(trace).top_ops
    row = top[top["name"] == sc.DATALOADER_OP].iloc[0]
    assert int(row["ns"]) == truth["by_cpu"]["dataloader"] and row["category"] == "dataloader"
    assert "aten::pin_memory" not in set(top["name"])  # side thread


def test_classify_host_categories():
    b = TraceBuilder()
    names = [("cpu_op", "aten::item"), ("cpu_op", "entire_frame_compile (dynamo_timed)"),
             ("cpu_op", "nccl:all_reduce"), ("runtime", "cudaLaunchKernel"),
             ("runtime", "cudaEventSynchronize"), ("python", "torch/utils/data/dataloader.py(1): __next__"),
             ("annotation", "ProfilerStep#3"), ("cpu_op", "Torch-Compiled Region: 0/0"),
             ("osrt", "poll"), ("osrt", "write"), ("python", "threading.py(359): wait"),
             ("annotation", "pthread_cond_wait"), ("kernel", "k")]
    for i, (k, n) in enumerate(names):
        b.add(k, n, i, 1, pid=1, tid=1)
    ev = b.build().events.sort_values("ts")
    got = [A.CPU_CATEGORIES[c] if c >= 0 else None for c in A.classify_host(ev)]
    # a thread parked in poll / Condition.wait waits; a range that happens to carry a wait's
    # name is no OS call
    assert got == ["sync", "compile", "comm_wait", "launch", "sync", "dataloader", None,
                   "cpu_op", "wait", "cpu_op", "wait", "cpu_op", None]


def test_emit_nvtx_operator_names_are_recognised():
    g = _sync_gap(-50 * US, 2 * US, "aten::item, seq = 12, op_id = 7", kind="cpu_op")
    assert g["drain"] == "sync" and g["drain_op"] == "aten::item"


def test_top_ops_pool_emit_nvtx_suffixes():
    b = TraceBuilder()
    b.launch(0, 10, 0, 100)
    b.launch(20, 10, 1000, 100)
    b.cpu("aten::add, seq = 1, op_id = 2", 100, 300, kind="annotation")
    b.cpu("aten::add, seq = 3, op_id = 4", 500, 300, kind="annotation")
    top = analyze(b.build()).top_ops
    assert top[["name", "ns", "count"]].values.tolist() == [["aten::add", 600, 2]]


def test_allocator_calls_are_alloc_not_launch_and_lead_the_levers():
    # Two steps' kernels with a 2 ms hipFree between them: the host is stuck freeing memory.
    b = TraceBuilder()
    b.launch(0, 10 * US, 0, 100 * US)
    b.runtime("hipFree", 100 * US, 2000 * US)
    b.runtime("hipLaunchKernel", 2100 * US, 10 * US)
    b.launch(2100 * US, 10 * US, 2110 * US, 100 * US)
    a = analyze(b.build())
    g = a.gaps.iloc[0]
    assert (int(g["start"]), int(g["end"])) == (100 * US, 2110 * US)
    assert int(g["cpu_alloc"]) == 2000 * US
    assert int(g["cpu_launch"]) == 10 * US
    assert int(g["cpu_untraced"]) == 0
    assert g["drain"] == "starved"
    v = a.verdict
    # a 2 ms gap is not launch overhead: the launching thread was busy freeing memory
    assert v["bound"] == "host"
    assert "hipFree" in v["summary"]
    # no PyTorch marker in this trace: the allocator lever in CUDA's words (bounds.NATIVE_LEVERS)
    assert "cudaMallocAsync" in v["levers"][0]


def test_hip_memcpy_with_stream_is_a_blocking_sync():
    # PyTorch on ROCm copies synchronously with hipMemcpyWithStream (seen in TraceLens sglang traces).
    assert A.SYNC_API_RX.match("hipMemcpyWithStream")
    assert not A.SYNC_API_RX.match("hipMemcpyAsync")
    b = TraceBuilder()
    k = "void at::native::elementwise_kernel<128, 2>(int)"     # a PyTorch program
    b.launch(0, 10 * US, 0, 100 * US, name=k)
    b.runtime("hipMemcpyWithStream", 100 * US, 500 * US)
    b.launch(600 * US, 10 * US, 610 * US, 100 * US, name=k)
    g = analyze(b.build()).gaps.iloc[0]
    assert int(g["cpu_sync"]) == 500 * US and int(g["cpu_launch"]) == 10 * US
    v = analyze(b.build()).verdict
    # the host sat in a blocking copy while the GPU idled: that is a sync, not a launch
    assert v["bound"] == "sync"
    assert v["levers"][0].startswith("remove per-step host syncs")


def test_carve_in_blocks_matches_one_block(monkeypatch):
    """Carving disjoint gaps a few at a time (each block with only the rows reaching its
    span) gives the same per-gap split as carving them all at once, rows spanning blocks,
    touching a block's edge or lying between gaps included."""
    import numpy as np
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(1, 50, 300))
    gs, ge = starts, starts + rng.integers(0, 40, 300)   # disjoint, some empty
    ge = np.minimum(ge, np.r_[gs[1:], ge[-1]])
    hs = np.sort(rng.integers(0, int(ge[-1]), 600))
    he = hs + rng.integers(0, 60, 600)
    cats = rng.integers(0, len(A.CPU_CATEGORIES) - 1, 600)
    whole = A._carve(gs, ge, cats, hs, he)
    monkeypatch.setattr(A, "_BLOCK", 7)
    blocked = A._carve(gs, ge, cats, hs, he)
    assert whole.sum() > 0 and (whole == blocked).all()
    assert (blocked.sum(axis=1) == ge - gs).all()


def test_queued_split_only_for_queued_gaps():
    """Gaps with no queued ns get no queued split row (their qcpu_* is zero)."""
    import numpy as np
    gs, ge = np.array([0, 100, 200]), np.array([50, 150, 260])
    qns = np.array([0, 20, 80])
    cats, hs, he = np.array([0]), np.array([0]), np.array([300])
    split = A._carve(gs, ge, cats, hs, he)
    parts = [A._carve_queued(np.arange(3), gs, ge, qns, cats, hs, he)]
    whole, part, rows = parts[0]
    assert list(whole) == [2] and list(part) == [1] and rows.sum() == 20
    cols = A._queued_columns(split, parts)
    q = np.stack([np.zeros(3, np.int64) if c is None else c for c in cols], axis=1)
    assert list(q.sum(axis=1)) == [0, 20, 60] and (q[2] == split[2]).all()
    assert sum(c is not None for c in cols) == 1   # one category: the others None
    import pandas as pd
    gaps = pd.DataFrame({"start": gs})
    A._add_columns(gaps, "qcpu_", cols)
    assert (gaps[[f"qcpu_{c}" for c in A.CPU_CATEGORIES]].to_numpy() == q).all()


def test_split_columns_share_one_zero_column_and_copy_on_write():
    """The gap frame's category columns equal the split matrix; under copy-on-write the
    categories no gap has share one zero array (8 B a gap each otherwise), and a write to
    one of them reaches no other column."""
    import numpy as np
    import pandas as pd
    from traceread.table import SHARE_COLUMNS
    n, k = 50, len(A.CPU_CATEGORIES)
    split = np.zeros((n, k), np.int64, order="F")
    split[::3, 1] = 7
    split[5, k - 1] = 9
    gaps = pd.DataFrame({"start": np.arange(n)})
    A._add_split(gaps, "cpu_", split)
    cols = [f"cpu_{c}" for c in A.CPU_CATEGORIES]
    assert list(gaps.columns) == ["start"] + cols
    assert (gaps[cols].to_numpy() == split).all()
    zero = [c for j, c in enumerate(cols) if not split[:, j].any()]
    if SHARE_COLUMNS:
        arrs = [gaps[c].to_numpy() for c in zero]
        assert all(np.shares_memory(arrs[0], a) for a in arrs[1:])
        assert not np.shares_memory(gaps[cols[1]].to_numpy(), split)
    gaps.loc[:4, zero[0]] = 3
    assert int(gaps[zero[0]].sum()) == 15
    assert all(int(gaps[c].sum()) == 0 for c in zero[1:])


def test_rows_on_threads_is_the_whole_window_key_mask():
    """``rows_on_threads`` (the key made a block of rows at a time) gives the mask of the
    whole-window key it replaced, across block edges, negative ids and tids past 32 bits."""
    import numpy as np
    rng = np.random.default_rng(7)
    n = 2 * A.THREAD_BLOCK + 123
    pid = rng.choice(np.array([3, 7, 2**31 - 1, -5], np.int64), n)
    tid = rng.choice(np.array([11, 12, -1, 2**33 + 11], np.int64), n)
    for threads in (set(), {(3, 11)}, {(7, -1), (2**31 - 1, 12)},
                    {(p, t) for p in (3, 7, -5) for t in range(20)}):
        want = A._thread_mask(A.thread_key(pid.copy(), tid.copy()), threads)
        assert (A.rows_on_threads(pid, tid, threads) == want).all()
    before = pid.copy(), tid.copy()
    A.rows_on_threads(pid, tid, {(3, 11)})
    assert (pid == before[0]).all() and (tid == before[1]).all()   # the columns untouched
