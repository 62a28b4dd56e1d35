"""The JSON contract of every command, as msgspec structs: the single source of the schema.

``docs/schema/<command>.schema.json`` is generated from these structs
(``python -m traceread.schema docs/schema``); the tests check that the files are
current and validate every command's JSON output against them. Each object
document carries ``schema_version`` (``SCHEMA_VERSION``; bump the minor for
added keys, the major for removed or changed ones).

``kernels``, ``api``, ``gaps``, ``memcpy``, ``nvtx``, ``osrt`` and ``util`` print what
``nsys stats --format json`` prints (a list of rows keyed by nsys's column names), so they
stay lists and each row carries the version; the same figures appear in ``analyze``
under snake_case keys.

Structs forbid unknown fields: a key added to an output without adding it here
fails the schema tests, so the published schema cannot drift from the code.
"""
from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any, Optional

import msgspec
from msgspec import Struct, field

SCHEMA_VERSION = "2.1"   # 2.0: several inputs give {schema_version, traces} (analyze: + cross_rank), never a list
# 2.1: analyze: + facts (the record the verdict was judged on), verdict.actions[].because


class _S(Struct, kw_only=True, forbid_unknown_fields=True):
    pass


IntMap = dict[str, int]


# --- analyze -------------------------------------------------------------------------


class TraceInfo(_S):
    path: str
    format: str
    format_version: str
    producer: str
    rank: int
    world_size: int
    events: int
    span_ns: int
    devices: list[dict[str, Any]]
    # a trace cut short: truncated_at_byte, bytes_recovered, share_of_file, events_recovered...
    truncated: Optional[dict[str, Any]] = None
    # impossible rows dropped or trimmed by traceread.readers.validate: {rule: rows} (else null)
    impossible: Optional[dict[str, int]] = None
    # processes whose activity never overlaps and lies over 60 s apart, the gap longer than
    # either side records (traceread.readers.validate): {gap_ns, before/after: {pids, span_ns}}
    processes_apart: Optional[dict[str, Any]] = None


class StepStats(_S):
    count: int
    total_ns: int
    mean_ns: int
    median_ns: int
    p90_ns: int
    min_ns: int
    max_ns: int
    stddev_ns: int
    cv: float
    bursty: bool


class StepItem(_S):
    step: int
    name: str
    pid: int
    tid: int
    start_ns: int
    end_ns: int
    dur_ns: int
    gpu_start_ns: int
    gpu_end_ns: int
    gpu_ops: int
    busy_ns: int
    idle_ns: int                    # idle of the gaps whose closing op this step launched
    gaps: int
    idle_by_cpu: IntMap
    idle_in_span_ns: int            # idle inside this step's own CPU span (analysis.md §2)
    # the step the program waits on (passes/steps.program_columns): the GPU's work for the
    # step (less what overlaps the previous step's), the later of it and the host's span,
    # and which of the two bounds the step ("host" / "gpu")
    gpu_ns: Optional[int] = None
    program_ns: Optional[int] = None
    bound_by: Optional[str] = None


class ProgramStep(_S):
    """The step the program waits on (passes/steps.program_step), over the analysed steps."""
    mean_ns: int
    median_ns: int
    host_mean_ns: int               # the host's span
    gpu_mean_ns: int                # the GPU's work per step
    bound_by: str                   # host | gpu: what bounds most steps
    gpu_bound_steps: int
    steps: int
    host_ahead_ns: int              # mean (program - host span) over the GPU-bound steps
    cv: float                       # of the program steps (StepStats.cv)
    bursty: bool                    # StepStats.bursty, of the program steps


class Steps(_S):
    source: str
    pattern: str
    count: int
    stats: Optional[StepStats]
    items: list[StepItem]
    program: Optional[ProgramStep] = None


class Device(_S):
    pid: int
    device: int
    name: str
    window_start_ns: int
    window_end_ns: int
    window_ns: int
    busy_ns: int
    idle_ns: int
    idle_pct: float
    gaps: int


class Gap(_S):
    start_ns: int
    end_ns: int
    duration_ns: int
    pid: int
    device: int
    step: int
    drain: str
    drain_op: Optional[str]
    cpu: str
    by_cpu: IntMap
    queued_ns: int = 0              # ns of the gap after its closing op's launch returned
    waited_on: Optional[str] = None  # queued gaps: what the GPU waited on (analysis.md §3)


class Gaps(_S):
    total_idle_ns: int
    count: int
    min_gap_ns: int
    listed: int
    listed_ns: int
    largest: list[Gap]


class SyncOp(_S):
    ns: int
    gaps: int


class DeviceAttribution(_S):
    pid: int
    device: int
    idle_ns: int
    by_cpu: IntMap
    by_drain: IntMap


class TopOp(_S):
    name: str
    category: str
    ns: int
    count: int


class Attribution(_S):
    by_cpu: IntMap
    by_drain: IntMap                # idle ns by gap label (sync / starved / queued): sums to idle
    drain_x_cpu: dict[str, IntMap]
    by_sync_op: dict[str, SyncOp]
    devices: list[DeviceAttribution]
    top_ops: list[TopOp]
    host_late_queued_ns: int = 0    # of the host-late gaps, the tails the GPU sat with the op queued


class CommDevice(_S):
    pid: int
    device: int
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    exposed_ns: int
    overlap_pct: float
    comm_kernels: int
    compute_kernels: int


class Collective(_S):
    collective: str
    count: int
    total_ns: int
    exposed_ns: int
    avg_ns: Optional[float]
    msg_bytes: int
    sized: int
    avg_msg_bytes: Optional[float]
    algbw_gbps: Optional[float]
    busbw_gbps: Optional[float]
    group_size: int


class Nccl(_S):
    comm_ns: int
    exposed_ns: int
    overlap_ns: int
    overlap_pct: float
    devices: list[CommDevice]
    by_collective: list[Collective]


class CompileFrame(_S):
    frame: str
    compiles: int
    recompiles: int
    compile_ns: int
    steps: list[int]
    compile_ids: list[str]
    compiled_autograd: bool
    regions_seen: list[str]


class GraphBreak(_S):
    """A frame whose compiled region ran another frame's (its resume function after a graph break)."""

    frame: str
    resumes: str
    calls: int


class CompileCounts(_S):
    """Compile counts of the whole trace (``passes.compile.compile_counts``)."""

    compiles: int
    recompiles: int
    graph_breaks: int


class Compile(_S):
    compiles: int
    recompiles: int
    compile_ns: int
    cache_lookup_ns: int
    frames: list[CompileFrame]
    cache_lookups: int = 0
    idle_overlap_ns: int = 0
    gpu_ops: bool = False
    episodes: int = 0
    compiled_region_calls: int = 0
    cudagraph_record_ns: int = 0
    graph_breaks: int = 0           # distinct (frame, resume frame) pairs seen running
    graph_break_calls: int = 0      # times a resume frame's region ran inside its frame's
    breaks: list[GraphBreak] = []
    scope: Optional[str] = None     # analyze: "window" or "whole_trace" (what the counts cover)
    whole_trace: Optional[CompileCounts] = None   # analyze: the whole trace's counts


class Kernel(_S):
    name: str
    total_ns: int
    instances: int
    avg_ns: int
    med_ns: int
    min_ns: int
    max_ns: int
    stddev_ns: int
    pct: float


class KernelClass(_S):
    cls: str = field(name="class")
    total_ns: int
    pct: float
    instances: int


