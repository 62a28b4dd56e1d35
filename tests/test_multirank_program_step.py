"""The job's per-rank step is the program step (passes/steps.program_columns), the step the
single-trace report gives: one definition of the step everywhere (the guide)."""
from __future__ import annotations

import numpy as np
import pytest

from traceread.jobs import multirank as mr
from traceread.table import Trace, TraceMeta, build_table

US, MS = 1_000, 1_000_000
BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COLS = ("ts", "dur", "kind", "name", "cat", "pid", "tid", "device", "stream", "correlation",
        "external_id", "collective", "msg_bytes", "msg_nelems", "dtype", "group_size",
        "process_group", "seq")
STR = ("kind", "name", "cat", "collective", "dtype", "process_group")


def _lagging_rank(r: int, compute_ns: int, steps: int = 5, period: int = 20 * MS) -> Trace:
    """One rank whose host marks only the launching part of each step (a 1 ms step_N range:
    a gemm, then an all_reduce) while its GPU runs the step's work after it: the compute
    (``compute_ns``), then the all_reduce, which ends 800 us after the slowest rank's compute
    (14 ms). The host's sync lies outside the range (no event)."""
    rows = {c: [] for c in COLS}

    def add(**kw):
        for c in COLS:
            rows[c].append(kw.get(c, None if c in STR and c != "kind" and c != "name" else -1))

    pid = tid = 100 + r
    corr = 1
    for s in range(steps):
        t0 = BASE + s * period
        add(ts=t0, dur=1 * MS, kind="annotation", name=f"ProfilerStep#{s + 1}", cat="user_annotation",
            pid=pid, tid=tid)
        add(ts=t0 + 90 * US, dur=30 * US, kind="cpu_op", name="aten::mm", cat="cpu_op", pid=pid, tid=tid)
        add(ts=t0 + 100 * US, dur=10 * US, kind="runtime", name="cudaLaunchKernel", cat="cuda_runtime",
            pid=pid, tid=tid, correlation=corr, external_id=corr)
        add(ts=t0 + 200 * US, dur=compute_ns, kind="kernel", name="ampere_sgemm_128x64_tn", cat="kernel",
            pid=pid, device=r, stream=7, correlation=corr, external_id=corr)
        corr += 1
        coll = dict(collective="all_reduce", msg_bytes=4 << 20, msg_nelems=1 << 20, dtype="Float",
                    group_size=2, process_group="0", seq=s)
        add(ts=t0 + 300 * US, dur=35 * US, kind="cpu_op", name="record_param_comms", cat="cpu_op",
            pid=pid, tid=tid, external_id=corr, **coll)
        add(ts=t0 + 310 * US, dur=10 * US, kind="runtime", name="cudaLaunchKernel", cat="cuda_runtime",
            pid=pid, tid=tid, correlation=corr, external_id=corr)
        arrive = t0 + 200 * US + compute_ns
        end = t0 + 200 * US + 14 * MS + 800 * US
        add(ts=arrive, dur=end - arrive, kind="kernel", name=NCCL, cat="kernel", pid=pid, device=r,
            stream=20, correlation=corr, external_id=corr, **coll)
        corr += 1
    cols = {c: (v if c in STR else np.asarray(v, dtype=np.int64)) for c, v in rows.items()}
    meta = TraceMeta(path=f"rank-{r}.json.gz", format="kineto", format_version="1.0.1",
                     producer="test", clock="epoch_ns", rank=r, world_size=2,
                     rank_source="distributedInfo",
                     distributed={"backend": "nccl", "rank": r, "world_size": 2},
                     devices=[{"device": r, "name": "Synthetic GPU"}],
                     processes={pid: f"rank{r}"}, threads={tid: "main"})
    return Trace(build_table(cols, len(rows["ts"])), meta)


