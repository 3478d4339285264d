"""The ledger in DynamoDB: facts are created once (conditional put), the cost entry only moves forward.

Every entry's body is one string attribute of canonical JSON: a fact's body (read back through its kind's model),
or the run's cost entry (:class:`StoredCost`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from lambdas.adapters.aws import client, pages, written
from lambdas.domain.canonical import canonical_json
from lambdas.domain.money.ledger import COST_ENTRY_KEY, LedgerEntry, LedgerRow, RowKind, StoredCost, fact_of


class DynamoLedger:
    def __init__(self, table: str) -> None:
        self.table = table

    def append(self, entry: LedgerEntry) -> bool:
        item = {
            "run_key": {"S": entry.run_key},
            "entry_key": {"S": entry.entry_key},
            "kind": {"S": entry.kind},
            "body": {"S": entry.body_json()},
        }
        return written(lambda: client("dynamodb").put_item(
            TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(entry_key)"
        ))

    def entries(self, run_key: str) -> list[LedgerEntry]:
        out: list[LedgerEntry] = []
        for page in pages(
            "dynamodb", "query",
            TableName=self.table,
            KeyConditionExpression="run_key = :k",
            ExpressionAttributeValues={":k": {"S": run_key}},
            ConsistentRead=True,
        ):
            for item in page["Items"]:
                if item["entry_key"]["S"] == COST_ENTRY_KEY:
                    continue
                out.append(
                    LedgerEntry(
                        run_key=run_key,
                        entry_key=item["entry_key"]["S"],
                        kind=item["kind"]["S"],
                        body=json.loads(item["body"]["S"]),
                    )
                )
        return out

    def put_cost(self, run_key: str, body: StoredCost, facts: int) -> bool:
        trial_id, run = run_key.rsplit("#", 1)
        item = {
            "run_key": {"S": run_key},
            "entry_key": {"S": COST_ENTRY_KEY},
            "kind": {"S": "cost"},
            "trial_id": {"S": trial_id},
            "run": {"S": run},
            "facts": {"N": str(facts)},
            "body": {"S": canonical_json(body.model_dump(mode="json"))},
        }
        return written(lambda: client("dynamodb").put_item(
            TableName=self.table,
            Item=item,
            ConditionExpression="attribute_not_exists(entry_key) OR facts < :f",
            ExpressionAttributeValues={":f": {"N": str(facts)}},
        ))

    def cost(self, run_key: str) -> StoredCost | None:
        got = client("dynamodb").get_item(
            TableName=self.table,
            ConsistentRead=True,
            Key={"run_key": {"S": run_key}, "entry_key": {"S": COST_ENTRY_KEY}},
        )
        item = got.get("Item")
        return StoredCost.model_validate_json(item["body"]["S"]) if item else None

    def iter_costs(self) -> Iterator[LedgerRow]:
        """Every run's cost entry: one pass over the table (linear in its size)."""
        return self.iter_kinds(("cost",))

    def iter_kinds(self, kinds: tuple[RowKind, ...]) -> Iterator[LedgerRow]:
        """Entries of the given kinds, with their kind, in one scan of the table."""
        values = {f":k{i}": {"S": k} for i, k in enumerate(kinds)}
        for page in pages(
            "dynamodb", "scan",
            TableName=self.table,
            FilterExpression=f"#k IN ({', '.join(values)})",
            ExpressionAttributeValues=values,
            ExpressionAttributeNames={"#k": "kind"},
            ProjectionExpression="run_key, #k, body",
        ):
            for item in page["Items"]:
                kind = next(k for k in kinds if k == item["kind"]["S"])
                text = item["body"]["S"]
                body = StoredCost.model_validate_json(text) if kind == "cost" else fact_of(kind, json.loads(text))
                yield LedgerRow(item["run_key"]["S"], kind, body)