class Action(_S):
    """One item of the verdict's ranked to-do list: a lever and the time pulling it gives
    back (the what-if model, docs/analysis.md "What each lever would save")."""

    id: str                             # the lever table's row (passes/levers.py)
    lever: str
    cost: str                           # free / code / infra
    cause: str                          # the score it saves; "gpu": GPU busy time
    saves_ns: Optional[int]             # null: no estimate (ranked after those with one)
    saves_pct: Optional[float]          # of the GPU's window (saves_pct_of says otherwise)
    saves_per_step_ns: Optional[int]
    projected_step_ns: Optional[int]
    culprit: Optional[str]
    basis: Optional[str] = None         # "replay": step replayed with the lever; "bound":
    # at most the cause's lost time; "anatomy": the step's phases' own model (no bound)
    # a larger batch: saved per sample (x the old batch); projected_step_ns is the step at
    # per_sample_x times the batch
    per_sample_x: Optional[float] = None
    # "gpu_busy": the projected step stopped at the GPU's busy time per step (a GPU-bound
    # step: idle given back cannot shorten the GPU's own work); "host": at the host's own
    # span per step, the saving cut to reach it (a collective's bound where the host ran a
    # whole step ahead)
    projected_floor: Optional[str] = None
    # the facts that made the lever apply (verdict/because.py); a job's own lever has none
    because: list[Because] = []
    # "run": no steps, and the run the replay measured outlasts the GPU's window (host work
    # before its first op): saves_pct is a share of that run
    saves_pct_of: Optional[str] = None
    # a rank waiting on the job's straggler: its communication lever less that wait (over
    # the window; jobs/multirank/verdicts.py), which no change of its own transfers gives back
    net_of_wait_ns: Optional[int] = None
    # what the replay left unpriced and why (verdict/whatif.kept_note: "not priced: the
    # launching threads' dispatch, X ms a step -- ...")
    note: Optional[str] = None


class Because(_S):
    """One fact an offered lever's predicates read (or the figure that priced it): its value
    (cut to a few items), whether the facts record knew it (``known`` false: the predicate
    took the unknown's default), and its proofs (the record's evidence: ``[]`` read from
    absence; null: the record names no event for it)."""

    fact: str
    value: Any
    known: bool
    evidence: Optional[list[Proof]]


class WhatIf(_S):
    saves_ns: int
    saves_pct: Optional[float]
    saves_per_step_ns: Optional[int]
    projected_step_ns: Optional[int]
    models: Optional[list[str]] = None   # levers_together: the whatif models replayed at once
    projected_floor: Optional[str] = None   # "gpu_busy": as Action.projected_floor
    saves_pct_of: Optional[str] = None      # "run": as Action.saves_pct_of


class JobRole(_S):
    """This rank's part in its job's verdict (``multirank/verdicts.py``)."""

    job: str
    role: str                       # "straggler", "waiting", "none"
    summary: str
    late_by_ns: Optional[int] = None
    cause: Optional[str] = None
    basis: Optional[str] = None     # the straggler's: collectives | pipeline | thread_waits
    waits_for: Optional[int] = None
    wait_ns: Optional[int] = None


class Withdrawn(_S):
    """A lever of a cause worth fixing that does not fit this program (verdict/leverkit.py)."""

    id: str
    cause: str
    reason: str                     # the failed precondition's own words, or the replay's
    precondition: str               # its name ("replay": the replay refused the change)
    facts: list[str]                # the facts it read
    # those facts, values and the events that prove them, the deciding (last read) one last;
    # empty for a replay's refusal
    because: list[Because] = []


class BusyPlacement(_S):
    """A busy-time lever the GPU-use section prices (verdict/placement.py): where the to-do
    list carries its change (``in_list``, 1-based), or why it does not (``reason``)."""

    busy: str                           # utilization.busy.levers[].lever
    id: str                             # the lever table's id
    in_list: Optional[int] = None
    reason: Optional[str] = None


class Verdict(_S):
    bound: str
    title: str
    summary: str
    evidence: dict[str, Any]
    levers: list[str]                   # the actions' texts, same order
    actions: list[Action]               # the one ranked to-do list, never cut
    diagnostics: list[str]              # unranked: tools that show more, no saving of their own
    what_if: dict[str, WhatIf]
    missing: list[str]
    job: Optional[JobRole] = None   # ranks of a job only
    withdrawn: list[Withdrawn] = []   # levers that do not fit, with the reason (issue 39)
    busy_placement: list[BusyPlacement] = []   # busy-time levers: in the list where, or why not


class Excluded(_S):
    """A part of the trace left out of the analysis window, and why."""

    what: str
    start_ns: int
    ns: int
    reason: str
    detail: str
    step: Optional[int] = None


class Window(_S):
    mode: str
    start_ns: int
    end_ns: int
    dur_ns: int
    offset_ns: int
    trace_start_ns: int
    trace_end_ns: int
    steps_analysed: int
    steps_total: int
    first_step: Optional[int]
    last_step: Optional[int]
    excluded: list[Excluded]
    note: str


class CopyDirection(_S):
    direction: str
    count: int
    bytes: int
    copy_ns: int
    exposed_ns: int
    gbps: Optional[float]
    pageable: int


class CopyLargest(_S):
    direction: str
    bytes: int
    count: int
    dur_ns: int
    gbps: Optional[float]
    pageable: bool


class Copies(_S):
    """Host<->device copies (``passes/copies.py``); every key defaults for a trace without them."""

    exposed_ns: int = 0
    copy_ns: int = 0
    bytes: int = 0
    count: int = 0
    pageable_ns: int = 0
    pin_saves_ns: int = 0
    pinned_gbps: Optional[float] = None
    by_direction: list[CopyDirection] = []
    largest: Optional[CopyLargest] = None
    pageable_inferred: bool = False


class RecordingSpan(_S):
    name: str
    ns: int
    count: int


class GraphRecording(_S):
    ns: int
    spans: int
    captures: int
    top: list[RecordingSpan]


class GraphReplay(_S):
    graph_id: int
    launch: str
    replays: int
    gpu_ns: int
    mean_ns: int
    nodes: int
    nodes_per_replay: float


class Graphs(_S):
    """CUDA graphs (``passes/graphs.py``); every key defaults for a trace without them."""

    uses_cuda_graphs: bool = False
    launches: int = 0
    first_runs: int = 0          # launches that are a recording's own first run
    replays: int = 0
    mode: Optional[str] = None
    replay_gpu_ns: int = 0
    gpu_busy_ns: int = 0
    replay_share_pct: float = 0.0
    graphs: list[GraphReplay] = []
    recording: Optional[GraphRecording] = None
    recording_whole_trace: Optional[GraphRecording] = None


class Utilization(_S):
    """GPU use (``passes/flops.py``, ``passes/memory.py``, docs/gpu-use.md): typed at its top
    level only; the inner objects belong to those passes and vary with what was recorded."""

    mfu: dict[str, Any]
    busy: dict[str, Any]
    memory: dict[str, Any]
    occupancy: Optional[dict[str, Any]] = None   # passes/occupancy.py: SM coverage, under-filled
    headline: Optional[str] = None


class Optimizer(_S):
    name: str                    # Optimizer.step#<name>.step, or from the torch.optim function
    impl: str                    # "fused" | "foreach" | "for_loop" | "unknown"
    evidence: str


