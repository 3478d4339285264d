"""DynamoDB ThrottlingException and S3 SlowDown, injected under botocore's retry layer.

Brief throttling is absorbed by the adapters' retry configuration (adaptive mode, 8 attempts); persistent
throttling fails the invocation without partial state, and the redelivery that follows converges on the clean
ledger.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability import figures
from tests.reliability.aws_faults import Throttle
from tests.reliability.trial_events import (
    clear_tables,
    costs,
    deliver,
    deliver_one,
    facts,
    submit_trial,
    total_usd,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def no_backoff_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record botocore's retry delays instead of sleeping them, so the suite stays fast.

    Adaptive mode sleeps in two places: the retry backoff (``RetryHandler.needs_retry`` returns the delay) and the
    client-side rate limiter's token bucket, which slows sending after throttling. Both still run their logic.
    """
    import botocore.retries.bucket as bucket
    import botocore.retries.standard as standard

    delays: list[float] = []
    original = standard.RetryHandler.needs_retry

    def needs_retry(self: Any, **kwargs: Any) -> Any:
        delay = original(self, **kwargs)
        if delay:
            delays.append(float(delay))
            return 0
        return delay

    monkeypatch.setattr(standard.RetryHandler, "needs_retry", needs_retry)
    monkeypatch.setattr(bucket.TokenBucket, "acquire", lambda self, amount=1, block=True: True)
    return delays


def _baseline(aws: dict[str, Any], example: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
    trial = submit_trial(aws, example)
    deliver(trial.events)
    baseline = facts(aws), costs(aws)
    clear_tables(aws)
    return trial, *baseline


@pytest.mark.parametrize(("service", "operation"), [("dynamodb", "PutItem"), ("dynamodb", "Query"),
                                                    ("s3", "GetObject")])
def test_brief_throttling_is_retried(aws: dict[str, Any], example: dict[str, Any], no_backoff_sleep: list[float],
                                     service: str, operation: str) -> None:
    from lambdas.adapters.aws import client

    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    throttles = []
    for kind, event in trial.events:
        # Two throttled answers before each event's first call of the operation goes through.
        throttle = Throttle(service, operation, times=2).install(client(service))
        deliver_one(kind, event)
        throttle.remove(client(service))
        throttles.append(throttle)
    assert facts(aws) == baseline_facts and costs(aws) == baseline_costs
    injected = sum(t.injected for t in throttles)
    assert injected > 0 and len(no_backoff_sleep) >= injected
    figures.record(f"faults.throttling.{service}.{operation}.brief", throttles_injected=injected,
                   retries=len(no_backoff_sleep), ledger_entries=len(facts(aws)),
                   ledger_entries_expected=len(baseline_facts),
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")


@pytest.mark.parametrize(("service", "operation"), [("dynamodb", "PutItem"), ("s3", "GetObject")])
def test_persistent_throttling_fails_safely_and_redelivery_converges(
        aws: dict[str, Any], example: dict[str, Any], no_backoff_sleep: list[float], service: str,
        operation: str) -> None:
    from botocore.exceptions import ClientError

    from lambdas.adapters.aws import client

    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    failed: list[Any] = []
    for kind, event in trial.events:
        throttle = Throttle(service, operation, times=None).install(client(service))
        try:
            deliver_one(kind, event)
        except Exception as exc:
            # The throttled call fails the invocation: the function's own call, or the idempotency layer's record
            # (the same table and client), which Powertools raises as its persistence error caused by it.
            cause = exc if isinstance(exc, ClientError) else exc.__cause__
            assert isinstance(cause, ClientError), exc
            assert cause.response["Error"]["Code"] in ("ThrottlingException", "SlowDown")
            failed.append((kind, event))
        finally:
            throttle.remove(client(service))
        # Whatever got through is whole facts of the clean run: nothing half-written, nothing extra.
        assert set(facts(aws)) <= set(baseline_facts)
    assert failed
    # Powertools deletes the in-progress idempotency record of a failed invocation, so the retry runs again.
    assert aws["ddb"].scan(TableName="idempotency", FilterExpression="#s = :p",
                           ExpressionAttributeNames={"#s": "status"},
                           ExpressionAttributeValues={":p": {"S": "INPROGRESS"}})["Count"] == 0
    for kind, event in failed:
        deliver_one(kind, event)  # EventBridge's retries, once the throttling has passed
    figures.record(f"faults.throttling.{service}.{operation}.persistent", invocations_failed=len(failed),
                   attempts_per_call=1 + len(no_backoff_sleep) // max(1, len(failed)),
                   ledger_entries=len(facts(aws)), ledger_entries_expected=len(baseline_facts),
                   costs_match=costs(aws) == baseline_costs,
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")
    assert facts(aws) == baseline_facts
