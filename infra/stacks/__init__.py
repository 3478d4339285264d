"""Stacks compose constructs: stateful (data), compute (network + Batch), control (workflow, API, events)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

import aws_cdk as cdk


class StackOptions(TypedDict, total=False):
    """The ``cdk.Stack`` keyword arguments a dualtrack stack passes through (termination protection is each stack's
    own decision)."""

    analytics_reporting: bool | None
    cross_region_references: bool | None
    description: str | None
    env: cdk.Environment | None
    notification_arns: Sequence[str] | None
    permissions_boundary: cdk.PermissionsBoundary | None
    property_injectors: Sequence[cdk.IPropertyInjector] | None
    stack_name: str | None
    suppress_template_indentation: bool | None
    synthesizer: cdk.IStackSynthesizer | None
    tags: Mapping[str, str] | None
