"""What the runs app keeps about a subject, for erasure: conversation text, summaries, session windows.

Events are history: they stay, with ids and digests, but their text is replaced by a digest of it.
Summaries are caches of that text: deleted. Redis windows: deleted.
"""

from __future__ import annotations

import re
from pathlib import Path
from uuid import UUID

from django.db.models import Q

from core.digests import json_digest
from runs.models import AgentEvent, Summary
from runs.services.conversation import CONVERSATION_EVENTS
from runs.services.sessions import redis_client

TEXT_KEYS = ("content", "preview", "arguments")
GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # Redis MATCH pattern characters


def subject_session_keys(*, tenant_id: UUID, subject_id: str) -> list[bytes]:
    """The Redis window keys of this subject's runs. Glob characters in a subject id are escaped,
    and a key must be this subject's followed by a run id only: erasing "a*" or "a" must never
    touch the windows of "ab" or "a:b"."""
    prefix = f"session:{tenant_id}:{subject_id}:".encode()
    escaped = GLOB_SPECIAL.sub(lambda m: "\\" + m.group(0), subject_id)
    pattern = f"session:{tenant_id}:{escaped}:*"
    return [key for key in redis_client().scan_iter(match=pattern, count=500)
            if key.startswith(prefix) and b":" not in key[len(prefix):]]  # fmt: skip


class RunsEraser:
    name = "runs"

    def _events(self, tenant_id: UUID, subject_id: str):  # type: ignore[no-untyped-def]
        return AgentEvent.objects.filter(run__tenant_id=tenant_id, run__subject=subject_id,
                                         event_type__in=CONVERSATION_EVENTS)  # fmt: skip

    def _session_keys(self, tenant_id: UUID, subject_id: str) -> list[bytes]:
        return subject_session_keys(tenant_id=tenant_id, subject_id=subject_id)

    def _artifact_paths(self, tenant_id: UUID, subject_id: str) -> list[Path]:
        events = self._events(tenant_id, subject_id)
        refs = events.filter(payload__content_ref__isnull=False)
        uris = {
            str((p.get("content_ref") or {}).get("uri", "")) for p in refs.values_list("payload", flat=True)
        }
        # Artifacts are stored by content digest: a file another subject's event also points to is
        # that subject's too, and stays.
        shared = set(
            AgentEvent.objects.filter(payload__content_ref__uri__in=list(uris)).exclude(pk__in=events.values("pk"))
            .values_list("payload__content_ref__uri", flat=True)
        )  # fmt: skip
        return [Path(u[len("file://") :]) for u in sorted(uris - shared) if u.startswith("file://")]

    def erase(self, *, tenant_id: UUID, subject_id: str) -> dict[str, int]:
        # Full tool results kept by digest + URI hold the same text as the events' previews.
        artifacts = 0
        for path in self._artifact_paths(tenant_id, subject_id):
            if path.exists():
                path.unlink()
                artifacts += 1
        redacted = 0
        for event in self._events(tenant_id, subject_id).exclude(payload__has_key="redacted").iterator():
            kept = {k: v for k, v in event.payload.items() if k not in TEXT_KEYS}
            AgentEvent.objects.filter(pk=event.pk).update(
                payload={
                    **kept,
                    "redacted": True,
                    "text_digest": json_digest({k: event.payload.get(k) for k in TEXT_KEYS}),
                }
            )
            redacted += 1
        summaries, _ = Summary.objects.filter(run__tenant_id=tenant_id, run__subject=subject_id).delete()
        keys = self._session_keys(tenant_id, subject_id)
        deleted_keys = redis_client().delete(*keys) if keys else 0
        return {"events_redacted": redacted, "summaries": summaries, "redis_session_windows": deleted_keys,
                "artifacts": artifacts}  # fmt: skip

    def scan(self, *, tenant_id: UUID, subject_id: str, values: list[str]) -> dict[str, int]:
        text_match = Q()
        for value in values:
            text_match |= Q(payload__content__icontains=value) | Q(payload__preview__icontains=value)
        unredacted = self._events(tenant_id, subject_id).exclude(payload__has_key="redacted").count()
        # The subject's own runs: another customer's conversation may well say "English" too.
        leftover_text = (
            AgentEvent.objects.filter(run__tenant_id=tenant_id, run__subject=subject_id)
            .filter(text_match)
            .count()
            if values
            else 0
        )
        return {
            "events_unredacted": unredacted,
            "events_with_erased_text": leftover_text,
            "summaries": Summary.objects.filter(run__tenant_id=tenant_id, run__subject=subject_id).count(),
            "redis_session_windows": len(self._session_keys(tenant_id, subject_id)),
            "artifacts": sum(1 for path in self._artifact_paths(tenant_id, subject_id) if path.exists()),
        }