class Dtypes(_S):
    """Precisions of the matrix work (GEMM / convolution / attention kernels, matmul ops)."""

    bf16: bool
    fp16: bool
    fp8: bool
    fp4: bool
    fp32_gemm: bool              # FP32 GEMMs on FMA units (sgemm, _ffma_, float gemv)
    tf32: bool


class KernelArch(_S):
    """The newest cuBLAS/cuDNN kernel family seen (``volta_``, ``sm80_``...): a lower bound."""

    arch: str
    cc: str
    tf32: bool
    bf16: bool
    kernels: int                 # kernels named by a family


class H2dSource(_S):
    """The host->device copies by source memory (``Pinned -> Device``...)."""

    copies: int
    pinned: int
    pageable: int
    unknown: int


class PageableReads(_S):
    """Device->host copies into pageable memory (``passes/preconditions.py``): how many, how
    many held their own call until the copy was done, and the host's time in those calls."""

    copies: int
    waited: int
    waited_ns: int


class StartupPhase(_S):
    """An engine's start-up frames (vLLM / SGLang model runner set-up, graph capture)."""

    frames: list[str]
    ns: int


class StepHeadWait(_S):
    """OS-runtime calls before each step's first launch while the GPU idles (nsys)."""

    per_step_ns: int
    steps: int
    share: float
    calls: list[str]


class StepShapes(_S):
    """Whether the ops' input shapes (record_shapes) differ between the profiler steps."""

    vary: bool
    steps: int


class CompiledCalls(_S):
    """Calls of each torch.compile graph per profiler step."""

    graphs: dict[str, float]
    max: float
    steps: int


class DeviceCaps(_S):
    """What the device can do (``passes/peaks.py: device_caps``); null = not known."""

    name: str
    vendor: Optional[str]        # "nvidia" | "amd"
    cc: Optional[str]            # compute capability, "9.0"
    arch: Optional[str]
    sm_count: Optional[int]
    bf16: Optional[bool]
    tf32: Optional[bool]
    fp8: Optional[bool]
    caps_from: Optional[str] = None   # "kernel names (volta_)": unknowns filled from kernel_arch


class FactEvidence(_S):
    """One event that proves a program fact (passes/factkit.item)."""

    name: str
    ts_ns: Optional[int]         # start on the trace clock; null: a figure over many events
    step: Optional[int]          # ProfilerStep number it lies in
    detail: str


class BlockingKind(_S):
    per_step: float
    mid_step_per_step: float     # followed by more GPU work in the step: splits the step
    explicit: bool               # the user wrote a sync (.item(), synchronize) vs implied one
    name: str                    # the outermost op of the first such call


class Blocking(_S):
    """Every call that blocks the host on the GPU (passes/blocking.py)."""

    blocking_per_step: float
    mid_step_per_step: float
    by_kind: dict[str, BlockingKind]   # item, tolist, cpu, synchronize, condition, nonzero, ...
    dynamic_shapes_per_step: float
    dynamic_shapes: dict[str, float]
    capturable: Optional[bool]   # null: no GPU work in the trace
    not_capturable_because: list[FactEvidence]


class CopyPayload(_S):
    """What host<->device copies carry (passes/payload.py)."""

    payload: str                 # checkpoint|metrics|gradients|parameters|input_batch|resent|unknown
    what: str
    direction: str
    count: int
    per_step: float
    bytes_per_step: int
    copy_ns: int
    site: Optional[str]          # the user's file:line, else the op


class OptimizerOffload(_S):
    steps: int
    grads_per_step: float
    params_per_step: float
    ns_per_step: int             # first gradient copy out to last parameter copy back
    optimizer: str
    transport: str               # "device": host<->device copies; "host": no GPU in the trace


class OtherProcess(_S):
    device: int
    processes: list[int]


class DataloaderRestarts(_S):
    """The DataLoader's workers started again at an epoch's start (passes/dataloader.py)."""

    restarts: int
    restart_ns: int              # the training thread's time: epoch's last call to the next's first
    shutdown_ns: int             # of it, the epoch's last calls (the workers joined)
    spans: list[list[int]]       # [start_ns, end_ns] of each restart
    steps: list[int]             # the step each began in (-1: outside every step)
    period: Optional[int]        # steps between restarts, when evenly spaced (an epoch)
    startup_spans: list[list[int]] = []   # the new workers' start-up in each next first call
    startup_ns: int = 0          # their sum (not in restart_ns)


class Sdpa(_S):
    backend: str                 # flash | mem_efficient | cudnn | fused | math
    explicit_mask: Optional[bool]
    calls_per_step: float


class PeriodicStall(_S):
    period: Optional[int]        # steps between stalls; null: one stall
    stalled_steps: list[int]
    steps_seen: int
    median_step_ns: int
    excess_ns_per_stall: int
    op: Optional[str]
    what: str                    # checkpoint | eval | flush | other
    stalls_in_window: int = 0    # of the stalled steps, those in the analysed window


class AnatomyPhase(_S):
    host_ns: int                 # the step's wall time in the phase (mean, ordinary steps)
    gpu_ns: Optional[int]        # GPU ops launched in it; null: no GPU traced


class AnatomyMicroBatches(_S):
    per_optimizer_step: int      # backward passes between two optimizer steps
    basis: str                   # "optimizer steps" | "profiler steps"
    host_ns_each: int            # forward + backward host time of one micro-batch
    gpu_ns_each: Optional[int]
    flop_host_ns_each: int       # of it, host time inside matmul/conv/attention ops
    syncs_per_micro_batch: float
    sync_ns_per_step: int
    # one micro-batch's loop iteration: a backward pass's end to the next's with no optimizer
    # step between (its forward, loss, backward and .item()); null: not two in a row
    period_ns_each: Optional[int] = None
    # the profiler's cost inside host_ns_each, period_ns_each, flop_host_ns_each
    profiler_ns_each: Optional[dict[str, int]] = None
    # of flop_host_ns_each, the part that does not grow with the batch (CPU traces with
    # shapes, two or more micro-batches): paid once when they merge; null: not read
    flop_fixed_ns_each: Optional[int] = None


class AnatomyRecompute(_S):
    host_ns_per_step: int        # forward re-run inside backward nodes
    gpu_ns_per_step: Optional[int]
    modules: list[str]           # the checkpointed modules (module frames inside backward)
    layers: Optional[int]
    checkpoint_ns_per_step: int  # recompute + the checkpoint hooks, less the forward itself
    share_of_backward: Optional[float]
    # the profiler's cost (passes/overhead.py per op / frame) inside the two figures above
    profiler_ns_per_step: Optional[int] = None
    checkpoint_profiler_ns_per_step: Optional[int] = None


class AnatomyHolds(_S):
    what: str                    # forward_only_passes | save | host_syncs | metric_all_gather | logging | backward_passes | optimizer_steps
    count: int
    host_ns: Optional[int]
    no_grad: Optional[bool] = None   # forward-only passes: grad_mode / eval() frames seen
    profiler_ns: Optional[int] = None   # of host_ns, the profiler's cost (its ops and frames)


class AnatomyOddSteps(_S):
    steps: list[int]
    period: Optional[int]        # null: one step, or no common difference
    excess_ns: int               # over the ordinary step (mean of these - median of those)
    held_ns: Optional[int]       # the host time of what it holds (null: a piece untimed)
    cost_ns: int                 # held_ns capped by the excess (the excess without it)
    per_step_ns: int             # the cost per step of its period (or of the steps seen)
    ordinary_step_ns: int
    holds: list[AnatomyHolds]    # empty: slower with the same contents
    profiler_ns: Optional[int] = None   # of per_step_ns, the profiler's (null: work untimed)
    # the host phase that grew most over the ordinary steps, where it holds >= half the
    # excess (data, forward, backward, optimizer, other); null: none does
    grew_phase: Optional[str] = None
    grew_ns: Optional[int] = None


