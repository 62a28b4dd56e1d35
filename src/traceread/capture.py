"""``traceread.capture()``: record a torch.profiler trace the way the analysis wants it.

    with traceread.capture("traces/") as cap:
        for batch in loader:
            train_step(batch)
            cap.step()
    # traces/rank0.pt.trace.json.gz written; cap.analysis holds the verdict

What it sets up, and why:

* ``schedule(wait, warmup, active)``: the first steps (allocator growth, cuDNN
  autotuning, torch.compile) are not steady state, so they are skipped; the
  warm-up steps are profiled and thrown away (Kineto's own start-up cost);
  ``active`` steps are recorded (3 by default: enough for step statistics);
* CPU + CUDA activities (CUDA only when available), so every idle GPU gap can be
  matched with what the host was doing;
* ``record_shapes`` / ``with_stack`` only on request (they slow the host down and
  so change the very gaps being measured);
* one ``rank{R}.pt.trace.json.gz`` per rank, with ``distributedInfo`` (rank,
  world size) in it even when torch.distributed is not initialised (from the
  ``RANK`` / ``WORLD_SIZE`` environment of torchrun), so ``traceread analyze
  traces/*.gz`` knows the ranks of a job.

torch is imported when the context opens, never at ``import traceread``.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO


def rank_and_world() -> tuple[int, int]:
    """(rank, world size): torch.distributed when initialised, else RANK / WORLD_SIZE, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    try:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    except ValueError:
        return 0, 1


class capture:  # noqa: N801 - used as a function: traceread.capture(...)
    """Context manager around ``torch.profiler.profile``; call ``step()`` once per iteration."""

    def __init__(self, out_dir: str | os.PathLike = "traces", *, wait: int = 1, warmup: int = 1,
                 active: int = 3, record_shapes: bool = False, with_stack: bool = False,
                 profile_memory: bool = False, analyze: bool = True, verdict: bool = True,
                 stream: TextIO | None = None) -> None:
        if min(wait, warmup) < 0 or active < 1:
            raise ValueError("wait and warmup must be >= 0 and active >= 1")
        self.out_dir = Path(out_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.options = dict(record_shapes=record_shapes, with_stack=with_stack,
                            profile_memory=profile_memory)
        self.analyze, self.verdict, self.stream = analyze or verdict, verdict, stream
        self.rank, self.world_size = rank_and_world()
        self.path: Path | None = None
        self.analysis = None
        self._prof = None
        self.steps = 0

    @property
    def steps_needed(self) -> int:
        return self.wait + self.warmup + self.active

    def __enter__(self) -> "capture":
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._prof = profile(activities=activities, on_trace_ready=self._save,
                             schedule=schedule(wait=self.wait, warmup=self.warmup,
                                               active=self.active, repeat=1), **self.options)
        self._prof.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one training iteration (``ProfilerStep#N`` in the trace)."""
        self.steps += 1
        self._prof.step()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._prof.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return
        if self.path is None:
            self._say(f"traceread: no trace: {self.steps} steps ran, the schedule needs "
                      f"{self.steps_needed} (wait {self.wait} + warmup {self.warmup} + active {self.active})")
            return
        if self.analyze:
            from .analysis import analyze

            self.analysis = analyze(str(self.path))
            if self.verdict:
                v = self.analysis.verdict
                self._say(f"traceread: {self.path}: {str(v['bound']).upper()}: {v['summary']}")

    def _say(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr)

    def _save(self, prof) -> None:
        """on_trace_ready: export, add distributedInfo when Kineto did not, gzip."""
        path = self.out_dir / f"rank{self.rank}.pt.trace.json.gz"
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=self.out_dir)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            with_rank_info(tmp, path, self.rank, self.world_size)
        finally:
            os.unlink(tmp)
        self.path = path


def with_rank_info(src: str, dst: str | os.PathLike, rank: int, world_size: int) -> None:
    """Gzip ``src`` into ``dst``, adding ``distributedInfo`` first in the object when it is missing."""
    with open(src, "rb") as f:
        head = f.read(1 << 20)
        with gzip.open(dst, "wb", compresslevel=6) as out:
            start = head.find(b"{")
            if b'"distributedInfo"' not in head and start >= 0:
                info: dict[str, Any] = {"rank": rank, "world_size": world_size}
                out.write(head[: start + 1])
                out.write(b'\n  "distributedInfo": ' + json.dumps(info).encode() + b",")
                head = head[start + 1:]
            out.write(head)
            shutil.copyfileobj(f, out, 4 << 20)
