"""The trial workflow in Step Functions: started once per trial (execution name = trial id), stopped on cancel."""

from __future__ import annotations

import json

from lambdas.adapters.aws import client, error_code
from lambdas.domain.trial.trial_record import ExecutionInput
from lambdas.services.ports import Started


class StepFunctionsWorkflow:
    def __init__(self, state_machine_arn: str) -> None:
        self.state_machine_arn = state_machine_arn

    def execution_arn(self, name: str) -> str:
        # arn:aws:states:<region>:<account>:stateMachine:<sm>  ->  ...:execution:<sm>:<name>
        prefix, machine = self.state_machine_arn.split(":stateMachine:", 1)
        return f"{prefix}:execution:{machine}:{name}"

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        try:
            got = client("stepfunctions").start_execution(
                stateMachineArn=self.state_machine_arn, name=name,
                input=json.dumps(execution_input.payload(), sort_keys=True)
            )
        except Exception as exc:
            if error_code(exc) == "ExecutionAlreadyExists":
                return Started(self.execution_arn(name), already_submitted=True)
            raise
        return Started(got["executionArn"], already_submitted=False)

    def status(self, execution_arn: str) -> str | None:
        try:
            return client("stepfunctions").describe_execution(  # type: ignore[no-any-return]
                executionArn=execution_arn
            )["status"]
        except Exception as exc:
            if error_code(exc) == "ExecutionDoesNotExist":
                return None
            raise

    def stop(self, execution_arn: str, cause: str) -> str:
        """Stop a running execution (the workflow's Batch tasks terminate their jobs). Returns the final status."""
        current = self.status(execution_arn)
        if current == "RUNNING":
            client("stepfunctions").stop_execution(executionArn=execution_arn, error="Cancelled", cause=cause[:32768])
            return "ABORTED"
        return current or "NOT_STARTED"
