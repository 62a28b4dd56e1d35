"""The kernels / gaps / api commands, info and analyze on nsys exports; exit codes."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceread.cli import main
from traceread.cli._common import parse_duration
from traceread.synth.nsys import write_planted

FIX = Path(__file__).parent / "fixtures" / "nsys"
GOLD = FIX / "golden"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return str(write_planted(tmp_path_factory.mktemp("cli") / "planted.sqlite"))


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_kernels_csv(planted):
    r = run("kernels", planted, "--format", "csv")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].startswith("Time (%),Total Time (ns),Instances,")
    assert lines[1] == "54.9,9000,3,3000.0,3000.0,1000,5000,2000.0,\"void gemm_kernel<float>(float *, int)\""


def test_gaps_csv(planted):
    r = run("gaps", planted, "--min-gap", "1us", "--format", "csv")
    assert r.exit_code == 0
    assert r.output.splitlines() == [
        "Row#,Duration (ns),Start (ns),PID,Device ID,Context ID",
        "1,16000,4000,200,1,1", "2,7000,13000,100,0,1", "3,5000,5000,100,0,1",
        "4,5000,25000,100,0,1"]


def test_api_csv_and_real_calls_only(planted):
    r = run("api", planted, "--format", "csv")
    assert r.exit_code == 0
    names = [line.rsplit(",", 1)[1] for line in r.output.splitlines()[1:]]
    assert names == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpyAsync",
                     "cudaStreamSynchronize", "cudaStreamIsCapturing_v10000"]
    r2 = run("api", planted, "--real-calls-only", "--format", "json")
    recs = json.loads(r2.output)
    assert [(x["Name"], x["Num Calls"], x["Total Time (ns)"]) for x in recs] == [
        ("cudaLaunchKernel", 6, 3000), ("cudaMemcpyAsync", 1, 600),
        ("cudaStreamSynchronize", 1, 100), ("cudaStreamIsCapturing", 1, 50)]


def test_text_outputs(planted):
    for args in (("kernels",), ("gaps", "--min-gap", "1us"), ("api",)):
        r = run(*args, planted)
        assert r.exit_code == 0 and "----" in r.output
    r = run("gaps", planted)
    assert r.exit_code == 0 and r.output.strip() == "no GPU gaps longer than 1 ms"


def test_info_and_analyze(planted):
    r = run("info", planted, "--format", "json")
    assert r.exit_code == 0
    info = json.loads(r.output)
    assert info["format"] == "nsys" and info["devices"] == [0, 1]
    assert info["by_kind"]["kernel"] == 7
    r = run("analyze", planted)
    assert r.exit_code == 0 and "nsys" in r.output


@pytest.mark.parametrize("name", sorted(p.name for p in GOLD.iterdir()) if GOLD.exists() else [])
def test_fixture_goldens_byte_for_byte(name):
    sqlite = FIX / f"{name}.sqlite"
    for cmd, golden, extra in (("kernels", "cuda_gpu_kern_sum.csv", ()),
                               ("api", "cuda_api_sum.csv", ()),
                               ("gaps", "gpu_gaps_gap1ms.csv", ("--min-gap", "1ms"))):
        g = GOLD / name / golden
        if g.exists():
            r = run(cmd, sqlite, "--format", "csv", *extra)
            assert r.exit_code == 0
            assert r.output == g.read_text(), f"{cmd} on {name}"


def test_bad_inputs_exit_1_one_line(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00\x01" * 600)
    for p in (other, empty, junk, tmp_path / "missing.sqlite"):
        for cmd in ("kernels", "gaps", "api", "info"):
            r = run(cmd, p)
            assert r.exit_code == 1, (cmd, p, r.output)
            err = r.output.strip()  # CliRunner mixes stderr in
            assert err.startswith("traceread: error: ") and "\n" not in err
            assert "Traceback" not in err


def test_bad_min_gap(planted):
    assert run("gaps", planted, "--min-gap", "soon").exit_code == 2


def test_parse_duration():
    assert [parse_duration(x) for x in ("1ms", "500us", "2s", "1.5ms", "250ns", "7ns", "0")] == [
        1_000_000, 500_000, 2_000_000_000, 1_500_000, 250, 7, 0]


@pytest.mark.parametrize("command", ["gaps", "idle", "analyze"])
def test_a_bare_number_is_refused_with_the_units_it_takes(planted, command):
    """nsys's gap= counts ms, ours counted ns: "5" meant 5 ns silently. Now it says."""
    r = run(command, planted, "--min-gap", "5")
    assert r.exit_code == 2 and "'5' has no unit: write 5ns, 5us, 5ms or 5s" in r.output
    assert "Traceback" not in r.output
    assert run(command, planted, "--min-gap", "5us").exit_code == 0


def test_gaps_takes_nsys_version_like_the_other_reports(planted):
    a = run("gaps", planted, "--min-gap", "0", "--format", "csv")
    for v in ("2023.4", "2025.3", "auto"):   # gpu_gaps prints integers: alike in both
        r = run("gaps", planted, "--min-gap", "0", "--format", "csv", "--nsys-version", v)
        assert r.exit_code == 0 and r.output == a.output
    assert run("gaps", planted, "--nsys-version", "2019.1").exit_code == 2


@pytest.mark.parametrize("suffix,fmt,head", [(".csv", None, "Time (%),"), (".json", None, "["),
                                             (".txt", None, " Time (%)"),
                                             (".csv", "text", " Time (%)")])
