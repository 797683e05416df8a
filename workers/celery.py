"""The Celery app. Messages are only wake-ups ("advance run X"); PostgreSQL decides what runs."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_failure, task_postrun, task_prerun, worker_ready

os.environ["DJANGO_SETTINGS_MODULE"] = (
    os.environ.get("DJANGO_SETTINGS_MODULE") or "config.settings.local"
)  # empty: the default

app = Celery("keeper")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    from workers.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender: object = None, **_: object) -> None:
    # As Django does around each request: a connection past CONN_MAX_AGE, or one an error left
    # unusable, is closed; the others serve the next task (settings: CELERY_DB_REUSE_MAX). Not for a
    # task run eagerly in the caller's process: its connection, maybe mid-transaction, is the caller's.
    from django.db import close_old_connections

    if not getattr(getattr(sender, "request", None), "is_eager", False):
        close_old_connections()


@task_failure.connect
def _count_failure(sender: object = None, **_: object) -> None:
    # The queue page's failed count per worker (Celery's own stats have none).
    from core.metrics import worker_failure_count

    request = getattr(sender, "request", None)
    worker_failure_count(worker=str(getattr(request, "hostname", None) or "unknown"))


@worker_ready.connect
def _serve_worker_metrics(**_: object) -> None:
    # Step latency is observed where steps run: with KEEPER_WORKER_METRICS_PORT set, the worker
    # serves it (see core/metrics.py; a prefork pool also needs PROMETHEUS_MULTIPROC_DIR).
    from core.metrics import worker_metrics_serve

    worker_metrics_serve()
