"""Powertools Logger, Tracer and Metrics shared by every function (service name from POWERTOOLS_SERVICE_NAME)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

NAMESPACE = "Dualtrack"

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=NAMESPACE)
