"""Buckets and tables that hold a trial's state: encrypted, versioned, private, retained."""

from __future__ import annotations

from typing import TypedDict

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.nag import acknowledge


class TrialStorage(Construct):
    """Artifacts, compile-cache and access-log buckets plus the four DynamoDB tables.

    Logical IDs are pinned (``override_logical_id``): renaming a construct must never replace a bucket or table
    holding trial history, and a test fails if one of these IDs moves.
    """

    def __init__(self, scope: Construct, construct_id: str, *, noncurrent_version_days: int) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(self, "DataKey", enable_key_rotation=True, removal_policy=cdk.RemovalPolicy.RETAIN,
                           description="dualtrack trial data: buckets, tables, queues, topic")
        _pin(self.key, "DataKey")

        # S3 server access logging delivers only to SSE-S3 buckets, so this one bucket uses S3-managed keys.
        self.access_logs = s3.Bucket(
            self, "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            **_bucket_defaults(noncurrent_version_days),
        )
        _pin(self.access_logs, "AccessLogsBucket")
        acknowledge(self.access_logs, "AwsSolutions-S1",
                    "this is the access-log target bucket; logging it into itself would loop")

        self.artifacts = s3.Bucket(
            self, "Artifacts",
            encryption=s3.BucketEncryption.KMS, encryption_key=self.key, bucket_key_enabled=True,
            server_access_logs_bucket=self.access_logs, server_access_logs_prefix="artifacts/",
            **_bucket_defaults(noncurrent_version_days),
        )
        _pin(self.artifacts, "ArtifactsBucket")

        self.compile_cache = s3.Bucket(
            self, "CompileCache",
            encryption=s3.BucketEncryption.KMS, encryption_key=self.key, bucket_key_enabled=True,
            server_access_logs_bucket=self.access_logs, server_access_logs_prefix="compile-cache/",
            **_bucket_defaults(noncurrent_version_days),
        )
        _pin(self.compile_cache, "CompileCacheBucket")

        self.trials = self._table("Trials", "TrialsTable", partition="trial_id")
        # One team's trials, newest first: the API lists them and counts a team's quota use without a scan
        # (lambdas.adapters.trials_table.TEAM_INDEX).
        self.trials.add_global_secondary_index(
            index_name="team-created",
            partition_key=dynamodb.Attribute(name="team", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="created_at", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.ledger = self._table("Ledger", "LedgerTable", partition="run_key", sort="entry_key")
        self.cache_registry = self._table("CacheRegistry", "CacheRegistryTable", partition="cache_key")
        # Powertools idempotency layout: pk "id", TTL attribute "expiration".
        self.idempotency = self._table("Idempotency", "IdempotencyTable", partition="id", ttl="expiration")
        # Per team, what its trials' bookings hold (written in one transaction with the trial item), and a marker
        # per object a write quota has counted, which expires (lambdas.adapters.trials_table).
        self.usage = self._table("Usage", "UsageTable", partition="usage_key", ttl="expires_at")

    def _table(self, construct_id: str, logical_id: str, *, partition: str, sort: str | None = None,
               ttl: str | None = None) -> dynamodb.Table:
        table = dynamodb.Table(
            self, construct_id,
            partition_key=dynamodb.Attribute(name=partition, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=sort, type=dynamodb.AttributeType.STRING) if sort else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=self.key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            time_to_live_attribute=ttl,
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        _pin(table, logical_id)
        return table

    @property
    def buckets(self) -> list[s3.Bucket]:
        return [self.artifacts, self.compile_cache, self.access_logs]

    @property
    def tables(self) -> list[dynamodb.Table]:
        return [self.trials, self.ledger, self.cache_registry, self.idempotency, self.usage]


class _BucketDefaults(TypedDict):
    """The ``s3.Bucket`` settings every trial bucket shares."""

    block_public_access: s3.BlockPublicAccess
    enforce_ssl: bool
    versioned: bool
    event_bridge_enabled: bool
    removal_policy: cdk.RemovalPolicy
    lifecycle_rules: list[s3.LifecycleRule]


def _bucket_defaults(noncurrent_version_days: int) -> _BucketDefaults:
    return {
        "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
        "enforce_ssl": True,
        "versioned": True,
        "event_bridge_enabled": True,
        "removal_policy": cdk.RemovalPolicy.RETAIN,
        "lifecycle_rules": [
            s3.LifecycleRule(
                id="expire-noncurrent-and-abort-multipart",
                noncurrent_version_expiration=cdk.Duration.days(noncurrent_version_days),
                abort_incomplete_multipart_upload_after=cdk.Duration.days(2),
            )
        ],
    }


def _pin(construct: Construct, logical_id: str) -> None:
    child = construct.node.default_child
    assert isinstance(child, cdk.CfnElement), f"{construct.node.path} has no CloudFormation resource"
    child.override_logical_id(logical_id)
