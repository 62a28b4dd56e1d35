"""Everyday use, round 4 (issue 41): one answer per report, every picture whole, the words a
user knows -- each point on the corpus trace it was found on (skips without the corpus)."""
from __future__ import annotations

import glob
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, analysed, corpus_or_skip
from traceread.cli import main

R50 = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
MI300 = "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz"
SGLANG = ("AMD-AGI__TraceLens/tests/traces/inference/sglang_prefilldecode/"
          "sglang_Qwen3-8B_prefilldecode.json.gz")
TRITON = "AMD-AGI__TraceLens/tests/traces/torch_compile_triton/trace.json.gz"
HTA = "facebookresearch__HolisticTraceAnalysis/tests/data"
ROOT = Path(__file__).resolve().parents[1]


def _corpus(rel: str) -> Path:
    p = corpus_or_skip() / rel
    if not p.is_file():
        pytest.skip(f"{rel} not in the corpus")
    return p


@pytest.fixture(scope="module")
def r50():
    import traceread

    return analysed(_corpus(R50))


@pytest.fixture(scope="module")
def r50_text(r50):
    from traceread.render.report import render_report

    return render_report(r50)


@pytest.fixture(scope="module")
def r50_html(r50):
    from traceread.render.html import HtmlRenderer

    return HtmlRenderer().render(r50)


# --- every headline figure traceable to the ranked list ----------------------------------

def test_a_busy_lever_left_out_of_the_list_says_why(r50, r50_text, r50_html):
    ids = [x["id"] for x in r50.verdict["actions"]]
    assert "fp16_autocast" not in ids
    w = {x["busy"]: x for x in r50.verdict["busy_placement"]}
    assert w["fp16_autocast"]["in_list"] is None and "not get shorter" in w["fp16_autocast"]["reason"]
    # torch.compile is withdrawn on this torch 1.8 trace: the reason is the precondition's
    assert w["torch_compile"]["in_list"] is None
    assert "precondition does not hold here: torch.compile exists" in w["torch_compile"]["reason"]
    line = next(x for x in r50_text.split("\n  lever ") if x.startswith("fp16_autocast"))
    assert "not in the to-do list" in line and "per step" in line
    head = re.search(r"GPU use: (.*?)</p>", r50_html).group(1)
    assert "top lever fp16_autocast" in head and "not in the to-do list" in head


def test_docs_no_longer_rank_autocast_above_num_workers():
    text = (ROOT / "docs" / "analysis.md").read_text()
    assert "ranks above `num_workers`" not in text
    assert "verdict.busy_placement" in text


def test_projected_steps_never_below_the_work_they_leave():
    # a lever that only gives idle time back never projects a step under the GPU's busy
    # time; one that removes GPU work (the exposed all_reduce, the recomputed forward) may,
    # by at most what it removes -- and the text says "at best" only at the busy time
    import traceread
    from traceread.render.report import busy_floor, render_report
    from traceread.render.text import action_gain, fmt_ns

    a = traceread.analyze(_corpus(MI300))
    floor = busy_floor(a)
    assert floor
    acts = [x for x in a.verdict["actions"] if x.get("projected_step_ns")]
    assert len(acts) >= 3
    below = 0
    for x in acts:
        # a replayed lever may remove GPU work too (compiling the model fuses kernels)
        removes = x["cause"] in ("gpu", "comms", "copy") or x["basis"] == "replay"
        least = floor - (x["saves_per_step_ns"] if removes else 0)
        assert x["projected_step_ns"] >= least * 0.995, x["id"]
        words = action_gain(x, None, floor)
        if x["projected_step_ns"] < floor * 0.995:
            below += 1
            host = x.get("projected_floor") == "host"   # the host's own span stops it
            assert ("at best" in words) == host and fmt_ns(x["projected_step_ns"]) in words, \
                words
    assert below >= 2   # the exposed collectives and the recompute shorten the GPU's work
    text = " ".join(render_report(a).split())
    for value in re.findall(r"step -> ([\d.]+ [mun]?s) at best \(the GPU", text):
        assert value == fmt_ns(floor)


