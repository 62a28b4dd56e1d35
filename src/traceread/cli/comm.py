"""``traceread nccl`` and ``traceread compile``: communication overlap and torch.compile cost."""
from __future__ import annotations

import json
import math

import click

from . import main
from ._common import each_trace, emit, emit_json, exit_if_failed, format_option, output_option
from ..passes.compile import compile_events, compile_summary
from ..passes.nccl import collective_summary, comm_overlap, nccl_report
from ..render import safe
from ..render.text import fmt_ns


def _num(v, fmt="{:.1f}"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _nccl_text(path: str, trace) -> str:
    ov = comm_overlap(trace)
    summ = collective_summary(trace)
    lines = [safe.name(path)]
    if not len(ov) or int(ov["comm_kernels"].sum()) == 0:
        lines.append("  no NCCL/RCCL kernels")
        return "\n".join(lines)
    lines.append("  per device (comm = NCCL kernels, compute = other kernels; memcpy/memset neither)")
    for r in ov.itertuples():
        if r.comm_kernels == 0:
            continue
        lines.append(f"    pid {r.pid} GPU {r.device}: comm {fmt_ns(r.comm_ns)}, "
                     f"hidden {fmt_ns(r.overlap_ns)} ({r.overlap_pct:.1f}%), "
                     f"exposed {fmt_ns(r.exposed_ns)}, compute {fmt_ns(r.compute_ns)}")
    lines.append(f"  {'collective':<15}{'count':>7}{'total':>11}{'exposed':>11}"
                 f"{'avg msg':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}{'ranks':>7}")
    for r in summ.itertuples():
        msg = "-" if r.sized == 0 else f"{r.avg_msg_bytes / 2**20:.2f} MiB"
        lines.append(f"  {safe.name(r.collective):<15}{r.count:>7}{fmt_ns(r.total_ns):>11}"
                     f"{fmt_ns(r.exposed_ns):>11}{msg:>12}{_num(r.algbw_gbps, '{:.2f}'):>12}"
                     f"{_num(r.busbw_gbps, '{:.2f}'):>12}"
                     f"{(str(r.group_size) if r.group_size > 0 else '-'):>7}")
    return "\n".join(lines)


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False))
@format_option
@output_option
def nccl(traces, fmt, out):
    """Communication vs compute overlap and per-collective bandwidth for each TRACE."""
    if fmt == "json":
        res, failed = each_trace(traces, lambda p, tr: dict(path=p, **nccl_report(tr)))
        emit_json(res, out, len(traces))
    else:
        res, failed = each_trace(traces, _nccl_text)
        emit("\n\n".join(res), out)
    exit_if_failed(failed)


def _compile_text(path: str, s: dict) -> str:
    lines = [safe.name(path)]
    if s["episodes"] == 0 and s["compiled_region_calls"] == 0 and s["cache_lookups"] == 0:
        lines.append("  no torch.compile activity")
        return "\n".join(lines)
    lines.append(f"  whole trace: compiles {s['compiles']} (recompiles {s['recompiles']}), "
                 f"graph breaks {s.get('graph_breaks', 0)}")
    lines.append(f"  compiling {fmt_ns(s['compile_ns'])}"
                 + (f", GPU idle meanwhile {fmt_ns(s['idle_overlap_ns'])}" if s["gpu_ops"] else ""))
    lines.append(f"  guard checks (TorchDynamo Cache Lookup) {s['cache_lookups']}, "
                 f"{fmt_ns(s['cache_lookup_ns'])}; compiled-region calls {s['compiled_region_calls']}")
    if s.get("cudagraph_record_ns"):
        lines.append(f"  CUDA-graph recording {fmt_ns(s['cudagraph_record_ns'])}")
    for f in s["frames"]:
        steps = ",".join(str(x) for x in f["steps"]) or "-"
        lines.append(f"    frame {safe.name(f['frame'])}: compiles {f['compiles']}, recompiles {f['recompiles']}, "
                     f"{fmt_ns(f['compile_ns'])}, steps {steps}; "
                     f"ran {safe.name(' '.join(f['regions_seen'])) or '-'}")
    for b in s.get("breaks") or []:
        lines.append(f"    graph break: frame {safe.name(str(b['frame']))} resumes in frame "
                     f"{safe.name(str(b['resumes']))} ({b['calls']} calls)")
    return "\n".join(lines)


@main.command("compile")
@click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False))
@click.option("--events", "show_events", is_flag=True, help="List every compile episode.")
@format_option
@output_option
def compile_cmd(traces, show_events, fmt, out):
    """torch.compile: compiles, recompiles per frame and step, compile time, GPU idle while compiling."""
    def one(p, tr):
        s = compile_summary(tr)
        if show_events:
            s["events"] = json.loads(compile_events(tr).to_json(orient="records"))
        return p, s

    res, failed = each_trace(traces, one)
    if fmt == "json":
        docs = [dict(path=p, **s) for p, s in res]
        emit_json(docs, out, len(traces))
    else:
        parts = []
        for p, s in res:
            text = _compile_text(p, s)
            for e in s.get("events", []):
                text += (f"\n      {e['compile_id'] or '?'} step {e['step']} "
                         f"{fmt_ns(e['dur'])} ({safe.name(e['name'])})")
            parts.append(text)
        emit("\n\n".join(parts), out)
    exit_if_failed(failed)
