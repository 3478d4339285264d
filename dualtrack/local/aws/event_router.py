"""Deliver EventBridge events to Lambda targets in-process, asynchronously, with retries and a DLQ.

moto's EventBridge matches events against rules (the synthesized rules' real patterns) but does not deliver to
Lambda targets. :class:`EventRouter` takes them from ``moto_shims.deliver_rule_targets``: moto still delivers to
the targets it supports, and each Lambda target gets the event through a queue drained by a worker thread, as
EventBridge invokes Lambdas asynchronously. A handler that raises is retried (``RetryPolicy.MaximumRetryAttempts``)
and then sent to the target's dead-letter queue, so a failing handler neither loses the event nor blocks the
publisher.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dualtrack.local.aws.moto_shims import deliver_rule_targets
from dualtrack.local.json_shapes import integer, mapping, optional_text
from lambdas.domain.json_types import JsonObject, JsonValue

if TYPE_CHECKING:
    from moto.events.utils import EventMessageType

Invoke = Callable[[str, JsonObject], JsonValue]  # (function ARN, event) -> handler result


@dataclass
class Delivery:
    rule: str
    function_arn: str
    event: JsonObject
    max_retries: int
    dlq_arn: str | None
    attempt: int = 0


@dataclass
class EventRouter:
    invoke: Invoke
    on_failure: Callable[[Delivery, BaseException], None] | None = None
    workers: int = 4  # EventBridge invokes targets concurrently; handlers are idempotent and order-independent
    delivered: list[tuple[str, str]] = field(default_factory=list)  # (rule, detail-type) as delivered
    failed: list[Delivery] = field(default_factory=list)
    _queue: queue.Queue[Delivery | None] = field(default_factory=queue.Queue)
    _threads: list[threading.Thread] = field(default_factory=list)
    _pending: int = 0
    _idle: threading.Condition = field(default_factory=threading.Condition)

    @contextlib.contextmanager
    def install(self) -> Iterator[EventRouter]:
        self._threads = [threading.Thread(target=self._drain, name=f"eventbridge-lambda-{i}", daemon=True)
                         for i in range(self.workers)]
        for thread in self._threads:
            thread.start()
        try:
            with deliver_rule_targets(self.route):
                yield self
        finally:
            self.join()
            for _ in self._threads:
                self._queue.put(None)

    def route(self, rule: str, targets: list[JsonObject], event: EventMessageType) -> None:
        """A rule matched ``event``: queue it for each of the rule's Lambda targets, with the target's retry
        policy and dead-letter queue."""
        for target in targets:
            self.submit(Delivery(
                rule=rule, function_arn=str(target["Arn"]), event=json.loads(json.dumps(event, default=str)),
                max_retries=integer(mapping(target.get("RetryPolicy") or {}).get("MaximumRetryAttempts", 2)),
                dlq_arn=optional_text(mapping(target.get("DeadLetterConfig") or {}).get("Arn")),
            ))

    def submit(self, delivery: Delivery) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(delivery)

    def join(self, timeout: float | None = 60.0) -> bool:
        """Wait until every submitted event has been handled (or dead-lettered)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout)

    def _drain(self) -> None:
        while True:
            delivery = self._queue.get()
            if delivery is None:
                return
            try:
                self._deliver(delivery)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _deliver(self, delivery: Delivery) -> None:
        while True:
            delivery.attempt += 1
            try:
                self.invoke(delivery.function_arn, delivery.event)
            except Exception as exc:  # a handler error: EventBridge retries, then dead-letters
                if delivery.attempt <= delivery.max_retries:
                    continue
                self.failed.append(delivery)
                self._dead_letter(delivery, exc)
                if self.on_failure:
                    self.on_failure(delivery, exc)
                return
            self.delivered.append((delivery.rule, str(delivery.event.get("detail-type"))))
            return

    def _dead_letter(self, delivery: Delivery, exc: BaseException) -> None:
        if not delivery.dlq_arn:
            return
        import boto3  # deferred: only on the failure path

        _, _, _, region, _, name = delivery.dlq_arn.split(":", 5)
        sqs = boto3.client("sqs", region_name=region)
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(delivery.event),
                         MessageAttributes={"ERROR": {"DataType": "String", "StringValue": repr(exc)[:256]},
                                            "RULE_ARN": {"DataType": "String", "StringValue": delivery.rule}})
