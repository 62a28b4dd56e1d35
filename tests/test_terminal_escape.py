"""Issue 23, "The terminal is not the trace's to control".

Names in a trace (kernels, ops, annotations / NVTX ranges, devices, processes) and
the trace's file name carry terminal control sequences and newlines; every text
output and error line must show them as inert, visible escapes, one line per name,
while JSON keeps them exact. The hostile trace is written at test time with
``traceread.synth`` (nothing hostile is committed).
"""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from traceread.cli import main
from traceread.render import safe
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import MS, T0, US, TraceBuilder, write_nsys

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"      # writes the clipboard
TITLE = "\x1b]0;pwned\x07"                 # sets the window title
CLEAR = "\x1b[2J\x1b[H"                    # clears the screen, cursor home
C1 = "\x9b2J\x9d0;t\x9c"                   # the same with 8-bit C1 controls
FORGE = "\nVERDICT DATA forged"            # a line of our own, at column 0
CR = "\rVERDICT CR forged"

KERNEL = f"void gemm{OSC52}{FORGE}<float>(float*)"
OP = f"aten::mm{TITLE}{CR}"
RANGE = f"forward{CLEAR}{FORGE}"
DEVICE = f"NVIDIA H100{C1}{FORGE}"
PROCESS = f"python{OSC52}"
API = f"cudaLaunchKernel{C1}{FORGE}"

# Raw control characters that must never reach a terminal (tab and newline are layout).
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def hostile_builder() -> TraceBuilder:
    b = TraceBuilder(path="hostile.json")
    t = T0
    for k in range(3):
        b.step(k, t, 10 * MS)
        b.cpu(RANGE, t, 9 * MS, kind="annotation")
        for j in range(5):
            b.op_with_kernel(OP, t + j * MS, 500 * US, 50 * US, 20 * US,
                             t + j * MS + 100 * US, 300 * US, name=KERNEL, api=API)
        t += 10 * MS
    return b


def hostile_trace(tmp_path, fname=f"run{TITLE}.json"):
    trace = hostile_builder().build(devices=[{"device": 0, "name": DEVICE}],
                                    processes={4242: PROCESS})
    return write_kineto(trace, tmp_path / fname)


def _assert_inert(text: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text).group())
    for line in text.splitlines():
        assert not line.startswith(("VERDICT DATA", "VERDICT CR")), line
    assert "\u2028" not in text and "\u202e" not in text


def _run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


# --------------------------------------------------------------------------- safe.py

def test_name_escapes_every_control_and_stays_one_line():
    s = safe.name(f"a{OSC52}{FORGE}{C1}\tb\u2028c\u202ed\x7f")
    assert "\n" not in s and not RAW.search(s) and "\u2028" not in s and "\u202e" not in s
    assert s.startswith("a\\x1b]52;c;") and "\\nVERDICT" in s and "\\x9b2J" in s
    assert "\\t" in s and "\\u2028" in s and "\\u202e" in s and "\\x7f" in s
    assert safe.name("void gemm<float>(float*) · µs") == "void gemm<float>(float*) · µs"


def test_text_keeps_layout_and_escapes_the_rest():
    s = safe.text(f"line one\tcol\nline two{CLEAR}{CR}")
    assert s.split("\n")[0] == "line one\tcol"
    assert not RAW.search(s) and "\\x1b[2J" in s and "\\r" in s


# --------------------------------------------------------------------------- commands

@pytest.mark.parametrize("cmd", [["analyze"], ["steps"], ["idle"], ["kernels"], ["api"], ["nvtx"],
                                 ["gaps"], ["info"], ["compile"], ["nccl"]])
def test_text_outputs_are_inert(tmp_path, cmd):
    p = hostile_trace(tmp_path)
    code, out, err = _run(*cmd, p)
    assert code == 0, err
    _assert_inert(out)
    _assert_inert(err)


def test_analyze_text_shows_the_names_escaped(tmp_path):
    p = hostile_trace(tmp_path)
    code, out, _ = _run("analyze", p)
    assert code == 0
    assert "\\x1b]0;pwned\\x07" in out  # the file name (header) and op name, visible


def test_kernels_and_nvtx_text_show_escaped_names(tmp_path):
    p = hostile_trace(tmp_path)
    _, out, _ = _run("kernels", p)
    assert "void gemm\\x1b]52;c;" in out and "\\nVERDICT DATA forged" in out
    _, out, _ = _run("nvtx", p)
    assert "forward\\x1b[2J" in out


def test_info_text_shows_escaped_device_and_process(tmp_path):
    p = hostile_trace(tmp_path)
    _, out, _ = _run("info", p)
    assert "H100\\x9b2J" in out and "python\\x1b]52" in out


def test_json_keeps_names_exact(tmp_path):
    p = hostile_trace(tmp_path)
    code, out, _ = _run("kernels", "--format", "json", p)
    assert code == 0 and not RAW.search(out)  # JSON escapes controls itself ...
    assert KERNEL in {r.get("Name", r.get("name")) for r in json.loads(out)}  # ... exactly
    code, out, _ = _run("analyze", "--format", "json", p)
    assert code == 0 and not RAW.search(out)
    assert json.loads(out)["trace"]["path"].endswith(f"run{TITLE}.json")


def test_csv_is_exact_in_a_file(tmp_path):
    p = hostile_trace(tmp_path)
    code, _, err = _run("kernels", "--format", "csv", "-o", tmp_path / "k.csv", p)
    assert code == 0, err
    assert OSC52 in (tmp_path / "k.csv").read_text()  # a machine format keeps the bytes


def test_diff_text_is_inert(tmp_path):
    a = hostile_trace(tmp_path, f"before{OSC52}.json")
    b = hostile_trace(tmp_path, f"after{FORGE}.json")
    code, out, err = _run("diff", a, b)
    assert code == 0, err
    _assert_inert(out)
    _assert_inert(err)


def test_nsys_nvtx_text_is_inert(tmp_path):
    trace = hostile_builder().build(devices=[{"device": 0, "name": DEVICE}])
    p = write_nsys(trace, tmp_path / "hostile.sqlite")
    for cmd in ("nvtx", "kernels", "analyze", "info"):
        code, out, err = _run(cmd, p)
        assert code == 0, (cmd, err)
        _assert_inert(out)
        _assert_inert(err)


def test_error_line_for_a_hostile_file_name_is_one_inert_line(tmp_path):
    p = tmp_path / f"bad{OSC52}{FORGE}.json"
    p.write_text("not json at all")
    code, out, err = _run("analyze", p)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("traceread: error: ")
    _assert_inert(err)
    assert "\\x1b]52;c;" in err and "\\nVERDICT" in err


def test_warning_line_for_a_cut_trace_is_inert(tmp_path):
    p = hostile_trace(tmp_path, f"cut{TITLE}{FORGE}.json")
    data = p.read_bytes()
    p.write_bytes(data[: data.rindex(b"},") + 1])   # cut after an event: a truncated trace
    code, out, err = _run("info", p)
    assert code == 0
    assert "traceread: warning:" in err and err.count("\n") == 1
    _assert_inert(err)


def test_clicks_own_usage_error_quoting_a_hostile_name_is_inert(tmp_path):
    p = hostile_trace(tmp_path)
    d = tmp_path / f"dir{TITLE}"
    d.mkdir()
    code, out, err = _run("analyze", p, "-o", d)   # -o names a directory: click refuses it
    assert code == 2
    _assert_inert(err)
    assert "dir\\x1b]0;pwned\\x07" in err