class AnatomyInference(_S):
    batch: int                   # leading dim of each step's largest linear / conv input
    tokens_per_row: float
    request_ns: int              # step start to the later of its host end and its GPU work's end
    forward_host_ns: int
    flop_host_ns: int
    decode_steps: Optional[int]  # one token a row (with prefill steps beside)
    prefill_steps: Optional[int]
    prefill_ns: Optional[int] = None
    decode_ns: Optional[int] = None
    gpu_ns: Optional[int] = None  # GPU work a request launched (None: no GPU in the trace)
    data_host_ns: Optional[int] = None  # host time in the data phase (DataLoader batches)


class Anatomy(_S):
    """The step's anatomy (``passes/anatomy.py``), over every profiler step of the trace."""

    steps_seen: int
    ordinary_steps: int
    root_module: Optional[str]
    phase_source: str            # "module frames" | "operators"
    gpu_traced: bool
    training: Optional[bool]     # null: no framework op traced (nsys without torch ranges)
    phases: dict[str, AnatomyPhase]   # data, forward, backward, optimizer, other
    step_ns: int                 # ordinary step (mean)
    mean_step_ns: int            # every step
    per_step: list[dict[str, Any]]   # the first 128 steps: step, dur_ns, host_ns/gpu_ns by phase, passes, syncs
    passes: dict[str, float]
    micro_batches: Optional[AnatomyMicroBatches]
    recompute: Optional[AnatomyRecompute]
    odd_steps: list[AnatomyOddSteps]
    inference: Optional[AnatomyInference]
    # an evaluation, log call or save that EVERY training step holds (no step lacks it to
    # compare with): shaped as odd_steps, period 1, its own host time its cost
    every_step: list[AnatomyOddSteps] = []
    # the profiler's cost per step (its recorded ops and frames on the step's thread): the
    # ordinary steps', every step's (passes/anatomy.without_profiler takes it out)
    profiler_step_ns: Optional[int] = None
    mean_profiler_step_ns: Optional[int] = None


class HostOp(_S):
    name: str
    ns: int
    share: float


class CpuOnly(_S):
    """What a trace with no GPU work holds (passes/newfacts.cpu_only)."""

    cut_before_gpu: bool         # launches and no kernel, or a cut file whose header names a GPU
    launches: int
    truncated: bool
    span_ns: int
    compile_ns: int
    compile_share: float
    dataloader_ns: int
    dataloader_share: float      # of the steps' time (of the span without steps)
    step_mean_ns: Optional[int]
    top_ops: list[HostOp]
    window_without_gpu: Optional[bool] = None   # the trace has GPU work, the window none


class Context(_S):
    """What the trace already does (``passes/context.py``, ``passes/program.py``; every rule in
    docs/analysis.md "Levers that fit what the trace already does"). ``*_evidence``: the event
    name (op, annotation, python frame, kernel) that proves the key; null when it is false."""

    uses_cuda_graphs: bool
    training: bool
    training_evidence: Optional[str]
    fused_optimizer: bool
    dataloader_workers: bool
    dataloader_single: bool
    pytorch: bool
    api_traced: bool
    host_traced: bool
    allocator_uncached: bool
    device_frees: int            # device-memory frees (cudaFree, cuMemRelease...) in the window
    framework: list[str]         # ddp, fsdp1, fsdp2, deepspeed, megatron, torchrec, vllm, ...
    framework_evidence: dict[str, str]
    collectives: list[str]       # all_reduce, all_gather, reduce_scatter, all_to_all, ...
    collectives_evidence: dict[str, str]
    comm_backend: Optional[str]  # nccl | rccl | gloo | mpi
    comm_backend_evidence: Optional[str]
    optimizer: Optional[Optimizer]
    compiled: bool
    compiled_evidence: Optional[str]
    compile_mode_graphs: bool    # torch.compile's CUDA graph trees (mode="reduce-overhead")
    compile_mode_graphs_evidence: Optional[str]
    dtypes: Dtypes
    dtypes_evidence: dict[str, str]
    fused_attention: bool
    fused_attention_evidence: Optional[str]
    convolutions: bool
    convolutions_evidence: Optional[str]
    # exact when recorded, else the format's era: ">=2.4", "1.8-1.9", "<2.0" (dated before 2.0)
    torch_version: Optional[str]
    torch_version_evidence: Optional[str]
    steps_seen: int              # ProfilerStep rows in the window (1 without any): the divisor
    ddp_buffer_broadcast_ns: int  # per step
    syncs_per_step: float
    per_param_syncs: bool
    per_param_syncs_evidence: Optional[str]
    # program facts of passes/newfacts.py; their evidence is in the facts block's evidence
    cpu_only: Optional[CpuOnly] = None
    blocking: Optional[Blocking] = None
    capturable: Optional[bool] = None
    stacks_traced: Optional[bool] = None   # Python frames recorded (with_stack=True)
    dynamic_shapes_per_step: Optional[float] = None
    copy_payloads: list[CopyPayload] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    optimizer_offload: Optional[OptimizerOffload] = None
    other_process: Optional[OtherProcess] = None
    dataloader_restarts: Optional[DataloaderRestarts] = None
    gemm_precision_ns: dict[str, int] = field(default_factory=dict)   # fp8/bf16/fp16/tf32/fp32
    autocast: Optional[str] = None               # bf16 | fp16
    convolution_ops: Optional[bool] = None       # by operator (aten::conv*), not kernel name
    convolution_ops_per_step: Optional[float] = None
    channels_last: Optional[bool] = None
    sdpa: Optional[Sdpa] = None
    fp16_runs: Optional[bool] = None
    periodic_stall: Optional[PeriodicStall] = None
    anatomy: Optional[Anatomy] = None            # passes/anatomy.py
    graphs_not_replayed: Optional[bool] = None   # set by analysis.py from the graphs pass
    graph_replays: Optional[int] = None   # the graphs pass's replays (no recording's first run)
    device: Optional[DeviceCaps] = None   # set by analysis.py from the trace's metadata
    # the levers' preconditions (passes/preconditions.py, issue 39); evidence in facts.evidence
    kernel_arch: Optional[KernelArch] = None
    fp32_gemv_share: Optional[float] = None
    h2d_source: Optional[H2dSource] = None
    sync_copy_directions: Optional[dict[str, int]] = None
    pageable_reads: Optional[PageableReads] = None
    graph_launches: Optional[int] = None
    startup_phase: Optional[StartupPhase] = None
    compiled_calls_per_step: Optional[CompiledCalls] = None
    step_shapes: Optional[StepShapes] = None
    step_head_wait: Optional[StepHeadWait] = None
    # GPU-idle gaps ending in freshly built GPU code (a driver module load after host work
    # many times its length, in two or more steps): compilation the host did not name
    # (passes/compile.py untraced_compile); absent when none
    untraced_compile_gaps: Optional[int] = None


