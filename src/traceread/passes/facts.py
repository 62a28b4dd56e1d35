"""The facts record of one analysed window (``WindowFacts``): every figure and every program
fact the verdict reads, each program fact with the events that prove it.

``build_facts`` runs the detectors over the passes' results once per window; the verdict
(``verdict.decide``) judges from the record alone -- it reads no event table and computes
no fact. docs/architecture.md, "The facts record", lists what goes where.

* ``figures``  -- numbers and measured results: window, idle and exposed times, each cause's
  idle ns (``cause_ns``), step statistics, the culprits, busy classes, the layout's figures,
  the steady state, the busy-time / allocator lever figures (flat: the lever predicates read
  them beside the program facts; a key that is absent is "unknown" to them);
* ``program``  -- what the program is and already does (passes/context.py, program.py): the
  ``context`` block of the JSON;
* ``evidence`` -- fact key -> the events that prove it (``name``, ``ts_ns``, ``step``,
  ``detail``); an empty list: the fact was read from the absence of any such event;
* ``frames``   -- read-only tables the verdict may show (gaps, host ops, steps, kernels,
  collectives, ...), never the event table;
* ``graph`` / ``replay`` -- the step graph and its replay (passes/replay.py) when built.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..table import TraceMeta, release_heap_grown
from . import attribution as attr_mod
from . import culprits as culprits_mod
from . import steps as steps_mod
from . import window as window_mod
from .causes import CAUSES, cause_parts
from .common import MODULE_LOAD_RX, kind_in, name_codes, name_lut, table_of
from .context import flag_evidence, has_non_step_ranges
from .figures import backlog, layout_figures, slow_collective, startup, window_figures
from .frames import code_in
from .newfacts import compiled_call_host
from .peaks import device_caps, device_name
from .preconditions import host_other_kind, step_head_wait

__all__ = ["CAUSES", "RECORD_VERSION", "WindowFacts", "build_facts", "layout_figures"]

RECORD_VERSION = 1   # WindowFacts.to_json's layout


def _plain(x):
    """JSON for what the record's dicts hold besides JSON types: numpy scalars and arrays,
    sets, tuples (as lists); anything else as its text."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, frozenset)):
        return sorted(x, key=str)
    if isinstance(x, pd.Timestamp):
        return str(x)
    return str(x)

