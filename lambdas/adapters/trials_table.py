"""The trials table: one item per trial (frozen spec hash, status, workflow execution, triage, worst case)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from lambdas.adapters.aws import client, pages, written
from lambdas.adapters.dynamo_items import from_item, to_item


class DynamoTrials:
    def __init__(self, table: str) -> None:
        self.table = table

    def create(self, item: dict[str, Any]) -> bool:
        return written(lambda: client("dynamodb").put_item(
            TableName=self.table, Item=to_item(item), ConditionExpression="attribute_not_exists(trial_id)"
        ))

    def get(self, trial_id: str) -> dict[str, Any] | None:
        got = client("dynamodb").get_item(TableName=self.table, Key={"trial_id": {"S": trial_id}}, ConsistentRead=True)
        return from_item(got["Item"]) if "Item" in got else None

    def delete(self, trial_id: str) -> None:
        client("dynamodb").delete_item(TableName=self.table, Key={"trial_id": {"S": trial_id}})

    def update(self, trial_id: str, **fields: Any) -> None:
        values = to_item({f":v{i}": v for i, v in enumerate(fields.values())})
        names = {f"#n{i}": k for i, k in enumerate(fields)}
        assignments = ", ".join(f"#n{i} = :v{i}" for i in range(len(fields)) if f":v{i}" in values)
        removals = ", ".join(f"#n{i}" for i in range(len(fields)) if f":v{i}" not in values)
        expression = (f"SET {assignments}" if assignments else "") + (f" REMOVE {removals}" if removals else "")
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names}
        if values:
            kwargs["ExpressionAttributeValues"] = values
        client("dynamodb").update_item(
            TableName=self.table,
            Key={"trial_id": {"S": trial_id}},
            UpdateExpression=expression.strip(),
            ConditionExpression="attribute_exists(trial_id)",
            **kwargs,
        )

    def list(self, limit: int, start: str | None) -> tuple[list[dict[str, Any]], str | None]:
        kwargs: dict[str, Any] = {"TableName": self.table, "Limit": limit}
        if start:
            kwargs["ExclusiveStartKey"] = json.loads(base64.urlsafe_b64decode(start.encode()))
        page = client("dynamodb").scan(**kwargs)
        token = page.get("LastEvaluatedKey")
        next_token = base64.urlsafe_b64encode(json.dumps(token).encode()).decode() if token else None
        return [from_item(i) for i in page["Items"]], next_token

    def iter_all(self) -> Iterator[dict[str, Any]]:
        for page in pages("dynamodb", "scan", TableName=self.table):
            for item in page["Items"]:
                yield from_item(item)
