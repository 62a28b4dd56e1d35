"""Why a lever is not offered: a withdrawn lever carries the facts its failed precondition
read, with their values and the events that prove them (``verdict.withdrawn[].because``),
and the text report names the deciding fact and its event under the to-do list."""
from __future__ import annotations

from conftest import CORPUS, analysed, corpus_or_skip
from traceread.render.report import ruled_out_lines
from traceread.render.words import RULED_OUT_ROWS

AT = {"name": "aten::to", "ts_ns": 1, "step": 0, "detail": "sync: pageable_copy"}


def _w(id_, because, reason="r"):
    return {"id": id_, "cause": "launch", "reason": reason, "precondition": "p",
            "facts": [b["fact"] for b in because], "because": because}


def test_the_deciding_fact_and_its_event_are_named():
    capt = [{"fact": "capturable", "value": False, "known": True, "evidence": [AT]}]
    opt = [{"fact": "training", "value": True, "known": True, "evidence": []},
           {"fact": "optimizer", "value": None, "known": True, "evidence": []}]
    lines = ruled_out_lines([_w("cuda_graphs", capt), _w("graphs_host", capt),
                             _w("fused_optimizer", opt)])
    text = "\n".join(lines)
    # one line per reason, the levers it rules out named together
    assert "cuda graphs, graphs host: the step cannot be captured as a CUDA graph " \
           "(seen: aten::to)" in text
    # the precondition stopped at "optimizer": the training fact that held is not the reason
    assert "fused optimizer: no optimizer" in text and "training" not in text


def test_a_replay_refusal_keeps_its_reason_and_rows_are_bounded():
    many = [_w(f"lever_{i}", [], reason=f"reason {i}") for i in range(RULED_OUT_ROWS + 2)]
    lines = ruled_out_lines(many)
    assert any("lever 0: reason 0" in x for x in lines)
    assert not any(f"reason {RULED_OUT_ROWS}" in x for x in lines)
    assert lines[-1].strip() == "... and 2 more (the JSON's verdict.withdrawn)"
    assert ruled_out_lines([]) == []


def test_vllm_eager_step_names_the_copy_that_rules_out_cuda_graphs():
    # TraceLens' B200 eager vLLM trace: pageable host->device copies (aten::to) between the
    # step's launches, so no CUDA graph can capture the step
    corpus_or_skip()
    a = analysed(CORPUS / "AMD-AGI__TraceLens/tests/traces/b200/eager_trace.json.gz")
    w = {x["id"]: x for x in a.to_dict()["verdict"]["withdrawn"]}
    last = w["cuda_graphs"]["because"][-1]
    assert last["fact"] == "capturable" and last["value"] is False
    assert last["evidence"][0]["name"] == "aten::to"
    assert "pageable" in last["evidence"][0]["detail"]
    assert "cuda_graphs" not in [x["id"] for x in a.to_dict()["verdict"]["actions"]]


def test_text_and_html_list_the_same_refusal():
    corpus_or_skip()
    from traceread.render.html import analysis_body
    from traceread.render.report import todo_lines

    a = analysed(CORPUS / "AMD-AGI__TraceLens/tests/traces/b200/eager_trace.json.gz")
    v = a.to_dict()["verdict"]
    text = "\n".join(todo_lines(v))
    assert "cuda graphs, graphs host: the step cannot be captured as a CUDA graph " \
           "(seen: aten::to)" in text
    assert "<li>cuda graphs, graphs host: the step cannot be captured as a CUDA graph " \
           "(seen: aten::to)</li>" in analysis_body(a)


def test_workers_that_cannot_keep_up_are_offered_more():
    # param's resnet Kineto trace: _MultiProcessingDataLoaderIter.__next__ holds 4.7 s of the
    # window. "Raise num_workers" was priced by the workers model, whose refusal for a program
    # that has workers ("already num_workers > 0") withdrew the one lever written for it.
    corpus_or_skip()
    a = analysed(CORPUS / "facebookresearch__param/et_replay/tests/inputs/resnet_kineto.json.gz")
    v = a.to_dict()["verdict"]
    first = v["actions"][0]
    assert first["id"] == "more_workers" and first["basis"] == "bound"
    assert "more_workers" not in [w["id"] for w in v["withdrawn"]]
