"""`dualtrack stage preflight` on the local plane: the same checks, read from the loopback moto server.

The local stage is never deployed to AWS; its preflight asks the emulated account, as `dualtrack local run` does
before it deploys the stage there (writing ``preflight.json`` into the run's directory). The emulation answers the
zone offerings, the ECS-optimized AMI parameters and the AMIs from the snapshot of AWS's data that moto carries.
What it does not emulate is said so in the row, not asked (an unemulated call makes moto log a server error):
EC2's vCPU quotas and Lambda's account settings; and the plane reaches no image registry (the rehearsal builds no
image: its jobs run the trainer as local processes).
"""

from __future__ import annotations

import json
from pathlib import Path

from dualtrack.preflight import LambdaLimits, Quota, Report, Unreadable
from dualtrack.preflight_aws import Boto3Reads, ReadFailed, preflight
from infra.config import StageConfig, stage_config

PREFLIGHT_FILE = "preflight.json"
LOCAL_PLANE = "the local plane (moto)"


class LocalPlaneReads(Boto3Reads):
    """:class:`Boto3Reads` against the loopback server, less what the emulation does not answer."""

    def __init__(self, region: str) -> None:
        super().__init__(region, registry=None, unreachable_registry="the local plane reaches no image registry "
                         "(a rehearsal builds no image); run the preflight against AWS for it")

    def quota(self, code: str) -> Quota:
        raise ReadFailed(Unreadable("servicequotas:GetServiceQuota", "not emulated",
                                    f"{LOCAL_PLANE} keeps no EC2 quotas; on AWS this reads {code}"))

    def lambda_limits(self) -> LambdaLimits:
        raise ReadFailed(Unreadable("lambda:GetAccountSettings", "not emulated",
                                    f"{LOCAL_PLANE} does not answer GetAccountSettings"))


def preflight_on_local_plane(config: StageConfig, region: str, root: Path) -> Report:
    """The stage's preflight read from the local plane this process points at (inside ``local_aws()``)."""
    return preflight(config, LocalPlaneReads(region), region=region, region_from="the local plane's region",
                     root=root, plane=LOCAL_PLANE)


def local_preflight(config: StageConfig, root: Path) -> Report:
    """The stage's preflight on a fresh local plane (`dualtrack stage preflight --stage local`)."""
    from dualtrack.local.server import REGION, local_aws

    with local_aws(config.region or REGION) as aws:
        return preflight_on_local_plane(config, aws.region, root)


def rehearsal_preflight(stage: str, region: str, root: Path, out: Path) -> Report:
    """The rehearsal's preflight of ``stage`` (the plane is up): the report, also written to ``out/preflight.json``."""
    context = json.loads((root / "cdk.json").read_text())["context"]
    report = preflight_on_local_plane(stage_config(context, stage), region, root)
    (out / PREFLIGHT_FILE).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return report
