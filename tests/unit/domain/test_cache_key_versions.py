"""Key components recorded under an older key version (a trial item's ``cache_components``) compare sensibly with
today's: the components added since are not reported as changes the team made, the key version is."""

from __future__ import annotations

from typing import Any

from lambdas.domain.cache.compile_cache import KEY_VERSION, compare_components, key_components
from lambdas.domain.trial.rules import parse_trial


def test_an_older_record_differs_by_its_key_version_only(example_trial: dict[str, Any]) -> None:
    today = key_components(parse_trial(example_trial))
    older = {k: v for k, v in today.items() if k not in ("lora_alpha", "lora_dropout", "tokenizer")}
    older["key_version"] = KEY_VERSION - 1
    explained = compare_components(older, today)
    assert not explained.same_key
    assert [d.component for d in explained.differences] == ["key_version"]
    assert explained.change_classes == ["compiler environment"]


def test_the_lora_settings_separate_two_records_of_one_version(example_trial: dict[str, Any]) -> None:
    base = key_components(parse_trial(example_trial))
    example_trial["lora"]["dropout"] = 0.1 if example_trial["lora"].get("dropout", 0.0) != 0.1 else 0.2
    changed = key_components(parse_trial(example_trial))
    explained = compare_components(base, changed)
    assert [d.component for d in explained.differences] == ["lora_dropout"]
    assert explained.change_classes == ["model structure or operators"]
