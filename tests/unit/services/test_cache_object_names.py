"""Compile-cache object names the control plane records (``lambdas.services.artifact_recording``): an object whose
name under its entry carries a control character, C0 (U+0000-U+001F), DEL (U+007F) or C1 (U+0080-U+009F, U+0085
the "next line" some readers split lines on), is refused, never listed in the registry entry. S3 accepts any UTF-8
key, and its guide lists these as characters to avoid in key names (Amazon S3 user guide, "Naming Amazon S3
objects": "ASCII character ranges 00–1F hex (0–31 decimal) and 7F (127 decimal)"), so nothing the trainer
publishes carries one."""

from __future__ import annotations

import pytest

from lambdas.domain.evidence.artifacts import ArtifactRejected
from lambdas.services.artifact_recording import record_cache_object
from tests.fakes import InMemoryCacheRegistry

KEY = "c" * 64
PREFIX = f"neuron/m/c/{KEY}/"
AT = "2026-12-04T10:00:00Z"


@pytest.mark.parametrize("name", ["graphs/a\x01.neff", "graphs/a\x1f.neff", "graphs/a\x7f.neff",
                                  "graphs/a\x80.neff", "graphs/a\x85.neff", "graphs/a\x9f.neff"])
def test_a_name_with_a_control_character_is_refused_and_not_recorded(name: str) -> None:
    """C0, DEL and C1 characters alike: the object is rejected and the entry lists nothing."""
    registry = InMemoryCacheRegistry()
    with pytest.raises(ArtifactRejected, match="control character"):
        record_cache_object(registry, PREFIX + name, 10, AT)
    entry = registry.get(KEY)
    assert entry is None or entry.objects == {}


@pytest.mark.parametrize("name", ["graphs/a.neff", "graphs/é-ü.neff", "MODULE_1/\u00a0x.neff"])
def test_a_printable_name_is_recorded(name: str) -> None:
    """The refusal stops at the control characters: other non-ASCII names (U+00A0 onwards) are recorded."""
    registry = InMemoryCacheRegistry()
    assert record_cache_object(registry, PREFIX + name, 10, AT) == KEY
    entry = registry.get(KEY)
    assert entry is not None and entry.objects == {name: 10}
