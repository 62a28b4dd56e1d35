"""The user's own frame behind an event: file:line of the innermost python frame in user
code (``with_stack``), and readable names for what profilers write instead of one.

Never a pybind descriptor (``<built-in method write_record of pybind11_builtins... at
0x7f...>``), never the outermost ``spawn_main`` of a worker process: the walk goes from
the event outwards and keeps the innermost frame whose file is not torch's, a site/dist
package's, or the standard library's process/thread/run machinery.
"""
from __future__ import annotations

import ast
import json
import re

import numpy as np

from .. import namerx
from .factkit import Stacks, stacks_of

PY_FRAME_RX = namerx.compile(r"^(?P<file>[^()]+\.py)\((?P<line>\d+)\): (?P<fn>.+)$")
# library and machinery files: not the user's code
LIBRARY_RX = namerx.compile(
    r"(?:^|/)(?:torch|torchvision|torchaudio|site-packages|dist-packages|multiprocessing"
    r"|threading|runpy|concurrent|asyncio|importlib|contextlib|functools|selectors|queue"
    r"|pickle|copyreg|abc|typing|collections|_bootstrap\w*|triton|numpy|transformers"
    r"|accelerate|deepspeed|lightning|pytorch_lightning|apex|diffusers|peft|vllm|sglang"
    r"|xformers|timm|huggingface_hub|safetensors|megatron|fbgemm_gpu|torchrec)(?:/|\.py\()")
DESCRIPTOR_RX = namerx.compile(r"^<built-in |^<frozen |^<string>|pybind11_builtins|^<lambda>"
                               r"|object at 0x[0-9a-f]+>?$")
_ADDR_RX = re.compile(r" (?:of|at) (?:pybind11_builtins\.)?\S* ?object at 0x[0-9a-f]+")


def is_user_frame(name: str) -> bool:
    """A ``file.py(line): fn`` frame of the user's own code."""
    m = PY_FRAME_RX.match(name)
    return bool(m) and not LIBRARY_RX.search(m.group("file")) \
        and not DESCRIPTOR_RX.search(name) and m.group("fn") != "spawn_main"


def frame_text(name: str) -> str:
    """``train.py(62): save`` -> ``train.py:62 save``; other names unchanged."""
    m = PY_FRAME_RX.match(name)
    return f"{m.group('file')}:{m.group('line')} {m.group('fn')}" if m else name


def readable(name: str) -> str:
    """A name fit for a report: a pybind descriptor loses its address (``<built-in method
    write_record>``); an NVTX payload dict (``{"name": ..., "op": ...}``, emit_nvtx and
    ``torch.cuda.nvtx`` annotations) reads ``module.op``."""
    s = str(name)
    if s.startswith("{") and s.endswith("}"):
        d = _payload(s)
        if d:
            op = d.get("op") or d.get("name") or d.get("function")
            mod = d.get("module") or d.get("layer") or d.get("scope")
            if op and mod and str(mod) != str(op):
                return f"{mod}.{op}"
            if op:
                return str(op)
    if DESCRIPTOR_RX.search(s):
        return _ADDR_RX.sub("", s).replace(" of pybind11_builtins", "")
    return s


def _payload(s: str) -> dict | None:
    for parse in (json.loads, ast.literal_eval):
        try:
            d = parse(s)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(d, dict):
            return d
    return None


def user_frame(stacks: Stacks, row: int) -> str | None:
    """file:line fn of the innermost user frame around ``row`` on its thread (None: none)."""
    names = stacks.names(stacks.around_row(row))
    for n in reversed(names):
        if is_user_frame(n):
            return frame_text(n)
    return None


def user_frame_at(stacks: Stacks, thread, ts: int, end: int) -> str | None:
    names = stacks.names(stacks.around(thread, ts, end))
    for n in reversed(names):
        if is_user_frame(n):
            return frame_text(n)
    return None


def culprit_frame(ev, name: str, limit: int = 50) -> str | None:
    """The user frame most often around the rows named ``name`` (a culprit op): the line
    the user wrote that calls it."""
    col = ev["name"]
    rows = np.flatnonzero((col == name).to_numpy())[:limit]
    if not len(rows):
        return None
    stacks = stacks_of(ev)   # the window facts' own, inside an analysis
    votes: dict[str, int] = {}
    for r in rows.tolist():
        f = user_frame(stacks, r)
        if f:
            votes[f] = votes.get(f, 0) + 1
    return max(votes, key=votes.get) if votes else None
