"""The Celery app. Messages are only wake-ups ("advance run X"); PostgreSQL decides what runs."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("keeper")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    from workers.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()
