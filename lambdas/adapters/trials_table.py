"""The trials table: one item per trial (frozen spec hash, status, workflow execution, triage, worst case), and the
usage table beside it: one item per team holding what its trials' bookings hold (``lambdas.domain.money.booking``), and
one marker per object a trial's write quota has counted.

Admission, release and counting each write both tables in one ``TransactWriteItems`` call: the transaction
succeeds or fails as a whole, and a failed condition on any item cancels it (developer guide, "Amazon DynamoDB
Transactions: how it works"; TransactionCanceledException lists a reason per item in request order)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Literal, TypedDict

from lambdas.adapters.aws import client, error_code, pages, written
from lambdas.adapters.dynamo_items import from_item, to_item
from lambdas.domain.json_types import JsonValue
from lambdas.domain.money.booking import Booking
from lambdas.domain.trial.trial_record import TrialRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

USAGE_KEY = "usage_key"  # the usage table's partition key (infra.constructs.storage)
USAGE_EXPIRES = "expires_at"  # its TTL attribute: counted-write markers expire, team items never do
COUNTED_WRITE_TTL_S = 35 * 86400  # longer than any trial runs, so a redelivered event still finds its marker
TEAM_INDEX = "team-created"  # partition key team, sort key created_at (infra.constructs.storage)


class _Expression(TypedDict, total=False):
    """The expression parts of an UpdateItem (or a transaction's Update) request."""

    UpdateExpression: str
    ConditionExpression: str
    ExpressionAttributeNames: dict[str, str]
    ExpressionAttributeValues: dict[str, AttributeValueTypeDef]


class _TeamQuery(TypedDict):
    IndexName: str
    KeyConditionExpression: str
    ExpressionAttributeNames: dict[str, str]
    ExpressionAttributeValues: dict[str, AttributeValueTypeDef]


def _team_query(team: str) -> _TeamQuery:
    return {"IndexName": TEAM_INDEX, "KeyConditionExpression": "#team = :team",
            "ExpressionAttributeNames": {"#team": "team"}, "ExpressionAttributeValues": {":team": {"S": team}}}


def _assignments(fields: Mapping[str, JsonValue]) -> _Expression:
    """An UpdateExpression that sets each field, removing those given as None."""
    values = to_item({f":v{i}": v for i, v in enumerate(fields.values())})
    names = {f"#n{i}": k for i, k in enumerate(fields)}
    assignments = ", ".join(f"#n{i} = :v{i}" for i in range(len(fields)) if f":v{i}" in values)
    removals = ", ".join(f"#n{i}" for i in range(len(fields)) if f":v{i}" not in values)
    expression = (f"SET {assignments}" if assignments else "") + (f" REMOVE {removals}" if removals else "")
    out: _Expression = {"UpdateExpression": expression.strip(), "ExpressionAttributeNames": names}
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def _team_key(team: str) -> dict[str, AttributeValueTypeDef]:
    return {USAGE_KEY: {"S": f"team#{team}"}}


def _adds(values: Mapping[str, Decimal], limits: Mapping[str, Decimal] | None = None) -> _Expression:
    """An ``ADD`` update of the usage item, conditional on each limited attribute holding at most its room."""
    names = {f"#u{i}": name for i, name in enumerate(values)}
    numbers: dict[str, AttributeValueTypeDef] = {f":u{i}": {"N": str(value)} for i, value in enumerate(values.values())}
    update: _Expression = {"UpdateExpression": "ADD " + ", ".join(f"#u{i} :u{i}" for i in range(len(values))),
                           "ExpressionAttributeNames": names, "ExpressionAttributeValues": numbers}
    conditions = []
    for i, (name, most) in enumerate((limits or {}).items()):
        update["ExpressionAttributeNames"][f"#r{i}"] = name
        update["ExpressionAttributeValues"][f":r{i}"] = {"N": str(most)}
        conditions.append(f"(attribute_not_exists(#r{i}) OR #r{i} <= :r{i})")
    if conditions:
        update["ConditionExpression"] = " AND ".join(conditions)
    return update


def _cancelled_by(exc: BaseException) -> list[str] | None:
    """Per item, why a cancelled transaction was cancelled (None: the call failed otherwise)."""
    if error_code(exc) != "TransactionCanceledException":
        return None
    reasons = getattr(exc, "response", {}).get("CancellationReasons") or []
    return [str(r.get("Code") or "None") for r in reasons]


def _first_condition_failed(exc: BaseException) -> bool:
    """False when the transaction was cancelled by its first item's condition (the trial moved on); re-raise
    anything else."""
    reasons = _cancelled_by(exc)
    if reasons and reasons[0] == "ConditionalCheckFailed":
        return False
    raise exc


def _status_condition(statuses: tuple[str, ...], if_updated_at: str | None = None
                      ) -> tuple[str, dict[str, AttributeValueTypeDef]]:
    """The condition on the trial's status (``#status``), and on its ``updated_at`` (``#updated``) when given."""
    allowed: dict[str, AttributeValueTypeDef] = {f":s{i}": {"S": s} for i, s in enumerate(statuses)}
    condition = f"#status IN ({', '.join(allowed)})"
    if if_updated_at is not None:
        allowed[":read_updated_at"] = {"S": if_updated_at}
        condition += " AND #updated = :read_updated_at"
    return condition, allowed


def _condition_names(if_updated_at: str | None) -> dict[str, str]:
    return {"#status": "status", **({"#updated": "updated_at"} if if_updated_at is not None else {})}


def _record(item: dict[str, AttributeValueTypeDef]) -> TrialRecord:
    """The record a DynamoDB item holds (``TrialRecord.from_item`` migrates items of older versions)."""
    return TrialRecord.from_item(from_item(item))


class DynamoTrials:
    def __init__(self, table: str, usage_table: str | None = None) -> None:
        self.table, self.usage_table = table, usage_table

    def _usage(self) -> str:
        if not self.usage_table:
            raise RuntimeError("this function has no usage table (USAGE_TABLE): it cannot book or release quotas")
        return self.usage_table

    def usage(self, team: str) -> dict[str, int | float] | None:
        got = client("dynamodb").get_item(TableName=self._usage(), Key=_team_key(team), ConsistentRead=True)
        if "Item" not in got:
            return None
        item = from_item(got["Item"])
        return {name: value for name, value in item.items() if isinstance(value, int | float) and name != USAGE_KEY}

    def seed_usage(self, team: str, values: Mapping[str, Decimal], bookings: Mapping[str, Booking]) -> bool:
        """Create the team's usage item from its trials (made before bookings existed), once: the item is put only
        if absent, and each trial is given the booking that item counts (only if it has none)."""
        item = {USAGE_KEY: {"S": f"team#{team}"}, **{k: {"N": str(v)} for k, v in values.items()}}
        made = written(lambda: client("dynamodb").put_item(
            TableName=self._usage(), Item=item, ConditionExpression=f"attribute_not_exists({USAGE_KEY})"))
        if made:
            for trial_id, booking in bookings.items():
                self._give_booking(trial_id, booking.model_dump(mode="json"))
        return made

    def _give_booking(self, trial_id: str, booking: dict[str, JsonValue]) -> bool:
        return written(lambda: client("dynamodb").update_item(
            TableName=self.table, Key={"trial_id": {"S": trial_id}}, UpdateExpression="SET #b = :b",
            ConditionExpression="attribute_exists(trial_id) AND attribute_not_exists(#b)",
            ExpressionAttributeNames={"#b": "booking"}, ExpressionAttributeValues=to_item({":b": booking})))

    def admit(self, record: TrialRecord, additions: Mapping[str, Decimal],
              limits: Mapping[str, Decimal]) -> Literal["created", "exists", "over_quota"]:
        """Create the trial item and book it on its team's usage item in one transaction, conditional on the trial
        being new and on every limited usage attribute holding at most its room."""
        item = record.to_item()
        booking = {"Update": {"TableName": self._usage(), "Key": _team_key(str(record.team)),
                              **_adds(additions, limits)}}
        try:
            client("dynamodb").transact_write_items(TransactItems=[
                {"Put": {"TableName": self.table, "Item": to_item(item),
                         "ConditionExpression": "attribute_not_exists(trial_id)"}},
                booking,
            ])
        except Exception as exc:
            reasons = _cancelled_by(exc)
            if reasons is None:
                raise
            if reasons and reasons[0] == "ConditionalCheckFailed":
                return "exists"
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                return "over_quota"
            raise
        return "created"

    def close(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
              **fields: JsonValue) -> bool:
        """Move the trial out of ``statuses`` and release its booking in one transaction: of two racing closes one
        is made, and the booking is released once."""
        if not release:
            return self.transition(trial_id, statuses, if_updated_at=None, **fields)
        update = _assignments(fields)
        update["ExpressionAttributeNames"]["#status"] = "status"
        condition, allowed = _status_condition(statuses)
        update.setdefault("ExpressionAttributeValues", {}).update(allowed)
        try:
            client("dynamodb").transact_write_items(TransactItems=[
                {"Update": {"TableName": self.table, "Key": {"trial_id": {"S": trial_id}},
                            "ConditionExpression": condition, **update}},
                {"Update": {"TableName": self._usage(), "Key": _team_key(team), **_adds(release)}},
            ])
        except Exception as exc:
            return _first_condition_failed(exc)
        return True

    def withdraw(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
                 if_updated_at: str | None = None) -> bool:
        """Delete a trial that never started and release its booking in one transaction, conditional on the state
        the caller read (its status, no execution, and its ``updated_at`` when given)."""
        condition, allowed = _status_condition(statuses, if_updated_at)
        try:
            client("dynamodb").transact_write_items(TransactItems=[
                {"Delete": {"TableName": self.table, "Key": {"trial_id": {"S": trial_id}},
                            "ConditionExpression": f"{condition} AND attribute_not_exists(execution_arn)",
                            "ExpressionAttributeNames": _condition_names(if_updated_at),
                            "ExpressionAttributeValues": allowed}},
                {"Update": {"TableName": self._usage(), "Key": _team_key(team), **_adds(release)}},
            ])
        except Exception as exc:
            return _first_condition_failed(exc)
        return True

    def tally_once(self, trial_id: str, fact: str, add: Mapping[str, int], *, now_s: int) -> TrialRecord | None:
        """Add ``add`` to the trial's counters once per ``fact`` (an object version): a marker for the fact and the
        counters are written in one transaction, so a redelivered event finds the marker and counts nothing.
        Returns the trial item after the write, or None when ``fact`` was counted before (or there is no trial)."""
        names = {f"#a{i}": name for i, name in enumerate(add)}
        values = {f":a{i}": {"N": str(int(n))} for i, n in enumerate(add.values())}
        digest = hashlib.sha256(fact.encode()).hexdigest()  # a key of bounded length
        marker = {USAGE_KEY: {"S": f"write#{trial_id}#{digest}"},
                  USAGE_EXPIRES: {"N": str(now_s + COUNTED_WRITE_TTL_S)}}
        try:
            client("dynamodb").transact_write_items(TransactItems=[
                {"Put": {"TableName": self._usage(), "Item": marker,
                         "ConditionExpression": f"attribute_not_exists({USAGE_KEY})"}},
                {"Update": {"TableName": self.table, "Key": {"trial_id": {"S": trial_id}},
                            "UpdateExpression": "ADD " + ", ".join(f"#a{i} :a{i}" for i in range(len(add))),
                            "ConditionExpression": "attribute_exists(trial_id)",
                            "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}},
            ])
        except Exception as exc:
            if _cancelled_by(exc) is None:
                raise
            return None
        return self.get(trial_id)

    def create(self, record: TrialRecord) -> bool:
        return written(lambda: client("dynamodb").put_item(
            TableName=self.table, Item=to_item(record.to_item()), ConditionExpression="attribute_not_exists(trial_id)"
        ))

    def get(self, trial_id: str) -> TrialRecord | None:
        got = client("dynamodb").get_item(TableName=self.table, Key={"trial_id": {"S": trial_id}}, ConsistentRead=True)
        return _record(got["Item"]) if "Item" in got else None

    def delete(self, trial_id: str) -> None:
        client("dynamodb").delete_item(TableName=self.table, Key={"trial_id": {"S": trial_id}})

    def update(self, trial_id: str, **fields: JsonValue) -> None:
        client("dynamodb").update_item(
            TableName=self.table, Key={"trial_id": {"S": trial_id}},
            ConditionExpression="attribute_exists(trial_id)", **_assignments(fields),
        )

    def transition(self, trial_id: str, statuses: tuple[str, ...], *, if_updated_at: str | None = None,
                   **fields: JsonValue) -> bool:
        """Update the trial only while its status is one of ``statuses`` and, given ``if_updated_at``, its
        ``updated_at`` is the one the caller read (a conditional write: of two racing transitions one is made, the
        other finds the condition false and writes nothing)."""
        update = _assignments(fields)
        update["ExpressionAttributeNames"].update(_condition_names(if_updated_at))
        condition, allowed = _status_condition(statuses, if_updated_at)
        update.setdefault("ExpressionAttributeValues", {}).update(allowed)
        return written(lambda: client("dynamodb").update_item(
            TableName=self.table, Key={"trial_id": {"S": trial_id}},
            ConditionExpression=condition, **update,
        ))

    def tally(self, trial_id: str, *, set_fields: Mapping[str, JsonValue] | None = None,
              add: Mapping[str, int] | None = None) -> TrialRecord | None:
        """Set ``set_fields`` and add ``add`` to counters in one update, returning the whole item after it (None when
        there is no such trial). ADD on a missing number starts it at 0 (developer guide, "Update expressions")."""
        names: dict[str, str] = {}
        values: dict[str, JsonValue] = {}
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
        return _record(got["Attributes"])

    def list(self, limit: int, start: str | None, team: str | None = None) -> tuple[list[TrialRecord], str | None]:
        """A page of trials: one team's, newest first (the team index), or every team's (a scan). Raises
        ``ValueError`` for a ``start`` that is not a key this listing returned: a team's page keys are the index's
        (trial_id, team, created_at) in that team's partition, a scan's the table's (trial_id)."""
        kwargs: dict[str, str | int | dict[str, AttributeValueTypeDef]] = {"TableName": self.table, "Limit": limit}
        if start:
            key = json.loads(base64.urlsafe_b64decode(start.encode()))
            names = {"trial_id"} if team is None else {"trial_id", "team", "created_at"}
            # DynamoDB would answer a malformed key with a validation error, and a key in another team's partition
            # with a page of nothing: both are the caller's error, refused before the query.
            if (not isinstance(key, dict) or set(key) != names
                    or not all(isinstance(v, dict) and set(v) == {"S"} and isinstance(v["S"], str) and v["S"]
                               for v in key.values())
                    or (team is not None and key["team"]["S"] != team)):
                raise ValueError("next_token is not a key of this listing")
            kwargs["ExclusiveStartKey"] = key
        if team is None:
            page = client("dynamodb").scan(**kwargs)
        else:
            page = client("dynamodb").query(**kwargs, **_team_query(team), ScanIndexForward=False)
        token = page.get("LastEvaluatedKey")
        next_token = base64.urlsafe_b64encode(json.dumps(token).encode()).decode() if token else None
        return [_record(i) for i in page["Items"]], next_token

    def of_team(self, team: str) -> Iterator[TrialRecord]:
        for page in pages("dynamodb", "query", TableName=self.table, **_team_query(team)):
            for item in page["Items"]:
                yield _record(item)

    def iter_all(self) -> Iterator[TrialRecord]:
        for page in pages("dynamodb", "scan", TableName=self.table):
            for item in page["Items"]:
                yield _record(item)

    def with_status(self, statuses: tuple[str, ...]) -> Iterator[TrialRecord]:
        """Every trial whose status is one of ``statuses`` (a filtered scan: the reconciler's sweep)."""
        condition, allowed = _status_condition(statuses)
        for page in pages("dynamodb", "scan", TableName=self.table, FilterExpression=condition,
                          ExpressionAttributeNames={"#status": "status"}, ExpressionAttributeValues=allowed):
            for item in page["Items"]:
                yield _record(item)
