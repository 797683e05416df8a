"""Queue health for the user's tenants: runs by status, the oldest runnable run, expired leases, lease
holders (renewed by worker heartbeats), the broker's queue depth and the workers (Flower-like: each
one's last answer and its age, pool size, tasks processed, the tasks it runs now; a worker that stops
answering turns stale, then is forgotten). The panel polls itself.

Asking the workers never holds the page: the ping runs in a thread with a deadline, and an
unreachable broker reads "no answer from workers", never an error page.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from console.htmx import HtmxHttpRequest, htmx_target
from console.roles import ENGINEER, role_required, tenant_ids_for_user
from console.timeline import duration_text
from core.metrics import queue_depth, worker_failures
from runs.engine.selectors import run_queue_health, worker_recent_steps
from runs.kernel.models import RunStatus

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


STALE_AFTER = 15.0  # seconds without an answer: the worker is shown stale
FORGET_AFTER = 600.0  # seconds without an answer: the worker leaves the list


@dataclass
class WorkerSeen:
    """What a worker said when it last answered (its stats and active tasks)."""

    name: str
    seen_at: float  # time.time() of its last answer
    pool: int | None = None
    processes: int | None = None
    processed: int = 0
    failed: int | None = None  # tasks that raised (None: Redis did not say)
    by_task: dict[str, int] = field(default_factory=dict)
    active: list[dict[str, Any]] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # its pool processes (a step's event names host:pid)

    @property
    def actors(self) -> list[str]:
        """The event actors of its processes: host:pid, as a worker process names itself."""
        host = self.name.split("@", 1)[-1]
        return [f"{host}:{pid}" for pid in self.pids]

    def age(self, now: float) -> float:
        return max(0.0, now - self.seen_at)


def _active_row(task: Any, now: float) -> dict[str, Any]:
    task = task if isinstance(task, dict) else {}
    args = task.get("args") or []
    started = task.get("time_start")
    return {
        "name": str(task.get("name") or "?")[:200],
        "id": str(task.get("id") or "")[:64],
        "run_id": str(args[0])[:64] if isinstance(args, list | tuple) and args else "",
        "running_s": round(now - float(started), 1) if isinstance(started, int | float) else None,
    }


class _Pinger:
    """One question to the workers at a time per process (their stats and active tasks, which also
    proves they are alive), the answer kept a few seconds (the panel polls every 5 s). Every worker
    that answered is remembered with the time of its last answer, so one that stops answering turns
    stale instead of vanishing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asking: threading.Thread | None = None
        self.answer: list[str] | None = None
        self.at = 0.0
        self.seen: dict[str, WorkerSeen] = {}

    def ask(self) -> None:
        try:
            from workers.celery import app

            inspect = app.control.inspect(timeout=PING_TIMEOUT)
            stats = inspect.stats() or {}
            active = (inspect.active() or {}) if stats else {}
            now = time.time()
            for name, answer in stats.items():
                said: dict[str, Any] = answer if isinstance(answer, dict) else {}
                pool: dict[str, Any] = said["pool"] if isinstance(said.get("pool"), dict) else {}
                totals: dict[str, Any] = said["total"] if isinstance(said.get("total"), dict) else {}
                self.seen[str(name)] = WorkerSeen(
                    name=str(name),
                    seen_at=now,
                    pool=pool.get("max-concurrency"),
                    processes=len(pool.get("processes") or []) or None,
                    processed=sum(int(v) for v in totals.values() if isinstance(v, int)),
                    by_task={str(k): int(v) for k, v in totals.items() if isinstance(v, int)},
                    active=[_active_row(t, now) for t in (active.get(name) or [])][:50],
                    pids=[int(p) for p in pool.get("processes") or [] if isinstance(p, int)]
                    or ([int(said["pid"])] if isinstance(said.get("pid"), int) else []),
                )
            try:
                failed = worker_failures(workers=[str(n) for n in stats])
            except Exception as exc:  # the counts are extra: the page works without them
                logger.info("queue health: failure counts not read (%s)", exc)
                failed = {}
            for name, count in failed.items():
                self.seen[name].failed = count
            for name in [n for n, w in self.seen.items() if w.age(now) > FORGET_AFTER]:
                del self.seen[name]
            self.answer = sorted(str(name) for name in stats)
        except Exception as exc:  # kombu/redis raise many unrelated types for an unreachable broker
            logger.info("queue health: worker ping failed (%s)", exc)
            self.answer = None
        self.at = time.monotonic()

    def workers_seen(self) -> list[dict[str, Any]]:
        """Every remembered worker, newest answer first: its facts, the age of its answer, stale or not."""
        now = time.time()
        rows = []
        for worker in sorted(self.seen.values(), key=lambda w: (-w.seen_at, w.name)):
            age = worker.age(now)
            rows.append({"worker": worker, "age": round(age, 1), "stale": age > STALE_AFTER})
        return rows

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
        "workers_seen": pinger.workers_seen(),
        "stale_after": STALE_AFTER,
        "queue": queue_depth(),
    }


@role_required(ENGINEER)
@require_safe
def queue_health(request: HtmxHttpRequest) -> HttpResponse:
    context = queue_health_data(tenant_ids=tenant_ids_for_user(request.user))
    partial = "#queue-panel" if htmx_target(request) == "queue-panel" else ""
    return render(request, f"console/engineer/queue.html{partial}", context)


RECENT_STEPS = 100
RECENT_WINDOW = timedelta(hours=24)


@role_required(ENGINEER)
@require_safe
def worker_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every worker that answered lately: live or stale, its pool, what it runs now."""
    pinger.workers()  # ask again if the answer is old
    return render(
        request,
        "console/engineer/workers.html",
        {"workers_seen": pinger.workers_seen(), "stale_after": STALE_AFTER},
    )


@role_required(ENGINEER)
@require_safe
def worker_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """One worker's task list, as Flower's: what it runs now, what it ran by kind, and the steps of runs
    (of the user's tenants) its processes committed lately, each with its run and how long it took."""
    pinger.workers()
    seen = pinger.seen.get(name)
    if seen is None:
        raise Http404("no worker of that name answered this console lately")
    steps = worker_recent_steps(
        tenant_ids=tenant_ids_for_user(request.user),
        actors=seen.actors,
        since=timezone.now() - RECENT_WINDOW,
        limit=RECENT_STEPS,
    )
    rows: list[dict[str, Any]] = []
    for e in steps:
        spent = e.payload.get("spent") if isinstance(e.payload, dict) else None
        wall = spent.get("wall_s") if isinstance(spent, dict) else None
        seconds = float(wall) if isinstance(wall, int | float) and not isinstance(wall, bool) else None
        # The seconds too, so the column sorts by time rather than by its text ("402 ms" > "1.2 s").
        rows.append(
            {"event": e, "wall_s": duration_text(seconds) if seconds is not None else "", "wall": seconds}
        )
    return render(
        request,
        "console/engineer/worker.html",
        {
            "w": seen,
            "age": round(seen.age(time.time()), 1),
            "stale": seen.age(time.time()) > STALE_AFTER,
            "rows": rows,
            "window": f"{int(RECENT_WINDOW.total_seconds() // 3600)} hours",
        },
    )
