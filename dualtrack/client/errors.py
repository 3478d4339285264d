"""Failures a remote command can meet, each with the exit code a script can rely on."""

from __future__ import annotations

from dataclasses import dataclass, field

from lambdas.domain.json_types import JsonObject, JsonValue

# One table for every remote command, so `$?` means the same thing after submit, status, watch, report, cancel.
EXIT_OK = 0
EXIT_TRIAL_FAILED = 1  # watch/status: the trial ended FAILED or CANCELLED; submit: declined at the prompt
EXIT_INVALID = 2  # bad arguments, invalid trial (local or API 422), bad request (400)
EXIT_NOT_FOUND = 3  # 404: unknown trial, report not written yet
EXIT_REFUSED = 4  # 409, or a quota 429: refused by the API (over limits or a team quota, triage, already decided)
EXIT_UNAVAILABLE = 5  # network failure, 429 or 5xx after every retry
EXIT_CONFIG = 6  # no endpoint, no credentials, or the credentials were rejected (401/403)

EXIT_CODES_HELP = """\
exit codes:
  0 done   1 trial ended FAILED/CANCELLED (or declined at the prompt)   2 invalid input or trial (field paths shown)
  3 unknown trial or report not ready   4 refused by the API (409, or a team quota)   5 API unreachable or failing
  after retries   6 no endpoint / no credentials / access denied (also: not a member or approver of the team)
  130 interrupted"""


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass
class ClientFailure(Exception):
    """A failure shown to the user as one line per problem (never a traceback)."""

    message: str
    exit_code: int = EXIT_UNAVAILABLE
    errors: list[FieldError] = field(default_factory=list)
    status: int | None = None
    body: JsonValue = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors] or [self.message]

    def as_json(self) -> JsonObject:
        out: JsonObject = {"ok": False, "exit_code": self.exit_code, "message": self.message}
        if self.status is not None:
            out["status"] = self.status
        if self.errors:
            out["errors"] = [{"path": e.path, "message": e.message} for e in self.errors]
        return out


class ConfigFailure(ClientFailure):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_CONFIG)


class NetworkFailure(ClientFailure):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_UNAVAILABLE)


def exit_code_for_status(status: int) -> int:
    if status in (400, 413, 415, 422):
        return EXIT_INVALID
    if status == 404:
        return EXIT_NOT_FOUND
    if status == 409:
        return EXIT_REFUSED
    if status in (401, 403):
        return EXIT_CONFIG
    return EXIT_UNAVAILABLE


def api_failure(status: int, body: JsonValue, reason: str = "") -> ClientFailure:
    """The API's own words: `errors` field paths when it sent them, else its `message`, else the HTTP reason."""
    errors: list[FieldError] = []
    message = ""
    if isinstance(body, dict):
        listed = body.get("errors")
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, dict):
                errors.append(FieldError(str(item.get("path") or ""), str(item.get("message") or item)))
            else:
                errors.append(FieldError("", str(item)))
        message = str(body.get("message") or body.get("error") or body.get("Message") or "")
    elif isinstance(body, str) and body.strip():
        message = body.strip().splitlines()[0][:500]
    if not message:
        message = f"{len(errors)} problem(s)" if errors else (reason or "request failed")
    hint = {401: "check your AWS credentials (profile, region)",
            403: "the API rejected the signed request: check the credentials' IAM permissions "
                 "(execute-api:Invoke) and that the endpoint's region matches the signing region"}.get(status)
    if hint and not errors:
        message = f"{message} ({hint})"
    code = EXIT_REFUSED if status == 429 and isinstance(body, dict) and body.get("quotas") else \
        exit_code_for_status(status)
    return ClientFailure(f"HTTP {status}: {message}", code, errors, status, body)
