"""What may go into a run's state: plain JSON, no secrets, bounded size. Encoded once per commit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.digests import NotJSONSerializable, canonical_json, sha256_digest
from runs.kernel.errors import InvalidState

# Keys that name credentials. State outlives processes and is shown to people: it must not
# carry them (a step keeps a reference to a secret store instead).
_SECRET_KEY = re.compile(
    r'"(?:password|passwd|secret|client_secret|api_?key|access_?token|refresh_?token|'
    r'private_?key|authorization|credentials?)"\s*:',
    re.IGNORECASE,
)


@dataclass(frozen=True)
class EncodedState:
    json: str
    digest: str


def state_encode(state: Any) -> EncodedState:
    if not isinstance(state, dict):
        raise InvalidState(f"state must be a JSON object, not {type(state).__name__}")
    try:
        text = canonical_json(state)
    except NotJSONSerializable as exc:
        raise InvalidState(
            f"state is not JSON-serializable ({exc.message}); keep clients, exceptions and other "
            "objects out of it, and store big payloads as artifacts (by digest)",
            code="state_not_serializable",
        ) from None
    size = len(text.encode())
    if size > settings.KEEPER_MAX_STATE_BYTES:
        raise InvalidState(
            f"state is {size} bytes, over KEEPER_MAX_STATE_BYTES={settings.KEEPER_MAX_STATE_BYTES}; "
            "store big payloads as artifacts and keep their digest",
            code="state_too_large",
        )
    match = _SECRET_KEY.search(text)
    if match:
        raise InvalidState(
            f"state must not carry secrets (found key {match.group(0).rstrip(': ')})", code="state_has_secret"
        )
    return EncodedState(json=text, digest=sha256_digest(text))
