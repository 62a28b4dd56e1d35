"""Record the DataLoader worker-restart pair (tests/fixtures/cpu/workers_*.json.gz): one MLP
training loop fed by a DataLoader with 2 worker processes and 4 batches an epoch, recorded
with persistent_workers=False (the workers shut down and start again at every epoch) and
True; and each timed unprofiled (truth.json's "workers_restart": the mean step of 12
back-to-back steps, 3 epochs, over several rounds).

    python scripts/record_worker_restarts.py tests/fixtures/cpu
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_S = 0.0005   # each sample's loading: a sleep, so the workers' time is known
ROUNDS = 5


class Slow(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(SAMPLE_S)
        return torch.randn(64), torch.randn(1)


def loop(persistent: bool, epochs: int, prof=None) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=16, num_workers=2, persistent_workers=persistent)
    t0, n = None, 0
    for _ in range(epochs):
        for x, y in loader:
            if t0 is None:   # from the first batch: the program's first start-up is left out
                t0 = time.perf_counter_ns()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += 1
            if prof is not None:
                prof.step()
    return (time.perf_counter_ns() - t0) // max(1, n - 1)


def main(out: Path) -> None:
    torch.set_num_threads(1)
    truth = {"torch": torch.__version__, "rounds": ROUNDS, "epochs": 3, "steps_per_epoch": 4,
             "step_ns": {}}
    for name, persistent in (("restart", False), ("persistent", True)):
        truth["step_ns"][name] = sorted(loop(persistent, 3) for _ in range(ROUNDS))[ROUNDS // 2]
        sched = torch.profiler.schedule(wait=0, warmup=1, active=10, repeat=1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    schedule=sched) as prof:
            loop(persistent, 3, prof)
        tmp = out / f"workers_{name}.json"
        prof.export_chrome_trace(str(tmp))
        with open(tmp, "rb") as f, gzip.open(out / f"workers_{name}.json.gz", "wb") as g:
            g.write(f.read())
        tmp.unlink()
    path = out / "truth.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["workers_restart"] = truth
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(truth))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
