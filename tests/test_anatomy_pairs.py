"""The step anatomy on the real CPU before/after pairs (tests/fixtures/pairs, recorded by
scripts/record_pairs.py with their unprofiled truth): what every step holds, what the
DataLoader's own calls are not, and the change each pair shows priced for the steps it
leaves."""
from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path

import pytest

import traceread
from traceread.passes.anatomy import step_anatomy
from traceread.verdict.anatomy import anatomy_changes

HERE = Path(__file__).parent / "fixtures" / "pairs"
TRUTH = json.loads((HERE / "truth.json").read_text())


@lru_cache(maxsize=None)
def events(name: str):
    return traceread.load(str(HERE / f"{name}.json.gz")).events


@lru_cache(maxsize=None)
def anatomy(name: str) -> dict:
    return step_anatomy(events(name))


def ctx(name: str) -> dict:
    an = anatomy(name)
    return {"anatomy": an, "steps": an["steps_seen"]}


def frame_ns(name: str, frame: str) -> list[int]:
    """The durations (ns) of a Python frame in the trace, in order."""
    ev = events(name)
    m = ev["name"].astype(str).str.endswith(frame).to_numpy() & (ev["kind"] == "python").to_numpy()
    return [int(x) for x in ev.loc[m].sort_values("ts")["dur"]]


def test_a_validation_in_every_step_is_seen_and_costs_its_own_function():
    # pairs/valid BEFORE validates after every step: no step lacks it, so the odd steps saw
    # nothing and no lever was offered; every step's cost is its validate() frame (the
    # passes, their losses and .item()s, the eval()/train() toggles), not the passes alone
    an = anatomy("valid.before")
    assert an["odd_steps"] == []
    (g,) = an["every_step"]
    assert g["period"] == 1 and len(g["steps"]) == an["steps_seen"]
    (h,) = g["holds"]
    assert h["what"] == "forward_only_passes" and h["count"] == 2 and h["no_grad"] is True
    frames = frame_ns("valid.before", ": validate")
    assert len(frames) == an["steps_seen"]
    assert g["per_step_ns"] == pytest.approx(statistics.fmean(frames), rel=0.01)


def test_every_step_to_every_4th_promises_three_quarters_of_the_validation():
    # the change made keeps one validation in 4: the promise is 3/4 of BEFORE's cost, not
    # the whole of it (validating never)
    (ch,) = anatomy_changes(ctx("valid.before"), ctx("valid.after"))
    assert ch["lever"] == "validate_less" and ch["sync_drop"]
    assert ch["evidence"] == "forward-only passes in every step -> every 4 steps"
    per = anatomy("valid.before")["every_step"][0]["per_step_ns"]
    assert ch["promised_per_step_ns"] == pytest.approx(per * 3 / 4, abs=2)
    assert TRUTH["valid"]["every"] == {"before": 1, "after": 4}


def test_an_odd_validation_step_costs_its_function_too():
    # pairs/valid AFTER: the odd steps' forward-only passes hold their validate() frame
    g = anatomy("valid.after")["odd_steps"][0]
    h = next(x for x in g["holds"] if x["what"] == "forward_only_passes")
    frames = frame_ns("valid.after", ": validate")
    assert g["period"] == 4 and len(frames) == 2
    assert h["host_ns"] == pytest.approx(statistics.fmean(frames), rel=0.01)


def test_logging_in_every_step_is_seen_and_its_change_named():
    # pairs/log: metrics logged every step -> every 4th (was: no change found)
    (g,) = anatomy("log.before")["every_step"]
    assert [h["what"] for h in g["holds"]] == ["logging"] and g["per_step_ns"] > 0
    (ch,) = anatomy_changes(ctx("log.before"), ctx("log.after"))
    assert ch["lever"] == "log_less" and ch["evidence"] == "logging in every step -> every 4 steps"
    assert ch["promised_per_step_ns"] == pytest.approx(g["per_step_ns"] * 3 / 4, abs=2)


def test_logging_costs_the_metrics_it_logs_not_the_log_call_alone():
    # pairs/log BEFORE: each step computes the gradient norm (get_total_norm, its parameter
    # list) and the batch accuracy only to log them. The cost was the log.info call's 110 us,
    # its promise 82 us a step; unprofiled, every 4th step instead saved ~150-190 us
    (g,) = anatomy("log.before")["every_step"]
    norm, info = frame_ns("log.before", "_no_grad_wrapper"), frame_ns("log.before", ": info")
    lists = frame_ns("log.before", "record_pairs.py(195): <listcomp>")
    n = anatomy("log.before")["steps_seen"]
    assert len(norm) == len(info) == len(lists) == n
    least = statistics.fmean(norm) + statistics.fmean(info) + statistics.fmean(lists)
    assert least <= g["per_step_ns"] <= 1.5 * least
    # the profiler's share is known, so the unprofiled promise can be taken
    assert 0 < g["profiler_ns"] < g["per_step_ns"]


