"""AWS rules the synthesized templates must keep that cfn-lint does not know, checked on both stages of cdk.json.

Each test names the AWS documentation page its rule comes from. A template that breaks one of these would
synthesize, and even pass cfn-lint, and then fail in ``cdk deploy``, in a redeploy or when the first job starts.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigInvalid, StageConfig, stage_config
from lambdas.domain.trial.catalogue import load_catalogue
from tests.stacks.conftest import props, resources

REPO = Path(__file__).resolve().parents[2]
STAGES = ("dev", "prod")


@pytest.fixture(params=STAGES)
def stage(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def compute_of(request: pytest.FixtureRequest, stage: str) -> dict[str, Any]:
    return request.getfixturevalue("compute" if stage == "dev" else "prod_compute")  # type: ignore[no-any-return]


@pytest.fixture
def control_of(request: pytest.FixtureRequest, stage: str) -> dict[str, Any]:
    return request.getfixturevalue("control" if stage == "dev" else "prod_control")  # type: ignore[no-any-return]


def _environment_id(entry: dict[str, Any]) -> str:
    """The compute environment a queue's ComputeEnvironmentOrder entry points at (its logical id)."""
    reference = entry["ComputeEnvironment"]
    return str(reference["Ref"] if "Ref" in reference else reference["Fn::GetAtt"][0])


def _cdk_context() -> dict[str, Any]:
    return json.loads((REPO / "cdk.json").read_text())["context"]  # type: ignore[no-any-return]


def _api_environment(control: Mapping[str, Any]) -> dict[str, Any]:
    fn = next(p for p in props(control, "AWS::Lambda::Function") if p["Handler"].endswith("on_trial_api.handler"))
    return fn["Environment"]["Variables"]  # type: ignore[no-any-return]


def test_the_stage_knows_the_neuron_sdk_its_trainium2_image_pins(control_of: dict[str, Any]) -> None:
    """The image built from containers/neuron names its Neuron SDK in the base image's tag (the Neuron Deep
    Learning Containers' tag scheme, e.g. ``2.8.0-neuronx-py311-sdk2.26.0-ubuntu22.04``,
    https://github.com/aws-neuron/deep-learning-containers): the API refuses a trial declaring another, and the
    compile-cache key takes the image's versions."""
    dockerfile = (REPO / "containers/neuron/Dockerfile").read_text()
    sdk = re.search(r"-sdk(\d+\.\d+\.\d+)-", dockerfile)
    assert sdk is not None
    for handler in ("on_trial_api", "resolve_compile_cache"):
        fn = next(p for p in props(control_of, "AWS::Lambda::Function") if p["Handler"].endswith(f"{handler}.handler"))
        assert json.loads(fn["Environment"]["Variables"]["IMAGE_VERSIONS"]) == {"trn2": {"neuron_sdk": sdk.group(1)}}


# ---- 1: security groups belong on the EFA interfaces ---------------------------------------------------------
def test_no_compute_environment_sends_security_groups_beside_network_interfaces(compute_of: dict[str, Any]) -> None:
    """Batch refuses a compute environment that has ``securityGroupIds`` while its launch template declares
    ``NetworkInterfaces`` ("Either compute environment Security Groups or Network Interfaces in Launch template are
    exclusively allowed", https://github.com/aws/aws-cdk/issues/21577); with interfaces, "you must specify any security
    groups and subnets as part of the network interface"
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-ec2-launchtemplate-launchtemplatedata.html).
    """
    templates = resources(compute_of, "AWS::EC2::LaunchTemplate")
    checked = 0
    for logical_id, environment in resources(compute_of, "AWS::Batch::ComputeEnvironment").items():
        compute_resources = environment["Properties"]["ComputeResources"]
        template_id = compute_resources["LaunchTemplate"]["LaunchTemplateId"]["Ref"]
        data = templates[template_id]["Properties"]["LaunchTemplateData"]
        if "NetworkInterfaces" in data:
            checked += 1
            assert "SecurityGroupIds" not in compute_resources, logical_id
            assert all(interface["Groups"] for interface in data["NetworkInterfaces"]), template_id
        else:
            assert compute_resources.get("SecurityGroupIds"), logical_id
    assert checked  # both stages run EFA instance types


