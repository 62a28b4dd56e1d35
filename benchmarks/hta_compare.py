"""``hta-compare``: traceread vs Meta's HolisticTraceAnalysis (HTA) on HTA's own test traces.

Prints, per trace and rank, HTA's communication/computation overlap, its
temporal idle time and its per-stream idle time next to traceread's, plus
traceread recomputed on HTA's event window (to show where the numbers part).
Differences are explained in docs/hta-comparison.md.

It measures figures, not time. HTA runs in its own virtualenv (it pins its own
pandas); ``--hta-python`` (or $HTA_PYTHON) is its interpreter. HTA is published as
``traceinsight`` since 0.6 (the module is still ``hta``; ``HolisticTraceAnalysis`` stopped
at 0.5.0):

    python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install 'traceinsight>=0.6'
    python -m benchmarks hta-compare

traceread runs in this process, from this checkout's ``src``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .harness import CORPUS, SRC

DATA = CORPUS / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
TRACELENS = CORPUS / "AMD-AGI__TraceLens" / "tests" / "traces"
SETS = {
    "sampled rank-0/1": [DATA / "timeline_analysis" / "sampled_rank-0.json.gz",
                         DATA / "trace_filter" / "sampled_rank-1.json.gz"],
    "nccl_parser_config": [DATA / "nccl_parser_config" / "nccl_data.json.gz"],
    "trace_diff/test": [DATA / "trace_diff" / "test" / "test.json.gz"],
    "TraceLens mi300 act-ckpt (ROCm)": [TRACELENS / "mi300" / "resnet_act_checkpoint.json.gz"],
}

HTA_CODE = r"""
import json, sys, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
try:
    from hta.version import __version__ as version
except ImportError:
    version = "?"
out = {"version": version}
for include_last in (False, True):
    a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=include_last)
    ov = a.get_comm_comp_overlap(visualize=False)
    tb = a.get_temporal_breakdown(visualize=False)
    res = {"overlap": {int(r): float(p) for r, p in zip(ov["rank"], ov["comp_comm_overlap_pctg"])},
           "idle_us": {int(r): float(v) for r, v in zip(tb["rank"], tb["idle_time(us)"])},
           "span_us": {int(r): float(v) for r, v in zip(tb["rank"], tb["kernel_time(us)"])},
           "stream_idle_us": {}}
    for r in a.t.traces:
        br, _ = a.get_idle_time_breakdown(ranks=[r], visualize=False)
        g = br.groupby("stream")["idle_time"].sum()
        res["stream_idle_us"][int(r)] = {str(int(s)): float(v) for s, v in g.items()}
    out["last" if include_last else "default"] = res
