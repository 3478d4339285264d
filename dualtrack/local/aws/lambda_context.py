"""A Lambda context object for calling a handler in this process (the plane-load simulation, the tests).

Lambda passes every invocation a context object (Lambda developer guide, "Using the Lambda context object to
retrieve Python function information"); the handlers take Powertools' ``LambdaContext``, whose properties read the
attributes set here. The remaining time is fixed: these callers run one invocation at a time, well inside it.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

REGION = "us-east-1"


class StaticContext(LambdaContext):
    _function_name = "dualtrack-test"
    _function_version = "$LATEST"
    _memory_limit_in_mb = 512
    _invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:dualtrack-test"
    _aws_request_id = "req-1"
    _log_group_name = "/aws/lambda/dualtrack-test"
    _log_stream_name = "local"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000
