"""Instance catalogue: accelerators per node for the instance types the tracks may use (data in data/)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

Family = Literal["gpu", "trn2"]


class InstanceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    family: Family
    accelerator: str
    accelerators: int
    accelerator_memory_gib: int
    vcpus: int
    memory_gib: int
    efa_interfaces: int = 0
    physical_neuron_cores: int | None = None

    def logical_neuron_cores(self, logical_nc_config: int) -> int:
        """Trainium2 exposes physical cores grouped by LNC: 128 physical -> 64 logical at LNC=2."""
        if self.physical_neuron_cores is None:
            raise ValueError(f"{self.accelerator} has no NeuronCores")
        return self.physical_neuron_cores // logical_nc_config


class InstanceCatalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    catalogue_version: str
    notes: str = ""
    instances: dict[str, InstanceInfo]

    def get(self, instance_type: str) -> InstanceInfo:
        try:
            return self.instances[instance_type]
        except KeyError:
            raise KeyError(f"unknown instance type {instance_type!r}") from None

    def types_for(self, family: str) -> list[str]:
        return sorted(name for name, info in self.instances.items() if info.family == family)


@lru_cache(maxsize=1)
def load_catalogue() -> InstanceCatalogue:
    text = resources.files("lambdas.domain").joinpath("data/instances.json").read_text()
    return InstanceCatalogue.model_validate(json.loads(text))
