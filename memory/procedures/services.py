"""Procedural memory's writes: learn a turn's procedure, a person's decisions, invalidation, erasure.

Every query names the tenant in its own WHERE beside row-level security.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.procedures.models import Procedure, ProcedureSource, ProcedureStatus
from memory.procedures.shapes import MAX_STEPS, steps_digest, steps_name, trigger_clean

logger = logging.getLogger(__name__)

MAX_NAME = 200


@dataclass(frozen=True)
class ProcedureTurn:
    """One turn of a run that solved a request: its words and the ordered tool calls' shapes."""

    run_id: UUID
    request_seq: int
    reply_seq: int
    subject_id: str
    words: list[str]
    steps: list[dict[str, Any]]


@dataclass
class Learned:
    proposed: int = 0  # new procedures, waiting for a person
    added: int = 0  # a new run of a known shape
    unchanged: int = 0  # this turn was learned before
    procedure_ids: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "proposed": self.proposed,
            "added": self.added,
            "unchanged": self.unchanged,
            "procedure_ids": self.procedure_ids,
        }


def _learn_one(tenant: Tenant, workflow_name: str, turn: ProcedureTurn, learned: Learned) -> None:
    steps = turn.steps[:MAX_STEPS]
    digest = steps_digest(workflow_name=workflow_name, steps=steps)
    procedure, created = Procedure.objects.select_for_update().get_or_create(
        tenant=tenant,
        workflow_name=workflow_name,
        shape_digest=digest,
        defaults={"name": steps_name(steps, turn.words)[:MAX_NAME], "trigger": turn.words, "steps": steps},
    )
    if procedure.procedure_id and str(procedure.procedure_id) not in learned.procedure_ids:
        learned.procedure_ids.append(str(procedure.procedure_id))
    _, new_source = ProcedureSource.objects.get_or_create(
        tenant=tenant,
        procedure=procedure,
        run_id=turn.run_id,
        request_seq=turn.request_seq,
        defaults={"reply_seq": turn.reply_seq, "subject_id": turn.subject_id},
    )
    if created:
        learned.proposed += 1
        return
    if not new_source:
        learned.unchanged += 1
        return
    learned.added += 1
    changes: dict[str, Any] = {}
    if procedure.status == ProcedureStatus.PROPOSED and not procedure.decided_by:
        # Undecided and unedited: the kind of request is what the runs' requests share.
        shared = [w for w in procedure.trigger if w in turn.words]
        if shared and shared != procedure.trigger:
            changes["trigger"] = shared
            changes["name"] = steps_name(procedure.steps, shared)[:MAX_NAME]
    if procedure.invalidated_at is not None:
        # A new run did it again: it comes back, but a person looks at it again before it is used.
        changes.update(invalidated_at=None, invalidation_reason="")
        if procedure.status == ProcedureStatus.CONFIRMED:
            changes["status"] = ProcedureStatus.PROPOSED
    if changes:
        Procedure.objects.filter(tenant=tenant, procedure_id=procedure.procedure_id).update(
            **changes, updated_at=timezone.now()
        )


def procedure_learn(*, tenant: Tenant, workflow_name: str, turns: Sequence[ProcedureTurn]) -> Learned:
    """Keep each turn as a source of the procedure of its shape (a new one is proposed)."""
    learned = Learned()
    for turn in turns:
        if not turn.steps:
            continue
        for attempt in range(2):
            try:
                with tenant_scope(tenant.tenant_id), transaction.atomic():
                    _learn_one(tenant, workflow_name, turn, learned)
                break
            except IntegrityError:  # another worker kept the same shape or turn first: read theirs
                if attempt:
                    raise
    return learned


def _locked(tenant: Tenant, procedure_id: UUID) -> Procedure:
    found = Procedure.objects.select_for_update().filter(tenant=tenant, procedure_id=procedure_id).first()
    if found is None:
        raise NotFound(f"no procedure {procedure_id}", code="procedure_not_found")
    return found


def _note(note: str) -> str:
    if not isinstance(note, str) or len(note) > 2000:
        raise InvalidInput("a note is a text of at most 2000 characters", code="invalid_note")
    return note


def procedure_confirm(*, tenant: Tenant, procedure_id: UUID, actor: str, note: str = "") -> Procedure:
    """A person read the steps and says they are how this kind of request is done: offer it."""
    note = _note(note)
    with tenant_scope(tenant.tenant_id):
        procedure = _locked(tenant, procedure_id)
        if procedure.invalidated_at is not None:
            raise Conflict(
                f"this procedure was invalidated: {procedure.invalidation_reason}",
                code="procedure_invalidated",
            )
        if not procedure.trigger:
            raise Conflict(
                "this procedure has no trigger words: edit it first, so it matches a kind of request",
                code="procedure_without_trigger",
            )
        Procedure.objects.filter(tenant=tenant, procedure_id=procedure_id).update(
            status=ProcedureStatus.CONFIRMED,
            decided_by=actor,
            decided_at=timezone.now(),
            decision_note=note,
            updated_at=timezone.now(),
        )
        return Procedure.objects.get(tenant=tenant, procedure_id=procedure_id)


