"""docs/tutorials/first-workflow.md's signals, queries and child runs section, run as written: the
shipment starts its delivery as a child, the courier's signal completes it and wakes the shipment
(in-process and on a real worker), and a delivery that times out fails into the parent's result."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentRun
from tests.processes import wait_until
from tests.runs.test_authoring_guide import MODULE, guide  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(db):
    client = APIClient()
    staff = get_user_model().objects.create_user(
        "ops", password="pw-for-tests", is_staff=True, is_superuser=True
    )
    client.force_authenticate(staff)
    return client


def _drive(run: AgentRun) -> AgentRun:
    while run_advance(run_id=run.run_id, worker_id="w-test").outcome == "committed":
        pass
    run.refresh_from_db()
    return run


def test_the_guides_shipment_waits_for_its_delivery_and_the_courier_signal(api, tenant, guide):  # noqa: F811
    run = run_start(tenant=tenant, workflow_name="guide.shipment", input={"order_id": "o-s1"}, actor="t").run
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "child_run")
    child = _drive(AgentRun.objects.get(child_of=run))
    assert (child.workflow_name, child.suspend_reason) == ("guide.delivery", "signal")
    where = api.get(f"/api/v1/runs/{child.run_id}/queries/where").json()
    assert where["answer"] == {"order_id": "o-s1", "delivered": False}
    proof = {"signed_by": "J. Doe"}
    sent = api.post(
        f"/api/v1/runs/{child.run_id}/signals/delivered", proof, format="json", HTTP_IDEMPOTENCY_KEY="c1"
    )
    assert sent.status_code == 201
    child = _drive(child)
    assert child.status == "completed"
    assert api.get(f"/api/v1/runs/{child.run_id}/queries/where").json()["answer"]["delivered"] is True
    run = _drive(run)
    assert run.status == "completed" and run.result == {"delivered": True, "delivery": {"proof": proof}}


def test_a_delivery_nobody_confirms_times_out_and_the_shipment_says_so(tenant, guide):  # noqa: F811
    data = {"order_id": "o-s2", "patience_s": 1}
    run = _drive(run_start(tenant=tenant, workflow_name="guide.shipment", input=data, actor="t").run)
    child = AgentRun.objects.get(child_of=run)
    wait_until(lambda: _drive(child).status == "failed", timeout=30, message="the delivery to time out")
    run = _drive(run)
    assert run.status == "completed" and run.result["delivered"] is False
    assert run.result["delivery"]["code"] == "not_delivered"


@pytest.mark.slow
def test_the_guides_shipment_on_a_real_worker(api, tenant, guide, processes):  # noqa: F811
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(guide), os.environ.get("PYTHONPATH", "")) if p),
        "KEEPER_WORKFLOW_MODULES": MODULE,
    }
    processes.worker(pool="solo", env=env)
    run = run_start(tenant=tenant, workflow_name="guide.shipment", input={"order_id": "o-s3"}, actor="t").run
    wait_until(
        lambda: AgentRun.objects.filter(child_of=run, suspend_reason="signal").exists(),
        timeout=90,
        message="the delivery to wait for the courier",
    )
    child = AgentRun.objects.get(child_of=run)
    sent = api.post(
        f"/api/v1/runs/{child.run_id}/signals/delivered", {"ok": 1}, format="json", HTTP_IDEMPOTENCY_KEY="c3"
    )
    assert sent.status_code == 201
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status == "completed",
        timeout=90,
        message="the delivery's finish to wake the shipment on the worker",
    )
    assert AgentRun.objects.get(run_id=run.run_id).result == {
        "delivered": True,
        "delivery": {"proof": {"ok": 1}},
    }
