"""A real S3-protocol server for the artifact store's tests: moto's server mode (PyPI moto[server]) on
127.0.0.1, one per test session, and a fresh bucket per test. Skipped, saying why, without moto."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "keeper-test", "AWS_SECRET_ACCESS_KEY": "keeper-test-secret"}
REGION = "us-east-1"


@dataclass(frozen=True)
class S3:
    endpoint_url: str
    bucket: str

    def env(self) -> dict[str, str]:
        """What a Keeper process needs to use this bucket (a worker on another "host")."""
        return {
            **CREDENTIALS,
            "KEEPER_ARTIFACT_STORE": "s3",
            "KEEPER_ARTIFACT_S3_BUCKET": self.bucket,
            "KEEPER_ARTIFACT_S3_ENDPOINT_URL": self.endpoint_url,
            "KEEPER_ARTIFACT_S3_REGION": REGION,
        }

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION)

    def object_keys(self) -> list[str]:
        listed = self.client().list_objects_v2(Bucket=self.bucket)
        return sorted(item["Key"] for item in listed.get("Contents", []))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        pytest.skip(
            "moto[server] is not installed (pip install -e '.[dev]'): no S3-protocol server to test against"
        )
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: str, settings, monkeypatch) -> S3:
    """This test's artifacts in a fresh bucket of the S3 server (settings as KEEPER_ARTIFACT_STORE=s3
    builds them)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    found = S3(endpoint_url=s3_server, bucket=f"keeper-{secrets.token_hex(6)}")
    found.client().create_bucket(Bucket=found.bucket)
    options = {"bucket": found.bucket, "endpoint_url": s3_server, "region": REGION, "timeout": 5.0}
    settings.BACKENDS = {
        **settings.BACKENDS,
        "artifact_store": {"BACKEND": "core.artifacts.s3.S3ArtifactStore", "OPTIONS": options},
    }
    assert os.environ["AWS_ACCESS_KEY_ID"] == CREDENTIALS["AWS_ACCESS_KEY_ID"]
    return found
