"""Artifacts in any S3-compatible object store, shared by workers on different machines (RunPod included).

Objects carry their sha256 as metadata; a read is checked against the reference, as with the file store. Keys are
the same deterministic keys as the file store's, under the store's prefix.
"""

from __future__ import annotations

import hashlib
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from core.artifacts import ArtifactError, ForeignArtifact, check_content
from workflows.contract import ArtifactRef
from workflows.keys import check_key, is_key


class S3ArtifactStore:
    """Artifacts as objects ``s3://<bucket>/<prefix>/<key>``; one boto3 client, safe to share between threads."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url or None,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, s3={"addressing_style": "path"}),
        )

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        digest = hashlib.sha256(data).hexdigest()
        object_key = self._key(key)
        self._client.put_object(
            Bucket=self.bucket, Key=object_key, Body=data, ContentType=media_type, Metadata={"sha256": digest}
        )
        return ArtifactRef(
            uri=f"s3://{self.bucket}/{object_key}",
            sha256=digest,
            size_bytes=len(data),
            media_type=media_type,
            width=width,
            height=height,
        )

    def get(self, ref: ArtifactRef) -> bytes:
        object_key = self._object_key(ref)
        try:
            data: bytes = self._client.get_object(Bucket=self.bucket, Key=object_key)["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
                raise ArtifactError(f"{ref.uri}: artifact is missing") from err
            raise
        check_content(ref, data)
        return data

    def key_of(self, ref: ArtifactRef) -> str:
        return self._object_key(ref).removeprefix(f"{self.prefix}/" if self.prefix else "")

    def _object_key(self, ref: ArtifactRef) -> str:
        """The object ``ref`` names, when it is one of this store's (its bucket, under its prefix, no ``.``/``..``).

        Raises:
            ForeignArtifact: Anything else; the message does not name this store's bucket or prefix.
        """
        bucket, _, object_key = ref.uri.removeprefix("s3://").partition("/")
        inside = f"{self.prefix}/" if self.prefix else ""
        if (
            not ref.uri.startswith("s3://")
            or bucket != self.bucket
            or not object_key.startswith(inside)
            or not is_key(object_key.removeprefix(inside))
        ):
            raise ForeignArtifact(f"{ref.uri}: not an artifact of this store; it is not read")
        return object_key

    def find(self, key: str) -> bytes | None:
        try:
            data: bytes = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return data
