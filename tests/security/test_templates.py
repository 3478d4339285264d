"""Security properties asserted on the synthesized templates (one synthesis per session, cached by source hash).

Each test checks one property across every stack; cdk-nag's acknowledgements are read back from the assembly's
metadata so that every acknowledged finding is counted and must carry a reason.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import figures

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
ROOT = Path(__file__).resolve().parents[2]
FIGURES = "security.templates"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def assembly() -> Any:
    from infra.synth import synthesize

    return synthesize("dev")


@pytest.fixture(scope="module")
def templates(assembly: Any) -> dict[str, dict[str, Any]]:
    return assembly.templates()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def metadata(assembly: Any) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return {name: json.loads((assembly.path / f"{name}.metadata.json").read_text())
            for name in assembly.stack_names()}


def _resources(templates: dict[str, dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {f"{stack}/{lid}": res.get("Properties", {}) for stack, t in templates.items()
            for lid, res in t["Resources"].items() if res["Type"] == kind}


def _acks_by_logical_id(metadata: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Acknowledged rules per "<stack>/<logical id>", inherited from the construct's parents."""
    out: dict[str, dict[str, str]] = {}
    for stack, entries in metadata.items():
        acks_at: dict[str, dict[str, str]] = {}
        ids: dict[str, str] = {}
        for path, items in entries.items():
            for item in items:
                if item["type"] == "aws:cdk:acknowledged-rules":
                    acks_at.setdefault(path, {}).update({_rule(k): v for k, v in item["data"].items()})
                elif item["type"] == "aws:cdk:logicalId":
                    ids[path] = item["data"]
        for path, logical_id in ids.items():
            merged: dict[str, str] = {}
            for prefix, acks in acks_at.items():
                if path == prefix or path.startswith(prefix + "/"):
                    merged.update(acks)
            out[f"{stack}/{logical_id}"] = merged
    return out


def _rule(key: str) -> str:
    """cdk-nag records an acknowledgement as ``Annotation::<rule id>``; CDK's own validations without it."""
    return key.removeprefix("Annotation::")


def _check(_property: str, count: int = 1) -> None:
    figures.add(FIGURES, "properties_checked", count)


