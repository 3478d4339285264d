"""One factory for every dualtrack Lambda: same runtime, architecture, tracing, logging and layer.

Python 3.12 on arm64 with active tracing; code is the whole ``lambdas`` package (handler
``lambdas.handlers.<module>.handler``), dependencies come from one shared layer. Functions invoked
asynchronously (by EventBridge) get a dead-letter queue so a failed event is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as lambda_destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.bundling import dependency_layer_code, lambda_code
from infra.constructs.nag import acknowledge
from lambdas.domain import telemetry

# Lambda quotas: "Environment variables: 4 KB, for all environment variables associated with the function, in
# aggregate". A value CloudFormation resolves at deploy (a table name, an ARN) is counted at TOKEN_BYTES.
ENVIRONMENT_LIMIT_BYTES = 4096
TOKEN_BYTES = 128


def environment_bytes(environment: Mapping[str, object]) -> int:
    """The aggregate size Lambda counts, names and values, with unresolved values at ``TOKEN_BYTES``."""
    return sum(len(name.encode()) + (TOKEN_BYTES if not isinstance(value, str) or cdk.Token.is_unresolved(value)
                                     else len(value.encode()))
               for name, value in environment.items())


def check_environment_size(function: str, environment: Mapping[str, object]) -> None:
    size = environment_bytes(environment)
    if size > ENVIRONMENT_LIMIT_BYTES:
        largest = sorted(environment, key=lambda n: -len(str(environment[n])))[:3]
        raise ValueError(f"function {function}: its environment is about {size} bytes, over Lambda's 4 KB limit "
                         f"for all variables together; the largest are {', '.join(largest)} (for GOVERNANCE, map "
                         "teams by member_roles / approver_roles patterns instead of listing every principal)")


RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64


def dead_letter_queue(scope: Construct, construct_id: str, key: kms.IKey) -> sqs.Queue:
    # A customer managed key: its policy lets EventBridge send here (an SQS-managed key admits no such grant).
    queue = sqs.Queue(scope, construct_id, encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
                      enforce_ssl=True, retention_period=cdk.Duration.days(14))
    acknowledge(queue, "AwsSolutions-SQS3", "this queue is itself a dead-letter queue; alarms watch its depth")
    acknowledge(queue, "Serverless-SQSRedrivePolicy",
                "this queue is itself a dead-letter queue; redriving it elsewhere would only move the failure")
    return queue


class FunctionFactory(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, environment: Mapping[str, str],
                 log_retention: logs.RetentionDays, log_key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self._environment = dict(environment)
        self._log_retention = log_retention
        self._log_key = log_key
        self.layer = lambda_.LayerVersion(
            self, "Dependencies", code=dependency_layer_code(), compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE], description="dualtrack Lambda dependencies (pydantic, Powertools)",
        )
        self.code = lambda_code()
        self.async_failures = dead_letter_queue(self, "AsyncFailures", log_key)
        self.functions: dict[str, lambda_.Function] = {}

    def function(self, module: str, *, timeout_s: int = 30, memory_mib: int = 512, asynchronous: bool = False,
                 environment: Mapping[str, str] | None = None, description: str = "",
                 function_name: str | None = None) -> lambda_.Function:
        construct_id = "".join(part.capitalize() for part in module.split("_"))
        log_group = logs.LogGroup(self, f"{construct_id}Logs", retention=self._log_retention,
                                  encryption_key=self._log_key)
        variables = {
            **self._environment,
            "POWERTOOLS_SERVICE_NAME": telemetry.service_name(module),
            "POWERTOOLS_METRICS_NAMESPACE": telemetry.NAMESPACE,
            # No pydantic plugins ship with the functions: skip scanning every installed distribution's entry
            # points when the first model class is built (pydantic.plugin._loader), a cold-start cost.
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
            **(environment or {}),
        }
        check_environment_size(module, variables)
        fn = lambda_.Function(
            self, construct_id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=f"lambdas.handlers.{module}.handler",
            code=self.code,
            layers=[self.layer],
            timeout=cdk.Duration.seconds(timeout_s),
            memory_size=memory_mib,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            description=description or f"dualtrack {module}",
            function_name=function_name,
            environment=variables,
            retry_attempts=2 if asynchronous else None,
            on_failure=lambda_destinations.SqsDestination(self.async_failures) if asynchronous else None,
        )
        acknowledge(fn, "AwsSolutions-L1",
                    "pinned to Python 3.12: the dependency layer is built for cp312 and the handlers are tested "
                    "on it; moving runtimes is a deliberate upgrade")
        acknowledge(fn, "Serverless-LambdaLatestVersion",
                    "pinned to Python 3.12: the dependency layer is built for cp312 wheels")
        role = fn.role
        assert role is not None
        acknowledge(role, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                          "AWSLambdaBasicExecutionRole]",
                    "the AWS-maintained basic execution policy only allows writing this function's logs")
        if asynchronous:
            acknowledge(fn, "Serverless-LambdaDLQ",
                        "an on-failure destination (the AsyncFailures queue) replaces the legacy DLQ: it keeps the "
                        "error and the request context with the event")
        else:
            acknowledge(fn, "Serverless-LambdaDLQ",
                        "invoked synchronously (API Gateway or a Step Functions task): the caller sees and "
                        "retries the error, there is no event to dead-letter")
            acknowledge(fn, "Serverless-LambdaAsyncFailureDestination",
                        "invoked synchronously (API Gateway or a Step Functions task): no async failures exist")
        self.functions[module] = fn
        return fn