def procedure_reject(*, tenant: Tenant, procedure_id: UUID, actor: str, note: str = "") -> Procedure:
    note = _note(note)
    with tenant_scope(tenant.tenant_id):
        _locked(tenant, procedure_id)
        Procedure.objects.filter(tenant=tenant, procedure_id=procedure_id).update(
            status=ProcedureStatus.REJECTED,
            decided_by=actor,
            decided_at=timezone.now(),
            decision_note=note,
            updated_at=timezone.now(),
        )
        return Procedure.objects.get(tenant=tenant, procedure_id=procedure_id)


def procedure_edit(
    *,
    tenant: Tenant,
    procedure_id: UUID,
    actor: str,
    name: str | None = None,
    trigger: Any = None,
    note: str = "",
) -> Procedure:
    """A person renames it or says which requests it is for; its steps stay what the runs did. A new
    version, with the same status (an edit of a confirmed procedure is that person's decision too)."""
    note = _note(note)
    changes: dict[str, Any] = {}
    if name is not None:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise InvalidInput(f"a name is 1 to {MAX_NAME} characters", code="invalid_procedure_name")
        changes["name"] = name.strip()
    if trigger is not None:
        try:
            changes["trigger"] = trigger_clean(trigger)
        except ValueError as exc:
            raise InvalidInput(str(exc), code="invalid_procedure_trigger") from None
    if not changes:
        raise InvalidInput("an edit changes the name, the trigger or both", code="empty_procedure_edit")
    with tenant_scope(tenant.tenant_id):
        procedure = _locked(tenant, procedure_id)
        Procedure.objects.filter(tenant=tenant, procedure_id=procedure_id).update(
            **changes,
            version=procedure.version + 1,
            decided_by=actor,
            decided_at=timezone.now(),
            decision_note=note or procedure.decision_note,
            updated_at=timezone.now(),
        )
        return Procedure.objects.get(tenant=tenant, procedure_id=procedure_id)


@dataclass(frozen=True)
class SourceChanged:
    source_id: UUID
    code: str
    detail: str


def procedure_sources_changed(*, tenant: Tenant, changes: Sequence[SourceChanged]) -> int:
    """Mark these sources as no longer holding; a procedure with no source left that holds is
    invalidated with the reason of its last one. Returns how many procedures were invalidated."""
    if not changes:
        return 0
    now = timezone.now()
    invalidated = 0
    with tenant_scope(tenant.tenant_id):
        for change in changes:
            ProcedureSource.objects.filter(
                tenant=tenant, source_id=change.source_id, invalidated_at__isnull=True
            ).update(invalidated_at=now, invalidation_reason=f"{change.code}: {change.detail}")
        touched = set(
            ProcedureSource.objects.filter(
                tenant=tenant, source_id__in=[c.source_id for c in changes]
            ).values_list("procedure_id", flat=True)
        )
        for procedure_id in touched:
            if ProcedureSource.objects.filter(
                tenant=tenant, procedure_id=procedure_id, invalidated_at__isnull=True
            ).exists():
                continue
            last = (
                ProcedureSource.objects.filter(tenant=tenant, procedure_id=procedure_id)
                .order_by("-invalidated_at")
                .values_list("invalidation_reason", flat=True)
                .first()
            )
            invalidated += Procedure.objects.filter(
                tenant=tenant, procedure_id=procedure_id, invalidated_at__isnull=True
            ).update(invalidated_at=now, invalidation_reason=last or "source_changed", updated_at=now)
    if invalidated:
        logger.info("procedures invalidated: %d (their source runs changed)", invalidated)
    return invalidated


def procedures_erase_subject(*, tenant_id: UUID, subject_id: str) -> dict[str, int]:
    """The subject's runs stop being sources; a procedure learned only from them is deleted."""
    with tenant_scope(tenant_id):
        theirs = set(
            ProcedureSource.objects.filter(tenant_id=tenant_id, subject_id=subject_id).values_list(
                "procedure_id", flat=True
            )
        )
        sources, _ = ProcedureSource.objects.filter(tenant_id=tenant_id, subject_id=subject_id).delete()
        orphans = Procedure.objects.filter(tenant_id=tenant_id, procedure_id__in=theirs).exclude(
            procedure_id__in=ProcedureSource.objects.filter(tenant_id=tenant_id).values("procedure_id")
        )
        deleted, by_model = orphans.delete()
    return {"procedure_sources": sources, "procedures": by_model.get("memory.Procedure", 0)}
