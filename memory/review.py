"""The review queue of held claims: approve (it becomes memory), reject, and roll back one source.

Rolling back a source invalidates every current memory item whose provenance names it and rejects
every claim of it still held: one planted source is undone at once, whatever subjects it touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import MemoryItem
from memory.poisoning.models import UNCONFIRMED, HeldClaim, HeldStatus
from memory.services import memory_remember


def _held(held_id: UUID) -> HeldClaim:
    found = HeldClaim.objects.select_for_update().filter(held_id=held_id).first()
    if found is None:
        raise NotFound(f"no held claim {held_id}", code="held_claim_not_found")
    if found.status != HeldStatus.HELD:
        raise Conflict(f"this claim was already {found.status}", code="held_claim_decided")
    return found


def held_claim_approve(*, tenant: Tenant, held_id: UUID, actor: str, note: str) -> HeldClaim:
    """A person read it and it is a fact: keep it as memory (with its own provenance)."""
    with tenant_scope(tenant.tenant_id):
        held = _held(held_id)
        # A claim that waited for the subject's consent: the person approving it confirms it for them.
        confirmed = UNCONFIRMED in held.signals
        item = memory_remember(
            tenant=tenant,
            subject_id=held.subject_id,
            namespace=held.namespace,
            key=held.key,
            value=held.value,
            provenance=(
                {**held.provenance, "validation_method": "explicit_user_confirmation"}
                if confirmed
                else held.provenance
            ),
            consent_basis="explicit" if confirmed else held.consent_basis,
            reviewed=True,
        )
        HeldClaim.objects.filter(pk=held.pk).update(
            status=HeldStatus.APPROVED,
            decided_by=actor,
            decided_at=timezone.now(),
            decision_note=note,
            memory_id=item.memory_id,
        )
        return HeldClaim.objects.get(pk=held.pk)


def held_claim_reject(*, tenant: Tenant, held_id: UUID, actor: str, note: str) -> HeldClaim:
    with tenant_scope(tenant.tenant_id):
        held = _held(held_id)
        HeldClaim.objects.filter(pk=held.pk).update(
            status=HeldStatus.REJECTED, decided_by=actor, decided_at=timezone.now(), decision_note=note
        )
        return HeldClaim.objects.get(pk=held.pk)


@dataclass(frozen=True)
class Rollback:
    source: str
    items_invalidated: int
    held_rejected: int


def source_rollback(*, tenant: Tenant, source: str, actor: str, note: str) -> Rollback:
    """Invalidate every current claim from `source` (provenance.source_id) and reject its held ones."""
    if not isinstance(source, str) or not 0 < len(source) <= 500:
        raise InvalidInput("a source is 1 to 500 characters", code="invalid_source")
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        items = MemoryItem.objects.filter(invalidated_at__isnull=True, provenance__source_id=source).update(
            invalidated_at=now, invalidation_reason="rolled_back"
        )
        held = HeldClaim.objects.filter(source=source, status=HeldStatus.HELD).update(
            status=HeldStatus.REJECTED,
            decided_by=actor,
            decided_at=now,
            decision_note=f"rolled back with its source: {note}"[:2000],
        )
    return Rollback(source=source, items_invalidated=items, held_rejected=held)
