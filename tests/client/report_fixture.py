"""A trial report built by the real domain code (report model, cost model, ledger entries) from test inputs:
a GPU run and a Trainium2 run whose first attempt stops at the planned fault and resumes from a checkpoint, on the
tracks' devices or, for a rehearsal, on the stand-ins."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lambdas.domain.report.model import TrialReport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trial-llama31-8b-lora.json"


def _loss(steps: range, scale: float) -> list[dict[str, float]]:
    return [{"step": s, "loss": round(2.6 * math.exp(-s / 400) * scale + 0.9, 5)} for s in steps]


def _summary(run: str, attempt: int, start: int, end: int, **extra: Any) -> Any:
    from tests.builders import run_summary

    scale = 1.0 if run == "gpu" else 1.01
    return run_summary(run, **{"attempt": attempt, "status": "succeeded" if end == 1000 else "faulted",
            "backend": "cuda" if run == "gpu" else "neuron", "start_step": start, "global_step": end,
            "tokens_this_attempt": (end - start) * 64 * 4096,
            "phases": {"environment_s": 95.0, "data_load_s": 40.0, "train_s": (end - start) * 2.1, "eval_s": 30.0},
            "compile": {"seconds": 1500.0 if attempt == 1 else 12.0, "cache": "miss" if attempt == 1 else "hit",
                        "cache_key": "ab" * 32} if run == "trn2" else {},
            "throughput": {"tokens_per_s": 124830.5, "step_time_s": 2.1, "samples_per_s": 30.5,
                           "step_times_s": [round((2.1 if run == "gpu" else 1.6) + 0.02 * ((i * 37) % 9 - 4), 4)
                                            for i in range(start + 3, end)][:200]},
            "memory_peak_mib": 70500.0,
            "loss": {"initial": 3.5, "final": _loss(range(end, end + 1), scale)[0]["loss"],
                     "per_step": _loss(range(start + 1, end + 1), scale),
                     "eval": [{"step": s, "loss": p["loss"] + 0.05} for s, p in
                              ((p["step"], p) for p in _loss(range(start + 100, end + 1, 100), scale))]},
            "validation_loss": _loss(range(end, end + 1), scale)[0]["loss"] + 0.05,
            "stand_in": False, "precision": "bf16", "steps_this_attempt": end - start,
            "checkpoints": [{"step": s, "bytes": 167_000_000, "files": 4, "save_s": 6.5, "uri": f"s3://a/{run}/{s}"}
                            for s in range(start + 200, end + 1, 200)],
            "final_samples": [{"prompt": "Summarise the release notes.", "completion": "The release adds ...",
                               "token_ids": [1, 2, 3]}],
            **extra})


def build_report(stand_in: bool = False) -> TrialReport:
    """The report; ``stand_in``: both runs on the rehearsal's stand-ins (cpu for the GPU, compiled for Trainium2),
    with the same figures, which on the tracks' devices make Trainium2 the cheaper track."""
    from lambdas.domain.money.cost import AttemptUsage, Phases, RunUsage, compute_run_cost
    from lambdas.domain.money.ledger import transition_entry
    from lambdas.domain.money.prices import load_price_table
    from lambdas.domain.report.build import build_trial_report
    from lambdas.domain.trial.rules import parse_trial

    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    on = {run: {"backend": backend, "stand_in": True} if stand_in else {}
          for run, backend in (("gpu", "cpu"), ("trn2", "compiled"))}
    summaries = {
        "gpu": [_summary("gpu", 1, 0, 1000, **on["gpu"])],
        "trn2": [_summary("trn2", 1, 0, 300, fault={"injected_at_step": 300, "mode": "retryable"}, **on["trn2"]),
                 _summary("trn2", 2, 200, 1000, resumed_from_step=200, rerun_steps=100,
                          continuity={"global_step_continuous": True, "loss_continuous": True,
                                      "max_rel_delta": 0.002}, **on["trn2"])],
    }
    prices = load_price_table()
    usage = {
        "gpu": RunUsage(trial_id=spec.trial_id, run="gpu", track="gpu", instance_type="p5.48xlarge",
                        attempts=[AttemptUsage(attempt=1, billed_seconds=Decimal(2300), queue_seconds=Decimal(120),
                                               phases=Phases(environment_s=95, data_load_s=40, train_s=2100,
                                                             eval_s=30), end_step=1000, succeeded=True)],
                        checkpoint_bytes=5 * 167_000_000, checkpoint_put_requests=20),
        "trn2": RunUsage(trial_id=spec.trial_id, run="trn2", track="trn2", instance_type="trn2.48xlarge",
                         attempts=[AttemptUsage(attempt=1, billed_seconds=Decimal(2300), queue_seconds=Decimal(60),
                                                phases=Phases(environment_s=95, compile_s=1500, train_s=630),
                                                end_step=300),
                                   AttemptUsage(attempt=2, billed_seconds=Decimal(1900),
                                                phases=Phases(environment_s=95, compile_s=12, train_s=1680,
                                                              checkpoint_restore_s=20),
                                                start_step=200, end_step=1000, resumed_from_step=200,
                                                rerun_steps=100, succeeded=True)],
                         checkpoint_bytes=5 * 167_000_000, checkpoint_put_requests=20),
    }
    costs = {run: compute_run_cost(u, prices) for run, u in usage.items()}
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, run, job_id=f"job-{run}", attempt=a, status=status,
                               at=t0 + timedelta(minutes=m))
              for run, a, status, m in [("gpu", 1, "STARTING", 2), ("gpu", 1, "SUCCEEDED", 40),
                                        ("trn2", 1, "STARTING", 1), ("trn2", 1, "FAILED", 39),
                                        ("trn2", 2, "STARTING", 40), ("trn2", 2, "SUCCEEDED", 72)]]
    return build_trial_report(spec, summaries, costs, ledger, generated_at="2026-11-20T10:15:00Z")
