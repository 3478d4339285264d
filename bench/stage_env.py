"""The environment the Lambda benchmarks give the functions: the stage's table and bucket names, the API's stage
settings, observability quiet, and what every deployed function is given (``infra/constructs/functions.py``)."""

from __future__ import annotations

import json

REGION = "us-east-1"
ENV = {"TRIALS_TABLE": "trials", "USAGE_TABLE": "usage", "LEDGER_TABLE": "ledger",
       "CACHE_REGISTRY_TABLE": "cache-registry", "IDEMPOTENCY_TABLE": "idempotency", "ARTIFACTS_BUCKET": "artifacts",
       "CACHE_BUCKET": "compile-cache",
       "PRICE_REGION": REGION, "POWERTOOLS_SERVICE_NAME": "dualtrack", "POWERTOOLS_METRICS_NAMESPACE": "Dualtrack",
       "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": "bench",
       "AWS_SECRET_ACCESS_KEY": "bench", "DUALTRACK_METRICS": "off", "POWERTOOLS_METRICS_DISABLED": "true",
       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING",
       # The stage the API function is given: the example trial's instance types, its data bucket, Batch's timeout.
       "JOB_TARGETS": json.dumps({track: {instance: {"queue": f"bench-{track}", "single_node": f"bench-{track}-single",
                                                     "multi_node": {}}}
                                  for track, instance in (("gpu", "p5.48xlarge"), ("trn2", "trn2.48xlarge"))}),
       "DATA_BUCKETS": "example-datasets", "ATTEMPT_TIMEOUT_S": "86400",
       "PYDANTIC_DISABLE_PLUGINS": "__all__",
       # The example trial's team, its members the caller of tests/events/api_gateway_rest.json; Batch's default
       # two attempts per run.
       "GOVERNANCE": json.dumps({"teams": {"team-nlp": {"members": ["arn:aws:iam::123456789012:user/model-team"]}}}),
       "MAX_ATTEMPTS": "2"}
