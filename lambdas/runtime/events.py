"""Parser models for the EventBridge envelopes the functions receive (Powertools' ``EventBridgeModel`` around the
details in ``lambdas.domain.events``)."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import Field

from lambdas.domain.events import BatchJobStateChangeDetail, S3ObjectCreatedDetail


class BatchJobStateChangeEvent(EventBridgeModel):
    detail_type: Literal["Batch Job State Change"] = Field(alias="detail-type")  # type: ignore[assignment]
    source: Literal["aws.batch"]  # type: ignore[assignment]
    detail: BatchJobStateChangeDetail  # type: ignore[assignment]


class S3ObjectCreatedEvent(EventBridgeModel):
    detail_type: Literal["Object Created"] = Field(alias="detail-type")  # type: ignore[assignment]
    source: Literal["aws.s3"]  # type: ignore[assignment]
    detail: S3ObjectCreatedDetail  # type: ignore[assignment]
