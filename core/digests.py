"""Canonical JSON and the sha256 digests that bind events, states and requests together."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.errors import InvalidInput


class NotJSONSerializable(InvalidInput):
    code = "not_json_serializable"


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, UTF-8, and no NaN or Infinity."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NotJSONSerializable(f"value is not plain JSON: {exc}") from None


def sha256_digest(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    return sha256_digest(canonical_json(value))