def test_queued_verdict_and_attribution_give_one_figure():
    import traceread
    from traceread.render.report import render_report

    a = traceread.analyze(_corpus(SGLANG))
    assert a.verdict["bound"] == "queued"
    text = " ".join(render_report(a).split())
    m = re.search(r"next op already queued \(GPU waited on something else\): ([\d.]+ \w+) "
                  r"([\d.]+)%", text)
    assert m and float(m.group(2)) > 99   # the verdict says 100% of the lost time
    assert "charges that time to queued" in text


# --- one promised figure in diff text and HTML --------------------------------------------

def test_diff_text_and_html_promise_the_same_figure(tmp_path):
    bad, good = FIXTURES / "gpu" / "data.bad.json.gz", FIXTURES / "gpu" / "data.fixed.json.gz"
    r = CliRunner().invoke(main, ["diff", str(bad), str(good)])
    assert r.exit_code == 0, r.output
    text = r.output
    promised = re.findall(r"promised ([\d.]+ \w+)", text)
    page = tmp_path / "d.html"
    r = CliRunner().invoke(main, ["diff", str(bad), str(good), "-o", str(page)])
    assert r.exit_code == 0, r.output
    html = page.read_text()
    assert promised and re.findall(r"promised ([\d.]+ \w+)", html)[:1] == promised[:1]
    from test_html import CHROMIUM

    if CHROMIUM is not None:   # and the page fits a narrow window
        scroll, window, wide = _overflow(page, 800)
        assert scroll <= window and not wide, (scroll, window, wide)
    # the figure table: every row's change column ends where the header's does
    lines = text.splitlines()
    head = next(x for x in lines if x.rstrip().endswith("change"))
    rows = [x for x in lines if re.match(r"  \S", x) and re.search(r"[+-][\d.]+%$|pts$", x)]
    assert len(rows) >= 5
    assert {len(x.rstrip()) for x in rows} == {len(head.rstrip())}, rows


# --- pictures whole ----------------------------------------------------------------------

def test_critical_path_lane_says_where_it_stops(r50, r50_html):
    from traceread.render.text import critical_stop

    cp = r50.replay["critical_path"]
    stop = critical_stop(cp)
    assert stop is not None and stop < int(r50.devices["window_end"].max())
    assert "the critical path is drawn only up to the bar" in r50_html


def test_overlay_track_says_where_the_critical_path_stops(r50):
    from traceread.render.overlay import overlay_events

    events = [json.loads(x) for x in overlay_events(r50)]
    notes = [e for e in events if e.get("ph") == "i" and "drawn only up to" in e.get("name", "")]
    assert len(notes) == 1


def test_copy_has_one_colour_per_page():
    from traceread.render.html import CRITICAL_COLORS
    from traceread.render.html_base import ACTIVITY_COLORS, COLORS

    assert CRITICAL_COLORS["copy"] == ACTIVITY_COLORS["copy"]
    assert CRITICAL_COLORS["launch"] == COLORS["launch"]
    assert CRITICAL_COLORS["data load"] == COLORS["dataloader"]
    assert CRITICAL_COLORS["kernel"] == ACTIVITY_COLORS["compute"]


# --- an empty list, units, one straggler figure ------------------------------------------

def test_a_gpu_verdict_with_no_lever_says_why(tmp_path):
    p = _corpus(TRITON)
    r = CliRunner().invoke(main, ["analyze", str(p)])
    assert r.exit_code == 0, r.output
    assert "VERDICT  GPU" in r.output and "nothing to pull" in r.output
    page = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["analyze", str(p), "-o", str(page)]).exit_code == 0
    assert "nothing to pull" in page.read_text()


