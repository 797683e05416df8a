"""Forks that were started and then left suspended (an approval nobody gives) are reclaimed by a TTL,
cancelled with a reason in an event; forks still in use, asked to resume or sleeping are not."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.engine.forks import forks_expire, run_fork
from runs.engine.registry import Step, StepContext, Suspend, Workflow, registry
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import flush_redis

pytestmark = pytest.mark.django_db


def _wait(ctx: StepContext, state: dict) -> Suspend:
    return Suspend(state, "approval_pending", "waiting for an approval")


registry.register(Workflow(name="test.waits", version="1", steps=(Step("wait", _wait),)))


@pytest.fixture(autouse=True)
def _fresh():
    flush_redis()
    yield
    flush_redis()


def _waiting_fork(parent):
    child = run_fork(run_id=parent.run_id, at_seq=1, actor="user:eng")
    run_advance(run_id=child.run_id)
    child.refresh_from_db()
    assert (child.status, child.suspend_reason) == ("suspended", "approval_pending")
    return child


def _age(*runs, days=2):
    AgentRun.objects.filter(pk__in=[r.pk for r in runs]).update(
        updated_at=timezone.now() - timedelta(days=days)
    )


def test_a_started_fork_suspended_past_its_ttl_is_cancelled_with_a_reason(tenant, settings):
    settings.KEEPER_FORK_STARTED_TTL = 24 * 3600
    parent = run_start(tenant=tenant, workflow_name="test.waits", input={}, actor="t").run
    run_advance(run_id=parent.run_id)
    abandoned, fresh, asked, sleeping = (_waiting_fork(parent) for _ in range(4))
    _age(parent, abandoned, asked, sleeping)
    run_resume(run_id=asked.run_id, actor="user:eng", note="the approval came")
    _age(asked)
    AgentRun.objects.filter(pk=sleeping.pk).update(wake_at=timezone.now() + timedelta(days=1))

    assert forks_expire() == 1
    statuses = {r.run_id: r.status for r in AgentRun.objects.all()}
    assert statuses[abandoned.run_id] == "cancelled"
    # Not a fork, touched within the TTL, asked to resume, or sleeping to a wake time: left alone.
    assert {statuses[r.run_id] for r in (parent, fresh, asked, sleeping)} == {"suspended"}
    [event] = AgentEvent.objects.filter(run=abandoned, event_type="fork_abandoned")
    assert event.actor == "system:fork-ttl" and event.payload["suspend_reason"] == "approval_pending"
    assert "untouched" in event.payload["reason"] and event.payload["ttl_s"] == 24 * 3600
    assert forks_expire() == 0  # once


def test_the_sweep_finds_abandoned_forks_of_every_tenant_but_returns_only_ids(tenant, other_tenant, settings):
    from core.tenancy import tenant_bind

    settings.KEEPER_FORK_STARTED_TTL = 60
    with tenant_bind(other_tenant.tenant_id):
        parent = run_start(tenant=other_tenant, workflow_name="test.waits", input={}, actor="t").run
        child = _waiting_fork(parent)
        _age(child)
    assert not AgentRun.objects.filter(run_id=child.run_id).exists()  # acme's connection cannot see it
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM keeper_forks_abandoned(60)")
        assert [c.name for c in cursor.description] == ["run_id", "tenant_id", "state_revision"]
    assert forks_expire() == 1
    with tenant_bind(other_tenant.tenant_id):
        assert AgentRun.objects.get(run_id=child.run_id).status == "cancelled"