def _listify(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_every_api_method_is_aws_iam_behind_an_account_only_resource_policy(templates: dict[str, Any]) -> None:
    methods = _resources(templates, "AWS::ApiGateway::Method")
    assert methods
    for name, method in methods.items():
        assert method.get("AuthorizationType") == "AWS_IAM", name
    apis = _resources(templates, "AWS::ApiGateway::RestApi")
    assert apis
    for name, api in apis.items():
        statements = api.get("Policy", {}).get("Statement", [])
        assert statements, f"{name} has no resource policy"
        for statement in statements:
            if statement["Effect"] != "Allow":
                continue
            principal = json.dumps(statement.get("Principal"))
            # Only this account's principals, never "*" (unless narrowed by a condition).
            assert '"*"' not in principal or statement.get("Condition"), (name, statement)
            assert ":root" in principal or "arn:" in principal, (name, statement)
    _check("api", len(methods) + len(apis))


def test_iam_wildcards_are_each_acknowledged_with_a_reason(templates: dict[str, Any], metadata: Any) -> None:
    acks = _acks_by_logical_id(metadata)
    wildcards = 0
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for name, policy in _resources(templates, kind).items():
            rules = acks.get(name, {})
            for statement in policy["PolicyDocument"]["Statement"]:
                if statement["Effect"] != "Allow":
                    continue
                for action in _listify(statement.get("Action", [])):
                    if "*" in action:
                        wildcards += 1
                        assert f"AwsSolutions-IAM5[Action::{action}]" in rules, (name, action)
                for resource in _listify(statement.get("Resource", [])):
                    if "*" in json.dumps(resource):
                        wildcards += 1
                        iam5 = [r for r in rules if r.startswith("AwsSolutions-IAM5[Resource::")]
                        if resource == "*":
                            assert "AwsSolutions-IAM5[Resource::*]" in rules, (name, statement["Action"])
                        assert iam5, (name, resource)
    assert wildcards > 0
    figures.record(FIGURES, iam_wildcards=wildcards)
    _check("iam")


def test_acknowledgements_all_carry_reasons_and_nothing_is_unacknowledged(assembly: Any, metadata: Any) -> None:
    acknowledged: Counter[str] = Counter()
    for entries in metadata.values():
        for items in entries.values():
            for item in items:
                if item["type"] == "aws:cdk:acknowledged-rules":
                    for rule, reason in item["data"].items():
                        assert len(reason.strip()) >= 20, (rule, reason)
                        acknowledged[_rule(rule).split("[")[0]] += 1
    report = json.loads((assembly.path / "validation-report.json").read_text())
    unacknowledged = sum(len(r.get("violations", [])) for r in report.get("pluginReports", []))
    assert unacknowledged == 0
    figures.record(FIGURES, findings_acknowledged=sum(acknowledged.values()), unacknowledged=unacknowledged,
                   acknowledged_by_rule=dict(sorted(acknowledged.items())))
    _check("nag")


def test_workflow_role_has_exactly_what_batch_sync_needs_plus_terminate(templates: dict[str, Any]) -> None:
    machines = _resources(templates, "AWS::StepFunctions::StateMachine")
    assert len(machines) == 1
    (stack_and_id, machine), = machines.items()
    stack = stack_and_id.split("/")[0]
    role_id = machine["RoleArn"]["Fn::GetAtt"][0]
    policies = [p for p in _resources({stack: templates[stack]}, "AWS::IAM::Policy").values()
                if any(r.get("Ref") == role_id for r in p.get("Roles", []))]
    actions: dict[str, list[Any]] = {}
    for policy in policies:
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            for action in _listify(statement["Action"]):
                actions.setdefault(action, []).extend(_listify(statement["Resource"]))
    batch = {a for a in actions if a.startswith("batch:")}
    events = {a for a in actions if a.startswith("events:")}
    # The .sync integration's own list (https://docs.aws.amazon.com/step-functions/latest/dg/batch-iam.html), plus
    # TagResource for the tags SubmitJob sends (https://docs.aws.amazon.com/batch/latest/userguide/tag-resources.html).
    assert batch == {"batch:SubmitJob", "batch:TerminateJob", "batch:DescribeJobs", "batch:TagResource"}
    assert all(json.dumps(r) == '"*"' for r in actions["batch:DescribeJobs"])
    assert all(":job/*" in json.dumps(r) for r in actions["batch:TagResource"] + actions["batch:TerminateJob"])
    assert events == {"events:PutTargets", "events:PutRule", "events:DescribeRule"}
    for action in events:
        assert all("rule/StepFunctionsGetEventsForBatchJobsRule" in json.dumps(r) for r in actions[action])
    assert all("job-queue" in json.dumps(r) or "ImportValue" in json.dumps(r) or "job-definition" in json.dumps(r)
               for r in actions["batch:SubmitJob"])
    # Everything else: invoking the workflow's task functions, and log/trace delivery (no resource-level ARNs).
    rest = set(actions) - batch - events - {"lambda:InvokeFunction"}
    assert all(a.startswith(("logs:", "xray:")) for a in rest), rest
    assert all("Functions" in json.dumps(r) for r in actions["lambda:InvokeFunction"])
    figures.record(FIGURES, workflow_role_actions=len(actions))
    _check("workflow_role")


def test_buckets_are_ssl_only_private_encrypted_versioned_and_logged(templates: dict[str, Any],
                                                                     metadata: Any) -> None:
    acks = _acks_by_logical_id(metadata)
    buckets = _resources(templates, "AWS::S3::Bucket")
    policies = _resources(templates, "AWS::S3::BucketPolicy")
    assert buckets
    for name, bucket in buckets.items():
        block = bucket.get("PublicAccessBlockConfiguration", {})
        assert all(block.get(k) is True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls",
                                                  "RestrictPublicBuckets")), name
        assert bucket.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration"), name
        assert bucket.get("VersioningConfiguration", {}).get("Status") == "Enabled", name
        # The access-log bucket cannot log to itself: that must be an acknowledged finding.
        assert bucket.get("LoggingConfiguration") or "AwsSolutions-S1" in acks.get(name, {}), name
        logical_id = name.split("/")[1]
        ssl_only = [p for p in policies.values() if logical_id in json.dumps(p.get("Bucket"))
                    and any(s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {})
                            .get("aws:SecureTransport") == "false" for s in p["PolicyDocument"]["Statement"])]
        assert ssl_only, f"{name} has no SSL-only policy"
    figures.record(FIGURES, buckets=len(buckets))
    _check("buckets", 5)


def test_every_event_target_has_a_dlq_and_a_retry_policy(templates: dict[str, Any]) -> None:
    rules = _resources(templates, "AWS::Events::Rule")
    assert rules
    targets = 0
    for name, rule in rules.items():
        for target in rule.get("Targets", []):
            targets += 1
            assert target.get("DeadLetterConfig", {}).get("Arn"), (name, target["Id"])
            assert target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 0) > 0, (name, target["Id"])
    figures.record(FIGURES, event_targets=targets)
    _check("event_targets")


def test_batch_instances_get_no_public_ip(templates: dict[str, Any]) -> None:
    envs = _resources(templates, "AWS::Batch::ComputeEnvironment")
    subnets = _resources(templates, "AWS::EC2::Subnet")
    assert envs
    for name, subnet in subnets.items():
        assert subnet.get("MapPublicIpOnLaunch") in (False, None), name
    for name, template in _resources(templates, "AWS::EC2::LaunchTemplate").items():
        for nic in template["LaunchTemplateData"].get("NetworkInterfaces", []):
            assert nic.get("AssociatePublicIpAddress") in (False, None), name
    assert not _resources(templates, "AWS::EC2::InternetGateway")
    private = {lid.split("/")[1] for lid, subnet in subnets.items() if not subnet.get("MapPublicIpOnLaunch")}
    for name, env in envs.items():
        refs = re.findall(r'"(?:Ref|Fn::ImportValue)": "([^"]+)"', json.dumps(env["ComputeResources"]["Subnets"]))
        assert refs, name
        assert all(any(p in ref for p in private) for ref in refs), (name, refs)
    _check("network")


