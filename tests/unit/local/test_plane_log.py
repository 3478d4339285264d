"""The rehearsal's own log (plane.log) holds what the emulated plane prints, and nothing AWS itself would not log."""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import boto3
from moto import mock_aws

from dualtrack.local.aws.moto_shims import MOTO_CONFIG
from dualtrack.local.rehearsal import _library_output_to
from lambdas.runtime.observability import EMPTY_METRICS_WARNING

_CHOICE: dict[str, object] = {
    "StartAt": "HasNodes",
    "States": {
        "HasNodes": {"Type": "Choice", "Choices": [{"Variable": "$.job.nodes", "IsPresent": True, "Next": "Multi"}],
                     "Default": "Single"},
        "Multi": {"Type": "Pass", "Result": {"branch": "multi"}, "End": True},
        "Single": {"Type": "Pass", "Result": {"branch": "single"}, "End": True},
    },
}


def _execute(name: str, definition: dict[str, object], payload: dict[str, object]) -> dict[str, object]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.create_state_machine(name=name, definition=json.dumps(definition),
                                       roleArn="arn:aws:iam::123456789012:role/probe")["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps(payload))["executionArn"]
    for _ in range(200):
        described = sfn.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            return dict(described)
        time.sleep(0.02)
    raise AssertionError("the execution did not end")


def test_an_is_present_probe_of_an_absent_path_logs_nothing_and_a_missing_input_path_still_does(
        tmp_path: Path) -> None:
    """An absent path makes ``IsPresent`` false and is no error
    (https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html); a path a state needs that is absent
    fails the execution with ``States.Runtime``
    (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html). moto logs an ERROR for
    both; plane.log keeps only the failure's."""
    log = tmp_path / "plane.log"
    with mock_aws(config=MOTO_CONFIG), _library_output_to(log):
        probed = _execute("probe", _CHOICE, {"job": {}})
        needed = _execute("needed", {"StartAt": "Read", "States": {"Read": {"Type": "Pass", "InputPath": "$.job.nodes",
                                                                  "End": True}}}, {"job": {}})
    assert probed["status"] == "SUCCEEDED", probed
    assert json.loads(str(probed["output"])) == {"branch": "single"}, probed
    assert needed["status"] == "FAILED"
    text = log.read_text()
    assert "NoSuchJsonPathError" not in text
    assert "Exception=FailureEventException" in text and "States.Runtime" in text


def test_the_empty_metrics_warning_is_dropped_and_every_other_warning_kept(tmp_path: Path) -> None:
    """Powertools warns when a request publishes no application metric and documents filtering it by message
    (https://docs.powertools.aws.dev/lambda/python/latest/core/metrics/#raising-schemavalidationerror-on-empty-metrics).
    """
    from aws_lambda_powertools import Metrics

    log = tmp_path / "plane.log"
    with _library_output_to(log):
        Metrics(namespace="Probe", service="probe").log_metrics(lambda event, context: None)({}, None)
        warnings.warn("a library's own warning", UserWarning, stacklevel=1)
        logging.getLogger("moto.stepfunctions.parser.asl").error("Exception=FailureEventException, Error=X at 'y'")
    text = log.read_text()
    assert EMPTY_METRICS_WARNING not in text
    assert "a library's own warning" in text and "Error=X" in text
