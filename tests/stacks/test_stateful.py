"""The stateful stack: data is encrypted, private, versioned, retained, and its logical IDs never move."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match, Template

from tests.stacks.conftest import resources

# Renaming any of these replaces a bucket or table holding trial history; change them only with a migration.
PINNED = {
    "DataKey": "AWS::KMS::Key",
    "AccessLogsBucket": "AWS::S3::Bucket",
    "ArtifactsBucket": "AWS::S3::Bucket",
    "CompileCacheBucket": "AWS::S3::Bucket",
    "TrialsTable": "AWS::DynamoDB::Table",
    "LedgerTable": "AWS::DynamoDB::Table",
    "CacheRegistryTable": "AWS::DynamoDB::Table",
    "IdempotencyTable": "AWS::DynamoDB::Table",
    "UsageTable": "AWS::DynamoDB::Table",
}


def test_logical_ids_are_pinned(stateful: dict[str, Any]) -> None:
    for logical_id, kind in PINNED.items():
        assert stateful["Resources"].get(logical_id, {}).get("Type") == kind, logical_id


def test_state_is_retained(stateful: dict[str, Any]) -> None:
    for logical_id in PINNED:
        resource = stateful["Resources"][logical_id]
        assert resource["DeletionPolicy"] == "Retain", logical_id
        assert resource["UpdateReplacePolicy"] == "Retain", logical_id


def test_termination_protection(assembly: Any) -> None:
    manifest = json.loads((assembly.path / "manifest.json").read_text())
    stack = manifest["artifacts"][assembly.stack("Stateful")]
    assert stack["properties"]["terminationProtection"] is True


def test_buckets_private_versioned_expiring(stateful: dict[str, Any]) -> None:
    template = Template.from_json(stateful)
    template.resource_count_is("AWS::S3::Bucket", 3)
    template.all_resources_properties("AWS::S3::Bucket", {
        "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                           "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
        "VersioningConfiguration": {"Status": "Enabled"},
        "LifecycleConfiguration": {"Rules": [Match.object_like({
            "Status": "Enabled", "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}})]},
    })


def test_buckets_send_events_to_eventbridge(stateful: dict[str, Any]) -> None:
    notified = {
        r["Properties"]["BucketName"]["Ref"] for r in resources(stateful, "Custom::S3BucketNotifications").values()
        if "EventBridgeConfiguration" in r["Properties"]["NotificationConfiguration"]
    }
    assert notified == {"AccessLogsBucket", "ArtifactsBucket", "CompileCacheBucket"}


def test_data_buckets_use_the_kms_key_and_log_access(stateful: dict[str, Any]) -> None:
    for logical_id in ("ArtifactsBucket", "CompileCacheBucket"):
        bucket = stateful["Resources"][logical_id]["Properties"]
        rule = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
        assert rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == {"Fn::GetAtt": ["DataKey", "Arn"]}
        assert bucket["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": "AccessLogsBucket"}
    key = stateful["Resources"]["DataKey"]["Properties"]
    assert key["EnableKeyRotation"] is True


def test_every_bucket_denies_plain_http(stateful: dict[str, Any]) -> None:
    policies = resources(stateful, "AWS::S3::BucketPolicy").values()
    denied = set()
    for policy in policies:
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement.get("Condition") == {
                    "Bool": {"aws:SecureTransport": "false"}}:
                denied.add(policy["Properties"]["Bucket"]["Ref"])
    assert denied == {"AccessLogsBucket", "ArtifactsBucket", "CompileCacheBucket"}


def test_tables_keys_pitr_and_encryption(stateful: dict[str, Any]) -> None:
    expected = {"TrialsTable": ["trial_id"], "LedgerTable": ["run_key", "entry_key"],
                "CacheRegistryTable": ["cache_key"], "IdempotencyTable": ["id"], "UsageTable": ["usage_key"]}
    for logical_id, keys in expected.items():
        table = stateful["Resources"][logical_id]["Properties"]
        assert [k["AttributeName"] for k in table["KeySchema"]] == keys
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert table["SSESpecification"]["SSEEnabled"] is True
        assert table["SSESpecification"]["KMSMasterKeyId"] == {"Fn::GetAtt": ["DataKey", "Arn"]}
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        assert "TableName" not in table
    ttl = stateful["Resources"]["IdempotencyTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expiration", "Enabled": True}
    ttl = stateful["Resources"]["UsageTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}


def test_the_tables_tests_stand_up_are_the_tables_the_stack_defines(stateful: dict[str, Any]) -> None:
    """``dualtrack.local.aws.tables`` (what the moto-backed tests and benchmarks create) has the key schema, attribute
    definitions and global secondary indexes of the synthesized tables, so an index the code queries exists in both
    ("AWS::DynamoDB::Table", CloudFormation template reference: KeySchema, AttributeDefinitions,
    GlobalSecondaryIndexes)."""
    from dualtrack.local.aws.tables import TABLES, create_table_request

    logical = {"trials": "TrialsTable", "ledger": "LedgerTable", "cache-registry": "CacheRegistryTable",
               "idempotency": "IdempotencyTable", "usage": "UsageTable"}
    assert set(logical) == set(TABLES)
    for name, logical_id in logical.items():
        props = stateful["Resources"][logical_id]["Properties"]
        request = create_table_request(name)
        assert props["KeySchema"] == request["KeySchema"], name
        assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == \
            request["AttributeDefinitions"], name
        indexes = [{k: i[k] for k in ("IndexName", "KeySchema", "Projection")}
                   for i in props.get("GlobalSecondaryIndexes", [])]
        assert indexes == request.get("GlobalSecondaryIndexes", []), name