def test_job_levers_save_per_step():
    c = corpus_or_skip()
    ranks = [c / HTA / "timeline_analysis/sampled_rank-0.json.gz",
             c / HTA / "trace_filter/sampled_rank-1.json.gz"]
    if not all(p.is_file() for p in ranks):
        pytest.skip("HTA sampled ranks not in the corpus")
    r = CliRunner().invoke(main, ["analyze", *map(str, ranks)])
    assert r.exit_code == 0, r.output
    block = r.output.split("\n\n")[0]
    lever = " ".join(block.split("  lever ")[1].split())
    m = re.search(r"\(saves ~([\d.]+ \w+) per step; ([\d.]+ \w+) over the 2 analysed steps\)",
                  lever)
    assert m, lever
    late = re.search(r"; ([\d.]+ \w+) a step in all", " ".join(block.split())).group(1)
    assert m.group(1) == late     # one figure for one straggler: its lateness per step
    assert "held back" not in block   # the one group of both ranks: no second lateness figure


# --- plain words -------------------------------------------------------------------------

def test_because_lines_and_the_replayed_together_are_words(r50, r50_text):
    why = [x for x in r50_text.splitlines() if "because:" in x]
    assert why
    from traceread.render.words import because_words

    flat = " ".join(r50_text.split())
    for x in r50.verdict["actions"]:      # no fact_id=value, no {k=v} dict dumps
        said = because_words(x["because"])
        assert said and not re.search(r"\b[a-z]+_[a-z_]+=|\{", said), said
    assert "host_work_kind" not in flat and "replayed saving" not in flat
    m = re.search(r"The replayed levers together \((.*?)\), replayed at once", flat)
    assert m and "fuse_pointwise" not in m.group(1) and re.match(r"\d+\. ", m.group(1))
    # the JSON keeps the ids
    acts = r50.verdict["actions"]
    facts = {b["fact"] for x in acts for b in x["because"]}
    assert facts and any("_" in f for f in facts) and "host_work_kind" not in flat


def test_words_of_a_fact():
    from traceread.render.words import because_words, fact_words

    x = {"fact": "host_work_kind", "known": True, "evidence": [],
         "value": {"kind": "off_path", "model_share": 0.023, "top_other": "aten::copy_"}}
    assert fact_words(x) == ("98% of the host time in the gaps runs outside the model's calls "
                             "(mostly aten::copy_)")
    st = {"fact": "startup_phase", "known": True, "evidence": [],
          "value": {"frames": ["vllm/v1/worker/gpu_model_runner.py(5362): capture_model"],
                    "ns": 59_013_466}}
    assert fact_words(st) == ("the window is the engine's start-up (59 ms in vllm/v1/worker/"
                              "gpu_model_runner.py(5362): capture_model): its captures and "
                              "allocations happen once")
    assert fact_words({"fact": "graph_launches", "known": True, "value": 0, "evidence": []}) \
        == "no CUDA graph launch in the window"
    # what decides whether that work can move (verdict/levers.host_movable) is said too
    fw = {**x, "value": {**x["value"], "other_kind": "framework"}}
    assert fact_words(fw).endswith("(mostly aten::copy_): the framework's own loop, which "
                                   "cannot move off the thread")
    assert fact_words({"fact": "compiled", "known": True, "value": False, "evidence": []}) == \
        "not torch.compile'd"
    assert fact_words({"fact": "some_new_fact", "known": False, "value": None}) == \
        "some new fact: unknown"
    many = [{"fact": f"f{i}_flag", "known": True, "value": True, "evidence": None}
            for i in range(6)]
    assert because_words(many).endswith("and 2 more facts in the JSON")


def test_readme_lists_every_verdict_and_explains_the_sections():
    from traceread.verdict.bounds import TITLE

    text = (ROOT / "README.md").read_text()
    section = text.split("## Reading the report")[1].split("\n## ")[0]
    for bound in TITLE:
        assert f"| `{bound}` |" in section, bound
    for words in ("**`because:`**", "**`Replay:`**", "**`critical path`**",
                  "**`The replayed levers together`**"):
        assert words in section