def test_output_format_follows_the_suffix_unless_format_says(planted, tmp_path, suffix, fmt, head):
    out = tmp_path / f"k{suffix}"
    args = ["kernels", planted, "-o", str(out)] + (["--format", fmt] if fmt else [])
    assert run(*args).exit_code == 0
    assert out.read_text().lstrip("\n").startswith(head.strip()) or \
        out.read_text().startswith(head)
    # --format before -o or after it: the same
    if fmt:
        out2 = tmp_path / f"k2{suffix}"
        assert run("kernels", "--format", fmt, "-o", str(out2), planted).exit_code == 0
        assert out2.read_text() == out.read_text()


def test_same_commands_on_kineto_trace():
    """kernels / api / gaps read only the event table, so they work on Kineto too."""
    import traceread

    path = Path(__file__).parent / "fixtures" / "kineto" / "hta_sampled_rank-1.json.gz"
    if not path.exists():
        pytest.skip("kineto fixture not present")
    ev = traceread.load(path).events
    r = run("kernels", path, "--format", "json")
    assert r.exit_code == 0
    recs = json.loads(r.output)
    assert sum(x["Instances"] for x in recs) == int((ev["kind"] == "kernel").sum()) > 0
    r = run("api", path, "--format", "json")
    assert r.exit_code == 0
    assert sum(x["Num Calls"] for x in json.loads(r.output)) == int(
        ev["kind"].isin(["runtime", "driver"]).sum())
    r = run("gaps", path, "--min-gap", "0", "--format", "csv")
    assert r.exit_code == 0
    rows = r.output.splitlines()[1:]
    assert rows and all(row.endswith(",") for row in rows)  # no CUDA context id on Kineto


def test_text_times_are_relative_to_trace_start(planted):
    # The planted trace's first event is at -1000 ns; a gap starting at 4000 ns is +5 us.
    r = run("gaps", planted, "--min-gap", "1us")
    assert r.exit_code == 0
    assert "+0.000005 s" in r.output and "4,000" not in r.output
    r = run("idle", planted, "--min-gap", "1us")
    assert r.exit_code == 0
    assert "+0.000005 s" in r.output and "start (ns)" not in r.output
    r = run("idle", planted, "--min-gap", "1us", "--format", "json")
    docs = json.loads(r.output)["traces"]   # one per GPU process, as analyze's
    assert [d["trace"].rsplit("#", 1)[1] for d in docs] == ["pid100", "pid200"]
    assert 4000 in [g["start_ns"] for d in docs for g in d["gaps"]]
    # util's text starts count from there too (it printed nsys's raw 4,068 ns, which no
    # other command's start could be compared with); its csv keeps nsys's ns
    # (planted holds two GPU processes: each counts from its own first event, pid 200's at
    # 800 ns, as analyze / idle / steps report them per process)
    r = run("util", planted)
    assert r.exit_code == 0
    row = [ln for ln in r.output.splitlines() if ln.split()[:1] == ["1"]][0]
    assert "+0.000003 s" in row and "4,068" not in r.output and "Start (ns)" not in r.output
    assert run("util", planted, "--format", "csv").output.splitlines()[1] == "1,1.1,16107,4068,200,1,1"


def test_idle_names_steps_as_analyze_does(planted):
    """A gap outside every step is '-' (it printed step -1), a step's gap '#N'."""
    rows = [ln.split() for ln in run("idle", planted, "--min-gap", "1us").output.splitlines()
            if ln.lstrip().startswith("+")]
    steps = {next(t for t in r[4:] if t == "-" or t.startswith("#")) for r in rows}
    assert steps == {"-", "#0"}


def _two_ranks_late_start(path) -> str:
    """torchrun's launcher (an OS call at 0), then two GPU processes whose first events come
    later (rank 0 at 1 ms, rank 1 at 3 ms); each: 3 kernels 100 us long, 2 ms apart."""
    from traceread.synth.nsys import NsysWriter

    w = NsysWriter(path)
    w.process(10, "torchrun")
    w.osrt(0, 100_000, "read", 10, 10)
    for rank, (pid, start) in enumerate(((100, 1_000_000), (200, 3_000_000))):
        w.process(pid, "python3")
        w.gpu(rank, "Synthetic GPU")
        for i in range(3):
            t = start + i * 2_000_000
            w.runtime(t, t + 10_000, "cudaLaunchKernel_v7000", pid, pid, corr=i + 1)
            w.kernel(t + 20_000, t + 120_000, "k", pid, rank, corr=i + 1)
    return str(w.close())


def test_one_gap_has_one_start_in_gaps_and_idle(tmp_path):
    """A multi-process export is reported per process by analyze and (now) idle and steps
    (idle's starts are analyze's: the same analysis of the part),
    starts counted from that process's first event; gaps and util counted from the export's
    (torchrun's launcher): rank 1's first gap was +5.12 ms in gaps, +2.12 ms in analyze."""
    p = _two_ranks_late_start(tmp_path / "job.sqlite")
    idle = run("idle", p, "--min-gap", "1ms").output
    assert "job.sqlite#pid100" in idle and "job.sqlite#pid200" in idle   # split, as analyze
    gaps = run("gaps", p, "--min-gap", "1ms").output
    for pid in (100, 200):   # each process's first gap: 120 us after its first event
        assert "+0.000120 s" in idle.split(f"#pid{pid}")[1].split("#pid")[0]
        row = [ln for ln in gaps.splitlines() if f" {pid} " in ln and "+0.000120 s" in ln]
        assert row, gaps
