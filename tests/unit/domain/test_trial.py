"""The trial spec's rules: each rejection names the field and what would be valid."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
from lambdas.domain.trial.rules import TrialInvalid, json_schema, parse_trial
from tests.json_access import obj


def problems(doc: Any, **kw: Any) -> dict[str, str]:
    with pytest.raises(TrialInvalid) as info:
        parse_trial(doc, **kw)
    return {p.path: p.message for p in info.value.problems}


def test_example_validates_as_is(example_trial: dict[str, Any]) -> None:
    spec = parse_trial(example_trial)
    assert spec.name == "llama31-8b-lora-pilot"
    assert spec.track_names() == ["gpu", "trn2"]
    gpu, trn2 = track_layout(spec, "gpu"), track_layout(spec, "trn2")
    assert (gpu.world_size, gpu.data_parallel) == (8, 8)
    assert (trn2.world_size, trn2.data_parallel) == (64, 8)  # LNC=2: 128 physical cores -> 64 logical
    assert gradient_accumulation_steps(spec, gpu) == gradient_accumulation_steps(spec, trn2) == 8


def test_trial_id_is_deterministic_and_content_addressed(example_trial: dict[str, Any]) -> None:
    a = parse_trial(example_trial)
    b = parse_trial(json.dumps(example_trial, indent=4))
    assert a.trial_id == b.trial_id and a.trial_id.startswith("llama31-8b-lora-pilot-")
    changed = copy.deepcopy(example_trial)
    changed["max_steps"] = 999
    assert parse_trial(changed).trial_id != a.trial_id


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [
        (lambda d: d.update(bogus=1), "bogus", "unknown field"),
        (lambda d: d["tracks"]["trn2"].update(colour="red"), "tracks.trn2.colour", "valid fields here"),
        (lambda d: d.update(max_steps="lots"), "max_steps", "valid integer"),
        (lambda d: d.update(seed=True), "seed", "integer"),
        (lambda d: d["lora"].update(rank="16"), "lora.rank", "integer"),
        (lambda d: d.update(schema_version=2), "schema_version", "1"),
        (lambda d: d.update(name="bad name!"), "name", "Batch-safe"),
        (lambda d: d.update(precision="fp8"), "precision", "bf16"),
        (lambda d: d.update(method="rlhf"), "method", "lora"),
        (lambda d: d["data"].update(train_uri="/data/train.jsonl"), "data.train_uri", "s3://"),
        (lambda d: d["data"].update(validation_uri="https://x/y"), "data.validation_uri", "s3://"),
        (lambda d: d.update(max_steps=0), "max_steps", "greater than or equal to 1"),
        (lambda d: d.pop("data"), "data", "required"),
        (lambda d: d["tracks"]["trn2"].update(logical_nc_config=4), "tracks.trn2.logical_nc_config", "1"),
        (lambda d: d.update(failure_recovery="pray"), "failure_recovery", "'resume_same_track'"),
        (lambda d: d["evaluation"].update(metrics=["bleu"]), "evaluation.metrics[0]", "'perplexity'"),
        (lambda d: d["evaluation"].update(metrics=["exact_match"]), "evaluation.metrics", "add prompts"),
        (lambda d: d["evaluation"].update(metrics=["perplexity", "perplexity"]), "evaluation.metrics",
         "lists a metric twice"),
    ],
)
def test_field_level_rejections(example_trial: dict[str, Any], mutate: Any, path: str, fragment: str) -> None:
    mutate(example_trial)
    found = problems(example_trial)
    assert path in found, found
    assert fragment in found[path]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [
        (lambda d: d.pop("lora"), "lora", "required when method is 'lora'"),
        (lambda d: d.update(method="full"), "lora", "only valid for method lora or qlora"),
        (lambda d: d["tracks"]["gpu"].update(instance_type="p9.huge"), "tracks.gpu.instance_type", "unknown"),
        (lambda d: d["tracks"]["gpu"].update(instance_type="trn2.48xlarge"), "tracks.gpu.instance_type",
         "takes only"),
        (lambda d: d["tracks"]["trn2"].update(instance_type="p5.48xlarge"), "tracks.trn2.instance_type",
         "takes only"),
        (lambda d: d["tracks"]["trn2"].update(tensor_parallel=128), "tracks.trn2.tensor_parallel",
         "does not fit in one node"),
        (lambda d: d["tracks"]["trn2"].update(tensor_parallel=3), "tracks.trn2.tensor_parallel", "must divide"),
        (lambda d: d["tracks"]["gpu"].update(pipeline_parallel=3), "tracks.gpu.pipeline_parallel", "must divide"),
        (lambda d: d.update(effective_batch_size=60), "effective_batch_size", "multiple of"),
        (lambda d: d.update(method="qlora"), "method", "use method 'lora'"),
        (lambda d: d.update(checkpoint_interval_steps=2000), "checkpoint_interval_steps", "exceeds max_steps"),
        (lambda d: d["evaluation"].update(interval_steps=1001), "evaluation.interval_steps", "exceeds max_steps"),
        (lambda d: d["fault_injection"].update(at_step=100), "fault_injection.at_step", "before the first"),
        (lambda d: d["fault_injection"].update(at_step=1000), "fault_injection.at_step", "not before the last"),
        (lambda d: d["tracks"].pop("trn2"), "fault_injection.track", "no trn2 track"),
        (lambda d: d.update(tracks={}, fault_injection=None), "tracks", "at least one track"),
    ],
)
def test_cross_field_rules(example_trial: dict[str, Any], mutate: Any, path: str, fragment: str) -> None:
    mutate(example_trial)
    if example_trial.get("fault_injection") is None:
        example_trial.pop("fault_injection", None)
    found = problems(example_trial)
    assert path in found, found
    assert fragment in found[path]


def test_logical_nc_config_changes_device_count(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"]["trn2"].update(logical_nc_config=1, tensor_parallel=16)
    spec = parse_trial(example_trial)
    assert track_layout(spec, "trn2").world_size == 128
    example_trial["tracks"]["trn2"].update(logical_nc_config=2, tensor_parallel=128)
    assert "tracks.trn2.tensor_parallel" in problems(example_trial)


def test_effective_batch_is_identical_whatever_the_device_count(example_trial: dict[str, Any]) -> None:
    for nodes in (1, 2, 4):
        example_trial["tracks"]["gpu"]["nodes"] = nodes
        example_trial["effective_batch_size"] = 64 * nodes if nodes > 1 else 64
        spec = parse_trial(example_trial)
        for name in spec.track_names():
            layout = track_layout(spec, name)
            assert gradient_accumulation_steps(spec, layout) * spec.micro_batch_size * layout.data_parallel == (
                spec.effective_batch_size)


def test_local_paths_only_with_local_mode(example_trial: dict[str, Any]) -> None:
    example_trial["data"]["train_uri"] = "examples/data/train.jsonl"
    assert "data.train_uri" in problems(example_trial)
    assert parse_trial(example_trial, allow_local_paths=True).data.train_uri == "examples/data/train.jsonl"


def test_every_problem_is_reported_at_once(example_trial: dict[str, Any]) -> None:
    example_trial.update(bogus=1, max_steps="x", precision="fp8")
    assert {"bogus", "max_steps", "precision"} <= set(problems(example_trial))


@pytest.mark.parametrize("doc", ["{", "[]", "null", "42", '"trial"', b"\xff\xfe"])
def test_malformed_documents_are_one_problem_not_a_traceback(doc: Any) -> None:
    found = problems(doc)
    assert len(found) >= 1
    assert all(isinstance(m, str) and m for m in found.values())


def test_override_is_accepted_and_validated(example_trial: dict[str, Any]) -> None:
    example_trial["triage_override"] = {"route": "dual_track", "reason": "ok"}
    found = problems(example_trial)
    assert "triage_override.reason" in found and "triage_override.approved_by" not in found  # informational now


# ---- the model: what the trainer would refuse ---------------------------------------------------------------


def tiny_model(example_trial: dict[str, Any], **config: Any) -> dict[str, Any]:
    cfg = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 8, **config}
    example_trial["model"] = {"id": "dualtrack/tiny-llama", "revision": "v1", "config": cfg, "tokenizer": "byte"}
    return example_trial


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"num_attention_heads": 4, "num_key_value_heads": 4},
         "tensor_parallel 8 must divide the model's num_attention_heads (4) to split it evenly; use tensor_parallel "
         "in [1, 2, 4]"),
        ({"num_key_value_heads": 2}, "must divide the model's num_key_value_heads (2)"),
        ({"intermediate_size": 172}, "must divide the model's intermediate_size (172)"),
    ],
)
def test_tensor_parallel_must_split_the_models_heads_and_mlp(example_trial: dict[str, Any], config: dict[str, Any],
                                                             fragment: str) -> None:
    """The trn2 track asks for tensor_parallel 8: the trainer splits whole heads and the MLP over 8 devices."""
    found = problems(tiny_model(example_trial, **config))
    assert fragment in found["tracks.trn2.tensor_parallel"], found


def test_pipeline_parallel_is_refused_naming_what_runs(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"]["gpu"].update(pipeline_parallel=2)
    found = problems(example_trial)
    assert "is not run by the trainer" in found["tracks.gpu.pipeline_parallel"]
    assert "use pipeline_parallel 1 and tensor_parallel in [1, 2, 4, 8]" in found["tracks.gpu.pipeline_parallel"]


def test_byte_tokenizer_vocab_matches_the_trainer() -> None:
    from trainer.tokenizer import ByteTokenizer

    from lambdas.domain.trial.spec import BYTE_TOKENIZER_VOCAB_SIZE, TinyModelConfig

    assert ByteTokenizer().vocab_size == BYTE_TOKENIZER_VOCAB_SIZE
    assert TinyModelConfig().vocab_size >= ByteTokenizer().vocab_size  # the default config is one the trainer builds


def test_tiny_model_config_validates(example_trial: dict[str, Any]) -> None:
    assert parse_trial(tiny_model(example_trial)).model.config is not None


@pytest.mark.parametrize(
    ("config", "path", "fragment"),
    [
        ({"hidden_size": 66}, "model.config.hidden_size", "does not divide by num_attention_heads (8)"),
        ({"hidden_size": 40}, "model.config.hidden_size", "rotary position embeddings need an even head size"),
        ({"num_attention_heads": 8, "num_key_value_heads": 3}, "model.config.num_key_value_heads",
         "use one of [1, 2, 4, 8]"),
        ({"vocab_size": 256}, "model.config.vocab_size", "set vocab_size >= 259"),
    ],
)
def test_model_config_the_trainer_refuses(example_trial: dict[str, Any], config: dict[str, Any], path: str,
                                          fragment: str) -> None:
    found = problems(tiny_model(example_trial, **config))
    assert path in found, found
    assert fragment in found[path]


def test_vocab_size_is_only_checked_against_the_byte_tokenizer(example_trial: dict[str, Any]) -> None:
    doc = tiny_model(example_trial, vocab_size=256)
    doc["model"]["tokenizer"] = "s3://example-datasets/tokenizers/small/"
    assert parse_trial(doc).model.config.vocab_size == 256  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("targets", "path", "fragment"),
    [
        (["bogus"], "lora.target_modules", "nothing to adapt"),
        (["q_proj", "mlp"], "lora.target_modules[1]", "LoRA cannot wrap"),
        (["input_layernorm"], "lora.target_modules[0]", "LoRA cannot wrap"),
    ],
)
def test_lora_targets_the_trainer_refuses(example_trial: dict[str, Any], targets: list[str], path: str,
                                          fragment: str) -> None:
    example_trial["lora"]["target_modules"] = targets
    found = problems(example_trial)
    assert path in found, found
    assert fragment in found[path]


def test_lora_targets_may_be_dotted_or_partly_unmatched(example_trial: dict[str, Any]) -> None:
    example_trial["lora"]["target_modules"] = ["self_attn.q_proj", "v_proj", "not_in_llama"]
    parse_trial(example_trial)


# ---- the model source: what the job can reach --------------------------------------------------------------


def test_hub_id_alone_is_refused(example_trial: dict[str, Any]) -> None:
    del example_trial["model"]["uri"]
    found = problems(example_trial)
    assert "model.uri" in found, found
    assert "no internet access" in found["model.uri"] and "s3://" in found["model.uri"]
    assert "model.config" in found["model.uri"]
    assert "model.uri" in problems(example_trial, allow_local_paths=True)  # the trainer never downloads a hub id


def test_local_model_path_only_in_rehearsal_mode(example_trial: dict[str, Any]) -> None:
    example_trial["model"]["uri"] = "models/llama-3.1-8b"
    assert "model.uri" in problems(example_trial)
    assert parse_trial(example_trial, allow_local_paths=True).model.uri == "models/llama-3.1-8b"


def test_tokenizer_must_be_byte_or_a_readable_location(example_trial: dict[str, Any]) -> None:
    example_trial["model"]["tokenizer"] = "meta-llama/Llama-3.1-8B"
    found = problems(example_trial)
    assert "model.tokenizer" in found and "no internet access" in found["model.tokenizer"]
    example_trial["model"]["tokenizer"] = "s3://example-datasets/models/meta-llama/Llama-3.1-8B/main/"
    parse_trial(example_trial)


# ---- limits ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hours", [0.001, 0.0166])
def test_max_hours_under_the_batch_minimum_is_refused(example_trial: dict[str, Any], hours: float) -> None:
    """limits.max_hours becomes the attempt timeout, and AWS Batch refuses one under 60 seconds
    (https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html)."""
    example_trial["limits"]["max_hours"] = hours
    found = problems(example_trial)
    assert "limits.max_hours" in found, found
    assert "60 s" in found["limits.max_hours"] and "0.0167 h" in found["limits.max_hours"]
    example_trial["limits"]["max_hours"] = 0.0167
    parse_trial(example_trial)


# ---- inputs the stage's job role can read (checked at submission) ------------------------------------------


def test_inputs_in_readable_buckets_pass(example_trial: dict[str, Any]) -> None:
    from lambdas.domain.trial.rules import unreadable_inputs

    spec = parse_trial(example_trial)
    assert unreadable_inputs(spec, ["example-datasets"], artifacts_bucket="artifacts") == []


def test_every_unreadable_input_is_named(example_trial: dict[str, Any]) -> None:
    from lambdas.domain.trial.rules import unreadable_inputs

    example_trial["baseline_logs_uri"] = "s3://artifacts/trials/earlier/gpu/"
    example_trial["data"]["validation_uri"] = "s3://artifacts/uploads/validation.jsonl"
    example_trial["model"]["tokenizer"] = "s3://team-private/tokenizer/"
    spec = parse_trial(example_trial)
    found = {p.path: p.message for p in unreadable_inputs(spec, ["shared-data"], artifacts_bucket="artifacts")}
    assert set(found) == {"model.uri", "model.tokenizer", "data.train_uri", "data.validation_uri"}, found
    message = found["data.train_uri"]
    assert "cannot read bucket example-datasets" in message
    assert "dualtrack:stages.<stage>.data_buckets" in message
    assert "s3://shared-data/, s3://artifacts/trials/" in message
    assert "only under trials/" in found["data.validation_uri"]
    assert "cannot read bucket team-private" in found["model.tokenizer"]


def test_no_data_buckets_leaves_only_the_artifacts_bucket(example_trial: dict[str, Any]) -> None:
    from lambdas.domain.trial.rules import unreadable_inputs

    spec = parse_trial(example_trial)
    found = {p.path for p in unreadable_inputs(spec, [], artifacts_bucket="artifacts")}
    assert found == {"model.uri", "data.train_uri", "data.validation_uri"}


@pytest.mark.parametrize(("flags", "message"), [
    (["--model-type", "transformer"], "join it to its option: --model-type=transformer"),
    (["-O2"], "write it as --optlevel=2"),
    (["--model-type=transformer", "--model-type=generic"], "the compiler keeps only the last"),
    (["--cache_dir=s3://somebody-elses-bucket/neuron"], "moves the compile cache out of the plane's cache bucket"),
    (["--cache-dir=/tmp/neuron"], "remove it"),
])
def test_compiler_flags_have_one_form_per_option(example_trial: dict[str, Any], flags: list[str],
                                                 message: str) -> None:
    example_trial["tracks"]["trn2"]["compiler_flags"] = flags
    with pytest.raises(TrialInvalid) as refused:
        parse_trial(example_trial)
    (problem,) = refused.value.problems
    assert problem.path == "tracks.trn2.compiler_flags" and message in problem.message


@pytest.mark.parametrize("value", [10**100, 1e100, 65_537, 2**63])
def test_effective_batch_size_has_an_upper_bound_named_in_the_schema_and_the_message(
        example_trial: dict[str, Any], value: Any) -> None:
    from lambdas.domain.trial.rules import json_schema
    from lambdas.domain.trial.spec import MAX_EFFECTIVE_BATCH_SIZE

    example_trial["effective_batch_size"] = value
    found = problems(example_trial)
    assert f"at most {MAX_EFFECTIVE_BATCH_SIZE} sequences per optimizer step" in found["effective_batch_size"], found
    assert obj(json_schema()["properties"])["effective_batch_size"]["maximum"] == MAX_EFFECTIVE_BATCH_SIZE == 65_536
    example_trial["effective_batch_size"] = MAX_EFFECTIVE_BATCH_SIZE  # the bound itself is accepted
    assert parse_trial(example_trial).effective_batch_size == MAX_EFFECTIVE_BATCH_SIZE


# ---- scaling runs: a track at several node counts (``nodes: [1, 2]``) -----------------------------------------
EXAMPLE_TRIAL_ID = "llama31-8b-lora-pilot-0b283c61aa"  # the example's id (Neuron SDK 2.34.0), as before scaling runs


def test_a_trial_without_scaling_runs_keeps_its_id(example_trial: dict[str, Any]) -> None:
    """``scaling_nodes`` is None without scaling runs and the canonical form leaves None out, so a trial written
    before scaling runs existed hashes as it did (its id is its execution name and its S3 prefix)."""
    assert parse_trial(example_trial).trial_id == EXAMPLE_TRIAL_ID
    example_trial["tracks"]["gpu"]["nodes"] = [1]  # one count is no scaling run
    spec = parse_trial(example_trial)
    assert spec.trial_id == EXAMPLE_TRIAL_ID and spec.scaling_runs() == {}
    assert "scaling_nodes" not in spec.canonical_json()


def test_a_nodes_list_is_the_largest_count_with_the_others_as_scaling_runs(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"]["gpu"]["nodes"] = [2, 1]
    example_trial["tracks"]["trn2"]["nodes"] = [4, 1, 2]
    spec = parse_trial(example_trial)
    assert (spec.track("gpu").nodes, spec.track("gpu").scaling_nodes) == (2, [1])
    assert (spec.track("trn2").nodes, spec.track("trn2").scaling_nodes) == (4, [1, 2])
    assert spec.scaling_runs() == {"gpu-n1": ("gpu", 1), "trn2-n1": ("trn2", 1), "trn2-n2": ("trn2", 2)}
    assert spec.trial_id != EXAMPLE_TRIAL_ID
    # Each run trains with its own node count; the same effective batch takes up the difference in data parallel.
    assert spec.run_track("gpu-n1").nodes == 1 and spec.run_track("gpu").nodes == 2
    assert spec.run_track("trn2-n2").scaling_nodes is None
    main, scaling = track_layout(spec, "trn2"), track_layout(spec, "trn2", run="trn2-n1")
    assert (main.nodes, main.data_parallel, scaling.nodes, scaling.data_parallel) == (4, 32, 1, 8)
    assert gradient_accumulation_steps(spec, main) * 4 == gradient_accumulation_steps(spec, scaling)
    # The stored spec (spec.json) has the explicit form, which reads back as the same trial.
    stored = json.loads(spec.canonical_json())
    assert stored["tracks"]["trn2"]["nodes"] == 4 and stored["tracks"]["trn2"]["scaling_nodes"] == [1, 2]
    assert parse_trial(stored).trial_id == spec.trial_id


def test_a_run_name_is_the_whole_name() -> None:
    """A name that only starts as a run's, or adds a newline (which ``$`` lets through), names no run."""
    from lambdas.domain.vocabulary import is_run, scaling_nodes, track_of

    assert is_run("gpu-n1") and scaling_nodes("trn2-n12") == 12 and track_of("trn2-n2") == "trn2"
    for name in ("gpu-n1\n", "gpu-n1/", "xgpu-n1", "gpu-n0", "gpu-n100", "cpu-n1", "gpu-n01"):
        assert not is_run(name) and scaling_nodes(name) is None, name


