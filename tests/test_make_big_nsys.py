"""scripts/make_big_nsys.py: a real nsys export tiled k times reads as k copies of it."""
from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import numpy as np

from conftest import corpus_or_skip

ROOT = Path(__file__).resolve().parents[1]
SRC = "GindaChen__nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite"


def _tool():
    spec = importlib.util.spec_from_file_location("make_big_nsys",
                                                  ROOT / "scripts" / "make_big_nsys.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiled_export_is_copies_of_the_source(tmp_path):
    import traceread

    src = corpus_or_skip() / SRC
    before = src.read_bytes()
    out = tmp_path / "big.sqlite"
    info = _tool().tile(src, out, kernels=3 * 4010)
    assert src.read_bytes() == before      # the source is only read
    assert info["copies"] == 3 and info["kernels"] == 3 * 4010
    with sqlite3.connect(out) as db:
        corr = db.execute("SELECT COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL"
                          ).fetchone()[0]
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as db:
        one = db.execute("SELECT COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL"
                         ).fetchone()[0]
    assert corr == 3 * one                  # each copy's launches pair with its own kernels
    a, b = traceread.load(src).events, traceread.load(out).events
    for kind in ("kernel", "runtime", "annotation"):
        assert (b["kind"] == kind).sum() == 3 * (a["kind"] == kind).sum()
    k = b[b["kind"] == "kernel"]
    span = info["period_ns"]
    first = k["ts"].to_numpy()[: (a["kind"] == "kernel").sum()]
    assert np.array_equal(np.sort(first), np.sort(a.loc[a["kind"] == "kernel", "ts"].to_numpy()))
    assert k["ts"].max() - a.loc[a["kind"] == "kernel", "ts"].max() == 2 * span
