"""Beat's schedule names only tasks the workers have, and covers every periodic duty."""

from __future__ import annotations

from workers.celery import app
from workers.schedule import beat_schedule


def test_every_scheduled_task_is_registered_with_the_workers():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in beat_schedule().values()}
    assert scheduled <= set(app.tasks), sorted(scheduled - set(app.tasks))


def test_the_periodic_duties_are_all_scheduled():
    scheduled = {entry["task"] for entry in beat_schedule().values()}
    assert scheduled >= {
        "workers.tasks.redispatch_runs",
        "workers.tasks.expire_forks",
        "workers.tasks.reclaim_workspaces",
        "workers.tasks.reclaim_artifacts",
        "workers.tasks.purge_expired_memory",
        "workers.tasks.project_all_memory",
        "workers.tasks.embed_pending_documents",
        "workers.tasks.expire_retrieval_index",
        "workers.tasks.deliver_webhooks",
    }
    assert all(entry["options"]["expires"] >= entry["schedule"] for entry in beat_schedule().values())
