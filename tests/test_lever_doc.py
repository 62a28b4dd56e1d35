"""The lever table is one place (issue 39): docs/analysis.md's table is generated from the
rows, every lever has one shape (LeverId, doc, preconditions, saving model), and a refusal
is a value."""
from __future__ import annotations

from pathlib import Path

from traceread.verdict import levers as L
from traceread.verdict.leverkit import Lever, LeverDoc, Withdrawn

DOC = Path(__file__).resolve().parents[1] / "docs" / "analysis.md"


def test_the_doc_table_is_current():
    text = DOC.read_text(encoding="utf-8")
    a = text.index(L.DOC_BEGIN) + len(L.DOC_BEGIN)
    b = text.index(L.DOC_END)
    assert text[a:b].strip() == L.doc_table().strip(), \
        "docs/analysis.md's lever table is stale: run PYTHONPATH=src python scripts/lever_table.py --doc"


def test_every_lever_is_one_row_of_the_doc():
    table = L.doc_table()
    for lv in L.LEVERS + L.DIAGNOSTICS:
        assert f"| `{lv.id}`" in table
        d = L.describe(lv)
        assert d.what and d.why and d.saving, lv.id


def test_lever_ids_are_one_enum_and_plain_strings_still_work():
    assert isinstance(L.BY_ID["num_workers"].id, L.LeverId)
    assert L.BY_ID["num_workers"].id == "num_workers" and "num_workers" in L.BY_ID
    assert L.LeverId.NUM_WORKERS == "num_workers" and f"{L.LeverId.NUM_WORKERS}" == "num_workers"
    # the anatomy helper's rows: a plain str id, the old positional shape, constructs
    old = Lever("tf32", "gpu", "x", "free", saves="busy", when=())
    assert old.id is L.LeverId.TF32 and isinstance(old.doc, LeverDoc)
    new = Lever("a_new_lever", "host", "y", "code")
    assert new.id == "a_new_lever"
    assert Lever("b", "host", "z", "code", doc="what it does").doc.what == "what it does"


def test_every_saving_model_is_a_value_with_its_assumptions():
    for lv in L.LEVERS:
        assert lv.saves in L.SAVING_MODELS or lv.saves in L.ANATOMY_SAVINGS, lv.id
    for m in L.SAVING_MODELS.values():
        assert m.doc and m.assumptions and callable(m.price)
    assert set(L.CAUSE_PRICED) == {"cause", "alloc", "host_rest", "pin", "queued",
                                   "fsdp_hide", "tp_hide"}


def test_a_refusal_is_a_value_naming_its_precondition():
    lv = L.BY_ID["pin_batch"]
    ctx = {"pytorch": True, "h2d_source": {"copies": 4, "pinned": 4, "pageable": 0,
                                           "unknown": 0}}
    w = lv.refusal(ctx)
    assert isinstance(w, Withdrawn) and w.precondition == "h2d_pageable"
    assert "pinned" in w.reason and w.facts == ("h2d_source",)
    ctx["h2d_source"]["pageable"] = 1
    assert lv.refusal(ctx) is None
