"""Documents a trial points at outside the artifacts bucket (its GPU baseline logs): an ``s3://`` URI in any bucket
the function's role may read (the stage's data buckets), or, in the local stage only, a path on this machine (the
API refuses any other URI at submission, so a deployed function only ever sees ``s3://``)."""

from __future__ import annotations

from pathlib import Path

from lambdas.adapters.aws import client


class DocumentTooLarge(ValueError):
    pass


class UriSources:
    def read(self, uri: str, max_bytes: int) -> bytes:
        """The document's bytes; DocumentTooLarge past ``max_bytes`` (only that many are read)."""
        if uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            body = client("s3").get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{max_bytes}")["Body"].read()
        else:
            with Path(uri).expanduser().open("rb") as handle:
                body = handle.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise DocumentTooLarge(f"{uri}: over {max_bytes} bytes")
        return body  # type: ignore[no-any-return]