@dataclass(repr=False)
class WindowFacts:
    """One window's facts (module doc). Built by ``build_facts``; read-only afterwards."""

    figures: dict = field(default_factory=dict)
    program: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)
    graph: Any = None                 # passes.replay StepGraph, None when not built
    replay: dict | None = None        # its replay result
    # the replay's per-lever prices (passes.replay.price_models without its graph): set
    # when the verdict first prices the levers on ``graph``, so a saved record judges again
    # without the graph; ``together``: the offered levers replayed at once, by model list
    prices: dict | None = None
    together: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON ``facts`` block: figures, program facts, evidence; frames by row count.
        The top kernel's 50 names (for the tune-it lever's vendor guess) stay out: they are
        the JSON's ``kernels``, the kernels frame's first rows."""
        fig = dict(self.figures)
        if isinstance(fig.get("top_kernel"), dict):
            fig["top_kernel"] = {k: v for k, v in fig["top_kernel"].items() if k != "names"}
        return {"figures": fig, "program": self.program, "evidence": self.evidence,
                "frames": {k: int(len(v)) for k, v in self.frames.items() if v is not None},
                "replay": self.replay}

    def to_json(self) -> str:
        """The record as JSON text that ``from_json`` reads back: figures, program facts,
        evidence, the replay summary and the per-lever prices -- what ``verdict.decide``
        reads. The frames and the step graph stay out: a saved record is judged from its
        prices (docs/architecture.md, "The facts record")."""
        return json.dumps({"record": RECORD_VERSION, "figures": self.figures,
                           "program": self.program, "evidence": self.evidence,
                           "replay": self.replay, "prices": self.prices,
                           "together": [[list(k), v] for k, v in self.together.items()]},
                          default=_plain, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "WindowFacts":
        """A record saved by ``to_json``: no frames, no graph; its prices price the levers."""
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("record") != RECORD_VERSION:
            raise ValueError(f"not a facts record of version {RECORD_VERSION}")
        return cls(figures=d["figures"], program=d["program"], evidence=d["evidence"],
                   replay=d.get("replay"), prices=d.get("prices"),
                   together={tuple(k): v for k, v in d.get("together") or []})

    def __repr__(self) -> str:
        return (f"<WindowFacts: {len(self.figures)} figures, {len(self.program)} program facts, "
                f"{len(self.evidence)} with evidence, frames {sorted(self.frames)}>")


def build_facts(*, meta: TraceMeta, ev: pd.DataFrame, window_mode: str, source: str,
                ops: pd.DataFrame, gaps: pd.DataFrame, top_ops: pd.DataFrame, summary: dict,
                step_tab: pd.DataFrame, stats: dict | None, devices: pd.DataFrame,
                nccl: pd.DataFrame, collectives: pd.DataFrame, comp: dict,
                kernels: pd.DataFrame, copies: dict, graphs: dict, utilization: dict | None,
                ctx: dict, later: Callable[[str], Any]) -> WindowFacts:
    """The facts of one analysed window.

    ``ev``: the window's events; ``window_mode``: the window's (``whole_trace`` or a step
    window); ``source``: where the steps came from; ``ops``/``gaps``/``top_ops``/``summary``:
    its GPU ops, labelled idle gaps and the attribution's host ops and summary; ``ctx``:
    ``trace_context``'s dict, completed here in place (the device, CUDA graphs seen
    anywhere, graphs never replayed) -- the record's ``program``; ``utilization``: its
    ``busy_figures`` are taken out into the record; ``later(name)``: the result of a side
    pass still running (``layout``, ``steady``, ``hostwork``: ``host_work_kind``), fetched
    only when needed so that it runs beside the culprits.
    """
    complete_context(ctx, meta, graphs, source, len(ops))
    release_heap_grown()
    whole = window_mode == "whole_trace"
    fig: dict[str, Any] = {
        "format": meta.format, "window_mode": window_mode, "step_source": source,
        "gpu_ops": int(len(ops)),
        "window_ns": int(devices["window_ns"].sum()) if len(devices) else 0,
        "idle_ns": int(devices["idle_ns"].sum()) if len(devices) else 0,
        "exposed_comm_ns": int(nccl["exposed_ns"].sum())
        if len(nccl) and "exposed_ns" in nccl else 0,
    }
    summ = window_summary(stats, summary, top_ops, kernels, comp)
    summ["module_loads"] = module_loads(ev) if not whole else 0
    parts = cause_parts(gaps, ctx["host_traced"], ctx["api_traced"])
    culprits = culprits_mod.culprits(ev, gaps, ops, summary, top_ops, copies, collectives,
                                     comp, kernels, parts, ctx)
    release_heap_grown()   # culprits' interval sets; the layout and steady passes may run here next
    fig["host_in_compiled_call"] = compiled_call_host(culprits.get("host", ""))
    hw = later("hostwork")   # host_work_kind(ev, gaps, ops), a side pass
    hw_evidence = hw.pop("evidence") if hw else None
    if hw:   # the host work beside the model's: the framework's own, or work that can move
        outside = int(hw.get("host_ns") or 0) - int(hw.get("model_ns") or 0)
        hw["other_kind"] = host_other_kind(hw.get("top_other"), int(hw.get("top_other_ns") or 0)
                                           / outside if outside > 0 else None,
                                           bool(hw.get("top_other_encloses_model")))
    fig["host_work_kind"] = hw
    fig.update(cause_ns=parts, copies=copies, window_summary=summ,
               steps=stats["count"] if stats else 0,
               step_mean_ns=stats["mean_ns"] if stats else 0, devices=max(1, len(devices)),
               culprits=culprits,
               **window_figures(step_tab if source != "whole_trace" else None, gaps, top_ops,
                                utilization, kernels, comp, culprits, device_name(meta),
                                max(1, len(devices))))
    if whole and len(ops):
        fig["startup"] = startup(window_mod.one_time_calls(ev, gaps))
    fig.update(backlog(step_tab if source != "whole_trace" else None, gaps, devices))
    fig["program_step"] = steps_mod.program_step(step_tab if source != "whole_trace" else None)
    fig["queued_busy_share"] = steps_mod.queued_busy_share(ops)
    fig["program_step_mean_ns"] = (fig["program_step"] or {}).get("mean_ns", 0)
    if fig["program_step"]:   # bursty: the program's steps, not the host's spans
        summ.update(step_cv=fig["program_step"]["cv"], bursty=fig["program_step"]["bursty"])
    fig["slow_collective"] = slow_collective(collectives)
    fig.update(layout_figures(later("layout")))
    fig["queued_on"] = attr_mod.waited_by(gaps)   # (its summary reads the same totals)
    culprits.setdefault("queued", attr_mod.waited_summary(gaps, by=fig["queued_on"]))
    fig.update(_utilization_figures(utilization))
    fig["missing"] = missing_figures(meta, ev, ctx)
    head, head_ev = step_head_wait(ev, step_tab if source != "whole_trace" else None)
    ctx["step_head_wait"] = head   # the host fetching each step's input (an nsys osrt fact)
    if head_ev:
        ctx.setdefault("facts_evidence", {})["step_head_wait"] = head_ev
    fig["steady"] = later("steady")
    # the window's GPU ops stay out: the Analysis would hold them (its largest table) alive
    frames = {"gaps": gaps, "top_ops": top_ops, "steps": step_tab, "devices": devices,
              "kernels": kernels, "collectives": collectives, "nccl": nccl}
    # the newer detectors (passes/newfacts.py) bring their evidence located already
    located = ctx.pop("facts_evidence", None) or {}
    evidence = program_evidence(ev, ctx, step_tab)
    evidence.update(located)
    if hw_evidence:
        evidence["host_work_kind"] = hw_evidence
    return WindowFacts(figures=fig, program=ctx, evidence=evidence, frames=frames)


def complete_context(ctx: dict, meta: TraceMeta, graphs: dict, source: str, ops: int) -> None:
    """What the trace already does, from the passes besides ``trace_context`` (in place)."""
    ctx["device"] = with_kernel_arch(device_caps(meta), ctx.get("kernel_arch"))
    # a program that records or replays graphs anywhere already uses them
    ctx["uses_cuda_graphs"] = ctx["uses_cuda_graphs"] or graphs["uses_cuda_graphs"]
    # replays, a recording's own first run not counted (passes/graphs.first_run_launches)
    ctx["graph_replays"] = int(graphs["replays"])
    # graphs set up but never replayed in steady state: a new shape every step
    ctx["graphs_not_replayed"] = bool(graphs["uses_cuda_graphs"] and not graphs["replays"]
                                      and source != "whole_trace" and ops)


def with_kernel_arch(device: dict, arch: dict | None) -> dict:
    """The device's capabilities, its unknowns (None) filled from the kernel family
    (``kernel_arch``: volta_ kernels -> no TF32) and marked ``caps_from``."""
    if not arch or not isinstance(device, dict):
        return device
    fill = {k: arch[k] for k in ("tf32", "bf16") if device.get(k) is None}
    if device.get("cc") is None and device.get("tf32") is None:
        fill["cc"] = arch["cc"]
    if not fill:
        return device
    return {**device, **fill, "caps_from": f"kernel names ({arch['arch']}_)"}


def module_loads(ev: pd.DataFrame) -> int:
    """GPU code modules loaded inside the window (``common.MODULE_LOAD_RX``): past start-up,
    new kernels appearing every step are being JIT-compiled (torch.compile recompiles,
    Triton autotuning)."""
    api = kind_in(ev, ("runtime", "driver"))
    if not api.any():
        return 0
    return int(name_lut(ev["name"], MODULE_LOAD_RX).take(name_codes(ev["name"])[api]).sum())


def missing_figures(meta: TraceMeta, ev: pd.DataFrame, ctx: dict) -> dict:
    """What this capture did not record: an nsys export with no host activity at all
    (``nsys_host_untraced``), or with no framework ranges besides the steps
    (``nsys_no_framework_ranges``)."""
    nsys = meta.format == "nsys"
    untraced = nsys and not ctx["host_traced"]
    return {"nsys_host_untraced": bool(untraced),
            "nsys_no_framework_ranges": bool(nsys and not untraced
                                             and not has_non_step_ranges(ev))}


def window_summary(stats, summary, top_ops, kernels, comp) -> dict:
    """The figures the verdict reports as its evidence: the top sync op, the top host op in
    the gaps, the top kernel, the step statistics and the compile counts."""
    ev: dict[str, Any] = {}
    if summary["by_sync_op"]:
        op, v = max(summary["by_sync_op"].items(), key=lambda kv: kv[1]["ns"])
        ev["top_sync_op"] = op
        ev["top_sync_op_gaps"] = v["gaps"]
    if len(top_ops):
        ev["top_gap_op"] = str(top_ops["name"].iloc[0])
    if len(kernels):
        ev["top_kernel"] = str(kernels["name"].iloc[0])
        ev["top_kernel_pct"] = round(float(kernels["pct"].iloc[0]), 2)
    if stats:
        ev["steps"] = stats["count"]
        ev["step_mean_ns"] = stats["mean_ns"]
        ev["step_cv"] = stats["cv"]
        ev["bursty"] = stats["bursty"]
    if comp:
        ev["recompiles"] = int(comp.get("recompiles", 0) or 0)
        ev["graph_breaks"] = int(comp.get("graph_breaks", 0) or 0)
        ev["compile_whole_trace"] = comp.get("whole_trace")
    return ev


MFU_KEYS = ("mfu", "peak_tflops", "flops", "dtype", "device", "has_shapes", "lower_bound")


def _utilization_figures(u: dict | None) -> dict:
    """The figures the busy-time and allocator levers and the GPU-use headline read
    (verdict/busy.py): ``busy`` (passes/busy.py's lever figures, taken out of ``u``),
    ``memory`` (allocator calls after the first step, each device's peaks) and
    ``utilization`` (MFU, busy class shares, under-filled SMs)."""
    u = u if u is not None else {}
    busy_figs = u.pop("busy_figures", None)
    mem = u.get("memory") or {}
    m = u.get("mfu") or {}
    under = (u.get("occupancy") or {}).get("underfilled")
    return {
        "busy": busy_figs,
        "memory": {"after_first_step": (mem.get("api") or {}).get("after_first_step"),
                   "devices": [{k: d.get(k) for k in ("device", "capacity", "peak_reserved",
                                                       "peak_allocated")}
                               for d in mem.get("devices") or []]},
        "utilization": {"mfu": {k: m.get(k) for k in MFU_KEYS if k in m},
                        "class_pct": {c["class"]: c["pct"]
                                      for c in (u.get("busy") or {}).get("classes") or []},
                        "underfilled_sm_idle_pct": under["sm_idle_pct"] if under else None},
    }


# ------------------------------------------------------------------ evidence

def program_evidence(ev: pd.DataFrame, program: dict, step_tab: pd.DataFrame | None) -> dict:
    """Fact key -> the events that prove it: each ``<key>_evidence`` of the program facts
    (dict-valued ones give ``<key>.<sub>``, the optimizer its own) and the flags' proving
    names (``context.flag_evidence``), located in the window (first row of that name:
    ``ts_ns``, ``step``). A false fact gets an empty list (read from absence); a true one
    whose proof lies outside the window has no entry."""
    proofs: dict[str, list[str]] = {}
    for k, v in program.items():
        if k.endswith("_evidence"):
            key = k[: -len("_evidence")]
            if isinstance(v, dict):
                subs = {f"{key}.{sub}": [str(x)] for sub, x in v.items() if x}
                proofs.update(subs or {key: []})
            else:
                proofs[key] = [str(v)] if v else []
    opt = program.get("optimizer")
    proofs["optimizer"] = [str(opt["evidence"])] if isinstance(opt, dict) and \
        opt.get("evidence") else []
    proofs.update(flag_evidence(ev, program))
    where = _first_rows(ev, {n for names in proofs.values() for n in names})
    return {k: [_proof(n, where.get(n), step_tab) for n in names] for k, names in proofs.items()}


def _proof(name: str, ts: int | None, step_tab) -> dict:
    detail = "" if ts is not None else "not an event name: a count or metadata"
    return {"name": name, "ts_ns": ts, "step": _step_at(step_tab, ts), "detail": detail}


def _first_rows(ev: pd.DataFrame, names: set[str]) -> dict[str, int]:
    """Name -> ts of its first row in ``ev`` (names with no row left out): one pass."""
    if not names or not len(ev):
        return {}
    col = ev["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        codes = col.cat.codes.to_numpy()
        table = table_of(cats)   # the shared name table: no Python pass over every name
        want = {i: table.names[i] for i in np.flatnonzero(table.equals(names)[:-1]).tolist()}
        if not want:
            return {}
        rows = np.flatnonzero(code_in(codes, np.fromiter(want, np.int64)))
        first_codes, at = np.unique(codes[rows], return_index=True)
        ts = ev["ts"].to_numpy(np.int64)[rows[at]]
        return {want[int(c)]: int(t) for c, t in zip(first_codes, ts)}
    hit = col.isin(list(names)).to_numpy()
    rows = np.flatnonzero(hit)
    vals = col.to_numpy(object)[rows]
    out: dict[str, int] = {}
    ts = ev["ts"].to_numpy(np.int64)
    for r, v in zip(rows.tolist(), vals):
        out.setdefault(str(v), int(ts[r]))
    return out


def _step_at(step_tab, ts: int | None) -> int | None:
    """The step number whose host span holds ``ts`` (None: no step, or outside them)."""
    if ts is None or step_tab is None or not len(step_tab) or "step" not in step_tab:
        return None
    s, e = step_tab["start"].to_numpy(np.int64), step_tab["end"].to_numpy(np.int64)
    hit = np.flatnonzero((s <= ts) & (ts < e))
    if not len(hit):
        return None
    step = int(step_tab["step"].to_numpy()[hit[0]])
    return step if step >= 0 else None
