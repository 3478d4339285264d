"""Who may write where in the artifacts bucket: a training job writes only its own run's prefix.

Every trainer job of a track runs under one job role, and a job role is fixed per job definition (SubmitJob cannot
override it), so the job role itself has no access to ``trials/``. Each job instead asks the plane's credentials
function for credentials of the *trial writer* role, tagged with its trial and run (STS session tags). The writer
role's policy names its resources with those tags (``${aws:PrincipalTag/dualtrack-trial}``), so one set of
credentials reads its trial's prefix (the frozen spec, the Trainium2 run a GPU fallback resumes from) and writes only
``trials/<trial>/<run>/``. The function hands them out only to a job that proves it is the job the workflow started:
it is STARTING or RUNNING, and it presents the one-off token the workflow put into that job's own settings
(``States.UUID()``), which no other job can read.

The compile cache is written the same way. The job role only reads ``neuron/``; the run the workflow sent to compile
its trial's entry (the trial item's ``cache_writer``, recorded by the resolve step) gets a session that also carries
the entry's key (``CACHE_TAG``), and the writer role writes ``neuron/*/*/${aws:PrincipalTag/dualtrack-cache-key}/*``
only: every other run's session lacks the tag, so no statement lets it write a cache entry at all.
"""

from __future__ import annotations

TRIAL_TAG = "dualtrack-trial"
RUN_TAG = "dualtrack-run"
CACHE_TAG = "dualtrack-cache-key"  # the 64-hex key: a session tag value holds at most 256 characters
# The job's settings: container environment (single node) or job parameters (multi-node, where Batch substitutes
# them into the command and the trainer moves them back into its environment).
TOKEN_ENV = "DUALTRACK_RUN_TOKEN"
TOKEN_PARAMETER = "run_token"
FUNCTION_ENV = "DUALTRACK_JOB_ACCESS_FUNCTION"
# STS: role chaining (a Lambda's role assuming another role) caps a session at one hour.
# https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining
MAX_SESSION_S = 3600
MIN_SESSION_S = 900


def function_name(stage: str) -> str:
    """The credentials function's fixed name: the compute stack's job definitions name it without referring to the
    control stack (which already depends on them)."""
    return f"dualtrack-{stage}-job-credentials"


def write_prefix(trial_id: str, run: str) -> str:
    return f"trials/{trial_id}/{run}/"


def read_prefix(trial_id: str) -> str:
    return f"trials/{trial_id}/"
