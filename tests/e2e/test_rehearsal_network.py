"""The rehearsal's jobs live in the synthesized VPC: take away what AWS would need and the rehearsal fails as AWS
would, naming what is missing.

- Amazon VPC, "Access AWS services through AWS PrivateLink": subnets with no route to the internet reach a service
  only through an endpoint of it; without the ``lambda`` endpoint the trainer's call for its credentials times out.
- AWS Batch, "Compute environment considerations for multi-node parallel jobs": the nodes' interfaces get the
  compute environment's groups, else the VPC's default group; with that group's rules revoked (CDK's
  ``restrictDefaultSecurityGroup``) the nodes never meet at the rendezvous.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions, RehearsalResult
from infra import synth
from lambdas.domain.trial.rules import parse_trial

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


class _Edited:
    """The synthesized assembly with its templates edited before the local plane stands them up."""

    def __init__(self, assembly: synth.Assembly, edit: Callable[[dict[str, Any], str], None]):
        self._assembly, self._edit = assembly, edit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._assembly, name)

    def templates(self) -> dict[str, dict[str, Any]]:
        templates: dict[str, dict[str, Any]] = self._assembly.templates()
        self._edit(templates[self._assembly.stack("Compute")]["Resources"], self._assembly.stack("Compute"))
        return templates


def _rehearse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: str,
              edit: Callable[[dict[str, Any], str], None]) -> tuple[RehearsalResult, str]:
    real = synth.synthesize
    monkeypatch.setattr(synth, "synthesize", lambda stage: _Edited(real(stage), edit))
    doc = json.loads((ROOT / "examples" / example).read_text())
    doc.update(max_steps=4, checkpoint_interval_steps=2)
    doc["evaluation"].update(interval_steps=4, prompts=[])
    doc["tracks"].pop("trn2")
    doc.pop("fault_injection", None)
    for key in ("train_uri", "validation_uri"):
        doc["data"][key] = str(ROOT / doc["data"][key])
    spec = parse_trial(doc, allow_local_paths=True)
    stream = io.StringIO()
    result = Rehearsal(spec, RehearsalOptions(out=tmp_path, fresh=True, timeout_s=400,
                                              state_dir=tmp_path / "plane-state"),
                       progress=Progress(stream, max_steps=spec.max_steps)).run()
    return result, stream.getvalue()


def test_without_the_lambda_endpoint_the_job_cannot_get_its_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def drop_lambda_endpoint(resources: dict[str, Any], stack: str) -> None:
        (logical_id,) = [k for k, v in resources.items() if v["Type"] == "AWS::EC2::VPCEndpoint"
                         and json.dumps(v["Properties"]["ServiceName"]).rstrip('"]}').endswith(".lambda")]
        del resources[logical_id]

    result, printed = _rehearse(tmp_path, monkeypatch, "trial-rehearsal.json", drop_lambda_endpoint)
    assert not result.succeeded, printed[-3000:]
    denied = {(service, reason) for _, service, reason in result.network_denied}
    assert any(service == "lambda" and "add an interface VPC endpoint for com.amazonaws.us-east-1.lambda" in reason
               for service, reason in denied), result.network_denied
    assert "network:" in printed and "-> lambda" in printed and "REHEARSAL FAILED" in printed
    # Every other service the trainer calls is still reached: only Lambda is refused.
    assert {service for service, _ in denied} == {"lambda"}


def test_with_the_default_group_stripped_the_nodes_never_meet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def restrict_default_group(resources: dict[str, Any], stack: str) -> None:
        (vpc,) = [k for k, v in resources.items() if v["Type"] == "AWS::EC2::VPC"]
        resources["RestrictDefaultGroup"] = {"Type": "Custom::VpcRestrictDefaultSG", "Properties": {
            "DefaultSecurityGroupId": {"Fn::GetAtt": [vpc, "DefaultSecurityGroup"]}}}

    result, printed = _rehearse(tmp_path, monkeypatch, "trial-rehearsal-2node.json", restrict_default_group)
    assert not result.succeeded, printed[-3000:]
    rendezvous = [reason for _, service, reason in result.network_denied if service == "rendezvous"]
    assert rendezvous, result.network_denied
    assert "the VPC's default security group" in rendezvous[0]
    assert "Custom::VpcRestrictDefaultSG" in rendezvous[0]
    assert "no inbound and outbound rule for TCP 29500" in rendezvous[0]
    assert "network:" in printed and "-> rendezvous" in printed and "REHEARSAL FAILED" in printed
