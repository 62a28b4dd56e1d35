"""Levers the program rules out, found reading the corpus (issue 42 session's new-user pass):
each refusal names what rules it out. Skips without the corpus."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip

DDP_R18 = "AMD-AGI__TraceLens/tests/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"
LINEAR = "facebookresearch__param/et_replay/tests/inputs/linear_kineto.json.gz"


def _corpus(rel: str):
    p = corpus_or_skip() / rel
    if not p.is_file():
        pytest.skip(f"{rel} not in the corpus")
    return p


def test_no_shape_advice_for_an_allocator_that_caches_nothing():
    # MI300 DDP resnet18 with the caching allocator off (hipFree inside the ops, 2.97 s of
    # the 3.31 s window): stable shapes let a cache reuse blocks -- there is none to reuse
    v = analysed(_corpus(DDP_R18)).verdict
    ids = [x["id"] for x in v["actions"]]
    assert ids[0] == "allocator_on" and "shapes_stable" not in ids
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert gone["shapes_stable"]["precondition"] == "allocator_cached"


def test_a_capture_refused_for_a_sync_names_the_call():
    v = analysed(_corpus(LINEAR)).verdict
    gone = {w["id"]: w for w in v["withdrawn"]}
    assert "the step syncs between its launches (seen: cudaMalloc)" in gone["cuda_graphs"]["reason"]
