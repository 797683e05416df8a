"""Canonical JSON and the sha256 digests that bind events, states and requests together."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from decimal import Decimal
from typing import Any

from core.errors import InvalidInput

# json.dumps writes NUL as \u0000; a literal backslash before "u0000" is written as \\u0000.
_NUL_ESCAPE = re.compile(r"(?:^|[^\\])(?:\\\\)*\\u0000")


class NotJSONSerializable(InvalidInput):
    code = "not_json_serializable"


def _as_stored(value: Any) -> Any:
    """The value as PostgreSQL's jsonb gives it back: a number keeps no negative zero (-0.0 is 0.0),
    and a float Python writes with a positive exponent (1e+16 and beyond, all whole numbers) comes
    back in plain digits, which JSON reads as an integer."""
    if isinstance(value, float):
        if value == 0:
            return 0.0
        text = repr(value)
        return int(Decimal(text)) if "e+" in text else value
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_stored(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, UTF-8, and no NaN or Infinity; numbers as jsonb
    stores them, so a value read back from the database has the digest it was written with.

    It also refuses what PostgreSQL's jsonb cannot store: NUL characters and unpaired surrogates.
    """
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if "e+" in text or "-0.0" in text:  # maybe such a number (or only a text that looks like one)
            text = json.dumps(
                _as_stored(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
    except (TypeError, ValueError) as exc:
        raise NotJSONSerializable(f"value is not plain JSON: {exc}") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise NotJSONSerializable("text contains a NUL character (\\u0000), which cannot be stored")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise NotJSONSerializable("text contains an unpaired surrogate, which is not valid Unicode") from None
    return text


def sha256_digest(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    return sha256_digest(canonical_json(value))


def keyed_digest(value: Any) -> str:
    """An HMAC-SHA256 of the value's canonical JSON under KEEPER_DIGEST_KEY: what stands in for an
    erased subject's id or text. Unlike sha256_digest, nobody can test a guessed id against it
    without the key."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    key = getattr(settings, "KEEPER_DIGEST_KEY", "")
    if not key:
        raise ImproperlyConfigured("KEEPER_DIGEST_KEY is not set")
    mac = hmac.new(key.encode(), canonical_json(value).encode(), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


# How deep a JSON body may nest. Agents' inputs, messages and memory values are a few levels deep;
# a body nested hundreds of levels deep overflows Python's recursion (a 500) or, stored, every later
# walk over the run's state (a run that could never be resumed).
MAX_JSON_DEPTH = 64


def json_depth_over(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` arrays and objects (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def strings_in(value: Any, *, keys: bool = False) -> list[str]:
    """Every string inside a JSON value (object keys too when `keys`), iteratively: a hostile value
    may be nested deeper than Python recurses."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()] if keys else item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


# --- what stands in for an erased subject ------------------------------------------------------
# Receipts, tombstones, erased runs and the audit log name a subject by these. Keyed
# (KEEPER_DIGEST_KEY): an unkeyed hash of a guessable id could be recomputed by anyone who reads the
# database. Records made before the key kept unkeyed sha256 digests; lookups try both.


def subject_digest(*, tenant_id: Any, subject_id: str) -> str:
    return keyed_digest({"tenant": str(tenant_id), "subject": subject_id})


def subject_digests(*, tenant_id: Any, subject_id: str) -> list[str]:
    """The subject's digest, then the unkeyed one older records carry."""
    value = {"tenant": str(tenant_id), "subject": subject_id}
    return [keyed_digest(value), json_digest(value)]


def erased_id(text: str) -> str:
    """What an id or a name that carried the subject becomes: still unique (the same text, the same
    pseudonym), no longer readable, and keyed, so a guessed id cannot be tested against it."""
    return "erased:" + keyed_digest(text).removeprefix("hmac-sha256:")[:32]
