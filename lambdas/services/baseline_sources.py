"""Whether a trial may read the GPU baseline it declares (``baseline_logs_uri``): checked when the trial is
submitted, and again when its report reads the baseline (a trial stored before the check, or one whose baseline
trial changed hands, never shows another team's losses). The rule is
``lambdas.domain.evidence.baseline.baseline_refusal``; the team of a trial the URI points into is the one the trials
table booked it to."""

from __future__ import annotations

from collections.abc import Iterable

from lambdas.domain.evidence.baseline import baseline_refusal
from lambdas.domain.trial.spec import TrialSpec
from lambdas.services.ports import Trials


def baseline_refused(spec: TrialSpec, team: str, trials: Trials | None, *, artifacts_root: str,
                     data_buckets: Iterable[str] | None = None) -> str | None:
    """Why a trial of ``team`` may not read ``spec.baseline_logs_uri`` (None: it may, or it declares none).
    Without ``trials`` no trial's team can be told, so no baseline in the artifacts bucket is read."""
    uri = spec.baseline_logs_uri
    if uri is None:
        return None

    def team_of(trial_id: str) -> str | None:
        record = trials.get(trial_id) if trials is not None else None
        return record.team if record is not None else None

    return baseline_refusal(uri, team, artifacts_root=artifacts_root, team_of=team_of, data_buckets=data_buckets)
