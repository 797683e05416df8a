"""Approvals, signals and operations in doubt are never lost in a race or a redeploy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection

from core.api_auth import api_key_create
from core.tenancy import tenant_bind
from runs.authoring import Context, OperationCall, State, StepResult, ToolLookup, tool, workflow
from runs.engine.dispatch import runs_code_back
from runs.engine.operations import operation_mark_started, operation_prepare_once
from runs.engine.registry import registry
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.runs.external.conftest import REFUND, key_client

pytestmark = pytest.mark.django_db

SENT: list[str] = []
ANSWER: dict[str, ToolLookup] = {}

PAY = tool(
    "race.pay",
    version="v1",
    lookup=lambda key: ANSWER.get(key),
    external_ref=lambda result: result["id"],
    call_timeout_s=30,
)
paying = workflow("race.pay", version="1")


@paying.step
def pay(ctx: Context, state: State) -> StepResult:
    def send(call: OperationCall) -> dict[str, Any]:
        SENT.append(call.idempotency_key)
        return {"id": f"pay_{len(SENT)}"}

    done = ctx.operation(f"pay:{ctx.run_id}", tool=PAY, request={"amount": 5}, call=send)
    return ctx.complete(state, {"paid": done.external_ref})


paying.register()

waiting = workflow("race.signal", version="1", signals=("go",))


@waiting.step
def hold(ctx: Context, state: State) -> StepResult:
    signal = ctx.wait_signal("go")
    return ctx.complete(state, {"got": signal.payload})


waiting.register()


def _expire_lease(run_id: uuid.UUID) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s", [run_id]
        )


# --- approvals ---------------------------------------------------------------------------------------


@pytest.fixture
def worker_api(tenant):
    api = key_client(api_key_create(tenant=tenant, name="w", scope="write").plaintext)
    assert api.post("/api/v1/workflows/external/", REFUND, format="json").status_code == 201
    return api


def _claimed_with_pending_approval(api, order: str) -> tuple[dict[str, Any], str]:
    run_id = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": order}}, format="json"
    )
    claim = api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json").json()
    asked = api.post(
        f"/api/v1/workers/runs/{claim['run_id']}/approval",
        {"lease_token": claim["lease_token"], "request": {"order_id": order, "amount_minor": 500}},
        format="json",
    ).json()
    assert asked["verdict"] == "wait" and run_id.json()["run_id"] == claim["run_id"]
    return claim, asked["approval_id"]


def test_the_approvals_list_filters_by_run_and_refuses_an_unknown_filter(worker_api, tenant):
    first, first_approval = _claimed_with_pending_approval(worker_api, "o-1")
    second, _ = _claimed_with_pending_approval(worker_api, "o-2")  # the first is still leased
    listed = worker_api.get("/api/v1/approvals/", {"run_id": first["run_id"]})
    assert listed.status_code == 200
    assert [a["approval_id"] for a in listed.json()["results"]] == [first_approval]
    refused = worker_api.get("/api/v1/approvals/", {"run": first["run_id"]})
    assert refused.status_code == 400 and "run" in refused.json()["error"]["details"]
    assert worker_api.get("/api/v1/approvals/", {"run_id": "not-a-uuid"}).status_code == 400


def test_an_approval_decided_before_its_run_waits_is_kept_and_used(worker_api, tenant):
    claim, approval_id = _claimed_with_pending_approval(worker_api, "o-3")
    approved = worker_api.post(f"/api/v1/approvals/{approval_id}/approve", {"note": "fine"}, format="json")
    assert approved.status_code == 200, approved.content  # before: 409, and it stayed pending
    w = f"/api/v1/workers/runs/{claim['run_id']}/"
    late = worker_api.post(
        w + "commit",
        {
            "lease_token": claim["lease_token"],
            "expected_revision": claim["revision"],
            "state": claim["state"],
            "suspend": {"reason": "approval_required", "detail": "waiting"},
        },
        format="json",
    )
    assert late.status_code == 409  # the decision took the step from this worker: it runs again
    again = worker_api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json").json()
    assert again["run_id"] == claim["run_id"] and again["step"] == claim["step"]
    asked = worker_api.post(
        f"/api/v1/workers/runs/{again['run_id']}/approval",
        {"lease_token": again["lease_token"], "request": {"order_id": "o-3", "amount_minor": 500}},
        format="json",
    ).json()
    assert asked["verdict"] == "use" and asked["approval_id"] == approval_id
    events = list(AgentEvent.objects.filter(run_id=claim["run_id"]).values_list("event_type", flat=True))
    assert "approval_approved" in events and "run_suspended" not in events


# --- signals and code that is not deployed --------------------------------------------------------------


def test_a_signal_for_a_run_whose_version_is_not_deployed_is_kept_and_the_run_goes_on_when_it_is_back(tenant):
    api = key_client(api_key_create(tenant=tenant, name="app", scope="write").plaintext)
    run = run_start(tenant=tenant, workflow_name="race.signal", input={}, actor="test").run
    assert run_advance(run_id=run.run_id).status == "suspended"  # waiting for "go"
    deployed = registry._workflows.pop(("race.signal", "1"))  # a deploy without this version
    try:
        sent = api.post(
            f"/api/v1/runs/{run.run_id}/signals/go", {"n": 1}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
        )
        assert sent.status_code in (200, 201, 202), sent.content  # before: 422, and the signal was dropped
        query = api.get(f"/api/v1/runs/{run.run_id}/queries/anything")
        assert query.status_code == 409 and query.json()["error"]["code"] == "workflow_version_unavailable"
        run_advance(run_id=run.run_id)  # woken by the signal, refused: this deployment lacks the code
        run.refresh_from_db()
        assert (run.status, run.suspend_reason) == ("suspended", "workflow_version_unavailable")
        assert runs_code_back() == 0  # still not here: nothing asked
    finally:
        registry._workflows[("race.signal", "1")] = deployed
    assert runs_code_back() == 1  # the code is back: the run asks to resume by itself
    assert run_advance(run_id=run.run_id).status == "completed"
    run.refresh_from_db()
    assert run.result == {"got": {"n": 1}}


# --- a lookup that says "not applied" while the first call may be in flight ------------------------------


def test_a_not_applied_lookup_before_the_calls_deadline_never_sends_twice(tenant):
    SENT.clear()
    ANSWER.clear()
    run = run_start(tenant=tenant, workflow_name="race.pay", input={}, actor="test").run
    op_id = f"pay:{run.run_id}"
    with tenant_bind(tenant.tenant_id):
        dead = apply(m.LeaseTaken(run.run_id, run.tenant_id, "dead-worker", 30))
        operation_prepare_once(tenant_id=tenant.tenant_id, run_id=run.run_id, step_id="pay", operation_id=op_id,
                               tool_name="race.pay", tool_contract_version="v1", request={"amount": 5},
                               actor=dead.owner)  # fmt: skip
        operation_mark_started(tenant_id=tenant.tenant_id, operation_id=op_id, actor=dead.owner, run_id=run.run_id,
                               lease_epoch=dead.epoch, call_timeout_s=30)  # fmt: skip
        _expire_lease(run.run_id)  # the worker died mid-call, the call itself may still be on its way
    ANSWER[op_id] = ToolLookup(authoritative=True, applied=False)  # the provider has not seen it yet
    assert run_advance(run_id=run.run_id).outcome == "deferred"
    op = ToolOperation.objects.get(operation_id=op_id)
    assert op.status == "started" and SENT == []  # before: marked not applied and sent again
    run.refresh_from_db()
    # the lease is left expired (the next worker takes the run over and verifies it again), due later
    assert run.status == "running" and run.lease_expires_at <= run.wake_at and run.wake_at is not None
    with connection.cursor() as cursor:  # the call's deadline passes with nothing applied
        cursor.execute(
            "UPDATE tool_operations SET call_deadline_at = now() - interval '1 second' WHERE operation_id = %s",
            [op_id],
        )
        cursor.execute("UPDATE agent_runs SET wake_at = NULL WHERE run_id = %s", [run.run_id])
    assert run_advance(run_id=run.run_id).status == "completed"
    assert [op_id] == SENT  # sent once, after the deadline
    assert AgentRun.objects.get(run_id=run.run_id).result == {"paid": "pay_1"}


def test_an_outside_workers_not_applied_before_the_calls_deadline_is_refused(worker_api, tenant):
    run_id = worker_api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-9"}}, format="json"
    ).json()["run_id"]
    claim = worker_api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json").json()
    w = f"/api/v1/workers/runs/{run_id}/"
    token = claim["lease_token"]
    body = {"lease_token": token, "operation_id": "refund:o-9", "tool_name": "payments.refund",
            "tool_contract_version": "payments.v1", "request": {"order_id": "o-9"}}  # fmt: skip
    assert worker_api.post(w + "operations/prepare", body, format="json").status_code == 200
    started = worker_api.post(
        w + "operations/refund:o-9/started", {"lease_token": token, "call_timeout_s": 30}, format="json"
    )
    assert started.status_code == 200, started.content
    refused = worker_api.post(
        w + "operations/refund:o-9/outcome",
        {"lease_token": token, "outcome": "not_applied", "note": "lookup by key: none"},
        format="json",
    )
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "operation_in_flight" and 25 <= error["details"]["retry_after"] <= 30
    assert ToolOperation.objects.get(operation_id="refund:o-9").status == "started"
