"""A child node's failure reaches Batch through the main node (``trainer.peers``, ``trainer.faults``): AWS Batch
takes a multi-node parallel job's status from its main node ("Multi-node parallel jobs",
https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html), so the main node must tell a
collective that lost its peers from a failure of its own, and a fault planned on one node from none at all."""

from __future__ import annotations

from typing import Any

import pytest
from trainer import FAULT_EXIT_CODE
from trainer.faults import FaultPlan, PlannedFault
from trainer.peers import peer_lost

from lambdas.domain.trial.rules import parse_trial


@pytest.mark.parametrize("message", [
    "[pair.cc:553] Connection closed by peer [127.0.0.1]:54926. This is typically caused by a remote worker crashing.",
    "Connection reset by peer",
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE) ran for 600000 ms",
    "NCCL communicator was aborted on rank 3.",
    "Timed out waiting 1800000ms for recv operation to complete",
])
def test_a_collective_whose_peer_is_gone_is_a_lost_peer(message: str) -> None:
    """What gloo's TCP transport and NCCL's watchdog raise when the other side of a collective is gone."""
    assert peer_lost(RuntimeError(message))
    try:
        raise ValueError("wrapped") from RuntimeError(message)
    except ValueError as wrapped:
        assert peer_lost(wrapped)


def test_torchs_distributed_errors_are_lost_peers() -> None:
    from torch.distributed import DistBackendError, DistNetworkError

    assert peer_lost(DistNetworkError("store unreachable")) and peer_lost(DistBackendError("backend failed"))


@pytest.mark.parametrize("error", [RuntimeError("CUDA out of memory"), ValueError("bad batch"),
                                   KeyError("missing"), RuntimeError("expected scalar type Float")])
def test_a_failure_of_the_process_itself_is_not(error: Exception) -> None:
    assert not peer_lost(error)


def _spec(example_trial: dict[str, Any], node: int | None) -> Any:
    doc = {**example_trial, "fault_injection": {"track": "trn2", "at_step": 300, "mode": "retryable",
                                               **({"node": node} if node is not None else {})}}
    doc["tracks"]["trn2"] = {**doc["tracks"]["trn2"], "nodes": 2}
    return parse_trial(doc)


def test_a_fault_planned_on_node_one_fires_there_only_but_every_node_saves_before_it(
        example_trial: dict[str, Any]) -> None:
    spec = _spec(example_trial, node=1)
    main, child = (FaultPlan.for_run(spec, "trn2", 1, this_node=n) for n in (0, 1))
    assert main.fires(300) and child.fires(300)  # both make step 300's checkpoint durable first
    main.check(300)  # the main node goes on ...
    with pytest.raises(PlannedFault) as raised:
        child.check(300)  # ... node 1 faults
    assert raised.value.exit_code == FAULT_EXIT_CODE
    assert main.fired_elsewhere(301) and not main.fired_elsewhere(299) and not child.fired_elsewhere(301)
    retry = FaultPlan.for_run(spec, "trn2", 2, this_node=0)
    assert not retry.fires(300) and not retry.fired_elsewhere(301)  # retryable: the retry resumes, no fault


def test_a_fault_without_a_node_fires_on_every_node(example_trial: dict[str, Any]) -> None:
    spec = _spec(example_trial, node=None)
    for node in (0, 1):
        with pytest.raises(PlannedFault):
            FaultPlan.for_run(spec, "trn2", 1, this_node=node).check(300)


def test_a_fault_on_a_node_the_run_does_not_have_is_refused(example_trial: dict[str, Any]) -> None:
    from lambdas.domain.trial.rules import TrialInvalid

    with pytest.raises(TrialInvalid, match=r"fault_injection.node: node 2 is not a node .* indexes 0 to 1"):
        _spec(example_trial, node=2)
