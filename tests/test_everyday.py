"""Issue 33: what a new user trips on -- terminal width, CLI conventions, one number per
figure, nulls in Parquet, pictures that mean what they say, the idle-gap flame graph."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.examples import path as example

from conftest import FIXTURES, analysed

H200 = example("h200_pageable_copy.json.gz")
STACKS = FIXTURES / "kineto" / "tracelens_b200_eager_trace.json.gz"   # real, with_stack frames
SRC = Path(traceread.__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def h200():
    return analysed(H200)


# --- the terminal: wrapped once, at its width --------------------------------------------

def _tty(columns: int, *args: str) -> str:
    """stdout of ``traceread ARGS`` on a pseudo-terminal ``columns`` wide (no colour)."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns), NO_COLOR="1", PYTHONPATH=str(SRC))
    p = subprocess.Popen([sys.executable, "-m", "traceread", *args], stdout=slave,
                         stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=120) == 0
    return out.decode().replace("\r\n", "\n")


def _paragraph(lines: list[str], start: str) -> list[str]:
    """The line beginning with ``start`` and its continuation lines (indented deeper)."""
    i = next(k for k, ln in enumerate(lines) if ln.startswith(start))
    indent = len(start) - len(start.lstrip())
    out = [lines[i]]
    for ln in lines[i + 1:]:   # prose continues indented by 2 (render/fmt.fit)
        if not ln.strip() or len(ln) - len(ln.lstrip()) != indent + 2:
            break
        out.append(ln)
    return out


