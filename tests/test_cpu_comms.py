"""A CPU program whose steps mostly wait on collectives (passes/parallelism.host_comm,
passes/cpudesign.py, the cpu_* comms levers of verdict/levers.py): the verdict names
communication as the bound with its share of each step, the levers its preconditions allow,
and keeps "profile with CUDA" for a GPU program profiled without its GPU side only."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from conftest import analysed, corpus_or_skip
from traceread import load
from traceread.passes.cpudesign import cpu_design

FIX = Path(__file__).parent / "fixtures"
GLOO = FIX / "gloo"
HTA = "facebookresearch__HolisticTraceAnalysis/tests/data"
RANK34 = f"{HTA}/cpu_only/rank-34__blob05cd72fe.Jul_15_10_52_41.1074.pt.trace.json.gz"
GPU_LISTED = f"{HTA}/distributed_info_unavailable/distributed_info_not_found.json.gz"
MS = 1_000_000


def _ids(v: dict, key: str = "actions") -> list[str]:
    return [x["id"] for x in v[key]]


def _withdrawn(v: dict) -> dict:
    return {w["id"]: w for w in v["withdrawn"]}


def test_gloo_ddp_rank_waiting_on_all_reduce_is_comms_bound():
    """ddp2 rank 0 (a real gloo DDP run on CPU torch): the host waits in gloo:all_reduce 32 ms
    of each 37 ms step -- rank 1 sleeps 30 ms before its forward. Before: 'cpu_only' with
    'profile with ProfilerActivity.CUDA' as its only advice."""
    a = analysed(GLOO / "ddp2" / "rank-0.json.gz")
    v = a.verdict
    assert v["bound"] == "comms"
    cc = a.facts.figures["cpu_comm"]
    top = cc["collectives"][0]
    assert top["name"] == "gloo:all_reduce" and top["calls_per_step"] == 1
    assert 85 <= top["share_pct"] <= 93
    # every step: gloo:all_reduce closes 0.9-1.3 ms after the host resumed in steps 2, 3 and
    # 7, which the wait rule alone missed (0.5 ms counted of a 32 ms wait)
    assert min(top["exposed_by_step"]) > 28 * MS
    assert top["sizes"] is None                     # shapes not recorded
    assert v["evidence"]["cpu_comm_pct"] == cc["share_pct"]
    acts = {x["id"]: x for x in v["actions"]}
    # DDP's reducer and one bucket a step: accumulation and an earlier first bucket
    assert {"cpu_no_sync", "cpu_ddp_overlap"} <= set(acts)
    assert all(acts[i]["basis"] == "bound" and acts[i]["saves_ns"] > 0
               for i in ("cpu_no_sync", "cpu_ddp_overlap"))
    # the overlap hides at most the backward's host time (1.2 ms a step)
    assert acts["cpu_ddp_overlap"]["saves_per_step_ns"] < 2 * MS
    assert "cpu_ddp_buckets" not in acts             # one bucket: nothing to merge
    gone = _withdrawn(v)
    assert gone["record_gpu"]["precondition"] == "not_cpu_by_design"
    # every step waits alike (32-36 ms): one trace cannot tell a late peer from the transfer
    assert gone["cpu_peers_late"]["precondition"] == "cpu_peers_late"
    assert a.parallelism["cpu_design"]["by_design"] is True


def test_the_sleeping_rank_is_not_comms_bound():
    """ddp2 rank 1 and fsdp2_sleep1 rank 1 sleep in untraced Python, then find their peer
    ready: their comm waits are short -- the barrier's wait ends where gloo:barrier closed,
    not at the rank's next operator 20 ms later."""
    for p in (GLOO / "ddp2" / "rank-1.json.gz", GLOO / "fsdp2_sleep1" / "rank-1.json.gz"):
        a = analysed(p)
        assert a.verdict["bound"] == "cpu_only", p
        assert a.facts.figures["cpu_comm"]["share_pct"] < 50, p
        assert "record_gpu" not in _ids(a.verdict)
    cc = analysed(GLOO / "fsdp2_sleep1" / "rank-1.json.gz").facts.figures["cpu_comm"]
    barrier = next(c for c in cc["collectives"] if c["collective"] == "barrier")
    # at most gloo:barrier's own span a step (6.8 ms in step 5), not the 20 ms sleep after it
    assert max(barrier["exposed_by_step"]) < 8 * MS


def test_a_rank_waiting_for_a_late_peer_is_told_so():
    """fsdp2_sleep1 rank 0 waits 26-34 ms a step in gloo:all_gather for rank 1's 20 ms sleep;
    its 4 calls of 64 KiB over 2 ranks need well under a millisecond: the peers-late lever
    leads, its saving the wait beyond that transfer floor."""
    v = analysed(GLOO / "fsdp2_sleep1" / "rank-0.json.gz").verdict
    assert v["bound"] == "comms"
    first = v["actions"][0]
    assert first["id"] == "cpu_peers_late" and "other ranks arriving late" in first["lever"]
    assert 20 * MS < first["saves_per_step_ns"] < 35 * MS


