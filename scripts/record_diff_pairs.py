"""Record the small real CPU pairs that ``traceread diff`` is tested on (tests/fixtures/cpu).

batch16 / batch256: one MLP training loop fed by a DataLoader, 4 profiled steps
(ProfilerStep#N, record_shapes), batch 16 then 256: the step is slower, the sample is not.
compile.first / compile.steady: a torch.compile'd MLP without step markers: the first call
(compilation included), then 2 calls once compiled.

    python scripts/record_diff_pairs.py tests/fixtures/cpu
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, TensorDataset


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _gz(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def record_batch(out: str, batch: int) -> dict:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=batch, num_workers=0)
    raw = out + ".tmp.json"
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=4)) as prof:
        for i, (x, y) in enumerate(loader):
            t = time.perf_counter_ns()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter_ns() - t)
            prof.step()
            if i >= 5:
                break
    prof.export_chrome_trace(raw)
    _gz(raw, out)
    return {"batch": batch, "compute_ns_per_step": times[2:6]}


def record_compile(out_first: str, out_steady: str, calls: int = 2) -> dict:
    model = torch.compile(_model())
    x = torch.randn(32, 64)
    raw = out_first + ".tmp.json"
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # no schedule, no prof.step()
        t = time.perf_counter_ns()
        model(x)
        first = time.perf_counter_ns() - t
    prof.export_chrome_trace(raw)
    _gz(raw, out_first)
    for _ in range(3):
        model(x)
    raw = out_steady + ".tmp.json"
    each = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            t = time.perf_counter_ns()
            model(x)
            each.append(time.perf_counter_ns() - t)
    prof.export_chrome_trace(raw)
    _gz(raw, out_steady)
    return {"first_call_ns": first, "steady_calls_ns": each}


def main(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    truth = {"torch": torch.__version__}
    for b in (16, 256):
        truth[f"batch{b}"] = record_batch(os.path.join(folder, f"batch{b}.json.gz"), b)
    truth["compile"] = record_compile(os.path.join(folder, "compile.first.json.gz"),
                                      os.path.join(folder, "compile.steady.json.gz"))
    with open(os.path.join(folder, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/cpu")
