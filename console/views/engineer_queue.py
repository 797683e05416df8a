"""Queue health for the user's tenants: runs by status, the oldest runnable run, expired leases, lease
holders (renewed by worker heartbeats) and the workers that answer a ping. The panel polls itself.

Asking the workers never holds the page: the ping runs in a thread with a deadline, and an
unreachable broker reads "no answer from workers", never an error page.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from uuid import UUID

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from console.htmx import HtmxHttpRequest, htmx_target
from console.roles import ENGINEER, role_required, tenant_ids_for_user
from runs.engine.models import RunStatus
from runs.engine.selectors import run_queue_health

logger = logging.getLogger(__name__)

PING_TIMEOUT = 0.5  # seconds the workers get to answer
PING_DEADLINE = 1.5  # seconds the page waits for the broker at most
PING_CACHE_SECONDS = 4.0
LIST_CAP = 1000
_STATUS_COLORS = {
    "running": "#60a5fa",
    "suspended": "#f59e0b",
    "completed": "#22c55e",
    "failed": "#ef4444",
    "cancelled": "#9ca3af",
}


class _Pinger:
    """One ping at a time per process, its answer kept a few seconds (the panel polls every 5 s)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asking: threading.Thread | None = None
        self.answer: list[str] | None = None
        self.at = 0.0

    def ask(self) -> None:
        try:
            from workers.celery import app

            replies = app.control.inspect(timeout=PING_TIMEOUT).ping() or {}
            self.answer = sorted(str(name) for name in replies)
        except Exception as exc:  # kombu/redis raise many unrelated types for an unreachable broker
            logger.info("queue health: worker ping failed (%s)", exc)
            self.answer = None
        self.at = time.monotonic()

    def workers(self) -> list[str] | None:
        """Names of the workers that answered; [] if none did; None if the broker gave no answer."""
        with self.lock:
            if time.monotonic() - self.at < PING_CACHE_SECONDS:
                return self.answer
            if self.asking is not None and self.asking.is_alive():
                return None  # an earlier request is still waiting for the broker: do not wait twice
            asking = self.asking = threading.Thread(target=self.ask, name="console-worker-ping", daemon=True)
            asking.start()
        asking.join(PING_DEADLINE)
        return None if asking.is_alive() else self.answer


pinger = _Pinger()


def queue_health_data(*, tenant_ids: list[UUID]) -> dict[str, Any]:
    now = timezone.now()
    health = run_queue_health(tenant_ids=tenant_ids, now=now, cap=LIST_CAP)
    counts = health.counts
    tallest = max(counts.values(), default=0) or 1
    bars = []
    for i, status in enumerate(RunStatus):
        count, width = counts.get(status.value, 0), counts.get(status.value, 0) / tallest * 270
        bars.append(
            {
                "status": status.value,
                "count": count,
                "color": _STATUS_COLORS[status.value],
                "y": 6 + 26 * i,
                "text_y": 21 + 26 * i,
                "width": f"{width:.1f}",
                "text_x": f"{width + 94:.1f}",
            }
        )
    return {
        "now": now,
        "bars": bars,
        "bars_height": 6 + 26 * len(bars),
        "total": sum(counts.values()),
        "oldest": health.oldest_runnable,
        "runnable": health.runnable,
        "expired": health.expired,
        "expired_count": health.expired_count,
        "cap": LIST_CAP,
        "holders": health.holders,
        "workers": pinger.workers(),
    }


@role_required(ENGINEER)
@require_safe
def queue_health(request: HtmxHttpRequest) -> HttpResponse:
    context = queue_health_data(tenant_ids=tenant_ids_for_user(request.user))
    partial = "#queue-panel" if htmx_target(request) == "queue-panel" else ""
    return render(request, f"console/engineer/queue.html{partial}", context)
