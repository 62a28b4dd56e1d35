"""Small things a new user hit (issue 22): units, plurals, paths, scripts."""
from __future__ import annotations

from traceread.render.text import fmt_bytes, fmt_rate

from conftest import analysed


def test_small_sizes_and_rates_keep_their_unit():
    # a 6 kB copy once printed as "6.11e-06 GB at 0.0 GB/s"
    assert fmt_bytes(6110) == "6.11 kB" and fmt_bytes(12) == "12 B"
    assert fmt_bytes(3.2e9) == "3.2 GB" and fmt_bytes(45_600_000) == "45.6 MB"
    assert fmt_rate(0.0004) == "400 kB/s" and fmt_rate(12.34) == "12.3 GB/s"


def test_one_is_singular():
    from traceread.render.report import _counts

    assert _counts({"compiles": 1, "recompiles": 1}) == "1 compile (1 recompile)"
    assert _counts({"compiles": 3, "recompiles": 0}) == "3 compiles (0 recompiles)"


def _script(tmp_path, body: str):
    import shutil
    import subprocess
    import sys

    from conftest import FIXTURES

    d = tmp_path / "traces"
    d.mkdir()
    shutil.copy(FIXTURES / "cpu" / "batch16.json.gz", d)
    shutil.copy(FIXTURES / "kineto" / "kineto_after_fix_trace.json", d)
    script = tmp_path / "run.py"
    script.write_text(body.format(d=str(d)))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))


def test_analyze_dir_in_an_unguarded_script_runs_in_process_and_says_why(tmp_path):
    # workers re-run the parent's script: unguarded, every row was "worker exited with
    # status 1" and nothing said why
    r = _script(tmp_path, "import traceread\n"
                          "df = traceread.analyze_dir({d!r}, jobs=2)\n"
                          "print('errors:', int(df['error'].notna().sum()), len(df))\n")
    assert r.returncode == 0, r.stderr
    assert "errors: 0 2" in r.stdout
    assert "without an `if __name__ == \"__main__\":` guard" in r.stderr and "run.py:2" in r.stderr


def test_unguarded_call_is_not_flagged_under_the_guard(tmp_path):
    r = _script(tmp_path, "import traceread\nfrom traceread.jobs.batch import unguarded_main_call\n"
                          "if __name__ == '__main__':\n"
                          "    print('where:', unguarded_main_call())\n"
                          "print('top:', unguarded_main_call() is not None)\n")
    assert r.returncode == 0, r.stderr
    assert "where: None" in r.stdout and "top: True" in r.stdout


def test_analyze_and_idle_list_a_gap_at_the_same_start():
    # analyze once counted from the device's window start, idle from the trace's first
    # event: one gap at "+0 ns" and "+0.000175 s"
    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main

    p = str(FIXTURES / "gpu" / "data.bad.json.gz")
    rep = CliRunner().invoke(main, ["analyze", p, "--no-cache"]).stdout.splitlines()
    idle = CliRunner().invoke(main, ["idle", p, "--no-cache"]).stdout.splitlines()
    head = rep.index(next(x for x in rep if x.startswith("Largest idle gaps")))
    assert "after the trace's first event" in rep[head + 1]
    first = rep[head + 3].split()
    start, dur = first[0] + " " + first[1], first[2] + " " + first[3]  # "+0.000175 s", "21.7 ms"
    assert start.startswith("+") and start.endswith(" s")
    assert any(x.split()[:4] == [*start.split(), *dur.split()] for x in idle), (start, dur)


class _Tty:
    def isatty(self):
        return True


class _Pipe:
    def isatty(self):
        return False


REPORT = ("trace.json\n\nVERDICT  DATA — input-bound: the GPU waits for the DataLoader\n"
          "  GPU idle 87.2% of the analysed window; 62% of the lost time is waiting for the "
          "DataLoader and more words here\n    (a note in parentheses)\n"
          "  step   host   busy\n    #3   40.7 ms   4.55 ms\n")


def test_terminal_width_comes_from_columns_and_only_on_a_tty():
    from traceread.render.terminal import for_terminal

    narrow = for_terminal(REPORT, _Tty(), {"COLUMNS": "60", "NO_COLOR": "1"})
    assert all(len(x) <= 60 for x in narrow.splitlines())
    assert "    #3   40.7 ms   4.55 ms" in narrow  # table alignment kept
    assert narrow.replace("\n", " ").split() == REPORT.replace("\n", " ").split()  # no word lost
    assert for_terminal(REPORT, _Pipe(), {"COLUMNS": "60"}) == REPORT  # a pipe keeps the layout


