"""The trial report as a typed document: one model per section, field names as the report's JSON keys.

``lambdas.domain.report.build.build_trial_report`` builds a ``TrialReport``; ``model_dump(mode="json")`` is the stored
report.json, and ``TrialReport.model_validate`` reads one back (the CLI renders a fetched report from it). A field
with a default is one that a reader may find missing from a report written before it existed. Figures keep the
number type they were computed as (a sum over no attempts is the integer 0): ``int | float`` where either occurs,
so a report reads back and writes out unchanged.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from lambdas.domain.evidence.baseline import Format
from lambdas.domain.money.run_limits import LimitCrossed

# ``trn2_viable_pays_back``: cheaper per steady-state step, but this trial's one-time costs (compile, the warm-up
# compile stage, migration reruns) are not yet paid back; the decision says after how many steps they are.
Verdict = Literal["trn2_viable_cheaper", "trn2_viable_pays_back", "trn2_viable_not_cheaper", "inconclusive",
                  "stay_on_gpu"]
PriceBasis = Literal["on_demand", "override", "capacity_block", "savings_plan"]
CheckStatus = Literal["pass", "fail", "not_evidenced"]
# How a run's Batch job ended (``unknown``: the ledger holds no terminal transition for it).
Outcome = Literal["succeeded", "failed", "no_capacity", "not_placed", "unknown"]
# The outcomes of a job the queue cancelled while it waited RUNNABLE, in words: nothing trained.
NEVER_RAN: dict[str, str] = {
    "no_capacity": "no capacity: Batch found no instance for the job while it waited RUNNABLE, and the queue "
                   "cancelled it; nothing trained, this is not a training failure",
    "not_placed": "not placed: the queue's capacity can never run the job (misconfiguration), and the queue "
                  "cancelled it; nothing trained",
}
# What a cost figure of a run on stand-ins is: the pipeline priced the runs; their times are the stand-ins' machine's.
STAND_IN_EVIDENCE = "pipeline evidence from stand-ins, not a comparison of the hardware"
# One figure of the record table.
Figure: TypeAlias = str | int | float | bool | list[str] | None


def _nan_for_null(value: float | None) -> float:
    """JSON has no NaN: a non-finite loss is written as null (``lambdas.domain.canonical``) and reads back as NaN."""
    return math.nan if value is None else value


Loss = Annotated[float, BeforeValidator(_nan_for_null)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class LossPoint(_Model):
    step: int
    loss: Loss


class IntervalView(_Model):
    """A bootstrap interval as ``lambdas.domain.evidence.evidence.Interval.as_json`` writes it."""

    estimate: float
    low: float
    high: float
    samples: int
    confidence: float
    method: str


class Booking(_Model):
    """How a compile's cost is booked: this trial's (``shared`` False), shared infrastructure (True) or not known
    yet (None: the registry has no entry for the key)."""

    shared: bool | None
    other_trials: list[str]
    basis: str


class CompileRecord(_Model):
    """A track's compiles over its attempts."""

    first_compile_s: float | None
    total_s: int | float
    cache: str
    cache_by_attempt: list[str] = Field(default_factory=list)
    seconds_by_attempt: list[float] = Field(default_factory=list)
    hit_rate: float | None = None
    cache_key: str | None
    booking: Booking | None = None


class Throughput(_Model):
    tokens_per_s: float | None
    step_time_s: float | None
    samples_per_s: float | None


class StartupAttempt(_Model):
    attempt: int
    seconds: float


class Startup(_Model):
    """Seconds from Batch's STARTING to RUNNING (image pull and container start), in all and per attempt."""

    image_pull_and_start_s: float | None = None
    by_attempt: list[StartupAttempt] = Field(default_factory=list)


class LossView(_Model):
    initial: float | None
    final: float | None
    validation: float | None
    eval: list[LossPoint]
    per_step: list[LossPoint]


class CheckpointView(_Model):
    count: int
    total_bytes: int
    files: int
    save_s: int | float
    restore_s: int | float
    asynchronous: bool | None
    step_time_overlapping_save_s: float | None
    step_time_clear_s: float | None
    save_slowdown: float | None


class ResumeView(_Model):
    injected_at_step: int | None = None
    fault_mode: str | None
    resumed_from_step: int | None
    rerun_steps: int
    steps_executed: int
    rerun_share: float | None
    global_step_continuous: bool | None
    loss_continuous: bool | None
    max_rel_loss_delta: float | None = None
    resume_eval: LossPoint | None = None


class Sample(_Model):
    prompt: str
    completion: str
    token_ids: list[int]