def test_hta_cpu_only_rank_is_comms_bound_with_its_buckets():
    """HTA's CPU-only rank 34 of 300 (gloo, T1_SKL, deviceProperties []): 83% of each step
    in two exposed gloo:all_reduce buckets (1.2 + 7.9 MiB); one step's wait is 381 ms against
    157-178 ms for the same bytes in the others."""
    a = analysed(corpus_or_skip() / RANK34)
    v = a.verdict
    assert v["bound"] == "comms"
    top = a.facts.figures["cpu_comm"]["collectives"][0]
    assert 80 <= top["share_pct"] <= 86
    assert top["sizes"] == [321271 * 4, 8329644] and top["group_size"] == 300
    assert top["calls_per_step"] == 2
    ids = _ids(v)
    assert {"cpu_peers_late", "cpu_no_sync", "cpu_ddp_buckets"} <= set(ids)
    assert "1.2 MiB + 7.9 MiB" in v["actions"][ids.index("cpu_ddp_buckets")]["lever"]
    assert "cpu_ddp_overlap" not in ids              # two buckets already
    assert _withdrawn(v)["record_gpu"]["precondition"] == "not_cpu_by_design"
    ex = a.facts.figures["cpu_comm"]["exposed_ns"]
    assert all(x["saves_ns"] <= ex for x in v["actions"] if x["id"].startswith("cpu_"))


def test_gpu_program_without_its_gpu_side_keeps_record_with_cuda():
    """HTA's distributed_info_not_found names 8 A100s in deviceProperties and holds no GPU
    event: a GPU program profiled without its GPU side."""
    a = analysed(corpus_or_skip() / GPU_LISTED)
    assert a.parallelism["cpu_design"]["by_design"] is False
    assert "record_gpu" in _ids(a.verdict) and a.verdict["bound"] == "cpu_only"


def _meta(devices=(), recorded=None, dist=None):
    extra = {} if recorded is None else {"devices_recorded": recorded}
    return SimpleNamespace(devices=list(devices), extra=extra, distributed=dist or {})


def _host(names=("aten::mm",)):
    return pd.DataFrame({"name": list(names), "kind": ["cpu_op"] * len(names),
                         "ts": range(len(names)), "dur": [1] * len(names)})


def test_cpu_design_reads_the_metadata():
    gloo = pd.DataFrame({"name": ["gloo:all_reduce"]})
    assert cpu_design(_host(), _meta(recorded=True), gloo)["by_design"] is True
    assert cpu_design(_host(), _meta(recorded=None), gloo)["by_design"] is None  # no key
    gpu = cpu_design(_host(), _meta([{"name": "NVIDIA A100"}], recorded=True), gloo)
    assert gpu["by_design"] is False and "A100" in gpu["against"][0]
    nccl = {"backend": "nccl", "pg_config": [{"backend_config": "cuda:nccl"}]}
    assert cpu_design(_host(), _meta(recorded=True, dist=nccl), gloo)["by_design"] is False
    # backend='gloo' writes cuda:gloo for every device: not a device backend
    gl = {"backend": "gloo", "pg_config": [{"backend_config": "cpu:gloo,cuda:gloo"}]}
    assert cpu_design(_host(), _meta(recorded=True, dist=gl), gloo)["by_design"] is True
    api = pd.DataFrame({"name": ["cudaLaunchKernel"], "kind": ["runtime"], "ts": [0], "dur": [1]})
    assert cpu_design(api, _meta(recorded=True), gloo)["by_design"] is False
    kern = pd.DataFrame({"name": ["k"], "kind": ["kernel"], "ts": [0], "dur": [1]})
    assert cpu_design(kern, _meta(recorded=True), gloo) is None   # a GPU window


def test_reader_flags_devices_recorded(tmp_path):
    assert load(GLOO / "ddp2" / "rank-0.json.gz").meta.extra["devices_recorded"] is True
    doc = json.loads(gzip.open(GLOO / "ddp2" / "rank-0.json.gz", "rt").read())
    doc.pop("deviceProperties")
    p = tmp_path / "nodev.json"
    p.write_text(json.dumps(doc))
    assert load(p).meta.extra["devices_recorded"] is False


def test_pipeline_waits_and_size_sweeps_are_not_misread():
    """A pipeline stage's send/recv waits are its bubble, not a collective's exposed time
    (pp_gpipe3_balanced: each stage stays cpu_only); a sweep of all_reduce sizes with no DDP
    named gets no DDP lever (sweep2: 98% in all_reduce, the same 18 calls every step)."""
    for r in range(3):
        a = analysed(GLOO / "pp_gpipe3_balanced" / f"rank-{r}.json.gz")
        assert a.verdict["bound"] == "cpu_only"
        assert all(c["collective"] not in ("send", "recv")
                   for c in a.facts.figures["cpu_comm"]["collectives"])
    v = analysed(GLOO / "sweep2" / "rank-0.json.gz").verdict
    assert v["bound"] == "comms"
    assert not {"cpu_no_sync", "cpu_ddp_overlap", "cpu_ddp_buckets"} & set(_ids(v))


def test_the_cpu_comm_facts_read_as_words_not_raw_ns():
    # the because line printed "cpu accumulate 15851258; cpu comm: steps 6, step ns 221833613"
    from traceread.render.words import because_words

    items = [{"fact": "cpu_comm.cpu_accumulate", "value": 15_851_258, "known": True,
              "evidence": None},
             {"fact": "cpu_comm", "known": True, "evidence": None,
              "value": {"steps": 6, "step_ns": 221_833_613, "share_pct": 90.6,
                        "share_min_pct": 84.8, "share_max_pct": 93.0,
                        "collectives": [{"name": "gloo:all_reduce", "share_pct": 89.4}]}},
             {"fact": "cpu_design", "known": True, "evidence": None,
              "value": {"by_design": True, "for": ["deviceProperties recorded and empty"],
                        "against": []}}]
    said = because_words(items)
    assert "15851258" not in said and "221833613" not in said
    assert "priced at 15.9 ms a step (a bound)" in said
    assert "90.6% of each step (84.8-93%), the longest gloo:all_reduce 89.4%" in said
    assert "a CPU program by design (deviceProperties recorded and empty)" in said
