"""Who may write where in the artifacts bucket: a training job writes only its own run's prefix.

Every trainer job of a track runs under one job role, and a job role is fixed per job definition (SubmitJob cannot
override it), so the job role itself has no access to ``trials/``. Each job instead asks the plane's credentials
function for credentials of the *trial writer* role, tagged with its trial and run (STS session tags). The writer
role's policy names its resources with those tags (``${aws:PrincipalTag/dualtrack-trial}``), so one set of
credentials reads its trial's prefix (the frozen spec, the Trainium2 run a GPU fallback resumes from) and writes only
``trials/<trial>/<run>/``. The function hands them out only to a job that proves it is the job the workflow started:
it is STARTING or RUNNING, and its caller is that job's own container. The proof is the one AWS's own tools use
to identify an AWS caller to a third party (the IAM authenticator of EKS, Vault's AWS method): the job presigns an
STS ``GetCallerIdentity`` request with its job role's credentials and sends the URL; the function makes the request
itself and reads who signed it. An ECS task's role session is named after the task ("tasks assume the task role and
the session ID is the task ID", aws/amazon-ecs-agent#3498), and Batch reports each job's (each node's) task as
``container.taskArn`` and its role as ``container.jobRoleArn`` (Batch API reference, "ContainerDetail": "Each
container attempt receives a task ARN when they reach the STARTING status"). So the signer must be a session of the
job's own role named after the job's own task: reading job descriptions (``batch:DescribeJobs``) and invoking the
function grant nothing, since no job setting holds a secret.

A multi-node job's nodes share one fetch each: the node's launcher fetches its credentials once and hands them to
its processes in a file only they can read (``CREDENTIALS_FILE_ENV``, mode 0600), refreshing it before they expire;
``PER_NODE_ENV=1`` in the job definition says so.

The compile cache is written the same way. The job role only reads ``neuron/``; the run the workflow sent to compile
its trial's entry (the trial item's ``cache_writer``, recorded by the resolve step) gets a session that also carries
the entry's key (``CACHE_TAG``), and the writer role writes ``neuron/*/*/${aws:PrincipalTag/dualtrack-cache-key}/*``
only: every other run's session lacks the tag, so no statement lets it write a cache entry at all.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

TRIAL_TAG = "dualtrack-trial"
RUN_TAG = "dualtrack-run"
CACHE_TAG = "dualtrack-cache-key"  # the 64-hex key: a session tag value holds at most 256 characters
FUNCTION_ENV = "DUALTRACK_JOB_ACCESS_FUNCTION"
# One credentials fetch per node, shared with the node's processes through a file (set in the job definitions).
PER_NODE_ENV = "DUALTRACK_CREDENTIALS_PER_NODE"
CREDENTIALS_FILE_ENV = "DUALTRACK_CREDENTIALS_FILE"
# The presigned GetCallerIdentity request a job proves itself with: the only action and version the function runs,
# and the longest validity it accepts (a URL is a bearer proof for as long as it is valid).
IDENTITY_QUERY = {"Action": "GetCallerIdentity", "Version": "2011-06-15"}
IDENTITY_MAX_EXPIRES_S = 300
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


class IdentityUnproven(ValueError):
    """A caller-identity proof the credentials function will not run or does not accept: the reason."""


def identity_request(url: str, endpoints: frozenset[str]) -> str:
    """``url`` if it is a presigned STS GetCallerIdentity request to one of ``endpoints`` (scheme and host, e.g.
    ``https://sts.us-east-1.amazonaws.com``) and nothing else, valid for at most ``IDENTITY_MAX_EXPIRES_S``:
    the function makes this request itself, so nothing but that one read of STS may be asked of it."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin not in endpoints or parts.path not in ("", "/") or parts.fragment or parts.username:
        raise IdentityUnproven(f"the identity proof must be a request to STS ({', '.join(sorted(endpoints))}), "
                               f"not {origin}{parts.path}")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    if any(len(values) != 1 for values in query.values()):
        raise IdentityUnproven("the identity proof repeats a query parameter")
    plain = {name: values[0] for name, values in query.items()}
    signing = {name for name in plain if name.startswith("X-Amz-")}
    if {name: plain[name] for name in set(plain) - signing} != IDENTITY_QUERY:
        raise IdentityUnproven("the identity proof must be exactly STS GetCallerIdentity (Action=GetCallerIdentity, "
                               "Version=2011-06-15) presigned with SigV4")
    expires = plain.get("X-Amz-Expires", "")
    if not expires.isdigit() or not 0 < int(expires) <= IDENTITY_MAX_EXPIRES_S or "X-Amz-Signature" not in plain:
        raise IdentityUnproven(f"the identity proof must be SigV4-presigned for at most {IDENTITY_MAX_EXPIRES_S} s")
    return url


def assumed_role(arn: str) -> tuple[str, str, str] | None:
    """(account, role name, session name) of an assumed-role session ARN
    (``arn:aws:sts::123456789012:assumed-role/<role>/<session>``); None for any other principal."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sts" or not parts[4].isdigit():
        return None
    kind, _, rest = parts[5].partition("/")
    role, _, session = rest.partition("/")
    if kind != "assumed-role" or not role or not session or "/" in session:
        return None
    return parts[4], role, session


def role_name(role_arn: str) -> tuple[str, str] | None:
    """(account, role name) of an IAM role ARN (``arn:aws:iam::123456789012:role/path/<name>``: the session ARN
    carries the name without the path)."""
    parts = role_arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or not parts[5].startswith("role/"):
        return None
    return parts[4], parts[5].rsplit("/", 1)[-1]


def task_id(task_arn: str) -> str:
    """The task id of an ECS task ARN (``arn:aws:ecs:<region>:<account>:task/<cluster>/<id>``, or the older
    ``task/<id>``)."""
    return task_arn.rsplit("/", 1)[-1] if ":task/" in task_arn else ""