class CostView(_Model):
    """One run's five-component cost (USD as decimal strings), per effective step and per million tokens, with the
    price it was computed at."""

    effective_training_usd: str
    compile_usd: str
    failed_reruns_usd: str
    checkpoint_storage_usd: str
    queue_environment_usd: str
    total_usd: str
    cost_per_effective_step_usd: str | None
    cost_per_1m_tokens_usd: str | None
    price_basis: str
    billed_instance_s: float | None
    queue_s: float | None

    def components(self) -> dict[str, str]:
        """The five components and their total, by key (``lambdas.domain.money.cost.COMPONENTS``, then
        ``total_usd``)."""
        return {
            "effective_training_usd": self.effective_training_usd,
            "compile_usd": self.compile_usd,
            "failed_reruns_usd": self.failed_reruns_usd,
            "checkpoint_storage_usd": self.checkpoint_storage_usd,
            "queue_environment_usd": self.queue_environment_usd,
            "total_usd": self.total_usd,
        }

    def amounts(self) -> dict[str, str | None]:
        """Every money figure by its key: the components, the total, per effective step and per 1M tokens."""
        return {**self.components(), "cost_per_effective_step_usd": self.cost_per_effective_step_usd,
                "cost_per_1m_tokens_usd": self.cost_per_1m_tokens_usd}


class Uncertainty(_Model):
    steady_steps: int
    step_time_s: IntervalView | None
    tokens_per_s: IntervalView | None
    cost_per_effective_step_usd: IntervalView | None
    basis: str


class ParallelView(_Model):
    """One run's multi-node figures: devices billed and training, the processes that ran them, the collectives'
    cost."""

    nodes: int
    devices_billed: int
    layout_ranks: int
    device_utilisation: float | None
    processes: int
    tensor_parallel_run: int
    basis: str
    communication_s: float
    communication_share: float | None
    sync_wait_median_s: float | None
    sync_wait_max_s: float | None
    communication_measured: bool
    communication_untimed: list[str]
    description: str = Field(
        default="", description="The layout in words: nodes x devices, the world size and how its processes map onto "
        "them, and the torch.distributed process group the run used (on a stand-in, also the real device's).")


class RunOutcome(_Model):
    outcome: Outcome
    status_reason: str | None
    detail: str | None


class TrackRecord(_Model):
    """One run's column of the report: its attempts' figures summed or taken from the last attempt."""

    run: str
    status: str
    backend: str | None
    stand_in: bool
    label: str
    instance_type: str
    unusable: list[str]
    torch: str | None = None
    stack: str | None = None
    execution: str = "eager"
    steps_completed: int
    attempts: int
    tokens: int
    compile: CompileRecord
    environment_s: int | float
    data_load_s: int | float
    train_s: int | float
    eval_s: int | float
    throughput: Throughput
    memory_peak_mib: float | None
    environment: dict[str, str] = Field(default_factory=dict)
    startup: Startup = Field(default_factory=Startup)
    loss: LossView
    checkpoint: CheckpointView
    resume: ResumeView
    final_samples: list[Sample]
    cost: CostView
    uncertainty: Uncertainty | None = None
    parallel: ParallelView | None = None
    outcome: Outcome = "unknown"
    status_reason: str | None = None
    detail: str | None = None


class RecordRow(_Model):
    """One item of the record table: ``item`` and, under each run's name, that run's figures."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Figure]] = Field(init=False)

    item: str

    def figures(self, run: str) -> dict[str, Figure]:
        return self.__pydantic_extra__[run]


class Check(_Model):
    check: str
    status: CheckStatus
    detail: str


class CompileStage(_Model):
    """The warm-up compile stage (run ``trn2-compile``)."""

    run: str
    status: str
    outcome: Outcome
    status_reason: str | None
    detail: str | None = None
    backend: str | None
    stand_in: bool = False
    instance_type: str | None = None
    nodes: int | None = None
    attempts: int
    steps: int
    compile_s: int | float
    seconds_by_attempt: list[float] = Field(default_factory=list)
    cache_by_attempt: list[str] = Field(default_factory=list)
    cache_key: str | None
    error: str | None = None
    cost: CostView
    booking: Booking | None = None
    # Written only when the ledger holds the stage's STARTING and RUNNING transitions.
    startup: Startup | None = Field(default=None, exclude_if=lambda startup: startup is None)


class CacheEntryRecord(BaseModel):
    """The registry's entry for a cache key, as far as the report reads it (DynamoDB numbers arrive as Decimal)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    status: str = "new"
    hits: int | None = None
    misses: int | None = None
    failures: int | None = None
    failure_reason: str | None = None
    hit_trials: list[str] | None = None


