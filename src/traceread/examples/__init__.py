"""Bundled example traces (see NOTICE.md in this folder for origin and license).

``traceread.examples.path()`` is the default example: one rank of a real 128-GPU
NCCL training job (HTA test data), two ProfilerSteps, ~4.8k events.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = "hta_sampled_rank-0.json.gz"


def path(name: str = DEFAULT) -> Path:
    """Absolute path of a bundled example file."""
    p = HERE / name
    if not p.is_file():
        names = ", ".join(names_available())
        raise FileNotFoundError(f"no bundled example {name!r} (available: {names})")
    return p


def names_available() -> list[str]:
    return sorted(p.name for p in HERE.iterdir()
                  if p.is_file() and not p.name.startswith(("_", ".")) and p.suffix != ".md")


__all__ = ["path", "names_available", "DEFAULT"]
