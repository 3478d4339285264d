"""The run summary: what one attempt of the training container did, as the trainer writes it and the cost and
report Lambdas read it (``<run-dir>/attempt-<A>/summary.json``).

Seconds are wall-clock seconds, bytes are bytes, memory is MiB. A stand-in backend (``cpu`` or ``compiled``) sets
``stand_in``: its timings describe the machine it ran on, not the track's hardware. The backend decides: a summary
from a stand-in backend reads as a stand-in whatever its ``stand_in`` flag says.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from lambdas.domain.json_types import JsonObject
from lambdas.domain.vocabulary import RUN_NAME

SUMMARY_SCHEMA_VERSION: Literal[1] = 1
Backend = Literal["cpu", "compiled", "cuda", "neuron", "xla"]
Status = Literal["succeeded", "failed", "faulted", "interrupted"]
CacheOutcome = Literal["hit", "miss", "none"]
STAND_IN_BACKENDS: tuple[str, ...] = ("cpu", "compiled")

# Bounds that no real attempt reaches: an attempt lasts at most the stage's 14-day attempt timeout, and a petabyte
# is far beyond any checkpoint; anything beyond them is a malformed or forged summary, refused.
MAX_SECONDS = 14 * 24 * 3600
MAX_BYTES = 10**15
MAX_TOKENS = 10**15

Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Phases(_Model):
    environment_s: Seconds = 0.0
    data_load_s: Seconds = 0.0
    compile_s: Seconds = 0.0
    train_s: Seconds = 0.0
    checkpoint_save_s: Seconds = 0.0
    checkpoint_restore_s: Seconds = 0.0
    eval_s: Seconds = 0.0


class Throughput(_Model):
    tokens_per_s: float | None = None
    step_time_s: float | None = Field(default=None, description="Median optimizer-step time, compile excluded.")
    samples_per_s: float | None = None
    step_times_s: list[Annotated[float, Field(ge=0, le=86_400)]] = Field(
        default_factory=list, max_length=4096,
        description="Steady-state optimizer-step times of the attempt (compile and warm-up steps left out), the "
        "sample the report's confidence intervals are bootstrapped from; empty in summaries written before it.")


class LossPoint(_Model):
    step: Annotated[int, Field(ge=0)]
    loss: float


def _points(value: Any) -> Any:
    # Accept the compact [[step, loss], ...] form as well as [{"step":..., "loss":...}, ...].
    if isinstance(value, list):
        return [{"step": v[0], "loss": v[1]} if isinstance(v, list | tuple) else v for v in value]
    return value


class LossRecord(_Model):
    initial: float | None = None
    final: float | None = None
    per_step: list[LossPoint] = Field(default_factory=list, description="Training loss by global step.")
    per_step_decimated: bool = False
    eval: list[LossPoint] = Field(default_factory=list, description="Validation loss at each eval point.")

    _per_step = field_validator("per_step", "eval", mode="before")(lambda cls, v: _points(v))


class CheckpointRecord(_Model):
    step: Annotated[int, Field(ge=0)]
    bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)]
    files: Annotated[int, Field(ge=0)]
    save_s: Seconds
    uri: str


class SkippedCheckpoint(_Model):
    step: int
    uri: str
    reason: str


class CompileRecord(_Model):
    seconds: Seconds = 0.0
    cache: CacheOutcome = "none"
    cache_url: str | None = None
    cache_key: str | None = None
    status: Literal["ok", "failed", "not_run"] = "ok"
    error: str | None = None
    cache_files_before: int = 0
    cache_files_after: int = 0
    torn_entry: bool = Field(default=False, description="The cache entry had artefacts but no completion marker "
                             "(an upload that died): it was not served, and this attempt compiled it again.")


class Continuity(_Model):
    global_step_continuous: bool | None = None
    loss_continuous: bool | None = None
    tolerance: float | None = Field(default=None, description="Largest relative loss gap counted as continuous.")
    max_rel_delta: float | None = None
    compared_steps: list[int] = Field(default_factory=list)


class FaultRecord(_Model):
    injected_at_step: int | None = None
    mode: Literal["retryable", "permanent"] | None = None
    fired: bool = False


class FinalSample(_Model):
    prompt: str
    completion: str
    token_ids: list[int]


class EnvironmentRecord(_Model):
    image: str | None = None  # the image reference ECS started (task metadata v4)
    image_digest: str | None = None
    python: str
    torch: str
    transformers: str | None = None
    peft: str | None = None
    cuda: str | None = None
    cuda_driver: str | None = None
    gpu_name: str | None = None
    neuron_sdk: str | None = None
    neuronx_cc: str | None = None
    torch_neuronx: str | None = None
    torch_xla: str | None = None
    neuron_runtime: str | None = None
    instance_type: str | None = None
    hostname: str
    batch_job_id: str | None = None
    data_samples: str | None = Field(
        default=None, pattern=r"^\d+$", description="Training samples (rows of data.train_uri) the attempt loaded, "
        "to check data.samples against; a decimal string like the environment's other values. None in summaries "
        "written before it.")


class LayoutRecord(_Model):
    devices_per_node: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    gradient_accumulation_steps: int
    micro_batch_size: int
    effective_batch_size: int
    world_size_run: int = Field(description="Processes this attempt actually ran (1 when the layout is simulated).")
    model_parallel_run: bool = Field(
        default=False, description="Whether the trainer runs the layout's model parallelism: with one process per "
        "device, each tensor_parallel group of devices holds one replica of the model, its projections split over "
        "them. When False (summaries before tensor parallelism, or pipeline_parallel above 1), only the first device "
        "of each group trains and the others hold a replica and no samples.")
    tensor_parallel_run: int = Field(
        default=1, description="The tensor-parallel degree this attempt's processes ran: the layout's "
        "tensor_parallel with one process per device, 1 on a stand-in that simulates whole replicas.")


class OptimizerRecord(_Model):
    """What the training loop applies that the trial spec does not declare (the spec gives only the peak rate)."""

    name: str = "adamw"
    learning_rate: float | None = Field(default=None, description="Peak rate (the spec's learning_rate).")
    weight_decay: float = 0.0
    grad_clip_norm: float | None = Field(default=None, description="Global gradient-norm clip; None: no clipping.")
    lr_schedule: str | None = Field(default=None, description="Shape of the learning-rate schedule.")
    warmup_steps: Annotated[int, Field(ge=0)] | None = None
    final_lr_factor: float | None = Field(default=None, description="Rate at max_steps as a fraction of the peak.")
    sharding: Literal["replicated", "zero-1", "fsdp2", "tensor-parallel"] | None = Field(
        default=None, description="replicated: every process holds all optimizer state (one process, or DDP); "
                                  "tensor-parallel: each process holds the state of its slices of the split "
                                  "projections (DTensor), the rest replicated over its group; fsdp2: parameters, "
                                  "gradients and optimizer state are all sharded over the data-parallel processes "
                                  "(torch FSDP2, over the tensor-parallel slices where there are some); zero-1: "
                                  "summaries written before FSDP2 replaced the trainer's own ZeRO-1 optimizer.")


class CheckpointOverlap(_Model):
    """Whether saving fights the gradient updates: step times of steps that ran while a checkpoint was being written
    in the background against steps that did not (first step excluded; medians)."""

    asynchronous: bool = False
    steps_overlapping: Annotated[int, Field(ge=0)] = 0
    steps_clear: Annotated[int, Field(ge=0)] = 0
    step_time_overlapping_s: Seconds | None = None
    step_time_clear_s: Seconds | None = None
    slowdown: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="step_time_overlapping_s / step_time_clear_s; None unless both were measured.")


class CommunicationRecord(_Model):
    """Collectives of a multi-process attempt (``layout.world_size_run`` > 1), as rank 0 measured them.

    A single-process attempt calls no collective: it records ``communication_s`` 0.0, ``communication_share``
    0.0, ``communication_per_step_s`` None and every sync-wait figure None (as do summaries written before these
    fields existed). ``communication_s`` sums, over every step of the attempt, rank 0's time inside the gradient
    all-reduce and the loss all-reduce; waiting there for slower ranks is part of it. ``communication_share`` is
    that over the same steps' summed step time (``throughput.step_time_s`` times the steps, first step included).
    The sync wait of a step is the skew between the ranks reaching the gradient all-reduce: each rank's arrival time
    relative to its own step start, combined every ``sync_sample_every`` steps, latest minus earliest (relative
    times need no clock alignment across hosts). ``measured`` is False where the collectives live inside a lazy
    graph (the retired PyTorch/XLA path) and cannot be timed from the host: the figures are then 0 / None, not
    measurements. ``untimed`` names collectives that ran but are not in ``communication_s`` (tensor parallelism's,
    inside DTensor's forward and backward).
    """

    world_size: Annotated[int, Field(ge=1)] = 1
    process_group: str | None = Field(
        default=None, description="The torch.distributed backend of the training collectives (nccl, neuron, gloo); "
                                  "None for a single process and for summaries written before this field.")
    measured: bool = True
    steps_timed: Annotated[int, Field(ge=0)] = 0
    communication_s: Seconds = 0.0
    communication_share: Annotated[float, Field(ge=0)] | None = Field(
        default=0.0, description="communication_s / the timed steps' summed step time; None if no step was timed.")
    communication_per_step_s: Seconds | None = None
    sync_wait_median_s: Seconds | None = None
    sync_wait_max_s: Seconds | None = None
    sync_wait_mean_s: Seconds | None = None
    sync_samples: Annotated[int, Field(ge=0)] = 0
    sync_sample_every: Annotated[int, Field(ge=1)] = 1
    untimed: list[str] = Field(default_factory=list, description="Collectives that ran but are not timed here.")


class LearningRecord(_Model):
    """Whether the attempt's optimizer steps reached its weights. A loop whose updates never land on the weights
    runs, reports losses and raises nothing, so the trainer reads a fingerprint of the trainable parameters (per
    tensor, its sum and L2 norm in float32) before the attempt's first optimizer step and again after its last, and
    compares the two. A sharded tensor is read in process 0's share (no collective, so a lost peer cannot stall the
    summary). An attempt that failed may have lost its device before the second reading and records none; so do
    summaries written before this record existed."""

    weights_changed: bool = Field(description="Any trainable tensor's fingerprint differs between the two readings.")
    steps: Annotated[int, Field(ge=0)] = Field(description="Optimizer steps the attempt ran between the readings.")
    trainable_params: Annotated[int, Field(ge=0)] = Field(
        description="Elements of the trainable parameters (the LoRA adapters for method lora), whole-model count.")
    trainable_tensors: Annotated[int, Field(ge=0)] = 0
    tensors_changed: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Trainable tensors whose fingerprint changed (a LoRA A matrix moves only once its B "
        "matrix has left zero, so not every tensor changes in a step or two).")
    norm_start: float | None = Field(
        default=None, description="L2 norm of the trainable parameters (process 0's share) before the first step.")
    norm_end: float | None = Field(
        default=None, description="The same after the last step.")


class RunSummary(_Model):
    schema_version: Literal[1] = SUMMARY_SCHEMA_VERSION
    trial_id: str
    track: Literal["gpu", "trn2"]
    run: Annotated[str, Field(pattern=RUN_NAME)]
    attempt: Annotated[int, Field(ge=1)]
    backend: Backend
    stand_in: bool
    precision: Literal["bf16", "fp32"]
    status: Status
    exit_code: int
    error: str | None = None
    global_step: Annotated[int, Field(ge=0)]
    max_steps: Annotated[int, Field(ge=1)]
    start_step: Annotated[int, Field(ge=0)]
    resumed_from_step: int | None = None
    resumed_from_uri: str | None = None
    resume_eval: LossPoint | None = Field(
        default=None, description="Validation loss on the fixed evaluation set at the resumed step, before any "
        "training, when the attempt resumed another run's checkpoint (a GPU fallback resuming Trainium2).")
    rerun_steps: Annotated[int, Field(ge=0)] = 0
    steps_this_attempt: Annotated[int, Field(ge=0)] = 0
    tokens_this_attempt: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    samples_consumed: Annotated[int, Field(ge=0)] = 0
    layout: LayoutRecord | None = None
    phases: Phases = Field(default_factory=Phases)
    throughput: Throughput = Field(default_factory=Throughput)
    loss: LossRecord = Field(default_factory=LossRecord)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    checkpoints_skipped: list[SkippedCheckpoint] = Field(default_factory=list)
    checkpoint_restore_s: Seconds = 0.0
    checkpoint_overlap: CheckpointOverlap = Field(default_factory=CheckpointOverlap)
    compile: CompileRecord = Field(default_factory=CompileRecord)
    continuity: Continuity = Field(default_factory=Continuity)
    fault: FaultRecord = Field(default_factory=FaultRecord)
    optimizer: OptimizerRecord | None = None
    communication: CommunicationRecord = Field(default_factory=CommunicationRecord)
    memory_peak_mib: float | None = None
    final_samples: list[FinalSample] = Field(default_factory=list)
    validation_loss: float | None = None
    learning: LearningRecord | None = Field(
        default=None, description="Whether the optimizer steps reached the weights; None in summaries written before "
        "it, and after a failure that left no second reading.")
    environment: EnvironmentRecord
    started_at: str = Field(description="ISO-8601 UTC")
    ended_at: str = Field(description="ISO-8601 UTC")

    @field_validator("stand_in")
    @classmethod
    def _stand_in_backend(cls, value: bool, info: ValidationInfo) -> bool:
        # A flag that contradicts a stand-in backend would give CPU timings a verdict on real hardware: the backend
        # wins (``backend`` is declared first, so it is validated by now; absent when it was refused).
        return value or info.data.get("backend") in STAND_IN_BACKENDS

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, value: str) -> str:
        if not (value.endswith("Z") or value.endswith("+00:00")):
            raise ValueError("must be an ISO-8601 UTC timestamp ending in Z or +00:00")
        return value

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def parse_summary(data: str | bytes | JsonObject) -> RunSummary:
    if isinstance(data, dict):
        return RunSummary.model_validate(data)
    return RunSummary.model_validate_json(data)
