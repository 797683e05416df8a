"""Learning long-term facts from a run's conversation, for the run's subject."""

from __future__ import annotations

from uuid import UUID

from memory.services import memory_learn_from_events
from runs.models import AgentEvent
from runs.selectors import run_get


def run_learn(*, run_id: UUID) -> dict[str, int]:
    """Extract candidate facts from the run's user messages and keep them with provenance."""
    run = run_get(run_id=run_id)
    if not run.subject:
        return {"kept": 0, "unchanged": 0, "erased": 0, "refused": 0}
    events = [
        {"seq": e.seq, "event_type": e.event_type, "payload": e.payload}
        for e in AgentEvent.objects.filter(run=run, event_type="user_message").exclude(payload__has_key="redacted")
        .order_by("seq")
    ]  # fmt: skip
    return memory_learn_from_events(
        tenant=run.tenant, subject_id=run.subject, run_id=str(run.run_id), events=events
    )