def test_the_dataloaders_own_item_at_an_epoch_start_is_not_a_host_sync():
    # pairs/persist BEFORE: each epoch's iter(loader) draws its seed with an .item() inside
    # DataLoader.__iter__ (which also forks the workers): the odd epoch-start steps held
    # "1 host syncs" and the diff called the change log_less; their excess is the data phase
    (g,) = anatomy("persist.before")["odd_steps"]
    assert g["period"] == TRUTH["persist"]["epoch_batches"]
    assert g["holds"] == [] and g["grew_phase"] == "data"
    assert anatomy_changes(ctx("persist.before"), ctx("persist.after")) == []


def test_a_micro_batch_costs_its_whole_loop_iteration():
    # pairs/accum (4 micro-batches of 16 -> one of 64): each micro-batch's loss, scaling and
    # .item() are paid per micro-batch too; the model counted its forward + backward only
    # and promised 20.6 points where 40.3 were realised
    from traceread.verdict.anatomy import micro_batch_saving

    b, a = anatomy("accum.before"), anatomy("accum.after")
    mb = b["micro_batches"]
    assert mb["per_optimizer_step"] == TRUTH["accum"]["micro_batches"]["before"] == 4
    assert a["micro_batches"]["period_ns_each"] is None   # one pass a step: nothing to time
    beside = mb["period_ns_each"] - mb["host_ns_each"]
    # the AFTER shows it: its "other" phase lost what three micro-batches had beside theirs
    gone = b["phases"]["other"]["host_ns"] - a["phases"]["other"]["host_ns"]
    assert 3 * beside == pytest.approx(gone, rel=0.25)
    c = ctx("accum.before")
    per_step = micro_batch_saving(c) / c["steps"]
    grows = mb["flop_host_ns_each"] - mb["flop_fixed_ns_each"]
    assert per_step == pytest.approx(3 * (mb["period_ns_each"] - grows), abs=4)


def test_a_micro_batchs_matmuls_pay_their_fixed_part_once():
    # pairs/accum: 4 micro-batches of 16 rows -> one of 64. Its matmuls' host time was all
    # taken to grow 4 x (2.15 ms a step for the 64 rows); AFTER's took 1.23 ms. Their part
    # that does not grow -- BEFORE's ops' time less what grows with the batch, fitted on
    # BEFORE's shapes as larger_batch fits it (replay/hostcost.py) -- is paid once
    from traceread.verdict.anatomy import micro_batch_saving

    b = anatomy("accum.before")["micro_batches"]
    a = anatomy("accum.after")["micro_batches"]
    m, each, fixed = b["per_optimizer_step"], b["flop_host_ns_each"], b["flop_fixed_ns_each"]
    assert m == 4 and 0.1 * each < fixed < each
    merged = m * (each - fixed) + fixed    # one micro-batch of m x the rows
    assert a["flop_host_ns_each"] < merged < m * each
    c = ctx("accum.before")
    per_step = micro_batch_saving(c) / c["steps"]
    assert per_step - 3 * (b["period_ns_each"] - each) == pytest.approx(3 * fixed, abs=4)
    assert a["flop_fixed_ns_each"] is None   # one pass a step: nothing to merge


def test_a_save_in_every_step_is_seen_and_its_change_priced_for_the_saves_left():
    # pairs/save: torch.save after every step -> every 4th (was: no change found)
    (g,) = anatomy("save.before")["every_step"]
    assert [h["what"] for h in g["holds"]] == ["save"] and g["period"] == 1
    (ch,) = anatomy_changes(ctx("save.before"), ctx("save.after"))
    assert ch["lever"] == "save_async" and ch["evidence"] == "a save in every step -> every 4 steps"
    assert ch["promised_per_step_ns"] == pytest.approx(g["per_step_ns"] * 3 / 4, abs=2)


def _frames(name: str, suffix: str):
    ev = events(name)
    py = ev[(ev["kind"] == "python").to_numpy()]
    return py[py["name"].astype(str).str.endswith(suffix).to_numpy()].sort_values("ts")


