"""The trial API: REST, SigV4 (AWS_IAM) on every method, callers limited by a resource policy, all routes proxied
to the ``on_trial_api`` function. The body of ``POST /trials`` is checked against a model of the trial's required
top-level fields before the function runs; the function's pydantic model does the full validation."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.constructs.nag import acknowledge
from lambdas.domain.trial.spec import BATCH_SAFE_NAME, TrialSpec

ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/trials"),
    ("GET", "/trials"),
    ("GET", "/trials/{id}"),
    ("GET", "/trials/{id}/report"),
    ("POST", "/trials/{id}/cancel"),
    ("POST", "/trials/{id}/approve"),
    ("POST", "/trials/{id}/reject"),
    ("GET", "/compile-cache"),
    ("GET", "/reports/costs"),
)


class TrialApi(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, handler: lambda_.IFunction,
                 principals: list[str], rate_limit: float, burst_limit: int,
                 log_retention: logs.RetentionDays, log_key: kms.IKey, cloudwatch_role: bool) -> None:
        super().__init__(scope, construct_id)
        allowed: list[iam.IPrincipal] = (
            [iam.ArnPrincipal(arn) for arn in principals] if principals else [iam.AccountRootPrincipal()]
        )
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention, encryption_key=log_key)
        self.api = apigw.RestApi(
            self, "Api",
            description="dualtrack trials: submit, status, report, cancel",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # API Gateway's logging role is one setting per account and region, shared by every API there: a stage
            # sets it (or leaves it to whoever already did) and never takes it away when the stage is deleted.
            cloud_watch_role=cloudwatch_role,
            cloud_watch_role_removal_policy=cdk.RemovalPolicy.RETAIN,
            policy=iam.PolicyDocument(statements=[iam.PolicyStatement(
                actions=["execute-api:Invoke"], principals=allowed, resources=["execute-api:/*"],
            )]),
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            deploy_options=apigw.StageOptions(
                stage_name="v1",
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True, http_method=True, ip=True, protocol=True, request_time=True,
                    resource_path=True, response_length=True, status=True, user=True),
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
                tracing_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
            ),
        )
        acknowledge(self.api, "AwsSolutions-APIG3",
                    "callers are IAM principals of this account (resource policy + SigV4); a WAF web ACL "
                    "adds cost without blocking anything those checks let through")
        acknowledge(self.api, "AwsSolutions-APIG4",
                    "every method uses AWS_IAM authorization, which cdk-nag does not count as an authorizer")
        acknowledge(self.api, "AwsSolutions-COG4",
                    "callers are IAM principals (SigV4), not end users; there is no Cognito user pool")
        acknowledge(self.api, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                              "AmazonAPIGatewayPushToCloudWatchLogs]",
                    "API Gateway's account-level logging role uses the AWS-maintained push-to-logs policy")
        validator = self.api.add_request_validator("Validator", validate_request_body=True,
                                                   validate_request_parameters=True)
        trial_model = self.api.add_model("TrialModel", content_type="application/json",
                                         model_name="Trial", schema=trial_body_schema())
        integration = apigw.LambdaIntegration(handler, proxy=True)
        for method, path in ROUTES:
            resource = self.api.root.resource_for_path(path)
            resource.add_method(
                method, integration,
                authorization_type=apigw.AuthorizationType.IAM,
                request_validator=validator,
                request_models={"application/json": trial_model} if (method, path) == ("POST", "/trials") else None,
                request_parameters={"method.request.path.id": True} if "{id}" in path else None,
            )


def trial_body_schema() -> apigw.JsonSchema:
    """The required top-level fields of a trial (from the pydantic model, so the two never drift)."""
    required = sorted(name for name, field in TrialSpec.model_fields.items() if field.is_required())
    return apigw.JsonSchema(
        schema=apigw.JsonSchemaVersion.DRAFT4,
        title="Trial",
        type=apigw.JsonSchemaType.OBJECT,
        required=required,
        properties={
            "schema_version": apigw.JsonSchema(type=apigw.JsonSchemaType.INTEGER, minimum=1),
            "name": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, pattern=BATCH_SAFE_NAME),
            "tracks": apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
            "model": apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
            "data": apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
        },
    )