class SteadyEvidence(_S):
    """One event that proves the window is not the steady state (``passes/steady.py``)."""

    what: str                       # "start-up call", "lazy module load (first launch)", ...
    name: str
    ns: int
    start_ns: Optional[int]
    median_ns: Optional[int]        # the median of the later / other calls it stands out of
    idle_ns: Optional[int] = None   # idle GPU time it covers (all its calls; None: a kernel)
    calls: int = 1


class SampledIds(_S):
    ids: str                        # "External" or "correlation"
    count: int
    median_jump: int
    dropped_pct: float


class SteadyState(_S):
    """Is the analysed window the steady state? (``passes/steady.py``, docs/analysis.md)"""

    state: str                      # "steady", "cold_start", "jit", "sampled"
    ns: int                         # idle time (+ excess first-run kernel time) it explains
    share_pct: float
    evidence: list[SteadyEvidence]
    cold_start_ns: int
    jit_ns: int
    sampled: Optional[SampledIds]
    # idle time of lazy-loading launches (any state): kept out of the steady launch cause
    one_time_launch_ns: int = 0
    one_time_launches: list[SteadyEvidence] = []


class Strategy(_S):
    """One parallel strategy the trace proves (``passes/parallelism.py``, docs/parallelism.md)."""

    kind: str                       # ddp, fsdp, tp, pp, ep
    group_size: Optional[int]       # None: the job has several process groups, none named
    ranks: list[int]
    process_group: Optional[str]
    calls: int                      # comm calls of the strategy's collectives in the window
    evidence: list[str]


class Pipeline(_S):
    """This rank's pipeline stage: busy vs waiting, and the schedule's own bubble."""

    schedule: Optional[str]         # gpipe, 1f1b, interleaved; None: unknown
    stages: Optional[int]
    stage: Optional[int]
    microbatches: Optional[int]
    virtual_stages: int             # stages on this rank (interleaved: v > 1)
    busy_ns: int                    # the stage's traced compute (operators / kernels)
    step_ns: int
    compute_ns: int                 # step - comm waits: the stage's own work, untraced included
    p2p_wait_ns: int                # in the schedule's P2P calls: issue + blocking wait
    other_wait_ns: int              # in other comm calls (barriers, collectives)
    recv_wait_ns: int               # = p2p_wait_ns (older name)
    bubble_pct_by_stage: dict[str, Optional[float]]   # 100 p2p_wait_ns / step_ns
    theoretical_bubble_pct: Optional[float]   # 100 (p-1)/(m+p-1)
    slowest_stage: Optional[int]    # a job's analysis: the stage with the least bubble
    p2p_bytes_per_step: Optional[int]
    schedule_own: Optional[str] = None   # in a job: what this stage read alone, when the job's differs
    steps: Optional[int] = None     # the steps busy/step/compute/wait figures add up


class ExpertParallel(_S):
    """all_to_all traffic of this rank (split sizes recorded with ``record_shapes``)."""

    a2a_ns: int                     # union of the data-moving all_to_all calls in the window
    sent_bytes_per_step: int
    recv_bytes_per_step: int
    send_bytes_by_peer: list[int]
    send_imbalance: Optional[float]  # max / mean of send_bytes_by_peer
    hot_rank: int                   # the peer this rank sends most


class DdpOverlap(_S):
    """Gradient all_reduce overlap with compute."""

    comm_ns: int
    hidden_ns: int
    overlap_efficiency: Optional[float]   # hidden / comm
    exposed_tail_ns: int
    tail_step_share_pct: Optional[float]


class SlowCall(_S):
    """The call furthest above its size regime's fit (over ``SLOW_X`` of it)."""

    ts_ns: int                      # its start, on the trace's clock
    offset_ns: int                  # its start after the analysed window's first event
    bytes: int
    dur_ns: int
    fit_ns: int                     # what the fit predicts for its size


class CommSizeFit(_S):
    bytes: int
    median_ns: int                  # the size's median call
    fit_ns: int
    error_pct: float                # 100 |fit - median| / median
    waited: bool                    # median over 2x the next size's: its calls waited on a peer


class CommFitLimit(_S):
    """The pair of sizes no latency-bandwidth line meets both closely (``fit_limit``)."""

    bytes: list[int]                # the smaller and the larger size
    median_ns: list[int]            # their median calls
    why: str                        # time_falls | per_byte_rises
    floor_pct: float                # no alpha >= 0, beta > 0 line misses both by less


class CommModel(_S):
    """``T = alpha + bus_bytes / beta`` fitted to the trace's own sized collectives, per size
    regime (docs/parallelism.md, "Communication model")."""

    collective: str
    group_size: int
    backend: Optional[str]
    alpha_us: float
    beta_gbps: float                # bus bandwidth (nccl-tests convention)
    fit_error_pct: float            # median |fit - T| / T over the sizes (T: a size's median call)
    worst_error_pct: float          # max |fit - T| / T over the sizes
    by_size: list[CommSizeFit]      # each size's median call, fit and error
    waited_sizes: int               # sizes left out of the fit (waited on a peer)
    min_bytes: int                  # the size regime this line covers
    max_bytes: int
    sizes: int                      # distinct message sizes fitted (waited ones excluded)
    calls: int
    slow_calls: int                 # calls above 2x the fit
    worst_x_fit: float
    slowest_call: Optional[SlowCall] = None   # the worst call when it is above 2x the fit
    link_gbps: Optional[float] = None          # --link-gbps
    link_pct: Optional[float] = None           # 100 beta / link_gbps
    below_link: Optional[bool] = None          # link_pct under 25
    limit: Optional[CommFitLimit] = None   # worst over 20%: the pair of sizes that forbids less


class CommExposure(_S):
    comm_ns: int
    exposed_ns: int                 # not covered by compute
    exposed_pct: Optional[float]


class TpLayer(_S):
    """The k-th TP layer of every analysed step (summed over the steps)."""

    layer: int
    layer_ns: int
    comm_ns: int                    # the all_reduce's movement (+ the host blocked on it)
    exposed_ns: int                 # the part no compute covers: on the critical path
    comm_pct: Optional[float]       # 100 exposed / layer


class TensorParallel(_S):
    """The TP group's all_reduces, per layer (docs/parallelism.md, "Tensor parallel")."""

    layers_per_step: int            # all_reduces per step (the most common count)
    steps: int                      # steps with that count
    layers: list[TpLayer]
    exposed_ns: int
    step_share_pct: Optional[float]  # 100 exposed / those steps' time
    compute_ns: int                 # the layers' time neither comm nor its wait takes


class FsdpExposure(_S):
    """FSDP's collectives and how much of them compute hides (prefetch)."""

    units: Optional[int]            # distinct FSDP2 units (FSDP::pre_forward names)
    free_compute_ns: int            # compute in the steps no data-moving comm overlaps
    all_gather: Optional[CommExposure]
    reduce_scatter: Optional[CommExposure]   # None: its data movement is not recorded


class CpuDesign(_S):
    """A window with no GPU op: a CPU program by design, or a GPU program profiled without
    its GPU side (``passes/cpudesign.py``)."""

    by_design: Optional[bool]       # None: nothing says which
    # the evidence, each a short text naming its metadata key or event
    # (``deviceProperties recorded and empty``, ``process group backend cuda:nccl``)
    for_: list[str] = field(name="for")
    against: list[str]


