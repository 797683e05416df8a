"""Child runs of authored workflows: started once per key, the child's finish wakes its waiting
parent (in the child's own commit), cancelling a parent cancels its children, and a workflow of
another tenant cannot be a child. With real worker processes where a worker is involved."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

import tests.runs.signals_flows as flows
from runs.engine.runs import run_cancel, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(db):
    client = APIClient()
    staff = get_user_model().objects.create_user(
        "ops", password="pw-for-tests", is_staff=True, is_superuser=True
    )
    client.force_authenticate(staff)
    return client


def _start(tenant, **input) -> AgentRun:
    return run_start(tenant=tenant, workflow_name=flows.family.name, input=input, actor="t").run


def _step(run: AgentRun) -> str:
    return run_advance(run_id=run.run_id, worker_id="w-test").outcome


def _drive(run: AgentRun, limit: int = 20) -> AgentRun:
    for _ in range(limit):
        if _step(run) != "committed":
            break
    run.refresh_from_db()
    return run


def _child_of(parent: AgentRun) -> AgentRun:
    return AgentRun.objects.get(child_of=parent)


def test_a_waiting_parent_is_woken_by_its_child_finishing_and_gets_its_result(tenant):
    parent = _start(tenant, value="hi", hold=True)
    parent = _drive(parent)
    assert (parent.status, parent.suspend_reason) == ("suspended", "child_run")
    child = _child_of(parent)
    assert child.tenant_id == parent.tenant_id and str(child.run_id) in parent.suspend_detail
    assert AgentRun.objects.filter(child_of=parent).count() == 1  # collect asked again: still one child
    assert parent.resume_requested_at is None
    child = _drive(child)
    assert (child.status, child.suspend_reason) == ("suspended", "signal")
    from runs.engine.signals import signal_send

    signal_send(run_id=child.run_id, name="go", payload={}, idempotency_key="g", actor="t")
    child = _drive(child)
    assert child.status == "completed"
    parent.refresh_from_db()
    assert parent.resume_requested_at is not None and parent.resume_requested_by == "child_run"
    finished = AgentEvent.objects.get(run=parent, event_type="child_finished")
    assert finished.payload == {"child_run_id": str(child.run_id), "status": "completed", "woke": True}
    parent = _drive(parent)
    assert parent.status == "completed"
    assert parent.result == {"child": str(child.run_id), "status": "completed", "result": {"echo": "hi"}}


def test_a_child_that_finished_before_the_parent_waits_is_collected_at_once(tenant):
    parent = _start(tenant, value="quick", fail=True)
    assert _step(parent) == "committed"  # spawn: the child exists, the parent moves on to collect
    child = _drive(_child_of(parent))
    assert child.status == "failed"
    parent.refresh_from_db()
    assert parent.status == "running" and parent.resume_requested_at is None  # nothing to wake
    assert AgentEvent.objects.get(run=parent, event_type="child_finished").payload["woke"] is False
    parent = _drive(parent)
    assert parent.status == "completed" and parent.result["status"] == "failed"
    assert parent.result["result"]["code"] == "echo_refused"
    assert not AgentEvent.objects.filter(run=parent, event_type="run_suspended").exists()


def test_a_child_finishing_fences_the_parents_step_in_flight(tenant):
    parent = _start(tenant, value="x")
    assert _step(parent) == "committed"
    child = _child_of(parent)
    before = AgentRun.objects.get(run_id=parent.run_id).state_revision
    child = _drive(child)
    assert AgentRun.objects.get(run_id=parent.run_id).state_revision == before + 1


def test_cancelling_a_parent_cancels_its_children_in_the_same_transaction(api, tenant):
    parent = _drive(_start(tenant, value="held", hold=True))
    child = _drive(_child_of(parent))
    assert child.status == "suspended"
    response = api.post(f"/api/v1/runs/{parent.run_id}/cancel", {"note": "no longer needed"}, format="json")
    assert response.status_code == 200, response.content
    child.refresh_from_db()
    assert child.status == "cancelled"
    note = AgentEvent.objects.get(run=child, event_type="run_cancelled").payload["note"]
    assert str(parent.run_id) in note
    assert not AgentEvent.objects.filter(run=parent, event_type="child_finished").exists()


def test_the_run_detail_links_parent_and_children(api, tenant):
    parent = _drive(_start(tenant, value="l", hold=True))
    child = _child_of(parent)
    detail = api.get(f"/api/v1/runs/{parent.run_id}/").json()
    assert detail["child_of"] is None
    assert detail["children"] == [
        {"run_id": str(child.run_id), "workflow_name": "test.echo", "status": "running"}
    ]
    assert api.get(f"/api/v1/runs/{child.run_id}/").json()["child_of"] == str(parent.run_id)


def test_a_child_of_a_workflow_the_tenant_cannot_see_is_refused_and_nothing_is_started(tenant, other_tenant):
    from runs.external.workflows import external_workflow_register

    external_workflow_register(
        tenant=other_tenant, name="other.private", version="1", steps=["go"], actor="t"
    )
    runs_before = AgentRun.objects.count()
    parent = _drive(_start(tenant, value="v", child_workflow="other.private"))
    assert (parent.status, parent.suspend_reason) == ("suspended", "child_workflow_unavailable")
    assert "other.private" in parent.suspend_detail
    assert AgentRun.objects.count() == runs_before + 1  # the parent only
    assert not AgentRun.objects.filter(child_of=parent).exists()


def test_a_child_cannot_be_started_by_a_step_that_lost_its_lease(tenant):
    from runs.engine.children import child_start
    from runs.kernel.errors import ConcurrentResume

    parent = _start(tenant, value="v")
    with pytest.raises(ConcurrentResume):
        child_start(
            tenant_id=tenant.tenant_id,
            parent_run_id=parent.run_id,
            owner="w-nobody",
            epoch=7,
            workflow_name=flows.echo.name,
            input={"value": 1},
            child_id="c",
        )
    assert not AgentRun.objects.filter(child_of=parent).exists()


@pytest.mark.slow
def test_children_with_real_workers_wake_their_parent_and_die_with_it(api, tenant, processes):
    processes.worker(pool="solo", env={"KEEPER_WORKFLOW_MODULES": flows.__name__})
    woken = _start(tenant, value="w", hold=True)
    doomed = _start(tenant, value="d", hold=True)
    for parent in (woken, doomed):
        wait_until(
            lambda p=parent: (
                AgentRun.objects.get(run_id=p.run_id).suspend_reason == "child_run"
                and AgentRun.objects.get(child_of=p).suspend_reason == "signal"
            ),
            timeout=90,
            message="the parent to wait for its child, and the child for its signal",
        )
    child = _child_of(woken)
    go = api.post(f"/api/v1/runs/{child.run_id}/signals/go", {}, format="json", HTTP_IDEMPOTENCY_KEY="go")
    assert go.status_code == 201
    wait_until(
        lambda: AgentRun.objects.get(run_id=woken.run_id).status == "completed",
        timeout=90,
        message="the child's finish to wake its parent on the worker",
    )
    assert AgentRun.objects.get(run_id=woken.run_id).result["result"] == {"echo": "w"}
    run_cancel(run_id=doomed.run_id, actor="t", note="stop")
    assert AgentRun.objects.get(child_of=doomed).status == "cancelled"


def test_the_engineer_run_page_links_parent_and_children(tenant):
    from django.test import Client
    from django.urls import reverse

    from core.roles import ENGINEER
    from tests.console.conftest import make_user

    parent = _drive(_start(tenant, value="c", hold=True))
    child = _child_of(parent)
    client = Client()
    client.force_login(make_user("eng", ENGINEER, tenants=(tenant,)))
    page = client.get(reverse("console:run_detail", args=[parent.run_id])).content.decode()
    assert 'id="child-runs"' in page and reverse("console:run_detail", args=[child.run_id]) in page
    page = client.get(reverse("console:run_detail", args=[child.run_id])).content.decode()
    assert 'id="child-of"' in page and reverse("console:run_detail", args=[parent.run_id]) in page


def test_cancelling_a_parent_cancels_grandchildren_too(tenant):
    grandparent = _drive(_start(tenant, value="g", child_workflow=flows.family.name, hold=True))
    parent = _drive(_child_of(grandparent))
    child = _drive(_child_of(parent))
    assert [r.status for r in (grandparent, parent, child)] == ["suspended", "suspended", "suspended"]
    run_cancel(run_id=grandparent.run_id, actor="t", note="all of it")
    for run in (grandparent, parent, child):
        run.refresh_from_db()
    assert [r.status for r in (grandparent, parent, child)] == ["cancelled", "cancelled", "cancelled"]


def test_a_child_input_its_workflow_refuses_suspends_the_parent_and_starts_nothing(tenant):
    parent = _drive(_start(tenant, value="v", child_workflow=flows.pinger.name))  # it wants "wanted"
    assert (parent.status, parent.suspend_reason) == ("suspended", "child_input_invalid")
    assert not AgentRun.objects.filter(child_of=parent).exists()
