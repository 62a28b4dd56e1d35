"""Shared test helpers: where the real-artifact corpus and the fixtures live."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# ../shared/corpus beside the checkout (see the project brief); absent on most machines.
# TRACEREAD_CORPUS names it elsewhere (a git worktree one folder deeper, a CI cache).
CORPUS = Path(os.environ.get("TRACEREAD_CORPUS") or
              Path(__file__).resolve().parents[2] / "shared" / "corpus")


GOLDEN = CORPUS.parent / "golden"
CORPUS_HINT = (f"put the shared corpus at {CORPUS} (with MANIFEST.tsv) and the nsys goldens at "
               f"{GOLDEN} to run it: README, 'Run the tests'")


def corpus_or_skip() -> Path:
    """The corpus directory, or skip the calling test when it is not there."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"corpus not found: {CORPUS_HINT}")
    return CORPUS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every skip for a missing corpus or golden says where they go (some tests word it
    their own way: "corpus absent", "not in the corpus")."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        path, line, reason = rep.longrepr
        if ("corpus" in reason or "golden" in reason) and str(CORPUS) not in reason:
            rep.longrepr = (path, line, f"{reason}: {CORPUS_HINT}")


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
