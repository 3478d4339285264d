"""/reports: the newest scheduled cost report, for the caller's team (any team, or all, for a platform admin)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from lambdas.domain.money.periods import LATEST
from lambdas.domain.trial.governance import TEAM_NAME, NotPermitted
from lambdas.handlers.trial_api.trials import COMMON, _error, caller

router = Router()


class CostReportNotReady(LookupError):
    """No scheduled cost report has been written yet."""


@router.get("/costs", summary="The newest scheduled cost report: one team's section, or every team's for an admin",
            responses={200: {"description": "the period, and the team's spend by track and component, trend, "
                                            "budget burn, rerun share and compile booked/shared"},
                       403: _error("the team is not the caller's"), 404: _error("no cost report yet"), **COMMON})
def team_costs(team: Annotated[str | None, Query(pattern=TEAM_NAME)] = None) -> dict[str, Any]:
    who = caller()
    if team is None and not who.admin:
        if who.team is None:
            raise NotPermitted(f"principal {who.principal} is a member of no team on this stage; ask a platform "
                               "admin to add it to governance.teams.<team>.members", role="team")
        team = who.team
    if team is not None and not who.sees(team):
        raise NotPermitted(f"team {team!r} is not yours (principal {who.principal} is in team {who.team!r}); ask "
                           "for your own team's report, or a platform admin for another's", role="team")
    report = router.context["api"].artifacts.get_json(LATEST)
    if report is None:
        raise CostReportNotReady()
    head = {k: report.get(k) for k in ("period", "start", "end", "previous_start")}
    if team is None:
        return dict(report)
    section = (report.get("teams") or {}).get(team)
    return {**head, "team": team, "runs_closed": section is not None, **(section or {})}
