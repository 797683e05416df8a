"""A claim follows its source: when the event it came from was redacted or rewound away, the fork it
was said in was abandoned, or the retrieval document it was read from changed, the claim is
invalidated with the reason (as retrieval chunks go stale when their document changes).

Memory keeps run ids and document ids by value and never reads runs or retrieval: the caller
(runs/conversations/memory_sources.py) finds what changed; this module writes it down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.models import MemoryItem

logger = logging.getLogger(__name__)

# The reason codes an invalidation for a changed source starts with ("<code>: <detail>").
SOURCE_REDACTED = "source_redacted"
SOURCE_REWOUND = "source_rewound"
SOURCE_FORK_ABANDONED = "source_fork_abandoned"
SOURCE_DOCUMENT_CHANGED = "source_document_changed"
SOURCE_DOCUMENT_DELETED = "source_document_deleted"
SOURCE_CODES = (
    SOURCE_REDACTED,
    SOURCE_REWOUND,
    SOURCE_FORK_ABANDONED,
    SOURCE_DOCUMENT_CHANGED,
    SOURCE_DOCUMENT_DELETED,
)


@dataclass(frozen=True)
class SourceChange:
    """Why a claim's source no longer supports it: a code of SOURCE_CODES and what happened."""

    memory_id: UUID
    code: str
    detail: str

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}"[:500]


def memory_sources_changed(
    *, tenant: Tenant, changes: list[SourceChange], restore: dict[UUID, MemoryItem] | None = None
) -> int:
    """Invalidate the claims whose source changed (those still current), each with its reason.
    `restore`: for a claim, the claim it had superseded, whose own source still holds: that one is
    kept again, as a new claim superseding the invalidated one (its value and provenance, the same
    consent basis). Returns how many claims were invalidated."""
    restore = restore or {}
    invalidated = 0
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        for change in changes:
            done = MemoryItem.objects.filter(
                tenant_id=tenant.tenant_id, memory_id=change.memory_id, invalidated_at__isnull=True
            ).update(invalidated_at=now, invalidation_reason=change.reason)
            invalidated += done
            previous = restore.get(change.memory_id)
            if (
                not done
                or previous is None
                or (previous.expires_at is not None and previous.expires_at <= now)
            ):
                continue
            MemoryItem.objects.create(
                tenant_id=tenant.tenant_id,
                subject_id=previous.subject_id,
                namespace=previous.namespace,
                key=previous.key,
                value=previous.value,
                schema_version=previous.schema_version,
                provenance=previous.provenance,
                confidence=previous.confidence,
                valid_from=now,
                expires_at=previous.expires_at,
                supersedes_id=change.memory_id,
                consent_basis=previous.consent_basis,
            )
        if invalidated:
            transaction.on_commit(
                lambda: task_send(name="workers.tasks.project_memory", args=[str(tenant.tenant_id)])
            )
    if invalidated:
        codes = sorted({c.code for c in changes})
        logger.info(
            "memory: %s claim(s) invalidated, their sources changed (%s)", invalidated, ", ".join(codes)
        )
    return invalidated
