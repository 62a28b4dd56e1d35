"""The parallel layout (passes/parallelism.py) on real gloo recordings, checked against the
truth their training loops measured (scripts/record_gloo_parallel.py, record_gloo_ddp.py),
and on planted GPU intervals for the overlap arithmetic."""
from __future__ import annotations

import json
from functools import lru_cache

import jsonschema
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.passes.parallelism import ddp_overlap, job_parallelism, parallelism
from traceread.passes.figures import layout_figures
from traceread.verdict.parallel import job_levers

from conftest import FIXTURES, analysed

GLOO = FIXTURES / "gloo"


@lru_cache(maxsize=None)
def _layout(job: str, rank: int) -> dict:
    return analysed(GLOO / job / f"rank-{rank}.json.gz").parallelism


def _truth(job: str) -> dict:
    return json.loads((GLOO / job / "truth.json").read_text())


def _kinds(p: dict) -> dict:
    return {s["kind"]: s for s in p["strategies"]}


@pytest.mark.parametrize("job,schedule,m", [("pp3/gpipe_p2_m8", "gpipe", 8), ("pp3/1f1b_p2_m4", "1f1b", 4)])
def test_pipeline_schedule_microbatches_and_bubble_match_the_loop(job, schedule, m):
    """The bubble: the steps' share in the schedule's P2P calls, against the loop's own timing
    of them (``_batch_p2p`` + ``_wait_batch_p2p``) over the same steps (barrier + step)."""
    truth = _truth(job)
    for rank in (0, 1):
        p = _layout(job, rank)
        pp = _kinds(p)["pp"]
        assert (pp["group_size"], pp["ranks"]) == (2, [0, 1])
        assert set(_kinds(p)) == {"pp"}
        pl = p["pipeline"]
        assert (pl["schedule"], pl["stages"], pl["stage"], pl["microbatches"]) == (schedule, 2, rank, m)
        assert pl["theoretical_bubble_pct"] == round(100 / (m + 1), 1)     # (p-1)/(m+p-1)
        rows = truth["per_rank"][str(rank)]
        loop = 100 * sum(r["p2p_ns"] for r in rows) / sum(r["barrier_ns"] + r["step_ns"] for r in rows)
        assert abs(pl["bubble_pct_by_stage"][str(rank)] - loop) <= 5.0, (rank, loop)
        assert pl["p2p_bytes_per_step"] == m * 64 * 512 * 4    # m microbatches of 64x512 float32


@pytest.mark.parametrize("job", ["pp3/gpipe_p2_m4_heavy1", "pp3/gpipe_p2_m4_sleep1"])
def test_job_names_the_planted_slow_stage(job):
    """The slow stage by its work per step (step less comm waits): 3x the layers, or a 15 ms
    untraced sleep in each microbatch's forward."""
    truth = _truth(job)
    j = job_parallelism({r: _layout(job, r) for r in (0, 1)})["pipeline"]
    assert j["slowest_stage"] == truth["args"]["slow_stage"] == 1
    work = {r: sum(x["step_ns"] - x["p2p_ns"] for x in rows) for r, rows in truth["per_rank"].items()}
    assert j["slowest_busy_x_fastest"] == pytest.approx(work["1"] / work["0"], rel=0.15)


def test_all_to_all_bytes_and_imbalance_match_the_splits():
    truth = _truth("a2a4")
    per = {r: _layout("a2a4", r) for r in range(4)}
    for r, p in per.items():
        ep = p["ep"]
        assert _kinds(p)["ep"]["group_size"] == 4
        row = truth["per_rank"][str(r)][0]
        assert (ep["sent_bytes_per_step"], ep["recv_bytes_per_step"]) == (row["sent_bytes"], row["recv_bytes"])
        assert ep["hot_rank"] == truth["args"]["hot_rank"]
    recv = [truth["per_rank"][str(r)][0]["recv_bytes"] for r in range(4)]
    j = job_parallelism(per)["ep"]
    assert j["hot_rank"] == 2
    assert j["recv_imbalance"] == round(max(recv) / np.mean(recv), 2)


def test_fsdp2_is_named_with_its_group_and_nothing_else():
    for r in (0, 1):
        p = _layout("fsdp2", r)
        assert set(_kinds(p)) == {"fsdp"}
        assert _kinds(p)["fsdp"]["group_size"] == 2
        assert _kinds(p)["fsdp"]["evidence"][0].startswith("fsdp2: FSDP::")