def test_up_to_three_scaling_runs_per_track_are_accepted(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"]["gpu"]["nodes"] = [1, 2, 4, 8]
    assert list(parse_trial(example_trial).scaling_runs()) == ["gpu-n1", "gpu-n2", "gpu-n4"]


@pytest.mark.parametrize(
    ("gpu", "path", "fragment"),
    [
        ({"nodes": [1, 1]}, "tracks.gpu.nodes", "lists a count twice"),
        ({"nodes": []}, "tracks.gpu.nodes", "give a node count or a list of node counts such as [1, 2]"),
        ({"nodes": [True, 2]}, "tracks.gpu.nodes", "give a node count or a list"),
        ({"nodes": ["1", 2]}, "tracks.gpu.nodes", "give a node count or a list"),
        ({"nodes": [1.0, 2]}, "tracks.gpu.nodes", "give a node count or a list"),
        ({"nodes": [0, 2]}, "tracks.gpu.nodes", "each count must be 1 to 64, not [0]"),
        ({"nodes": [1, 65]}, "tracks.gpu.nodes", "each count must be 1 to 64, not [65]"),
        ({"nodes": [1, 2, 3, 4, 8]}, "tracks.gpu.nodes", "lists 5 counts; list at most 4 (the main run and 3 scaling"),
        ({"nodes": [1, 2], "scaling_nodes": [1]}, "tracks.gpu.nodes", "give the node counts once"),
        ({"nodes": 2, "scaling_nodes": [4]}, "tracks.gpu.scaling_nodes", "must be below nodes (2)"),
        ({"nodes": 2, "scaling_nodes": [2]}, "tracks.gpu.scaling_nodes", "must be below nodes (2)"),
        ({"nodes": 4, "scaling_nodes": [1, 1]}, "tracks.gpu.scaling_nodes", "lists a count twice"),
        ({"nodes": 8, "scaling_nodes": [1, 2, 3, 4]}, "tracks.gpu.scaling_nodes", "at most 3 items"),
    ],
)
def test_node_counts_that_are_no_set_of_runs_are_refused_at_the_field(example_trial: dict[str, Any],
                                                                        gpu: dict[str, Any], path: str,
                                                                        fragment: str) -> None:
    example_trial["tracks"]["gpu"].update(gpu)
    found = problems(example_trial)
    assert path in found, found
    assert fragment in found[path]


def test_the_explicit_form_is_the_nodes_list(example_trial: dict[str, Any]) -> None:
    explicit = copy.deepcopy(example_trial)
    explicit["tracks"]["gpu"].update(nodes=2, scaling_nodes=[1])
    example_trial["tracks"]["gpu"]["nodes"] = [1, 2]
    assert parse_trial(explicit).trial_id == parse_trial(example_trial).trial_id


def test_a_layout_that_fails_only_at_a_scaling_count_is_refused_naming_that_count(
        example_trial: dict[str, Any]) -> None:
    """At 4 nodes of 8 GPUs the batch of 64 divides over 32 ranks; at 3 nodes (24 ranks) it does not: every run
    must be trainable, so the scaling run's layout is checked too, and the problem says which count."""
    example_trial["tracks"]["gpu"]["nodes"] = 4
    assert parse_trial(example_trial).track("gpu").nodes == 4  # the main run alone is fine
    example_trial["tracks"]["gpu"]["nodes"] = [3, 4]
    found = problems(example_trial)
    assert found["effective_batch_size"].startswith("at 3 node(s) (a scaling run): 64 is not a multiple of "
                                                    "micro_batch_size x data_parallel = 1 x 24 = 24 on the gpu track")


def test_the_published_schema_takes_a_node_count_or_a_list(example_trial: dict[str, Any]) -> None:
    """What a client may send for ``nodes`` (the API's OpenAPI document is generated from the same model)."""
    gpu = obj(obj(obj(json_schema()["$defs"])["GpuTrack"])["properties"])
    integer, array = gpu["nodes"]["anyOf"]
    assert integer == {"type": "integer", "minimum": 1, "maximum": 64}
    assert array == {"type": "array", "items": integer, "minItems": 1, "maxItems": 4, "uniqueItems": True}
    assert gpu["scaling_nodes"]["anyOf"][0]["uniqueItems"] is True