class CacheEntryView(_Model):
    cache_key: str
    status: str
    hits: int
    misses: int
    failures: int
    failure_reason: str | None
    trials_served: int


class CompileSection(_Model):
    """The warm-up compile stage, the trial's cache hit rate and the registry's entries the attempts used."""

    stage: CompileStage | None = None
    lookups: int = 0
    hits: int = 0
    hit_rate: float | None = None
    basis: str = ""
    entries: list[CacheEntryView] = Field(default_factory=list)


class CostSection(_Model):
    by_run: dict[str, CostView]
    trial: dict[str, str]
    note: str


class TimelineRow(_Model):
    run: str
    attempt: int
    status: str
    at: str
    status_reason: str | None
    exit_code: int | None


class Comparison(_Model):
    final_loss_delta: float | None
    loss_tolerance: float
    within_tolerance: bool | None
    cost_ratio: float | None
    cost_ratio_basis: str
    steady_cost_ratio: IntervalView | None = None
    steady_cost_ratio_basis: str = ""
    verdict: Verdict | None = Field(description="the decision on real devices; null for a rehearsal on stand-ins")
    rehearsal: Literal["passed", "failed"] | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="on stand-ins: whether the pipeline worked (no verdict is given on stand-ins)")
    headline: str = ""
    facts: list[str] = Field(default_factory=list)
    reasons: list[str]
    caveats: list[str] = Field(default_factory=list)


class BaselineUnread(_Model):
    uri: str
    error: str


class BaselineUncompared(_Model):
    """A baseline was read but no gpu run reported losses to compare with it."""

    uri: str
    format: Format


class BaselineCompared(_Model):
    """``lambdas.domain.evidence.baseline.BaselineComparison`` with the baseline's URI."""

    uri: str
    format: Format
    shared_train_steps: int
    shared_eval_steps: int
    max_train_delta: float | None
    max_eval_delta: float | None
    tolerance: float
    reproduced: bool | None
    detail: str


BaselineView: TypeAlias = BaselineUnread | BaselineUncompared | BaselineCompared


class PilotFigure(_Model):
    """One side of a pilot figure: ``measured`` on the trn2 run, or ``from_baseline`` (read from the team's GPU
    logs, or derived from them as ``note`` says). ``value`` None: not evidenced, and ``note`` says why."""

    value: float | None
    source: Literal["measured", "from_baseline"]
    interval: IntervalView | None = Field(default=None, description="the trn2 run's bootstrap interval, where bounded;"
                                                                    " a baseline's figure is a point estimate")
    note: str = ""


class PilotRow(_Model):
    figure: str
    unit: str
    trn2: PilotFigure
    baseline: PilotFigure


class PilotComparison(_Model):
    """A Trainium2 pilot (a trn2 run and no GPU track) judged against the team's GPU baseline: its losses at the
    baseline's steps (``loss``), its throughput, memory and cost per step beside the baseline's, and the verdict."""

    loss: BaselineCompared = Field(description="the trn2 run's losses against the baseline's")
    figures: list[PilotRow]
    cost_ratio: IntervalView | None = Field(description="trn2 cost per step over the baseline's; the interval is "
                                                        "the trn2 side's alone")
    verdict: Verdict | None = Field(description="null for a pilot on a stand-in, which gives no verdict")
    reasons: list[str]
    rule: str


class SamplesView(_Model):
    """The fixed prompts' greedy completions, Trainium2 against GPU."""

    prompts: int
    judged: int
    empty: int
    exact_match_rate: float | None
    token_similarity: float | None


class ModelRef(_Model):
    id: str
    revision: str
    method: str


class FrozenSettings(_Model):
    """What both tracks trained with, from the spec."""

    sequence_length: int
    effective_batch_size: int
    micro_batch_size: int
    max_steps: int
    seed: int
    precision: str
    data_version: str
    eval_interval_steps: int


class Declared(_Model):
    failure_recovery: str | None
    metrics: list[str]


class UnreadableSummary(_Model):
    key: str
    error: str


class OneTimeCosts(_Model):
    """What one side paid once for this migration, not again for the next trial of the same shape: compiling its
    graphs (cached afterwards), the warm-up compile stage, and reruns (failed attempts' steps and, on the Trainium2
    side, the GPU fallback)."""

    compile_usd: str
    warm_up_stage_usd: str
    reruns_usd: str
    total_usd: str


