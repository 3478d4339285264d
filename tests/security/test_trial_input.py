"""Bad input never gets past the trial model, and good input always does.

Three generators: documents drawn from the published JSON schema (hypothesis-jsonschema), documents built to satisfy
every cross-field rule, and those valid documents with one targeted defect. Whatever comes in, ``parse_trial``
returns a spec or raises ``TrialInvalid`` whose every problem names a field path: never another exception.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdas.domain.trial.catalogue import load_catalogue
from lambdas.domain.trial.rules import TrialInvalid, json_schema, parse_trial
from lambdas.domain.trial.spec import BATCH_SAFE_NAME, TrialSpec, bucket_name_problem
from tests.reliability import figures
from tests.security.jsonschema_strategies import from_schema

SCHEMA = json_schema()
FIGURES = "bad_input.trial_model"
URI_FIELDS = {"data.train_uri", "data.validation_uri", "model.uri", "model.tokenizer", "baseline_logs_uri",
              # parts of S3 keys: no empty or ".." path segment, beyond what the schema's pattern says
              "model.id", "model.revision"}
# Paths check_rules may name: the cross-field rules a schema cannot express.
CROSS_FIELD = {"lora", "tracks", "method", "effective_batch_size", "checkpoint_interval_steps",
               "evaluation.interval_steps", "fault_injection.track", "fault_injection.at_step", "fault_injection.mode",
               # what the trainer would refuse: the tiny model's shape, LoRA targets, Batch's 60 s attempt minimum
               "model.config.hidden_size", "model.config.num_key_value_heads", "model.config.vocab_size",
               "lora.target_modules", "limits.max_hours",
               # a metric listed twice, or exact_match without the prompts it compares
               "evaluation.metrics",
               # an instance type the catalogue does not list as a GPU (as the tracks' instance types)
               "baseline_instance_type"}
# compiler_flags: one form per option, a rule over the whole list (a repeated option, a short -O<n>); nodes and
# scaling_nodes: distinct counts, the scaling counts below the main run's, given once
CROSS_FIELD_PER_TRACK = ("instance_type", "nodes", "scaling_nodes", "tensor_parallel", "pipeline_parallel",
                         "compiler_flags")
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def _fast(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=_SUPPRESS)


def _rejection(doc: Any) -> list[dict[str, str]] | None:
    """None when accepted; the problems otherwise. Any exception other than TrialInvalid fails the test."""
    try:
        parse_trial(doc)
    except TrialInvalid as exc:
        problems = exc.as_dicts()
        assert problems, "TrialInvalid without problems"
        for problem in problems:
            assert problem["message"].strip(), problem
        return problems
    return None


def _is_cross_field(path: str) -> bool:
    if path in CROSS_FIELD or path.split("[")[0] in CROSS_FIELD:
        return True
    parts = path.split(".")
    return (len(parts) == 3 and parts[0] == "tracks" and parts[1] in ("gpu", "trn2")
            and parts[2] in CROSS_FIELD_PER_TRACK)


# ---- 1. anything the schema allows ---------------------------------------------------------------------------


@_fast(150)
@given(doc=from_schema(SCHEMA))
def test_schema_valid_documents_are_accepted_or_rejected_by_a_named_rule(doc: dict[str, Any]) -> None:
    figures.add(FIGURES, "schema_documents_tried")
    jsonschema.validate(doc, SCHEMA)  # the generator's own claim, checked independently
    problems = _rejection(doc)
    if problems is None:
        figures.add(FIGURES, "schema_documents_accepted")
        return
    figures.add(FIGURES, "schema_documents_rejected_by_rules")
    for problem in problems:
        # The schema and the model agree on types and shapes; only URI syntax and cross-field rules remain.
        assert problem["path"], problem
        assert problem["path"] in URI_FIELDS or _is_cross_field(problem["path"]), problem


# ---- 2. documents that satisfy every rule --------------------------------------------------------------------

CATALOGUE = load_catalogue()
S3_URI = st.from_regex(r"\As3://[a-z0-9][a-z0-9-]{1,20}[a-z0-9]/[A-Za-z0-9/_.=-]{1,40}\Z").filter(
    lambda uri: bucket_name_problem(uri[5:].split("/", 1)[0]) is None)  # S3's reserved prefixes and suffixes


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _track(draw: st.DrawFn, family: str) -> tuple[dict[str, Any], int]:
    instance = draw(st.sampled_from(CATALOGUE.types_for(family)))
    info = CATALOGUE.get(instance)
    track: dict[str, Any] = {"instance_type": instance, "nodes": draw(st.integers(1, 4))}
    if family == "trn2":
        lnc = draw(st.sampled_from([1, 2]))
        devices = info.logical_neuron_cores(lnc)
        track.update(logical_nc_config=lnc, neuron_sdk=draw(st.from_regex(r"\A2\.\d{1,2}(\.\d)?\Z")),
                     compiler_flags=draw(st.lists(st.sampled_from(["--model-type=transformer", "--optlevel=1",
                                                                     "--enable-saturate-infinity"]),
                                                  max_size=3, unique=True)))
    else:
        devices = info.accelerators
    tp = draw(st.sampled_from(_divisors(devices)))
    # The trainer splits a model with tensor parallelism only: a valid layout has pipeline_parallel 1.
    track.update(tensor_parallel=tp, pipeline_parallel=1, spot=draw(st.booleans()))
    return track, devices * track["nodes"] // tp


@st.composite
def valid_trials(draw: st.DrawFn) -> dict[str, Any]:
    families = draw(st.sampled_from([("gpu",), ("trn2",), ("gpu", "trn2")]))
    tracks, data_parallel = {}, []
    for family in families:
        track, dp = draw(_track(family))
        tracks[family] = track
        data_parallel.append(dp)
    methods = ["lora", "full", "continued_pretraining"] + ([] if "trn2" in families else ["qlora"])
    method = draw(st.sampled_from(methods))
    micro = draw(st.integers(1, 4))
    effective = micro * math.lcm(*data_parallel) * draw(st.integers(1, 3))
    max_steps = draw(st.integers(3, 5000))
    ckpt = draw(st.integers(1, max_steps - 2))
    doc: dict[str, Any] = {
        "schema_version": 1,
        "name": draw(st.from_regex(BATCH_SAFE_NAME, fullmatch=True)),
        "owner": draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z")),
        "model": {"id": "meta-llama/Llama-3.1-8B",
                  "revision": draw(st.from_regex(r"\A[A-Za-z0-9_-][A-Za-z0-9._-]{0,19}\Z")),
                  "uri": draw(S3_URI)},
        "method": method,
        "data": {"train_uri": draw(S3_URI), "validation_uri": draw(S3_URI), "version": "v1",
                 "samples": draw(st.integers(1, 10**6)), "shuffle_seed": draw(st.integers(0, 2**32 - 1))},
        "sequence_length": draw(st.sampled_from([128, 1024, 4096])),
        "effective_batch_size": effective,
        "micro_batch_size": micro,
        "max_steps": max_steps,
        "learning_rate": draw(st.floats(1e-6, 1.0)),
        "precision": draw(st.sampled_from(["bf16", "fp32"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
        "checkpoint_interval_steps": ckpt,
        "evaluation": {"interval_steps": draw(st.integers(1, max_steps))},
        "tracks": tracks,
    }
    if method in ("lora", "qlora"):
        doc["lora"] = {"rank": draw(st.integers(1, 64)), "alpha": draw(st.floats(0.5, 64)),
                       "target_modules": ["q_proj", "v_proj"]}
    if draw(st.booleans()):
        track = draw(st.sampled_from(families))
        # Only a trn2 run falls back (onto the gpu track): a permanent fault needs that pair.
        falls_back = track == "trn2" and "gpu" in families
        doc["fault_injection"] = {"track": track, "at_step": draw(st.integers(ckpt + 1, max_steps - 1)),
                                  "mode": draw(st.sampled_from(["retryable", "permanent"] if falls_back
                                                               else ["retryable"]))}
    return doc


@_fast(200)
@given(doc=valid_trials())
def test_no_valid_trial_is_rejected(doc: dict[str, Any]) -> None:
    figures.add(FIGURES, "valid_documents_tried")
    problems = _rejection(doc)
    if problems is not None:
        figures.add(FIGURES, "valid_documents_rejected")
    assert problems is None, problems
    spec = parse_trial(json.dumps(doc))  # the JSON text path agrees with the dict path
    assert spec.trial_id == TrialSpec.model_validate(doc).trial_id


# ---- 3. one defect in an otherwise valid trial ---------------------------------------------------------------


def _leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaf_paths(v, (*prefix, k))] or [prefix]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaf_paths(v, (*prefix, i))] or [prefix]
    return [prefix]


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


WRONG_TYPES: list[Any] = ["lots", 3.5, True, None, [], {"x": 1}, -7]
# Known defect, asserted on its own below: pydantic matches ``True`` against ``Literal[1]`` (True == 1), strict
# mode or not, so these two fields still take a JSON boolean.
BOOL_AS_LITERAL_INT = {"schema_version", "tracks.trn2.logical_nc_config"}


@_fast(250)
@given(doc=valid_trials(), data=st.data())
def test_one_defect_is_rejected_at_its_path(doc: dict[str, Any], data: Any) -> None:
    figures.add(FIGURES, "defective_documents_tried")
    broken = copy.deepcopy(doc)
    kind = data.draw(st.sampled_from(["wrong_type", "unknown_field", "missing_required", "unsafe_name"]))
    if kind == "wrong_type":
        path = data.draw(st.sampled_from([p for p in _leaf_paths(doc) if p]))
        original = _at(doc, path)
        # A bool where an int goes, a float where an int goes: strict mode coerces nothing.
        choices = [w for w in WRONG_TYPES if type(w) is not type(original)
                   and not (isinstance(original, float) and type(w) is int)
                   and not (isinstance(w, bool) and _dotted(path) in BOOL_AS_LITERAL_INT)]
        _at(broken, path[:-1])[path[-1]] = data.draw(st.sampled_from(choices))
        expected = _dotted(path)
    elif kind == "unknown_field":
        objects = [p for p in _object_paths(doc)]
        path = data.draw(st.sampled_from(objects))
        _at(broken, path)["zz_" + data.draw(st.from_regex(r"\A[a-z]{1,8}\Z"))] = 1
        expected = _dotted(path)
    elif kind == "missing_required":
        required = ["schema_version", "name", "owner", "model", "method", "data", "sequence_length",
                    "effective_batch_size", "micro_batch_size", "max_steps", "learning_rate", "precision", "seed",
                    "checkpoint_interval_steps", "evaluation", "tracks"]
        key = data.draw(st.sampled_from(required))
        del broken[key]
        expected = key
    else:
        broken["name"] = data.draw(st.sampled_from(["a b", "x;rm -rf /", "$(id)", "../../etc", "a" * 65, "-lead",
                                                    "name\n", "名前", "a/b", "`uname`"]))
        expected = "name"
    problems = _rejection(broken)
    if problems is None:
        figures.add(FIGURES, "defective_documents_accepted")
    assert problems is not None, f"{kind} at {expected} was accepted"
    paths = [p["path"] for p in problems]
    assert any(p == expected or p.startswith(expected + ".") or p.startswith(expected + "[")
               or expected.startswith(p + ".") or (expected == "" and p) for p in paths), (kind, expected, paths)
    figures.add(FIGURES, "defective_documents_rejected_at_path")


def _object_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if isinstance(value, dict) else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _object_paths(v, (*prefix, k))
    return out


@pytest.mark.parametrize("path", sorted(BOOL_AS_LITERAL_INT))
def test_a_boolean_is_not_a_literal_integer(example_trial: dict[str, Any], path: str) -> None:
    doc = copy.deepcopy(example_trial)
    *parents, leaf = path.split(".")
    _at(doc, tuple(parents))[leaf] = True
    figures.add(FIGURES, "bool_as_literal_int_accepted", 1 if _rejection(doc) is None else 0)
    assert _rejection(doc) is not None


@pytest.mark.parametrize("body", [
    "", "null", "[]", "42", '"trial"', "{", '{"schema_version": 1,', "\x00", "{}" * 3,
    '{"a":' * 5000 + "1" + "}" * 5000,  # deeply nested
    json.dumps({"schema_version": 1, "name": "x" * 1_000_000}),  # oversized field
])
def test_malformed_or_hostile_text_is_rejected_with_a_message(body: str) -> None:
    figures.add(FIGURES, "hostile_texts_tried")
    problems = _rejection(body)
    assert problems is not None
    figures.add(FIGURES, "hostile_texts_rejected")
