"""The renderer layer: one registry, every format renders the same Analysis."""
from __future__ import annotations

import gzip
import json

import pytest

import traceread
from traceread.render.base import RENDERERS, Renderer, get_renderer, render
from traceread.schema import SCHEMA_VERSION
from traceread.synth.kineto import write_kineto
from traceread.synth.scenarios import item_sync_bound


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    trace, _ = item_sync_bound()
    p = tmp_path_factory.mktemp("r") / "sync.json"
    write_kineto(trace, p)
    return traceread.analyze(str(p))


def test_every_format_renders_the_same_analysis(analysis):
    bound = analysis.verdict["bound"]
    out = {fmt: render(analysis, fmt) for fmt in RENDERERS}
    assert f"VERDICT  {bound.upper()}" in out["text"]
    doc = json.loads(out["json"])
    assert doc["schema_version"] == SCHEMA_VERSION and doc["verdict"]["bound"] == bound
    assert f"VERDICT {bound.upper()}" in out["html"]
    overlay = json.loads(out["overlay"])
    assert any(e.get("name", "").startswith(f"verdict: {bound.upper()}") for e in overlay["traceEvents"])
    for fmt in RENDERERS:
        r = get_renderer(fmt)
        assert isinstance(r, Renderer) and r.output_file_extension


def test_write_gzips_by_extension(analysis, tmp_path):
    p = tmp_path / "a.json.gz"
    n = get_renderer("json").write(analysis, str(p))
    assert n == p.stat().st_size
    assert json.loads(gzip.decompress(p.read_bytes()))["verdict"]["bound"] == analysis.verdict["bound"]


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown format"):
        get_renderer("pdf")
