"""The compile-cache registry in DynamoDB: one item per cache key (components, objects, hits, misses, failures).

Counts move only through conditional updates keyed by what was observed (trial, run, attempt), so a summary
seen twice is counted once; object sizes are a map keyed by object name, so a repeated event rewrites the same
value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lambdas.adapters.aws import client, pages, written
from lambdas.adapters.dynamo_items import from_item, to_item
from lambdas.domain.cache.cache_entries import RegistryEntry
from lambdas.domain.json_types import JsonObject
from lambdas.services.ports import Outcome

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, UpdateItemInputTypeDef


class DynamoCacheRegistry:
    def __init__(self, table: str) -> None:
        self.table = table

    def _update(
        self,
        key: str,
        expression: str,
        values: dict[str, AttributeValueTypeDef],
        names: dict[str, str] | None = None,
        condition: str | None = None,
    ) -> bool:
        kwargs: UpdateItemInputTypeDef = {
            "TableName": self.table,
            "Key": {"cache_key": {"S": key}},
            "UpdateExpression": expression,
        }
        if values:
            kwargs["ExpressionAttributeValues"] = values
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if condition:
            kwargs["ConditionExpression"] = condition
        return written(lambda: client("dynamodb").update_item(**kwargs))

    def ensure(
        self,
        key: str,
        *,
        prefix: str,
        model_slug: str,
        compiler_version: str,
        components: JsonObject | None,
        at: str,
    ) -> None:
        values = to_item(
            {
                ":p": prefix,
                ":m": model_slug,
                ":c": compiler_version,
                ":at": at,
                ":zero": 0,
                ":empty": {},
                ":status": "new",
            }
        )
        expression = (
            "SET prefix = if_not_exists(prefix, :p), model_slug = if_not_exists(model_slug, :m), "
            "compiler_version = if_not_exists(compiler_version, :c), created_at = if_not_exists("
            "created_at, :at), hits = if_not_exists(hits, :zero), misses = if_not_exists(misses, :zero), "
            "failures = if_not_exists(failures, :zero), objects = if_not_exists(objects, :empty), "
            "#st = if_not_exists(#st, :status)"
        )
        names = {"#st": "status"}
        if components:
            values.update(to_item({":comp": components}))
            expression += ", components = :comp"
        self._update(key, expression, values, names)

    def record_object(self, key: str, name: str, size: int, at: str) -> None:
        self._update(key, "SET objects.#o = :s", to_item({":s": size}), {"#o": name})
        self.touch(key, at, field="last_object_at")

    def touch(self, key: str, at: str, field: str = "last_used_at") -> None:
        """Move a timestamp forward only (events arrive out of order)."""
        self._update(
            key, "SET #f = :at", to_item({":at": at}), {"#f": field}, condition="attribute_not_exists(#f) OR #f < :at"
        )

    def observe(
        self, key: str, observation: str, outcome: Outcome, compile_s: float, at: str, reason: str | None = None
    ) -> bool:
        """Count one run attempt's use of the entry (hit, miss or failed compile) once."""
        values = to_item({":obs": observation, ":one": 1, ":s": compile_s})
        values[":obsset"] = {"SS": [observation]}
        expression = "ADD observed :obsset"
        if outcome == "hit":
            # Which trials an entry served: once another trial hits it, its compile is shared infrastructure.
            expression += ", hits :one, hit_compile_s_total :s, hit_trials :trial"
            values[":trial"] = {"SS": [observation.split("#", 1)[0]]}
        elif outcome == "miss":
            expression += ", misses :one SET first_compile_s = if_not_exists(first_compile_s, :s), #st = :ready"
            values.update(to_item({":ready": "ready"}))
        else:
            values.pop(":s")
            expression += ", failures :one SET #st = :failed, failure_reason = :why, retry_requested = :no"
            values.update(to_item({":failed": "failed", ":why": reason or "compilation failed", ":no": False}))
        names = {"#st": "status"} if outcome != "hit" else None
        counted = self._update(
            key, expression, values, names, condition="attribute_not_exists(observed) OR NOT contains(observed, :obs)"
        )
        self.touch(key, at)
        return counted

    def request_retry(self, key: str) -> bool:
        return self._update(
            key,
            "SET retry_requested = :yes, #st = :retry",
            to_item({":yes": True, ":retry": "retry_requested", ":failed": "failed"}),
            {"#st": "status"},
            condition="#st = :failed",
        )

    def reject(self, key: str, reason: str, at: str) -> None:
        self._update(
            key,
            "SET #st = :rejected, rejected_reason = :why, rejected_at = :at ADD rejections :one",
            to_item({":rejected": "rejected", ":why": reason[:1000], ":at": at, ":one": 1}),
            {"#st": "status"},
        )

    def get(self, key: str) -> RegistryEntry | None:
        got = client("dynamodb").get_item(TableName=self.table, Key={"cache_key": {"S": key}}, ConsistentRead=True)
        return RegistryEntry.model_validate(from_item(got["Item"])) if "Item" in got else None

    def iter_all(self) -> Iterator[RegistryEntry]:
        for page in pages("dynamodb", "scan", TableName=self.table):
            for item in page["Items"]:
                yield RegistryEntry.model_validate(from_item(item))

    def delete(self, key: str) -> None:
        client("dynamodb").delete_item(TableName=self.table, Key={"cache_key": {"S": key}})
