"""The use cases: what each function does, over the ports of ``lambdas.services.ports`` (no boto3 here)."""
