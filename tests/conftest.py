"""Shared test helpers: where the real-artifact corpus and the fixtures live."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# ../shared/corpus beside the checkout (see the project brief); absent on most machines.
# TRACEREAD_CORPUS names it elsewhere (a git worktree one folder deeper, a CI cache).
CORPUS = Path(os.environ.get("TRACEREAD_CORPUS") or
              Path(__file__).resolve().parents[2] / "shared" / "corpus")


GOLDEN = CORPUS.parent / "golden"
CORPUS_HINT = (f"put the shared corpus at {CORPUS} (with MANIFEST.tsv) and the nsys goldens at "
               f"{GOLDEN} to run it: README, 'Run the tests'")


def corpus_or_skip() -> Path:
    """The corpus directory, or skip the calling test when it is not there."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(f"corpus not found: {CORPUS_HINT}")
    return CORPUS


# The default run leaves these out (`-m slow` runs them): the slowest of the default run, each
# 3 s or more of one core (pytest --durations, 2026-11-29), and a faster test covers the same
# code path in the default run (named after the #). Keep the list sorted by file.
# (Corpus sweeps split by trace size are marked in their files: test_analyze_corpus,
# test_overlay_rules and test_replay run the small traces by default, the big ones with -m slow.)
SLOW = {
    "test_batch.py::test_run_rows_errors_and_ranks": 13.2,          # test_batch: other batch runs
    "test_batch_parent.py::test_results_from_the_workers_files_are_the_files_analysed_here": 21.3,  # its rows-only twin (busy box)
    "test_benchmarks.py::test_gpubox_tables_at_tiny_sizes": 52.3,   # a benchmark: its own command
    "test_benchmarks.py::test_trace_analyze_over_info_and_serial_against_a_baseline_dir": 10.3,  # test_trace_read_example_against_a_baseline_dir
    "test_benchmarks.py::test_trace_with_bytecode_cached_labels_its_rows": 8.9,  # test_trace_read_example_against_a_baseline_dir
    "test_dask.py::test_dask_same_as_local": 12.1,                  # a local Dask cluster
    "test_diff.py::test_directory_diff_matches_files_by_relative_path": 15.2,
    "test_diff.py::test_real_recorded_dataloader_pair": 14.1,       # test_everyday_round4's diff
    "test_diff.py::test_real_hta_trace_diff_pair": 5.5,            # test_diff_gpu's real pairs
    "test_anatomy_pairs.py::test_gradient_clipping_before_a_log_call_is_training_not_logging": 2.8,  # records a torch trace; test_logging_costs_the_metrics_it_logs_not_the_log_call_alone
    "test_diff.py::test_an_undisturbed_pair_is_judged_and_a_gpu_traces_ops_are_not_read_for_stalls": 1.5,  # test_a_capture_descheduled_mid_op_is_not_judged
    "test_diff_same_job.py::test_batch_outputs_of_different_jobs_warn_too": 6.2,  # test_world_size_and_gpu_differences_are_named
    "test_diff_same_job.py::test_hta_trace_diff_pair_is_not_judged": 4.1,  # test_a_promise_across_different_gpus_is_not_judged
    "test_benchmarks.py::test_cuts_on_the_example_against_a_baseline_dir": 3.5,  # test_trace_read_example_against_a_baseline_dir
    "test_diff.py::test_real_nsys_mfu_pair": 7.0,                  # test_job_model's nsys diffs
    "test_diff_batch.py::test_batch_diff_equals_the_diff_of_the_traces": 12.3,
    "test_diff_batch.py::test_real_kineto_num_workers_0_vs_4_batch_outputs": 7.6,  # by path
    "test_everyday.py::test_parquet_a_user_reads_has_null_not_minus_one_for_unknowns": 16.4,
    "test_html.py::test_every_html_page_lays_out_at_1280_and_800_px_in_headless_chromium": 10.0,  # round4's pages
    "test_hardening.py::test_batch_limits_make_error_rows": 14.7,
    "test_hardening.py::test_batch_rerun_into_same_out_dir": 18.1,
    "test_hardening.py::test_batch_with_fifo_finishes_and_reports_it": 18.6,
    "test_hardening_limits.py::test_gzip_whitespace_bomb_default_cap": 9.2,  # test_gzip_bomb_capped_with_override
    "test_hardening_round3.py::test_batch_keeps_every_odd_name_in_every_output": 19.1,
    "test_hardening_round3.py::test_multi_trace_analyze_of_odd_names[text]": 13.1,  # [json]
    "test_hardening_round3.py::test_one_line_trace_full_of_fake_boundaries_is_linear": 32.8,
    "test_job_model.py::test_diff_of_two_real_two_gpu_exports": 6.3,  # its multi-process twin
    "test_mfu_gpu_time.py::test_no_corpus_trace_reports_impossible_figures": 56.9,  # its spill-over twin
    "test_multirank_synth.py::test_no_seq_offsets_straggler[64-37]": 3.6,  # [8-5]: the same path at 8 ranks
    "test_multirank_gloo.py::test_pipeline_stage_ratio_is_one_figure": 2.8,  # test_stage_compute_is_the_mean_per_step_in_both
    "test_multirank_gloo.py::test_a_straggler_in_cpu_operators_runs_extra_ones_or_the_same_slower": 2.6,  # test_cpu_operators_extra_or_slower_by_calls
    "test_real_h200.py::test_batch_splits_a_multi_process_export_into_its_job": 6.3,  # test_gloo_straggler_found_from_where_threads_wait
    "test_notebooks.py::test_notebook_runs[batch_walkthrough.ipynb]": 37.7,  # its source: round4
    # two real pair analyses; test_anatomy_pairs covers the anatomy change it prices
    "test_predictions.py::test_a_pair_whose_only_change_is_the_anatomys_gets_its_promise": 6.0,
    # the two plain-run nsys captures of h200/queue analysed once for the module (5.7 s):
    # test_pageable_reads' nsys test covers the same path on the pageable pair
    "test_queue_pair.py::test_the_plain_fixed_run_is_paced_by_its_gpu_not_its_host_timing": 5.7,
    "test_queue_pair.py::test_the_sync_costs_the_gpu_tens_of_microseconds_a_step_not_the_inner_gaps": 0.1,
    "test_queue_pair.py::test_drop_syncs_promise_holds_against_the_plain_runs_program_steps[nsys]": 0.5,
    "test_queue_pair.py::test_drop_syncs_promise_holds_against_the_plain_runs_program_steps[kineto]": 1.3,
    "test_nsys_cli.py::test_one_gap_has_one_start_in_gaps_and_idle": 1.1,  # test_text_times_are_relative_to_trace_start (idle split per process)
    "test_nsys_corpus.py::test_corpus_nsys_cli_info_analyze[GindaChen__nsys-ai/tests/fixtures/h100_2gpu_1s.sqlite]": 2.8,  # [mfu_2gpu_before.sqlite]; test_multirank_waits::test_real_nsys_ai_2gpu_cannot_tell (its job)
    "test_nsys_corpus.py::test_corpus_nsys_cli_info_analyze[GindaChen__nsys-ai/tests/fixtures/mfu_2gpu_after.sqlite]": 3.4,  # [mfu_2gpu_before.sqlite]; test_job_model's CLI diff of the pair
    "test_scale.py::test_batch_parent_keeps_per_rank_records_not_event_tables": 41.2,  # test_cross_rank_pass_memory_grows_linearly
    "test_scale.py::test_pipeline_pass_memory_grows_linearly": 6.4,  # test_pipeline_reports_no_rank_absent_from_a_pair_it_was_never_in
    "test_scale.py::test_batch_on_dask_shows_the_progress_bar_too": 4.7,  # test_batch_shows_a_progress_bar_only_on_a_terminal
    "test_side_passes.py::test_levers_priced_on_forked_workers_equal_in_process[gpu/compile.bad.json.gz]": 3.0,  # [h200/xformer.bad.json.gz]
    "test_stream.py::test_fixtures_stream_equals_small_path[tracelens_b200_eager_trace.json.gz]": 7.8,  # the other fixtures
    "test_stream.py::test_corpus_stream_equals_small_path[mtia_rank_0.json.gz]": 5.6,  # the other corpus picks
    # the default run reached 5.6 of its 6 minutes (this session): four more whose path a
    # sibling covers
    "test_stream.py::test_corpus_stream_equals_small_path[google_owlv2-large-patch14-ensemble__101]": 2.0,  # the other corpus picks
    "test_stream.py::test_corpus_stream_equals_small_path[control.json.gz]": 1.5,  # the other corpus picks
    "test_queued.py::test_gap_labels_agree_with_the_rule[facebookresearch__HolisticTraceAnalysis/tests/data/ns_resolution_trace/rank-0*.json.gz-0.504]": 3.0,  # the other four rule traces
    "test_hardening_round4.py::test_hostile_pickled_dump_is_refused_fast[deep_list]": 1.8,  # [many_entries]
    "test_torch_compile_real.py::test_aot_eager_recompile_found_in_step": 12.5,
    "test_torch_compile_real.py::test_training_graph_break_and_lazy_backward_compile": 15.3,
    # the default run reached 6.1 minutes in a clean clone (2026-11-29, second session): eleven
    # more whose path a sibling covers
    "test_job_model.py::test_diff_of_two_multi_process_exports_is_rank_by_rank_and_as_a_job": 3.4,  # its batch-output twin
    "test_parallelism.py::test_a_1f1b_first_stage_with_few_microbatches_reports_the_jobs_schedule": 3.4,  # test_pipeline_job
    "test_batch.py::test_no_dask_without_scheduler": 2.4,             # test_local_pool_matches_serial
    "test_batch.py::test_fsspec_url": 1.6,                            # test_local_pool_matches_serial
    "test_everyday.py::test_an_nsys_page_without_steps_draws_no_step_time_bar": 2.7,  # test_html's nsys pages
    "test_rank_pairs.py::test_diff_sees_the_nsys_recompiles_go": 1.9,  # its module-loads twin
    "test_rank_pairs.py::test_diff_sees_one_sync_a_step_go_on_nsys": 1.6,  # test_diff_gpu's nsys pairs
    "test_outputs_safety.py::test_failed_batch_write_keeps_the_previous_run": 4.2,  # the overlay's twin
    "test_overlay.py::test_real_corpus_nsys_pair_overlays": 2.2,      # the Kineto overlay's
    "test_diff_gpu.py::test_batch_outputs_of_the_real_pairs_diff_like_the_traces": 2.3,  # test_diff_batch
    # the default run reached 6.1 minutes in CI (2026-11-30, stop 50: 366 s): the heaviest
    # tests whose path a sibling covers (seconds: this box under a load of ~8, ~5x CI's)
    "test_job_model.py::test_every_entry_point_gives_the_same_job": 41.2,  # test_multirank_synth::test_batch_verdicts_match_analyze (back in the default run)
    "test_lever_matrix.py::test_every_lever_offered_where_its_facts_hold_withdrawn_where_not[num_workers]": 35.9,  # the DataLoader fixtures' lever tests
    "test_namerx.py::test_prefilter_gives_the_answers_of_re": 24.8,  # test_namerx's per-pattern cases
    "test_namerx.py::test_a_pattern_made_again_is_the_same_one": 7.9,  # its cache tests
    "test_scale.py::test_cross_rank_pass_memory_grows_linearly": 21.5,  # benchmarks multirank
    "test_scale.py::test_batch_shows_a_progress_bar_only_on_a_terminal": 15.4,  # test_batch's CLI runs
    "test_hardening_limits.py::test_batch_symlink_loops_keep_other_results": 19.1,  # test_batch_failure_says_why_on_stderr
    "test_diff_batch.py::test_fail_if_slower_on_batch_outputs": 15.8,  # test_diff's --fail-if-slower
    "test_everyday_round4.py::test_diff_text_and_html_promise_the_same_figure": 15.2,  # test_diff's html
    "test_hardening_round4.py::test_batch_never_drops_a_trace_named_like_its_outputs": 14.2,  # round3's earlier-output folder
    "test_rank_spill.py::test_batch_parent_keeps_spilled_records": 13.2,  # the spill unit tests
    "test_multirank_program_step.py::test_kernel_excess_of_a_job_without_steps_is_not_per_step": 12.5,  # its no-steps twin
    "test_everyday.py::test_a_faster_diff_is_green_and_a_slower_one_red": 12.0,  # test_diff's exit codes
    "test_everyday.py::test_text_is_wrapped_once_at_the_terminal_width[60]": 11.9,  # [80]
    "test_everyday.py::test_output_format_follows_the_suffix": 11.1,  # test_analyze's CLI formats
    "test_everyday.py::test_idle_lists_50_gaps_by_default_like_gaps": 8.5,  # test_analyze's idle
    "test_everyday.py::test_the_path_header_is_never_cut_on_a_narrow_terminal": 7.5,  # test_report_width's long headers
    "test_diff_gpu.py::test_fail_if_slower_catches_the_reverted_fix": 10.6,  # test_diff's --fail-if-slower
    "test_batch.py::test_cli_all_good_exits_zero": 9.2,               # test_cli_outputs
    "test_hardening_round3.py::test_second_batch_into_its_own_subfolder": 10.0,  # test_batch_over_a_folder_holding_an_earlier_output
    "test_hardening_round3.py::test_multi_trace_analyze_of_odd_names[json]": 9.2,  # [text]
    "test_hardening_round3.py::test_html_output_of_an_undecodable_name[diff]": 6.3,  # [analyze]
    "test_multirank_waits.py::test_cli_prints_cannot_tell": 9.8,     # its verdict's unit tests
    "test_hardening_round4.py::test_no_name_forges_a_line_or_a_control_in_text_output[flame]": 8.1,  # [analyze]
    "test_hardening_round4.py::test_no_name_forges_a_line_or_a_control_in_text_output[idle]": 7.9,  # [analyze]
    "test_hardening_round4.py::test_no_name_forges_a_line_or_a_control_in_text_output[steps]": 6.8,  # [analyze]
    "test_report_width.py::test_other_text_commands_fit_100_columns[idle]": 6.7,  # [steps]
    "test_host_work_kind.py::test_timesformer_h100_names_the_video_preprocessing": 1.1,  # test_the_frame_holding_the_time_is_named_not_the_scripts_body
    "test_window_steps.py::test_a_compiled_model_called_once_a_forward_is_not_told_to_call_it_less": 2.5,  # test_levers::test_compiled_calls_are_counted_per_forward_pass
    "test_batch_projection.py::test_a_pipeline_stages_waits_grow_with_the_batch": 1.1,  # new (audit12)
}


