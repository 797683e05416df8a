"""Procedural memory with a real worker: the support agent's refund turn is learned after it is
answered, a person confirms the procedure, and the next customer's run is offered it in its context
(its answer's event says which procedure, and the context's procedure part counts its tokens)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from core.roles import ENGINEER
from core.tenancy import tenant_scope
from memory.procedures.models import Procedure
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun, Approval
from tests.console.conftest import make_user
from tests.processes import wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _ask_and_approve(tenant, api: APIClient, subject: str, text: str) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="support_agent", input={}, actor="test", subject=subject).run
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).suspend_reason == "awaiting_input",
        timeout=90,
        message="the support agent to wait for its customer",
    )
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m-1",
        body={"content": text},
        actor=f"user:{subject}",
    )
    wait_until(
        lambda: Approval.objects.filter(run_id=run.run_id, status="pending").exists(),
        timeout=90,
        message="the refund to wait for a person",
    )
    approval = Approval.objects.get(run_id=run.run_id, status="pending")
    assert (
        api.post(
            f"/api/v1/approvals/{approval.approval_id}/approve", {"note": "ok"}, format="json"
        ).status_code
        == 200
    )
    wait_until(
        lambda: AgentEvent.objects.filter(run_id=run.run_id, event_type="assistant_message").exists(),
        timeout=90,
        message="the answer after the refund",
    )
    return AgentRun.objects.get(run_id=run.run_id)


def test_a_refund_turn_is_learned_on_the_worker_confirmed_and_offered_to_the_next_run(
    tenant, processes, live_server, settings
):
    sandbox = Sandbox(live_server.url + "/sandbox")
    settings.KEEPER_SANDBOX_URL = sandbox.url
    processes.worker(pool="solo", env={"KEEPER_SANDBOX_URL": sandbox.url, "KEEPER_RETRY_BACKOFF": "0"})
    api = APIClient()
    api.force_authenticate(
        get_user_model().objects.create_user("sam", password="pw-for-tests", is_staff=True, is_superuser=True)
    )
    sandbox.order("o-501")
    sandbox.order("o-502")
    first = _ask_and_approve(tenant, api, "cust-1", "Hi, o-501 arrived broken, refund please")

    def proposed() -> list[Procedure]:
        with tenant_scope(tenant.tenant_id):
            return list(Procedure.objects.filter(tenant=tenant))

    wait_until(lambda: len(proposed()) == 1, timeout=60, message="the worker to learn the turn's procedure")
    [procedure] = proposed()
    assert procedure.status == "proposed" and procedure.workflow_name == "support_agent"
    assert procedure.steps == [
        {"tool": "lookup_order", "arguments": {"order_id": "string"}},
        {"tool": "propose_refund", "arguments": {"order_id": "string", "reason": "string"}},
    ]
    assert procedure.trigger == ["arrived", "broken", "refund"]
    [answer] = AgentEvent.objects.filter(run_id=first.run_id, event_type="assistant_message")
    assert answer.payload["procedure"] is None  # nothing confirmed yet: nothing offered

    person = APIClient()
    engineer = make_user("eng-1", ENGINEER, tenants=(tenant,))
    engineer.is_staff = True  # the API takes a staff session (or a key)
    engineer.save()
    person.force_authenticate(engineer)
    confirmed = person.post(
        f"/api/v1/memory/procedures/{procedure.procedure_id}/confirm",
        {"tenant": "acme", "note": "this is how refunds are done"},
        format="json",
    )
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "confirmed"

    second = _ask_and_approve(tenant, api, "cust-2", "My o-502 came broken, I want a refund")
    [answer] = AgentEvent.objects.filter(run_id=second.run_id, event_type="assistant_message")
    offered = answer.payload["procedure"]
    assert offered["procedure_id"] == str(procedure.procedure_id) and offered["steps_offered"] == 2
    assert answer.payload["context_tokens"]["procedure"] == offered["tokens"] > 0
    assert answer.payload["tools"] == ["lookup_order", "propose_refund"]
    # The second run did it the same way: one more source for the same procedure, nothing new proposed.
    wait_until(
        lambda: procedure.sources.count() == 2, timeout=60, message="the second run to be a second source"
    )
    assert len(proposed()) == 1
