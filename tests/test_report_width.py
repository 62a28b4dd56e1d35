"""The text reports fit 100 columns: rows wrap their free-text column, paths shorten.

Every corpus trace's single-trace report is checked in test_analyze_corpus._check."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from traceread.cli import main
from traceread.render.fmt import fit, short_path, tail_lines

from conftest import FIXTURES, analysed


def test_a_row_wraps_its_last_column_under_itself_and_keeps_units_whole():
    prefix = "    host             2.77 ms      88.0%    2.77 ms         379 us  "
    out = tail_lines(prefix, "50% of 4 kernels average under 10 us, and then some more words")
    assert len(out) == 2 and all(len(x) <= 100 for x in out)
    assert out[1].startswith(" " * len(prefix)) and not out[1][len(prefix)].isspace()
    assert " ".join(" ".join(x.split()) for x in out).endswith(
        "average under 10 us, and then some more words")
    assert not any(x.rstrip().endswith(" 10") for x in out)  # "10 us" not split


def test_prose_wrap_never_parts_a_number_from_its_unit():
    line = "  kineto (schema 1) · torch.profiler (CUDA 12.9, CUPTI 28) · rank 0 of 8 · 22,355 events · span 87.4 ms"
    out = fit([line])
    assert all(len(x) <= 100 for x in out) and not out[0].endswith("87.4")


def test_long_paths_keep_their_start_and_file_name():
    p = "/work/shared/corpus/" + "a" * 60 + "/cuda_event_sync/event_sync_trace__bloba4a6c2d1.json.gz"
    s = short_path(p)
    assert len(s) == 100 and s.startswith("/work/shared/") and s.endswith("bloba4a6c2d1.json.gz")
    assert short_path("short.json") == "short.json"


@pytest.mark.parametrize("command", ["analyze", "idle", "steps", "info"])
def test_a_long_path_header_prints_whole_so_it_can_be_copied(tmp_path, command):
    import shutil

    deep = tmp_path.joinpath(*(["a_rather_long_folder_name"] * 5))
    deep.mkdir(parents=True)
    p = deep / "hta_sampled_rank-1.json.gz"
    shutil.copy(FIXTURES / "kineto" / "hta_sampled_rank-1.json.gz", p)
    assert len(str(p)) > 140
    r = CliRunner().invoke(main, [command, str(p)])
    assert r.exit_code == 0, r.output
    assert str(p) in r.stdout.splitlines() and "…" not in r.stdout.splitlines()[0]


def test_job_report_of_real_ranks_fits_100_columns():
    ranks = sorted(str(p) for p in (FIXTURES / "gloo" / "ddp4").glob("rank-*.json.gz"))
    r = CliRunner().invoke(main, ["analyze", *ranks])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("JOB job0") and any(x.startswith("  why ") for x in lines)
    assert [x for x in lines if len(x) > 100 and x not in ranks] == []  # a path prints whole


def _fixture_traces() -> list[str]:
    pats = ("gpu/*.json.gz", "gpu/ddp2/*.json.gz", "kineto/*.json*", "gloo/*/*.json.gz",
            "nsys/*.sqlite")
    return sorted(str(p.relative_to(FIXTURES)) for pat in pats for p in FIXTURES.glob(pat))


@pytest.mark.parametrize("rel", _fixture_traces())
def test_report_of_every_committed_trace_fits_100_columns(rel):
    import traceread
    from traceread.render.report import render_report

    try:
        a = analysed(FIXTURES / rel)
    except traceread.TraceError:
        pytest.skip("refused cleanly (not a trace)")
    path = str(FIXTURES / rel)  # the header's path prints whole (copyable), whatever its length
    assert [x for x in render_report(a).splitlines() if len(x) > 100 and x != path] == []


@pytest.mark.parametrize("command", ["idle", "steps", "nccl", "compile", "info"])
def test_other_text_commands_fit_100_columns(command):
    traces = [str(FIXTURES / "gpu" / f"{s}.bad.json.gz") for s in ("data", "compile")]
    traces.append(str(FIXTURES / "kineto" / "tracelens_b200_eager_trace.json.gz"))
    r = CliRunner().invoke(main, [command, *traces])
    assert r.exit_code == 0, r.output
    assert [x for x in r.stdout.splitlines() if len(x) > 100 and x not in traces] == []


# Real inductor names from the corpus's torch.compile traces: the op list runs to 100+
# characters; only the tail tells these two apart.
LONG_A = ("triton_poi_fused__to_copy_arange_cat_clone_cos_div_expand_mul_pow_reciprocal_select_"
          "sin_split_unsqueeze_view_12")
LONG_B = LONG_A[:-3] + "_3"


def _inductor_trace():
    import traceread
    from traceread.synth.scenarios import MS, US, TraceBuilder

    b = TraceBuilder()
    for s in range(3):   # back-to-back kernels: GPU-bound, the top kernel quoted in the verdict
        t0 = s * 10 * MS
        b.step(s, t0, 10 * MS)
        for j in range(25):
            ts = t0 + j * 400 * US
            b.op_with_kernel("aten::add", ts, 30 * US, 10 * US, 10 * US, ts + 50 * US, 399 * US,
                             name=LONG_A if j % 2 else LONG_B)
    return traceread.analyze(b.build())


def test_inductor_names_shorten_to_their_tail_on_the_terminal_and_stay_whole_in_json():
    from traceread.render import safe

    assert safe.short(LONG_A, 40) == "triton_poi_fused__to_copy_arange_cat…_12"
    assert safe.short(LONG_B, 40).endswith("…_3") and len(safe.short(LONG_B, 40)) == 40
    assert safe.short("void at::native::" + "x" * 80, 30).endswith("x…")   # others: cut at the end
    a = _inductor_trace()
    text = a.report("text")
    body = text.split("To do")[0]
    assert LONG_A not in body and LONG_B not in body
    assert "top kernel 52.0% of GPU time: triton_poi_fused__to_copy_arange_cat_…_3" in body
    rows = [x for x in text.splitlines() if x.strip().startswith(("52.0%", "48.0%"))]
    assert len(rows) == 2 and rows[0].endswith("…_3") and rows[1].endswith("…_12")
    assert all(len(x) <= 100 for x in text.splitlines() if "triton_" in x and "ncu" not in x)
    # a command quoting the name keeps it whole (it is copied); JSON keeps every name whole
    assert "ncu --kernel-name regex:^triton_poi_fused__to_copy_arange_cat_clone_cos" in " ".join(text.split())
    d = a.to_dict()
    assert {k["name"] for k in d["kernels"]} == {LONG_A, LONG_B}
    assert d["verdict"]["evidence"]["top_kernel"] == LONG_B
