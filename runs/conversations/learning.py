"""Learning long-term facts from a run's conversation, for the run's subject."""

from __future__ import annotations

from uuid import UUID

from core.tenancy import run_tenant, tenant_bind
from memory.services import memory_learn_from_events
from runs.engine.errors import RunNotFound
from runs.engine.models import AgentEvent
from runs.engine.selectors import run_get


def run_learn(*, run_id: UUID) -> dict[str, int]:
    """Extract candidate facts from the run's user messages and keep them with provenance."""
    tenant_id = run_tenant(run_id)  # row-level security: work as the run's tenant
    if tenant_id is None:
        raise RunNotFound(f"no run {run_id}")
    with tenant_bind(tenant_id):
        return _run_learn(run_id=run_id)


def _run_learn(*, run_id: UUID) -> dict[str, int]:
    run = run_get(run_id=run_id)
    if not run.subject:
        return {"kept": 0, "unchanged": 0, "erased": 0, "refused": 0}
    events = [
        {"seq": e.seq, "event_type": e.event_type, "payload": e.payload}
        for e in AgentEvent.objects.filter(run=run, event_type="user_message")
        .exclude(payload__has_key="redacted")
        .order_by("seq")
    ]
    return memory_learn_from_events(
        tenant=run.tenant, subject_id=run.subject, run_id=str(run.run_id), events=events
    )