def test_a_save_costs_the_state_dicts_built_for_it():
    # pairs/save: torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path).
    # The state_dict() frames run only in the steps that save, before the change and after it
    # (every 4th step): saving less often builds them less often. The save's cost runs from
    # the first of them to the save's end (it was the save frame alone: ~0.13 ms a step less)
    states = _frames("save.before", ": state_dict")
    spans = []
    for s0, d0 in zip(*(_frames("save.before", "serialization.py(944): save")[c]
                        for c in ("ts", "dur"))):
        first = states.loc[(states["ts"] < s0) & (states["ts"] > s0 - 1_000_000), "ts"].min()
        assert s0 - first > 50_000   # the module's and the optimizer's: ~0.1 ms before it
        spans.append(s0 + d0 - first)
    (g,) = anatomy("save.before")["every_step"]
    assert g["holds"][0]["host_ns"] == pytest.approx(statistics.fmean(spans), rel=0.002)
    # the evidence that they go with the save: in AFTER only the saving steps build them
    an = anatomy("save.after")
    (grp,) = an["odd_steps"]
    ev = events("save.after")
    st = ev[ev["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()]
    sts = _frames("save.after", ": state_dict")["ts"].to_numpy()
    for label, t0, d in zip(st["name"].astype(str), st["ts"], st["dur"]):
        has = bool(((sts >= t0) & (sts < t0 + d)).any())
        assert has == (int(label.rsplit("#", 1)[1]) in grp["steps"])


def test_without_the_profiler_each_figure_loses_the_cost_of_its_ops_and_frames():
    # pairs/valid BEFORE: the validation's cost per step less the profiler's cost of the ops
    # (1 us, +0.46 with shapes) and frames (0.35 us) recorded inside each validate() frame
    # (passes/overhead.py's costs) -- the figure the unprofiled truth is compared with
    from traceread.passes import overhead as O
    from traceread.passes.anatomy import without_profiler

    ev = events("valid.before")
    an = anatomy("valid.before")
    c = O.costs(ev)
    frames = ev[ev["name"].astype(str).str.endswith(": validate") & (ev["kind"] == "python")]
    prof = [int(c.loc[(c["tid"] == f.tid) & (c["ts"] >= f.ts) & (c["ts"] < f.ts + f.dur),
                      "ns"].sum()) for f in frames.itertuples()]
    g = an["every_step"][0]
    assert g["profiler_ns"] == pytest.approx(statistics.fmean(prof), rel=0.01)
    u = without_profiler(an)
    assert u["every_step"][0]["per_step_ns"] == g["per_step_ns"] - g["profiler_ns"]
    assert u["mean_step_ns"] == an["mean_step_ns"] - an["mean_profiler_step_ns"]
    assert an["every_step"][0]["per_step_ns"] == g["per_step_ns"]   # the input is kept


def test_a_cost_every_step_pays_is_reported_only_where_it_matters():
    # a print() of 20 us in each 10 ms step is under the verdict's 1%: no group, no lever
    import pandas as pd

    from traceread.passes.anatomy import _every_step

    def tab(log_ns):
        return pd.DataFrame({"step": [1, 2, 3], "dur": [10_000_000] * 3, "backward_passes": 1,
                             "forward_only": 0, "log": 1, "log_ns": log_ns, "save_ns": 0,
                             "prof": [{"log": 0}] * 3})
    assert _every_step(tab(20_000)) == []
    (g,) = _every_step(tab(500_000))
    assert g["per_step_ns"] == 500_000 and g["period"] == 1


def test_gradient_clipping_before_a_log_call_is_training_not_logging(tmp_path):
    # clip_grad_norm_ between backward and the log call writes the gradients in place
    # (_foreach_mul_): the log call's lead-in stops there and counts only what it logs
    import logging

    import torch

    log = logging.getLogger("traceread.test.clip")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    path = tmp_path / "clip.json"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched, with_stack=True) as prof:
        for _ in range(6):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            log.warning("loss %.4f", loss.item())
            opt.step()
            prof.step()
    prof.export_chrome_trace(str(path))
    from traceread.passes import anatomy as A

    ev = traceread.load(str(path)).events
    steps = A._steps(ev)
    host = A._host(ev, int(steps["pid"].iat[0]))
    rows = [A._one_step(host, A._gpu(ev, int(steps["pid"].iat[0])), A._root_module(host), s)
            for s in steps.itertuples(index=False)]
    clip = frame_ns_of(ev, ": clip_grad_norm_")
    warn = frame_ns_of(ev, "logging/__init__.py(1491): warning") or \
        frame_ns_of(ev, ": warning")
    assert len(clip) == len(rows) == len(warn)
    # each step's logging: its log call (and loss.item()'s frame around its sync), never
    # the clipping before it
    for r, c, w in zip(rows, clip, warn):
        assert w <= r["log_ns"] < w + 0.5 * c


def frame_ns_of(ev, frame: str) -> list[int]:
    m = ev["name"].astype(str).str.endswith(frame).to_numpy() & (ev["kind"] == "python").to_numpy()
    return [int(x) for x in ev.loc[m].sort_values("ts")["dur"]]
