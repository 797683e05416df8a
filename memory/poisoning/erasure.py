"""Held claims are a subject's data too: registered as places of erasure, deleted with the subject."""

from __future__ import annotations

from uuid import UUID

from core.erasure import MIN_VALUE_CHARS, Scope, column_place, eraser_register, free_register, place_register
from core.tenancy import tenant_scope
from memory.poisoning.models import HeldClaim


class HeldClaimsEraser:
    name = "memory_held"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        with tenant_scope(tenant_id):
            values = {
                text
                for value in HeldClaim.objects.filter(subject_id=subject_id).values_list("value", flat=True)
                for text in ([value] if isinstance(value, str) else [])
                if len(text) >= MIN_VALUE_CHARS
            }
        return Scope(tenant_id=tenant_id, subject_id=subject_id, values=tuple(sorted(values)))

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        with tenant_scope(scope.tenant_id):
            deleted, _ = HeldClaim.objects.filter(subject_id=scope.subject_id).delete()
        return {"held_claims": deleted}


def register() -> None:
    """Called from MemoryConfig.ready."""
    eraser_register(HeldClaimsEraser())
    for column, kind in (
        ("subject_id", "text"),
        ("namespace", "text"),
        ("key", "text"),
        ("value", "json"),
        ("provenance", "json"),
        ("source", "text"),
        ("decision_note", "text"),
    ):
        place_register(
            column_place(
                table="memory_held_claims",
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by="memory_held",
                mine_sql="t.subject_id = %(subject)s",
                owner_sql="t.subject_id",
                what=f"memory_held_claims.{column} (deleted)",
            )
        )
    free_register(
        "memory_held_claims",
        "the screen's verdict: trust level, status, signal kinds, the consent basis named and the "
        "staff user who decided",
        "trust",
        "consent_basis",
        "status",
        "signals",
        "decided_by",
    )
