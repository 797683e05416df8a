"""Claims the poisoning screen held for review: the subject's, deleted with them."""

from __future__ import annotations

from uuid import UUID

from core.tenancy import tenant_scope
from erasure.matching import MIN_VALUE_CHARS, Scope
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from memory.poisoning.models import HeldClaim


class HeldClaimsEraser(Eraser):
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

    def places(self) -> list[Place]:
        return [
            column_place(
                table="memory_held_claims",
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                mine_sql="t.subject_id = %(subject)s",
                owner_sql="t.subject_id",
                what=f"memory_held_claims.{column} (deleted)",
            )
            for column, kind in (
                ("subject_id", "text"),
                ("namespace", "text"),
                ("key", "text"),
                ("value", "json"),
                ("provenance", "json"),
                ("source", "text"),
                ("decision_note", "text"),
            )
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "memory_held_claims",
                "the screen's verdict: trust level, status, signal kinds, the consent basis named and the "
                "staff user who decided",
                "trust",
                "consent_basis",
                "status",
                "signals",
                "decided_by",
            )
        ]
