"""Confirming an inferred claim that waits for consent: the subject's (API) or a person's word
makes it memory with an explicit basis (the queue itself is in memory/consent.py)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.utils import timezone

from core.errors import Conflict, NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.consent import pending_expiry_cutoff
from memory.poisoning.models import UNCONFIRMED, HeldClaim, HeldStatus
from memory.services import memory_remember


def pending_confirm(*, tenant: Tenant, pending_id: UUID, actor: str, subject_id: str | None = None) -> Any:
    """The subject (or a person for them) confirms an inferred claim: it becomes memory with an
    explicit basis and explicit_user_confirmation as its validation. Returns the memory item."""
    with tenant_scope(tenant.tenant_id):
        held = HeldClaim.objects.select_for_update().filter(held_id=pending_id).first()
        # Only a claim that waits for consent alone: one the screen held is a person's to review.
        if held is None or held.signals != [UNCONFIRMED] or (subject_id and held.subject_id != subject_id):
            raise NotFound(f"no claim {pending_id} waiting for confirmation", code="pending_claim_not_found")
        if held.status != HeldStatus.HELD:
            raise Conflict(f"this claim was already {held.status}", code="pending_claim_decided")
        if held.created_at < pending_expiry_cutoff():
            raise Conflict("this claim waited too long and expired", code="pending_claim_expired")
        item = memory_remember(
            tenant=tenant,
            subject_id=held.subject_id,
            namespace=held.namespace,
            key=held.key,
            value=held.value,
            provenance={**held.provenance, "validation_method": "explicit_user_confirmation"},
            consent_basis="explicit",
            reviewed=True,
        )
        HeldClaim.objects.filter(pk=held.pk).update(
            status=HeldStatus.APPROVED,
            decided_by=actor,
            decided_at=timezone.now(),
            decision_note="confirmed by the subject",
            memory_id=item.memory_id,
        )
        return item