class HostCommCollective(_S):
    collective: str
    name: str                       # its data-moving span (gloo:all_reduce)
    exposed_ns: int                 # the step thread's waits on it, over the steps
    share_pct: float                # 100 exposed / the steps' time
    calls_per_step: float           # median
    sizes: Optional[list[int]]      # distinct call bytes (DDP's buckets); None: not recorded
    bytes_per_step: Optional[int]   # median
    group_size: Optional[int]
    median_call_ns: Optional[int]
    exposed_after_first_ns: int     # per step, every call's wait but the longest one's
    exposed_by_step: list[int]
    calls_by_step: list[int]
    bytes_by_step: Optional[list[int]]   # None: sizes not recorded


class HostComm(_S):
    """A CPU job's exposed communication: its step thread waiting on collectives
    (``passes/parallelism.host_comm``; docs/analysis.md section 4)."""

    steps: int
    step_ns: int
    exposed_ns: int
    share_pct: float
    share_min_pct: float
    share_max_pct: float
    collectives: list[HostCommCollective]


class Parallelism(_S):
    """The job's parallel layout as this trace shows it (``passes/parallelism.py``)."""

    rank: Optional[int]
    strategies: list[Strategy]
    pipeline: Optional[Pipeline] = None
    ep: Optional[ExpertParallel] = None
    ddp: Optional[DdpOverlap] = None
    fsdp: Optional[FsdpExposure] = None
    tp: Optional[TensorParallel] = None
    comm_model: Optional[list[CommModel]] = None
    cpu_design: Optional[CpuDesign] = None
    host_comm: Optional[HostComm] = None


class ReplayStep(_S):
    step: int
    measured_ns: int
    replayed_ns: int
    error_pct: Optional[float]


class CriticalContributor(_S):
    label: str                      # passes/replay/critical.py LABELS: host op, launch, queued after launch, kernel, ...
    name: str
    ns: int
    count: int
    pct: float                      # of the replayed steps' critical time


class CriticalSegment(_S):
    start_ns: int
    end_ns: int
    label: str
    name: str
    lane: str                       # "thread N" or "GPU d stream s"
    step: int


class CriticalStep(_S):
    step: int
    by_label: IntMap
    ends_at: str                    # where the walk started: "gpu" (the step's last GPU op, which ended
                                    # after the host's end marker), "host" (the marker), "window"


class CriticalPath(_S):
    """The chain that set each replayed step's time (``passes/replay/critical.py``)."""

    total_ns: int
    by_label: IntMap
    top: list[CriticalContributor]
    steps: list[CriticalStep]
    segments: list[CriticalSegment]


class ProfilerOverhead(_S):
    """The profiler's own cost in the analysed steps (``passes/overhead.py``, docs/analysis.md
    "Profiler overhead"): the unprofiled step estimated from what the trace shows."""

    profiled_step_ns: int           # the measured mean step
    unprofiled_step_ns: int         # the estimate without the profiler
    overhead_step_ns: int           # their difference
    overhead_pct: float             # of the profiled step
    profiler_host_ns_per_step: int  # the profiler's host time per step, on every thread
    basis: str                      # "replay": the graph replayed without it; "host ops"
    material: bool                  # >= MATERIAL_SHARE of the step: levers priced without it
    per_op_ns: int                  # the model's constants (per op, + with shapes, per frame)
    shapes_ns: int
    frame_ns: int
    ops_per_step: float             # recorded ops per step (all threads)
    busiest_thread_ops_per_step: float
    frames_per_step: float          # Python frames recorded (with_stack)
    record_shapes: bool             # ops carry Input Dims
    with_stack: bool                # Python frames recorded
    floor_spacing_ns: Optional[int]  # 5th percentile gap between back-to-back ops
    # CUPTI's cost per traced runtime / driver call by class (launch, alloc, other), and
    # the calls per step of each class (all threads)
    call_ns: Optional[IntMap] = None
    calls_per_step: Optional[dict[str, float]] = None


class Replay(_S):
    """The analysed steps replayed as a dependency graph (``passes/replay``, docs/analysis.md
    "Replay"): how well the unmodified replay reproduces the measured steps."""

    replayable: bool
    reason: Optional[str]           # why not, when not replayable
    savings: str                    # "replay" or "bounds" (not replayable: savings are bounds)
    left_out: list[str]
    error_pct: Optional[float] = None
    median_error_pct: Optional[float] = None
    max_error_pct: Optional[float] = None
    measured_ns: Optional[int] = None
    replayed_ns: Optional[int] = None
    steps: list[ReplayStep] = []
    steps_replayed: Optional[int] = None
    steps_total: Optional[int] = None
    sampled: Optional[bool] = None
    nodes: Optional[int] = None
    edges: Optional[int] = None
    edges_by_kind: Optional[IntMap] = None
    sweeps: Optional[int] = None
    notes: list[str] = []
    kept_gpu_wait_ns: Optional[int] = None   # GPU waits no traced edge explains, kept as measured
    critical_path: Optional[CriticalPath] = None
    profiler_overhead: Optional[ProfilerOverhead] = None


class Proof(_S):
    """One event that proves a program fact (``passes/facts.py``): its name, where it first
    runs in the window and in which step; ``ts_ns`` null: the proof is a count or metadata,
    not an event (``detail`` says so)."""

    name: str
    ts_ns: Optional[int]
    step: Optional[int]
    detail: str


class Facts(_S):
    """The facts record the verdict was judged on (``passes/facts.py``: ``WindowFacts``):
    every figure the judgement reads, the program facts (the ``context`` keys), each fact's
    proof (``evidence``: an empty list = read from the absence of any such event), and the
    size of each frame the verdict may show."""

    figures: dict[str, Any]
    program: dict[str, Any]
    evidence: dict[str, list[Proof]]
    frames: dict[str, int]
    replay: Optional[dict[str, Any]] = None   # the top-level replay less its critical-path segments


class AnalyzeTrace(_S, kw_only=True):
    """One trace's analysis (``Analysis.to_dict()``)."""

    trace: TraceInfo
    window: Optional[Window]
    steps: Steps
    devices: list[Device]
    gaps: Gaps
    attribution: Attribution
    nccl: Nccl
    compile: Compile
    kernels: list[Kernel]
    kernel_classes: list[KernelClass]
    copies: Copies
    context: Context
    graphs: Graphs
    utilization: Optional[Utilization] = None
    steady_state: Optional[SteadyState] = None
    parallelism: Optional[Parallelism] = None
    replay: Optional[Replay] = None
    facts: Optional[Facts] = None
    verdict: Verdict


class Analyze(AnalyzeTrace, kw_only=True):
    """``traceread analyze --format json`` of one TRACE argument read as one trace."""

    schema_version: str


class JobGroup(_S):
    """One group of a job's ranks (``multirank/groups.py``): a pipeline stage, a pipeline, or
    the ranks that meet in one collective; figures per step."""

    kind: str                       # pp_stage, pp, dp/tp/ep/... (process group name), collective
    stage: Optional[int]            # pp_stage: the stage index
    ranks: list[int]
    collectives: list[str]
    instances: int                  # matched instances of the group's calls
    busy_ns_per_step: Optional[int]  # members' mean compute per step
    step_ns: Optional[int]          # members' mean step time
    wait_ns_per_step: int           # members' mean wait at the group's calls per step
    lateness_ns_per_step: int       # lateness members imposed at the group's calls per step
    late_rank: Optional[int]        # the member that imposed most


