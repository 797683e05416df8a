"""Redispatch by id: resend the wake-ups of named runs through the sweep's path; no state changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

from core.errors import InvalidInput
from core.tenancy import run_tenant, tenant_of_call
from runs.engine.dispatch import run_enqueue
from runs.kernel.errors import RunNotFound
from runs.kernel.models import (
    AgentRun,
)


@dataclass(frozen=True)
class Redispatch:
    run_ids: list[UUID]
    sent: int
    dry_run: bool


@tenant_of_call
def runs_for_redispatch(*, run_ids: Sequence[str], tenant_id: UUID | None = None) -> list[UUID]:
    """The runs named by the operator; an id that is not a run (of this tenant) is an error."""
    wanted: list[UUID] = []
    for raw in run_ids:
        try:
            wanted.append(UUID(raw))
        except ValueError:
            raise InvalidInput(f"{raw!r} is not a run id", code="invalid_run_id") from None
    if tenant_id is None:  # any tenant's run: its tenant through the narrow function, nothing else
        known = {run_id for run_id in wanted if run_tenant(run_id) is not None}
    else:
        known = set(
            AgentRun.objects.filter(run_id__in=wanted, tenant_id=tenant_id).values_list("run_id", flat=True)
        )
    missing = [str(r) for r in wanted if r not in known]
    if missing:
        raise RunNotFound("no run " + ", ".join(missing) + (" in this tenant" if tenant_id else ""))
    return list(dict.fromkeys(wanted))


def runs_wake(*, run_ids: Iterable[UUID], dry_run: bool = False) -> Redispatch:
    """Send a wake-up to each run, through the same path as the sweep. No state changes: PostgreSQL
    still decides (lease_acquire) whether anything runs."""
    ids = list(run_ids)
    if dry_run:
        return Redispatch(run_ids=ids, sent=0, dry_run=True)
    return Redispatch(run_ids=ids, sent=sum(1 for run_id in ids if run_enqueue(run_id=run_id)), dry_run=False)
