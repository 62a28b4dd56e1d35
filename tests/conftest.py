"""Shared test helpers: where the real-artifact corpus and the fixtures live."""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# ../shared/corpus beside the checkout (see the project brief); absent on most machines.
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def corpus_or_skip() -> Path:
    """The corpus directory, or skip the calling test when it is not there."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture
def corpus_dir() -> Path:
    return corpus_or_skip()


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def materialise(trace, how: str, tmp_path: Path, name: str):
    """A builder-made trace as the analysis sees it: the table itself ("table"), read back
    from Kineto JSON of an era ("kineto-2.4", "kineto-1.8") or from an nsys export ("nsys")."""
    from traceread import load
    from traceread.synth import scenarios as sc
    from traceread.synth.kineto import write_kineto

    if how == "table":
        return trace
    if how.startswith("kineto"):
        p = tmp_path / f"{name}.json"
        write_kineto(trace, p, era=how.split("-")[1])
    else:
        p = tmp_path / f"{name}.sqlite"
        sc.write_nsys(trace, p)
    return load(p)
