"""Sending a background task by name (apps never import workers): a broker that cannot be reached
is logged, not raised, because every caller has a sweep or a retry that catches up."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def task_send(*, name: str, args: list[str], retry_policy: dict[str, Any] | None = None) -> bool:
    from celery import current_app

    try:
        current_app.send_task(name, args=args, retry=retry_policy is not None, retry_policy=retry_policy)
    except Exception as exc:  # kombu raises several unrelated types for an unreachable broker
        logger.warning("task %s not sent (%s)", name, exc)
        return False
    return True
