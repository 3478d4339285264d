"""The persistence and service seams the use cases depend on; DynamoDB/S3/Step Functions adapters implement them
and tests can substitute in-memory fakes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lambdas.domain.json_types import JsonObject, JsonValue

if TYPE_CHECKING:  # the ports only name these types: a function loads the modules its own path uses
    from lambdas.domain.cache.cache_entries import RegistryEntry
    from lambdas.domain.events import BatchJobStateChangeDetail
    from lambdas.domain.money.booking import Booking, UsageItem
    from lambdas.domain.money.ledger import LedgerEntry, LedgerRow, RowKind, StoredCost
    from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord


class Ledger(Protocol):
    def append(self, entry: LedgerEntry) -> bool:
        """Store a fact unless its key is already there; True when it was new."""
        ...

    def entries(self, run_key: str) -> list[LedgerEntry]: ...

    def put_cost(self, run_key: str, body: StoredCost, facts: int) -> bool:
        """Store a run's cost unless a fold over as many or more facts is already stored."""
        ...

    def cost(self, run_key: str) -> StoredCost | None: ...

    def iter_costs(self) -> Iterator[LedgerRow]:
        """Every run's cost entry (rows of kind ``cost``), in one pass."""
        ...

    def iter_kinds(self, kinds: tuple[RowKind, ...]) -> Iterator[LedgerRow]:
        """Entries of the given kinds, each with its run and its body read as its kind's model, in one pass."""
        ...


class Trials(Protocol):
    """The trials table. Reads return :class:`TrialRecord` (the adapter migrates items of older versions); writes
    of single attributes take JSON values under the record's field names (``TrialRecord.to_item`` is the layout)."""

    def create(self, record: TrialRecord) -> bool: ...

    def get(self, trial_id: str) -> TrialRecord | None: ...

    def delete(self, trial_id: str) -> None: ...

    def update(self, trial_id: str, **fields: JsonValue) -> None: ...

    def transition(self, trial_id: str, statuses: tuple[str, ...], *, if_updated_at: str | None = None,
                   **fields: JsonValue) -> bool:
        """Update only while the trial's status is one of ``statuses`` (and, given ``if_updated_at``, while its
        ``updated_at`` is still the one the caller read); False (nothing written) otherwise."""
        ...

    def tally(self, trial_id: str, *, set_fields: Mapping[str, JsonValue] | None = None,
              add: Mapping[str, int] | None = None) -> TrialRecord | None:
        """Set fields and add to counters in one write; the whole record after it (None: no such trial)."""
        ...

    def list(self, limit: int, start: str | None, team: str | None = None) -> tuple[list[TrialRecord], str | None]:
        """A page of trials: ``team``'s newest first, or every team's when None."""
        ...

    def of_team(self, team: str) -> Iterable[TrialRecord]: ...

    def iter_all(self) -> Iterable[TrialRecord]: ...

    def with_status(self, statuses: tuple[str, ...]) -> Iterable[TrialRecord]: ...

    def usage(self, team: str) -> UsageItem | None:
        """The team's usage item (what its trials' bookings hold), None before its first booking."""
        ...

    def seed_usage(self, team: str, values: Mapping[str, Decimal], bookings: Mapping[str, Booking]) -> bool:
        """Create the team's usage item once (False: it exists), giving each listed trial its booking."""
        ...

    def admit(self, record: TrialRecord, additions: Mapping[str, Decimal],
              limits: Mapping[str, Decimal]) -> Literal["created", "exists", "over_quota"]:
        """Create the trial and add ``additions`` to its team's usage item in one write, conditional on the trial
        being new and each attribute in ``limits`` holding at most its value."""
        ...

    def close(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
              **fields: JsonValue) -> bool:
        """``transition`` and, in the same write, add ``release`` to the team's usage item."""
        ...

    def withdraw(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
                 if_updated_at: str | None = None) -> bool:
        """Delete a trial that never started (status in ``statuses``, no execution, and, given ``if_updated_at``,
        unchanged since the caller read it) and release its booking."""
        ...

    def tally_once(self, trial_id: str, fact: str, add: Mapping[str, int], *, now_s: int) -> TrialRecord | None:
        """Add to the trial's counters once per ``fact``: the record after, or None when already counted."""
        ...