# ---- 2 and 3: images a deployer can pull, and the command ECS really runs ------------------------------------
@pytest.mark.parametrize("dockerfile", ["containers/gpu/Dockerfile", "containers/neuron/Dockerfile"])
def test_base_images_come_from_public_ecr_for_amd64(dockerfile: str) -> None:
    """CDK asset publishing logs in only to the destination ECR repository
    (https://docs.aws.amazon.com/cdk/v2/guide/assets.html), so a base image in the private Deep Learning
    Containers registry (763104351884.dkr.ecr...) cannot be pulled by ``cdk deploy``; public ECR needs no login
    (https://docs.aws.amazon.com/AmazonECR/latest/public/public-registries.html). Hosts are x86_64."""
    text = (REPO / dockerfile).read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base is not None and base.group(1).startswith("public.ecr.aws/"), base
    assert re.search(r":\S+$", base.group(1)), "pin the base image by tag (or digest)"
    assert "763104351884" not in text.split("#")[0]
    assert re.search(r"^FROM --platform=linux/amd64 \$\{BASE_IMAGE\}", text, re.MULTILINE)


def test_image_assets_build_for_linux_amd64(assembly: Any) -> None:
    """The asset's platform is what ``docker build --platform`` gets at deploy time
    (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_ecr_assets.DockerImageAssetProps.html)."""
    images = [image for manifest in assembly.path.glob("*.assets.json")
              for image in json.loads(manifest.read_text()).get("dockerImages", {}).values()]
    assert len(images) == 2
    assert all(image["source"]["platform"] == "linux/amd64" for image in images)


def _dockerfile_entrypoint(path: Path) -> list[str]:
    found = re.findall(r"^ENTRYPOINT (\[.*\])$", path.read_text(), re.MULTILINE)
    assert len(found) == 1, path
    return json.loads(found[0])  # type: ignore[no-any-return]


def test_job_command_runs_the_trainer_under_the_image_entrypoint(compute_of: dict[str, Any]) -> None:
    """ECS runs the image's ENTRYPOINT with the job's ``command`` in place of CMD ("The command that's passed to the
    container. This parameter maps to Cmd", https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerProperties.html).
    The composed argv must be one the trainer's own CLI accepts: ``python -m trainer python -m trainer run`` exits
    2 on every job."""
    from trainer.cli import _parser as build_parser

    for track, dockerfile in (("gpu", "containers/gpu/Dockerfile"), ("trn2", "containers/neuron/Dockerfile")):
        entrypoint = _dockerfile_entrypoint(REPO / dockerfile)
        assert entrypoint == ["python", "-m", "trainer"]
        for logical_id, definition in resources(compute_of, "AWS::Batch::JobDefinition").items():
            if not logical_id.startswith(track.capitalize()):
                continue
            properties = definition["Properties"]
            containers = ([properties["ContainerProperties"]] if "ContainerProperties" in properties else
                          [r["Container"] for r in properties["NodeProperties"]["NodeRangeProperties"]])
            defaults = properties.get("Parameters") or {}
            submitted = {"spec_uri": "s3://b/trials/t/spec.json", "run_dir": "s3://b/trials/t/gpu", "run": "gpu",
                         "trial_id": "t", "compile_cache_url": "s3://c/neuron/x/"}
            for container in containers:
                # Batch substitutes Ref::name from the submission's parameters over the definition's defaults
                # (https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#parameters);
                # a Ref:: left unsubstituted would reach the trainer as a literal.
                values = {**defaults, **submitted}
                command = [re.sub(r"Ref::(\w+)", lambda m, v=values: v[m.group(1)], part)  # type: ignore[misc]
                           for part in container["Command"]]
                argv = entrypoint + command
                args = build_parser().parse_args(argv[3:])  # what `python -m trainer` hands its parser
                assert args.command in ("run", "launch"), shlex.join(argv)


