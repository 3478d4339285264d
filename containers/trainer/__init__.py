"""The training job both tracks run: ``python -m trainer run --spec URI --track gpu|trn2 --run-dir URI``."""

FAULT_EXIT_CODE = 75
"""Planned, retryable fault (attempt 1 of a ``retryable`` fault injection): the job definition retries this code."""

PERMANENT_FAULT_EXIT_CODE = 76
"""Planned, permanent fault: every attempt exits with it, Batch does not retry it, the workflow falls back to GPU."""

SIGTERM_EXIT_CODE = 143
"""Exit after SIGTERM (Spot reclaim, job cancelled), once a final checkpoint is written when one fits."""

FAILURE_EXIT_CODE = 1

__all__ = ["FAILURE_EXIT_CODE", "FAULT_EXIT_CODE", "PERMANENT_FAULT_EXIT_CODE", "SIGTERM_EXIT_CODE"]
