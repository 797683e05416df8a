"""The subject's memory: claims, their vectors and full-text postings, deleted last and tombstoned.

It runs only once nothing else holds the subject's data: a failed erasure keeps the facts the other
stores are searched for, so a retry searches for them again (deleting them first would let a retry
certify clean a copy the first attempt could not erase).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from core.digests import strings_in
from core.tenancy import tenant_scope
from erasure.matching import CODE, FREE_TEXT_MIN_CHARS, MIN_VALUE_CHARS, Scope
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from memory.models import MemoryItem, MemoryVector, Tombstone
from memory.tombstones import claim_digest, source_digest


def _texts(value: Any) -> list[str]:
    """The strings inside an erased value, to search the other stores for: a plain value whole (a
    fact kept about the person: 王芳, Ada; not a two- or three-letter code), and inside a structured
    one every string, keys too ({"Zofia": "sister"}), but machine codes (an episode's
    {"workflow": "conversation"} names no one)."""
    if isinstance(value, str):  # a short code ("ok", "en") is an answer or a setting, not a name
        short_code = len(value) < FREE_TEXT_MIN_CHARS and CODE.fullmatch(value) is not None
        return [value] if len(value) >= MIN_VALUE_CHARS and not short_code else []
    return [t for t in strings_in(value, keys=True) if len(t) >= MIN_VALUE_CHARS and not CODE.fullmatch(t)]


class MemoryEraser(Eraser):
    name = "memory"
    last = True

    def count_key(self, key: str) -> str:
        return key  # the receipt's first counts, named as they always were: memory_items, tombstones...

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        with tenant_scope(tenant_id):
            items = MemoryItem.objects.filter(subject_id=subject_id).values_list("value", flat=True)
            values = {v for value in items for v in _texts(value)}
        return Scope(tenant_id=tenant_id, subject_id=subject_id, values=tuple(sorted(values)))

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        """Delete the subject's claims and vectors, each claim (and its source) tombstoned first."""
        subject = scope.subject_id
        with tenant_scope(scope.tenant_id):
            for item in MemoryItem.objects.filter(subject_id=subject).order_by("created_at"):
                digests = [
                    (
                        "claim",
                        claim_digest(
                            subject_id=subject, namespace=item.namespace, key=item.key, value=item.value
                        ),
                    )
                ]
                if item.provenance.get("run_id") is not None:  # a claim with no run has no source to refuse
                    digests.append(
                        (
                            "source",
                            source_digest(
                                subject_id=subject,
                                run_id=item.provenance.get("run_id"),
                                event_seq=item.provenance.get("event_seq"),
                            ),
                        )
                    )
                for kind, digest in digests:
                    Tombstone.objects.get_or_create(
                        tenant_id=scope.tenant_id,
                        kind=kind,
                        digest=digest,
                        defaults={"subject_digest": subject_digest, "request_id": request_id},
                    )
            vectors, _ = MemoryVector.objects.filter(memory__subject_id=subject).delete()
            MemoryItem.objects.filter(subject_id=subject).update(supersedes=None)  # the chain goes with them
            deleted_items, _ = MemoryItem.objects.filter(subject_id=subject).delete()
            return {
                "memory_items": deleted_items,
                "memory_vectors": vectors,
                "tombstones": Tombstone.objects.filter(request_id=request_id).count(),
            }

    def places(self) -> list[Place]:
        tenant, mine, owner = "t.tenant_id = %(tenant)s", "t.subject_id = %(subject)s", "t.subject_id"
        found = [
            column_place(
                table="memory_items",
                column=column,
                kind=kind,
                tenant_sql=tenant,
                erased_by=self.name,
                mine_sql=mine,
                owner_sql=owner,
                what=f"memory_items.{column} (deleted)",
            )
            for column, kind in (
                ("subject_id", "text"),
                ("namespace", "text"),
                ("key", "text"),
                ("value", "json"),
                ("provenance", "json"),
                ("invalidation_reason", "text"),
                ("consent_basis", "text"),
            )
        ]
        # The full-text postings hold the words of the subject's claims and their id; they are deleted
        # with the claims (the foreign key cascades), and the scan checks that none is left.
        found += [
            column_place(
                table="memory_postings",
                column=column,
                kind="text",
                tenant_sql=tenant,
                erased_by=self.name,
                mine_sql=mine,
                owner_sql=owner,
                what=f"memory_postings.{column} (deleted with the claims)",
            )
            for column in ("term", "subject_id")
        ]
        return found

    def free(self) -> list[Free]:
        return [
            free(
                "memory_vectors",
                "the embedder's name and the digest of the embedded text",
                "embedder_key",
                "content_digest",
            ),
            free("memory_tombstones", "digests and their kind", "subject_digest", "kind", "digest"),
        ]