# ---- 4: redeploys (see test_redeploy.py) and fixed names ------------------------------------------------------
def test_control_plane_refers_to_batch_by_name_not_by_export(control_of: dict[str, Any]) -> None:
    """CloudFormation refuses to update an export another stack imports
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-stack-exports.html); a job
    definition's ARN carries its revision, which every image change bumps. SubmitJob takes a job definition name
    ("name:revision or just name for the latest active revision",
    https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html)."""
    text = json.dumps(control_of)
    imports = re.findall(r'"Fn::ImportValue": "([^"]+)"', text)
    assert not [name for name in imports if "Compute" in name]
    targets = json.loads(_api_environment(control_of)["JOB_TARGETS"])
    for by_type in targets.values():
        for target in by_type.values():
            assert not target["single_node"].startswith("arn:") and ":" not in target["single_node"]


# ---- 5 and 7: the workflow's SubmitJob -------------------------------------------------------------------------
def _workflow(control: Mapping[str, Any]) -> dict[str, Any]:
    (machine,) = props(control, "AWS::StepFunctions::StateMachine")
    parts = machine["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))  # type: ignore[no-any-return]


def _tasks(states: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for name, state in states.items():
        if state.get("Type") == "Task":
            found.append((name, state))
        for branch in state.get("Branches", []):
            found += _tasks(branch["States"])
    return found


def test_submit_job_sends_no_retry_strategy(control_of: dict[str, Any]) -> None:
    """"When a retry strategy is specified here, it overrides the retry strategy defined in the job definition"
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html): the definition's evaluateOnExit
    rules (75 and Spot reclaim retry, everything else exits) would be gone."""
    submits = [(n, s) for n, s in _tasks(_workflow(control_of)["States"]) if "batch:submitJob" in s["Resource"]]
    assert submits
    for name, state in submits:
        assert "RetryStrategy" not in state["Parameters"], name
        timeout = "$.compile_timeout_s" if "Compile" in name else "$.attempt_timeout_s"
        assert state["Parameters"]["Timeout"] == {"AttemptDurationSeconds.$": timeout}, name


# The SubmitJob fields Step Functions' optimized Batch integration passes on
# (https://docs.aws.amazon.com/step-functions/latest/dg/connect-batch.html). NodeOverrides, ShareIdentifier and
# the EKS/ECS property overrides are not among them, so a multi-node job's node count comes from its definition.
SFN_BATCH_SUBMIT_FIELDS = {"ArrayProperties", "ContainerOverrides", "DependsOn", "JobDefinition", "JobName", "JobQueue",
                           "Parameters", "RetryStrategy", "Timeout", "Tags"}


def test_submit_job_sends_only_fields_the_integration_supports(control_of: dict[str, Any]) -> None:
    """Step Functions' ``batch:submitJob`` integration takes a fixed set of fields (connect-batch page above); moto's
    engine (LocalStack's parser) silently drops the others, so only this check catches one."""
    for name, state in _tasks(_workflow(control_of)["States"]):
        if "batch:submitJob" in state["Resource"]:
            fields = {key.removesuffix(".$") for key in state["Parameters"]}
            assert fields <= SFN_BATCH_SUBMIT_FIELDS, (name, fields - SFN_BATCH_SUBMIT_FIELDS)


def test_job_definitions_keep_the_exit_code_rules_and_the_stage_timeout(compute_of: dict[str, Any]) -> None:
    """Batch evaluates the job definition's ``evaluateOnExit`` (first match wins) when the submission sends none
    (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html)."""
    for definition in props(compute_of, "AWS::Batch::JobDefinition"):
        rules = definition["RetryStrategy"]["EvaluateOnExit"]
        assert rules[0] == {"Action": "RETRY", "OnExitCode": "75"}
        assert rules[-1] == {"Action": "EXIT", "OnExitCode": "*"}
        assert definition["Timeout"]["AttemptDurationSeconds"] >= 60


def test_queues_cancel_jobs_stuck_runnable(compute_of: dict[str, Any]) -> None:
    """A job attempt's timeout counts RUNNING time only; a job waiting RUNNABLE for capacity waits until the queue's
    job state time limit cancels it (https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html;
    reasons, state RUNNABLE, action CANCEL and 600-86,400 s from
    https://docs.aws.amazon.com/batch/latest/APIReference/API_JobStateTimeLimitAction.html)."""
    reasons = {"CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
               "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"}
    for queue in props(compute_of, "AWS::Batch::JobQueue"):
        actions = queue["JobStateTimeLimitActions"]
        assert {a["Reason"] for a in actions} == reasons
        for action in actions:
            assert action["State"] == "RUNNABLE" and action["Action"] == "CANCEL"
            assert 600 <= action["MaxTimeSeconds"] <= 86_400


# ---- 8: tracks per stage, zones, placement groups, reservations ------------------------------------------------
def test_multi_node_capacity_lives_in_one_zone_with_a_cluster_placement_group(prod_compute: dict[str, Any]) -> None:
    """A cluster placement group is in a single Availability Zone, and multi-node parallel jobs aren't supported on
    Spot compute environments (https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html)."""
    environments = resources(prod_compute, "AWS::Batch::ComputeEnvironment")
    for logical_id, environment in environments.items():
        compute_resources = environment["Properties"]["ComputeResources"]
        assert len(compute_resources["Subnets"]) == 1, logical_id  # prod pins each track to one zone
        assert "PlacementGroup" in compute_resources, logical_id
    queues = {q["JobQueueName"]: q for q in props(prod_compute, "AWS::Batch::JobQueue")}
    for definition in props(prod_compute, "AWS::Batch::JobDefinition"):
        if definition["Type"] != "multinode":
            continue
        queue = queues[definition["JobDefinitionName"].rsplit("-multi-", 1)[0]]
        for entry in queue["ComputeEnvironmentOrder"]:
            target = _environment_id(entry)
            assert environments[target]["Properties"]["ComputeResources"]["Type"] == "EC2", target


def test_each_compute_environment_has_a_cluster_placement_group_of_its_own(prod_compute: dict[str, Any]) -> None:
    """Amazon EC2, placement strategies (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html):
    for a cluster placement group AWS recommends one launch request and "the same instance type for all instances in
    the placement group"; launching more than one instance type into it, or adding instances later, increases "your
    chances of getting an insufficient capacity error". prod's GPU track has two instance types, each with an
    on-demand and a Spot environment: four environments, so four groups, one per environment (AWS Batch associates
    a placement group with an environment's compute resources, https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html),
    each in the track's one zone."""
    environments = props(prod_compute, "AWS::Batch::ComputeEnvironment")
    groups = resources(prod_compute, "AWS::EC2::PlacementGroup")
    used = [e["ComputeResources"]["PlacementGroup"]["Fn::GetAtt"][0] for e in environments]
    assert len(environments) == 5  # p5 and p4d on-demand and Spot, trn2 on-demand
    assert len(set(used)) == len(used) == len(groups)
    assert all(g["Properties"]["Strategy"] == "cluster" for g in groups.values())


def test_each_track_is_optional_per_stage() -> None:
    """trn2 is offered in few regions (https://aws.amazon.com/ec2/instance-types/trn2/): a stage may leave a track
    out, and then has none of its capacity."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_stacks

    config = StageConfig.model_validate({
        "name": "gpuonly", "gpu": {"instance_types": ["g6e.48xlarge"], "ami_id": "ami-0123456789abcdef0"}})
    stacks = build_stacks(App(), config)
    compute = Template.from_stack(stacks["compute"]).to_json()
    assert [p["JobQueueName"] for p in props(compute, "AWS::Batch::JobQueue")] == ["dualtrack-gpuonly-gpu-g6e-48xlarge"]
    assert not [k for k in compute["Resources"] if k.startswith("Trn2")]
    definition = _workflow(Template.from_stack(stacks["control"]).to_json())
    # The branches: gpu, trn2, then the scaling runs' Map.
    _, trn2_branch, _ = definition["States"]["RunTracks"]["Branches"]
    assert list(trn2_branch["States"]) == ["Trn2Skipped"]
    # The pinned AMI is the template's literal: no SSM parameter for CloudFormation to re-read on a deploy.
    (environment,) = props(compute, "AWS::Batch::ComputeEnvironment")
    assert environment["ComputeResources"]["Ec2Configuration"][0]["ImageIdOverride"] == "ami-0123456789abcdef0"
    with pytest.raises(ConfigInvalid, match="at least one track"):
        stage_config({"dualtrack:stages": {"none": {}}}, "none")


def test_capacity_reservations_go_through_the_launch_template() -> None:
    """Batch launches into On-Demand Capacity Reservations and Capacity Blocks for ML that the launch template
    targets (Capacity Blocks: market type ``capacity-block`` plus the reservation id,
    https://aws.amazon.com/blogs/hpc/how-to-use-capacity-blocks-for-ml-with-aws-batch/;
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-launch.html)."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_stacks

    config = StageConfig.model_validate({
        "name": "block", "region": "us-east-2", "availability_zones": ["us-east-2b"],
        "trn2": {"instance_types": ["trn2.48xlarge"], "ami_id": "ami-0123456789abcdef0",
                 "availability_zone": "us-east-2b", "capacity_reservation_id": "cr-0123456789abcdef0",
                 "capacity_block": True},
    })
    stacks = build_stacks(App(), config)
    compute = Template.from_stack(stacks["compute"]).to_json()
    (template,) = props(compute, "AWS::EC2::LaunchTemplate")
    data = template["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    # A block is paid up front for its whole duration (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    # capacity-blocks-pricing-billing.html): the functions are told, so they bill a job's queue time on it.
    control = Template.from_stack(stacks["control"]).to_json()
    # ... at the stage's own region's rows (us-east-2), never another region's.
    overrides = {json.loads(v["PRICE_OVERRIDES"])["instances"]["us-east-2"]["trn2.48xlarge"]["capacity"]
                 for f in props(control, "AWS::Lambda::Function")
                 if "PRICE_OVERRIDES" in (v := f.get("Environment", {}).get("Variables", {}))}
    assert overrides == {"capacity_block"}
    with pytest.raises(ValueError, match=r"trn2.48xlarge.capacity is 'on_demand', but the trn2 track runs"):
        StageConfig.model_validate({**config.model_dump(exclude_none=True), "price_overrides": {
            "instances": {"us-east-2": {"trn2.48xlarge": {"capacity": "on_demand"}}}}})
    with pytest.raises(ValueError, match="spot cannot be combined"):
        StageConfig.model_validate({"name": "x", "region": "us-east-2", "availability_zones": ["us-east-2b"],
                                    "gpu": {"instance_types": ["p5.48xlarge"], "ami_id": "ami-0123456789abcdef0",
                                            "availability_zone": "us-east-2b", "spot": True,
                                            "capacity_reservation_id": "cr-0123456789abcdef0"}})


# ---- 9: inputs the jobs can read -------------------------------------------------------------------------------
def test_job_roles_read_the_stage_data_buckets() -> None:
    """A job role needs s3:GetObject on the objects and s3:ListBucket on the bucket, and kms:Decrypt on an SSE-KMS
    bucket's key (https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html#aws-managed-customer-managed-keys)."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_stacks

    key = "arn:aws:kms:us-east-2:123456789012:key/abcd"
    config = StageConfig.model_validate({
        "name": "data", "data_buckets": ["team-datasets"], "data_kms_key_arns": [key],
        "gpu": {"instance_types": ["g6e.48xlarge"], "ami_id": "ami-0123456789abcdef0"}})
    stacks = build_stacks(App(), config)
    compute = Template.from_stack(stacks["compute"]).to_json()
    statements = [s for p in props(compute, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]
    text = json.dumps(statements)
    assert "s3:::team-datasets/*" in text and '"s3:ListBucket"' in text
    assert any(s["Resource"] == key and "kms:Decrypt" in s["Action"] for s in statements)
    control = Template.from_stack(stacks["control"]).to_json()
    assert _api_environment(control)["DATA_BUCKETS"] == "team-datasets"


# ---- 10: devices and sizes that every queue can place ----------------------------------------------------------
def test_multi_node_definitions_map_the_efa_devices(prod_compute: dict[str, Any]) -> None:
    """"The job definition must include a devices member with hostPath set to /dev/infiniband/uverbs0 ... If
    permissions is set, it must be set to READ | WRITE | MKNOD" (https://docs.aws.amazon.com/batch/latest/userguide/efa.html),
    one uverbs device per EFA interface."""
    catalogue = load_catalogue()
    multi = [p for p in props(prod_compute, "AWS::Batch::JobDefinition") if p["Type"] == "multinode"]
    assert multi
    for definition in multi:
        container = definition["NodeProperties"]["NodeRangeProperties"][0]["Container"]
        devices = [d for d in container["LinuxParameters"]["Devices"] if "infiniband" in d["HostPath"]]
        interfaces = catalogue.get(container["InstanceType"]).efa_interfaces
        # A node count per definition (Step Functions cannot override it), named for it, one range over all nodes.
        count = int(definition["JobDefinitionName"].rsplit("-", 1)[1])
        assert definition["NodeProperties"]["NumNodes"] == count
        assert [r["TargetNodes"] for r in definition["NodeProperties"]["NodeRangeProperties"]] == [f"0:{count - 1}"]
        assert [d["HostPath"] for d in devices] == [f"/dev/infiniband/uverbs{i}" for i in range(interfaces)]
        assert all(sorted(p.upper() for p in d["Permissions"]) == ["MKNOD", "READ", "WRITE"] for d in devices)


def test_every_job_sent_to_a_queue_fits_every_instance_type_it_holds(compute_of: dict[str, Any],
                                                                     control_of: dict[str, Any]) -> None:
    """A job whose vCPUs, memory or GPUs exceed what a compute environment's instances register can never be placed
    there ("the job can't be placed in your compute environment",
    https://docs.aws.amazon.com/batch/latest/userguide/memory-management.html); every job must also use all of its
    host's accelerators (the host is billed whole)."""
    catalogue = load_catalogue()
    environments = resources(compute_of, "AWS::Batch::ComputeEnvironment")
    queues = {q["JobQueueName"]: q for q in props(compute_of, "AWS::Batch::JobQueue")}
    definitions = {p["JobDefinitionName"]: p for p in props(compute_of, "AWS::Batch::JobDefinition")}
    targets = json.loads(_api_environment(control_of)["JOB_TARGETS"])
    checked = 0
    for track, by_type in targets.items():
        for instance_type, target in by_type.items():
            definition = definitions[target["single_node"]]["ContainerProperties"]
            needs = {r["Type"]: int(r["Value"]) for r in definition["ResourceRequirements"]}
            for entry in queues[target["queue"]]["ComputeEnvironmentOrder"]:
                types = environments[_environment_id(entry)]["Properties"]["ComputeResources"]["InstanceTypes"]
                assert types == [instance_type]
                info = catalogue.get(instance_type)
                assert needs["VCPU"] <= info.vcpus and needs["MEMORY"] < info.memory_gib * 1024 * 0.95
                if track == "gpu":
                    assert needs["GPU"] == info.accelerators
                else:
                    devices = [d["HostPath"] for d in definition["LinuxParameters"]["Devices"]]
                    assert devices == [f"/dev/neuron{i}" for i in range(info.accelerators)]
                checked += 1
    assert checked >= 2


# ---- 11 and 12: shared account settings and hosts replaced under jobs -----------------------------------------
def test_api_gateway_account_setting_outlives_the_stage(control_of: dict[str, Any]) -> None:
    """``AWS::ApiGateway::Account`` is one setting per account and region ("you should only have one
    AWS::ApiGateway::Account resource per region per account",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-apigateway-account.html): deleting a
    stage must not take its logging role away from the other stages' APIs."""
    accounts = resources(control_of, "AWS::ApiGateway::Account")
    for account in accounts.values():
        assert account.get("DeletionPolicy") == "Retain"
        role = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
        assert control_of["Resources"][role].get("DeletionPolicy") == "Retain"


def test_running_jobs_finish_before_hosts_are_replaced(compute_of: dict[str, Any]) -> None:
    """Infrastructure updates give running jobs ``jobExecutionTimeoutMinutes`` (default 30, at most 7200) before
    hosts are replaced (https://docs.aws.amazon.com/batch/latest/APIReference/API_UpdatePolicy.html); the AMI changes
    only when the template's does, not with ``updateToLatestImageVersion``
    (https://docs.aws.amazon.com/batch/latest/userguide/updating-compute-environments.html)."""
    attempt_s = {d["Timeout"]["AttemptDurationSeconds"] for d in props(compute_of, "AWS::Batch::JobDefinition")}
    for environment in props(compute_of, "AWS::Batch::ComputeEnvironment"):
        policy = environment["UpdatePolicy"]
        assert policy["TerminateJobsOnUpdate"] is False
        assert policy["JobExecutionTimeoutMinutes"] >= min(7200, max(attempt_s) // 60)
        assert environment["ComputeResources"]["UpdateToLatestImageVersion"] is False
        assert environment["ReplaceComputeEnvironment"] is False


# ---- 13: encryption at rest ------------------------------------------------------------------------------------
def test_log_groups_and_queues_use_a_customer_managed_key(templates: dict[str, dict[str, Any]]) -> None:
    """CloudWatch Logs encrypts a log group with a KMS key only if the key policy allows ``logs.<region>.amazonaws.com``
    for that log group's ARN (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html);
    EventBridge sends to a KMS-encrypted queue only if the key policy lets it generate data keys
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html)."""
    for name, template in templates.items():
        for logical_id, group in resources(template, "AWS::Logs::LogGroup").items():
            assert "KmsKeyId" in group["Properties"], (name, logical_id)
        for logical_id, queue in resources(template, "AWS::SQS::Queue").items():
            assert "KmsMasterKeyId" in queue["Properties"], (name, logical_id)
        policies = json.dumps([k["Properties"]["KeyPolicy"] for k in resources(template, "AWS::KMS::Key").values()])
        if resources(template, "AWS::Logs::LogGroup"):
            assert "kms:EncryptionContext:aws:logs:arn" in policies, name
        if resources(template, "AWS::SQS::Queue"):
            assert "events.amazonaws.com" in policies, name


# ---- cfn-lint on the second stage ---------------------------------------------------------------------------------
def test_cfn_lint_has_no_errors_on_prod(prod_assembly: Any) -> None:
    import subprocess
    import sys

    templates = sorted(str(p) for p in prod_assembly.path.glob("*.template.json"))
    done = subprocess.run([sys.executable, "-m", "cfnlint", "--format", "json", *templates],
                          capture_output=True, text=True, check=False, timeout=300)
    errors = [f for f in json.loads(done.stdout or "[]") if f["Level"] == "Error"]
    assert errors == [], json.dumps(errors, indent=1)[:4000]


def test_every_function_environment_fits_lambdas_4_kb(templates: dict[str, dict[str, Any]],
                                                      prod_control: dict[str, Any]) -> None:
    """Lambda quotas (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html): environment
    variables are limited to 4 KB for all variables of a function together; a larger set fails the deploy. A
    governance or price-override setting too large for it is refused at synth time, naming the variables."""
    from infra.constructs.functions import ENVIRONMENT_LIMIT_BYTES, check_environment_size, environment_bytes

    functions = [p for t in (*templates.values(), prod_control) for p in props(t, "AWS::Lambda::Function")]
    assert functions
    for fn in functions:
        variables = fn.get("Environment", {}).get("Variables", {})
        assert environment_bytes(variables) <= ENVIRONMENT_LIMIT_BYTES, fn["Handler"]
    teams = {f"team-{n:03d}": {"members": [f"arn:aws:iam::123456789012:role/team-{n:03d}-engineer-{k}"
                                           for k in range(3)]} for n in range(50)}
    with pytest.raises(ValueError, match=r"over Lambda's 4 KB limit.*GOVERNANCE"):
        check_environment_size("on_trial_api", {"GOVERNANCE": json.dumps({"teams": teams}), "OTHER": "x"})


def test_stage_settings_that_would_fail_after_deploy_are_refused_at_synth() -> None:
    """A price override the functions cannot apply, or a governance entry that maps a role to no team, used to be
    discovered as 503s after deploy; the stage model refuses them naming the setting."""
    base = {"gpu": {"instance_types": ["g6e.48xlarge"], "ami_id": "ami-0123456789abcdef0"}}
    with pytest.raises(ConfigInvalid, match=r"price_overrides: .*does not apply to the price table"):
        stage_config({"dualtrack:stages": {"s": {**base, "price_overrides": {"instance": {}}}}}, "s")
    with pytest.raises(ConfigInvalid, match=r"governance: .*must contain \{team\}"):
        stage_config({"dualtrack:stages": {"s": {**base, "governance": {"member_roles": ["engineers"]}}}}, "s")
    with pytest.raises(ConfigInvalid, match=r"governance\.default_quotas\.max_usd_per_trial"):
        stage_config({"dualtrack:stages": {"s": {**base, "governance": {
            "default_quotas": {"max_usd_per_trial": "Infinity"}}}}}, "s")


def test_every_compile_queue_places_its_training_definition_on_the_same_hosts(compute_of: dict[str, Any],
                                                                            control_of: dict[str, Any]) -> None:
    """The warm-up compile stage submits the training job's definition to the compile queue, so the queue must hold
    exactly the training queue's compute environments: a job sized for one type, sent to a queue whose environments
    run another, is never placed ("the job can't be placed in your compute environment",
    https://docs.aws.amazon.com/batch/latest/userguide/memory-management.html). Its timeout is the stage's compile
    timeout, which SubmitJob's Timeout may set at 60 s or more
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_JobTimeout.html)."""
    queues = {q["JobQueueName"]: q for q in props(compute_of, "AWS::Batch::JobQueue")}
    environment = _api_environment(control_of)
    targets = json.loads(environment["JOB_TARGETS"])
    assert targets["trn2"] and "compile_queue" not in json.dumps(targets.get("gpu") or {})
    for target in targets["trn2"].values():
        compile_queue = queues[target["compile_queue"]]
        assert compile_queue["ComputeEnvironmentOrder"] == queues[target["queue"]]["ComputeEnvironmentOrder"]
    assert 60 <= int(environment["COMPILE_TIMEOUT_S"]) <= int(environment["ATTEMPT_TIMEOUT_S"])
