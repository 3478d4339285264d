"""The trials table: one item per trial (frozen spec hash, status, workflow execution, triage, worst case)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from lambdas.adapters.aws import client, error_code, pages, written
from lambdas.adapters.dynamo_items import from_item, to_item

TEAM_INDEX = "team-created"  # partition key team, sort key created_at (infra.constructs.storage)


def _team_query(team: str) -> dict[str, Any]:
    return {"IndexName": TEAM_INDEX, "KeyConditionExpression": "#team = :team",
            "ExpressionAttributeNames": {"#team": "team"}, "ExpressionAttributeValues": {":team": {"S": team}}}


def _assignments(fields: dict[str, Any]) -> dict[str, Any]:
    """An UpdateExpression that sets each field, removing those given as None."""
    values = to_item({f":v{i}": v for i, v in enumerate(fields.values())})
    names = {f"#n{i}": k for i, k in enumerate(fields)}
    assignments = ", ".join(f"#n{i} = :v{i}" for i in range(len(fields)) if f":v{i}" in values)
    removals = ", ".join(f"#n{i}" for i in range(len(fields)) if f":v{i}" not in values)
    expression = (f"SET {assignments}" if assignments else "") + (f" REMOVE {removals}" if removals else "")
    out: dict[str, Any] = {"UpdateExpression": expression.strip(), "ExpressionAttributeNames": names}
    if values:
        out["ExpressionAttributeValues"] = values
    return out


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
        client("dynamodb").update_item(
            TableName=self.table, Key={"trial_id": {"S": trial_id}},
            ConditionExpression="attribute_exists(trial_id)", **_assignments(fields),
        )

    def transition(self, trial_id: str, statuses: tuple[str, ...], **fields: Any) -> bool:
        """Update the trial only while its status is one of ``statuses`` (a conditional write: of two racing
        transitions one is made, the other finds the condition false and writes nothing)."""
        update = _assignments(fields)
        update["ExpressionAttributeNames"]["#status"] = "status"
        allowed = {f":s{i}": {"S": s} for i, s in enumerate(statuses)}
        update.setdefault("ExpressionAttributeValues", {}).update(allowed)
        return written(lambda: client("dynamodb").update_item(
            TableName=self.table, Key={"trial_id": {"S": trial_id}},
            ConditionExpression=f"#status IN ({', '.join(allowed)})", **update,
        ))

    def tally(self, trial_id: str, *, set_fields: dict[str, Any] | None = None,
              add: dict[str, int] | None = None) -> dict[str, Any] | None:
        """Set ``set_fields`` and add ``add`` to counters in one update, returning the whole item after it (None when
        there is no such trial). ADD on a missing number starts it at 0 (developer guide, "Update expressions")."""
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets, adds = [], []
        for i, (name, value) in enumerate((set_fields or {}).items()):
            names[f"#s{i}"], values[f":s{i}"] = name, value
            sets.append(f"#s{i} = :s{i}")
        for i, (name, amount) in enumerate((add or {}).items()):
            names[f"#a{i}"], values[f":a{i}"] = name, amount
            adds.append(f"#a{i} :a{i}")
        expression = (f"SET {', '.join(sets)} " if sets else "") + (f"ADD {', '.join(adds)}" if adds else "")
        try:
            got = client("dynamodb").update_item(
                TableName=self.table, Key={"trial_id": {"S": trial_id}}, UpdateExpression=expression.strip(),
                ConditionExpression="attribute_exists(trial_id)", ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item(values), ReturnValues="ALL_NEW")
        except Exception as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return from_item(got["Attributes"])

    def list(self, limit: int, start: str | None, team: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of trials: one team's, newest first (the team index), or every team's (a scan)."""
        kwargs: dict[str, Any] = {"TableName": self.table, "Limit": limit}
        if start:
            kwargs["ExclusiveStartKey"] = json.loads(base64.urlsafe_b64decode(start.encode()))
        if team is None:
            page = client("dynamodb").scan(**kwargs)
        else:
            page = client("dynamodb").query(**kwargs, **_team_query(team), ScanIndexForward=False)
        token = page.get("LastEvaluatedKey")
        next_token = base64.urlsafe_b64encode(json.dumps(token).encode()).decode() if token else None
        return [from_item(i) for i in page["Items"]], next_token

    def of_team(self, team: str) -> Iterator[dict[str, Any]]:
        for page in pages("dynamodb", "query", TableName=self.table, **_team_query(team)):
            for item in page["Items"]:
                yield from_item(item)

    def iter_all(self) -> Iterator[dict[str, Any]]:
        for page in pages("dynamodb", "scan", TableName=self.table):
            for item in page["Items"]:
                yield from_item(item)
