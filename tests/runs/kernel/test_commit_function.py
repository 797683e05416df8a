"""The step commit prepared (the statement) and unprepared (the PL/pgSQL function made from the same
statements, for a transaction pooler): the same events, the same outbox rows, the same ending."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection

from core.tenancy import tenant_bind
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent
from runs.kernel.state import state_encode
from runs.webhooks.models import WebhookDelivery
from runs.webhooks.services import webhook_subscription_create

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, where the commit is prepared


def _countdown(tenant) -> tuple[list[tuple], int]:
    with tenant_bind(tenant.tenant_id):
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
        result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
        while result.status == "running":
            result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
        rows = (
            AgentEvent.objects.filter(run_id=run.run_id)
            .order_by("seq")
            .values_list("seq", "event_type", "step_id", "next_step", "state", "state_digest")
        )
        events = []
        for seq, event_type, step_id, next_step, state, digest in rows:
            assert state is None or state_encode(state).digest == digest, seq  # each commit's own digest
            events.append((seq, event_type, step_id, next_step, _without_wall_time(state)))
        hooks = WebhookDelivery.objects.filter(run_id=run.run_id, event_type="run.completed").count()
    return events, hooks


def _without_wall_time(state: object) -> object:
    """The state but for the steps' wall time (milliseconds in its budgets), the one thing two runs of
    the same moves may record differently."""
    if isinstance(state, dict) and isinstance(state.get("budgets"), dict):
        return {**state, "budgets": {k: v for k, v in state["budgets"].items() if k != "wall_s"}}
    return state


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


def test_a_move_naming_another_tenant_than_its_runs_finds_nothing(tenant, other_tenant, settings) -> None:
    """The fence names the tenant (what a database distributed by tenant routes on): a move that names
    another tenant than the run's writes nothing, even where row-level security would let it."""
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    assert apply(m.LeaseTaken(run.run_id, other_tenant.tenant_id, "w", 30)) is None
    grant = apply(m.LeaseTaken(run.run_id, tenant.tenant_id, "w", 30))
    assert grant is not None
    state = state_encode(grant.state)
    wrong = dataclasses.replace(m.Held.of(grant), tenant_id=other_tenant.tenant_id)
    for prepared in (True, False):  # the prepared statement and the function behind a pooler
        settings.KEEPER_PREPARED_STATEMENTS = prepared
        assert apply(m.StepCommitted(wrong, state, grant.next_step, grant.next_step, {})) is None
    assert apply(m.LeaseRenewed(run.run_id, other_tenant.tenant_id, "w", grant.epoch, 30)) is None
    cancel = m.StatusChanged(
        run.run_id, other_tenant.tenant_id, ("running",), "cancelled", "run_cancelled", "t", {}
    )
    assert apply(cancel) is None
    assert apply(m.UsageCharged(run.run_id, other_tenant.tenant_id, {}, "t")) is None
    assert apply(m.LeaseReleased(run.run_id, other_tenant.tenant_id, "w", grant.epoch)) is False
    assert AgentEvent.objects.filter(run_id=run.run_id).count() == 1  # only its start
    assert apply(m.StepCommitted(m.Held.of(grant), state, grant.next_step, grant.next_step, {})) == 2