class PipelineStages(_S):
    """A job's pipeline stages and whether one computes more (``groups.stage_balance``)."""

    stages: int
    pipelines: int
    busy_ns_by_stage: list[int]     # mean of the stage's ranks' median compute per step
    slowest_x_others: Optional[float]
    slow_stage: Optional[int]       # None: balanced (under 1.25x the others' median)
    slow_rank: int                  # the busiest rank of the busiest stage
    excess_ns: int                  # its compute per step minus the other stages' median
    untraced_excess_ns: int         # the part of it no profiled operator records (a sleep, I/O)
    stage_ranks: list[list[int]]
    idle_ns_by_rank: dict[str, int]  # step - compute per step (median), per rank


class CrossRank(Struct, kw_only=True):
    """One job's cross-rank object (``render/cross_rank.py``); the keys not typed here are
    documented in docs/batch.md."""

    groups: list[JobGroup] = []
    pipeline_stages: Optional[PipelineStages] = None


class AnalyzeMany(_S):
    """``traceread analyze --format json`` of several TRACE arguments (or one export split
    into several processes): each trace's analysis, and the cross-rank objects of the jobs
    they form (``render/cross_rank.py``, documented in docs/batch.md; null when none)."""

    schema_version: str
    cross_rank: Optional[list[CrossRank]]
    traces: list[Analyze]     # each exactly the document one input gives


# --- steps, idle, nccl, compile, info --------------------------------------------------


class StepsDoc(Steps, kw_only=True):
    """``traceread steps --format json``."""

    schema_version: str
    trace: str


class IdleDoc(_S):
    """``traceread idle --format json``."""

    schema_version: str
    trace: str
    min_gap_ns: int
    gaps: list[Gap]


class NcclDoc(_S):
    """``traceread nccl --format json``."""

    schema_version: str
    path: str
    comm_ns: int
    exposed_ns: int
    overlap_pct: float
    devices: list[CommDevice]
    collectives: list[Collective]


class CompileDoc(Compile, kw_only=True):
    """``traceread compile --format json`` (``events`` with ``--events``)."""

    schema_version: str
    path: str
    events: Optional[list[dict[str, Any]]] = None


class InfoDoc(_S):
    """``traceread info --format json``."""

    schema_version: str
    path: str
    format: str
    format_version: str
    producer: str
    rank: int
    world_size: int
    devices: list[int]
    device_names: dict[str, str]
    processes: dict[str, str]
    process_ranks: IntMap       # nsys export of several GPU processes: pid -> analyze's rank
    events: int
    by_kind: IntMap
    start_ns: int
    end_ns: int
    span_ns: int


# --- diff ------------------------------------------------------------------------------


class DiffSide(_S):
    path: str
    format: str
    steps: int
    unit: str                   # step | iteration (no steps: the repeating block) | trace
    iterations: int             # steps, else repeats of one block of host ops (>= 1)
    iteration_evidence: str     # which events repeat ("" with steps or one iteration)
    window_mode: Optional[str]  # the analysed window's kind (analyze's window.mode)
    compile_ns: int             # torch.compile time in the window (whole, not per unit)
    wall_ns: int                # the analysed window's length per unit
    step_mean_ns: Optional[int]
    step_median_ns: Optional[int]
    gpu_window_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int
    gpu_idle_pct: float
    idle_by_cpu: IntMap
    comm_ns: int
    exposed_comm_ns: int
    copy_ns: int                # host<->device copies (passes/copies.py)
    exposed_copy_ns: int        # ... with no compute beside them
    pageable_copy_ns: int       # ... from/to pageable host memory
    compiles: int
    recompiles: int
    verdict: Optional[str]
    verdict_summary: str
    promised_saving_ns: Optional[int]
    kernel_classes: IntMap
    # the step the program waits on (mean; passes/steps.program_step): the step a diff
    # realises savings on; and what bounds most steps (host | gpu)
    program_step_ns: Optional[int] = None
    step_bound_by: Optional[str] = None
    # the analysed steps' numbers (null without steps, or from an older batch output)
    first_step: Optional[int] = None
    last_step: Optional[int] = None


class Delta(_S):
    before: Optional[float]
    after: Optional[float]
    delta: Optional[float]
    pct: Optional[float]


class KernelChange(_S):
    name: str
    before_ns: int              # per unit (step, iteration, trace), as the diff's figures
    after_ns: int
    delta_ns: int
    pct: Optional[float]
    before_instances: int       # calls in the whole analysed window, not per unit
    after_instances: int


class KernelChanges(_S):
    matched: int
    before_count: int
    after_count: int
    slower_count: int
    faster_count: int
    new_count: int
    gone_count: int
    slower: list[KernelChange]
    faster: list[KernelChange]
    new: list[KernelChange]
    gone: list[KernelChange]


class VerdictChange(_S):
    before: Optional[str]
    after: Optional[str]
    changed: bool


class LeverProof(_S):
    """Promised vs realised for the lever(s) the two programs show pulled (diffs/proof.py)."""

    levers: list[str]           # what-if models (passes/replay/whatif.py) applied to BEFORE
    evidence: list[str]         # what changed between the traces, one line per lever
    promised_ns: Optional[int]  # per step: replay(BEFORE) - replay(BEFORE with the levers)
    realised_ns: Optional[int]  # per step (per sample x BEFORE's batch when it changed)
    basis: Optional[str]        # replay | bound (BEFORE not replayable: its verdict's bound)
    # | anatomy (the step phases' own model: a change of the step's anatomy alone)
    # (promised - realised) / realised, both as shares of their own step (the replayed step,
    # the program step) when the promise was replayed
    error_pct: Optional[float]
    promised_pct: Optional[float] = None   # of BEFORE's replayed step
    realised_pct: Optional[float] = None   # of BEFORE's program step (its measured step)
    refused: dict[str, str] = {}           # model -> why it does not apply
    replay_before_ns: Optional[int] = None
    replay_after_ns: Optional[int] = None
    not_replayed: Optional[str] = None
    # why the promise is not judged against the realised saving (the jobs or GPUs differ,
    # or the saving is within the steps' noise)
    not_judged: Optional[str] = None
    # two standard errors of the difference of the two mean steps (null under 2 steps a side)
    noise_ns: Optional[int] = None
    # where either capture pays a material profiler cost (passes/overhead.py): the saving
    # between the estimated unprofiled steps, which error_pct is then taken on
    realised_unprofiled_ns: Optional[int] = None
    realised_unprofiled_pct: Optional[float] = None   # of BEFORE's estimated unprofiled step
    unprofiled_steps_ns: Optional[list[int]] = None    # [BEFORE, AFTER] estimated


class Saving(_S):
    realised_ns: Optional[int]
    promised_ns: Optional[int]


class BatchSizes(_S):
    before: int
    after: int
    source: str                 # input_dims (read from the ops' shapes) | option (--batch)
    evidence: str               # the op whose input shape shows it, or "--batch"


class LeftOutStep(_S):
    step: int
    before_ns: Optional[int]    # the step's host span (null: not in that trace)
    after_ns: Optional[int]
    before_reason: str          # why that side's own analysis left it out ("" if it did not)
    after_reason: str


class StepsCompared(_S):
    """The steps both sides analysed, when their own windows differed (a side's warm-up)."""

    first: int
    last: int
    left_out: list[LeftOutStep]


