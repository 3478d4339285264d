"""Pure domain model: no I/O, no AWS SDK; stdlib and pydantic only."""
