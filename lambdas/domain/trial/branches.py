"""What the workflow's track branches return to its cost step, and which runs that step settles.

Each branch returns its run, how it ended (``SKIPPED`` when it never ran), the Batch job it submitted and whether it
was the GPU fallback. A branch may return a list (the Trainium2 branch returns its warm-up compile stage and its
training run; the scaling branch one outcome per scaling run, ``gpu-n1``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.vocabulary import COMPILE_RUN, RUN_NAME


class BranchOutput(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    run: Annotated[str, Field(pattern=RUN_NAME)]
    status: str = "SUCCEEDED"
    job_id: str | None = None
    fallback: bool = False


def runs_to_settle(branches: Iterable[BranchOutput]) -> list[str]:
    """Runs to settle: every run that ran, plus the trn2 run a GPU fallback replaced (it ran and failed), unless
    the warm-up compile stage failed first (then the training job never started)."""
    ran = [b for b in branches if b.status != "SKIPPED"]
    names: set[str] = {b.run for b in ran}
    compile_failed = any(b.run == COMPILE_RUN and b.status == "FAILED" for b in ran)
    if any(b.fallback for b in ran) and not compile_failed:
        names.add("trn2")
    return sorted(names)
