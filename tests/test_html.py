"""``--format html``: one self-contained page (structure everywhere, a real Chromium where installed)."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.diffs.trace import diff_analyses
from traceread.render.base import get_renderer
from traceread.render.html import binned_idle
from traceread.render.html_base import COLORS
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import MS, dataloader_bound

from conftest import FIXTURES

TRACE = FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def _parse(html: str) -> _Page:
    p = _Page()
    p.feed(html)
    return p


def _assert_self_contained(html: str, p: _Page) -> None:
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(p.tags)
    for tag, k, v in p.attrs:
        assert k != "src" and (k != "href" or v.startswith("#")), (tag, k, v)  # in-page links only
        if k == "xmlns":
            continue
        assert "http" not in v and "//" not in v, (tag, k, v)
    assert "url(" not in html and "@import" not in html
    assert re.findall(r"https?://[^\s\"'<]+", html) == ["http://www.w3.org/2000/svg"] * p.tags["svg"]


def test_report_structure_on_a_real_trace(tmp_path):
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["analyze", str(TRACE), "--format", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    p = _parse(html)
    a = traceread.analyze(str(TRACE))
    text = " ".join(p.text)
    assert f"VERDICT {a.verdict['bound'].upper()}" in text and a.verdict["summary"] in text
    assert all(lv in text for lv in a.verdict["levers"])
    assert p.tags["svg"] >= 3 and p.tags["rect"] > 50  # timeline, steps, idle bars
    assert "Largest idle gaps" in text and "Top kernels" in text
    _assert_self_contained(html, p)
    assert len(html) < 400_000


def test_timeline_binning_keeps_every_idle_nanosecond():
    trace, truth = dataloader_bound()
    a = traceread.analyze(trace)
    w = a.devices.iloc[0]
    bins = binned_idle(a.gaps, int(w["window_start"]), int(w["window_end"]), 300)
    assert sum(v.sum() for v in bins.values()) == pytest.approx(truth["idle_ns"], rel=1e-9)
    assert bins["dataloader"].sum() == pytest.approx(truth["by_cpu"]["dataloader"], rel=1e-9)


def test_ranks_of_a_job_make_one_page(tmp_path):
    from traceread.examples import path as example

    out = tmp_path / "job.html"
    r = CliRunner().invoke(main, ["analyze", str(example()), str(TRACE), "--format", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    p = _parse(html)
    _assert_self_contained(html, p)
    text = " ".join(p.text)
    assert "2 traces" in text and "Across ranks" in text and "straggler" in text
    assert text.count("VERDICT ") == 2 and 'id="t0"' in html and 'id="t1"' in html


def test_html_requires_an_output_file():
    r = CliRunner().invoke(main, ["analyze", str(TRACE), "--format", "html"])
    assert r.exit_code == 2 and "-o" in r.output


def test_diff_html_is_self_contained(tmp_path):
    a = traceread.analyze(str(TRACE))
    b, _ = dataloader_bound(period=40 * MS)
    html = get_renderer("html").render(diff_analyses(a, traceread.analyze(b)))
    p = _parse(html)
    _assert_self_contained(html, p)
    assert "Idle by cause" in " ".join(p.text) and p.tags["svg"] == 1


# --- a real browser ------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
           "--v=0", "--host-resolver-rules=MAP * ~NOTFOUND", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "net::ERR" in ln]


@needs_chromium
def test_chromium_console_check_catches_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('boom')</script></body></html>")
    r = _chromium("--dump-dom", bad.as_uri())
    assert any("boom" in ln for ln in _console(r.stderr))


@needs_chromium
def test_report_in_headless_chromium(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    trace, _ = dataloader_bound()
    src = tmp_path / "dl.json"
    write_kineto(trace, src)
    page = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["analyze", str(src), "--format", "html", "-o", str(page)])
    assert r.exit_code == 0, r.output
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0
    assert "VERDICT DATA" in dom.stdout and "input-bound" in dom.stdout
    assert _console(dom.stderr) == []
    png = tmp_path / "shot.png"
    shot = _chromium("--hide-scrollbars", "--window-size=1200,1000", f"--screenshot={png}", page.as_uri())
    assert shot.returncode == 0 and png.is_file()
    img = Image.open(png).convert("RGB")
    colours = {c for _, c in img.getcolors(maxcolors=1 << 20)}
    assert len(colours) > 20  # not a blank page
    want = {_rgb(COLORS["busy"]), _rgb(COLORS["dataloader"])}
    assert want <= colours  # the charts were drawn: busy and dataloader-idle pixels


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))


def test_batch_writes_a_self_contained_job_summary(tmp_path):
    import shutil as sh

    from traceread.examples import path as example

    src = tmp_path / "in"
    src.mkdir()
    sh.copy(example(), src / "hta_sampled_rank-0.json.gz")
    sh.copy(TRACE, src / "hta_sampled_rank-1.json.gz")
    (src / "bad.json").write_text("garbage")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["batch", str(src), "-o", str(out), "-j", "1"])
    assert r.exit_code == 1  # one file failed; the others' results are kept
    html = (out / "report.html").read_text()
    p = _parse(html)
    _assert_self_contained(html, p)
    text = " ".join(p.text)
    assert "3 traces: 2 analysed, 1 failed" in text and "bad.json" in text
    # verdicts + wait chart; the two HTA samples have no GPU idle figure (idle_pct null):
    # no bars drawn for them (they were drawn as "0.0%"), a note says so
    assert "Across ranks" in text and "STRAGGLER" in text and p.tags["svg"] == 2
    assert "2 traces without a GPU idle figure" in text


def _pages(tmp_path) -> dict:
    """Every kind of HTML page: one trace (Kineto with Python frames: the flame graph; a
    copy-bound one; an nsys export), the ranks of a job, a diff of two traces and of two
    folders, batch's report.html with a failed file."""
    import shutil as sh

    gpu, gloo = FIXTURES / "gpu", FIXTURES / "gloo" / "ddp4"
    out = {}
    before, after = tmp_path / "before" / "tb_plugin" / "samples", tmp_path / "after" / "tb_plugin" / "samples"
    for side, names in ((before, ("data.bad", "copy.bad")), (after, ("data.fixed", "copy.fixed"))):
        for n in names:
            d = side / f"resnet50_num_workers_{n.split('.')[0]}_and_a_long_tail"
            d.mkdir(parents=True)
            sh.copy(gpu / f"{n}.json.gz", d / "worker0.pt.trace.json.gz")
    for name, args in (
            ("one", ["analyze", str(gpu / "data.bad.json.gz")]),
            ("stacks", ["analyze", str(FIXTURES / "kineto" / "tracelens_b200_eager_trace.json.gz")]),
            ("copy", ["analyze", str(gpu / "copy.bad.json.gz")]),
            ("nsys", ["analyze", str(FIXTURES / "nsys" / "concurrent_profile1.sqlite")]),
            ("job", ["analyze", *sorted(str(p) for p in gloo.glob("rank-*.json.gz"))]),
            ("diff", ["diff", str(gpu / "data.bad.json.gz"), str(gpu / "data.fixed.json.gz")]),
            ("folders", ["diff", str(tmp_path / "before"), str(tmp_path / "after")])):
        out[name] = tmp_path / f"{name}.html"
        r = CliRunner().invoke(main, args + ["--format", "html", "-o", str(out[name])])
        assert r.exit_code in (0, 3), r.output
    src = tmp_path / "traces"
    src.mkdir()
    for p in (gpu / "data.bad.json.gz", gpu / "compile.bad.json.gz",
              FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz"):
        sh.copy(p, src)
    deep = src.joinpath(*(["a_folder_name_long_enough_to_need_wrapping_in_a_table_cell"] * 3))
    deep.mkdir(parents=True)
    (deep / ("a_trace_file_with_an_unusually_long_name_" * 3 + ".json")).write_text('{"traceEvents": [')
    r = CliRunner().invoke(main, ["batch", str(src), "-o", str(tmp_path / "b")])
    assert r.exit_code in (0, 1), r.output
    out["batch"] = tmp_path / "b" / "report.html"
    return out


# Laid out at its frame's width: nothing wider than it, no block over the next, no chart
# label past its chart, no table cell past the edge. Every page in one browser: each in
# an iframe of the width under test (file:// frames readable with
# --allow-file-access-from-files), checked from the parent once all have loaded.
LAYOUT_CHECK = """
function check(doc) {
  const W = doc.documentElement.clientWidth, bad = [];
  if (doc.documentElement.scrollWidth > W) bad.push('page ' + doc.documentElement.scrollWidth + 'px wide');
  const kids = [...doc.body.children].filter(e => e.getClientRects().length);
  for (let i = 1; i < kids.length; i++) {
    const a = kids[i - 1].getBoundingClientRect(), b = kids[i].getBoundingClientRect();
    if (b.top < a.bottom - 1) bad.push('overlap ' + kids[i - 1].tagName + '/' + kids[i].tagName);
  }
  doc.querySelectorAll('td,th,h1,h2,p,li,pre,svg').forEach(e => {
    if (e.getBoundingClientRect().right > W + 1)
      bad.push('past the edge: ' + e.tagName + ' ' + e.textContent.slice(0, 40));
  });
  doc.querySelectorAll('svg').forEach(s => {
    const r = s.getBoundingClientRect();
    s.querySelectorAll('text').forEach(t => {
      const q = t.getBoundingClientRect();
      if (q.width && q.right > r.right + 2) bad.push('label past its chart: ' + t.textContent.slice(0, 40));
    });
  });
  if (/nan%/i.test(doc.body.textContent)) bad.push('nan%');
  return bad;
}
window.addEventListener('load', () => {
  const out = {};
  document.querySelectorAll('iframe').forEach(f => {
    let doc = null;
    try { doc = f.contentDocument; } catch (e) {}
    out[f.dataset.name] = doc && doc.body ? check(doc) : ['not loaded'];
  });
  document.title = 'R=' + JSON.stringify(out);
});
"""


@needs_chromium
def test_every_html_page_lays_out_at_1280_and_800_px_in_headless_chromium(tmp_path):
    """Issues 22 and 33: each page at 1280 and 800 px wide: no console error, nothing wider
    than the window, no overlap, no label cut off its chart, no table off the edge."""
    pages = _pages(tmp_path)
    frames = "".join(
        f'<iframe data-name="{name}@{px}" src="{page.as_uri()}" style="width:{px}px;'
        f'height:900px;border:0;display:block"></iframe>'
        for px in (1280, 800) for name, page in pages.items())
    probe = tmp_path / "probe.html"
    probe.write_text(f"<!DOCTYPE html><html><head><title>-</title></head><body>{frames}"
                     f"<script>{LAYOUT_CHECK}</script></body></html>")
    r = _chromium("--allow-file-access-from-files", "--window-size=1400,1000", "--dump-dom",
                  probe.as_uri())
    assert r.returncode == 0 and _console(r.stderr) == [], _console(r.stderr)
    found = json.loads(html.unescape(r.stdout.split("<title>R=", 1)[1].split("</title>", 1)[0]))
    assert sorted(found) == sorted(f"{n}@{px}" for px in (1280, 800) for n in pages)
    assert {k: v for k, v in found.items() if v} == {}
