"""Writing long-term memory: remember, supersede, invalidate. Every write runs in its tenant's scope.

A claim keeps where it came from (provenance). What may be kept, and what waits for a person or for
the subject's consent, is memory/policy.py's to say; this module writes what it admits. A new value
supersedes the current one; an unconfirmed inference expires. Memory written from user text is a
quoted claim, never an instruction: nothing here turns a value into behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.digests import canonical_json
from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.consent import (
    UNCONFIRMED,
    ClaimPending,
    ConsentRequired,
    consent_basis_of_statement,
    pending_error,
)
from memory.erasure import tombstoned_among
from memory.models import MemoryItem
from memory.poisoning.hold import ClaimHeld, claim_held_error, held_claim_build
from memory.poisoning.models import HeldClaim
from memory.policy import (
    SOURCE_TYPES,
    VALIDATION_METHODS,
    Admission,
    SensitiveInference,
    StateOfMindNotKept,
    claim_admit,
)

__all__ = [
    "SOURCE_TYPES",
    "VALIDATION_METHODS",
    "Claim",
    "ClaimErased",
    "ClaimHeld",
    "MemoryConflict",
    "SensitiveInference",
    "StateOfMindNotKept",
    "memory_invalidate",
    "memory_learn_from_events",
    "memory_purge_expired",
    "memory_remember",
    "memory_supersede",
    "memory_write_admitted",
]

logger = logging.getLogger(__name__)


class MemoryConflict(Conflict):
    code = "memory_conflict"


class ClaimErased(Conflict):
    code = "claim_erased"


@dataclass(frozen=True)
class Claim:
    """One claim about a subject, as memory_remember takes it (for writing many at once)."""

    namespace: str
    key: str
    value: Any
    provenance: dict[str, Any]
    confidence: float | None = None
    expires_at: Any = None
    consent_basis: str | None = None
    schema_version: int | None = None


def subject_check(subject_id: Any) -> None:
    if not isinstance(subject_id, str) or not 0 < len(subject_id) <= 200:
        raise InvalidInput("subject_id must be 1 to 200 characters", code="invalid_memory_scope")


def _expiry(provenance: dict[str, Any], expires_at: Any) -> Any:
    if expires_at is not None:
        return expires_at
    if (
        provenance["source_type"] == "model_inference"
        and provenance["validation_method"] != "explicit_user_confirmation"
    ):
        # An unconfirmed inference is a guess about a person: it fades on its own.
        return timezone.now() + timedelta(days=settings.KEEPER_INFERENCE_TTL_DAYS)
    return None


def claim_waiting(*, tenant: Tenant, subject_id: str, claim: Claim, admission: Admission) -> HeldClaim:
    """The held claim (not saved) of a claim the policy makes wait: for a person's review (the
    screen's signals), for the subject's confirmation (`unconfirmed`), or both."""
    return held_claim_build(
        tenant=tenant,
        subject_id=subject_id,
        namespace=claim.namespace,
        key=claim.key,
        value=claim.value,
        provenance=claim.provenance,
        signals=[*admission.poison, *([UNCONFIRMED] if admission.unconfirmed else [])],
        consent_basis=admission.consent_basis,
    )


def waiting_error(held: HeldClaim) -> ClaimHeld | ClaimPending:
    """What a write answers for a claim that now waits (202 either way)."""
    return pending_error(held) if held.signals == [UNCONFIRMED] else claim_held_error(held)


def _erased(claim: Claim, position: int) -> ClaimErased:
    return ClaimErased(
        f"{claim.namespace}/{claim.key} of this subject was erased at their request; it is not kept again",
        details={"position": position},
    )


def memory_remember(
    *,
    tenant: Tenant,
    subject_id: str,
    namespace: str,
    key: str,
    value: Any,
    provenance: dict[str, Any],
    confidence: float | None = None,
    expires_at: Any = None,
    consent_basis: str | None = None,
    schema_version: int | None = None,
    reviewed: bool = False,
) -> MemoryItem:
    """Keep a new claim. If a current one exists for the same key, the new one supersedes it.

    memory/policy.py decides first: a refused claim raises (SensitiveInference, StateOfMindNotKept,
    ConsentRequired, InvalidInput); one that looks like poisoning from a writer that is not an
    operator is held for review (ClaimHeld), one that needs the subject's consent waits for it
    (ClaimPending). `reviewed`: a person approved it from the review queue.
    """
    subject_check(subject_id)
    claim = Claim(namespace, key, value, provenance, confidence, expires_at, consent_basis, schema_version)
    admission = claim_admit(
        tenant=tenant,
        namespace=namespace,
        key=key,
        value=value,
        provenance=provenance,
        confidence=confidence,
        consent_basis=consent_basis,
        schema_version=schema_version,
        reviewed=reviewed,
    )
    if admission.waits:
        with tenant_scope(tenant.tenant_id):
            if tombstoned_among(
                tenant_id=tenant.tenant_id,
                subject_id=subject_id,
                claims=[(namespace, key, value, provenance)],
            ):  # not even held: what the person had erased stays erased
                raise _erased(claim, 0)
            held = claim_waiting(tenant=tenant, subject_id=subject_id, claim=claim, admission=admission)
            held.save()
        raise waiting_error(held)
    [(item, _)] = memory_write_admitted(tenant=tenant, subject_id=subject_id, claims=[(claim, admission)])
    return item


def memory_write_admitted(
    *,
    tenant: Tenant,
    subject_id: str,
    claims: Sequence[tuple[Claim, Admission]],
    tombstones_checked: bool = False,
) -> list[tuple[MemoryItem, bool]]:
    """Write claims the policy admitted (claim_admit said they need not wait), in one transaction
    and a fixed number of queries however many: (the item, whether it is new) for each, the current
    item when the same claim (value and provenance) is written again. A claim erased at the subject's
    request refuses the whole write (ClaimErased, details.position naming it); `tombstones_checked`:
    the caller asked tombstoned_among in this transaction already."""
    if len({(c.namespace, c.key) for c, _ in claims}) != len(claims):
        raise InvalidInput("a namespace/key is written twice in one write", code="invalid_memory_write")
    if not claims:
        return []
    with tenant_scope(tenant.tenant_id):
        erased = (
            []
            if tombstones_checked
            else tombstoned_among(
                tenant_id=tenant.tenant_id,
                subject_id=subject_id,
                claims=[(c.namespace, c.key, c.value, c.provenance) for c, _ in claims],
            )
        )
        if erased:
            raise _erased(claims[erased[0]][0], erased[0])
        current = {
            (m.namespace, m.key): m
            for m in MemoryItem.objects.select_for_update().filter(
                tenant=tenant,
                subject_id=subject_id,
                namespace__in={c.namespace for c, _ in claims},
                key__in={c.key for c, _ in claims},
                invalidated_at__isnull=True,
            )
        }
        now = timezone.now()
        written: list[tuple[MemoryItem, bool]] = []
        superseded: list[UUID] = []
        for claim, admission in claims:
            old = current.get((claim.namespace, claim.key))
            if (
                old is not None
                and canonical_json(old.value) == canonical_json(claim.value)
                and old.provenance == claim.provenance
            ):
                written.append((old, False))  # the same claim again: nothing new to keep
                continue
            if old is not None:
                superseded.append(old.pk)
            item = MemoryItem(
                tenant=tenant,
                subject_id=subject_id,
                namespace=claim.namespace,
                key=claim.key,
                value=claim.value,
                schema_version=admission.schema_version,
                provenance=claim.provenance,
                confidence=claim.confidence,
                valid_from=now,
                expires_at=_expiry(claim.provenance, claim.expires_at),
                supersedes=old,
                consent_basis=admission.consent_basis,
            )
            written.append((item, True))
        new = [item for item, fresh in written if fresh]
        if not new:
            return written
        if superseded:
            MemoryItem.objects.filter(pk__in=superseded).update(
                invalidated_at=now, invalidation_reason="superseded"
            )
        # If the broker is away, the next write or beat's projection sweep catches up.
        transaction.on_commit(
            lambda: task_send(name="workers.tasks.project_memory", args=[str(tenant.tenant_id)])
        )
        try:
            MemoryItem.objects.bulk_create(new)
        except IntegrityError:
            raise MemoryConflict(f"a claim of {subject_id} changed at the same moment; try again") from None
        return written


def memory_supersede(
    *,
    tenant: Tenant,
    memory_id: UUID,
    value: Any,
    provenance: dict[str, Any],
    confidence: float | None = None,
) -> MemoryItem:
    """A new value for exactly this claim; refused if the claim is no longer the current one."""
    with tenant_scope(tenant.tenant_id):
        old = MemoryItem.objects.filter(memory_id=memory_id).first()
        if old is None:
            raise NotFound(f"no memory item {memory_id}", code="memory_not_found")
        if old.invalidated_at is not None:
            raise MemoryConflict(f"memory item {memory_id} was already {old.invalidation_reason}")
        return memory_remember(
            tenant=tenant,
            subject_id=old.subject_id,
            namespace=old.namespace,
            key=old.key,
            value=value,
            provenance=provenance,
            confidence=confidence,
            consent_basis=old.consent_basis,
        )  # the new value is in the namespace's current schema version


def memory_invalidate(*, tenant: Tenant, memory_id: UUID, reason: str) -> MemoryItem:
    if not reason.strip():
        raise InvalidInput("invalidating a claim needs a reason", code="reason_required")
    with tenant_scope(tenant.tenant_id):
        updated = MemoryItem.objects.filter(memory_id=memory_id, invalidated_at__isnull=True).update(
            invalidated_at=timezone.now(), invalidation_reason=reason
        )
        item = MemoryItem.objects.filter(memory_id=memory_id).first()
        if item is None:
            raise NotFound(f"no memory item {memory_id}", code="memory_not_found")
        if not updated:
            raise MemoryConflict(f"memory item {memory_id} was already {item.invalidation_reason}")
        return item


def memory_purge_expired() -> int:
    """Delete claims past their expiry (reads stop returning them at once; this frees the rows)."""
    purged = 0
    for tenant_id in Tenant.objects.values_list("tenant_id", flat=True):
        with tenant_scope(tenant_id):
            expired = MemoryItem.objects.filter(expires_at__lt=timezone.now())
            MemoryItem.objects.filter(supersedes__in=expired).update(supersedes=None)
            purged += expired.delete()[1].get("memory.MemoryItem", 0)
    from memory.consent import pending_purge_expired

    return purged + pending_purge_expired()


def memory_learn_from_events(
    *, tenant: Tenant, subject_id: str, run_id: str, events: list[dict[str, Any]]
) -> dict[str, int]:
    """Keep the facts a conversation states about its subject (preference, profile, constraint).

    Only the user's own statements are evidence; each claim keeps the run and event it came from.
    Claims erased at the person's request are not brought back; sensitive inferences are skipped.
    """
    from memory.extraction import extractor_from_settings

    counts = {"kept": 0, "unchanged": 0, "erased": 0, "refused": 0, "held": 0, "pending": 0}
    started = timezone.now()
    # The whole message a fact came from: "remember ..." anywhere in it makes the basis explicit.
    said = {
        e.get("seq"): str((e.get("payload") or {}).get("content", ""))
        for e in events
        if e.get("event_type") == "user_message"
    }
    for fact in extractor_from_settings().extract(events):
        try:
            item = memory_remember(
                tenant=tenant,
                subject_id=subject_id,
                namespace=fact.namespace,
                key=fact.key,
                value=fact.value,
                provenance=fact.provenance(run_id),
                confidence=fact.confidence,
                consent_basis=consent_basis_of_statement(
                    said.get(fact.source_seq, fact.text), explicit=fact.explicit
                ),
            )
        except ClaimPending:
            counts["pending"] += 1
            continue
        except ClaimErased:
            counts["erased"] += 1
            continue
        except (SensitiveInference, ConsentRequired):
            counts["refused"] += 1
            continue
        except ClaimHeld:
            counts["held"] += 1
            continue
        counts["kept" if item.created_at >= started else "unchanged"] += 1  # the same claim again is not new
    return counts
