"""Every Kineto JSON file of the shared corpus loads sanely; every `other` file is refused
cleanly or loads as a generic Chrome trace. Files over 1 MB are marked slow (run them with -m slow)."""
from __future__ import annotations

import csv
import gzip
import json
from decimal import Decimal

import numpy as np
import pytest

from traceread import KINDS, TraceError, load
from traceread.readers.kineto import read_kineto

from conftest import CORPUS   # honours TRACEREAD_CORPUS (a worktree one folder deeper)

BIG = 1_000_000
pytestmark = pytest.mark.corpus


def _rows(kinds: tuple) -> list:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason="corpus not found"))]
    with open(manifest, newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] in kinds]
    return [pytest.param(r, id=r["local_path"][-70:],
                         marks=[pytest.mark.slow] if int(r["bytes"] or 0) > BIG else [])
            for r in rows]


@pytest.mark.parametrize("row", _rows(("kineto-json", "kineto-json-gz")))
def test_kineto_file_loads(row):
    t = read_kineto(CORPUS / row["local_path"])
    e = t.events
    assert t.meta.format == "kineto"
    if int(row["n_events"] or 0) > 0:
        assert len(e) > 0
    assert e["ts"].is_monotonic_increasing
    assert set(e["kind"].astype(str)) <= set(KINDS)
    assert (e["dur"] >= 0).all()
    dev = e[e["kind"].isin(["kernel", "memcpy", "memset", "gpu_annotation"])]
    assert (dev["device"] >= 0).all() and (dev["tid"] == -1).all()
    gpu = e[e["kind"].isin(["kernel", "memcpy", "memset"])]
    assert (gpu["pid"] >= 0).all()
    host = e[e["kind"].isin(["cpu_op", "runtime", "driver"])]
    assert (host["device"] == -1).all() and (host["stream"] == -1).all()
    if int(row["has_gpu_kernels"] or 0) > 0:
        assert (e["kind"] == "kernel").sum() + (e["kind"] == "memcpy").sum() > 0
    assert t.meta.clock in ("epoch_ns", "trace_ns")


@pytest.mark.parametrize("row", _rows(("other",)))
def test_other_file_refused_or_chrome(row):
    try:
        t = load(CORPUS / row["local_path"])
    except TraceError as err:
        assert "\n" not in str(err)
        return
    assert t.meta.format == "chrome" and len(t) > 0


def test_float_epoch_timestamps_match_decimal_parse():
    """PyTorch 2.2-era trace: float epoch µs with ns digits, beyond float64 precision."""
    p = CORPUS / ("facebookresearch__HolisticTraceAnalysis/tests/data/ns_resolution_trace/"
                  "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    if not p.exists():
        pytest.skip("corpus not found")
    doc = json.loads(gzip.decompress(p.read_bytes()), parse_float=Decimal)
    want = sorted(int(Decimal(e["ts"]) * 1000) for e in doc["traceEvents"]
                  if e.get("ph") == "X")
    t = read_kineto(p)
    assert t.meta.extra["exact_ts_decode"] is True
    got = np.sort(t.events["ts"].to_numpy()[t.events["kind"].astype(str) != "instant"])
    assert got.tolist() == want
    assert any(v % 1000 for v in want)  # the file really has sub-µs digits
