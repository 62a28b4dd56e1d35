"""Traces without steps: the window is the repeating part (passes/window.steady_start)."""
from __future__ import annotations

from traceread.analysis import analyze
from traceread.synth.scenarios import TraceBuilder

MS = 1_000_000
US = 1_000


def _program(iterations: int = 10, setup_idle: int = 2000 * MS) -> TraceBuilder:
    """One init kernel, a long set-up with no GPU work, then a loop of three kernels."""
    b = TraceBuilder()
    b.launch(0, 20 * US, 50 * US, 1 * MS, name="init_kernel")
    t = setup_idle
    for _ in range(iterations):
        for name in ("fwd", "bwd", "opt"):
            b.launch(t, 10 * US, t + 20 * US, 1 * MS, name=name)
            t += 1 * MS + 100 * US
        t += 2 * MS       # host work between iterations
    return b


def test_window_starts_after_the_first_iteration():
    b = _program()
    a = analyze(b.build())
    w = a.window.to_dict()
    assert w["mode"] == "steady"
    first_opt_end = 2000 * MS + 2 * (1 * MS + 100 * US) + 20 * US + 1 * MS
    assert w["start_ns"] - w["trace_start_ns"] == first_opt_end
    before = w["excluded"][0]
    assert before["what"] == "before the repeating part" and before["ns"] >= 2000 * MS
    # 9 iterations of 3 ms busy and 2.2 ms host each, not the 2 s set-up
    busy = int(a.devices["busy_ns"].sum())
    assert busy == 27 * MS
    assert a.verdict["evidence"]["idle_pct"] < 50


def test_no_loop_keeps_the_whole_trace():
    b = _program(iterations=5)          # 15 recurring launches: too few to call a loop
    assert analyze(b.build()).window.mode == "whole_trace"


def test_steps_all_keeps_the_whole_trace():
    assert analyze(_program().build(), steps="all").window.mode == "whole_trace"


def test_report_names_the_repeating_part_as_the_stepless_window():
    """The header said 'analysed: the repeating part' and the steps line, two screens down,
    'the whole trace is one window' (pipit cloverleaf, our data.bad.nonvtx)."""
    from traceread.render.report import render_report

    text = " ".join(render_report(analyze(_program().build())).split())   # unwrapped
    assert "analysed: the repeating part" in text
    assert "the repeating part is analysed as one stretch" in text
    assert "whole trace" not in text.split("Steps:")[1].split("Replay")[0]