print(json.dumps(out))
"""


def run_hta(files: list[Path], py: str) -> dict | str:
    if not Path(py).exists():
        return f"HTA interpreter {py} not found"
    with tempfile.TemporaryDirectory() as d:
        for f in files:
            (Path(d) / f.name).symlink_to(f)
        p = subprocess.run([py, "-c", HTA_CODE, d], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return "HTA failed: " + p.stderr.strip().splitlines()[-1]
    return json.loads(p.stdout.strip().splitlines()[-1])


def hta_window(ev, include_last: bool = False):
    """The kernels HTA keeps: launched (by correlation) from a runtime call that starts
    before the last ProfilerStep (or inside it with include_last)."""
    steps = ev[ev["name"].astype(str).str.match(r"ProfilerStep#\d+$")]
    gpu = ev["kind"].isin(("kernel", "memcpy", "memset")).to_numpy()
    if steps["name"].nunique() < 2:
        return ev
    limit = (steps["ts"] + steps["dur"]).max() if include_last else steps["ts"].max()
    rt = ev[ev["kind"].isin(("runtime", "driver")) & (ev["correlation"] >= 0)]
    rt = rt[(rt["ts"] <= limit) if include_last else (rt["ts"] < limit)]
    keep_gpu = gpu & ev["correlation"].isin(rt["correlation"]).to_numpy()
    return ev[~gpu | keep_gpu]


def hta_round(ev):
    """HTA's ``round_down_time_stamps`` on ns-resolution traces: start rounded *up*,
    end rounded *down* to whole µs (every event shrinks by up to 2 µs)."""
    import numpy as np

    ts = ev["ts"].to_numpy(np.int64)
    end = ts + ev["dur"].to_numpy(np.int64)
    t2 = -((-ts) // 1000) * 1000
    e2 = (end // 1000) * 1000
    return ev.assign(ts=t2, dur=np.maximum(e2 - t2, 0))


def stream_idle(ev) -> dict[str, int]:
    """Per stream: holes between its first and last GPU op (union based), ns."""
    import numpy as np

    from traceread.passes import intervals

    ops = ev[ev["kind"].isin(("kernel", "memcpy", "memset"))]
    out = {}
    for s, g in ops.groupby("stream", sort=True):
        ts = g["ts"].to_numpy(np.int64)
        u = intervals.union(ts, ts + g["dur"].to_numpy(np.int64))
        out[str(int(s))] = int(u[1].max() - u[0].min() - intervals.total(u))
    return out


def ours(path: Path) -> dict:
    import traceread
    from traceread.passes.gaps import gpu_gaps
    from traceread.passes.nccl import comm_mask, comm_overlap

    tr = traceread.load(str(path))
    ev = tr.events
    res = {"rank": tr.meta.rank}
    ov = comm_overlap(ev)
    res["overlap"] = float(ov["overlap_pct"].iloc[0]) if len(ov) else float("nan")
    res["comm_ns"] = int(ov["comm_ns"].sum())
    res["exposed_ns"] = int(ov["exposed_ns"].sum())
    res["comm_kernels"] = int(comm_mask(ev).sum())
    w = hta_window(ev)
    ovw = comm_overlap(w)
    res["overlap_hta_window"] = float(ovw["overlap_pct"].iloc[0]) if len(ovw) else float("nan")
    gaps = gpu_gaps(tr)
    res["idle_ns"] = int(gaps["duration"].sum())
    res["idle_ns_hta_window"] = int(gpu_gaps(w)["duration"].sum())
    res["stream_idle_ns"] = stream_idle(ev)
    if (ev["ts"] % 1000 != 0).any():  # ns-resolution trace: HTA rounds it
        wr = hta_round(w)
    else:
        wr = w
    ovr = comm_overlap(wr)
    res["overlap_hta_exact"] = float(ovr["overlap_pct"].iloc[0]) if len(ovr) else float("nan")
    res["idle_ns_hta_exact"] = int(gpu_gaps(wr)["duration"].sum())
    res["stream_idle_ns_hta_window"] = stream_idle(wr)
    return res


def add_args(ap) -> None:
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/tmp/hta-venv/bin/python"),
                    help="interpreter of a venv with HTA installed (pip install traceinsight)")


def main(args) -> int:
    sys.path.insert(0, str(SRC))  # traceread of this checkout, in this process
    for label, files in SETS.items():
        files = [f for f in files if f.exists()]
        if not files:
            print(f"== {label}: not in the corpus, skipped")
            continue
        print(f"== {label}")
        hta = run_hta(files, args.hta_python)
        if isinstance(hta, str):
            print("   " + hta)
        else:
            print(f"   HTA {hta.get('version', '?')}")
        for f in files:
            o = ours(f)
            r = o["rank"] if o["rank"] >= 0 else 0
            print(f"  {f.name} (rank {r}, {o['comm_kernels']} NCCL kernels, comm {o['comm_ns']/1e6:.3f} ms,"
                  f" exposed {o['exposed_ns']/1e6:.3f} ms)")
            if isinstance(hta, dict):
                h, hl = hta["default"], hta["last"]
                print(f"    comm/comp overlap %   HTA {h['overlap'].get(str(r), h['overlap'].get(r)):7.2f}"
                      f" (incl. last step {hl['overlap'].get(str(r), hl['overlap'].get(r)):7.2f})"
                      f" | traceread {o['overlap']:7.2f} (on HTA's window {o['overlap_hta_window']:7.2f},"
                      f" + HTA's µs rounding {o['overlap_hta_exact']:7.2f})")
                hi = h["idle_us"].get(str(r), h["idle_us"].get(r))
                print(f"    GPU idle (ms)          HTA {hi/1e3:9.3f}"
                      f" | traceread {o['idle_ns']/1e6:9.3f} (on HTA's window {o['idle_ns_hta_window']/1e6:9.3f},"
                      f" + rounding {o['idle_ns_hta_exact']/1e6:9.3f})")
                hs = h["stream_idle_us"].get(str(r), h["stream_idle_us"].get(r, {}))
                for s in sorted(set(hs) | set(o["stream_idle_ns"]), key=int):
                    a = hs.get(s)
                    b = o["stream_idle_ns"].get(s)
                    c = o["stream_idle_ns_hta_window"].get(s)
                    fa = f"{a/1e3:9.3f}" if a is not None else "        -"
                    fb = f"{b/1e6:9.3f}" if b is not None else "        -"
                    fc = f"{c/1e6:9.3f}" if c is not None else "        -"
                    print(f"      stream {s:>4} idle (ms)  HTA {fa} | traceread {fb} (HTA window + rounding {fc})")
            else:
                print(f"    traceread overlap {o['overlap']:.2f} %, idle {o['idle_ns']/1e6:.3f} ms")
    return 0

