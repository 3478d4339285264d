"""Job task: a training job's credentials for its own trial's prefix (invoked by the trainer, synchronously).

The answer is the writer role's credentials with where they may write, or ``{"error": reason}`` for a job that
cannot prove it is the job the workflow started (logged with the reason and counted, never retried: the trainer
stops with the reason). See :mod:`lambdas.services.job_credentials`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from lambdas.adapters.batch_jobs import BatchJobsApi
from lambdas.adapters.caller_identity import StsCallerIdentity
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.adapters.writer_role import StsWriterRole
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import count_refused_credentials, logger
from lambdas.runtime.settings import CredentialSettings, per_environment, settings_for
from lambdas.services.job_credentials import CredentialsRefused, CredentialsRequest, vend

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@per_environment
def compose() -> tuple[BatchJobsApi, DynamoTrials, StsWriterRole, StsCallerIdentity]:
    settings = settings_for(CredentialSettings)
    return (BatchJobsApi(), DynamoTrials(settings.TRIALS_TABLE), StsWriterRole(settings.WRITER_ROLE_ARN),
            StsCallerIdentity(settings.AWS_REGION))


@lambda_handler(CredentialSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    try:
        request = CredentialsRequest.model_validate(event)
    except ValidationError as exc:
        fields = ", ".join(sorted({str(err["loc"][0]) for err in exc.errors() if err["loc"]})) or "the request"
        reason = (f"malformed request ({fields}): send {{\"job_id\": AWS_BATCH_JOB_ID, \"identity\": a presigned STS "
                  "GetCallerIdentity URL signed with the job's own credentials}}")
        count_refused_credentials(reason)
        return {"error": reason}
    jobs, trials, writer, identity = compose()
    settings = settings_for(CredentialSettings)
    try:
        answer = vend(request, jobs=jobs, trials=trials, writer=writer, identity=identity,
                      bucket=settings.ARTIFACTS_BUCKET, duration_s=settings.CREDENTIALS_DURATION_S)
    except CredentialsRefused as exc:
        count_refused_credentials(exc.reason, job_id=request.job_id)
        return {"error": exc.reason}
    logger.info("job credentials issued", extra={"job_id": request.job_id, "trial_id": answer["trial_id"],
                                                 "run": answer["run"]})
    return answer
