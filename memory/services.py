"""Writing long-term memory: remember, supersede, invalidate. Every write runs in its tenant's scope.

A claim keeps where it came from (provenance). A model's inference about a sensitive trait (mood,
health...) is refused unless the person confirmed it; an explicit user statement may live long;
an unconfirmed inference expires. Memory written from user text is a quoted claim, never an
instruction: nothing here turns a value into behaviour.
"""

from __future__ import annotations

import logging
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
    ClaimPending,
    consent_basis_of_statement,
    consent_check,
    consent_default,
    pending_hold,
)
from memory.item_schema import item_schema_current
from memory.models import PROVENANCE_KEYS, MemoryItem
from memory.poisoning.hold import ClaimHeld, claim_held_error, claim_hold_if_poisoned
from memory.sensitive import SENSITIVE_TERMS
from memory.tombstones import tombstoned

SOURCE_TYPES = ("user_statement", "tool_result", "model_inference", "operator", "import")
VALIDATION_METHODS = (
    "explicit_user_confirmation",
    "user_statement",
    "tool_verified",
    "operator_entered",
    "unvalidated",
)


logger = logging.getLogger(__name__)


class SensitiveInference(InvalidInput):
    code = "sensitive_inference_refused"


class MemoryConflict(Conflict):
    code = "memory_conflict"


class ClaimErased(Conflict):
    code = "claim_erased"


def _validate(
    *, namespace: str, key: str, value: Any, provenance: dict[str, Any], confidence: float | None
) -> None:
    for name, text in (("namespace", namespace), ("key", key)):
        if not isinstance(text, str) or not 0 < len(text) <= 200:
            raise InvalidInput(f"{name} must be 1 to 200 characters", code="invalid_memory_scope")
    canonical_json(value)  # plain JSON, storable
    if not isinstance(provenance, dict) or sorted(set(PROVENANCE_KEYS) - set(provenance)):
        missing = sorted(set(PROVENANCE_KEYS) - set(provenance or {}))
        raise InvalidInput(
            f"provenance needs {', '.join(PROVENANCE_KEYS)} (missing {', '.join(missing)})",
            code="invalid_provenance",
        )
    if provenance["source_type"] not in SOURCE_TYPES:
        raise InvalidInput(
            f"provenance.source_type must be one of {', '.join(SOURCE_TYPES)}", code="invalid_provenance"
        )
    if provenance["validation_method"] not in VALIDATION_METHODS:
        raise InvalidInput(
            f"provenance.validation_method must be one of {', '.join(VALIDATION_METHODS)}",
            code="invalid_provenance",
        )
    if not isinstance(provenance["source_id"], str) or not provenance["source_id"]:
        raise InvalidInput("provenance.source_id must name the source", code="invalid_provenance")
    seq = provenance["event_seq"]
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63):
        raise InvalidInput(
            "provenance.event_seq must be a whole number from 0 (an event's seq) or null",
            code="invalid_provenance",
        )
    for name in ("source_version", "run_id"):
        given = provenance[name]
        if given is not None and (not isinstance(given, str) or len(given) > 200):
            raise InvalidInput(
                f"provenance.{name} must be text of at most 200 characters or null", code="invalid_provenance"
            )
    if confidence is not None and not 0 <= confidence <= 1:
        raise InvalidInput("confidence must be between 0 and 1", code="invalid_confidence")
    about = f"{namespace} {key}".lower()
    if (
        provenance["source_type"] == "model_inference"
        and any(t in about for t in SENSITIVE_TERMS)
        and provenance["validation_method"] != "explicit_user_confirmation"
    ):
        raise SensitiveInference(
            f"a model's inference about {namespace}/{key} is not kept without the person's explicit confirmation"
        )


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

    A claim that looks like poisoning (an instruction, a permission change, a policy override,
    hidden text) from a source that is not an operator is held for review instead (ClaimHeld);
    `reviewed`: a person approved it from the review queue.
    """
    if not isinstance(subject_id, str) or not 0 < len(subject_id) <= 200:
        raise InvalidInput("subject_id must be 1 to 200 characters", code="invalid_memory_scope")
    _validate(namespace=namespace, key=key, value=value, provenance=provenance, confidence=confidence)
    consent_basis = consent_basis or consent_default(provenance)
    # A new value is written in its namespace's current schema version (memory/item_schema.py).
    schema_version = schema_version or item_schema_current(namespace)
    if not reviewed:
        with tenant_scope(tenant.tenant_id):
            held = claim_hold_if_poisoned(
                tenant=tenant,
                subject_id=subject_id,
                namespace=namespace,
                key=key,
                value=value,
                provenance=provenance,
            )
        if held is not None:
            raise claim_held_error(held)
        if not consent_check(tenant=tenant, namespace=namespace, consent_basis=consent_basis):
            with tenant_scope(tenant.tenant_id):
                pending = pending_hold(
                    tenant=tenant,
                    subject_id=subject_id,
                    namespace=namespace,
                    key=key,
                    value=value,
                    provenance=provenance,
                )
            raise pending
    with tenant_scope(tenant.tenant_id):
        if tombstoned(
            tenant_id=tenant.tenant_id,
            subject_id=subject_id,
            namespace=namespace,
            key=key,
            value=value,
            provenance=provenance,
        ):
            raise ClaimErased(
                f"{namespace}/{key} of this subject was erased at their request; it is not kept again"
            )
        current = (
            MemoryItem.objects.select_for_update()
            .filter(
                tenant=tenant,
                subject_id=subject_id,
                namespace=namespace,
                key=key,
                invalidated_at__isnull=True,
            )
            .first()
        )
        now = timezone.now()
        if current is not None:
            if canonical_json(current.value) == canonical_json(value) and current.provenance == provenance:
                return current  # the same claim again: nothing new to keep
            MemoryItem.objects.filter(pk=current.pk).update(
                invalidated_at=now, invalidation_reason="superseded"
            )
        # If the broker is away, the next write or beat's projection sweep catches up.
        transaction.on_commit(
            lambda: task_send(name="workers.tasks.project_memory", args=[str(tenant.tenant_id)])
        )
        try:
            return MemoryItem.objects.create(
                tenant=tenant,
                subject_id=subject_id,
                namespace=namespace,
                key=key,
                value=value,
                schema_version=schema_version,
                provenance=provenance,
                confidence=confidence,
                valid_from=now,
                expires_at=_expiry(provenance, expires_at),
                supersedes=current,
                consent_basis=consent_basis,
            )
        except IntegrityError:
            raise MemoryConflict(
                f"{namespace}/{key} of {subject_id} changed at the same moment; try again"
            ) from None


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
        except SensitiveInference:
            counts["refused"] += 1
            continue
        except ClaimHeld:
            counts["held"] += 1
            continue
        counts["kept" if item.created_at >= started else "unchanged"] += 1  # the same claim again is not new
    return counts
