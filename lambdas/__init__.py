"""dualtrack's Lambda code: pure domain, boto3 adapters, Powertools runtime and thin handlers."""
