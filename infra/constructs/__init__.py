"""Constructs: each builds one concern from typed, keyword-only resources and exposes what it made."""