def test_colour_on_a_tty_unless_no_color():
    from traceread.render.terminal import BOLD, DIM, VERDICT, for_terminal

    c = for_terminal(REPORT, _Tty(), {"COLUMNS": "200"})
    assert VERDICT + "VERDICT  DATA" in c and DIM + "    (a note" in c
    assert BOLD not in c.split("VERDICT")[0]  # the path line is not a title
    assert "\x1b" not in for_terminal(REPORT, _Tty(), {"COLUMNS": "200", "NO_COLOR": "1"})
    assert "\x1b" not in for_terminal(REPORT, _Tty(), {"COLUMNS": "200", "TERM": "dumb"})
    assert "\x1b" not in for_terminal(REPORT, _Pipe(), {})


def test_truncation_note_says_its_share_is_of_the_bytes_present():
    # "(100.0% of the data)" read as "nothing is missing" for a file cut short
    from traceread.cli._common import truncation_note

    note = truncation_note({"truncated_at_byte": 53314, "events_recovered": 401,
                            "share_of_file": 1.0})
    assert "100.0% of the bytes present" in note and "of the data" not in note


def test_analysis_in_a_notebook_is_short_and_has_a_report():
    import traceread
    from conftest import FIXTURES

    a = analysed(FIXTURES / "gpu" / "data.bad.json.gz")
    r = repr(a)
    assert len(r) < 200 and "DATA" in r and "3 steps" in r
    html = a._repr_html_()
    assert "VERDICT DATA" in html and "<style>" in html and ".traceread-summary .verdict" in html
    assert "<html" not in html  # a cell's fragment, not a page
    assert a.report().startswith(str(a.meta.path)) and "VERDICT  DATA" in a.report()


def test_batch_page_draws_no_nan_and_shows_paths_under_their_folder(tmp_path):
    import shutil

    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main

    src = tmp_path / "in" / "deep" / "folder"
    src.mkdir(parents=True)
    shutil.copy(FIXTURES / "cpu" / "batch16.json.gz", src)       # CPU-only: no GPU idle
    shutil.copy(FIXTURES / "gpu" / "data.bad.json.gz", src)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["batch", str(tmp_path / "in"), "-o", str(out), "-j", "1"])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text()
    assert "nan%" not in page and "1 trace without a GPU idle figure" in page
    assert f"files under {src}" in page
    assert f">{src}/" not in page  # rows show names below that folder, not absolute paths
    assert "87.2% (data)" in page


def test_util_keeps_epoch_ns_exact_on_kineto():
    # Kineto's epoch ns are past float64's exact integers: starts came out rounded to 256 ns
    import math

    import traceread
    from conftest import FIXTURES
    from traceread.passes.nsys_reports import gap_ops, gpu_time_util

    t = traceread.load(str(FIXTURES / "gpu" / "data.bad.json.gz"))
    _, ops = gap_ops(t, True)
    s = ops["ts"].to_numpy("int64")
    e = s + ops["dur"].to_numpy("int64")
    start, size = int(s.min()), math.ceil((int(e.max()) - int(s.min())) / 30)
    u = gpu_time_util(t)
    assert len(u) and start > 2 ** 53
    for r in u.itertuples():
        assert (int(r.start) - start) % size == 0  # on a chunk boundary, to the ns


def test_html_step_bars_say_what_they_draw_and_classes_have_their_own_colours(tmp_path):
    import re

    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main
    from traceread.render.html import CLASS_COLORS
    from traceread.render.html_base import COLORS

    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["analyze", str(FIXTURES / "gpu" / "data.bad.json.gz"),
                                  "--format", "html", "-o", str(out), "--no-cache"])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    # the step's own time, then the GPU busy and idle inside it (issue 33: a bar is the step)
    u = r"[0-9.]+ (?:ns|us|ms|s)"
    assert re.search(rf">{u} \(GPU busy {u}, idle {u}\)</text>", page)
    assert " host</text>" not in page
    idle = {v for k, v in COLORS.items() if k != "busy"}
    assert not idle & set(CLASS_COLORS)
    section = page[page.index("Kernel time by class"):]
    assert CLASS_COLORS[0] in section


def test_info_numbers_the_ranks_of_an_nsys_export_as_analyze_does(tmp_path):
    # info said "rank unknown" for the processes analyze reports as ranks 0 and 1
    import json
    import lzma

    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main

    dst = tmp_path / "ddp2.sqlite"
    with lzma.open(FIXTURES / "h200" / "ddp2" / "ddp2.sqlite.xz") as src, open(dst, "wb") as f:
        f.write(src.read())
    doc = json.loads(CliRunner().invoke(main, ["info", str(dst), "--format", "json"]).stdout)
    assert doc["rank"] == -1 and sorted(doc["process_ranks"].values()) == [0, 1]
    text = CliRunner().invoke(main, ["info", str(dst)]).stdout
    assert "one per GPU process, as analyze splits this export" in text
    assert "rank       unknown" not in text
    job = CliRunner().invoke(main, ["analyze", str(dst), "--format", "json"])
    pids = {str(t["trace"]["path"]).rsplit("#pid", 1)[1]: t["trace"]["rank"]
            for t in json.loads(job.stdout)["traces"]}
    assert pids == doc["process_ranks"]


