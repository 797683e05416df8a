"""Big payloads live outside the state: stored by content digest, referenced by digest + URI."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from django.conf import settings

from core.errors import InvalidInput, NotFound


def artifact_put(*, data: bytes) -> dict[str, object]:
    """Store bytes once per content; return the reference to keep in state."""
    hexdigest = hashlib.sha256(data).hexdigest()
    root = Path(settings.KEEPER_ARTIFACT_ROOT)
    path = root / hexdigest[:2] / hexdigest
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return {"digest": f"sha256:{hexdigest}", "uri": f"file://{path}", "size": len(data)}


def artifact_get(*, ref: dict[str, object]) -> bytes:
    """Read an artifact back and check it is the content the reference names."""
    uri, digest = str(ref.get("uri", "")), str(ref.get("digest", ""))
    if not uri.startswith("file://"):
        raise InvalidInput(f"unsupported artifact URI {uri!r}", code="artifact_uri_unsupported")
    path = Path(uri[len("file://") :])
    if not path.exists():
        raise NotFound(f"artifact {digest} is missing at {uri}", code="artifact_missing")
    data = path.read_bytes()
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise InvalidInput(f"artifact at {uri} does not match {digest}", code="artifact_digest_mismatch")
    return data
