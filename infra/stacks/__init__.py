"""Stacks compose constructs: stateful (data), compute (network + Batch), control (workflow, API, events)."""