# --- batch HTML, flame, diff, the folder hint --------------------------------------------

def test_batch_html_keeps_verdict_words_whole():
    from traceread.render.html_base import CSS, word

    assert word("graph_capture".upper()) == '<span class="word">GRAPH_CAPTURE</span>'
    assert re.search(r"\.word\{white-space:nowrap", CSS)
    src = (ROOT / "src/traceread/render/html_batch.py").read_text()
    assert 'word(str(r["verdict"]).upper())' in src


def test_flame_refuses_an_output_it_does_not_write(tmp_path):
    from traceread.examples import path

    out = tmp_path / "x.html"
    r = CliRunner().invoke(main, ["flame", str(path("h200_pageable_copy.json.gz")), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert "not .html" in r.output
    helptext = CliRunner().invoke(main, ["flame", "--help"]).output
    assert ".folded" in helptext and ".svg" in helptext and ".html" not in helptext
    ok = tmp_path / "x.folded"
    r = CliRunner().invoke(main, ["flame", str(path("h200_pageable_copy.json.gz")), "-o", str(ok)])
    assert r.exit_code == 0 and ok.read_text().strip()


def test_folder_hint_glob_matches_traces_in_subfolders(tmp_path):
    from traceread.examples import path

    for r in (0, 1):
        (tmp_path / f"rank{r}").mkdir()
        shutil.copy(path("h200_pageable_copy.json.gz"), tmp_path / f"rank{r}" / "t.json.gz")
    r = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert r.exit_code == 1
    hint = re.search(r"pass the files \((.*)\)", r.output).group(1)
    assert len(glob.glob(hint)) == 2


# --- HTML that fits the page -------------------------------------------------------------

def test_html_page_has_nothing_wider_than_the_page(r50_html):
    """Static overflow markers: every svg scales (max-width:100%), no inline width past 800
    px outside an svg's own viewBox, preformatted text wraps."""
    from traceread.render.html_base import CSS

    assert "svg{max-width:100%" in CSS and "pre{white-space:pre-wrap" in CSS
    assert "table{border-collapse:collapse;font-size:13px;max-width:100%}" in CSS
    for m in re.finditer(r'style="[^"]*width:\s*(\d+)px', r50_html):
        assert int(m.group(1)) <= 800
    assert "white-space:nowrap" not in re.sub(r"\.(word|n)[^}]*\}|td\.n,th\.n\{[^}]*\}", "",
                                              r50_html.split("</style>")[0])


# --- the notebook's charts ---------------------------------------------------------------

def test_notebook_charts_use_the_report_figures_and_keep_legends_off_the_bars():
    nb = json.loads((ROOT / "notebooks" / "batch_walkthrough.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "step_segments(it)" in code                 # the HTML report's per-step pieces
    assert '[["busy_ns", "idle_ns"]]' not in code       # no busy + every-gap idle stacking
    assert "waiting for other ranks" in code and "straggler" in code
    plots = code.count(".plot.") + code.count(".barh(")
    assert code.count("bbox_to_anchor") >= 4 and plots >= 5


@pytest.mark.parametrize("columns", [60, 80])
def test_table_rows_fit_a_narrow_terminal(r50, columns):
    """At 60 columns the tables' rows used to be 64-80 wide: the terminal split each in two.
    Every row now fits (columns one space apart, the free-text column cut); only the path
    header, which is copied whole, may pass."""
    from traceread.render.fmt import set_width
    from traceread.render.report import render_report

    try:
        set_width(columns)
        text = render_report(r50)
    finally:
        set_width(None)
    wide = [ln for ln in text.splitlines()[1:] if len(ln) > columns]
    assert wide == []


# --- the pages in a real browser: nothing runs past 1280 or 800 px -------------------------

PROBE = ("<script>window.addEventListener('load',()=>{const v=window.innerWidth;"
         "const wide=[...document.querySelectorAll('body *')].filter(e=>"
         "e.getBoundingClientRect().right>v+1).map(e=>e.tagName);"
         "document.body.setAttribute('data-probe',document.documentElement.scrollWidth+'/'+v+"
         "' '+wide.slice(0,5).join(','));});</script>")


def _overflow(page: Path, px: int) -> tuple[int, int, str]:
    """(page width, window width, the first elements past the window's right edge) as
    headless Chromium lays ``page`` out in a window ``px`` wide (a copy carries the probe)."""
    from test_html import _chromium

    probe = page.with_name(page.stem + f".probe{px}.html")
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    r = _chromium(f"--window-size={px},900", "--dump-dom", probe.as_uri())
    m = re.search(r'data-probe="(\d+)/(\d+) ?([^"]*)"', r.stdout)
    assert m, r.stderr[-400:]
    return int(m.group(1)), int(m.group(2)), m.group(3)


@pytest.mark.parametrize("px", [1280, 800])
def test_pages_fit_the_window_in_headless_chromium(r50_html, tmp_path, px):
    from test_html import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    page = tmp_path / "r50.html"
    page.write_text(r50_html)
    scroll, window, wide = _overflow(page, px)
    assert scroll <= window and not wide, (scroll, window, wide)


# --- the default run stays fast ----------------------------------------------------------

def test_every_slow_entry_names_a_test():
    """conftest.SLOW marks by name: a renamed test would silently run again by default."""
    from conftest import SLOW

    for key in SLOW:
        file, name = key.split("::")
        src = (ROOT / "tests" / file).read_text()
        assert f"def {name.split('[')[0]}(" in src, key


def test_readme_states_how_the_tests_were_timed():
    """The README's test time is a measurement with its date and box, not a hope."""
    text = (ROOT / "README.md").read_text()
    para = text.split("## Set up")[1].split("## A 30-second example")[0]
    assert "Measured on 20" in para and "conftest.py" in para and "about 4-5 minutes" not in para
    assert re.search(r"minutes of CPU", para)



def test_a_long_wait_after_a_launch_is_not_called_launch():
    import traceread
    from traceread.render.text import replay_lines

    a = traceread.analyze(_corpus(SGLANG))
    text = "\n".join(replay_lines(a.replay))
    top = [x for x in text.splitlines() if "resolve_future" in x or "resolve_" in x]
    assert top and top[0].split()[0] == "queued", text
    assert "critical path: queued after launch" in text


@pytest.mark.corpus
def test_a_comms_bound_cannot_project_below_the_hosts_own_span():
    """TraceLens mi300 resnet_act_checkpoint: the host ran a whole step ahead (each step's
    GPU work began 13-19 ms after its 16 ms host span ended), so with free collectives the
    step is the host's 16.2 ms, not the GPU's 6.2 ms of compute -- the comms levers were
    priced 12.6 ms a step, 'step -> 6.24 ms'; 2.6 ms a step is what the host leaves."""
    import traceread

    a = traceread.analyze(_corpus(MI300))
    st = a.steps
    assert (st["gpu_start"] >= st["end"]).all()
    host = int(st["dur"].mean())
    assert a.facts.figures["host_ahead_span_mean_ns"] == host
    comms = [x for x in a.verdict["actions"] if x["cause"] == "comms" and x.get("saves_ns")]
    assert comms
    prog = a.facts.figures["program_step_mean_ns"]
    for x in comms:
        if x.get("projected_step_ns") is not None:
            assert x["projected_step_ns"] >= host
    top = comms[0]
    assert top["projected_floor"] == "host" and top["projected_step_ns"] == host
    assert top["saves_per_step_ns"] == prog - host < 3_000_000
