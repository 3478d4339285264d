"""The stage's DynamoDB tables as the Stateful stack defines them (``infra/constructs/storage.py``), for the tests
and benchmarks that stand them up on moto without synthesizing. ``tests/stacks/test_stateful.py`` compares this with
the synthesized template, so the two cannot drift; the rehearsal creates its tables from the template itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import CreateTableInputTypeDef, KeySchemaElementTypeDef

# name -> (partition key, sort key, global secondary indexes {name: (partition key, sort key)})
TABLES: dict[str, tuple[str, str | None, dict[str, tuple[str, str | None]]]] = {
    "trials": ("trial_id", None, {"team-created": ("team", "created_at")}),
    "ledger": ("run_key", "entry_key", {}),
    "cache-registry": ("cache_key", None, {}),
    "idempotency": ("id", None, {}),
    "usage": ("usage_key", None, {}),
}


def _keys(partition: str, sort: str | None) -> list[KeySchemaElementTypeDef]:
    keys: list[KeySchemaElementTypeDef] = [{"AttributeName": partition, "KeyType": "HASH"}]
    if sort:
        keys.append({"AttributeName": sort, "KeyType": "RANGE"})
    return keys


def create_table_request(name: str, table_name: str | None = None) -> CreateTableInputTypeDef:
    """The CreateTable request for the stage table ``name`` (every key attribute a string, on demand)."""
    partition, sort, indexes = TABLES[name]
    attributes = {partition, *([sort] if sort else [])}
    request: CreateTableInputTypeDef = {"TableName": table_name or name, "KeySchema": _keys(partition, sort),
                                        "BillingMode": "PAY_PER_REQUEST"}
    if indexes:
        request["GlobalSecondaryIndexes"] = [
            {"IndexName": index, "KeySchema": _keys(p, s), "Projection": {"ProjectionType": "ALL"}}
            for index, (p, s) in indexes.items()]
        attributes |= {a for p, s in indexes.values() for a in (p, s) if a}
    request["AttributeDefinitions"] = [{"AttributeName": a, "AttributeType": "S"} for a in sorted(attributes)]
    return request


def create_tables(dynamodb: DynamoDBClient, names: dict[str, str] | None = None) -> None:
    """Create every stage table; ``names`` maps a table to the name it gets (default: its own)."""
    for name in TABLES:
        dynamodb.create_table(**create_table_request(name, (names or {}).get(name)))
