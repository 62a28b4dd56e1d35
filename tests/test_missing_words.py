"""What a capture cannot show, said in the program's own terms: PyTorch's recording options
only for a PyTorch program (pipit's CloverLeaf, a Fortran/CUDA code under nsys, was told to
record with --pytorch=autograd-nvtx)."""
from __future__ import annotations

import pytest

from conftest import analysed, corpus_or_skip
from traceread.verdict.decision import missing

CLOVER = "hpcgroup__pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"


def test_pytorch_programs_are_told_pytorchs_options():
    said = missing({"nsys_no_framework_ranges": True}, pytorch=True)
    assert len(said) == 1 and "--pytorch=autograd-nvtx" in said[0]
    said = missing({"nsys_host_untraced": True}, pytorch=True)
    assert "torch.profiler" in said[0]


def test_other_programs_are_told_to_mark_their_phases():
    for flag in ("nsys_no_framework_ranges", "nsys_host_untraced"):
        said = missing({flag: True}, pytorch=False)
        assert len(said) == 1 and "nvtxRangePush" in said[0] and "pytorch" not in said[0].lower()
    assert missing({}, pytorch=False) == []


def test_cloverleaf_is_not_told_about_pytorch():
    p = corpus_or_skip() / CLOVER
    if not p.is_file():
        pytest.skip("CloverLeaf export not in the corpus")
    v = analysed(p).verdict
    assert v["missing"] and all("pytorch" not in m.lower() for m in v["missing"])


def test_attention_figure_is_said_as_fused_kernels():
    # TraceLens' timesformer (unfused attention: GEMMs + softmax) read "attention 0 ns" beside
    # a 68.8 ms fused-attention saving
    from traceread.render.words import fact_words

    assert fact_words({"fact": "attention_ns", "value": 0}) == "no fused attention kernel runs"
    assert fact_words({"fact": "attention_ns", "value": 2_500_000}) == \
        "fused attention kernels 2.5 ms"