def pytest_collection_modifyitems(config, items):
    """Mark the SLOW tests slow (the default run, ``-m 'not slow'``, deselects them)."""
    for item in items:
        key = f"{Path(str(item.fspath)).name}::{item.name}"
        if key in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every skip for a missing corpus or golden says where they go (some tests word it
    their own way: "corpus absent", "not in the corpus")."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        path, line, reason = rep.longrepr
        if ("corpus" in reason or "golden" in reason) and str(CORPUS) not in reason:
            rep.longrepr = (path, line, f"{reason}: {CORPUS_HINT}")


# One analysis per trace file and test process (each xdist worker), shared by every test that
# asks: the committed fixtures and the corpus traces are analysed by many test files (the
# report width, the replay, the planted causes, the what-if pairs, ...), each ~0.5 s of one
# core. The result is read-only: a test that changes an Analysis (a job verdict replaces
# ``a.verdict``) analyses its own copy with traceread.analyze.
_ANALYSED: dict = {}


def analysed(path, **kwargs):
    """``traceread.analyze(path, **kwargs)`` of a file, computed once per test process (keyed
    by the path as spelt: the report's header prints it)."""
    key = (str(path), tuple(sorted(kwargs.items())))
    if key not in _ANALYSED:
        import traceread

        _ANALYSED[key] = traceread.analyze(str(path), **kwargs)
    return _ANALYSED[key]


@pytest.fixture(scope="session")
def gpu_sqlite(tmp_path_factory) -> Path:
    """The committed nsys exports of fixtures/gpu (``*.sqlite.xz``), decompressed once per test
    process into one folder (their analyses then share ``analysed``): read them, never write."""
    import lzma
    import shutil

    out = tmp_path_factory.mktemp("gpu_sqlite")
    for xz in sorted((FIXTURES / "gpu").glob("*.sqlite.xz")):
        with lzma.open(xz) as src, open(out / xz.name[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


@pytest.fixture
def corpus_dir() -> Path:
    return corpus_or_skip()


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def materialise(trace, how: str, tmp_path: Path, name: str):
    """A builder-made trace as the analysis sees it: the table itself ("table"), read back
    from Kineto JSON of an era ("kineto-2.4", "kineto-1.8") or from an nsys export ("nsys")."""
    from traceread import load
    from traceread.synth import scenarios as sc
    from traceread.synth.kineto import write_kineto

    if how == "table":
        return trace
    if how.startswith("kineto"):
        p = tmp_path / f"{name}.json"
        write_kineto(trace, p, era=how.split("-")[1])
    else:
        p = tmp_path / f"{name}.sqlite"
        sc.write_nsys(trace, p)
    return load(p)
