"""Save the facts records the verdict tests start from (tests/fixtures/records).

    PYTHONPATH=src python scripts/save_fact_records.py [CORPUS_DIR [NAME ...]]

Each record is ``WindowFacts.to_json()`` of one real corpus trace (gzipped): the verdict
tests (tests/test_preconditions.py) judge it with ``verdict.decide`` in milliseconds, no
corpus needed; the slow test checks a record still holds what the passes find today.
``strip_device``: the trace's deviceProperties removed first (the device unknown, as in an
nsys export without its GPU): the kernel names must tell the architecture.
"""
from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "records"

# name -> (corpus path, strip the device)
RECORDS = {
    "volta_nodevice": ("pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/"
                       "worker0.1623143089861.pt.trace.json.gz", True),
    "gemv_v100": ("pytorch__kineto/tb_plugin/test/gpu_metrics_input.json", True),
    "torch18_resnet50": ("pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/"
                         "worker0.1623143089861.pt.trace.json.gz", False),
    "htod_blocking": ("facebookresearch__HolisticTraceAnalysis/tests/data/"
                      "with_gpu_user_annotation/step_based_trace_2543932.json.gz", False),
    "vllm_capture": ("AMD-AGI__TraceLens/tests/traces/inference/vllm_prefilldecode_piecewise/"
                     "capture_traces/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz",
                     False),
    "sglang_capture": ("AMD-AGI__TraceLens/tests/traces/inference/sglang_decode/capture_traces/"
                       "bs_32_rank0.json.gz", False),
    "ddp_unflatten": ("facebookresearch__HolisticTraceAnalysis/tests/data/nccl_parser_config/"
                      "nccl_data.json.gz", False),
    "compiled_once": ("facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/"
                      "df_index_resolver.json.gz", False),
    # recorded 2022-08-22 (TorchRec on A100): no torch version in the trace but its date
    "torchrec_2022": ("facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/control/"
                      "control.json.gz", False),
    "ulysses_a2a": ("GindaChen__nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite", False),
    # MI300 BERT inference: its only read-back is a tensor condition (aten::is_nonzero)
    "condition_read": ("AMD-AGI__TraceLens/tests/traces/mi300/"
                       "gaunernst_bert-small-uncased__1016001.json.gz", False),
    # our own H100 recording (tests/fixtures): DataLoader(pin_memory=True), non_blocking copies
    "pinned_batch": ("fixtures:gpu/data.bad.json.gz", False),
    # our H100 recording: 25 .item() checks a step (isnan/any on the GPU, then the read)
    "item_checks": ("fixtures:gpu/sync.bad.json.gz", False),
    # the same program under nsys (-t cuda,nvtx,osrt): no DataLoader names, OS calls only
    "nsys_main_thread_data": ("fixtures:gpu/data.bad.sqlite.xz", False),
}


def source(corpus: Path, rel: str, strip: bool, tmp: Path) -> Path:
    """The trace to analyse: the corpus file, or a copy without its device properties."""
    path = ROOT / "tests" / "fixtures" / rel[len("fixtures:"):] \
        if rel.startswith("fixtures:") else corpus / rel
    if path.name.endswith(".xz"):   # our nsys recordings are stored compressed
        import lzma
        import shutil

        out = tmp / path.name[:-3]
        with lzma.open(path) as i, open(out, "wb") as o:
            shutil.copyfileobj(i, o)
        return out
    if not strip:
        return path
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    for key in ("deviceProperties", "computeProperties"):
        doc.pop(key, None)
    out = tmp / path.name.replace(".gz", "")
    out.write_text(json.dumps(doc))
    return out


def record(corpus: Path, name: str) -> str:
    from traceread import load
    from traceread.analysis import analyze

    rel, strip = RECORDS[name]
    with tempfile.TemporaryDirectory() as d:
        return analyze(load(source(corpus, rel, strip, Path(d)))).facts.to_json()


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv else ROOT.parents[1] / "shared" / "corpus"
    if not (corpus / "MANIFEST.tsv").is_file():
        print(f"no corpus at {corpus}", file=sys.stderr)
        return 2
    names = argv[1:] or list(RECORDS)   # the named records only: the others stay as saved
    unknown = [n for n in names if n not in RECORDS]
    if unknown:
        print(f"no record named {', '.join(unknown)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        text = record(corpus, name)
        with gzip.open(OUT / f"{name}.facts.json.gz", "wt") as f:
            f.write(text)
        print(f"{name}: {len(text) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
