"""What the runs app keeps for erasure: the record by which a redacted history still verifies, and
the subject's Redis windows.

Erasure itself (erasure/erasers/) decides what changes and writes it through the run kernel: an erased
run's new state with its `subject_erased` event (the SubjectErased move), every other change to a
stored event (a redacted payload, state or client message id, a keyed actor) as an EventRedacted move.
The `subject_erased` event's payload records, per redacted event, the digest of its content before
and after; history checks accept a changed event only when it matches that record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from core.digests import json_digest
from runs.conversations.sessions import redis_client
from runs.kernel.models import SUBJECT_ERASED

ERASED = "[erased]"
ERASED_EVENT = SUBJECT_ERASED
ERASED_DETAIL = (
    "the subject of this run was erased (an erasure request); its text is redacted and the run "
    "cannot continue: start a new run if the customer asks again"
)
TEXT_KEYS = ("content", "preview", "arguments")  # conversation text, dropped from redacted events
GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # Redis MATCH pattern characters


def subject_session_keys(*, tenant_id: UUID, subject_id: str) -> list[bytes]:
    """The Redis window keys of this subject's runs. Glob characters in a subject id are escaped,
    and a key must be this subject's followed by a run id only: erasing "a*" or "a" must never
    touch the windows of "ab" or "a:b"."""
    prefix = f"session:{tenant_id}:{subject_id}:".encode()
    escaped = GLOB_SPECIAL.sub(lambda m: "\\" + m.group(0), subject_id)
    pattern = f"session:{tenant_id}:{escaped}:*"
    return [
        key
        for key in redis_client().scan_iter(match=pattern, count=500)
        if key.startswith(prefix) and b":" not in key[len(prefix) :]
    ]


def redaction_digest(*, payload: Any, state: Any, client_message_id: Any) -> str:
    """The digest of what redaction may change in an event, recorded before and after."""
    return json_digest({"payload": payload, "state": state, "client_message_id": client_message_id})


def redactions_of(events: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, str]]:
    """The redaction records of a history: seq -> {before, after}, from its subject_erased events."""
    records: dict[int, dict[str, str]] = {}
    for event in events:
        if event.get("event_type") == ERASED_EVENT:
            for seq, record in ((event.get("payload") or {}).get("redactions") or {}).items():
                records[int(seq)] = record
    return records


def event_redacted_as_recorded(event: dict[str, Any], records: dict[int, dict[str, str]]) -> bool:
    """Whether this event was changed by an erasure exactly as its record says (and only then)."""
    record = records.get(int(event.get("seq") or 0))
    return record is not None and record.get("after") == redaction_digest(
        payload=event.get("payload"),
        state=event.get("state"),
        client_message_id=event.get("client_message_id"),
    )
