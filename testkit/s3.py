"""An S3-compatible server on loopback (moto's server mode) with one bucket, for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import boto3
from moto.server import ThreadedMotoServer

S3_KEYS = {
    "POPCON_S3_ACCESS_KEY_ID": "popcon",
    "POPCON_S3_SECRET_ACCESS_KEY": "popcon-secret",
    "POPCON_S3_REGION": "us-east-1",
}
"""The credentials every process is given (the server accepts any)."""


@contextmanager
def s3_server(bucket: str, prefix: str = "sets") -> Iterator[dict[str, str]]:
    """Run the server with ``bucket`` created; yields the POPCON_* variables that point a process at it."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=S3_KEYS["POPCON_S3_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_KEYS["POPCON_S3_SECRET_ACCESS_KEY"],
            region_name=S3_KEYS["POPCON_S3_REGION"],
        ).create_bucket(Bucket=bucket)
        yield {**S3_KEYS, "POPCON_ARTIFACT_ROOT": f"s3://{bucket}/{prefix}", "POPCON_S3_ENDPOINT_URL": endpoint}
    finally:
        server.stop()
