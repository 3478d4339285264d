"""A job's credentials reach the compile-cache entry the plane resolved for its trial only when its run is the one the
workflow sent to compile that entry (``lambdas.services.job_credentials``): its session then carries the entry's key
as a session tag, which the writer role's policy names in the entry's prefix; every other run's session carries no
such tag, so no statement lets it write under ``neuron/``. Session tags become ``aws:PrincipalTag`` values in the
role's policy (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_session-tags.html); a tag value is at most 256
characters, which a 64-character key fits (same page, "Session tag limits")."""

from __future__ import annotations

import pytest

from lambdas.domain.job_access import CACHE_TAG
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.job_credentials import vend
from tests.fakes import InMemoryTrials
from tests.unit.services.test_job_credentials import JOB, Jobs, Signed, Writer, request, session, single_node

KEY = "c" * 64
PREFIX = f"neuron/m/c/{KEY}/"


def _trials(writer: str | None) -> InMemoryTrials:
    table = InMemoryTrials()
    item = {"trial_id": "alpha", "status": "SUBMITTED", "cache_key": KEY, "cache_prefix": PREFIX}
    table.create(TrialRecord.from_item({**item, **({"cache_writer": writer} if writer else {})}))
    return table


def _vend(run: str, writer: str | None) -> tuple[dict[str, object], Writer]:
    role = Writer()
    job = single_node(DUALTRACK_RUN=run)
    job["tags"]["dualtrack:run"] = run
    answer = vend(request(), jobs=Jobs(job), trials=_trials(writer), writer=role, identity=Signed(session(JOB)),
                  bucket="artifacts", duration_s=3600)
    return answer, role


@pytest.mark.parametrize(("run", "writer"), [("trn2-compile", "trn2-compile"), ("trn2", "trn2")])
def test_the_run_sent_to_compile_the_entry_gets_its_prefix(run: str, writer: str) -> None:
    answer, role = _vend(run, writer)
    assert role.calls[0]["tags"][CACHE_TAG] == KEY
    assert answer["cache_write_prefix"] == PREFIX


@pytest.mark.parametrize(("run", "writer"), [("trn2", "trn2-compile"), ("trn2-compile", "trn2"),
                                             ("gpu", "trn2"), ("gpu-fallback", "trn2"), ("trn2", None)])
def test_every_other_run_gets_no_entry_to_write(run: str, writer: str | None) -> None:
    answer, role = _vend(run, writer)
    assert CACHE_TAG not in role.calls[0]["tags"]
    assert answer["cache_write_prefix"] is None
