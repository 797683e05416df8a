"""Wake-ups: "advance run X" messages through Celery, and the sweep that resends lost ones.

A message only says "look at run X"; PostgreSQL decides whether anything runs. A lost message,
a dead worker or a flushed Redis therefore delays a run until the next sweep, never loses it.
`runs` enqueues by task name and never imports `workers`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from uuid import UUID

from celery import current_app
from django.conf import settings
from django.db import transaction

from core.db import wire
from core.tasks import task_send
from core.tenancy import tenant_bind
from runs.engine.registry import registry
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import UnknownWorkflow

logger = logging.getLogger(__name__)

ADVANCE_TASK = "workers.tasks.advance_run"
_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def run_enqueue(*, run_id: UUID, countdown: float | None = None) -> bool:
    """Send a wake-up now. If the broker is away, the sweep will send it later: say so and go on."""
    try:
        current_app.send_task(
            ADVANCE_TASK, args=[str(run_id)], countdown=countdown, retry=True, retry_policy=_RETRY_POLICY
        )
    except Exception as exc:  # kombu raises several unrelated types for an unreachable broker
        logger.warning("wake-up for run %s not sent (%s); the sweep will resend it", run_id, exc)
        return False
    return True


def run_enqueue_on_commit(*, run_id: UUID) -> None:
    transaction.on_commit(lambda: run_enqueue(run_id=run_id))


def runs_enqueue_many(*, run_ids: Iterable[UUID]) -> int:
    return sum(1 for run_id in run_ids if run_enqueue(run_id=run_id))


def runs_redispatch(*, limit: int = 500) -> int:
    """Resend wake-ups for running runs nobody holds (lease expired or none) and nobody woke lately."""
    run_ids = apply(m.RunsRedispatched(settings.KEEPER_REDISPATCH_GRACE, limit))
    if run_ids:
        logger.info("sweep: re-dispatching %d run(s)", len(run_ids))
    return runs_enqueue_many(run_ids=run_ids)


CODE_MISSING = ("workflow_version_unavailable", "unknown_step")


def runs_code_back(*, limit: int = 200) -> int:
    """Runs suspended because this deployment lacked their workflow version or step ask to resume by
    themselves once a deployment has the code again (resume verification checks it all). Returns how
    many were asked."""
    asked = 0
    for run_id, tenant_id, name, version, step, reason in wire.rows(
        "SELECT * FROM keeper_code_back_claim(%s)", [limit]
    ):
        with tenant_bind(tenant_id):  # an external workflow is the tenant's own
            try:
                workflow = registry.get(name, version)
            except UnknownWorkflow:
                continue
            if workflow.step(step) is None:
                continue
            seq = apply(
                m.StatusChanged(
                    run_id=run_id,
                    tenant_id=tenant_id,
                    from_statuses=("suspended",),
                    to_status="suspended",
                    event_type="resume_requested",
                    actor="system:deploy",
                    payload={"trigger": "code_back", "workflow_version": version, "step": step},
                    request_resume=True,
                    only_if_reason=reason,
                    unless_resume_pending=True,
                )
            )
        if seq is not None:
            asked += 1
            run_enqueue(run_id=run_id)
    if asked:
        logger.info("sweep: %d run(s) whose code is back asked to resume", asked)
    return asked


def task_enqueue(*, name: str, args: list[str]) -> bool:
    """Send any other background task by name (runs never imports workers)."""
    return task_send(name=name, args=args, retry_policy=_RETRY_POLICY)
