"""Parser models for the EventBridge envelopes the functions receive (Powertools' ``EventBridgeModel`` around the
details in ``lambdas.domain.events``)."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ConfigDict, Field

from lambdas.domain.events import BatchJobStateChangeDetail, S3ObjectCreatedDetail


class BatchJobStateChangeEvent(EventBridgeModel):
    model_config = ConfigDict(defer_build=True)  # built by the function that parses it, on its first event

    detail_type: Literal["Batch Job State Change"] = Field(alias="detail-type")  # type: ignore[assignment]
    source: Literal["aws.batch"]  # type: ignore[assignment]
    detail: BatchJobStateChangeDetail  # type: ignore[assignment]


class S3ObjectCreatedEvent(EventBridgeModel):
    model_config = ConfigDict(defer_build=True)

    detail_type: Literal["Object Created"] = Field(alias="detail-type")  # type: ignore[assignment]
    source: Literal["aws.s3"]  # type: ignore[assignment]
    detail: S3ObjectCreatedDetail  # type: ignore[assignment]