SECRET_NAME = re.compile(r"(secret|password|passwd|token|api[_-]?key|private[_-]?key|credential)", re.I)
SECRET_VALUE = [re.compile(p) for p in (r"AKIA[0-9A-Z]{16}", r"ASIA[0-9A-Z]{16}", r"-----BEGIN [A-Z ]*PRIVATE KEY",
                                        r"ghp_[A-Za-z0-9]{36}", r"xox[abp]-[A-Za-z0-9-]{10,}")]


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _secret_looking(name: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False  # a CloudFormation reference, resolved at deploy time, is not a literal secret
    if value.startswith(("{", "[")):  # a JSON setting (JOB_TARGETS, GOVERNANCE): each string in it is scanned
        try:
            document = json.loads(value)
        except ValueError:
            pass
        else:
            return any(_secret_looking(key, leaf) for key, leaf in _json_leaves(document, name))
    if any(p.search(value) for p in SECRET_VALUE):
        return True
    # A secret-named switch (DUALTRACK_CREDENTIALS_PER_NODE=1) holds a number or a boolean, never a secret.
    flag = value.isdigit() or value.lower() in ("true", "false", "yes", "no", "on", "off")
    if SECRET_NAME.search(name) and value and not flag and not value.startswith(("arn:", "{{resolve:")):
        return True
    return len(value) >= 32 and " " not in value and "/" not in value and _entropy(value) > 4.5


def _json_leaves(node: Any, key: str) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in [(str(k), str(k)), *_json_leaves(v, str(k))]]
    if isinstance(node, list):
        return [leaf for v in node for leaf in _json_leaves(v, key)]
    return [(key, node)]


def test_no_secrets_in_environment_variables_or_images(templates: dict[str, Any]) -> None:
    scanned = 0
    for name, fn in _resources(templates, "AWS::Lambda::Function").items():
        for key, value in (fn.get("Environment") or {}).get("Variables", {}).items():
            scanned += 1
            assert not _secret_looking(key, value), (name, key)
    for name, jd in _resources(templates, "AWS::Batch::JobDefinition").items():
        containers = [jd.get("ContainerProperties") or {}]
        containers += [r.get("Container") or {} for r in (jd.get("NodeProperties") or {})
                       .get("NodeRangeProperties", [])]
        for container in containers:
            for pair in container.get("Environment", []):
                scanned += 1
                assert not _secret_looking(pair["Name"], pair.get("Value")), (name, pair["Name"])
    dockerfiles = sorted((ROOT / "containers").glob("*/Dockerfile"))
    assert dockerfiles
    for dockerfile in dockerfiles:
        for number, line in enumerate(dockerfile.read_text().splitlines(), start=1):
            match = re.match(r"^\s*(ENV|ARG)\s+(.*)$", line, re.I)
            body = match.group(2) if match else line
            for key, value in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", body):
                scanned += 1
                assert not _secret_looking(key, value.strip("\"'\\")), (dockerfile.name, number, key)
            assert not any(p.search(line) for p in SECRET_VALUE), (dockerfile, number)
    figures.record(FIGURES, environment_values_scanned=scanned, dockerfiles_scanned=len(dockerfiles),
                   secrets_found=0)
    _check("secrets", 2)


def test_the_secret_scanner_catches_what_it_should() -> None:
    assert _secret_looking("AWS_ACCESS_KEY_ID", "AKIAABCDEFGHIJKLMNOP")
    assert _secret_looking("DB_PASSWORD", "hunter2")
    assert _secret_looking("X", "q8Zr3vW0pLk2Ns9Tb5Yc7Hd1Jf4Gm6Xa")
    assert not _secret_looking("LEDGER_TABLE", "Dualtrack-dev-Stateful-Ledger")
    assert not _secret_looking("TOKEN_TABLE", {"Ref": "Table"})
    # A JSON setting is scanned string by string: a secret inside one is still found, its shape alone is not one.
    assert _secret_looking("GOVERNANCE", json.dumps({"teams": {"a": {"api_key": "AKIAABCDEFGHIJKLMNOP"}}}))
    assert _secret_looking("SETTINGS", json.dumps({"db_password": "hunter2"}))
    assert not _secret_looking("GOVERNANCE", json.dumps({"member_roles": ["dualtrack-{team}-submitter"],
                                                         "teams": {f"team-{n}": {} for n in range(20)}}))
