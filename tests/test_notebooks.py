"""Every notebook in notebooks/ runs end to end on fixture traces (nbclient)."""
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Planted 3-rank job + the real HTA 2-rank pair (bundled example + fixture)."""
    from traceread import examples
    from traceread.synth.multirank import JobSpec, write_job

    root = tmp_path_factory.mktemp("nbrun")
    write_job(root / "planted", JobSpec(ranks=3, slow_rank=1, delay_ns=2_000_000, steps=4))
    (root / "hta").mkdir()
    shutil.copy(examples.path(), root / "hta" / "sampled_rank-0.json.gz")
    shutil.copy(FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz", root / "hta" / "sampled_rank-1.json.gz")
    return root


def test_there_is_a_notebook():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, run_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEREAD_RUN_DIR", str(run_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5          # per-step, step times, idle breakdown, 2 jobs x wait/transfer, exposed
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "straggler rank 1, holds others back by 2.00 ms" in text
