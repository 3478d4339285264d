"""The limits a running trial is held to (``lambdas.domain.money.run_limits``) and the fold's projection of an open run.

Batch's attempt timeout "is measured from the job attempt's startedAt timestamp"
(https://docs.aws.amazon.com/batch/latest/APIReference/API_JobTimeout.html), so time a node spends STARTING (image
pull, container start) is billed outside it: the projection bills an open attempt from STARTING."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from lambdas.domain.money import ledger as L
from lambdas.domain.money.run_limits import Limit, LimitCrossed, RunLimits, TrialUse, crossed, tighter

T0 = datetime(2026, 12, 4, 10, tzinfo=UTC)
AT = "2026-12-04T11:00:00Z"


def test_the_tighter_limit_is_kept_with_where_it_comes_from() -> None:
    assert tighter((None, "trial"), (None, "team")) is None
    assert tighter((300, "trial limits.max_usd"), (Decimal("250.50"), "team quota")) == Limit(
        value=Decimal("250.50"), source="team quota")
    assert tighter((0, "team failed_retries_per_run")) == Limit(value=Decimal(0), source="team failed_retries_per_run")


def test_spend_is_summed_over_the_runs_and_crossed_only_above_the_limit() -> None:
    limits = RunLimits(max_usd=Limit(value=Decimal(10), source="trial limits.max_usd"))
    use = TrialUse(spend_usd={"gpu": "6.00", "trn2": "4.00"}, written_bytes=10)
    assert use.spend == Decimal(10)
    assert crossed(limits, use=use, at=AT) is None  # a 10 USD limit allows 10 USD
    hit = crossed(limits, use=TrialUse(spend_usd={**use.spend_usd, "gpu-fallback": "0.01"}), at=AT,
                  run="gpu-fallback")
    assert hit == LimitCrossed(limit="max_usd", source="trial limits.max_usd", value="10 USD",
                               observed="10.01 USD projected", run="gpu-fallback", at=AT)
    assert hit.message == ("stopped at limit max_usd (trial limits.max_usd): limit 10 USD, observed 10.01 USD "
                           "projected on run gpu-fallback at 2026-12-04T11:00:00Z")


def test_failed_retries_count_only_while_batch_would_retry() -> None:
    limits = RunLimits(failed_retries_per_run=Limit(value=Decimal(1), source="team quota"))
    assert crossed(limits, use=TrialUse(), at=AT, run="trn2", failed_retries=1) is None
    hit = crossed(limits, use=TrialUse(), at=AT, run="trn2", failed_retries=2)
    assert hit is not None and (hit.limit, hit.observed) == ("failed_retries_per_run", "2 failed attempts")
    assert crossed(limits, use=TrialUse(), at=AT, run="trn2", failed_retries=None) is None  # the run has ended


def test_writes_cross_on_bytes_or_on_objects() -> None:
    limits = RunLimits(write_bytes=Limit(value=Decimal(1000), source="b"),
                       write_requests=Limit(value=Decimal(3), source="r"))
    assert limits.counts_writes and not limits.empty and RunLimits().empty
    assert crossed(limits, use=TrialUse(written_bytes=1000, written_objects=3), at=AT) is None
    assert crossed(limits, use=TrialUse(written_bytes=1001, written_objects=1), at=AT).limit == "write_bytes"  # type: ignore[union-attr]
    assert crossed(limits, use=TrialUse(written_bytes=5, written_objects=4), at=AT).limit == "write_requests"  # type: ignore[union-attr]


def _entries() -> list[L.LedgerEntry]:
    def t(status: str, minutes: int) -> L.LedgerEntry:
        return L.transition_entry("t", "gpu", job_id="j", attempt=1, status=status, at=T0 + timedelta(minutes=minutes))
    return [t("SUBMITTED", 0), t("STARTING", 5), t("RUNNING", 25)]


def test_an_open_attempt_is_billed_from_starting_to_the_projection_time() -> None:
    closed = L.fold_run(_entries(), trial_id="t", run="gpu", instance_type="p5.48xlarge")
    assert closed.usage.attempts[0].billed_seconds == 0 and closed.terminal_status is None
    projected = L.fold_run(_entries(), trial_id="t", run="gpu", instance_type="p5.48xlarge",
                           open_until=T0 + timedelta(minutes=35))
    assert projected.usage.attempts[0].billed_seconds == 30 * 60  # STARTING at 5 min to 35 min
    assert projected.complete is False and projected.terminal_status is None
    early = L.fold_run(_entries(), trial_id="t", run="gpu", instance_type="p5.48xlarge", open_until=T0)
    assert early.usage.attempts[0].billed_seconds == 0  # a projection never bills before the start
