"""Write the suite's measured figures at the end of the session when ``DUALTRACK_FIGURES`` is set."""

from __future__ import annotations

from typing import Any

from tests.reliability import figures


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    figures.write_if_requested()


# The moto-backed AWS account and the example trial, shared with the integration suite.
from tests.integration.conftest import aws, example  # noqa: E402, F401
