"""nsys stats 2025.3 parity on the real H100 whole-program exports (tests/fixtures/gpu,
made by scripts/record_gpu.py): every committed golden (``nsys stats -f csv`` 2025.3.2)
reproduced byte for byte, the version switch, and info/analyze on each export.

The exports are committed xz-compressed; they are decompressed once per session."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import traceread
from traceread.cli import main
from traceread.passes import nsys_reports as R
from traceread.passes.api import api_summary, render_api
from traceread.passes.kernels import kernel_summary, render_summary
from traceread.passes.nsys_compat import round1, stats_version
from traceread.table import Trace, TraceMeta, build_table

GPU = Path(__file__).parent / "fixtures" / "gpu"
GOLDEN = GPU / "golden"
REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "nvtx_sum")
CLI = {"cuda_gpu_kern_sum": ["kernels"], "cuda_api_sum": ["api"],
       "cuda_gpu_mem_time_sum": ["memcpy", "--by", "time"], "nvtx_sum": ["nvtx"]}


def _exports() -> list[str]:
    return sorted(p.name[: -len(".sqlite.xz")] for p in GPU.glob("*.sqlite.xz"))


def _goldens() -> list[tuple[str, str]]:
    return [(name, rep) for name in _exports() for rep in REPORTS
            if (GOLDEN / f"{name}_{rep}.csv").exists()]


# gpu_sqlite (conftest): every fixtures/gpu/*.sqlite.xz decompressed once per test process


_TRACES: dict = {}


def load(gpu_sqlite: Path, name: str) -> Trace:
    if name not in _TRACES:
        _TRACES[name] = traceread.load(gpu_sqlite / f"{name}.sqlite")
    return _TRACES[name]


def render(t: Trace, report: str, version: str) -> str:
    """The CSV each report command prints (cli/nsys_stats.py), for ``version``."""
    if report == "cuda_gpu_kern_sum":
        return render_summary(kernel_summary(t), "csv", version=version)
    if report == "cuda_api_sum":
        return render_api(api_summary(t), "csv", version)
    if report == "cuda_gpu_mem_time_sum":
        return R.render_memops(R.memop_time_summary(t), "time", "csv", version)
    return R.render_nvtx(R.nvtx_summary(t, version), "csv", version)


def test_fixtures_present():
    """Every export has its goldens; nvtx_sum only where it has NVTX ranges (nsys stats
    skips the report otherwise: the *.nonvtx captures)."""
    names = _exports()
    assert len(names) >= 14
    for rep in REPORTS:
        have = {n for n, r in _goldens() if r == rep}
        assert have == ({n for n in names if "nonvtx" not in n} if rep == "nvtx_sum" else
                        set(names)), rep


@pytest.mark.parametrize("name,report", _goldens())
def test_golden_2025(gpu_sqlite, name, report):
    t = load(gpu_sqlite, name)
    assert stats_version(t) == "2025.3"  # auto: the exporter is 2025.3.2
    gold = (GOLDEN / f"{name}_{report}.csv").read_text()
    assert render(t, report, stats_version(t)) == gold


@pytest.mark.parametrize("report", REPORTS)
def test_cli_auto_matches_golden(gpu_sqlite, report):
    name = "data.bad"  # has a 2486.95 average: 2025.3 and 2023.4 round it differently
    r = CliRunner().invoke(main, CLI[report] + [str(gpu_sqlite / f"{name}.sqlite"),
                                                "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output == (GOLDEN / f"{name}_{report}.csv").read_text()


def _changed(a: str, b: str) -> list[tuple[str, str]]:
    return [(x, y) for x, y in zip(a.splitlines(), b.splitlines()) if x != y]


def test_2023_rules_differ_only_where_versions_differ(gpu_sqlite):
    """The same export printed the 2023.4 way: only the rounding of exact-decimal halves
    and the default-domain NVTX prefix change."""
    path = str(gpu_sqlite / "data.bad.sqlite")
    r = CliRunner().invoke(main, ["kernels", path, "--format", "csv", "--nsys-version", "2023.4"])
    assert r.exit_code == 0
    diff = _changed(r.output, (GOLDEN / "data.bad_cuda_gpu_kern_sum.csv").read_text())
    # 149217 ns / 60: the double below 2486.95; SQLite 3.40 rounds x*10+0.5, newer the exact value
    assert [(a.split(",")[3], b.split(",")[3]) for a, b in diff] == [("2487.0", "2486.9")]
    r = CliRunner().invoke(main, ["nvtx", path, "--format", "csv", "--nsys-version", "2023.4"])
    diff = _changed(r.output, (GOLDEN / "data.bad_nvtx_sum.csv").read_text())
    assert len(diff) == 12 and all(b.endswith(",:" + a.rsplit(",", 1)[1]) for a, b in diff)


def test_stats_version_rules():
    def meta(version):
        extra = {"nsys_version": version} if version else {}
        return Trace(build_table({"ts": np.array([0])}, 1), TraceMeta(format="nsys", extra=extra))

    assert stats_version(meta("2025.3.2.0")) == "2025.3"
    assert stats_version(meta("2026.2.1.210")) == "2025.3"
    assert stats_version(meta("2024.5.1.113")) == "2023.4"
    assert stats_version(meta("2025.1.1.110")) == "2023.4"  # nvtx_sum 2025.1 prints `Name`
    assert stats_version(meta("2022.2.1.31")) == "2023.4"
    assert stats_version(meta(None)) == "2023.4"
    assert stats_version(None) == "2023.4"
    assert stats_version(meta("2025.3.2.0"), "2023.4") == "2023.4"
    with pytest.raises(ValueError):
        stats_version(None, "2024.1")


def test_round1_versions():
    x = [149217 / 60, 1028358 / 120, 0.25, -0.25, 2.75, 0.05, -2486.95, 7.0, 1e300]
    assert round1(x, "2023.4").tolist() == [2487.0, 8569.7, 0.3, -0.3, 2.8, 0.1, -2487.0, 7.0,
                                            1e300]
    # exact binary value, halves (0.25, 2.75 are exact) away from zero -- not Python's
    # round-half-even: the goldens print 1846.25 as 1846.3 (compile.bad); 0.05 is above 0.05
    assert round1(x, "2025.3").tolist() == [2486.9, 8569.6, 0.3, -0.3, 2.8, 0.1, -2486.9, 7.0,
                                            1e300]
    assert np.isnan(round1([np.nan], "2025.3")[0])


def test_round1_2025_fast_path_is_the_exact_rounding():
    from decimal import ROUND_HALF_UP, Decimal

    rng = np.random.default_rng(7)
    a = np.concatenate([rng.integers(1, 10**9, 5000) / rng.integers(1, 100, 5000),
                        rng.integers(-10**7, 10**7, 5000) / 40.0,   # exact and near halves
                        rng.integers(0, 10**15, 2000) / 20.0])
    exact = [float(Decimal(v).quantize(Decimal("0.1"), ROUND_HALF_UP)) for v in a.tolist()]
    assert round1(a, "2025.3").tolist() == exact


@pytest.mark.parametrize("name", _exports())
def test_info_on_export(gpu_sqlite, name):
    import json

    r = CliRunner().invoke(main, ["info", str(gpu_sqlite / f"{name}.sqlite"), "--format", "json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["format"] == "nsys" and info["format_version"].startswith("3.20.")
    assert info["producer"] == "Nsight Systems 2025.3.2.0"
    assert info["devices"] == [0] and "H100" in info["device_names"]["0"]
    # whole-program capture: the python processes with events (the training script, and
    # compile / DataLoader workers where it has some), none of nsys's own or the kernel's
    procs = list(info["processes"].values())
    assert procs[0] == "/opt/torch/.venv/bin/python3" and set(procs[1:]) <= {"python3"}
    assert load(gpu_sqlite, name).meta.extra["nsys_version"] == "2025.3.2.0"


@pytest.mark.parametrize("name", _exports())
def test_analyze_is_clean(gpu_sqlite, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pandas/numpy warning is a bug here
        r = CliRunner().invoke(main, ["analyze", str(gpu_sqlite / f"{name}.sqlite")])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "traceread: warning" not in r.output
    assert "VERDICT" in r.output
