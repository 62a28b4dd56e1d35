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
