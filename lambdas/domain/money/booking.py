"""A trial's booking against its team's quotas, made in one conditional write with the trial item.

Admission books the trial's place (``concurrent_trials``), its jobs per queue (``concurrent_jobs_per_queue``), its
warm-up compile job (``concurrent_compile_jobs``) and its worst case (``usd_per_month``) on the team's usage item,
in the same DynamoDB transaction that creates the trial item. The transaction's condition is the quotas' room, so of
two interleaved submissions that would together cross a quota exactly one is admitted.

The month boundary: a trial's dollars are booked to the calendar month (UTC) it was admitted in, whenever its jobs
spend them. Its worst case stays booked until the workflow closes its costs; the booking is then corrected to the
settled cost. A trial that never started (rejected, cancelled or withdrawn before its execution) gives its worst case
back. A trial stopped while running keeps its worst case booked: its stopped jobs never reach the workflow's cost
step, and the worst case is an upper bound of what they spent.

Places (trial, queue jobs, compile job) are released when the trial reaches a terminal status, in the same
transaction as that status change, so a release happens once however often the change is retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.vocabulary import COMPILE_QUEUE_SUFFIX

if TYPE_CHECKING:  # a trial's booking is read by functions that never check quotas
    from lambdas.domain.trial.governance import Quotas

ACTIVE = "active"  # trials holding a place
COMPILE_JOBS = "compile_jobs"  # warm-up compile jobs booked across the team's compile queues


def month_attribute(month: str) -> str:
    """The usage item's attribute holding the dollars booked to ``month`` (``YYYY-MM``)."""
    return f"usd#{month}"


def queue_attribute(queue: str) -> str:
    return f"jobs#{queue}"


class Booking(BaseModel):
    """What a trial holds on its team's usage item (stored on the trial item, so its release undoes exactly it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    team: str
    month: str = Field(pattern=r"^\d{4}-\d{2}$", description="the calendar month (UTC) the dollars are booked to")
    usd: Decimal = Field(ge=0, description="the worst case booked, USD (0 when unbounded: no usd_per_month quota)")
    queues: dict[str, int] = Field(default_factory=dict, description="jobs booked per job queue")

    @property
    def compile_jobs(self) -> int:
        return sum(n for queue, n in self.queues.items() if queue.endswith(COMPILE_QUEUE_SUFFIX))

    def additions(self) -> dict[str, Decimal]:
        """What admission adds to the usage item."""
        out = {ACTIVE: Decimal(1), month_attribute(self.month): self.usd}
        for queue, n in self.queues.items():
            out[queue_attribute(queue)] = Decimal(n)
        if self.compile_jobs:
            out[COMPILE_JOBS] = Decimal(self.compile_jobs)
        return out

    def release(self, *, started: bool, settled_usd: Decimal | None = None) -> dict[str, Decimal]:
        """What the trial's end adds to the usage item: its places back, and its dollars corrected to what it
        spent (all of them back when it never started; the settled cost when the workflow closed it)."""
        out = {name: -value for name, value in self.additions().items() if name != month_attribute(self.month)}
        if not started:
            out[month_attribute(self.month)] = -self.usd
        elif settled_usd is not None:
            out[month_attribute(self.month)] = settled_usd - self.usd
        return out


def room(quotas: Quotas, booking: Booking) -> dict[str, Decimal]:
    """The most each usage attribute may hold before ``booking`` is added to it: the transaction's condition is
    ``attribute <= room`` (or absent). Attributes without a quota have no condition."""
    out: dict[str, Decimal] = {}
    if quotas.concurrent_trials is not None:
        out[ACTIVE] = Decimal(quotas.concurrent_trials - 1)
    if quotas.usd_per_month is not None:
        out[month_attribute(booking.month)] = Decimal(quotas.usd_per_month) - booking.usd
    if quotas.concurrent_jobs_per_queue is not None:
        for queue, n in booking.queues.items():
            out[queue_attribute(queue)] = Decimal(quotas.concurrent_jobs_per_queue - n)
    if quotas.concurrent_compile_jobs is not None and booking.compile_jobs:
        out[COMPILE_JOBS] = Decimal(quotas.concurrent_compile_jobs - booking.compile_jobs)
    return out


# A team's usage item as the table returns it: attribute name to number (``ACTIVE``, month and queue attributes).
UsageItem: TypeAlias = Mapping[str, int | float | Decimal]


class UsageCounts(BaseModel):
    """The team's usage item as read back: what its bookings hold now."""

    model_config = ConfigDict(defer_build=True)

    active: int = 0
    month_usd: Decimal = Decimal(0)
    queue_jobs: dict[str, int] = Field(default_factory=dict)

    @classmethod
    def of(cls, item: UsageItem, month: str) -> UsageCounts:
        queues = {name.removeprefix("jobs#"): int(str(value)) for name, value in item.items()
                  if name.startswith("jobs#")}
        return cls(active=int(str(item.get(ACTIVE, 0))), month_usd=Decimal(str(item.get(month_attribute(month), 0))),
                   queue_jobs=queues)