def test_gpu_lagging_job_reads_the_program_step():
    """Rank 1's GPU computes 14 ms a step, rank 0's 10 ms: rank 0 waits 4 ms at each
    all_reduce. Each rank's program step is its GPU work, 14.8 ms (gemm + all_reduce); the
    1 ms host range is only the launching. Read from the host ranges (the old definition),
    rank 0 waited 4 ms a step in 1 ms steps, its work (step - wait) was -3 ms, and the
    slowdown read 'global'; it is rank-local: rank 1 works 14.8 ms, rank 0 10.8 ms."""
    res = mr.analyze_traces([_lagging_rank(0, 10 * MS), _lagging_rank(1, 14 * MS)])[0]
    assert res.straggler["rank"] == 1 and res.straggler["significant"]
    pr = res.per_rank.set_index("rank")
    assert pr.loc[0, "step_mean_ns"] == pr.loc[1, "step_mean_ns"] == 14_800 * US
    assert pr.loc[0, "wait_ns"] == 5 * 4 * MS
    # a wait is never longer than the step it lies in
    assert (pr["wait_ns"] // pr["steps"] <= pr["step_mean_ns"]).all()
    slow = res.seed["slowdown"]
    assert slow["locality"] == "rank-local"
    assert slow["work_ns"] == {0: 10_800 * US, 1: 14_800 * US}
    # compute then all_reduce, back to back on both ranks: nothing hidden
    assert res.seed["overlap_efficiency"] == {0: 0.0, 1: 0.0}


@pytest.mark.corpus
def test_real_gpu_paced_rank_job_steps_are_its_program_steps(corpus_dir):
    """HTA's trace_diff test trace (rank 1 of a V100 job, GPU-bound: the host runs 17.8 ms
    ahead): its host ranges last 82-166 ms (cv 0.26) for program steps of 115-157 ms. The
    job (the rank beside a copy of itself as rank 0) reports the rank's program steps, the
    figure its own report gives, not the ranges."""
    import traceread
    from traceread.jobs.multirank.job import step_spread

    f = corpus_dir / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data" / "trace_diff" \
        / "test" / "test.json.gz"
    if not f.is_file():
        pytest.skip("HTA trace_diff not in the corpus")
    a1 = traceread.analyze(str(f))
    t0 = traceread.load(str(f))
    t0.meta.rank, t0.meta.path = 0, "rank-0-copy.json.gz"
    a0 = traceread.analyze(t0)
    jobs = mr.jobs_of([a0, a1])
    assert len(jobs) == 1
    res = jobs[0]
    prog = a1.steps["program_ns"].to_numpy(np.int64)
    pr = res.per_rank.set_index("rank")
    assert pr.loc[1, "steps"] == len(prog) == 6
    assert pr.loc[1, "step_mean_ns"] == int(prog.mean())
    assert list(res.steps["min_ns"]) == list(prog)   # step_skew: per step, the program step
    # the steps' own spread (the straggler test's noise floor) is the program steps' (~15 ms),
    # not the host ranges' (~33 ms)
    assert step_spread({1: res.steps.rename(columns={"min_ns": "dur"})}) == int(prog.std())


@pytest.mark.corpus
def test_kernel_excess_of_a_job_without_steps_is_not_per_step(corpus_dir):
    """nsys-ai mfu_2gpu_before (one export, 2 GPU processes, no step markers): rank 1's GPU
    spends 431 us more than rank 0 in an nvjet gemm over the analysed window. The verdict said
    'more per step' of a trace with no step; it says the window."""
    f = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"
    if not f.exists():
        pytest.skip("nsys-ai fixture not in the corpus")
    res = mr.jobs_of([str(f)])[0]
    assert res.per_rank["steps"].tolist() == [0, 0]
    jv = res.verdict()
    assert jv["straggler_rank"] == 1 and jv["cause"] == "gpu_compute"
    assert "more in the analysed window than the others in nvjet" in jv["because"]
    assert "per step" not in jv["because"]


def test_kernel_time_per_step_over_the_steps_it_covers():
    """A rank cut to the job's common steps (job.common_steps) keeps the kernel time of its
    own window: per step, that time over the window's steps, not over the fewer ones kept."""
    import pandas as pd

    from traceread.jobs.multirank.inputs import RankInput
    from traceread.jobs.multirank.job import common_steps
    from traceread.jobs.multirank.why import kernel_excess

    def ri(rank, steps, ns):
        st = pd.DataFrame({"step": steps, "ts": [s * 10 * MS for s in steps], "dur": [9 * MS] * len(steps)})
        return RankInput(path=f"r{rank}", rank=rank, steps=st, kernel_ns={"gemm": ns},
                         kernel_steps=len(steps))

    a, b = common_steps([ri(0, [1, 2, 3], 30 * MS), ri(1, [2, 3], 20 * MS)])
    assert a.steps["step"].tolist() == [2, 3]
    assert kernel_excess([a, b], 0) == []    # 10 ms a step on both ranks


@pytest.mark.corpus
def test_no_steps_no_straggler_by_lateness_alone(corpus_dir):
    """nsys-ai mfu_2gpu_after (2 GPU processes, no step markers): rank 0 is last at 13 of 29
    all_to_alls (less often than chance, p=0.77); it was named the straggler because its
    window's net lateness (12 ms) passed 'beyond the steps' spread' -- a spread of no step,
    taken as 0. Without steps nothing measures the noise: no straggler, and why."""
    f = corpus_dir / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_after.sqlite"
    if not f.exists():
        pytest.skip("nsys-ai fixture not in the corpus")
    res = mr.jobs_of([str(f)])[0]
    s = res.straggler
    assert s["rank"] == 0 and s["times_last"] == 13 and s["spread_ns"] is None
    assert not s["significant"]
    jv = res.verdict()
    assert jv["straggler_rank"] == -1
    assert jv["summary"].startswith("no straggler: rank 0 held the others back longest, but last in"
                                    " 13 of 29 collectives (45%, chance 50%: p=0.77); no steps")


@pytest.mark.corpus
def test_batch_summary_step_is_the_program_step(corpus_dir):
    """``batch``'s summary row: step_mean_ms is the program step its report gives (HTA's
    trace_diff test rank: 124.02 ms), not the host ranges' mean (124.07 ms)."""
    import traceread
    from traceread.jobs.batch import summary_fields

    f = corpus_dir / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data" / "trace_diff" \
        / "test" / "test.json.gz"
    if not f.is_file():
        pytest.skip("HTA trace_diff not in the corpus")
    a = traceread.analyze(str(f))
    row = summary_fields(a)
    prog = a.steps["program_ns"].to_numpy(np.int64)
    assert row["steps"] == 6
    assert row["step_mean_ms"] == round(float(prog.mean())) / 1e6
    assert abs(row["step_mean_ms"] - a.steps["dur"].mean() / 1e6) > 0.04


def test_host_bound_step_ends_with_its_late_kernel():
    """A host-bound step (host span 10 ms, its GPU work 2 ms) whose last kernel ends 1 ms
    after the host's end marker: the single-trace step ends with that kernel
    (``program_columns``, the critical path's ``_program_end``), so the job's window for the
    step does too. It ended at the host span while only GPU-bound steps took the GPU's end."""
    import pandas as pd
    from traceread.jobs.multirank.inputs import program_steps
    from traceread.passes.steps import program_columns

    tab = pd.DataFrame({"step": [0, 1], "pid": [1, 1],
                        "start": [0, 20 * MS], "end": [10 * MS, 30 * MS], "dur": [10 * MS] * 2,
                        "gpu_start": [9 * MS, 29 * MS], "gpu_end": [11 * MS, 31 * MS]})
    program_columns(tab, np.array([2 * MS, 2 * MS]))
    assert list(tab["bound_by"]) == ["host", "host"]
    out = program_steps(tab)
    assert list(out["ts"] + out["dur"]) == [11 * MS, 31 * MS]
    assert list(out["dur"]) == list(tab["program_ns"])
