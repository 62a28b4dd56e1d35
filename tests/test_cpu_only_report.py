"""A trace without GPU work (CPU torch, here a real 2.13 CPU capture of gradient accumulation)
is reported as what it is: its step table is the host's spans, no "GPU USE" section, no
"the GPU waits on the host", and a larger batch spreads each op's dispatch, not kernel
launches."""
from pathlib import Path

from traceread import load
from traceread.analysis import analyze
from traceread.render.report import render_report, render_steps

ACCUM = Path(__file__).parent / "fixtures" / "anatomy" / "accum.json.gz"


def test_a_cpu_trace_reads_without_gpu_words():
    a = analyze(load(ACCUM))
    assert not len(a.devices)
    text = render_report(a)
    assert "GPU USE" not in text and "the GPU waits" not in text
    assert "GPU busy" not in text and "GPU idle:" not in text
    assert "more work per op for the same per-op dispatch cost" in text
    assert "per kernel" not in text
    rows = [ln for ln in text.splitlines() if ln.strip().startswith("#")]
    assert len(rows) == len(a.steps) and all(ln.split()[1] != "0" for ln in rows)


def test_the_steps_command_of_a_cpu_trace_lists_host_spans():
    a = analyze(load(ACCUM))
    text = render_steps(a)
    assert "GPU idle" not in text and "program step" not in text
    assert "host" in text.splitlines()[-len(a.steps) - 1]


def test_the_html_steps_of_a_cpu_trace_are_host_time():
    from traceread.render.html import _steps_section

    d = analyze(load(ACCUM)).to_dict()
    html = _steps_section(d)
    assert "host time" in html and "GPU busy" not in html
