"""Routing by training shape: the source document's table 1 (first choice, judgement, risks) and table 3 (scores),
kept as data in ``data/scenarios.json``.

Scenarios are tried in a fixed precedence: blockers first (custom CUDA operators, graph churn), then the platform
and method shapes. Every scenario that matches is listed in ``considered``; the first one in precedence wins and
the result says why. The route is the best-scoring route of that scenario in table 3 (a tie goes to the more
conservative route: gpu, then dual_track, then trn2_trial); table 1's first choice, judgement and risks are its
reasoning.

The route shapes the run (:func:`planned_tracks`, :func:`route_refusal`):

* ``gpu`` runs the GPU track only; a trn2 track needs a triage override (which an approver approves).
* ``dual_track`` runs Trainium2 beside the GPU track and compares them, so a trn2 track needs a GPU track; a trial
  that declares only the GPU track runs that alone (the conservative subset needs nobody's approval).
* ``trn2_trial`` is a Trainium2 pilot judged against the team's own GPU runs: it needs a trn2 track and the GPU
  baseline (``baseline_logs_uri``), which the report checks the GPU track against before it compares Trainium2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from pydantic import BaseModel, ConfigDict

from lambdas.domain.trial.spec import Route, TrackName, TrialSpec


class Scores(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    gpu: int
    trn2_trial: int
    dual_track: int


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str  # table 3 row
    scores: Scores  # table 3, exactly as published (higher = better fit; not vendor performance scores)
    conclusion: str  # table 3
    first_choice: str  # table 1
    judgement: str  # table 1
    risks: tuple[str, ...]  # table 1
    blocker: bool
    matches: Callable[[TrialSpec], str | None]  # why it matches, or None


def _cuda(spec: TrialSpec) -> str | None:
    if spec.workload.custom_cuda_ops:
        return "workload.custom_cuda_ops is true: the training code depends on custom CUDA operators"
    if spec.method == "qlora":
        return "method qlora depends on CUDA-only 4-bit kernels"
    return None


def _graph_churn(spec: TrialSpec) -> str | None:
    if spec.workload.graph_change_frequency == "daily":
        return "workload.graph_change_frequency is daily: every structure change is a new graph and a recompile"
    if spec.workload.dynamic_shapes:
        return "workload.dynamic_shapes is true: dynamic graphs recompile repeatedly on Neuron"
    return None


def _shared(spec: TrialSpec) -> str | None:
    return "workload.shared_platform is true: several teams share the training platform" if (
        spec.workload.shared_platform) else None


def _full(spec: TrialSpec) -> str | None:
    if spec.method in ("full", "continued_pretraining"):
        return f"method {spec.method}: optimizer state, parallel strategy and resume must be verified together"
    return None


def _long_stable(spec: TrialSpec) -> str | None:
    if spec.workload.long_running and spec.workload.graph_change_frequency == "rare":
        return "workload.long_running with a rarely changing graph: compile cost amortises over a long run"
    return None


def _standard_lora(spec: TrialSpec) -> str | None:
    if spec.method == "lora" and spec.workload.graph_change_frequency != "daily":
        return "method lora on a fixed-structure model with a fixed sequence length"
    return None


MATCHERS: dict[str, Callable[[TrialSpec], str | None]] = {
    "custom_cuda_ops": _cuda,
    "daily_structure_changes": _graph_churn,
    "multi_team_platform": _shared,
    "full_parameter_continued": _full,
    "long_stable_graph": _long_stable,
    "standard_lora": _standard_lora,
}


def _load_scenarios() -> tuple[Scenario, ...]:
    """The tables as data (``data/scenarios.json``), each row with the rule that says when it applies."""
    rows = json.loads(resources.files("lambdas.domain").joinpath("data/scenarios.json").read_text())["scenarios"]
    return tuple(Scenario(id=row["id"], title=row["title"], scores=Scores(**row["scores"]),
                          conclusion=row["conclusion"], first_choice=row["first_choice"],
                          judgement=row["judgement"], risks=tuple(row["risks"]), blocker=row["blocker"],
                          matches=MATCHERS[row["id"]]) for row in rows)


SCENARIOS = _load_scenarios()


class Considered(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    scenario: str
    matched: bool
    why: str | None = None


class TriageResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    route: Route
    scenario: str
    scenario_title: str
    scores: Scores
    conclusion: str
    first_choice: str
    judgement: str
    risks: list[str]
    reasons: list[str]
    blockers: list[str]
    considered: list[Considered]
    winner: str
    notes: list[str]


ROUTE_ORDER: tuple[Route, ...] = ("gpu", "dual_track", "trn2_trial")  # ties go to the first


def best_route(scores: Scores) -> Route:
    """Table 3's best-scoring route for a scenario."""
    return max(ROUTE_ORDER, key=lambda route: getattr(scores, route))