class Objects(Protocol):
    def put_json(self, key: str, value: Any, *, if_absent: bool = False) -> bool: ...

    def put_text(self, key: str, text: str, content_type: str) -> None: ...

    def get_json(self, key: str) -> Any | None: ...

    def list_keys(self, prefix: str) -> list[str]: ...

    def sizes(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` with its size in bytes."""
        ...

    def delete_key(self, key: str) -> None: ...

    def uri(self, key: str) -> str: ...

    def presigned_get(self, key: str, expires_s: int) -> str:
        """A time-limited URL that reads the object without credentials."""
        ...


class Sources(Protocol):
    """Documents a trial points at outside the artifacts bucket (its baseline logs), by URI."""

    def read(self, uri: str, max_bytes: int) -> bytes: ...


Outcome = Literal["hit", "miss", "failed"]


class CacheRegistry(Protocol):
    """The compile-cache registry: one entry per cache key, counting each run attempt's outcome once."""

    def ensure(self, key: str, *, prefix: str, model_slug: str, compiler_version: str,
               components: JsonObject | None, at: str) -> None: ...

    def record_object(self, key: str, name: str, size: int, at: str) -> None: ...

    def touch(self, key: str, at: str, field: str = "last_used_at") -> None: ...

    def observe(self, key: str, observation: str, outcome: Outcome, compile_s: float, at: str,
                reason: str | None = None) -> bool: ...

    def request_retry(self, key: str) -> bool: ...

    def reject(self, key: str, reason: str, at: str) -> None:
        """The entry disagrees with its completion marker: status ``rejected`` with the reason, until the run that
        rebuilds it reports its miss (ready again)."""
        ...

    def get(self, key: str) -> RegistryEntry | None: ...

    def iter_all(self) -> Iterator[RegistryEntry]: ...

    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class Started:
    execution_arn: str
    already_submitted: bool


class Workflow(Protocol):
    """The trial workflow (a Step Functions state machine): one execution per trial, named by it."""

    def execution_arn(self, name: str) -> str: ...

    def start(self, name: str, execution_input: ExecutionInput) -> Started: ...

    def status(self, execution_arn: str) -> str | None: ...

    def stop(self, execution_arn: str, cause: str) -> str: ...


class RunMetrics(Protocol):
    """What a training attempt published as metrics (CloudWatch)."""

    def progress(self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
                 ) -> tuple[int | None, float | None]: ...

    def phases(self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
               ) -> tuple[dict[str, float], int | None]: ...


class BatchJobs(Protocol):
    """What AWS Batch says about the jobs the workflow submitted."""

    def queue_instance_type(self, job_queue: str) -> str | None:
        """The one instance type the queue's compute environments allow (None when not pinned to one)."""
        ...

    def describe(self, job_id: str) -> BatchJobStateChangeDetail | None:
        """The job as DescribeJobs reports it, in the shape of a state-change event's detail."""
        ...


class JobTerminator(Protocol):
    """What finishing a stop may do to a job the execution's stop missed."""

    def describe(self, job_id: str) -> BatchJobStateChangeDetail | None: ...

    def terminate(self, job_id: str, reason: str) -> None:
        """TerminateJob: a job not yet running is cancelled, a running one is stopped (it ends FAILED)."""
        ...


class Notifier(Protocol):
    def publish(self, subject: str, message: str) -> str:
        """Send a message; returns its id."""
        ...


class JobDescriptions(Protocol):
    def describe_job(self, job_id: str) -> dict[str, Any] | None:
        """The job exactly as DescribeJobs returns it (its status, container environment, parameters and tags),
        or None when Batch does not know it."""
        ...


class CallerIdentity(Protocol):
    """Who signed a presigned STS GetCallerIdentity request (``lambdas.domain.job_access.identity_request``)."""

    def caller(self, presigned_url: str) -> str:
        """Make the request and return the signer's ARN; IdentityUnproven when the URL is not such a request to
        STS, or STS refuses it (a bad or expired signature)."""
        ...


class WriterRole(Protocol):
    def assume(self, *, session_name: str, tags: dict[str, str], duration_s: int) -> dict[str, str]:
        """Temporary credentials of the trial writer role carrying ``tags`` as session tags: AccessKeyId,
        SecretAccessKey, SessionToken and Expiration (ISO 8601)."""
        ...
