"""Procedural memory's reads, each naming the tenant in its own WHERE beside row-level security."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.procedures.models import Procedure, ProcedureSource, ProcedureStatus

MATCH_CANDIDATES = 200  # confirmed procedures of one workflow read to find the best match
MIN_OVERLAP = 0.5  # at least half the trigger's words are in the request


def procedure_list(
    *, tenant: Tenant, status: str | None = None, invalidated: bool | None = None, limit: int = 100
) -> list[Procedure]:
    with tenant_scope(tenant.tenant_id):
        rows = Procedure.objects.filter(tenant=tenant)
        if status is not None:
            rows = rows.filter(status=status)
        if invalidated is not None:
            rows = rows.filter(invalidated_at__isnull=not invalidated)
        return list(rows.order_by("-updated_at")[:limit])


def procedure_get(*, tenant: Tenant, procedure_id: UUID) -> Procedure | None:
    with tenant_scope(tenant.tenant_id):
        return Procedure.objects.filter(tenant=tenant, procedure_id=procedure_id).first()


def procedure_sources(*, tenant: Tenant, procedure_ids: Sequence[UUID]) -> list[ProcedureSource]:
    with tenant_scope(tenant.tenant_id):
        return list(
            ProcedureSource.objects.filter(tenant=tenant, procedure_id__in=list(procedure_ids)).order_by(
                "created_at"
            )
        )


def procedure_sources_current(*, tenant: Tenant, after: UUID | None, limit: int) -> list[ProcedureSource]:
    """A page of the sources that still hold, for the beat's sweep (by id)."""
    with tenant_scope(tenant.tenant_id):
        rows = ProcedureSource.objects.filter(tenant=tenant, invalidated_at__isnull=True)
        if after is not None:
            rows = rows.filter(source_id__gt=after)
        return list(rows.order_by("source_id")[:limit])


def procedure_match(*, tenant: Tenant, workflow_name: str, words: Sequence[str]) -> Procedure | None:
    """The confirmed, current procedure of this workflow whose trigger the request's words cover best
    (at least half its words; ties to the one with more sources, then the newest)."""
    wanted = set(words)
    if not wanted:
        return None
    with tenant_scope(tenant.tenant_id):
        candidates = list(
            Procedure.objects.filter(
                tenant=tenant,
                workflow_name=workflow_name,
                status=ProcedureStatus.CONFIRMED,
                invalidated_at__isnull=True,
            ).order_by("-updated_at")[:MATCH_CANDIDATES]
        )
        sources: dict[UUID, int] = {}
        for procedure_id in ProcedureSource.objects.filter(
            tenant=tenant, procedure_id__in=[p.procedure_id for p in candidates], invalidated_at__isnull=True
        ).values_list("procedure_id", flat=True):
            sources[procedure_id] = sources.get(procedure_id, 0) + 1
    best: tuple[float, int, int] | None = None
    chosen = None
    for rank, procedure in enumerate(candidates):
        trigger = set(procedure.trigger or [])
        if not trigger:
            continue
        overlap = len(trigger & wanted) / len(trigger)
        if overlap < MIN_OVERLAP:
            continue
        key = (overlap, sources.get(procedure.procedure_id, 0), -rank)
        if best is None or key > best:
            best, chosen = key, procedure
    return chosen
