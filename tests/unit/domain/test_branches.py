"""Which runs the workflow's cost step settles, from what its track branches returned."""

from __future__ import annotations

from lambdas.domain.trial.branches import BranchOutput, runs_to_settle


def branch(run: str, status: str = "SUCCEEDED", fallback: bool = False) -> BranchOutput:
    return BranchOutput.model_validate({"run": run, "status": status, "fallback": fallback})


def test_every_run_that_ran_is_settled_and_a_skipped_one_is_not() -> None:
    assert runs_to_settle([branch("gpu"), branch("trn2-compile", "SKIPPED"), branch("trn2")]) == ["gpu", "trn2"]


def test_a_fallback_settles_the_trainium2_run_it_replaced() -> None:
    """The fallback branch returns only itself; the trn2 job it replaced ran and failed, and is billed too."""
    assert runs_to_settle([branch("gpu"), branch("gpu-fallback", fallback=True)]) == ["gpu", "gpu-fallback", "trn2"]


def test_a_failed_compile_stage_means_the_training_job_never_started() -> None:
    got = runs_to_settle([branch("trn2-compile", "FAILED"), branch("gpu-fallback", fallback=True)])
    assert got == ["gpu-fallback", "trn2-compile"]


def test_a_failed_trn2_run_without_a_fallback_is_settled_as_it_ran() -> None:
    """failure_recovery none: the Trainium2 branch returns the failed run itself, and no fallback is settled."""
    got = runs_to_settle([branch("gpu"), branch("trn2-compile", "SKIPPED"), branch("trn2", "FAILED")])
    assert got == ["gpu", "trn2"]
