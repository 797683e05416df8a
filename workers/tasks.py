"""Thin Celery tasks: each takes ids and calls one service."""

from __future__ import annotations

from uuid import UUID

from celery import shared_task

from runs.services.dispatch import runs_redispatch
from runs.services.forks import forks_expire
from runs.services.steps import run_advance


@shared_task(name="workers.tasks.advance_run", ignore_result=True)
def advance_run(run_id: str) -> None:
    run_advance(run_id=UUID(run_id))


@shared_task(name="workers.tasks.redispatch_runs", ignore_result=True)
def redispatch_runs() -> int:
    return runs_redispatch()


@shared_task(name="workers.tasks.expire_forks", ignore_result=True)
def expire_forks() -> int:
    return forks_expire()