def effective_route(spec: TrialSpec, result: TriageResult) -> Route:
    """What the trial runs as: the override's route when it has one (approved before anything starts)."""
    return spec.triage_override.route if spec.triage_override is not None else result.route


def planned_tracks(spec: TrialSpec, route: Route) -> list[TrackName]:
    """The tracks the workflow runs for ``route``: the GPU track only for ``gpu``, every declared track otherwise."""
    if route == "gpu":
        return [t for t in spec.track_names() if t == "gpu"]
    return spec.track_names()


def route_refusal(spec: TrialSpec, route: Route) -> str | None:
    """Why ``spec`` cannot run as ``route``, naming the field to add; None when it can."""
    tracks = set(spec.track_names())
    if route == "gpu" and "gpu" not in tracks:
        return "route gpu runs the GPU track only: add tracks.gpu, or a triage_override to another route"
    if route == "dual_track" and "gpu" not in tracks:
        return ("route dual_track runs Trainium2 beside the GPU track and compares them: add tracks.gpu (or a "
                "triage_override to route trn2_trial, a pilot judged against your GPU baseline)")
    if route == "trn2_trial":
        if "trn2" not in tracks:
            return "route trn2_trial is a Trainium2 pilot: add tracks.trn2"
        if spec.baseline_logs_uri is None:
            return ("route trn2_trial is a Trainium2 pilot judged against your own GPU runs: set baseline_logs_uri "
                    "(a trainer_state.json, metrics.jsonl, or CSV of step, loss[, eval_loss] in a data bucket)")
    return None


def triage(spec: TrialSpec) -> TriageResult:
    considered: list[Considered] = []
    matched: list[tuple[Scenario, str]] = []
    for scenario in SCENARIOS:
        why = scenario.matches(spec)
        considered.append(Considered(scenario=scenario.id, matched=why is not None, why=why))
        if why is not None:
            matched.append((scenario, why))
    if matched:
        chosen, why = matched[0]
        others = [s.id for s, _ in matched[1:]]
        winner = (f"{chosen.id} wins: {'blockers come first' if chosen.blocker else 'first match in precedence'}"
                  + (f" (also matched: {', '.join(others)})" if others else ""))
    else:
        # No listed shape fits (e.g. qlora-free full fine-tune variants are covered above; this is a fallback).
        chosen, why = SCENARIOS[-1], "no scenario matched exactly; treated as a standard fixed-structure trial"
        winner = "standard_lora by default: no scenario matched"
    notes: list[str] = []
    if spec.workload.graph_change_frequency == "weekly":
        notes.append("weekly graph changes: each change is a new graph; budget a first compile per change and "
                     "re-verify compile artefacts and memory bounds")
    if any(t.nodes > 1 for t in (spec.tracks.gpu, spec.tracks.trn2) if t is not None):
        notes.append("multi-node: 'runs on one node' does not imply 'worth running on many'; compare effective "
                     "steps, per-step communication time and rerun share after node failure")
    if spec.tracks.gpu is None and spec.tracks.trn2 is not None:
        notes.append("no gpu track: without a GPU baseline the trial cannot check that outputs stay consistent")
    return TriageResult(
        route=best_route(chosen.scores),
        scenario=chosen.id,
        scenario_title=chosen.title,
        scores=chosen.scores,
        conclusion=chosen.conclusion,
        first_choice=chosen.first_choice,
        judgement=chosen.judgement,
        risks=list(chosen.risks),
        reasons=[why for _, why in matched] or [why],
        blockers=[why for s, why in matched if s.blocker],
        considered=considered,
        winner=winner,
        notes=notes,
    )


def submission_refusal(spec: TrialSpec, result: TriageResult) -> str | None:
    """Why a submission must be refused, or None. A trn2 track on a gpu-routed trial needs a recorded override."""
    if result.route == "gpu" and spec.tracks.trn2 is not None and spec.triage_override is None:
        return (f"triage routes this trial to gpu ({'; '.join(result.blockers or result.reasons)}), but it asks for "
                "a trn2 track; remove tracks.trn2 or add triage_override {route, reason} (a team approver then "
                "approves the trial)")
    return route_refusal(spec, effective_route(spec, result))
