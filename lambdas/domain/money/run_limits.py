"""The limits a running trial is held to, and the check made as its facts arrive.

At submission the worst case (every attempt at its timeout) is checked against the trial's ``limits.max_usd`` and
the team's quotas. The worst case cannot see everything a run is billed for: Batch's attempt timeout starts at the
attempt's ``startedAt`` (AWS Batch user guide, "Job timeouts"), so image pull and container start are billed
outside it, and storage is not in it at all. So the limits are frozen onto the trial item at submission and the
ledger checks them again as facts arrive: the run's projected spend (its closed attempts, and an open attempt
billed up to the fact's time), the objects and bytes the trial's jobs wrote, and the failed attempts a run's job
has already retried. The first limit crossed stops the trial through the cancel path, and the trial's report says
which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

LimitName = Literal["max_usd", "failed_retries_per_run", "write_bytes", "write_requests"]
# Trial item attributes the ledger keeps current (one spend figure per run; the trial's write counters).
SPEND_ATTRIBUTE = "spend_usd#{run}"
WRITTEN_BYTES = "written_bytes"
WRITTEN_OBJECTS = "written_objects"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Limit(_Model):
    value: Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]
    source: str = Field(description="where the limit comes from: the trial's own field or the team quota")


class RunLimits(_Model):
    """What a trial's runs may use, frozen at submission (a quota changed later does not move a running trial)."""

    max_usd: Limit | None = None
    failed_retries_per_run: Limit | None = None
    write_bytes: Limit | None = None
    write_requests: Limit | None = None

    @property
    def empty(self) -> bool:
        return not any((self.max_usd, self.failed_retries_per_run, self.write_bytes, self.write_requests))

    @property
    def counts_writes(self) -> bool:
        return self.write_bytes is not None or self.write_requests is not None


def tighter(*candidates: tuple[Decimal | int | float | None, str]) -> Limit | None:
    """The smallest of the limits that are set (each with where it comes from)."""
    present = [(Decimal(str(value)), source) for value, source in candidates if value is not None]
    if not present:
        return None
    value, source = min(present, key=lambda pair: pair[0])
    return Limit(value=value, source=source)


class LimitCrossed(_Model):
    """The limit a running trial crossed: which, its value and source, what was observed, on which run, when."""

    limit: LimitName
    source: str
    value: str
    observed: str
    run: str | None = None
    at: str

    @property
    def message(self) -> str:
        where = f" on run {self.run}" if self.run else ""
        return (f"stopped at limit {self.limit} ({self.source}): limit {self.value}, observed {self.observed}"
                f"{where} at {self.at}")


def _shown(value: Decimal) -> str:
    """A limit as people write it: 30, not 30.0 or 3E+1."""
    return format(value.normalize(), "f")


@dataclass(frozen=True)
class TrialUse:
    """What a running trial has used, as its record's counters hold it."""

    spend_usd: Mapping[str, str] = field(default_factory=dict)  # per run, as the ledger last projected it
    written_bytes: int = 0
    written_objects: int = 0

    @property
    def spend(self) -> Decimal:
        """The trial's spend: the sum over its runs."""
        return sum((Decimal(v) for v in self.spend_usd.values()), Decimal(0))


def crossed(limits: RunLimits, *, use: TrialUse, at: str, run: str | None = None,
            failed_retries: int | None = None) -> LimitCrossed | None:
    """The first limit the trial's use (and, for one run, its failed retries) is over; None if none.
    A limit is crossed when use goes above it: a limit of 0 retries allows none, a 5 USD limit allows 5 USD."""
    spend = use.spend
    if limits.max_usd is not None and spend > limits.max_usd.value:
        return LimitCrossed(limit="max_usd", source=limits.max_usd.source,
                            value=f"{_shown(limits.max_usd.value)} USD",
                            observed=f"{spend.quantize(Decimal('0.01'))} USD projected", run=run, at=at)
    if (limits.failed_retries_per_run is not None and failed_retries is not None
            and failed_retries > limits.failed_retries_per_run.value):
        return LimitCrossed(limit="failed_retries_per_run", source=limits.failed_retries_per_run.source,
                            value=f"{_shown(limits.failed_retries_per_run.value)} retries",
                            observed=f"{failed_retries} failed attempts", run=run, at=at)
    written = Decimal(use.written_bytes)
    if limits.write_bytes is not None and written > limits.write_bytes.value:
        return LimitCrossed(limit="write_bytes", source=limits.write_bytes.source,
                            value=f"{_shown(limits.write_bytes.value)} bytes", observed=f"{written} bytes written",
                            at=at)
    objects = Decimal(use.written_objects)
    if limits.write_requests is not None and objects > limits.write_requests.value:
        return LimitCrossed(limit="write_requests", source=limits.write_requests.source,
                            value=f"{_shown(limits.write_requests.value)} objects",
                            observed=f"{objects} objects written", at=at)
    return None
