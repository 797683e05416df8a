"""Prometheus metrics: run, operation, take-over and queue figures read at scrape time, and the
step latency histogram the engine observes.

The web process serves `/metrics` (everything below). Step latency is observed where steps run, in
the worker: with `KEEPER_WORKER_METRICS_PORT` set, the worker serves its own registry on that port
(`worker_metrics_serve`, started from workers/celery.py); with a prefork pool set
`PROMETHEUS_MULTIPROC_DIR` so the pool children's observations are summed there.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

logger = logging.getLogger(__name__)

STEP_SECONDS = Histogram(
    "keeper_step_duration_seconds",
    "Wall time of one step function (the step itself, not the lease or the commit).",
    ["workflow", "step"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
)

# Scrapes must not hold a connection long when the database is slow.
_SCRAPE_STATEMENT_TIMEOUT_MS = 5000


def observe_step(*, workflow: str, step: str, seconds: float) -> None:
    """Record one step's wall time (called by the engine after every step function returns or raises)."""
    STEP_SECONDS.labels(workflow=workflow, step=step).observe(seconds)


# Every status a gauge reports (0 when no row has it), registered by the app that owns the statuses
# (runs, in its AppConfig.ready): core imports no app.
STATUS_LABELS: dict[str, tuple[str, ...]] = {"runs": (), "operations": ()}


def status_labels_register(*, runs: tuple[str, ...], operations: tuple[str, ...]) -> None:
    STATUS_LABELS.update(runs=tuple(runs), operations=tuple(operations))


class KeeperCollector:
    """Reads the durable tables and the Celery queue at scrape time (nothing is cached in memory)."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "keeper_metrics_source_up",
            "1 when the source could be read during this scrape.",
            labels=["source"],
        )
        try:
            runs, operations, takeovers = _database_figures()
        except Exception as exc:  # a scrape reports the outage instead of failing
            logger.warning("metrics: database not readable: %s", exc)
            up.add_metric(["database"], 0)
        else:
            up.add_metric(["database"], 1)
            gauge = GaugeMetricFamily("keeper_runs", "Runs by status.", labels=["status"])
            for status in STATUS_LABELS["runs"] or sorted(runs):
                gauge.add_metric([status], runs.get(status, 0))
            yield gauge
            gauge = GaugeMetricFamily("keeper_operations", "Tool operations by status.", labels=["status"])
            for status in STATUS_LABELS["operations"] or sorted(operations):
                gauge.add_metric([status], operations.get(status, 0))
            yield gauge
            yield CounterMetricFamily(
                "keeper_lease_takeovers",
                "Verified take-overs of an expired lease (resume_verified events, trigger lease_takeover).",
                value=takeovers,
            )
        queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")
        try:
            depth = _queue_depth(queue)
        except Exception as exc:
            logger.warning("metrics: Redis not readable: %s", exc)
            up.add_metric(["redis"], 0)
        else:
            up.add_metric(["redis"], 1)
            gauge = GaugeMetricFamily(
                "keeper_celery_queue_length", "Wake-ups waiting in the Celery queue.", labels=["queue"]
            )
            gauge.add_metric([queue], depth)
            yield gauge
        yield up


def _database_figures() -> tuple[dict[str, int], dict[str, int], int]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = {_SCRAPE_STATEMENT_TIMEOUT_MS}")
        # Across tenants, so through the counting functions of runs' migration 0008 (counts only;
        # row-level security hides the rows themselves from the application role).
        cursor.execute("SELECT status, runs FROM keeper_run_status_counts()")
        runs = dict(cursor.fetchall())
        cursor.execute("SELECT status, operations FROM keeper_operation_status_counts()")
        operations = dict(cursor.fetchall())
        cursor.execute("SELECT keeper_lease_takeover_count()")
        (takeovers,) = cursor.fetchone()
    return runs, operations, takeovers


def queue_depth() -> dict[str, Any]:
    """The Celery queue's name and how many wake-ups wait in it (`depth` None if Redis is away): the
    same figure as keeper_celery_queue_length, for the console's queue page."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")
    try:
        return {"queue": queue, "depth": _queue_depth(queue)}
    except Exception as exc:  # redis raises many unrelated types for an unreachable server
        logger.info("queue depth: Redis not readable: %s", exc)
        return {"queue": queue, "depth": None}


def _queue_depth(queue: str) -> int:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        return int(client.llen(queue))
    finally:
        client.close()


WORKER_FAILURES_KEY = "keeper:worker-failed:{worker}"
WORKER_FAILURES_TTL = 7 * 24 * 3600  # counts of a worker not seen for a week go away with it


def worker_failure_count(*, worker: str) -> None:
    """One more task that raised in this worker (Celery's stats count tasks, not failures): kept in
    Redis because a prefork pool's children cannot add to the main process's stats."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        key = WORKER_FAILURES_KEY.format(worker=worker)
        client.incr(key)
        client.expire(key, WORKER_FAILURES_TTL)
    except Exception as exc:  # a broker hiccup must not turn a task failure into another error
        logger.info("worker failure count not kept: %s", exc)
    finally:
        client.close()


def worker_failures(*, workers: list[str]) -> dict[str, int]:
    """Tasks that raised, per worker name (0 for a worker with none)."""
    import redis

    if not workers:
        return {}
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        values = client.mget([WORKER_FAILURES_KEY.format(worker=w) for w in workers])
        return {w: int(v or 0) for w, v in zip(workers, values, strict=True)}
    finally:
        client.close()


_keeper_registry = CollectorRegistry(auto_describe=False)
_keeper_registry.register(KeeperCollector())


def metrics_token() -> str:
    """KEEPER_METRICS_TOKEN ("" when unset)."""
    return str(settings.KEEPER_METRICS_TOKEN)


def metrics_authorized(request: HttpRequest) -> int | None:
    """None when the request may read metrics, else the status to answer (401 or 403).

    Without a token only a DEBUG process serves them; with one, `Authorization: Bearer <token>`.
    """
    token = metrics_token()
    if not token:
        return None if settings.DEBUG else 403
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return 401
    return None if hmac.compare_digest(given.strip().encode(), token.encode()) else 403


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = metrics_authorized(request)
    if refused == 401:
        response = HttpResponse(
            "metrics need Authorization: Bearer <KEEPER_METRICS_TOKEN>\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if refused is not None:
        reason = "wrong token" if metrics_token() else "KEEPER_METRICS_TOKEN is not set"
        return HttpResponse(f"metrics refused: {reason}\n", status=403, content_type="text/plain")
    body = generate_latest(REGISTRY) + generate_latest(_keeper_registry)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def worker_metrics_serve() -> int | None:
    """Serve this worker's registry on KEEPER_WORKER_METRICS_PORT (if set); return the port.

    With PROMETHEUS_MULTIPROC_DIR set (a prefork pool), the served figures are the sum over the
    pool children's files; otherwise this process's own registry (solo or threads pool).
    """
    port = str(settings.KEEPER_WORKER_METRICS_PORT).strip()
    if not port:
        return None
    from prometheus_client import start_http_server

    registry: CollectorRegistry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    server, _ = start_http_server(int(port), addr=settings.KEEPER_WORKER_METRICS_ADDR, registry=registry)
    logger.info("worker metrics served on port %s", server.server_port)
    return int(server.server_port)
