"""The S3-compatible backend (AWS S3, MinIO, Ceph, moto's server in tests): one object per blob.

Keys start with the tenant's id, so erasing a tenant removes one prefix. Credentials come from boto3's
own chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance or pod role), never from
Keeper's settings; the endpoint, bucket and region from KEEPER_ARTIFACT_S3_*. Each call waits at most
KEEPER_ARTIFACT_TIMEOUT to connect and to read, and is retried once.
"""

from __future__ import annotations

from typing import Any

from core.artifacts.errors import ArtifactMissing, ArtifactStoreUnavailable, ArtifactTooLarge
from core.artifacts.store import ArtifactStore, key_check

_MISSING = {"404", "NoSuchKey", "NotFound"}


class S3ArtifactStore(ArtifactStore):
    name = "s3"

    def __init__(
        self, *, bucket: str, endpoint_url: str = "", region: str = "", timeout: float = 10.0
    ) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region or None,
            config=Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": 2, "mode": "standard"},
                # An endpoint of one's own (MinIO, a test server) has no bucket sub-domains.
                s3={"addressing_style": "path" if endpoint_url else "auto"},
            ),
        )

    def _call(self, what: str, method: str, *, empty: Any = None, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "InvalidRange" and empty is not None:  # a range of an empty object
                return empty
            if code in _MISSING:
                raise ArtifactMissing(f"{what} is not in bucket {self.bucket}") from None
            raise ArtifactStoreUnavailable(f"the artifact store refused {method} ({code})") from None
        except BotoCoreError as exc:
            raise ArtifactStoreUnavailable(f"the artifact store did not answer {method}: {exc}") from None

    def write(self, key: str, data: bytes) -> None:
        # One PUT: S3 makes the object visible whole or not at all.
        self._call("the blob", "put_object", Key=key_check(key), Body=data, ContentLength=len(data))

    def read(self, key: str, *, limit: int) -> bytes:
        # One byte past the limit is asked for, so a larger object is told apart without fetching it.
        answer = self._call("the blob", "get_object", empty={}, Key=key_check(key), Range=f"bytes=0-{limit}")
        if "Body" not in answer:
            return b""
        body = answer["Body"]
        try:
            data: bytes = body.read(limit + 1)
        finally:
            body.close()
        if len(data) > limit:
            raise ArtifactTooLarge(f"the stored blob is over the {limit} bytes expected")
        return data

    def exists(self, key: str) -> bool:
        try:
            self._call("the blob", "head_object", Key=key_check(key))
        except ArtifactMissing:
            return False
        return True

    def delete(self, key: str) -> bool:
        # S3 answers a delete the same whether the object was there: ask first, for the counts.
        if not self.exists(key):
            return False
        self._call("the blob", "delete_object", Key=key_check(key))
        return True

    def keys_under(self, prefix: str, *, limit: int = 100_000) -> list[str]:
        keys: list[str] = []
        token: dict[str, str] = {}
        while len(keys) < limit:
            page = self._call(
                "the prefix", "list_objects_v2", Prefix=prefix, MaxKeys=min(1000, limit - len(keys)), **token
            )
            keys += [item["Key"] for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
        return keys

    def delete_under(self, prefix: str) -> int:
        removed = 0
        while keys := self.keys_under(prefix, limit=1000):
            answer = self._call(
                "the prefix", "delete_objects", Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise ArtifactStoreUnavailable(
                    f"the artifact store kept {len(answer['Errors'])} object(s): {first.get('Code')}"
                )
            removed += len(keys)
        return removed
