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

from core.tasks import task_send
from runs.engine import store

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
    run_ids = store.claim_for_redispatch(grace=settings.KEEPER_REDISPATCH_GRACE, limit=limit)
    if run_ids:
        logger.info("sweep: re-dispatching %d run(s)", len(run_ids))
    return runs_enqueue_many(run_ids=run_ids)


def task_enqueue(*, name: str, args: list[str]) -> bool:
    """Send any other background task by name (runs never imports workers)."""
    return task_send(name=name, args=args, retry_policy=_RETRY_POLICY)