@pytest.mark.parametrize("columns", [60, 80])
def test_text_is_wrapped_once_at_the_terminal_width(columns):
    """At COLUMNS=60 the report used to be wrapped at 100 and then again at 60: rows split
    in two, lines half empty. Now it is rendered at the terminal's width: prose filled
    greedily to it, once."""
    from traceread.render.fmt import glue_units, set_width
    from traceread.render.report import render_report

    text = _tty(columns, "analyze", H200)
    lines = text.split("\n")
    assert lines[0] == str(H200)
    prose = [ln for ln in lines[1:] if "  " not in ln.strip()]
    assert all(len(ln) <= columns for ln in prose), [ln for ln in prose if len(ln) > columns]
    for start in ("  GPU idle",):
        para = _paragraph(lines, start)
        assert len(para) >= 2
        for ln, nxt in zip(para, para[1:]):   # each line full: the next word did not fit
            word = glue_units(nxt.strip()).split()[0]   # "5.1 ms" is one word: never parted
            assert len(ln) + 1 + len(word) > columns, (ln, nxt)
    try:    # the very text the API renders at that width: nothing wrapped a second time
        set_width(columns)
        direct = render_report(traceread.analyze(traceread.load(H200)))
    finally:
        set_width(None)
    body = [ln for ln in direct.splitlines()[1:] if "  " not in ln.strip()]
    assert all(len(ln) <= columns for ln in body)   # prose fits as rendered: the terminal
    # pass then wraps only table rows wider than it, each once, and leaves the prose be
    from traceread.render.terminal import for_terminal

    class Tty:
        def isatty(self):
            return True
    want = for_terminal(direct, Tty(), {"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert text.rstrip("\n") == want.rstrip("\n")
    if columns >= 80:   # table rows keep within 80 columns: not one is wrapped
        assert all(len(ln) <= 80 for ln in lines[1:]), [ln for ln in lines if len(ln) > 80]


def test_the_path_header_is_never_cut_on_a_narrow_terminal(tmp_path):
    import shutil

    deep = tmp_path.joinpath(*(["a_long_folder_name_for_the_header"] * 3))
    deep.mkdir(parents=True)
    p = deep / "h200_pageable_copy.json.gz"
    shutil.copy(H200, p)
    assert len(str(p)) > 80
    lines = _tty(80, "analyze", str(p)).split("\n")
    assert lines[0] == str(p)


@pytest.mark.parametrize("rel", ["gpu/copy.bad.json.gz", "gpu/data.bad.json.gz",
                                 "kineto/tracelens_b200_eager_trace.json.gz",
                                 "nsys/concurrent_profile1.sqlite"])
def test_tables_fit_80_columns_in_the_100_column_layout(h200, rel):
    from traceread.render.report import render_report

    for a in (h200, traceread.analyze(str(FIXTURES / rel))):
        text = render_report(a)   # rows: indented lines with a column gap (prose has none)
        rows = [ln for ln in text.splitlines() if ln.startswith("  ") and "  " in ln.strip()]
        assert rows and [ln for ln in rows if len(ln) > 80] == []


# --- CLI conventions --------------------------------------------------------------------

def test_output_format_follows_the_suffix(tmp_path):
    html, js, txt = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.html.txt"
    assert run("analyze", H200, "-o", html).exit_code == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert run("analyze", H200, "-o", js).exit_code == 0
    assert json.loads(js.read_text())["verdict"]["bound"]
    assert run("analyze", "--format", "text", "-o", html, H200).exit_code == 0   # --format wins
    assert html.read_text().startswith(str(H200))
    assert run("analyze", H200, "-o", txt).exit_code == 0
    assert txt.read_text().startswith(str(H200))


def test_analyze_dir_says_batch_or_a_glob(tmp_path):
    r = run("analyze", tmp_path)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"traceread batch {tmp_path}" in r.output and f"{tmp_path}/*.json.gz" in r.output


def test_idle_lists_50_gaps_by_default_like_gaps(h200):
    n = len(h200.listed_gaps())
    assert n > 50
    r = run("idle", H200)
    rows = [ln for ln in r.output.splitlines() if re.match(r"\s+\+\d", ln)]
    assert len(rows) == 50 and f"{n - 50:,} more gaps ({n:,} in all)" in r.output
    rows = [ln for ln in run("idle", H200, "--rows", "-1").output.splitlines()
            if re.match(r"\s+\+\d", ln)]
    assert len(rows) == n
    assert len(json.loads(run("idle", H200, "--format", "json").output)["gaps"]) == n


def test_steps_has_causes_and_stats_on_analyzes_origin(h200):
    out = run("steps", H200).output
    s = h200.step_stats
    assert "idle cause" in out and f"cv {s['cv']:.2f}" in out and "p90" in out
    rows = [ln for ln in out.splitlines() if re.match(r"\s+#\d", ln)]
    assert len(rows) == len(h200.steps)
    # the first step starts where analyze says the window starts (+159 us), not at +0
    offset = h200.window.to_dict()["offset_ns"]
    first = rows[0].split()[1]
    assert first == f"+{offset / 1e9:.6f}" and offset > 0
    assert "analysed: steps #3–#5 (3 of 3), 14.7 ms from +159 us" in run("analyze", H200).output


# --- one number per figure ------------------------------------------------------------

def test_the_verdict_and_the_table_give_one_idle_figure(h200):
    from traceread.render.report import render_report

    text = render_report(h200)
    said = re.search(r"GPU idle (\d+\.\d)% of the analysed window", text).group(1)
    d = h200.devices.iloc[0]
    assert said == f"{100 * d['idle_ns'] / d['window_ns']:.1f}" and f"{said}%" in text.split(
        "GPU activity")[1]


def test_no_contradicting_words_in_one_report(h200):
    from traceread.render.report import render_report

    text = render_report(h200)
    assert not ("(steady)" in text and "not steady state" in text)
    assert not re.search(r"\b1 (copies|gaps|calls|launches|recompiles)\b", text)
    # the launch lever's evidence is the launch time it would save, not "0% of N kernels"
    assert not re.search(r"\b0% of [\d,]+ kernels", text)


def test_parquet_a_user_reads_has_null_not_minus_one_for_unknowns(tmp_path):
    import shutil

    from traceread.jobs.output import UNKNOWN_IS_MINUS_ONE

    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(H200, src / "one.json.gz")                  # no rank in it
    for p in sorted((FIXTURES / "gloo" / "ddp4").glob("rank-*.json.gz")):
        shutil.copy(p, src / p.name)                         # a job: matches, collectives
    out = tmp_path / "out"
    assert run("batch", src, "-o", out, "-j", "1").exit_code == 0
    s = pd.read_parquet(out / "summary.parquet")
    one = s[s["file"].str.endswith("one.json.gz")]
    assert one["rank"].isna().all() and one["world_size"].isna().all()
    assert sorted(s["rank"].dropna().astype(int)) == [0, 1, 2, 3]
    files = [out / n for n in ("summary.parquet", "jobs.parquet", "ranks.parquet",
                               "matches.parquet")] + sorted((out / "tables").iterdir())
    seen = set()
    for f in files:
        if f.name.startswith("."):
            continue
        df = pd.read_parquet(f)
        for col in (UNKNOWN_IS_MINUS_ONE | {"rank", "world_size"}) & set(df.columns):
            seen.add(col)
            assert not (pd.to_numeric(df[col], errors="coerce") == -1).any(), (f.name, col)
    assert {"step", "msg_bytes", "rank", "pid"} <= seen


# --- the HTML pictures ------------------------------------------------------------------

def _bars(svg_part: str) -> list[float]:
    """Per-row total width of the step chart's rects (one row per <text>#N)."""
    rows: dict[str, float] = {}
    for y, w in re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="([\d.]+)"', svg_part):
        rows[y] = rows.get(y, 0.0) + float(w)
    return list(rows.values())


def test_each_step_bar_is_the_steps_own_time(h200):
    """The bundled example's steps are 4.95 / 4.83 / 4.90 ms (cv 0.01): bars that grew
    2.87 -> 4.89 -> 6.98 ms drew busy + the idle of the gaps a step's work ended."""
    from traceread.render.base import get_renderer

    html = get_renderer("html").render(h200)
    part = html.split("<h2>Steps</h2>", 1)[1].split("</svg>", 1)[0]
    widths = _bars(part)
    durs = h200.steps["dur"].to_numpy(float)
    assert len(widths) == len(durs) == 3
    for w, d in zip(widths, durs):
        assert abs(w / max(widths) - d / durs.max()) < 0.01
    assert "4.95 ms" in part and "4.83 ms" in part and "4.9 ms" in part


def test_every_verdict_and_activity_kind_has_its_own_colour():
    from traceread.render.html_base import ACTIVITY_COLORS
    from traceread.render.html_batch import VERDICT_COLORS
    from traceread.verdict.bounds import TITLE

    assert set(TITLE) <= set(VERDICT_COLORS)
    assert len(set(VERDICT_COLORS.values())) == len(VERDICT_COLORS)
    assert len(set(ACTIVITY_COLORS.values())) == 4 and set(ACTIVITY_COLORS) == {
        "compute", "copy", "comm", "idle"}


def test_copies_are_drawn_in_their_own_colour_on_a_copy_bound_trace():
    from traceread.render.base import get_renderer
    from traceread.render.html_base import ACTIVITY_COLORS

    a = traceread.analyze(traceread.load(FIXTURES / "gpu" / "copy.bad.json.gz"))
    html = get_renderer("html").render(a)
    timeline = html.split("<h2>GPU timeline", 1)[1].split("</svg>", 1)[0]
    assert timeline.count(f'fill="{ACTIVITY_COLORS["copy"]}"') > 10
    assert "busy: " in timeline and ">copy<" in timeline


@pytest.mark.corpus
def test_an_nsys_page_without_steps_draws_no_step_time_bar(tmp_path):
    """A real 2-GPU nsys export (two ranks, no step ranges): its page drew "step time"
    bars of 285 / 283 ms -- each rank's GPU window."""
    from conftest import corpus_or_skip

    nsys = corpus_or_skip() / "GindaChen__nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"
    p = tmp_path / "n.html"
    assert run("analyze", nsys, "-o", p).exit_code == 0
    html = p.read_text()
    assert html.count('<hr id="t') == 2        # the two ranks' reports
    assert "Step time per trace" not in html and "<h2>Steps</h2>" not in html


def test_a_faster_diff_is_green_and_a_slower_one_red(tmp_path):
    gpu = FIXTURES / "gpu"
    fast, slow = tmp_path / "fast.html", tmp_path / "slow.html"
    assert run("diff", gpu / "data.bad.json.gz", gpu / "data.fixed.json.gz", "-o", fast).exit_code == 0
    assert run("diff", gpu / "data.fixed.json.gz", gpu / "data.bad.json.gz", "-o", slow).exit_code == 0
    assert '<div class="verdict good" id="verdict">' in fast.read_text()
    assert "faster" in fast.read_text()
    assert '<div class="verdict" id="verdict">' in slow.read_text()


def test_folder_diff_names_differ_where_the_files_do():
    from traceread.render.diff_text import pair_names

    labels = [f"tb_plugin/samples/resnet50_num_gpu{n}/worker{n}.pt.trace.json" for n in range(4)]
    root, names = pair_names(labels)
    assert root == "tb_plugin/samples"
    assert len({names[x] for x in labels}) == 4
    from traceread.render.fmt import short_path
    assert len({short_path(names[x], 29) for x in labels}) == 4


# --- the flame graph of host time inside idle gaps --------------------------------------

def _events(rows):
    cols = ["ts", "dur", "kind", "name", "pid", "tid", "correlation"]
    return pd.DataFrame([r if len(r) == 7 else (*r, -1) for r in rows], columns=cols)


def test_idle_stacks_weigh_each_stack_by_its_time_inside_the_gaps():
    from traceread.passes.flame import UNTRACED, collapsed, idle_stacks

    ev = _events([
        (0, 100, "python", "train.py(10): step", 1, 1),
        (10, 40, "python", "train.py(20): load at 0x7f00aa", 1, 1),
        (20, 10, "cpu_op", "aten::copy_", 1, 1),
        (60, 30, "runtime", "cudaLaunchKernel", 1, 1, 7),
        (0, 500, "python", "worker.py(1): loop", 1, 2),     # not a launching thread
        (5, 20, "runtime", "cudaHostAlloc", 1, 2, 8),       # a CUDA call, but no launch
        (95, 3, "kernel", "k", 1, -1, 7),
    ])
    gaps = pd.DataFrame({"start": [15, 80], "end": [45, 120], "pid": [1, 1]})
    st = idle_stacks(ev, gaps)
    want = {("train.py(10): step", "train.py(20): load"): 5 + 15,     # 15-20, 30-45
            ("train.py(10): step", "train.py(20): load", "aten::copy_"): 10,   # 20-30
            ("train.py(10): step", "cudaLaunchKernel"): 10,             # 80-90
            ("train.py(10): step",): 10,                                 # 90-100
            (UNTRACED,): 20}                                             # 100-120: no range
    assert st == want and sum(st.values()) == 30 + 40
    text = collapsed(st)
    assert "train.py(10): step;train.py(20): load 20" in text.splitlines()
    assert all(re.fullmatch(r"[^\n]+ \d+", ln) for ln in text.splitlines())


def test_flame_of_a_real_with_stack_trace(tmp_path):
    """A real B200 vLLM trace recorded with with_stack=True: the stacks hold every
    nanosecond of the idle gaps, Python frames included, and open as collapsed stacks."""
    from traceread.passes.flame import idle_stacks

    a = analysed(STACKS)
    st = idle_stacks(a.trace.events, a.gaps)
    assert sum(st.values()) == int(a.gaps["duration"].sum())
    assert any(".py(" in f for k in st for f in k)
    assert not any(" at 0x" in f or ";" in f for k in st for f in k)
    folded, svg = tmp_path / "idle.folded", tmp_path / "idle.svg"
    assert run("flame", STACKS, "-o", folded).exit_code == 0
    lines = folded.read_text().splitlines()
    assert lines and all(re.fullmatch(r".+ \d+", ln) for ln in lines)
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == sum(st.values())
    assert run("flame", STACKS, "-o", svg).exit_code == 0
    s = svg.read_text()
    assert s.startswith("<svg") and "<script" not in s and s.count("<rect") > 50
    html = tmp_path / "r.html"
    assert run("analyze", STACKS, "-o", html).exit_code == 0
    page = html.read_text()
    assert "Which host code kept the GPU waiting" in page and "flame graph of the" in page


def test_flame_without_frames_says_how_to_record_them(tmp_path):
    from traceread.synth.scenarios import dataloader_bound
    from traceread.passes.flame import idle_stacks

    trace, _ = dataloader_bound()
    a = traceread.analyze(trace)
    st = idle_stacks(a.trace.events, a.gaps)
    assert sum(st.values()) == int(a.gaps["duration"].sum())


def test_readme_examples_are_the_tools_own_output():
    """README's ```text blocks of `$ traceread ...` are what the tool prints now; when this
    fails, `python scripts/readme_examples.py` rewrites them."""
    p = subprocess.run([sys.executable, str(SRC.parent / "scripts" / "readme_examples.py"),
                        "--check"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr + " -- run python scripts/readme_examples.py"


def test_sampled_stacks_weigh_each_sample_in_a_gap_by_the_sampling_period():
    from traceread.passes.flame import sampled_idle_stacks

    ev = _events([(0, 5, "runtime", "cudaLaunchKernel", 1, 1, 3), (50, 5, "kernel", "k", 1, -1, 3)])
    samples = pd.DataFrame({"ts": [0, 10, 20, 30, 40, 50], "pid": 1, "tid": 1,
                            "frames": [("main", "a"), ("main", "b"), ("main", "b"),
                                       ("main", "a"), ("main", "b at 0x1f"), ("main",)]})
    gaps = pd.DataFrame({"start": [15, 35], "end": [32, 45], "pid": [1, 1]})
    st = sampled_idle_stacks(samples, ev, gaps)   # samples at 20, 30 (gap 1) and 40 (gap 2)
    assert st == {("main", "b"): 20, ("main", "a"): 10}


def test_nsys_cpu_samples_are_read_with_their_call_stacks(tmp_path):
    """A real nsys export sampled with --sample=cpu (committed fixture): every sample comes
    back with its stack, outermost first, addresses as their module."""
    from traceread.readers.nsys_stacks import cpu_samples

    p = FIXTURES / "nsys" / "ex-gpu.s10.sqlite"
    s = cpu_samples(p)
    assert len(s) == 611 and not s.attrs["cut"]
    assert all(f[0] in ("_start", "[ld-2.28.so]") or f[0].startswith("[") or f for f in s["frames"])
    deep = max(s["frames"], key=len)
    assert deep[:3] == ("_start", "__libc_start_main", "main") and not any(
        x.startswith("0x") for f in s["frames"] for x in f)
    assert cpu_samples(FIXTURES / "nsys" / "mock.sqlite") is None
    out = tmp_path / "s.folded"
    r = run("flame", p, "-o", out)
    assert r.exit_code == 0 and out.read_text().startswith("_start;__libc_start_main;main;")


@pytest.mark.corpus
def test_sampled_flame_of_a_real_mpi_cuda_export_covers_its_idle_time():
    from conftest import corpus_or_skip
    from traceread.render.flame import idle_flame

    p = corpus_or_skip() / "hpcgroup__pipit/pipit/tests/data/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    a = traceread.analyze(traceread.load(p))
    st, made_of = idle_flame(a)
    assert made_of.startswith("nsys CPU samples")
    idle = int(a.gaps["duration"].sum())
    assert abs(sum(st.values()) - idle) < 0.1 * idle   # ~711 ms of samples in 724 ms of gaps
    assert any("MPI_Send" in k for stack in st for k in stack)
    ranges, _ = idle_flame(a, "ranges")
    assert sum(ranges.values()) == idle


@pytest.mark.parametrize("name, frame", [
    ("<built-in method __enter__ of pybind11 object at 0x7fe02c8ba290>",
     "<built-in method __enter__ of pybind11 object>"),
    ("nn.Module: TransformerBlock_17", "nn.Module: TransformerBlock"),
    ("ProfilerStep#12", "ProfilerStep#N"),
    ("aten::add, seq = 47318, op_id = 998541", "aten::add"),
    ("a;b\nc", "a,b c"),
    ("train.py(10): step", "train.py(10): step"),
])
def test_one_function_is_one_frame(name, frame):
    from traceread.passes.flame import frame_name

    assert frame_name(name) == frame
