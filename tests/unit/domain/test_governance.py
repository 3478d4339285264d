"""Who a caller is on a shared stage (``lambdas.domain.trial.governance``).

The caller is ``requestContext.identity.userArn``, "the Amazon Resource Name (ARN) of the effective user identified
after authentication" (API Gateway developer guide, "Variables for data transformations for API Gateway":
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html); a role
session has the form ``arn:aws:sts::<account>:assumed-role/<role>/<session>`` (IAM user guide, "IAM identifiers":
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from lambdas.domain.trial.governance import Governance, NotPermitted, Principal, Quotas, approval_reasons

ACCOUNT = "123456789012"
STAGE = Governance.model_validate({
    "platform_admins": [f"arn:aws:iam::{ACCOUNT}:role/platform-admin"],
    "member_roles": ["dualtrack-{team}-submitter"],
    "approver_roles": ["dualtrack-{team}-approver"],
    "teams": {"team-nlp": {"members": [f"arn:aws:iam::{ACCOUNT}:user/ana", "arn:aws:iam::*:role/nlp-ci-*"],
                           "quotas": {"concurrent_trials": 2}},
              "team-vision": {}},
    "default_quotas": {"concurrent_trials": 5, "usd_per_month": 1000},
})


def test_a_role_session_is_its_role_and_a_user_is_itself() -> None:
    session = Principal.parse(f"arn:aws:sts::{ACCOUNT}:assumed-role/dualtrack-team-nlp-submitter/ana@corp")
    assert (session.arn, session.name) == (f"arn:aws:iam::{ACCOUNT}:role/dualtrack-team-nlp-submitter",
                                           "dualtrack-team-nlp-submitter")
    user = Principal.parse(f"arn:aws:iam::{ACCOUNT}:user/engineering/ana")
    assert (user.account, user.name) == (ACCOUNT, "ana")
    assert Principal.parse("anonymous").name is None


def test_teams_come_from_members_and_naming_conventions_in_the_apis_account() -> None:
    assert STAGE.identify(f"arn:aws:iam::{ACCOUNT}:user/ana", ACCOUNT).team == "team-nlp"
    ci = STAGE.identify("arn:aws:sts::999999999999:assumed-role/nlp-ci-nightly/run-7", ACCOUNT)
    assert ci.team == "team-nlp" and not ci.approves  # an ARN pattern may name another account
    vision = STAGE.identify(f"arn:aws:sts::{ACCOUNT}:assumed-role/dualtrack-team-vision-submitter/bo", ACCOUNT)
    assert vision.team == "team-vision" and not vision.admin
    lead = STAGE.identify(f"arn:aws:sts::{ACCOUNT}:assumed-role/dualtrack-team-vision-approver/cy", ACCOUNT)
    assert lead.team == "team-vision" and lead.may_approve("team-vision") and not lead.may_approve("team-nlp")
    # A bare role-name pattern matches only callers in the API's own account.
    assert STAGE.identify("arn:aws:sts::999999999999:assumed-role/dualtrack-team-vision-submitter/x",
                          ACCOUNT).team is None
    admin = STAGE.identify(f"arn:aws:sts::{ACCOUNT}:assumed-role/platform-admin/ops", ACCOUNT)
    assert admin.admin and admin.team is None and admin.sees("team-nlp") and admin.may_approve("team-vision")
    assert not vision.sees("team-nlp") and vision.sees("team-vision") and not vision.sees(None)


def test_a_principal_in_two_teams_is_refused_naming_both() -> None:
    both = Governance.model_validate({"teams": {"a": {"members": ["arn:aws:iam::*:user/ana"]},
                                                "b": {"members": ["arn:aws:iam::*:user/an*"]}}})
    with pytest.raises(NotPermitted, match="member of teams a, b"):
        both.identify(f"arn:aws:iam::{ACCOUNT}:user/ana", ACCOUNT)


def test_team_quotas_override_the_stage_defaults_field_by_field() -> None:
    assert STAGE.quotas("team-nlp") == Quotas(concurrent_trials=2, usd_per_month=Decimal(1000))
    assert STAGE.quotas("team-vision") == STAGE.default_quotas
    with pytest.raises(ValidationError, match="finite number"):
        Quotas.model_validate({"usd_per_month": "Infinity"})
    with pytest.raises(ValidationError, match="must contain"):
        Governance.model_validate({"approver_roles": ["leads"]})


def test_approval_reasons_name_the_override_and_the_threshold() -> None:
    assert approval_reasons(triage_override=False, override_route=None, worst_case_usd=Decimal(10),
                            threshold_usd=Decimal(100)) == []
    reasons = approval_reasons(triage_override=True, override_route="dual_track", worst_case_usd=None,
                               threshold_usd=Decimal(100))
    assert reasons == ["triage_override routes the trial to dual_track against the triage's route",
                       "worst case unbounded is above the team's approval_threshold_usd 100 USD"]


def test_role_conventions_match_roles_and_their_sessions_never_users_of_that_name() -> None:
    """``member_roles`` / ``approver_roles`` map roles. An IAM user ARN (``arn:aws:iam::<account>:user/<name>``) is
    another kind of principal from a role (``arn:aws:iam::<account>:role/<name>``) or a role session
    (``arn:aws:sts::<account>:assumed-role/<role>/<session>``), and a user may carry a role's name (IAM user guide,
    "IAM identifiers", "IAM ARNs": https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html)."""
    stage = STAGE.model_copy(update={"member_roles": ["dualtrack-{team}-submitter",
                                                      "arn:aws:iam::*:*/ci-{team}"],
                                     "approver_roles": ["dualtrack-{team}-approver"]})
    for user in (f"arn:aws:iam::{ACCOUNT}:user/dualtrack-team-vision-submitter",
                 f"arn:aws:iam::{ACCOUNT}:user/dualtrack-team-vision-approver",
                 f"arn:aws:iam::{ACCOUNT}:user/ops/ci-team-vision"):
        caller = stage.identify(user, ACCOUNT)
        assert caller.team is None and not caller.approves, user
    for role in (f"arn:aws:iam::{ACCOUNT}:role/dualtrack-team-vision-submitter",
                 f"arn:aws:sts::{ACCOUNT}:assumed-role/dualtrack-team-vision-submitter/bo",
                 f"arn:aws:sts::{ACCOUNT}:assumed-role/ci-team-vision/run-1",
                 f"arn:aws:iam::{ACCOUNT}:role/build/ci-team-vision"):
        assert stage.identify(role, ACCOUNT).team == "team-vision", role
    lead = stage.identify(f"arn:aws:sts::{ACCOUNT}:assumed-role/dualtrack-team-vision-approver/cy", ACCOUNT)
    assert lead.may_approve("team-vision")
    # A team's own members list still names users.
    assert stage.identify(f"arn:aws:iam::{ACCOUNT}:user/ana", ACCOUNT).team == "team-nlp"
