"""The step commit prepared (the statement) and unprepared (the PL/pgSQL function made from the same
statements, for a transaction pooler): the same events, the same outbox rows, the same ending."""

from __future__ import annotations

import pytest
from django.db import connection

from core.tenancy import tenant_bind
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent
from runs.webhooks.models import WebhookDelivery
from runs.webhooks.services import webhook_subscription_create

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, where the commit is prepared


def _countdown(tenant) -> tuple[list[tuple], int]:
    with tenant_bind(tenant.tenant_id):
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
        result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
        while result.status == "running":
            result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
        events = list(
            AgentEvent.objects.filter(run_id=run.run_id)
            .order_by("seq")
            .values_list("seq", "event_type", "step_id", "next_step", "state_digest")
        )
        hooks = WebhookDelivery.objects.filter(run_id=run.run_id, event_type="run.completed").count()
    return events, hooks


def _prepared(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = %s", [name])
        return cursor.fetchone()[0] > 0


def test_prepared_or_not_a_run_commits_the_same_moves(tenant, settings) -> None:
    with tenant_bind(tenant.tenant_id):
        webhook_subscription_create(
            tenant=tenant, url="https://hooks.example.com/k", event_types=["run.completed"], actor="test"
        )
    connection.close()  # a session of its own: nothing prepared by an earlier test
    settings.KEEPER_PREPARED_STATEMENTS = False
    unprepared, unprepared_hooks = _countdown(tenant)
    assert not _prepared("keeper_commit_step") and not _prepared("keeper_commit_step_call")
    settings.KEEPER_PREPARED_STATEMENTS = True
    prepared, prepared_hooks = _countdown(tenant)
    assert _prepared("keeper_commit_step")
    assert [e[1:] for e in unprepared] == [e[1:] for e in prepared]
    assert unprepared[-1][1] == "run_completed" and len(unprepared) == 6
    assert unprepared_hooks == prepared_hooks == 1  # the ending's outbox row, from the function's branch