def test_ddp_all_reduce_time_matches_the_comm_hook_and_the_late_peer_is_exposed():
    truth = _truth("ddp2")
    for r in (0, 1):
        d = _layout("ddp2", r)["ddp"]
        hook = sum(x["allreduce_done_ns"] - x["allreduce_issue_ns"] for x in truth["per_rank"][str(r)])
        assert d["comm_ns"] == pytest.approx(hook, rel=0.15)
    fast = _layout("ddp2", 0)["ddp"]     # rank 0 waits ~30 ms a step for the sleeping rank 1
    assert fast["exposed_tail_ns"] > 0.8 * fast["comm_ns"]
    assert fast["tail_step_share_pct"] > 50


def _gpu_table(kernels):
    rows = [dict(ts=s, dur=e - s, kind="kernel", name=n, pid=1, tid=7) for s, e, n in kernels]
    ev = pd.DataFrame(rows)
    ev["collective"] = None
    return ev


def test_ddp_overlap_arithmetic_on_planted_kernels():
    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    ev = _gpu_table([(0, 100, "gemm"), (80, 200, ar), (150, 250, "gemm"), (300, 340, ar)])
    from traceread.passes.parallelism import comm_calls

    d = ddp_overlap(ev, comm_calls(ev), [(0, 400, 1)])
    # comm [80,200)+[300,340) = 160; hidden [80,100)+[150,200) = 70
    assert (d["comm_ns"], d["hidden_ns"], d["overlap_efficiency"]) == (160, 70, round(70 / 160, 3))
    # last all_reduce starts at 300, last compute begun before it ends at 250: [300,340) exposed
    assert d["exposed_tail_ns"] == 40
    assert d["tail_step_share_pct"] == 10.0


def test_tp_layers_arithmetic_on_planted_kernels():
    """Each all_reduce ends a layer: layer 0 from the step's first compute to the end of
    all_reduce 0, layer 1 from there to the end of all_reduce 1; exposed = comm no compute
    covers."""
    from traceread.passes.parallelism import comm_calls, tp_layers

    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    rows = []
    for s in (0, 1000):
        rows += [(s + 0, s + 100, "gemm"), (s + 100, s + 200, ar), (s + 200, s + 300, "gemm"),
                 (s + 250, s + 400, ar), (s + 400, s + 1000, "gemm")]
    ev = _gpu_table(rows)
    tp = tp_layers(ev, comm_calls(ev), [(0, 1000, 7), (1000, 2000, 7)], None)
    assert (tp["layers_per_step"], tp["steps"]) == (2, 2)
    l0, l1 = tp["layers"]
    assert (l0["layer_ns"], l0["comm_ns"], l0["exposed_ns"], l0["comm_pct"]) == (400, 200, 200, 50.0)
    assert (l1["layer_ns"], l1["comm_ns"], l1["exposed_ns"], l1["comm_pct"]) == (400, 300, 200, 50.0)
    assert (tp["exposed_ns"], tp["step_share_pct"], tp["compute_ns"]) == (400, 20.0, 300)


def test_tp_layers_on_the_recorded_dtensor_job_match_the_loop():
    """tp2: 4 MLP blocks, ColwiseParallel + RowwiseParallel over 2 gloo ranks; the loop timed
    each block and its all_reduce (issue to the end of the wait) with hooks."""
    truth = _truth("tp2")
    for r in (0, 1):
        p = _layout("tp2", r)
        assert _kinds(p)["tp"]["group_size"] == 2 and set(_kinds(p)) == {"tp"}
        tp = p["tp"]
        assert (tp["layers_per_step"], tp["steps"]) == (4, 3)
        rows = truth["per_rank"][str(r)]
        for lay in tp["layers"]:
            k = lay["layer"]
            loop_layer = sum(x["layers"][k]["layer_ns"] for x in rows)
            loop_comm = sum(x["layers"][k]["comm_ns"] for x in rows)
            assert lay["layer_ns"] == pytest.approx(loop_layer, rel=0.1), (r, k)
            # the trace misses the Python around the hooks the loop includes: <= 10 points
            assert abs(lay["comm_pct"] - 100 * loop_comm / loop_layer) <= 10, (r, k)
        assert tp["step_share_pct"] > 50       # the all_reduce dominates this CPU job


def test_no_strategy_without_evidence():
    ev = _gpu_table([(0, 100, "gemm"), (120, 200, "gemm")])
    assert parallelism(ev)["strategies"] == []


