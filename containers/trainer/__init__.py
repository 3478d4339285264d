"""The training job both tracks run: ``python -m trainer run --spec URI --track gpu|trn2 --run-dir URI``.

Exit codes (``lambdas.domain.vocabulary``, shared with the job definitions' retry strategies):
``FAULT_EXIT_CODE`` a planned, retryable fault (attempt 1 of a ``retryable`` fault injection; the job definition
retries it); ``PERMANENT_FAULT_EXIT_CODE`` a planned, permanent fault (every attempt exits with it, Batch does not
retry it, the workflow falls back to GPU); ``SIGTERM_EXIT_CODE`` the exit after SIGTERM (Spot reclaim, job
cancelled), once a final checkpoint is written when one fits; ``FAILURE_EXIT_CODE`` any other failure."""

from lambdas.domain.vocabulary import (
    FAILURE_EXIT_CODE,
    FAULT_EXIT_CODE,
    PERMANENT_FAULT_EXIT_CODE,
    SIGTERM_EXIT_CODE,
)

__all__ = ["FAILURE_EXIT_CODE", "FAULT_EXIT_CODE", "PERMANENT_FAULT_EXIT_CODE", "SIGTERM_EXIT_CODE"]
