"""``TrainState`` (model, optimizer, schedule, RNG, data position) is a ``torch.distributed.checkpoint`` ``Stateful``
and the ``Checkpointer`` owns the save policy around it: the save a step is due for, the one a planned fault waits
for, and the final save SIGTERM leaves time for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from trainer import checkpoint
from trainer.distributed import Distributed
from trainer.modeling import build_model, build_tokenizer
from trainer.optim import Optimizer
from trainer.runner import lr_lambda
from trainer.state import TrainState

from lambdas.domain.trial.rules import parse_trial


def _state(write_spec: Any, seed: int) -> TrainState:
    torch.manual_seed(seed)
    spec = parse_trial(Path(write_spec()).read_text(), allow_local_paths=True)
    model = build_model(spec, build_tokenizer(spec))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = Optimizer(named, lr=0.01, weight_decay=0.0, twin=None, main=True, sharding="replicated")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer.local, lr_lambda(10))
    return TrainState(model, optimizer, scheduler, main=True, device=torch.device("cpu"),
                      meta={"track": "gpu"}, identity={"trial": spec.name, "spec_hash": spec.spec_hash()})


def test_train_state_is_a_dcp_stateful_that_round_trips(write_spec: Any) -> None:
    """The protocol ``torch.distributed.checkpoint.stateful.Stateful`` (``state_dict`` / ``load_state_dict``), as
    torchtitan's ``TrainState``: a state taken after three steps, loaded into a fresh one, gives the same weights,
    optimizer moments, learning rate, step and data position."""
    from torch.distributed.checkpoint.stateful import Stateful

    trained = _state(write_spec, seed=0)
    assert isinstance(trained, Stateful)
    for _ in range(3):
        trained.model(input_ids=torch.ones((1, 8), dtype=torch.long)).logits.sum().backward()
        trained.optimizer.step(type("Plain", (), {"optimizer_step": staticmethod(lambda o: o.step())})())
        trained.scheduler.step()
        trained.optimizer.zero_grad()
    trained.step, trained.position = 3, 24
    saved = trained.state_dict()
    assert set(saved) == {"step", "optimizer", "weights", "lora_config", "scheduler", "rng", "trainer"}
    assert saved["trainer"]["global_step"] == 3 and saved["trainer"]["data_position"] == {"samples_consumed": 24}

    fresh = _state(write_spec, seed=1)
    fresh.load_state_dict(saved)
    assert (fresh.step, fresh.position) == (3, 24)
    again = fresh.state_dict()
    assert all(torch.equal(again["weights"][k], v) for k, v in saved["weights"].items())
    name = next(iter(saved["optimizer"]))
    assert torch.equal(again["optimizer"][name]["exp_avg"], saved["optimizer"][name]["exp_avg"])
    assert fresh.optimizer.local.param_groups[0]["lr"] == trained.optimizer.local.param_groups[0]["lr"]


class _Fake:
    """The state a checkpointer saves, reduced to what it asks of it."""

    def __init__(self, step: int):
        self.step = step

    def snapshot(self) -> checkpoint.Snapshot:
        main = checkpoint.MainFiles(weights={"w": torch.zeros(2)}, lora_config=None, scheduler={},
                                    rng=checkpoint.rng_state(), state={"global_step": self.step}, meta={})
        return checkpoint.Snapshot(self.step, {}, main)


def _checkpointer(run_dir: Path, budget: float) -> checkpoint.Checkpointer:
    return checkpoint.Checkpointer(str(run_dir), interval=4, max_steps=12, dist=Distributed(), sharding="replicated",
                                   asynchronous=True, sigterm_budget_s=budget)


def test_the_checkpointer_saves_what_is_due_and_what_a_stop_leaves_time_for(tmp_path: Path) -> None:
    saver = _checkpointer(tmp_path / "run", budget=60.0)
    for step in (1, 2, 3, 4, 5):
        saver.step_end(_Fake(step), stop=False, fault_next=step == 5)
    assert [s.step for s in saver.saved] == [4]  # step 4 was due; a fault after step 5 waits for it
    assert saver.on_stop(_Fake(6)) is True and [s.step for s in saver.saved] == [4, 6]
    saver.step_end(_Fake(12), stop=False, fault_next=False)
    assert saver.saved[-1].step == 12 and not saver.in_flight  # the last step's save is committed on return
    saver.close()

    # A last save slower than the budget: SIGTERM leaves without another (Batch's SIGKILL would cut it short).
    slow = _checkpointer(tmp_path / "slow", budget=-1.0)
    slow.step_end(_Fake(4), stop=False, fault_next=True)
    assert slow.on_stop(_Fake(5)) is False and [s.step for s in slow.saved] == [4]
    slow.close()
