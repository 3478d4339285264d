"""JSON and text objects in one S3 bucket."""

from __future__ import annotations

import json
from typing import Any

from lambdas.adapters.aws import client, error_code, pages
from lambdas.domain.canonical import json_text

_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3Objects:
    def __init__(self, bucket: str) -> None:
        self.bucket = bucket

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put_json(self, key: str, value: Any, *, if_absent: bool = False) -> bool:
        body = json_text(value, sort_keys=True, indent=1, default=str).encode()
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            client("s3").put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **extra)
        except Exception as exc:
            if if_absent and error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def put_text(self, key: str, text: str, content_type: str) -> None:
        client("s3").put_object(Bucket=self.bucket, Key=key, Body=text.encode(), ContentType=content_type)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return client("s3").get_object(Bucket=self.bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise

    def get_json(self, key: str) -> Any | None:
        raw = self.get_bytes(key)
        return None if raw is None else json.loads(raw)

    def list_keys(self, prefix: str) -> list[str]:
        return list(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for page in pages("s3", "list_objects_v2", Bucket=self.bucket, Prefix=prefix):
            out.update((o["Key"], int(o["Size"])) for o in page.get("Contents", []))
        return out

    def delete_key(self, key: str) -> None:
        client("s3").delete_object(Bucket=self.bucket, Key=key)

    def presigned_get(self, key: str, expires_s: int) -> str:
        return client("s3").generate_presigned_url(  # type: ignore[no-any-return]
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
        )