def _chrome_shapes(tmp_path):
    """Chrome traces no torch.profiler wrote: a Triton-server-like B/E pairs file (gz, a
    bare array, no cat), X events of an unknown cat, async b/e only, counters only, and
    Triton's own trace_file records (no ph at all)."""
    import gzip
    import json

    be = []
    for i in range(1000):
        be += [{"name": "INFER", "cat": "triton", "ph": "B", "ts": i * 100, "pid": 0, "tid": i % 4},
               {"name": "INFER", "cat": "triton", "ph": "E", "ts": i * 100 + 70, "pid": 0, "tid": i % 4}]
    shapes = {
        "be.json.gz": ({"traceEvents": be}, "2,000 events of unknown categories (triton 2,000) "
                                            "read as 1,000 plain CPU ranges (B/E pairs as one), 0 ignored"),
        "bare.json": ([{k: v for k, v in e.items() if k != "cat"} for e in be],
                      "2,000 events of unknown categories ((no cat) 2,000) read as 1,000"),
        "x.json": ({"traceEvents": [{"name": f"op{i}", "cat": "weird", "ph": "X", "ts": i * 10,
                                     "dur": 5, "pid": 1, "tid": 1} for i in range(2000)]},
                   "(weird 2,000) read as 2,000 plain CPU ranges, 0 ignored"),
        "async.json": ({"traceEvents": [{"name": "r", "cat": "triton", "ph": ph, "id": i,
                                         "ts": i * 100 + d, "pid": 0, "tid": 1}
                                        for i in range(1000) for ph, d in (("b", 0), ("e", 70))]},
                       "read as 0 plain CPU ranges, 2,000 ignored (ph b 1,000, e 1,000)"),
        "counters.json": ({"traceEvents": [{"name": "q", "ph": "C", "ts": i, "pid": 0,
                                            "args": {"v": i}} for i in range(2000)]},
                          "2,000 ignored (ph C 2,000)"),
        "triton_trace_file.json": ([r for i in range(1000) for r in (
            {"id": i, "model_name": "simple", "model_version": -1},
            {"id": i, "timestamps": [{"name": "HTTP_RECV_START", "ns": 1000 + i}]})],
            "2,000 events of unknown categories read as 0 plain CPU ranges, 2,000 ignored (ph none 2,000)"),
    }
    for name, (doc, _) in shapes.items():
        text = json.dumps(doc)
        p = tmp_path / name
        p.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return {tmp_path / n: want for n, (_, want) in shapes.items()}


def test_a_non_torch_chrome_trace_says_what_it_ignored(tmp_path):
    from click.testing import CliRunner

    from traceread.cli import main

    for path, want in _chrome_shapes(tmp_path).items():
        for cmd in (["analyze"], ["info"], ["analyze", "--format", "json"]):
            r = CliRunner().invoke(main, cmd + ["--no-cache", str(path)])
            if path.name in ("async.json", "counters.json", "triton_trace_file.json"):
                # nothing became a row: refused, saying what it ignored
                lines = r.stderr.splitlines()
                assert r.exit_code == 1 and len(lines) == 1, (path.name, r.stderr)
                assert lines[0].startswith("traceread: error: ") and want in lines[0], lines[0]
                continue
            warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("traceread: warning:")]
            assert len(warnings) == 1, (path.name, r.stderr)
            assert "not a torch.profiler trace" in warnings[0] and want in warnings[0], warnings[0]


def test_torch_traces_get_no_foreign_warning():
    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main

    r = CliRunner().invoke(main, ["info", "--no-cache", str(FIXTURES / "cpu" / "batch16.json.gz")])
    assert r.exit_code == 0 and "not a torch.profiler trace" not in r.stderr


def test_gaps_default_is_1ms_and_says_nsys_defaults_to_500ms(tmp_path):
    """traceread gaps lists 1 ms gaps by default (a training step's gaps are far below nsys's
    500 ms); --help and docs/nsys.md say so, and --min-gap 500ms gives nsys's default rows."""
    from pathlib import Path

    from click.testing import CliRunner

    from conftest import FIXTURES
    from traceread.cli import main

    h = CliRunner().invoke(main, ["gaps", "--help"]).output
    assert "default: 1ms" in h and "500ms" in " ".join(h.split())
    assert "defaults to 500 ms" in (Path(__file__).parents[1] / "docs" / "nsys.md").read_text()
    sqlite = str(FIXTURES / "nsys" / "concurrent_profile1.sqlite")
    default = CliRunner().invoke(main, ["gaps", sqlite, "--format", "csv"]).output
    one_ms = CliRunner().invoke(main, ["gaps", sqlite, "--format", "csv", "--min-gap", "1ms"]).output
    assert default == one_ms