class DiffPair(_S):
    unit: str                   # step | iteration | trace: what every time is per
    label: str                  # the pair's key in a folder / batch diff ("rank 3", a path)
    before: DiffSide
    after: DiffSide
    change: dict[str, Any]
    slower_pct: Optional[float]  # per sample when the batch differs; --fail-if-slower checks it
    verdict: VerdictChange
    saving: Saving
    batch: Optional[BatchSizes]  # only when the batch size differs
    per_sample: Optional[Delta]  # step time (or per-iteration time) / batch size
    warnings: list[str]         # why the two sides' figures are not like for like
    kernels: KernelChanges
    proof: Optional[LeverProof] = None   # promised vs realised for the lever that changed
    # the common steps both sides were analysed on, when their own windows differed
    steps_compared: Optional[StepsCompared] = None


class Unmatched(_S):
    side: str                   # before | after
    path: str
    reason: str


class JobSide(_S):
    job: str
    world_size: int
    straggler_rank: int         # -1: no straggler
    collective: Optional[str]
    late_by_ns: int
    cause: Optional[str]
    locality: Optional[str]
    summary: str
    status: Optional[str]       # the job verdict: straggler | none | cannot_tell
    step_mean_ns: Optional[int]  # the job's pace: its slowest matched rank's mean step


class JobChange(_S):
    job_before: Optional[str]
    job_after: Optional[str]
    ranks: int                  # members matched on both sides
    before: Optional[JobSide]
    after: Optional[JobSide]
    straggler_changed: bool
    verdict_changed: bool       # status, straggler or its cause changed
    step_pct: Optional[float]


class Diff(DiffPair, kw_only=True):
    """``traceread diff --format json``. Folder and batch diffs: the pair with the largest
    step-time change at the top level, every pair in ``pairs``."""

    schema_version: str
    source: str                 # traces | directories | batch | processes (multi-process exports)
    pairs: Optional[list[DiffPair]] = None
    matched_by: Optional[str] = None  # path | rank | single | position
    unmatched: Optional[list[Unmatched]] = None
    jobs: Optional[list[JobChange]] = None   # batch outputs: one per multi-rank job


# --- nsys-stats compatible lists -------------------------------------------------------


class _Row(_S):
    """A row of an nsys report (``kernels``, ``api``, ...): its columns, and the version."""

    schema_version: str


class KernelRow(_Row):
    pct: float = field(name="Time (%)")
    total_ns: int = field(name="Total Time (ns)")
    instances: int = field(name="Instances")
    avg_ns: float = field(name="Avg (ns)")
    med_ns: float = field(name="Med (ns)")
    min_ns: int = field(name="Min (ns)")
    max_ns: int = field(name="Max (ns)")
    stddev_ns: float = field(name="StdDev (ns)")
    name: str = field(name="Name")


class ApiRow(_Row):
    pct: float = field(name="Time (%)")
    total_ns: int = field(name="Total Time (ns)")
    calls: int = field(name="Num Calls")
    avg_ns: float = field(name="Avg (ns)")
    med_ns: float = field(name="Med (ns)")
    min_ns: int = field(name="Min (ns)")
    max_ns: int = field(name="Max (ns)")
    stddev_ns: float = field(name="StdDev (ns)")
    name: str = field(name="Name")


class GapRow(_Row):
    row: int = field(name="Row#")
    duration_ns: int = field(name="Duration (ns)")
    start_ns: int = field(name="Start (ns)")
    pid: Optional[int] = field(name="PID")
    device: Optional[int] = field(name="Device ID")
    context: Optional[int] = field(name="Context ID")


class MemcpyRow(_Row):
    pct: float = field(name="Time (%)")
    total_ns: int = field(name="Total Time (ns)")
    count: int = field(name="Count")
    avg_ns: float = field(name="Avg (ns)")
    med_ns: float = field(name="Med (ns)")
    min_ns: int = field(name="Min (ns)")
    max_ns: int = field(name="Max (ns)")
    stddev_ns: float = field(name="StdDev (ns)")
    operation: str = field(name="Operation")


class NvtxRow(_Row):
    pct: float = field(name="Time (%)")
    total_ns: int = field(name="Total Time (ns)")
    instances: int = field(name="Instances")
    avg_ns: float = field(name="Avg (ns)")
    med_ns: float = field(name="Med (ns)")
    min_ns: int = field(name="Min (ns)")
    max_ns: int = field(name="Max (ns)")
    stddev_ns: float = field(name="StdDev (ns)")
    range: str = field(name="Range")
    style: str = field(name="Style")


class UtilRow(_Row):
    row: int = field(name="Row#")
    in_use_pct: float = field(name="In-Use (%)")
    duration_ns: int = field(name="Duration (ns)")
    start_ns: int = field(name="Start (ns)")
    pid: Optional[int] = field(name="PID")
    device: Optional[int] = field(name="Device ID")
    context: Optional[int] = field(name="Context ID")


DOCUMENTS: dict[str, Any] = {
    "analyze": Analyze, "steps": StepsDoc, "idle": IdleDoc, "nccl": NcclDoc,
    "compile": CompileDoc, "info": InfoDoc, "diff": Diff,
    "kernels": list[KernelRow], "api": list[ApiRow], "gaps": list[GapRow],
    "memcpy": list[MemcpyRow], "nvtx": list[NvtxRow], "osrt": list[ApiRow], "util": list[UtilRow],
}
# Commands that print one object for one input, and {schema_version, traces: [...]} for
# several (cli/_common.emit_json); analyze's several-input document is AnalyzeMany.
PER_TRACE = ("analyze", "steps", "idle", "nccl", "compile", "info")


def _many(command: str):
    """The several-inputs document of a per-trace command."""
    if command == "analyze":
        return AnalyzeMany
    return msgspec.defstruct(f"{DOCUMENTS[command].__name__}Many",
                             [("schema_version", str), ("traces", list[DOCUMENTS[command]])],
                             kw_only=True, forbid_unknown_fields=True)


def versioned(doc: dict) -> dict:
    """``doc`` with ``schema_version`` first."""
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in doc.items() if k != "schema_version"}}


def _alternatives(command: str) -> list:
    """The document types ``command`` may print (one input's object, several inputs' one)."""
    t = DOCUMENTS[command]
    return [t, _many(command)] if command in PER_TRACE else [t]


def json_schema(command: str) -> dict:
    """The JSON Schema of ``command``'s output; per-trace commands: one input's object or
    several inputs' ``{schema_version, traces}``."""
    alts = _alternatives(command)
    schemas, defs = msgspec.json.schema_components(alts)
    for d in defs.values():   # msgspec >= 0.23 dedents docstrings, older ones do not: one text
        if isinstance(d.get("description"), str):
            d["description"] = inspect.cleandoc(d["description"])
    body = schemas[0] if len(schemas) == 1 else {"anyOf": list(schemas)}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"traceread/{command}.schema.json", "title": f"traceread {command} --format json",
            "x-schema-version": SCHEMA_VERSION, **body, "$defs": defs}


def write_all(out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in DOCUMENTS:
        p = out / f"{name}.schema.json"
        p.write_text(json.dumps(json_schema(name), indent=2, sort_keys=True) + "\n")
        paths.append(p)
    return paths


def check(command: str, doc: Any) -> None:
    """Raise ``msgspec.ValidationError`` when ``doc`` does not match ``command``'s schema."""
    t = DOCUMENTS[command]
    if command in PER_TRACE and isinstance(doc, dict) and "traces" in doc:
        t = _many(command)
    msgspec.convert(doc, type=t, strict=False)


if __name__ == "__main__":  # python -m traceread.schema docs/schema
    for p in write_all(sys.argv[1] if len(sys.argv) > 1 else "docs/schema"):
        print(p)
