"""traceread batch --scheduler on a Dask LocalCluster gives the local path's results."""
import importlib.util

import pandas as pd
import pytest
from click.testing import CliRunner

from traceread.jobs import output
from traceread.cli import main
from traceread.synth.multirank import JobSpec, write_job

# imported by the cluster fixture when a test runs: collecting needs only to know it is there
pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="needs dask.distributed")


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import LocalCluster

    # In-process workers (threads) on a real tcp:// scheduler address: the CLI talks
    # to it exactly as to a remote cluster, without spawning worker processes.
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as c:
        yield c


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("daskrun")
    write_job(root, JobSpec(ranks=2, slow_rank=0, delay_ns=1_000_000, steps=3))
    (root / "bad.json").write_text("[1, 2")
    return root


def test_dask_same_as_local(cluster, run_dir, tmp_path):
    addr = cluster.scheduler_address
    assert addr.startswith("tcp://")
    r = CliRunner().invoke(main, ["batch", str(run_dir), "-o", str(tmp_path / "dask"), "--scheduler", addr])
    assert r.exit_code == 1, r.output            # bad.json fails, the rest finish
    r2 = CliRunner().invoke(main, ["batch", str(run_dir), "-o", str(tmp_path / "local"), "-j", "1"])
    assert r2.exit_code == 1, r2.output
    cols = [c for c in output.SUMMARY_COLUMNS if c != "seconds"]
    a = pd.read_parquet(tmp_path / "dask" / "summary.parquet")[cols]
    b = pd.read_parquet(tmp_path / "local" / "summary.parquet")[cols]
    pd.testing.assert_frame_equal(a, b)
    assert a["error"].notna().sum() == 1
    ra = pd.read_parquet(tmp_path / "dask" / "ranks.parquet")
    pd.testing.assert_frame_equal(ra, pd.read_parquet(tmp_path / "local" / "ranks.parquet"))
    assert ra.loc[ra["straggler"], "rank"].tolist() == [0]
    assert (ra["straggler_delay_ns"] == 1_000_000).all()
    ka = pd.read_parquet(tmp_path / "dask" / "tables" / "kernels")
    kb = pd.read_parquet(tmp_path / "local" / "tables" / "kernels")
    assert len(ka) == len(kb) > 0