class SideCosts(_Model):
    """One side of the comparison (``trn2``: the trn2 run, its warm-up compile stage and its GPU fallback;
    ``gpu``: the GPU track) split into one-time and recurring costs."""

    runs: list[str]
    total_usd: str
    one_time: OneTimeCosts
    recurring_usd: str = Field(description="total minus one-time: what a repeat of this trial would cost")
    per_step_usd: str | None = Field(description="steady-state cost per effective step (median step time x rate)")


class BreakEven(_Model):
    """When Trainium2's lower recurring cost has paid back its extra one-time costs."""

    steps: int = Field(description="effective steps of training at the steady-state cost per step")
    hours: float | None = Field(description="those steps at Trainium2's median steady-state step time")
    trials: float | None = Field(description="repeats of this trial's shape (recurring costs only)")
    already: bool = Field(description="this trial ran past it: its whole cost is already lower on Trainium2")


class BasisDecision(_Model):
    """The decision at one price basis: every instance-second repriced at that basis's hourly rates (checkpoint
    storage stays at its S3 rates)."""

    basis: PriceBasis
    label: str
    rates: dict[str, str] = Field(description="USD per instance-hour by instance type")
    answer: Verdict | None = Field(description="null when the basis has no rate for an instance type the trial used")
    trn2_usd: str | None
    gpu_usd: str | None
    trial_ratio: float | None = Field(description="this trial's whole cost, Trainium2 side / GPU")
    steady_cost_ratio: IntervalView | None = None
    break_even: BreakEven | None = None
    sentence: str


class Decision(_Model):
    """The whole trial first: one-time and recurring costs per side, when Trainium2 pays back, and the answer at
    each price basis, with whether it flips between them."""

    primary: PriceBasis = Field(description="the basis the run costs were priced at")
    trn2: SideCosts
    gpu: SideCosts
    bases: list[BasisDecision]
    flips: bool
    flip_note: str | None = None


class ScalingPoint(_Model):
    """One node count of a track's scaling comparison: the main run or a scaling run (``gpu-n1``)."""

    run: str
    nodes: int
    world_size: int = Field(description="devices the run trained on (nodes x devices per node)")
    outcome: Outcome
    step_time_s: float | None = Field(description="median optimizer step time over the run's timed steps")
    tokens_per_s: float | None = Field(description="tokens per second over the whole run's devices")
    communication_share: float | None = Field(
        description="the collectives' share of the step time (None where the run measured none)")
    cost_per_step_usd: float | None = Field(
        description="the run's effective training cost divided by its effective steps (instance time x price x nodes)")
    speedup: float | None = Field(
        description="the smallest count's step time over this count's (same effective batch per step)")
    efficiency: float | None = Field(
        description="speedup over the ratio of node counts: 1.0 is linear scaling")
    cost_per_step_ratio: float | None = Field(description="cost per effective step over the smallest count's")


class ScalingView(_Model):
    """A track run at several node counts (``nodes: [1, 2]``): does adding nodes pay?"""

    track: str
    instance_type: str
    base_nodes: int = Field(description="the smallest count, the one speed-up and efficiency are relative to")
    points: list[ScalingPoint]
    summary: str = Field(description="the comparison in one sentence (pipeline evidence only on stand-ins)")


class TrialReport(_Model):
    """The per-trial report: both tracks side by side, the acceptance checks, the costs and the verdict."""

    report_version: int
    trial_id: str
    name: str
    owner: str
    spec_hash: str
    generated_at: str | None = None
    model: ModelRef
    frozen: FrozenSettings
    tracks: dict[str, TrackRecord]
    record_table: list[RecordRow]
    acceptance: list[Check]
    compile: CompileSection = Field(default_factory=CompileSection)
    cost: CostSection
    timeline: list[TimelineRow] = Field(default_factory=list)
    comparison: Comparison
    # The whole-trial decision (real devices, both sides costed); absent from a rehearsal on stand-ins.
    decision: Decision | None = Field(default=None, exclude_if=lambda found: found is None)
    stand_in: bool = False
    stopped_by: LimitCrossed | None = None
    baseline: BaselineView | None = None
    # A Trainium2 pilot's comparison with its GPU baseline; absent from a trial with a GPU track.
    pilot: PilotComparison | None = Field(default=None, exclude_if=lambda found: found is None)
    samples: SamplesView | None = None
    # One entry per track that declared several node counts; absent without scaling runs.
    scaling: list[ScalingView] | None = Field(default=None, exclude_if=lambda found: found is None)
    declared: Declared
    # Written where the report is stored: the summaries it could not read (absent from a report built in memory).
    unreadable_summaries: list[UnreadableSummary] | None = Field(default=None,
                                                                 exclude_if=lambda found: found is None)
