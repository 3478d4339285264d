"""The AWS events the control plane reads, as data: the `detail` of EventBridge's "Batch Job State Change" and
Amazon S3 "Object Created" events. Only the fields the control plane reads are declared; AWS adds fields over time,
so unknown ones are ignored. The EventBridge envelopes around them are in ``lambdas.runtime.events``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.vocabulary import BATCH_TERMINAL, BatchStatus


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)


class KeyValue(_Lenient):
    name: str
    value: str = ""


class BatchContainer(_Lenient):
    environment: list[KeyValue] = Field(default_factory=list)
    exit_code: int | None = Field(default=None, alias="exitCode")
    reason: str | None = None
    log_stream_name: str | None = Field(default=None, alias="logStreamName")
    container_instance_arn: str | None = Field(default=None, alias="containerInstanceArn")


class BatchAttempt(_Lenient):
    container: BatchContainer | None = None
    started_at_ms: int | None = Field(default=None, alias="startedAt")
    stopped_at_ms: int | None = Field(default=None, alias="stoppedAt")
    status_reason: str | None = Field(default=None, alias="statusReason")


class NodeRange(_Lenient):
    target_nodes: str = Field(default="", alias="targetNodes")
    container: BatchContainer | None = None


class NodeProperties(_Lenient):
    num_nodes: int = Field(default=1, ge=1, alias="numNodes")
    node_range_properties: list[NodeRange] = Field(default_factory=list, alias="nodeRangeProperties")


class BatchJobStateChangeDetail(_Lenient):
    """`detail` of an EventBridge "Batch Job State Change" event (the job as DescribeJobs would return it).

    A job is known by its ``jobId``: the Batch API's JobDetail shape requires it, but not ``jobArn``, which older
    samples of this event and of DescribeJobs leave out, so the ARN is kept where it comes and relied on nowhere."""

    job_arn: str | None = Field(default=None, alias="jobArn")
    job_name: str = Field(alias="jobName")
    job_id: str = Field(alias="jobId", min_length=1)
    job_queue: str = Field(alias="jobQueue")
    status: BatchStatus
    status_reason: str | None = Field(default=None, alias="statusReason")
    attempts: list[BatchAttempt] = Field(default_factory=list)
    created_at_ms: int | None = Field(default=None, alias="createdAt")
    started_at_ms: int | None = Field(default=None, alias="startedAt")
    stopped_at_ms: int | None = Field(default=None, alias="stoppedAt")
    job_definition: str = Field(default="", alias="jobDefinition")
    container: BatchContainer | None = None
    node_properties: NodeProperties | None = Field(default=None, alias="nodeProperties")
    tags: dict[str, str] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in BATCH_TERMINAL

    @property
    def attempt(self) -> int:
        """1-based attempt this transition belongs to: Batch lists finished attempts, the current one is next."""
        finished = len(self.attempts)
        return max(1, finished if self.terminal else finished + 1)

    @property
    def nodes(self) -> int:
        return self.node_properties.num_nodes if self.node_properties else 1

    def changed_at(self) -> datetime:
        """When the job last changed state, as DescribeJobs reports it (stopped, else started, else created)."""
        at = self.stopped_at_ms or self.started_at_ms or self.created_at_ms
        return ms_to_datetime(at) if at else datetime.now(UTC)

    def environment(self) -> dict[str, str]:
        """The job's container environment (the main node's for multi-node jobs)."""
        containers = [self.container] if self.container else []
        if self.node_properties:
            containers += [r.container for r in self.node_properties.node_range_properties if r.container]
        env: dict[str, str] = {}
        for container in reversed(containers):
            env.update({kv.name: kv.value for kv in container.environment})
        return env


class S3Bucket(_Lenient):
    name: str = Field(min_length=3)


class S3Object(_Lenient):
    key: str = Field(min_length=1)
    size: int = Field(default=0, ge=0)
    etag: str = Field(default="", alias="etag")
    version_id: str | None = Field(default=None, alias="version-id")
    sequencer: str = ""


class S3ObjectCreatedDetail(_Lenient):
    """`detail` of an EventBridge "Object Created" event from Amazon S3."""

    version: str = "0"
    bucket: S3Bucket
    object: S3Object
    request_id: str = Field(default="", alias="request-id")
    requester: str = ""
    reason: str | None = None


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