def test_analyze_json_of_a_job_carries_the_layout_and_validates():
    paths = [str(GLOO / "pp_gpipe" / f"rank-{r}.json.gz") for r in (0, 1)]
    res = CliRunner().invoke(main, ["analyze", "--format", "json", *paths])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    schema = json.loads((FIXTURES.parents[1] / "docs" / "schema" / "analyze.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["cross_rank"][0]["parallelism"]["pipeline"]["slowest_stage"] == 1
    assert [t["parallelism"]["pipeline"]["stage"] for t in doc["traces"]] == [0, 1]


def test_link_gbps_on_the_dense_sweep_json_and_text():
    paths = [str(GLOO / "sweep2_dense" / f"rank-{r}.json.gz") for r in (0, 1)]
    res = CliRunner().invoke(main, ["analyze", "--format", "json", "--link-gbps", "10", *paths])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    schema = json.loads((FIXTURES.parents[1] / "docs" / "schema" / "analyze.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    for t in doc["traces"]:
        for m in t["parallelism"]["comm_model"]:
            assert m["link_gbps"] == 10 and m["link_pct"] == round(10 * m["beta_gbps"], 1)
            assert m["below_link"] == (m["link_pct"] < 25)
    # the job view carries each rank's fit
    assert sorted({m["rank"] for m in doc["cross_rank"][0]["parallelism"]["comm_model"]}) == [0, 1]
    text = CliRunner().invoke(main, ["analyze", "--link-gbps", "20", paths[0]]).output
    assert "of the 20 GB/s link -- far below it" in " ".join(text.split())
    assert "x the fit: contention or a late peer" in " ".join(text.split())


def test_sendrecv_kernels_of_an_all_to_all_are_not_a_pipeline():
    ev = _gpu_table([(0, 100, "gemm"), (100, 150, "ncclDevKernel_SendRecv"),
                     (160, 200, "ncclDevKernel_AllToAll_f32")])
    ev.loc[2, "collective"] = "all_to_all"
    kinds = {s["kind"] for s in parallelism(ev)["strategies"]}
    assert kinds == {"ep"}
    alone = _gpu_table([(0, 100, "gemm"), (100, 150, "ncclDevKernel_SendRecv")])
    assert {s["kind"] for s in parallelism(alone)["strategies"]} == {"pp"}


def test_comm_model_recovers_planted_alpha_beta_and_flags_the_slow_call():
    from traceread.passes.parallelism import comm_calls, comm_model

    alpha, beta, n = 20_000, 10.0, 4          # 20 us, 10 GB/s = 10 bytes/ns of bus traffic
    rows, t = [], 0
    for b in (1 << 16, 1 << 20, 1 << 24, 1 << 26) * 2:
        dur = int(alpha + b * 2 * (n - 1) / n / beta)
        rows.append((t, t + dur, b))
        t += dur + 1000
    rows.append((t, t + 5 * int(alpha + (1 << 20) * 1.5 / beta), 1 << 20))   # a late peer
    ev = _gpu_table([(s, e, "ncclDevKernel_AllReduce_Sum_f32_RING_LL") for s, e, _ in rows])
    ev["msg_bytes"] = [b for *_, b in rows]
    ev["group_size"] = n
    (m,) = comm_model(ev, comm_calls(ev), [], "nccl")
    assert (m["collective"], m["group_size"], m["sizes"], m["calls"]) == ("all_reduce", 4, 4, 9)
    assert m["alpha_us"] == pytest.approx(20.0, abs=0.05)
    assert m["beta_gbps"] == pytest.approx(10.0, rel=1e-3)
    assert m["fit_error_pct"] == 0.0
    assert (m["slow_calls"], m["worst_x_fit"]) == (1, 5.0)
    late = m["slowest_call"]
    assert (late["bytes"], late["dur_ns"], late["ts_ns"]) == (1 << 20, rows[-1][1] - rows[-1][0], rows[-1][0])
    assert late["fit_ns"] == pytest.approx(alpha + (1 << 20) * 1.5 / beta, abs=2)
    assert (m["min_bytes"], m["max_bytes"], m["worst_error_pct"]) == (1 << 16, 1 << 26, 0.0)


def test_comm_model_splits_two_planted_regimes_and_not_one():
    """Two planted lines (a protocol switch at 1 MiB): one line misses by > 20%, two regimes
    recover both exactly; the first line alone stays one regime."""
    from traceread.passes.parallelism import comm_calls, comm_model

    def table(pts):
        rows, t = [], 0
        for b, dur in pts:
            rows.append((t, t + dur, b))
            t += dur + 1000
        ev = _gpu_table([(s, e, "ncclDevKernel_AllReduce_Sum_f32_RING_LL") for s, e, _ in rows])
        ev["msg_bytes"] = [b for *_, b in rows]
        ev["group_size"] = 2
        return comm_model(ev, comm_calls(ev), [], "nccl")
    small = [(b, int(10_000 + b / 4.0)) for b in (1 << 12, 1 << 14, 1 << 16, 1 << 18)]
    large = [(b, int(500_000 + b / 2.0)) for b in (1 << 21, 1 << 22, 1 << 23)]
    lo, hi = table(small + large)
    assert (lo["max_bytes"], hi["min_bytes"]) == (1 << 18, 1 << 21)
    assert (lo["alpha_us"], hi["alpha_us"]) == (pytest.approx(10.0, abs=0.05), pytest.approx(500.0, abs=0.05))
    assert (lo["beta_gbps"], hi["beta_gbps"]) == (pytest.approx(4.0, rel=1e-3), pytest.approx(2.0, rel=1e-3))
    assert (lo["worst_error_pct"], hi["worst_error_pct"]) == (0.0, 0.0)
    (one,) = table(small)
    assert one["sizes"] == 4


def test_link_gbps_reports_beta_as_a_share_of_the_link():
    from traceread.passes.parallelism import with_link

    layout = {"comm_model": [{"beta_gbps": 2.0}, {"beta_gbps": 40.0}]}
    a, b = with_link(layout, 50.0)["comm_model"]
    assert (a["link_pct"], a["below_link"], b["link_pct"], b["below_link"]) == (4.0, True, 80.0, False)
    assert with_link(None, 50.0) is None and with_link({"x": 1}, None) == {"x": 1}


def _medians(truth: dict, r: int) -> dict:
    """The loop's median time of each size's all_reduce calls."""
    took: dict = {}
    for row in truth["per_rank"][str(r)]:
        for b, ns in row["all_reduce_bytes_ns"]:
            took.setdefault(b, []).append(ns)
    return {b: float(np.median(v)) for b, v in took.items()}


def _fit_at(models: list, b: int) -> float:
    (m,) = [m for m in models if m["min_bytes"] <= b <= m["max_bytes"]]
    return m["alpha_us"] * 1e3 + b / m["beta_gbps"]


def test_comm_model_on_the_wide_all_reduce_sweep():
    """1 KiB .. 64 MiB every 4x (sweep2_wide, 5 calls per size and step): fitted to each
    size's median call, not its fastest (the old fit was off by 43-80% at 1 KiB and 4-64 MiB
    on these medians), in two regimes -- gloo's buffers leave the cache past 1 MiB. Every
    size's error is reported; the worst is 27% (rank 0 at 4 and 16 MiB: three sizes a
    latency-bandwidth line cannot all meet) -- the goal of 20% everywhere is not reached
    there. Against the loop's own medians (they add the Python call, ~25 us) within 35%."""
    truth = _truth("sweep2_wide")
    for r in (0, 1):
        lo, hi = _layout("sweep2_wide", r)["comm_model"]
        assert (lo["min_bytes"], lo["max_bytes"], hi["min_bytes"], hi["max_bytes"]) == \
            (1024, 1 << 20, 4 << 20, 64 << 20)
        assert lo["worst_error_pct"] <= 25 and hi["worst_error_pct"] <= 30
        assert [x["bytes"] for x in lo["by_size"] + hi["by_size"]] == [4 ** k * 1024 for k in range(9)]
        for x in lo["by_size"] + hi["by_size"]:
            assert x["error_pct"] == pytest.approx(100 * abs(x["fit_ns"] - x["median_ns"]) / x["median_ns"], abs=0.2)
        for b, ns in _medians(truth, r).items():
            assert abs(_fit_at([lo, hi], b) - ns) / ns <= 0.35, b


def test_comm_model_on_the_real_all_reduce_sweep():
    """4 KiB .. 4 MiB every 4x: one line (no split halves the error on two sizes each side);
    within 31% of every size's median (the old fit: 59%)."""
    for r in (0, 1):
        (m,) = _layout("sweep2", r)["comm_model"]
        assert (m["collective"], m["group_size"], m["backend"], m["sizes"]) == ("all_reduce", 2, "gloo", 6)
        assert m["worst_error_pct"] <= 31


def test_comm_model_leaves_out_a_size_whose_calls_waited():
    """sweep2_dense: the 4 KiB calls' median (2.4 ms) is 10x the 8 KiB one's -- they open
    each step, right after the barrier, and wait on the peer: reported as waited, not fitted."""
    for r in (0, 1):
        models = _layout("sweep2_dense", r)["comm_model"]
        waited = [x["bytes"] for m in models for x in m["by_size"] if x["waited"]]
        assert waited == [4096]
        assert sum(m["sizes"] for m in models) == 12


def test_comm_model_flags_the_time_shared_four_rank_sweep():
    """4 ranks on 2 cores: calls wait on descheduled peers -- flagged, and the fit says it is
    poor (a regime off by more than 20% at some size)."""
    for r in range(4):
        models = _layout("sweep4_dense", r)["comm_model"]
        assert sum(m["slow_calls"] for m in models) > 0
        assert max(m["worst_error_pct"] for m in models) > 20


def test_job_text_names_the_layout_and_the_busiest_stage():
    job = "pp3/gpipe_p2_m4_heavy1"
    paths = [str(GLOO / job / f"rank-{r}.json.gz") for r in (0, 1)]
    res = CliRunner().invoke(main, ["analyze", *paths])
    assert res.exit_code == 0, res.output
    head = res.output.split("\n\n")[0]
    import re

    got = re.search(r"layout     PP x2; stage bubbles 0: ([\d.]+)%, 1: ([\d.]+)% \(gpipe, m=4, "
                    r"theory 20.0%", head)
    assert got, head
    truth = _truth(job)
    for r in (0, 1):   # the loop's share in its P2P calls: 75.1%, 41.3%
        rows = truth["per_rank"][str(r)]
        loop = 100 * sum(x["p2p_ns"] for x in rows) / sum(x["barrier_ns"] + x["step_ns"] for x in rows)
        assert abs(float(got.group(r + 1)) - loop) <= 5
    assert "stage 1 computes" in head


def test_each_strategy_gets_the_group_its_calls_name():
    from types import SimpleNamespace

    ev = _gpu_table([(0, 100, "gemm"), (100, 150, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
                     (160, 200, "ncclDevKernel_AllToAll_f32")])
    ev["process_group"] = [None, "1", "2"]
    ev["group_size"] = [-1, 4, 2]
    ev.loc[2, "collective"] = "all_to_all"
    meta = SimpleNamespace(rank=5, distributed={"pg_config": [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
        {"pg_name": "1", "pg_desc": "dp", "pg_size": 4, "ranks": [1, 3, 5, 7]},
        {"pg_name": "2", "pg_desc": "ep", "pg_size": 2, "ranks": [4, 5]}]})
    ctx = {"framework_evidence": {"ddp": "DistributedDataParallel.forward"}}
    got = {s["kind"]: (s["group_size"], s["ranks"], s["process_group"])
           for s in parallelism(ev, meta, ctx)["strategies"]}
    assert got == {"ddp": (4, [1, 3, 5, 7], "dp"), "ep": (2, [4, 5], "ep")}
    ev["process_group"] = None     # sizes alone: the one group of that size, else size only
    got = {s["kind"]: (s["group_size"], s["ranks"]) for s in parallelism(ev, meta, ctx)["strategies"]}
    assert got == {"ddp": (4, [1, 3, 5, 7]), "ep": (2, [4, 5])}


def test_vllm_all_reduce_is_tensor_parallel_over_its_named_group():
    p = analysed(FIXTURES / "kineto" / "tracelens_b200_eager_trace.json.gz").parallelism
    (tp,) = p["strategies"]
    assert (tp["kind"], tp["group_size"], tp["ranks"]) == ("tp", 8, list(range(8)))
    assert tp["evidence"][0] == "vllm: vllm::all_reduce"


def test_fsdp_exposure_on_planted_kernels_and_the_real_fsdp2_units():
    from traceread.passes.parallelism import comm_calls, fsdp_exposure

    ev = _gpu_table([(0, 100, "gemm"), (50, 150, "ncclDevKernel_AllGather_RING_LL"),
                     (200, 260, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL")])
    f = fsdp_exposure(ev, comm_calls(ev), [(0, 300, 1)])
    assert f["all_gather"] == {"comm_ns": 100, "exposed_ns": 50, "exposed_pct": 50.0}
    assert f["reduce_scatter"] == {"comm_ns": 60, "exposed_ns": 60, "exposed_pct": 100.0}
    for r in (0, 1):
        real = _layout("fsdp2", r)["fsdp"]
        assert real["units"] == 2            # fully_shard on the MLP's two Linear layers
        ag = real["all_gather"]
        assert 0 < ag["exposed_ns"] <= ag["comm_ns"]
        # gloo runs it as an all_reduce span; the c10d op that issued it names it (issue 39)
        rs = real["reduce_scatter"]
        assert rs is not None and 0 <= rs["exposed_ns"] <= rs["comm_ns"] and rs["comm_ns"] > 0
        # prefetch saves the exposed gathers, at most the compute no comm overlaps
        assert 0 < real["free_compute_ns"] <= sum(x["step_ns"] for x in _truth("fsdp2")["per_rank"][str(r)])
        ctx = dict(layout_figures(_layout("fsdp2", r)), framework_evidence={"fsdp2": "x"},
                   collectives=["all_gather"])
        from traceread.verdict.levers import offered
        (lv,) = [x for x in offered({"comms": 1 << 40}, {}, {}, ctx, 1, ("comms",))
                 if x["id"] == "fsdp_prefetch"]
        assert lv["saves_ns"] == min(ag["exposed_ns"], real["free_compute_ns"])


@pytest.mark.parametrize("job", ["pp3/gpipe_p2_m4_heavy1", "pp3/gpipe_p2_m4_sleep1"])
def test_pipeline_levers_on_the_recorded_jobs(job):
    truth = _truth(job)
    j = job_parallelism({r: _layout(job, r) for r in (0, 1)})
    got = {x["id"]: x for x in job_levers(j)}
    assert list(got)[0] == "pp_rebalance"      # the larger saving first
    assert f"stage {truth['args']['slow_stage']}" in got["pp_rebalance"]["lever"]
    # the excess: the slow stage's work above the stages' mean, as the loop measured it
    work = {r: sum(x["step_ns"] - x["p2p_ns"] for x in rows) for r, rows in truth["per_rank"].items()}
    loop = work["1"] - (work["0"] + work["1"]) / 2
    assert got["pp_rebalance"]["saves_ns"] == pytest.approx(loop, rel=0.15)
    if "pp_microbatches" in got:   # m=4 -> 8: the slow stage's fill and drain, the other
        # stage's work / m, halves (the loop's; the balanced theory's 20% -> 11.1% of the
        # whole step said 5x that on heavy1)
        assert got["pp_microbatches"]["saves_ns"] == pytest.approx(work["0"] / 8, rel=0.15)


def test_all_to_all_lever_names_the_hot_rank():
    j = job_parallelism({r: _layout("a2a4", r) for r in range(4)})
    (lv,) = job_levers(j)
    assert lv["id"] == "ep_balance" and "rank 2 gets 2.29x" in lv["lever"]
    # the hot rank's own all_to_all time, at the mean bytes instead of its 2.29x
    hot = _layout("a2a4", 2)["ep"]["a2a_ns"]
    assert j["ep"]["a2a_ns"] == hot > 0
    assert lv["saves_ns"] == int(hot * (1 - 1 / 2.29))
    # the DDP job gets none of them
    assert job_levers(job_parallelism({r: _layout("ddp2", r) for r in (0, 1)})) == []


def test_comm_waits_on_planted_host_spans():
    """The step thread's comm waits, each rule on planted rows (µs as ns units):
    - recv issued at 100, its gloo:recv span on the thread until 400: blocked 100..400;
    - send issued at 500 (span to 2000) while the thread computes 510..900, then sleeps
      untraced 900..1800 and computes again: the send completing at 2000 mid-compute, and
      the sleep, are not waits;
    - a second send's span ends at 3000, the thread idles 2100..3000 and resumes at 3010
      (within RESUME_TOL_NS): a wait;
    - a barrier issued at 4000, the thread resumes at 5000 (its gloo:barrier span on a
      worker ended at 4500): the whole gap is the barrier's wait;
    - a send whose span ends 1.5 ms before the thread resumes: not a wait."""
    from traceread.passes.parallelism import comm_calls, comm_waits

    rows = [
        (100, 10, "cpu_op", "c10d::recv_", 7), (105, 295, "annotation", "gloo:recv", 7),
        (400, 90, "cpu_op", "aten::mm", 7),
        (500, 10, "cpu_op", "c10d::send", 7), (505, 1495, "annotation", "gloo:send", 7),
        (510, 390, "cpu_op", "aten::mm", 7), (1800, 290, "cpu_op", "aten::mm", 7),
        (2090, 10, "cpu_op", "c10d::send", 7), (2095, 905, "annotation", "gloo:send", 7),
        (3010, 90, "cpu_op", "aten::mm", 7),
        (4000, 10, "cpu_op", "c10d::barrier", 7), (4010, 490, "annotation", "gloo:barrier", 9),
        (5000, 100, "cpu_op", "aten::mm", 7),
        (5200, 10, "cpu_op", "c10d::send", 7), (5205, 295, "annotation", "gloo:send", 7),
        (7000, 100, "cpu_op", "aten::mm", 7)]
    ev = pd.DataFrame([dict(ts=t * 1000, dur=d * 1000, kind=k, name=n, pid=1, tid=tid)
                       for t, d, k, n, tid in rows])
    ev["collective"] = None
    w = comm_waits(ev, comm_calls(ev), 7, [0], [8_000_000])
    # P2P: recv 100..400 (issue + wait), the send issues (3 x 10), 2100..3000 waiting; the
    # last send completes at 5500 but the thread resumes only at 7000 (1.5 ms later: it was
    # doing something untraced, not waiting on it)
    assert int(w["p2p"][0]) == (300 + 10 + 10 + 10 + 900) * 1000
    # other: the barrier's issue and the gap after it until the thread resumes
    assert int(w["other"][0]) == (10 + 990) * 1000


def test_gloo_job_bus_bandwidth_from_the_spans_shapes():
    """A gloo span's message size comes from its recorded shape (``record_shapes=True``), so
    a CPU job gets its bus bandwidth (before: 0 sized instances): sweep2, 0.56 GB/s against
    the loop's bytes over its own call times, 0.53 / 0.52 (they add the Python call)."""
    truth = _truth("sweep2")
    job = traceread.job([str(GLOO / "sweep2" / f"rank-{r}.json.gz") for r in (0, 1)])
    (bw,) = [b for b in job.seed["bandwidth"] if b["collective"] == "all_reduce"]
    assert bw["sized"] == bw["instances"] > 0
    for r in ("0", "1"):
        calls = [c for row in truth["per_rank"][r] for c in row["all_reduce_bytes_ns"]]
        loop = sum(b for b, _ in calls) / sum(ns for _, ns in calls)    # n = 2: bus factor 1
        assert bw["busbw_gbps"] == pytest.approx(loop, rel=0.10)


def _fitted(models: list) -> tuple[np.ndarray, np.ndarray]:
    """The sizes and medians a rank's comm model fitted (waited sizes left out)."""
    xs = [x for m in models for x in m["by_size"] if not x["waited"]]
    return np.array([x["bytes"] for x in xs], float), np.array([x["median_ns"] for x in xs], float)


def _grid_minimax(b: np.ndarray, t: np.ndarray) -> float:
    """Brute force: the least worst relative error (%) of ``alpha + b * slope`` over a grid of
    alpha >= 0 and slope > 0 (upper bound of the true minimum: the grid may miss it)."""
    alpha = np.concatenate([[0.0], np.geomspace(t.min() * 1e-3, t.max(), 1500)])
    r = t / b
    slope = np.geomspace(r.min() * 0.05, r.max() * 2, 1500)
    worst = np.zeros((len(alpha), len(slope)))
    for bi, ti in zip(b, t):
        worst = np.maximum(worst, np.abs(alpha[:, None] + bi * slope[None, :] - ti) / ti)
    return 100 * float(worst.min())


@pytest.mark.parametrize("job,ranks", [("sweep2", 2), ("sweep2_wide", 2), ("sweep2_dense", 2)])
def test_each_regime_is_the_minimax_line(job, ranks):
    """No line on a fine (alpha, slope) grid beats a regime's fitted worst error, and the
    fitted line is within 0.3 points of the grid's best: the fit is the least worst one."""
    for r in range(ranks):
        for m in _layout(job, r)["comm_model"]:
            b, t = _fitted([m])
            grid = _grid_minimax(b * 1.0, t)   # all_reduce x2: bus bytes = bytes
            assert m["worst_error_pct"] <= grid + 0.05, (job, r, m["min_bytes"])
            assert grid - m["worst_error_pct"] <= 0.3, (job, r, m["min_bytes"])


def _lp_minimax(b: np.ndarray, t: np.ndarray) -> float:
    """The exact least worst relative error (%) of a line alpha >= 0, slope >= 0 (an LP)."""
    from scipy.optimize import linprog

    a_ub = [[s / ti, s * bi / ti, -1] for bi, ti in zip(b, t) for s in (1, -1)]
    b_ub = [s for _ in t for s in (1, -1)]
    res = linprog([0, 0, 1], A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * 3, method="highs")
    return 100 * float(res.x[2])


def _best_partition(b: np.ndarray, t: np.ndarray) -> tuple[float, list]:
    """The least worst error (%) over every split of the sizes into contiguous regimes of
    >= 3 sizes, each its own exact minimax line -- no halving rule: the floor any regime
    model can reach."""
    n, best = len(t), {len(t): (0.0, [])}
    for i in range(n - 3, -1, -1):
        opts = [(max(_lp_minimax(b[i:j], t[i:j]), best[j][0]), [(i, j)] + best[j][1])
                for j in range(i + 3, n + 1) if j in best]
        if opts:
            best[i] = min(opts, key=lambda o: o[0])
    return best[0]


def test_comm_model_sweeps_cannot_all_reach_20_pct():
    """The goal of 20% at every size, against what the medians allow. sweep2 and sweep2_wide
    rank 0: no split into regimes of >= 3 sizes, however chosen, gets under 23.9% / 21.1% /
    27.3% (exact LP per regime) -- the medians fall with size (sweep2: 4 KiB 343 us, 16 KiB
    211 us) or cost more per byte at a larger size (4 MiB 1.23 ns/B, 16 MiB 2.16). The fit
    meets that floor where its regimes are the best split (sweep2_wide rank 0). sweep2_wide
    rank 1 could reach 19.8% only with a third, flat 1..16 KiB regime, which halves no
    size's error: the rule keeps 23.8%."""
    pytest.importorskip("scipy")
    floors = {("sweep2", 0): 23.9, ("sweep2", 1): 21.1, ("sweep2_wide", 0): 27.3,
              ("sweep2_wide", 1): 19.8}
    fits = {("sweep2", 0): [30.6], ("sweep2", 1): [28.9], ("sweep2_wide", 0): [11.1, 27.3],
            ("sweep2_wide", 1): [23.8, 19.8]}
    for (job, r), floor in floors.items():
        models = _layout(job, r)["comm_model"]
        b, t = _fitted(models)
        got, parts = _best_partition(b, t)
        assert got == pytest.approx(floor, abs=0.1), (job, r)
        assert [m["worst_error_pct"] for m in models] == fits[(job, r)]
        assert all(m["worst_error_pct"] + 0.1 >= _lp_minimax(*_fitted([m])) for m in models)
    # the 4 and 16 MiB medians alone force 27.3% on any line with alpha >= 0
    hi = _layout("sweep2_wide", 0)["comm_model"][1]
    assert hi["limit"] == {"bytes": [4 << 20, 16 << 20], "median_ns": [5168646, 36203881],
                           "why": "per_byte_rises", "floor_pct": 27.3}
    assert _layout("sweep2", 0)["comm_model"][0]["limit"]["why"] == "time_falls"
    # rank 1: the third regime the floor needs does not halve two sizes' error on its side
    (lo, _) = _layout("sweep2_wide", 1)["comm_model"]
    b, t = _fitted([lo])
    left = _lp_minimax(b[:3], t[:3])
    assert sum(left <= x["error_pct"] / 2 for x in lo["by_size"][:3]) < 2


def test_a_1f1b_first_stage_with_few_microbatches_reports_the_jobs_schedule():
    """1F1B, p=4, m=4: stage 0 runs its four forwards before its first backward -- alone it
    reads as GPipe -- while the last stage alternates: the job says 1F1B, and so does every
    rank's own report now (stage 0 keeps what it read alone as ``schedule_own``)."""
    paths = [str(GLOO / "pp3/1f1b_p4_m4_heavy2" / f"rank-{r}.json.gz") for r in range(4)]
    assert traceread.analyze(paths[0]).parallelism["pipeline"]["schedule"] == "gpipe"
    job = traceread.job(paths)
    assert job.layout["pipeline"]["schedule"] == "1f1b"
    for r, a in job.analyses.items():
        pl = a.parallelism["pipeline"]
        assert (pl["schedule"], pl["microbatches"], pl["theoretical_bubble_pct"]) == ("1f1b", 4, 42.9)
        assert pl.get("schedule_own") == ("gpipe" if r == 0 else None)
    res = CliRunner().invoke(main, ["analyze", "--format", "json", *paths])
    doc = json.loads(res.output)
    assert [t["parallelism"]["pipeline"]["schedule"] for t in doc["traces"]] == ["1f1b"] * 4
    text = CliRunner().invoke(main, ["analyze", *paths]).output
    assert "schedule 1f1b, the job's; this stage alone reads gpipe" in " ".join(text.split())
