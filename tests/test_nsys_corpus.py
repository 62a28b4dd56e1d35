"""Every nsys export of the shared corpus loads (or is refused cleanly), and every
``nsys stats`` 2023.4 golden is reproduced byte for byte."""
from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

import traceread
from traceread.cli.nsys_stats import gaps_csv
from traceread.errors import TraceError
from traceread.passes.api import api_summary, render_api
from traceread.passes.kernels import kernel_summary, render_summary

from conftest import CORPUS   # honours TRACEREAD_CORPUS (a worktree one folder deeper)

SHARED = CORPUS.parent
GOLDEN = SHARED / "golden" / "nsys-stats-2023.4"

pytestmark = pytest.mark.corpus


def _nsys_files() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with open(manifest, newline="") as f:
        return [r["local_path"] for r in csv.DictReader(f, delimiter="\t")
                if r["kind"] == "nsys-sqlite"]


def _goldens() -> list[str]:
    if not GOLDEN.exists():
        return []
    return sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*.csv")
                  if p.name in ("cuda_gpu_kern_sum.csv", "cuda_api_sum.csv", "gpu_gaps_gap1ms.csv"))


def _need(p: Path) -> None:
    if not p.exists():
        pytest.skip(f"{p} not available")


@pytest.mark.parametrize("rel", _nsys_files() or ["<no corpus>"])
def test_corpus_nsys_loads_or_refuses(rel):
    path = CORPUS / rel
    _need(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        t = traceread.load(path)
    except TraceError as e:
        assert "\n" not in str(e)
        assert "not an Nsight Systems export" in str(e)  # the only refusal in the corpus
    else:
        assert t.meta.format == "nsys" and len(t) > 0
        k = kernel_summary(t)
        assert k["instances"].sum() == (t.events["kind"] == "kernel").sum()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("rel", _goldens() or ["<no goldens>"])
def test_corpus_golden(rel):
    golden = GOLDEN / rel
    _need(golden)
    sqlite = CORPUS / (str(Path(rel).parent) + ".sqlite")
    _need(sqlite)
    t = traceread.load(sqlite)
    name = Path(rel).name
    if name == "cuda_gpu_kern_sum.csv":
        mine = render_summary(kernel_summary(t), "csv", version="2023.4")
    elif name == "cuda_api_sum.csv":
        mine = render_api(api_summary(t), "csv", "2023.4")
    else:
        mine = gaps_csv(t, 1_000_000)
    assert mine == golden.read_text()


@pytest.mark.parametrize("rel", _nsys_files() or ["<no corpus>"])
def test_corpus_nsys_cli_info_analyze(rel):
    from click.testing import CliRunner

    from traceread.cli import main

    path = CORPUS / rel
    _need(path)
    for cmd in ("info", "analyze"):
        r = CliRunner().invoke(main, [cmd, str(path)])
        assert r.exit_code in (0, 1), (cmd, r.output)
        assert "Traceback" not in r.output and "internal error" not in r.output
        if r.exit_code == 1:
            assert r.output.startswith("traceread: error: ") and r.output.count("\n") == 1
