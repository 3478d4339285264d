"""The local runtime holds every way of writing an object to the tagged session's policy, as IAM does
(``dualtrack.local.aws.session_policies``), not only PutObject.

S3 authorizes CreateMultipartUpload, UploadPart and CompleteMultipartUpload as ``s3:PutObject`` on the object
("Multipart upload and permissions", https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html#mpuAndPermissions),
and CopyObject as ``s3:PutObject`` on the destination and ``s3:GetObject`` on the source
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html, "Permissions"). A session allowed to write one
compile-cache entry must not reach another by copying onto it or uploading it in parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dualtrack.local.aws.session_policies import SessionPolicies, enforce_session_policies

REGION = "us-east-1"
OWN = "neuron/m/c/" + "a" * 64
OTHER = "neuron/m/c/" + "b" * 64
STATEMENTS = [
    {"Effect": "Allow", "Action": "s3:PutObject",
     "Resource": "arn:aws:s3:::cache/neuron/*/*/${aws:PrincipalTag/dualtrack-cache-key}/*"},
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::cache/neuron/*"},
]


@pytest.fixture
def session() -> Iterator[Any]:
    policies = SessionPolicies()
    policies.attach("writer", STATEMENTS)
    with mock_aws(), enforce_session_policies(policies):
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="writer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        boto3.client("s3", region_name=REGION).create_bucket(Bucket="cache")
        boto3.client("s3", region_name=REGION).put_object(Bucket="cache", Key=f"{OTHER}/x.neff", Body=b"theirs")
        c = boto3.client("sts", region_name=REGION).assume_role(
            RoleArn=role, RoleSessionName="alpha.trn2-compile",
            Tags=[{"Key": "dualtrack-cache-key", "Value": "a" * 64}])["Credentials"]
        yield boto3.client("s3", region_name=REGION, aws_access_key_id=c["AccessKeyId"],
                           aws_secret_access_key=c["SecretAccessKey"], aws_session_token=c["SessionToken"])


def _denied(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"] in ("AccessDenied", "403")
    return False


def test_its_own_entry_is_written_every_way(session: Any) -> None:
    session.put_object(Bucket="cache", Key=f"{OWN}/a.neff", Body=b"a")
    session.copy_object(Bucket="cache", Key=f"{OWN}/b.neff", CopySource={"Bucket": "cache", "Key": f"{OWN}/a.neff"})
    upload = session.create_multipart_upload(Bucket="cache", Key=f"{OWN}/c.neff")["UploadId"]
    part = session.upload_part(Bucket="cache", Key=f"{OWN}/c.neff", UploadId=upload, PartNumber=1, Body=b"c")
    session.complete_multipart_upload(Bucket="cache", Key=f"{OWN}/c.neff", UploadId=upload,
                                      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})


def test_another_entry_is_written_no_way(session: Any) -> None:
    target = f"{OTHER}/x.neff"
    assert _denied(lambda: session.put_object(Bucket="cache", Key=target, Body=b"mine"))
    assert _denied(lambda: session.copy_object(Bucket="cache", Key=target,
                                               CopySource={"Bucket": "cache", "Key": f"{OTHER}/x.neff"}))
    assert _denied(lambda: session.create_multipart_upload(Bucket="cache", Key=target))
    theirs = boto3.client("s3", region_name=REGION)  # an upload someone else started under that entry
    upload = theirs.create_multipart_upload(Bucket="cache", Key=target)["UploadId"]
    assert _denied(lambda: session.upload_part(Bucket="cache", Key=target, UploadId=upload, PartNumber=1,
                                               Body=b"mine"))
    assert theirs.get_object(Bucket="cache", Key=target)["Body"].read() == b"theirs"
